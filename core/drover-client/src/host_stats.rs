//! The host's statistics in Nomad's `HostStats` shape (`GET /v1/client/stats` and the
//! `nomad.client.host.*` gauges): memory from `/proc/meminfo`, CPU from `/proc/stat`, disks
//! from `/proc/mounts` and `statvfs`, uptime from `/proc/uptime`.
//!
//! CPU percentages are rates between two collections, so the first collection reports every
//! CPU idle-free at zero; the client collects every `telemetry.collection_interval` (Nomad's
//! default 1 s) and answers with the latest collection.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

/// Nomad's `HostStats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostStats {
    pub memory: Option<HostMemoryStats>,
    #[serde(rename = "CPU")]
    pub cpu: Vec<HostCpuStats>,
    pub disk_stats: Vec<HostDiskStats>,
    /// The filesystem of the client's data directory (where allocation directories live).
    pub alloc_dir_stats: Option<HostDiskStats>,
    /// Device plugins are not supported: always `null`, as Nomad without devices.
    pub device_stats: Option<Vec<()>>,
    /// Seconds since the host booted.
    pub uptime: u64,
    /// Nanoseconds since the Unix epoch when collected.
    pub timestamp: i64,
    /// MHz in use over all cores (each core's busy share of its MHz).
    #[serde(rename = "CPUTicksConsumed")]
    pub cpu_ticks_consumed: f64,
}

/// Nomad's `MemoryStats` of the host, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostMemoryStats {
    pub total: u64,
    pub available: u64,
    pub used: u64,
    pub free: u64,
}

/// Nomad's `HostCPUStats`: percentages of one CPU's time since the previous collection.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostCpuStats {
    #[serde(rename = "CPU")]
    pub cpu: String,
    pub user: f64,
    pub system: f64,
    pub idle: f64,
    pub total: f64,
}

/// Nomad's `DiskStats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostDiskStats {
    pub device: String,
    pub mountpoint: String,
    pub size: u64,
    pub used: u64,
    pub available: u64,
    pub used_percent: f64,
    pub inodes_used_percent: f64,
}

/// Cumulative jiffies of one CPU line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct CpuTimes {
    user: u64,
    system: u64,
    idle: u64,
    total: u64,
}

/// Collects host statistics; keeps the previous CPU times for the rates.
#[derive(Debug)]
pub struct HostStatsCollector {
    data_dir: PathBuf,
    previous: Mutex<BTreeMap<String, CpuTimes>>,
}

impl HostStatsCollector {
    pub fn new(data_dir: impl Into<PathBuf>) -> HostStatsCollector {
        HostStatsCollector {
            data_dir: data_dir.into(),
            previous: Mutex::new(BTreeMap::new()),
        }
    }

    /// Reads the host now; `total_mhz` (the node's CPU) weighs `CPUTicksConsumed`. A file
    /// that cannot be read leaves its part empty (`null` memory, no CPUs, no disks) rather
    /// than failing the whole collection.
    pub fn collect(&self, total_mhz: f64) -> HostStats {
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .map(|text| parse_meminfo(&text));
        let times = std::fs::read_to_string("/proc/stat")
            .map(|text| parse_proc_stat(&text))
            .unwrap_or_default();
        let cpu = {
            // The map is only replaced whole; a poisoned lock still holds a usable map.
            let mut previous = self.previous.lock().unwrap_or_else(|p| p.into_inner());
            let cpu = cpu_percentages(&previous, &times);
            *previous = times.into_iter().collect();
            cpu
        };
        let per_core_mhz = if cpu.is_empty() {
            0.0
        } else {
            total_mhz / cpu.len() as f64
        };
        let cpu_ticks_consumed = cpu.iter().map(|c| c.total / 100.0 * per_core_mhz).sum();
        let uptime = std::fs::read_to_string("/proc/uptime")
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0, |s| s as u64);
        let disk_stats = physical_disks();
        let alloc_dir_stats = disk_stats_of(&self.data_dir).map(|s| HostDiskStats {
            device: String::new(),
            mountpoint: String::new(),
            ..s
        });
        HostStats {
            memory,
            cpu,
            disk_stats,
            alloc_dir_stats,
            device_stats: None,
            uptime,
            timestamp: drover_structs::time::now_nanos(),
            cpu_ticks_consumed,
        }
    }
}

