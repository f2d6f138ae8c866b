//! System and sysbatch scheduler scenarios, as tables of (cluster, job, expected outcome)
//! driven through the harness.

use std::collections::BTreeSet;
use std::sync::Arc;

use drover_scheduler::State;
use drover_scheduler::harness::{
    Harness, NodeBuilder, mock_alloc, mock_job, mock_node, mock_sysbatch_job, mock_system_job,
    register_eval,
};
use drover_structs::{
    ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST, ALLOC_CLIENT_RUNNING,
    Allocation, EVAL_STATUS_BLOCKED, EVAL_STATUS_COMPLETE, Evaluation, Job, NODE_STATUS_DOWN, Node,
    Resources, TRIGGER_NODE_UPDATE,
};

fn linux() -> Node {
    mock_node()
}

fn windows() -> Node {
    NodeBuilder::new().attr("kernel.name", "windows").build()
}

fn small() -> Node {
    NodeBuilder::new().resources(400, 400).build()
}

fn node_update_eval(job: &Job, node: &Node) -> Evaluation {
    let mut e = Evaluation::for_job(job, TRIGGER_NODE_UPDATE);
    e.node_id = node.id.clone();
    e
}

/// Marks the allocation as reported by its client.
fn set_client_status(h: &mut Harness, a: &Allocation, status: &str) {
    let mut a = h
        .state
        .alloc(&a.id)
        .map(|a| (*a).clone())
        .unwrap_or(a.clone());
    a.client_status = status.to_string();
    h.upsert_alloc(a);
}

fn nodes_of(allocs: &[Arc<Allocation>]) -> BTreeSet<String> {
    allocs.iter().map(|a| a.node_id.clone()).collect()
}

fn ids(nodes: &[Arc<Node>]) -> BTreeSet<String> {
    nodes.iter().map(|n| n.id.clone()).collect()
}

struct Placement {
    name: &'static str,
    cluster: Vec<Node>,
    job: fn() -> Job,
    /// Indexes of the nodes that get an allocation.
    placed_on: Vec<usize>,
    queued: i64,
    /// Whether a failed placement is reported for the group.
    failed: bool,
    blocked: bool,
}

#[test]
fn system_jobs_place_once_on_every_feasible_node() {
    let cases = vec![
        Placement {
            name: "one per linux node, windows filtered",
            cluster: vec![linux(), windows(), linux(), windows(), linux()],
            job: mock_system_job,
            placed_on: vec![0, 2, 4],
            queued: 0,
            failed: false,
            blocked: false,
        },
        Placement {
            name: "a count above 1 still places once per node",
            cluster: vec![linux(), linux()],
            job: || {
                let mut j = mock_sysbatch_job();
                j.task_groups[0].count = 3;
                j
            },
            placed_on: vec![0, 1],
            queued: 0,
            failed: false,
            blocked: false,
        },
        Placement {
            name: "count 0 places nothing",
            cluster: vec![linux(), linux()],
            job: || {
                let mut j = mock_system_job();
                j.task_groups[0].count = 0;
                j
            },
            placed_on: vec![],
            queued: 0,
            failed: false,
            blocked: false,
        },
        Placement {
            name: "no node can run it: reported with the filter counts, nothing blocked",
            cluster: vec![windows(), windows()],
            job: mock_system_job,
            placed_on: vec![],
            queued: 0,
            failed: true,
            blocked: false,
        },
        Placement {
            name: "a full node is a failed placement and blocks",
            cluster: vec![linux(), small()],
            job: mock_sysbatch_job,
            placed_on: vec![0],
            queued: 1,
            failed: true,
            blocked: true,
        },
        Placement {
            name: "nodes outside the datacenters or not ready get nothing",
            cluster: vec![
                linux(),
                NodeBuilder::new().datacenter("dc2").build(),
                NodeBuilder::new().status("initializing").build(),
            ],
            job: mock_system_job,
            placed_on: vec![0],
            queued: 0,
            failed: false,
            blocked: false,
        },
    ];
    for c in cases {
        let mut h = Harness::new();
        // The sysbatch job's priority is too low to preempt anything.
        let nodes: Vec<Arc<Node>> = c.cluster.into_iter().map(|n| h.upsert_node(n)).collect();
        let job = h.upsert_job((c.job)());
        h.process(&register_eval(&job)).unwrap();
        let live = h.live_allocs(&job);
        let want: BTreeSet<String> = c.placed_on.iter().map(|i| nodes[*i].id.clone()).collect();
        assert_eq!(nodes_of(&live), want, "{}", c.name);
        assert_eq!(live.len(), want.len(), "{}: one per node", c.name);
        let e = h.last_eval().unwrap();
        assert_eq!(e.status, EVAL_STATUS_COMPLETE, "{}", c.name);
        let group = &job.task_groups[0].name;
        assert_eq!(
            e.queued_allocations.as_ref().unwrap()[group],
            c.queued,
            "{}: queued",
            c.name
        );
        assert_eq!(
            e.failed_tg_allocs
                .as_ref()
                .is_some_and(|m| m.contains_key(group)),
            c.failed,
            "{}: failed placements",
            c.name
        );
        let blocked = h
            .created_evals
            .iter()
            .any(|b| b.status == EVAL_STATUS_BLOCKED);
        assert_eq!(blocked, c.blocked, "{}: blocked eval", c.name);
        for a in &live {
            assert_eq!(a.name, format!("{}.{}[0]", job.name, group), "{}", c.name);
            let m = a.metrics.as_ref().unwrap();
            assert_eq!(m.nodes_evaluated, 1, "{}: one node per placement", c.name);
            let meta = m.score_meta_data.as_ref().unwrap();
            assert_eq!(
                meta[0].scores.keys().collect::<Vec<_>>(),
                ["binpack"],
                "{}: the system stack only bin-packs",
                c.name
            );
        }
    }
}

