//! The CNI side of bridge networking: Nomad's `nomad` bridge network as a CNI configuration
//! list (loopback, bridge with host-local addresses, firewall, portmap) and its plugins run the
//! way libcni runs a list (CNI spec 0.4.0): each plugin a program found on the CNI path, given
//! its configuration on stdin with the previous plugin's result, ADD in order and DEL in
//! reverse.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The CNI version of the configuration (Nomad's bridge list uses 0.4.0).
const CNI_VERSION: &str = "0.4.0";

/// The interface the allocation's namespace gets.
pub const INTERFACE: &str = "eth0";

/// The client's bridge network settings (Nomad's `bridge_network_*` and `cni_path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeConfig {
    /// Directories searched for plugin programs, in order.
    pub cni_path: Vec<PathBuf>,
    /// The bridge (and CNI network) name.
    pub name: String,
    /// The subnet allocations get addresses from.
    pub subnet: String,
    pub hairpin: bool,
    /// Where host-local keeps its leases (under the client's data dir, not /var/lib/cni, so
    /// one agent's leases never collide with another's).
    pub ipam_dir: PathBuf,
}

impl BridgeConfig {
    /// Nomad's defaults: the `nomad` bridge on 172.26.64.0/20, hairpin mode on.
    pub fn with_defaults(cni_path: Vec<PathBuf>, data_dir: &Path) -> BridgeConfig {
        BridgeConfig {
            cni_path,
            name: "nomad".into(),
            subnet: "172.26.64.0/20".into(),
            hairpin: true,
            ipam_dir: data_dir.join("cni").join("networks"),
        }
    }

    /// The plugin program of `plugin_type`, from the first CNI path directory that has it.
    pub fn plugin(&self, plugin_type: &str) -> Option<PathBuf> {
        self.cni_path
            .iter()
            .map(|dir| dir.join(plugin_type))
            .find(|p| p.is_file())
    }

    /// The plugins of the network, in ADD order.
    pub fn plugins(&self) -> Vec<Value> {
        vec![
            json!({"type": "loopback"}),
            json!({
                "type": "bridge",
                "bridge": self.name,
                "ipMasq": true,
                "isGateway": true,
                "forceAddress": true,
                "hairpinMode": self.hairpin,
                "ipam": {
                    "type": "host-local",
                    "dataDir": self.ipam_dir,
                    "ranges": [[{"subnet": self.subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }),
            json!({
                "type": "firewall",
                "backend": "iptables",
                "iptablesAdminChainName": "NOMAD-ADMIN",
            }),
            json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}),
        ]
    }
}

/// A host port forwarded into the namespace (portmap's `portMappings` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: i64,
    pub container_port: i64,
    pub protocol: &'static str,
    pub host_ip: String,
}

/// What went wrong running the network's plugins.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    #[error("CNI plugin {0:?} not found in the CNI path {1:?}")]
    PluginNotFound(String, Vec<PathBuf>),
    #[error("running CNI plugin {plugin} ({command}): {source}")]
    Exec {
        plugin: String,
        command: &'static str,
        source: std::io::Error,
    },
    /// The plugin failed: its error message (CNI's `msg` and `details`).
    #[error("CNI plugin {plugin} failed to {command}: {message}")]
    Plugin {
        plugin: String,
        command: &'static str,
        message: String,
    },
}

/// Where the plugins act: the container id (the allocation's) and its namespace.
pub struct Attachment<'a> {
    pub container_id: &'a str,
    pub netns: &'a Path,
    pub ports: &'a [PortMapping],
}

/// Runs every plugin's ADD in order; returns the last result (the bridge's addresses and
/// interfaces, as later plugins passed them on).
pub fn add(config: &BridgeConfig, at: &Attachment<'_>) -> Result<Value, CniError> {
    let mut prev: Option<Value> = None;
    for plugin in config.plugins() {
        let result = run(config, &plugin, "ADD", at, prev.as_ref())?;
        // loopback's result is about `lo`; what later plugins need is the bridge's.
        if plugin["type"] != "loopback" {
            prev = Some(result);
        }
    }
    Ok(prev.unwrap_or(Value::Null))
}

