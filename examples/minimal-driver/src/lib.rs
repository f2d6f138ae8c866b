//! `shell`: a complete task driver in one file. A task's config is `{ script = "..." }`, which
//! runs as `/bin/sh -c script` in the task directory with the task's environment. Built as a
//! cdylib (`export_driver!` below) and, from the same code, as the sidecar
//! `minimal-driver-sidecar`.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use drover_plugin_sdk::*;
use serde_json::{Value, json};

/// One task: its process and, once it ended, how.
struct Task {
    pid: i32,
    name: String,
    started_at: i64,
    exit: Option<(ExitResult, i64)>,
}

/// The driver: a table of tasks by id.
#[derive(Default)]
pub struct ShellDriver {
    tasks: Mutex<HashMap<String, Task>>,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The task's `script`; unknown fields are refused by name.
fn script(config: &Value) -> Result<&str, DriverError> {
    if let Some(field) = config
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "script"))
    {
        return Err(DriverError::InvalidConfig(format!(
            "unknown field {field:?}"
        )));
    }
    config["script"]
        .as_str()
        .ok_or_else(|| DriverError::InvalidConfig("\"script\" is required".into()))
}

/// Whether `pid` runs: it exists and is no zombie (a zombie of another parent is a task
/// that ended, whose status that parent holds).
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next());
    state.is_some_and(|s| s != "Z")
}

impl Task {
    /// Reaps the process if it ended. A process this instance did not start (a task recovered
    /// by a new instance) ends with an unknown status.
    fn poll(&mut self) {
        if self.exit.is_some() {
            return;
        }
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG on a pid we started; status is a valid out-pointer.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        let (exit_code, signal, err) = if r == self.pid && libc::WIFSIGNALED(status) {
            (0, libc::WTERMSIG(status), None)
        } else if r == self.pid {
            (libc::WEXITSTATUS(status), 0, None)
        } else if r == -1 && !alive(self.pid) {
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

impl ShellDriver {
    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Task>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on task `id`, after reaping it if it ended.
    fn with<T>(&self, id: &str, f: impl FnOnce(&mut Task) -> T) -> Result<T, DriverError> {
        let mut tasks = self.tasks();
        let task = tasks
            .get_mut(id)
            .ok_or_else(|| DriverError::TaskNotFound(id.into()))?;
        task.poll();
        Ok(f(task))
    }
}

impl Driver for ShellDriver {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: "shell".into(),
            plugin_version: env!("CARGO_PKG_VERSION").into(),
            api_version: DRIVER_API_VERSION.into(),
        }
    }
    fn set_config(&self, config: &Value) -> Result<(), DriverError> {
        match config.as_object().and_then(|o| o.keys().next()) {
            Some(field) => Err(DriverError::InvalidConfig(format!(
                "unknown field {field:?}"
            ))),
            None => Ok(()),
        }
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: false,
            exec: false,
            fs_isolation: FsIsolation::None,
            network_isolation: false,
            mount_configs: false,
        }
    }
    fn fingerprint(&self) -> Fingerprint {
        let attributes = [("driver.shell".to_string(), "1".to_string())].into();
        Fingerprint {
            health: HealthState::Healthy,
            health_description: "Healthy".into(),
            attributes,
        }
    }
    fn validate_task_config(&self, config: &Value) -> Result<(), DriverError> {
        script(config).map(drop)
    }
    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let failed = |e: std::io::Error| DriverError::StartFailed {
            message: e.to_string(),
            recoverable: false,
        };
        let fifo = |p| OpenOptions::new().write(true).open(p).map_err(failed);
        let child = Command::new("/bin/sh")
            .arg("-c")
            .arg(script(&config.driver_config)?)
            .current_dir(&config.task_dir)
            .env_clear()
            .envs(&config.env)
            .stdin(Stdio::null())
            .stdout(fifo(&config.stdout_path)?)
            .stderr(fifo(&config.stderr_path)?)
            .spawn()
            .map_err(failed)?;
        // The child is reaped with waitpid in `poll`, not through `Child`.
        let pid = child.id() as i32;
        let task = Task {
            pid,
            name: config.name.clone(),
            started_at: now(),
            exit: None,
        };
        self.tasks().insert(config.id.clone(), task);
        events::emit(events::TaskEvent::for_task(
            config,
            format!("started as host process {pid}"),
        ));
        Ok(TaskHandle {
            version: 1,
            driver: "shell".into(),
            config: config.clone(),
            state: json!({ "pid": pid }),
        })
    }
    fn wait_task(&self, id: &str, timeout: Duration) -> Result<Option<ExitResult>, DriverError> {
        let deadline = Instant::now() + timeout;
        loop {
            let exit = self.with(id, |t| t.exit.as_ref().map(|(e, _)| e.clone()))?;
            if exit.is_some() || Instant::now() >= deadline {
                return Ok(exit);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    fn stop_task(&self, id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        let pid = self.with(id, |t| t.pid)?;
        let signal = signal_number(if signal.is_empty() { "SIGTERM" } else { signal })
            .unwrap_or(libc::SIGTERM);
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, signal) };
        if self.wait_task(id, timeout)?.is_none() {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            self.wait_task(id, Duration::from_secs(60))?;
        }
        Ok(())
    }
    fn destroy_task(&self, id: &str, force: bool) -> Result<(), DriverError> {
        if self.with(id, |t| t.exit.is_none())? {
            if !force {
                return Err(DriverError::TaskRunning(id.into()));
            }
            self.stop_task(id, Duration::ZERO, "SIGKILL")?;
        }
        self.tasks().remove(id);
        Ok(())
    }
    fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
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
    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        let pid = handle.state["pid"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok());
        let pid = pid.ok_or_else(|| DriverError::Other("the handle has no pid".into()))?;
        let task = Task {
            pid,
            name: handle.config.name.clone(),
            started_at: now(),
            exit: None,
        };
        self.tasks().entry(handle.config.id.clone()).or_insert(task);
        Ok(())
    }
}

drover_plugin_sdk::export_driver!(ShellDriver::default);
