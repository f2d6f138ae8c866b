//! Tasks as plain host processes: the contract's task methods for a driver whose tasks are
//! child processes of the driver (as `raw_exec`'s are), so such a driver writes only what is
//! its own (its config, the command it runs) and delegates the rest to a [`HostProcesses`].
//!
//! - [`HostProcesses::start`] runs a [`Command`] in the task directory with exactly the task's
//!   environment and its stdout/stderr on the task's log FIFOs, and returns a handle whose state
//!   is `{"pid": N}`.
//! - [`HostProcesses::wait`], [`stop`](HostProcesses::stop), [`destroy`](HostProcesses::destroy)
//!   and [`inspect`](HostProcesses::inspect) answer as the contract asks (an unknown id is
//!   `TaskNotFound`; a stop signals, waits, then kills; destroying a running task needs `force`).
//! - [`HostProcesses::recover`] takes a task back from its handle after an agent restart. The
//!   process is then not this instance's child: its exit is seen (it stops running) but its
//!   status is unknown, which the exit result says.
//!
//! ```no_run
//! use drover_plugin_sdk::process::HostProcesses;
//! use drover_plugin_sdk::*;
//!
//! fn start(tasks: &HostProcesses, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
//!     let mut command = std::process::Command::new("/bin/sleep");
//!     command.arg("60");
//!     tasks.start("my-driver", config, command)
//! }
//! ```

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::{DriverError, ExitResult, TaskConfig, TaskHandle, TaskState, TaskStatus};

/// How often `wait` looks at a running process.
const POLL: Duration = Duration::from_millis(10);

/// How long `stop` waits for the process to die once killed.
const KILL_WAIT: Duration = Duration::from_secs(60);

/// One task: its process and, once it ended, how and when.
struct Process {
    pid: i32,
    name: String,
    started_at: i64,
    exit: Option<(ExitResult, i64)>,
}

/// The driver's tasks, by task id. One per driver instance.
#[derive(Default)]
pub struct HostProcesses {
    tasks: Mutex<HashMap<String, Process>>,
}

/// Nanoseconds since the Unix epoch, the contract's times.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Whether `pid` runs: it exists and is no zombie (a zombie of another parent is a task that
/// ended, whose status that parent holds).
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next());
    state.is_some_and(|s| s != "Z")
}

impl Process {
    /// Reaps the process if it ended.
    fn poll(&mut self) {
        if self.exit.is_some() {
            return;
        }
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG on a pid; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        let (exit_code, signal, err) = if r == self.pid && libc::WIFSIGNALED(status) {
            (0, libc::WTERMSIG(status), None)
        } else if r == self.pid {
            (libc::WEXITSTATUS(status), 0, None)
        } else if r == -1 && !alive(self.pid) {
            // Not our child (recovered after a restart) and gone: nobody can tell how.
            (-1, 0, Some("exit status unknown".to_string()))
        } else {
            return;
        };
        let exit = ExitResult {
            exit_code,
            signal,
            err,
            oom_killed: false,
        };
        self.exit = Some((exit, now()));
    }
}

