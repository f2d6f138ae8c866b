//! The agent's `plugin "mock_driver" { config { ... } }` block, as Nomad's mock driver reads it.

use std::time::Duration;

use drover_abi::FsIsolation;
use serde_json::Value;
use thiserror::Error;

use crate::duration::parse_go_duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginConfig {
    /// What the driver claims in its capabilities (it isolates nothing either way).
    pub fs_isolation: FsIsolation,
    /// When set, the driver fingerprints as undetected this long after `set_config`: lets tests
    /// of the client watch a driver go away.
    pub shutdown_after: Option<Duration>,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            fs_isolation: FsIsolation::None,
            shutdown_after: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PluginConfigError {
    #[error("plugin config must be an object")]
    NotAnObject,
    #[error("field \"fs_isolation\" must be one of \"none\", \"chroot\", \"image\"")]
    BadFsIsolation,
    #[error("field \"shutdown_periodic_after\" must be a bool")]
    BadShutdownToggle,
    #[error(
        "field \"shutdown_periodic_duration\" must be nanoseconds or a duration string like \"5s\""
    )]
    BadShutdownDuration,
    #[error("unknown field \"{0}\"")]
    UnknownField(String),
}

const KNOWN: [&str; 3] = [
    "fs_isolation",
    "shutdown_periodic_after",
    "shutdown_periodic_duration",
];

/// Parses the block; `null` counts as empty.
pub fn parse_plugin_config(config: &Value) -> Result<PluginConfig, PluginConfigError> {
    let empty = serde_json::Map::new();
    let object = match config {
        Value::Null => &empty,
        Value::Object(o) => o,
        _ => return Err(PluginConfigError::NotAnObject),
    };
    if let Some(unknown) = object.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(PluginConfigError::UnknownField(unknown.clone()));
    }
    let fs_isolation = match object.get("fs_isolation") {
        None | Some(Value::Null) => FsIsolation::None,
        Some(Value::String(s)) => match s.as_str() {
            "none" => FsIsolation::None,
            "chroot" => FsIsolation::Chroot,
            "image" => FsIsolation::Image,
            _ => return Err(PluginConfigError::BadFsIsolation),
        },
        Some(_) => return Err(PluginConfigError::BadFsIsolation),
    };
    let shutdown = match object.get("shutdown_periodic_after") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(PluginConfigError::BadShutdownToggle),
    };
    // Nomad's field is a Go time.Duration: an integer count of nanoseconds.
    let duration = match object.get("shutdown_periodic_duration") {
        None | Some(Value::Null) => Duration::ZERO,
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Duration::from_nanos)
            .ok_or(PluginConfigError::BadShutdownDuration)?,
        Some(Value::String(s)) => {
            parse_go_duration(s).map_err(|_| PluginConfigError::BadShutdownDuration)?
        }
        Some(_) => return Err(PluginConfigError::BadShutdownDuration),
    };
    Ok(PluginConfig {
        fs_isolation,
        shutdown_after: shutdown.then_some(duration),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_claim_no_isolation_and_never_shut_down() {
        assert_eq!(
            parse_plugin_config(&json!({})).unwrap(),
            PluginConfig::default()
        );
    }

    #[test]
    fn fields_are_read() {
        let cfg = parse_plugin_config(&json!({
            "fs_isolation": "chroot",
            "shutdown_periodic_after": true,
            "shutdown_periodic_duration": 2_000_000_000u64,
        }))
        .unwrap();
        assert_eq!(cfg.fs_isolation, FsIsolation::Chroot);
        assert_eq!(cfg.shutdown_after, Some(Duration::from_secs(2)));
        let cfg = parse_plugin_config(&json!({
            "shutdown_periodic_after": true,
            "shutdown_periodic_duration": "3s",
        }))
        .unwrap();
        assert_eq!(cfg.shutdown_after, Some(Duration::from_secs(3)));
    }

    #[test]
    fn bad_fields_are_named() {
        let msg = |v: Value| parse_plugin_config(&v).unwrap_err().to_string();
        assert!(msg(json!({"fs_isolation": "vm"})).contains("\"fs_isolation\""));
        assert!(msg(json!({"shutdown_periodic_after": "y"})).contains("shutdown_periodic_after"));
        assert_eq!(msg(json!({"enabled": true})), "unknown field \"enabled\"");
    }
}
