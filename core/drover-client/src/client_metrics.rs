//! The client's telemetry, as Nomad's client emits it: every `collection_interval` the client
//! collects the host's statistics (kept for `/v1/client/stats`) and, when published, its
//! allocations' usage; `/v1/metrics` reads the gauges of the latest collection.
//!
//! Always: `nomad.client.allocations.{pending,running,terminal}` and the time since the last
//! heartbeat. With `publish_node_metrics`: `nomad.client.host.{memory,cpu,disk}.*`,
//! `nomad.client.uptime`, `nomad.client.{allocated,unallocated}.{cpu,memory,disk}`. With
//! `publish_allocation_metrics`: `nomad.client.allocs.{memory,cpu}.*` per running task.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use drover_structs::metrics::Gauge;
use drover_structs::node::Node;

use crate::alloc_stats::AllocResourceUsage;
use crate::host_stats::{HostStats, HostStatsCollector};

/// The agent's `telemetry` settings the client acts on (Nomad's defaults: 1 s, both off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Telemetry {
    pub collection_interval: Duration,
    pub publish_node_metrics: bool,
    pub publish_allocation_metrics: bool,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            collection_interval: Duration::from_secs(1),
            publish_node_metrics: false,
            publish_allocation_metrics: false,
        }
    }
}

/// What a collection leaves for the API: the host's statistics and the allocation gauges.
#[derive(Debug, Default)]
struct Collected {
    host: Option<HostStats>,
    alloc_gauges: Vec<Gauge>,
}

/// The client's collector and its latest collection.
#[derive(Debug)]
pub(crate) struct ClientTelemetry {
    collector: HostStatsCollector,
    settings: Telemetry,
    latest: Mutex<Collected>,
}

/// One running allocation as the allocation gauges label it, with its usage.
pub(crate) struct AllocSample {
    pub alloc_id: String,
    pub job: String,
    pub task_group: String,
    pub namespace: String,
    /// Per task: (allocated MHz, allocated memory MB).
    pub allocated: Vec<(String, i64, i64)>,
    pub usage: AllocResourceUsage,
}

impl ClientTelemetry {
    pub(crate) fn new(collector: HostStatsCollector, settings: Telemetry) -> ClientTelemetry {
        ClientTelemetry {
            collector,
            settings,
            latest: Mutex::new(Collected::default()),
        }
    }

    pub(crate) fn settings(&self) -> Telemetry {
        self.settings
    }

    /// The latest collection of host statistics, collected now if none was yet.
    pub(crate) fn host_stats(&self, total_mhz: f64) -> HostStats {
        if let Some(h) = &self.lock().host {
            return h.clone();
        }
        self.collect_host(total_mhz)
    }

    /// Collects the host now (`total_mhz`: the node's CPU) and keeps it as the latest.
    pub(crate) fn collect_host(&self, total_mhz: f64) -> HostStats {
        let host = self.collector.collect(total_mhz);
        self.lock().host = Some(host.clone());
        host
    }

