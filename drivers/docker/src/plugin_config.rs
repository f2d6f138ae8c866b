//! The agent's `plugin "docker" { config { ... } }` block, with Nomad's names and defaults.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::caps::NOMAD_DEFAULT_CAPS;
use crate::fields::{FieldError, Fields, as_object};

/// Nomad's default `logging` block: json-file keeps the last 2 x 2 MB on the daemon's side, and
/// the driver copies the stream into the alloc's log files.
const DEFAULT_LOG_TYPE: &str = "json-file";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcConfig {
    /// Remove an image once no task uses it (after `image_delay`).
    pub image: bool,
    pub image_delay: Duration,
    /// Remove a task's container when the task is destroyed.
    pub container: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumesConfig {
    /// Host paths outside the alloc dir, named volumes and volume drivers are allowed.
    pub enabled: bool,
    /// Appended to every bind, for example "z".
    pub selinux_label: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggingConfig {
    pub driver: String,
    pub options: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginConfig {
    /// `unix:///path/to/docker.sock`; empty means `DOCKER_HOST` or the default socket.
    pub endpoint: String,
    pub allow_privileged: bool,
    /// Capabilities tasks may add; "all" allows any.
    pub allow_caps: Vec<String>,
    pub volumes: VolumesConfig,
    pub gc: GcConfig,
    /// Which of Nomad's extra labels (`job_name`, `task_name`, ...) containers get; globs allowed.
    pub extra_labels: Vec<String>,
    pub logging: LoggingConfig,
    pub allow_runtimes: Vec<String>,
    /// Upper bound for tasks' `pids_limit`; 0 is unlimited.
    pub pids_limit: i64,
    /// Do not copy container output into the alloc's log files.
    pub disable_log_collection: bool,
    /// The image of the pause containers holding bridge-mode allocations' namespaces.
    pub infra_image: String,
    pub infra_image_pull_timeout: Duration,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            endpoint: String::new(),
            allow_privileged: false,
            allow_caps: NOMAD_DEFAULT_CAPS.iter().map(|c| c.to_string()).collect(),
            volumes: VolumesConfig {
                enabled: false,
                selinux_label: String::new(),
            },
            gc: GcConfig {
                image: true,
                image_delay: Duration::from_secs(180),
                container: true,
            },
            extra_labels: Vec::new(),
            logging: LoggingConfig {
                driver: DEFAULT_LOG_TYPE.to_string(),
                options: BTreeMap::from([
                    ("max-file".to_string(), "2".to_string()),
                    ("max-size".to_string(), "2m".to_string()),
                ]),
            },
            allow_runtimes: vec!["runc".to_string(), "nvidia".to_string()],
            pids_limit: 0,
            disable_log_collection: false,
            infra_image: crate::network::DEFAULT_INFRA_IMAGE.to_string(),
            infra_image_pull_timeout: crate::network::DEFAULT_INFRA_PULL_TIMEOUT,
        }
    }
}

const KNOWN: &[&str] = &[
    "endpoint",
    "auth",
    "tls",
    "extra_labels",
    "logging",
    "gc",
    "volumes",
    "allow_privileged",
    "allow_caps",
    "nvidia_runtime",
    "allow_runtimes",
    "infra_image",
    "infra_image_pull_timeout",
    "pull_activity_timeout",
    "pids_limit",
    "disable_log_collection",
];

/// Parses the block; `null` or `{}` gives Nomad's defaults.
pub fn parse_plugin_config(config: &Value) -> Result<PluginConfig, FieldError> {
    let empty = Map::new();
    let f = Fields::new(as_object(config, "config", &empty)?, "");
    f.only(KNOWN)?;
    let mut c = PluginConfig {
        endpoint: f.text("endpoint")?,
        ..PluginConfig::default()
    };
    if !c.endpoint.is_empty() && !c.endpoint.starts_with("unix://") {
        return Err(FieldError::new(
            "endpoint",
            "only unix:// endpoints are supported",
        ));
    }
    if let Some(tls) = f.block("tls")? {
        let tls = Fields::new(tls, "tls");
        tls.only(&["cert", "key", "ca"])?;
        if ["cert", "key", "ca"].iter().any(|k| tls.has(k)) {
            return Err(FieldError::new(
                "tls",
                "TLS connections to the daemon are not supported",
            ));
        }
    }
    if let Some(auth) = f.block("auth")? {
        // Registry credentials only matter for pulls; accepted so Nomad agent files load.
        Fields::new(auth, "auth").only(&["config", "helper"])?;
    }
    c.allow_privileged = f.bool_or("allow_privileged", false)?;
    if f.has("allow_caps") {
        c.allow_caps = f.strings("allow_caps")?;
    }
    c.extra_labels = f.strings("extra_labels")?;
    if f.has("allow_runtimes") {
        c.allow_runtimes = f.strings("allow_runtimes")?;
    }
    c.pids_limit = f.int("pids_limit")?.unwrap_or(0);
    c.disable_log_collection = f.bool_or("disable_log_collection", false)?;
    let infra_image = f.text("infra_image")?;
    if !infra_image.is_empty() {
        c.infra_image = infra_image;
    }
    if let Some(d) = f.duration("infra_image_pull_timeout")? {
        c.infra_image_pull_timeout = d;
    }
    if let Some(d) = f.duration("pull_activity_timeout")?
        && d < Duration::from_secs(60)
    {
        return Err(FieldError::new(
            "pull_activity_timeout",
            "must be at least 1m",
        ));
    }
    if let Some(v) = f.block("volumes")? {
        let v = Fields::new(v, "volumes");
        v.only(&["enabled", "selinuxlabel"])?;
        c.volumes.enabled = v.bool_or("enabled", false)?;
        c.volumes.selinux_label = v.text("selinuxlabel")?;
    }
    if let Some(gc) = f.block("gc")? {
        let gc = Fields::new(gc, "gc");
        gc.only(&["image", "image_delay", "container", "dangling_containers"])?;
        c.gc.image = gc.bool_or("image", true)?;
        c.gc.container = gc.bool_or("container", true)?;
        if let Some(d) = gc.duration("image_delay")? {
            c.gc.image_delay = d;
        }
        if let Some(dc) = gc.block("dangling_containers")? {
            let dc = Fields::new(dc, "gc.dangling_containers");
            dc.only(&["enabled", "period", "creation_grace", "dry_run"])?;
            dc.bool_or("enabled", true)?;
            dc.bool_or("dry_run", false)?;
            dc.duration("period")?;
            if let Some(grace) = dc.duration("creation_grace")?
                && grace < Duration::from_secs(60)
            {
                return Err(FieldError::new(
                    "gc.dangling_containers.creation_grace",
                    "must be at least 1m",
                ));
            }
        }
    }
    if let Some(l) = f.block("logging")? {
        let l = Fields::new(l, "logging");
        l.only(&["type", "config"])?;
        if let Some(t) = l.string("type")? {
            c.logging.driver = t;
            c.logging.options = BTreeMap::new();
        }
        if l.has("config") {
            c.logging.options = l.string_map("config")?;
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_block_gives_nomads_defaults() {
        let c = parse_plugin_config(&json!({})).unwrap();
        assert_eq!(c, PluginConfig::default());
        assert!(c.gc.image && c.gc.container);
        assert_eq!(c.gc.image_delay, Duration::from_secs(180));
        assert!(!c.volumes.enabled && !c.allow_privileged);
        assert!(
            !c.allow_caps
                .iter()
                .any(|c| c.eq_ignore_ascii_case("NET_RAW"))
        );
    }

    #[test]
    fn nested_blocks_read_as_objects_or_lists() {
        let c = parse_plugin_config(&json!({
            "allow_privileged": true,
            "allow_caps": ["chown", "net_raw"],
            "volumes": {"enabled": true, "selinuxlabel": "z"},
            "gc": [{"image": false, "image_delay": "10s", "container": false,
                    "dangling_containers": {"enabled": false}}],
            "extra_labels": ["job_name", "task_*"],
        }))
        .unwrap();
        assert!(c.allow_privileged);
        assert_eq!(c.allow_caps, vec!["chown", "net_raw"]);
        assert!(c.volumes.enabled);
        assert_eq!(c.volumes.selinux_label, "z");
        assert!(!c.gc.image && !c.gc.container);
        assert_eq!(c.gc.image_delay, Duration::from_secs(10));
        assert_eq!(c.extra_labels, vec!["job_name", "task_*"]);
    }

    #[test]
    fn bad_fields_are_named() {
        let e = parse_plugin_config(&json!({"volumes": {"enabled": "yes"}})).unwrap_err();
        assert_eq!(e.to_string(), "field \"volumes.enabled\": must be a bool");
        let e = parse_plugin_config(&json!({"gc": {"image_delay": "later"}})).unwrap_err();
        assert!(e.to_string().starts_with("field \"gc.image_delay\""), "{e}");
        let e = parse_plugin_config(&json!({"allow_privilege": true})).unwrap_err();
        assert_eq!(e.to_string(), "field \"allow_privilege\": unknown field");
        let e = parse_plugin_config(&json!({"endpoint": "tcp://1.2.3.4:2375"})).unwrap_err();
        assert!(e.to_string().contains("unix://"), "{e}");
    }
}
