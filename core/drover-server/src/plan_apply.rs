//! The plan applier: the only writer of allocations. It takes plans one at a time, re-checks
//! every node of a plan against the newest state (another worker may have placed there since the
//! scheduler took its snapshot), commits the part that still fits through Raft, and tells the
//! scheduler to refresh and retry the rest.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_scheduler::fit::allocs_fit;
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
        .collect();
    for node_id in nodes {
        let stops = plan.node_update.get(node_id);
        let places = plan.node_allocation.get(node_id);
        if fits_node(snap, node_id, stops, places) {
            if let Some(s) = stops {
                result.node_update.insert(node_id.clone(), s.clone());
            }
            if let Some(p) = places {
                result.node_allocation.insert(node_id.clone(), p.clone());
            }
        } else {
            refused = true;
            // Stops always apply: freeing resources can't overcommit a node.
            if let Some(s) = stops {
                result.node_update.insert(node_id.clone(), s.clone());
            }
        }
    }
    if refused {
        if plan.all_at_once {
            result.node_update.clear();
            result.node_allocation.clear();
        }
        result.refresh_index = snap.latest_index().max(1);
    }
    result
}

fn fits_node(
    snap: &StateSnapshot,
    node_id: &str,
    stops: Option<&Vec<Allocation>>,
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
    let removed: std::collections::HashSet<&str> = stops
        .into_iter()
        .flatten()
        .map(|a| a.id.as_str())
        .chain(places.iter().map(|a| a.id.as_str()))
        .collect();
    let existing = snap.allocs_by_node(node_id);
    let mut proposed: Vec<&Allocation> = existing
        .iter()
        .filter(|a| !a.terminal() && !removed.contains(a.id.as_str()))
        .map(|a| a.as_ref())
        .collect();
    proposed.extend(places.iter());
    allocs_fit(&node, &proposed).is_ok()
}

/// Runs until the channel closes: applies plans in order.
pub(crate) async fn run_plan_applier(inner: Arc<Inner>, mut rx: mpsc::Receiver<PlanRequest>) {
    while let Some(req) = rx.recv().await {
        let snap = inner.state.snapshot();
        let mut result = evaluate_plan(&snap, &req.plan);
        let stopped: Vec<Allocation> = result.node_update.values().flatten().cloned().collect();
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
            evals: vec![],
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
