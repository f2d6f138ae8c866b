//! The allocation runner: builds an allocation's directory, runs one task runner per task,
//! turns their states into the allocation's client status, and stops the tasks when the
//! servers (or a failing sibling, or the leader task) say so. For an allocation of a
//! deployment it also decides the allocation's health (see `alloc_health`).

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_abi::{Driver, TaskHandle};
use drover_structs::*;
use tokio::sync::{mpsc, watch};

use crate::alloc_control::{AllocControl, TaskCommands};
use crate::alloc_health::{self, Health};
use crate::alloc_stats::LiveTasks;
use crate::allocdir::AllocDir;
use crate::checks::{self, AllocChecks, CheckEnv, TaskRuns};
use crate::csi::volumes::{self, MountedVolume};
use crate::csi::{CsiManager, CsiServerCalls};
use crate::lifecycle::{self, Coordinator};
use crate::state_db::ClientStateDb;
use crate::task_runner::{KillReason, TaskContext, TaskRunner, TaskStateUpdate};

/// Shared by all allocation runners of a client.
#[derive(Clone)]
pub struct RunnerEnv {
    pub node: Arc<Node>,
    pub region: String,
    pub data_dir: std::path::PathBuf,
    pub drivers: Arc<BTreeMap<String, Arc<dyn Driver>>>,
    pub db: ClientStateDb,
    /// Where allocation status reports go (the client batches them to the servers).
    pub updates: mpsc::UnboundedSender<AllocClientUpdate>,
    /// The node's CSI plugins and volumes, and the server calls for claims.
    pub csi: CsiManager,
    pub csi_server: Arc<dyn CsiServerCalls>,
    /// Where the drivers' task events are routed to task runners.
    pub driver_events: crate::driver_events::DriverEventRouter,
    /// The agent's environment minus the client's env denylist (see `taskenv::agent_env`).
    pub agent_env: Arc<BTreeMap<String, String>>,
    /// The client's `artifact` block.
    pub artifact: Arc<crate::artifact::ArtifactConfig>,
    /// Bridge networking, when the node offers it.
    pub bridge: crate::network::Bridge,
    /// The servers' mesh calls (certificates, the mesh's view).
    pub mesh_server: Arc<dyn crate::mesh::MeshServerCalls>,
    /// The servers' service catalog (templates' `nomadService`).
    pub catalog: Arc<dyn crate::template::services::ServiceCatalog>,
}

/// Handle the client keeps for a running allocation.
pub struct AllocRunnerHandle {
    stop_tx: watch::Sender<bool>,
    /// The allocation as the runner was started with it (labels and resources of gauges).
    pub alloc: Arc<Allocation>,
    pub alloc_dir: std::path::PathBuf,
    /// The tasks that run now, for resource usage.
    pub live: LiveTasks,
    /// Signals and restarts of the allocation's tasks (`alloc signal`, `alloc restart`).
    pub control: AllocControl,
    /// The latest result of each of its service checks.
    pub checks: AllocChecks,
    /// How long the allocation may run without a heartbeat (`stop_after_client_disconnect`).
    pub stop_after_disconnect: Option<std::time::Duration>,
    done: watch::Receiver<bool>,
}

impl AllocRunnerHandle {
    /// Asks every task to stop (idempotent).
    pub fn stop(&self) {
        let _ = self.stop_tx.send(true);
    }

    /// Whether the allocation was asked to stop.
    pub fn stop_requested(&self) -> bool {
        *self.stop_tx.borrow()
    }

    /// Whether every task has ended.
    pub fn is_done(&self) -> bool {
        *self.done.borrow()
    }

    pub async fn wait_done(&mut self) {
        let _ = self.done.wait_for(|d| *d).await;
    }
}

