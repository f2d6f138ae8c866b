//! The agent configuration: Nomad's agent HCL format (`data_dir`, `bind_addr`, `ports`,
//! `server`, `client`, `plugin "NAME" { config { ... } }`), merged over defaults, then the
//! command-line flags over that. `files` reads and merges the files.

mod files;
pub mod telemetry;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::bail;
use serde::Deserialize;
use serde_json::{Map, Value};

pub use files::load;
#[cfg(test)]
pub use files::parse_str;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentFile {
    pub name: Option<String>,
    pub region: Option<String>,
    pub datacenter: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub bind_addr: Option<String>,
    pub log_level: Option<String>,
    pub plugin_dir: Option<PathBuf>,
    pub ports: Option<Ports>,
    pub server: Option<ServerBlock>,
    pub client: Option<ClientBlock>,
    /// `plugin "raw_exec" { config { enabled = true } }`.
    pub plugin: Option<BTreeMap<String, PluginBlock>>,
    /// `advertise { rpc = "host[:port]" }` is acted on; its other keys are warned about.
    pub advertise: Option<Value>,
    #[serde(deserialize_with = "one_block")]
    pub addresses: Option<Addresses>,
    pub telemetry: Option<Value>,
    pub acl: Option<AclBlock>,
    #[serde(deserialize_with = "one_block")]
    pub tls: Option<TlsBlock>,
    /// Drover never checks for updates, which is what `true` asks for.
    pub disable_update_check: Option<bool>,
    /// Opens `/v1/agent/host` on an agent without ACLs (on in dev mode, as Nomad's).
    pub enable_debug: Option<bool>,
    /// Settings of Nomad's agent format Drover does not act on yet: accepted so that Nomad's
    /// files load, and each named in a warning at start-up (see `unsupported_settings`).
    pub consul: Option<Value>,
    pub vault: Option<Value>,
    /// Nomad's `ui` block: `enabled` is acted on (the web UI at `/ui`); its other keys
    /// (`content_security_policy`, `consul`, `vault`, `label`) are warned about.
    pub ui: Option<Value>,
    pub leave_on_interrupt: Option<bool>,
    pub leave_on_terminate: Option<bool>,
    pub log_json: Option<bool>,
    pub log_file: Option<Value>,
    pub log_rotate_bytes: Option<Value>,
    pub log_rotate_duration: Option<Value>,
    pub log_rotate_max_files: Option<Value>,
    pub enable_syslog: Option<bool>,
    pub syslog_facility: Option<Value>,
    pub disable_anonymous_signature: Option<bool>,
    pub http_api_response_headers: Option<Value>,
    pub audit: Option<Value>,
    pub autopilot: Option<Value>,
    pub sentinel: Option<Value>,
    pub limits: Option<Value>,
}

/// Nomad's `addresses` block: the IP each listener binds to, over `bind_addr`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Addresses {
    pub http: Option<String>,
    pub rpc: Option<String>,
    /// Drover has no gossip listener; warned about when set.
    pub serf: Option<String>,
}

impl AgentFile {
    /// The settings this file holds that Drover accepts from Nomad's format but does not act
    /// on, by their key paths. A setting whose value asks for what Drover does anyway (a
    /// feature turned off) is not listed.
    pub fn unsupported_settings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(Value::Object(a)) = &self.advertise {
            out.extend(
                a.keys()
                    .filter(|k| *k != "rpc")
                    .map(|k| format!("advertise.{k}")),
            );
        }
        if self.addresses.as_ref().is_some_and(|a| a.serf.is_some()) {
            out.push("addresses.serf (Drover has no gossip listener)".into());
        }
        out.extend(
            ui_blocks(self.ui.as_ref())
                .flat_map(|m| m.keys())
                .filter(|k| *k != "enabled")
                .map(|k| format!("ui.{k}")),
        );
        for (key, block) in [("consul", &self.consul), ("vault", &self.vault)] {
            if block.as_ref().is_some_and(|b| !turned_off(b)) {
                out.push(key.to_string());
            }
        }
        for (key, on) in [
            ("leave_on_interrupt", self.leave_on_interrupt),
            ("leave_on_terminate", self.leave_on_terminate),
            ("log_json", self.log_json),
            ("enable_syslog", self.enable_syslog),
            (
                "disable_anonymous_signature",
                self.disable_anonymous_signature,
            ),
        ] {
            if on == Some(true) {
                out.push(key.to_string());
            }
        }
        for (key, value) in [
            ("log_file", &self.log_file),
            ("log_rotate_bytes", &self.log_rotate_bytes),
            ("log_rotate_duration", &self.log_rotate_duration),
            ("log_rotate_max_files", &self.log_rotate_max_files),
            ("syslog_facility", &self.syslog_facility),
            ("http_api_response_headers", &self.http_api_response_headers),
            ("audit", &self.audit),
            ("autopilot", &self.autopilot),
            ("sentinel", &self.sentinel),
            ("limits", &self.limits),
        ] {
            if value.is_some() {
                out.push(key.to_string());
            }
        }
        out
    }
}

