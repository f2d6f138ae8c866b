//! The plan applier: the only writer of allocations. It takes plans one at a time, re-checks
//! every node of a plan against the newest state (another worker may have placed there since the
//! scheduler took its snapshot), commits the part that still fits through Raft, and tells the
//! scheduler to refresh and retry the rest.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use drover_scheduler::fit::usage_fits;
use drover_state::StateSnapshot;
use drover_structs::usage::NodeAllocUsage;
use drover_structs::{Allocation, Plan, PlanResult};
use tokio::sync::{mpsc, oneshot};

use crate::fsm::{LogEntry, PlanResultsPart};
use crate::server::Inner;

pub(crate) struct PlanRequest {
    pub plan: Plan,
    pub reply: oneshot::Sender<Result<PlanResult, String>>,
}

/// Decides what of `plan` fits on `snap`. Pure: no IO.
pub fn evaluate_plan(snap: &StateSnapshot, plan: &Plan) -> PlanResult {
    evaluate_plan_over(snap, &mut UsageOverlay::default(), plan)
}

/// Node usage as it will be once the plans accepted earlier in the same batch are committed:
/// the snapshot does not show them yet, so later plans of the batch are checked against this.
#[derive(Default)]
pub struct UsageOverlay {
    nodes: HashMap<String, NodeAllocUsage>,
}

impl UsageOverlay {
    fn usage(&self, snap: &StateSnapshot, node_id: &str) -> NodeAllocUsage {
        match self.nodes.get(node_id) {
            Some(u) => u.clone(),
            None => snap
                .node_usage(node_id)
                .map(|u| (*u).clone())
                .unwrap_or_default(),
        }
    }
}

/// As [`evaluate_plan`], against `snap` plus what earlier plans of the batch committed to
/// `overlay`; records this plan's accepted changes in `overlay`.
pub fn evaluate_plan_over(
    snap: &StateSnapshot,
    overlay: &mut UsageOverlay,
    plan: &Plan,
) -> PlanResult {
    let mut result = PlanResult::default();
    let mut refused = false;
    let mut accepted: Vec<(String, NodeAllocUsage)> = Vec::new();
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
        match fits_node(snap, overlay, node_id, stops, preempts, places) {
            Fit::Fits(usage) => {
                if let Some(p) = places {
                    result.node_allocation.insert(node_id.clone(), p.clone());
                }
                if let Some(p) = preempts {
                    result.node_preemptions.insert(node_id.clone(), p.clone());
                }
                if let Some(u) = usage {
                    accepted.push((node_id.clone(), u));
                }
            }
            Fit::Refused => refused = true,
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
            accepted.clear();
        }
        result.refresh_index = snap.latest_index().max(1);
    }
    // Stops that placed nothing leave the overlay alone: counting their freed capacity early
    // could only make a later plan of the batch look tighter than it is, never overcommit.
    overlay.nodes.extend(accepted);
    result
}

enum Fit {
    /// Fits; with the node's usage after the plan when the plan places something there.
    Fits(Option<NodeAllocUsage>),
    Refused,
}

/// Whether the node, with what the plan stops, preempts and places on it, still fits. Starts
/// from the node's usage the state store keeps (or the batch's overlay), so the cost is that of
/// the plan, not of every allocation on the node.
fn fits_node(
    snap: &StateSnapshot,
    overlay: &UsageOverlay,
    node_id: &str,
    stops: Option<&Vec<Allocation>>,
    preempts: Option<&Vec<Allocation>>,
    places: Option<&Vec<Allocation>>,
) -> Fit {
    let Some(places) = places.filter(|p| !p.is_empty()) else {
        return Fit::Fits(None);
    };
    let Some(node) = snap.node(node_id) else {
        return Fit::Refused;
    };
    if !node.ready() {
        return Fit::Refused;
    }
    let mut usage = overlay.usage(snap, node_id);
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
    if usage_fits(&node, &usage).is_ok() {
        Fit::Fits(Some(usage))
    } else {
        Fit::Refused
    }
}

/// At most this many queued plans go into one log entry.
const MAX_PLANS_PER_ENTRY: usize = 64;

/// What one accepted plan commits, and who waits for it.
struct Committing {
    reply: oneshot::Sender<Result<PlanResult, String>>,
    result: PlanResult,
    part: Option<PlanCommit>,
}

/// Runs until the channel closes: applies plans in order. Plans that queued up while the
/// previous entry was committing are checked one after the other against the newest state plus
/// the batch's own placements, and committed together as one log entry (one fsync).
pub(crate) async fn run_plan_applier(inner: Arc<Inner>, mut rx: mpsc::Receiver<PlanRequest>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_PLANS_PER_ENTRY {
            match rx.try_recv() {
                Ok(req) => batch.push(req),
                Err(_) => break,
            }
        }
        // Plans from a leadership that ended must not be committed by a server that merely
        // stopped leading (the propose would fail anyway); refuse them up front.
        if !inner.is_leader() {
            for req in batch {
                let _ = req.reply.send(Err("not the leader: plan refused".into()));
            }
            continue;
        }
        let snap = inner.state.snapshot();
        let mut overlay = UsageOverlay::default();
        let mut committing = Vec::with_capacity(batch.len());
        for req in batch {
            let result = evaluate_plan_over(&snap, &mut overlay, &req.plan);
            let part = plan_commit(&snap, &req.plan, &result);
            committing.push(Committing {
                reply: req.reply,
                result,
                part,
            });
        }
        let parts: Vec<&PlanCommit> = committing.iter().filter_map(|c| c.part.as_ref()).collect();
        let outcome = match parts.len() {
            0 => Ok(0),
            1 => inner.apply(parts[0].entry()).await,
            _ => {
                let plans = parts.iter().map(|p| p.results.clone()).collect();
                inner.apply(LogEntry::PlanResultsBatch { plans }).await
            }
        };
        match outcome {
            Ok(index) => {
                if parts.iter().any(|p| p.frees_capacity) {
                    inner.unblock_evals();
                }
                for c in committing {
                    let mut result = c.result;
                    if let Some(part) = c.part {
                        result.alloc_index = index;
                        if result.refresh_index != 0 {
                            result.refresh_index = index;
                        }
                        for mut e in part.results.evals {
                            e.modify_index = index;
                            inner.enqueue_when_due(e);
                        }
                    }
                    let _ = c.reply.send(Ok(result));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for c in committing {
                    let _ = c.reply.send(Err(message.clone()));
                }
            }
        }
    }
}

