//! The task runner: runs one task of an allocation through its driver, from setup to its end,
//! restarting it by its restart policy and recording Nomad's task events on the way.
//!
//! Driver calls block, so they run on Tokio's blocking pool; the runner itself is a task on the
//! runtime. No helper process per task: logs are pumped by the agent (see `logs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use drover_abi::{
    Driver, DriverError, ExitResult, FsIsolation, MountConfig, MountPropagation, TaskConfig,
    TaskHandle, TaskResources,
};
use drover_structs::time::{format_rfc3339_nanos, now_nanos};
use drover_structs::*;
use tokio::sync::{mpsc, oneshot, watch};

use crate::alloc_control::{AllocControlError, Reply, TaskCommand};
use crate::alloc_stats::LiveTasks;
use crate::allocdir::TaskDir;
use crate::csi::CsiManager;
use crate::csi::host_mounts::{bind_dir, path_in_task_dir, unmount};
use crate::csi::supervisor::{PluginTask, Supervisor};
use crate::csi::volumes::TaskBind;
use crate::driver_events::{DriverEventRouter, RouteGuard};
use crate::logs::{LogConfig, LogKind, LogPump, create_fifo, fifo_path};
use crate::restarts::{Decision, RestartTracker};
use crate::state_db::ClientStateDb;
use crate::taskenv::{TaskPaths, build_env, inherits_agent_env, lookup_in};

/// How often a running task's templates are rendered again to find changed outputs (Nomad
/// watches their dependencies; the ones Drover serves are files, see `template`).
const TEMPLATE_RERENDER: Duration = Duration::from_secs(1);

/// Nomad's default client `max_kill_timeout`.
const MAX_KILL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a task is being killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillReason {
    /// The allocation is stopping (server asked, or the agent shuts it down).
    Stop,
    /// Another task of the allocation failed.
    SiblingFailed(String),
    /// The group's leader task finished.
    LeaderDead,
    /// Only sidecars are left: the main tasks ended (Nomad's `TaskMainDead`).
    MainDead,
}

/// Everything a task runner needs, fixed for its lifetime.
pub struct TaskContext {
    pub alloc: Arc<Allocation>,
    pub group: TaskGroup,
    pub task: Task,
    pub node: Arc<Node>,
    pub region: String,
    pub driver: Arc<dyn Driver>,
    pub task_dir: TaskDir,
    pub alloc_path: std::path::PathBuf,
    pub log_dir: std::path::PathBuf,
    pub db: ClientStateDb,
    /// Where the runner says which driver task runs now, for resource usage.
    pub live: LiveTasks,
    /// The node's CSI plugins (a task with a `csi_plugin` block registers one).
    pub csi: CsiManager,
    /// Published CSI volumes the task binds (`volume_mount`).
    pub binds: Vec<TaskBind>,
    /// Routes the driver's task events to this runner (see `driver_events`).
    pub driver_events: DriverEventRouter,
    /// The agent's environment minus the client's env denylist, for drivers without image
    /// isolation (see `taskenv::inherits_agent_env`).
    pub agent_env: Arc<BTreeMap<String, String>>,
    /// The client's `artifact` block (timeouts, size limits).
    pub artifact: Arc<crate::artifact::ArtifactConfig>,
    /// The allocation's network namespace (bridge mode), which the task runs in.
    pub network: Option<drover_abi::NetworkIsolation>,
    /// The servers' service catalog, for templates' `nomadService`.
    pub catalog: Arc<dyn crate::template::services::ServiceCatalog>,
}

/// Sent to the allocation runner whenever the task's state changes. Boxed: a channel holds
/// its values in blocks of 32 allocated ahead, so an unboxed `TaskState` cost each allocation
/// runner about 7 KB before the first update.
pub type TaskStateUpdate = Box<(String, TaskState)>;

/// Where events from outside a task runner (its driver, its CSI plugin's supervisor, the
/// allocation's health watcher) reach it. Boxed for the same reason: 32 unboxed `TaskEvent`s
/// (about 500 bytes each) were 16 KB a task, allocated when its runner was made.
pub type OutsideEvents = mpsc::UnboundedSender<Box<TaskEvent>>;

pub struct TaskRunner {
    ctx: TaskContext,
    state: TaskState,
    updates: mpsc::UnboundedSender<TaskStateUpdate>,
    /// A task started before the agent restarted, to take back rather than start again.
    recovered: Option<TaskHandle>,
    /// The task's `csi_plugin` block, and its supervision once the task runs.
    plugin: Option<PluginTask>,
    supervisor: Option<Supervisor>,
    plugin_events: (OutsideEvents, mpsc::UnboundedReceiver<Box<TaskEvent>>),
    /// The driver's events of the task that runs now arrive on `plugin_events` while this lives.
    driver_route: Option<RouteGuard>,
    /// Signals and restarts asked for by the client (`alloc signal`, `alloc restart`).
    commands: mpsc::UnboundedReceiver<TaskCommand>,
    /// The task's templates once first rendered, and what they render with.
    templates: Option<crate::template::Templates>,
    template_env: Option<crate::template::RenderEnv>,
    /// Why the task is being killed as failed (its templates failed, or its CSI plugin never
    /// became healthy): a start that fails with this set is Nomad's "Template failed" kill, a
    /// running task stopped with it set fails instead of restarting.
    template_failure: Option<String>,
    /// A plugin supervisor's failing kill, until the running loop acts on it.
    plugin_kill: Option<TaskEvent>,
    /// Changes of the running task's templates waiting for their splay, and until when.
    template_due: Option<(tokio::time::Instant, crate::template::Changes)>,
    /// Change scripts of the running task's templates running in the task, until they end.
    template_scripts: Option<ScriptRuns>,
    /// The task's artifacts are in place (fetched once, before the first start, as Nomad's
    /// artifact hook marks itself done).
    artifacts_done: bool,
    /// The restart under way was asked for by a failing check (`check_restart`): it counts
    /// against the restart policy.
    restart_is_failure: bool,
}

impl TaskRunner {
    pub fn new(
        ctx: TaskContext,
        prior: Option<TaskState>,
        recovered: Option<TaskHandle>,
        updates: mpsc::UnboundedSender<TaskStateUpdate>,
    ) -> Self {
        let fresh = prior.is_none();
        let mut r = TaskRunner {
            ctx,
            state: prior.unwrap_or_else(|| TaskState {
                state: TASK_STATE_PENDING.into(),
                ..Default::default()
            }),
            updates,
            recovered,
            plugin: None,
            supervisor: None,
            plugin_events: mpsc::unbounded_channel(),
            driver_route: None,
            // Closed until `with_commands`: nobody can ask anything.
            commands: mpsc::unbounded_channel().1,
            templates: None,
            template_env: None,
            template_failure: None,
            plugin_kill: None,
            template_due: None,
            template_scripts: None,
            artifacts_done: false,
            restart_is_failure: false,
        };
        // A task that ever started had its artifacts fetched (before an agent restart too).
        r.artifacts_done = r.state.started_at.is_some();
        if fresh {
            r.event(TaskEvent::new(TASK_EVENT_RECEIVED));
        }
        r
    }

