//! Service health checks run by the client (Nomad's `checks_hook` and check watcher): one
//! observer per `check` of the allocation's group and task services runs it every
//! `interval` (the first run after half of one, as Nomad's), keeps the latest result in the
//! allocation's [`AllocChecks`] (what `/v1/client/allocation/:id/checks` answers), and acts on
//! `check_restart`. The allocation runner reads the results for deployment health
//! (`health_check = "checks"`).
//!
//! Checks run from the allocation's start, as Nomad's do; a script check runs inside its task
//! through the driver's exec, so it fails while that task does not run. A check bound to a
//! task (a task service's, or a group service check with `task`) starts over when that task
//! starts again: its grace period and its pass/fail counts are reset.

mod observer;
mod probe;
mod status;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use drover_structs::service_check::*;
use drover_structs::{Allocation, Node};
use md5::{Digest, Md5};
use tokio::sync::watch;

use crate::alloc_control::AllocControl;
use crate::alloc_stats::LiveTasks;

pub(crate) use status::checks_health;

/// Which tasks run now, by name: the run's number (its restart count) while it runs, `None`
/// while it does not. Published by the allocation runner.
pub(crate) type TaskRuns = BTreeMap<String, Option<u64>>;

/// The latest result of every check of one allocation, by check id. Cheap to clone.
#[derive(Clone, Default)]
pub struct AllocChecks {
    results: Arc<Mutex<BTreeMap<String, CheckQueryResult>>>,
    /// Bumped on every change, for the allocation runner's health decision.
    changed: Arc<watch::Sender<u64>>,
}

impl AllocChecks {
    /// The results now (Nomad's `map[CheckID]CheckQueryResult`).
    pub fn results(&self) -> BTreeMap<String, CheckQueryResult> {
        self.results
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, result: CheckQueryResult) {
        let changed = {
            let mut results = self.results.lock().unwrap_or_else(PoisonError::into_inner);
            results.insert(result.id.clone(), result.clone()) != Some(result)
        };
        if changed {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Forgets every result (the allocation stopped: Nomad purges them at its prekill).
    pub(crate) fn purge(&self) {
        self.results
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.changed.send_modify(|n| *n += 1);
    }

    /// Wakes when a result changes.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// Nomad's `NomadCheckID`: an md5 over the allocation, group and the check's identifying
/// fields, so a check keeps its id across agent restarts and job versions that leave it be.
pub fn check_id(alloc_id: &str, group: &str, task: &str, c: &ServiceCheck) -> String {
    let mut sum = Md5::new();
    for s in [
        alloc_id,
        group,
        task,
        &c.name,
        &c.check_type,
        &c.port_label,
        &c.on_update,
        &c.address_mode,
    ] {
        sum.update(s.as_bytes());
    }
    sum.update(c.interval.to_le_bytes());
    sum.update(c.timeout.to_le_bytes());
    for s in [&c.protocol, &c.path, &c.method] {
        sum.update(s.as_bytes());
    }
    hex::encode(sum.finalize())
}

/// What the observers of one allocation share.
#[derive(Clone)]
pub(crate) struct CheckEnv {
    pub alloc: Arc<Allocation>,
    pub node: Arc<Node>,
    pub live: LiveTasks,
    pub control: AllocControl,
    pub results: AllocChecks,
    pub runs: watch::Receiver<TaskRuns>,
}

/// The checks of the allocation's group, each with its id.
pub(crate) fn of_alloc(alloc: &Allocation, group: &drover_structs::TaskGroup) -> Vec<(String, GroupCheck)> {
    group_checks(group)
        .into_iter()
        .map(|gc| (check_id(&alloc.id, &alloc.task_group, &gc.task, &gc.check), gc))
        .collect()
}

/// Starts an observer per check; they end when `stop` turns true or its sender goes.
pub(crate) fn start(env: CheckEnv, checks: Vec<(String, GroupCheck)>, stop: watch::Receiver<bool>) {
    for (id, gc) in checks {
        tokio::spawn(observer::observe(env.clone(), id, gc, stop.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_ids_follow_nomads_hash() {
        let c = ServiceCheck {
            name: "alive".into(),
            check_type: "http".into(),
            path: "/health".into(),
            interval: 10_000_000_000,
            timeout: 2_000_000_000,
            on_update: "require_healthy".into(),
            ..Default::default()
        };
        let a = check_id("a1", "g", "", &c);
        assert_eq!(a.len(), 32);
        assert_eq!(a, check_id("a1", "g", "", &c));
        assert_ne!(a, check_id("a2", "g", "", &c));
        let mut longer = c.clone();
        longer.interval += 1;
        assert_ne!(a, check_id("a1", "g", "", &longer));
    }
}
