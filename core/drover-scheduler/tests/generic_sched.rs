//! Generic scheduler scenarios, driven through the harness like Nomad's scheduler tests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use drover_scheduler::harness::{
    Harness, NodeBuilder, mock_alloc, mock_batch_job, mock_job, mock_node, register_eval,
};
use drover_scheduler::{Algorithm, SchedulerError, State};
use drover_structs::{
    ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST, ALLOC_DESIRED_STOP, Affinity,
    Allocation, Constraint, EVAL_STATUS_BLOCKED, EVAL_STATUS_COMPLETE, EVAL_STATUS_FAILED,
    Evaluation, Job, NODE_STATUS_DOWN, NetworkResource, Port, Resources, TRIGGER_NODE_UPDATE,
};

fn harness_with_nodes(n: usize) -> (Harness, Vec<Arc<drover_structs::Node>>) {
    let mut h = Harness::new();
    let nodes = (0..n).map(|_| h.upsert_node(mock_node())).collect();
    (h, nodes)
}

fn names(allocs: &[Arc<Allocation>]) -> Vec<String> {
    allocs.iter().map(|a| a.name.clone()).collect()
}

fn constraint(l: &str, op: &str, r: &str) -> Constraint {
    Constraint {
        l_target: l.into(),
        operand: op.into(),
        r_target: r.into(),
    }
}

fn eval_for(job: &Job) -> Evaluation {
    register_eval(job)
}

#[test]
fn service_job_places_its_count_across_nodes() {
    let (mut h, nodes) = harness_with_nodes(10);
    let job = h.upsert_job(mock_job());
    h.process(&eval_for(&job)).unwrap();

    assert_eq!(h.plans.len(), 1);
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 10);
    let expected: Vec<String> = (0..10).map(|i| format!("{}.web[{i}]", job.id)).collect();
    assert_eq!(names(&live), expected);
    let node_ids: BTreeSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
    for a in &live {
        assert!(node_ids.contains(a.node_id.as_str()));
        assert_eq!(a.job.as_ref().map(|j| j.version), Some(job.version));
        let ar = a.allocated_resources.as_ref().unwrap();
        assert_eq!(ar.tasks["web"].cpu.cpu_shares, 500);
        assert_eq!(ar.tasks["web"].memory.memory_mb, 256);
        assert_eq!(ar.shared.disk_mb, 150);
        // The legacy fields are derived from the allocated resources when written out.
        let legacy = a.legacy_resource_fields().unwrap();
        assert_eq!(
            (
                legacy.total.cpu,
                legacy.total.memory_mb,
                legacy.total.memory_max_mb,
                legacy.total.disk_mb
            ),
            (500, 256, 256, 150)
        );
        assert_eq!(legacy.shared.disk_mb, 150);
        assert_eq!(legacy.tasks["web"].cpu, 500);
        let json = serde_json::to_value(a.as_ref()).unwrap();
        assert_eq!(json["Resources"]["CPU"], 500);
        assert_eq!(json["TaskResources"]["web"]["MemoryMB"], 256);
        let m = a.metrics.as_ref().unwrap();
        assert_eq!(m.nodes_available.as_ref().unwrap()["dc1"], 10);
        assert!(
            m.nodes_evaluated >= 4,
            "service jobs score ceil(log2(10)) nodes"
        );
        let meta = m.score_meta_data.as_ref().unwrap();
        assert!(!meta.is_empty());
        for k in [
            "binpack",
            "job-anti-affinity",
            "node-reschedule-penalty",
            "node-affinity",
        ] {
            assert!(meta[0].scores.contains_key(k), "missing scorer {k}");
        }
    }
    // Binpack and anti-affinity together: no node gets everything.
    let per_node: BTreeMap<&str, usize> = live.iter().fold(BTreeMap::new(), |mut m, a| {
        *m.entry(a.node_id.as_str()).or_default() += 1;
        m
    });
    assert!(per_node.len() > 1);

    let e = h.last_eval().unwrap();
    assert_eq!(e.status, EVAL_STATUS_COMPLETE);
    assert_eq!(e.queued_allocations.as_ref().unwrap()["web"], 0);
    assert!(e.failed_tg_allocs.is_none());
    assert!(e.blocked_eval.is_empty());
    assert!(h.created_evals.is_empty());
}

#[test]
fn rerunning_a_satisfied_job_changes_nothing() {
    let (mut h, _) = harness_with_nodes(3);
    let job = h.upsert_job(mock_job());
    h.process(&eval_for(&job)).unwrap();
    h.process(&eval_for(&job)).unwrap();
    assert_eq!(
        h.plans.len(),
        1,
        "the second evaluation has nothing to submit"
    );
    assert_eq!(h.last_eval().unwrap().status, EVAL_STATUS_COMPLETE);
    assert_eq!(h.live_allocs(&job).len(), 10);
}

