//! `drover deployment list|status|fail|pause|resume|promote|unblock`, with Nomad's flags,
//! tables and messages, and the deployment monitor `job run` ends with.

use std::time::Duration;

use drover_structs::Deployment;
use drover_structs::time::parse_rfc3339_nanos;
use serde_json::{Value, json};

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID, format_kv, format_list, limit, quote};
use super::lookup::{self, Match};
use super::timefmt::{format_time, now_formatted};
use super::{ConnArgs, Exit, monitor, ui};

#[derive(Debug, clap::Args)]
pub struct DeploymentCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: DeploymentCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum DeploymentCommand {
    /// List deployments
    List(ListArgs),
    /// Display the status of a deployment
    Status(StatusArgs),
    /// Manually fail a deployment
    Fail(OpArgs),
    /// Pause a deployment
    Pause(OpArgs),
    /// Resume a paused deployment
    Resume(OpArgs),
    /// Promote a deployment's canaries
    Promote(OpArgs),
    /// Unblock a multiregion deployment
    Unblock(OpArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Show full identifiers
    #[arg(long)]
    pub verbose: bool,
    /// Print the deployments as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Show full identifiers
    #[arg(long)]
    pub verbose: bool,
    /// Print the deployment as JSON
    #[arg(long)]
    pub json: bool,
    /// Follow the deployment until it ends
    #[arg(long)]
    pub monitor: bool,
    /// Deployment ID (or prefix); omit to list deployments
    pub deployment: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct OpArgs {
    /// Return without monitoring the evaluation the operation creates
    #[arg(long)]
    pub detach: bool,
    /// Show full identifiers
    #[arg(long)]
    pub verbose: bool,
    /// Deployment ID (or prefix)
    pub deployment: String,
}

pub fn run(cli: DeploymentCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        DeploymentCommand::List(args) => list(&client, args),
        DeploymentCommand::Status(args) => status(&client, args),
        DeploymentCommand::Fail(args) => operate(&client, Op::Fail, args),
        DeploymentCommand::Pause(args) => operate(&client, Op::Pause, args),
        DeploymentCommand::Resume(args) => operate(&client, Op::Resume, args),
        DeploymentCommand::Promote(args) => operate(&client, Op::Promote, args),
        DeploymentCommand::Unblock(args) => operate(&client, Op::Unblock, args),
    }
}

/// Nomad's `formatDeployments`, newest first.
fn format_deployments(list: &[Deployment], length: usize) -> String {
    if list.is_empty() {
        return "No deployments found".into();
    }
    let mut sorted: Vec<&Deployment> = list.iter().collect();
    sorted.sort_by_key(|d| std::cmp::Reverse(d.create_index));
    let mut rows = vec!["ID|Job ID|Job Version|Status|Description".to_string()];
    for d in sorted {
        rows.push(format!(
            "{}|{}|{}|{}|{}",
            limit(&d.id, length),
            d.job_id,
            d.job_version,
            d.status,
            d.status_description
        ));
    }
    format_list(&rows)
}

/// Nomad's `formatDeploymentGroups`.
fn format_groups(d: &Deployment) -> String {
    let groups = d.task_groups.values();
    let autorevert = groups.clone().any(|g| g.auto_revert);
    let canaries = groups.clone().any(|g| g.desired_canaries > 0);
    let deadline = groups.clone().any(|g| g.progress_deadline != 0);
    let mut header = "Task Group|".to_string();
    if autorevert {
        header += "Auto Revert|";
    }
    if canaries {
        header += "Promoted|";
    }
    header += "Desired|";
    if canaries {
        header += "Canaries|";
    }
    header += "Placed|Healthy|Unhealthy";
    if deadline {
        header += "|Progress Deadline";
    }
    let mut rows = vec![header];
    for (name, g) in &d.task_groups {
        let mut row = format!("{name}|");
        if autorevert {
            row += &format!("{}|", g.auto_revert);
        }
        if canaries {
            if g.desired_canaries > 0 {
                row += &format!("{}|", g.promoted);
            } else {
                row += "N/A|";
            }
        }
        row += &format!("{}|", g.desired_total);
        if canaries {
            row += &format!("{}|", g.desired_canaries);
        }
        row += &format!(
            "{}|{}|{}",
            g.placed_allocs, g.healthy_allocs, g.unhealthy_allocs
        );
        if deadline {
            match parse_rfc3339_nanos(&g.require_progress_by).filter(|t| *t > 0) {
                Some(t) if g.require_progress_by != drover_structs::ZERO_TIME => {
                    row += &format!("|{}", format_time(t));
                }
                _ => row += "|N/A",
            }
        }
        rows.push(row);
    }
    format_list(&rows)
}

/// Nomad's `formatDeployment`.
pub fn format_deployment(d: &Deployment, length: usize) -> String {
    let high = [
        format!("ID|{}", limit(&d.id, length)),
        format!("Job ID|{}", d.job_id),
        format!("Job Version|{}", d.job_version),
        format!("Status|{}", d.status),
        format!("Description|{}", d.status_description),
    ];
    let mut out = format_kv(&high);
    if d.task_groups.is_empty() {
        return out;
    }
    out += "\n\nDeployed\n";
    out += &format_groups(d);
    out
}

fn list(client: &Client, args: ListArgs) -> anyhow::Result<Exit> {
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    let list: Vec<Deployment> = match client.get_json("/v1/deployments", &[]) {
        Ok((l, _)) => l,
        Err(e) => {
            ui::err(&format!("Error retrieving deployments: {e}"));
            return Ok(1);
        }
    };
    if args.json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(&list)?));
        return Ok(0);
    }
    ui::out(&format_deployments(&list, length));
    Ok(0)
}

