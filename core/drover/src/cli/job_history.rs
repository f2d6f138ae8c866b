//! `drover job history JOB`: the job's versions, newest first, as Nomad's `job history`
//! prints them (`-version N` one of them, `-json` as JSON, `-p` with each version's diff to
//! the one before it).

use drover_structs::Job;
use drover_structs::diff::JobDiff;
use serde_json::Value;

use super::api::{Client, escape_segment};
use super::format::format_kv;
use super::timefmt::format_time;
use super::{Exit, ui};

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// Show the differences between each version and the one before it
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

/// Nomad's `formatJobVersion`.
fn format_version(job: &Job, diff: Option<&JobDiff>, full: bool) -> String {
    let mut rows = vec![
        format!("Version|{}", job.version),
        format!("Stable|{}", job.stable),
        format!("Submit Date|{}", format_time(job.submit_time)),
    ];
    // Nomad's columnize keeps the cell untrimmed: the diff starts on the line after
    // "Diff        = ". Ours trims cells, so the diff goes in after the table is made.
    const DIFF_SLOT: &str = "\u{0}";
    if diff.is_some() {
        rows.push(format!("Diff|{DIFF_SLOT}"));
    }
    if full {
        let json = serde_json::to_value(job).unwrap_or(Value::Null);
        rows.push(format!(
            "Full|JSON Job:\n{}",
            super::job::to_indented_json(&json)
        ));
    }
    let table = format_kv(&rows);
    match diff {
        Some(diff) => table.replacen(
            DIFF_SLOT,
            &format!("\n{}", super::job_diff::format_job_diff(diff, false).trim()),
            1,
        ),
        None => table,
    }
}

pub fn run(client: &Client, args: HistoryArgs) -> anyhow::Result<Exit> {
    let path = format!("/v1/job/{}/versions", escape_segment(&args.job));
    let query: &[(&str, &str)] = if args.diffs {
        &[("diffs", "true")]
    } else {
        &[]
    };
    let body: Value = match client.get_json(&path, query) {
        Ok((b, _)) => b,
        Err(e) => {
            ui::err(&format!("Error retrieving job versions: {e}"));
            return Ok(1);
        }
    };
    let versions: Vec<Job> = serde_json::from_value(body["Versions"].clone()).unwrap_or_default();
    let diffs: Vec<JobDiff> = serde_json::from_value(body["Diffs"].clone()).unwrap_or_default();
    // Both come newest first; the diff at i is version i against version i+1.
    let mut versions: Vec<(Job, Option<JobDiff>)> = versions
        .into_iter()
        .enumerate()
        .map(|(i, j)| (j, diffs.get(i).cloned()))
        .collect();
    versions.sort_by_key(|(j, _)| std::cmp::Reverse(j.version));
    if let Some(v) = args.version {
        versions.retain(|(j, _)| j.version == v);
        if versions.is_empty() {
            ui::err(&format!(
                "Could not find version {v:?} of job {:?}",
                args.job
            ));
            return Ok(1);
        }
    }
    if args.json {
        let jobs: Vec<&Job> = versions.iter().map(|(j, _)| j).collect();
        ui::out(&super::job::to_indented_json(&serde_json::to_value(&jobs)?));
        return Ok(0);
    }
    let blocks: Vec<String> = versions
        .iter()
        .map(|(j, d)| format_version(j, d.as_ref(), args.full))
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
            format_version(&job, None, false),
            "Version     = 2\nStable      = true\nSubmit Date = <none>"
        );
    }
}