#[test]
fn missing_driver_fails_with_missing_drivers_and_blocks() {
    let mut h = Harness::new();
    for class in ["a", "b", "c"] {
        h.upsert_node(
            NodeBuilder::new()
                .class(class)
                .only_drivers(&["raw_exec"])
                .build(),
        );
    }
    let job = h.upsert_job(mock_job());
    let eval = eval_for(&job);
    h.process(&eval).unwrap();

    assert!(h.plans.is_empty(), "nothing to place, nothing to submit");
    let e = h.last_eval().unwrap();
    assert_eq!(e.status, EVAL_STATUS_COMPLETE);
    let m = &e.failed_tg_allocs.as_ref().unwrap()["web"];
    assert_eq!(m.nodes_evaluated, 3);
    assert_eq!(m.nodes_filtered, 3);
    assert_eq!(
        m.constraint_filtered.as_ref().unwrap()["missing drivers"],
        3
    );
    let classes = m.class_filtered.as_ref().unwrap();
    assert_eq!((classes["a"], classes["b"], classes["c"]), (1, 1, 1));
    assert_eq!(m.coalesced_failures, 9);
    assert_eq!(e.queued_allocations.as_ref().unwrap()["web"], 10);

    assert_eq!(h.created_evals.len(), 1);
    let blocked = &h.created_evals[0];
    assert_eq!(blocked.status, EVAL_STATUS_BLOCKED);
    assert_eq!(blocked.triggered_by, "queued-allocs");
    assert_eq!(blocked.previous_eval, eval.id);
    assert_eq!(blocked.job_id, job.id);
    assert_eq!(e.blocked_eval, blocked.id);
    let elig = blocked.class_eligibility.as_ref().unwrap();
    assert_eq!(elig.len(), 3);
    assert!(elig.values().all(|ok| !ok));
    assert!(!blocked.escaped_computed_class);
}

#[test]
fn constraint_failures_are_counted_by_constraint_text() {
    // Distinct classes: every node is checked.
    let mut h = Harness::new();
    for i in 0..4 {
        h.upsert_node(
            NodeBuilder::new()
                .attr("kernel.name", "windows")
                .attr("rack", &format!("r{i}"))
                .build(),
        );
    }
    let job = h.upsert_job(mock_job());
    h.process(&eval_for(&job)).unwrap();
    let m = &h.last_eval().unwrap().failed_tg_allocs.as_ref().unwrap()["web"];
    assert_eq!(
        m.constraint_filtered.as_ref().unwrap()["${attr.kernel.name} = linux"],
        4
    );
    assert_eq!(m.nodes_filtered, 4);
    assert_eq!(m.class_filtered.as_ref().unwrap()["linux-medium-pci"], 4);
}

#[test]
fn feasibility_is_memoised_per_computed_class() {
    let mut h = Harness::new();
    for _ in 0..4 {
        h.upsert_node(NodeBuilder::new().attr("kernel.name", "windows").build());
    }
    let job = h.upsert_job(mock_job());
    h.process(&eval_for(&job)).unwrap();
    let e = h.last_eval().unwrap();
    let m = &e.failed_tg_allocs.as_ref().unwrap()["web"];
    let cf = m.constraint_filtered.as_ref().unwrap();
    assert_eq!(cf["${attr.kernel.name} = linux"], 1);
    assert_eq!(cf["computed class ineligible"], 3);
    let blocked = &h.created_evals[0];
    assert_eq!(blocked.class_eligibility.as_ref().unwrap().len(), 1);
}

#[test]
fn unique_constraints_escape_class_memoisation() {
    let mut h = Harness::new();
    let target = h.upsert_node(NodeBuilder::new().name("wanted").build());
    for _ in 0..3 {
        h.upsert_node(NodeBuilder::new().name("other").build());
    }
    let mut job = mock_job();
    job.task_groups[0].count = 2;
    job.task_groups[0].constraints = Some(vec![constraint("${node.unique.name}", "=", "wanted")]);
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|a| a.node_id == target.id));
    let m = live[0].metrics.as_ref().unwrap();
    assert!(
        m.constraint_filtered
            .as_ref()
            .is_none_or(|cf| !cf.contains_key("computed class ineligible"))
    );
}

#[test]
fn operators_filter_nodes_by_attributes_and_meta() {
    let mut h = Harness::new();
    let good = h.upsert_node(
        NodeBuilder::new()
            .attr("driver.docker.version", "20.10.7")
            .attr("cpu.numcores", "16")
            .meta("tier", "gold")
            .build(),
    );
    h.upsert_node(
        NodeBuilder::new()
            .attr("driver.docker.version", "18.09.1")
            .attr("cpu.numcores", "4")
            .meta("tier", "silver")
            .build(),
    );
    let mut job = mock_job();
    job.task_groups[0].count = 3;
    job.task_groups[0].tasks[0].constraints = Some(vec![
        constraint("${attr.driver.docker.version}", "version", ">= 19.03, < 21"),
        constraint("${attr.cpu.numcores}", ">", "8"),
        constraint("${meta.tier}", "regexp", "^go"),
        constraint("${meta.tier}", "set_contains_any", "gold,platinum"),
        constraint("${attr.unique.hostname}", "is_not_set", ""),
    ]);
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 3);
    assert!(live.iter().all(|a| a.node_id == good.id));
}