    /// Takes the client's signals and restarts of this task from `commands`.
    pub(crate) fn with_commands(mut self, commands: mpsc::UnboundedReceiver<TaskCommand>) -> Self {
        self.commands = commands;
        self
    }

    /// Where events from outside the runner reach it (the allocation runner's "Alloc
    /// Unhealthy" events): recorded with the task's next event or state change, or at once
    /// while the task runs. Sending fails once the runner is done.
    pub(crate) fn outside_events(&self) -> OutsideEvents {
        self.plugin_events.0.clone()
    }

    fn event(&mut self, e: TaskEvent) {
        self.take_outside_events();
        // Nomad keeps the last 10 events of a task.
        self.state.events.push(e);
        if self.state.events.len() > 10 {
            let excess = self.state.events.len() - 10;
            self.state.events.drain(..excess);
        }
        self.publish();
    }

    fn publish(&self) {
        let _ = self
            .updates
            .send(Box::new((self.ctx.task.name.clone(), self.state.clone())));
    }

    fn set_state(&mut self, state: &str) {
        self.state.state = state.into();
        match state {
            TASK_STATE_RUNNING if self.state.started_at.is_none() => {
                self.state.started_at = Some(format_rfc3339_nanos(now_nanos()));
            }
            TASK_STATE_DEAD => {
                self.state.finished_at = Some(format_rfc3339_nanos(now_nanos()));
            }
            _ => {}
        }
    }

    fn finish(&mut self, failed: bool) {
        self.take_outside_events();
        self.state.failed = failed;
        self.set_state(TASK_STATE_DEAD);
        self.publish();
    }

    /// Records the events from outside the runner (driver, CSI plugin) that came while it
    /// was not waiting for them, so that none is lost when the task ends first.
    fn take_outside_events(&mut self) {
        while let Ok(e) = self.plugin_events.1.try_recv() {
            self.outside_event(*e);
        }
    }

    /// Records an event from outside the runner. A plugin supervisor's failing kill (a CSI
    /// plugin not healthy within its `health_timeout`) is kept for the running loop to act on
    /// (see `plugin_kill`) and recorded then.
    fn outside_event(&mut self, e: TaskEvent) {
        if e.event_type == TASK_EVENT_KILLING && e.fails_task {
            self.plugin_kill = Some(e);
        } else {
            self.state.events.push(e);
        }
    }

