//! `drover job status [ID]`: the job list, or Nomad's detailed view of one job (summary,
//! placement failures, latest deployment, allocations).

use std::collections::BTreeMap;

use drover_structs::{AllocListStub, Evaluation, Job, JobListStub, JobSummary};
use serde_json::Value;

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID, format_kv, format_list, limit};
use super::metrics::format_alloc_metrics;
use super::timefmt::{ago, format_time, format_time_at_offset, go_duration, parse_time};
use super::{Exit, job, ui};

/// Placement failures of more groups than this are left to `eval status`.
const MAX_FAILED_GROUPS: usize = 5;

#[derive(Debug, Default, clap::Args)]
pub struct JobStatusArgs {
    /// Show full identifiers and times
    #[arg(long)]
    pub verbose: bool,
    /// Also list the job's evaluations
    #[arg(long)]
    pub evals: bool,
    /// Include allocations of older versions of the job
    #[arg(long = "all-allocs")]
    pub all_allocs: bool,
    /// Only show the job's basic information
    #[arg(long)]
    pub short: bool,
    /// Job ID (or prefix); omit to list all jobs
    pub job: Option<String>,
}

pub fn run(client: &Client, args: JobStatusArgs) -> anyhow::Result<Exit> {
    match args.job.clone() {
        None => list_jobs(client),
        Some(id) => show_job(client, &id, &args),
    }
}

/// Nomad's `createStatusListOutput`.
pub fn job_list_table(jobs: &[JobListStub], with_namespace: bool) -> String {
    let mut rows = Vec::with_capacity(jobs.len() + 1);
    if with_namespace {
        rows.push("ID|Namespace|Type|Priority|Status|Submit Date".to_string());
    } else {
        rows.push("ID|Type|Priority|Status|Submit Date".to_string());
    }
    for j in jobs {
        let ns = if with_namespace {
            format!("{}|", j.namespace)
        } else {
            String::new()
        };
        rows.push(format!(
            "{}|{ns}{}|{}|{}|{}",
            j.id,
            type_string(j),
            j.priority,
            status_string(&j.status, j.stop),
            format_time(j.submit_time)
        ));
    }
    format_list(&rows)
}

fn type_string(j: &JobListStub) -> String {
    let mut t = j.job_type.clone();
    if j.periodic {
        t.push_str("/periodic");
    }
    if j.parameterized_job {
        t.push_str("/parameterized");
    }
    t
}

fn status_string(status: &str, stop: bool) -> String {
    if stop {
        format!("{status} (stopped)")
    } else {
        status.to_string()
    }
}

/// The job list, or "No running jobs".
pub fn list_jobs(client: &Client) -> anyhow::Result<Exit> {
    let jobs: Vec<JobListStub> = match client.get_json("/v1/jobs", &[]) {
        Ok((jobs, _)) => jobs,
        Err(e) => {
            ui::err(&format!("Error querying jobs: {e}"));
            return Ok(1);
        }
    };
    if jobs.is_empty() {
        ui::out("No running jobs");
    } else {
        ui::out(&job_list_table(&jobs, client.namespace() == Some("*")));
    }
    Ok(0)
}

/// Nomad's `formatAllocListStubs`.
pub fn alloc_stub_table(stubs: &[AllocListStub], verbose: bool, length: usize) -> String {
    if stubs.is_empty() {
        return "No allocations placed".into();
    }
    let mut rows = Vec::with_capacity(stubs.len() + 1);
    if verbose {
        rows.push(
            "ID|Eval ID|Node ID|Node Name|Task Group|Version|Desired|Status|Created|Modified"
                .to_string(),
        );
        for a in stubs {
            rows.push(format!(
                "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
                limit(&a.id, length),
                limit(&a.eval_id, length),
                limit(&a.node_id, length),
                a.node_name,
                a.task_group,
                a.job_version,
                a.desired_status,
                a.client_status,
                format_time(a.create_time),
                format_time(a.modify_time)
            ));
        }
    } else {
        rows.push("ID|Node ID|Task Group|Version|Desired|Status|Created|Modified".to_string());
        for a in stubs {
            rows.push(format!(
                "{}|{}|{}|{}|{}|{}|{}|{}",
                limit(&a.id, length),
                limit(&a.node_id, length),
                a.task_group,
                a.job_version,
                a.desired_status,
                a.client_status,
                ago(a.create_time),
                ago(a.modify_time)
            ));
        }
    }
    format_list(&rows)
}

