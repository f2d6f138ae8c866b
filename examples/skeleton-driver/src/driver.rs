//! `SkeletonDriver`: the `Driver` implementation and its task table.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use drover_plugin_sdk::events::{self, TaskEvent};
use drover_plugin_sdk::{
    Capabilities, DRIVER_API_VERSION, Driver, DriverError, ExitResult, Fingerprint, FsIsolation,
    HealthState, PluginInfo, TaskConfig, TaskHandle, TaskResourceUsage, TaskState, TaskStatus, log,
    signal_number,
};
use serde::{Deserialize, Serialize};

use crate::config::{check_plugin_config, parse_task_config};
use crate::process::{Process, unix_nanos_now};

/// Name jobs use in `driver = "skeleton"`.
pub const DRIVER_NAME: &str = "skeleton";

/// Version of [`SavedState`]; bump it when its layout changes.
const STATE_VERSION: u32 = 1;

/// What the host keeps in the task handle to find the process after a restart.
#[derive(Debug, Serialize, Deserialize)]
struct SavedState {
    pid: i32,
    start_ticks: u64,
    started_at: i64,
}

struct Task {
    config: TaskConfig,
    process: Arc<Process>,
    started_at: i64,
}

/// Runs each task as a plain host process.
pub struct SkeletonDriver {
    /// The name jobs use; [`DRIVER_NAME`] unless built with [`SkeletonDriver::named`].
    name: String,
    tasks: Mutex<HashMap<String, Arc<Task>>>,
}

impl Default for SkeletonDriver {
    fn default() -> Self {
        Self::named(DRIVER_NAME)
    }
}

fn parse_signal(name: &str) -> Result<i32, DriverError> {
    if name.trim().is_empty() {
        return Ok(libc::SIGTERM);
    }
    signal_number(name)
        .ok_or_else(|| DriverError::InvalidConfig(format!("unknown signal {name:?}")))
}

impl SkeletonDriver {
    pub fn new() -> Self {
        Self::default()
    }

    /// The same driver under another name (the sidecar build is `skeleton-sidecar`, so that
    /// both builds can be installed side by side).
    pub fn named(name: &str) -> Self {
        SkeletonDriver {
            name: name.to_string(),
            tasks: Mutex::default(),
        }
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Arc<Task>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn task(&self, id: &str) -> Result<Arc<Task>, DriverError> {
        self.tasks()
            .get(id)
            .cloned()
            .ok_or_else(|| DriverError::TaskNotFound(id.to_string()))
    }
}

impl Driver for SkeletonDriver {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: self.name.clone(),
            plugin_version: env!("CARGO_PKG_VERSION").to_string(),
            api_version: DRIVER_API_VERSION.to_string(),
        }
    }

    fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        check_plugin_config(config)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            exec: false,
            fs_isolation: FsIsolation::None,
            network_isolation: false,
            group_network: false,
            mount_configs: false,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            health: HealthState::Healthy,
            health_description: "Healthy".to_string(),
            attributes: BTreeMap::from([(format!("driver.{}", self.name), "1".to_string())]),
        }
    }

    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        parse_task_config(config).map(drop)
    }

    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let command = parse_task_config(&config.driver_config)?;
        if self.tasks().contains_key(&config.id) {
            return Err(DriverError::Other(format!(
                "task {} already started",
                config.id
            )));
        }
        let process = Process::spawn(config, &command).map_err(|e| DriverError::StartFailed {
            recoverable: !matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ),
            message: e.to_string(),
        })?;
        let started_at = unix_nanos_now();
        let state = SavedState {
            pid: process.pid(),
            start_ticks: process.start_ticks(),
            started_at,
        };
        log::debug(format!(
            "started task {} as pid {}",
            config.id,
            process.pid()
        ));
        // A task event: the agent shows it among the task's events, as type "Driver".
        let pid = process.pid().to_string();
        events::emit(
            TaskEvent::for_task(config, format!("started as host process {pid}"))
                .with_annotation("pid", pid),
        );
        self.tasks().insert(
            config.id.clone(),
            Arc::new(Task {
                config: config.clone(),
                process,
                started_at,
            }),
        );
        Ok(TaskHandle {
            version: STATE_VERSION,
            driver: self.name.clone(),
            config: config.clone(),
            state: serde_json::to_value(&state).map_err(DriverError::other)?,
        })
    }

    fn wait_task(
        &self,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Option<ExitResult>, DriverError> {
        Ok(self.task(task_id)?.process.wait(timeout))
    }

    fn stop_task(&self, task_id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        let signal = parse_signal(signal)?;
        task.process
            .stop(timeout, signal)
            .map(drop)
            .map_err(DriverError::other)
    }

    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        if task.process.exit_result().is_none() {
            if !force {
                return Err(DriverError::TaskRunning(task_id.to_string()));
            }
            task.process
                .stop(Duration::ZERO, libc::SIGKILL)
                .map_err(DriverError::other)?;
        }
        self.tasks().remove(task_id);
        Ok(())
    }

    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError> {
        let task = self.task(task_id)?;
        let exit_result = task.process.exit_result();
        Ok(TaskStatus {
            id: task.config.id.clone(),
            name: task.config.name.clone(),
            state: if exit_result.is_some() {
                TaskState::Exited
            } else {
                TaskState::Running
            },
            started_at: task.started_at,
            completed_at: task.process.completed_at(),
            exit_result,
        })
    }

    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        if self.tasks().contains_key(&handle.config.id) {
            return Ok(());
        }
        if handle.version != STATE_VERSION {
            return Err(DriverError::Other(format!(
                "task state version {} is not supported (expected {STATE_VERSION})",
                handle.version
            )));
        }
        let state: SavedState = serde_json::from_value(handle.state.clone())
            .map_err(|e| DriverError::Other(format!("decoding task state: {e}")))?;
        let process = Process::recover(state.pid, state.start_ticks)
            .map_err(|e| DriverError::Other(format!("recovering task: {e}")))?;
        log::info(format!(
            "recovered task {} (pid {})",
            handle.config.id, state.pid
        ));
        self.tasks()
            .entry(handle.config.id.clone())
            .or_insert_with(|| {
                Arc::new(Task {
                    config: handle.config.clone(),
                    process,
                    started_at: state.started_at,
                })
            });
        Ok(())
    }

    fn signal_task(&self, task_id: &str, signal: &str) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        match task.process.signal(parse_signal(signal)?, false) {
            Ok(true) => Ok(()),
            Ok(false) => Err(DriverError::Other(format!("task {task_id} has exited"))),
            Err(e) => Err(DriverError::other(e)),
        }
    }

    fn task_stats(&self, task_id: &str) -> Result<TaskResourceUsage, DriverError> {
        self.task(task_id)?
            .process
            .usage()
            .map_err(DriverError::other)
    }
}
