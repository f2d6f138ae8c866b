//! Host volume feasibility through the whole scheduler: a group asking for `host` volumes
//! places only on nodes that declare them (writable ones for writers), and fails with Nomad's
//! constraint text when no node does.

use std::collections::BTreeMap;

use drover_scheduler::harness::{Harness, NodeBuilder, mock_job, mock_node, register_eval};
use drover_structs::{AllocMetric, EVAL_STATUS_BLOCKED, Job};
use serde_json::json;

const MISSING: &str = "missing compatible host volumes";

/// A service job of `count` whose group asks for host volume `source`.
fn job_with_host_volume(source: &str, read_only: bool, per_alloc: bool, count: i64) -> Job {
    let mut job = mock_job();
    let tg = &mut job.task_groups[0];
    tg.count = count;
    tg.volumes = Some(json!({
        "data": {
            "Name": "data",
            "Type": "host",
            "Source": source,
            "ReadOnly": read_only,
            "PerAlloc": per_alloc,
        }
    }));
    job
}

fn failure(h: &Harness) -> AllocMetric {
    let e = h.last_eval().expect("the eval was updated");
    e.failed_tg_allocs.as_ref().expect("a failed placement")["web"].clone()
}

fn filtered(m: &AllocMetric) -> BTreeMap<String, i64> {
    m.constraint_filtered.clone().unwrap_or_default().into()
}

#[test]
fn allocations_place_only_on_nodes_declaring_the_host_volume() {
    let mut h = Harness::new();
    h.upsert_node(mock_node());
    h.upsert_node(NodeBuilder::new().host_volume("other", false).build());
    let good = h.upsert_node(NodeBuilder::new().host_volume("data", false).build());
    h.upsert_node(mock_node());
    let job = h.upsert_job(job_with_host_volume("data", false, false, 3));
    h.process(&register_eval(&job)).unwrap();

    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 3);
    assert!(live.iter().all(|a| a.node_id == good.id), "{live:?}");
    assert!(h.last_eval().unwrap().failed_tg_allocs.is_none());
    // With one feasible node, each placement walks all four and names why three were passed
    // over (a placement that landed there by chance would not).
    for a in &live {
        let m = a.metrics.as_ref().expect("placement metrics");
        assert_eq!(filtered(m).get(MISSING), Some(&3), "{m:?}");
    }
}

#[test]
fn no_node_with_the_host_volume_fails_placement_with_nomads_text_and_blocks() {
    let mut h = Harness::new();
    h.upsert_node(mock_node());
    h.upsert_node(NodeBuilder::new().host_volume("other", false).build());
    let job = h.upsert_job(job_with_host_volume("data", false, false, 1));
    h.process(&register_eval(&job)).unwrap();

    assert!(h.live_allocs(&job).is_empty());
    let m = failure(&h);
    assert_eq!(m.nodes_evaluated, 2);
    assert_eq!(filtered(&m)[MISSING], 2);
    assert_eq!(m.nodes_filtered, 2);
    assert_eq!(h.created_evals.len(), 1);
    assert_eq!(h.created_evals[0].status, EVAL_STATUS_BLOCKED);
}

#[test]
fn a_writer_does_not_place_on_a_read_only_host_volume_but_a_reader_does() {
    let mut h = Harness::new();
    let node = h.upsert_node(NodeBuilder::new().host_volume("data", true).build());
    let writer = h.upsert_job(job_with_host_volume("data", false, false, 1));
    h.process(&register_eval(&writer)).unwrap();
    assert!(h.live_allocs(&writer).is_empty());
    assert_eq!(filtered(&failure(&h))[MISSING], 1);

    let reader = h.upsert_job(job_with_host_volume("data", true, false, 1));
    h.process(&register_eval(&reader)).unwrap();
    let live = h.live_allocs(&reader);
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].node_id, node.id);
}

#[test]
fn per_alloc_host_volumes_send_each_allocation_to_the_node_with_its_indexed_source() {
    let mut h = Harness::new();
    let zero = h.upsert_node(NodeBuilder::new().host_volume("data[0]", false).build());
    let one = h.upsert_node(NodeBuilder::new().host_volume("data[1]", false).build());
    let job = h.upsert_job(job_with_host_volume("data", false, true, 2));
    h.process(&register_eval(&job)).unwrap();

    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 2);
    for a in &live {
        let want = if a.name.ends_with("[0]") { &zero } else { &one };
        assert_eq!(a.node_id, want.id, "{}", a.name);
    }
}