#[test]
fn static_port_collisions_exhaust_nodes_and_dynamic_ports_are_assigned() {
    let (mut h, _) = harness_with_nodes(2);
    let mut job = mock_job();
    job.task_groups[0].count = 3;
    job.task_groups[0].networks = Some(vec![NetworkResource {
        reserved_ports: Some(vec![Port {
            label: "http".into(),
            value: 8080,
            to: 80,
            ..Default::default()
        }]),
        dynamic_ports: Some(vec![Port {
            label: "admin".into(),
            to: -1,
            ..Default::default()
        }]),
        ..Default::default()
    }]);
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();

    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 2, "one per node: port 8080 is taken after that");
    let on: BTreeSet<&str> = live.iter().map(|a| a.node_id.as_str()).collect();
    assert_eq!(on.len(), 2);
    for a in &live {
        let shared = &a.allocated_resources.as_ref().unwrap().shared;
        let ports = shared.ports.as_ref().unwrap();
        let http = ports.iter().find(|p| p.label == "http").unwrap();
        assert_eq!(
            (http.value, http.to, http.host_ip.as_str()),
            (8080, 80, "192.168.0.100")
        );
        let admin = ports.iter().find(|p| p.label == "admin").unwrap();
        assert!((20000..=32000).contains(&admin.value));
        assert_eq!(admin.to, admin.value);
        let net = &shared.networks.as_ref().unwrap()[0];
        assert_eq!(net.ip, "192.168.0.100");
        assert_eq!(net.dynamic_ports.as_ref().unwrap()[0].value, admin.value);
        assert_eq!(
            a.legacy_resource_fields()
                .unwrap()
                .shared
                .networks
                .as_ref()
                .unwrap()
                .len(),
            1
        );
    }
    let e = h.last_eval().unwrap();
    let m = &e.failed_tg_allocs.as_ref().unwrap()["web"];
    assert_eq!(m.nodes_exhausted, 2);
    assert_eq!(
        m.dimension_exhausted.as_ref().unwrap()["network: reserved port collision http=8080"],
        2
    );
    assert_eq!(e.queued_allocations.as_ref().unwrap()["web"], 1);
}

#[test]
fn node_reserved_ports_are_never_handed_out() {
    let mut h = Harness::new();
    h.upsert_node(NodeBuilder::new().reserved_ports("22,8000-8010").build());
    let mut job = mock_job();
    job.task_groups[0].count = 1;
    job.task_groups[0].networks = Some(vec![NetworkResource {
        reserved_ports: Some(vec![Port {
            label: "web".into(),
            value: 8005,
            ..Default::default()
        }]),
        ..Default::default()
    }]);
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    assert!(h.live_allocs(&job).is_empty());
    let m = &h.last_eval().unwrap().failed_tg_allocs.as_ref().unwrap()["web"];
    assert!(
        m.dimension_exhausted
            .as_ref()
            .unwrap()
            .contains_key("network: reserved port collision web=8005")
    );
}

#[test]
fn dynamic_ports_stay_unique_on_a_node() {
    let mut h = Harness::new();
    h.config.min_dynamic_port = 30000;
    h.config.max_dynamic_port = 30004;
    h.upsert_node(mock_node());
    let mut job = mock_job();
    job.task_groups[0].count = 6;
    job.task_groups[0].tasks[0].resources.cpu = 10;
    job.task_groups[0].tasks[0].resources.memory_mb = 10;
    job.task_groups[0].networks = Some(vec![NetworkResource {
        dynamic_ports: Some(vec![Port {
            label: "http".into(),
            ..Default::default()
        }]),
        ..Default::default()
    }]);
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 5, "the range holds five ports");
    let ports: BTreeSet<i64> = live
        .iter()
        .map(|a| {
            a.allocated_resources
                .as_ref()
                .unwrap()
                .shared
                .ports
                .as_ref()
                .unwrap()[0]
                .value
        })
        .collect();
    assert_eq!(ports, (30000..=30004).collect());
    let m = &h.last_eval().unwrap().failed_tg_allocs.as_ref().unwrap()["web"];
    assert_eq!(
        m.dimension_exhausted.as_ref().unwrap()["network: dynamic port selection failed"],
        1
    );
}

#[test]
fn task_network_ports_are_assigned_on_the_node_network() {
    let (mut h, _) = harness_with_nodes(1);
    let mut job = mock_job();
    job.task_groups[0].count = 1;
    job.task_groups[0].tasks[0].resources.networks = Some(vec![NetworkResource {
        mbits: 50,
        dynamic_ports: Some(vec![Port {
            label: "http".into(),
            ..Default::default()
        }]),
        ..Default::default()
    }]);
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let a = &h.live_allocs(&job)[0];
    let net = &a.allocated_resources.as_ref().unwrap().tasks["web"]
        .networks
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        (net.device.as_str(), net.ip.as_str(), net.mbits),
        ("eth0", "192.168.0.100", 50)
    );
    let port = net.dynamic_ports.as_ref().unwrap()[0].value;
    assert!((20000..=32000).contains(&port));
    let legacy = &a.legacy_resource_fields().unwrap().tasks["web"];
    assert_eq!(
        legacy.networks.as_ref().unwrap()[0]
            .dynamic_ports
            .as_ref()
            .unwrap()[0]
            .value,
        port
    );
}