#[test]
fn filtered_nodes_are_reported_only_when_no_node_fits() {
    let mut h = Harness::new();
    for _ in 0..3 {
        h.upsert_node(windows());
    }
    let job = h.upsert_job(mock_system_job());
    h.process(&register_eval(&job)).unwrap();
    let e = h.last_eval().unwrap();
    let m = &e.failed_tg_allocs.as_ref().unwrap()["web"];
    assert_eq!(m.nodes_evaluated, 3);
    assert_eq!(m.nodes_filtered, 3);
    let cf = m.constraint_filtered.as_ref().unwrap();
    // The first node checks the constraint, the other two share its class's verdict.
    assert_eq!(cf["${attr.kernel.name} = linux"], 1);
    assert_eq!(cf["computed class ineligible"], 2);
}

/// A change to the cluster or the allocations after the job was placed, and what the next
/// evaluation does about it.
struct Change {
    name: &'static str,
    job: fn() -> Job,
    /// Applied after the first evaluation placed the job on three Linux nodes.
    change: fn(&mut Harness, &[Arc<Node>], &Arc<Job>) -> Evaluation,
    /// The job's live allocations afterwards, by node index (3 is a node the change added).
    live_on: Vec<usize>,
    /// Descriptions of the stops in the last plan (empty: no stop).
    stops: Vec<&'static str>,
}

fn first_alloc_on(h: &Harness, job: &Job, node: &Node) -> Arc<Allocation> {
    h.state
        .allocs_by_job(&job.namespace, &job.id)
        .into_iter()
        .find(|a| a.node_id == node.id && !a.terminal())
        .expect("an allocation on the node")
}

