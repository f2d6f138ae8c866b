//! `DockerDriver`: the `drover_abi::Driver` implementation and its task table.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{
    CreateContainerOptions, KillContainerOptions, RemoveContainerOptions, StatsOptions,
};
use drover_abi::{
    Capabilities, DRIVER_API_VERSION, Driver, DriverError, ExecOptions, ExecOutput, ExecStream,
    ExitResult, Fingerprint, FsIsolation, HealthState, NetworkCreateRequest, NetworkIsolation,
    PluginInfo, TaskConfig, TaskHandle, TaskResourceUsage, TaskState, TaskStatus, signal_number,
};
use futures_util::StreamExt;

use crate::container_spec::{ContainerSpec, build_container_spec};
use crate::daemon::{Daemon, DaemonError, is_not_found, message_of, status_of};
use crate::exec::exec_in_container;
use crate::exec_stream::exec_streaming;
use crate::images::{ImageRefs, ensure_image};
use crate::plugin_config::{PluginConfig, parse_plugin_config};
use crate::runtime::{self, AbortOnDrop, RuntimeError};
use crate::stats::usage_of;
use crate::task::{
    ContainerTask, ExitCell, Exited, HandleState, LogSinks, TASK_STATE_VERSION, exit_result_of,
    is_running, monitor,
};
use crate::task_config::parse_task_config;
use crate::time::{unix_nanos_now, unix_secs_now};

/// Name jobs use in `driver = "docker"`.
pub const DRIVER_NAME: &str = "docker";

/// Sent by `stop_task` and `signal_task` when no signal is named.
const DEFAULT_SIGNAL: i32 = 15;
const SIGKILL: i32 = 9;
/// After SIGKILL, how long the container may take to be seen stopped.
const KILL_WAIT: Duration = Duration::from_secs(30);
/// A fingerprint must answer quickly even when the daemon hangs.
const FINGERPRINT_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs tasks as Docker containers through the daemon's API. Cheap to share: all methods take
/// `&self`.
#[derive(Default)]
pub struct DockerDriver {
    plugin_config: RwLock<Arc<PluginConfig>>,
    daemon: Daemon,
    tasks: Mutex<HashMap<String, Arc<ContainerTask>>>,
    images: Arc<ImageRefs>,
    /// Once the daemon answered, losing it is "unhealthy" rather than "undetected" (Nomad).
    detected: AtomicBool,
}

fn start_failed(recoverable: bool) -> impl Fn(String) -> DriverError {
    move |message| DriverError::StartFailed {
        message,
        recoverable,
    }
}

fn runtime_error(e: RuntimeError) -> DriverError {
    DriverError::Other(e.to_string())
}

/// The signal for `stop_task`/`signal_task`; an empty name means the default.
fn parse_signal(name: &str) -> Result<i32, DriverError> {
    if name.trim().is_empty() {
        return Ok(DEFAULT_SIGNAL);
    }
    signal_number(name)
        .ok_or_else(|| DriverError::InvalidConfig(format!("unknown signal {name:?}")))
}

/// Errors of the daemon that a retry may cure: its own failures and broken connections, not
/// its refusals of the request.
fn transient(e: &bollard::errors::Error) -> bool {
    status_of(e).is_none_or(|s| s >= 500)
}

/// Creates the container. A container of the same name is a leftover of this task (the agent
/// went away before removing it): one still running is taken over, as Nomad does; a stopped
/// one is removed and creation tried again.
async fn create_container(docker: &Docker, spec: &ContainerSpec) -> Result<String, DriverError> {
    let options = CreateContainerOptions {
        name: Some(spec.name.clone()),
        ..Default::default()
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let err = match docker
            .create_container(Some(options.clone()), spec.body.clone())
            .await
        {
            Ok(created) => return Ok(created.id),
            Err(e) => e,
        };
        if status_of(&err) != Some(409) || attempts > 3 {
            return Err(start_failed(transient(&err))(format!(
                "failed to create container: {}",
                message_of(&err)
            )));
        }
        match docker.inspect_container(&spec.name, None).await {
            Ok(c) if is_running(c.state.as_ref()) => {
                if let Some(id) = c.id {
                    return Ok(id);
                }
            }
            Ok(c) => {
                let id = c.id.unwrap_or_else(|| spec.name.clone());
                let remove = RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                };
                if let Err(e) = docker.remove_container(&id, Some(remove)).await
                    && !is_not_found(&e)
                {
                    return Err(start_failed(true)(format!(
                        "failed to purge container {id}: {}",
                        message_of(&e)
                    )));
                }
            }
            Err(_) => {}
        }
    }
}

