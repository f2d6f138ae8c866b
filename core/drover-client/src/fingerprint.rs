//! Host fingerprint: the node attributes and total resources a Nomad client reports when it
//! registers, read from /proc, /sys, uname and statvfs.
//!
//! Attribute names and value formats follow Nomad's fingerprinters (arch, cpu, memory, host,
//! storage, network, nomad). Every probe is best effort: a probe that fails leaves its attributes
//! out and logs a warning, because a node with a partial fingerprint can still run work while a
//! node that refuses to start cannot.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use tracing::warn;

const BYTES_PER_MIB: u64 = 1024 * 1024;

/// Speed assumed per core when nothing on the host says how fast it is. Nomad's numalib falls back
/// to 1 GHz per core in the same situation.
pub const DEFAULT_CPU_MHZ: u64 = 1000;

const SYS_CPU: &str = "/sys/devices/system/cpu";

/// Where the per-core CPU speed came from, worst source over all cores. Kept out of the attribute
/// map on purpose: attributes are matched by job constraints, and Nomad has no such attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CpuSpeedSource {
    /// `cpufreq/base_frequency` in sysfs (Nomad's first choice).
    BaseFrequency,
    /// `cpufreq/cpuinfo_max_freq` in sysfs (Nomad's second choice).
    MaxFrequency,
    /// The `cpu MHz` line of /proc/cpuinfo, the current clock; common on VMs without cpufreq.
    ProcCpuinfo,
    /// Nothing was readable; [`DEFAULT_CPU_MHZ`] per core was assumed.
    Default,
}

/// What the agent learned about its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFingerprint {
    /// Node attributes under Nomad's names (`cpu.arch`, `kernel.name`, `unique.hostname`, ...).
    pub attributes: BTreeMap<String, String>,
    /// Sum of the speeds of all online cores, Nomad's `cpu.totalcompute`.
    pub cpu_total_mhz: u64,
    /// How trustworthy `cpu_total_mhz` is.
    pub cpu_speed_source: CpuSpeedSource,
    /// Total memory in MiB.
    pub memory_mb: u64,
    /// Free disk space in MiB on the data dir's filesystem (Nomad reports free, not total).
    pub disk_mb: u64,
}

/// Fingerprints this host. `data_dir` is the agent's data directory (storage is measured on its
/// filesystem); `nomad_version` is reported as `nomad.version`.
pub fn fingerprint_host(data_dir: &Path, nomad_version: &str) -> HostFingerprint {
    let mut attributes = BTreeMap::new();
    attributes.insert("nomad.version".to_string(), nomad_version.to_string());
    attributes.insert("cpu.arch".to_string(), go_arch(std::env::consts::ARCH));

    let cpu = probe_cpu();
    cpu.add_attributes(&mut attributes);

    let memory_bytes = read_to_string_logged("/proc/meminfo")
        .and_then(|text| parse_meminfo_total_bytes(&text))
        .unwrap_or(0);
    if memory_bytes > 0 {
        attributes.insert("memory.totalbytes".to_string(), memory_bytes.to_string());
    } else {
        warn!("fingerprint: total memory unknown");
    }

    add_kernel_attributes(&mut attributes);
    add_os_attributes(&mut attributes);
    match nix::unistd::gethostname() {
        Ok(name) => {
            attributes.insert(
                "unique.hostname".to_string(),
                name.to_string_lossy().into_owned(),
            );
        }
        Err(err) => warn!(error = %err, "fingerprint: hostname unknown"),
    }

    let disk_free_bytes = match probe_storage(data_dir) {
        Ok(storage) => {
            storage.add_attributes(&mut attributes);
            storage.bytes_free
        }
        Err(err) => {
            warn!(data_dir = %data_dir.display(), error = %err, "fingerprint: storage unknown");
            0
        }
    };

    if let Some(ip) = probe_ip_address() {
        attributes.insert("unique.network.ip-address".to_string(), ip.to_string());
    }
    // The agent's own program: what Connect sidecar tasks run as Drover's proxy.
    if let Ok(exe) = std::env::current_exe() {
        attributes.insert(
            "unique.drover.binary".to_string(),
            exe.display().to_string(),
        );
    }

    HostFingerprint {
        attributes,
        cpu_total_mhz: cpu.total_mhz(),
        cpu_speed_source: cpu.source,
        memory_mb: memory_bytes / BYTES_PER_MIB,
        disk_mb: disk_free_bytes / BYTES_PER_MIB,
    }
}

