//! Preemption by service and batch jobs (off unless the scheduler configuration turns it on),
//! as a table of (cluster, job, expected outcome) driven through the harness.

use std::sync::Arc;

use drover_scheduler::harness::{
    Harness, NodeBuilder, mock_alloc, mock_batch_job, mock_job, register_eval,
};
use drover_structs::{
    AllocatedPortMapping, Allocation, EVAL_STATUS_BLOCKED, Job, NetworkResource, Node, Port,
    Resources,
};

fn sized(mut job: Job, priority: i64, cpu: i64, mem: i64) -> Job {
    job.priority = priority;
    job.task_groups[0].count = 1;
    job.task_groups[0].tasks[0].resources = Resources {
        cpu,
        memory_mb: mem,
        ..Default::default()
    };
    job
}

/// A running allocation of a job of `priority` asking cpu/mem MHz/MB on the node.
fn victim(h: &mut Harness, node: &Arc<Node>, priority: i64, cpu: i64, mem: i64) -> Allocation {
    let job = h.upsert_job(sized(mock_job(), priority, cpu, mem));
    let a = mock_alloc(&job, node, 0);
    h.upsert_alloc(a.clone());
    a
}

#[test]
fn services_and_batch_jobs_preempt_only_when_configured() {
    struct Case {
        name: &'static str,
        batch: bool,
        service_enabled: bool,
        batch_enabled: bool,
        /// Victims' (priority, cpu, mem); the node offers 1000/1000.
        victims: Vec<(i64, i64, i64)>,
        /// Index of the victims expected to be preempted (empty: the job blocks).
        preempted: Vec<usize>,
    }
    let cases = vec![
        Case {
            name: "off by default for services",
            batch: false,
            service_enabled: false,
            batch_enabled: false,
            victims: vec![(20, 800, 800)],
            preempted: vec![],
        },
        Case {
            name: "services preempt a lower priority once enabled",
            batch: false,
            service_enabled: true,
            batch_enabled: false,
            victims: vec![(20, 800, 800)],
            preempted: vec![0],
        },
        Case {
            name: "the batch switch does not apply to services",
            batch: false,
            service_enabled: false,
            batch_enabled: true,
            victims: vec![(20, 800, 800)],
            preempted: vec![],
        },
        Case {
            name: "batch jobs preempt with their own switch",
            batch: true,
            service_enabled: false,
            batch_enabled: true,
            victims: vec![(20, 800, 800)],
            preempted: vec![0],
        },
        Case {
            name: "priorities within 10 are safe",
            batch: false,
            service_enabled: true,
            batch_enabled: false,
            victims: vec![(46, 800, 800)],
            preempted: vec![],
        },
        Case {
            name: "the allocation closest to what is missing goes, not all of them",
            batch: false,
            service_enabled: true,
            batch_enabled: false,
            victims: vec![(20, 100, 100), (20, 400, 400), (20, 250, 250)],
            preempted: vec![1],
        },
        Case {
            name: "the lowest priority goes first",
            batch: false,
            service_enabled: true,
            batch_enabled: false,
            victims: vec![(30, 450, 450), (10, 450, 450)],
            preempted: vec![1],
        },
    ];
    for c in cases {
        let mut h = Harness::new();
        h.config.preemption_service = c.service_enabled;
        h.config.preemption_batch = c.batch_enabled;
        let node = h.upsert_node(NodeBuilder::new().resources(1000, 1000).build());
        let victims: Vec<Allocation> = c
            .victims
            .iter()
            .map(|(p, cpu, mem)| victim(&mut h, &node, *p, *cpu, *mem))
            .collect();
        let base = if c.batch {
            mock_batch_job()
        } else {
            mock_job()
        };
        let job = h.upsert_job(sized(base, 55, 400, 400));
        h.process(&register_eval(&job)).unwrap();

        let live = h.live_allocs(&job);
        if c.preempted.is_empty() {
            assert!(live.is_empty(), "{}", c.name);
            assert!(
                h.created_evals
                    .iter()
                    .any(|e| e.status == EVAL_STATUS_BLOCKED),
                "{}: blocked",
                c.name
            );
            assert!(h.preemption_evals.is_empty(), "{}", c.name);
            continue;
        }
        assert_eq!(live.len(), 1, "{}", c.name);
        let mut want: Vec<String> = c.preempted.iter().map(|i| victims[*i].id.clone()).collect();
        want.sort();
        let mut got = live[0].preempted_allocations.clone().unwrap_or_default();
        got.sort();
        assert_eq!(got, want, "{}", c.name);
        for (i, v) in victims.iter().enumerate() {
            let now = h.state.alloc(&v.id).unwrap();
            let evicted = c.preempted.contains(&i);
            assert_eq!(
                now.desired_status == "evict",
                evicted,
                "{}: victim {i}",
                c.name
            );
            if evicted {
                assert_eq!(now.preempted_by_allocation, live[0].id, "{}", c.name);
                assert_eq!(
                    now.desired_description,
                    format!("Preempted by alloc ID {}", live[0].id),
                    "{}",
                    c.name
                );
            }
        }
        let meta = live[0]
            .metrics
            .as_ref()
            .and_then(|m| m.score_meta_data.as_ref())
            .unwrap();
        assert!(
            meta[0].scores.contains_key("preemption"),
            "{}: the preemption scorer is recorded",
            c.name
        );
        assert_eq!(h.preemption_evals.len(), c.preempted.len(), "{}", c.name);
    }
}

#[test]
fn a_static_port_held_by_a_lower_priority_allocation_is_freed_by_preemption() {
    let mut h = Harness::new();
    h.config.preemption_service = true;
    let node = h.upsert_node(NodeBuilder::new().build());
    let low = h.upsert_job(sized(mock_job(), 20, 100, 100));
    let mut holder = mock_alloc(&low, &node, 0);
    if let Some(ar) = holder.allocated_resources.as_mut() {
        ar.shared.ports = Some(vec![AllocatedPortMapping {
            label: "http".into(),
            value: 8080,
            to: 0,
            host_ip: "192.168.0.100".into(),
        }]);
    }
    h.upsert_alloc(holder.clone());
    let mut job = sized(mock_job(), 70, 100, 100);
    job.task_groups[0].networks = Some(vec![NetworkResource {
        reserved_ports: Some(vec![Port {
            label: "http".into(),
            value: 8080,
            ..Default::default()
        }]),
        ..Default::default()
    }]);
    let job = h.upsert_job(job);
    h.process(&register_eval(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 1);
    assert_eq!(
        live[0].preempted_allocations.as_deref(),
        Some(&[holder.id.clone()][..])
    );
    let ports = live[0]
        .allocated_resources
        .as_ref()
        .and_then(|r| r.shared.ports.clone())
        .unwrap();
    assert_eq!(ports[0].value, 8080);
    assert_eq!(h.state.alloc(&holder.id).unwrap().desired_status, "evict");
}
