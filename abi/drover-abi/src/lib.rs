//! The plugin contract: the traits every task driver implements (built-in, in-process cdylib or
//! out-of-process gRPC sidecar) and the plain data that crosses the boundary.
//!
//! Must not depend on: tokio, tonic, abi_stable or any crate of Drover's core. Only serde,
//! serde_json and thiserror. The contract is synchronous and blocking on purpose: a host wraps calls
//! in its own threads, and a plugin never has to agree with the host on an async runtime.
//!
//! # Lifecycle
//!
//! What the agent calls on one [`Driver`] instance, in order:
//!
//! 1. [`Driver::plugin_info`], then [`Driver::set_config`] once with the agent's
//!    `plugin "NAME" { config { ... } }` block (an empty object without one);
//! 2. [`Driver::capabilities`], and [`Driver::fingerprint`] periodically from then on;
//! 3. per task: [`Driver::validate_task_config`], [`Driver::start_task`] (events about it may
//!    be reported from here on, see [`DriverTaskEvent`]), [`Driver::notify_exit`] once (a driver
//!    that accepts it calls back when the task ended), then [`Driver::wait_task`] in a loop with
//!    a timeout until it returns the [`ExitResult`], [`Driver::stop_task`] when the task must stop,
//!    [`Driver::destroy_task`] when the agent forgets it; [`Driver::inspect_task`],
//!    [`Driver::signal_task`], [`Driver::task_stats`], [`Driver::exec_task`] and
//!    [`Driver::exec_task_streaming`] at any time while it runs;
//! 4. after an agent restart, a new instance gets steps 1 and 2 again and then
//!    [`Driver::recover_task`] with each [`TaskHandle`] `start_task` returned before.
//!
//! Errors are [`DriverError`]s; an unknown task id is always [`DriverError::TaskNotFound`].
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod error;
mod exec_stream;
pub use error::DriverError;
pub use exec_stream::{
    CallerGone, ChannelExecCaller, ChannelExecStream, ExecInput, ExecOptions, ExecRecv, ExecStream,
    ExecStreamOutput, TerminalSize,
};

/// Version of this contract. A host refuses a plugin whose major version differs.
pub const DRIVER_API_VERSION: &str = "0.1.0";

/// What a plugin says about itself (Nomad's `PluginInfoResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginInfo {
    /// Name jobs use in `driver = "..."`.
    pub name: String,
    /// The plugin's own version (its package version, say).
    pub plugin_version: String,
    /// The contract version it implements: [`DRIVER_API_VERSION`].
    pub api_version: String,
}

/// Health of a driver on this node, as Nomad's `HealthState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HealthState {
    /// The driver cannot run here (its runtime is missing, or it is disabled by config).
    Undetected,
    /// The driver is present but cannot run tasks now.
    Unhealthy,
    /// The driver runs tasks.
    Healthy,
}

/// One fingerprint of a driver: its health and the node attributes it contributes
/// (for example `driver.raw_exec = "1"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Whether the driver can run tasks on this node.
    pub health: HealthState,
    /// Why, in words the user reads in `node status` ("Healthy", "docker daemon unreachable").
    pub health_description: String,
    /// Node attributes, for example `driver.NAME = "1"`; constraints can match them.
    pub attributes: BTreeMap<String, String>,
}

/// How much of the host filesystem a task sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FsIsolation {
    /// The task sees the host's filesystem (raw_exec).
    None,
    /// The task runs in its own root built from host directories (exec's `chroot_env`).
    Chroot,
    /// The task runs in its own image (docker).
    Image,
}