/// Go's GOARCH name for a Rust target arch, since `cpu.arch` carries Go's names in Nomad.
fn go_arch(rust_arch: &str) -> String {
    match rust_arch {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "riscv64" => "riscv64",
        "s390x" => "s390x",
        "loongarch64" => "loong64",
        "mips64" => "mips64",
        other => other,
    }
    .to_string()
}

fn read_to_string_logged(path: &str) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(err) => {
            warn!(path, error = %err, "fingerprint: cannot read");
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// CPU

#[derive(Debug, Clone, PartialEq, Eq)]
struct CpuProbe {
    model_name: Option<String>,
    core_mhz: Vec<u64>,
    source: CpuSpeedSource,
}

impl CpuProbe {
    fn total_mhz(&self) -> u64 {
        self.core_mhz.iter().sum()
    }

    fn add_attributes(&self, attributes: &mut BTreeMap<String, String>) {
        if let Some(model) = &self.model_name {
            attributes.insert("cpu.modelname".to_string(), model.clone());
        }
        if let Some(first) = self.core_mhz.first() {
            attributes.insert("cpu.frequency".to_string(), first.to_string());
        }
        let cores = self.core_mhz.len().to_string();
        attributes.insert("cpu.numcores".to_string(), cores.clone());
        // No cores are withheld from tasks (no reserved cores), so all of them are reservable and
        // usable compute equals total compute.
        attributes.insert("cpu.reservablecores".to_string(), cores);
        let total = self.total_mhz().to_string();
        attributes.insert("cpu.totalcompute".to_string(), total.clone());
        attributes.insert("cpu.usablecompute".to_string(), total);
    }
}

fn probe_cpu() -> CpuProbe {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let info = parse_cpuinfo(&cpuinfo);

    let online = std::fs::read_to_string(format!("{SYS_CPU}/online"))
        .ok()
        .map(|text| parse_cpu_list(&text))
        .filter(|ids| !ids.is_empty());
    let core_ids: Vec<u32> = match online {
        Some(ids) => ids,
        None if !info.processors.is_empty() => info.processors.iter().map(|p| p.id).collect(),
        None => {
            let count = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..u32::try_from(count).unwrap_or(1)).collect()
        }
    };

    let sysfs_khz = |core: u32, file: &str| -> Option<u64> {
        std::fs::read_to_string(format!("{SYS_CPU}/cpu{core}/cpufreq/{file}"))
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .filter(|&khz| khz > 0)
    };

    let mut source = CpuSpeedSource::BaseFrequency;
    let mut core_mhz = Vec::with_capacity(core_ids.len());
    for core in core_ids {
        let (mhz, core_source) = if let Some(khz) = sysfs_khz(core, "base_frequency") {
            (khz / 1000, CpuSpeedSource::BaseFrequency)
        } else if let Some(khz) = sysfs_khz(core, "cpuinfo_max_freq") {
            (khz / 1000, CpuSpeedSource::MaxFrequency)
        } else if let Some(mhz) = info.mhz_of(core) {
            (mhz, CpuSpeedSource::ProcCpuinfo)
        } else {
            (DEFAULT_CPU_MHZ, CpuSpeedSource::Default)
        };
        source = source.max(core_source);
        core_mhz.push(mhz);
    }
    if source == CpuSpeedSource::Default {
        warn!(
            mhz_per_core = DEFAULT_CPU_MHZ,
            "fingerprint: CPU speed unknown, assuming a default"
        );
    }
    CpuProbe {
        model_name: info.model_name,
        core_mhz,
        source,
    }
}