/// Nomad's `getClientStatus`: any failed task fails the allocation; else any running task
/// makes it running; else any pending task keeps it pending; else it completed.
pub fn client_status(states: &BTreeMap<String, TaskState>) -> (&'static str, &'static str) {
    let (mut pending, mut running, mut dead, mut failed) = (false, false, false, false);
    for s in states.values() {
        match s.state.as_str() {
            TASK_STATE_RUNNING => running = true,
            TASK_STATE_PENDING => pending = true,
            TASK_STATE_DEAD => {
                if s.failed {
                    failed = true
                } else {
                    dead = true
                }
            }
            _ => {}
        }
    }
    if failed {
        (ALLOC_CLIENT_FAILED, "Failed tasks")
    } else if running {
        (ALLOC_CLIENT_RUNNING, "Tasks are running")
    } else if pending {
        (ALLOC_CLIENT_PENDING, "No tasks have started")
    } else if dead {
        (ALLOC_CLIENT_COMPLETE, "All tasks have completed")
    } else {
        (ALLOC_CLIENT_PENDING, "No tasks have started")
    }
}

/// Starts (or, with `prior`, resumes after an agent restart) an allocation.
pub fn start(
    env: RunnerEnv,
    alloc: Arc<Allocation>,
    prior: BTreeMap<String, TaskState>,
    handles: BTreeMap<String, TaskHandle>,
) -> Result<AllocRunnerHandle, String> {
    let job = alloc
        .job
        .clone()
        .ok_or_else(|| format!("allocation {} has no job", alloc.id))?;
    let group = job
        .lookup_task_group(&alloc.task_group)
        .cloned()
        .ok_or_else(|| {
            format!(
                "allocation {} names unknown group {}",
                alloc.id, alloc.task_group
            )
        })?;
    let dir = AllocDir::new(&env.data_dir, &alloc.id).map_err(|e| e.to_string())?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, done_rx) = watch::channel(false);
    let live = LiveTasks::for_tasks(group.tasks.iter().map(|t| t.name.clone()));
    let (control, commands) = AllocControl::new(
        group.tasks.iter().map(|t| t.name.clone()),
        stop_tx.subscribe(),
        done_rx.clone(),
    );
    let results = AllocChecks::default();
    let checks = Checks {
        results: results.clone(),
        control: control.clone(),
    };
    let handle = AllocRunnerHandle {
        stop_tx,
        alloc: alloc.clone(),
        alloc_dir: dir.path().to_path_buf(),
        live: live.clone(),
        control,
        checks: results,
        stop_after_disconnect: crate::heartbeat_stop::stop_after(&group),
        done: done_rx,
    };
    tokio::spawn(run(
        env, alloc, group, dir, prior, handles, live, commands, checks, stop_rx, done_tx,
    ));
    Ok(handle)
}

