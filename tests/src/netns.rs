//! Test hosts in network namespaces: a namespace joined to this host by a veth pair, each end
//! with its own address, so an agent inside it reaches the servers (and is reached) only over
//! that link, and a test partitions it by taking the link down. Needs root and iproute2's
//! `ip`; [`NetNs::create`] says why when it cannot, so tests can skip.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A network namespace linked to this host; removed (with its link) when dropped.
pub struct NetNs {
    pub name: String,
    host_if: String,
    ns_if: String,
    /// The host's end of the link: what agents inside reach this host at.
    pub host_ip: String,
    /// The namespace's end of the link.
    pub ns_ip: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetNs {
    /// A fresh namespace with a /30 link to this host. Names and addresses are unique per
    /// process and call, so tests running at once do not meet.
    pub fn create() -> Result<NetNs, String> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        // 10.A.B.C/30: A and B from the process, C from the call (63 links per process).
        let (a, b, c) = (100 + (pid % 100), (pid / 100) % 250, (seq % 63) * 4);
        let tag = format!("{}{seq}", pid % 100_000);
        let ns = NetNs {
            name: format!("drover-{tag}"),
            host_if: format!("dvh{tag}"),
            ns_if: format!("dvn{tag}"),
            host_ip: format!("10.{a}.{b}.{}", c + 1),
            ns_ip: format!("10.{a}.{b}.{}", c + 2),
        };
        ip(&["netns", "add", &ns.name])?;
        let setup = || -> Result<(), String> {
            ip(&[
                "link",
                "add",
                &ns.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &ns.ns_if,
            ])?;
            ip(&["link", "set", &ns.ns_if, "netns", &ns.name])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/30", ns.host_ip),
                "dev",
                &ns.host_if,
            ])?;
            ip(&["link", "set", &ns.host_if, "up"])?;
            ns.exec_ip(&["addr", "add", &format!("{}/30", ns.ns_ip), "dev", &ns.ns_if])?;
            ns.exec_ip(&["link", "set", &ns.ns_if, "up"])?;
            ns.exec_ip(&["link", "set", "lo", "up"])
        };
        // On failure the namespace is dropped, which removes what was made.
        setup()?;
        Ok(ns)
    }

    fn exec_ip(&self, args: &[&str]) -> Result<(), String> {
        let mut full = vec!["netns", "exec", &self.name, "ip"];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// Cuts the namespace off: its end of the link goes down.
    pub fn link_down(&self) {
        self.exec_ip(&["link", "set", &self.ns_if, "down"])
            .expect("take the link down");
    }

    /// Joins it again.
    pub fn link_up(&self) {
        self.exec_ip(&["link", "set", &self.ns_if, "up"])
            .expect("bring the link up");
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace deletes its veth end, and with it the host's.
        let _ = ip(&["netns", "del", &self.name]);
        let _ = ip(&["link", "del", &self.host_if]);
    }
}
