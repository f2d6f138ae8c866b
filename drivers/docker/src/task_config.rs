//! A task's `config { ... }` block for the docker driver, with Nomad's field names.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::fields::{FieldError, Fields, as_object};

/// Nomad's default `image_pull_timeout`.
const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(300);

/// One `mount { ... }` block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountConfig {
    /// "bind", "volume" (the default) or "tmpfs".
    pub typ: String,
    pub target: String,
    pub source: String,
    pub readonly: bool,
    pub propagation: String,
    pub volume_no_copy: bool,
    pub volume_labels: BTreeMap<String, String>,
    pub volume_driver: String,
    pub volume_driver_options: BTreeMap<String, String>,
    pub tmpfs_size: Option<i64>,
    pub tmpfs_mode: Option<i64>,
}

/// One `devices { ... }` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceConfig {
    pub host_path: String,
    pub container_path: String,
    pub cgroup_permissions: String,
}

/// A task's `logging { type, config }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskLogging {
    pub driver: String,
    pub options: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerTaskConfig {
    pub image: String,
    /// Image archive, relative to the task's `local/` dir, loaded with `docker load`.
    pub load: String,
    pub force_pull: bool,
    pub image_pull_timeout: Duration,
    pub command: String,
    pub args: Vec<String>,
    pub entrypoint: Vec<String>,
    pub work_dir: String,
    pub hostname: String,
    pub labels: BTreeMap<String, String>,
    /// Group network port labels to publish.
    pub ports: Vec<String>,
    pub network_mode: String,
    pub network_aliases: Vec<String>,
    pub ipv4_address: String,
    pub ipv6_address: String,
    /// `host:container[:mode]` binds.
    pub volumes: Vec<String>,
    pub volume_driver: String,
    pub mounts: Vec<MountConfig>,
    pub devices: Vec<DeviceConfig>,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub privileged: bool,
    /// MB; turns `memory` into a soft limit (reservation) below this hard limit.
    pub memory_hard_limit: i64,
    pub pids_limit: i64,
    pub cpuset_cpus: String,
    pub dns_servers: Vec<String>,
    pub dns_search_domains: Vec<String>,
    pub dns_options: Vec<String>,
    pub extra_hosts: Vec<String>,
    pub group_add: Vec<String>,
    pub init: bool,
    pub interactive: bool,
    pub tty: bool,
    pub readonly_rootfs: bool,
    pub ipc_mode: String,
    pub pid_mode: String,
    pub uts_mode: String,
    pub userns_mode: String,
    pub security_opt: Vec<String>,
    pub shm_size: i64,
    pub storage_opt: BTreeMap<String, String>,
    pub sysctl: BTreeMap<String, String>,
    pub ulimit: BTreeMap<String, String>,
    pub runtime: String,
    pub logging: Option<TaskLogging>,
    pub healthchecks_disabled: bool,
}

const SUPPORTED: &[&str] = &[
    "image",
    "load",
    "force_pull",
    "image_pull_timeout",
    "auth",
    "auth_soft_fail",
    "advertise_ipv6_address",
    "command",
    "args",
    "entrypoint",
    "work_dir",
    "hostname",
    "labels",
    "ports",
    "port_map",
    "network_mode",
    "network_aliases",
    "ipv4_address",
    "ipv6_address",
    "volumes",
    "volume_driver",
    "mount",
    "mounts",
    "devices",
    "cap_add",
    "cap_drop",
    "privileged",
    "memory_hard_limit",
    "pids_limit",
    "cpuset_cpus",
    "cpu_hard_limit",
    "cpu_cfs_period",
    "dns_servers",
    "dns_search_domains",
    "dns_options",
    "extra_hosts",
    "group_add",
    "init",
    "interactive",
    "tty",
    "readonly_rootfs",
    "ipc_mode",
    "pid_mode",
    "uts_mode",
    "userns_mode",
    "security_opt",
    "shm_size",
    "storage_opt",
    "sysctl",
    "ulimit",
    "runtime",
    "logging",
    "healthchecks",
    "isolation",
    "mac_address",
];