#[allow(clippy::too_many_arguments)]
async fn run(
    env: RunnerEnv,
    alloc: Arc<Allocation>,
    group: TaskGroup,
    dir: AllocDir,
    prior: BTreeMap<String, TaskState>,
    mut handles: BTreeMap<String, TaskHandle>,
    live: LiveTasks,
    mut commands: TaskCommands,
    checks: Checks,
    mut stop_rx: watch::Receiver<bool>,
    done_tx: watch::Sender<bool>,
) {
    // Deployment health is tracked from here, as Nomad's health hook starts before the others.
    let resolve =
        |task: &str, text: &str| check_env_resolve(&env, &alloc, &group, &dir, task, text);
    let group_checks = checks::of_alloc(&alloc, &group, &resolve);
    let mut health = HealthTracking::new(&alloc, &group, &group_checks);
    // Directory creation is many small blocking syscalls: off the async threads, and in
    // parallel with other allocations' setup.
    let names: Vec<String> = group.tasks.iter().map(|t| t.name.clone()).collect();
    let build_dir = dir.clone();
    let built = tokio::task::spawn_blocking(move || build_dir.build(&names)).await;
    if let Some(err) = match built {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(e) => Some(e.to_string()),
    } {
        let _ = env.updates.send(AllocClientUpdate {
            id: alloc.id.clone(),
            client_status: ALLOC_CLIENT_FAILED.into(),
            client_description: format!("failed to build allocation directory: {err}"),
            task_states: None,
            modify_time: drover_structs::time::now_nanos(),
            deployment_status: health.alloc_failed(),
            network_status: None,
        });
        let _ = done_tx.send(true);
        return;
    }
    let mut states: BTreeMap<String, TaskState> = BTreeMap::new();
    let resumed_running = prior.values().any(|s| s.state == TASK_STATE_RUNNING);
    // The allocation's own network comes first (Nomad's network hook runs before the CSI
    // hook): bridge mode's namespace, which every task joins.
    let network = match make_network(&env, &alloc, &group, resumed_running).await {
        Ok(n) => n,
        Err(err) => {
            prerun_failed(&env, &alloc, &group, &prior, &mut health, "network", &err);
            let _ = done_tx.send(true);
            return;
        }
    };
    // Mesh certificates and proxy configurations, written before any task starts.
    let secrets_of = |task: &str| dir.task_dir(task).ok().map(|d| d.secrets_dir.clone());
    let mesh = match crate::mesh::prepare(
        env.mesh_server.as_ref(),
        &env.node.id,
        alloc.clone(),
        &group,
        secrets_of,
    )
    .await
    {
        Ok(m) => m,
        Err(err) => {
            prerun_failed(&env, &alloc, &group, &prior, &mut health, "connect", &err);
            release_network(&env, &alloc, &group, network.as_ref()).await;
            let _ = done_tx.send(true);
            return;
        }
    };
    let network_status = network.as_ref().map(|n| n.status.clone());
    // Tasks see the allocation's address (`NOMAD_ALLOC_IP_*`) through its network status.
    let alloc = match &network_status {
        Some(status) => Arc::new(Allocation {
            network_status: Some(Box::new(status.clone())),
            ..(*alloc).clone()
        }),
        None => alloc,
    };
    // Group volumes are mounted before any task starts (Nomad's csi_hook, a pre-run hook).
    // Boxed: its future (8 KB) would otherwise be part of this one for the allocation's whole
    // life, with or without volumes (BENCHMARKS.md, issue 18).
    let mounted = match Box::pin(mount_csi_volumes(
        &env,
        &alloc,
        &group,
        stop_rx.clone(),
        resumed_running,
    ))
    .await
    {
        Ok(m) => m,
        Err(err) if resumed_running => {
            // Tasks resumed after an agent restart run on with the binds they have; the
            // servers' volume watcher releases the claims once the allocation ends.
            tracing::warn!(alloc = %alloc.id, error = %err, "re-mounting CSI volumes after a restart");
            Vec::new()
        }
        Err(err) if err.contains(volumes::CLAIM_STOPPED) => {
            // Stopped before it could start: nothing ran, nothing failed.
            for task in &group.tasks {
                let mut s = prior.get(&task.name).cloned().unwrap_or_default();
                s.state = TASK_STATE_DEAD.into();
                states.insert(task.name.clone(), s);
            }
            let _ = env.updates.send(AllocClientUpdate {
                id: alloc.id.clone(),
                client_status: ALLOC_CLIENT_COMPLETE.into(),
                client_description: err,
                task_states: Some(states),
                modify_time: drover_structs::time::now_nanos(),
                deployment_status: health.reported(),
                network_status: None,
            });
            release_network(&env, &alloc, &group, network.as_ref()).await;
            let _ = done_tx.send(true);
            return;
        }
        Err(err) => {
            prerun_failed(&env, &alloc, &group, &prior, &mut health, "csi_hook", &err);
            release_network(&env, &alloc, &group, network.as_ref()).await;
            let _ = done_tx.send(true);
            return;
        }
    };
    let mut task_binds: Vec<std::path::PathBuf> = Vec::new();
    let (task_tx, mut task_rx) = mpsc::unbounded_channel::<TaskStateUpdate>();
    let mut kills: BTreeMap<String, watch::Sender<Option<KillReason>>> = BTreeMap::new();
    // Which lifecycle stages may start now (prestart, main, poststart, poststop).
    let mut coordinator = Coordinator::new(&group.tasks);

    for task in &group.tasks {
        let prior_state = prior.get(&task.name).cloned();
        if let Some(s) = &prior_state
            && s.state == TASK_STATE_DEAD
        {
            // Finished before the agent restarted: nothing to run.
            states.insert(task.name.clone(), s.clone());
            continue;
        }
        let Some(driver) = env.drivers.get(&task.driver).cloned() else {
            let mut s = prior_state.unwrap_or_default();
            let mut ev = TaskEvent::new(TASK_EVENT_DRIVER_FAILURE);
            ev.driver_error = format!("driver {:?} is not available on this node", task.driver);
            ev.display_message = ev.default_display_message();
            s.events.push(ev);
            s.state = TASK_STATE_DEAD.into();
            s.failed = true;
            states.insert(task.name.clone(), s);
            continue;
        };
        let task_dir = match dir.task_dir(&task.name) {
            Ok(d) => d,
            Err(e) => {
                let mut s = TaskState::default();
                let mut ev = TaskEvent::new(TASK_EVENT_SETUP_FAILURE);
                ev.setup_error = e.to_string();
                ev.display_message = ev.default_display_message();
                s.events.push(ev);
                s.state = TASK_STATE_DEAD.into();
                s.failed = true;
                states.insert(task.name.clone(), s);
                continue;
            }
        };
        let ctx = TaskContext {
            alloc: alloc.clone(),
            group: group.clone(),
            task: task.clone(),
            node: env.node.clone(),
            region: env.region.clone(),
            driver,
            task_dir,
            alloc_path: dir.path().to_path_buf(),
            log_dir: dir.log_dir(),
            db: env.db.clone(),
            live: live.clone(),
            csi: env.csi.clone(),
            binds: volumes::task_binds(task, &mounted),
            driver_events: env.driver_events.clone(),
            agent_env: env.agent_env.clone(),
            artifact: env.artifact.clone(),
            network: network.as_ref().map(|n| drover_abi::NetworkIsolation {
                path: n.netns.clone(),
                labels: n.labels.clone(),
            }),
            catalog: env.catalog.clone(),
        };
        task_binds.extend(
            ctx.binds.iter().map(|b| {
                crate::csi::host_mounts::path_in_task_dir(&ctx.task_dir.dir, &b.destination)
            }),
        );
        let (kill_tx, kill_rx) = watch::channel(None);
        kills.insert(task.name.clone(), kill_tx);
        states.insert(
            task.name.clone(),
            prior_state.clone().unwrap_or_else(|| TaskState {
                state: TASK_STATE_PENDING.into(),
                ..Default::default()
            }),
        );
        let recovered = handles.remove(&task.name);
        let recovering = recovered.is_some();
        let mut runner = TaskRunner::new(ctx, prior_state, recovered, task_tx.clone());
        health
            .task_events
            .insert(task.name.clone(), runner.outside_events());
        if let Some(rx) = commands.remove(&task.name) {
            runner = runner.with_commands(rx);
        }
        // A task taken back after an agent restart already runs: no gate to wait for.
        let gate = (!recovering).then(|| coordinator.gate(lifecycle::stage_of(task)));
        tokio::spawn(lifecycle::run_when_allowed(Box::new(runner), gate, kill_rx));
    }
    if prior.is_empty() {
        coordinator.task_states_updated(&states);
    } else {
        coordinator.restore(&states);
    }
    drop(task_tx);
    // Tasks without a runner run nothing: dropping their commands answers them so.
    drop(commands);
    // The checks run from here until the allocation stops (Nomad's checks hook: from
    // prerun to prekill); dropping `checks_stop` at the end ends them too, and the mesh
    // files' upkeep with them.
    let (runs_tx, runs_rx) = watch::channel(task_runs(&states));
    let (checks_stop, checks_stopped) = watch::channel(false);
    if let Some(files) = mesh {
        tokio::spawn(crate::mesh::keep(
            files,
            env.mesh_server.clone(),
            checks_stopped.clone(),
        ));
    }
    let mut checks_changed = checks.results.subscribe();
    if !group_checks.is_empty() {
        let env = CheckEnv {
            alloc: alloc.clone(),
            node: env.node.clone(),
            live: live.clone(),
            control: checks.control.clone(),
            results: checks.results.clone(),
            runs: runs_rx,
        };
        checks::start(env, group_checks.clone(), checks_stopped);
    }

    type Sent = (
        String,
        BTreeMap<String, TaskState>,
        Option<AllocDeploymentStatus>,
    );
    let mut last_sent: Option<Sent> = None;
    let mut stopping = false;
    // The kill phases still to send once the tasks of the current one are dead.
    let mut killing = lifecycle::Killing::default();
    let group_delay =
        std::time::Duration::from_nanos(group.shutdown_delay.unwrap_or(0).max(0) as u64);
    let mut commands_closed = false;
    loop {
        runs_tx.send_if_modified(|runs| {
            let now = task_runs(&states);
            let changed = *runs != now;
            *runs = now;
            changed
        });
        if stopping {
            checks_stop.send_if_modified(|stopped| !std::mem::replace(stopped, true));
        }
        health.check(&alloc.id, &group.tasks, &mut states);
        let (status, desc) = client_status(&states);
        let sent = (status.to_string(), states.clone(), health.reported());
        if last_sent.as_ref() != Some(&sent) {
            let _ = env.updates.send(AllocClientUpdate {
                id: alloc.id.clone(),
                client_status: status.into(),
                client_description: desc.into(),
                task_states: Some(states.clone()),
                modify_time: drover_structs::time::now_nanos(),
                deployment_status: health.reported(),
                network_status: network_status.clone(),
            });
            last_sent = Some(sent);
        }
        if states.values().all(|s| s.state == TASK_STATE_DEAD) {
            break;
        }
        tokio::select! {
            update = task_rx.recv() => {
                let Some(update) = update else { break };
                let (name, mut state) = *update;
                health.keep_events(&name, &mut state);
                states.insert(name, state);
                if !stopping && let Some(reason) = lifecycle::kill_reason(&group.tasks, &states) {
                    stopping = true;
                    killing = lifecycle::Killing::after(&group.tasks, &states, reason, group_delay);
                }
                killing.advance(&states, &kills);
                coordinator.task_states_updated(&states);
            }
            changed = stop_rx.changed(), if !stopping && !commands_closed => {
                // The client dropped its handle (the agent is exiting): no more commands, and
                // the tasks keep running to be recovered on restart, as Nomad leaves them.
                if changed.is_err() {
                    commands_closed = true;
                } else if *stop_rx.borrow() {
                    stopping = true;
                    // Stopped by the servers: no health to set (Nomad's tracker stops).
                    health.abandon();
                    killing = lifecycle::Killing::after(
                        &group.tasks, &states, KillReason::Stop, group_delay,
                    );
                    killing.advance(&states, &kills);
                }
            }
            // A check's result changed: the health may be decided now.
            changed = checks_changed.changed(), if health.uses_checks() => {
                if changed.is_ok() {
                    health.checks_changed(&group_checks, &checks.results);
                }
            }
            // Time to decide the allocation's health again (min_healthy_time or
            // healthy_deadline reached).
            _ = tokio::time::sleep_until(
                health.next_check().unwrap_or_else(tokio::time::Instant::now),
            ), if health.next_check().is_some() => {}
            // The group's shutdown_delay is over: the kill goes on.
            _ = tokio::time::sleep_until(
                killing.delayed_until().unwrap_or_else(tokio::time::Instant::now),
            ), if killing.delayed_until().is_some() => {
                killing.advance(&states, &kills);
            }
        }
    }
    // The observers end with `checks_stop`; what they found goes with the allocation.
    drop(checks_stop);
    checks.results.purge();
    if !mounted.is_empty() {
        // Tasks' binds first: the published volume must have no other mount on top of it.
        for target in &task_binds {
            if let Err(e) = crate::csi::host_mounts::unmount(target) {
                tracing::warn!(alloc = %alloc.id, error = %e, "unmounting a task's volume");
            }
        }
        for m in mounted.iter().rev() {
            volumes::unmount_and_release(&env.csi, env.csi_server.as_ref(), m).await;
        }
    }
    // The agent is exiting with the tasks left running: their network stays for the next
    // agent to take back. Otherwise every task ended, and the network goes.
    if !commands_closed || states.values().all(|s| s.state == TASK_STATE_DEAD) {
        release_network(&env, &alloc, &group, network.as_ref()).await;
    }
    let _ = done_tx.send(true);
}