#[test]
fn system_jobs_follow_the_cluster() {
    let cases = vec![
        Change {
            name: "a node joins: only it gets an allocation",
            job: mock_system_job,
            change: |h, _, job| {
                let n = h.upsert_node(linux());
                node_update_eval(job, &n)
            },
            live_on: vec![0, 1, 2, 3],
            stops: vec![],
        },
        Change {
            name: "a node goes down: its allocation is lost, not replaced",
            job: mock_system_job,
            change: |h, nodes, job| {
                let mut n = (*nodes[1]).clone();
                n.status = NODE_STATUS_DOWN.into();
                let n = h.upsert_node(n);
                node_update_eval(job, &n)
            },
            live_on: vec![0, 2],
            stops: vec!["alloc is lost since its node is down"],
        },
        Change {
            name: "a drained node's allocation marked for migration is stopped, not replaced",
            job: mock_system_job,
            change: |h, nodes, job| {
                let mut a = (*first_alloc_on(h, job, &nodes[2])).clone();
                a.desired_transition.migrate = Some(true);
                h.upsert_alloc(a);
                let mut n = (*nodes[2]).clone();
                n.drain = true;
                let n = h.upsert_node(n);
                node_update_eval(job, &n)
            },
            live_on: vec![0, 1],
            stops: vec!["system alloc not needed as node is tainted"],
        },
        Change {
            name: "an ineligible node keeps its allocation",
            job: mock_system_job,
            change: |h, nodes, job| {
                let mut n = (*nodes[0]).clone();
                n.scheduling_eligibility = "ineligible".into();
                let n = h.upsert_node(n);
                node_update_eval(job, &n)
            },
            live_on: vec![0, 1, 2],
            stops: vec![],
        },
        Change {
            name: "a node that no longer satisfies the job loses its allocation",
            job: mock_system_job,
            change: |h, nodes, job| {
                let mut n = (*nodes[1]).clone();
                n.attributes.insert("kernel.name".into(), "windows".into());
                n.compute_class();
                let n = h.upsert_node(n);
                node_update_eval(job, &n)
            },
            live_on: vec![0, 2],
            stops: vec!["system alloc not needed as node no longer satisfies the job"],
        },
        Change {
            name: "a system allocation that completed is placed again",
            job: mock_system_job,
            change: |h, nodes, job| {
                let a = first_alloc_on(h, job, &nodes[0]);
                set_client_status(h, &a, ALLOC_CLIENT_COMPLETE);
                register_eval(job)
            },
            live_on: vec![0, 1, 2],
            stops: vec![],
        },
        Change {
            name: "a sysbatch allocation that completed is not placed again",
            job: mock_sysbatch_job,
            change: |h, nodes, job| {
                let a = first_alloc_on(h, job, &nodes[0]);
                set_client_status(h, &a, ALLOC_CLIENT_COMPLETE);
                register_eval(job)
            },
            live_on: vec![1, 2],
            stops: vec![],
        },
        Change {
            name: "a sysbatch allocation that failed is not placed again either",
            job: mock_sysbatch_job,
            change: |h, nodes, job| {
                let a = first_alloc_on(h, job, &nodes[0]);
                set_client_status(h, &a, ALLOC_CLIENT_FAILED);
                register_eval(job)
            },
            live_on: vec![1, 2],
            stops: vec![],
        },
        Change {
            name: "a new sysbatch version runs again where the old one completed",
            job: mock_sysbatch_job,
            change: |h, nodes, job| {
                let a = first_alloc_on(h, job, &nodes[0]);
                set_client_status(h, &a, ALLOC_CLIENT_COMPLETE);
                let mut j = (**job).clone();
                j.task_groups[0].tasks[0].env = Some([("V".to_string(), "2".to_string())].into());
                let j = h.upsert_job(j);
                register_eval(&j)
            },
            live_on: vec![0, 1, 2],
            stops: vec![
                "alloc is being updated due to job update",
                "alloc is being updated due to job update",
                "alloc is being updated due to job update",
            ],
        },
        Change {
            name: "stopping the job stops everything",
            job: mock_system_job,
            change: |h, _, job| {
                let mut j = (**job).clone();
                j.stop = true;
                let j = h.upsert_job(j);
                register_eval(&j)
            },
            live_on: vec![],
            stops: vec![
                "alloc not needed due to job update",
                "alloc not needed due to job update",
                "alloc not needed due to job update",
            ],
        },
    ];
    for c in cases {
        let mut h = Harness::new();
        let nodes: Vec<Arc<Node>> = (0..3).map(|_| h.upsert_node(linux())).collect();
        let job = h.upsert_job((c.job)());
        h.process(&register_eval(&job)).unwrap();
        assert_eq!(h.live_allocs(&job).len(), 3, "{}: first placement", c.name);
        let plans_before = h.plans.len();
        for a in h.live_allocs(&job) {
            set_client_status(&mut h, &a, ALLOC_CLIENT_RUNNING);
        }
        let eval = (c.change)(&mut h, &nodes, &job);
        h.process(&eval).unwrap();
        assert_eq!(
            h.last_eval().unwrap().status,
            EVAL_STATUS_COMPLETE,
            "{}",
            c.name
        );

        let job_now = h.state.job(&job.namespace, &job.id).unwrap();
        let live = h.live_allocs(&job_now);
        let mut all_nodes: Vec<Arc<Node>> = nodes.clone();
        all_nodes.extend(
            h.state
                .nodes()
                .into_iter()
                .filter(|n| !nodes.iter().any(|m| m.id == n.id)),
        );
        let want: BTreeSet<String> = c.live_on.iter().map(|i| all_nodes[*i].id.clone()).collect();
        assert_eq!(nodes_of(&live), want, "{}: live allocations", c.name);
        assert_eq!(live.len(), want.len(), "{}: one per node", c.name);
        let stops: Vec<String> = if h.plans.len() > plans_before {
            let mut v: Vec<String> = h
                .last_plan_stops()
                .iter()
                .map(|s| s.desired_description.clone())
                .collect();
            v.sort();
            v
        } else {
            Vec::new()
        };
        assert_eq!(stops, c.stops, "{}: stops", c.name);
    }
}

