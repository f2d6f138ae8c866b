//! Task events a driver reports about its tasks (Nomad's `DriverTaskEvent`): "pulling image",
//! "container restarted by the daemon", and so on. A driver calls [`emit`] from anywhere, and
//! whoever listens gets them:
//! - in a cdylib, the driver `export_driver!` hands to the agent (an [`EmittingDriver`]): the
//!   agent asks it for them through the contract's `Driver::task_events`;
//! - in sidecar mode, every agent connected through the `TaskEvents` stream.
//!
//! Either way the agent records each one as the task's event of type "Driver".

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use drover_abi::{
    Capabilities, Driver, DriverError, DriverTaskEvent, ExecOutput, ExitResult, Fingerprint,
    PluginInfo, TaskConfig, TaskHandle, TaskResourceUsage, TaskStatus,
};

/// One event about one task: the contract's type (`TaskEvent::for_task(&config, "message")`).
pub type TaskEvent = DriverTaskEvent;

/// A listener: returns false once it is gone, and is then dropped.
type Sink = Box<dyn Fn(&TaskEvent) -> bool + Send + Sync>;

static SINKS: Mutex<Vec<Sink>> = Mutex::new(Vec::new());

/// Events emitted while nobody listened, for the first listener: an agent's TaskEvents
/// stream may reach a sidecar just after the task it started reported something (the agent
/// does not wait for the stream's answer, which Go plugins send with the first event only).
static UNHEARD: Mutex<VecDeque<TaskEvent>> = Mutex::new(VecDeque::new());
/// How many unheard events are kept; older ones go first.
const UNHEARD_LIMIT: usize = 256;

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Sends `event` to every listener. Returns how many got it; with none (a driver used outside
/// an agent, as in unit tests) it goes to the log at debug level.
pub fn emit(mut event: TaskEvent) -> usize {
    if event.timestamp == 0 {
        event.timestamp = now_nanos();
    }
    let mut sinks = SINKS.lock().unwrap_or_else(PoisonError::into_inner);
    sinks.retain(|sink| sink(&event));
    let delivered = sinks.len();
    if delivered == 0 {
        crate::log::debug(format!(
            "task event for {} (no listener yet): {}",
            event.task_id, event.message
        ));
        // Kept under the sinks' lock, as `listen` takes them under it: none slips between.
        let mut unheard = UNHEARD.lock().unwrap_or_else(PoisonError::into_inner);
        if unheard.len() == UNHEARD_LIMIT {
            unheard.pop_front();
        }
        unheard.push_back(event);
    }
    delivered
}

/// Registers a listener for every event emitted from now on (the sidecar's TaskEvents streams,
/// each [`EmittingDriver`]).
#[doc(hidden)]
pub fn listen(sink: impl Fn(&TaskEvent) -> bool + Send + Sync + 'static) {
    let mut sinks = SINKS.lock().unwrap_or_else(PoisonError::into_inner);
    // Taken under the sinks' lock: an event emitted meanwhile waits for it, so none is seen
    // twice or lost between the two.
    let unheard = std::mem::take(&mut *UNHEARD.lock().unwrap_or_else(PoisonError::into_inner));
    for event in &unheard {
        if !sink(event) {
            return;
        }
    }
    sinks.push(Box::new(sink));
}

/// Events kept for an agent that has not asked yet; beyond this the oldest are dropped, so a
/// host that never asks (one older than task events) costs bounded memory.
const QUEUE_LIMIT: usize = 1024;

/// The emitted events one driver has not handed out yet.
#[derive(Default)]
struct EventQueue {
    events: Mutex<VecDeque<TaskEvent>>,
    arrived: Condvar,
    /// Set once the first event was dropped for lack of room, to log it once.
    overflowed: AtomicBool,
}

impl EventQueue {
    fn push(&self, event: &TaskEvent) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if events.len() >= QUEUE_LIMIT {
            events.pop_front();
            if !self.overflowed.swap(true, Ordering::Relaxed) {
                crate::log::warn(format!(
                    "more than {QUEUE_LIMIT} task events are waiting for the agent; dropping the oldest"
                ));
            }
        }
        events.push_back(event.clone());
        self.arrived.notify_all();
    }

    /// Every event waiting, after waiting up to `max_wait` for the first one.
    fn take(&self, max_wait: Duration) -> Vec<TaskEvent> {
        let deadline = Instant::now().checked_add(max_wait);
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        while events.is_empty() {
            // No deadline: `max_wait` is too long to represent, so wait in long steps.
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                break;
            }
            events = self
                .arrived
                .wait_timeout(events, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        events.drain(..).collect()
    }
}

/// A driver whose `task_events` answers with what it [`emit`]s. `export_driver!` wraps the
/// plugin's driver in it, so a cdylib's events reach the agent; every other method is the
/// driver's own. A driver that implements `task_events` itself keeps those events too: they
/// are added to the emitted ones at each call.
pub struct EmittingDriver<D> {
    driver: D,
    queue: Arc<EventQueue>,
    /// Cleared once the driver's own `task_events` said it has none, to stop asking.
    own_events: AtomicBool,
}

impl<D: Driver> EmittingDriver<D> {
    /// Starts collecting every event emitted in this process from now on.
    pub fn new(driver: D) -> EmittingDriver<D> {
        let queue = Arc::new(EventQueue::default());
        let weak: Weak<EventQueue> = Arc::downgrade(&queue);
        listen(move |event| weak.upgrade().map(|q| q.push(event)).is_some());
        EmittingDriver {
            driver,
            queue,
            own_events: AtomicBool::new(true),
        }
    }

    /// The wrapped driver.
    pub fn inner(&self) -> &D {
        &self.driver
    }
}

impl<D: Driver> Driver for EmittingDriver<D> {
    fn plugin_info(&self) -> PluginInfo {
        self.driver.plugin_info()
    }
    fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        self.driver.set_config(config)
    }
    fn capabilities(&self) -> Capabilities {
        self.driver.capabilities()
    }
    fn fingerprint(&self) -> Fingerprint {
        self.driver.fingerprint()
    }
    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        self.driver.validate_task_config(config)
    }
    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        self.driver.start_task(config)
    }
    fn wait_task(
        &self,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Option<ExitResult>, DriverError> {
        self.driver.wait_task(task_id, timeout)
    }
    fn stop_task(&self, task_id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        self.driver.stop_task(task_id, timeout, signal)
    }
    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        self.driver.destroy_task(task_id, force)
    }
    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError> {
        self.driver.inspect_task(task_id)
    }
    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        self.driver.recover_task(handle)
    }
    fn signal_task(&self, task_id: &str, signal: &str) -> Result<(), DriverError> {
        self.driver.signal_task(task_id, signal)
    }
    fn task_stats(&self, task_id: &str) -> Result<TaskResourceUsage, DriverError> {
        self.driver.task_stats(task_id)
    }
    fn exec_task(
        &self,
        task_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        self.driver.exec_task(task_id, command, timeout)
    }

    /// The driver's own events (asked without waiting), then the emitted ones, waiting for
    /// those up to `max_wait` when there are none.
    fn task_events(&self, max_wait: Duration) -> Result<Vec<TaskEvent>, DriverError> {
        let mut events = Vec::new();
        if self.own_events.load(Ordering::Relaxed) {
            match self.driver.task_events(Duration::ZERO) {
                Ok(own) => events = own,
                Err(DriverError::NotSupported(_)) => {
                    self.own_events.store(false, Ordering::Relaxed)
                }
                Err(e) => crate::log::debug(format!("the driver's own task events: {e}")),
            }
        }
        let wait = if events.is_empty() {
            max_wait
        } else {
            Duration::ZERO
        };
        events.extend(self.queue.take(wait));
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_abi::{FsIsolation, HealthState, TaskState};

    /// Events of every test in this process reach every listener: each test looks only at
    /// its own task ids.
    fn own(events: Vec<TaskEvent>, prefix: &str) -> Vec<String> {
        events
            .into_iter()
            .filter(|e| e.task_id.starts_with(prefix))
            .map(|e| e.message)
            .collect()
    }

    /// Emits "started" on start; its own `task_events` says "own" once when `native`.
    struct Emitter {
        native: Mutex<Option<Vec<TaskEvent>>>,
    }

    impl Driver for Emitter {
        fn plugin_info(&self) -> PluginInfo {
            PluginInfo {
                name: "emitter".into(),
                plugin_version: "0".into(),
                api_version: drover_abi::DRIVER_API_VERSION.into(),
            }
        }
        fn set_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
            Ok(())
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                send_signals: false,
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
            emit(TaskEvent::for_task(config, "started"));
            Err(DriverError::NotSupported("only emits".into()))
        }
        fn wait_task(&self, id: &str, _: Duration) -> Result<Option<ExitResult>, DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn stop_task(&self, id: &str, _: Duration, _: &str) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn destroy_task(&self, id: &str, _: bool) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
            Ok(TaskStatus {
                id: id.into(),
                name: String::new(),
                state: TaskState::Unknown,
                started_at: 0,
                completed_at: 0,
                exit_result: None,
            })
        }
        fn recover_task(&self, _: &TaskHandle) -> Result<(), DriverError> {
            Ok(())
        }
        fn task_events(&self, _: Duration) -> Result<Vec<TaskEvent>, DriverError> {
            match self.native.lock().unwrap().take() {
                Some(events) => Ok(events),
                None => Err(DriverError::NotSupported("task_events".into())),
            }
        }
    }

    fn task(id: &str) -> TaskConfig {
        serde_json::from_value(serde_json::json!({
            "id": id, "name": "t", "alloc_id": "a", "job_name": "j", "group_name": "g",
            "env": {}, "driver_config": {}, "resources": {
                "cpu_mhz": 0, "cores": 0, "memory_mb": 0, "memory_max_mb": 0},
            "user": "", "alloc_dir": "/a", "task_dir": "/a/t",
            "stdout_path": "/o", "stderr_path": "/e"
        }))
        .unwrap()
    }

    #[test]
    fn an_emitting_driver_hands_out_what_it_emitted_once_also_while_waiting() {
        let driver = EmittingDriver::new(Emitter {
            native: Mutex::new(None),
        });
        let _ = driver.start_task(&task("emitted/t/1"));
        let _ = driver.start_task(&task("emitted/t/2"));
        let first = driver.task_events(Duration::from_secs(5)).unwrap();
        assert!(first.iter().all(|e| e.timestamp > 0));
        assert_eq!(own(first, "emitted/"), ["started", "started"]);

        let none = driver.task_events(Duration::from_millis(200)).unwrap();
        assert!(own(none, "emitted/").is_empty(), "handed out twice");

        // An event emitted while the agent waits is handed out (other tests' events may end
        // a wait first, hence the loop).
        let waiting = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut got = Vec::new();
            while got.is_empty() && Instant::now() < deadline {
                got = own(
                    driver.task_events(Duration::from_secs(10)).unwrap(),
                    "emitted/",
                );
            }
            (got, driver)
        });
        std::thread::sleep(Duration::from_millis(100));
        emit(TaskEvent {
            task_id: "emitted/t/3".into(),
            message: "late".into(),
            ..Default::default()
        });
        let (got, _driver) = waiting.join().unwrap();
        assert_eq!(got, ["late"]);
    }

    #[test]
    fn an_emitting_driver_keeps_the_drivers_own_events() {
        let own_event = TaskEvent {
            task_id: "native/t/1".into(),
            message: "own".into(),
            ..Default::default()
        };
        let driver = EmittingDriver::new(Emitter {
            native: Mutex::new(Some(vec![own_event])),
        });
        let _ = driver.start_task(&task("native/t/2"));
        let got = driver.task_events(Duration::from_secs(5)).unwrap();
        assert_eq!(own(got, "native/"), ["own", "started"]);
        // The driver's own answer is now NotSupported: still no error for the host.
        assert!(driver.task_events(Duration::ZERO).is_ok());
    }

    #[test]
    fn a_full_queue_drops_the_oldest_events() {
        let queue = EventQueue::default();
        for i in 0..QUEUE_LIMIT + 2 {
            queue.push(&TaskEvent {
                message: i.to_string(),
                ..Default::default()
            });
        }
        let kept = queue.take(Duration::ZERO);
        assert_eq!(kept.len(), QUEUE_LIMIT);
        assert_eq!(kept[0].message, "2");
    }
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn listeners_get_events_with_a_timestamp_and_leave_when_they_say_so() {
        let (tx, rx) = std::sync::mpsc::channel();
        let open = Arc::new(AtomicBool::new(true));
        let still_open = Arc::clone(&open);
        listen(move |e| still_open.load(Ordering::SeqCst) && tx.send(e.clone()).is_ok());
        let event = TaskEvent {
            task_id: "a/t/1".into(),
            message: "pulling".into(),
            ..Default::default()
        }
        .with_annotation("image", "busybox");
        assert!(emit(event) >= 1);
        let got = rx.recv().unwrap();
        assert_eq!(got.message, "pulling");
        assert_eq!(got.annotations["image"], "busybox");
        assert!(got.timestamp > 0);

        open.store(false, Ordering::SeqCst);
        emit(TaskEvent::default());
        emit(TaskEvent {
            message: "after".into(),
            ..Default::default()
        });
        assert!(
            rx.try_iter().all(|e| e.message != "after"),
            "a listener that left still got events"
        );
    }
}
