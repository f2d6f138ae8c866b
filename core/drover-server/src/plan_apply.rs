//! The plan applier: the only writer of allocations. It takes plans one at a time, re-checks
//! every node of a plan against the newest state (another worker may have placed there since the
//! scheduler took its snapshot), commits the part that still fits through Raft, and tells the
//! scheduler to refresh and retry the rest.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_scheduler::fit::usage_fits;
use drover_state::StateSnapshot;
use drover_structs::{Allocation, Plan, PlanResult};
use tokio::sync::{mpsc, oneshot};

use crate::fsm::LogEntry;
use crate::server::Inner;

pub(crate) struct PlanRequest {
    pub plan: Plan,
    pub reply: oneshot::Sender<Result<PlanResult, String>>,
}

/// Decides what of `plan` fits on `snap`. Pure: no IO.
pub fn evaluate_plan(snap: &StateSnapshot, plan: &Plan) -> PlanResult {
    let mut result = PlanResult::default();
    let mut refused = false;
    let nodes: std::collections::BTreeSet<&String> = plan
        .node_update
        .keys()
        .chain(plan.node_allocation.keys())
        .chain(plan.node_preemptions.keys())
        .collect();
    for node_id in nodes {
        let stops = plan.node_update.get(node_id);
        let places = plan.node_allocation.get(node_id);
        let preempts = plan.node_preemptions.get(node_id);
        if fits_node(snap, node_id, stops, preempts, places) {
            if let Some(p) = places {
                result.node_allocation.insert(node_id.clone(), p.clone());
            }
            if let Some(p) = preempts {
                result.node_preemptions.insert(node_id.clone(), p.clone());
            }
        } else {
            refused = true;
        }
        // Stops always apply: freeing resources can't overcommit a node.
        if let Some(s) = stops {
            result.node_update.insert(node_id.clone(), s.clone());
        }
    }
    if refused {
        if plan.all_at_once {
            result.node_update.clear();
            result.node_allocation.clear();
            result.node_preemptions.clear();
        }
        result.refresh_index = snap.latest_index().max(1);
    }
    result
}

/// Whether the node, with what the plan stops, preempts and places on it, still fits. Starts
/// from the node's usage the state store keeps, so the cost is that of the plan, not of every
/// allocation on the node.
fn fits_node(
    snap: &StateSnapshot,
    node_id: &str,
    stops: Option<&Vec<Allocation>>,
    preempts: Option<&Vec<Allocation>>,
    places: Option<&Vec<Allocation>>,
) -> bool {
    let Some(places) = places.filter(|p| !p.is_empty()) else {
        return true;
    };
    let Some(node) = snap.node(node_id) else {
        return false;
    };
    if !node.ready() {
        return false;
    }
    let mut usage = snap
        .node_usage(node_id)
        .map(|u| (*u).clone())
        .unwrap_or_default();
    let leaving = stops
        .into_iter()
        .flatten()
        .chain(preempts.into_iter().flatten())
        .chain(places.iter());
    for a in leaving {
        // The stored version is what the usage counted (in-place updates replace it).
        if let Some(existing) = snap.alloc(&a.id)
            && existing.node_id == node_id
        {
            usage.remove(&existing);
        }
    }
    for a in places {
        usage.add(a);
    }
    usage_fits(&node, &usage).is_ok()
}

/// Runs until the channel closes: applies plans in order.
pub(crate) async fn run_plan_applier(inner: Arc<Inner>, mut rx: mpsc::Receiver<PlanRequest>) {
    while let Some(req) = rx.recv().await {
        // Plans from a leadership that ended must not be committed by a server that merely
        // stopped leading (the propose would fail anyway); refuse them up front.
        if !inner.is_leader() {
            let _ = req.reply.send(Err("not the leader: plan refused".into()));
            continue;
        }
        let snap = inner.state.snapshot();
        let mut result = evaluate_plan(&snap, &req.plan);
        let stopped: Vec<Allocation> = result
            .node_update
            .values()
            .chain(result.node_preemptions.values())
            .flatten()
            .cloned()
            .collect();
        // Jobs that lost allocations to preemption are evaluated again, as in Nomad.
        let preempted_evals: Vec<drover_structs::Evaluation> = {
            let mut seen = std::collections::BTreeSet::new();
            result
                .node_preemptions
                .values()
                .flatten()
                .filter(|a| seen.insert((a.namespace.clone(), a.job_id.clone())))
                .filter_map(|a| snap.job(&a.namespace, &a.job_id))
                .map(|job| drover_structs::Evaluation::for_job(&job, "preemption"))
                .collect()
        };
        let placed: Vec<Allocation> = result
            .node_allocation
            .values()
            .flatten()
            .map(|a| {
                let mut a = a.clone();
                a.job = None;
                a
            })
            .collect();
        if stopped.is_empty() && placed.is_empty() {
            let _ = req.reply.send(Ok(result));
            continue;
        }
        let frees_capacity = !stopped.is_empty();
        let job = req
            .plan
            .job
            .as_ref()
            .map(|j| (j.namespace.clone(), j.id.clone(), j.version));
        let entry = LogEntry::PlanResults {
            job,
            stopped,
            placed,
            evals: preempted_evals.clone(),
        };
        match inner.apply(entry).await {
            Ok(index) => {
                result.alloc_index = index;
                if result.refresh_index != 0 {
                    result.refresh_index = index;
                }
                if frees_capacity {
                    inner.unblock_evals();
                }
                for mut e in preempted_evals {
                    e.modify_index = index;
                    inner.enqueue_when_due(e);
                }
                let _ = req.reply.send(Ok(result));
            }
            Err(e) => {
                let _ = req.reply.send(Err(e.to_string()));
            }
        }
    }
}

/// Counts of a result, for logs.
pub fn result_counts(r: &PlanResult) -> (usize, usize) {
    let count = |m: &BTreeMap<String, Vec<Allocation>>| m.values().map(Vec::len).sum();
    (count(&r.node_allocation), count(&r.node_update))
}