pub(crate) async fn remove_container(docker: &Docker, container_id: &str) -> Result<(), String> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    match docker.remove_container(container_id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(format!(
            "failed to remove container {container_id}: {}",
            message_of(&e)
        )),
    }
}

/// A started container and its monitor.
struct Launched {
    container_id: String,
    exit: Arc<ExitCell>,
    monitor: AbortOnDrop<()>,
}

/// Image, log FIFOs, container create and start; undoes the container on failure.
async fn launch(
    docker: Docker,
    cfg: crate::task_config::DockerTaskConfig,
    spec: ContainerSpec,
    task: TaskConfig,
    collect_logs: bool,
) -> Result<Launched, DriverError> {
    ensure_image(&docker, &cfg, &task.task_dir.join("local"))
        .await
        .map_err(|e| start_failed(e.recoverable())(e.to_string()))?;
    let sinks = if collect_logs {
        Some(
            LogSinks::open(&task)
                .map_err(|e| start_failed(true)(format!("connecting task logs: {e}")))?,
        )
    } else {
        None
    };
    let container_id = create_container(&docker, &spec).await?;
    if let Err(e) = docker.start_container(&container_id, None).await
        && status_of(&e) != Some(304)
    {
        if let Err(cleanup) = remove_container(&docker, &container_id).await {
            tracing::warn!(error = %cleanup, "cleaning up after a failed start");
        }
        return Err(start_failed(transient(&e))(format!(
            "failed to start container {container_id}: {}",
            message_of(&e)
        )));
    }
    let exit = Arc::new(ExitCell::default());
    let handle = tokio::spawn(monitor(
        docker,
        container_id.clone(),
        sinks,
        0,
        Arc::clone(&exit),
    ));
    Ok(Launched {
        container_id,
        exit,
        monitor: AbortOnDrop(handle),
    })
}

impl DockerDriver {
    pub fn new() -> Self {
        Self::default()
    }

