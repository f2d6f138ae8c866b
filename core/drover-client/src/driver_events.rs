//! Task events that drivers report (Nomad's driver `TaskEvents` stream): one pump thread per
//! driver asks `Driver::task_events` in a loop and routes each event, by task id, to the runner
//! of that task, which records it as a task event of type "Driver" (Nomad's
//! `TaskDriverMessage`) through its usual state updates.
//!
//! A driver without task events answers `NotSupported` at the first call, and its pump ends
//! there; the others run for the client's lifetime. Events of a task no runner claims (it ended,
//! or the agent does not run it) are dropped, as Nomad's driver manager drops them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use drover_abi::{Driver, DriverError, DriverTaskEvent};
use drover_structs::TaskEvent;
use drover_structs::time::now_nanos;
use tokio::sync::watch;

/// Nomad's `structs.TaskDriverMessage`.
pub const TASK_EVENT_DRIVER_MESSAGE: &str = "Driver";

/// How long a pump rests after its driver had no events: also how soon it sees the client
/// stop. The pump asks without waiting inside the driver, so that a flush can tell a call in
/// progress (whose events are on their way) from an idle pump: a driver's long poll would
/// take the events out of the driver before the pump could say it holds them.
const POLL_WAIT: Duration = Duration::from_millis(100);
/// Waits between calls after a driver failed to answer, doubling from the first to the last.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The task event Nomad's task runner records for a driver's event.
pub fn task_event(event: &DriverTaskEvent) -> TaskEvent {
    TaskEvent {
        event_type: TASK_EVENT_DRIVER_MESSAGE.to_string(),
        time: if event.timestamp > 0 {
            event.timestamp
        } else {
            now_nanos()
        },
        driver_message: event.message.clone(),
        display_message: event.message.clone(),
        details: event.annotations.clone(),
        ..Default::default()
    }
}

struct Route {
    /// Which registration this is, so that an older guard never removes a newer route.
    serial: u64,
    to: crate::task_runner::OutsideEvents,
}

/// Where each running task's driver events go, by driver task id. Cheap to clone.
#[derive(Clone, Default)]
pub struct DriverEventRouter {
    routes: Arc<Mutex<HashMap<String, Route>>>,
    serials: Arc<AtomicU64>,
    /// Batches a pump took from its driver and is still delivering: a flush waits for them,
    /// as the event a flush looks for may be in one.
    in_flight: Arc<AtomicU64>,
}

/// Keeps a task's route; dropping it ends the route.
#[must_use = "the route ends when this is dropped"]
pub struct RouteGuard {
    router: DriverEventRouter,
    task_id: String,
    serial: u64,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let mut routes = self.router.lock();
        if routes.get(&self.task_id).map(|r| r.serial) == Some(self.serial) {
            routes.remove(&self.task_id);
        }
    }
}

impl DriverEventRouter {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Route>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends the events of driver task `task_id` to `to` until the guard is dropped. A runner
    /// routes a task before asking the driver to start it, so events of the start arrive too.
    pub fn route(&self, task_id: &str, to: crate::task_runner::OutsideEvents) -> RouteGuard {
        let serial = self.serials.fetch_add(1, Ordering::Relaxed);
        self.lock()
            .insert(task_id.to_string(), Route { serial, to });
        RouteGuard {
            router: self.clone(),
            task_id: task_id.to_string(),
            serial,
        }
    }

    /// Hands `event` to its task's runner; false when no runner takes it.
    pub fn deliver(&self, event: &DriverTaskEvent) -> bool {
        let mut routes = self.lock();
        let Some(route) = routes.get(&event.task_id) else {
            return false;
        };
        if route.to.send(Box::new(task_event(event))).is_ok() {
            return true;
        }
        // The runner is gone without dropping its guard yet.
        routes.remove(&event.task_id);
        false
    }
}

