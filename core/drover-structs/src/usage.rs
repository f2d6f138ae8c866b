//! What allocations hold on their node: cpu, memory, disk and host ports. Shared by the
//! scheduler (fit checks) and the state store (per-node usage kept up to date on every write).

use crate::alloc::Allocation;
use crate::resources::ComparableResources;

/// The cpu, memory and disk an allocation holds: its `AllocatedResources`, or for allocations
/// written before those existed, the legacy `Resources`.
pub fn alloc_resources(alloc: &Allocation) -> ComparableResources {
    if let Some(ar) = &alloc.allocated_resources {
        return ar.comparable();
    }
    match &alloc.resources {
        Some(r) => ComparableResources {
            cpu_shares: r.cpu,
            memory_mb: r.memory_mb,
            disk_mb: r.disk_mb,
        },
        None => ComparableResources::default(),
    }
}

/// Calls `f(host_ip, port)` for every host port the allocation holds: group ports and task
/// network ports, or the legacy task networks for old allocations.
pub fn for_each_port<'a>(alloc: &'a Allocation, mut f: impl FnMut(&'a str, i64)) {
    if let Some(ar) = &alloc.allocated_resources {
        for p in ar.shared.ports.iter().flatten() {
            if p.value > 0 {
                f(p.host_ip.as_str(), p.value);
            }
        }
        for t in ar.tasks.values() {
            for n in t.networks.iter().flatten() {
                for p in n.all_ports().filter(|p| p.value > 0) {
                    f(n.ip.as_str(), p.value);
                }
            }
        }
        return;
    }
    for r in alloc.task_resources.iter().flat_map(|m| m.values()) {
        for n in r.networks.iter().flatten() {
            for p in n.all_ports().filter(|p| p.value > 0) {
                f(n.ip.as_str(), p.value);
            }
        }
    }
}

/// What a node's non-terminal allocations hold together: cpu, memory and disk, and the host
/// ports (one entry per holder, so that a port held twice shows as a collision).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAllocUsage {
    pub used: ComparableResources,
    /// (host ip, port) for every host port held.
    pub ports: Vec<(String, i64)>,
    /// How many allocations are counted.
    pub allocs: usize,
}

impl NodeAllocUsage {
    /// Counts a non-terminal allocation in (terminal ones hold nothing and are ignored).
    pub fn add(&mut self, alloc: &Allocation) {
        if alloc.terminal() {
            return;
        }
        self.used.add(&alloc_resources(alloc));
        for_each_port(alloc, |ip, port| self.ports.push((ip.to_string(), port)));
        self.allocs += 1;
    }

    /// Takes a non-terminal allocation counted earlier back out (its version as counted).
    pub fn remove(&mut self, alloc: &Allocation) {
        if alloc.terminal() {
            return;
        }
        self.used.subtract(&alloc_resources(alloc));
        for_each_port(alloc, |ip, port| {
            if let Some(i) = self.ports.iter().position(|(i, p)| *p == port && i == ip) {
                self.ports.swap_remove(i);
            }
        });
        self.allocs = self.allocs.saturating_sub(1);
    }
}