/// Nomad's `getDeployment`: a full id is read directly, a prefix listed.
fn find(client: &Client, given: &str, length: usize) -> Result<Deployment, String> {
    let given = given.trim();
    if given.len() != 36 {
        let prefix = lookup::check_uuid_prefix(given)?;
        let list: Vec<Deployment> = client
            .get_json("/v1/deployments", &[("prefix", prefix)])
            .map(|(l, _)| l)
            .map_err(|e| format!("Error retrieving deployment: {e}"))?;
        return match lookup::resolve(list, prefix, |d| d.id.as_str()) {
            Match::One(d) => Ok(d),
            Match::None => Err(format!(
                "Error retrieving deployment: Deployment ID {prefix:?} matched no deployments"
            )),
            Match::Many(list) => Err(format!(
                "Prefix matched multiple deployments\n\n{}",
                format_deployments(&list, length)
            )),
        };
    }
    client
        .get_json(&format!("/v1/deployment/{}", escape_segment(given)), &[])
        .map(|(d, _)| d)
        .map_err(|e| format!("Error retrieving deployment: {e}"))
}

fn status(client: &Client, args: StatusArgs) -> anyhow::Result<Exit> {
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    if args.monitor && args.json {
        ui::err("The monitor flag cannot be used with the '-json' or '-t' flags");
        return Ok(1);
    }
    let Some(given) = args.deployment.as_deref() else {
        return list(
            client,
            ListArgs {
                verbose: args.verbose,
                json: args.json,
            },
        );
    };
    let d = match find(client, given, length) {
        Ok(d) => d,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    if args.json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(&d)?));
        return Ok(0);
    }
    if args.monitor {
        ui::out(&format!(
            "{}: Monitoring deployment {}",
            now_formatted(),
            quote(limit(&d.id, length))
        ));
        let status = monitor_deployment(client, &d.id, length);
        return Ok(if status.as_deref() == Some("successful") {
            0
        } else {
            1
        });
    }
    ui::out(&format_deployment(&d, length));
    Ok(0)
}

/// How long a deployment read waits for a change (Nomad's `-wait` default).
const MONITOR_WAIT: Duration = Duration::from_secs(2);