/// `block { enabled = false }` (and nothing else set to on) asks for what an agent without
/// the feature does.
impl AgentFile {
    /// Whether the agent serves the web UI at `/ui` (`ui { enabled = false }` turns it off).
    pub fn ui_enabled(&self) -> bool {
        !ui_blocks(self.ui.as_ref()).any(|m| m.get("enabled") == Some(&Value::Bool(false)))
    }
}

/// The `ui` block's maps, whether HCL gave one block or a list of them.
fn ui_blocks(ui: Option<&Value>) -> impl Iterator<Item = &Map<String, Value>> {
    let blocks: Vec<&Map<String, Value>> = match ui {
        Some(Value::Object(m)) => vec![m],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_object).collect(),
        _ => Vec::new(),
    };
    blocks.into_iter()
}

fn turned_off(block: &Value) -> bool {
    let blocks: Vec<&Map<String, Value>> = match block {
        Value::Object(m) => vec![m],
        Value::Array(items) => items.iter().filter_map(Value::as_object).collect(),
        _ => return false,
    };
    blocks
        .iter()
        .all(|m| m.get("enabled") == Some(&Value::Bool(false)))
}

/// Nomad's agent `acl` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AclBlock {
    pub enabled: Option<bool>,
    /// Cache lifetimes in Nomad; Drover resolves tokens and policies on every request, which
    /// is what any TTL allows, so these are accepted and need nothing.
    pub token_ttl: Option<String>,
    pub policy_ttl: Option<String>,
    pub role_ttl: Option<String>,
}

/// Nomad's agent `tls` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsBlock {
    pub http: Option<bool>,
    pub rpc: Option<bool>,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub verify_server_hostname: Option<bool>,
    pub verify_https_client: Option<bool>,
    /// Nomad's plain-and-TLS transition mode: refused when on (Drover's RPC port speaks one
    /// or the other).
    pub rpc_upgrade_mode: Option<bool>,
    /// Only `tls12` (what Drover does: TLS 1.2 and 1.3) is accepted.
    pub tls_min_version: Option<String>,
    /// Refused when set: rustls's safe defaults are the only suites.
    pub tls_cipher_suites: Option<String>,
    pub tls_prefer_server_cipher_suites: Option<bool>,
}

