//! Nomad's evaluation monitor (`command/monitor.go`): polls an evaluation and its allocations
//! once a second, prints what changed, follows `NextEval`, and ends with exit code 2 when some
//! allocations could not be placed.

use std::collections::BTreeMap;
use std::time::Duration;

use drover_structs::{AllocListStub, Evaluation};

use super::api::{Client, escape_segment};
use super::format::{limit, quote};
use super::metrics::failed_placement_lines;
use super::timefmt::{go_duration, now_formatted};
use super::{Exit, ui};

const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What the monitor last saw of one allocation.
#[derive(Debug, Clone, Default, PartialEq)]
struct AllocState {
    id: String,
    name: String,
    group: String,
    node: String,
    desired: String,
    client: String,
    client_desc: String,
    create_index: u64,
}

/// What the monitor last saw of the evaluation.
#[derive(Debug, Clone, PartialEq)]
struct EvalState {
    status: String,
    node: String,
    deployment: String,
    job: String,
    allocs: BTreeMap<String, AllocState>,
    create_index: u64,
}

impl Default for EvalState {
    /// Nomad starts every monitor from a pending evaluation.
    fn default() -> Self {
        EvalState {
            status: "pending".into(),
            node: String::new(),
            deployment: String::new(),
            job: String::new(),
            allocs: BTreeMap::new(),
            create_index: 0,
        }
    }
}

impl EvalState {
    fn observe(eval: &Evaluation, allocs: &[AllocListStub]) -> EvalState {
        EvalState {
            status: eval.status.clone(),
            node: eval.node_id.clone(),
            deployment: eval.deployment_id.clone(),
            job: eval.job_id.clone(),
            allocs: allocs
                .iter()
                .map(|a| {
                    let state = AllocState {
                        id: a.id.clone(),
                        name: a.name.clone(),
                        group: a.task_group.clone(),
                        node: a.node_id.clone(),
                        desired: a.desired_status.clone(),
                        client: a.client_status.clone(),
                        client_desc: a.client_description.clone(),
                        create_index: a.create_index,
                    };
                    (a.id.clone(), state)
                })
                .collect(),
            create_index: eval.create_index,
        }
    }
}

/// `job.group[12]` sorts after `job.group[2]`.
fn name_order(a: &AllocState) -> (u64, String, u64, String) {
    let index = a
        .name
        .rfind('[')
        .and_then(|open| a.name.get(open + 1..a.name.len().saturating_sub(1)))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (a.create_index, a.group.clone(), index, a.id.clone())
}

/// The lines (without timestamps) Nomad's `monitor.update` prints going from `old` to `new`.
fn changes(old: &EvalState, new: &EvalState, length: usize) -> Vec<String> {
    let mut lines = Vec::new();
    if old.node.is_empty() && !new.node.is_empty() {
        lines.push(format!(
            "Evaluation triggered by node {}",
            quote(limit(&new.node, length))
        ));
    }
    if old.job.is_empty() && !new.job.is_empty() {
        lines.push(format!("Evaluation triggered by job {}", quote(&new.job)));
    }
    if old.deployment.is_empty() && !new.deployment.is_empty() {
        lines.push(format!(
            "Evaluation within deployment: {}",
            quote(limit(&new.deployment, length))
        ));
    }
    let mut allocs: Vec<&AllocState> = new.allocs.values().collect();
    allocs.sort_by_key(|a| name_order(a));
    for alloc in allocs {
        match old.allocs.get(&alloc.id) {
            None if alloc.create_index < new.create_index => lines.push(format!(
                "Allocation {} modified: node {}, group {}",
                quote(limit(&alloc.id, length)),
                quote(limit(&alloc.node, length)),
                quote(&alloc.group)
            )),
            None if alloc.desired == "run" => lines.push(format!(
                "Allocation {} created: node {}, group {}",
                quote(limit(&alloc.id, length)),
                quote(limit(&alloc.node, length)),
                quote(&alloc.group)
            )),
            None => {}
            Some(prev) if prev.client != alloc.client => {
                let desc = if alloc.client_desc.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", alloc.client_desc)
                };
                lines.push(format!(
                    "Allocation {} status changed: {} -> {}{desc}",
                    quote(limit(&alloc.id, length)),
                    quote(&prev.client),
                    quote(&alloc.client)
                ));
            }
            Some(_) => {}
        }
    }
    // Transitions into "pending" are not news.
    if !old.status.is_empty() && new.status != "pending" && old.status != new.status {
        lines.push(format!(
            "Evaluation status changed: {} -> {}",
            quote(&old.status),
            quote(&new.status)
        ));
    }
    lines
}

fn is_finished(status: &str) -> bool {
    matches!(status, "complete" | "failed" | "canceled" | "cancelled")
}

