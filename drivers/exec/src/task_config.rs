//! The exec task `config` block: raw_exec's `command` and `args`, plus Nomad's exec options
//! `pid_mode`, `ipc_mode`, `cap_add` and `cap_drop`.

use serde_json::Value;
use thiserror::Error;

use crate::caps::{self, CapError, CapSet};
use crate::plugin_config::{IsolationMode, PluginConfig, PluginConfigError, string_list};
use crate::shared::task_config::{CommandConfig, TaskConfigError, parse_command_config_with};

const EXEC_FIELDS: [&str; 4] = ["pid_mode", "ipc_mode", "cap_add", "cap_drop"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecTaskConfig {
    pub command: CommandConfig,
    /// `None`: the plugin's default.
    pub pid_mode: Option<IsolationMode>,
    pub ipc_mode: Option<IsolationMode>,
    pub cap_add: CapSet,
    pub cap_drop: CapSet,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExecConfigError {
    #[error(transparent)]
    Command(#[from] TaskConfigError),
    #[error("{field} must be \"private\" or \"host\", got {value}")]
    BadMode { field: &'static str, value: String },
    #[error("field \"{0}\" must be a list of strings")]
    NotAList(&'static str),
    #[error(transparent)]
    Caps(#[from] CapError),
}

fn mode(
    object: &serde_json::Map<String, Value>,
    field: &'static str,
) -> Result<Option<IsolationMode>, ExecConfigError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => {
            IsolationMode::parse(s)
                .map(Some)
                .ok_or(ExecConfigError::BadMode {
                    field,
                    value: format!("{s:?}"),
                })
        }
        Some(other) => Err(ExecConfigError::BadMode {
            field,
            value: other.to_string(),
        }),
    }
}

fn caps_field(
    object: &serde_json::Map<String, Value>,
    field: &'static str,
    supported: CapSet,
) -> Result<CapSet, ExecConfigError> {
    let names = string_list(object.get(field), field).map_err(|e| match e {
        PluginConfigError::NotAList(f) => ExecConfigError::NotAList(f),
        _ => ExecConfigError::NotAList(field),
    })?;
    Ok(CapSet::parse(&names.unwrap_or_default(), supported, field)?)
}

/// Parses and checks a task `config` block against the kernel's capabilities.
pub fn parse_exec_config(
    config: &Value,
    supported: CapSet,
) -> Result<ExecTaskConfig, ExecConfigError> {
    let command = parse_command_config_with(config, &EXEC_FIELDS)?;
    // parse_command_config_with has checked that this is an object.
    let empty = serde_json::Map::new();
    let object = config.as_object().unwrap_or(&empty);
    Ok(ExecTaskConfig {
        command,
        pid_mode: mode(object, "pid_mode")?,
        ipc_mode: mode(object, "ipc_mode")?,
        cap_add: caps_field(object, "cap_add", supported)?,
        cap_drop: caps_field(object, "cap_drop", supported)?,
    })
}

/// What one task runs with, after the plugin's defaults and limits are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isolation {
    pub pid_mode: IsolationMode,
    pub ipc_mode: IsolationMode,
    pub caps: CapSet,
}

/// Why a task cannot run with what it asks for.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IsolationError {
    #[error(transparent)]
    Caps(#[from] CapError),
    #[error(
        "{field} = \"host\" is not allowed on this client (the exec plugin sets {allow} = false)"
    )]
    HostNamespaceRefused {
        field: &'static str,
        allow: &'static str,
    },
}

impl ExecTaskConfig {
    /// The task's modes and capability set under `plugin`'s defaults, `allow_host_*_mode`
    /// and `allow_caps`.
    pub fn isolation(
        &self,
        plugin: &PluginConfig,
        supported: CapSet,
    ) -> Result<Isolation, IsolationError> {
        let refuse = |field, allow| IsolationError::HostNamespaceRefused { field, allow };
        if self.pid_mode == Some(IsolationMode::Host) && !plugin.allow_host_pid_mode {
            return Err(refuse("pid_mode", "allow_host_pid_mode"));
        }
        if self.ipc_mode == Some(IsolationMode::Host) && !plugin.allow_host_ipc_mode {
            return Err(refuse("ipc_mode", "allow_host_ipc_mode"));
        }
        let basis = crate::plugin_config::nomad_default_caps(supported);
        Ok(Isolation {
            pid_mode: self.pid_mode.unwrap_or(plugin.default_pid_mode),
            ipc_mode: self.ipc_mode.unwrap_or(plugin.default_ipc_mode),
            caps: caps::calculate(basis, plugin.allow_caps, self.cap_add, self.cap_drop)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ALL: CapSet = CapSet::empty();

    fn supported() -> CapSet {
        CapSet::supported(40)
    }

    fn parse(v: Value) -> Result<ExecTaskConfig, ExecConfigError> {
        parse_exec_config(&v, supported())
    }

    #[test]
    fn plain_command_takes_the_plugin_defaults() {
        let cfg = parse(json!({"command": "/bin/true"})).unwrap();
        assert_eq!(cfg.pid_mode, None);
        assert_eq!(cfg.cap_add, ALL);
        let plugin = PluginConfig::defaults(supported());
        let iso = cfg.isolation(&plugin, supported()).unwrap();
        assert_eq!(iso.pid_mode, IsolationMode::Private);
        assert_eq!(iso.ipc_mode, IsolationMode::Private);
        assert_eq!(iso.caps, plugin.allow_caps);
        let mut host = plugin.clone();
        host.default_pid_mode = IsolationMode::Host;
        assert_eq!(
            cfg.isolation(&host, supported()).unwrap().pid_mode,
            IsolationMode::Host
        );
    }

    #[test]
    fn a_task_asking_for_a_host_namespace_the_plugin_does_not_allow_is_refused() {
        let mut plugin = PluginConfig::defaults(supported());
        plugin.allow_host_pid_mode = false;
        let pid = parse(json!({"command": "x", "pid_mode": "host"})).unwrap();
        assert_eq!(
            pid.isolation(&plugin, supported()).unwrap_err().to_string(),
            "pid_mode = \"host\" is not allowed on this client (the exec plugin sets allow_host_pid_mode = false)"
        );
        // Private stays possible, and the IPC namespace has its own switch.
        let private = parse(json!({"command": "x", "pid_mode": "private", "ipc_mode": "host"}));
        private.unwrap().isolation(&plugin, supported()).unwrap();
        plugin.allow_host_ipc_mode = false;
        let ipc = parse(json!({"command": "x", "ipc_mode": "host"})).unwrap();
        assert!(matches!(
            ipc.isolation(&plugin, supported()),
            Err(IsolationError::HostNamespaceRefused {
                field: "ipc_mode",
                ..
            })
        ));
    }

    #[test]
    fn task_modes_override_the_plugin_defaults() {
        let cfg = parse(json!({"command": "x", "pid_mode": "host", "ipc_mode": "host"})).unwrap();
        let iso = cfg
            .isolation(&PluginConfig::defaults(supported()), supported())
            .unwrap();
        assert_eq!(
            (iso.pid_mode, iso.ipc_mode),
            (IsolationMode::Host, IsolationMode::Host)
        );
        assert_eq!(
            parse(json!({"command": "x", "pid_mode": "shared"}))
                .unwrap_err()
                .to_string(),
            "pid_mode must be \"private\" or \"host\", got \"shared\""
        );
    }

    #[test]
    fn cap_add_must_stay_within_allow_caps() {
        let plugin = PluginConfig::defaults(supported());
        let cfg = parse(json!({"command": "x", "cap_add": ["net_raw"]})).unwrap();
        assert_eq!(
            cfg.isolation(&plugin, supported()).unwrap_err().to_string(),
            "driver does not allow the following capabilities: net_raw"
        );
        let cfg = parse(json!({"command": "x", "cap_drop": ["all"], "cap_add": ["kill"]})).unwrap();
        assert_eq!(
            cfg.isolation(&plugin, supported()).unwrap().caps.bits(),
            1 << 5
        );
        assert_eq!(
            parse(json!({"command": "x", "cap_add": "kill"}))
                .unwrap_err()
                .to_string(),
            "field \"cap_add\" must be a list of strings"
        );
        assert_eq!(
            parse(json!({"command": "x", "cap_drop": ["bogus"]}))
                .unwrap_err()
                .to_string(),
            "cap_drop configured with capabilities not supported by system: bogus"
        );
    }

    #[test]
    fn unknown_fields_are_still_refused() {
        assert_eq!(
            parse(json!({"command": "x", "cap_adds": []}))
                .unwrap_err()
                .to_string(),
            "unknown field \"cap_adds\""
        );
    }
}