fn parse_mount(block: &Map<String, Value>, path: &str) -> Result<MountConfig, FieldError> {
    let f = Fields::new(block, path);
    f.only(&[
        "type",
        "target",
        "source",
        "readonly",
        "bind_options",
        "volume_options",
        "tmpfs_options",
    ])?;
    let mut m = MountConfig {
        typ: f.string("type")?.unwrap_or_else(|| "volume".to_string()),
        target: f.text("target")?,
        source: f.text("source")?,
        readonly: f.bool_or("readonly", false)?,
        ..Default::default()
    };
    if m.target.is_empty() {
        return Err(FieldError::new(f.path("target"), "is required"));
    }
    let bind_path = f.path("bind_options");
    if let Some(b) = f.block("bind_options")? {
        let b = Fields::new(b, &bind_path);
        b.only(&["propagation"])?;
        m.propagation = b.text("propagation")?;
    }
    let volume_path = f.path("volume_options");
    if let Some(v) = f.block("volume_options")? {
        let v = Fields::new(v, &volume_path);
        v.only(&["no_copy", "labels", "driver_config"])?;
        m.volume_no_copy = v.bool_or("no_copy", false)?;
        m.volume_labels = v.string_map("labels")?;
        let dc_path = v.path("driver_config");
        if let Some(dc) = v.block("driver_config")? {
            let dc = Fields::new(dc, &dc_path);
            dc.only(&["name", "options"])?;
            m.volume_driver = dc.text("name")?;
            m.volume_driver_options = dc.string_map("options")?;
        }
    }
    let tmpfs_path = f.path("tmpfs_options");
    if let Some(t) = f.block("tmpfs_options")? {
        let t = Fields::new(t, &tmpfs_path);
        t.only(&["size", "mode"])?;
        m.tmpfs_size = t.int("size")?;
        m.tmpfs_mode = t.int("mode")?;
    }
    match m.typ.as_str() {
        "bind" | "volume" => Ok(m),
        "tmpfs" if m.source.is_empty() => Ok(m),
        "tmpfs" => Err(FieldError::new(
            f.path("source"),
            "must be empty for a tmpfs mount",
        )),
        other => Err(FieldError::new(
            f.path("type"),
            format!("must be \"bind\", \"volume\" or \"tmpfs\", not {other:?}"),
        )),
    }
}

fn parse_device(block: &Map<String, Value>, path: &str) -> Result<DeviceConfig, FieldError> {
    let f = Fields::new(block, path);
    f.only(&["host_path", "container_path", "cgroup_permissions"])?;
    let host_path = f.text("host_path")?;
    if host_path.is_empty() {
        return Err(FieldError::new(f.path("host_path"), "is required"));
    }
    let container_path = f.string("container_path")?.unwrap_or(host_path.clone());
    let cgroup_permissions = f.string("cgroup_permissions")?.unwrap_or("rwm".into());
    if cgroup_permissions.is_empty()
        || !cgroup_permissions
            .chars()
            .all(|c| matches!(c, 'r' | 'w' | 'm'))
    {
        return Err(FieldError::new(
            f.path("cgroup_permissions"),
            format!("invalid cgroup permissions {cgroup_permissions:?}"),
        ));
    }
    Ok(DeviceConfig {
        host_path,
        container_path,
        cgroup_permissions,
    })
}

fn unsupported(f: &Fields<'_>, name: &str, why: &str) -> Result<(), FieldError> {
    if f.has(name) {
        return Err(FieldError::new(f.path(name), why));
    }
    Ok(())
}