/// Monitors `eval_id` until it (and any follow-up evaluation) finishes. Returns Nomad's exit
/// code: 0 when everything was placed, 2 when placements failed, 1 when monitoring broke.
pub fn monitor(client: &Client, eval_id: &str, length: usize) -> Exit {
    let mut eval_id = eval_id.to_string();
    let mut sched_failure = false;
    let mut deployment = String::new();
    loop {
        let mut state = EvalState::default();
        ui::info(&format!(
            "{}: Monitoring evaluation {}",
            now_formatted(),
            quote(limit(&eval_id, length))
        ));
        let eval = loop {
            let path = format!("/v1/evaluation/{}", escape_segment(&eval_id));
            let eval: Evaluation = match client.get_json(&path, &[]) {
                Ok((eval, _)) => eval,
                Err(e) if e.is_not_found() => {
                    ui::err(&format!(
                        "==> No evaluation with id {} found",
                        quote(&eval_id)
                    ));
                    return 1;
                }
                Err(e) => {
                    ui::err(&format!(
                        "==> {}: Error reading evaluation: {e}",
                        now_formatted()
                    ));
                    return 1;
                }
            };
            let allocs: Vec<AllocListStub> =
                match client.get_json(&format!("{path}/allocations"), &[]) {
                    Ok((allocs, _)) => allocs,
                    Err(e) => {
                        ui::err(&format!(
                            "==> {}: Error reading allocations: {e}",
                            now_formatted()
                        ));
                        return 1;
                    }
                };
            let next = EvalState::observe(&eval, &allocs);
            for line in changes(&state, &next, length) {
                ui::detail(&format!("{}: {line}", now_formatted()));
            }
            state = next;
            if is_finished(&eval.status) {
                break eval;
            }
            std::thread::sleep(POLL_INTERVAL);
        };

        if !eval.deployment_id.is_empty() {
            deployment = eval.deployment_id.clone();
        }
        let failed = eval.failed_tg_allocs.as_ref().filter(|f| !f.is_empty());
        match failed {
            None => ui::info(&format!(
                "{}: Evaluation {} finished with status {}",
                now_formatted(),
                quote(limit(&eval.id, length)),
                quote(&eval.status)
            )),
            Some(failed) => {
                sched_failure = true;
                ui::info(&format!(
                    "{}: Evaluation {} finished with status {} but failed to place all allocations:",
                    now_formatted(),
                    quote(limit(&eval.id, length)),
                    quote(&eval.status)
                ));
                for line in failed_placement_lines(failed) {
                    if line.starts_with("Task Group") {
                        ui::detail(&format!("{}: {line}", now_formatted()));
                    } else {
                        ui::detail(&line);
                    }
                }
                if !eval.blocked_eval.is_empty() {
                    ui::detail(&format!(
                        "{}: Evaluation {} waiting for additional capacity to place remainder",
                        now_formatted(),
                        quote(limit(&eval.blocked_eval, length))
                    ));
                }
            }
        }

        if eval.next_eval.is_empty() {
            break;
        }
        if eval.wait > 0 {
            ui::info(&format!(
                "{}: Monitoring next evaluation {} in {}",
                now_formatted(),
                quote(limit(&eval.next_eval, length)),
                go_duration(eval.wait)
            ));
            std::thread::sleep(Duration::from_nanos(eval.wait.unsigned_abs()));
        }
        eval_id = eval.next_eval.clone();
    }
    // Placement failures have their own exit code; otherwise Nomad's monitor follows the
    // deployment the evaluation started, to its end.
    if sched_failure {
        return 2;
    }
    if !deployment.is_empty() {
        ui::info(&format!(
            "{}: Monitoring deployment {}",
            now_formatted(),
            quote(limit(&deployment, length))
        ));
        let status = super::deployment::monitor_deployment(client, &deployment, length);
        if status.as_deref() != Some("successful") {
            return 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(id: &str, name: &str, client: &str, create_index: u64) -> AllocState {
        AllocState {
            id: id.into(),
            name: name.into(),
            group: "g".into(),
            node: "0d816e8c-19bd-2066-474e-6f7e52291a4c".into(),
            desired: "run".into(),
            client: client.into(),
            client_desc: String::new(),
            create_index,
        }
    }

    fn observed(status: &str, allocs: Vec<AllocState>) -> EvalState {
        EvalState {
            status: status.into(),
            job: "web".into(),
            allocs: allocs.into_iter().map(|a| (a.id.clone(), a)).collect(),
            create_index: 10,
            ..EvalState::default()
        }
    }

    #[test]
    fn first_observation_reports_trigger_new_allocs_and_completion() {
        let new = observed(
            "complete",
            vec![
                alloc("bbbbbbbb-2", "web.g[10]", "pending", 11),
                alloc("aaaaaaaa-1", "web.g[2]", "pending", 11),
            ],
        );
        assert_eq!(
            changes(&EvalState::default(), &new, 8),
            vec![
                "Evaluation triggered by job \"web\"",
                "Allocation \"aaaaaaaa\" created: node \"0d816e8c\", group \"g\"",
                "Allocation \"bbbbbbbb\" created: node \"0d816e8c\", group \"g\"",
                "Evaluation status changed: \"pending\" -> \"complete\"",
            ]
        );
    }

    #[test]
    fn allocs_older_than_the_eval_are_reported_as_modified() {
        let new = observed(
            "pending",
            vec![alloc("cccccccc-3", "web.g[0]", "running", 5)],
        );
        let lines = changes(&observed("pending", vec![]), &new, 8);
        assert_eq!(
            lines,
            vec!["Allocation \"cccccccc\" modified: node \"0d816e8c\", group \"g\""]
        );
    }

    #[test]
    fn client_status_changes_are_reported_once() {
        let old = observed(
            "complete",
            vec![alloc("aaaaaaaa-1", "web.g[0]", "pending", 11)],
        );
        let mut running = alloc("aaaaaaaa-1", "web.g[0]", "running", 11);
        running.client_desc = "Tasks are running".into();
        let new = observed("complete", vec![running]);
        assert_eq!(
            changes(&old, &new, 8),
            vec![
                "Allocation \"aaaaaaaa\" status changed: \"pending\" -> \"running\" (Tasks are running)"
            ]
        );
        assert!(changes(&new, &new, 8).is_empty());
    }
}
