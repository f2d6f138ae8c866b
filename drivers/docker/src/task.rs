//! One running task: its container, the background monitor that copies the container's output
//! into the host's log FIFOs and waits for it to exit, and the exit result callers wait on.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::models::ContainerState;
use bollard::query_parameters::{LogsOptions, WaitContainerOptions};
use drover_abi::{ExitResult, TaskConfig};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

use crate::daemon::{is_not_found, message_of};
use crate::runtime::AbortOnDrop;
use crate::time::unix_nanos_now;

/// Version of [`HandleState`]'s layout in task handles.
pub const TASK_STATE_VERSION: u32 = 1;

/// After the container exits, how long its log stream may take to deliver the rest. The daemon
/// ends the stream right after the exit, but a busy daemon may only start serving the request
/// seconds after a short-lived container is gone; the exit is reported once the output is in.
const LOG_DRAIN: Duration = Duration::from_secs(15);
/// Pause before asking the daemon again after a failed wait.
const WAIT_RETRY: Duration = Duration::from_secs(1);

/// What a task handle keeps, to find the container after an agent restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleState {
    pub container_id: String,
    /// The image as the task config names it, for image garbage collection.
    pub image: String,
    /// Unix nanoseconds.
    pub started_at: i64,
}

/// How the container ended and when (unix nanoseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exited {
    pub result: ExitResult,
    pub at: i64,
}

/// Called once the container exited (`Driver::notify_exit`).
type ExitNotifier = Box<dyn FnOnce() + Send>;

/// Set once by the monitor; read and waited on by the driver's callers.
#[derive(Default)]
pub struct ExitCell {
    state: Mutex<Option<Exited>>,
    changed: Condvar,
    notifiers: Mutex<Vec<ExitNotifier>>,
    /// The driver sent SIGKILL itself, so an exit code of 137 needs no OOM explanation.
    killed_by_driver: AtomicBool,
}

impl ExitCell {
    fn lock(&self) -> MutexGuard<'_, Option<Exited>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set(&self, exited: Exited) {
        let mut state = self.lock();
        if state.is_none() {
            *state = Some(exited);
        }
        self.changed.notify_all();
        drop(state);
        let notifiers = std::mem::take(
            &mut *self
                .notifiers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for notify in notifiers {
            notify();
        }
    }

    /// Calls `notify` once the exit is known: now if it is.
    pub fn on_exit(&self, notify: ExitNotifier) {
        let mut notifiers = self
            .notifiers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Checked under the notifiers' lock: `set` stores the exit before taking them, so a
        // notifier is either taken by `set` or sees the exit here.
        if self.lock().is_some() {
            drop(notifiers);
            notify();
        } else {
            notifiers.push(notify);
        }
    }

    pub fn get(&self) -> Option<Exited> {
        self.lock().clone()
    }

    pub fn note_kill(&self) {
        self.killed_by_driver.store(true, Ordering::Relaxed);
    }

    fn killed_by_driver(&self) -> bool {
        self.killed_by_driver.load(Ordering::Relaxed)
    }

