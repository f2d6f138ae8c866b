//! Task logs: the agent copies each task's stdout and stderr from a FIFO into rotating files, and
//! reads them back for the logs API (`/v1/client/fs/logs/:alloc`).
//!
//! Nomad runs a `logmon` helper process per task for this; here the copying lives in the agent
//! (one Tokio task per stream), with Nomad's file naming and rotation rules so that tools which
//! read Nomad's log directory work unchanged:
//!
//! - files are `<log_dir>/<task>.<stdout|stderr>.<N>`, N counting up from 0;
//! - a file is closed once it reaches the size limit, preferably at a line end, and the next
//!   index is opened; only the newest `max_files` files are kept;
//! - after an agent restart writing continues, appending, in the highest existing index;
//! - FIFOs are `<log_dir>/.<task>.<stdout|stderr>.fifo`, mode 0600.
//!
//! Readers treat a task's rotated files as one stream: offsets count from the start or the end of
//! their concatenation, and a follower moves on to the next file when one is complete.

use std::fs;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

mod frame;
mod pump;
mod read;
mod rotate;
#[cfg(test)]
mod test_support;

pub use frame::{StreamFrame, base64_decode, base64_encode, stream_frame_json};
pub use pump::LogPump;
pub use read::{LogChunk, LogCursor, follow_logs, read_log_chunk, read_logs, seek_logs};

/// Bytes moved per read from a FIFO, and the most data one [`LogChunk`] carries (Nomad's frame
/// size).
const CHUNK_SIZE: usize = 64 * 1024;

const FIFO_MODE: u32 = 0o600;

/// Log rotation limits of one task, Nomad's `logs { max_files, max_file_size }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// How many files to keep per stream; at least 1 is kept.
    pub max_files: u32,
    /// Size of one file in MiB; at least 1.
    pub max_file_size_mb: u64,
}

impl Default for LogConfig {
    /// Nomad's defaults: 10 files of 10 MiB.
    fn default() -> Self {
        Self {
            max_files: 10,
            max_file_size_mb: 10,
        }
    }
}

/// Which output stream of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogKind {
    Stdout,
    Stderr,
}

impl LogKind {
    /// The name used in file names and in the API's `type` parameter.
    pub fn as_str(self) -> &'static str {
        match self {
            LogKind::Stdout => "stdout",
            LogKind::Stderr => "stderr",
        }
    }
}

impl FromStr for LogKind {
    type Err = LogError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stdout" => Ok(LogKind::Stdout),
            "stderr" => Ok(LogKind::Stderr),
            other => Err(LogError::InvalidKind(other.to_string())),
        }
    }
}

/// Where an offset given to [`read_logs`] or [`seek_logs`] counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOrigin {
    Start,
    End,
}

impl FromStr for LogOrigin {
    type Err = LogError;

    /// `start` or `end`; Nomad treats a missing origin as `start`, which callers do by default.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "start" => Ok(LogOrigin::Start),
            "end" => Ok(LogOrigin::End),
            other => Err(LogError::InvalidOrigin(other.to_string())),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Nomad answers this with HTTP 404 and the same message.
    #[error("log entry for task {task:?} and log type {kind:?} not found")]
    NotFound { task: String, kind: &'static str },
    #[error("invalid log type {0:?}: must be stdout or stderr")]
    InvalidKind(String),
    #[error("invalid origin {0:?}: must be start or end")]
    InvalidOrigin(String),
    #[error("{0} exists and is not a FIFO")]
    NotAFifo(PathBuf),
    #[error("a log pump must be started from within a Tokio runtime")]
    NoRuntime,
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> LogError {
    let path = path.to_path_buf();
    move |source| LogError::Io { op, path, source }
}

/// `<task>.<kind>.<index>`, the name of one log file.
pub fn log_file_name(task: &str, kind: LogKind, index: u64) -> String {
    format!("{task}.{}.{index}", kind.as_str())
}

/// `<log_dir>/.<task>.<kind>.fifo`, where a task's stream is collected.
pub fn fifo_path(log_dir: &Path, task: &str, kind: LogKind) -> PathBuf {
    log_dir.join(format!(".{task}.{}.fifo", kind.as_str()))
}

/// Creates a FIFO (mode 0600). An existing FIFO is kept, so a restarted agent can reopen the
/// FIFOs of tasks that kept running; anything else at the path is an error.
pub fn create_fifo(path: &Path) -> Result<(), LogError> {
    match nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(FIFO_MODE)) {
        Ok(()) => Ok(()),
        Err(nix::Error::EEXIST) => {
            let metadata = fs::symlink_metadata(path).map_err(io_error("stat", path))?;
            if metadata.file_type().is_fifo() {
                Ok(())
            } else {
                Err(LogError::NotAFifo(path.to_path_buf()))
            }
        }
        Err(errno) => Err(io_error("create FIFO", path)(io::Error::from(errno))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::test_support::*;

    #[test]
    fn create_fifo_is_idempotent_and_refuses_other_files() {
        let tmp = TempDir::new();
        let fifo = fifo_path(&tmp.0, "web", LogKind::Stdout);
        assert_eq!(fifo, tmp.0.join(".web.stdout.fifo"));
        create_fifo(&fifo).expect("create");
        create_fifo(&fifo).expect("again");
        let metadata = fs::metadata(&fifo).expect("stat");
        assert!(metadata.file_type().is_fifo());
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o777,
            0o600
        );
        let plain = tmp.0.join("plain");
        fs::write(&plain, "x").expect("write");
        assert!(matches!(create_fifo(&plain), Err(LogError::NotAFifo(_))));
    }

    #[test]
    fn kinds_and_origins_parse_from_api_strings() {
        assert_eq!("stdout".parse::<LogKind>().expect("kind"), LogKind::Stdout);
        assert_eq!("stderr".parse::<LogKind>().expect("kind"), LogKind::Stderr);
        assert!("both".parse::<LogKind>().is_err());
        assert_eq!("end".parse::<LogOrigin>().expect("origin"), LogOrigin::End);
        assert!("middle".parse::<LogOrigin>().is_err());
        assert_eq!(log_file_name("web", LogKind::Stderr, 3), "web.stderr.3");
    }
}