#[derive(Debug, Clone, PartialEq)]
struct CpuinfoProcessor {
    id: u32,
    mhz: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Cpuinfo {
    model_name: Option<String>,
    processors: Vec<CpuinfoProcessor>,
}

impl Cpuinfo {
    /// The clock of one processor, or of the first one that states a clock when that processor's
    /// own entry is missing (all cores of a VM report the same nominal clock).
    fn mhz_of(&self, core: u32) -> Option<u64> {
        let own = self
            .processors
            .iter()
            .find(|p| p.id == core)
            .and_then(|p| p.mhz);
        let any = || self.processors.iter().find_map(|p| p.mhz);
        own.or_else(any)
            .filter(|mhz| mhz.is_finite() && *mhz >= 1.0)
            // Rounded like Nomad's "%.0f"; the range check above keeps the cast meaningful.
            .map(|mhz| mhz.round() as u64)
    }
}

/// Parses /proc/cpuinfo: one block per processor, `key<TAB>: value` lines.
fn parse_cpuinfo(text: &str) -> Cpuinfo {
    let mut info = Cpuinfo::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        match key {
            "processor" => {
                if let Ok(id) = value.parse() {
                    info.processors.push(CpuinfoProcessor { id, mhz: None });
                }
            }
            "model name" if info.model_name.is_none() && !value.is_empty() => {
                info.model_name = Some(value.to_string());
            }
            "cpu MHz" => {
                if let (Some(last), Ok(mhz)) = (info.processors.last_mut(), value.parse()) {
                    last.mhz = Some(mhz);
                }
            }
            _ => {}
        }
    }
    info
}

/// Parses the kernel's CPU list format, e.g. `0-3,8,10-11`. Malformed parts are skipped.
fn parse_cpu_list(text: &str) -> Vec<u32> {
    let mut ids = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((low, high)) => {
                if let (Ok(low), Ok(high)) = (low.parse::<u32>(), high.parse::<u32>()) {
                    ids.extend(low..=high);
                }
            }
            None => {
                if let Ok(id) = part.parse() {
                    ids.push(id);
                }
            }
        }
    }
    ids
}

// ---------------------------------------------------------------------------------------------
// Memory, kernel, OS

/// `MemTotal` of /proc/meminfo in bytes (the file states kB, meaning KiB).
fn parse_meminfo_total_bytes(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("MemTotal:")?;
        let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
        kib.checked_mul(1024)
    })
}

fn add_kernel_attributes(attributes: &mut BTreeMap<String, String>) {
    let uts = nix::sys::utsname::uname();
    match uts {
        Ok(uts) => {
            // Nomad reports Go's GOOS here, which is the lowercase kernel name.
            let name = uts.sysname().to_string_lossy().to_lowercase();
            attributes.insert("kernel.name".to_string(), name);
            attributes.insert(
                "kernel.version".to_string(),
                uts.release().to_string_lossy().into_owned(),
            );
            attributes.insert(
                "kernel.arch".to_string(),
                uts.machine().to_string_lossy().into_owned(),
            );
        }
        Err(err) => {
            warn!(error = %err, "fingerprint: uname failed");
            attributes.insert("kernel.name".to_string(), std::env::consts::OS.to_string());
        }
    }
}

fn add_os_attributes(attributes: &mut BTreeMap<String, String>) {
    let text = ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok());
    let Some(text) = text else {
        warn!("fingerprint: no os-release file");
        return;
    };
    let release = parse_os_release(&text);
    if let Some(id) = release.get("ID") {
        attributes.insert("os.name".to_string(), id.clone());
    }
    if let Some(version) = release.get("VERSION_ID") {
        attributes.insert("os.version".to_string(), version.clone());
    }
}

/// Parses os-release(5): `KEY=value` lines, values optionally quoted, `#` comments.
fn parse_os_release(text: &str) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, raw)) = line.split_once('=') else {
            continue;
        };
        let value = unquote_shell_value(raw.trim());
        fields.insert(key.trim().to_string(), value);
    }
    fields
}

fn unquote_shell_value(raw: &str) -> String {
    for quote in ['"', '\''] {
        if let Some(inner) = raw
            .strip_prefix(quote)
            .and_then(|rest| rest.strip_suffix(quote))
        {
            if quote == '\'' {
                return inner.to_string();
            }
            let mut out = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        out.push(escaped);
                    }
                } else {
                    out.push(c);
                }
            }
            return out;
        }
    }
    raw.to_string()
}

// ---------------------------------------------------------------------------------------------
// Storage

#[derive(Debug, Clone, PartialEq, Eq)]
struct StorageProbe {
    volume: String,
    bytes_total: u64,
    bytes_free: u64,
}

