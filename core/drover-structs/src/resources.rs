//! Resources asked for by tasks, offered by nodes and granted to allocations, in Nomad's shapes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A task's `resources` block (Nomad's `Resources`), also the legacy node resources shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resources {
    #[serde(rename = "CPU")]
    pub cpu: i64,
    #[serde(rename = "Cores")]
    pub cores: i64,
    #[serde(rename = "MemoryMB")]
    pub memory_mb: i64,
    #[serde(rename = "MemoryMaxMB")]
    pub memory_max_mb: i64,
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
    #[serde(rename = "IOPS")]
    pub iops: i64,
    #[serde(rename = "Networks")]
    pub networks: Option<Vec<NetworkResource>>,
    #[serde(rename = "Devices")]
    pub devices: Option<Vec<serde_json::Value>>,
}

/// A `network` block or a node's network (Nomad's `NetworkResource`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkResource {
    #[serde(rename = "Mode")]
    pub mode: String,
    #[serde(rename = "Device")]
    pub device: String,
    #[serde(rename = "CIDR")]
    pub cidr: String,
    #[serde(rename = "IP")]
    pub ip: String,
    #[serde(rename = "Hostname", skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(rename = "MBits")]
    pub mbits: i64,
    #[serde(rename = "DNS")]
    pub dns: Option<serde_json::Value>,
    #[serde(rename = "ReservedPorts")]
    pub reserved_ports: Option<Vec<Port>>,
    #[serde(rename = "DynamicPorts")]
    pub dynamic_ports: Option<Vec<Port>>,
}

impl NetworkResource {
    /// Static and dynamic ports together, static first.
    pub fn all_ports(&self) -> impl Iterator<Item = &Port> {
        self.reserved_ports
            .iter()
            .flatten()
            .chain(self.dynamic_ports.iter().flatten())
    }
}

/// A `port "label" { static = N, to = N }` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Port {
    #[serde(rename = "Label")]
    pub label: String,
    #[serde(rename = "Value")]
    pub value: i64,
    #[serde(rename = "To")]
    pub to: i64,
    #[serde(rename = "HostNetwork")]
    pub host_network: String,
}

/// Resources granted to an allocation (Nomad's `AllocatedResources`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedResources {
    #[serde(rename = "Tasks")]
    pub tasks: crate::vec_map::VecMap<String, AllocatedTaskResources>,
    #[serde(rename = "TaskLifecycles")]
    pub task_lifecycles: BTreeMap<String, Option<serde_json::Value>>,
    #[serde(rename = "Shared")]
    pub shared: AllocatedSharedResources,
}

impl AllocatedResources {
    /// Sum of cpu, memory and disk over tasks and shared resources.
    pub fn comparable(&self) -> ComparableResources {
        let mut c = ComparableResources {
            disk_mb: self.shared.disk_mb,
            ..Default::default()
        };
        for t in self.tasks.values() {
            c.cpu_shares += t.cpu.cpu_shares;
            c.memory_mb += t.memory.memory_mb;
        }
        c
    }

    /// Host ports this allocation holds (group ports and task network ports).
    pub fn host_ports(&self) -> Vec<(String, i64)> {
        let mut out: Vec<(String, i64)> = self
            .shared
            .ports
            .iter()
            .flatten()
            .map(|p| (p.host_ip.clone(), p.value))
            .collect();
        for t in self.tasks.values() {
            for n in t.networks.iter().flatten() {
                for p in n.all_ports() {
                    out.push((n.ip.clone(), p.value));
                }
            }
        }
        out
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedTaskResources {
    #[serde(rename = "Cpu")]
    pub cpu: AllocatedCpuResources,
    #[serde(rename = "Memory")]
    pub memory: AllocatedMemoryResources,
    #[serde(rename = "Networks")]
    pub networks: Option<Vec<NetworkResource>>,
    #[serde(rename = "Devices")]
    pub devices: Option<Vec<serde_json::Value>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedCpuResources {
    #[serde(rename = "CpuShares")]
    pub cpu_shares: i64,
    #[serde(rename = "ReservedCores")]
    pub reserved_cores: Option<Vec<u16>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedMemoryResources {
    #[serde(rename = "MemoryMB")]
    pub memory_mb: i64,
    #[serde(rename = "MemoryMaxMB")]
    pub memory_max_mb: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedSharedResources {
    #[serde(rename = "Networks")]
    pub networks: Option<Vec<NetworkResource>>,
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
    #[serde(rename = "Ports")]
    pub ports: Option<Vec<AllocatedPortMapping>>,
}

/// One port an allocation holds on its node: `NOMAD_PORT_<label>` / `NOMAD_HOST_PORT_<label>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocatedPortMapping {
    #[serde(rename = "Label")]
    pub label: String,
    #[serde(rename = "Value")]
    pub value: i64,
    #[serde(rename = "To")]
    pub to: i64,
    #[serde(rename = "HostIP")]
    pub host_ip: String,
}

/// The dimensions the scheduler compares: cpu, memory, disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComparableResources {
    pub cpu_shares: i64,
    pub memory_mb: i64,
    pub disk_mb: i64,
}

impl ComparableResources {
    pub fn add(&mut self, o: &ComparableResources) {
        self.cpu_shares += o.cpu_shares;
        self.memory_mb += o.memory_mb;
        self.disk_mb += o.disk_mb;
    }

    pub fn subtract(&mut self, o: &ComparableResources) {
        self.cpu_shares -= o.cpu_shares;
        self.memory_mb -= o.memory_mb;
        self.disk_mb -= o.disk_mb;
    }

    /// Whether `self` (capacity) covers `ask`; otherwise the exhausted dimension, named as Nomad
    /// names it in `DimensionExhausted`.
    pub fn superset(&self, ask: &ComparableResources) -> Result<(), &'static str> {
        if self.cpu_shares < ask.cpu_shares {
            return Err("cpu");
        }
        if self.memory_mb < ask.memory_mb {
            return Err("memory");
        }
        if self.disk_mb < ask.disk_mb {
            return Err("disk");
        }
        Ok(())
    }
}