/// Reports the allocation failed because its pre-run hook `hook` failed with `err`: every task
/// dead and failed with Nomad's "Setup Failure" event (`failed to setup alloc: pre-run hook
/// "<hook>" failed: <err>`), the allocation's description the hook's error.
fn prerun_failed(
    env: &RunnerEnv,
    alloc: &Allocation,
    group: &TaskGroup,
    prior: &BTreeMap<String, TaskState>,
    health: &mut HealthTracking,
    hook: &str,
    err: &str,
) {
    let description = format!("pre-run hook \"{hook}\" failed: {err}");
    let mut states = BTreeMap::new();
    for task in &group.tasks {
        let mut s = prior.get(&task.name).cloned().unwrap_or_default();
        let mut ev = TaskEvent::new(TASK_EVENT_SETUP_FAILURE);
        ev.setup_error = format!("failed to setup alloc: {description}");
        ev.fails_task = true;
        ev.display_message = ev.default_display_message();
        s.events.push(ev);
        s.state = TASK_STATE_DEAD.into();
        s.failed = true;
        states.insert(task.name.clone(), s);
    }
    let _ = env.updates.send(AllocClientUpdate {
        id: alloc.id.clone(),
        client_status: ALLOC_CLIENT_FAILED.into(),
        client_description: description,
        task_states: Some(states),
        modify_time: drover_structs::time::now_nanos(),
        deployment_status: health.alloc_failed(),
        network_status: None,
    });
}

