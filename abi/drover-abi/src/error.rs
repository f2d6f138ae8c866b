use thiserror::Error;

/// Errors a driver returns across the plugin boundary. Plain strings inside, so every kind of
/// plugin (in-process, cdylib, gRPC) can carry them unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DriverError {
    /// The task's or plugin's configuration is wrong; the message names the field.
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("task {0} not found")]
    TaskNotFound(String),
    #[error("task {0} is still running")]
    TaskRunning(String),
    /// The operation is not implemented by this driver.
    #[error("{0} is not supported by this driver")]
    NotSupported(String),
    /// Starting the task failed; `recoverable` says whether a restart may help.
    #[error("failed to start task: {message}")]
    StartFailed { message: String, recoverable: bool },
    #[error("{0}")]
    Other(String),
}

impl DriverError {
    pub fn other(e: impl std::fmt::Display) -> Self {
        DriverError::Other(e.to_string())
    }
}
