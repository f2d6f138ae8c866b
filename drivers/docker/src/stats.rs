//! A container's resource usage from the daemon's stats API, in the contract's terms.

use bollard::models::ContainerStatsResponse;
use drover_abi::TaskResourceUsage;

use crate::time::unix_nanos_now;

/// Linux reports CPU time to user space in USER_HZ ticks, fixed at 100 per second; the other
/// drivers report `cpu_total_ticks` in those (utime + stime from /proc).
const NANOS_PER_TICK: f64 = 1e9 / 100.0;

/// Resident memory and cumulative CPU time of the container's cgroup. RSS is `rss` on cgroup
/// v1 and `anon` on v2; without either, usage minus page cache.
pub fn usage_of(stats: &ContainerStatsResponse) -> TaskResourceUsage {
    let memory = stats.memory_stats.as_ref();
    let detail = memory.and_then(|m| m.stats.as_ref());
    let rss = detail
        .and_then(|d| d.get("rss").or_else(|| d.get("anon")).copied())
        .unwrap_or_else(|| {
            let usage = memory.and_then(|m| m.usage).unwrap_or(0);
            let cache = detail
                .and_then(|d| d.get("cache").or_else(|| d.get("file")).copied())
                .unwrap_or(0);
            usage.saturating_sub(cache)
        });
    let cpu_nanos = stats
        .cpu_stats
        .as_ref()
        .and_then(|c| c.cpu_usage.as_ref())
        .and_then(|u| u.total_usage)
        .unwrap_or(0);
    TaskResourceUsage {
        memory_rss_bytes: rss,
        cpu_total_ticks: cpu_nanos as f64 / NANOS_PER_TICK,
        timestamp: unix_nanos_now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerCpuStats, ContainerCpuUsage, ContainerMemoryStats};
    use std::collections::HashMap;

    #[test]
    fn rss_and_ticks_come_from_cgroup_stats() {
        let stats = ContainerStatsResponse {
            memory_stats: Some(ContainerMemoryStats {
                usage: Some(10_000),
                stats: Some(HashMap::from([
                    ("rss".to_string(), 4096),
                    ("cache".to_string(), 100),
                ])),
                ..Default::default()
            }),
            cpu_stats: Some(ContainerCpuStats {
                cpu_usage: Some(ContainerCpuUsage {
                    total_usage: Some(2_500_000_000),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let u = usage_of(&stats);
        assert_eq!(u.memory_rss_bytes, 4096);
        assert_eq!(u.cpu_total_ticks, 250.0);
    }

    #[test]
    fn without_rss_usage_minus_cache_is_used() {
        let stats = ContainerStatsResponse {
            memory_stats: Some(ContainerMemoryStats {
                usage: Some(10_000),
                stats: Some(HashMap::from([("file".to_string(), 1_000)])),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(usage_of(&stats).memory_rss_bytes, 9_000);
    }
}
