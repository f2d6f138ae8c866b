//! Client nodes as registered with the servers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::resources::{ComparableResources, NetworkResource, Resources};

pub const NODE_STATUS_INIT: &str = "initializing";
pub const NODE_STATUS_READY: &str = "ready";
pub const NODE_STATUS_DOWN: &str = "down";
/// Missed its heartbeat, but runs allocations whose groups allow a disconnect.
pub const NODE_STATUS_DISCONNECTED: &str = "disconnected";
pub const NODE_ELIGIBLE: &str = "eligible";
pub const NODE_INELIGIBLE: &str = "ineligible";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Node {
    #[serde(rename = "ID")]
    pub id: String,
    /// Secret the client authenticates with; never returned by the HTTP API.
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    #[serde(rename = "Datacenter")]
    pub datacenter: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "HTTPAddr")]
    pub http_addr: String,
    #[serde(rename = "TLSEnabled")]
    pub tls_enabled: bool,
    #[serde(rename = "Attributes")]
    pub attributes: BTreeMap<String, String>,
    #[serde(rename = "NodeResources")]
    pub node_resources: NodeResources,
    #[serde(rename = "ReservedResources")]
    pub reserved_resources: NodeReservedResources,
    #[serde(rename = "Resources")]
    pub resources: Resources,
    #[serde(rename = "Reserved")]
    pub reserved: Resources,
    #[serde(rename = "Links")]
    pub links: Option<BTreeMap<String, String>>,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    #[serde(rename = "NodeClass")]
    pub node_class: String,
    #[serde(rename = "ComputedClass")]
    pub computed_class: String,
    #[serde(rename = "Drain")]
    pub drain: bool,
    #[serde(rename = "DrainStrategy")]
    pub drain_strategy: Option<serde_json::Value>,
    #[serde(rename = "SchedulingEligibility")]
    pub scheduling_eligibility: String,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    /// Unix seconds, as Nomad writes it.
    #[serde(rename = "StatusUpdatedAt")]
    pub status_updated_at: i64,
    #[serde(rename = "Events")]
    pub events: Option<Vec<NodeEvent>>,
    #[serde(rename = "Drivers")]
    pub drivers: BTreeMap<String, DriverInfo>,
    /// CSI controller instances running on the node, by plugin id.
    #[serde(rename = "CSIControllerPlugins")]
    pub csi_controller_plugins: Option<BTreeMap<String, crate::csi::CsiInfo>>,
    /// CSI node instances running on the node, by plugin id.
    #[serde(rename = "CSINodePlugins")]
    pub csi_node_plugins: Option<BTreeMap<String, crate::csi::CsiInfo>>,
    /// The client's `host_volume` blocks, by name.
    #[serde(rename = "HostVolumes")]
    pub host_volumes: Option<BTreeMap<String, ClientHostVolumeConfig>>,
    #[serde(rename = "LastDrain")]
    pub last_drain: Option<serde_json::Value>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// One `host_volume "name" { path = "..." read_only = false }` block of a client's agent
/// config, as Nomad's `ClientHostVolumeConfig` (its JSON keeps the name too).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientHostVolumeConfig {
    #[serde(rename = "Name")]
    pub name: String,
    /// The host directory the volume is.
    #[serde(rename = "Path")]
    pub path: String,
    /// Only read-only `volume` requests may use it.
    #[serde(rename = "ReadOnly")]
    pub read_only: bool,
}

impl Node {
    /// The host volume called `name`, when the client declares one.
    pub fn host_volume(&self, name: &str) -> Option<&ClientHostVolumeConfig> {
        self.host_volumes.as_ref()?.get(name)
    }

    /// Nomad's `IsInAnyDC`: whether one of the job's datacenter globs matches the node's.
    pub fn is_in_any_dc(&self, datacenters: &[String]) -> bool {
        datacenters
            .iter()
            .any(|dc| crate::glob::glob(dc, &self.datacenter))
    }

    pub fn ready(&self) -> bool {
        self.status == NODE_STATUS_READY
            && !self.drain
            && self.scheduling_eligibility != NODE_INELIGIBLE
    }

