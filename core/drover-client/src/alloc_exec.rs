//! Nomad's `alloc exec` on the client: a command run interactively inside a running task of
//! an allocation this client runs, through the task's driver (`exec_task_streaming`), with
//! Nomad's checks and error texts (`client/alloc_endpoint.go`'s `execImpl`).

use drover_abi::DriverError;
pub use drover_abi::{
    CallerGone, ExecInput, ExecOptions, ExecRecv, ExecStream, ExecStreamOutput, ExitResult,
    TerminalSize,
};

use crate::alloc_stats::NotLive;
use crate::client::Client;

/// Why an exec did not run (or failed), in Nomad's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// Nomad's `ErrUnknownAllocation`.
    #[error("Unknown allocation {0:?}")]
    UnknownAlloc(String),
    #[error("must provide task name")]
    MissingTask,
    #[error("command is not present")]
    MissingCommand,
    #[error("unknown task name {0:?}")]
    UnknownTask(String),
    #[error("task {0:?} not started yet.")]
    NotStarted(String),
    #[error("task {0:?} is not running.")]
    NotRunning(String),
    /// The task's driver cannot exec (it answered `NotSupported`).
    #[error("exec is not supported by the {driver} driver of task {task:?}")]
    NotSupported { driver: String, task: String },
    /// The driver failed to run the command.
    #[error("{0}")]
    Driver(String),
    /// The agent behind the API cannot exec at all.
    #[error("{0}")]
    Unavailable(String),
}

impl ExecError {
    /// The HTTP status Nomad gives the error (sent as the websocket's close code class).
    pub fn status(&self) -> u16 {
        match self {
            ExecError::UnknownAlloc(_) | ExecError::NotStarted(_) | ExecError::NotRunning(_) => 404,
            ExecError::MissingTask
            | ExecError::MissingCommand
            | ExecError::UnknownTask(_)
            | ExecError::NotSupported { .. } => 400,
            ExecError::Driver(_) | ExecError::Unavailable(_) => 500,
        }
    }
}

impl Client {
    /// Runs `options.command` in task `task` of allocation `alloc_id`, relaying `stream`,
    /// and returns the command's exit. Blocks on the driver: call it from a thread that may
    /// block.
    pub fn exec_task(
        &self,
        alloc_id: &str,
        task: &str,
        options: &ExecOptions,
        stream: &dyn ExecStream,
    ) -> Result<ExitResult, ExecError> {
        let live = self
            .live_tasks(alloc_id)
            .ok_or_else(|| ExecError::UnknownAlloc(alloc_id.to_string()))?;
        if task.is_empty() {
            return Err(ExecError::MissingTask);
        }
        if options.command.is_empty() {
            return Err(ExecError::MissingCommand);
        }
        let (driver, task_id) = live.exec_target(task).map_err(|why| match why {
            NotLive::UnknownTask => ExecError::UnknownTask(task.to_string()),
            NotLive::NotStarted => ExecError::NotStarted(task.to_string()),
            NotLive::NotRunning => ExecError::NotRunning(task.to_string()),
        })?;
        tracing::info!(alloc = alloc_id, task, command = ?options.command, tty = options.tty,
            "task exec session starting");
        let result = driver.exec_task_streaming(&task_id, options, stream);
        tracing::info!(
            alloc = alloc_id,
            task,
            ok = result.is_ok(),
            "task exec session ended"
        );
        result.map_err(|e| match e {
            DriverError::NotSupported(_) => ExecError::NotSupported {
                driver: driver.plugin_info().name,
                task: task.to_string(),
            },
            // The task ended between the lookup and the call.
            DriverError::TaskNotFound(_) => ExecError::NotRunning(task.to_string()),
            other => ExecError::Driver(other.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_nomads_texts_and_statuses() {
        assert_eq!(
            ExecError::UnknownAlloc("a1".into()).to_string(),
            "Unknown allocation \"a1\""
        );
        assert_eq!(ExecError::MissingTask.to_string(), "must provide task name");
        assert_eq!(ExecError::MissingCommand.status(), 400);
        assert_eq!(
            ExecError::NotStarted("web".into()).to_string(),
            "task \"web\" not started yet."
        );
        assert_eq!(
            ExecError::NotRunning("web".into()).to_string(),
            "task \"web\" is not running."
        );
        assert_eq!(ExecError::NotRunning("web".into()).status(), 404);
        assert_eq!(ExecError::Driver("boom".into()).status(), 500);
    }
}
