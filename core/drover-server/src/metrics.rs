//! Gauges of the server read when asked (`/v1/metrics`): Raft indexes, the eval broker, blocked
//! evaluations, the plan queue, heartbeat timers, and jobs and nodes by status. Named as
//! Nomad names the same figures (`nomad.raft.appliedIndex`, `nomad.nomad.broker.total_ready`...).

use std::collections::BTreeMap;

use crate::server::Server;

pub use drover_structs::metrics::Gauge;

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
        let leader = self.is_leader();
        let mut summaries = Vec::new();
        for job in snap.jobs(None) {
            *job_status.entry(job_status_name(&job.status)).or_default() += 1;
            // Nomad's leader alone publishes the summaries (every server holds the same).
            if leader && let Some(summary) = snap.job_summary(&job.namespace, &job.id) {
                summaries.push(summary);
            }
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
            Gauge::new("nomad.nomad.broker.total_blocked", broker.pending as f64),
            Gauge::new("nomad.nomad.blocked_evals.total_blocked", blocked as f64),
            Gauge::new("nomad.nomad.plan.queue_depth", plan_queue as f64),
            Gauge::new(
                "nomad.nomad.heartbeat.active",
                self.inner.heartbeats.len() as f64,
            ),
        ];
        for (sched, (ready, unacked)) in &broker.by_type {
            gauges.push(Gauge::new(
                format!("nomad.nomad.broker.{sched}.ready"),
                *ready as f64,
            ));
            gauges.push(Gauge::new(
                format!("nomad.nomad.broker.{sched}.unacked"),
                *unacked as f64,
            ));
        }
        for (status, n) in job_status {
            gauges.push(Gauge::new(
                format!("nomad.nomad.job_status.{status}"),
                n as f64,
            ));
        }
        for summary in summaries {
            for (group, tg) in &summary.summary {
                for (name, n) in [
                    ("queued", tg.queued),
                    ("complete", tg.complete),
                    ("failed", tg.failed),
                    ("running", tg.running),
                    ("starting", tg.starting),
                    ("lost", tg.lost),
                ] {
                    gauges.push(
                        Gauge::new(format!("nomad.nomad.job_summary.{name}"), n as f64)
                            .label("job", summary.job_id.clone())
                            .label("task_group", group.clone())
                            .label("namespace", summary.namespace.clone()),
                    );
                }
            }
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
    /// Adds one observation (milliseconds for a timing, the increment for a counter).
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

/// When this process began recording counters and timings (the first use of either).
fn recording_since() -> std::time::Instant {
    static SINCE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *SINCE.get_or_init(std::time::Instant::now)
}

/// How long this process has been recording: the window every counter and timing covers.
pub fn recording_for() -> std::time::Duration {
    recording_since().elapsed()
}

fn samples() -> &'static std::sync::Mutex<BTreeMap<String, Summary>> {
    static SAMPLES: std::sync::OnceLock<std::sync::Mutex<BTreeMap<String, Summary>>> =
        std::sync::OnceLock::new();
    SAMPLES.get_or_init(Default::default)
}

/// Records one timing of `name` (Nomad's metric name).
pub fn record_time(name: &str, took: std::time::Duration) {
    recording_since();
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

fn counter_samples() -> &'static std::sync::Mutex<BTreeMap<&'static str, Summary>> {
    static COUNTERS: std::sync::OnceLock<std::sync::Mutex<BTreeMap<&'static str, Summary>>> =
        std::sync::OnceLock::new();
    COUNTERS.get_or_init(Default::default)
}

/// Adds one to counter `name` (Nomad's metric name), as go-metrics' `IncrCounter`.
pub fn incr_counter(name: &'static str) {
    recording_since();
    let mut c = counter_samples().lock().unwrap_or_else(|p| p.into_inner());
    c.entry(name).or_default().add(1.0);
}

/// Every counter so far, by name: its count of increments and their sum.
pub fn counters() -> BTreeMap<String, Summary> {
    counter_samples()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect()
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
