//! The mock driver's task `config` block, with Nomad's mock driver fields.

use std::time::Duration;

use serde_json::{Map, Value};
use thiserror::Error;

use crate::duration::parse_go_duration;

/// One output stream of the fake task: `text` written once, then `repeat` more times, each
/// `every` after the previous write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputSpec {
    pub text: String,
    pub repeat: u64,
    pub every: Duration,
}

/// A validated mock task config. Durations are Go duration strings in the job; empty means 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MockTaskConfig {
    /// How long the fake task runs before it exits by itself.
    pub run_for: Duration,
    pub exit_code: i32,
    pub exit_signal: i32,
    /// Reported as the exit result's error.
    pub exit_err_msg: String,
    /// Makes `start_task` fail with this message.
    pub start_error: String,
    pub start_error_recoverable: bool,
    /// How long `start_task` blocks before doing anything.
    pub start_block_for: Duration,
    /// How long the task takes to die once asked to stop.
    pub kill_after: Duration,
    /// After this long the task "loses its plugin": it ends with a plugin-shutdown error.
    pub plugin_exit_after: Duration,
    /// Makes `signal_task` fail with this message.
    pub signal_error: String,
    pub stdout: OutputSpec,
    pub stderr: OutputSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MockConfigError {
    #[error("task config must be an object")]
    NotAnObject,
    #[error("field \"{field}\" must be {expected}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
    },
    #[error("field \"{field}\": {reason}")]
    BadDuration { field: &'static str, reason: String },
    #[error("unknown field \"{0}\"")]
    UnknownField(String),
}

/// Fields Nomad's mock driver accepts that have no effect here (there is no driver network in
/// the contract, and `exec_command` only matters for streaming exec).
const ACCEPTED_UNUSED: [&str; 4] = [
    "driver_ip",
    "driver_advertise",
    "driver_port_map",
    "exec_command",
];

const KNOWN: [&str; 16] = [
    "run_for",
    "exit_code",
    "exit_signal",
    "exit_err_msg",
    "start_error",
    "start_error_recoverable",
    "start_block_for",
    "kill_after",
    "plugin_exit_after",
    "signal_error",
    "stdout_string",
    "stdout_repeat",
    "stdout_repeat_duration",
    "stderr_string",
    "stderr_repeat",
    "stderr_repeat_duration",
];

struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    fn string(&self, field: &'static str) -> Result<String, MockConfigError> {
        match self.get(field) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(MockConfigError::WrongType {
                field,
                expected: "a string",
            }),
        }
    }

    fn duration(&self, field: &'static str) -> Result<Duration, MockConfigError> {
        let text = self.string(field).map_err(|_| MockConfigError::WrongType {
            field,
            expected: "a duration string like \"30s\"",
        })?;
        if text.is_empty() {
            return Ok(Duration::ZERO);
        }
        parse_go_duration(&text).map_err(|e| MockConfigError::BadDuration {
            field,
            reason: e.to_string(),
        })
    }

    /// An integer; numeric strings are accepted as HCL's type conversion would.
    fn integer(&self, field: &'static str) -> Result<i64, MockConfigError> {
        let value = match self.get(field) {
            None => return Ok(0),
            Some(v) => v,
        };
        let parsed = match value {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        parsed.ok_or(MockConfigError::WrongType {
            field,
            expected: "an integer",
        })
    }

    fn i32(&self, field: &'static str) -> Result<i32, MockConfigError> {
        i32::try_from(self.integer(field)?).map_err(|_| MockConfigError::WrongType {
            field,
            expected: "a 32-bit integer",
        })
    }

    fn count(&self, field: &'static str) -> Result<u64, MockConfigError> {
        u64::try_from(self.integer(field)?).map_err(|_| MockConfigError::WrongType {
            field,
            expected: "a non-negative integer",
        })
    }

    fn boolean(&self, field: &'static str) -> Result<bool, MockConfigError> {
        match self.get(field) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
            Some(_) => Err(MockConfigError::WrongType {
                field,
                expected: "a bool",
            }),
        }
    }

    fn output(
        &self,
        text: &'static str,
        repeat: &'static str,
        every: &'static str,
    ) -> Result<OutputSpec, MockConfigError> {
        Ok(OutputSpec {
            text: self.string(text)?,
            repeat: self.count(repeat)?,
            every: self.duration(every)?,
        })
    }
}