    /// Replaces the allocation gauges with those of `samples`.
    pub(crate) fn record_allocs(&self, host_name: &str, samples: &[AllocSample]) {
        let gauges = samples
            .iter()
            .flat_map(|s| alloc_gauges(host_name, s))
            .collect();
        self.lock().alloc_gauges = gauges;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Collected> {
        self.latest.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The gauges of the latest collection (see the module doc) for `node`.
    pub(crate) fn gauges(
        &self,
        node: &Node,
        counts: AllocCounts,
        since_heartbeat: Duration,
    ) -> Vec<Gauge> {
        let settings = self.settings();
        let node_labels = |g: Gauge| {
            g.label("node_id", node.id.clone())
                .label("datacenter", node.datacenter.clone())
                .label("host", node.name.clone())
                .label(
                    "node_class",
                    if node.node_class.is_empty() {
                        "none".to_string()
                    } else {
                        node.node_class.clone()
                    },
                )
                .label("node_status", node.status.clone())
                .label(
                    "node_scheduling_eligibility",
                    node.scheduling_eligibility.clone(),
                )
        };
        let mut out = vec![
            node_labels(Gauge::new(
                "nomad.client.allocations.pending",
                counts.pending as f64,
            )),
            node_labels(Gauge::new(
                "nomad.client.allocations.running",
                counts.running as f64,
            )),
            node_labels(Gauge::new(
                "nomad.client.allocations.terminal",
                counts.terminal as f64,
            )),
            node_labels(Gauge::new(
                "nomad.client.heartbeat.age_seconds",
                since_heartbeat.as_secs_f64(),
            )),
        ];
        if settings.publish_node_metrics {
            let available = node.available();
            let allocated = counts.allocated;
            for (dimension, total, used) in [
                ("cpu", available.cpu_shares, allocated.cpu_shares),
                ("memory", available.memory_mb, allocated.memory_mb),
                ("disk", available.disk_mb, allocated.disk_mb),
            ] {
                out.push(node_labels(Gauge::new(
                    format!("nomad.client.allocated.{dimension}"),
                    used as f64,
                )));
                out.push(node_labels(Gauge::new(
                    format!("nomad.client.unallocated.{dimension}"),
                    (total - used) as f64,
                )));
            }
            let host = self.lock().host.clone();
            if let Some(host) = host {
                out.extend(host_gauges(&host).into_iter().map(node_labels));
            }
        }
        if settings.publish_allocation_metrics {
            out.extend(self.lock().alloc_gauges.iter().cloned());
        }
        out
    }
}

/// The allocations of this client by state, and what the unfinished ones were given.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocCounts {
    pub pending: usize,
    pub running: usize,
    pub terminal: usize,
    pub allocated: drover_structs::resources::ComparableResources,
}

fn host_gauges(host: &HostStats) -> Vec<Gauge> {
    let mut out = Vec::new();
    if let Some(m) = &host.memory {
        for (name, v) in [
            ("total", m.total),
            ("available", m.available),
            ("used", m.used),
            ("free", m.free),
        ] {
            out.push(Gauge::new(
                format!("nomad.client.host.memory.{name}"),
                v as f64,
            ));
        }
    }
    for c in &host.cpu {
        for (name, v) in [
            ("total", c.total),
            ("user", c.user),
            ("system", c.system),
            ("idle", c.idle),
        ] {
            out.push(
                Gauge::new(format!("nomad.client.host.cpu.{name}"), v).label("cpu", c.cpu.clone()),
            );
        }
    }
    for d in &host.disk_stats {
        for (name, v) in [
            ("size", d.size as f64),
            ("used", d.used as f64),
            ("available", d.available as f64),
            ("used_percent", d.used_percent),
            ("inodes_percent", d.inodes_used_percent),
        ] {
            out.push(
                Gauge::new(format!("nomad.client.host.disk.{name}"), v)
                    .label("disk", d.device.clone()),
            );
        }
    }
    out.push(Gauge::new("nomad.client.uptime", host.uptime as f64));
    out
}

fn alloc_gauges(host_name: &str, s: &AllocSample) -> Vec<Gauge> {
    let mut out = Vec::new();
    for (task, cpu_mhz, memory_mb) in &s.allocated {
        let labelled = |g: Gauge| {
            g.label("alloc_id", s.alloc_id.clone())
                .label("job", s.job.clone())
                .label("task_group", s.task_group.clone())
                .label("namespace", s.namespace.clone())
                .label("task", task.clone())
                .label("host", host_name)
        };
        out.push(labelled(Gauge::new(
            "nomad.client.allocs.cpu.allocated",
            *cpu_mhz as f64,
        )));
        out.push(labelled(Gauge::new(
            "nomad.client.allocs.memory.allocated",
            (*memory_mb * 1024 * 1024) as f64,
        )));
        // A task that is not running (or whose driver reports no stats) has no usage gauges.
        let Some(usage) = s.usage.tasks.get(task) else {
            continue;
        };
        let (m, c) = (
            &usage.resource_usage.memory_stats,
            &usage.resource_usage.cpu_stats,
        );
        for (name, v) in [
            ("rss", m.rss),
            ("cache", m.cache),
            ("swap", m.swap),
            ("usage", m.usage),
            ("max_usage", m.max_usage),
            ("kernel_usage", m.kernel_usage),
            ("kernel_max_usage", m.kernel_max_usage),
        ] {
            out.push(labelled(Gauge::new(
                format!("nomad.client.allocs.memory.{name}"),
                v as f64,
            )));
        }
        for (name, v) in [
            ("total_percent", c.percent),
            ("system", c.system_mode),
            ("user", c.user_mode),
            ("throttled_time", c.throttled_time as f64),
            ("throttled_periods", c.throttled_periods as f64),
            ("total_ticks", c.total_ticks),
        ] {
            out.push(labelled(Gauge::new(
                format!("nomad.client.allocs.cpu.{name}"),
                v,
            )));
        }
    }
    out
}

/// Runs collections every `collection_interval` until `shutdown` turns true. `collect` does
/// one (it blocks: host files, drivers) and runs on a blocking thread.
pub(crate) async fn collection_loop(
    telemetry: Arc<ClientTelemetry>,
    collect: impl Fn() + Send + Sync + 'static,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let collect = Arc::new(collect);
    loop {
        let one = Arc::clone(&collect);
        let _ = tokio::task::spawn_blocking(move || one()).await;
        let interval = telemetry.settings().collection_interval;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc_stats::{ResourceUsage, TaskResourceUsage};

    fn node() -> Node {
        let mut n = Node {
            id: "n1".into(),
            name: "host1".into(),
            datacenter: "dc1".into(),
            status: "ready".into(),
            scheduling_eligibility: "eligible".into(),
            ..Default::default()
        };
        n.node_resources.cpu.cpu_shares = 4000;
        n.node_resources.memory.memory_mb = 2000;
        n.node_resources.disk.disk_mb = 10_000;
        n.reserved_resources.memory.memory_mb = 500;
        n
    }

    fn names(gauges: &[Gauge]) -> Vec<&str> {
        gauges.iter().map(|g| g.name.as_str()).collect()
    }

    #[test]
    fn host_and_allocation_gauges_appear_only_when_published() {
        let published = Telemetry {
            publish_node_metrics: true,
            publish_allocation_metrics: true,
            ..Telemetry::default()
        };
        let t = ClientTelemetry::new(HostStatsCollector::new(std::env::temp_dir()), published);
        let quiet = ClientTelemetry::new(
            HostStatsCollector::new(std::env::temp_dir()),
            Telemetry::default(),
        );
        t.collect_host(4000.0);
        quiet.collect_host(4000.0);
        let counts = AllocCounts {
            running: 2,
            allocated: drover_structs::resources::ComparableResources {
                cpu_shares: 500,
                memory_mb: 256,
                disk_mb: 300,
            },
            ..Default::default()
        };
        let mut usage = AllocResourceUsage::default();
        let mut task_usage = ResourceUsage::default();
        task_usage.memory_stats.rss = 4096;
        usage.tasks.insert(
            "web".into(),
            TaskResourceUsage {
                resource_usage: task_usage,
                timestamp: 1,
                pids: None,
            },
        );
        let samples = [AllocSample {
            alloc_id: "a1".into(),
            job: "j".into(),
            task_group: "g".into(),
            namespace: "default".into(),
            allocated: vec![("web".into(), 500, 256)],
            usage,
        }];
        t.record_allocs("host1", &samples);
        quiet.record_allocs("host1", &samples);
        let off = quiet.gauges(&node(), counts, Duration::from_secs(1));
        assert_eq!(
            names(&off),
            [
                "nomad.client.allocations.pending",
                "nomad.client.allocations.running",
                "nomad.client.allocations.terminal",
                "nomad.client.heartbeat.age_seconds"
            ]
        );
        assert_eq!(off[1].value, 2.0);
        assert_eq!(off[0].labels["node_class"], "none");

        let on = t.gauges(&node(), counts, Duration::from_secs(1));
        let value = |name: &str| on.iter().find(|g| g.name == name).map(|g| g.value);
        assert_eq!(value("nomad.client.allocated.memory"), Some(256.0));
        assert_eq!(
            value("nomad.client.unallocated.memory"),
            Some(1500.0 - 256.0)
        );
        assert_eq!(value("nomad.client.unallocated.cpu"), Some(3500.0));
        assert!(value("nomad.client.host.memory.total").unwrap() > 0.0);
        assert!(names(&on).contains(&"nomad.client.host.cpu.total"));
        assert!(names(&on).contains(&"nomad.client.uptime"));
        let rss = on
            .iter()
            .find(|g| g.name == "nomad.client.allocs.memory.rss")
            .expect("rss gauge");
        assert_eq!(rss.value, 4096.0);
        assert_eq!(rss.labels["task"], "web");
        assert_eq!(rss.labels["alloc_id"], "a1");
        assert_eq!(
            value("nomad.client.allocs.memory.allocated"),
            Some(256.0 * 1024.0 * 1024.0)
        );
    }
}