#[test]
fn lost_allocations_are_marked_lost() {
    let mut h = Harness::new();
    let nodes: Vec<Arc<Node>> = (0..2).map(|_| h.upsert_node(linux())).collect();
    let job = h.upsert_job(mock_system_job());
    h.process(&register_eval(&job)).unwrap();
    let mut n = (*nodes[0]).clone();
    n.status = NODE_STATUS_DOWN.into();
    h.upsert_node(n);
    h.process(&node_update_eval(&job, &nodes[0])).unwrap();
    let stop = h.last_plan_stops()[0].clone();
    assert_eq!(stop.client_status, ALLOC_CLIENT_LOST);
    assert_eq!(stop.node_id, nodes[0].id);
}

#[test]
fn system_updates_are_in_place_when_only_the_job_version_changed() {
    let mut h = Harness::new();
    for _ in 0..3 {
        h.upsert_node(linux());
    }
    let job = h.upsert_job(mock_system_job());
    h.process(&register_eval(&job)).unwrap();
    let before: BTreeSet<String> = h.live_allocs(&job).iter().map(|a| a.id.clone()).collect();
    let mut j = (*job).clone();
    j.meta = None;
    j.priority = 90;
    let j = h.upsert_job(j);
    h.process(&register_eval(&j)).unwrap();
    let after = h.live_allocs(&j);
    let after_ids: BTreeSet<String> = after.iter().map(|a| a.id.clone()).collect();
    assert_eq!(before, after_ids, "same allocations");
    assert!(
        after
            .iter()
            .all(|a| a.job.as_ref().unwrap().version == j.version)
    );
    assert!(h.last_plan_stops().is_empty());
}

