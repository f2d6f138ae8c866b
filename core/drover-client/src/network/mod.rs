//! Bridge networking (Nomad's network hook for `network { mode = "bridge" }`): an allocation
//! gets a network namespace of its own, joined to the node's `nomad` bridge through the CNI
//! reference plugins, with its ports forwarded from the host; every task of it runs in that
//! namespace (drivers with `Capabilities::group_network`). `mode = "host"` (the default)
//! needs nothing here.
//!
//! The namespace is named after the allocation (`/var/run/netns/<alloc id>`) and the ADD's
//! result is kept under the client's data dir, so an agent that restarts while the tasks run
//! takes the network back as it is, and removes it once they ended.

pub mod cni;
pub mod netns;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use drover_abi::{Driver, NetworkCreateRequest, NetworkIsolation};
use drover_structs::{Allocation, TaskGroup};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cni::{Attachment, BridgeConfig, PortMapping};

pub const MODE_HOST: &str = "host";
pub const MODE_BRIDGE: &str = "bridge";

/// The group's network mode: its first network's, `host` when it has none or leaves it empty.
pub fn group_mode(group: &TaskGroup) -> &str {
    group
        .networks
        .iter()
        .flatten()
        .map(|n| n.mode.as_str())
        .find(|m| !m.is_empty())
        .unwrap_or(MODE_HOST)
}

/// An allocation's network once made.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocNetwork {
    /// The namespace its tasks join.
    pub netns: PathBuf,
    /// Nomad's `AllocNetworkStatus`, for the servers (and `address_mode = "alloc"`).
    pub status: Value,
    /// The labels of the spec a driver returned when it made the namespace (docker's pause
    /// container), handed to every task; empty when the client made it.
    pub labels: BTreeMap<String, String>,
}

impl AllocNetwork {
    fn from_result(netns: PathBuf, result: &Value, made_by: Option<&MadeBy>) -> AllocNetwork {
        let address = cni::address(result).unwrap_or_default();
        AllocNetwork {
            labels: made_by.map(|m| m.spec.labels.clone()).unwrap_or_default(),
            netns,
            status: json!({
                "InterfaceName": cni::INTERFACE,
                "Address": address,
                "AddressIPv6": "",
                "DNS": null,
            }),
        }
    }
}

/// Nomad's `getPortMapping`: each port of the allocation forwarded from its host port to its
/// `to` (the host port itself when `to` is unset or -1), for tcp and udp.
pub fn port_mappings(alloc: &Allocation) -> Vec<PortMapping> {
    let ports = alloc
        .allocated_resources
        .as_ref()
        .and_then(|r| r.shared.ports.as_ref());
    let mut out = Vec::new();
    for p in ports.into_iter().flatten() {
        let inside = if p.to < 1 { p.value } else { p.to };
        for protocol in ["tcp", "udp"] {
            out.push(PortMapping {
                host_port: p.value,
                container_port: inside,
                protocol,
                host_ip: p.host_ip.clone(),
            });
        }
    }
    out
}

/// Where the ADD result of an allocation is kept.
fn result_path(config: &BridgeConfig, alloc_id: &str) -> PathBuf {
    config
        .ipam_dir
        .parent()
        .map(|d| d.join("results"))
        .unwrap_or_else(|| config.ipam_dir.join("results"))
        .join(format!("{alloc_id}.json"))
}

/// Where the driver that made an allocation's namespace, and what it returned, are kept.
fn made_by_path(config: &BridgeConfig, alloc_id: &str) -> PathBuf {
    result_path(config, alloc_id).with_extension("driver.json")
}

/// A namespace a driver made ([`Driver::create_network`]): which driver, and its spec, for
/// the tasks and for [`Driver::destroy_network`], also after an agent restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct MadeBy {
    driver: String,
    spec: NetworkIsolation,
}

