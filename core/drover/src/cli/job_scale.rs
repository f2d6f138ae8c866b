//! `drover job scale JOB [GROUP] COUNT`: Nomad's scaling action from the CLI (within the
//! group's scaling policy), monitoring the evaluation unless `-detach`.

use serde_json::{Value, json};

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID};
use super::{Exit, monitor, ui};

#[derive(Debug, clap::Args)]
pub struct ScaleArgs {
    /// Return right after submitting instead of monitoring the evaluation
    #[arg(long)]
    pub detach: bool,
    /// Show full identifiers while monitoring
    #[arg(long)]
    pub verbose: bool,
    /// Job ID, [group name,] count; the group may be left out when the job has one
    #[arg(num_args = 2..=3, required = true)]
    pub args: Vec<String>,
}

pub fn run(client: &Client, args: ScaleArgs) -> anyhow::Result<Exit> {
    let (job_id, group, count) = match args.args.as_slice() {
        [job, count] => (job.clone(), None, count.clone()),
        [job, group, count] => (job.clone(), Some(group.clone()), count.clone()),
        _ => {
            ui::err("This command takes two or three arguments: <job> [<group>] <count>");
            return Ok(1);
        }
    };
    let Ok(count) = count.parse::<i64>() else {
        ui::err(&format!("Failed to convert count to integer: {count:?}"));
        return Ok(1);
    };
    let group = match group {
        Some(g) => g,
        None => {
            let path = format!("/v1/job/{}", escape_segment(&job_id));
            let job: Value = match client.get_json(&path, &[]) {
                Ok((j, _)) => j,
                Err(e) => {
                    ui::err(&format!("Error querying job: {e}"));
                    return Ok(1);
                }
            };
            let groups = job["TaskGroups"].as_array().cloned().unwrap_or_default();
            if groups.len() != 1 {
                ui::err("Group name required");
                return Ok(1);
            }
            groups[0]["Name"].as_str().unwrap_or_default().to_string()
        }
    };
    let path = format!("/v1/job/{}/scale", escape_segment(&job_id));
    let body = json!({
        "Count": count,
        "Target": {"Job": job_id, "Group": group},
        "Message": "submitted using the Nomad CLI",
    });
    let reply: Value = match client.put_json(&path, &[], &body) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error submitting scaling request: {e}"));
            return Ok(1);
        }
    };
    if let Some(w) = reply["Warnings"].as_str().filter(|w| !w.is_empty()) {
        ui::out(&format!("Job Warnings:\n{w}\n"));
    }
    let eval = reply["EvalID"].as_str().unwrap_or_default();
    if args.detach {
        ui::out(&format!("Evaluation ID: {eval}"));
        return Ok(0);
    }
    if eval.is_empty() {
        return Ok(0);
    }
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    Ok(monitor::monitor(client, eval, length))
}