/// `/proc/meminfo` (values in kB) as Nomad's figures: `Used` is what gopsutil reports,
/// total less free, buffers and page cache.
fn parse_meminfo(text: &str) -> HostMemoryStats {
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| {
                let rest = l.strip_prefix(name)?.strip_prefix(':')?;
                rest.split_whitespace().next()?.parse::<u64>().ok()
            })
            .unwrap_or(0)
            * 1024
    };
    let total = field("MemTotal");
    let free = field("MemFree");
    let cached = field("Cached") + field("SReclaimable");
    HostMemoryStats {
        total,
        available: field("MemAvailable"),
        used: total.saturating_sub(free + field("Buffers") + cached),
        free,
    }
}

/// The `cpuN` lines of `/proc/stat` (the aggregate `cpu` line is left out, as Nomad's list).
fn parse_proc_stat(text: &str) -> Vec<(String, CpuTimes)> {
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next()?.to_string();
            let v: Vec<u64> = parts.filter_map(|p| p.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal (guest times are inside user).
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            let total = (0..8).map(at).sum();
            Some((
                name,
                CpuTimes {
                    user: at(0) + at(1),
                    system: at(2),
                    idle: at(3),
                    total,
                },
            ))
        })
        .collect()
}

fn cpu_percentages(
    previous: &BTreeMap<String, CpuTimes>,
    now: &[(String, CpuTimes)],
) -> Vec<HostCpuStats> {
    now.iter()
        .map(|(name, t)| {
            let before = previous.get(name).copied().unwrap_or(*t);
            let delta = t.total.saturating_sub(before.total) as f64;
            let share = |now: u64, then: u64| {
                if delta == 0.0 {
                    0.0
                } else {
                    now.saturating_sub(then) as f64 / delta * 100.0
                }
            };
            let idle = share(t.idle, before.idle);
            HostCpuStats {
                cpu: name.clone(),
                user: share(t.user, before.user),
                system: share(t.system, before.system),
                idle,
                total: if delta == 0.0 { 0.0 } else { 100.0 - idle },
            }
        })
        .collect()
}

/// The sizes of every mounted device-backed filesystem (each device once).
pub fn physical_disks() -> Vec<HostDiskStats> {
    let physical = std::fs::read_to_string("/proc/filesystems")
        .map(|t| physical_filesystems(&t))
        .unwrap_or_default();
    std::fs::read_to_string("/proc/mounts")
        .map(|t| physical_mounts(&t, &physical))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(device, mountpoint)| disk_stats(&device, &mountpoint))
        .collect()
}