/// What a driver can do beyond start/wait/stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// `signal_task` works.
    pub send_signals: bool,
    /// `exec_task` (and `exec_task_streaming`) work.
    pub exec: bool,
    /// How much of the host filesystem a task sees; anything but `None` obliges `start_task`
    /// to make `TaskConfig::mounts` visible.
    pub fs_isolation: FsIsolation,
    /// Tasks get their own network namespace, made by the driver (Nomad's task mode).
    pub network_isolation: bool,
    /// Tasks run in the allocation's network namespace when `TaskConfig::network_isolation`
    /// names one (Nomad's group mode: bridge networking, made by the client). A driver without
    /// it cannot run tasks of a bridge-mode group. Absent in JSON from drivers that predate it.
    #[serde(default)]
    pub group_network: bool,
    /// The driver honours `TaskConfig::mounts` itself.
    pub mount_configs: bool,
}

/// Resources the scheduler granted a task.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResources {
    /// CPU in MHz (Nomad's `cpu`), turned into cpu shares by isolating drivers.
    pub cpu_mhz: u64,
    /// Whole cores reserved for the task (Nomad's `cores`); 0 when it asked for MHz.
    pub cores: u64,
    /// Memory in MiB the task may use (Nomad's `memory`).
    pub memory_mb: u64,
    /// Hard memory limit when oversubscription is used; 0 means same as `memory_mb`.
    pub memory_max_mb: u64,
}

/// How mounts made under one side of a bind mount reach the other side (Nomad's
/// `MountConfig.PropagationMode`, with Nomad's strings as names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MountPropagation {
    /// Neither side sees the other's later mounts (Linux `rprivate`). Nomad sends `""` for it too.
    #[default]
    #[serde(rename = "private", alias = "")]
    Private,
    /// Mounts made later on the host appear in the task, not the other way (Linux `rslave`).
    #[serde(rename = "host-to-task")]
    HostToTask,
    /// Mounts made on either side appear on the other (Linux `rshared`); what a CSI node plugin
    /// needs so the volumes it stages and publishes reach the host.
    #[serde(rename = "bidirectional")]
    Bidirectional,
}

impl MountPropagation {
    /// Nomad's name of the mode, as it travels in the plugin protocol.
    pub fn as_str(self) -> &'static str {
        match self {
            MountPropagation::Private => "private",
            MountPropagation::HostToTask => "host-to-task",
            MountPropagation::Bidirectional => "bidirectional",
        }
    }

    /// Reads Nomad's name of a mode; `None` for a name Nomad does not define. The empty string
    /// is `Private`, as Nomad treats it.
    pub fn from_name(name: &str) -> Option<MountPropagation> {
        match name {
            "" | "private" => Some(MountPropagation::Private),
            "host-to-task" => Some(MountPropagation::HostToTask),
            "bidirectional" => Some(MountPropagation::Bidirectional),
            _ => None,
        }
    }
}

/// A host path the driver makes visible inside the task (Nomad's `MountConfig`). Drivers that
/// isolate the filesystem bind it at `task_path`; drivers without isolation cannot remap paths
/// and ignore it (the host serves such tasks another way, see the client).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountConfig {
    /// Absolute path inside the task (for exec: inside its root; for docker: in the container).
    pub task_path: String,
    /// Absolute path on the host.
    pub host_path: String,
    /// Mounted read-only.
    #[serde(default)]
    pub readonly: bool,
    /// How mounts below it propagate (Nomad's `propagation_mode`).
    #[serde(default)]
    pub propagation_mode: MountPropagation,
}