    /// Runs the task to its end. `kill` turns `Some` when the task must stop.
    /// Boxed: a runner is 3.5 KB, and a future that takes it by value holds it twice (as its
    /// argument and as the local it is moved into) for the task's whole life.
    pub async fn run(mut self: Box<Self>, mut kill: watch::Receiver<Option<KillReason>>) {
        let name = self.ctx.task.name.clone();
        let log_cfg = self
            .ctx
            .task
            .log_config
            .as_ref()
            .map(|l| LogConfig {
                max_files: l.max_files.max(1) as u32,
                max_file_size_mb: l.max_file_size_mb.max(1) as u64,
            })
            .unwrap_or_default();
        let stdout_fifo = fifo_path(&self.ctx.log_dir, &name, LogKind::Stdout);
        let stderr_fifo = fifo_path(&self.ctx.log_dir, &name, LogKind::Stderr);
        if self.recovered.is_none() && self.state.events.len() <= 1 {
            self.event(TaskEvent::new(TASK_EVENT_SETUP).with_message("Building Task Directory"));
        }
        // FIFOs and log files are blocking filesystem work: on the blocking pool.
        let (fo, fe, log_dir, task_name) = (
            stdout_fifo.clone(),
            stderr_fifo.clone(),
            self.ctx.log_dir.clone(),
            name.clone(),
        );
        let pumps = tokio::task::spawn_blocking(move || {
            create_fifo(&fo)?;
            create_fifo(&fe)?;
            let out = LogPump::start(&fo, &log_dir, &task_name, LogKind::Stdout, log_cfg)?;
            let err = LogPump::start(&fe, &log_dir, &task_name, LogKind::Stderr, log_cfg)?;
            Ok::<_, crate::logs::LogError>((out, err))
        })
        .await
        .unwrap_or(Err(crate::logs::LogError::NoRuntime));
        let pumps = match pumps {
            Ok(p) => p,
            Err(e) => {
                let mut ev = TaskEvent::new(TASK_EVENT_SETUP_FAILURE);
                ev.setup_error = format!("failed to set up task logs: {e}");
                ev.fails_task = true;
                ev.display_message = ev.default_display_message();
                self.event(ev);
                self.finish(true);
                return;
            }
        };

        let batch = self
            .ctx
            .alloc
            .job
            .as_ref()
            .is_some_and(|j| j.is_batch_like());
        let policy = self
            .ctx
            .task
            .restart_policy
            .clone()
            .or_else(|| self.ctx.group.restart_policy.clone())
            .unwrap_or_default();
        let once = !crate::lifecycle::restarts_on_success(&self.ctx.task, batch);
        let mut tracker = RestartTracker::new(policy, once);
        let mut running: Option<String> = None;
        match PluginTask::of_task(&self.ctx.task, &self.ctx.alloc.id, &self.ctx.csi) {
            None => {}
            Some(Ok(p)) => self.plugin = Some(p),
            Some(Err(e)) => {
                let mut ev = TaskEvent::new(TASK_EVENT_SETUP_FAILURE);
                ev.setup_error = e;
                ev.fails_task = true;
                ev.display_message = ev.default_display_message();
                self.event(ev);
                self.finish(true);
                let (out, err) = pumps;
                out.stop().await;
                err.stop().await;
                return;
            }
        }

        if let Some(handle) = self.recovered.take() {
            self.route_driver_events(&handle.config.id);
            let driver = self.ctx.driver.clone();
            let h = handle.clone();
            let recovered = tokio::task::spawn_blocking(move || driver.recover_task(&h)).await;
            match recovered {
                Ok(Ok(())) => {
                    self.set_state(TASK_STATE_RUNNING);
                    self.publish();
                    self.ctx
                        .live
                        .running(&name, self.ctx.driver.clone(), &handle.config.id);
                    running = Some(handle.config.id.clone());
                    self.recover_templates(&handle.config.id).await;
                    if let Some(p) = self.plugin.as_mut() {
                        // The plugin's directories and mounts are still in place: this only
                        // learns the paths the plugin was given.
                        let isolation = self.ctx.driver.capabilities().fs_isolation;
                        if let Err(e) = p.prepare(isolation) {
                            tracing::warn!(task = %name, error = %e, "CSI plugin directories");
                        }
                    }
                    self.start_supervisor();
                }
                Ok(Err(e)) => {
                    tracing::warn!(task = %name, error = %e, "could not recover task; restarting it")
                }
                Err(e) => tracing::warn!(task = %name, error = %e, "recover panicked"),
            }
        }

        // Who asked for a restart of the task that runs now, to answer once it stopped.
        let mut restarting: Vec<Reply> = Vec::new();
        loop {
            let requested = kill.borrow().clone();
            if let Some(reason) = requested {
                if let Some(id) = running.take() {
                    self.kill(&id, reason).await;
                } else {
                    // Killed before it started (e.g. waiting for its lifecycle stage).
                    self.kill_reason_event(&reason);
                    self.finish(false);
                }
                break;
            }
            if running.is_none() && !self.artifacts_done {
                let fetched = {
                    let fetch = self.fetch_artifacts();
                    tokio::pin!(fetch);
                    tokio::select! {
                        fetched = &mut fetch => fetched,
                        changed = kill.changed() => match changed {
                            // A stop does not wait for a download: the loop's top handles it.
                            Ok(()) => continue,
                            // Nobody can ask for a kill any more: only the download ends this.
                            Err(_) => fetch.await,
                        },
                    }
                };
                if let Err(message) = fetched {
                    let mut ev = TaskEvent::new(TASK_EVENT_ARTIFACT_DOWNLOAD_FAILED);
                    ev.download_error = message.clone();
                    ev.details.insert("download_error".into(), message);
                    ev.display_message = ev.default_display_message();
                    self.event(ev);
                    // Nomad's artifact hook fails recoverably: the restart policy decides, as
                    // for the other prestart failures.
                    let decision = tracker.on_start_error(true);
                    if !self
                        .after_decision(decision, tracker.reason(), &mut kill)
                        .await
                    {
                        break;
                    }
                    continue;
                }
                self.artifacts_done = true;
            }
            let task_id = match running.clone() {
                Some(id) => id,
                None => match self.start(&stdout_fifo, &stderr_fifo).await {
                    Ok(id) => {
                        running = Some(id.clone());
                        id
                    }
                    Err(e) => {
                        if let Some(message) = self.template_failure.take() {
                            // Nomad kills the task for a failed render; no restart.
                            self.event(template_failed_event(&message, 0));
                            self.finish(true);
                            break;
                        }
                        let (message, recoverable) = match &e {
                            DriverError::StartFailed {
                                message,
                                recoverable,
                            } => (message.clone(), *recoverable),
                            other => (other.to_string(), false),
                        };
                        let mut ev = TaskEvent::new(TASK_EVENT_DRIVER_FAILURE);
                        ev.driver_error = message;
                        ev.display_message = ev.default_display_message();
                        self.event(ev);
                        let decision = tracker.on_start_error(recoverable);
                        if !self
                            .after_decision(decision, tracker.reason(), &mut kill)
                            .await
                        {
                            break;
                        }
                        continue;
                    }
                },
            };

            // One wait per running task: events from the driver or a plugin supervisor are
            // recorded without abandoning it (each wait holds a blocking call for up to 30 s).
            let wait = wait_exit(self.ctx.driver.clone(), task_id.clone());
            tokio::pin!(wait);
            let mut template_tick = tokio::time::interval_at(
                tokio::time::Instant::now() + TEMPLATE_RERENDER,
                TEMPLATE_RERENDER,
            );
            template_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // Changes found for an earlier run of the task are in the outputs it starts with.
            self.template_due = None;
            self.template_scripts = None;
            let exit = loop {
                // A plugin not healthy in time stops the task and fails it, as Nomad's does.
                if let Some(ev) = self.plugin_kill.take()
                    && self.template_failure.is_none()
                {
                    let failure = ev.display_message.clone();
                    self.kill_failing(&task_id, failure, ev).await;
                }
                let due = self.template_due.as_ref().map(|(at, _)| *at);
                tokio::select! {
                    exit = &mut wait => break Some(exit),
                    _ = template_tick.tick(), if self.templates.is_some()
                        && self.template_failure.is_none() =>
                    {
                        self.refresh_template_services().await;
                        self.rerender_templates();
                    }
                    _ = sleep_until_due(due), if due.is_some() => {
                        if let Some((_, changes)) = self.template_due.take() {
                            self.apply_template_changes(changes, &task_id, &mut restarting).await;
                        }
                    }
                    runs = scripts_done(&mut self.template_scripts),
                        if self.template_scripts.is_some() =>
                    {
                        self.template_scripts = None;
                        self.after_template_scripts(runs, &task_id).await;
                    }
                    Some(ev) = self.plugin_events.1.recv() => {
                        self.outside_event(*ev);
                        self.publish();
                    }
                    Some(command) = self.commands.recv() => {
                        self.command(command, &task_id, &mut restarting).await;
                    }
                    changed = kill.changed() => {
                        if changed.is_err() {
                            // The allocation runner is gone: nobody can ask for a kill any
                            // more, so only the task's own exit ends this wait.
                            break Some((&mut wait).await);
                        }
                        break None;
                    }
                }
            };
            let Some(exit) = exit else {
                continue;
            };
            running = None;
            // What the driver emitted while the task ran comes before its end, even for a
            // task that exits at once, before the driver's pump asked again.
            let (driver, router) = (self.ctx.driver.clone(), self.ctx.driver_events.clone());
            let _ = tokio::task::spawn_blocking(move || {
                crate::driver_events::flush(driver.as_ref(), &router)
            })
            .await;
            self.take_outside_events();
            let mut ev = TaskEvent::new(TASK_EVENT_TERMINATED);
            ev.exit_code = exit.exit_code as i64;
            ev.signal = exit.signal as i64;
            ev.message = exit.err.clone().unwrap_or_default();
            ev.details
                .insert("exit_code".into(), exit.exit_code.to_string());
            ev.details.insert("signal".into(), exit.signal.to_string());
            ev.details
                .insert("oom_killed".into(), exit.oom_killed.to_string());
            ev.display_message = ev.default_display_message();
            self.event(ev);
            self.release(&task_id).await;
            if self.template_failure.is_some() {
                // Stopped for a failed re-render: the task fails, as Nomad's kill does.
                for done in restarting.drain(..) {
                    let _ = done.send(Ok(()));
                }
                self.finish(true);
                break;
            }
            if !restarting.is_empty() && std::mem::take(&mut self.restart_is_failure) {
                // A check's restart: the restart policy decides, as for a failed exit.
                for done in restarting.drain(..) {
                    let _ = done.send(Ok(()));
                }
                let decision = tracker.on_failure();
                if !self
                    .after_decision(decision, tracker.reason(), &mut kill)
                    .await
                {
                    break;
                }
                continue;
            }
            if !restarting.is_empty() {
                self.restart_on_request();
                for done in restarting.drain(..) {
                    let _ = done.send(Ok(()));
                }
                continue;
            }
            let decision = tracker.on_exit(&exit);
            if !self
                .after_decision(decision, tracker.reason(), &mut kill)
                .await
            {
                break;
            }
        }
        if let Some(sup) = self.supervisor.take() {
            sup.stop().await;
        }
        if let Some(p) = &self.plugin {
            p.release_mounts();
        }
        self.release_binds();
        let (out, err) = pumps;
        out.stop().await;
        err.stop().await;
    }

