use thiserror::Error;

/// Errors a driver returns across the plugin boundary. Plain strings inside, so every kind of
/// plugin (in-process, cdylib, gRPC) can carry them unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DriverError {
    /// The task's or plugin's configuration is wrong; the message names the field.
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    /// No task with this id (always the answer for an unknown id).
    #[error("task {0} not found")]
    TaskNotFound(String),
    /// The task still runs (`destroy_task` without `force`).
    #[error("task {0} is still running")]
    TaskRunning(String),
    /// The operation is not implemented by this driver.
    #[error("{0} is not supported by this driver")]
    NotSupported(String),
    /// Starting the task failed; `recoverable` says whether a restart may help.
    #[error("failed to start task: {message}")]
    StartFailed {
        /// Why it failed.
        message: String,
        /// Whether starting it again may succeed (a pull that timed out: yes; a bad image: no).
        recoverable: bool,
    },
    /// Anything else, in words.
    #[error("{0}")]
    Other(String),
}

impl DriverError {
    /// An `Other` error with `e`'s text.
    pub fn other(e: impl std::fmt::Display) -> Self {
        DriverError::Other(e.to_string())
    }
}