/// Nomad's non-terminal deployment monitor: the deployment printed as it changes (and at
/// least every two seconds) until it ends; after a failure with auto-revert, the rollback's
/// deployment is followed too. Returns the last status (`None` when reading failed).
pub fn monitor_deployment(client: &Client, id: &str, length: usize) -> Option<String> {
    let mut id = id.to_string();
    let mut index = 0u64;
    loop {
        let path = format!("/v1/deployment/{}", escape_segment(&id));
        let wait = format!("{}ms", MONITOR_WAIT.as_millis());
        let index_text = index.to_string();
        let (d, meta): (Deployment, _) =
            match client.get_json(&path, &[("index", &index_text), ("wait", &wait)]) {
                Ok(r) => r,
                Err(e) => {
                    ui::err(&format!(
                        "{}: Error fetching deployment: {e}",
                        now_formatted()
                    ));
                    return None;
                }
            };
        index = meta.index;
        ui::out(&format!(
            "\n{}\n{}",
            now_formatted(),
            format_deployment(&d, length)
        ));
        match d.status.as_str() {
            "failed" if d.task_groups.values().any(|g| g.auto_revert) => {
                // Wait for the rollback's deployment to appear.
                std::thread::sleep(Duration::from_secs(1));
                let job = escape_segment(&d.job_id);
                let latest: Option<Deployment> = client
                    .get_json(&format!("/v1/job/{job}/deployment"), &[])
                    .ok()
                    .map(|(l, _)| l);
                ui::out("");
                match latest {
                    Some(next) if next.id != d.id => {
                        id = next.id;
                        index = 0;
                    }
                    _ => return Some(d.status),
                }
            }
            "failed" | "successful" | "cancelled" | "blocked" => return Some(d.status),
            _ => {}
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Fail,
    Pause,
    Resume,
    Promote,
    Unblock,
}

fn operate(client: &Client, op: Op, args: OpArgs) -> anyhow::Result<Exit> {
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    let d = match find(client, &args.deployment, length) {
        Ok(d) => d,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    let id = escape_segment(&d.id);
    let (path, body, failing) = match op {
        Op::Fail => (
            format!("/v1/deployment/fail/{id}"),
            json!({"DeploymentID": d.id}),
            "failing",
        ),
        Op::Pause => (
            format!("/v1/deployment/pause/{id}"),
            json!({"DeploymentID": d.id, "Pause": true}),
            "pausing",
        ),
        Op::Resume => (
            format!("/v1/deployment/pause/{id}"),
            json!({"DeploymentID": d.id, "Pause": false}),
            "resuming",
        ),
        Op::Promote => (
            format!("/v1/deployment/promote/{id}"),
            json!({"DeploymentID": d.id, "All": true}),
            "promoting",
        ),
        Op::Unblock => (
            format!("/v1/deployment/unblock/{id}"),
            json!({"DeploymentID": d.id}),
            "unblocking",
        ),
    };
    let reply: Value = match client.put_json(&path, &[], &body) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error {failing} deployment: {e}"));
            return Ok(1);
        }
    };
    match op {
        Op::Fail => match reply["RevertedJobVersion"].as_u64() {
            Some(v) => ui::out(&format!(
                "Deployment {:?} failed. Auto-reverted to job version {v}.\n",
                d.id
            )),
            None => ui::out(&format!("Deployment {:?} failed", d.id)),
        },
        Op::Pause => {
            ui::out(&format!("Deployment {:?} paused", d.id));
            return Ok(0);
        }
        Op::Resume => ui::out(&format!("Deployment {:?} resumed", d.id)),
        Op::Unblock => ui::out(&format!("Deployment {:?} unblocked", d.id)),
        Op::Promote => {}
    }
    let eval = reply["EvalID"].as_str().unwrap_or_default();
    if args.detach || eval.is_empty() {
        return Ok(0);
    }
    ui::out("");
    Ok(monitor::monitor(client, eval, length))
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{DeploymentState, Job};

    #[test]
    fn a_deployment_prints_as_nomads_status() {
        let job = Job {
            id: "web".into(),
            version: 2,
            ..Default::default()
        };
        let mut d = Deployment::for_job(&job, 50, 0);
        d.id = "06ca68a2-1111-2222-3333-444444444444".into();
        d.task_groups.insert(
            "cache".into(),
            DeploymentState {
                desired_total: 2,
                placed_allocs: 2,
                healthy_allocs: 1,
                auto_revert: true,
                ..Default::default()
            },
        );
        let text = format_deployment(&d, SHORT_ID);
        assert_eq!(
            text,
            "ID          = 06ca68a2\nJob ID      = web\nJob Version = 2\nStatus      = running\n\
             Description = Deployment is running\n\nDeployed\n\
             Task Group  Auto Revert  Desired  Placed  Healthy  Unhealthy\n\
             cache       true         2        2       1        0"
        );
    }
}
