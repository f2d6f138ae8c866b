//! `ExecDriver`: the `drover_abi::Driver` implementation and its task table.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use drover_abi::{
    Capabilities, DRIVER_API_VERSION, Driver, DriverError, ExecOptions, ExecOutput, ExecStream,
    ExitResult, Fingerprint, FsIsolation, HealthState, PluginInfo, TaskConfig, TaskHandle,
    TaskResourceUsage, TaskState, TaskStatus, signal_number,
};
use nix::errno::Errno;

use crate::caps::{CapSet, kernel_last_cap};
use crate::cgroup::{self, Layout, TaskCgroup};
use crate::enter::{EnterCommand, EnterSpec, spawn_in_task};
use crate::isolate::{CommandSpec, IsolateError, IsolatedCommand, Step, spawn_isolated};
use crate::plugin_config::{IsolationMode, PluginConfig, parse_plugin_config};
use crate::rewrite::PathRewrite;
use crate::rootfs::TaskRoot;
use crate::shared::exec_stream::{collect_exec, exec_stdio, relay};
use crate::shared::fifo::open_fifo_writer;
use crate::shared::procfs;
use crate::shared::task_state::{ProcessState, TASK_STATE_VERSION};
use crate::shared::time::unix_nanos_now;
use crate::shared::user::resolve_user;
use crate::shared::watch::{ExitHook, ProcessWatch};
use crate::task_config::{ExecTaskConfig, parse_exec_config};

/// Name jobs use in `driver = "exec"`.
pub const DRIVER_NAME: &str = "exec";

/// Sent by `stop_task` when the task has no `kill_signal`.
const DEFAULT_STOP_SIGNAL: i32 = libc::SIGTERM;

/// Nomad's fingerprint text for a driver that needs root (its DriverRequiresRootMessage).
const REQUIRES_ROOT: &str = "Driver must run as root";

/// Nomad runs exec tasks without a `user` as nobody.
const DEFAULT_USER: &str = "nobody";

/// The namespaces a task may get, as named under /proc/self/ns.
const NAMESPACES: [&str; 4] = ["pid", "mnt", "ipc", "uts"];

struct IsolatedTask {
    config: TaskConfig,
    watch: Arc<ProcessWatch>,
    started_at: i64,
    cgroup: TaskCgroup,
}

/// Runs tasks isolated in namespaces with cgroup limits. Cheap to share: methods take `&self`.
pub struct ExecDriver {
    plugin_config: Mutex<PluginConfig>,
    tasks: Mutex<HashMap<String, Arc<IsolatedTask>>>,
    /// The kernel's highest capability number, and the set up to it.
    last_cap: u32,
    supported_caps: CapSet,
}

impl Default for ExecDriver {
    fn default() -> Self {
        let last_cap = kernel_last_cap();
        let supported_caps = CapSet::supported(last_cap);
        ExecDriver {
            plugin_config: Mutex::new(PluginConfig::defaults(supported_caps)),
            tasks: Mutex::default(),
            last_cap,
            supported_caps,
        }
    }
}

fn start_failed(recoverable: bool) -> impl Fn(String) -> DriverError {
    move |message| DriverError::StartFailed {
        message,
        recoverable,
    }
}

fn parse_signal(name: &str) -> Result<i32, DriverError> {
    if name.trim().is_empty() {
        return Ok(DEFAULT_STOP_SIGNAL);
    }
    signal_number(name)
        .ok_or_else(|| DriverError::InvalidConfig(format!("unknown signal {name:?}")))
}

/// Marks the exit as an OOM kill when the kernel's OOM killer struck in the task's cgroup.
fn oom_hook(cgroup: TaskCgroup) -> ExitHook {
    Box::new(move |exit: &mut ExitResult| {
        if cgroup.oom_kills().unwrap_or(0) > 0 {
            exit.oom_killed = true;
        }
    })
}