    /// What the node can give to allocations: its resources minus what it reserves.
    pub fn available(&self) -> ComparableResources {
        ComparableResources {
            cpu_shares: self.node_resources.cpu.cpu_shares - self.reserved_resources.cpu.cpu_shares,
            memory_mb: self.node_resources.memory.memory_mb
                - self.reserved_resources.memory.memory_mb,
            disk_mb: self.node_resources.disk.disk_mb - self.reserved_resources.disk.disk_mb,
        }
    }

    /// The host ports reserved by the agent config (`reserved { reserved_ports = "22,80-90" }`).
    pub fn reserved_host_ports(&self) -> Vec<i64> {
        parse_port_ranges(&self.reserved_resources.networks.reserved_host_ports).unwrap_or_default()
    }

    /// The node's first host network address, where its allocations' ports are bound.
    pub fn primary_ip(&self) -> String {
        self.node_resources
            .networks
            .iter()
            .flatten()
            .map(|n| n.ip.clone())
            .find(|ip| !ip.is_empty())
            .unwrap_or_else(|| "127.0.0.1".to_string())
    }

    /// Nomad's computed class: nodes with equal classes are interchangeable for feasibility,
    /// so the scheduler checks constraints once per class. Hashes the datacenter, node class,
    /// attributes (without `unique.*`), meta and drivers' health.
    pub fn compute_class(&mut self) {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.datacenter.hash(&mut h);
        self.node_class.hash(&mut h);
        for (k, v) in &self.attributes {
            if !k.starts_with("unique.") {
                k.hash(&mut h);
                v.hash(&mut h);
            }
        }
        for (k, v) in &self.meta {
            if !k.starts_with("unique.") {
                k.hash(&mut h);
                v.hash(&mut h);
            }
        }
        for (k, d) in &self.drivers {
            k.hash(&mut h);
            d.detected.hash(&mut h);
            d.healthy.hash(&mut h);
        }
        self.computed_class = format!("v1:{}", h.finish());
    }