fn read_made_by(config: &BridgeConfig, alloc_id: &str) -> Option<MadeBy> {
    std::fs::read(made_by_path(config, alloc_id))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

/// The drivers of an allocation's tasks, in task order, each once: the first that makes the
/// namespace ([`Driver::create_network`] answering `Some`) owns it, as Nomad's network hook
/// lets the first driver that must initiate the network make it.
pub struct NetworkDrivers {
    pub drivers: Vec<(String, Arc<dyn Driver>)>,
    pub request: NetworkCreateRequest,
}

impl NetworkDrivers {
    pub fn of_group(group: &TaskGroup, all: &BTreeMap<String, Arc<dyn Driver>>) -> NetworkDrivers {
        let mut drivers: Vec<(String, Arc<dyn Driver>)> = Vec::new();
        for task in &group.tasks {
            if drivers.iter().any(|(name, _)| *name == task.driver) {
                continue;
            }
            if let Some(d) = all.get(&task.driver) {
                drivers.push((task.driver.clone(), d.clone()));
            }
        }
        let hostname = group
            .networks
            .iter()
            .flatten()
            .map(|n| n.hostname.clone())
            .find(|h| !h.is_empty())
            .unwrap_or_default();
        NetworkDrivers {
            drivers,
            request: NetworkCreateRequest { hostname },
        }
    }

    fn named(&self, name: &str) -> Option<&Arc<dyn Driver>> {
        self.drivers.iter().find(|(n, _)| n == name).map(|(_, d)| d)
    }

    /// The namespace bound at `path`: one a driver made, or a new one of the client's.
    fn make(&self, alloc_id: &str, path: &std::path::Path) -> Result<Option<MadeBy>, String> {
        for (name, driver) in &self.drivers {
            let spec = driver
                .create_network(alloc_id, &self.request)
                .map_err(|e| format!("driver {name:?} making the network: {e}"))?;
            let Some(spec) = spec else { continue };
            let made = MadeBy {
                driver: name.clone(),
                spec,
            };
            if let Err(e) = netns::adopt(&made.spec.path, path) {
                let _ = self.release(alloc_id, Some(&made));
                return Err(format!(
                    "binding the network namespace of driver {name:?} ({}) at {}: {e}",
                    made.spec.path.display(),
                    path.display()
                ));
            }
            return Ok(Some(made));
        }
        netns::create(path)
            .map_err(|e| format!("creating network namespace {}: {e}", path.display()))?;
        Ok(None)
    }

    /// Has the driver that made the namespace release it; whether it did (or nothing was
    /// made).
    fn release(&self, alloc_id: &str, made: Option<&MadeBy>) -> bool {
        let Some(made) = made else { return true };
        let Some(driver) = self.named(&made.driver) else {
            tracing::warn!(alloc = %alloc_id, driver = %made.driver, "the driver that made the network is gone");
            return false;
        };
        match driver.destroy_network(alloc_id, &made.spec) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(alloc = %alloc_id, error = %e, "releasing the driver's network");
                false
            }
        }
    }
}

/// Makes the allocation's network, or takes back the one its running tasks use (`resumed`:
/// tasks survived an agent restart). Blocks on the plugins: run it on the blocking pool.
pub fn setup(
    config: &BridgeConfig,
    alloc: &Allocation,
    resumed: bool,
    drivers: &NetworkDrivers,
) -> Result<AllocNetwork, String> {
    let path = netns::path_of(&alloc.id);
    let saved = result_path(config, &alloc.id);
    if resumed && netns::exists(&path) {
        let result = std::fs::read(&saved)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        if let Some(result) = result {
            let made_by = read_made_by(config, &alloc.id);
            return Ok(AllocNetwork::from_result(path, &result, made_by.as_ref()));
        }
    }
    // Left by an agent that stopped before tearing it down: start from nothing.
    if netns::exists(&path) || made_by_path(config, &alloc.id).exists() {
        teardown(config, alloc, drivers);
    }
    let made_by = drivers.make(&alloc.id, &path)?;
    let made_file = made_by_path(config, &alloc.id);
    if let Some(dir) = saved.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Some(m) = &made_by
        && let Err(e) = serde_json::to_vec(m)
            .map_err(std::io::Error::other)
            .and_then(|b| std::fs::write(&made_file, b))
    {
        tracing::warn!(alloc = %alloc.id, error = %e, "keeping the driver's network spec");
    }
    let ports = port_mappings(alloc);
    let at = Attachment {
        container_id: &alloc.id,
        netns: &path,
        ports: &ports,
    };
    let result = match cni::add(config, &at) {
        Ok(r) => r,
        Err(e) => {
            // Whatever the plugins did before the failure is undone, and the namespace goes.
            let _ = cni::del(config, &at, None);
            let _ = netns::remove(&path);
            if drivers.release(&alloc.id, made_by.as_ref()) {
                let _ = std::fs::remove_file(&made_file);
            }
            return Err(e.to_string());
        }
    };
    if let Err(e) = std::fs::write(&saved, result.to_string()) {
        tracing::warn!(alloc = %alloc.id, error = %e, "keeping the CNI result");
    }
    Ok(AllocNetwork::from_result(path, &result, made_by.as_ref()))
}

