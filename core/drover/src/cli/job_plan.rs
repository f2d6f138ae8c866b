//! `drover job plan FILE`: the scheduler's dry run of a job file (`/v1/job/:id/plan`), printed
//! as Nomad prints it: the annotated diff against the registered job, what the scheduler
//! would place or fail to place, and the `Job Modify Index` for `job run -check-index`.
//! Exit codes as Nomad's: 0 nothing would be created or destroyed, 1 something would, 255 an
//! error.

use std::collections::BTreeMap;

use drover_structs::diff::{DiffType, JobDiff};
use drover_structs::{AllocMetric, Evaluation, PlanAnnotations};
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::{Client, escape_segment};
use super::jobfile::{self, JobFileArgs};
use super::{Exit, job_diff, metrics, timefmt, ui};

/// Nomad's exit code for a plan that could not be made.
const PLAN_ERROR: Exit = 255;

const JOB_MODIFY_INDEX_HELP: &str =
    "When running the job with the check-index flag, the job will only be run if the
job modify index given matches the server-side version. If the index has
changed, another user has modified the job and the plan's results are
potentially invalid.";

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Show the diff between the registered job and the planned one
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", require_equals = true)]
    pub diff: bool,
    /// Accepted for Nomad compatibility (Sentinel policies do not exist in Drover)
    #[arg(long = "policy-override")]
    pub policy_override: bool,
    /// Expand added and removed groups and tasks in the diff
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub file_args: JobFileArgs,
    /// Job file (HCL or JSON); "-" reads stdin
    #[arg(value_name = "FILE")]
    pub file: String,
}

/// Nomad's `JobPlanResponse`, as the CLI reads it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PlanResponse {
    #[serde(rename = "Annotations")]
    annotations: Option<PlanAnnotations>,
    #[serde(rename = "FailedTGAllocs")]
    failed_tg_allocs: Option<BTreeMap<String, AllocMetric>>,
    #[serde(rename = "JobModifyIndex")]
    job_modify_index: u64,
    #[serde(rename = "CreatedEvals")]
    created_evals: Option<Vec<Evaluation>>,
    #[serde(rename = "Diff")]
    diff: Option<JobDiff>,
    #[serde(rename = "NextPeriodicLaunch")]
    next_periodic_launch: Option<String>,
    #[serde(rename = "Warnings")]
    warnings: String,
}

pub fn run(client: &Client, args: PlanArgs) -> anyhow::Result<Exit> {
    let job = match jobfile::load(&args.file, &args.file_args) {
        Ok(job) => job,
        Err(message) => {
            ui::err(&message);
            return Ok(PLAN_ERROR);
        }
    };
    let Some(id) = job.get("ID").and_then(Value::as_str).map(str::to_string) else {
        ui::err("Error during plan: job has no ID");
        return Ok(PLAN_ERROR);
    };
    // As Nomad: the job's own namespace and region win over the flags.
    let mut client = client.in_namespace(client.namespace().unwrap_or("default"));
    if let Some(ns) = job
        .get("Namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        client = client.in_namespace(ns);
    }
    if let Some(region) = job
        .get("Region")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        client = client.in_region(region);
    }
    let request = json!({ "Job": job, "Diff": true, "PolicyOverride": args.policy_override });
    let path = format!("/v1/job/{}/plan", escape_segment(&id));
    let regions: Vec<String> = job
        .get("Multiregion")
        .and_then(|m| m.get("Regions"))
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|r| r.get("Name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if !regions.is_empty() {
        // Nomad's multiregion plan: every region plans its own copy; all are asked before
        // anything is printed, and no job modify index is given.
        let mut plans = Vec::new();
        for region in &regions {
            match client
                .in_region(region)
                .put_json::<PlanResponse>(&path, &[], &request)
            {
                Ok(r) => plans.push((region, r)),
                Err(e) => {
                    ui::err(&format!("Error during plan for region {region:?}: {e}"));
                    return Ok(PLAN_ERROR);
                }
            }
        }
        let mut exit = 0;
        for (region, resp) in plans {
            ui::out(&format!("Region: {region:?}"));
            exit = exit.max(output_planned_job(&job, &resp, &args));
        }
        return Ok(exit);
    }
    let resp: PlanResponse = match client.put_json(&path, &[], &request) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error during plan: {e}"));
            return Ok(PLAN_ERROR);
        }
    };
    let exit = output_planned_job(&job, &resp, &args);
    let mut run_args = String::new();
    for v in &args.file_args.vars {
        run_args.push_str(&format!("-var={v:?} "));
    }
    for f in &args.file_args.var_files {
        run_args.push_str(&format!("-var-file={:?} ", f.display().to_string()));
    }
    ui::out(&format!(
        "Job Modify Index: {index}\nTo submit the job with version verification run:\n\n\
         drover job run -check-index {index} {run_args}{file}\n\n{JOB_MODIFY_INDEX_HELP}",
        index = resp.job_modify_index,
        file = args.file,
    ));
    Ok(exit)
}