    /// Starts probing the plugin the task serves, once.
    fn start_supervisor(&mut self) {
        if self.supervisor.is_some() {
            return;
        }
        if let Some(p) = &self.plugin {
            self.supervisor = Some(p.supervise(self.ctx.csi.clone(), self.plugin_events.0.clone()));
        }
    }

    /// The plugin's directories and the task's volumes, before each start; answers the
    /// environment they add and the mounts the driver makes.
    ///
    /// Drivers that isolate the filesystem (exec, docker) get the volumes as driver mounts, as
    /// Nomad passes them. raw_exec cannot remap paths: its tasks find a volume at
    /// `<task_dir>/<destination>`, where the client binds it on the host.
    fn prepare_mounts(
        &mut self,
    ) -> Result<(BTreeMap<String, String>, Vec<MountConfig>), DriverError> {
        let setup_failed = |message: String| DriverError::StartFailed {
            message,
            recoverable: false,
        };
        let capabilities = self.ctx.driver.capabilities();
        let isolation = capabilities.fs_isolation;
        // Host volumes go to the driver as mounts; one that cannot make them refuses the task.
        let mut mounts = crate::host_volumes::task_mounts(
            &self.ctx.task,
            &self.ctx.group,
            &self.ctx.alloc.name,
            &self.ctx.node,
            capabilities.mount_configs,
        )
        .map_err(|e| setup_failed(format!("prestart hook \"volumes\" failed: {e}")))?;
        if isolation == FsIsolation::None {
            let task_dir = self.ctx.task_dir.dir.clone();
            for b in &self.ctx.binds {
                let target = path_in_task_dir(&task_dir, &b.destination);
                bind_dir(&b.host_path, &target, b.read_only)
                    .map_err(|e| setup_failed(format!("failed to mount volume: {e}")))?;
            }
        } else {
            mounts.extend(self.ctx.binds.iter().map(|b| MountConfig {
                task_path: b.destination.clone(),
                host_path: b.host_path.display().to_string(),
                readonly: b.read_only,
                propagation_mode: MountPropagation::Private,
            }));
        }
        let mut env = BTreeMap::new();
        if let Some(p) = self.plugin.as_mut() {
            let setup = p
                .prepare(isolation)
                .map_err(|e| setup_failed(format!("csi_plugin_supervisor: {e}")))?;
            env = setup.env;
            mounts.extend(setup.mounts);
        }
        Ok((env, mounts))
    }

    /// Undoes the task's volume binds on the host (raw_exec's; a no-op for the others).
    fn release_binds(&self) {
        for b in &self.ctx.binds {
            let target = path_in_task_dir(&self.ctx.task_dir.dir, &b.destination);
            if let Err(e) = unmount(&target) {
                tracing::warn!(task = %self.ctx.task.name, error = %e, "unmounting a volume");
            }
        }
    }

    /// Acts on a restart decision. Returns whether the task should be started again.
    async fn after_decision(
        &mut self,
        decision: Decision,
        reason: &str,
        kill: &mut watch::Receiver<Option<KillReason>>,
    ) -> bool {
        match decision {
            Decision::Restart(delay) => {
                let mut ev = TaskEvent::new(TASK_EVENT_RESTARTING);
                ev.restart_reason = reason.to_string();
                ev.start_delay = delay.as_nanos() as i64;
                ev.display_message = ev.default_display_message();
                self.set_state(TASK_STATE_PENDING);
                self.event(ev);
                let wake = tokio::time::sleep(delay);
                tokio::pin!(wake);
                loop {
                    tokio::select! {
                        _ = &mut wake => break,
                        _ = kill.changed() => break,
                        // Nothing runs until the delay is over.
                        Some(command) = self.commands.recv() => command.refuse(),
                    }
                }
                let killed = kill.borrow().is_some();
                if killed {
                    self.finish(false);
                    return false;
                }
                self.state.restarts += 1;
                self.state.last_restart = Some(format_rfc3339_nanos(now_nanos()));
                true
            }
            Decision::Terminated => {
                self.finish(false);
                false
            }
            Decision::NotRestarting => {
                let mut ev = TaskEvent::new(TASK_EVENT_NOT_RESTARTING);
                ev.restart_reason = reason.to_string();
                ev.fails_task = true;
                ev.display_message = ev.default_display_message();
                self.event(ev);
                self.finish(true);
                false
            }
        }
    }

    /// Fetches the task's artifacts into its directory (Nomad's artifact hook). The error is
    /// the failure event's message.
    async fn fetch_artifacts(&mut self) -> Result<(), String> {
        let artifacts = crate::artifact::of_task(&self.ctx.task).map_err(|e| e.to_string())?;
        if artifacts.is_empty() {
            return Ok(());
        }
        self.event(TaskEvent::new(TASK_EVENT_DOWNLOADING_ARTIFACTS));
        let c = &self.ctx;
        let paths = TaskPaths {
            alloc_dir: &c.alloc_path,
            task_local_dir: &c.task_dir.local_dir,
            task_secrets_dir: &c.task_dir.secrets_dir,
            task_tmp_dir: &c.task_dir.tmp_dir,
        };
        // Interpolated as the task's own environment is, without the agent's variables.
        let env = build_env(
            &c.alloc,
            &c.group,
            &c.task,
            &c.node,
            &c.region,
            &paths,
            &BTreeMap::new(),
        );
        let (node, region, config) = (c.node.clone(), c.region.clone(), c.artifact.clone());
        let (task_dir, alloc_dir) = (c.task_dir.dir.clone(), c.alloc_path.clone());
        let staging_dir = c.task_dir.private_dir.clone();
        // Downloads may take minutes: not on the bounded blocking pool.
        crate::driver_calls::run(move || {
            let lookup = |name: &str| lookup_in(name, &env, &node, &region);
            let place = crate::artifact::Place {
                task_dir: &task_dir,
                alloc_dir: &alloc_dir,
                staging_dir: &staging_dir,
            };
            for a in &artifacts {
                crate::artifact::fetch(a, &lookup, &place, &config)
                    .map_err(|e| format!("failed to download artifact {:?}: {e}", a.source))?;
            }
            Ok(())
        })
        .await
        .unwrap_or_else(|e| Err(format!("artifact download: {e}")))
    }

