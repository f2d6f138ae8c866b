//! `drover status [ID]`: without an ID the job list (as `nomad status`); with one, the status
//! of whatever job, allocation, node or evaluation the ID (or prefix) names.

use super::api::Client;
use super::job_status::{self, JobStatusArgs};
use super::{ConnArgs, Exit, alloc, eval, node, ui};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Show full identifiers and times
    #[arg(long)]
    pub verbose: bool,
    /// A job, allocation, node or evaluation ID (or prefix)
    pub id: Option<String>,
}

/// Which kind of object an identifier names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Context {
    Job,
    Alloc,
    Node,
    Eval,
}

/// What a prefix resolves to: one object, none, or several (Nomad asks for a longer prefix).
#[derive(Debug, PartialEq)]
pub(super) enum Resolved {
    One(Context, String),
    None,
    Several(Vec<(String, Vec<String>)>),
}

/// Nomad's `status` over `/v1/search` (context `all`): an exact id wins, otherwise exactly
/// one match across the contexts the command can show.
pub(super) fn resolve(client: &Client, prefix: &str) -> anyhow::Result<Resolved> {
    let body = serde_json::json!({"Prefix": prefix, "Context": "all"});
    let reply: serde_json::Value = client.put_json("/v1/search", &[], &body)?;
    Ok(resolve_matches(&reply["Matches"], prefix))
}

fn resolve_matches(matches: &serde_json::Value, prefix: &str) -> Resolved {
    const SHOWN: [(&str, Context); 4] = [
        ("jobs", Context::Job),
        ("evals", Context::Eval),
        ("allocs", Context::Alloc),
        ("nodes", Context::Node),
    ];
    let mut found: Vec<(&str, Context, Vec<String>)> = Vec::new();
    for (name, ctx) in SHOWN {
        let ids: Vec<String> = matches[name]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(exact) = ids.iter().find(|id| *id == prefix) {
            return Resolved::One(ctx, exact.clone());
        }
        if !ids.is_empty() {
            found.push((name, ctx, ids));
        }
    }
    match found.as_slice() {
        [] => Resolved::None,
        [(_, ctx, ids)] if ids.len() == 1 => Resolved::One(*ctx, ids[0].clone()),
        _ => Resolved::Several(
            found
                .into_iter()
                .map(|(name, _, ids)| (name.to_string(), ids))
                .collect(),
        ),
    }
}

pub fn run(args: StatusArgs) -> anyhow::Result<Exit> {
    let client = args.conn.client()?;
    let Some(id) = args.id.clone().filter(|s| !s.trim().is_empty()) else {
        return job_status::list_jobs(&client);
    };
    let id = id.trim().to_string();
    let (context, id) = match resolve(&client, &id) {
        Ok(Resolved::One(context, full_id)) => (context, full_id),
        Ok(Resolved::None) => {
            ui::err(&format!("No matches returned for query {id:?}"));
            return Ok(1);
        }
        Ok(Resolved::Several(found)) => {
            ui::err(&format!("Multiple matches found for id {id:?}"));
            for (context, ids) in found {
                let mut title = context.clone();
                if let Some(first) = title.get_mut(..1) {
                    first.make_ascii_uppercase();
                }
                ui::err(&format!("\n{title}:\n{}", ids.join(", ")));
            }
            return Ok(1);
        }
        Err(e) => {
            ui::err(&format!("Error querying search with id: {e:#}"));
            return Ok(1);
        }
    };
    match context {
        Context::Job => job_status::run(
            &client,
            JobStatusArgs {
                verbose: args.verbose,
                job: Some(id),
                ..Default::default()
            },
        ),
        Context::Alloc => alloc::run(alloc::AllocCli {
            conn: args.conn.clone(),
            command: alloc::AllocCommand::Status(alloc::AllocStatusArgs {
                verbose: args.verbose,
                json: false,
                stats: false,
                alloc: id,
            }),
        }),
        Context::Node => node::run(node::NodeCli {
            conn: args.conn.clone(),
            command: node::NodeCommand::Status(node::NodeStatusArgs {
                verbose: args.verbose,
                local: false,
                short: false,
                json: false,
                node: Some(id),
            }),
        }),
        Context::Eval => eval::run(eval::EvalCli {
            conn: args.conn.clone(),
            command: eval::EvalCommand::Status(eval::EvalStatusArgs {
                monitor: false,
                verbose: args.verbose,
                json: false,
                eval: id,
            }),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_exact_id_wins_and_a_single_match_resolves_to_its_full_id() {
        let m = json!({"jobs": ["web", "web-2"], "evals": null});
        assert_eq!(
            resolve_matches(&m, "web"),
            Resolved::One(Context::Job, "web".into())
        );
        let m = json!({"jobs": null, "allocs": ["0fb703d1-ba4d"]});
        assert_eq!(
            resolve_matches(&m, "0f"),
            Resolved::One(Context::Alloc, "0fb703d1-ba4d".into())
        );
    }

    #[test]
    fn several_matches_or_none_are_reported_as_such() {
        let m = json!({"jobs": ["ab1"], "nodes": ["ab22"]});
        assert!(matches!(resolve_matches(&m, "ab"), Resolved::Several(v) if v.len() == 2));
        assert_eq!(resolve_matches(&json!({}), "zz"), Resolved::None);
    }
}