/// Filesystem types backed by a device (those `/proc/filesystems` does not mark `nodev`),
/// which is what gopsutil lists as physical partitions for Nomad.
fn physical_filesystems(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with("nodev"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// `(device, mountpoint)` of the mounts of physical filesystems, each device once.
fn physical_mounts(mounts: &str, physical: &[String]) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for line in mounts.lines() {
        let mut parts = line.split_whitespace();
        let (Some(device), Some(mountpoint), Some(fstype)) =
            (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !physical.iter().any(|p| p == fstype) || seen.iter().any(|d| d == device) {
            continue;
        }
        seen.push(device.to_string());
        out.push((device.to_string(), unescape_mount(mountpoint)));
    }
    out
}

/// `/proc/mounts` writes a space as `\040` (and tab, newline, backslash likewise in octal).
fn unescape_mount(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn disk_stats(device: &str, mountpoint: &str) -> Option<HostDiskStats> {
    disk_stats_of(Path::new(mountpoint)).map(|s| HostDiskStats {
        device: device.to_string(),
        mountpoint: mountpoint.to_string(),
        ..s
    })
}

/// Sizes of the filesystem holding `path` (`statvfs`), as Nomad computes them: `Used` is size
/// less free blocks, `UsedPercent` used over what the unprivileged can use.
fn disk_stats_of(path: &Path) -> Option<HostDiskStats> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c_path` is a valid NUL-terminated string and `vfs` a properly sized, zeroed
    // out-parameter that statvfs fills in.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut vfs) } != 0 {
        return None;
    }
    let frsize = vfs.f_frsize as u64;
    let size = vfs.f_blocks as u64 * frsize;
    let free = vfs.f_bfree as u64 * frsize;
    let available = vfs.f_bavail as u64 * frsize;
    let used = size.saturating_sub(free);
    let percent = |part: f64, whole: f64| {
        if whole > 0.0 {
            part / whole * 100.0
        } else {
            0.0
        }
    };
    let inodes_used = (vfs.f_files as u64).saturating_sub(vfs.f_ffree as u64);
    Some(HostDiskStats {
        device: String::new(),
        mountpoint: String::new(),
        size,
        used,
        available,
        used_percent: percent(used as f64, (used + available) as f64),
        inodes_used_percent: percent(inodes_used as f64, vfs.f_files as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_read_in_bytes_with_used_as_gopsutil_computes_it() {
        let text = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    700 kB\n\
                    Buffers:          50 kB\nCached:          300 kB\nSReclaimable:     50 kB\n";
        assert_eq!(
            parse_meminfo(text),
            HostMemoryStats {
                total: 1_024_000,
                available: 716_800,
                used: 500 * 1024,
                free: 102_400,
            }
        );
    }

    #[test]
    fn cpu_percentages_are_rates_between_two_collections() {
        let first = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 10 0 10 80 0 0 0 0 0 0\nintr 1\n";
        let second = "cpu  40 0 20 140 0 0 0 0 0 0\ncpu0 40 0 20 140 0 0 0 0 0 0\n";
        let before: BTreeMap<_, _> = parse_proc_stat(first).into_iter().collect();
        assert_eq!(before.len(), 1, "only the per-CPU lines");
        let now = parse_proc_stat(second);
        let pct = cpu_percentages(&before, &now);
        assert_eq!(pct.len(), 1);
        let c = &pct[0];
        assert_eq!(c.cpu, "cpu0");
        assert!((c.user - 30.0).abs() < 1e-9, "{c:?}");
        assert!((c.system - 10.0).abs() < 1e-9, "{c:?}");
        assert!((c.idle - 60.0).abs() < 1e-9, "{c:?}");
        assert!((c.total - 40.0).abs() < 1e-9, "{c:?}");
        // No earlier collection: no interval, no rate.
        assert_eq!(cpu_percentages(&BTreeMap::new(), &now)[0].total, 0.0);
    }

    #[test]
    fn only_device_backed_mounts_are_listed_once_each_with_unescaped_paths() {
        let physical = physical_filesystems("nodev\tproc\nnodev\toverlay\n\text4\n\txfs\n");
        assert_eq!(physical, ["ext4", "xfs"]);
        let mounts = "overlay / overlay rw 0 0\nproc /proc proc rw 0 0\n\
                      /dev/vda1 /data ext4 rw 0 0\n/dev/vda1 /bind ext4 rw 0 0\n\
                      /dev/vdb /mnt/my\\040disk xfs rw 0 0\n";
        assert_eq!(
            physical_mounts(mounts, &physical),
            [
                ("/dev/vda1".to_string(), "/data".to_string()),
                ("/dev/vdb".to_string(), "/mnt/my disk".to_string())
            ]
        );
    }

    #[test]
    fn a_collection_of_this_host_has_memory_cpus_and_the_data_dirs_filesystem() {
        let collector = HostStatsCollector::new(std::env::temp_dir());
        let first = collector.collect(4000.0);
        let memory = first.memory.as_ref().expect("memory");
        assert!(
            memory.total > 0 && memory.total >= memory.free,
            "{memory:?}"
        );
        assert!(!first.cpu.is_empty());
        let dir = first.alloc_dir_stats.as_ref().expect("data dir filesystem");
        assert!(dir.size > 0 && dir.size >= dir.used, "{dir:?}");
        assert!(first.uptime > 0);
        let json = serde_json::to_value(&first).unwrap();
        for key in [
            "Memory",
            "CPU",
            "DiskStats",
            "AllocDirStats",
            "DeviceStats",
            "Uptime",
            "Timestamp",
            "CPUTicksConsumed",
        ] {
            assert!(json.get(key).is_some(), "{key} missing in {json}");
        }
    }
}
