//! The agent's `plugin "exec" { config { ... } }` block: Nomad's exec options (`no_pivot_root`,
//! `default_pid_mode`, `default_ipc_mode`, `allow_caps`), Drover's `cgroup_parent`,
//! `allow_host_pid_mode` and `allow_host_ipc_mode` (true, Nomad's behaviour: false refuses
//! tasks that ask for the host's namespace), and
//! `chroot_env`, which the agent copies here from the client's `chroot_env` block (in Nomad a
//! client setting the driver reads from the agent config).

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde_json::Value;
use thiserror::Error;

use crate::caps::{CapError, CapSet, NOMAD_DEFAULTS};

/// Nomad's default `chroot_env`: host directory -> directory inside the task's root.
pub const DEFAULT_CHROOT_ENV: [(&str, &str); 9] = [
    ("/bin", "/bin"),
    ("/etc", "/etc"),
    ("/lib", "/lib"),
    ("/lib32", "/lib32"),
    ("/lib64", "/lib64"),
    ("/run/resolvconf", "/run/resolvconf"),
    ("/sbin", "/sbin"),
    ("/usr", "/usr"),
    // /etc/resolv.conf is a link into it on systemd-resolved hosts; absent elsewhere.
    ("/run/systemd/resolve", "/run/systemd/resolve"),
];

/// Whether a task gets its own PID or IPC namespace (`private`) or shares the host's (`host`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IsolationMode {
    #[default]
    Private,
    Host,
}