impl ExecDriver {
    pub fn new() -> Self {
        Self::default()
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Arc<IsolatedTask>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn plugin_config(&self) -> PluginConfig {
        self.plugin_config
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn parse_task_config(&self, config: &serde_json::Value) -> Result<ExecTaskConfig, DriverError> {
        parse_exec_config(config, self.supported_caps)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))
    }

    fn task(&self, task_id: &str) -> Result<Arc<IsolatedTask>, DriverError> {
        self.tasks()
            .get(task_id)
            .cloned()
            .ok_or_else(|| DriverError::TaskNotFound(task_id.to_string()))
    }

    /// Whether this host can run exec tasks; the cgroup layout to use if so, otherwise why not.
    fn readiness(&self) -> Result<Layout, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err(REQUIRES_ROOT.to_string());
        }
        if let Some(missing) = NAMESPACES
            .iter()
            .find(|ns| !std::path::Path::new("/proc/self/ns").join(ns).exists())
        {
            return Err(format!("kernel lacks {missing} namespaces"));
        }
        let parent = self.plugin_config().cgroup_parent;
        cgroup::detect(parent.as_deref()).map_err(|e| e.to_string())
    }

    /// Starts the process inside `cgroup`; the caller removes the cgroup if this fails.
    fn launch(
        &self,
        config: &TaskConfig,
        task_config: &ExecTaskConfig,
        cgroup: &TaskCgroup,
    ) -> Result<(Arc<ProcessWatch>, u64), DriverError> {
        let plugin = self.plugin_config();
        let isolation = task_config
            .isolation(&plugin, self.supported_caps)
            .map_err(|e| start_failed(false)(e.to_string()))?;
        let user = if config.user.is_empty() {
            DEFAULT_USER
        } else {
            config.user.as_str()
        };
        let run_as = resolve_user(user).map_err(|e| start_failed(false)(e.to_string()))?;
        let root = TaskRoot::prepare(
            &config.task_dir,
            &config.alloc_dir,
            &plugin.chroot_env,
            &config.mounts,
        )
        .map_err(|e| start_failed(false)(format!("preparing the task root: {e}")))?;
        // The client passes host paths; inside the root the task has Nomad's /local, /alloc...
        let rewrite = PathRewrite::for_task(config);
        let env = rewrite.apply_env(&config.env);
        let args: Vec<String> = task_config
            .command
            .args
            .iter()
            .map(|a| rewrite.apply(a))
            .collect();
        let command = rewrite.apply(&task_config.command.command);
        let program = root
            .find_command(&command, env.get("PATH").map(String::as_str))
            .map_err(|e| start_failed(false)(e.to_string()))?;
        let mounts = root
            .mount_plan()
            .map_err(|e| start_failed(false)(format!("preparing the task root: {e}")))?;
        let stdout = open_fifo_writer(&config.stdout_path)
            .map_err(|e| start_failed(true)(format!("connecting stdout: {e}")))?;
        let stderr = open_fifo_writer(&config.stderr_path)
            .map_err(|e| start_failed(true)(format!("connecting stderr: {e}")))?;
        let stdin = File::open("/dev/null")
            .map_err(|e| start_failed(true)(format!("opening /dev/null: {e}")))?;
        let procs = cgroup.procs_files();
        let isolated = IsolatedCommand::new(CommandSpec {
            program: &program,
            args: &args,
            env: &env,
            root: root.root(),
            mounts,
            no_pivot_root: plugin.no_pivot_root,
            hostname: &config.name,
            cgroup_procs: &procs,
            stdin: OwnedFd::from(stdin),
            stdout: OwnedFd::from(stdout),
            stderr: OwnedFd::from(stderr),
            run_as,
            caps: isolation.caps,
            last_cap: self.last_cap,
            new_pid_namespace: isolation.pid_mode == IsolationMode::Private,
            new_ipc_namespace: isolation.ipc_mode == IsolationMode::Private,
            netns: crate::shared::netns::open(config)
                .map_err(|e| start_failed(true)(e.to_string()))?
                .map(OwnedFd::from),
        })
        .map_err(|e| start_failed(false)(e.to_string()))?;
        let pid = spawn_isolated(&isolated).map_err(|e| {
            let permanent = matches!(
                e,
                IsolateError::ChildSetup {
                    step: Step::Exec | Step::ChangeDir | Step::SwitchUser | Step::BuildRoot,
                    errno: Errno::ENOENT | Errno::EACCES | Errno::ENOEXEC | Errno::EPERM,
                    ..
                }
            );
            start_failed(!permanent)(format!("starting {}: {e}", program.display()))
        })?;
        // The parent's copies of the task's stdio close here; the task holds its own.
        drop(isolated);
        let watch = match ProcessWatch::child(pid, Some(oom_hook(cgroup.clone()))) {
            Ok(watch) => watch,
            Err(e) => {
                // Without a watcher nobody would reap it; kill and reap here instead.
                // SAFETY: plain syscalls on the child we just cloned and have not reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
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

    /// Starts `options.command` inside the running task and relays it to `stream`.
    fn exec_in_task(
        &self,
        task: &IsolatedTask,
        options: &ExecOptions,
        stream: &dyn ExecStream,
    ) -> Result<ExitResult, DriverError> {
        if options.command.is_empty() {
            return Err(DriverError::InvalidConfig(
                "exec command must name a program".to_string(),
            ));
        }
        let config = &task.config;
        let isolation = self
            .parse_task_config(&config.driver_config)?
            .isolation(&self.plugin_config(), self.supported_caps)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))?;
        let user = if config.user.is_empty() {
            DEFAULT_USER
        } else {
            config.user.as_str()
        };
        let run_as = resolve_user(user).map_err(DriverError::other)?;
        let env = PathRewrite::for_task(config).apply_env(&config.env);
        let (io, stdio) = exec_stdio(options.tty)
            .map_err(|e| DriverError::Other(format!("setting up the exec's stdio: {e}")))?;
        let procs = task.cgroup.procs_files();
        let command = EnterCommand::new(EnterSpec {
            pid: task.watch.pid(),
            command: &options.command,
            env: &env,
            cgroup_procs: &procs,
            stdio,
            run_as,
            caps: isolation.caps,
            last_cap: self.last_cap,
        })
        .map_err(DriverError::other)?;
        let pid = spawn_in_task(command).map_err(|e| {
            DriverError::Other(format!(
                "starting {:?} in the task: {e}",
                options.command[0]
            ))
        })?;
        let watch = ProcessWatch::child(pid, None).map_err(|e| {
            // SAFETY: plain syscalls on the child we just forked and have not reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            DriverError::other(e)
        })?;
        relay(io, &watch, stream)
    }

    /// Kills (if needed) and reaps the task, then removes its cgroup.
    fn release(task: &IsolatedTask) -> Result<(), DriverError> {
        if task.watch.exit_result().is_none() {
            task.watch
                .stop(Duration::ZERO, libc::SIGKILL)
                .map_err(DriverError::other)?;
        }
        task.watch.reap();
        task.cgroup
            .remove()
            .map_err(|e| DriverError::Other(format!("removing the task cgroup: {e}")))
    }
}

