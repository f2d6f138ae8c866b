//! The client's side of `/v1/metrics` and `/v1/client/stats`: its collection loop and the
//! gauges of its latest collection (see `crate::client_metrics`).

use std::sync::Arc;

use drover_structs::metrics::Gauge;

use super::{Client, mhz_per_core};
use crate::client_metrics::{AllocCounts, AllocSample};
use crate::host_stats::HostStats;

impl Client {
    /// The host's statistics of the latest collection (collected now if none was yet).
    pub fn host_stats(&self) -> HostStats {
        self.telemetry
            .host_stats(self.node().node_resources.cpu.cpu_shares as f64)
    }

    /// The client's gauges now: allocation counts always, host and allocation figures when
    /// the agent's telemetry publishes them.
    pub fn gauges(&self) -> Vec<Gauge> {
        let since = self.last_heartbeat().elapsed().unwrap_or_default();
        self.telemetry
            .gauges(&self.node(), self.alloc_counts_by_state(), since)
    }

    /// Allocations by state: ended (terminal), with a task running (running), or not yet.
    fn alloc_counts_by_state(&self) -> AllocCounts {
        let runners = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut counts = AllocCounts::default();
        for r in runners.values() {
            if r.is_done() {
                counts.terminal += 1;
                continue;
            }
            if r.live.any_running() {
                counts.running += 1;
            } else {
                counts.pending += 1;
            }
            if let Some(res) = &r.alloc.allocated_resources {
                counts.allocated.add(&res.comparable());
            }
        }
        counts
    }

    /// One collection: the host, and the running allocations' usage when published. Blocks.
    pub(super) fn collect_telemetry(&self) {
        let node = self.node();
        self.telemetry
            .collect_host(node.node_resources.cpu.cpu_shares as f64);
        if !self.telemetry.settings().publish_allocation_metrics {
            return;
        }
        // Copied out: the drivers are sampled without the runners' lock held.
        let running: Vec<_> = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|r| !r.is_done())
            .map(|r| (Arc::clone(&r.alloc), r.live.clone()))
            .collect();
        let mhz = mhz_per_core(&node);
        let samples: Vec<AllocSample> = running
            .into_iter()
            .map(|(alloc, live)| AllocSample {
                alloc_id: alloc.id.clone(),
                job: alloc.job_id.clone(),
                task_group: alloc.task_group.clone(),
                namespace: alloc.namespace.clone(),
                allocated: alloc
                    .allocated_resources
                    .iter()
                    .flat_map(|r| r.tasks.iter())
                    .map(|(task, t)| (task.clone(), t.cpu.cpu_shares, t.memory.memory_mb))
                    .collect(),
                usage: live.sample(None, mhz),
            })
            .collect();
        self.telemetry.record_allocs(&node.name, &samples);
    }
}
