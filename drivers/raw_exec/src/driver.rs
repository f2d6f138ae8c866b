//! `RawExecDriver`: the `drover_abi::Driver` implementation and its task table.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use drover_abi::{
    Capabilities, DRIVER_API_VERSION, Driver, DriverError, ExecOptions, ExecOutput, ExecStream,
    ExitResult, Fingerprint, FsIsolation, HealthState, PluginInfo, TaskConfig, TaskHandle,
    TaskResourceUsage, TaskState, TaskStatus, signal_number,
};

use crate::exec_in_task::exec_in_task;
use crate::exec_streaming::exec_streaming;
use crate::lookup::resolve_command;
use crate::plugin_config::{PluginConfig, parse_plugin_config};
use crate::shared::fifo::open_fifo_writer;
use crate::shared::procfs;
use crate::shared::task_config::parse_command_config;
use crate::shared::task_state::{ProcessState, TASK_STATE_VERSION};
use crate::shared::time::unix_nanos_now;
use crate::shared::user::resolve_user;
use crate::shared::watch::ProcessWatch;
use crate::spawn::{SpawnSpec, spawn};

/// Name jobs use in `driver = "raw_exec"`.
pub const DRIVER_NAME: &str = "raw_exec";

/// Sent by `stop_task` when the task has no `kill_signal`.
const DEFAULT_STOP_SIGNAL: i32 = libc::SIGTERM;

struct RunningTask {
    config: TaskConfig,
    watch: Arc<ProcessWatch>,
    started_at: i64,
}

/// Runs tasks as plain host processes. Cheap to share: all methods take `&self`.
#[derive(Default)]
pub struct RawExecDriver {
    plugin_config: Mutex<PluginConfig>,
    tasks: Mutex<HashMap<String, Arc<RunningTask>>>,
}

fn start_failed(recoverable: bool) -> impl Fn(String) -> DriverError {
    move |message| DriverError::StartFailed {
        message,
        recoverable,
    }
}

/// The signal for `stop_task`/`signal_task`; an empty name means the default.
pub(crate) fn parse_signal(name: &str, default: i32) -> Result<i32, DriverError> {
    if name.trim().is_empty() {
        return Ok(default);
    }
    signal_number(name)
        .ok_or_else(|| DriverError::InvalidConfig(format!("unknown signal {name:?}")))
}

impl RawExecDriver {
    pub fn new() -> Self {
        Self::default()
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Arc<RunningTask>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn enabled(&self) -> bool {
        self.plugin_config
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .enabled
    }

    fn task(&self, task_id: &str) -> Result<Arc<RunningTask>, DriverError> {
        self.tasks()
            .get(task_id)
            .cloned()
            .ok_or_else(|| DriverError::TaskNotFound(task_id.to_string()))
    }

    /// Spawns the task process and starts watching it; returns the watch and the pid's start
    /// time. On any failure after the spawn the process is killed and reaped again.
    fn launch(&self, config: &TaskConfig) -> Result<(Arc<ProcessWatch>, u64), DriverError> {
        let command = parse_command_config(&config.driver_config)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))?;
        let run_as = resolve_user(&config.user).map_err(|e| start_failed(false)(e.to_string()))?;
        let env_path = config.env.get("PATH").map(String::as_str);
        let program = resolve_command(&config.task_dir, &command.command, env_path)
            .map_err(|e| start_failed(false)(e.to_string()))?;
        let stdout = open_fifo_writer(&config.stdout_path)
            .map_err(|e| start_failed(true)(format!("connecting stdout: {e}")))?;
        let stderr = open_fifo_writer(&config.stderr_path)
            .map_err(|e| start_failed(true)(format!("connecting stderr: {e}")))?;
        let netns =
            crate::shared::netns::open(config).map_err(|e| start_failed(true)(e.to_string()))?;
        let child = spawn(SpawnSpec {
            program: &program,
            args: &command.args,
            env: &config.env,
            cwd: &config.task_dir,
            run_as,
            stdout: stdout.into(),
            stderr: stderr.into(),
            netns_fd: crate::spawn::netns_fd(&netns),
        })
        .map_err(|e| {
            // Missing files and permissions will not fix themselves on a retry.
            let permanent = matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            );
            start_failed(!permanent)(format!("starting {}: {e}", program.display()))
        })?;
        // std's Child owns no resources once its pipes are gone; the watch reaps the pid.
        let pid = i32::try_from(child.id())
            .map_err(|_| start_failed(false)(format!("pid {} does not fit a pid_t", child.id())))?;
        drop(child);
        let watch = match ProcessWatch::child(pid, None) {
            Ok(watch) => watch,
            Err(e) => {
                // Without a watcher nobody would reap it; kill and reap here instead.
                // SAFETY: plain syscalls on the child we just spawned and have not reaped.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
                return Err(start_failed(true)(e.to_string()));
            }
        };
        // The leader is at worst a zombie here (never reaped before destroy), so /proc has it.
        match procfs::read_stat(pid) {
            Ok(stat) => Ok((watch, stat.start_ticks)),
            Err(e) => {
                let _ = watch.stop(Duration::ZERO, libc::SIGKILL);
                watch.reap();
                Err(start_failed(true)(format!("reading /proc/{pid}/stat: {e}")))
            }
        }
    }
}