    /// Waits up to `timeout` for the exit.
    pub fn wait(&self, timeout: Duration) -> Option<Exited> {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if let Some(e) = state.as_ref() {
                return Some(e.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A task the driver manages.
pub struct ContainerTask {
    pub config: TaskConfig,
    pub container_id: String,
    pub image: String,
    pub started_at: i64,
    pub exit: Arc<ExitCell>,
    monitor: Mutex<Option<AbortOnDrop<()>>>,
}

impl ContainerTask {
    pub fn new(
        config: TaskConfig,
        state: HandleState,
        exit: Arc<ExitCell>,
        monitor: Option<AbortOnDrop<()>>,
    ) -> Self {
        ContainerTask {
            config,
            container_id: state.container_id,
            image: state.image,
            started_at: state.started_at,
            exit,
            monitor: Mutex::new(monitor),
        }
    }

    /// Ends the monitor (and its log copying).
    pub fn stop_monitor(&self) {
        self.monitor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// The write ends of the host's log FIFOs. A path that is not a FIFO (`/dev/null` when the
/// host collects no logs) gets no writer.
pub struct LogSinks {
    stdout: Option<pipe::Sender>,
    stderr: Option<pipe::Sender>,
}

fn open_sink(path: &Path) -> std::io::Result<Option<pipe::Sender>> {
    let is_fifo = std::fs::metadata(path)
        .map(|m| m.file_type().is_fifo())
        .unwrap_or(false);
    if !is_fifo {
        return Ok(None);
    }
    // Non-blocking open: fails at once (ENXIO) when the host is not reading.
    pipe::OpenOptions::new()
        .open_sender(path)
        .map(Some)
        .map_err(|e| std::io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))
}

impl LogSinks {
    /// Opens both FIFOs. Must run on the driver runtime (the writers register with it).
    pub fn open(config: &TaskConfig) -> std::io::Result<LogSinks> {
        Ok(LogSinks {
            stdout: open_sink(&config.stdout_path)?,
            stderr: open_sink(&config.stderr_path)?,
        })
    }
}

async fn write_to(sink: &mut Option<pipe::Sender>, bytes: &[u8]) {
    if let Some(s) = sink
        && let Err(e) = s.write_all(bytes).await
    {
        // The host stopped reading (the task is going away): drop this stream's output.
        tracing::debug!(error = %e, "log FIFO write failed");
        *sink = None;
    }
}

/// Bytes delivered so far, per stream: stdout (and a TTY's output), stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Delivered {
    stdout: u64,
    stderr: u64,
}

/// Copies one log stream into the sinks, first dropping the bytes `skip` says were delivered
/// already. Returns whether the stream ended without error.
async fn copy_logs<S>(
    mut stream: S,
    sinks: &mut LogSinks,
    mut skip: Delivered,
    delivered: &mut Delivered,
) -> bool
where
    S: futures_util::Stream<Item = Result<LogOutput, BollardError>> + Unpin,
{
    while let Some(item) = stream.next().await {
        let (sink, to_skip, count, message) = match item {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => (
                &mut sinks.stdout,
                &mut skip.stdout,
                &mut delivered.stdout,
                message,
            ),
            Ok(LogOutput::StdErr { message }) => (
                &mut sinks.stderr,
                &mut skip.stderr,
                &mut delivered.stderr,
                message,
            ),
            Ok(LogOutput::StdIn { .. }) => continue,
            Err(e) => {
                tracing::warn!(error = %message_of(&e), "container log stream failed");
                return false;
            }
        };
        let skipped = usize::try_from(*to_skip)
            .unwrap_or(usize::MAX)
            .min(message.len());
        *to_skip -= skipped as u64;
        let rest = &message[skipped..];
        if !rest.is_empty() {
            write_to(sink, rest).await;
            *count += rest.len() as u64;
        }
    }
    true
}

fn logs_options(follow: bool, since: i32) -> LogsOptions {
    LogsOptions {
        follow,
        stdout: true,
        stderr: true,
        since,
        ..Default::default()
    }
}

/// Follows the container's output (from `since`, unix seconds; 0 for all of it) until the
/// daemon ends the stream, which it does once the container has stopped.
async fn follow_logs(
    docker: Docker,
    container_id: String,
    mut sinks: LogSinks,
    since: i32,
) -> (LogSinks, Delivered, bool) {
    let mut delivered = Delivered::default();
    let stream = docker.logs(&container_id, Some(logs_options(true, since)));
    let clean = copy_logs(stream, &mut sinks, Delivered::default(), &mut delivered).await;
    (sinks, delivered, clean)
}

/// Beyond this much output the daemon's json-file log may have rotated, and a second read no
/// longer starts where the followed stream did.
const CATCH_UP_LIMIT: u64 = 1024 * 1024;

/// The daemon's followed log stream can end before the container's last line is in the log
/// when that line has no newline (it is written when the output closes, racing the end of the
/// stream). Once the container has exited, the log is read once more and whatever the followed
/// stream did not deliver is copied.
async fn catch_up_logs(
    docker: &Docker,
    container_id: &str,
    sinks: &mut LogSinks,
    since: i32,
    delivered: Delivered,
) {
    if delivered.stdout + delivered.stderr >= CATCH_UP_LIMIT {
        return;
    }
    let stream = docker.logs(container_id, Some(logs_options(false, since)));
    copy_logs(stream, sinks, delivered, &mut Delivered::default()).await;
}

/// Nomad's exit result of a stopped container: its exit code, OOM kill reported both as a flag
/// and as the error.
pub fn exit_result_of(state: &ContainerState) -> ExitResult {
    let exit_code = state.exit_code.unwrap_or(-1);
    let exit_code = i32::try_from(exit_code).unwrap_or(-1);
    let oom_killed = state.oom_killed.unwrap_or(false);
    let err = if oom_killed {
        Some("OOM Killed".to_string())
    } else if exit_code != 0 {
        Some(format!(
            "Docker container exited with non-zero exit code: {exit_code}"
        ))
    } else {
        None
    };
    ExitResult {
        exit_code,
        signal: 0,
        oom_killed,
        err,
    }
}

pub fn is_running(state: Option<&ContainerState>) -> bool {
    state.is_some_and(|s| s.running.unwrap_or(false) || s.restarting.unwrap_or(false))
}

/// Waits until the container is no longer running and reads how it ended. Retries while the
/// daemon cannot be reached; a container that disappeared ends with an error.
async fn wait_for_exit(docker: &Docker, container_id: &str) -> ExitResult {
    loop {
        let options = WaitContainerOptions {
            condition: "not-running".to_string(),
        };
        let waited = docker
            .wait_container(container_id, Some(options))
            .next()
            .await;
        let finished = matches!(
            waited,
            Some(Ok(_)) | Some(Err(BollardError::DockerContainerWaitError { .. }))
        );
        match docker.inspect_container(container_id, None).await {
            Ok(c) if !is_running(c.state.as_ref()) => {
                return c
                    .state
                    .as_ref()
                    .map(exit_result_of)
                    .unwrap_or_else(|| ExitResult {
                        exit_code: -1,
                        err: Some("container has no state".to_string()),
                        ..Default::default()
                    });
            }
            Ok(_) if finished => {
                // The daemon said it stopped but it runs (restarting?): wait again.
            }
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {
                return ExitResult {
                    exit_code: -1,
                    err: Some(format!("container {container_id} was removed")),
                    ..Default::default()
                };
            }
            Err(e) => {
                tracing::debug!(container = %container_id, error = %message_of(&e), "inspect after wait failed");
            }
        }
        tokio::time::sleep(WAIT_RETRY).await;
    }
}

/// Exit code of a process ended by SIGKILL, which is how the kernel's OOM killer ends it.
const KILLED_EXIT_CODE: i32 = 128 + 9;
/// How long a late OOM report may take to reach the container's state.
const OOM_SETTLE: Duration = Duration::from_secs(1);

/// The daemon learns of an OOM kill and of the exit from separate events that a busy daemon may
/// handle in either order; a container killed by SIGKILL that the driver did not kill is looked
/// at again for a moment before its exit is taken as not OOM-related.
async fn settle_oom(
    docker: &Docker,
    container_id: &str,
    result: ExitResult,
    exit: &ExitCell,
) -> ExitResult {
    if result.exit_code != KILLED_EXIT_CODE || result.oom_killed || exit.killed_by_driver() {
        return result;
    }
    let deadline = Instant::now() + OOM_SETTLE;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Ok(c) = docker.inspect_container(container_id, None).await
            && let Some(state) = c.state.as_ref()
            && state.oom_killed == Some(true)
        {
            return exit_result_of(state);
        }
    }
    result
}

/// Runs for the life of a container: copies its logs, waits for it to exit, records the exit
/// once the output is in the FIFOs.
pub async fn monitor(
    docker: Docker,
    container_id: String,
    sinks: Option<LogSinks>,
    since: i32,
    exit: Arc<ExitCell>,
) {
    let logs = match sinks {
        Some(sinks) => match crate::runtime::spawn(follow_logs(
            docker.clone(),
            container_id.clone(),
            sinks,
            since,
        )) {
            Ok(handle) => Some(AbortOnDrop(handle)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot copy container logs");
                None
            }
        },
        None => None,
    };
    let result = wait_for_exit(&docker, &container_id).await;
    let result = settle_oom(&docker, &container_id, result, &exit).await;
    if let Some(mut logs) = logs {
        let drained = async {
            if let Ok((mut sinks, delivered, true)) = (&mut logs.0).await {
                catch_up_logs(&docker, &container_id, &mut sinks, since, delivered).await;
            }
        };
        if tokio::time::timeout(LOG_DRAIN, drained).await.is_err() {
            tracing::debug!(container = %container_id, "log stream still open after exit; dropping it");
        }
    }
    exit.set(Exited {
        result,
        at: unix_nanos_now(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(
        items: Vec<LogOutput>,
    ) -> impl futures_util::Stream<Item = Result<LogOutput, BollardError>> + Unpin {
        futures_util::stream::iter(items.into_iter().map(Ok))
    }

    #[test]
    fn a_second_read_of_the_logs_copies_only_what_the_first_missed() {
        crate::runtime::run(async {
            let dir =
                std::env::temp_dir().join(format!("drover-docker-copy-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let fifo = dir.join("out.fifo");
            let _ = std::fs::remove_file(&fifo);
            let status = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap();
            assert!(status.success());
            let mut reader = pipe::OpenOptions::new()
                .read_write(true)
                .open_receiver(&fifo)
                .unwrap();
            let mut sinks = LogSinks {
                stdout: open_sink(&fifo).unwrap(),
                stderr: None,
            };
            let out = |s: &str| LogOutput::StdOut {
                message: s.as_bytes().to_vec().into(),
            };
            let err = |s: &str| LogOutput::StdErr {
                message: s.as_bytes().to_vec().into(),
            };
            let mut delivered = Delivered::default();
            assert!(
                copy_logs(
                    stream(vec![out("one\n"), err("e\n"), out("tw")]),
                    &mut sinks,
                    Delivered::default(),
                    &mut delivered
                )
                .await
            );
            assert_eq!(
                delivered,
                Delivered {
                    stdout: 6,
                    stderr: 2
                }
            );
            let mut again = Delivered::default();
            copy_logs(
                stream(vec![out("one\n"), err("e\n"), out("two-last")]),
                &mut sinks,
                delivered,
                &mut again,
            )
            .await;
            assert_eq!(
                again,
                Delivered {
                    stdout: 6,
                    stderr: 0
                }
            );
            drop(sinks);
            let mut buf = vec![0u8; 64];
            let n = tokio::io::AsyncReadExt::read(&mut reader, &mut buf)
                .await
                .unwrap();
            assert_eq!(&buf[..n], b"one\ntwo-last");
            let _ = std::fs::remove_dir_all(&dir);
        })
        .unwrap();
    }

    #[test]
    fn exit_results_follow_nomads_rules() {
        let ok = exit_result_of(&ContainerState {
            exit_code: Some(0),
            ..Default::default()
        });
        assert!(ok.successful());
        let failed = exit_result_of(&ContainerState {
            exit_code: Some(3),
            ..Default::default()
        });
        assert_eq!(failed.exit_code, 3);
        assert_eq!(
            failed.err.as_deref(),
            Some("Docker container exited with non-zero exit code: 3")
        );
        let oom = exit_result_of(&ContainerState {
            exit_code: Some(137),
            oom_killed: Some(true),
            ..Default::default()
        });
        assert!(oom.oom_killed);
        assert_eq!(oom.err.as_deref(), Some("OOM Killed"));
    }

    #[test]
    fn exit_cell_wakes_waiters_and_keeps_the_first_result() {
        let cell = Arc::new(ExitCell::default());
        assert_eq!(cell.wait(Duration::from_millis(10)), None);
        let c = Arc::clone(&cell);
        let waiter = std::thread::spawn(move || c.wait(Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        let first = Exited {
            result: ExitResult {
                exit_code: 1,
                ..Default::default()
            },
            at: 1,
        };
        cell.set(first.clone());
        cell.set(Exited {
            result: ExitResult::default(),
            at: 2,
        });
        assert_eq!(waiter.join().unwrap(), Some(first.clone()));
        assert_eq!(cell.get(), Some(first));
    }
}