#[test]
fn scaling_down_stops_the_highest_indexes_and_up_fills_the_gaps() {
    let (mut h, _) = harness_with_nodes(5);
    let job = h.upsert_job(mock_job());
    h.process(&eval_for(&job)).unwrap();
    let before: BTreeMap<String, String> = h
        .live_allocs(&job)
        .iter()
        .map(|a| (a.name.clone(), a.id.clone()))
        .collect();

    let mut smaller = (*job).clone();
    smaller.task_groups[0].count = 5;
    let smaller = h.upsert_job(smaller);
    h.process(&eval_for(&smaller)).unwrap();
    let stops = h.last_plan_stops();
    assert_eq!(stops.len(), 5);
    for s in &stops {
        assert_eq!(s.desired_status, ALLOC_DESIRED_STOP);
        assert_eq!(s.desired_description, "alloc not needed due to job update");
    }
    let live = h.live_allocs(&smaller);
    let expected: Vec<String> = (0..5).map(|i| format!("{}.web[{i}]", job.id)).collect();
    assert_eq!(names(&live), expected);
    for a in &live {
        assert_eq!(before[&a.name], a.id, "survivors are updated in place");
        assert_eq!(a.job.as_ref().unwrap().version, smaller.version);
    }

    let mut bigger = (*smaller).clone();
    bigger.task_groups[0].count = 7;
    let bigger = h.upsert_job(bigger);
    h.process(&eval_for(&bigger)).unwrap();
    let live = h.live_allocs(&bigger);
    let expected: Vec<String> = (0..7).map(|i| format!("{}.web[{i}]", job.id)).collect();
    assert_eq!(names(&live), expected);
    assert_eq!(
        h.last_eval().unwrap().queued_allocations.as_ref().unwrap()["web"],
        0
    );
}

#[test]
fn stopping_or_deregistering_a_job_stops_its_allocations() {
    let (mut h, _) = harness_with_nodes(3);
    let job = h.upsert_job(mock_job());
    h.process(&eval_for(&job)).unwrap();

    let mut stopped = (*job).clone();
    stopped.stop = true;
    let stopped = h.upsert_job(stopped);
    h.process(&eval_for(&stopped)).unwrap();
    let stops = h.last_plan_stops();
    assert_eq!(stops.len(), 10);
    assert!(
        stops
            .iter()
            .all(|s| s.desired_description == "alloc not needed due to job update")
    );
    assert!(h.last_plan_allocs().is_empty());
    assert!(h.live_allocs(&job).is_empty());
    let e = h.last_eval().unwrap();
    assert_eq!(e.status, EVAL_STATUS_COMPLETE);
    assert_eq!(e.queued_allocations.as_ref().unwrap()["web"], 0);

    // A job that no longer exists: its allocations are stopped all the same.
    let mut h2 = Harness::new();
    let node = h2.upsert_node(mock_node());
    let ghost = Arc::new(mock_job());
    for i in 0..2 {
        h2.upsert_alloc(mock_alloc(&ghost, &node, i));
    }
    let eval = Evaluation {
        triggered_by: "job-deregister".into(),
        ..eval_for(&ghost)
    };
    h2.process(&eval).unwrap();
    assert_eq!(h2.last_plan_stops().len(), 2);
    assert!(
        h2.plans[0].job.is_some(),
        "the plan carries the stopped allocations' job"
    );
    assert_eq!(h2.last_eval().unwrap().status, EVAL_STATUS_COMPLETE);
}

#[test]
fn changed_task_config_replaces_allocations_destructively() {
    let (mut h, _) = harness_with_nodes(10);
    let job = h.upsert_job(mock_job());
    h.process(&eval_for(&job)).unwrap();
    let before: BTreeMap<String, String> = h
        .live_allocs(&job)
        .iter()
        .map(|a| (a.name.clone(), a.id.clone()))
        .collect();

    let mut changed = (*job).clone();
    changed.task_groups[0].tasks[0].config = Some(
        [("command".to_string(), serde_json::json!("/bin/true"))]
            .into_iter()
            .collect(),
    );
    let changed = h.upsert_job(changed);
    h.process(&eval_for(&changed)).unwrap();

    let stops = h.last_plan_stops();
    assert_eq!(stops.len(), 10);
    assert!(
        stops
            .iter()
            .all(|s| s.desired_description == "alloc is being updated due to job update")
    );
    let live = h.live_allocs(&changed);
    assert_eq!(live.len(), 10);
    for a in &live {
        let old = &before[&a.name];
        assert_ne!(&a.id, old);
        assert_eq!(&a.previous_allocation, old);
        assert_eq!(a.job.as_ref().unwrap().version, changed.version);
        assert_eq!(h.state.alloc(old).unwrap().next_allocation, a.id);
    }
}

