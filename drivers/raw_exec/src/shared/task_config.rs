//! The task `config` block of raw_exec and exec: `command` (required) and `args`.

use serde_json::Value;
use thiserror::Error;

/// A validated task `config` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandConfig {
    pub command: String,
    pub args: Vec<String>,
}

/// Why a task `config` block is rejected; every message names the field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TaskConfigError {
    #[error("task config must be an object, got {0}")]
    NotAnObject(&'static str),
    #[error("missing required field \"command\"")]
    MissingCommand,
    #[error("field \"command\" must be a non-empty string")]
    BadCommand,
    #[error("field \"args\" must be a list of strings")]
    BadArgs,
    #[error("unknown field \"{0}\"")]
    UnknownField(String),
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parses and checks a task `config` block. Unknown fields are errors, as an HCL schema would
/// make them, so that a typo like `arg = [...]` is not silently ignored.
// raw_exec's entry point; the exec driver, which compiles this file too, has extra fields.
#[allow(dead_code)]
pub fn parse_command_config(config: &Value) -> Result<CommandConfig, TaskConfigError> {
    parse_command_config_with(config, &[])
}

/// Like [`parse_command_config`], also accepting the driver's own `extra` fields, which the
/// caller reads itself.
pub fn parse_command_config_with(
    config: &Value,
    extra: &[&str],
) -> Result<CommandConfig, TaskConfigError> {
    let object = config
        .as_object()
        .ok_or(TaskConfigError::NotAnObject(json_kind(config)))?;
    if let Some(unknown) = object
        .keys()
        .find(|k| *k != "command" && *k != "args" && !extra.contains(&k.as_str()))
    {
        return Err(TaskConfigError::UnknownField(unknown.clone()));
    }
    let command = match object.get("command") {
        None | Some(Value::Null) => return Err(TaskConfigError::MissingCommand),
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(_) => return Err(TaskConfigError::BadCommand),
    };
    let args = match object.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or(TaskConfigError::BadArgs)?,
        Some(_) => return Err(TaskConfigError::BadArgs),
    };
    Ok(CommandConfig { command, args })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn command_and_args_are_read() {
        let cfg = parse_command_config(&json!({"command": "/bin/echo", "args": ["a", "b"]}));
        assert_eq!(
            cfg,
            Ok(CommandConfig {
                command: "/bin/echo".into(),
                args: vec!["a".into(), "b".into()]
            })
        );
    }

    #[test]
    fn args_are_optional() {
        let cfg = parse_command_config(&json!({"command": "true"})).unwrap();
        assert!(cfg.args.is_empty());
    }

    #[test]
    fn errors_name_the_offending_field() {
        let msg = |v: Value| parse_command_config(&v).unwrap_err().to_string();
        assert_eq!(msg(json!({})), "missing required field \"command\"");
        assert_eq!(
            msg(json!({"command": ""})),
            "field \"command\" must be a non-empty string"
        );
        assert_eq!(
            msg(json!({"command": 3})),
            "field \"command\" must be a non-empty string"
        );
        assert_eq!(
            msg(json!({"command": "x", "args": "a b"})),
            "field \"args\" must be a list of strings"
        );
        assert_eq!(
            msg(json!({"command": "x", "args": ["a", 1]})),
            "field \"args\" must be a list of strings"
        );
        assert_eq!(
            msg(json!({"command": "x", "arg": []})),
            "unknown field \"arg\""
        );
        assert_eq!(
            msg(json!(["x"])),
            "task config must be an object, got a list"
        );
    }

    #[test]
    fn extra_fields_are_accepted_only_when_named() {
        let config = json!({"command": "x", "pid_mode": "host"});
        assert!(parse_command_config_with(&config, &["pid_mode"]).is_ok());
        assert_eq!(
            parse_command_config(&config),
            Err(TaskConfigError::UnknownField("pid_mode".into()))
        );
    }
}
