//! Errors and durations as they cross the boundary.

use std::time::Duration;

use drover_abi::DriverError;
use serde::{Deserialize, Serialize};

/// A `DriverError` as JSON. `kind` is the variant name; a kind this side does not know (from a
/// newer plugin) is read as `Other`, so the message is never lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub recoverable: bool,
}

impl From<&DriverError> for WireError {
    fn from(e: &DriverError) -> Self {
        let (kind, message, recoverable) = match e {
            DriverError::InvalidConfig(m) => ("InvalidConfig", m.clone(), false),
            DriverError::TaskNotFound(m) => ("TaskNotFound", m.clone(), false),
            DriverError::TaskRunning(m) => ("TaskRunning", m.clone(), false),
            DriverError::NotSupported(m) => ("NotSupported", m.clone(), false),
            DriverError::StartFailed {
                message,
                recoverable,
            } => ("StartFailed", message.clone(), *recoverable),
            DriverError::Other(m) => ("Other", m.clone(), false),
        };
        WireError {
            kind: kind.to_string(),
            message,
            recoverable,
        }
    }
}

impl From<WireError> for DriverError {
    fn from(w: WireError) -> Self {
        match w.kind.as_str() {
            "InvalidConfig" => DriverError::InvalidConfig(w.message),
            "TaskNotFound" => DriverError::TaskNotFound(w.message),
            "TaskRunning" => DriverError::TaskRunning(w.message),
            "NotSupported" => DriverError::NotSupported(w.message),
            "StartFailed" => DriverError::StartFailed {
                message: w.message,
                recoverable: w.recoverable,
            },
            _ => DriverError::Other(w.message),
        }
    }
}

/// The JSON text of `e`. Serialising a struct of strings cannot fail; the fallback keeps the
/// message anyway.
pub fn encode_error(e: &DriverError) -> String {
    serde_json::to_string(&WireError::from(e))
        .unwrap_or_else(|_| format!(r#"{{"kind":"Other","message":{:?}}}"#, e.to_string()))
}

/// Reads an error the other side encoded; text that is not a `WireError` becomes `Other` with the
/// text itself, so a broken plugin still says something.
pub fn decode_error(text: &str) -> DriverError {
    match serde_json::from_str::<WireError>(text) {
        Ok(w) => w.into(),
        Err(_) => DriverError::Other(text.to_string()),
    }
}

/// Names of the driver methods added after ABI 1.0, which cross through `DriverFfi::call`.
pub mod extension {
    /// `Driver::task_events`: arguments [`super::TaskEventsArgs`], result a JSON list of
    /// `DriverTaskEvent`.
    pub const TASK_EVENTS: &str = "task_events";
    /// `Driver::exec_task_streaming`, as four calls of a session (see `crate::exec`):
    /// start (`ExecStartArgs` -> `ExecSessionId`), input (`ExecInputArgs`), output
    /// (`ExecOutputArgs` -> `ExecOutputReply`) and close (`ExecSessionId`).
    pub const EXEC_STREAMING_START: &str = "exec_streaming_start";
    pub const EXEC_STREAMING_INPUT: &str = "exec_streaming_input";
    pub const EXEC_STREAMING_OUTPUT: &str = "exec_streaming_output";
    pub const EXEC_STREAMING_CLOSE: &str = "exec_streaming_close";
}

/// Arguments of the `task_events` extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEventsArgs {
    pub max_wait_nanos: u64,
}

/// Durations cross as nanoseconds; anything longer than u64 nanoseconds (584 years) saturates.
pub fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub fn nanos_to_duration(n: u64) -> Duration {
    Duration::from_nanos(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_driver_error_round_trips() {
        let all = [
            DriverError::InvalidConfig("field \"x\"".into()),
            DriverError::TaskNotFound("t".into()),
            DriverError::TaskRunning("t".into()),
            DriverError::NotSupported("exec_task".into()),
            DriverError::StartFailed {
                message: "no such file".into(),
                recoverable: true,
            },
            DriverError::Other("boom".into()),
        ];
        for e in all {
            assert_eq!(decode_error(&encode_error(&e)), e);
        }
    }

    #[test]
    fn unknown_kinds_and_garbage_keep_their_message() {
        assert_eq!(
            decode_error(r#"{"kind":"FromTheFuture","message":"m"}"#),
            DriverError::Other("m".into())
        );
        assert_eq!(
            decode_error("not json"),
            DriverError::Other("not json".into())
        );
    }

    #[test]
    fn huge_durations_saturate() {
        assert_eq!(duration_to_nanos(Duration::MAX), u64::MAX);
        assert_eq!(duration_to_nanos(Duration::from_millis(5)), 5_000_000);
    }
}