impl Driver for ExecDriver {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: DRIVER_NAME.to_string(),
            plugin_version: env!("CARGO_PKG_VERSION").to_string(),
            api_version: DRIVER_API_VERSION.to_string(),
        }
    }

    fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        let parsed = parse_plugin_config(config, self.supported_caps)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))?;
        *self
            .plugin_config
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = parsed;
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            // `exec_task_streaming` enters the task's namespaces and root (see `enter`).
            exec: true,
            // Tasks see their task directory as `/`, with chroot_env bound read-only in it.
            fs_isolation: FsIsolation::Chroot,
            network_isolation: false,
            group_network: true,
            mount_configs: true,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        match self.readiness() {
            Ok(layout) => Fingerprint {
                health: HealthState::Healthy,
                health_description: format!("Healthy (cgroup v{})", layout.version()),
                attributes: BTreeMap::from([(format!("driver.{DRIVER_NAME}"), "1".to_string())]),
            },
            // As in Nomad: not root means not detected at all; otherwise unhealthy.
            Err(why) => Fingerprint {
                health: if why == REQUIRES_ROOT {
                    HealthState::Undetected
                } else {
                    HealthState::Unhealthy
                },
                health_description: why,
                attributes: BTreeMap::new(),
            },
        }
    }

    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        self.parse_task_config(config).map(drop)
    }

    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let task_config = self.parse_task_config(&config.driver_config)?;
        let layout = self.readiness().map_err(start_failed(false))?;
        let already_started =
            || DriverError::Other(format!("task with ID {:?} already started", config.id));
        if self.tasks().contains_key(&config.id) {
            return Err(already_started());
        }
        let cgroup = TaskCgroup::create(&layout, &config.id, &config.resources)
            .map_err(|e| start_failed(false)(format!("setting up the task cgroup: {e}")))?;
        // Taken before the launch: a task that exits at once can be reaped (and its end
        // stamped) by the exit poller before `launch` returns.
        let started_at = unix_nanos_now();
        let (watch, start_ticks) = match self.launch(config, &task_config, &cgroup) {
            Ok(launched) => launched,
            Err(e) => {
                // The start error is what the caller needs; a leftover empty cgroup is harmless.
                let _ = cgroup.remove();
                return Err(e);
            }
        };
        let state = ProcessState {
            pid: watch.pid(),
            start_ticks,
            started_at,
            cgroups: cgroup.dirs().to_vec(),
        };
        let task = IsolatedTask {
            config: config.clone(),
            watch,
            started_at,
            cgroup,
        };
        let state = match serde_json::to_value(&state) {
            Ok(state) => state,
            Err(e) => {
                let _ = Self::release(&task);
                return Err(DriverError::other(e));
            }
        };
        let mut tasks = self.tasks();
        if tasks.contains_key(&config.id) {
            // Lost a race with a concurrent start of the same ID: undo ours.
            drop(tasks);
            let _ = Self::release(&task);
            return Err(already_started());
        }
        tasks.insert(config.id.clone(), Arc::new(task));
        Ok(TaskHandle {
            version: TASK_STATE_VERSION,
            driver: DRIVER_NAME.to_string(),
            config: config.clone(),
            state,
        })
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

    /// The signal goes to the task's process group. Like any PID 1, the task's main process
    /// does not receive signals it has no handler for (only SIGKILL), so a command that does not
    /// handle `signal` ends at the SIGKILL after `timeout`.
    fn stop_task(&self, task_id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        let signal = parse_signal(signal)?;
        task.watch
            .stop(timeout, signal)
            .map(drop)
            .map_err(DriverError::other)
    }

    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        if task.watch.exit_result().is_none() && !force {
            return Err(DriverError::TaskRunning(task_id.to_string()));
        }
        // On failure (a cgroup that will not go away) the task stays listed so that destroy
        // can be retried.
        Self::release(&task)?;
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
                Arc::new(IsolatedTask {
                    config: handle.config.clone(),
                    watch,
                    started_at: state.started_at,
                    cgroup: TaskCgroup::from_dirs(state.cgroups),
                })
            });
        Ok(())
    }

    fn signal_task(&self, task_id: &str, signal: &str) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        let signal = parse_signal(signal)?;
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

    /// The command runs inside the task: its namespaces, root, cgroup, user, capabilities and
    /// environment (with Nomad's in-task paths), starting in `/`.
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
        self.exec_in_task(&task, options, stream)
    }

    /// The one-shot form (script checks): the same command inside the task, without stdin,
    /// its output gathered; killed after `timeout`.
    fn exec_task(
        &self,
        task_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        let task = self.task(task_id)?;
        let options = ExecOptions {
            command: command.to_vec(),
            tty: false,
        };
        collect_exec(timeout, |stream| self.exec_in_task(&task, &options, stream))
    }
}

#[cfg(test)]
mod exec_tests;
#[cfg(test)]
mod tests;
