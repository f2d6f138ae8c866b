//! `drover job revert JOB VERSION` and `drover job eval JOB`, with Nomad's flags and messages;
//! both monitor the evaluation they create unless `-detach`.

use serde_json::{Value, json};

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID};
use super::{Exit, monitor, ui};

#[derive(Debug, clap::Args)]
pub struct RevertArgs {
    /// Return right after submitting instead of monitoring the evaluation
    #[arg(long)]
    pub detach: bool,
    /// Show full identifiers while monitoring
    #[arg(long)]
    pub verbose: bool,
    /// Job ID
    pub job: String,
    /// The version to revert to
    pub version: u64,
}

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// Reschedule failed allocations now, even past their reschedule policy
    #[arg(long = "force-reschedule")]
    pub force_reschedule: bool,
    /// Return right after submitting instead of monitoring the evaluation
    #[arg(long)]
    pub detach: bool,
    /// Show full identifiers while monitoring
    #[arg(long)]
    pub verbose: bool,
    /// Job ID
    pub job: String,
}

fn length(verbose: bool) -> usize {
    if verbose { FULL_ID } else { SHORT_ID }
}

/// Prints the evaluation a call created (`detached` says how, in the command's words), or
/// monitors it.
fn follow(
    client: &Client,
    reply: &Value,
    detach: bool,
    verbose: bool,
    detached: impl Fn(&str) -> String,
) -> Exit {
    let eval = reply["EvalID"].as_str().unwrap_or_default();
    if eval.is_empty() {
        return 0;
    }
    if detach {
        ui::out(&detached(eval));
        return 0;
    }
    monitor::monitor(client, eval, length(verbose))
}

pub fn revert(client: &Client, args: RevertArgs) -> anyhow::Result<Exit> {
    let path = format!("/v1/job/{}/revert", escape_segment(&args.job));
    let body = json!({"JobID": args.job, "JobVersion": args.version});
    let reply: Value = match client.put_json(&path, &[], &body) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error retrieving job versions: {e}"));
            return Ok(1);
        }
    };
    Ok(follow(client, &reply, args.detach, args.verbose, |e| {
        format!("Evaluation ID: {e}")
    }))
}

pub fn eval(client: &Client, args: EvalArgs) -> anyhow::Result<Exit> {
    let path = format!("/v1/job/{}/evaluate", escape_segment(&args.job));
    let body = json!({
        "JobID": args.job,
        "EvalOptions": {"ForceReschedule": args.force_reschedule},
    });
    let reply: Value = match client.put_json(&path, &[], &body) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error evaluating job: {e}"));
            return Ok(1);
        }
    };
    let length = length(args.verbose);
    Ok(follow(client, &reply, args.detach, args.verbose, |e| {
        format!("Created eval ID: {:?} ", super::format::limit(e, length))
    }))
}