impl StorageProbe {
    fn add_attributes(&self, attributes: &mut BTreeMap<String, String>) {
        attributes.insert("unique.storage.volume".to_string(), self.volume.clone());
        attributes.insert(
            "unique.storage.bytestotal".to_string(),
            self.bytes_total.to_string(),
        );
        attributes.insert(
            "unique.storage.bytesfree".to_string(),
            self.bytes_free.to_string(),
        );
    }
}

fn probe_storage(data_dir: &Path) -> Result<StorageProbe, nix::Error> {
    // The data dir may not exist yet on first start; its nearest existing ancestor lives on the
    // filesystem the data dir will be created on.
    let existing = nearest_existing_ancestor(data_dir);
    let stats = nix::sys::statvfs::statvfs(existing.as_path())?;
    // c_ulong and fsblkcnt_t are 32 bits on some targets, 64 on others.
    #[allow(clippy::useless_conversion)]
    let (fragment, blocks, blocks_available) = (
        u64::from(stats.fragment_size()),
        u64::from(stats.blocks()),
        u64::from(stats.blocks_available()),
    );
    let bytes_total = blocks.saturating_mul(fragment);
    // Space available to unprivileged users, like df's "Available" column that Nomad parses.
    let bytes_free = blocks_available.saturating_mul(fragment);

    let canonical = std::fs::canonicalize(&existing).unwrap_or(existing);
    // df's "Filesystem" column, which is what Nomad reports as the volume.
    let volume = crate::mountinfo::read_self()
        .ok()
        .and_then(|mounts| {
            crate::mountinfo::mount_containing(&mounts, &canonical).map(|m| m.source.clone())
        })
        .unwrap_or_default();
    Ok(StorageProbe {
        volume,
        bytes_total,
        bytes_free,
    })
}

fn nearest_existing_ancestor(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    absolute
        .ancestors()
        .find(|candidate| candidate.exists())
        .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
}

// ---------------------------------------------------------------------------------------------
// Network

/// The IPv4 address of the interface holding the default route, else of the first interface
/// that is up and not loopback. Nomad picks the default-route interface the same way.
fn probe_ip_address() -> Option<IpAddr> {
    let default_interface = std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|text| default_route_interface(&text));
    let addresses: Vec<(String, Ipv4Addr, bool)> = match nix::ifaddrs::getifaddrs() {
        Ok(iter) => iter
            .filter_map(|entry| {
                use nix::net::if_::InterfaceFlags;
                let ip = entry.address?.as_sockaddr_in()?.ip();
                let usable = entry.flags.contains(InterfaceFlags::IFF_UP)
                    && !entry.flags.contains(InterfaceFlags::IFF_LOOPBACK);
                Some((entry.interface_name, ip, usable))
            })
            .collect(),
        Err(err) => {
            warn!(error = %err, "fingerprint: cannot list interfaces");
            return None;
        }
    };
    let on_default = default_interface.and_then(|name| {
        addresses
            .iter()
            .find(|(iface, _, _)| *iface == name)
            .map(|(_, ip, _)| *ip)
    });
    on_default
        .or_else(|| {
            addresses
                .iter()
                .find(|(_, _, usable)| *usable)
                .map(|(_, ip, _)| *ip)
        })
        .map(IpAddr::V4)
}

