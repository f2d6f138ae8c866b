//! The agent's `plugin "exec" { config { ... } }` block.

use serde_json::Value;
use thiserror::Error;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginConfig {
    /// Cgroup under which task cgroups are made, as a path from each hierarchy's root (for
    /// example "/drover"). `None` picks the default described in `cgroup::detect`.
    pub cgroup_parent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PluginConfigError {
    #[error("plugin config must be an object")]
    NotAnObject,
    #[error("field \"cgroup_parent\" must be an absolute cgroup path like \"/drover\"")]
    BadCgroupParent,
    #[error("unknown field \"{0}\"")]
    UnknownField(String),
}

/// Parses the block; `null` counts as empty.
pub fn parse_plugin_config(config: &Value) -> Result<PluginConfig, PluginConfigError> {
    let empty = serde_json::Map::new();
    let object = match config {
        Value::Null => &empty,
        Value::Object(o) => o,
        _ => return Err(PluginConfigError::NotAnObject),
    };
    if let Some(unknown) = object.keys().find(|k| *k != "cgroup_parent") {
        return Err(PluginConfigError::UnknownField(unknown.clone()));
    }
    let cgroup_parent = match object.get("cgroup_parent") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.starts_with('/') && !s.split('/').any(|part| part == "..") => {
            Some(s.clone())
        }
        Some(_) => return Err(PluginConfigError::BadCgroupParent),
    };
    Ok(PluginConfig { cgroup_parent })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cgroup_parent_is_optional_and_must_be_absolute() {
        assert_eq!(parse_plugin_config(&json!({})).unwrap().cgroup_parent, None);
        assert_eq!(
            parse_plugin_config(&json!({"cgroup_parent": "/jobs"}))
                .unwrap()
                .cgroup_parent
                .as_deref(),
            Some("/jobs")
        );
        for bad in [json!("jobs"), json!("/a/../b"), json!(3)] {
            assert_eq!(
                parse_plugin_config(&json!({ "cgroup_parent": bad })),
                Err(PluginConfigError::BadCgroupParent)
            );
        }
    }

    #[test]
    fn unknown_fields_are_named() {
        assert_eq!(
            parse_plugin_config(&json!({"enabled": true}))
                .unwrap_err()
                .to_string(),
            "unknown field \"enabled\""
        );
    }
}