    /// Builds the driver's task config and starts the task.
    async fn start(
        &mut self,
        stdout: &std::path::Path,
        stderr: &std::path::Path,
    ) -> Result<String, DriverError> {
        let (extra_env, mounts) = self.prepare_mounts()?;
        let c = &self.ctx;
        crate::dispatch_payload::write(&c.task, c.alloc.job.as_deref(), &c.task_dir.local_dir)
            .map_err(|e| DriverError::StartFailed {
                message: format!("failed to write the dispatch payload: {e}"),
                recoverable: false,
            })?;
        let paths = TaskPaths {
            alloc_dir: &c.alloc_path,
            task_local_dir: &c.task_dir.local_dir,
            task_secrets_dir: &c.task_dir.secrets_dir,
            task_tmp_dir: &c.task_dir.tmp_dir,
        };
        let no_agent_env = BTreeMap::new();
        let agent_env = if inherits_agent_env(c.driver.capabilities().fs_isolation) {
            &*c.agent_env
        } else {
            &no_agent_env
        };
        let mut env = build_env(
            &c.alloc, &c.group, &c.task, &c.node, &c.region, &paths, agent_env,
        );
        env.extend(extra_env);
        // After the artifacts and the dispatch payload, as Nomad's template hook: a template
        // may read them. Variables of `env = true` templates override the task's own.
        match first_render(&mut self.templates, &mut self.template_env, c, &env).await {
            Ok(vars) => env.extend(vars),
            Err(e) => {
                let message = e.to_string();
                self.template_failure = Some(message.clone());
                return Err(DriverError::StartFailed {
                    message: format!("Template failed: {message}"),
                    recoverable: false,
                });
            }
        }
        let lookup = |name: &str| lookup_in(name, &env, &c.node, &c.region);
        let raw_config = serde_json::Value::Object(c.task.config.clone().unwrap_or_default());
        let driver_config = crate::interpolate::interpolate_json(&raw_config, &lookup);
        let suffix: String = uuid::Uuid::new_v4()
            .simple()
            .to_string()
            .chars()
            .take(8)
            .collect();
        let cfg = TaskConfig {
            id: format!("{}/{}/{}", c.alloc.id, c.task.name, suffix),
            name: c.task.name.clone(),
            alloc_id: c.alloc.id.clone(),
            job_name: c.alloc.job_id.clone(),
            group_name: c.group.name.clone(),
            env: std::sync::Arc::new(env),
            driver_config,
            resources: TaskResources {
                cpu_mhz: c.task.resources.cpu.max(0) as u64,
                cores: c.task.resources.cores.max(0) as u64,
                memory_mb: c.task.resources.memory_mb.max(0) as u64,
                memory_max_mb: c.task.resources.memory_max_mb.max(0) as u64,
            },
            user: c.task.user.clone(),
            alloc_dir: c.alloc_path.clone(),
            task_dir: c.task_dir.dir.clone(),
            stdout_path: stdout.to_path_buf(),
            stderr_path: stderr.to_path_buf(),
            mounts,
            network_isolation: c.network.clone(),
        };
        let driver = c.driver.clone();
        let db = c.db.clone();
        let alloc_id = c.alloc.id.clone();
        let task_name = c.task.name.clone();
        // Before the start: a driver reports events while it starts the task.
        self.route_driver_events(&cfg.id);
        // On the runtime's blocking pool, at most `DRIVER_STARTS` at once: a start that takes
        // minutes (an image pull) holds a pool thread, and the rest of the pool stays free for
        // the log pumps and state writes. Not on threads of their own: the handle and the
        // driver's record of the task are kept for the task's life, and each thread's
        // allocator heap kept pages of its own for them (`driver_calls` says more).
        let _permit = DRIVER_STARTS.acquire().await;
        let handle = tokio::task::spawn_blocking(move || {
            let handle = driver.start_task(&cfg)?;
            // The handle lets a restarted agent find the task again.
            let bytes = serde_json::to_vec(&handle).unwrap_or_default();
            if let Err(e) = db.put_task_handle(&alloc_id, &task_name, &bytes) {
                tracing::warn!(error = %e, "saving task handle");
            }
            Ok::<_, DriverError>(handle)
        })
        .await
        .map_err(|e| DriverError::Other(format!("starting the task: {e}")))??;
        self.set_state(TASK_STATE_RUNNING);
        self.event(TaskEvent::new(TASK_EVENT_STARTED));
        self.start_supervisor();
        self.ctx.live.running(
            &self.ctx.task.name,
            self.ctx.driver.clone(),
            &handle.config.id,
        );
        Ok(handle.config.id)
    }

    /// Stops a running task: signal, wait up to the kill timeout, then kill.
    async fn kill(&mut self, task_id: &str, reason: KillReason) {
        self.kill_reason_event(&reason);
        let mut ev = TaskEvent::new(TASK_EVENT_KILLING);
        ev.kill_timeout = self.kill_timeout().as_nanos() as i64;
        ev.display_message = ev.default_display_message();
        self.event(ev);
        self.shutdown_delay(task_id).await;
        let mut ev = TaskEvent::new(TASK_EVENT_KILLED);
        if let Err(e) = self.stop_task(task_id).await {
            ev.kill_error = e;
        }
        ev.display_message = ev.default_display_message();
        self.event(ev);
        self.release(task_id).await;
        self.finish(false);
    }

    /// Nomad's event for why the allocation runner kills the task (none for a plain stop).
    fn kill_reason_event(&mut self, reason: &KillReason) {
        let mut ev = match reason {
            KillReason::Stop => return,
            KillReason::SiblingFailed(sibling) => {
                let mut ev = TaskEvent::new(TASK_EVENT_SIBLING_FAILED);
                ev.failed_sibling = sibling.clone();
                ev
            }
            KillReason::LeaderDead => TaskEvent::new(TASK_EVENT_LEADER_DEAD),
            KillReason::MainDead => TaskEvent::new(TASK_EVENT_MAIN_DEAD),
        };
        ev.display_message = ev.default_display_message();
        self.event(ev);
    }

    /// The task's `kill_timeout`, at most the client's `max_kill_timeout` (Nomad's default,
    /// 30 s: `SetKillTimeout` and the driver's kill both take the smaller).
    fn kill_timeout(&self) -> Duration {
        Duration::from_nanos(self.ctx.task.kill_timeout.max(0) as u64).min(MAX_KILL_TIMEOUT)
    }