impl Driver for RawExecDriver {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: DRIVER_NAME.to_string(),
            plugin_version: env!("CARGO_PKG_VERSION").to_string(),
            api_version: DRIVER_API_VERSION.to_string(),
        }
    }

    fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        let parsed =
            parse_plugin_config(config).map_err(|e| DriverError::InvalidConfig(e.to_string()))?;
        *self
            .plugin_config
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = parsed;
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            exec: true,
            fs_isolation: FsIsolation::None,
            network_isolation: false,
            group_network: true,
            mount_configs: false,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        if self.enabled() {
            Fingerprint {
                health: HealthState::Healthy,
                health_description: "Healthy".to_string(),
                attributes: BTreeMap::from([(format!("driver.{DRIVER_NAME}"), "1".to_string())]),
            }
        } else {
            Fingerprint {
                health: HealthState::Undetected,
                health_description: "disabled".to_string(),
                attributes: BTreeMap::new(),
            }
        }
    }

    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        parse_command_config(config)
            .map(drop)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))
    }

    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        if !self.enabled() {
            return Err(start_failed(false)(
                "raw_exec is disabled; enable it with plugin \"raw_exec\" { config { enabled = true } }"
                    .to_string(),
            ));
        }
        let already_started =
            || DriverError::Other(format!("task with ID {:?} already started", config.id));
        if self.tasks().contains_key(&config.id) {
            return Err(already_started());
        }
        // Taken before the launch: a task that exits at once can be reaped (and its end
        // stamped) by the exit poller before `launch` returns, and it must not seem to end
        // before it started.
        let started_at = unix_nanos_now();
        let (watch, start_ticks) = self.launch(config)?;
        let state = ProcessState {
            pid: watch.pid(),
            start_ticks,
            started_at,
            cgroups: Vec::new(),
        };
        let handle = TaskHandle {
            version: TASK_STATE_VERSION,
            driver: DRIVER_NAME.to_string(),
            config: config.clone(),
            state: serde_json::to_value(&state).map_err(DriverError::other)?,
        };
        let mut tasks = self.tasks();
        if tasks.contains_key(&config.id) {
            // Lost a race with a concurrent start of the same ID: undo ours.
            drop(tasks);
            let _ = watch.stop(Duration::ZERO, libc::SIGKILL);
            watch.reap();
            return Err(already_started());
        }
        tasks.insert(
            config.id.clone(),
            Arc::new(RunningTask {
                config: config.clone(),
                watch,
                started_at,
            }),
        );
        Ok(handle)
    }

    fn wait_task(
        &self,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Option<ExitResult>, DriverError> {
        Ok(self.task(task_id)?.watch.wait(timeout))
    }

    fn notify_exit(&self, task_id: &str, notify: Box<dyn FnOnce() + Send>) -> bool {
        match self.task(task_id) {
            Ok(task) => {
                task.watch.on_exit(notify);
                true
            }
            Err(_) => false,
        }
    }

    fn stop_task(&self, task_id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        let signal = parse_signal(signal, DEFAULT_STOP_SIGNAL)?;
        task.watch
            .stop(timeout, signal)
            .map(drop)
            .map_err(DriverError::other)
    }

    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        if task.watch.exit_result().is_none() {
            if !force {
                return Err(DriverError::TaskRunning(task_id.to_string()));
            }
            task.watch
                .stop(Duration::ZERO, libc::SIGKILL)
                .map_err(DriverError::other)?;
        } else {
            // Whatever the task left running in its group goes with it.
            task.watch
                .signal_group(libc::SIGKILL)
                .map_err(DriverError::other)?;
        }
        task.watch.reap();
        self.tasks().remove(task_id);
        Ok(())
    }

    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError> {
        let task = self.task(task_id)?;
        let exit_result = task.watch.exit_result();
        Ok(TaskStatus {
            id: task.config.id.clone(),
            name: task.config.name.clone(),
            state: if exit_result.is_some() {
                TaskState::Exited
            } else {
                TaskState::Running
            },
            started_at: task.started_at,
            completed_at: task.watch.completed_at(),
            exit_result,
        })
    }

    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        if self.tasks().contains_key(&handle.config.id) {
            return Ok(());
        }
        if handle.version != TASK_STATE_VERSION {
            return Err(DriverError::Other(format!(
                "task state version {} is not supported (expected {TASK_STATE_VERSION})",
                handle.version
            )));
        }
        let state: ProcessState = serde_json::from_value(handle.state.clone())
            .map_err(|e| DriverError::Other(format!("decoding task state: {e}")))?;
        let watch = ProcessWatch::recovered(state.pid, state.start_ticks)
            .map_err(|e| DriverError::Other(format!("recovering task: {e}")))?;
        self.tasks()
            .entry(handle.config.id.clone())
            .or_insert_with(|| {
                Arc::new(RunningTask {
                    config: handle.config.clone(),
                    watch,
                    started_at: state.started_at,
                })
            });
        Ok(())
    }

    fn signal_task(&self, task_id: &str, signal: &str) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        let signal = parse_signal(signal, DEFAULT_STOP_SIGNAL)?;
        match task.watch.signal_leader(signal) {
            Ok(true) => Ok(()),
            Ok(false) => Err(DriverError::Other(format!("task {task_id} has exited"))),
            Err(e) => Err(DriverError::other(e)),
        }
    }

    fn task_stats(&self, task_id: &str) -> Result<TaskResourceUsage, DriverError> {
        let task = self.task(task_id)?;
        procfs::group_usage(task.watch.pid()).map_err(DriverError::other)
    }

    fn exec_task(
        &self,
        task_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        let task = self.task(task_id)?;
        exec_in_task(&task.config, command, timeout)
    }

    /// The command runs on the host as the task does (its environment, directory and user),
    /// on a new terminal with `tty`.
    fn exec_task_streaming(
        &self,
        task_id: &str,
        options: &ExecOptions,
        stream: &dyn ExecStream,
    ) -> Result<ExitResult, DriverError> {
        let task = self.task(task_id)?;
        if task.watch.exit_result().is_some() {
            return Err(DriverError::Other(format!("task {task_id} is not running")));
        }
        exec_streaming(&task.config, options, stream)
    }
}

#[cfg(test)]
mod tests;
