//! Template `change_mode = "script"` through a real allocation runner and task runner, over a
//! fake driver whose tasks run until stopped and whose exec answers a set exit code.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use drover_abi::{
    Capabilities, DRIVER_API_VERSION, Driver, DriverError, ExecOutput, ExitResult, Fingerprint,
    FsIsolation, HealthState, PluginInfo, TaskConfig, TaskHandle, TaskStatus,
};
use drover_structs::*;
use serde_json::json;
use tokio::sync::mpsc;

use crate::alloc_runner::{self, AllocRunnerHandle};
use crate::test_env::{TempDir, runner_env};

/// Tasks that run until stopped; each exec is recorded and answers `exit_code`.
#[derive(Default)]
struct Execs {
    tasks: Mutex<BTreeMap<String, Option<ExitResult>>>,
    exited: Condvar,
    task_dir: Mutex<Option<PathBuf>>,
    execs: Mutex<Vec<(Vec<String>, Duration)>>,
    exit_code: Mutex<i32>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Driver for Execs {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: "execs".into(),
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
            exec: true,
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
        *lock(&self.task_dir) = Some(config.task_dir.clone());
        Ok(TaskHandle {
            version: 1,
            driver: "execs".into(),
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
    fn stop_task(&self, id: &str, _: Duration, _: &str) -> Result<(), DriverError> {
        let mut tasks = lock(&self.tasks);
        let exit = tasks
            .get_mut(id)
            .ok_or_else(|| DriverError::TaskNotFound(id.into()))?;
        exit.get_or_insert(ExitResult {
            exit_code: 0,
            signal: 15,
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
    fn exec_task(
        &self,
        _: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        lock(&self.execs).push((command.to_vec(), timeout));
        Ok(ExecOutput {
            stdout: Vec::new(),
            stderr: Vec::new(),
            exit_code: *lock(&self.exit_code),
        })
    }
}

struct Harness {
    driver: Arc<Execs>,
    runner: AllocRunnerHandle,
    updates: mpsc::UnboundedReceiver<AllocClientUpdate>,
    task: TaskState,
    _dir: TempDir,
}

impl Harness {
    /// Task "t" with a noop template writing `local/app.tpl` and a script template rendering
    /// it into `local/app.conf`, with `change_script`.
    fn start(change_script: serde_json::Value, exit_code: i32) -> Harness {
        let dir = TempDir::new("template-script");
        let driver = Arc::new(Execs::default());
        *lock(&driver.exit_code) = exit_code;
        let (env, updates) = runner_env(&dir, "execs", Arc::clone(&driver) as Arc<dyn Driver>);
        let task = Task {
            name: "t".into(),
            driver: "execs".into(),
            templates: Some(json!([
                { "EmbeddedTmpl": "v1", "DestPath": "local/app.tpl", "ChangeMode": "noop" },
                { "SourcePath": "local/app.tpl", "DestPath": "local/app.conf",
                  "ChangeMode": "script", "Splay": 0, "ChangeScript": change_script },
            ])),
            ..Default::default()
        };
        let group = TaskGroup {
            name: "g".into(),
            restart_policy: Some(RestartPolicy {
                attempts: 0,
                interval: 60_000_000_000,
                delay: 0,
                mode: RESTART_MODE_FAIL.into(),
            }),
            tasks: vec![task],
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
            task: TaskState::default(),
            _dir: dir,
        }
    }

    async fn until(&mut self, what: &str, cond: impl Fn(&TaskState) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !cond(&self.task) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.updates.recv()).await {
                Ok(Some(update)) => {
                    if let Some(mut states) = update.task_states
                        && let Some(t) = states.remove("t")
                    {
                        self.task = t;
                    }
                }
                Ok(None) => panic!("the allocation runner ended before {what}"),
                Err(_) => panic!("timed out waiting for {what}; state: {:#?}", self.task),
            }
        }
    }

    /// Runs the task and changes the script template's source.
    async fn change_the_source(&mut self) {
        self.until("the task to run", |s| s.state == TASK_STATE_RUNNING)
            .await;
        let dir = lock(&self.driver.task_dir)
            .clone()
            .expect("the task started");
        std::fs::write(dir.join("local/app.tpl"), "v2").expect("change the source");
    }

    fn event<'a>(&'a self, event_type: &str) -> Option<&'a TaskEvent> {
        self.task.events.iter().find(|e| e.event_type == event_type)
    }

    async fn stop(&mut self) {
        self.runner.stop();
        self.runner.wait_done().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_script_template_runs_its_script_in_the_task_with_its_timeout() {
    let mut h = Harness::start(
        json!({ "Command": "/bin/reload", "Args": ["-v", "now"], "Timeout": 7_000_000_000i64 }),
        0,
    );
    h.change_the_source().await;
    h.until("the script's event", |s| {
        s.events.iter().any(|e| e.event_type == "Task hook message")
    })
    .await;
    assert_eq!(
        h.event("Task hook message")
            .map(|e| e.display_message.as_str()),
        Some("Template successfully ran script /bin/reload with arguments: [-v now]. Exit code: 0")
    );
    assert_eq!(
        lock(&h.driver.execs).clone(),
        vec![(
            vec!["/bin/reload".to_string(), "-v".into(), "now".into()],
            Duration::from_secs(7)
        )]
    );
    assert_eq!(h.task.state, TASK_STATE_RUNNING);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_script_without_fail_on_error_only_says_so() {
    let mut h = Harness::start(json!({ "Command": "/bin/reload" }), 2);
    h.change_the_source().await;
    h.until("the hook failed event", |s| {
        s.events.iter().any(|e| e.event_type == "Task hook failed")
    })
    .await;
    assert_eq!(
        h.event("Task hook failed")
            .map(|e| e.display_message.as_str()),
        Some(
            "Template ran script /bin/reload with arguments [] on change but it exited with code: 2"
        )
    );
    assert!(h.event(TASK_EVENT_KILLING).is_none(), "{:#?}", h.task);
    assert_eq!(h.task.state, TASK_STATE_RUNNING);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_script_with_fail_on_error_kills_the_task_failing_it() {
    let mut h = Harness::start(json!({ "Command": "/bin/reload", "FailOnError": true }), 1);
    h.change_the_source().await;
    h.until("the task to be dead", |s| s.state == TASK_STATE_DEAD)
        .await;
    assert!(h.task.failed, "{:#?}", h.task);
    assert!(h.event("Task hook failed").is_some(), "{:#?}", h.task);
    let killing = h.event(TASK_EVENT_KILLING).expect("a Killing event");
    assert!(killing.fails_task);
    assert_eq!(
        killing.display_message,
        "Template script failed, task is being killed"
    );
    h.stop().await;
}
