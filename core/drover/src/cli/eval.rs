//! `drover eval status ID`: one evaluation, and why it failed to place allocations.

use drover_structs::Evaluation;

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID, format_kv, format_list, limit, quote};
use super::lookup::{self, Match};
use super::metrics::{failed_group_header, format_alloc_metrics};
use super::timefmt::{ago, format_time};
use super::{ConnArgs, Exit, monitor, ui};

#[derive(Debug, clap::Args)]
pub struct EvalCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum EvalCommand {
    /// Display an evaluation's status and placement failures
    Status(EvalStatusArgs),
}

#[derive(Debug, clap::Args)]
pub struct EvalStatusArgs {
    /// Monitor the evaluation until it finishes
    #[arg(long)]
    pub monitor: bool,
    /// Show full identifiers and times
    #[arg(long)]
    pub verbose: bool,
    /// Print the evaluation as JSON
    #[arg(long)]
    pub json: bool,
    /// Evaluation ID (or unique prefix)
    pub eval: String,
}

pub fn run(cli: EvalCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        EvalCommand::Status(args) => eval_status(&client, args),
    }
}

/// Nomad's `formatEvalList`, shown when a prefix is ambiguous.
fn eval_list_table(evals: &[Evaluation], verbose: bool) -> String {
    let length = if verbose { FULL_ID } else { SHORT_ID };
    let mut rows = vec!["ID|Priority|Triggered By|Job ID|Status|Placement Failures".to_string()];
    for e in evals {
        rows.push(format!(
            "{}|{}|{}|{}|{}|{}",
            limit(&e.id, length),
            e.priority,
            e.triggered_by,
            e.job_id,
            e.status,
            failure_status(e).0
        ));
    }
    format_list(&rows)
}

/// Nomad's `evalFailureStatus`: the "Placement Failures" text and whether there are any.
fn failure_status(e: &Evaluation) -> (String, bool) {
    let failed = e.failed_tg_allocs.as_ref().is_some_and(|f| !f.is_empty());
    let text = if e.status == "blocked" {
        "N/A - In Progress".to_string()
    } else {
        failed.to_string()
    };
    (text, failed)
}

fn eval_status(client: &Client, args: EvalStatusArgs) -> anyhow::Result<Exit> {
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    let prefix = match lookup::check_uuid_prefix(args.eval.trim()) {
        Ok(p) => p,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let evals: Vec<Evaluation> = match client.get_json("/v1/evaluations", &[("prefix", prefix)]) {
        Ok((e, _)) => e,
        Err(e) => {
            ui::err(&format!("Error querying evaluation: {e}"));
            return Ok(1);
        }
    };
    let stub = match lookup::resolve(evals, prefix, |e| e.id.as_str()) {
        Match::One(e) => e,
        Match::None => {
            ui::err(&format!(
                "No evaluation(s) with prefix or id {prefix:?} found"
            ));
            return Ok(1);
        }
        Match::Many(evals) => {
            ui::err(&format!(
                "Prefix matched multiple evaluations\n\n{}",
                eval_list_table(&evals, args.verbose)
            ));
            return Ok(1);
        }
    };
    let client = client.in_namespace(&stub.namespace);
    if args.monitor {
        return Ok(monitor::monitor(&client, &stub.id, length));
    }
    let eval: Evaluation =
        match client.get_json(&format!("/v1/evaluation/{}", escape_segment(&stub.id)), &[]) {
            Ok((e, _)) => e,
            Err(e) => {
                ui::err(&format!("Error querying evaluation: {e}"));
                return Ok(1);
            }
        };
    if args.json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(&eval)?));
        return Ok(0);
    }
    ui::out(&format_eval(&eval, args.verbose));
    Ok(0)
}