/// Everything a driver needs to start one task. Paths are absolute host paths.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskConfig {
    /// Unique id of this task instance: `<alloc_id>/<task_name>/<random>`.
    pub id: String,
    /// The task's name in its group.
    pub name: String,
    /// The allocation the task belongs to.
    pub alloc_id: String,
    /// The job's name.
    pub job_name: String,
    /// The task group's name.
    pub group_name: String,
    /// The full task environment (NOMAD_* and the task's `env`), already interpolated.
    /// Shared: the task runner, the driver's record of the task and its handle hold one map
    /// between them (it carries the agent's environment, kilobytes per task).
    pub env: Arc<BTreeMap<String, String>>,
    /// The task's `config` block as JSON, with `${...}` runtime references already interpolated.
    pub driver_config: serde_json::Value,
    /// What the scheduler granted the task.
    pub resources: TaskResources,
    /// User to run as; empty means the driver's default.
    pub user: String,
    /// The allocation's directory, `<data_dir>/client/alloc/<alloc_id>` on a Drover agent
    /// (Nomad's `<alloc_dir>/<alloc_id>`): holds `alloc/` (shared by the group's tasks), and one
    /// directory per task.
    pub alloc_dir: PathBuf,
    /// `<alloc_dir>/<task>`: the working directory; holds `local/`, `secrets/`, `tmp/`.
    pub task_dir: PathBuf,
    /// Named pipes (FIFOs) the host created and reads from; the driver connects the task's
    /// stdout and stderr to them. The host rotates what arrives into `alloc/logs/`.
    pub stdout_path: PathBuf,
    /// The stderr FIFO; see `stdout_path`.
    pub stderr_path: PathBuf,
    /// Host paths to make visible inside the task (CSI volumes, a CSI plugin's socket and mount
    /// directories). Absent in JSON from hosts and plugins that predate it, hence the default.
    #[serde(default)]
    pub mounts: Vec<MountConfig>,
    /// The allocation's network namespace to run the task in (bridge networking); `None` runs
    /// it in the host's. Only given to drivers with `Capabilities::group_network`.
    #[serde(default)]
    pub network_isolation: Option<NetworkIsolation>,
}

/// Nomad's `NetworkIsolationSpec` in group mode: the network namespace the client made for an
/// allocation, which every task of it joins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkIsolation {
    /// Path of the namespace (a bind mount of it), to open and `setns(2)` into.
    pub path: PathBuf,
    /// Nomad's labels of the spec (none set by the client yet).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// Nomad's `NetworkCreateRequest`: what a driver that makes an allocation's network
/// namespace is told about it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkCreateRequest {
    /// The group network's `hostname`, empty when unset.
    #[serde(default)]
    pub hostname: String,
}

/// What the host keeps to find a running task again after the agent restarts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskHandle {
    /// Version of the driver-specific `state` layout.
    pub version: u32,
    /// The name of the driver that started the task (`PluginInfo::name`).
    pub driver: String,
    /// The config the task was started with.
    pub config: TaskConfig,
    /// Driver-specific state, for example the task's pid.
    pub state: serde_json::Value,
}

/// How a task ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitResult {
    /// The process's exit code.
    pub exit_code: i32,
    /// Signal number that ended the task, 0 when it exited on its own.
    pub signal: i32,
    /// The kernel's OOM killer ended it.
    pub oom_killed: bool,
    /// Set when the driver could not run or observe the task to its end.
    pub err: Option<String>,
}

impl ExitResult {
    /// Nomad's rule: a task succeeded when it exited 0, not by a signal, and without a driver error.
    pub fn successful(&self) -> bool {
        self.exit_code == 0 && self.signal == 0 && self.err.is_none()
    }
}

/// Lifecycle state of a task as the driver sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    /// The driver does not know (a recovered task it could not inspect).
    Unknown,
    /// The task runs.
    Running,
    /// The task ended; `TaskStatus::exit_result` says how.
    Exited,
}

/// Answer of `inspect_task`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    /// The task's id (`TaskConfig::id`).
    pub id: String,
    /// The task's name (`TaskConfig::name`).
    pub name: String,
    /// Whether it runs.
    pub state: TaskState,
    /// Unix time in nanoseconds.
    pub started_at: i64,
    /// Unix time in nanoseconds; 0 while it runs.
    pub completed_at: i64,
    /// How it ended, once it did.
    pub exit_result: Option<ExitResult>,
}

/// Resource usage sample of a task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskResourceUsage {
    /// Resident memory in bytes.
    pub memory_rss_bytes: u64,
    /// CPU time used since the start, in clock ticks.
    pub cpu_total_ticks: f64,
    /// Unix time in nanoseconds.
    pub timestamp: i64,
}