impl IsolationMode {
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "private" => Some(IsolationMode::Private),
            "host" => Some(IsolationMode::Host),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginConfig {
    /// Cgroup under which task cgroups are made, as a path from each hierarchy's root (for
    /// example "/drover"). `None` picks the default described in `cgroup::detect`.
    pub cgroup_parent: Option<String>,
    /// Enter the task root with chroot(2) after moving it over `/` instead of pivot_root(2), for
    /// hosts whose root is a ramdisk, where pivot_root fails.
    pub no_pivot_root: bool,
    pub default_pid_mode: IsolationMode,
    pub default_ipc_mode: IsolationMode,
    /// Whether a task may ask for the host's PID namespace (`pid_mode = "host"`).
    pub allow_host_pid_mode: bool,
    /// Whether a task may ask for the host's IPC namespace (`ipc_mode = "host"`).
    pub allow_host_ipc_mode: bool,
    /// Capabilities tasks may have; also caps the default set.
    pub allow_caps: CapSet,
    /// Host path -> path inside the task root, bind-mounted read-only.
    pub chroot_env: BTreeMap<String, String>,
}

impl PluginConfig {
    /// Nomad's defaults, with `supported` the capabilities the kernel knows.
    pub fn defaults(supported: CapSet) -> Self {
        PluginConfig {
            cgroup_parent: None,
            no_pivot_root: false,
            default_pid_mode: IsolationMode::Private,
            default_ipc_mode: IsolationMode::Private,
            allow_host_pid_mode: true,
            allow_host_ipc_mode: true,
            allow_caps: nomad_default_caps(supported),
            chroot_env: DEFAULT_CHROOT_ENV
                .iter()
                .map(|(host, task)| (host.to_string(), task.to_string()))
                .collect(),
        }
    }
}

/// Nomad's default capability set, limited to what the kernel supports.
pub fn nomad_default_caps(supported: CapSet) -> CapSet {
    let names: Vec<String> = NOMAD_DEFAULTS.iter().map(|s| s.to_string()).collect();
    // A kernel older than these names (all date from Linux 2.6) would fail the parse; keep
    // what it knows instead of refusing every task.
    CapSet::parse(&names, CapSet::supported(u32::MAX), "allow_caps")
        .map(|set| set.intersect(supported))
        .unwrap_or_default()
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PluginConfigError {
    #[error("plugin config must be an object")]
    NotAnObject,
    #[error("field \"cgroup_parent\" must be an absolute cgroup path like \"/drover\"")]
    BadCgroupParent,
    #[error("field \"{0}\" must be a bool")]
    NotABool(&'static str),
    #[error("{field} must be \"private\" or \"host\", got {value}")]
    BadMode { field: &'static str, value: String },
    #[error("field \"{0}\" must be a list of strings")]
    NotAList(&'static str),
    #[error(transparent)]
    Caps(#[from] CapError),
    #[error(
        "field \"chroot_env\" must map absolute host paths to absolute paths inside the task: {0}"
    )]
    BadChrootEnv(String),
    #[error("unknown field \"{0}\"")]
    UnknownField(String),
    #[error("{default} = \"host\" contradicts {allow} = false")]
    HostDefaultNotAllowed {
        default: &'static str,
        allow: &'static str,
    },
}

const FIELDS: [&str; 8] = [
    "cgroup_parent",
    "no_pivot_root",
    "default_pid_mode",
    "default_ipc_mode",
    "allow_host_pid_mode",
    "allow_host_ipc_mode",
    "allow_caps",
    "chroot_env",
];

fn mode_field(
    value: Option<&Value>,
    field: &'static str,
) -> Result<IsolationMode, PluginConfigError> {
    match value {
        None | Some(Value::Null) => Ok(IsolationMode::Private),
        Some(Value::String(s)) => IsolationMode::parse(s).ok_or(PluginConfigError::BadMode {
            field,
            value: format!("{s:?}"),
        }),
        Some(other) => Err(PluginConfigError::BadMode {
            field,
            value: other.to_string(),
        }),
    }
}

/// A list of strings; `None` when absent.
pub fn string_list(
    value: Option<&Value>,
    field: &'static str,
) -> Result<Option<Vec<String>>, PluginConfigError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or(PluginConfigError::NotAList(field)),
        Some(_) => Err(PluginConfigError::NotAList(field)),
    }
}

/// An absolute path without `..`, with trailing slashes dropped (Nomad's docs write "/etc/").
fn clean_absolute(path: &str) -> Option<String> {
    let p = Path::new(path);
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return None;
    }
    let trimmed = path.trim_end_matches('/');
    Some(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
}

fn chroot_env(value: &Value) -> Result<BTreeMap<String, String>, PluginConfigError> {
    // hcl may hand a block written once as a one-element list of objects.
    let objects: Vec<&serde_json::Map<String, Value>> = match value {
        Value::Object(o) => vec![o],
        Value::Array(items) => items
            .iter()
            .map(Value::as_object)
            .collect::<Option<_>>()
            .ok_or_else(|| PluginConfigError::BadChrootEnv("not a map".into()))?,
        _ => return Err(PluginConfigError::BadChrootEnv("not a map".into())),
    };
    let mut env = BTreeMap::new();
    for (host, task) in objects.into_iter().flatten() {
        let bad = || PluginConfigError::BadChrootEnv(format!("{host:?} = {task}"));
        let task = task.as_str().ok_or_else(bad)?;
        let (Some(host), Some(task)) = (clean_absolute(host), clean_absolute(task)) else {
            return Err(bad());
        };
        if task == "/" {
            return Err(bad());
        }
        env.insert(host, task);
    }
    Ok(env)
}

/// Parses the block; `null` counts as empty. `supported` is the kernel's capability set.
pub fn parse_plugin_config(
    config: &Value,
    supported: CapSet,
) -> Result<PluginConfig, PluginConfigError> {
    let empty = serde_json::Map::new();
    let object = match config {
        Value::Null => &empty,
        Value::Object(o) => o,
        _ => return Err(PluginConfigError::NotAnObject),
    };
    if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(PluginConfigError::UnknownField(unknown.clone()));
    }
    let mut parsed = PluginConfig::defaults(supported);
    parsed.cgroup_parent = match object.get("cgroup_parent") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.starts_with('/') && !s.split('/').any(|part| part == "..") => {
            Some(s.clone())
        }
        Some(_) => return Err(PluginConfigError::BadCgroupParent),
    };
    let flag = |field: &'static str, default: bool| match object.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(PluginConfigError::NotABool(field)),
    };
    parsed.no_pivot_root = flag("no_pivot_root", false)?;
    parsed.allow_host_pid_mode = flag("allow_host_pid_mode", true)?;
    parsed.allow_host_ipc_mode = flag("allow_host_ipc_mode", true)?;
    parsed.default_pid_mode = mode_field(object.get("default_pid_mode"), "default_pid_mode")?;
    parsed.default_ipc_mode = mode_field(object.get("default_ipc_mode"), "default_ipc_mode")?;
    for (mode, allowed, default, allow) in [
        (
            parsed.default_pid_mode,
            parsed.allow_host_pid_mode,
            "default_pid_mode",
            "allow_host_pid_mode",
        ),
        (
            parsed.default_ipc_mode,
            parsed.allow_host_ipc_mode,
            "default_ipc_mode",
            "allow_host_ipc_mode",
        ),
    ] {
        if mode == IsolationMode::Host && !allowed {
            return Err(PluginConfigError::HostDefaultNotAllowed { default, allow });
        }
    }
    if let Some(names) = string_list(object.get("allow_caps"), "allow_caps")? {
        parsed.allow_caps = CapSet::parse(&names, supported, "allow_caps")?;
    }
    if let Some(value) = object.get("chroot_env").filter(|v| !v.is_null()) {
        parsed.chroot_env = chroot_env(value)?;
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<PluginConfig, PluginConfigError> {
        parse_plugin_config(&v, CapSet::supported(40))
    }

    #[test]
    fn host_namespaces_are_allowed_unless_switched_off_and_a_default_cannot_contradict() {
        let cfg = parse(json!({})).unwrap();
        assert!(cfg.allow_host_pid_mode && cfg.allow_host_ipc_mode);
        let off = parse(json!({"allow_host_pid_mode": false})).unwrap();
        assert!(!off.allow_host_pid_mode && off.allow_host_ipc_mode);
        assert_eq!(
            parse(json!({"allow_host_ipc_mode": false, "default_ipc_mode": "host"}))
                .unwrap_err()
                .to_string(),
            "default_ipc_mode = \"host\" contradicts allow_host_ipc_mode = false"
        );
        assert_eq!(
            parse(json!({"allow_host_pid_mode": "no"})).unwrap_err(),
            PluginConfigError::NotABool("allow_host_pid_mode")
        );
    }

    #[test]
    fn defaults_are_nomads() {
        let cfg = parse(json!({})).unwrap();
        assert_eq!(cfg, parse(Value::Null).unwrap());
        assert_eq!(cfg.cgroup_parent, None);
        assert!(!cfg.no_pivot_root);
        assert_eq!(cfg.default_pid_mode, IsolationMode::Private);
        assert_eq!(cfg.default_ipc_mode, IsolationMode::Private);
        assert_eq!(cfg.allow_caps.bits(), 0xa804_05fb);
        assert_eq!(cfg.chroot_env.len(), 9);
        assert_eq!(cfg.chroot_env["/usr"], "/usr");
    }

    #[test]
    fn cgroup_parent_is_optional_and_must_be_absolute() {
        assert_eq!(
            parse(json!({"cgroup_parent": "/jobs"}))
                .unwrap()
                .cgroup_parent
                .as_deref(),
            Some("/jobs")
        );
        for bad in [json!("jobs"), json!("/a/../b"), json!(3)] {
            assert_eq!(
                parse(json!({ "cgroup_parent": bad })),
                Err(PluginConfigError::BadCgroupParent)
            );
        }
    }

    #[test]
    fn modes_and_caps_are_read_and_checked() {
        let cfg = parse(json!({
            "default_pid_mode": "host",
            "default_ipc_mode": "private",
            "allow_caps": ["CAP_NET_RAW", "chown"],
            "no_pivot_root": true,
        }))
        .unwrap();
        assert_eq!(cfg.default_pid_mode, IsolationMode::Host);
        assert_eq!(cfg.default_ipc_mode, IsolationMode::Private);
        assert_eq!(cfg.allow_caps.bits(), (1 << 13) | 1);
        assert!(cfg.no_pivot_root);
        assert_eq!(
            parse(json!({"default_ipc_mode": "shared"}))
                .unwrap_err()
                .to_string(),
            "default_ipc_mode must be \"private\" or \"host\", got \"shared\""
        );
        assert_eq!(
            parse(json!({"allow_caps": ["chown", "nope"]}))
                .unwrap_err()
                .to_string(),
            "allow_caps configured with capabilities not supported by system: nope"
        );
    }

    #[test]
    fn chroot_env_replaces_the_default_and_is_checked() {
        let cfg = parse(json!({"chroot_env": {"/usr/bin/": "/bin", "/etc": "/etc"}})).unwrap();
        assert_eq!(
            cfg.chroot_env,
            BTreeMap::from([
                ("/etc".to_string(), "/etc".to_string()),
                ("/usr/bin".to_string(), "/bin".to_string())
            ])
        );
        let one_block_list = parse(json!({"chroot_env": [{"/etc": "/etc"}]})).unwrap();
        assert_eq!(one_block_list.chroot_env.len(), 1);
        for bad in [
            json!({"etc": "/etc"}),
            json!({"/etc": "etc"}),
            json!({"/etc": "/"}),
            json!({"/etc": "/a/../b"}),
            json!({"/etc": 1}),
            json!("x"),
        ] {
            let err = parse(json!({ "chroot_env": bad })).unwrap_err();
            assert!(matches!(err, PluginConfigError::BadChrootEnv(_)), "{err}");
        }
    }

    #[test]
    fn unknown_fields_are_named() {
        assert_eq!(
            parse(json!({"enabled": true})).unwrap_err().to_string(),
            "unknown field \"enabled\""
        );
    }
}