#[test]
fn unchanged_spec_with_a_new_version_updates_in_place() {
    let (mut h, _) = harness_with_nodes(4);
    let job = h.upsert_job(mock_job());
    h.process(&eval_for(&job)).unwrap();
    let before: BTreeSet<String> = h.live_allocs(&job).iter().map(|a| a.id.clone()).collect();

    let mut bumped = (*job).clone();
    bumped.priority = 70;
    let bumped = h.upsert_job(bumped);
    h.process(&eval_for(&bumped)).unwrap();

    assert!(h.last_plan_stops().is_empty());
    let updated = h.last_plan_allocs();
    assert_eq!(updated.len(), 10);
    let live = h.live_allocs(&bumped);
    let after: BTreeSet<String> = live.iter().map(|a| a.id.clone()).collect();
    assert_eq!(before, after, "same allocations");
    for a in &live {
        assert_eq!(a.job.as_ref().unwrap().version, bumped.version);
        assert_eq!(a.job.as_ref().unwrap().priority, 70);
        assert!(a.previous_allocation.is_empty());
    }
}

#[test]
fn in_place_update_that_no_longer_fits_becomes_destructive() {
    let mut h = Harness::new();
    let node = h.upsert_node(NodeBuilder::new().resources(1000, 1000).build());
    let mut job = mock_job();
    job.task_groups[0].count = 1;
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    assert_eq!(h.live_allocs(&job)[0].node_id, node.id);

    // The node's kernel changes so that the job's constraint no longer holds there.
    let mut n = (*node).clone();
    n.attributes.insert("kernel.name".into(), "windows".into());
    n.compute_class();
    h.upsert_node(n);
    let mut bumped = (*job).clone();
    bumped.priority = 60;
    let bumped = h.upsert_job(bumped);
    h.process(&eval_for(&bumped)).unwrap();
    // Nowhere else to go: the replacement fails and the old allocation is kept.
    assert!(
        h.plans.len() == 1,
        "nothing committed when the destructive update cannot place"
    );
    let e = h.last_eval().unwrap();
    assert!(e.failed_tg_allocs.as_ref().unwrap().contains_key("web"));
    assert_eq!(h.live_allocs(&job).len(), 1);
}

#[test]
fn allocations_on_a_down_node_are_lost_and_replaced() {
    let (mut h, nodes) = harness_with_nodes(2);
    let mut job = mock_job();
    job.task_groups[0].count = 4;
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let live = h.live_allocs(&job);
    let victim = &nodes[0];
    let on_victim: BTreeSet<String> = live
        .iter()
        .filter(|a| a.node_id == victim.id)
        .map(|a| a.id.clone())
        .collect();
    assert!(!on_victim.is_empty());

    let mut down = (**victim).clone();
    down.status = NODE_STATUS_DOWN.into();
    h.upsert_node(down);
    let eval = Evaluation {
        triggered_by: TRIGGER_NODE_UPDATE.into(),
        node_id: victim.id.clone(),
        ..eval_for(&job)
    };
    h.process(&eval).unwrap();

    let stops = h.last_plan_stops();
    assert_eq!(stops.len(), on_victim.len());
    for s in &stops {
        assert!(on_victim.contains(&s.id));
        assert_eq!(s.client_status, ALLOC_CLIENT_LOST);
        assert_eq!(
            s.desired_description,
            "alloc is lost since its node is down"
        );
    }
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 4);
    for a in live.iter().filter(|a| !a.previous_allocation.is_empty()) {
        assert_eq!(a.node_id, nodes[1].id);
        assert!(on_victim.contains(&a.previous_allocation));
    }
    assert_eq!(
        live.iter()
            .filter(|a| !a.previous_allocation.is_empty())
            .count(),
        on_victim.len()
    );
}

#[test]
fn allocations_of_a_missing_node_are_lost() {
    let (mut h, _) = harness_with_nodes(2);
    let job = h.upsert_job(mock_job());
    let gone = NodeBuilder::new().build();
    for i in 0..10 {
        h.upsert_alloc(mock_alloc(&job, &gone, i));
    }
    h.process(&eval_for(&job)).unwrap();
    let stops = h.last_plan_stops();
    assert_eq!(stops.len(), 10);
    assert!(stops.iter().all(|s| s.client_status == ALLOC_CLIENT_LOST));
    assert_eq!(h.last_plan_allocs().len(), 10);
}

fn set_client_status(h: &mut Harness, a: &Allocation, status: &str, finished_ago_secs: i64) {
    let mut a = a.clone();
    a.client_status = status.into();
    a.modify_time = drover_structs::time::now_nanos() - finished_ago_secs * 1_000_000_000;
    h.upsert_alloc(a);
}