    fn plugin(&self) -> Arc<PluginConfig> {
        Arc::clone(
            &self
                .plugin_config
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Arc<ContainerTask>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn task(&self, task_id: &str) -> Result<Arc<ContainerTask>, DriverError> {
        self.tasks()
            .get(task_id)
            .cloned()
            .ok_or_else(|| DriverError::TaskNotFound(task_id.to_string()))
    }

    fn client(&self) -> Result<Docker, DriverError> {
        self.daemon
            .client()
            .map_err(|e| DriverError::Other(e.to_string()))
    }

    /// Sends `signal` to the container; one that already stopped or is gone is not an error.
    fn kill(&self, docker: &Docker, task: &ContainerTask, signal: i32) -> Result<(), DriverError> {
        if signal == SIGKILL {
            task.exit.note_kill();
        }
        let docker = docker.clone();
        let id = task.container_id.clone();
        runtime::run(async move {
            let options = KillContainerOptions {
                signal: signal.to_string(),
            };
            match docker.kill_container(&id, Some(options)).await {
                Ok(()) => Ok(()),
                Err(e) if matches!(status_of(&e), Some(404) | Some(409)) => Ok(()),
                Err(e) => Err(DriverError::Other(format!(
                    "failed to signal container {id}: {}",
                    message_of(&e)
                ))),
            }
        })
        .map_err(runtime_error)?
    }

    fn unhealthy(&self, reason: String, no_daemon: bool) -> Fingerprint {
        let health = if no_daemon && !self.detected.load(Ordering::Relaxed) {
            HealthState::Undetected
        } else {
            HealthState::Unhealthy
        };
        Fingerprint {
            health,
            health_description: reason,
            attributes: BTreeMap::new(),
        }
    }
}

impl Driver for DockerDriver {
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
        self.daemon.set_endpoint(&parsed.endpoint);
        *self
            .plugin_config
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(parsed);
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            exec: true,
            fs_isolation: FsIsolation::Image,
            network_isolation: true,
            group_network: true,
            mount_configs: true,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        let docker = match self.daemon.client() {
            Ok(d) => d,
            // No socket, or nothing answering on it.
            Err(e @ (DaemonError::NoSocket(_) | DaemonError::Connect { .. })) => {
                return self.unhealthy(e.to_string(), true);
            }
            Err(e @ DaemonError::Runtime(_)) => return self.unhealthy(e.to_string(), false),
        };
        let version = runtime::run(async move {
            tokio::time::timeout(FINGERPRINT_TIMEOUT, docker.version()).await
        });
        let version = match version {
            Ok(Ok(Ok(v))) => v,
            Ok(Ok(Err(e))) => {
                self.daemon.reset();
                return self.unhealthy(
                    format!("failed to connect to the Docker daemon: {}", message_of(&e)),
                    false,
                );
            }
            Ok(Err(_)) => {
                self.daemon.reset();
                return self.unhealthy(
                    format!("the Docker daemon did not answer within {FINGERPRINT_TIMEOUT:?}"),
                    false,
                );
            }
            Err(e) => return self.unhealthy(e.to_string(), false),
        };
        self.detected.store(true, Ordering::Relaxed);
        let plugin = self.plugin();
        let mut attributes = BTreeMap::from([
            (format!("driver.{DRIVER_NAME}"), "1".to_string()),
            (
                format!("driver.{DRIVER_NAME}.version"),
                version.version.unwrap_or_default(),
            ),
        ]);
        if let Some(os) = version.os {
            attributes.insert(format!("driver.{DRIVER_NAME}.os_type"), os);
        }
        if plugin.allow_privileged {
            attributes.insert(
                format!("driver.{DRIVER_NAME}.privileged.enabled"),
                "true".into(),
            );
        }
        if plugin.volumes.enabled {
            attributes.insert(
                format!("driver.{DRIVER_NAME}.volumes.enabled"),
                "true".into(),
            );
        }
        Fingerprint {
            health: HealthState::Healthy,
            health_description: "Healthy".to_string(),
            attributes,
        }
    }

    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        let cfg =
            parse_task_config(config).map_err(|e| DriverError::InvalidConfig(e.to_string()))?;
        let plugin = self.plugin();
        if cfg.privileged && !plugin.allow_privileged {
            return Err(DriverError::InvalidConfig(
                crate::container_spec::SpecError::PrivilegedNotAllowed.to_string(),
            ));
        }
        crate::caps::delta(&plugin.allow_caps, &cfg.cap_add, &cfg.cap_drop)
            .map(drop)
            .map_err(|missing| {
                DriverError::InvalidConfig(
                    crate::container_spec::SpecError::CapsNotAllowed(missing).to_string(),
                )
            })
    }

    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let already_started =
            || DriverError::Other(format!("task with ID {:?} already started", config.id));
        if self.tasks().contains_key(&config.id) {
            return Err(already_started());
        }
        let cfg = parse_task_config(&config.driver_config)
            .map_err(|e| DriverError::InvalidConfig(e.to_string()))?;
        let plugin = self.plugin();
        let spec = build_container_spec(config, &cfg, &plugin)
            .map_err(|e| start_failed(false)(e.to_string()))?;
        let docker = self.daemon.client().map_err(|e| {
            start_failed(true)(format!("failed to connect to the Docker daemon: {e}"))
        })?;
        let launched = runtime::run(launch(
            docker.clone(),
            cfg.clone(),
            spec,
            config.clone(),
            !plugin.disable_log_collection,
        ))
        .map_err(|e| start_failed(true)(e.to_string()))??;
        let state = HandleState {
            container_id: launched.container_id.clone(),
            image: cfg.image.clone(),
            started_at: unix_nanos_now(),
        };
        let handle = TaskHandle {
            version: TASK_STATE_VERSION,
            driver: DRIVER_NAME.to_string(),
            config: config.clone(),
            state: serde_json::to_value(&state).map_err(DriverError::other)?,
        };
        let task = Arc::new(ContainerTask::new(
            config.clone(),
            state,
            launched.exit,
            Some(launched.monitor),
        ));
        let mut tasks = self.tasks();
        if tasks.contains_key(&config.id) {
            // Lost a race with a concurrent start of the same ID: undo ours.
            drop(tasks);
            task.stop_monitor();
            let id = launched.container_id;
            let _ = runtime::run(async move { remove_container(&docker, &id).await });
            return Err(already_started());
        }
        tasks.insert(config.id.clone(), task);
        drop(tasks);
        self.images.add(&cfg.image, &config.id);
        Ok(handle)
    }

    fn notify_exit(&self, task_id: &str, notify: Box<dyn FnOnce() + Send>) -> bool {
        match self.task(task_id) {
            Ok(task) => {
                task.exit.on_exit(notify);
                true
            }
            Err(_) => false,
        }
    }

    fn create_network(
        &self,
        alloc_id: &str,
        request: &NetworkCreateRequest,
    ) -> Result<Option<NetworkIsolation>, DriverError> {
        let docker = self.daemon.client().map_err(|e| {
            start_failed(true)(format!("failed to connect to the Docker daemon: {e}"))
        })?;
        let plugin = self.plugin();
        let alloc_id = alloc_id.to_string();
        let request = request.clone();
        runtime::run(async move {
            crate::network::create(
                &docker,
                &alloc_id,
                &request,
                &plugin.infra_image,
                plugin.infra_image_pull_timeout,
            )
            .await
        })
        .map_err(runtime_error)?
        .map(Some)
    }

    fn destroy_network(&self, alloc_id: &str, spec: &NetworkIsolation) -> Result<(), DriverError> {
        let id = spec
            .labels
            .get(crate::network::SANDBOX_LABEL)
            .cloned()
            .unwrap_or_else(|| crate::network::pause_container_name(alloc_id));
        let docker = self.client()?;
        runtime::run(async move { crate::network::remove(&docker, &id).await })
            .map_err(runtime_error)?
            .map_err(DriverError::Other)
    }

    fn wait_task(
        &self,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Option<ExitResult>, DriverError> {
        Ok(self.task(task_id)?.exit.wait(timeout).map(|e| e.result))
    }

    fn stop_task(&self, task_id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        if task.exit.get().is_some() {
            return Ok(());
        }
        let signal = parse_signal(signal)?;
        let docker = self.client()?;
        if !timeout.is_zero() {
            self.kill(&docker, &task, signal)?;
            if task.exit.wait(timeout).is_some() {
                return Ok(());
            }
        }
        self.kill(&docker, &task, SIGKILL)?;
        match task.exit.wait(KILL_WAIT) {
            Some(_) => Ok(()),
            None => Err(DriverError::Other(format!(
                "container {} still runs {KILL_WAIT:?} after SIGKILL",
                task.container_id
            ))),
        }
    }

    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        let plugin = self.plugin();
        let docker = self.client();
        let mut failure = None;
        if task.exit.get().is_none() {
            if !force {
                return Err(DriverError::TaskRunning(task_id.to_string()));
            }
            match &docker {
                Ok(d) => match self.kill(d, &task, SIGKILL) {
                    Ok(()) => {
                        task.exit.wait(KILL_WAIT);
                    }
                    Err(e) => failure = Some(e),
                },
                Err(e) => failure = Some(e.clone()),
            }
        }
        task.stop_monitor();
        if plugin.gc.container
            && let Ok(d) = &docker
        {
            let d = d.clone();
            let id = task.container_id.clone();
            match runtime::run(async move { remove_container(&d, &id).await }) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failure = Some(DriverError::Other(e)),
                Err(e) => failure = Some(runtime_error(e)),
            }
        }
        self.tasks().remove(task_id);
        if let Some(generation) = self.images.release(&task.image, task_id)
            && plugin.gc.image
            && let Ok(d) = docker
        {
            self.images
                .remove_later(d, task.image.clone(), generation, plugin.gc.image_delay);
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError> {
        let task = self.task(task_id)?;
        let exited = task.exit.get();
        Ok(TaskStatus {
            id: task.config.id.clone(),
            name: task.config.name.clone(),
            state: if exited.is_some() {
                TaskState::Exited
            } else {
                TaskState::Running
            },
            started_at: task.started_at,
            completed_at: exited.as_ref().map_or(0, |e| e.at),
            exit_result: exited.map(|e| e.result),
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
        let state: HandleState = serde_json::from_value(handle.state.clone())
            .map_err(|e| DriverError::Other(format!("decoding task state: {e}")))?;
        let docker = self.client()?;
        let collect_logs = !self.plugin().disable_log_collection;
        let config = handle.config.clone();
        let container_id = state.container_id.clone();
        let (exit, monitor_task) = runtime::run(async move {
            let inspected = docker
                .inspect_container(&container_id, None)
                .await
                .map_err(|e| {
                    DriverError::Other(format!(
                        "failed to inspect container {container_id}: {}",
                        message_of(&e)
                    ))
                })?;
            let exit = Arc::new(ExitCell::default());
            if !is_running(inspected.state.as_ref()) {
                let result = inspected
                    .state
                    .as_ref()
                    .map(exit_result_of)
                    .unwrap_or_default();
                exit.set(Exited {
                    result,
                    at: unix_nanos_now(),
                });
                return Ok((exit, None));
            }
            let sinks = if collect_logs {
                Some(
                    LogSinks::open(&config)
                        .map_err(|e| DriverError::Other(format!("reconnecting task logs: {e}")))?,
                )
            } else {
                None
            };
            // Output from before the agent restart went to the old pumps; pick up from now.
            let handle = tokio::spawn(monitor(
                docker,
                container_id,
                sinks,
                unix_secs_now(),
                Arc::clone(&exit),
            ));
            Ok::<_, DriverError>((exit, Some(AbortOnDrop(handle))))
        })
        .map_err(runtime_error)??;
        let image = state.image.clone();
        let task = Arc::new(ContainerTask::new(
            handle.config.clone(),
            state,
            exit,
            monitor_task,
        ));
        let mut tasks = self.tasks();
        if tasks.contains_key(&handle.config.id) {
            // Recovered concurrently; keep the first.
            return Ok(());
        }
        tasks.insert(handle.config.id.clone(), task);
        drop(tasks);
        self.images.add(&image, &handle.config.id);
        Ok(())
    }

    fn signal_task(&self, task_id: &str, signal: &str) -> Result<(), DriverError> {
        let task = self.task(task_id)?;
        let signal = parse_signal(signal)?;
        if task.exit.get().is_some() {
            return Err(DriverError::Other(format!("task {task_id} has exited")));
        }
        let docker = self.client()?;
        self.kill(&docker, &task, signal)
    }

    fn task_stats(&self, task_id: &str) -> Result<TaskResourceUsage, DriverError> {
        let task = self.task(task_id)?;
        let docker = self.client()?;
        let id = task.container_id.clone();
        let sample = runtime::run(async move {
            let options = StatsOptions {
                stream: false,
                one_shot: true,
            };
            docker.stats(&id, Some(options)).next().await
        })
        .map_err(runtime_error)?;
        match sample {
            Some(Ok(stats)) => Ok(usage_of(&stats)),
            Some(Err(e)) => Err(DriverError::Other(format!(
                "reading container stats: {}",
                message_of(&e)
            ))),
            None => Err(DriverError::Other("the daemon sent no stats".to_string())),
        }
    }

    fn exec_task(
        &self,
        task_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        if command.is_empty() {
            return Err(DriverError::InvalidConfig(
                "exec command must name a program".to_string(),
            ));
        }
        let task = self.task(task_id)?;
        let docker = self.client()?;
        let id = task.container_id.clone();
        let command = command.to_vec();
        let result = runtime::run(async move {
            tokio::time::timeout(timeout, exec_in_container(&docker, &id, command)).await
        })
        .map_err(runtime_error)?;
        match result {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => Err(DriverError::Other(e)),
            Err(_) => Err(DriverError::Other(format!(
                "exec timed out after {timeout:?}"
            ))),
        }
    }

    /// Docker's exec in the task's container, attached with stdin (and a terminal with
    /// `tty`, resized as asked).
    fn exec_task_streaming(
        &self,
        task_id: &str,
        options: &ExecOptions,
        stream: &dyn ExecStream,
    ) -> Result<ExitResult, DriverError> {
        if options.command.is_empty() {
            return Err(DriverError::InvalidConfig(
                "exec command must name a program".to_string(),
            ));
        }
        let task = self.task(task_id)?;
        let docker = self.client()?;
        exec_streaming(docker, task.container_id.clone(), options, stream)
    }
}

#[cfg(test)]
mod tests;