/// Output of a command run inside a task with `exec_task`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// What the command wrote to its stdout.
    pub stdout: Vec<u8>,
    /// What the command wrote to its stderr.
    pub stderr: Vec<u8>,
    /// Its exit code.
    pub exit_code: i32,
}

/// An event a driver reports about one of its tasks, beyond what the contract's calls return
/// ("pulling image", "container restarted by the daemon"): Nomad's `drivers.TaskEvent`. The
/// client records it as the task's event of type "Driver".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverTaskEvent {
    /// `TaskConfig::id` of the task.
    pub task_id: String,
    /// `TaskConfig::alloc_id` of the task.
    pub alloc_id: String,
    /// `TaskConfig::name` of the task.
    pub task_name: String,
    /// Unix time in nanoseconds; 0 when the driver gave none.
    pub timestamp: i64,
    /// What happened, as the user reads it (`DriverMessage` of the task event).
    pub message: String,
    /// Details as key and value (`Details` of the task event), for example `pid`.
    pub annotations: BTreeMap<String, String>,
}

impl DriverTaskEvent {
    /// An event about the task started with `config`, without a timestamp yet.
    pub fn for_task(config: &TaskConfig, message: impl Into<String>) -> DriverTaskEvent {
        DriverTaskEvent {
            task_id: config.id.clone(),
            alloc_id: config.alloc_id.clone(),
            task_name: config.name.clone(),
            timestamp: 0,
            message: message.into(),
            annotations: BTreeMap::new(),
        }
    }

    /// Adds the annotation `key` = `value`.
    pub fn with_annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }
}

/// A task driver. Built-in drivers implement exactly this trait, and the plugin host adapts
/// in-process and out-of-process plugins to it, so the client never knows which kind it talks to.
///
/// Every method may block; hosts call them from threads that may block. Methods take `&self` so that
/// one driver serves many tasks at once; drivers keep their task table behind their own locks.
pub trait Driver: Send + Sync {
    /// The driver's name and versions; the name is what jobs write in `driver = "..."`.
    fn plugin_info(&self) -> PluginInfo;

    /// Applies the agent's `plugin "NAME" { config { ... } }` block, as JSON. Called once before
    /// any task starts; an empty object when the agent has no block for this driver.
    fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError>;

    /// What the driver supports beyond start, wait and stop.
    fn capabilities(&self) -> Capabilities;

    /// Current health and attributes. Hosts call it periodically.
    fn fingerprint(&self) -> Fingerprint;

    /// Checks a task's `config` block without starting anything; errors name the offending field.
    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError>;

    /// Starts the task and returns once it runs (or failed to start).
    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError>;