    /// The list view of `GET /v1/nodes`.
    pub fn stub(&self) -> NodeListStub {
        NodeListStub {
            address: self.primary_ip(),
            id: self.id.clone(),
            datacenter: self.datacenter.clone(),
            name: self.name.clone(),
            node_class: self.node_class.clone(),
            version: self
                .attributes
                .get("nomad.version")
                .cloned()
                .unwrap_or_default(),
            drain: self.drain,
            scheduling_eligibility: self.scheduling_eligibility.clone(),
            status: self.status.clone(),
            status_description: self.status_description.clone(),
            drivers: self.drivers.clone(),
            host_volumes: self.host_volumes.clone(),
            node_resources: None,
            reserved_resources: None,
            last_drain: self.last_drain.clone(),
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }

    /// A copy fit for the HTTP API: the secret removed.
    pub fn sanitized(&self) -> Node {
        let mut n = self.clone();
        n.secret_id = String::new();
        n
    }
}

/// Parses Nomad's port range syntax `"22,80,8000-8010"`.
pub fn parse_port_ranges(spec: &str) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let lo: i64 = a
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid port {a:?}"))?;
                let hi: i64 = b
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid port {b:?}"))?;
                if lo > hi || lo < 0 || hi > 65535 {
                    return Err(format!("invalid port range {part:?}"));
                }
                out.extend(lo..=hi);
            }
            None => {
                let p: i64 = part.parse().map_err(|_| format!("invalid port {part:?}"))?;
                if !(0..=65535).contains(&p) {
                    return Err(format!("invalid port {part:?}"));
                }
                out.push(p);
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeListStub {
    #[serde(rename = "Address")]
    pub address: String,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Datacenter")]
    pub datacenter: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "NodeClass")]
    pub node_class: String,
    #[serde(rename = "Version")]
    pub version: String,
    #[serde(rename = "Drain")]
    pub drain: bool,
    #[serde(rename = "SchedulingEligibility")]
    pub scheduling_eligibility: String,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    #[serde(rename = "Drivers")]
    pub drivers: BTreeMap<String, DriverInfo>,
    #[serde(rename = "HostVolumes")]
    pub host_volumes: Option<BTreeMap<String, ClientHostVolumeConfig>>,
    #[serde(rename = "NodeResources")]
    pub node_resources: Option<NodeResources>,
    #[serde(rename = "ReservedResources")]
    pub reserved_resources: Option<NodeReservedResources>,
    #[serde(rename = "LastDrain")]
    pub last_drain: Option<serde_json::Value>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DriverInfo {
    #[serde(rename = "Attributes")]
    pub attributes: Option<BTreeMap<String, String>>,
    #[serde(rename = "Detected")]
    pub detected: bool,
    #[serde(rename = "Healthy")]
    pub healthy: bool,
    #[serde(rename = "HealthDescription")]
    pub health_description: String,
    /// RFC 3339.
    #[serde(rename = "UpdateTime")]
    pub update_time: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeEvent {
    #[serde(rename = "Message")]
    pub message: String,
    #[serde(rename = "Subsystem")]
    pub subsystem: String,
    #[serde(rename = "Details")]
    pub details: Option<BTreeMap<String, String>>,
    /// RFC 3339.
    #[serde(rename = "Timestamp")]
    pub timestamp: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeResources {
    #[serde(rename = "Cpu")]
    pub cpu: NodeCpuResources,
    #[serde(rename = "Memory")]
    pub memory: NodeMemoryResources,
    #[serde(rename = "Disk")]
    pub disk: NodeDiskResources,
    #[serde(rename = "Networks")]
    pub networks: Option<Vec<NetworkResource>>,
    #[serde(rename = "NodeNetworks")]
    pub node_networks: Option<serde_json::Value>,
    #[serde(rename = "Devices")]
    pub devices: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeCpuResources {
    #[serde(rename = "CpuShares")]
    pub cpu_shares: i64,
    #[serde(rename = "TotalCpuCores")]
    pub total_cpu_cores: i64,
    #[serde(rename = "ReservableCpuCores")]
    pub reservable_cpu_cores: Option<Vec<u16>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeMemoryResources {
    #[serde(rename = "MemoryMB")]
    pub memory_mb: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeDiskResources {
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeReservedResources {
    #[serde(rename = "Cpu")]
    pub cpu: NodeReservedCpuResources,
    #[serde(rename = "Memory")]
    pub memory: NodeMemoryResources,
    #[serde(rename = "Disk")]
    pub disk: NodeDiskResources,
    #[serde(rename = "Networks")]
    pub networks: NodeReservedNetworkResources,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeReservedCpuResources {
    #[serde(rename = "CpuShares")]
    pub cpu_shares: i64,
    #[serde(rename = "ReservedCpuCores")]
    pub reserved_cpu_cores: Option<Vec<u16>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeReservedNetworkResources {
    #[serde(rename = "ReservedHostPorts")]
    pub reserved_host_ports: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ranges_parse_lists_and_ranges() {
        assert_eq!(
            parse_port_ranges("22, 80-82").unwrap(),
            vec![22, 80, 81, 82]
        );
        assert!(parse_port_ranges("90-80").is_err());
        assert!(parse_port_ranges("x").is_err());
        assert_eq!(parse_port_ranges("").unwrap(), Vec::<i64>::new());
    }

    #[test]
    fn a_node_is_in_a_datacenter_any_glob_of_the_job_matches() {
        let n = Node {
            datacenter: "dc-east".into(),
            ..Node::default()
        };
        let dcs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(n.is_in_any_dc(&dcs(&["*"])));
        assert!(n.is_in_any_dc(&dcs(&["west", "dc-*"])));
        assert!(n.is_in_any_dc(&dcs(&["dc-east"])));
        assert!(!n.is_in_any_dc(&dcs(&["dc-west", "east"])));
        assert!(!n.is_in_any_dc(&[]));
    }

    #[test]
    fn available_subtracts_reserved_once() {
        let mut n = Node::default();
        n.node_resources.cpu.cpu_shares = 2000;
        n.node_resources.memory.memory_mb = 2000;
        n.reserved_resources.cpu.cpu_shares = 800;
        n.reserved_resources.memory.memory_mb = 800;
        let a = n.available();
        assert_eq!((a.cpu_shares, a.memory_mb), (1200, 1200));
    }
}
