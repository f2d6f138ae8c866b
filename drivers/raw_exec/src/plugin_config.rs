//! The agent's `plugin "raw_exec" { config { ... } }` block.

use serde_json::Value;
use thiserror::Error;

/// raw_exec runs tasks unisolated as the agent's user, so, as in Nomad, it is off unless enabled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginConfig {
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PluginConfigError {
    #[error("plugin config must be an object")]
    NotAnObject,
    #[error("field \"{0}\" must be a bool")]
    NotABool(&'static str),
    #[error("unknown field \"{0}\"")]
    UnknownField(String),
}

fn bool_field(value: Option<&Value>, name: &'static str) -> Result<bool, PluginConfigError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(PluginConfigError::NotABool(name)),
    }
}

/// Parses the block; `null` counts as empty. `no_cgroups` is accepted for Nomad compatibility
/// and has no effect: this driver never puts tasks in cgroups.
pub fn parse_plugin_config(config: &Value) -> Result<PluginConfig, PluginConfigError> {
    let empty = serde_json::Map::new();
    let object = match config {
        Value::Null => &empty,
        Value::Object(o) => o,
        _ => return Err(PluginConfigError::NotAnObject),
    };
    if let Some(unknown) = object
        .keys()
        .find(|k| *k != "enabled" && *k != "no_cgroups")
    {
        return Err(PluginConfigError::UnknownField(unknown.clone()));
    }
    bool_field(object.get("no_cgroups"), "no_cgroups")?;
    Ok(PluginConfig {
        enabled: bool_field(object.get("enabled"), "enabled")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn disabled_unless_enabled() {
        assert!(!parse_plugin_config(&json!({})).unwrap().enabled);
        assert!(!parse_plugin_config(&Value::Null).unwrap().enabled);
        assert!(
            parse_plugin_config(&json!({"enabled": true}))
                .unwrap()
                .enabled
        );
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(
            parse_plugin_config(&json!({"enabled": "yes"}))
                .unwrap_err()
                .to_string(),
            "field \"enabled\" must be a bool"
        );
        assert_eq!(
            parse_plugin_config(&json!({"enable": true}))
                .unwrap_err()
                .to_string(),
            "unknown field \"enable\""
        );
    }
}
