//! The plan applier: the only writer of allocations. It takes plans one at a time, re-checks
//! every node of a plan against the newest state (another worker may have placed there since the
//! scheduler took its snapshot), commits the part that still fits through Raft, and tells the
//! scheduler to refresh and retry the rest.

use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    let verdict = evaluate_plan_over(snap, &mut UsageOverlay::default(), plan);
    verdict.result_stubs(plan)
}

/// Node usage as it will be once the plans accepted earlier in the same batch are committed:
/// the snapshot does not show them yet, so later plans of the batch are checked against this.
#[derive(Default)]
pub struct UsageOverlay {
    nodes: HashMap<String, NodeAllocUsage>,
    /// Allocations whose stored version earlier plans of the batch already took out of
    /// `nodes` (stopped, preempted, updated in place): the snapshot still shows them, and
    /// taking one out twice would undercount its node.
    removed: std::collections::HashSet<String>,
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

/// What the applier decided about one plan: which nodes' placements (and the preemptions that
/// go with them) are committed, and whether the scheduler must refresh. Stops are committed on
/// every node unless an all-at-once plan was refused.
#[derive(Debug, Default)]
pub struct PlanVerdict {
    /// Nodes whose placements and preemptions fit.
    placing_nodes: BTreeSet<String>,
    /// An all-at-once plan did not fit everywhere: nothing is committed.
    nothing: bool,
    /// Non-zero when part of the plan was refused.
    refresh_index: u64,
}

impl PlanVerdict {
    fn commits_stops(&self) -> bool {
        !self.nothing
    }

    fn commits_node(&self, node_id: &str) -> bool {
        !self.nothing && self.placing_nodes.contains(node_id)
    }