    /// Nomad's `shutdown_delay` before the kill: the task shows as pending with an event
    /// saying so, and is killed once the delay is over (unless it exited before).
    async fn shutdown_delay(&mut self, task_id: &str) {
        let delay = Duration::from_nanos(self.ctx.task.shutdown_delay.max(0) as u64);
        if delay.is_zero() {
            return;
        }
        let mut ev = TaskEvent::new(TASK_EVENT_WAITING_SHUTDOWN_DELAY);
        ev.display_message = format!(
            "Waiting for shutdown_delay of {} before killing the task.",
            drover_structs::time::go_duration(self.ctx.task.shutdown_delay)
        );
        self.set_state(TASK_STATE_PENDING);
        self.event(ev);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = wait_exit(self.ctx.driver.clone(), task_id.to_string()) => {}
        }
    }

    /// Has the driver stop the task: its kill signal, then a kill after its kill timeout.
    async fn stop_task(&self, task_id: &str) -> Result<(), String> {
        let driver = self.ctx.driver.clone();
        let id = task_id.to_string();
        let timeout = self.kill_timeout();
        // Nomad's default kill signal is SIGINT.
        let signal = if self.ctx.task.kill_signal.is_empty() {
            "SIGINT".to_string()
        } else {
            self.ctx.task.kill_signal.clone()
        };
        // Up to the kill timeout per task: on `driver_calls`, so that stopping many tasks at
        // once neither waits for the bounded blocking pool nor fills it.
        match crate::driver_calls::run(move || driver.stop_task(&id, timeout, &signal)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("stopping the task: {e}")),
        }
    }

    /// Acts on a client command while task `task_id` runs. A restart records its event and
    /// stops the task; its asker, kept in `restarting`, is answered once the task exited.
    async fn command(&mut self, command: TaskCommand, task_id: &str, restarting: &mut Vec<Reply>) {
        match command {
            // Stopping for a restart: nothing runs to signal.
            TaskCommand::Signal { .. } if !restarting.is_empty() => command.refuse(),
            TaskCommand::Signal { signal, done } => {
                let mut ev = TaskEvent::new(TASK_EVENT_SIGNALING);
                ev.details.insert("signal".into(), signal.clone());
                self.event(ev);
                let driver = self.ctx.driver.clone();
                let id = task_id.to_string();
                let sent = tokio::task::spawn_blocking(move || driver.signal_task(&id, &signal))
                    .await
                    .unwrap_or_else(|e| {
                        Err(DriverError::Other(format!(
                            "driver panicked signalling the task: {e}"
                        )))
                    })
                    .map_err(|e| AllocControlError::Driver(e.to_string()));
                let _ = done.send(sent);
            }
            TaskCommand::Restart {
                event,
                failure,
                done,
            } => {
                restarting.push(done);
                if restarting.len() > 1 {
                    // Already stopping for an earlier request.
                    return;
                }
                self.restart_is_failure = failure;
                self.event(*event);
                if let Err(e) = self.stop_task(task_id).await {
                    let task = &self.ctx.task.name;
                    tracing::error!(task = %task, error = %e, "failed to kill task for a restart");
                    for done in restarting.drain(..) {
                        let _ = done.send(Err(AllocControlError::Driver(e.clone())));
                    }
                }
            }
        }
    }

    /// Takes back the templates of a task recovered after an agent restart, so that their
    /// re-renders go on (Nomad renders them again when its client restarts). A failure stops
    /// the task, failing it, as a failed re-render does.
    async fn recover_templates(&mut self, task_id: &str) {
        let c = &self.ctx;
        let specs = match crate::template::of_task(&c.task) {
            Ok(specs) if specs.is_empty() => return,
            Ok(specs) => specs,
            Err(e) => return self.fail_by_template(task_id, e.to_string()).await,
        };
        let paths = TaskPaths {
            alloc_dir: &c.alloc_path,
            task_local_dir: &c.task_dir.local_dir,
            task_secrets_dir: &c.task_dir.secrets_dir,
            task_tmp_dir: &c.task_dir.tmp_dir,
        };
        let no_agent_env = BTreeMap::new();
        let agent_env = if inherits_agent_env(c.driver.capabilities().fs_isolation) {
            &*c.agent_env
        } else {
            &no_agent_env
        };
        let mut env = build_env(
            &c.alloc, &c.group, &c.task, &c.node, &c.region, &paths, agent_env,
        );
        if c.driver.capabilities().fs_isolation != FsIsolation::None {
            crate::template::use_in_task_paths(&mut env);
        }
        let render_env = crate::template::RenderEnv {
            task_dir: c.task_dir.dir.clone(),
            alloc_dir: c.alloc_path.clone(),
            env,
            node: c.node.clone(),
            region: c.region.clone(),
            services: crate::template::services::ServiceData::new(&c.alloc.namespace, &c.region),
        };
        let mut templates = crate::template::Templates::new(specs);
        let catalog = c.catalog.clone();
        let recovered = render_fetching(&render_env.services, catalog.as_ref(), || {
            templates.recover(&render_env)
        })
        .await;
        self.templates = Some(templates);
        self.template_env = Some(render_env);
        if let Err(e) = recovered {
            self.fail_by_template(task_id, e.to_string()).await;
        }
    }

    /// Records Nomad's "Template failed" kill and stops the task; the runner fails it once
    /// it exited (see `template_failure`).
    async fn fail_by_template(&mut self, task_id: &str, failure: String) {
        let timeout = self.kill_timeout().as_nanos() as i64;
        let event = template_failed_event(&failure, timeout);
        self.kill_failing(task_id, failure, event).await;
    }

    /// Records `event` (a failing "Killing") and stops the task, failing it once it exited.
    async fn kill_failing(&mut self, task_id: &str, failure: String, event: TaskEvent) {
        self.event(event);
        self.template_failure = Some(failure);
        if let Err(e) = self.stop_task(task_id).await {
            let task = &self.ctx.task.name;
            tracing::error!(task = %task, error = %e, "failed to kill task for a failed template");
        }
    }

    /// Reads again what the templates read of the service catalog, and what a render missed.
    /// A failure keeps the last answers (and is logged): the servers may be away a moment.
    async fn refresh_template_services(&self) {
        let Some(env) = self.template_env.as_ref() else {
            return;
        };
        if !env.services.is_used() {
            return;
        }
        let fetched = tokio::time::timeout(
            SERVICE_REFRESH_TIMEOUT,
            env.services.fetch(self.ctx.catalog.as_ref(), true),
        )
        .await;
        match fetched {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(task = %self.ctx.task.name, error = %e, "keeping the last service catalog for templates")
            }
            Err(_) => {
                tracing::warn!(task = %self.ctx.task.name, "the servers did not answer in time: keeping the last service catalog for templates")
            }
        }
    }

    /// Renders the running task's templates again. Changes wait for a random part of their
    /// splay (Nomad's), then `apply_template_changes` acts on them; a failure is acted on at
    /// once, without a splay.
    fn rerender_templates(&mut self) {
        let (Some(templates), Some(env)) = (self.templates.as_mut(), self.template_env.as_ref())
        else {
            return;
        };
        // Small local files: rendered in place rather than on the blocking pool.
        match templates.rerender(env) {
            Ok(c) if c.is_empty() => {}
            Ok(c) => match self.template_due.as_mut() {
                Some((_, due)) => due.merge(c),
                None => {
                    let at = tokio::time::Instant::now() + c.splay_wait();
                    self.template_due = Some((at, c));
                }
            },
            // A query not fetched yet (a template's output changed what it reads): the next
            // tick fetches it first.
            Err(_) if env.services.has_missing() => {}
            Err(e) => {
                self.template_due = Some((
                    tokio::time::Instant::now(),
                    crate::template::Changes::default(),
                ));
                self.template_failure = Some(e.to_string());
            }
        }
    }

    /// Applies what changed templates ask for: a restart through the same path as `alloc
    /// restart`, or the signals (Nomad's "template changed" Signaling events). A failed render
    /// or signal stops the task, failing it.
    async fn apply_template_changes(
        &mut self,
        changes: crate::template::Changes,
        task_id: &str,
        restarting: &mut Vec<Reply>,
    ) {
        if let Some(failure) = self.template_failure.clone() {
            return self.fail_by_template(task_id, failure).await;
        }
        if changes.restart {
            let mut event = TaskEvent::new(TASK_EVENT_RESTART_SIGNAL);
            event.display_message = "Template with change_mode restart re-rendered".into();
            let (done, _) = oneshot::channel();
            let restart = TaskCommand::Restart {
                event: Box::new(event),
                failure: false,
                done,
            };
            self.command(restart, task_id, restarting).await;
            return;
        }
        if !restarting.is_empty() {
            // The task is stopping for a restart: it starts again with the new outputs.
            return;
        }
        for signal in changes.signals {
            let mut ev = TaskEvent::new(TASK_EVENT_SIGNALING);
            ev.task_signal = signal.clone();
            ev.task_signal_reason = "template changed".into();
            ev.display_message = ev.default_display_message();
            self.event(ev);
            let driver = self.ctx.driver.clone();
            let id = task_id.to_string();
            let sig = signal.clone();
            let sent = tokio::task::spawn_blocking(move || driver.signal_task(&id, &sig))
                .await
                .unwrap_or_else(|e| Err(DriverError::Other(e.to_string())));
            if let Err(e) = sent {
                let failure = format!("failed to send signal {signal}: {e}");
                return self.fail_by_template(task_id, failure).await;
            }
        }
        if !changes.scripts.is_empty() {
            self.run_template_scripts(changes.scripts, task_id);
        }
    }

    /// Starts the change scripts inside the task through the driver's exec, each with its
    /// timeout, all at once (as Nomad's template manager); `after_template_scripts` acts on
    /// their ends. Scripts still running from earlier changes end first.
    fn run_template_scripts(&mut self, scripts: Vec<crate::template::ChangeScript>, task_id: &str) {
        let handles: Vec<_> = scripts
            .into_iter()
            .map(|script| {
                let driver = self.ctx.driver.clone();
                let id = task_id.to_string();
                tokio::task::spawn_blocking(move || {
                    let ran = driver.exec_task(&id, &script.argv(), script.timeout);
                    (script, ran)
                })
            })
            .collect();
        let earlier = self.template_scripts.take();
        self.template_scripts = Some(Box::pin(async move {
            let mut runs = match earlier {
                Some(earlier) => earlier.await,
                None => Vec::new(),
            };
            for h in handles {
                match h.await {
                    Ok(run) => runs.push(run),
                    Err(e) => tracing::error!(error = %e, "template change script panicked"),
                }
            }
            runs
        }));
    }

    /// Nomad's events for ended change scripts: "Task hook message" for a success, "Task
    /// hook failed" for a failure (exit code, timeout, no exec in the driver), and a kill
    /// failing the task when a failed script has `fail_on_error`.
    async fn after_template_scripts(&mut self, runs: Vec<ScriptRun>, task_id: &str) {
        let mut kill = false;
        for (script, ran) in runs {
            let (cmd, args) = (&script.command, script.go_args());
            let message = match ran {
                Ok(out) if out.exit_code == 0 => {
                    let mut ev = TaskEvent::new(TASK_EVENT_HOOK_MESSAGE);
                    ev.display_message = format!(
                        "Template successfully ran script {cmd} with arguments: {args}. Exit code: 0"
                    );
                    self.event(ev);
                    continue;
                }
                Ok(out) => format!(
                    "Template ran script {cmd} with arguments {args} on change but it exited with code: {}",
                    out.exit_code
                ),
                Err(e) => format!(
                    "Template failed to run script {cmd} with arguments {args} on change: {e}. Exit code: 0"
                ),
            };
            let mut ev = TaskEvent::new(TASK_EVENT_HOOK_FAILED);
            ev.display_message = message;
            self.event(ev);
            kill |= script.fail_on_error;
        }
        if kill && self.template_failure.is_none() {
            let mut ev = TaskEvent::new(TASK_EVENT_KILLING);
            ev.fails_task = true;
            ev.kill_timeout = self.kill_timeout().as_nanos() as i64;
            ev.display_message = "Template script failed, task is being killed".into();
            let failure = "template change script failed".to_string();
            self.kill_failing(task_id, failure, ev).await;
        }
    }

    /// After the task stopped for a requested restart: Nomad's restart tracker restarts it at
    /// once without counting an attempt, and the task state counts one more restart.
    fn restart_on_request(&mut self) {
        self.set_state(TASK_STATE_PENDING);
        self.state.restarts += 1;
        self.state.last_restart = Some(format_rfc3339_nanos(now_nanos()));
        let mut ev = TaskEvent::new(TASK_EVENT_RESTARTING);
        ev.start_delay = 0;
        ev.display_message = ev.default_display_message();
        self.event(ev);
    }

    /// Sends the driver's events of task `task_id` to this runner (Nomad's "Driver" events),
    /// instead of those of the task it ran before.
    fn route_driver_events(&mut self, task_id: &str) {
        self.driver_route = Some(
            self.ctx
                .driver_events
                .route(task_id, self.plugin_events.0.clone()),
        );
    }

    /// Lets the driver free the task and forgets its handle.
    async fn release(&self, task_id: &str) {
        self.ctx.live.ended(&self.ctx.task.name);
        let driver = self.ctx.driver.clone();
        let db = self.ctx.db.clone();
        let id = task_id.to_string();
        let alloc_id = self.ctx.alloc.id.clone();
        let task = self.ctx.task.name.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Err(e) = driver.destroy_task(&id, true) {
                tracing::debug!(error = %e, "destroying task");
            }
            let _ = db.delete_task_handle(&alloc_id, &task);
        })
        .await;
    }
}

