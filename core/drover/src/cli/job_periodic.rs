//! `drover job periodic force`: launches a periodic job now, over
//! `PUT /v1/job/:id/periodic/force`, with Nomad's texts.

use serde::Deserialize;
use serde_json::json;

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID};
use super::lookup::{self, Match};
use super::{Exit, job_status, monitor, ui};

#[derive(Debug, clap::Subcommand)]
pub enum PeriodicCommand {
    /// Launch a periodic job now, whatever its schedule
    Force(ForceArgs),
}

#[derive(Debug, clap::Args)]
pub struct ForceArgs {
    /// Return right after launching instead of monitoring the evaluation
    #[arg(long)]
    pub detach: bool,
    /// Show full identifiers
    #[arg(long)]
    pub verbose: bool,
    /// Periodic job ID (or unique prefix)
    pub job: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ForceResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
}

pub fn run(client: &Client, command: PeriodicCommand) -> anyhow::Result<Exit> {
    match command {
        PeriodicCommand::Force(args) => force(client, &args),
    }
}

/// The periodic job a prefix names (Nomad's `JobIDByPrefix` with a periodic filter).
fn find_periodic_job(client: &Client, prefix: &str) -> Result<drover_structs::JobListStub, String> {
    let jobs: Vec<drover_structs::JobListStub> =
        match client.get_json("/v1/jobs", &[("prefix", prefix)]) {
            Ok((jobs, _)) => jobs,
            Err(e) => return Err(format!("Error querying job prefix {prefix:?}: {e}")),
        };
    let periodic: Vec<_> = jobs.into_iter().filter(|j| j.periodic).collect();
    match lookup::resolve(periodic, prefix, |j| j.id.as_str()) {
        Match::One(job) => Ok(job),
        Match::None => Err(format!(
            "No periodic job(s) with prefix or ID {prefix:?} found"
        )),
        Match::Many(jobs) => Err(format!(
            "Prefix matched multiple jobs\n\n{}",
            job_status::job_list_table(&jobs, false)
        )),
    }
}

fn force(client: &Client, args: &ForceArgs) -> anyhow::Result<Exit> {
    let job = match find_periodic_job(client, args.job.trim()) {
        Ok(job) => job,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let client = client.in_namespace(&job.namespace);
    let path = format!("/v1/job/{}/periodic/force", escape_segment(&job.id));
    let resp: ForceResponse = match client.put_json(&path, &[], &json!({})) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error forcing periodic job {:?}: {e}", job.id));
            return Ok(1);
        }
    };
    if args.detach {
        ui::out("Force periodic successful");
        ui::out(&format!("Evaluation ID: {}", resp.eval_id));
        return Ok(0);
    }
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    Ok(monitor::monitor(&client, &resp.eval_id, length))
}