#[test]
fn completed_batch_allocations_are_never_replaced() {
    let (mut h, _) = harness_with_nodes(3);
    let job = h.upsert_job(mock_batch_job());
    h.process(&eval_for(&job)).unwrap();
    for a in h.live_allocs(&job) {
        set_client_status(&mut h, &a, ALLOC_CLIENT_COMPLETE, 1);
    }
    let plans = h.plans.len();
    h.process(&eval_for(&job)).unwrap();
    assert_eq!(h.plans.len(), plans, "nothing to do");
    assert_eq!(h.last_eval().unwrap().status, EVAL_STATUS_COMPLETE);
}

#[test]
fn completed_service_allocations_are_replaced() {
    let (mut h, _) = harness_with_nodes(3);
    let job = h.upsert_job(mock_job());
    h.process(&eval_for(&job)).unwrap();
    let first = h.live_allocs(&job)[0].clone();
    set_client_status(&mut h, &first, ALLOC_CLIENT_COMPLETE, 1);
    h.process(&eval_for(&job)).unwrap();
    let placed = h.last_plan_allocs();
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].name, first.name);
    assert!(h.last_plan_stops().is_empty());
}

#[test]
fn failed_batch_allocation_is_rescheduled_away_from_its_node() {
    let (mut h, _) = harness_with_nodes(3);
    let mut job = mock_batch_job();
    job.task_groups[0].count = 1;
    job.task_groups[0].reschedule_policy.as_mut().unwrap().delay = 0;
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let first = h.live_allocs(&job)[0].clone();
    set_client_status(&mut h, &first, ALLOC_CLIENT_FAILED, 10);

    h.process(&eval_for(&job)).unwrap();
    let stops = h.last_plan_stops();
    assert_eq!(stops.len(), 1);
    assert_eq!(
        stops[0].desired_description,
        "alloc was rescheduled because it failed"
    );
    let placed = h.last_plan_allocs();
    assert_eq!(placed.len(), 1);
    let next = placed[0];
    assert_eq!(next.previous_allocation, first.id);
    assert_eq!(next.name, first.name);
    assert_ne!(next.node_id, first.node_id, "the failed node is penalised");
    let events = &next.reschedule_tracker.as_ref().unwrap()["Events"];
    assert_eq!(events.as_array().unwrap().len(), 1);
    assert_eq!(events[0]["PrevAllocID"], first.id.as_str());
    let meta = next
        .metrics
        .as_ref()
        .unwrap()
        .score_meta_data
        .as_ref()
        .unwrap();
    let penalised = meta.iter().find(|m| m.node_id == first.node_id);
    if let Some(p) = penalised {
        assert_eq!(p.scores["node-reschedule-penalty"], -1.0);
    }

    // The one attempt a day is used up: the replacement failing stays failed.
    let next = h.state.alloc(&next.id).unwrap();
    set_client_status(&mut h, &next, ALLOC_CLIENT_FAILED, 5);
    let plans = h.plans.len();
    h.process(&eval_for(&job)).unwrap();
    assert_eq!(h.plans.len(), plans);
}

#[test]
fn delayed_reschedule_creates_a_follow_up_evaluation() {
    let (mut h, _) = harness_with_nodes(2);
    let mut job = mock_job();
    job.task_groups[0].count = 2;
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let failed = h.live_allocs(&job)[0].clone();
    set_client_status(&mut h, &failed, ALLOC_CLIENT_FAILED, 0);

    let eval = eval_for(&job);
    h.process(&eval).unwrap();
    assert_eq!(h.created_evals.len(), 1);
    let follow = &h.created_evals[0];
    assert_eq!(follow.triggered_by, "alloc-failure");
    assert_eq!(follow.status, "pending");
    assert_eq!(follow.previous_eval, eval.id);
    assert_eq!(
        follow.status_description,
        "created for delayed rescheduling"
    );
    let delay = 30_000_000_000;
    assert!((follow.wait_until - (failed.modify_time + delay)).abs() < 2_000_000_000);
    let updated = h.last_plan_allocs();
    assert_eq!(updated.len(), 1);
    assert_eq!(updated[0].id, failed.id);
    assert_eq!(updated[0].followup_eval_id, follow.id);
    assert!(h.last_plan_stops().is_empty());

    // The follow-up, once due, reschedules it.
    let follow = follow.clone();
    h.process(&follow).unwrap();
    let placed = h.last_plan_allocs();
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].previous_allocation, failed.id);
}

#[test]
fn partial_commit_is_retried_on_the_refreshed_state() {
    let mut h = Harness::new();
    for _ in 0..3 {
        h.upsert_node(NodeBuilder::new().resources(1000, 4000).build());
    }
    let mut job = mock_job();
    job.task_groups[0].count = 2;
    job.task_groups[0].tasks[0].resources.cpu = 600;
    let job = h.upsert_job(job);
    // Another scheduler fills the node of the first placement before this plan is applied.
    h.before_next_plan(|state, plan| {
        let (node_id, _) = plan.node_allocation.iter().next().unwrap();
        let other = Arc::new(mock_job());
        let node = state.node(node_id).unwrap();
        let mut squatter = mock_alloc(&other, &node, 0);
        squatter
            .allocated_resources
            .as_mut()
            .unwrap()
            .tasks
            .get_mut("web")
            .unwrap()
            .cpu
            .cpu_shares = 900;
        state.put_alloc(squatter);
    });
    h.process(&eval_for(&job)).unwrap();

    assert_eq!(h.plans.len(), 2);
    assert_ne!(h.results[0].refresh_index, 0);
    assert_eq!(h.results[0].node_allocation.values().flatten().count(), 1);
    assert_eq!(
        h.plans[1].node_allocation.values().flatten().count(),
        1,
        "only the remainder"
    );
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 2);
    let on: BTreeSet<&str> = live.iter().map(|a| a.node_id.as_str()).collect();
    assert_eq!(on.len(), 2);
    let e = h.last_eval().unwrap();
    assert_eq!(e.status, EVAL_STATUS_COMPLETE);
    assert_eq!(e.queued_allocations.as_ref().unwrap()["web"], 0);
}

