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

/// Timings summarised since the process started, as go-metrics keeps a sample: count, sum,
/// min, max (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Summary {
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    /// Sum of squares, for the standard deviation.
    pub sum_sq: f64,
}

impl Summary {
    fn add(&mut self, ms: f64) {
        if self.count == 0 || ms < self.min {
            self.min = ms;
        }
        if ms > self.max {
            self.max = ms;
        }
        self.count += 1;
        self.sum += ms;
        self.sum_sq += ms * ms;
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    pub fn stddev(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let n = self.count as f64;
        ((self.sum_sq - self.sum * self.sum / n) / (n - 1.0))
            .max(0.0)
            .sqrt()
    }
}

fn samples() -> &'static std::sync::Mutex<BTreeMap<String, Summary>> {
    static SAMPLES: std::sync::OnceLock<std::sync::Mutex<BTreeMap<String, Summary>>> =
        std::sync::OnceLock::new();
    SAMPLES.get_or_init(Default::default)
}

/// Records one timing of `name` (Nomad's metric name).
pub fn record_time(name: &str, took: std::time::Duration) {
    let mut s = samples().lock().unwrap_or_else(|p| p.into_inner());
    match s.get_mut(name) {
        Some(summary) => summary.add(took.as_secs_f64() * 1000.0),
        None => {
            let mut summary = Summary::default();
            summary.add(took.as_secs_f64() * 1000.0);
            s.insert(name.to_string(), summary);
        }
    }
}

/// Every timing recorded so far, by name.
pub fn timings() -> BTreeMap<String, Summary> {
    samples().lock().unwrap_or_else(|p| p.into_inner()).clone()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn timings_summarise_count_sum_min_max_in_milliseconds() {
        super::record_time("test.metrics.summary", Duration::from_millis(2));
        super::record_time("test.metrics.summary", Duration::from_millis(4));
        let s = super::timings()["test.metrics.summary"];
        assert_eq!((s.count, s.sum, s.min, s.max), (2, 6.0, 2.0, 4.0));
        assert_eq!(s.mean(), 3.0);
        assert!((s.stddev() - std::f64::consts::SQRT_2).abs() < 1e-9);
    }
}
