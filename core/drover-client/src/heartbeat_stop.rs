//! `stop_after_client_disconnect` on the client (Nomad's heartbeatStop): a client that cannot
//! reach its servers stops the allocations whose group asks for it once that long has passed
//! since its last successful heartbeat, so a partitioned node does not keep running work the
//! servers have already replaced.
//!
//! Unlike Nomad, which starts counting again when the agent restarts, the time of the last
//! successful heartbeat is kept in the client state: a client restarted while still cut off
//! stops the allocations when the grace runs out, not a whole grace after the restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use drover_structs::{Allocation, TaskGroup};
use tokio::sync::watch;

use crate::state_db::ClientStateDb;

/// Key of the last successful heartbeat (unix milliseconds) in the client state's meta table.
const LAST_HEARTBEAT_KEY: &str = "last_heartbeat_ms";
/// How often the watcher looks for allocations whose grace ran out.
const CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// How long an allocation of `group` may run without a heartbeat: the group's
/// `stop_after_client_disconnect`, else its `disconnect.stop_on_client_after` (nanoseconds in
/// the job), if positive.
pub fn stop_after(group: &TaskGroup) -> Option<Duration> {
    group
        .disconnect_stop_after()
        .filter(|ns| *ns > 0)
        .map(|ns| Duration::from_nanos(ns as u64))
}

