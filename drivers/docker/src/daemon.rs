//! The connection to the Docker daemon: which socket, a client made on first use (and again
//! after a failure), with the API version negotiated down to what the daemon speaks.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::{API_DEFAULT_VERSION, Docker};
use thiserror::Error;

use crate::runtime::{RuntimeError, run};

const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// bollard's per-request limit for the daemon to start answering (streams then run unlimited).
const REQUEST_TIMEOUT_SECS: u64 = 120;
/// How long connecting (and negotiating the version) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DaemonError {
    #[error("Docker daemon socket {0} not found")]
    NoSocket(PathBuf),
    #[error("failed to connect to the Docker daemon at {socket}: {reason}")]
    Connect { socket: PathBuf, reason: String },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// Where the daemon listens, and the client once connected.
#[derive(Default)]
pub struct Daemon {
    endpoint: Mutex<String>,
    client: Mutex<Option<Docker>>,
}

/// HTTP status of a daemon answer, when the error is one.
pub fn status_of(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

pub fn is_not_found(e: &BollardError) -> bool {
    status_of(e) == Some(404)
}

/// The daemon's message without bollard's wrapping, for task events.
pub fn message_of(e: &BollardError) -> String {
    match e {
        BollardError::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

impl Daemon {
    /// `unix:///path`; empty means `DOCKER_HOST` (when it names a unix socket) or the default.
    pub fn set_endpoint(&self, endpoint: &str) {
        let mut current = self.endpoint.lock().unwrap_or_else(PoisonError::into_inner);
        if *current != endpoint {
            *current = endpoint.to_string();
            *self.client.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }

    pub fn socket_path(&self) -> PathBuf {
        let endpoint = self
            .endpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let from_env = std::env::var("DOCKER_HOST").unwrap_or_default();
        [endpoint.as_str(), from_env.as_str()]
            .iter()
            .find_map(|e| e.strip_prefix("unix://"))
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
    }

    /// The client, connecting first if there is none yet. Blocks; call from the host's threads.
    pub fn client(&self) -> Result<Docker, DaemonError> {
        if let Some(c) = self
            .client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            return Ok(c.clone());
        }
        let socket = self.socket_path();
        if !socket.exists() {
            return Err(DaemonError::NoSocket(socket));
        }
        let path = socket.display().to_string();
        let connected = run(async move {
            let docker =
                Docker::connect_with_unix(&path, REQUEST_TIMEOUT_SECS, API_DEFAULT_VERSION)?;
            match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
                Ok(r) => r,
                Err(_) => Err(BollardError::RequestTimeoutError),
            }
        })?
        .map_err(|e| DaemonError::Connect {
            socket: socket.clone(),
            reason: message_of(&e),
        })?;
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = Some(connected.clone());
        Ok(connected)
    }

    /// Forgets the client so that the next call connects again (after the daemon went away).
    pub fn reset(&self) {
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}