#[test]
fn refused_plans_fail_the_eval_after_max_attempts() {
    let (mut h, _) = harness_with_nodes(2);
    h.refuse_all_plans = true;
    let job = h.upsert_job(mock_job());
    let err = h.process(&eval_for(&job)).unwrap_err();
    assert!(matches!(err, SchedulerError::MaxPlanAttempts(_, 5)));
    assert_eq!(h.plans.len(), 5);
    let e = h.last_eval().unwrap();
    assert_eq!(e.status, EVAL_STATUS_FAILED);
    assert_eq!(e.status_description, "maximum attempts reached (5)");
    let blocked = &h.created_evals[0];
    assert_eq!(blocked.status, EVAL_STATUS_BLOCKED);
    assert_eq!(blocked.triggered_by, "max-plan-attempts");
    assert_eq!(e.blocked_eval, blocked.id);
}

#[test]
fn binpack_scores_match_nomad_and_the_tightest_node_wins() {
    let mut h = Harness::new();
    let n1 = h.upsert_node(NodeBuilder::new().resources(1100, 1100).build());
    let n2 = h.upsert_node(
        NodeBuilder::new()
            .resources(2000, 2000)
            .reserved(800, 800)
            .build(),
    );
    let n3 = h.upsert_node(
        NodeBuilder::new()
            .resources(2000, 2000)
            .reserved(500, 500)
            .build(),
    );
    let n4 = h.upsert_node(NodeBuilder::new().resources(900, 900).build());
    let mut job = mock_job();
    job.task_groups[0].count = 1;
    job.task_groups[0].tasks[0].resources = Resources {
        cpu: 1000,
        memory_mb: 1000,
        ..Default::default()
    };
    // An affinity nothing matches makes the scheduler score every node without changing scores.
    job.affinities = Some(vec![Affinity {
        l_target: "${meta.nothing}".into(),
        operand: "=".into(),
        r_target: "x".into(),
        weight: 50,
    }]);
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();

    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].node_id, n1.id);
    let m = live[0].metrics.as_ref().unwrap();
    assert_eq!(m.nodes_evaluated, 4);
    assert_eq!(m.nodes_exhausted, 1);
    assert_eq!(m.dimension_exhausted.as_ref().unwrap()["cpu"], 1);
    let meta = m.score_meta_data.as_ref().unwrap();
    let got: Vec<(String, f64)> = meta
        .iter()
        .map(|s| {
            (
                s.node_id.clone(),
                (s.scores["binpack"] * 10_000.0).round() / 10_000.0,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (n1.id.clone(), 0.9741),
            (n2.id.clone(), 0.9480),
            (n3.id.clone(), 0.8717)
        ]
    );
    assert!(meta.iter().all(|s| s.node_id != n4.id));
    assert!((meta[0].norm_score - meta[0].scores["binpack"]).abs() < 1e-12);
}

#[test]
fn spread_algorithm_prefers_the_emptiest_node() {
    let mut h = Harness::new();
    h.config.algorithm = Algorithm::Spread;
    let _small = h.upsert_node(NodeBuilder::new().resources(1100, 1100).build());
    let big = h.upsert_node(NodeBuilder::new().resources(8000, 8000).build());
    let mut job = mock_job();
    job.task_groups[0].count = 1;
    job.task_groups[0].tasks[0].resources = Resources {
        cpu: 1000,
        memory_mb: 1000,
        ..Default::default()
    };
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    assert_eq!(h.live_allocs(&job)[0].node_id, big.id);
}

#[test]
fn job_anti_affinity_scores_co_located_allocations() {
    let (mut h, _) = harness_with_nodes(1);
    let mut job = mock_job();
    job.task_groups[0].count = 3;
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 3);
    let third = live.iter().find(|a| a.name.ends_with("[2]")).unwrap();
    let meta = &third
        .metrics
        .as_ref()
        .unwrap()
        .score_meta_data
        .as_ref()
        .unwrap()[0];
    // Two already placed there: -(2 + 1) / 3.
    assert_eq!(meta.scores["job-anti-affinity"], -1.0);
    let expected = (meta.scores["binpack"] - 1.0) / 2.0;
    assert!((meta.norm_score - expected).abs() < 1e-12);
}