/// Makes the allocation's network when its group asks for bridge mode (`None` in host mode).
/// Every task's driver must be able to run in it.
async fn make_network(
    env: &RunnerEnv,
    alloc: &Arc<Allocation>,
    group: &TaskGroup,
    resumed: bool,
) -> Result<Option<crate::network::AllocNetwork>, String> {
    match crate::network::group_mode(group) {
        crate::network::MODE_HOST => return Ok(None),
        crate::network::MODE_BRIDGE => {}
        other => return Err(format!("network mode {other:?} is not supported")),
    }
    let Some(bridge) = env.bridge.clone() else {
        return Err("bridge networking is not available on this node".into());
    };
    for task in &group.tasks {
        let joins = env
            .drivers
            .get(&task.driver)
            .is_some_and(|d| d.capabilities().group_network);
        if !joins {
            return Err(format!(
                "task {:?} uses driver {:?}, which cannot run tasks in the allocation's network namespace",
                task.name, task.driver
            ));
        }
    }
    let alloc = alloc.clone();
    let drivers = crate::network::NetworkDrivers::of_group(group, &env.drivers);
    // The plugins, and a driver's namespace (docker may pull its pause image), may take long:
    // not on the bounded blocking pool.
    crate::driver_calls::run(move || crate::network::setup(&bridge, &alloc, resumed, &drivers))
        .await
        .map_err(|e| format!("setting up the network: {e}"))?
        .map(Some)
}