impl TlsBlock {
    /// What the agent acts on, after refusing the settings it would not honour.
    pub fn settings(&self, region: &str) -> anyhow::Result<drover_tls::TlsSettings> {
        if self.rpc_upgrade_mode == Some(true) {
            bail!(
                "tls.rpc_upgrade_mode: not supported; the RPC port speaks TLS or plain text, not both"
            );
        }
        if let Some(v) = self
            .tls_min_version
            .as_deref()
            .filter(|v| !v.is_empty() && *v != "tls12")
        {
            bail!(
                "tls.tls_min_version: {v:?} is not supported; Drover accepts TLS 1.2 and 1.3 (\"tls12\")"
            );
        }
        if self
            .tls_cipher_suites
            .as_deref()
            .is_some_and(|v| !v.is_empty())
        {
            bail!("tls.tls_cipher_suites: not supported; Drover uses rustls's default suites");
        }
        let on = |v: Option<bool>| v.unwrap_or(false);
        let settings = drover_tls::TlsSettings {
            http: on(self.http),
            rpc: on(self.rpc),
            files: drover_tls::TlsFiles {
                ca_file: self.ca_file.clone(),
                cert_file: self.cert_file.clone(),
                key_file: self.key_file.clone(),
            },
            verify_server_hostname: on(self.verify_server_hostname),
            verify_https_client: on(self.verify_https_client),
            region: region.to_string(),
        };
        if (settings.http || settings.rpc) && !is_dns_label(region) {
            bail!(
                "region {region:?}: with TLS on, the region must be a DNS label (it is part of server.<region>.nomad)"
            );
        }
        Ok(settings)
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Ports {
    pub http: Option<u16>,
    pub rpc: Option<u16>,
    pub serf: Option<u16>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ServerBlock {
    pub enabled: Option<bool>,
    pub bootstrap_expect: Option<u32>,
    pub num_schedulers: Option<usize>,
    pub heartbeat_grace: Option<String>,
    pub min_heartbeat_ttl: Option<String>,
    /// Heartbeats a second the node TTLs are scaled to (Nomad's default 50).
    pub max_heartbeats_per_second: Option<f64>,
    /// The TTL every node gets from a new leader (Nomad's default 5m).
    pub failover_heartbeat_ttl: Option<String>,
    /// `server_join { retry_join = ["host:port", ...] }`.
    #[serde(deserialize_with = "one_or_many_blocks")]
    pub server_join: Option<ServerJoin>,
    /// Nomad's older spelling of `server_join.retry_join`.
    pub retry_join: Option<Vec<String>>,
    /// Scales Raft's timings (Nomad's `raft_multiplier`, 1 to 10).
    pub raft_multiplier: Option<u32>,
    /// Raft snapshot (and log compaction) every this many entries.
    pub raft_snapshot_threshold: Option<u64>,
    /// Raft indexes of events kept for `/v1/event/stream` (Nomad's default 100).
    pub event_buffer_size: Option<usize>,
    /// `false` turns the event stream off.
    pub enable_event_broker: Option<bool>,
    /// Other server settings Nomad accepts; kept, not interpreted yet.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ClientBlock {
    pub enabled: Option<bool>,
    pub node_class: Option<String>,
    pub meta: Option<BTreeMap<String, String>>,
    pub cpu_total_compute: Option<u64>,
    pub memory_total_mb: Option<u64>,
    pub reserved: Option<Reserved>,
    pub servers: Option<Vec<String>>,
    #[serde(deserialize_with = "one_or_many_blocks")]
    pub server_join: Option<ServerJoin>,
    pub options: Option<BTreeMap<String, String>>,
    /// Nomad's `artifact { http_read_timeout = "30m" ... }`: limits of artifact downloads.
    #[serde(deserialize_with = "one_block")]
    pub artifact: Option<ArtifactBlock>,
    /// Nomad's `chroot_env { "/host/path" = "/path/in/task" }`: what exec tasks see of the
    /// host. Handed to the exec driver as its plugin config's `chroot_env`.
    #[serde(deserialize_with = "one_or_many_maps")]
    pub chroot_env: Option<BTreeMap<String, String>>,
    /// Nomad's `host_volume "name" { path = "/srv/data" read_only = false }` blocks, by name.
    #[serde(deserialize_with = "host_volume_blocks")]
    pub host_volume: Option<BTreeMap<String, HostVolumeBlock>>,
    /// The periodic GC of ended allocations (Nomad's defaults: 1m, 50, 80, 70).
    pub gc_interval: Option<String>,
    pub gc_max_allocs: Option<usize>,
    pub gc_disk_usage_threshold: Option<f64>,
    pub gc_inode_usage_threshold: Option<f64>,
    /// Bridge networking (Nomad's keys and defaults): where CNI plugins are searched
    /// (colon-separated; Nomad's /opt/cni/bin, then Debian's /usr/lib/cni), the bridge's name
    /// and subnet, and hairpin mode.
    pub cni_path: Option<String>,
    pub bridge_network_name: Option<String>,
    pub bridge_network_subnet: Option<String>,
    pub bridge_network_hairpin_mode: Option<bool>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// One `host_volume` block (Nomad's keys: `path`, `read_only`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostVolumeBlock {
    pub path: String,
    pub read_only: bool,
}

/// Labeled blocks come as one map by label, or (a label written twice, or hcl-rs's layout of
/// repeated blocks) as an array of such maps, merged in order. Decoded from a value so that a
/// wrong key inside a block is named in the error.
fn host_volume_blocks<'de, D>(d: D) -> Result<Option<BTreeMap<String, HostVolumeBlock>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let merged = match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => {
            let mut merged = serde_json::Map::new();
            for item in items {
                match item {
                    Value::Object(m) => merged.extend(m),
                    other => {
                        return Err(serde::de::Error::custom(format!(
                            "expected host_volume \"name\" {{ ... }} blocks, got {other}"
                        )));
                    }
                }
            }
            Value::Object(merged)
        }
        Some(v) => v,
    };
    serde_json::from_value(merged)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// The client's `artifact` block, in Nomad's keys. A key Nomad does not have is refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArtifactBlock {
    pub http_read_timeout: Option<String>,
    pub http_max_size: Option<String>,
    pub decompression_size_limit: Option<String>,
    pub decompression_file_count_limit: Option<u64>,
    pub disable_filesystem_isolation: Option<bool>,
    /// Accepted and checked; Drover has no git, hg, s3 or gcs getter for them to limit.
    pub gcs_timeout: Option<String>,
    pub git_timeout: Option<String>,
    pub hg_timeout: Option<String>,
    pub s3_timeout: Option<String>,
    /// Accepted; Drover fetches in the agent itself, with no getter process to pass them to.
    pub set_environment_variables: Option<String>,
    pub filesystem_isolation_extra_paths: Option<Vec<String>>,
}

