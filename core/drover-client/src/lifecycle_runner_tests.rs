//! Lifecycle through a real allocation runner and task runners, over a fake driver whose tasks
//! exit after `run_ms` (with `exit_code`) or run until stopped.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use drover_abi::{
    Capabilities, DRIVER_API_VERSION, Driver, DriverError, ExitResult, Fingerprint, FsIsolation,
    HealthState, PluginInfo, TaskConfig, TaskHandle, TaskStatus,
};
use drover_structs::*;
use serde_json::json;
use tokio::sync::mpsc;

use crate::alloc_runner::{self, AllocRunnerHandle};
use crate::test_env::{TempDir, runner_env};

struct Running {
    name: String,
    exit: Option<ExitResult>,
    /// When the task exits by itself, with which code.
    ends: Option<(Instant, i32)>,
}

/// Records "start:<task>", "exit:<task>" (by itself) and "stop:<task>" (killed), in order.
#[derive(Default)]
pub(crate) struct Scripted {
    tasks: Mutex<BTreeMap<String, Running>>,
    changed: Condvar,
    log: Mutex<Vec<String>>,
    /// (task, kill timeout, signal) of every stop.
    stops: Mutex<Vec<(String, Duration, String)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Driver for Scripted {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: "scripted".into(),
            plugin_version: "0".into(),
            api_version: DRIVER_API_VERSION.into(),
        }
    }
    fn set_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
        Ok(())
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
            health_description: String::new(),
            attributes: Default::default(),
        }
    }
    fn validate_task_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
        Ok(())
    }
    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let c = &config.driver_config;
        let ends = c.get("run_ms").and_then(|v| v.as_u64()).map(|ms| {
            let code = c.get("exit_code").and_then(|v| v.as_i64()).unwrap_or(0) as i32;
            (Instant::now() + Duration::from_millis(ms), code)
        });
        lock(&self.log).push(format!("start:{}", config.name));
        lock(&self.tasks).insert(
            config.id.clone(),
            Running {
                name: config.name.clone(),
                exit: None,
                ends,
            },
        );
        Ok(TaskHandle {
            version: 1,
            driver: "scripted".into(),
            config: config.clone(),
            state: serde_json::Value::Null,
        })
    }
    fn wait_task(&self, id: &str, timeout: Duration) -> Result<Option<ExitResult>, DriverError> {
        let deadline = Instant::now() + timeout;
        let mut tasks = lock(&self.tasks);
        loop {
            let now = Instant::now();
            let t = tasks
                .get_mut(id)
                .ok_or_else(|| DriverError::TaskNotFound(id.into()))?;
            if let Some(exit) = &t.exit {
                return Ok(Some(exit.clone()));
            }
            if let Some((at, code)) = t.ends
                && at <= now
            {
                lock(&self.log).push(format!("exit:{}", t.name));
                let exit = ExitResult {
                    exit_code: code,
                    ..Default::default()
                };
                t.exit = Some(exit.clone());
                return Ok(Some(exit));
            }
            if now >= deadline {
                return Ok(None);
            }
            let until = t.ends.map_or(deadline, |(at, _)| at.min(deadline));
            tasks = self
                .changed
                .wait_timeout(tasks, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
    fn stop_task(&self, id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        let mut tasks = lock(&self.tasks);
        let t = tasks
            .get_mut(id)
            .ok_or_else(|| DriverError::TaskNotFound(id.into()))?;
        lock(&self.stops).push((t.name.clone(), timeout, signal.to_string()));
        if t.exit.is_none() {
            lock(&self.log).push(format!("stop:{}", t.name));
            t.exit = Some(ExitResult {
                exit_code: 0,
                signal: drover_abi::signal_number(signal).unwrap_or(0),
                ..Default::default()
            });
        }
        self.changed.notify_all();
        Ok(())
    }
    fn destroy_task(&self, _: &str, _: bool) -> Result<(), DriverError> {
        Ok(())
    }
    fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
        Err(DriverError::TaskNotFound(id.into()))
    }
    fn recover_task(&self, _: &TaskHandle) -> Result<(), DriverError> {
        Ok(())
    }
    fn signal_task(&self, _: &str, _: &str) -> Result<(), DriverError> {
        Ok(())
    }
}

/// A task of the scripted driver: `run_ms` = None runs until stopped.
pub(crate) fn task(
    name: &str,
    hook: Option<&str>,
    sidecar: bool,
    run_ms: Option<u64>,
    code: i64,
) -> Task {
    let mut config = serde_json::Map::new();
    if let Some(ms) = run_ms {
        config.insert("run_ms".into(), json!(ms));
        config.insert("exit_code".into(), json!(code));
    }
    Task {
        name: name.into(),
        driver: "scripted".into(),
        lifecycle: hook.map(|h| json!({"Hook": h, "Sidecar": sidecar})),
        config: Some(config),
        ..Default::default()
    }
}

pub(crate) struct Harness {
    pub(crate) driver: Arc<Scripted>,
    pub(crate) runner: AllocRunnerHandle,
    pub(crate) updates: mpsc::UnboundedReceiver<AllocClientUpdate>,
    last: Option<AllocClientUpdate>,
    _dir: TempDir,
}

impl Harness {
    /// One allocation of a batch job whose group runs `tasks`, with no restarts.
    fn start(tasks: Vec<Task>) -> Harness {
        Harness::start_group(tasks, None)
    }

    /// As [`Harness::start`], the group with a `shutdown_delay`.
    fn start_group(tasks: Vec<Task>, shutdown_delay: Option<i64>) -> Harness {
        Harness::start_job(tasks, shutdown_delay, JOB_TYPE_BATCH)
    }

    fn start_job(tasks: Vec<Task>, shutdown_delay: Option<i64>, job_type: &str) -> Harness {
        let group = TaskGroup {
            name: "g".into(),
            restart_policy: Some(RestartPolicy {
                attempts: 0,
                interval: 60_000_000_000,
                delay: 0,
                mode: RESTART_MODE_FAIL.into(),
            }),
            tasks,
            shutdown_delay,
            ..Default::default()
        };
        let job = Job {
            id: "j".into(),
            job_type: job_type.into(),
            task_groups: vec![group],
            ..Default::default()
        };
        let alloc = Allocation {
            id: uuid::Uuid::new_v4().to_string(),
            job_id: "j".into(),
            task_group: "g".into(),
            job: Some(Arc::new(job)),
            ..Default::default()
        };
        Harness::start_alloc(alloc)
    }

    /// Runs `alloc` (whose group's tasks use the scripted driver) from its start.
    pub(crate) fn start_alloc(alloc: Allocation) -> Harness {
        let dir = TempDir::new("lifecycle");
        let driver = Arc::new(Scripted::default());
        let (env, updates) = runner_env(&dir, "scripted", Arc::clone(&driver) as Arc<dyn Driver>);
        let runner = alloc_runner::start(env, Arc::new(alloc), BTreeMap::new(), BTreeMap::new())
            .expect("the allocation starts");
        Harness {
            driver,
            runner,
            updates,
            last: None,
            _dir: dir,
        }
    }

    /// Reads status reports until the allocation runner is done; returns the last one.
    pub(crate) async fn until_done(&mut self) -> AllocClientUpdate {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.runner.is_done() {
                while let Ok(u) = self.updates.try_recv() {
                    self.last = Some(u);
                }
                if let Some(last) = &self.last {
                    return last.clone();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left.min(Duration::from_millis(100)), self.updates.recv())
                .await
            {
                Ok(Some(u)) => self.last = Some(u),
                Ok(None) => {}
                Err(_) if left.is_zero() => {
                    panic!("timed out; log {:?}; last {:#?}", self.log(), self.last)
                }
                Err(_) => {}
            }
        }
    }

    pub(crate) async fn until_log(&mut self, entry: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.log().iter().any(|e| e == entry) {
            assert!(
                Instant::now() < deadline,
                "no {entry:?} in {:?}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub(crate) fn log(&self) -> Vec<String> {
        lock(&self.driver.log).clone()
    }

    fn pos(&self, entry: &str) -> usize {
        self.log()
            .iter()
            .position(|e| e == entry)
            .unwrap_or_else(|| panic!("no {entry:?} in {:?}", self.log()))
    }
}

fn event_types(state: &TaskState) -> Vec<&str> {
    state.events.iter().map(|e| e.event_type.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prestart_runs_before_main_poststop_after_and_the_sidecar_is_stopped_once_main_ends() {
    let mut h = Harness::start(vec![
        task("main", None, false, Some(200), 0),
        task("init", Some("prestart"), false, Some(100), 0),
        task("proxy", Some("prestart"), true, None, 0),
        task("cleanup", Some("poststop"), false, Some(10), 0),
    ]);
    let last = h.until_done().await;
    assert_eq!(last.client_status, ALLOC_CLIENT_COMPLETE, "{:?}", h.log());
    assert!(h.pos("exit:init") < h.pos("start:main"), "{:?}", h.log());
    assert!(h.pos("start:proxy") < h.pos("start:main"), "{:?}", h.log());
    assert!(h.pos("exit:main") < h.pos("stop:proxy"), "{:?}", h.log());
    assert!(
        h.pos("stop:proxy") < h.pos("start:cleanup"),
        "{:?}",
        h.log()
    );
    assert!(h.pos("start:cleanup") < h.pos("exit:cleanup"));
    let states = last.task_states.expect("task states");
    assert!(
        event_types(&states["proxy"]).contains(&TASK_EVENT_MAIN_DEAD),
        "{:?}",
        event_types(&states["proxy"])
    );
    assert!(
        states
            .values()
            .all(|s| s.state == TASK_STATE_DEAD && !s.failed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_prestart_task_fails_the_allocation_and_main_never_starts() {
    let mut h = Harness::start(vec![
        task("init", Some("prestart"), false, Some(50), 3),
        task("main", None, false, Some(50), 0),
        task("cleanup", Some("poststop"), false, Some(10), 0),
    ]);
    let last = h.until_done().await;
    assert_eq!(last.client_status, ALLOC_CLIENT_FAILED);
    assert!(
        !h.log().contains(&"start:main".to_string()),
        "{:?}",
        h.log()
    );
    let states = last.task_states.expect("task states");
    assert!(states["init"].failed);
    assert!(event_types(&states["init"]).contains(&TASK_EVENT_NOT_RESTARTING));
    let main = &states["main"];
    assert_eq!(main.state, TASK_STATE_DEAD);
    assert!(main.started_at.is_none(), "main never ran");
    let sibling = main
        .events
        .iter()
        .find(|e| e.event_type == TASK_EVENT_SIBLING_FAILED)
        .expect("main says why it did not run");
    assert_eq!(sibling.display_message, "Task's sibling \"init\" failed");
    // Poststop still runs after the others are dead, as in Nomad.
    assert!(h.log().contains(&"start:cleanup".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poststart_starts_only_once_main_runs() {
    let mut h = Harness::start(vec![
        task("after", Some("poststart"), false, Some(10), 0),
        task("main", None, false, Some(300), 0),
    ]);
    h.until_log("exit:after").await;
    assert!(h.pos("start:main") < h.pos("start:after"), "{:?}", h.log());
    let last = h.until_done().await;
    assert_eq!(last.client_status, ALLOC_CLIENT_COMPLETE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leader_stops_the_others_with_a_leader_dead_event() {
    let mut leader = task("leader", None, false, Some(50), 0);
    leader.leader = true;
    let mut h = Harness::start(vec![leader, task("worker", None, false, None, 0)]);
    let last = h.until_done().await;
    assert_eq!(last.client_status, ALLOC_CLIENT_COMPLETE);
    assert!(h.pos("exit:leader") < h.pos("stop:worker"));
    let states = last.task_states.expect("task states");
    assert!(event_types(&states["worker"]).contains(&TASK_EVENT_LEADER_DEAD));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_kills_the_leader_first_then_main_tasks_then_sidecars_and_then_runs_poststop() {
    let mut leader = task("leader", None, false, None, 0);
    leader.leader = true;
    let mut h = Harness::start(vec![
        task("proxy", Some("prestart"), true, None, 0),
        task("worker", None, false, None, 0),
        leader,
        task("cleanup", Some("poststop"), false, Some(10), 0),
    ]);
    h.until_log("start:worker").await;
    h.until_log("start:leader").await;
    h.runner.stop();
    let last = h.until_done().await;
    assert!(h.pos("stop:leader") < h.pos("stop:worker"), "{:?}", h.log());
    assert!(h.pos("stop:worker") < h.pos("stop:proxy"), "{:?}", h.log());
    assert!(
        h.pos("stop:proxy") < h.pos("start:cleanup"),
        "{:?}",
        h.log()
    );
    assert_eq!(last.client_status, ALLOC_CLIENT_COMPLETE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_delay_waits_before_the_kill_with_its_event_and_the_kill_uses_signal_and_timeout()
{
    let mut slow = task("slow", None, false, None, 0);
    slow.shutdown_delay = 300_000_000;
    slow.kill_signal = "SIGTERM".into();
    slow.kill_timeout = 3_600_000_000_000;
    let mut h = Harness::start(vec![slow]);
    h.until_log("start:slow").await;
    let asked = Instant::now();
    h.runner.stop();
    let last = h.until_done().await;
    assert!(asked.elapsed() >= Duration::from_millis(300));
    let stops = lock(&h.driver.stops).clone();
    assert_eq!(
        stops,
        vec![(
            "slow".to_string(),
            Duration::from_secs(30),
            "SIGTERM".to_string()
        )],
        "kill_timeout is capped at the client's max_kill_timeout"
    );
    let states = last.task_states.expect("task states");
    let events = &states["slow"].events;
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    let at = |t: &str| types.iter().position(|x| *x == t).expect(t);
    assert!(at(TASK_EVENT_KILLING) < at(TASK_EVENT_WAITING_SHUTDOWN_DELAY));
    assert!(at(TASK_EVENT_WAITING_SHUTDOWN_DELAY) < at(TASK_EVENT_KILLED));
    assert_eq!(
        events[at(TASK_EVENT_WAITING_SHUTDOWN_DELAY)].display_message,
        "Waiting for shutdown_delay of 300ms before killing the task."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_shutdown_delay_holds_every_kill_back() {
    let mut h = Harness::start_group(vec![task("web", None, false, None, 0)], Some(300_000_000));
    h.until_log("start:web").await;
    let asked = Instant::now();
    h.runner.stop();
    h.until_log("stop:web").await;
    assert!(asked.elapsed() >= Duration::from_millis(300));
    let last = h.until_done().await;
    assert_eq!(last.client_status, ALLOC_CLIENT_COMPLETE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_prestart_task_that_succeeds_is_not_started_again() {
    let mut h = Harness::start_job(
        vec![
            task("init", Some("prestart"), false, Some(20), 0),
            task("web", None, false, None, 0),
        ],
        None,
        JOB_TYPE_SERVICE,
    );
    h.until_log("start:web").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let starts = h.log().iter().filter(|e| *e == "start:init").count();
    assert_eq!(starts, 1, "{:?}", h.log());
    h.runner.stop();
    let last = h.until_done().await;
    assert_eq!(last.client_status, ALLOC_CLIENT_COMPLETE);
}
