//! Property tests: random clusters and random jobs (service, batch, system; counts,
//! constraints, static and dynamic ports), processed through the harness again and again with
//! job updates, stops, failures and nodes going down in between. After every evaluation:
//!
//! - every plan the scheduler submitted fit whole (the harness's applier re-checks each node
//!   as the server's does, so a refused plan means the scheduler over-committed);
//! - no group has more live allocations than its count (one per node for system jobs);
//! - no node holds more than it offers on any dimension, nor a host port twice or a reserved one;
//! - a stopped job has no live allocation and got no placement.
//!
//! A small seeded generator keeps the cases reproducible: a failure names its seed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use drover_scheduler::fit::{alloc_resources, for_each_port};
use drover_scheduler::harness::{Harness, NodeBuilder, mock_batch_job, mock_job, mock_system_job};
use drover_scheduler::{Algorithm, State};
use drover_structs::{
    ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_RUNNING, ComparableResources,
    Constraint, Evaluation, JOB_TYPE_SYSTEM, Job, NODE_STATUS_DOWN, NetworkResource, Node, Port,
    TRIGGER_JOB_REGISTER, TRIGGER_NODE_UPDATE, node::parse_port_ranges,
};

/// SplitMix64.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const RACKS: [&str; 3] = ["r0", "r1", "r2"];
const RESERVED_PORTS: [&str; 4] = ["", "22", "8000-8001", "22,9000"];

fn random_node(g: &mut Gen) -> Node {
    let cpu = g.range(500, 4000);
    let rack = g.pick(&RACKS).to_string();
    let reserved_ports = g.pick(&RESERVED_PORTS).to_string();
    let mem = g.range(512, 8192);
    let mut b = NodeBuilder::new()
        .resources(cpu, mem)
        .reserved(g.range(0, 300), g.range(0, 256))
        .attr(
            "kernel.name",
            if g.chance(80) { "linux" } else { "windows" },
        )
        .meta("rack", &rack)
        .reserved_ports(&reserved_ports);
    if g.chance(10) {
        b = b.datacenter("dc2");
    }
    b.build()
}

fn constraint(l: &str, op: &str, r: &str) -> Constraint {
    Constraint {
        l_target: l.into(),
        operand: op.into(),
        r_target: r.into(),
    }
}

fn random_job(g: &mut Gen) -> Job {
    let kind = g.below(3);
    let mut job = match kind {
        0 => mock_job(),
        1 => mock_batch_job(),
        _ => mock_system_job(),
    };
    job.priority = g.range(20, 90);
    job.datacenters = vec!["dc1".into(), "dc2".into()];
    let mut cs = vec![];
    if g.chance(70) {
        cs.push(constraint("${attr.kernel.name}", "=", "linux"));
    }
    if g.chance(20) {
        cs.push(constraint("${meta.rack}", "!=", "r1"));
    }
    if job.job_type != JOB_TYPE_SYSTEM && g.chance(15) {
        cs.push(constraint("", "distinct_hosts", "true"));
    }
    job.constraints = (!cs.is_empty()).then_some(cs);
    let tg = &mut job.task_groups[0];
    tg.count = if job.job_type == JOB_TYPE_SYSTEM {
        1
    } else {
        g.range(1, 8)
    };
    tg.tasks[0].resources.cpu = g.range(50, 800);
    tg.tasks[0].resources.memory_mb = g.range(32, 1024);
    if let Some(d) = tg.ephemeral_disk.as_mut() {
        d.size_mb = g.range(10, 300);
    }
    if g.chance(40) {
        let mut net = NetworkResource::default();
        if g.chance(50) {
            net.reserved_ports = Some(vec![Port {
                label: "admin".into(),
                value: *g.pick(&[8000, 8001, 9000, 9001]),
                ..Default::default()
            }]);
        }
        net.dynamic_ports = Some(vec![Port {
            label: "http".into(),
            ..Default::default()
        }]);
        tg.networks = Some(vec![net]);
    }
    job
}

fn eval_for(job: &Job) -> Evaluation {
    Evaluation::for_job(job, TRIGGER_JOB_REGISTER)
}