impl HostProcesses {
    /// No tasks yet.
    pub fn new() -> HostProcesses {
        HostProcesses::default()
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Process>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on task `id`, after reaping it if it ended.
    fn with<T>(&self, id: &str, f: impl FnOnce(&mut Process) -> T) -> Result<T, DriverError> {
        let mut tasks = self.tasks();
        let task = tasks
            .get_mut(id)
            .ok_or_else(|| DriverError::TaskNotFound(id.into()))?;
        task.poll();
        Ok(f(task))
    }

    /// Starts `command` as task `config` of driver `driver` (the name in the handle): in the
    /// task directory, with exactly the task's environment, stdin closed, stdout and stderr on
    /// the task's log FIFOs. A failure to start is `StartFailed`, not recoverable.
    pub fn start(
        &self,
        driver: &str,
        config: &TaskConfig,
        mut command: Command,
    ) -> Result<TaskHandle, DriverError> {
        let failed = |e: std::io::Error| DriverError::StartFailed {
            message: e.to_string(),
            recoverable: false,
        };
        let log = |p| OpenOptions::new().write(true).open(p).map_err(failed);
        let child = command
            .current_dir(&config.task_dir)
            .env_clear()
            .envs(config.env.iter())
            .stdin(Stdio::null())
            .stdout(log(&config.stdout_path)?)
            .stderr(log(&config.stderr_path)?)
            .spawn()
            .map_err(failed)?;
        // Reaped with waitpid in `poll`, not through `Child`.
        let pid = child.id() as i32;
        let task = Process {
            pid,
            name: config.name.clone(),
            started_at: now(),
            exit: None,
        };
        self.tasks().insert(config.id.clone(), task);
        Ok(TaskHandle {
            version: 1,
            driver: driver.into(),
            config: config.clone(),
            state: json!({ "pid": pid }),
        })
    }

    /// The process id of task `id`.
    pub fn pid(&self, id: &str) -> Result<i32, DriverError> {
        self.with(id, |t| t.pid)
    }

    /// The contract's `wait_task`: the exit once the process ended, `None` while it runs after
    /// up to `timeout`; the same result on every later call.
    pub fn wait(&self, id: &str, timeout: Duration) -> Result<Option<ExitResult>, DriverError> {
        let deadline = Instant::now() + timeout;
        loop {
            let exit = self.with(id, |t| t.exit.as_ref().map(|(e, _)| e.clone()))?;
            if exit.is_some() || Instant::now() >= deadline {
                return Ok(exit);
            }
            std::thread::sleep(POLL);
        }
    }

    /// The contract's `stop_task`: sends `signal` (empty: SIGTERM) to the task's process (not
    /// to its process group: a shell that should pass it on `exec`s its last command or traps
    /// it), waits up to `timeout`, then kills; returns once the process no longer runs.
    pub fn stop(&self, id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        let pid = self.pid(id)?;
        if self.with(id, |t| t.exit.is_some())? {
            return Ok(());
        }
        let signal = crate::signal_number(if signal.is_empty() { "SIGTERM" } else { signal })
            .unwrap_or(libc::SIGTERM);
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, signal) };
        if self.wait(id, timeout)?.is_none() {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            self.wait(id, KILL_WAIT)?;
        }
        Ok(())
    }

    /// The contract's `destroy_task`: forgets the task; a running one is `TaskRunning` unless
    /// `force`, which kills it first.
    pub fn destroy(&self, id: &str, force: bool) -> Result<(), DriverError> {
        if self.with(id, |t| t.exit.is_none())? {
            if !force {
                return Err(DriverError::TaskRunning(id.into()));
            }
            self.stop(id, Duration::ZERO, "SIGKILL")?;
        }
        self.tasks().remove(id);
        Ok(())
    }

    /// The contract's `inspect_task`.
    pub fn inspect(&self, id: &str) -> Result<TaskStatus, DriverError> {
        self.with(id, |t| TaskStatus {
            id: id.into(),
            name: t.name.clone(),
            state: if t.exit.is_some() {
                TaskState::Exited
            } else {
                TaskState::Running
            },
            started_at: t.started_at,
            completed_at: t.exit.as_ref().map_or(0, |(_, at)| *at),
            exit_result: t.exit.as_ref().map(|(e, _)| e.clone()),
        })
    }

    /// The contract's `recover_task` for a handle `start` returned: the task is managed again
    /// (idempotent). A handle without a pid is an error.
    pub fn recover(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        let pid = handle.state["pid"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| DriverError::Other("the handle has no pid".into()))?;
        let task = Process {
            pid,
            name: handle.config.name.clone(),
            started_at: now(),
            exit: None,
        };
        self.tasks().entry(handle.config.id.clone()).or_insert(task);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path, id: &str) -> TaskConfig {
        let out = dir.join(format!("{id}.out"));
        std::fs::write(&out, "").unwrap();
        TaskConfig {
            id: id.into(),
            name: "t".into(),
            task_dir: dir.to_path_buf(),
            stdout_path: out.clone(),
            stderr_path: out,
            env: std::sync::Arc::new([("GREETING".to_string(), "hi".to_string())].into()),
            ..Default::default()
        }
    }

    fn temp_dir(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sdk-process-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_process_runs_in_the_task_dir_with_only_the_task_env_and_its_exit_is_kept() {
        let dir = temp_dir("exit");
        let tasks = HostProcesses::new();
        let mut sh = Command::new("/bin/sh");
        // CARGO_PKG_NAME is in the test's own environment, not in the task's.
        assert!(std::env::var("CARGO_PKG_NAME").is_ok());
        sh.args(["-c", "echo \"$GREETING $CARGO_PKG_NAME\" > here; exit 3"]);
        let handle = tasks.start("d", &config(&dir, "a"), sh).unwrap();
        assert!(handle.state["pid"].as_i64().is_some());
        let exit = tasks
            .wait("a", Duration::from_secs(10))
            .unwrap()
            .expect("exited");
        assert_eq!((exit.exit_code, exit.signal), (3, 0));
        assert_eq!(tasks.wait("a", Duration::ZERO).unwrap(), Some(exit));
        assert_eq!(std::fs::read_to_string(dir.join("here")).unwrap(), "hi \n");
        assert_eq!(tasks.inspect("a").unwrap().state, TaskState::Exited);
        tasks.destroy("a", false).unwrap();
        assert!(matches!(
            tasks.inspect("a"),
            Err(DriverError::TaskNotFound(_))
        ));
    }

    #[test]
    fn a_stop_signals_then_kills_and_a_running_task_is_destroyed_only_by_force() {
        let dir = temp_dir("stop");
        let tasks = HostProcesses::new();
        let mut sh = Command::new("/bin/sh");
        // Ignores SIGTERM: the stop has to kill it.
        sh.args(["-c", "trap '' TERM; while :; do sleep 0.05; done"]);
        tasks.start("d", &config(&dir, "b"), sh).unwrap();
        assert_eq!(tasks.wait("b", Duration::from_millis(50)).unwrap(), None);
        assert!(matches!(
            tasks.destroy("b", false),
            Err(DriverError::TaskRunning(_))
        ));
        tasks.stop("b", Duration::from_millis(200), "").unwrap();
        let exit = tasks.wait("b", Duration::ZERO).unwrap().expect("killed");
        assert_eq!(exit.signal, libc::SIGKILL);
        let mut sleep = Command::new("/bin/sleep");
        sleep.arg("30");
        tasks.start("d", &config(&dir, "c"), sleep).unwrap();
        tasks.destroy("c", true).unwrap();
    }

    #[test]
    fn a_recovered_task_that_is_not_our_child_ends_with_an_unknown_status() {
        let tasks = HostProcesses::new();
        let handle = TaskHandle {
            version: 1,
            driver: "d".into(),
            config: TaskConfig {
                id: "gone".into(),
                ..Default::default()
            },
            // No such process (pids wrap far below this).
            state: json!({ "pid": 999_999_999 }),
        };
        tasks.recover(&handle).unwrap();
        tasks.recover(&handle).unwrap();
        let exit = tasks.wait("gone", Duration::ZERO).unwrap().expect("ended");
        assert_eq!(exit.err.as_deref(), Some("exit status unknown"));
        let no_pid = TaskHandle {
            state: json!({}),
            ..handle
        };
        assert!(tasks.recover(&no_pid).is_err());
    }
}