    /// Waits up to `timeout` for the task to end. `Ok(None)` means it is still running.
    /// May be called again after it returned a result; it returns the same result.
    fn wait_task(
        &self,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Option<ExitResult>, DriverError>;

    /// Sends `signal` (for example "SIGTERM"; empty means the driver's default), waits up to
    /// `timeout`, then kills the task. Returns once the task is no longer running.
    fn stop_task(&self, task_id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError>;

    /// Releases everything the driver holds for the task. With `force` a running task is killed
    /// first; without it, destroying a running task is an error.
    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError>;

    /// The task's state, start and end times and exit result.
    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError>;

    /// Takes a task started before the agent restarted back under management.
    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError>;

    /// Sends `signal` (for example "SIGHUP") to the task. Default: `NotSupported`.
    fn signal_task(&self, task_id: &str, signal: &str) -> Result<(), DriverError> {
        let _ = (task_id, signal);
        Err(DriverError::NotSupported("signal_task".into()))
    }

    /// A resource usage sample of the task. Default: `NotSupported`.
    fn task_stats(&self, task_id: &str) -> Result<TaskResourceUsage, DriverError> {
        let _ = task_id;
        Err(DriverError::NotSupported("task_stats".into()))
    }

    /// Runs `command` in the task and returns its output once it exited or `timeout` passed.
    /// Default: `NotSupported`.
    fn exec_task(
        &self,
        task_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        let _ = (task_id, command, timeout);
        Err(DriverError::NotSupported("exec_task".into()))
    }

    /// Arranges for `notify` to be called once task `task_id` has ended (at once when it
    /// already has), from any thread, so that the host can await the exit without holding a
    /// thread blocked in [`Driver::wait_task`]; the host then calls `wait_task` for the result.
    /// Returns whether it will: `false` (the default, and for a task the driver does not know)
    /// means the host waits with `wait_task`. `notify` must not block.
    fn notify_exit(&self, task_id: &str, notify: Box<dyn FnOnce() + Send>) -> bool {
        let _ = (task_id, notify);
        false
    }

    /// Runs `options.command` inside the running task `task_id` interactively (Nomad's
    /// `ExecTaskStreaming`): in the task's environment, directory, user and isolation, with
    /// stdin and terminal sizes from `stream` and its output sent to it as it comes. Returns
    /// the command's exit once it ended and all its output was sent. When the caller is gone
    /// ([`ExecRecv::Gone`], or `send` failing) the driver kills the command and returns.
    ///
    /// The default answers `NotSupported` at once.
    fn exec_task_streaming(
        &self,
        task_id: &str,
        options: &ExecOptions,
        stream: &dyn ExecStream,
    ) -> Result<ExitResult, DriverError> {
        let _ = (task_id, options, stream);
        Err(DriverError::NotSupported("exec_task_streaming".into()))
    }

    /// Makes the network namespace of allocation `alloc_id` in bridge mode, when this driver
    /// must own it (Nomad's `DriverNetworkManager` with `MustInitiateNetwork`: docker's tasks
    /// can only join a namespace held by a container of the daemon, its "pause" container).
    /// The host then wires the namespace up (CNI) and hands the returned isolation, labels
    /// included, to every task of the allocation. `Ok(None)` (the default) leaves the
    /// namespace to the host.
    fn create_network(
        &self,
        alloc_id: &str,
        request: &NetworkCreateRequest,
    ) -> Result<Option<NetworkIsolation>, DriverError> {
        let _ = (alloc_id, request);
        Ok(None)
    }

    /// Releases what [`Driver::create_network`] made for `alloc_id`, after the host unwired
    /// it; `spec` is what it returned (possibly from before an agent restart). Releasing what
    /// is already gone is not an error. The default does nothing.
    fn destroy_network(&self, alloc_id: &str, spec: &NetworkIsolation) -> Result<(), DriverError> {
        let _ = (alloc_id, spec);
        Ok(())
    }

    /// The next events the driver reports about its tasks (Nomad's `TaskEvents` stream, in
    /// batches): blocks up to `max_wait` for at least one, then returns every event waiting,
    /// oldest first; an empty list when none came in time. Each event is returned once, to
    /// one caller: hosts call it from one loop per driver.
    ///
    /// The default answers `NotSupported` at once, which tells the host not to ask again.
    fn task_events(&self, max_wait: Duration) -> Result<Vec<DriverTaskEvent>, DriverError> {
        let _ = max_wait;
        Err(DriverError::NotSupported("task_events".into()))
    }
}

/// Parses a signal name as Nomad's jobs write it ("SIGTERM", "TERM", "SIGKILL", ...) into its
/// Linux number. Shared by every driver that sends signals.
pub fn signal_number(name: &str) -> Option<i32> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let n = match bare {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ILL" => 4,
        "TRAP" => 5,
        "ABRT" | "IOT" => 6,
        "BUS" => 7,
        "FPE" => 8,
        "KILL" => 9,
        "USR1" => 10,
        "SEGV" => 11,
        "USR2" => 12,
        "PIPE" => 13,
        "ALRM" => 14,
        "TERM" => 15,
        "STKFLT" => 16,
        "CHLD" => 17,
        "CONT" => 18,
        "STOP" => 19,
        "TSTP" => 20,
        "TTIN" => 21,
        "TTOU" => 22,
        "URG" => 23,
        "XCPU" => 24,
        "XFSZ" => 25,
        "VTALRM" => 26,
        "PROF" => 27,
        "WINCH" => 28,
        "IO" | "POLL" => 29,
        "PWR" => 30,
        "SYS" => 31,
        _ => return None,
    };
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_config_without_mounts_decodes_with_none() {
        let config: TaskConfig = serde_json::from_value(serde_json::json!({
            "id": "a1/web/x", "name": "web", "alloc_id": "a1", "job_name": "j",
            "group_name": "g", "env": {}, "driver_config": {}, "resources": {
                "cpu_mhz": 0, "cores": 0, "memory_mb": 0, "memory_max_mb": 0},
            "user": "", "alloc_dir": "/a", "task_dir": "/a/web",
            "stdout_path": "/o", "stderr_path": "/e"
        }))
        .unwrap();
        assert!(config.mounts.is_empty());
    }

    #[test]
    fn mount_propagation_uses_nomad_names_and_empty_means_private() {
        let mount: MountConfig = serde_json::from_value(serde_json::json!({
            "task_path": "/csi", "host_path": "/h", "propagation_mode": "bidirectional"
        }))
        .unwrap();
        assert_eq!(mount.propagation_mode, MountPropagation::Bidirectional);
        assert!(!mount.readonly);
        let empty: MountPropagation = serde_json::from_value(serde_json::json!("")).unwrap();
        assert_eq!(empty, MountPropagation::Private);
        for mode in [
            MountPropagation::Private,
            MountPropagation::HostToTask,
            MountPropagation::Bidirectional,
        ] {
            assert_eq!(serde_json::to_value(mode).unwrap(), mode.as_str());
            assert_eq!(MountPropagation::from_name(mode.as_str()), Some(mode));
        }
        assert_eq!(MountPropagation::from_name("rshared"), None);
    }

    #[test]
    fn signal_names_parse_with_and_without_prefix() {
        assert_eq!(signal_number("SIGTERM"), Some(15));
        assert_eq!(signal_number("term"), Some(15));
        assert_eq!(signal_number("SIGKILL"), Some(9));
        assert_eq!(signal_number("SIGNOPE"), None);
    }

    /// `task_events` must keep the trait usable as `dyn Driver`.
    #[allow(dead_code)]
    fn driver_stays_object_safe(d: &dyn Driver) -> Result<Vec<DriverTaskEvent>, DriverError> {
        d.task_events(Duration::ZERO)
    }

    #[test]
    fn task_event_for_a_task_names_it_and_round_trips_as_json() {
        let config: TaskConfig = serde_json::from_value(serde_json::json!({
            "id": "a1/web/x", "name": "web", "alloc_id": "a1", "job_name": "j",
            "group_name": "g", "env": {}, "driver_config": {}, "resources": {
                "cpu_mhz": 0, "cores": 0, "memory_mb": 0, "memory_max_mb": 0},
            "user": "", "alloc_dir": "/a", "task_dir": "/a/web",
            "stdout_path": "/o", "stderr_path": "/e"
        }))
        .unwrap();
        let event = DriverTaskEvent::for_task(&config, "pulled").with_annotation("image", "x");
        assert_eq!(
            (event.task_id.as_str(), event.alloc_id.as_str()),
            ("a1/web/x", "a1")
        );
        assert_eq!(event.task_name, "web");
        let text = serde_json::to_string(&event).unwrap();
        assert_eq!(
            serde_json::from_str::<DriverTaskEvent>(&text).unwrap(),
            event
        );
    }

    #[test]
    fn exit_result_success_requires_zero_code_no_signal_no_error() {
        assert!(ExitResult::default().successful());
        assert!(
            !ExitResult {
                exit_code: 1,
                ..Default::default()
            }
            .successful()
        );
        assert!(
            !ExitResult {
                signal: 9,
                ..Default::default()
            }
            .successful()
        );
    }
}
