//! Gauges of the server read when asked (`/v1/metrics`): Raft indexes, the eval broker, blocked
//! evaluations, the plan queue, heartbeat timers, and jobs and nodes by status. Named as
//! Nomad names the same figures (`nomad.raft.appliedIndex`, `nomad.nomad.broker.total_ready`...).

use std::collections::BTreeMap;

use crate::server::Server;

/// One gauge: Nomad's metric name, its labels, its value now.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauge {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Gauge {
    pub fn new(name: impl Into<String>, value: f64) -> Gauge {
        Gauge {
            name: name.into(),
            labels: BTreeMap::new(),
            value,
        }
    }

    pub fn label(mut self, key: &str, value: impl Into<String>) -> Gauge {
        self.labels.insert(key.to_string(), value.into());
        self
    }
}

impl Server {
    /// The server's gauges now (see the module doc).
    pub fn gauges(&self) -> Vec<Gauge> {
        let raft = self.raft_status();
        let broker = self.broker_stats();
        let blocked = self
            .inner
            .blocked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        let plan_queue = self
            .inner
            .plan_tx
            .max_capacity()
            .saturating_sub(self.inner.plan_tx.capacity());
        let snap = self.snapshot();
        let mut job_status: BTreeMap<&str, usize> =
            [("pending", 0), ("running", 0), ("dead", 0)].into();
        for job in snap.jobs(None) {
            *job_status.entry(job_status_name(&job.status)).or_default() += 1;
        }
        let mut node_status: BTreeMap<String, usize> = BTreeMap::new();
        for node in snap.nodes() {
            *node_status.entry(node.status.clone()).or_default() += 1;
        }
        let mut gauges = vec![
            Gauge::new("nomad.raft.appliedIndex", raft.applied_index as f64),
            Gauge::new("nomad.raft.commitIndex", raft.commit_index as f64),
            Gauge::new("nomad.raft.lastIndex", raft.last_log_index as f64),
            Gauge::new("nomad.raft.term", raft.term as f64),
            Gauge::new("nomad.raft.peers", raft.voters.len() as f64),
            Gauge::new(
                "nomad.raft.leader",
                if self.is_leader() { 1.0 } else { 0.0 },
            ),
            Gauge::new("nomad.raft.snapshotIndex", raft.snapshot_index as f64),
            Gauge::new("nomad.nomad.broker.total_ready", broker.ready as f64),
            Gauge::new("nomad.nomad.broker.total_unacked", broker.unacked as f64),
            Gauge::new("nomad.nomad.broker.total_pending", broker.pending as f64),
            Gauge::new("nomad.nomad.blocked_evals.total_blocked", blocked as f64),
            Gauge::new("nomad.nomad.plan.queue_depth", plan_queue as f64),
            Gauge::new(
                "nomad.nomad.heartbeat.active",
                self.inner.heartbeats.len() as f64,
            ),
        ];
        for (status, n) in job_status {
            gauges.push(Gauge::new(
                format!("nomad.nomad.job_status.{status}"),
                n as f64,
            ));
        }
        for (status, n) in node_status {
            gauges.push(Gauge::new("nomad.nomad.nodes", n as f64).label("status", status));
        }
        gauges
    }
}

fn job_status_name(status: &str) -> &'static str {
    match status {
        "running" => "running",
        "dead" => "dead",
        _ => "pending",
    }
}