/// Waits for a task to exit, on the blocking pool.
/// Waits until `due` (forever without one; the select's guard keeps that branch off then).
async fn sleep_until_due(due: Option<tokio::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Nomad's `TaskHookFailed` and `TaskHookMessage` event types (template change scripts).
const TASK_EVENT_HOOK_FAILED: &str = "Task hook failed";
const TASK_EVENT_HOOK_MESSAGE: &str = "Task hook message";

/// A change script and how its exec in the task went.
type ScriptRun = (
    crate::template::ChangeScript,
    Result<drover_abi::ExecOutput, DriverError>,
);

/// Change scripts running in the task, as one future of all their ends.
type ScriptRuns =
    std::pin::Pin<Box<dyn std::future::Future<Output = Vec<ScriptRun>> + Send + Sync>>;

/// The ends of the running change scripts (forever without any; the select's guard keeps that
/// branch off then).
async fn scripts_done(runs: &mut Option<ScriptRuns>) -> Vec<ScriptRun> {
    match runs {
        Some(runs) => runs.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Nomad's event for a template that failed: the task is killed and fails.
fn template_failed_event(message: &str, kill_timeout_nanos: i64) -> TaskEvent {
    let mut ev = TaskEvent::new(TASK_EVENT_KILLING);
    ev.fails_task = true;
    ev.kill_timeout = kill_timeout_nanos;
    ev.display_message = format!("Template failed: {message}");
    ev
}

/// Rounds of fetching what a render found missing in the service catalog before its error
/// stands: a render finds every query of the template that fails first, so a round is needed
/// per template that reads services, and one more per level of queries that depend on answers
/// (`range nomadServices` then `nomadService .Name`).
const SERVICE_DISCOVERY_ROUNDS: usize = 32;
/// Attempts at reading the catalog while the servers do not answer (Nomad's `nomad_retry`
/// defaults: 12 attempts, from 250 ms doubling up to a minute between them).
const SERVICE_FETCH_ATTEMPTS: u32 = 12;
const SERVICE_FETCH_BACKOFF: Duration = Duration::from_millis(250);
const SERVICE_FETCH_MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a re-render waits for the servers' answers before it renders with the last ones:
/// the runner's loop waits for it.
const SERVICE_REFRESH_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs `render` until it no longer misses answers of the service catalog: what it missed is
/// fetched from the servers and it runs again, as consul-template discovers dependencies.
async fn render_fetching<T>(
    services: &crate::template::services::ServiceData,
    catalog: &dyn crate::template::services::ServiceCatalog,
    mut render: impl FnMut() -> Result<T, crate::template::TemplateError>,
) -> Result<T, crate::template::TemplateError> {
    for _ in 0..SERVICE_DISCOVERY_ROUNDS {
        let rendered = render();
        if rendered.is_ok() || !services.has_missing() {
            return rendered;
        }
        let mut attempt = 1;
        let mut backoff = SERVICE_FETCH_BACKOFF;
        while let Err(e) = services.fetch(catalog, false).await {
            if attempt == SERVICE_FETCH_ATTEMPTS {
                return Err(crate::template::TemplateError::Services(e));
            }
            attempt += 1;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(SERVICE_FETCH_MAX_BACKOFF);
        }
    }
    render()
}

/// Renders the task's templates before its first start and keeps what the re-renders need;
/// answers the `env = true` variables (as last rendered, for a restart too: Nomad does not
/// render again for a restart, the re-renders keep the outputs current).
async fn first_render(
    templates: &mut Option<crate::template::Templates>,
    template_env: &mut Option<crate::template::RenderEnv>,
    c: &TaskContext,
    env: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, crate::template::TemplateError> {
    if templates.is_none() {
        let specs = crate::template::of_task(&c.task)?;
        if specs.is_empty() {
            return Ok(BTreeMap::new());
        }
        *templates = Some(crate::template::Templates::new(specs));
    }
    let Some(t) = templates.as_mut() else {
        return Ok(BTreeMap::new());
    };
    if t.rendered() && template_env.is_some() {
        return t.env_vars();
    }
    let mut env = env.clone();
    if c.driver.capabilities().fs_isolation != FsIsolation::None {
        crate::template::use_in_task_paths(&mut env);
    }
    let render_env = crate::template::RenderEnv {
        task_dir: c.task_dir.dir.clone(),
        alloc_dir: c.alloc_path.clone(),
        env,
        node: c.node.clone(),
        region: c.region.clone(),
        services: crate::template::services::ServiceData::new(&c.alloc.namespace, &c.region),
    };
    let vars = render_fetching(&render_env.services, c.catalog.as_ref(), || {
        t.render_all(&render_env)
    })
    .await?;
    *template_env = Some(render_env);
    Ok(vars)
}

/// How many tasks of this agent a driver may be starting at once: 16 of the runtime's 24
/// blocking-pool threads (`drover::agent`), so that 8 stay for log and state writes. With 8
/// of 16, starts waited on each other's task-handle commits: 50 raw_exec starts took
/// 161-210 ms in the bench; 16 of 24 start them in 79-102 ms by hand (BENCHMARKS.md, issue 18).
static DRIVER_STARTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(16);

/// The task's exit. A driver that notifies exits is awaited without a thread (then asked once
/// for the result); others are waited on by a blocking call at a time.
async fn wait_exit(driver: Arc<dyn Driver>, task_id: String) -> ExitResult {
    let (exited, notified) = tokio::sync::oneshot::channel();
    let notify = Box::new(move || {
        let _ = exited.send(());
    });
    if driver.notify_exit(&task_id, notify) {
        // A dropped notifier (the driver forgot the task) falls through to `wait_task` too.
        let _ = notified.await;
    }
    loop {
        let d = driver.clone();
        let id = task_id.clone();
        // Long waits stay off the bounded blocking pool (a plugin's tasks could fill it).
        let r = crate::driver_calls::run(move || d.wait_task(&id, Duration::from_secs(30))).await;
        match r {
            Ok(Ok(Some(exit))) => return exit,
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => {
                return ExitResult {
                    exit_code: -1,
                    err: Some(e.to_string()),
                    ..Default::default()
                };
            }
            Err(e) => {
                return ExitResult {
                    exit_code: -1,
                    err: Some(format!("driver panicked waiting for the task: {e}")),
                    ..Default::default()
                };
            }
        }
    }
}

#[cfg(test)]
mod template_script_tests;