/// [`stop_after`] of an allocation's group.
pub fn alloc_stop_after(alloc: &Allocation) -> Option<Duration> {
    let job = alloc.job.as_deref()?;
    stop_after(job.lookup_task_group(&alloc.task_group)?)
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The last successful heartbeat, kept in memory and in the client state.
pub struct HeartbeatClock {
    db: ClientStateDb,
    last_ok_ms: Mutex<u64>,
}

impl HeartbeatClock {
    /// The clock as the client state left it; a client that never heartbeat counts from `now`
    /// (it started, so it had its chance from then on).
    pub fn load(db: ClientStateDb, now: SystemTime) -> HeartbeatClock {
        let stored = db
            .get_meta(LAST_HEARTBEAT_KEY)
            .ok()
            .flatten()
            .and_then(|b| std::str::from_utf8(&b).ok()?.parse::<u64>().ok());
        HeartbeatClock {
            db,
            last_ok_ms: Mutex::new(stored.unwrap_or_else(|| unix_ms(now))),
        }
    }

    /// Records a successful heartbeat round trip at `now`. Blocks on the state's disk write:
    /// call it from a thread that may block.
    pub fn heartbeat_ok(&self, now: SystemTime) {
        let ms = unix_ms(now);
        *self.last_ok_ms.lock().unwrap_or_else(|p| p.into_inner()) = ms;
        if let Err(e) = self
            .db
            .put_meta(LAST_HEARTBEAT_KEY, ms.to_string().as_bytes())
        {
            tracing::warn!(error = %e, "saving the time of the last heartbeat");
        }
    }

    /// When the last heartbeat succeeded.
    pub fn last_ok(&self) -> SystemTime {
        let ms = *self.last_ok_ms.lock().unwrap_or_else(|p| p.into_inner());
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// Whether an allocation allowed `grace` without heartbeats must stop at `now`.
    pub fn grace_over(&self, now: SystemTime, grace: Duration) -> bool {
        now.duration_since(self.last_ok())
            .is_ok_and(|since| since >= grace)
    }
}

/// What the watcher needs of the client: the allocations to watch, and a way to stop one.
pub trait DisconnectStops: Send + Sync + 'static {
    /// Allocations that run here with a grace, and that grace.
    fn watched(&self) -> HashMap<String, Duration>;
    /// Stops the allocation (kills its tasks and destroys it).
    fn stop(&self, alloc_id: &str);
}

/// Stops every watched allocation whose grace ran out; returns the ids stopped.
pub fn stop_due(
    clock: &HeartbeatClock,
    target: &dyn DisconnectStops,
    now: SystemTime,
) -> Vec<String> {
    let mut stopped = Vec::new();
    for (alloc_id, grace) in target.watched() {
        if clock.grace_over(now, grace) {
            tracing::warn!(
                alloc = %alloc_id,
                grace = ?grace,
                "no heartbeat for longer than stop_after_client_disconnect: stopping the allocation"
            );
            target.stop(&alloc_id);
            stopped.push(alloc_id);
        }
    }
    stopped
}

/// Checks the watched allocations until `shutdown` changes.
pub async fn watch(
    clock: Arc<HeartbeatClock>,
    target: Arc<dyn DisconnectStops>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(CHECK_INTERVAL) => {}
            _ = shutdown.changed() => return,
        }
        stop_due(&clock, target.as_ref(), SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(tag: &str) -> (ClientStateDb, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "drover-hbstop-{tag}-{}-{}",
            std::process::id(),
            unix_ms(SystemTime::now())
        ));
        std::fs::create_dir_all(&dir).unwrap();
        (ClientStateDb::open(&dir.join("state.db")).unwrap(), dir)
    }

    struct Fake {
        graces: HashMap<String, Duration>,
        stopped: Mutex<Vec<String>>,
    }

    impl DisconnectStops for Fake {
        fn watched(&self) -> HashMap<String, Duration> {
            let stopped = self.stopped.lock().unwrap();
            self.graces
                .iter()
                .filter(|(id, _)| !stopped.contains(id))
                .map(|(id, g)| (id.clone(), *g))
                .collect()
        }
        fn stop(&self, alloc_id: &str) {
            self.stopped.lock().unwrap().push(alloc_id.to_string());
        }
    }

    #[test]
    fn an_allocation_stops_once_its_grace_has_passed_since_the_last_heartbeat() {
        let (db, dir) = db("grace");
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let clock = HeartbeatClock::load(db, t0);
        let fake = Fake {
            graces: HashMap::from([
                ("short".to_string(), Duration::from_secs(10)),
                ("long".to_string(), Duration::from_secs(60)),
            ]),
            stopped: Mutex::new(Vec::new()),
        };
        clock.heartbeat_ok(t0 + Duration::from_secs(5));
        assert!(stop_due(&clock, &fake, t0 + Duration::from_secs(14)).is_empty());
        assert_eq!(
            stop_due(&clock, &fake, t0 + Duration::from_secs(15)),
            vec!["short".to_string()]
        );
        // A heartbeat in between starts the count again for what still runs.
        clock.heartbeat_ok(t0 + Duration::from_secs(50));
        assert!(stop_due(&clock, &fake, t0 + Duration::from_secs(100)).is_empty());
        assert_eq!(
            stop_due(&clock, &fake, t0 + Duration::from_secs(110)),
            vec!["long".to_string()]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_last_heartbeat_survives_a_client_restart() {
        let (db, dir) = db("restart");
        let t0 = UNIX_EPOCH + Duration::from_secs(2_000_000);
        HeartbeatClock::load(db.clone(), t0).heartbeat_ok(t0 + Duration::from_secs(3));
        // Restarted much later, still cut off: the grace counts from the stored heartbeat.
        let restarted = HeartbeatClock::load(db, t0 + Duration::from_secs(30));
        assert_eq!(restarted.last_ok(), t0 + Duration::from_secs(3));
        assert!(restarted.grace_over(t0 + Duration::from_secs(13), Duration::from_secs(10)));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_client_that_never_heartbeat_counts_from_its_start() {
        let (db, dir) = db("fresh");
        let t0 = UNIX_EPOCH + Duration::from_secs(3_000_000);
        let clock = HeartbeatClock::load(db, t0);
        assert!(!clock.grace_over(t0 + Duration::from_secs(9), Duration::from_secs(10)));
        assert!(clock.grace_over(t0 + Duration::from_secs(10), Duration::from_secs(10)));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn only_groups_with_a_positive_grace_are_watched() {
        let mut group = TaskGroup::default();
        assert_eq!(stop_after(&group), None);
        group.stop_after_client_disconnect = Some(0);
        assert_eq!(stop_after(&group), None);
        group.stop_after_client_disconnect = Some(10_000_000_000);
        assert_eq!(stop_after(&group), Some(Duration::from_secs(10)));
        // The newer form of the same setting.
        group.stop_after_client_disconnect = None;
        group.disconnect = Some(drover_structs::disconnect::DisconnectStrategy {
            stop_on_client_after: Some(5_000_000_000),
            ..Default::default()
        });
        assert_eq!(stop_after(&group), Some(Duration::from_secs(5)));
    }
}