/// The log entry part of one plan's result; `None` when it changes nothing.
struct PlanCommit {
    results: PlanResultsPart,
    frees_capacity: bool,
}

impl PlanCommit {
    fn entry(&self) -> LogEntry {
        let p = self.results.clone();
        LogEntry::PlanResults {
            job: p.job,
            stopped: p.stopped,
            placed: p.placed,
            evals: p.evals,
        }
    }
}

fn plan_commit(snap: &StateSnapshot, plan: &Plan, result: &PlanResult) -> Option<PlanCommit> {
    let stopped: Vec<Allocation> = result
        .node_update
        .values()
        .chain(result.node_preemptions.values())
        .flatten()
        .cloned()
        .collect();
    // Jobs that lost allocations to preemption are evaluated again, as in Nomad.
    let evals: Vec<drover_structs::Evaluation> = {
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
        return None;
    }
    let job = plan
        .job
        .as_ref()
        .map(|j| (j.namespace.clone(), j.id.clone(), j.version));
    Some(PlanCommit {
        frees_capacity: !stopped.is_empty(),
        results: PlanResultsPart {
            job,
            stopped,
            placed,
            evals,
        },
    })
}

/// Counts of a result, for logs.
pub fn result_counts(r: &PlanResult) -> (usize, usize) {
    let count = |m: &BTreeMap<String, Vec<Allocation>>| m.values().map(Vec::len).sum();
    (count(&r.node_allocation), count(&r.node_update))
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_scheduler::harness::{NodeBuilder, mock_alloc, mock_job};
    use drover_state::StateStore;

    /// A node with room for exactly one 500 MHz / 256 MB allocation of `mock_job`.
    fn store_with_small_node() -> (StateStore, drover_structs::Node) {
        let store = StateStore::new();
        let node = NodeBuilder::new().resources(700, 400).build();
        store.upsert_node(1, node.clone());
        (store, node)
    }

    fn plan_placing(node: &drover_structs::Node) -> Plan {
        let job = Arc::new(mock_job());
        let mut plan = Plan {
            job: Some(job.clone()),
            ..Default::default()
        };
        plan.node_allocation
            .insert(node.id.clone(), vec![mock_alloc(&job, node, 0)]);
        plan
    }

    #[test]
    fn a_later_plan_of_a_batch_sees_the_placements_of_the_earlier_ones() {
        let (store, node) = store_with_small_node();
        let snap = store.snapshot();
        let mut overlay = UsageOverlay::default();
        let first = evaluate_plan_over(&snap, &mut overlay, &plan_placing(&node));
        assert_eq!(result_counts(&first), (1, 0));
        assert_eq!(first.refresh_index, 0);
        let second = evaluate_plan_over(&snap, &mut overlay, &plan_placing(&node));
        assert_eq!(
            result_counts(&second),
            (0, 0),
            "the node is full after the first"
        );
        assert_ne!(second.refresh_index, 0, "the scheduler is told to refresh");
    }

    #[test]
    fn plans_evaluated_alone_each_fit_the_empty_node() {
        let (store, node) = store_with_small_node();
        let snap = store.snapshot();
        assert_eq!(
            result_counts(&evaluate_plan(&snap, &plan_placing(&node))),
            (1, 0)
        );
        assert_eq!(
            result_counts(&evaluate_plan(&snap, &plan_placing(&node))),
            (1, 0)
        );
    }

    #[test]
    fn a_refused_all_at_once_plan_leaves_nothing_in_the_overlay() {
        let (store, node) = store_with_small_node();
        let snap = store.snapshot();
        let mut overlay = UsageOverlay::default();
        let mut greedy = plan_placing(&node);
        greedy.all_at_once = true;
        let job = greedy.job.clone().unwrap();
        greedy
            .node_allocation
            .get_mut(&node.id)
            .unwrap()
            .push(mock_alloc(&job, &node, 1));
        let refused = evaluate_plan_over(&snap, &mut overlay, &greedy);
        assert_eq!(result_counts(&refused), (0, 0));
        let after = evaluate_plan_over(&snap, &mut overlay, &plan_placing(&node));
        assert_eq!(result_counts(&after), (1, 0));
    }

    #[test]
    fn a_batch_entry_round_trips_through_the_log_encoding() {
        let (_, node) = store_with_small_node();
        let plan = plan_placing(&node);
        let part = PlanResultsPart {
            job: Some(("default".into(), "j".into(), 0)),
            stopped: vec![],
            placed: plan.node_allocation[&node.id].clone(),
            evals: vec![],
        };
        let entry = LogEntry::PlanResultsBatch {
            plans: vec![part.clone(), part],
        };
        match LogEntry::decode(&entry.encode()).unwrap() {
            LogEntry::PlanResultsBatch { plans } => assert_eq!(plans.len(), 2),
            other => panic!("decoded as {other:?}"),
        }
    }
}