/// Removes what [`make_network`] made.
async fn release_network(
    env: &RunnerEnv,
    alloc: &Arc<Allocation>,
    group: &TaskGroup,
    network: Option<&crate::network::AllocNetwork>,
) {
    let (Some(_), Some(bridge)) = (network, env.bridge.clone()) else {
        return;
    };
    let drivers = crate::network::NetworkDrivers::of_group(group, &env.drivers);
    let alloc = alloc.clone();
    let _ =
        crate::driver_calls::run(move || crate::network::teardown(&bridge, &alloc, &drivers)).await;
}

/// `${...}` in a check's `text` resolved against the env of task `task` (a task without a
/// name for a group check without one: the allocation's variables).
fn check_env_resolve(
    env: &RunnerEnv,
    alloc: &Allocation,
    group: &TaskGroup,
    dir: &AllocDir,
    task: &str,
    text: &str,
) -> String {
    let unnamed = Task::default();
    let t = group
        .tasks
        .iter()
        .find(|t| t.name == task)
        .unwrap_or(&unnamed);
    let task_dir = dir.task_dir(&t.name).ok();
    let alloc_dir = dir.path().to_path_buf();
    let fallback = alloc_dir.join("alloc");
    let paths = crate::taskenv::TaskPaths {
        alloc_dir: &alloc_dir,
        task_local_dir: task_dir.as_ref().map_or(&fallback, |d| &d.local_dir),
        task_secrets_dir: task_dir.as_ref().map_or(&fallback, |d| &d.secrets_dir),
        task_tmp_dir: task_dir.as_ref().map_or(&fallback, |d| &d.tmp_dir),
    };
    let vars = crate::taskenv::build_env(
        alloc,
        group,
        t,
        &env.node,
        &env.region,
        &paths,
        &BTreeMap::new(),
    );
    let lookup = |name: &str| crate::taskenv::lookup_in(name, &vars, &env.node, &env.region);
    crate::interpolate::interpolate(text, &lookup)
}