#[test]
fn distinct_hosts_places_at_most_one_per_node() {
    let (mut h, _) = harness_with_nodes(3);
    let mut job = mock_job();
    job.task_groups[0].count = 4;
    job.constraints = Some(vec![constraint("", "distinct_hosts", "true")]);
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 3);
    let on: BTreeSet<&str> = live.iter().map(|a| a.node_id.as_str()).collect();
    assert_eq!(on.len(), 3);
    let m = &h.last_eval().unwrap().failed_tg_allocs.as_ref().unwrap()["web"];
    assert_eq!(m.constraint_filtered.as_ref().unwrap()["distinct_hosts"], 3);
}

#[test]
fn distinct_property_limits_allocations_per_value() {
    let mut h = Harness::new();
    for rack in ["r1", "r1", "r2", "r2"] {
        h.upsert_node(NodeBuilder::new().meta("rack", rack).build());
    }
    let mut job = mock_job();
    job.task_groups[0].count = 3;
    job.task_groups[0].constraints =
        Some(vec![constraint("${meta.rack}", "distinct_property", "")]);
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 2);
    let racks: BTreeSet<String> = live
        .iter()
        .map(|a| h.state.node(&a.node_id).unwrap().meta["rack"].clone())
        .collect();
    assert_eq!(racks.len(), 2);
    let m = &h.last_eval().unwrap().failed_tg_allocs.as_ref().unwrap()["web"];
    let cf = m.constraint_filtered.as_ref().unwrap();
    assert!(
        cf.keys()
            .any(|k| k.starts_with("distinct_property: ${meta.rack}="))
    );
}

#[test]
fn nodes_outside_the_datacenters_or_not_ready_are_not_considered() {
    let mut h = Harness::new();
    h.upsert_node(NodeBuilder::new().datacenter("dc2").build());
    h.upsert_node(NodeBuilder::new().status("initializing").build());
    let mut draining = NodeBuilder::new().build();
    draining.drain = true;
    h.upsert_node(draining);
    let mut ineligible = NodeBuilder::new().build();
    ineligible.scheduling_eligibility = "ineligible".into();
    h.upsert_node(ineligible);
    let ok = h.upsert_node(mock_node());
    let mut job = mock_job();
    job.task_groups[0].count = 2;
    job.datacenters = vec!["dc1".into(), "dc3".into()];
    let job = h.upsert_job(job);
    h.process(&eval_for(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|a| a.node_id == ok.id));
    let available = live[0]
        .metrics
        .as_ref()
        .unwrap()
        .nodes_available
        .clone()
        .unwrap();
    // Nomad 1.5+: counted per datacenter of the ready nodes, so "dc3" (none) is absent.
    assert_eq!(
        available,
        drover_structs::VecMap::from([("dc1".to_string(), 1)])
    );
}

#[test]
fn unsupported_job_types_fail_the_evaluation() {
    let mut h = Harness::new();
    let mut job = mock_job();
    job.job_type = "cron".into();
    let job = h.upsert_job(job);
    let err = h.process(&eval_for(&job)).unwrap_err();
    assert!(matches!(err, SchedulerError::UnsupportedJobType(ref t) if t == "cron"));
    let e = h.last_eval().unwrap();
    assert_eq!(e.status, EVAL_STATUS_FAILED);
    assert!(e.status_description.contains("cron"));
}

#[test]
fn placing_a_thousand_allocations_on_a_hundred_nodes_is_quick() {
    let (mut h, _) = harness_with_nodes(100);
    let mut job = mock_job();
    job.task_groups[0].count = 1000;
    job.task_groups[0].tasks[0].resources.cpu = 100;
    job.task_groups[0].tasks[0].resources.memory_mb = 64;
    let job = h.upsert_job(job);
    let start = std::time::Instant::now();
    h.process(&eval_for(&job)).unwrap();
    let took = start.elapsed();
    println!("placed 1000 allocations on 100 nodes in {took:?}");
    assert_eq!(h.live_allocs(&job).len(), 1000);
    assert_eq!(h.plans.len(), 1);
}

#[test]
fn allocations_marked_for_migration_move_off_a_draining_node() {
    let (mut h, nodes) = harness_with_nodes(2);
    let mut job = mock_job();
    job.task_groups[0].count = 2;
    let job = h.upsert_job(job);
    let draining = &nodes[0];
    for i in 0..2 {
        let mut a = mock_alloc(&job, draining, i);
        a.desired_transition.migrate = Some(true);
        h.upsert_alloc(a);
    }
    let mut n = (**draining).clone();
    n.drain = true;
    h.upsert_node(n);
    h.process(&eval_for(&job)).unwrap();

    let stops = h.last_plan_stops();
    assert_eq!(stops.len(), 2);
    assert!(
        stops
            .iter()
            .all(|s| s.desired_description == "alloc is being migrated")
    );
    let placed = h.last_plan_allocs();
    assert_eq!(placed.len(), 2);
    for p in placed {
        assert_eq!(p.node_id, nodes[1].id);
        assert!(stops.iter().any(|s| s.id == p.previous_allocation));
    }
}
