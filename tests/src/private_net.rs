//! A private network for a test: the calling thread leaves the machine's network namespace
//! for a new one of its own, with loopback up and one veth pair holding the "host" address
//! (the default route's interface, so an agent started from this thread fingerprints it).
//! Everything the thread starts afterwards (agents, CLIs, tasks) inherits it, so no traffic
//! the test makes leaves it.

use std::process::Command;

/// The address the private network's host interface gets.
pub const HOST_IP: &str = "10.99.0.1";

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Moves this thread into a new network namespace and sets it up; `Err` says why it cannot
/// (not root, no `ip`), for the test to skip with.
pub fn enter_private_network() -> Result<(), String> {
    // SAFETY: unshare(CLONE_NEWNET) moves only the calling thread (and what it starts later).
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        ));
    }
    ip(&["link", "set", "lo", "up"])?;
    ip(&[
        "link", "add", "drv0", "type", "veth", "peer", "name", "drv1",
    ])?;
    ip(&["addr", "add", &format!("{HOST_IP}/24"), "dev", "drv0"])?;
    ip(&["link", "set", "drv0", "up"])?;
    ip(&["link", "set", "drv1", "up"])?;
    ip(&["route", "add", "default", "dev", "drv0"])?;
    Ok(())
}