/// What the runner needs of the allocation's checks: their results and the restarts they ask.
struct Checks {
    results: AllocChecks,
    control: AllocControl,
}

/// Which tasks run now, and which run of each (its restart count), for the checks.
fn task_runs(states: &BTreeMap<String, TaskState>) -> TaskRuns {
    states
        .iter()
        .map(|(name, s)| {
            let run = (s.state == TASK_STATE_RUNNING).then_some(s.restarts);
            (name.clone(), run)
        })
        .collect()
}

/// The allocation's deployment health while the runner decides it (Nomad's health hook).
struct HealthTracking {
    /// The group's update strategy while undecided; `None` when not tracked or decided.
    update: Option<UpdateStrategy>,
    /// When tracking began: the healthy deadline runs from here, as Nomad's hook sets it
    /// when it starts watching (also after an agent restart).
    started: i64,
    /// Unix nanoseconds of the next decision due with no task state change.
    next_check: Option<i64>,
    /// What the allocation reports: the stored status (health decided before an agent
    /// restart, or the servers' canary mark) until decided here.
    status: Option<AllocDeploymentStatus>,
    /// Where each task runner takes events from outside.
    task_events: BTreeMap<String, crate::task_runner::OutsideEvents>,
    /// "Alloc Unhealthy" events given to task runners that have not reported them back yet.
    unreported: BTreeMap<String, TaskEvent>,
    /// What the checks say while the health waits on them (`health_check = "checks"` and
    /// the allocation has a healthiness check); `NotUsed` otherwise.
    checks: alloc_health::Checks,
}

impl HealthTracking {
    fn new(
        alloc: &Allocation,
        group: &TaskGroup,
        group_checks: &[(String, drover_structs::service_check::GroupCheck)],
    ) -> HealthTracking {
        let update = alloc_health::tracked_strategy(alloc, group).cloned();
        let by_checks = update
            .as_ref()
            .is_some_and(|u| u.health_check == alloc_health::HEALTH_CHECK_CHECKS);
        let checks = match checks::checks_health(group_checks, &BTreeMap::new()) {
            Some(_) if by_checks => alloc_health::Checks::NotPassing,
            _ => alloc_health::Checks::NotUsed,
        };
        HealthTracking {
            update,
            checks,
            started: drover_structs::time::now_nanos(),
            next_check: None,
            status: alloc.deployment_status.as_deref().cloned(),
            task_events: BTreeMap::new(),
            unreported: BTreeMap::new(),
        }
    }

    /// Whether the decision waits on the checks.
    fn uses_checks(&self) -> bool {
        self.update.is_some() && self.checks != alloc_health::Checks::NotUsed
    }

    /// Follows a change of the checks' results: since when they all pass, if they do.
    fn checks_changed(
        &mut self,
        group_checks: &[(String, drover_structs::service_check::GroupCheck)],
        results: &AllocChecks,
    ) {
        if !self.uses_checks() {
            return;
        }
        let passing = checks::checks_health(group_checks, &results.results()).unwrap_or(false);
        self.checks = match (passing, self.checks) {
            (true, alloc_health::Checks::Passing { since }) => {
                alloc_health::Checks::Passing { since }
            }
            (true, _) => alloc_health::Checks::Passing {
                since: drover_structs::time::now_nanos(),
            },
            (false, _) => alloc_health::Checks::NotPassing,
        };
    }

    /// Stops tracking without a decision.
    fn abandon(&mut self) {
        self.update = None;
        self.next_check = None;
    }

    /// The status to report when the allocation failed before any task ran: unhealthy, with
    /// no task to blame (Nomad's tracker on a failed allocation).
    fn alloc_failed(&mut self) -> Option<AllocDeploymentStatus> {
        if self.update.take().is_some() {
            let now = drover_structs::time::now_nanos();
            self.status = Some(alloc_health::decided_status(
                self.status.as_ref(),
                false,
                now,
            ));
        }
        self.reported()
    }

    /// The deployment status for the client update: only once the health is decided (here or
    /// before an agent restart); the servers' own marks are theirs until then.
    fn reported(&self) -> Option<AllocDeploymentStatus> {
        self.status.clone().filter(|s| s.healthy.is_some())
    }