/// Nomad's `outputPlannedJob`: the diff, the dry run and the warnings; the exit code.
fn output_planned_job(job: &Value, resp: &PlanResponse, args: &PlanArgs) -> Exit {
    let job_type = job.get("Type").and_then(Value::as_str).unwrap_or("service");
    let parameterized = job.get("ParameterizedJob").is_some_and(|v| !v.is_null());
    if args.diff
        && let Some(diff) = &resp.diff
    {
        ui::out(&format!(
            "{}\n",
            job_diff::format_job_diff(diff, args.verbose).trim()
        ));
    }
    ui::out("Scheduler dry-run:");
    ui::out(&format_dry_run(resp, job_type, parameterized));
    ui::out("");
    if !resp.warnings.is_empty() {
        ui::out(&format!("Job Warnings:\n{}\n", resp.warnings));
    }
    exit_code(resp)
}

/// Nomad's `getExitCode`: 1 when the plan would create, stop, migrate or replace something.
fn exit_code(resp: &PlanResponse) -> Exit {
    if resp
        .diff
        .as_ref()
        .is_none_or(|d| d.diff_type == DiffType::None)
    {
        return 0;
    }
    let changes = resp
        .annotations
        .iter()
        .flat_map(|a| a.desired_tg_updates.values());
    for d in changes {
        if d.stop + d.place + d.migrate + d.destructive_update + d.canary > 0 {
            return 1;
        }
    }
    0
}

/// Nomad's `formatDryRun`.
fn format_dry_run(resp: &PlanResponse, job_type: &str, parameterized: bool) -> String {
    let rolling = resp
        .created_evals
        .iter()
        .flatten()
        .rfind(|e| e.triggered_by == "rolling-update");
    let mut out = String::new();
    match resp.failed_tg_allocs.as_ref().filter(|f| !f.is_empty()) {
        None => out.push_str("- All tasks successfully allocated.\n"),
        Some(failed) => {
            if job_type == "system" {
                out.push_str("- WARNING: Failed to place allocations on all nodes.\n");
            } else {
                out.push_str("- WARNING: Failed to place all allocations.\n");
            }
            for (group, m) in failed {
                out.push_str(&format!("  {}\n", metrics::failed_group_header(group, m)));
                out.push_str(&format!(
                    "{}\n\n",
                    metrics::format_alloc_metrics(m, false, "    ")
                ));
            }
            if rolling.is_none() {
                out.pop();
            }
        }
    }
    if let Some(r) = rolling {
        out.push_str(&format!(
            "- Rolling update, next evaluation will be in {}.\n",
            timefmt::go_duration(r.wait)
        ));
    }
    let next = resp
        .next_periodic_launch
        .as_deref()
        .and_then(timefmt::parse_time);
    if let Some(next) = next
        && !parameterized
    {
        let now = drover_structs::time::now_nanos();
        let until = (next - now).max(0) / 1_000_000_000 * 1_000_000_000;
        out.push_str(&format!(
            "- If submitted now, next periodic launch would be at {} ({} from now).\n",
            timefmt::format_time(next),
            timefmt::go_duration(until)
        ));
    }
    out.trim_end_matches('\n').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn updates(place: u64, ignore: u64) -> PlanAnnotations {
        let mut a = PlanAnnotations::default();
        a.desired_tg_updates.insert(
            "web".into(),
            drover_structs::DesiredUpdates {
                place,
                ignore,
                ..Default::default()
            },
        );
        a
    }

    fn edited() -> JobDiff {
        JobDiff {
            diff_type: DiffType::Edited,
            ..Default::default()
        }
    }

    #[test]
    fn a_plan_that_places_exits_one_and_one_that_only_ignores_exits_zero() {
        let mut resp = PlanResponse {
            annotations: Some(updates(1, 2)),
            diff: Some(edited()),
            ..Default::default()
        };
        assert_eq!(exit_code(&resp), 1);
        resp.annotations = Some(updates(0, 3));
        assert_eq!(exit_code(&resp), 0);
        resp.annotations = Some(updates(5, 0));
        resp.diff = Some(JobDiff::default());
        assert_eq!(exit_code(&resp), 0, "an unchanged job exits 0");
    }

    #[test]
    fn dry_run_reports_success_or_each_failed_group() {
        let ok = PlanResponse::default();
        assert_eq!(
            format_dry_run(&ok, "service", false),
            "- All tasks successfully allocated."
        );
        let mut failed = BTreeMap::new();
        failed.insert(
            "web".to_string(),
            AllocMetric {
                nodes_evaluated: 1,
                nodes_exhausted: 1,
                coalesced_failures: 2,
                ..Default::default()
            },
        );
        let resp = PlanResponse {
            failed_tg_allocs: Some(failed),
            ..Default::default()
        };
        let text = format_dry_run(&resp, "service", false);
        assert!(
            text.starts_with(
                "- WARNING: Failed to place all allocations.\n  \
                 Task Group \"web\" (failed to place 3 allocations):\n"
            ),
            "{text}"
        );
        assert!(!text.ends_with('\n'), "{text:?}");
        assert!(
            format_dry_run(&resp, "system", false)
                .starts_with("- WARNING: Failed to place allocations on all nodes.")
        );
    }
}