/// The `Key|Value` rows at the top of `job status ID`, `now` in unix nanoseconds.
fn basic_rows(job: &Job, now: i64) -> Vec<String> {
    let mut rows = vec![
        format!("ID|{}", job.id),
        format!("Name|{}", job.name),
        format!("Submit Date|{}", format_time(job.submit_time)),
        format!("Type|{}", job.job_type),
        format!("Priority|{}", job.priority),
        format!("Datacenters|{}", job.datacenters.join(",")),
        format!("Namespace|{}", job.namespace),
        format!("Status|{}", status_string(&job.status, job.stop)),
        format!("Periodic|{}", job.is_periodic()),
        format!("Parameterized|{}", job.is_parameterized()),
    ];
    if !job.dispatch_idempotency_token.is_empty() {
        rows.push(format!(
            "Idempotency Token|{}",
            job.dispatch_idempotency_token
        ));
    }
    if job.is_periodic()
        && !job.is_parameterized()
        && let Some(next) = next_launch_text(job, now)
    {
        rows.push(format!("Next Periodic Launch|{next}"));
    }
    rows
}

/// Nomad's "Next Periodic Launch" value: the next launch on the job's clock and how far off it
/// is ("2026-11-30T01:00:00Z (4m32s from now)"), computed by the dispatcher's own schedule
/// code. `None` (no line, as Nomad when it cannot compute one) for an unknown zone, a bad
/// expression, or a schedule with no later time.
fn next_launch_text(job: &Job, now: i64) -> Option<String> {
    if job.stop {
        return Some("none (job stopped)".into());
    }
    let config = job.periodic_config()?;
    let next = drover_server::next_periodic_launch(&config, now).ok()??;
    // Go's formatTimeDifference(now, next, time.Second): both truncated to the second.
    const SECOND: i64 = 1_000_000_000;
    let until = (next.at.div_euclid(SECOND) - now.div_euclid(SECOND)).saturating_mul(SECOND);
    Some(format!(
        "{} ({} from now)",
        format_time_at_offset(next.at, i64::from(next.utc_offset_secs)),
        go_duration(until)
    ))
}