/// Runs every plugin's DEL in reverse order with `prev` (the ADD's result), going on past
/// failures so that each plugin frees what it can; the first failure is returned.
pub fn del(
    config: &BridgeConfig,
    at: &Attachment<'_>,
    prev: Option<&Value>,
) -> Result<(), CniError> {
    let mut first = None;
    for plugin in config.plugins().iter().rev() {
        if let Err(e) = run(config, plugin, "DEL", at, prev) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

fn run(
    config: &BridgeConfig,
    plugin: &Value,
    command: &'static str,
    at: &Attachment<'_>,
    prev: Option<&Value>,
) -> Result<Value, CniError> {
    let plugin_type = plugin["type"].as_str().unwrap_or_default().to_string();
    let program = config
        .plugin(&plugin_type)
        .ok_or_else(|| CniError::PluginNotFound(plugin_type.clone(), config.cni_path.clone()))?;
    let mut conf = plugin.clone();
    conf["cniVersion"] = json!(CNI_VERSION);
    conf["name"] = json!(config.name);
    if let Some(prev) = prev.filter(|p| !p.is_null()) {
        conf["prevResult"] = prev.clone();
    }
    if plugin_type == "portmap" {
        let mappings: Vec<Value> = at
            .ports
            .iter()
            .map(|p| {
                let mut m = json!({
                    "hostPort": p.host_port,
                    "containerPort": p.container_port,
                    "protocol": p.protocol,
                });
                if !p.host_ip.is_empty() {
                    m["hostIP"] = json!(p.host_ip);
                }
                m
            })
            .collect();
        conf["runtimeConfig"] = json!({"portMappings": mappings});
    }
    let path = std::env::join_paths(&config.cni_path).unwrap_or_default();
    let exec_err = |source| CniError::Exec {
        plugin: plugin_type.clone(),
        command,
        source,
    };
    let mut child = Command::new(&program)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", at.container_id)
        .env("CNI_NETNS", at.netns)
        .env("CNI_IFNAME", INTERFACE)
        .env("CNI_PATH", path)
        // iptables and friends are found on the usual path.
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(exec_err)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(conf.to_string().as_bytes())
            .map_err(exec_err)?;
    }
    let out = child.wait_with_output().map_err(exec_err)?;
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if !out.status.success() {
        let msg = stdout["msg"].as_str().unwrap_or_default();
        let details = stdout["details"].as_str().unwrap_or_default();
        let message = match (msg, details) {
            ("", "") => String::from_utf8_lossy(&out.stderr).trim().to_string(),
            (m, "") => m.to_string(),
            (m, d) => format!("{m}: {d}"),
        };
        return Err(CniError::Plugin {
            plugin: plugin_type,
            command,
            message,
        });
    }
    Ok(stdout)
}

/// The allocation's address in a result: the first IPv4 address on the interface inside the
/// namespace, without its prefix length.
pub fn address(result: &Value) -> Option<String> {
    let interfaces = result["interfaces"].as_array();
    let inside = |i: &Value| {
        let index = i.as_u64()? as usize;
        let iface = interfaces?.get(index)?;
        Some(iface["name"] == INTERFACE && iface.get("sandbox").is_some())
    };
    result["ips"]
        .as_array()?
        .iter()
        .filter(|ip| {
            ip["version"] == "4" || ip["address"].as_str().is_some_and(|a| !a.contains(':'))
        })
        .find(|ip| ip.get("interface").and_then(inside).unwrap_or(true))
        .and_then(|ip| ip["address"].as_str())
        .and_then(|a| a.split('/').next())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bridge_list_is_nomads_with_leases_under_the_data_dir() {
        let c = BridgeConfig::with_defaults(vec!["/usr/lib/cni".into()], Path::new("/d"));
        let plugins = c.plugins();
        let types: Vec<&str> = plugins.iter().filter_map(|p| p["type"].as_str()).collect();
        assert_eq!(types, ["loopback", "bridge", "firewall", "portmap"]);
        assert_eq!(plugins[1]["bridge"], "nomad");
        assert_eq!(
            plugins[1]["ipam"]["ranges"][0][0]["subnet"],
            "172.26.64.0/20"
        );
        assert_eq!(plugins[1]["ipam"]["dataDir"], "/d/cni/networks");
        assert_eq!(plugins[3]["snat"], true);
    }

    #[test]
    fn the_address_is_the_first_v4_address_inside_the_namespace() {
        let result = json!({
            "cniVersion": "0.4.0",
            "interfaces": [
                {"name": "nomad", "mac": "x"},
                {"name": "veth1", "mac": "y"},
                {"name": "eth0", "mac": "z", "sandbox": "/var/run/netns/a"}
            ],
            "ips": [
                {"version": "4", "interface": 2, "address": "172.26.64.7/20", "gateway": "172.26.64.1"}
            ]
        });
        assert_eq!(address(&result).as_deref(), Some("172.26.64.7"));
        assert_eq!(address(&json!({})), None);
    }

    #[test]
    fn a_missing_plugin_is_named_with_the_path_searched() {
        let c = BridgeConfig::with_defaults(vec!["/nonexistent".into()], Path::new("/d"));
        let at = Attachment {
            container_id: "a",
            netns: Path::new("/var/run/netns/a"),
            ports: &[],
        };
        let e = add(&c, &at).unwrap_err().to_string();
        assert!(
            e.contains("\"loopback\" not found") && e.contains("/nonexistent"),
            "{e}"
        );
    }
}