/// Parses and checks a mock task `config` block; errors name the field.
pub fn parse_mock_config(config: &Value) -> Result<MockTaskConfig, MockConfigError> {
    let empty = Map::new();
    let object = match config {
        Value::Object(o) => o,
        Value::Null => &empty,
        _ => return Err(MockConfigError::NotAnObject),
    };
    if let Some(unknown) = object
        .keys()
        .find(|k| !KNOWN.contains(&k.as_str()) && !ACCEPTED_UNUSED.contains(&k.as_str()))
    {
        return Err(MockConfigError::UnknownField(unknown.clone()));
    }
    let fields = Fields(object);
    fields.string("driver_ip")?;
    fields.string("driver_port_map")?;
    fields.boolean("driver_advertise")?;
    if fields.get("exec_command").is_some_and(|v| !v.is_object()) {
        return Err(MockConfigError::WrongType {
            field: "exec_command",
            expected: "a block",
        });
    }
    Ok(MockTaskConfig {
        run_for: fields.duration("run_for")?,
        exit_code: fields.i32("exit_code")?,
        exit_signal: fields.i32("exit_signal")?,
        exit_err_msg: fields.string("exit_err_msg")?,
        start_error: fields.string("start_error")?,
        start_error_recoverable: fields.boolean("start_error_recoverable")?,
        start_block_for: fields.duration("start_block_for")?,
        kill_after: fields.duration("kill_after")?,
        plugin_exit_after: fields.duration("plugin_exit_after")?,
        signal_error: fields.string("signal_error")?,
        stdout: fields.output("stdout_string", "stdout_repeat", "stdout_repeat_duration")?,
        stderr: fields.output("stderr_string", "stderr_repeat", "stderr_repeat_duration")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn all_fields_are_read() {
        let cfg = parse_mock_config(&json!({
            "run_for": "30s",
            "exit_code": 3,
            "exit_signal": 9,
            "exit_err_msg": "boom",
            "start_error": "nope",
            "start_error_recoverable": true,
            "start_block_for": "10ms",
            "kill_after": "1m",
            "plugin_exit_after": "2h",
            "signal_error": "no signals",
            "stdout_string": "hi",
            "stdout_repeat": 2,
            "stdout_repeat_duration": "1s",
            "stderr_string": "err",
            "driver_ip": "10.0.0.1",
        }))
        .unwrap();
        assert_eq!(cfg.run_for, Duration::from_secs(30));
        assert_eq!((cfg.exit_code, cfg.exit_signal), (3, 9));
        assert_eq!(cfg.exit_err_msg, "boom");
        assert_eq!(cfg.start_error, "nope");
        assert!(cfg.start_error_recoverable);
        assert_eq!(cfg.start_block_for, Duration::from_millis(10));
        assert_eq!(cfg.kill_after, Duration::from_secs(60));
        assert_eq!(cfg.plugin_exit_after, Duration::from_secs(7200));
        assert_eq!(cfg.signal_error, "no signals");
        assert_eq!(
            cfg.stdout,
            OutputSpec {
                text: "hi".into(),
                repeat: 2,
                every: Duration::from_secs(1)
            }
        );
        assert_eq!(cfg.stderr.text, "err");
    }

    #[test]
    fn empty_config_is_an_instant_successful_task() {
        assert_eq!(
            parse_mock_config(&json!({})).unwrap(),
            MockTaskConfig::default()
        );
    }

    #[test]
    fn numbers_may_come_as_strings() {
        let cfg = parse_mock_config(&json!({"exit_code": "4", "stdout_repeat": 2.0})).unwrap();
        assert_eq!(cfg.exit_code, 4);
        assert_eq!(cfg.stdout.repeat, 2);
    }

    #[test]
    fn errors_name_the_field() {
        let msg = |v: Value| parse_mock_config(&v).unwrap_err().to_string();
        assert_eq!(
            msg(json!({"run_for": "soon"})),
            "field \"run_for\": invalid duration \"soon\""
        );
        assert_eq!(
            msg(json!({"run_for": 30})),
            "field \"run_for\" must be a duration string like \"30s\""
        );
        assert_eq!(
            msg(json!({"exit_code": "x"})),
            "field \"exit_code\" must be an integer"
        );
        assert_eq!(
            msg(json!({"stdout_repeat": -1})),
            "field \"stdout_repeat\" must be a non-negative integer"
        );
        assert_eq!(
            msg(json!({"start_error_recoverable": 1})),
            "field \"start_error_recoverable\" must be a bool"
        );
        assert_eq!(msg(json!({"run_fo": "1s"})), "unknown field \"run_fo\"");
        assert_eq!(msg(json!("x")), "task config must be an object");
    }
}