/// A block that hcl-rs may hand over as an object or a one-element array of objects.
fn one_block<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(mut items)) if items.len() == 1 => {
            serde_json::from_value(items.remove(0))
                .map(Some)
                .map_err(serde::de::Error::custom)
        }
        Some(v @ Value::Object(_)) => serde_json::from_value(v)
            .map(Some)
            .map_err(serde::de::Error::custom),
        Some(other) => Err(serde::de::Error::custom(format!(
            "expected one block, got {other}"
        ))),
    }
}

/// A map block that hcl-rs may hand over as a one-element array of maps: accept both.
fn one_or_many_maps<'de, D>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(BTreeMap<String, String>),
        Many(Vec<BTreeMap<String, String>>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => None,
        Some(OneOrMany::One(map)) => Some(map),
        Some(OneOrMany::Many(maps)) => Some(maps.into_iter().flatten().collect()),
    })
}

/// The `server_join` block (Nomad's; only `retry_join` is acted on).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ServerJoin {
    pub retry_join: Vec<String>,
    pub retry_interval: Option<String>,
    pub retry_max: Option<u32>,
    pub start_join: Vec<String>,
}

/// hcl-rs gives a block written once as an object and, in some layouts, as a one-element
/// array: accept both.
fn one_or_many_blocks<'de, D>(d: D) -> Result<Option<ServerJoin>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(ServerJoin),
        Many(Vec<ServerJoin>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => None,
        Some(OneOrMany::One(b)) => Some(b),
        Some(OneOrMany::Many(blocks)) => blocks.into_iter().reduce(|mut a, b| {
            a.retry_join.extend(b.retry_join);
            a.start_join.extend(b.start_join);
            a
        }),
    })
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Reserved {
    pub cpu: Option<u64>,
    pub memory: Option<u64>,
    pub disk: Option<u64>,
    pub reserved_ports: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PluginBlock {
    pub config: Option<Value>,
    pub args: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn client_artifact_block_parses_and_unknown_keys_are_refused() {
        let f = parse_str(
            "client {\n  artifact {\n    http_read_timeout = \"5s\"\n    http_max_size = \"1MB\"\n    decompression_file_count_limit = 10\n  }\n}\n",
            "a.hcl",
        )
        .unwrap();
        let c = f.client.unwrap();
        assert!(c.other.is_empty(), "{:?}", c.other);
        let a = c.artifact.unwrap();
        assert_eq!(a.http_read_timeout.as_deref(), Some("5s"));
        assert_eq!(a.http_max_size.as_deref(), Some("1MB"));
        assert_eq!(a.decompression_file_count_limit, Some(10));
        let e = parse_str(
            "client {\n  artifact {\n    http_max_bytes = \"1MB\"\n  }\n}\n",
            "a.hcl",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field `http_max_bytes`"), "{e}");
    }

    #[test]
    fn acl_and_tls_blocks_are_read_and_what_would_be_ignored_is_refused() {
        let f = parse_str(
            "acl {\n  enabled = true\n  token_ttl = \"30s\"\n}\n",
            "a.hcl",
        )
        .unwrap();
        assert_eq!(f.acl.unwrap().enabled, Some(true));
        let e = parse_str(
            "acl {\n  enabled = true\n  replication_token = \"x\"\n}\n",
            "a.hcl",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field `replication_token`"), "{e}");
        let f = parse_str(
            "tls {\n  http = true\n  rpc = true\n  ca_file = \"ca.pem\"\n  verify_server_hostname = true\n}\n",
            "a.hcl",
        )
        .unwrap();
        let s = f.tls.unwrap().settings("global").unwrap();
        assert!(s.http && s.rpc && s.verify_server_hostname && !s.verify_https_client);
        assert_eq!(s.files.ca_file.as_deref(), Some(Path::new("ca.pem")));
        let e = parse_str("tls {\n  http = true\n  ca_path = \"x\"\n}\n", "a.hcl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `ca_path`"), "{e}");
        let refused = |body: &str| {
            parse_str(&format!("tls {{\n  {body}\n}}\n"), "a.hcl")
                .unwrap()
                .tls
                .unwrap()
                .settings("global")
                .unwrap_err()
                .to_string()
        };
        assert!(
            refused("rpc_upgrade_mode = true").starts_with("tls.rpc_upgrade_mode: not supported")
        );
        assert!(refused("tls_min_version = \"tls13\"").starts_with("tls.tls_min_version"));
        assert!(
            refused("tls_cipher_suites = \"TLS_AES_128_GCM_SHA256\"")
                .starts_with("tls.tls_cipher_suites")
        );
        let on = parse_str("tls {\n  rpc = true\n}\n", "a.hcl")
            .unwrap()
            .tls
            .unwrap();
        assert!(
            on.settings("us east")
                .unwrap_err()
                .to_string()
                .contains("DNS label")
        );
    }

    #[test]
    fn parses_nomads_agent_format() {
        let f = parse_str(
            r#"
data_dir  = "/tmp/d"
bind_addr = "0.0.0.0"
ports { http = 5646 }
server { enabled = true }
client {
  enabled = true
  cpu_total_compute = 4000
  reserved {
    cpu = 500
    memory = 256
    reserved_ports = "22"
  }
  meta { rack = "r1" }
}
plugin "raw_exec" {
  config { enabled = true }
}
"#,
            "agent.hcl",
        )
        .unwrap();
        assert_eq!(f.data_dir.unwrap(), PathBuf::from("/tmp/d"));
        assert_eq!(f.ports.unwrap().http, Some(5646));
        let c = f.client.unwrap();
        assert_eq!(c.cpu_total_compute, Some(4000));
        assert_eq!(c.reserved.unwrap().cpu, Some(500));
        assert_eq!(c.meta.unwrap()["rack"], "r1");
        let p = f.plugin.unwrap();
        assert_eq!(p["raw_exec"].config.as_ref().unwrap()["enabled"], true);
    }

    #[test]
    fn server_heartbeat_settings_parse() {
        let f = parse_str(
            "server {\n  min_heartbeat_ttl = \"20s\"\n  max_heartbeats_per_second = 25\n  heartbeat_grace = \"15s\"\n  failover_heartbeat_ttl = \"10m\"\n}\n",
            "a.hcl",
        )
        .unwrap();
        let s = f.server.unwrap();
        assert_eq!(s.min_heartbeat_ttl.as_deref(), Some("20s"));
        assert_eq!(s.max_heartbeats_per_second, Some(25.0));
        assert_eq!(s.heartbeat_grace.as_deref(), Some("15s"));
        assert_eq!(s.failover_heartbeat_ttl.as_deref(), Some("10m"));
        assert!(s.other.is_empty(), "{:?}", s.other);
    }

    #[test]
    fn server_join_and_client_servers_parse() {
        let f = parse_str(
            r#"
server {
  enabled          = true
  bootstrap_expect = 3
  raft_multiplier  = 2
  server_join {
    retry_join = ["10.0.0.1:4647", "10.0.0.2:4647"]
  }
}
client {
  enabled = true
  servers = ["10.0.0.1:4647"]
}
"#,
            "agent.hcl",
        )
        .unwrap();
        let s = f.server.unwrap();
        assert_eq!(s.bootstrap_expect, Some(3));
        assert_eq!(s.raft_multiplier, Some(2));
        assert_eq!(s.server_join.unwrap().retry_join.len(), 2);
        assert!(s.other.is_empty(), "{:?}", s.other);
        assert_eq!(f.client.unwrap().servers.unwrap(), vec!["10.0.0.1:4647"]);
    }

    #[test]
    fn client_chroot_env_is_read_with_quoted_host_paths() {
        let f = parse_str(
            r#"
client {
  enabled = true
  chroot_env {
    "/usr/bin/local" = "/usr/local"
    "/etc"           = "/etc"
  }
}
"#,
            "agent.hcl",
        )
        .unwrap();
        let c = f.client.unwrap();
        assert!(c.other.is_empty(), "{:?}", c.other);
        assert_eq!(
            c.chroot_env.unwrap(),
            BTreeMap::from([
                ("/etc".to_string(), "/etc".to_string()),
                ("/usr/bin/local".to_string(), "/usr/local".to_string()),
            ])
        );
    }

    #[test]
    fn client_options_are_read_as_a_block_or_an_object_with_quoted_keys() {
        for text in [
            "client {\n  options {\n    \"env.denylist\" = \"A,B\"\n  }\n  chroot_env {\n    \"/etc\" = \"/etc\"\n  }\n}\n",
            "client {\n  options = {\n    \"env.denylist\" = \"A,B\"\n  }\n  chroot_env = {\n    \"/etc\" = \"/etc\"\n  }\n}\n",
        ] {
            let c = parse_str(text, "agent.hcl").unwrap().client.unwrap();
            assert!(c.other.is_empty(), "{:?}", c.other);
            assert_eq!(
                c.options.unwrap(),
                BTreeMap::from([("env.denylist".to_string(), "A,B".to_string())])
            );
            assert_eq!(c.chroot_env.unwrap().len(), 1);
        }
    }

    #[test]
    fn client_host_volume_blocks_are_read_by_name() {
        let f = parse_str(
            r#"
client {
  enabled = true
  host_volume "data" {
    path      = "/srv/data"
    read_only = false
  }
  host_volume "certs" {
    path      = "/etc/ssl/certs"
    read_only = true
  }
}
"#,
            "agent.hcl",
        )
        .unwrap();
        let c = f.client.unwrap();
        assert!(c.other.is_empty(), "{:?}", c.other);
        let hv = c.host_volume.unwrap();
        assert_eq!(hv.len(), 2);
        assert_eq!(hv["data"].path, "/srv/data");
        assert!(!hv["data"].read_only);
        assert_eq!(hv["certs"].path, "/etc/ssl/certs");
        assert!(hv["certs"].read_only);
    }

    #[test]
    fn an_unknown_key_in_a_host_volume_block_is_an_error_naming_it() {
        let e = parse_str(
            "client {\n  host_volume \"data\" {\n    path = \"/srv\"\n    bogus = 1\n  }\n}\n",
            "a.hcl",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("bogus") && e.contains("host_volume"), "{e}");
    }

    #[test]
    fn unknown_top_level_key_is_an_error_naming_it() {
        let e = parse_str("bogus_key = 1\n", "a.hcl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus_key"), "{e}");
    }

    #[test]
    fn nomad_settings_drover_does_not_act_on_are_listed_unless_turned_off() {
        let f = parse_str(
            "consul { address = \"127.0.0.1:8500\" }\nvault { enabled = false }\nui {\n  enabled = false\n  label { text = \"prod\" }\n}\n\
             leave_on_terminate = true\nenable_debug = false\nlog_file = \"/tmp/x.log\"\n\
             advertise {\n  rpc = \"10.0.0.1\"\n  http = \"10.0.0.1\"\n}\n\
             addresses {\n  http = \"127.0.0.1\"\n  serf = \"0.0.0.0\"\n}\ndisable_update_check = true\n",
            "a.hcl",
        )
        .unwrap();
        assert_eq!(
            f.unsupported_settings(),
            [
                "advertise.http",
                "addresses.serf (Drover has no gossip listener)",
                "ui.label",
                "consul",
                "leave_on_terminate",
                "log_file"
            ]
        );
        assert!(!f.ui_enabled());
        assert!(
            parse_str("ui { enabled = true }\n", "a.hcl")
                .unwrap()
                .ui_enabled()
        );
        assert!(parse_str("", "a.hcl").unwrap().ui_enabled());
        assert_eq!(f.addresses.unwrap().http.as_deref(), Some("127.0.0.1"));
        let e = parse_str("addresses { grpc = \"x\" }\n", "a.hcl").unwrap_err();
        assert!(
            e.to_string().contains("addresses.grpc") || e.to_string().contains("grpc"),
            "{e}"
        );
    }
}