fn show_job(client: &Client, prefix: &str, args: &JobStatusArgs) -> anyhow::Result<Exit> {
    let stub = match job::find_job(client, prefix)? {
        Ok(stub) => stub,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let client = client.in_namespace(&stub.namespace);
    let base = format!("/v1/job/{}", escape_segment(&stub.id));
    let job: Job = match client.get_json(&base, &[]) {
        Ok((job, _)) => job,
        Err(e) => {
            ui::err(&format!("Error querying job: {e}"));
            return Ok(1);
        }
    };
    let now = drover_structs::time::now_nanos();
    ui::out(&format_kv(&basic_rows(&job, now)));
    if args.short {
        return Ok(0);
    }
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    let result = if job.is_periodic() && !job.is_parameterized() {
        children_section(
            &client,
            &job,
            "/periodic-",
            "Previously Launched Jobs",
            "No instances of periodic job found",
        )
    } else if job.is_parameterized() {
        parameterized_section(&client, &job)
    } else {
        job_info(&client, &job, &base, args, length)
    };
    match result {
        Ok(()) => Ok(0),
        Err(message) => {
            ui::err(&message);
            Ok(1)
        }
    }
}

/// Summary plus the child jobs launched from a periodic or parameterized job.
fn children_section(
    client: &Client,
    job: &Job,
    suffix: &str,
    title: &str,
    none: &str,
) -> Result<(), String> {
    output_summary(client, job)?;
    let prefix = format!("{}{suffix}", job.id);
    let children: Vec<JobListStub> = client
        .get_json("/v1/jobs", &[("prefix", &prefix)])
        .map(|(c, _)| c)
        .map_err(|e| format!("Error querying job: {e}"))?;
    let rows: Vec<String> = std::iter::once("ID|Status".to_string())
        .chain(
            children
                .iter()
                .filter(|c| c.parent_id == job.id)
                .map(|c| format!("{}|{}", c.id, c.status)),
        )
        .collect();
    if rows.len() == 1 {
        ui::out(&format!("\n{none}"));
        return Ok(());
    }
    ui::out(&format!("\n{title}"));
    ui::out(&format_list(&rows));
    Ok(())
}

fn parameterized_section(client: &Client, job: &Job) -> Result<(), String> {
    let p = job.parameterized_job.clone().unwrap_or(Value::Null);
    let list = |key: &str| -> String {
        p.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    ui::out("\nParameterized Job");
    ui::out(&format_kv(&[
        format!(
            "Payload|{}",
            p.get("Payload").and_then(Value::as_str).unwrap_or_default()
        ),
        format!("Required Metadata|{}", list("MetaRequired")),
        format!("Optional Metadata|{}", list("MetaOptional")),
    ]));
    children_section(
        client,
        job,
        "/dispatch-",
        "Dispatched Jobs",
        "No dispatched instances of parameterized job found",
    )
}

/// The summary table ("Summary"), and children counts when the job has any.
fn output_summary(client: &Client, job: &Job) -> Result<(), String> {
    let path = format!("/v1/job/{}/summary", escape_segment(&job.id));
    let summary: JobSummary = client
        .get_json(&path, &[])
        .map(|(s, _)| s)
        .map_err(|e| format!("Error querying job summary: {e}"))?;
    let periodic = job.is_periodic();
    let parameterized = job.is_parameterized();
    if !periodic && !parameterized {
        ui::out("\nSummary");
        ui::out(&summary_table(&summary));
    }
    let c = &summary.children;
    if parameterized || periodic || c.pending + c.running + c.dead > 0 {
        if parameterized {
            ui::out("\nParameterized Job Summary");
        } else {
            ui::out("\nChildren Job Summary");
        }
        ui::out(&format_list(&[
            "Pending|Running|Dead".to_string(),
            format!("{}|{}|{}", c.pending, c.running, c.dead),
        ]));
    }
    Ok(())
}

fn summary_table(summary: &JobSummary) -> String {
    let mut rows = vec!["Task Group|Queued|Starting|Running|Failed|Complete|Lost".to_string()];
    for (group, s) in &summary.summary {
        rows.push(format!(
            "{group}|{}|{}|{}|{}|{}|{}",
            s.queued, s.starting, s.running, s.failed, s.complete, s.lost
        ));
    }
    format_list(&rows)
}

/// The evaluation whose placement failures `job status` explains: the newest one with
/// failures, while the job still waits for capacity (a blocked eval) or the newest evaluation
/// itself failed to place.
fn failed_placement_eval(evals: &[Evaluation]) -> Option<&Evaluation> {
    let has_failures = |e: &&Evaluation| e.failed_tg_allocs.as_ref().is_some_and(|f| !f.is_empty());
    let latest_failed = evals
        .iter()
        .filter(has_failures)
        .max_by_key(|e| e.create_index)?;
    let blocked = evals.iter().any(|e| e.status == "blocked");
    let newest = evals.iter().max_by_key(|e| e.create_index)?;
    (blocked || newest.id == latest_failed.id).then_some(latest_failed)
}

/// Nomad's "Placement Failure" section text (without the heading).
fn placement_failure_text(eval: &Evaluation) -> String {
    let failed: &BTreeMap<_, _> = match &eval.failed_tg_allocs {
        Some(f) => f,
        None => return String::new(),
    };
    let mut parts: Vec<String> = Vec::new();
    for (i, (group, metric)) in failed.iter().enumerate() {
        if i >= MAX_FAILED_GROUPS {
            break;
        }
        let mut block = format!(
            "Task Group {group:?}:\n{}",
            format_alloc_metrics(metric, false, "  ")
        );
        if i + 1 != failed.len() {
            block.push('\n');
        }
        parts.push(block);
    }
    let mut text = parts.join("\n");
    if failed.len() > MAX_FAILED_GROUPS {
        text.push_str(&format!(
            "\n\nPlacement failures truncated. To see remainder run:\ndrover eval status {}",
            eval.id
        ));
    }
    text
}

/// Nomad's `formatDeployment` for the "Latest Deployment" section.
fn deployment_text(d: &Value, length: usize) -> String {
    let s = |key: &str| {
        d.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut text = format_kv(&[
        format!("ID|{}", limit(&s("ID"), length)),
        format!("Status|{}", s("Status")),
        format!("Description|{}", s("StatusDescription")),
    ]);
    let Some(groups) = d
        .get("TaskGroups")
        .and_then(Value::as_object)
        .filter(|g| !g.is_empty())
    else {
        return text;
    };
    let int = |g: &Value, key: &str| g.get(key).and_then(Value::as_i64).unwrap_or(0);
    let flag = |g: &Value, key: &str| g.get(key).and_then(Value::as_bool).unwrap_or(false);
    let auto_revert = groups.values().any(|g| flag(g, "AutoRevert"));
    let canaries = groups.values().any(|g| int(g, "DesiredCanaries") > 0);
    let deadline = groups.values().any(|g| int(g, "ProgressDeadline") != 0);

    let mut header = "Task Group|".to_string();
    if auto_revert {
        header.push_str("Auto Revert|");
    }
    if canaries {
        header.push_str("Promoted|");
    }
    header.push_str("Desired|");
    if canaries {
        header.push_str("Canaries|");
    }
    header.push_str("Placed|Healthy|Unhealthy");
    if deadline {
        header.push_str("|Progress Deadline");
    }
    let mut rows = vec![header];
    // serde_json maps iterate in key order, which is Nomad's sorted group order.
    for (name, g) in groups {
        let mut row = format!("{name}|");
        if auto_revert {
            row.push_str(&format!("{}|", flag(g, "AutoRevert")));
        }
        if canaries {
            if int(g, "DesiredCanaries") > 0 {
                row.push_str(&format!("{}|", flag(g, "Promoted")));
            } else {
                row.push_str("N/A|");
            }
        }
        row.push_str(&format!("{}|", int(g, "DesiredTotal")));
        if canaries {
            let placed = g
                .get("PlacedCanaries")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            row.push_str(&format!("{placed}|"));
        }
        row.push_str(&format!(
            "{}|{}|{}",
            int(g, "PlacedAllocs"),
            int(g, "HealthyAllocs"),
            int(g, "UnhealthyAllocs")
        ));
        if deadline {
            let by = g
                .get("RequireProgressBy")
                .and_then(Value::as_str)
                .and_then(parse_time);
            match by {
                Some(n) => row.push_str(&format!("|{}", format_time(n))),
                None => row.push_str("|N/A"),
            }
        }
        rows.push(row);
    }
    text.push_str("\n\nDeployed\n");
    text.push_str(&format_list(&rows));
    text
}

/// Nomad's "Multiregion Deployment" table: each region's latest deployment of the job.
fn multiregion_text(client: &Client, job: &Job, base: &str, length: usize) -> String {
    let mut regions: Vec<String> = job
        .multiregion_spec()
        .map(|s| s.regions().iter().map(|r| r.name.clone()).collect())
        .unwrap_or_default();
    regions.sort();
    let mut rows = vec!["Region|ID|Status".to_string()];
    for region in regions {
        let d: Option<Value> = client
            .in_region(&region)
            .get_json(&format!("{base}/deployment"), &[])
            .ok()
            .and_then(|(d, _)| d);
        match d.filter(Value::is_object) {
            Some(d) => rows.push(format!(
                "{region}|{}|{}",
                limit(d["ID"].as_str().unwrap_or_default(), length),
                d["Status"].as_str().unwrap_or_default()
            )),
            None => rows.push(format!("{region} (error)||")),
        }
    }
    format!("\nMultiregion Deployment\n{}", format_list(&rows))
}

fn job_info(
    client: &Client,
    job: &Job,
    base: &str,
    args: &JobStatusArgs,
    length: usize,
) -> Result<(), String> {
    let all = if args.all_allocs { "true" } else { "false" };
    let allocs: Vec<AllocListStub> = client
        .get_json(&format!("{base}/allocations"), &[("all", all)])
        .map(|(a, _)| a)
        .map_err(|e| format!("Error querying job allocations: {e}"))?;
    let evals: Vec<Evaluation> = client
        .get_json(&format!("{base}/evaluations"), &[])
        .map(|(e, _)| e)
        .map_err(|e| format!("Error querying job evaluations: {e}"))?;
    // Deployments are optional on the agent side; their absence is not an error here.
    let deployment: Option<Value> = client
        .get_json(&format!("{base}/deployment"), &[])
        .ok()
        .and_then(|(d, _)| d)
        .filter(|d: &Value| d.is_object());

    output_summary(client, job)?;

    if args.verbose || args.evals {
        let mut rows = vec!["ID|Priority|Triggered By|Status|Placement Failures".to_string()];
        for e in &evals {
            let failures = if e.status == "blocked" {
                "N/A - In Progress".to_string()
            } else {
                e.failed_tg_allocs
                    .as_ref()
                    .is_some_and(|f| !f.is_empty())
                    .to_string()
            };
            rows.push(format!(
                "{}|{}|{}|{}|{failures}",
                limit(&e.id, length),
                e.priority,
                e.triggered_by,
                e.status
            ));
        }
        ui::out("\nEvaluations");
        ui::out(&format_list(&rows));
    }

    if let Some(eval) = failed_placement_eval(&evals) {
        ui::out("\nPlacement Failure");
        ui::out(&placement_failure_text(eval));
    }

    if let Some(d) = deployment {
        ui::out("\nLatest Deployment");
        ui::out(&deployment_text(&d, length));
        if d["IsMultiregion"] == true {
            ui::out(&multiregion_text(client, job, base, length));
        }
    }

    ui::out("\nAllocations");
    ui::out(&alloc_stub_table(&allocs, args.verbose, length));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{AllocMetric, TaskGroupSummary};
    use serde_json::json;

    fn eval(id: &str, status: &str, index: u64, failed: bool) -> Evaluation {
        let mut e = Evaluation {
            id: id.into(),
            status: status.into(),
            create_index: index,
            ..Default::default()
        };
        if failed {
            let mut m = AllocMetric {
                nodes_evaluated: 1,
                ..Default::default()
            };
            m.exhausted_node("", "memory");
            e.failed_tg_allocs = Some(BTreeMap::from([("cache".to_string(), m)]));
        }
        e
    }

    #[test]
    fn job_list_marks_stopped_and_periodic_jobs() {
        let jobs = vec![JobListStub {
            id: "nightly".into(),
            job_type: "batch".into(),
            priority: 50,
            periodic: true,
            stop: true,
            status: "dead".into(),
            ..Default::default()
        }];
        assert_eq!(
            job_list_table(&jobs, false),
            "ID       Type            Priority  Status          Submit Date\n\
             nightly  batch/periodic  50        dead (stopped)  <none>"
        );
    }

    /// 2026-11-30T00:55:28.5Z.
    const NOW: i64 = 1_796_000_128_500_000_000;

    fn periodic_parent(spec: &str, zone: &str) -> Job {
        Job {
            id: "nightly".into(),
            job_type: "batch".into(),
            status: "running".into(),
            periodic: Some(json!({
                "Enabled": true, "Spec": spec, "SpecType": "cron", "TimeZone": zone
            })),
            ..Default::default()
        }
    }

    fn row<'a>(rows: &'a [String], key: &str) -> Option<&'a str> {
        rows.iter()
            .find_map(|r| r.strip_prefix(key).and_then(|r| r.strip_prefix('|')))
    }

    #[test]
    fn next_periodic_launch_reads_as_nomads_on_the_jobs_clock() {
        let utc = basic_rows(&periodic_parent("0 1 * * *", ""), NOW);
        assert_eq!(
            row(&utc, "Next Periodic Launch"),
            Some("2026-11-30T01:00:00Z (4m32s from now)")
        );
        // 01:00 in Paris (UTC+1 in November) is 00:00Z the next day.
        let paris = basic_rows(&periodic_parent("0 1 * * *", "Europe/Paris"), NOW);
        assert_eq!(
            row(&paris, "Next Periodic Launch"),
            Some("2026-12-01T01:00:00+01:00 (23h4m32s from now)")
        );
        let mut stopped = periodic_parent("0 1 * * *", "");
        stopped.stop = true;
        assert_eq!(
            row(&basic_rows(&stopped, NOW), "Next Periodic Launch"),
            Some("none (job stopped)")
        );
        // No line when it cannot be computed, nor for jobs that are not periodic parents.
        let nowhere = periodic_parent("0 1 * * *", "Mars/Olympus_Mons");
        assert_eq!(
            row(&basic_rows(&nowhere, NOW), "Next Periodic Launch"),
            None
        );
        let mut parameterized = periodic_parent("0 1 * * *", "");
        parameterized.parameterized_job = Some(json!({"Payload": "optional"}));
        assert_eq!(
            row(&basic_rows(&parameterized, NOW), "Next Periodic Launch"),
            None
        );
        assert_eq!(
            row(&basic_rows(&Job::default(), NOW), "Next Periodic Launch"),
            None
        );
    }

    #[test]
    fn a_dispatched_child_shows_its_idempotency_token() {
        let child = Job {
            id: "render/dispatch-1-a".into(),
            dispatched: true,
            dispatch_idempotency_token: "retry-7".into(),
            ..Default::default()
        };
        let rows = basic_rows(&child, NOW);
        assert_eq!(
            rows.last().map(String::as_str),
            Some("Idempotency Token|retry-7")
        );
        assert_eq!(
            row(&basic_rows(&Job::default(), NOW), "Idempotency Token"),
            None
        );
    }

    #[test]
    fn summary_table_lists_groups_in_name_order() {
        let summary = JobSummary {
            summary: BTreeMap::from([
                (
                    "web".to_string(),
                    TaskGroupSummary {
                        running: 2,
                        ..Default::default()
                    },
                ),
                (
                    "db".to_string(),
                    TaskGroupSummary {
                        queued: 1,
                        ..Default::default()
                    },
                ),
            ]),
            ..Default::default()
        };
        assert_eq!(
            summary_table(&summary),
            "Task Group  Queued  Starting  Running  Failed  Complete  Lost\n\
             db          1       0         0        0       0         0\n\
             web         0       0         2        0       0         0"
        );
    }

    #[test]
    fn placement_failure_shown_while_blocked_or_latest_failed() {
        let evals = vec![
            eval("a", "complete", 10, true),
            eval("b", "blocked", 11, false),
        ];
        assert_eq!(
            failed_placement_eval(&evals).map(|e| e.id.as_str()),
            Some("a")
        );
        let resolved = vec![
            eval("a", "complete", 10, true),
            eval("c", "complete", 12, false),
        ];
        assert!(failed_placement_eval(&resolved).is_none());
        let latest = vec![eval("d", "complete", 3, true)];
        assert_eq!(
            failed_placement_eval(&latest).map(|e| e.id.as_str()),
            Some("d")
        );
    }

    #[test]
    fn placement_failure_text_lists_group_and_reasons() {
        assert_eq!(
            placement_failure_text(&eval("a", "complete", 1, true)),
            "Task Group \"cache\":\n  * Resources exhausted on 1 nodes\n  * Dimension \"memory\" exhausted on 1 nodes"
        );
    }

    #[test]
    fn alloc_table_truncates_ids_and_handles_empty() {
        assert_eq!(
            alloc_stub_table(&[], false, SHORT_ID),
            "No allocations placed"
        );
        let stub = AllocListStub {
            id: "00e818ce-f004-06d0-d884-b854ff043de4".into(),
            node_id: "0d816e8c-19bd-2066-474e-6f7e52291a4c".into(),
            task_group: "g".into(),
            desired_status: "run".into(),
            client_status: "running".into(),
            ..Default::default()
        };
        let table = alloc_stub_table(&[stub], false, SHORT_ID);
        let row = table.lines().nth(1).unwrap();
        assert!(
            row.starts_with("00e818ce  0d816e8c  g           0        run      running"),
            "{row}"
        );
    }

    #[test]
    fn deployment_section_matches_nomad_layout() {
        let d = json!({
            "ID": "a4e2c116-b0ed-0868-d52b-4c49354daaab",
            "Status": "running",
            "StatusDescription": "Deployment is running",
            "TaskGroups": {"g": {"DesiredTotal": 50, "PlacedAllocs": 50, "HealthyAllocs": 0,
                                  "UnhealthyAllocs": 0, "ProgressDeadline": 0}}
        });
        assert_eq!(
            deployment_text(&d, SHORT_ID),
            "ID          = a4e2c116\nStatus      = running\nDescription = Deployment is running\n\n\
             Deployed\nTask Group  Desired  Placed  Healthy  Unhealthy\ng           50       50      0        0"
        );
    }
}
