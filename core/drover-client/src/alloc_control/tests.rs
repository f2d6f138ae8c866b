//! Signals and restarts through a real allocation runner and task runners, over a fake driver
//! whose tasks run until stopped.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use drover_abi::{
    Capabilities, DRIVER_API_VERSION, Driver, DriverError, ExitResult, Fingerprint, FsIsolation,
    HealthState, PluginInfo, TaskConfig, TaskHandle, TaskStatus,
};
use drover_structs::*;
use tokio::sync::mpsc;

use super::*;
use crate::alloc_runner::{self, AllocRunnerHandle};
use crate::test_env::{TempDir, runner_env};

/// Tasks that run until stopped; signals are recorded, not delivered.
#[derive(Default)]
struct Forever {
    /// Exit of each task started, `None` while it runs; by driver task id.
    tasks: Mutex<BTreeMap<String, Option<ExitResult>>>,
    exited: Condvar,
    /// (task name, signal) of every signal sent, in order.
    signals: Mutex<Vec<(String, String)>>,
    /// Task names in start order.
    starts: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The task name inside a driver task id (`<alloc>/<task>/<suffix>`).
fn task_name(task_id: &str) -> String {
    task_id.split('/').nth(1).unwrap_or_default().to_string()
}

impl Driver for Forever {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: "forever".into(),
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
        lock(&self.tasks).insert(config.id.clone(), None);
        lock(&self.starts).push(config.name.clone());
        Ok(TaskHandle {
            version: 1,
            driver: "forever".into(),
            config: config.clone(),
            state: serde_json::Value::Null,
        })
    }
    fn wait_task(&self, id: &str, timeout: Duration) -> Result<Option<ExitResult>, DriverError> {
        let tasks = lock(&self.tasks);
        let (tasks, _) = self
            .exited
            .wait_timeout_while(tasks, timeout, |t| matches!(t.get(id), Some(None)))
            .unwrap_or_else(PoisonError::into_inner);
        match tasks.get(id) {
            Some(exit) => Ok(exit.clone()),
            None => Err(DriverError::TaskNotFound(id.into())),
        }
    }
    fn stop_task(&self, id: &str, _: Duration, signal: &str) -> Result<(), DriverError> {
        let mut tasks = lock(&self.tasks);
        let exit = tasks
            .get_mut(id)
            .ok_or_else(|| DriverError::TaskNotFound(id.into()))?;
        exit.get_or_insert(ExitResult {
            exit_code: 0,
            signal: drover_abi::signal_number(signal).unwrap_or(0),
            ..Default::default()
        });
        self.exited.notify_all();
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
    fn signal_task(&self, id: &str, signal: &str) -> Result<(), DriverError> {
        if !matches!(lock(&self.tasks).get(id), Some(None)) {
            return Err(DriverError::Other(format!("task {id} has exited")));
        }
        lock(&self.signals).push((task_name(id), signal.to_string()));
        Ok(())
    }
}

/// One allocation of a service job whose group "g" runs `tasks` on [`Forever`], with a restart
/// policy that allows no restarts at all.
struct Harness {
    driver: Arc<Forever>,
    runner: AllocRunnerHandle,
    updates: mpsc::UnboundedReceiver<AllocClientUpdate>,
    /// The newest task states reported.
    states: BTreeMap<String, TaskState>,
    _dir: TempDir,
}

impl Harness {
    fn start(tasks: &[&str]) -> Harness {
        let dir = TempDir::new("alloc-control");
        let driver = Arc::new(Forever::default());
        let (env, updates) = runner_env(&dir, "forever", Arc::clone(&driver) as Arc<dyn Driver>);
        let group = TaskGroup {
            name: "g".into(),
            restart_policy: Some(RestartPolicy {
                attempts: 0,
                interval: 60_000_000_000,
                delay: 0,
                mode: RESTART_MODE_FAIL.into(),
            }),
            tasks: tasks
                .iter()
                .map(|name| Task {
                    name: name.to_string(),
                    driver: "forever".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let job = Job {
            id: "j".into(),
            job_type: JOB_TYPE_SERVICE.into(),
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
        let runner = alloc_runner::start(env, Arc::new(alloc), BTreeMap::new(), BTreeMap::new())
            .expect("the allocation starts");
        Harness {
            driver,
            runner,
            updates,
            states: BTreeMap::new(),
            _dir: dir,
        }
    }

    /// Reads status reports until the task states satisfy `cond`.
    async fn until(&mut self, what: &str, cond: impl Fn(&BTreeMap<String, TaskState>) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond(&self.states) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.updates.recv()).await {
                Ok(Some(update)) => {
                    if let Some(states) = update.task_states {
                        self.states = states;
                    }
                }
                Ok(None) => panic!("the allocation runner ended before {what}"),
                Err(_) => panic!("timed out waiting for {what}; states: {:#?}", self.states),
            }
        }
    }

    async fn until_running(&mut self, tasks: &[&str]) {
        self.until("the tasks to run", |s| {
            tasks
                .iter()
                .all(|t| s.get(*t).is_some_and(|s| s.state == TASK_STATE_RUNNING))
        })
        .await;
    }

    /// Stops the allocation, so no blocking wait of the driver outlives the test's runtime.
    async fn stop(&mut self) {
        self.runner.stop();
        self.runner.wait_done().await;
    }

    fn signals(&self) -> Vec<(String, String)> {
        lock(&self.driver.signals).clone()
    }

    fn starts(&self) -> Vec<String> {
        lock(&self.driver.starts).clone()
    }
}

fn event_types(state: &TaskState) -> Vec<&str> {
    state.events.iter().map(|e| e.event_type.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_reaches_the_drivers_running_task_and_is_recorded_as_a_signaling_event() {
    let mut h = Harness::start(&["web", "side"]);
    h.until_running(&["web", "side"]).await;

    h.runner
        .control
        .signal(Some("web"), "usr1")
        .await
        .expect("the signal is sent");
    assert_eq!(h.signals(), [("web".to_string(), "SIGUSR1".to_string())]);
    h.until("the Signaling event", |s| {
        s["web"]
            .events
            .iter()
            .any(|e| e.event_type == TASK_EVENT_SIGNALING)
    })
    .await;
    let event = h.states["web"]
        .events
        .iter()
        .find(|e| e.event_type == TASK_EVENT_SIGNALING)
        .cloned()
        .expect("until found it");
    assert_eq!(event.display_message, "Task being sent a signal");
    assert_eq!(event.details["signal"], "SIGUSR1");
    assert!(
        !event_types(&h.states["side"]).contains(&TASK_EVENT_SIGNALING),
        "only the named task is signalled"
    );

    // No task named: every task; no signal named: SIGINT.
    h.runner
        .control
        .signal(None, "")
        .await
        .expect("sent to all");
    let mut sent = h.signals();
    sent.sort();
    assert_eq!(
        sent,
        [
            ("side".to_string(), "SIGINT".to_string()),
            ("web".to_string(), "SIGINT".to_string()),
            ("web".to_string(), "SIGUSR1".to_string()),
        ]
    );
    assert_eq!(h.starts().len(), 2, "signals restart nothing");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_to_unknown_tasks_unknown_names_and_unknown_allocs_fail_with_nomads_text() {
    let mut h = Harness::start(&["web"]);
    h.until_running(&["web"]).await;
    let control = &h.runner.control;

    let e = control.signal(Some("nope"), "SIGHUP").await.unwrap_err();
    assert_eq!(e.to_string(), "Task not found");
    let e = control.signal(Some("web"), "SIGFOO").await.unwrap_err();
    assert_eq!(e, AllocControlError::UnknownSignal("SIGFOO".into()));
    assert_eq!(e.to_string(), "unknown signal \"SIGFOO\"");
    assert!(
        h.signals().is_empty(),
        "nothing is sent for a refused request"
    );
    assert_eq!(
        AllocControlError::UnknownAlloc("a1".into()).to_string(),
        "Unknown allocation \"a1\""
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requested_restart_starts_the_task_again_without_using_a_restart_attempt() {
    // The policy allows no restarts: a restart that counted would leave the task dead.
    let mut h = Harness::start(&["web", "side"]);
    h.until_running(&["web", "side"]).await;

    h.runner
        .control
        .restart(Some("web"), false)
        .await
        .expect("the task restarts");
    h.until("web to run again after one restart", |s| {
        s["web"].state == TASK_STATE_RUNNING && s["web"].restarts == 1
    })
    .await;
    let web = &h.states["web"];
    assert!(!web.failed);
    assert!(web.last_restart.is_some());
    let types = event_types(web);
    let at = types
        .iter()
        .position(|t| *t == TASK_EVENT_RESTART_SIGNAL)
        .expect("a Restart Signaled event");
    assert_eq!(
        types[at..],
        [
            TASK_EVENT_RESTART_SIGNAL,
            TASK_EVENT_TERMINATED,
            TASK_EVENT_RESTARTING,
            TASK_EVENT_STARTED
        ]
    );
    assert_eq!(
        web.events[at].restart_reason,
        "User requested task to restart"
    );
    assert_eq!(
        web.events[at].display_message,
        "User requested task to restart"
    );
    assert_eq!(web.events[at + 2].display_message, "Task restarting in 0s");
    assert_eq!(h.states["side"].restarts, 0, "only the named task restarts");
    let starts = h.starts();
    assert_eq!(
        (starts.len(), starts.iter().filter(|t| *t == "web").count()),
        (3, 2),
        "{starts:?}"
    );

    // Again: attempts are still not used up.
    h.runner
        .control
        .restart(Some("web"), false)
        .await
        .expect("restarts again");
    h.until("the second restart", |s| {
        s["web"].state == TASK_STATE_RUNNING && s["web"].restarts == 2
    })
    .await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_the_allocation_restarts_its_running_tasks_and_refuses_once_it_stops() {
    let mut h = Harness::start(&["web", "side"]);
    h.until_running(&["web", "side"]).await;

    let e = h
        .runner
        .control
        .restart(Some("web"), true)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "task name cannot be set when restarting all tasks"
    );
    let e = h
        .runner
        .control
        .restart(Some("nope"), false)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Could not find task runner for task: nope");

    h.runner
        .control
        .restart(None, false)
        .await
        .expect("restarts both");
    h.until("both tasks restarted once", |s| {
        ["web", "side"]
            .iter()
            .all(|t| s[*t].state == TASK_STATE_RUNNING && s[*t].restarts == 1)
    })
    .await;
    let reason = h.states["side"]
        .events
        .iter()
        .find(|e| e.event_type == TASK_EVENT_RESTART_SIGNAL)
        .map(|e| e.restart_reason.clone());
    assert_eq!(reason.as_deref(), Some(REASON_RESTART_RUNNING));

    h.stop().await;
    let e = h.runner.control.restart(None, true).await.unwrap_err();
    assert_eq!(e, AllocControlError::AllocNotRunning);
    assert_eq!(e.to_string(), "restart of an alloc that should not run");
    let e = h
        .runner
        .control
        .restart(Some("web"), false)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Task not running");
    let e = h.runner.control.signal(None, "SIGHUP").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "2 errors occurred:\n\t* Failed to signal task: side, err: Task not running\n\t\
         * Failed to signal task: web, err: Task not running\n\n"
    );
    let e = h
        .runner
        .control
        .signal(Some("web"), "SIGHUP")
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Task not running");
}

#[test]
fn one_failure_reads_as_nomads_single_error_text() {
    let e = AllocControlError::Tasks(drover_structs::multierror::MultiError {
        errors: vec!["failed to restart task web: boom".into()],
    });
    assert_eq!(
        e.to_string(),
        "1 error occurred:\n\t* failed to restart task web: boom\n\n"
    );
}
