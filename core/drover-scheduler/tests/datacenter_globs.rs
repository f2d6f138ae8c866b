//! Datacenter globs as Nomad 1.5+ matches them (`Node.IsInAnyDC`, go-glob): `["*"]` is every
//! datacenter, `["dc-*"]` those starting with `dc-`; the service, batch and system schedulers
//! all filter nodes that way, and `NodesAvailable` counts per datacenter of the ready nodes.

use std::collections::BTreeSet;
use std::sync::Arc;

use drover_scheduler::State;
use drover_scheduler::harness::{
    Harness, NodeBuilder, mock_batch_job, mock_job, mock_system_job, register_eval,
};
use drover_structs::{Allocation, Job, Node, VecMap};

fn cluster(h: &mut Harness, dcs: &[&str]) -> Vec<Arc<Node>> {
    dcs.iter()
        .map(|dc| h.upsert_node(NodeBuilder::new().datacenter(dc).build()))
        .collect()
}

fn placed_dcs(h: &Harness, job: &Job) -> BTreeSet<String> {
    let nodes: Vec<Arc<Node>> = h.state.nodes();
    h.live_allocs(job)
        .iter()
        .map(|a| {
            nodes
                .iter()
                .find(|n| n.id == a.node_id)
                .map(|n| n.datacenter.clone())
                .unwrap_or_default()
        })
        .collect()
}

fn available(a: &Allocation) -> VecMap<String, i64> {
    a.metrics
        .as_ref()
        .and_then(|m| m.nodes_available.clone())
        .unwrap_or_default()
}

fn with_dcs(mut job: Job, dcs: &[&str], count: i64) -> Job {
    job.datacenters = dcs.iter().map(|s| s.to_string()).collect();
    job.task_groups[0].count = count;
    job
}

#[test]
fn a_star_places_a_service_job_in_every_datacenter() {
    let mut h = Harness::new();
    cluster(&mut h, &["dc1", "dc2", "east"]);
    let job = h.upsert_job(with_dcs(mock_job(), &["*"], 6));
    h.process(&register_eval(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 6);
    assert_eq!(
        placed_dcs(&h, &job),
        ["dc1", "dc2", "east"].map(String::from).into()
    );
    assert_eq!(
        available(&live[0]),
        VecMap::from([
            ("dc1".to_string(), 1),
            ("dc2".to_string(), 1),
            ("east".to_string(), 1)
        ])
    );
}

#[test]
fn a_prefix_glob_places_only_in_the_datacenters_it_matches() {
    let mut h = Harness::new();
    cluster(&mut h, &["dc-a", "dc-b", "east", "xdc-c"]);
    let job = h.upsert_job(with_dcs(mock_batch_job(), &["dc-*"], 4));
    h.process(&register_eval(&job)).unwrap();
    assert_eq!(h.live_allocs(&job).len(), 4);
    assert_eq!(
        placed_dcs(&h, &job),
        ["dc-a", "dc-b"].map(String::from).into()
    );
}

#[test]
fn a_glob_that_matches_no_node_fails_placement_with_nothing_available() {
    let mut h = Harness::new();
    cluster(&mut h, &["dc1"]);
    let job = h.upsert_job(with_dcs(mock_job(), &["west-*"], 1));
    h.process(&register_eval(&job)).unwrap();
    assert!(h.live_allocs(&job).is_empty());
    let e = h.last_eval().unwrap();
    let failed = e.failed_tg_allocs.as_ref().unwrap();
    let m = &failed[&job.task_groups[0].name];
    assert_eq!(m.nodes_evaluated, 0);
    assert!(m.nodes_available.clone().unwrap_or_default().is_empty());
}

#[test]
fn a_system_job_with_a_glob_runs_on_every_matching_node() {
    let mut h = Harness::new();
    let nodes = cluster(&mut h, &["dc-a", "dc-b", "east"]);
    let job = h.upsert_job(with_dcs(mock_system_job(), &["dc-*", "nowhere"], 1));
    h.process(&register_eval(&job)).unwrap();
    let on: BTreeSet<String> = h
        .live_allocs(&job)
        .iter()
        .map(|a| a.node_id.clone())
        .collect();
    assert_eq!(on, [nodes[0].id.clone(), nodes[1].id.clone()].into());
}