/// Asks `driver` once, without waiting, for the task events it holds and delivers them: a
/// runner whose task ended calls it before it records the end, so that what the driver emitted
/// while the task ran (in `start_task` of a task that exits at once, say) reaches it even when
/// the driver's pump has not asked yet. Blocks for the length of one call.
pub fn flush(driver: &dyn Driver, router: &DriverEventRouter) {
    if let Ok(events) = driver.task_events(Duration::ZERO) {
        for event in &events {
            if !router.deliver(event) {
                tracing::debug!(task = %event.task_id, message = %event.message, "driver event of a task no runner has; dropped");
            }
        }
    }
    // A pump may hold the task's events, taken just before: let it hand them over (it does
    // so in microseconds unless the machine is starved; never wait long for it).
    let deadline = std::time::Instant::now() + FLUSH_WAIT;
    while router.in_flight.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The longest a flush waits for a pump's batch in delivery.
const FLUSH_WAIT: Duration = Duration::from_millis(500);

/// Starts one pump thread per driver. They end when `shutdown` turns true or its sender is
/// dropped (within `POLL_WAIT`), or at once for a driver without task events.
pub fn start_pumps(
    drivers: &BTreeMap<String, Arc<dyn Driver>>,
    router: &DriverEventRouter,
    shutdown: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut pumps = Vec::new();
    for (name, driver) in drivers {
        let (name, driver, router, shutdown) = (
            name.clone(),
            Arc::clone(driver),
            router.clone(),
            shutdown.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("driver-events-{name}"))
            .spawn(move || pump(&name, driver.as_ref(), &router, &shutdown));
        match spawned {
            Ok(handle) => pumps.push(handle),
            Err(e) => tracing::warn!(error = %e, "cannot start a driver's task event pump"),
        }
    }
    pumps
}

fn stopped(shutdown: &watch::Receiver<bool>) -> bool {
    *shutdown.borrow() || shutdown.has_changed().is_err()
}

fn pump(
    name: &str,
    driver: &dyn Driver,
    router: &DriverEventRouter,
    shutdown: &watch::Receiver<bool>,
) {
    let mut retry = RETRY_FIRST;
    while !stopped(shutdown) {
        // Counted from before the call: a flush meanwhile waits for what this call takes.
        router.in_flight.fetch_add(1, Ordering::AcqRel);
        let answer = driver.task_events(Duration::ZERO);
        if let Ok(events) = &answer {
            for event in events {
                if !router.deliver(event) {
                    tracing::debug!(driver = name, task = %event.task_id, message = %event.message, "driver event of a task no runner has; dropped");
                }
            }
        }
        router.in_flight.fetch_sub(1, Ordering::AcqRel);
        match answer {
            Ok(events) => {
                retry = RETRY_FIRST;
                if events.is_empty() {
                    std::thread::sleep(POLL_WAIT);
                }
            }
            Err(DriverError::NotSupported(_)) => {
                tracing::debug!(driver = name, "the driver reports no task events");
                return;
            }
            Err(e) => {
                tracing::warn!(driver = name, error = %e, retry_in = ?retry, "asking the driver for task events");
                // Sleep in short steps so that a stop is seen.
                let mut slept = Duration::ZERO;
                while slept < retry && !stopped(shutdown) {
                    std::thread::sleep(POLL_WAIT.min(retry - slept));
                    slept += POLL_WAIT;
                }
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_abi::*;
    use std::collections::VecDeque;
    use std::time::Instant;
    use tokio::sync::mpsc;

    fn event(task_id: &str, message: &str) -> DriverTaskEvent {
        DriverTaskEvent {
            task_id: task_id.into(),
            message: message.into(),
            timestamp: 7,
            annotations: [("pid".to_string(), "12".to_string())].into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_driver_event_becomes_nomads_driver_message_event() {
        let e = task_event(&event("a/t/1", "image pulled"));
        assert_eq!(e.event_type, "Driver");
        assert_eq!(e.driver_message, "image pulled");
        assert_eq!(e.display_message, "image pulled");
        assert_eq!(e.details["pid"], "12");
        assert_eq!(e.time, 7);
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["Type"], "Driver");
        assert_eq!(json["DriverMessage"], "image pulled");
        assert_eq!(json["Details"]["pid"], "12");
        let untimed = task_event(&DriverTaskEvent::default());
        assert!(untimed.time > 0, "an event without a time is stamped now");
    }

    #[test]
    fn events_go_to_the_runner_of_their_task_until_its_route_ends() {
        let router = DriverEventRouter::default();
        let (tx_a, mut rx_a) = mpsc::unbounded_channel();
        let (tx_b, mut rx_b) = mpsc::unbounded_channel();
        let route_a = router.route("a/t/1", tx_a);
        let _route_b = router.route("b/t/1", tx_b);
        assert!(router.deliver(&event("b/t/1", "to b")));
        assert!(router.deliver(&event("a/t/1", "to a")));
        assert!(!router.deliver(&event("c/t/1", "nobody")));
        assert_eq!(rx_a.try_recv().unwrap().driver_message, "to a");
        assert_eq!(rx_b.try_recv().unwrap().driver_message, "to b");
        assert!(rx_a.try_recv().is_err() && rx_b.try_recv().is_err());

        drop(route_a);
        assert!(!router.deliver(&event("a/t/1", "late")));
        assert!(rx_a.try_recv().is_err());
    }

    #[test]
    fn an_old_guard_does_not_end_a_newer_route_of_the_same_task() {
        let router = DriverEventRouter::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let old = router.route("a/t/1", tx.clone());
        let _new = router.route("a/t/1", tx);
        drop(old);
        assert!(router.deliver(&event("a/t/1", "still routed")));
        assert_eq!(rx.try_recv().unwrap().driver_message, "still routed");
    }

    /// One answer of a scripted `task_events`; `None` means NotSupported.
    type Answer = Option<Result<Vec<DriverTaskEvent>, DriverError>>;

    /// Answers `task_events` from a script. Counts calls.
    struct Scripted {
        script: Mutex<VecDeque<Answer>>,
        calls: AtomicU64,
        /// How long an answer with events takes to come back once they are taken out (the
        /// time a plugin's answer spends crossing to the agent).
        hand_over: Duration,
    }

    impl Scripted {
        fn new(script: impl IntoIterator<Item = Answer>) -> Arc<Scripted> {
            Self::slow(script, Duration::ZERO)
        }

        fn slow(script: impl IntoIterator<Item = Answer>, hand_over: Duration) -> Arc<Scripted> {
            Arc::new(Scripted {
                script: Mutex::new(script.into_iter().collect()),
                calls: AtomicU64::new(0),
                hand_over,
            })
        }
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
        fn start_task(&self, _: &TaskConfig) -> Result<TaskHandle, DriverError> {
            Err(DriverError::NotSupported("start_task".into()))
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
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn recover_task(&self, _: &TaskHandle) -> Result<(), DriverError> {
            Ok(())
        }
        fn task_events(&self, max_wait: Duration) -> Result<Vec<DriverTaskEvent>, DriverError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let next = self.script.lock().unwrap().pop_front();
            match next {
                Some(Some(answer)) => {
                    std::thread::sleep(self.hand_over);
                    answer
                }
                Some(None) => Err(DriverError::NotSupported("task_events".into())),
                // The script is over: nothing more to report.
                None => {
                    std::thread::sleep(max_wait.min(Duration::from_millis(20)));
                    Ok(Vec::new())
                }
            }
        }
    }

    fn drivers(list: &[(&str, Arc<Scripted>)]) -> BTreeMap<String, Arc<dyn Driver>> {
        list.iter()
            .map(|(n, d)| (n.to_string(), Arc::clone(d) as Arc<dyn Driver>))
            .collect()
    }

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn flush_delivers_what_the_driver_holds_without_a_pump() {
        let driver = Scripted::new([Some(Ok(vec![
            event("a/t/1", "started as host process 12"),
            event("other/t/1", "not this runner's"),
        ]))]);
        let router = DriverEventRouter::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _route = router.route("a/t/1", tx);
        flush(driver.as_ref(), &router);
        let got = rx.try_recv().expect("the held event is delivered at once");
        assert_eq!(got.driver_message, "started as host process 12");
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn pumps_route_each_drivers_events_and_stop_with_the_client() {
        let router = DriverEventRouter::default();
        let (tx_a, mut rx_a) = mpsc::unbounded_channel();
        let (tx_b, mut rx_b) = mpsc::unbounded_channel();
        let _a = router.route("a/web/1", tx_a);
        let _b = router.route("b/db/1", tx_b);
        let first = Scripted::new([
            Some(Ok(vec![
                event("a/web/1", "one"),
                event("gone/x/1", "dropped"),
            ])),
            Some(Ok(vec![event("a/web/1", "two")])),
        ]);
        let second = Scripted::new([Some(Ok(vec![event("b/db/1", "from the other")]))]);
        let (stop, shutdown) = watch::channel(false);
        let pumps = start_pumps(
            &drivers(&[("first", Arc::clone(&first)), ("second", second)]),
            &router,
            &shutdown,
        );
        assert_eq!(pumps.len(), 2);
        let mut got_a = Vec::new();
        wait_until("the events of both drivers", || {
            while let Ok(e) = rx_a.try_recv() {
                got_a.push(e.driver_message);
            }
            got_a.len() == 2 && !rx_b.is_empty()
        });
        assert_eq!(got_a, ["one", "two"]);
        assert_eq!(rx_b.try_recv().unwrap().driver_message, "from the other");

        stop.send(true).unwrap();
        for p in pumps {
            p.join().unwrap();
        }
        let calls = first.calls.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            first.calls.load(Ordering::SeqCst),
            calls,
            "asked after the stop"
        );
    }

    #[test]
    fn a_flush_waits_for_events_a_pump_took_and_has_not_delivered_yet() {
        let slow = Scripted::slow(
            [Some(Ok(vec![event("a/t/1", "started")]))],
            Duration::from_millis(150),
        );
        let router = DriverEventRouter::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _route = router.route("a/t/1", tx);
        let (stop, shutdown) = watch::channel(false);
        let pumps = start_pumps(&drivers(&[("slow", Arc::clone(&slow))]), &router, &shutdown);
        // The pump's call has taken the event out; the flush finds the driver empty.
        wait_until("the pump asking", || slow.calls.load(Ordering::SeqCst) >= 1);
        flush(slow.as_ref(), &router);
        assert_eq!(
            rx.try_recv().map(|e| e.driver_message).ok().as_deref(),
            Some("started"),
            "the flush returned before the pump's batch arrived"
        );
        stop.send(true).unwrap();
        for p in pumps {
            p.join().unwrap();
        }
    }

    #[test]
    fn a_driver_without_task_events_is_asked_once_and_a_failing_one_again() {
        let router = DriverEventRouter::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _route = router.route("a/t/1", tx);
        let unsupported = Scripted::new([None]);
        let failing = Scripted::new([
            Some(Err(DriverError::Other("plugin restarting".into()))),
            Some(Ok(vec![event("a/t/1", "after the failure")])),
        ]);
        let (_stop, shutdown) = watch::channel(false);
        let mut pumps = start_pumps(
            &drivers(&[
                ("failing", Arc::clone(&failing)),
                ("none", Arc::clone(&unsupported)),
            ]),
            &router,
            &shutdown,
        );
        // The unsupported driver's pump (the second, by name) ends by itself.
        pumps.pop().unwrap().join().unwrap();
        assert_eq!(unsupported.calls.load(Ordering::SeqCst), 1);
        wait_until("the event after the retry", || !rx.is_empty());
        assert_eq!(rx.try_recv().unwrap().driver_message, "after the failure");
    }
}
