//! Whether a set of allocations fits on a node (Nomad's `AllocsFit`): the summed cpu, memory and
//! disk of the live allocations against what the node offers after its reservations, and no host
//! port held twice or held on a port the node reserves.
//!
//! The plan applier calls this for every node of every plan, so it allocates nothing unless some
//! allocation holds ports.

use drover_structs::{Allocation, ComparableResources, Node};

// Shared with the state store, which keeps per-node usage up to date.
pub use drover_structs::usage::{alloc_resources, for_each_port};

/// Why allocations do not fit on a node. [`FitError::dimension`] names the exhausted dimension the
/// way Nomad's `DimensionExhausted` metric does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    #[error("cpu exhausted: allocations ask {asked} MHz, node {node_id} offers {available} MHz")]
    Cpu {
        node_id: String,
        asked: i64,
        available: i64,
    },
    #[error("memory exhausted: allocations ask {asked} MB, node {node_id} offers {available} MB")]
    Memory {
        node_id: String,
        asked: i64,
        available: i64,
    },
    #[error("disk exhausted: allocations ask {asked} MB, node {node_id} offers {available} MB")]
    Disk {
        node_id: String,
        asked: i64,
        available: i64,
    },
    #[error("network: port collision: port {port} on {ip:?} of node {node_id} is {holder}")]
    PortCollision {
        node_id: String,
        ip: String,
        port: i64,
        /// "reserved by the node" or "held by two allocations".
        holder: &'static str,
    },
}

impl FitError {
    /// The exhausted dimension as Nomad names it: `cpu`, `memory`, `disk` or
    /// `network: port collision`.
    pub fn dimension(&self) -> &'static str {
        match self {
            FitError::Cpu { .. } => "cpu",
            FitError::Memory { .. } => "memory",
            FitError::Disk { .. } => "disk",
            FitError::PortCollision { .. } => "network: port collision",
        }
    }
}

/// Checks that the non-terminal allocations among `allocs` fit on `node` together.
pub fn allocs_fit(node: &Node, allocs: &[&Allocation]) -> Result<(), FitError> {
    let mut used = ComparableResources::default();
    let mut holds_ports = false;
    for alloc in allocs.iter().filter(|a| !a.terminal()) {
        used.add(&alloc_resources(alloc));
        holds_ports = holds_ports || has_ports(alloc);
    }
    check_resources(node, &used)?;
    if holds_ports {
        let mut held: Vec<(&str, i64)> = Vec::new();
        for alloc in allocs.iter().filter(|a| !a.terminal()) {
            for_each_port(alloc, |ip, port| held.push((ip, port)));
        }
        check_ports(node, held)?;
    }
    Ok(())
}

/// Like [`allocs_fit`], for a node's usage already summed (the state store keeps one per node).
pub fn usage_fits(
    node: &Node,
    usage: &drover_structs::usage::NodeAllocUsage,
) -> Result<(), FitError> {
    check_resources(node, &usage.used)?;
    if !usage.ports.is_empty() {
        check_ports(
            node,
            usage
                .ports
                .iter()
                .map(|(ip, p)| (ip.as_str(), *p))
                .collect(),
        )?;
    }
    Ok(())
}

fn check_resources(node: &Node, used: &ComparableResources) -> Result<(), FitError> {
    let available = node.available();
    if let Err(dimension) = available.superset(used) {
        let node_id = node.id.clone();
        return Err(match dimension {
            "cpu" => FitError::Cpu {
                node_id,
                asked: used.cpu_shares,
                available: available.cpu_shares,
            },
            "memory" => FitError::Memory {
                node_id,
                asked: used.memory_mb,
                available: available.memory_mb,
            },
            _ => FitError::Disk {
                node_id,
                asked: used.disk_mb,
                available: available.disk_mb,
            },
        });
    }
    Ok(())
}

fn check_ports(node: &Node, mut held: Vec<(&str, i64)>) -> Result<(), FitError> {
    let reserved = &node.reserved_resources.networks.reserved_host_ports;
    if let Some((ip, port)) = held.iter().find(|(_, p)| port_in_ranges(reserved, *p)) {
        return Err(FitError::PortCollision {
            node_id: node.id.clone(),
            ip: ip.to_string(),
            port: *port,
            holder: "reserved by the node",
        });
    }
    held.sort_unstable();
    if let Some(w) = held.windows(2).find(|w| w[0] == w[1]) {
        return Err(FitError::PortCollision {
            node_id: node.id.clone(),
            ip: w[0].0.to_string(),
            port: w[0].1,
            holder: "held by two allocations",
        });
    }
    Ok(())
}

fn has_ports(alloc: &Allocation) -> bool {
    let mut any = false;
    for_each_port(alloc, |_, _| any = true);
    any
}

