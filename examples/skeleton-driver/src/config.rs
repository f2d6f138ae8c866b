//! The task `config` block: `command` (required) and `args`, and the (empty) plugin config.

use drover_plugin_sdk::DriverError;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCommand {
    pub command: String,
    pub args: Vec<String>,
}

fn invalid(message: impl Into<String>) -> DriverError {
    DriverError::InvalidConfig(message.into())
}

/// Reads a task `config` block; every error names the field. Unknown fields are errors so that
/// a typo (`arg = [...]`) is not silently ignored.
pub fn parse_task_config(config: &Value) -> Result<TaskCommand, DriverError> {
    let object = config
        .as_object()
        .ok_or_else(|| invalid("task config must be an object"))?;
    if let Some(unknown) = object.keys().find(|k| *k != "command" && *k != "args") {
        return Err(invalid(format!("unknown field \"{unknown}\"")));
    }
    let command = match object.get("command") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        None | Some(Value::Null) => return Err(invalid("missing required field \"command\"")),
        Some(_) => return Err(invalid("field \"command\" must be a non-empty string")),
    };
    let args = match object.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| invalid("field \"args\" must be a list of strings"))?,
        Some(_) => return Err(invalid("field \"args\" must be a list of strings")),
    };
    Ok(TaskCommand { command, args })
}

/// The plugin takes no settings; any field in its `plugin "skeleton" { config {} }` is an error.
pub fn check_plugin_config(config: &Value) -> Result<(), DriverError> {
    match config {
        Value::Null => Ok(()),
        Value::Object(o) => match o.keys().next() {
            None => Ok(()),
            Some(k) => Err(invalid(format!(
                "unknown field \"{k}\" (the skeleton plugin takes no settings)"
            ))),
        },
        _ => Err(invalid("plugin config must be an object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn command_and_args_are_read() {
        assert_eq!(
            parse_task_config(&json!({"command": "echo", "args": ["a"]})).unwrap(),
            TaskCommand {
                command: "echo".into(),
                args: vec!["a".into()]
            }
        );
    }

    #[test]
    fn errors_name_the_field() {
        let msg = |v| parse_task_config(&v).unwrap_err().to_string();
        assert!(msg(json!({})).contains("\"command\""));
        assert!(msg(json!({"command": 1})).contains("\"command\""));
        assert!(msg(json!({"command": "x", "args": [1]})).contains("\"args\""));
        assert!(msg(json!({"command": "x", "arg": []})).contains("\"arg\""));
        assert!(
            check_plugin_config(&json!({"x": 1}))
                .unwrap_err()
                .to_string()
                .contains("\"x\"")
        );
        assert!(check_plugin_config(&json!({})).is_ok());
    }
}