/// Checks every invariant over the harness's state; `stopped` are the stopped jobs whose
/// evaluation ran.
/// `counts` are the group counts of the job versions last evaluated.
fn check(
    h: &Harness,
    stopped: &BTreeSet<String>,
    counts: &BTreeMap<String, i64>,
    seed: u64,
    step: &str,
) {
    for (i, r) in h.results.iter().enumerate() {
        assert_eq!(
            r.refresh_index, 0,
            "seed {seed} {step}: plan {i} did not fit whole: the scheduler over-committed a node"
        );
    }
    let allocs: Vec<_> = h
        .state
        .allocs()
        .into_iter()
        .filter(|a| !a.terminal())
        .collect();
    // Per group: no more than count; system groups once per node.
    let mut per_group: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for a in &allocs {
        per_group
            .entry((a.job_id.clone(), a.task_group.clone()))
            .or_default()
            .push(a.node_id.clone());
    }
    for ((job_id, group), nodes) in &per_group {
        let job = h.state.job("default", job_id).expect("the job exists");
        let count = counts.get(job_id).copied().unwrap_or(0);
        if job.job_type == JOB_TYPE_SYSTEM {
            let distinct: BTreeSet<&String> = nodes.iter().collect();
            assert_eq!(
                distinct.len(),
                nodes.len(),
                "seed {seed} {step}: system group twice on a node"
            );
        } else {
            if nodes.len() as i64 > count && std::env::var_os("PROP_DEBUG").is_some() {
                for a in h.state.allocs_by_job("default", job_id) {
                    let n = h.state.node(&a.node_id).unwrap();
                    eprintln!(
                        "{} {} v{} desired={} client={} node={} status={} prev={} next={} desc={:?}",
                        &a.id[..8],
                        a.name,
                        a.job.as_ref().map(|j| j.version).unwrap_or(0),
                        a.desired_status,
                        a.client_status,
                        &a.node_id[..8],
                        n.status,
                        a.previous_allocation.get(..8).unwrap_or(""),
                        a.next_allocation.get(..8).unwrap_or(""),
                        a.desired_description
                    );
                }
            }
            assert!(
                nodes.len() as i64 <= count,
                "seed {seed} {step}: {job_id}.{group} has {} live allocations for count {count}",
                nodes.len(),
            );
        }
        assert!(
            !stopped.contains(job_id),
            "seed {seed} {step}: stopped job {job_id} still has live allocations"
        );
    }
    // Per node: resources and ports.
    let mut per_node: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for a in &allocs {
        per_node
            .entry(a.node_id.clone())
            .or_default()
            .push(a.clone());
    }
    for (node_id, list) in &per_node {
        let node = h.state.node(node_id).expect("the node exists");
        let mut used = ComparableResources::default();
        let mut ports: BTreeSet<(String, i64)> = BTreeSet::new();
        let reserved = parse_port_ranges(&node.reserved_resources.networks.reserved_host_ports)
            .unwrap_or_default();
        for a in list {
            used.add(&alloc_resources(a));
            for_each_port(a, |ip, port| {
                assert!(
                    ports.insert((ip.to_string(), port)),
                    "seed {seed} {step}: port {port} twice on node {node_id}"
                );
                assert!(
                    !reserved.contains(&port),
                    "seed {seed} {step}: reserved port {port} handed out on {node_id}"
                );
            });
        }
        assert!(
            node.available().superset(&used).is_ok(),
            "seed {seed} {step}: node {node_id} over-committed: {used:?} of {:?}",
            node.available()
        );
    }
}

fn run_case(seed: u64) {
    let mut g = Gen(seed);
    let mut h = Harness::new();
    if g.chance(30) {
        h.config.algorithm = Algorithm::Spread;
    }
    h.config.preemption_service = g.chance(30);
    h.config.preemption_batch = g.chance(30);
    h.state.set_node_usage_summaries(g.chance(70));
    let mut nodes: Vec<Arc<Node>> = (0..g.range(3, 12))
        .map(|_| h.upsert_node(random_node(&mut g)))
        .collect();
    let mut jobs: Vec<Arc<Job>> = (0..g.range(1, 4))
        .map(|_| h.upsert_job(random_job(&mut g)))
        .collect();
    let mut stopped: BTreeSet<String> = BTreeSet::new();
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();

    for round in 0..4 {
        for job in jobs.clone() {
            let before = h.plans.len();
            let _ = h.process(&eval_for(&job));
            counts.insert(job.id.clone(), job.task_groups[0].count);
            if job.stop {
                stopped.insert(job.id.clone());
                let placed = h.plans[before..]
                    .iter()
                    .flat_map(|p| p.node_allocation.values().flatten())
                    .any(|a| a.job_id == job.id);
                assert!(
                    !placed,
                    "seed {seed}: stopped job {} got a placement",
                    job.id
                );
            }
            check(
                &h,
                &stopped,
                &counts,
                seed,
                &format!("round {round} job {}", job.id),
            );
        }
        // Mutate the world between rounds.
        for job in jobs.iter_mut() {
            if job.stop {
                continue;
            }
            match g.below(6) {
                0 => {
                    let mut j = (**job).clone();
                    if j.job_type != JOB_TYPE_SYSTEM {
                        j.task_groups[0].count = g.range(0, 9);
                    }
                    *job = h.upsert_job(j);
                }
                1 => {
                    let mut j = (**job).clone();
                    j.task_groups[0].tasks[0].resources.cpu = g.range(50, 900);
                    *job = h.upsert_job(j);
                }
                2 if g.chance(50) => {
                    let mut j = (**job).clone();
                    j.stop = true;
                    *job = h.upsert_job(j);
                }
                _ => {}
            }
        }
        // Clients report: some allocations run, some end.
        for a in h.state.allocs() {
            if a.terminal() {
                continue;
            }
            let mut a = (*a).clone();
            a.client_status = match g.below(10) {
                0 => ALLOC_CLIENT_FAILED.into(),
                1 => ALLOC_CLIENT_COMPLETE.into(),
                _ => ALLOC_CLIENT_RUNNING.into(),
            };
            h.upsert_alloc(a);
        }
        if g.chance(40) && !nodes.is_empty() {
            let i = g.below(nodes.len() as u64) as usize;
            let mut n = (*nodes[i]).clone();
            n.status = NODE_STATUS_DOWN.into();
            nodes[i] = h.upsert_node(n);
            for job in &jobs {
                let mut e = Evaluation::for_job(job, TRIGGER_NODE_UPDATE);
                e.node_id = nodes[i].id.clone();
                let _ = h.process(&e);
                counts.insert(job.id.clone(), job.task_groups[0].count);
                if job.stop {
                    stopped.insert(job.id.clone());
                }
                check(
                    &h,
                    &stopped,
                    &counts,
                    seed,
                    &format!("round {round} node down"),
                );
            }
        }
        if g.chance(40) {
            nodes.push(h.upsert_node(random_node(&mut g)));
        }
    }
}

#[test]
fn random_clusters_and_jobs_keep_every_invariant() {
    let seeds = match std::env::var("PROP_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        Some(s) => s..s + 1,
        None => 0..300,
    };
    for seed in seeds {
        run_case(seed);
    }
}