/// Undoes [`setup`]: the plugins' DEL (with the kept result), the namespace, and what a
/// driver made for it. Failures are logged: nothing is left to retry them once the
/// allocation is gone. Blocks like [`setup`].
pub fn teardown(config: &BridgeConfig, alloc: &Allocation, drivers: &NetworkDrivers) {
    let path = netns::path_of(&alloc.id);
    let saved = result_path(config, &alloc.id);
    let prev = std::fs::read(&saved)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let ports = port_mappings(alloc);
    let at = Attachment {
        container_id: &alloc.id,
        netns: &path,
        ports: &ports,
    };
    if let Err(e) = cni::del(config, &at, prev.as_ref()) {
        tracing::warn!(alloc = %alloc.id, error = %e, "removing the allocation's network");
    }
    if let Err(e) = netns::remove(&path) {
        tracing::warn!(alloc = %alloc.id, error = %e, "removing the network namespace");
    }
    let _ = std::fs::remove_file(&saved);
    // Kept when the release failed, so that a later teardown (an agent restart taking the
    // allocation back) tries again.
    let made_file = made_by_path(config, &alloc.id);
    if drivers.release(&alloc.id, read_made_by(config, &alloc.id).as_ref()) {
        let _ = std::fs::remove_file(&made_file);
    }
}

/// The client's bridge networking, when the node can offer it: CNI's bridge, host-local,
/// firewall, portmap and loopback plugins on the CNI path, and root.
pub fn available(config: &BridgeConfig) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("bridge networking needs the agent to run as root".into());
    }
    for plugin in ["loopback", "bridge", "host-local", "firewall", "portmap"] {
        if config.plugin(plugin).is_none() {
            return Err(format!(
                "CNI plugin {plugin:?} not found in the CNI path {:?}",
                config.cni_path
            ));
        }
    }
    Ok(())
}

/// Shared by the allocation runners: the bridge network's configuration, if the node offers
/// bridge networking.
pub type Bridge = Option<Arc<BridgeConfig>>;

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{AllocatedPortMapping, AllocatedResources, NetworkResource};

    #[test]
    fn ports_forward_to_their_to_or_themselves_for_tcp_and_udp() {
        let mut resources = AllocatedResources::default();
        resources.shared.ports = Some(vec![
            AllocatedPortMapping {
                label: "http".into(),
                value: 23000,
                to: 8080,
                host_ip: "10.0.0.1".into(),
            },
            AllocatedPortMapping {
                label: "admin".into(),
                value: 23001,
                to: -1,
                host_ip: String::new(),
            },
        ]);
        let alloc = Allocation {
            allocated_resources: Some(resources),
            ..Default::default()
        };
        let m = port_mappings(&alloc);
        assert_eq!(m.len(), 4);
        assert_eq!(
            (m[0].host_port, m[0].container_port, m[0].protocol),
            (23000, 8080, "tcp")
        );
        assert_eq!(m[1].protocol, "udp");
        assert_eq!((m[2].host_port, m[2].container_port), (23001, 23001));
    }

    #[test]
    fn the_group_mode_is_its_networks_or_host() {
        let mut g = TaskGroup::default();
        assert_eq!(group_mode(&g), MODE_HOST);
        g.networks = Some(vec![NetworkResource {
            mode: "bridge".into(),
            ..Default::default()
        }]);
        assert_eq!(group_mode(&g), MODE_BRIDGE);
    }
}