/// Whether `port` is in Nomad's port range list `"22,80,8000-8010"`, parsed in place. Malformed
/// entries are skipped (the client validated the list when it registered).
pub(crate) fn port_in_ranges(spec: &str, port: i64) -> bool {
    spec.split(',')
        .filter_map(parse_port_range)
        .any(|(lo, hi)| lo <= port && port <= hi)
}

pub(crate) fn parse_port_range(part: &str) -> Option<(i64, i64)> {
    let part = part.trim();
    if part.is_empty() {
        return None;
    }
    match part.split_once('-') {
        Some((a, b)) => {
            let lo = a.trim().parse().ok()?;
            let hi = b.trim().parse().ok()?;
            (lo <= hi).then_some((lo, hi))
        }
        None => {
            let p = part.parse().ok()?;
            Some((p, p))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{
        ALLOC_CLIENT_COMPLETE, AllocatedPortMapping, AllocatedResources, AllocatedTaskResources,
    };

    fn node(cpu: i64, mem: i64) -> Node {
        let mut n = Node {
            id: "n1".into(),
            ..Default::default()
        };
        n.node_resources.cpu.cpu_shares = cpu;
        n.node_resources.memory.memory_mb = mem;
        n.node_resources.disk.disk_mb = 10_000;
        n
    }

    fn alloc(cpu: i64, mem: i64, ports: &[i64]) -> Allocation {
        let mut ar = AllocatedResources::default();
        let mut t = AllocatedTaskResources::default();
        t.cpu.cpu_shares = cpu;
        t.memory.memory_mb = mem;
        ar.tasks.insert("t".into(), t);
        if !ports.is_empty() {
            ar.shared.ports = Some(
                ports
                    .iter()
                    .map(|p| AllocatedPortMapping {
                        label: "http".into(),
                        value: *p,
                        to: 0,
                        host_ip: "10.0.0.1".into(),
                    })
                    .collect(),
            );
        }
        Allocation {
            allocated_resources: Some(ar),
            ..Default::default()
        }
    }

    #[test]
    fn fits_when_sum_is_within_available_minus_reserved() {
        let mut n = node(2000, 2000);
        n.reserved_resources.cpu.cpu_shares = 500;
        let (a, b) = (alloc(700, 500, &[]), alloc(800, 500, &[]));
        assert_eq!(allocs_fit(&n, &[&a, &b]), Ok(()));
        let c = alloc(1, 1, &[]);
        let err = allocs_fit(&n, &[&a, &b, &c]).unwrap_err();
        assert_eq!(err.dimension(), "cpu");
    }

    #[test]
    fn names_memory_and_disk_dimensions() {
        let n = node(2000, 1000);
        let a = alloc(100, 1001, &[]);
        assert_eq!(allocs_fit(&n, &[&a]).unwrap_err().dimension(), "memory");
        let mut d = alloc(100, 100, &[]);
        if let Some(ar) = d.allocated_resources.as_mut() {
            ar.shared.disk_mb = 10_001;
        }
        assert_eq!(allocs_fit(&n, &[&d]).unwrap_err().dimension(), "disk");
    }

    #[test]
    fn terminal_allocations_hold_nothing() {
        let n = node(1000, 1000);
        let mut done = alloc(1000, 1000, &[8080]);
        done.client_status = ALLOC_CLIENT_COMPLETE.into();
        let live = alloc(1000, 1000, &[8080]);
        assert_eq!(allocs_fit(&n, &[&done, &live]), Ok(()));
    }

    #[test]
    fn same_port_twice_collides() {
        let n = node(4000, 4000);
        let a = alloc(10, 10, &[8080]);
        let b = alloc(10, 10, &[8080]);
        let err = allocs_fit(&n, &[&a, &b]).unwrap_err();
        assert_eq!(err.dimension(), "network: port collision");
        let c = alloc(10, 10, &[8081]);
        assert_eq!(allocs_fit(&n, &[&a, &c]), Ok(()));
    }

    #[test]
    fn node_reserved_ports_collide() {
        let mut n = node(4000, 4000);
        n.reserved_resources.networks.reserved_host_ports = "22, 8000-8100".into();
        let a = alloc(10, 10, &[8050]);
        let err = allocs_fit(&n, &[&a]).unwrap_err();
        assert!(matches!(err, FitError::PortCollision { port: 8050, .. }));
        let b = alloc(10, 10, &[8101]);
        assert_eq!(allocs_fit(&n, &[&b]), Ok(()));
    }

    #[test]
    fn legacy_resources_count_when_allocated_resources_are_missing() {
        let n = node(1000, 1000);
        let a = Allocation {
            resources: Some(Box::new(drover_structs::Resources {
                cpu: 1001,
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(allocs_fit(&n, &[&a]).unwrap_err().dimension(), "cpu");
    }
}