/// The whole `eval status ID` text.
fn format_eval(eval: &Evaluation, verbose: bool) -> String {
    let length = if verbose { FULL_ID } else { SHORT_ID };
    let (failure_text, failures) = failure_status(eval);
    let status_desc = if eval.status_description.is_empty() {
        eval.status.clone()
    } else {
        eval.status_description.clone()
    };
    let (created, modified) = if verbose {
        (format_time(eval.create_time), format_time(eval.modify_time))
    } else {
        (ago(eval.create_time), ago(eval.modify_time))
    };
    let mut rows = vec![
        format!("ID|{}", limit(&eval.id, length)),
        format!("Create Time|{created}"),
        format!("Modify Time|{modified}"),
        format!("Status|{}", eval.status),
        format!("Status Description|{status_desc}"),
        format!("Type|{}", eval.eval_type),
        format!("TriggeredBy|{}", eval.triggered_by),
        format!("Job ID|{}", eval.job_id),
        format!("Namespace|{}", eval.namespace),
    ];
    match eval.triggered_by.as_str() {
        "node-update" if !eval.node_id.is_empty() => rows.push(format!("Node ID|{}", eval.node_id)),
        "max-plan-attempts" if !eval.previous_eval.is_empty() => {
            rows.push(format!("Previous Eval|{}", eval.previous_eval))
        }
        _ => {}
    }
    rows.push(format!("Priority|{}", eval.priority));
    rows.push(format!("Placement Failures|{failure_text}"));
    if eval.wait_until > 0 {
        rows.push(format!("Wait Until|{}", format_time(eval.wait_until)));
    }
    if verbose {
        rows.push(format!("Previous Eval|{}", eval.previous_eval));
        rows.push(format!("Next Eval|{}", eval.next_eval));
        rows.push(format!("Blocked Eval|{}", eval.blocked_eval));
    }
    let mut out = format_kv(&rows);
    if failures {
        out.push_str("\n\nFailed Placements");
        for (group, metric) in eval.failed_tg_allocs.iter().flatten() {
            out.push('\n');
            out.push_str(&failed_group_header(group, metric));
            out.push('\n');
            out.push_str(&format_alloc_metrics(metric, false, "  "));
            out.push('\n');
        }
        if !eval.blocked_eval.is_empty() {
            out.push_str(&format!(
                "\nEvaluation {} waiting for additional capacity to place remainder",
                quote(limit(&eval.blocked_eval, length))
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::AllocMetric;
    use std::collections::BTreeMap;

    #[test]
    fn failed_eval_lists_groups_reasons_and_blocked_eval() {
        let mut m = AllocMetric {
            nodes_evaluated: 1,
            ..Default::default()
        };
        m.filter_node("", Some("missing drivers"));
        let eval = Evaluation {
            id: "119906ce-0cf3-3fe4-f750-20a7d024e738".into(),
            status: "complete".into(),
            triggered_by: "job-register".into(),
            blocked_eval: "5e6f7a8b-0000-0000-0000-000000000000".into(),
            failed_tg_allocs: Some(BTreeMap::from([("cache".to_string(), m)])),
            ..Default::default()
        };
        let text = format_eval(&eval, false);
        assert!(
            text.starts_with("ID                 = 119906ce\n"),
            "{text}"
        );
        assert!(text.contains("Status Description = complete\n"), "{text}");
        assert!(text.contains("Placement Failures = true"), "{text}");
        assert!(
            text.ends_with(
                "\n\nFailed Placements\nTask Group \"cache\" (failed to place 1 allocation):\n  \
                 * Constraint \"missing drivers\": 1 nodes excluded by filter\n\n\
                 Evaluation \"5e6f7a8b\" waiting for additional capacity to place remainder"
            ),
            "{text}"
        );
    }

    #[test]
    fn blocked_eval_failures_read_in_progress() {
        let e = Evaluation {
            status: "blocked".into(),
            ..Default::default()
        };
        assert_eq!(failure_status(&e), ("N/A - In Progress".to_string(), false));
    }
}