#[test]
fn rolling_system_updates_replace_max_parallel_per_evaluation() {
    let mut h = Harness::new();
    for _ in 0..4 {
        h.upsert_node(linux());
    }
    let job = h.upsert_job(mock_system_job());
    h.process(&register_eval(&job)).unwrap();
    let mut j = (*job).clone();
    j.update.stagger = 30_000_000_000;
    j.update.max_parallel = 2;
    j.task_groups[0].tasks[0].resources = Resources {
        cpu: 600,
        memory_mb: 256,
        ..Default::default()
    };
    let j = h.upsert_job(j);
    let eval = register_eval(&j);
    h.process(&eval).unwrap();
    let live = h.live_allocs(&j);
    let new_version = live
        .iter()
        .filter(|a| a.job.as_ref().unwrap().version == j.version)
        .count();
    assert_eq!(new_version, 2, "two replaced now");
    assert_eq!(live.len(), 4);
    let next = h
        .created_evals
        .iter()
        .find(|e| e.triggered_by == "rolling-update")
        .expect("a follow-up evaluation for the rest");
    assert_eq!(next.wait, 30_000_000_000);
    assert_eq!(h.last_eval().unwrap().next_eval, next.id);
    let next = next.clone();
    h.process(&next).unwrap();
    let updated = h
        .live_allocs(&j)
        .iter()
        .filter(|a| a.job.as_ref().unwrap().version == j.version)
        .count();
    assert_eq!(updated, 4);
}

#[test]
fn system_jobs_preempt_lower_priority_allocations() {
    struct Case {
        name: &'static str,
        /// The priority of the service job filling the node.
        victim_priority: i64,
        /// Whether the configuration lets system jobs preempt.
        enabled: bool,
        preempted: bool,
    }
    let cases = [
        Case {
            name: "priority 50 under a priority 100 system job is preempted",
            victim_priority: 50,
            enabled: true,
            preempted: true,
        },
        Case {
            name: "within 10 priorities nothing is preempted",
            victim_priority: 91,
            enabled: true,
            preempted: false,
        },
        Case {
            name: "preemption turned off for system jobs",
            victim_priority: 50,
            enabled: false,
            preempted: false,
        },
    ];
    for c in cases {
        let mut h = Harness::new();
        h.config.preemption_system = c.enabled;
        let node = h.upsert_node(NodeBuilder::new().resources(1000, 1000).build());
        let mut filler = mock_job();
        filler.priority = c.victim_priority;
        filler.task_groups[0].count = 1;
        filler.task_groups[0].tasks[0].resources = Resources {
            cpu: 800,
            memory_mb: 800,
            ..Default::default()
        };
        let filler = h.upsert_job(filler);
        let victim = mock_alloc(&filler, &node, 0);
        h.upsert_alloc(victim.clone());
        let job = h.upsert_job(mock_system_job());
        h.process(&register_eval(&job)).unwrap();

        let placed = h.live_allocs(&job);
        assert_eq!(placed.len(), usize::from(c.preempted), "{}", c.name);
        let victim_now = h.state.alloc(&victim.id).unwrap();
        if c.preempted {
            let plan = h.plans.last().unwrap();
            let p = &plan.node_preemptions[&node.id][0];
            assert_eq!(p.id, victim.id, "{}", c.name);
            assert_eq!(
                p.desired_description,
                format!("Preempted by alloc ID {}", placed[0].id),
                "{}",
                c.name
            );
            assert_eq!(victim_now.desired_status, "evict", "{}", c.name);
            assert_eq!(
                victim_now.preempted_by_allocation, placed[0].id,
                "{}",
                c.name
            );
            assert_eq!(
                placed[0].preempted_allocations.as_deref(),
                Some(&[victim.id.clone()][..]),
                "{}",
                c.name
            );
            assert_eq!(h.preemption_evals.len(), 1, "{}", c.name);
            assert_eq!(h.preemption_evals[0].job_id, filler.id, "{}", c.name);
        } else {
            assert_eq!(victim_now.desired_status, "run", "{}", c.name);
            assert!(h.preemption_evals.is_empty(), "{}", c.name);
        }
    }
}

#[test]
fn the_system_scheduler_places_only_where_needed_on_large_clusters() {
    let mut h = Harness::new();
    let nodes: Vec<Arc<Node>> = (0..200).map(|_| h.upsert_node(linux())).collect();
    let job = h.upsert_job(mock_system_job());
    h.process(&register_eval(&job)).unwrap();
    assert_eq!(nodes_of(&h.live_allocs(&job)), ids(&nodes));
    // Nothing changed: nothing to do.
    let plans = h.plans.len();
    h.process(&register_eval(&job)).unwrap();
    assert_eq!(h.plans.len(), plans);
}