    /// The result the scheduler is told: what was committed, as stubs (ID, Name, Namespace,
    /// JobID, TaskGroup, NodeID): the full allocations went to the log, and the scheduler
    /// needs no more than which of its allocations made it.
    pub fn result_stubs(&self, plan: &Plan) -> PlanResult {
        let stubs = |m: &BTreeMap<String, Vec<Allocation>>, keep: &dyn Fn(&str) -> bool| {
            m.iter()
                .filter(|(node, allocs)| keep(node) && !allocs.is_empty())
                .map(|(node, allocs)| (node.clone(), allocs.iter().map(stub).collect()))
                .collect()
        };
        PlanResult {
            node_update: stubs(&plan.node_update, &|_| self.commits_stops()),
            node_allocation: stubs(&plan.node_allocation, &|n| self.commits_node(n)),
            node_preemptions: stubs(&plan.node_preemptions, &|n| self.commits_node(n)),
            refresh_index: self.refresh_index,
            alloc_index: 0,
        }
    }
}

/// What the scheduler needs to know of a committed allocation.
fn stub(a: &Allocation) -> Allocation {
    Allocation {
        id: a.id.clone(),
        name: a.name.clone(),
        namespace: a.namespace.clone(),
        job_id: a.job_id.clone(),
        task_group: a.task_group.clone(),
        node_id: a.node_id.clone(),
        ..Default::default()
    }
}

/// As [`evaluate_plan`], against `snap` plus what earlier plans of the batch committed to
/// `overlay`; records this plan's accepted changes in `overlay`.
pub fn evaluate_plan_over(
    snap: &StateSnapshot,
    overlay: &mut UsageOverlay,
    plan: &Plan,
) -> PlanVerdict {
    let mut verdict = PlanVerdict::default();
    let mut refused = false;
    let mut accepted: Vec<(String, NodeAllocUsage)> = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    let nodes: BTreeSet<&String> = plan
        .node_allocation
        .keys()
        .chain(plan.node_preemptions.keys())
        .collect();
    for node_id in nodes {
        let stops = plan.node_update.get(node_id);
        let places = plan.node_allocation.get(node_id);
        let preempts = plan.node_preemptions.get(node_id);
        match fits_node(snap, overlay, node_id, stops, preempts, places) {
            Fit::Fits(usage) => {
                verdict.placing_nodes.insert(node_id.clone());
                if let Some((u, gone)) = usage {
                    accepted.push((node_id.clone(), u));
                    removed.extend(gone);
                }
            }
            Fit::Refused => refused = true,
        }
    }
    if refused {
        if plan.all_at_once {
            verdict.nothing = true;
            accepted.clear();
            removed.clear();
        }
        verdict.refresh_index = snap.latest_index().max(1);
    }
    // Stops that placed nothing leave the overlay alone: counting their freed capacity early
    // could only make a later plan of the batch look tighter than it is, never overcommit.
    overlay.nodes.extend(accepted);
    overlay.removed.extend(removed);
    verdict
}

enum Fit {
    /// Fits; with the node's usage after the plan, and the allocations whose stored version
    /// it took out, when the plan places something there.
    Fits(Option<(NodeAllocUsage, Vec<String>)>),
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
    // Nomad's isValidForDisconnectedNode: a disconnected node takes only the scheduler's
    // marking of its allocations as unknown, which changes nothing it holds.
    if node.status == drover_structs::NODE_STATUS_DISCONNECTED {
        return if places
            .iter()
            .all(|a| a.client_status == drover_structs::ALLOC_CLIENT_UNKNOWN)
        {
            Fit::Fits(None)
        } else {
            Fit::Refused
        };
    }
    if !node.ready() {
        return Fit::Refused;
    }
    let mut usage = overlay.usage(snap, node_id);
    let mut gone = Vec::new();
    let leaving = stops
        .into_iter()
        .flatten()
        .chain(preempts.into_iter().flatten())
        .chain(places.iter());
    for a in leaving {
        // The stored version is what the usage counted (in-place updates replace it). A new
        // placement (never stored, so `CreateIndex` 0) has none: no lookup among the
        // million allocations a large cluster holds.
        if a.create_index == 0 && a.modify_index == 0 {
            continue;
        }
        if overlay.removed.contains(&a.id) {
            continue;
        }
        if let Some(existing) = snap.alloc(&a.id)
            && existing.node_id == node_id
        {
            usage.remove(&existing);
            gone.push(a.id.clone());
        }
    }
    for a in places {
        usage.add(a);
    }
    if usage_fits(&node, &usage).is_ok() {
        Fit::Fits(Some((usage, gone)))
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
    /// Part of the entry being proposed.
    committed: bool,
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
        let evaluating = std::time::Instant::now();
        let snap = inner.state.snapshot();
        let mut overlay = UsageOverlay::default();
        let mut committing = Vec::with_capacity(batch.len());
        for req in batch {
            let verdict = evaluate_plan_over(&snap, &mut overlay, &req.plan);
            let result = verdict.result_stubs(&req.plan);
            let part = plan_commit(&snap, req.plan, &verdict);
            committing.push(Committing {
                reply: req.reply,
                result,
                part,
                committed: false,
            });
        }
        crate::metrics::record_time("nomad.nomad.plan.evaluate", evaluating.elapsed());
        let frees_capacity = committing
            .iter()
            .any(|c| c.part.as_ref().is_some_and(|p| p.frees_capacity));
        // The evaluations an entry creates are enqueued once it is applied; the entry itself
        // moves into the log (and, here, straight into the FSM) without a copy.
        let mut evals = Vec::new();
        let mut parts = Vec::new();
        for c in committing.iter_mut() {
            if let Some(part) = c.part.take() {
                evals.extend(part.results.evals.iter().cloned());
                parts.push(part.results);
                c.committed = true;
            }
        }
        let entry = match <[PlanResultsPart; 1]>::try_from(parts) {
            Ok([p]) => Some(LogEntry::PlanResults {
                job: p.job,
                stopped: p.stopped,
                placed: p.placed,
                evals: p.evals,
                deployment: p.deployment,
                deployment_updates: p.deployment_updates,
                at: p.at,
            }),
            Err(parts) if parts.is_empty() => None,
            Err(parts) => Some(LogEntry::PlanResultsBatch { plans: parts }),
        };
        let applying = std::time::Instant::now();
        let outcome = match entry {
            Some(entry) => inner.apply_kept(entry).await,
            None => Ok(0),
        };
        crate::metrics::record_time("nomad.nomad.plan.apply", applying.elapsed());
        match outcome {
            Ok(index) => {
                if frees_capacity {
                    inner.unblock_evals();
                }
                for mut e in evals {
                    e.modify_index = index;
                    inner.enqueue_when_due(e);
                }
                for c in committing {
                    let mut result = c.result;
                    if c.committed {
                        result.alloc_index = index;
                        if result.refresh_index != 0 {
                            result.refresh_index = index;
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

/// The log entry part of one plan's result.
struct PlanCommit {
    results: PlanResultsPart,
    frees_capacity: bool,
}

/// Moves what `verdict` commits of `plan` into a log entry part; `None` when it changes
/// nothing.
fn plan_commit(snap: &StateSnapshot, plan: Plan, verdict: &PlanVerdict) -> Option<PlanCommit> {
    let job = plan
        .job
        .as_ref()
        .map(|j| (j.namespace.clone(), j.id.clone(), j.version));
    let committed = |m: BTreeMap<String, Vec<Allocation>>| {
        m.into_iter()
            .filter(|(node, _)| verdict.commits_node(node))
            .flat_map(|(_, allocs)| allocs)
            .collect::<Vec<_>>()
    };
    let preempted = committed(plan.node_preemptions);
    // Jobs that lost allocations to preemption are evaluated again, as in Nomad.
    let evals: Vec<drover_structs::Evaluation> = {
        let mut seen = BTreeSet::new();
        preempted
            .iter()
            .filter(|a| seen.insert((a.namespace.clone(), a.job_id.clone())))
            .filter_map(|a| snap.job(&a.namespace, &a.job_id))
            .map(|job| drover_structs::Evaluation::for_job(&job, "preemption"))
            .collect()
    };
    let mut stopped: Vec<Allocation> = if verdict.commits_stops() {
        plan.node_update.into_values().flatten().collect()
    } else {
        Vec::new()
    };
    stopped.extend(preempted);
    let mut placed = committed(plan.node_allocation);
    for a in &mut placed {
        // The entry names the job version once; the FSM links it back.
        a.job = None;
    }
    // The deployment is committed even when no placement is (as Nomad's plan result keeps
    // it): placements that commit join it, and a retry or a blocked evaluation finds it as
    // the version's deployment, which the evaluation already names.
    let deployment = plan.deployment;
    let deployment_updates = plan.deployment_updates;
    if stopped.is_empty()
        && placed.is_empty()
        && deployment.is_none()
        && deployment_updates.is_empty()
    {
        return None;
    }
    Some(PlanCommit {
        frees_capacity: !stopped.is_empty(),
        results: PlanResultsPart {
            job,
            stopped,
            placed,
            evals,
            deployment,
            deployment_updates,
            at: drover_structs::time::now_nanos(),
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

    /// What the scheduler is told of a verdict: (placed, stopped).
    fn counts(verdict: &PlanVerdict, plan: &Plan) -> (usize, usize) {
        result_counts(&verdict.result_stubs(plan))
    }

    #[test]
    fn a_later_plan_of_a_batch_sees_the_placements_of_the_earlier_ones() {
        let (store, node) = store_with_small_node();
        let snap = store.snapshot();
        let mut overlay = UsageOverlay::default();
        let plan = plan_placing(&node);
        let first = evaluate_plan_over(&snap, &mut overlay, &plan);
        assert_eq!(counts(&first, &plan), (1, 0));
        assert_eq!(first.refresh_index, 0);
        let plan = plan_placing(&node);
        let second = evaluate_plan_over(&snap, &mut overlay, &plan);
        assert_eq!(
            counts(&second, &plan),
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
        assert_eq!(counts(&refused, &greedy), (0, 0));
        assert!(plan_commit(&snap, greedy, &refused).is_none());
        let plan = plan_placing(&node);
        let after = evaluate_plan_over(&snap, &mut overlay, &plan);
        assert_eq!(counts(&after, &plan), (1, 0));
    }

    #[test]
    fn an_allocation_stopped_by_an_earlier_plan_is_not_taken_out_of_its_node_twice() {
        let (store, node) = store_with_small_node();
        let job = Arc::new(mock_job());
        store.upsert_job(2, (*job).clone());
        let running = mock_alloc(&job, &node, 0);
        store.upsert_plan_results(3, Some(job.clone()), vec![], vec![running.clone()], vec![]);
        let stored = store.snapshot().alloc(&running.id).unwrap();
        assert_ne!(stored.create_index, 0);
        // Two plans each stop the running allocation and place one in its room; the snapshot
        // shows it running to both (both are checked in one batch).
        let replacing = |i| {
            let mut plan = Plan {
                job: Some(job.clone()),
                ..Default::default()
            };
            plan.append_stop(&stored, "replaced", None);
            plan.node_allocation
                .insert(node.id.clone(), vec![mock_alloc(&job, &node, i)]);
            plan
        };
        let snap = store.snapshot();
        let mut overlay = UsageOverlay::default();
        let first = replacing(1);
        assert_eq!(
            counts(&evaluate_plan_over(&snap, &mut overlay, &first), &first),
            (1, 1)
        );
        let second = replacing(2);
        let verdict = evaluate_plan_over(&snap, &mut overlay, &second);
        assert_eq!(
            counts(&verdict, &second).0,
            0,
            "the room was freed once and is taken"
        );
        assert_ne!(verdict.refresh_index, 0);
    }

    #[test]
    fn the_commit_carries_the_allocations_without_their_job_and_the_result_only_stubs() {
        let (store, node) = store_with_small_node();
        let snap = store.snapshot();
        let plan = plan_placing(&node);
        let placed = plan.node_allocation[&node.id][0].clone();
        let verdict = evaluate_plan(&snap, &plan);
        let stub = &verdict.node_allocation[&node.id][0];
        assert_eq!(
            (&stub.id, &stub.task_group),
            (&placed.id, &placed.task_group)
        );
        assert!(stub.metrics.is_none() && stub.allocated_resources.is_none());
        let verdict = evaluate_plan_over(&snap, &mut UsageOverlay::default(), &plan);
        let commit = plan_commit(&snap, plan, &verdict).expect("the placement commits");
        let mut want = placed;
        want.job = None;
        assert_eq!(commit.results.placed, vec![want]);
        assert!(!commit.frees_capacity);
    }

    /// The leader applies the plan entries it proposed without decoding them
    /// (`crate::proposed`): that is only sound if decoding gives back exactly what was encoded,
    /// for allocations as the scheduler builds them (metrics with score metadata, ports,
    /// resources) and for stops and preemptions.
    #[test]
    fn plan_entries_built_by_the_scheduler_decode_to_exactly_themselves() {
        use drover_scheduler::harness::{Harness, register_eval};
        let mut h = Harness::new();
        for i in 0..6 {
            h.upsert_node(NodeBuilder::new().name(&format!("n{i}")).build());
        }
        let mut job = mock_job();
        job.task_groups[0].count = 8;
        job.task_groups[0].tasks[0].resources.networks =
            Some(vec![drover_structs::NetworkResource {
                dynamic_ports: Some(vec![drover_structs::Port {
                    label: "http".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }]);
        let job = h.upsert_job(job);
        h.process(&register_eval(&job)).unwrap();
        let plan = h.plans.last().unwrap().clone();
        let mut stop = plan
            .node_allocation
            .values()
            .flatten()
            .next()
            .unwrap()
            .clone();
        stop.desired_status = drover_structs::ALLOC_DESIRED_STOP.into();
        let part = PlanResultsPart {
            job: Some((job.namespace.clone(), job.id.clone(), job.version)),
            stopped: vec![stop],
            placed: plan
                .node_allocation
                .into_values()
                .flatten()
                .map(|mut a| {
                    a.job = None;
                    a
                })
                .collect(),
            evals: vec![drover_structs::Evaluation::for_job(&job, "preemption")],
            deployment: None,
            deployment_updates: Vec::new(),
            at: 0,
        };
        assert!(part.placed.iter().all(|a| {
            a.metrics
                .as_ref()
                .is_some_and(|m| m.score_meta_data.is_some())
        }));
        for entry in [
            LogEntry::PlanResultsBatch {
                plans: vec![part.clone(), part.clone()],
            },
            LogEntry::PlanResults {
                job: part.job,
                stopped: part.stopped,
                placed: part.placed,
                evals: part.evals,
                deployment: None,
                deployment_updates: Vec::new(),
                at: 0,
            },
        ] {
            assert_eq!(LogEntry::decode(&entry.encode()).unwrap(), entry);
        }
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
            deployment: None,
            deployment_updates: Vec::new(),
            at: 0,
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