    fn next_check(&self) -> Option<tokio::time::Instant> {
        let at = self.next_check?;
        let wait = at.saturating_sub(drover_structs::time::now_nanos()).max(0);
        Some(tokio::time::Instant::now() + std::time::Duration::from_nanos(wait as u64))
    }

    /// Decides the health if it can be now; once decided, tracking ends (a later restart of
    /// a task changes nothing, as with Nomad's tracker).
    fn check(&mut self, alloc_id: &str, tasks: &[Task], states: &mut BTreeMap<String, TaskState>) {
        let Some(update) = &self.update else { return };
        let now = drover_structs::time::now_nanos();
        match alloc_health::decide_with_checks(
            update,
            tasks,
            states,
            self.started,
            now,
            self.checks,
        ) {
            Health::Pending { next_check } => self.next_check = Some(next_check),
            Health::Healthy { at } => {
                tracing::info!(alloc = %alloc_id, "allocation is healthy");
                self.status = Some(alloc_health::decided_status(self.status.as_ref(), true, at));
                self.abandon();
            }
            Health::Unhealthy { reason, events } => {
                tracing::info!(alloc = %alloc_id, %reason, "allocation is unhealthy");
                self.status = Some(alloc_health::decided_status(
                    self.status.as_ref(),
                    false,
                    now,
                ));
                self.abandon();
                for (task, ev) in events {
                    // The task runner records the event as its own; until it reports it
                    // back (or if it is done), the report carries it.
                    let delivered = self
                        .task_events
                        .get(&task)
                        .is_some_and(|tx| tx.send(Box::new(ev.clone())).is_ok());
                    if let Some(s) = states.get_mut(&task) {
                        alloc_health::push_event(s, ev.clone());
                    }
                    if delivered {
                        self.unreported.insert(task, ev);
                    }
                }
            }
        }
    }

    /// Keeps the "Alloc Unhealthy" event in a task's state until the task runner reports it.
    fn keep_events(&mut self, task: &str, state: &mut TaskState) {
        let Some(ev) = self.unreported.get(task) else {
            return;
        };
        if state.events.contains(ev) {
            self.unreported.remove(task);
        } else {
            alloc_health::push_event(state, ev.clone());
        }
    }
}

/// Claims, stages and publishes the group's CSI volumes.
async fn mount_csi_volumes(
    env: &RunnerEnv,
    alloc: &Allocation,
    group: &TaskGroup,
    stop: watch::Receiver<bool>,
    resumed_running: bool,
) -> Result<Vec<MountedVolume>, String> {
    let wanted = volumes::group_csi_volumes(group, alloc)?;
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    // While a claim waits (a writer still holds the volume, no healthy controller), the
    // allocation stays pending and its client description says why. Tasks resumed after an
    // agent restart are running already: they are not made pending again.
    let (updates, id) = (env.updates.clone(), alloc.id.clone());
    let report = move |why: &str| {
        if resumed_running {
            return;
        }
        let _ = updates.send(AllocClientUpdate {
            id: id.clone(),
            client_status: ALLOC_CLIENT_PENDING.into(),
            client_description: why.to_string(),
            task_states: None,
            modify_time: drover_structs::time::now_nanos(),
            deployment_status: None,
            network_status: None,
        });
    };
    let mut wait = volumes::ClaimWait {
        report: &report,
        stop,
    };
    volumes::mount_all(&env.csi, env.csi_server.as_ref(), alloc, &wanted, &mut wait).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(state: &str, failed: bool) -> TaskState {
        TaskState {
            state: state.into(),
            failed,
            ..Default::default()
        }
    }

    #[test]
    fn client_status_follows_nomads_precedence() {
        let mut m = BTreeMap::new();
        m.insert("a".to_string(), st(TASK_STATE_RUNNING, false));
        m.insert("b".to_string(), st(TASK_STATE_PENDING, false));
        assert_eq!(client_status(&m).0, ALLOC_CLIENT_RUNNING);
        m.insert("c".to_string(), st(TASK_STATE_DEAD, true));
        assert_eq!(client_status(&m).0, ALLOC_CLIENT_FAILED);
        let mut done = BTreeMap::new();
        done.insert("a".to_string(), st(TASK_STATE_DEAD, false));
        assert_eq!(
            client_status(&done),
            (ALLOC_CLIENT_COMPLETE, "All tasks have completed")
        );
    }
}