/// The interface of the lowest-metric default route in /proc/net/route.
fn default_route_interface(route_table: &str) -> Option<String> {
    const RTF_UP: u32 = 0x1;
    route_table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (iface, destination, flags, metric, mask) = (
                *fields.first()?,
                *fields.get(1)?,
                *fields.get(3)?,
                *fields.get(6)?,
                *fields.get(7)?,
            );
            let flags = u32::from_str_radix(flags, 16).ok()?;
            let is_default = destination == "00000000" && mask == "00000000";
            (is_default && flags & RTF_UP != 0)
                .then(|| Some((metric.parse::<u64>().ok()?, iface.to_string())))
                .flatten()
        })
        .min()
        .map(|(_, iface)| iface)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO_X86: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\ncpu MHz\t\t: 2199.998\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\ncpu MHz\t\t: 2200.4\n";

    #[test]
    fn cpuinfo_gives_model_name_and_rounded_clock_per_processor() {
        let info = parse_cpuinfo(CPUINFO_X86);
        assert_eq!(
            info.model_name.as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        assert_eq!(info.processors.len(), 2);
        assert_eq!(info.mhz_of(0), Some(2200));
        assert_eq!(info.mhz_of(1), Some(2200));
    }

    #[test]
    fn cpuinfo_without_clock_for_a_core_borrows_another_cores_clock() {
        let info = parse_cpuinfo("processor : 0\ncpu MHz : 1500.0\nprocessor : 1\n");
        assert_eq!(info.mhz_of(1), Some(1500));
        assert_eq!(info.mhz_of(7), Some(1500));
    }

    #[test]
    fn arm_cpuinfo_has_no_clock_and_no_model_name() {
        let info = parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 48.00\nCPU implementer\t: 0x41\n");
        assert_eq!(info.model_name, None);
        assert_eq!(info.mhz_of(0), None);
    }

    #[test]
    fn cpu_list_expands_ranges_and_skips_garbage() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("0\n"), vec![0]);
        assert_eq!(parse_cpu_list("x,2"), vec![2]);
        assert!(parse_cpu_list("").is_empty());
    }

    #[test]
    fn cpu_attributes_use_nomad_names_and_sum_cores() {
        let probe = CpuProbe {
            model_name: Some("Test CPU".to_string()),
            core_mhz: vec![2000, 2000, 2000],
            source: CpuSpeedSource::BaseFrequency,
        };
        let mut attrs = BTreeMap::new();
        probe.add_attributes(&mut attrs);
        assert_eq!(attrs["cpu.numcores"], "3");
        assert_eq!(attrs["cpu.frequency"], "2000");
        assert_eq!(attrs["cpu.totalcompute"], "6000");
        assert_eq!(attrs["cpu.modelname"], "Test CPU");
        assert_eq!(probe.total_mhz(), 6000);
    }

    #[test]
    fn meminfo_total_is_converted_from_kib_to_bytes() {
        let text = "MemTotal:       16303300 kB\nMemFree:         1000 kB\n";
        assert_eq!(parse_meminfo_total_bytes(text), Some(16_303_300 * 1024));
        assert_eq!(parse_meminfo_total_bytes("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn os_release_values_are_unquoted() {
        let text =
            "# comment\nNAME=\"Debian GNU/Linux\"\nID=debian\nVERSION_ID=\"12\"\nPRETTY='x y'\n";
        let fields = parse_os_release(text);
        assert_eq!(fields["ID"], "debian");
        assert_eq!(fields["VERSION_ID"], "12");
        assert_eq!(fields["NAME"], "Debian GNU/Linux");
        assert_eq!(fields["PRETTY"], "x y");
    }

    #[test]
    fn go_arch_names_match_goarch() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("x86"), "386");
    }

    #[test]
    fn default_route_interface_prefers_lowest_metric_up_route() {
        let table = "\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth1\t00000000\t0102A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0
eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth0\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0
down0\t00000000\t0101A8C0\t0002\t0\t0\t1\t00000000\t0\t0\t0
";
        assert_eq!(default_route_interface(table).as_deref(), Some("eth0"));
        assert_eq!(default_route_interface("Iface\tDestination\n"), None);
    }

    #[test]
    fn storage_of_missing_data_dir_is_measured_on_its_existing_ancestor() {
        let base = std::env::temp_dir().join(format!("drover-fp-{}", uuid::Uuid::new_v4()));
        let probe = probe_storage(&base.join("not/yet/created")).expect("statvfs");
        assert!(probe.bytes_total > 0);
        assert!(probe.bytes_free <= probe.bytes_total);
    }

    #[test]
    fn fingerprint_of_this_host_has_core_attributes() {
        let fp = fingerprint_host(&std::env::temp_dir(), "1.2.3");
        assert_eq!(fp.attributes["nomad.version"], "1.2.3");
        assert_eq!(fp.attributes["kernel.name"], "linux");
        for key in [
            "cpu.arch",
            "cpu.numcores",
            "cpu.totalcompute",
            "kernel.version",
            "kernel.arch",
            "memory.totalbytes",
            "unique.hostname",
            "unique.storage.bytestotal",
            "unique.storage.bytesfree",
        ] {
            assert!(fp.attributes.contains_key(key), "missing {key}");
        }
        assert!(fp.cpu_total_mhz > 0);
        assert!(fp.memory_mb > 0);
        assert_eq!(
            fp.attributes["cpu.totalcompute"],
            fp.cpu_total_mhz.to_string()
        );
    }
}
