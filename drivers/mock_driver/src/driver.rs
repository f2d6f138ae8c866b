//! `MockDriver`: the `drover_abi::Driver` implementation over mock tasks and their scheduler.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use drover_abi::{
    Capabilities, DRIVER_API_VERSION, Driver, DriverError, ExecOutput, ExitResult, Fingerprint,
    HealthState, PluginInfo, TaskConfig, TaskHandle, TaskResourceUsage, TaskState, TaskStatus,
};
use serde::{Deserialize, Serialize};

use crate::plugin_config::{PluginConfig, parse_plugin_config};
use crate::scheduler::Scheduler;
use crate::task::MockTask;
use crate::task_config::parse_mock_config;
use crate::time::unix_nanos_now;

/// Name jobs use in `driver = "mock_driver"`.
pub const DRIVER_NAME: &str = "mock_driver";

/// Version of the `state` layout below.
const TASK_STATE_VERSION: u32 = 1;

/// What a handle keeps: mock tasks have no process, so the start time (to shorten `run_for`
/// on recovery) is all; the task's config travels in the handle itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct MockTaskState {
    /// Unix nanoseconds.
    started_at: i64,
}

struct Settings {
    config: PluginConfig,
    /// When a configured fingerprint shutdown takes effect.
    undetected_from: Option<Instant>,
}

/// Fakes tasks with timers. Cheap to share: all methods take `&self`.
pub struct MockDriver {
    settings: Mutex<Settings>,
    tasks: Mutex<HashMap<String, Arc<MockTask>>>,
    scheduler: Scheduler,
}

impl Default for MockDriver {
    fn default() -> Self {
        Self::new()
    }
}

/// Go's `%q` for a string slice: `["a" "b"]`.
fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

impl MockDriver {
    pub fn new() -> Self {
        MockDriver {
            settings: Mutex::new(Settings {
                config: PluginConfig::default(),
                undetected_from: None,
            }),
            tasks: Mutex::new(HashMap::new()),
            scheduler: Scheduler::new(),
        }
    }

    fn settings(&self) -> MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Arc<MockTask>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn task(&self, task_id: &str) -> Result<Arc<MockTask>, DriverError> {
        self.tasks()
            .get(task_id)
            .cloned()
            .ok_or_else(|| DriverError::TaskNotFound(task_id.to_string()))
    }

    /// Creates the task with `run_for` left to run, registers it and arms its timers.
    fn launch(
        &self,
        config: &TaskConfig,
        started_at: i64,
        run_for: Duration,
    ) -> Result<(), DriverError> {
        let spec = parse_mock_config(&config.driver_config)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))?;
        let (task, events) = MockTask::start(config, spec, started_at, run_for, Instant::now());
        {
            let mut tasks = self.tasks();
            if tasks.contains_key(&config.id) {
                return Err(DriverError::Other(format!(
                    "task with ID {:?} already started",
                    config.id
                )));
            }
            tasks.insert(config.id.clone(), Arc::clone(&task));
        }
        for (at, event) in events {
            if let Err(e) = self.scheduler.schedule(&task, at, event) {
                self.tasks().remove(&config.id);
                return Err(DriverError::StartFailed {
                    message: format!("starting the mock timer thread: {e}"),
                    recoverable: true,
                });
            }
        }
        Ok(())
    }
}

