//! `drover job history JOB`: the job's versions, newest first, as Nomad's `job history`
//! prints them (`-version N` one of them, `-json` as JSON). Diffs between versions (`-p`) are
//! not computed yet and are refused.

use drover_structs::Job;
use serde_json::Value;

use super::api::{Client, escape_segment};
use super::format::format_kv;
use super::timefmt::format_time;
use super::{Exit, ui};

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// Show the differences between versions (not supported yet)
    #[arg(short = 'p')]
    pub diffs: bool,
    /// Print each version's full job as JSON
    #[arg(long)]
    pub full: bool,
    /// Only this version
    #[arg(long)]
    pub version: Option<u64>,
    /// Print the versions as JSON
    #[arg(long)]
    pub json: bool,
    /// Job ID
    pub job: String,
}

/// Nomad's `formatJobVersion` (without the diff).
fn format_version(job: &Job, full: bool) -> String {
    let mut rows = vec![
        format!("Version|{}", job.version),
        format!("Stable|{}", job.stable),
        format!("Submit Date|{}", format_time(job.submit_time)),
    ];
    if full {
        let json = serde_json::to_value(job).unwrap_or(Value::Null);
        rows.push(format!(
            "Full|JSON Job:\n{}",
            super::job::to_indented_json(&json)
        ));
    }
    format_kv(&rows)
}

pub fn run(client: &Client, args: HistoryArgs) -> anyhow::Result<Exit> {
    if args.diffs {
        ui::err("Error: job history -p (diffs between versions) is not supported yet");
        return Ok(1);
    }
    let path = format!("/v1/job/{}/versions", escape_segment(&args.job));
    let body: Value = match client.get_json(&path, &[]) {
        Ok((b, _)) => b,
        Err(e) => {
            ui::err(&format!("Error retrieving job versions: {e}"));
            return Ok(1);
        }
    };
    let mut versions: Vec<Job> =
        serde_json::from_value(body["Versions"].clone()).unwrap_or_default();
    versions.sort_by_key(|j| std::cmp::Reverse(j.version));
    if let Some(v) = args.version {
        versions.retain(|j| j.version == v);
        if versions.is_empty() {
            ui::err(&format!(
                "Could not find version {v:?} of job {:?}",
                args.job
            ));
            return Ok(1);
        }
    }
    if args.json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(
            &versions,
        )?));
        return Ok(0);
    }
    let blocks: Vec<String> = versions
        .iter()
        .map(|j| format_version(j, args.full))
        .collect();
    ui::out(&blocks.join("\n\n"));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_prints_as_nomads_history() {
        let job = Job {
            version: 2,
            stable: true,
            ..Default::default()
        };
        assert_eq!(
            format_version(&job, false),
            "Version     = 2\nStable      = true\nSubmit Date = <none>"
        );
    }
}
