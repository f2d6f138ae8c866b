//! The agent's host as Nomad's `/v1/agent/host` describes it (`HostData`): the kernel, the
//! network interfaces and their addresses, `/etc/resolv.conf`, `/etc/hosts`, the agent's
//! environment and the disks. Environment values whose names look like credentials are
//! redacted, as Nomad redacts them.

use std::collections::BTreeMap;
use std::ffi::CStr;

use serde::Serialize;

/// Nomad's `HostData`.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostData {
    #[serde(rename = "OS")]
    pub os: String,
    /// One map per interface address (`name`, `address`, `netmask`, `type`, `flags`).
    pub network: Vec<BTreeMap<String, String>>,
    pub resolv_conf: String,
    pub hosts: String,
    pub environment: BTreeMap<String, String>,
    /// By mount point.
    pub disk: BTreeMap<String, DiskUsage>,
}

/// Nomad's `DiskUsage`, in MB.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DiskUsage {
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
    #[serde(rename = "UsedMB")]
    pub used_mb: i64,
}

/// Reads the host now.
pub fn collect() -> HostData {
    HostData {
        os: uname(),
        network: interfaces(),
        resolv_conf: std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
        hosts: std::fs::read_to_string("/etc/hosts").unwrap_or_default(),
        environment: redacted(std::env::vars()),
        disk: crate::host_stats::physical_disks()
            .into_iter()
            .map(|d| {
                let mb = |bytes: u64| (bytes / (1024 * 1024)) as i64;
                let usage = DiskUsage {
                    disk_mb: mb(d.size),
                    used_mb: mb(d.used),
                };
                (d.mountpoint, usage)
            })
            .collect(),
    }
}

/// Names that hold credentials (Nomad's rule: a name containing TOKEN or SECRET, or one of
/// the client's default deny list).
fn is_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.contains("TOKEN")
        || upper.contains("SECRET")
        || crate::taskenv::EnvDenylist::default().contains(name)
}

fn redacted(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.map(|(k, v)| {
        let v = if is_secret(&k) {
            "<redacted>".to_string()
        } else {
            v
        };
        (k, v)
    })
    .collect()
}

/// `sysname nodename release version machine`, as Nomad prints `uname`.
fn uname() -> String {
    // SAFETY: `u` is a zeroed out-parameter that uname fills with NUL-terminated strings.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    let field = |f: &[libc::c_char]| {
        // SAFETY: uname wrote a NUL-terminated string into each field.
        unsafe { CStr::from_ptr(f.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    [
        &u.sysname[..],
        &u.nodename,
        &u.release,
        &u.version,
        &u.machine,
    ]
    .iter()
    .map(|f| field(f))
    .collect::<Vec<_>>()
    .join(" ")
}

/// Every address of every interface (`getifaddrs`).
fn interfaces() -> Vec<BTreeMap<String, String>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let (Some(address), Some(kind)) = (sockaddr_ip(ifa.ifa_addr), ip_kind(ifa.ifa_addr)) else {
            continue;
        };
        // SAFETY: ifa_name is a NUL-terminated interface name.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let mut m = BTreeMap::new();
        m.insert("name".to_string(), name);
        m.insert("address".to_string(), address);
        m.insert("type".to_string(), kind.to_string());
        if let Some(mask) = sockaddr_ip(ifa.ifa_netmask) {
            m.insert("netmask".to_string(), mask);
        }
        m.insert("flags".to_string(), flags(ifa.ifa_flags));
        out.push(m);
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

fn ip_kind(sa: *const libc::sockaddr) -> Option<&'static str> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: a non-null sockaddr from getifaddrs starts with its family.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => Some("IPv4"),
        libc::AF_INET6 => Some("IPv6"),
        _ => None,
    }
}

fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<String> {
    match ip_kind(sa)? {
        "IPv4" => {
            // SAFETY: the family says this is a sockaddr_in.
            let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
            Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).to_string())
        }
        _ => {
            // SAFETY: the family says this is a sockaddr_in6.
            let sin6 = unsafe { &*(sa as *const libc::sockaddr_in6) };
            Some(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr).to_string())
        }
    }
}

/// Go's `net.Flags` string: `up|broadcast|loopback|multicast`.
fn flags(f: libc::c_uint) -> String {
    let names = [
        (libc::IFF_UP, "up"),
        (libc::IFF_BROADCAST, "broadcast"),
        (libc::IFF_LOOPBACK, "loopback"),
        (libc::IFF_POINTOPOINT, "pointtopoint"),
        (libc::IFF_MULTICAST, "multicast"),
    ];
    names
        .iter()
        .filter(|(bit, _)| f & (*bit as libc::c_uint) != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_environment_are_redacted() {
        let env = redacted(
            [
                ("NOMAD_TOKEN", "s3cr3t"),
                ("MY_SECRET_KEY", "k"),
                ("VAULT_TOKEN", "v"),
                ("PATH", "/usr/bin"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        assert_eq!(env["NOMAD_TOKEN"], "<redacted>");
        assert_eq!(env["MY_SECRET_KEY"], "<redacted>");
        assert_eq!(env["VAULT_TOKEN"], "<redacted>");
        assert_eq!(env["PATH"], "/usr/bin");
    }

    #[test]
    fn this_host_has_a_kernel_a_loopback_address_and_disks() {
        let h = collect();
        assert!(h.os.starts_with("Linux "), "{}", h.os);
        let lo = h
            .network
            .iter()
            .find(|m| m["address"] == "127.0.0.1")
            .expect("loopback address");
        assert!(lo["flags"].contains("loopback"), "{lo:?}");
        assert_eq!(lo["type"], "IPv4");
        let json = serde_json::to_value(&h).unwrap();
        for key in [
            "OS",
            "Network",
            "ResolvConf",
            "Hosts",
            "Environment",
            "Disk",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
    }
}