/// Parses and checks the block. Errors name the field.
pub fn parse_task_config(config: &Value) -> Result<DockerTaskConfig, FieldError> {
    let empty = Map::new();
    let f = Fields::new(as_object(config, "config", &empty)?, "");
    f.only(SUPPORTED)?;
    unsupported(
        &f,
        "port_map",
        "'port_map' cannot map group network ports, use 'ports' instead",
    )?;
    unsupported(
        &f,
        "isolation",
        "isolation modes are only supported on Windows",
    )?;
    unsupported(&f, "mac_address", "is not supported by this driver")?;
    if f.bool_or("cpu_hard_limit", false)? {
        return Err(FieldError::new(
            "cpu_hard_limit",
            "is not supported by this driver (CPU shares are set from the task's cpu)",
        ));
    }
    f.int("cpu_cfs_period")?;
    f.bool_or("auth_soft_fail", false)?;
    f.bool_or("advertise_ipv6_address", false)?;
    let image = f.text("image")?;
    if image.trim().is_empty() {
        return Err(FieldError::new("image", "is required"));
    }
    let command = f.text("command")?;
    if !command.is_empty() && command.trim() != command {
        return Err(FieldError::new(
            "command",
            format!("contains extra white space: {command:?}; put arguments in \"args\""),
        ));
    }
    let mut mounts = Vec::new();
    for name in ["mount", "mounts"] {
        for (i, b) in f.blocks(name)?.into_iter().enumerate() {
            mounts.push(parse_mount(b, &format!("{name}[{i}]"))?);
        }
    }
    let devices = f
        .blocks("devices")?
        .into_iter()
        .enumerate()
        .map(|(i, b)| parse_device(b, &format!("devices[{i}]")))
        .collect::<Result<_, _>>()?;
    let logging = match f.block("logging")? {
        None => None,
        Some(l) => {
            let l = Fields::new(l, "logging");
            l.only(&["type", "driver", "config"])?;
            let driver = match l.text("type")? {
                t if t.is_empty() => l.text("driver")?,
                t => t,
            };
            Some(TaskLogging {
                driver,
                options: l.string_map("config")?,
            })
        }
    };
    let healthchecks_disabled = match f.block("healthchecks")? {
        None => false,
        Some(h) => {
            let h = Fields::new(h, "healthchecks");
            h.only(&["disable"])?;
            h.bool_or("disable", false)?
        }
    };
    if let Some(a) = f.block("auth")? {
        Fields::new(a, "auth").only(&["username", "password", "email", "server_address"])?;
    }
    let cfg = DockerTaskConfig {
        image: image.trim().trim_start_matches("https://").to_string(),
        load: f.text("load")?,
        force_pull: f.bool_or("force_pull", false)?,
        image_pull_timeout: f
            .duration("image_pull_timeout")?
            .unwrap_or(DEFAULT_PULL_TIMEOUT),
        command,
        args: f.strings("args")?,
        entrypoint: f.strings("entrypoint")?,
        work_dir: f.text("work_dir")?,
        hostname: f.text("hostname")?,
        labels: f.string_map("labels")?,
        ports: f.strings("ports")?,
        network_mode: f.text("network_mode")?,
        network_aliases: f.strings("network_aliases")?,
        ipv4_address: f.text("ipv4_address")?,
        ipv6_address: f.text("ipv6_address")?,
        volumes: f.strings("volumes")?,
        volume_driver: f.text("volume_driver")?,
        mounts,
        devices,
        cap_add: f.strings("cap_add")?,
        cap_drop: f.strings("cap_drop")?,
        privileged: f.bool_or("privileged", false)?,
        memory_hard_limit: f.int("memory_hard_limit")?.unwrap_or(0),
        pids_limit: f.int("pids_limit")?.unwrap_or(0),
        cpuset_cpus: f.text("cpuset_cpus")?,
        dns_servers: f.strings("dns_servers")?,
        dns_search_domains: f.strings("dns_search_domains")?,
        dns_options: f.strings("dns_options")?,
        extra_hosts: f.strings("extra_hosts")?,
        group_add: f.strings("group_add")?,
        init: f.bool_or("init", false)?,
        interactive: f.bool_or("interactive", false)?,
        tty: f.bool_or("tty", false)?,
        readonly_rootfs: f.bool_or("readonly_rootfs", false)?,
        ipc_mode: f.text("ipc_mode")?,
        pid_mode: f.text("pid_mode")?,
        uts_mode: f.text("uts_mode")?,
        userns_mode: f.text("userns_mode")?,
        security_opt: f.strings("security_opt")?,
        shm_size: f.int("shm_size")?.unwrap_or(0),
        storage_opt: f.string_map("storage_opt")?,
        sysctl: f.string_map("sysctl")?,
        ulimit: f.string_map("ulimit")?,
        runtime: f.text("runtime")?,
        logging,
        healthchecks_disabled,
    };
    if cfg.memory_hard_limit < 0 {
        return Err(FieldError::new("memory_hard_limit", "must not be negative"));
    }
    if cfg.pids_limit < 0 {
        return Err(FieldError::new("pids_limit", "must not be negative"));
    }
    for ip in &cfg.dns_servers {
        if ip.parse::<std::net::IpAddr>().is_err() {
            return Err(FieldError::new(
                "dns_servers",
                format!("{ip:?} is not an IP address"),
            ));
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hcl_shapes_parse() {
        let c = parse_task_config(&json!({
            "image": "busybox:1",
            "command": "/bin/sh",
            "args": ["-c", "echo", 3],
            "labels": [{"team": "a"}],
            "ports": ["http"],
            "mount": [{"type": "bind", "source": "local/x", "target": "/x", "readonly": true},
                      {"type": "tmpfs", "target": "/t", "tmpfs_options": [{"size": 1024}]}],
            "healthchecks": [{"disable": true}],
            "ulimit": [{"nofile": "1024:2048"}],
        }))
        .unwrap();
        assert_eq!(c.image, "busybox:1");
        assert_eq!(c.args, vec!["-c", "echo", "3"]);
        assert_eq!(c.labels["team"], "a");
        assert_eq!(c.mounts.len(), 2);
        assert!(c.mounts[0].readonly);
        assert_eq!(c.mounts[1].tmpfs_size, Some(1024));
        assert!(c.healthchecks_disabled);
        assert_eq!(c.image_pull_timeout, DEFAULT_PULL_TIMEOUT);
    }

    #[test]
    fn image_is_required() {
        let e = parse_task_config(&json!({"command": "x"})).unwrap_err();
        assert_eq!(e.to_string(), "field \"image\": is required");
    }

    #[test]
    fn bad_and_unsupported_fields_are_named() {
        let e = parse_task_config(&json!({"image": "x", "command": "/bin/sh "})).unwrap_err();
        assert!(e.to_string().starts_with("field \"command\""), "{e}");
        let e = parse_task_config(&json!({"image": "x", "port_map": [{"http": 80}]})).unwrap_err();
        assert!(e.to_string().contains("use 'ports' instead"), "{e}");
        let e = parse_task_config(&json!({"image": "x", "mount": {"type": "nfs", "target": "/x"}}))
            .unwrap_err();
        assert!(e.to_string().starts_with("field \"mount[0].type\""), "{e}");
        let e = parse_task_config(&json!({"image": "x", "dns_servers": ["nope"]})).unwrap_err();
        assert!(e.to_string().contains("not an IP"), "{e}");
        let e = parse_task_config(&json!({"image": "x", "imag": "y"})).unwrap_err();
        assert_eq!(e.to_string(), "field \"imag\": unknown field");
    }
}