impl Driver for MockDriver {
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
        let mut settings = self.settings();
        settings.undetected_from = parsed.shutdown_after.map(|after| Instant::now() + after);
        settings.config = parsed;
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            exec: true,
            fs_isolation: self.settings().config.fs_isolation,
            network_isolation: false,
            group_network: false,
            mount_configs: false,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        let gone = self
            .settings()
            .undetected_from
            .is_some_and(|from| Instant::now() >= from);
        if gone {
            return Fingerprint {
                health: HealthState::Undetected,
                health_description: "disabled".to_string(),
                attributes: BTreeMap::new(),
            };
        }
        Fingerprint {
            health: HealthState::Healthy,
            health_description: "Healthy".to_string(),
            attributes: BTreeMap::from([(format!("driver.{DRIVER_NAME}"), "1".to_string())]),
        }
    }

    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        parse_mock_config(config)
            .map(drop)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))
    }

    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let spec = parse_mock_config(&config.driver_config)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))?;
        if !spec.start_block_for.is_zero() {
            std::thread::sleep(spec.start_block_for);
        }
        if !spec.start_error.is_empty() {
            return Err(DriverError::StartFailed {
                message: spec.start_error,
                recoverable: spec.start_error_recoverable,
            });
        }
        let started_at = unix_nanos_now();
        let state =
            serde_json::to_value(MockTaskState { started_at }).map_err(DriverError::other)?;
        self.launch(config, started_at, spec.run_for)?;
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
        Ok(self.task(task_id)?.wait(timeout))
    }

    fn notify_exit(&self, task_id: &str, notify: Box<dyn FnOnce() + Send>) -> bool {
        match self.task(task_id) {
            Ok(task) => {
                task.on_exit(notify);
                true
            }
            Err(_) => false,
        }
    }

    /// The mock's `kill_after` is how long the fake task takes to die once asked; it gets at
    /// most `timeout` (then it is "killed"). The signal itself changes nothing: the task ends
    /// with its configured exit result either way.
    fn stop_task(
        &self,
        task_id: &str,
        timeout: Duration,
        _signal: &str,
    ) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        let grace = task.spec.kill_after.min(timeout);
        if !grace.is_zero() {
            task.wait(grace);
        }
        task.kill();
        Ok(())
    }

    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        if task.exit_result().is_none() {
            if !force {
                return Err(DriverError::TaskRunning(task_id.to_string()));
            }
            task.kill();
        }
        self.tasks().remove(task_id);
        Ok(())
    }

    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError> {
        let task = self.task(task_id)?;
        let exit_result = task.exit_result();
        Ok(TaskStatus {
            id: task.config.id.clone(),
            name: task.config.name.clone(),
            state: if exit_result.is_some() {
                TaskState::Exited
            } else {
                TaskState::Running
            },
            started_at: task.started_at,
            completed_at: task.completed_at(),
            exit_result,
        })
    }

    /// A recovered mock task runs again for what is left of its `run_for` (its output starts
    /// over), as in Nomad.
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
        let state: MockTaskState = serde_json::from_value(handle.state.clone())
            .map_err(|e| DriverError::Other(format!("decoding task state: {e}")))?;
        let spec = parse_mock_config(&handle.config.driver_config)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))?;
        let elapsed_nanos = unix_nanos_now().saturating_sub(state.started_at).max(0);
        let elapsed = Duration::from_nanos(elapsed_nanos.unsigned_abs());
        let remaining = spec.run_for.saturating_sub(elapsed);
        match self.launch(&handle.config, state.started_at, remaining) {
            // A concurrent recovery of the same task won; that is what was asked.
            Err(DriverError::Other(_)) if self.tasks().contains_key(&handle.config.id) => Ok(()),
            other => other,
        }
    }

    fn signal_task(&self, task_id: &str, _signal: &str) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        if task.spec.signal_error.is_empty() {
            Ok(())
        } else {
            Err(DriverError::Other(task.spec.signal_error.clone()))
        }
    }

    /// Mock tasks use no resources; a zero sample keeps stats collectors working.
    fn task_stats(&self, task_id: &str) -> Result<TaskResourceUsage, DriverError> {
        self.task(task_id)?;
        Ok(TaskResourceUsage {
            memory_rss_bytes: 0,
            cpu_total_ticks: 0.0,
            timestamp: unix_nanos_now(),
        })
    }

    /// Like Nomad's mock: nothing runs; the output names the task and the command.
    fn exec_task(
        &self,
        task_id: &str,
        command: &[String],
        _timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        let task = self.task(task_id)?;
        Ok(ExecOutput {
            stdout: format!("Exec({:?}, {})", task.config.name, go_quoted_list(command))
                .into_bytes(),
            stderr: Vec::new(),
            exit_code: 0,
        })
    }
}

#[cfg(test)]
mod tests;
