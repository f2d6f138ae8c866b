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

/// The checks of the allocation's group, each with its id. Their texts are interpolated first
/// (Nomad's `InterpolateServices`): `resolve(task, text)` replaces `${...}` with the env of the
/// check's task (the group's, for a group check without one); ids are of the result.
pub(crate) fn of_alloc(
    alloc: &Allocation,
    group: &drover_structs::TaskGroup,
    resolve: &dyn Fn(&str, &str) -> String,
) -> Vec<(String, GroupCheck)> {
    group_checks(group)
        .into_iter()
        .map(|mut gc| {
            interpolate(&mut gc, resolve);
            (
                check_id(&alloc.id, &alloc.task_group, &gc.task, &gc.check),
                gc,
            )
        })
        .collect()
}

fn interpolate(gc: &mut GroupCheck, resolve: &dyn Fn(&str, &str) -> String) {
    let task = gc.task.clone();
    let r = |s: &mut String| {
        if s.contains("${") {
            *s = resolve(&task, s);
        }
    };
    let c = &mut gc.check;
    for field in [
        &mut c.name,
        &mut c.path,
        &mut c.command,
        &mut c.protocol,
        &mut c.port_label,
        &mut c.method,
        &mut c.body,
        &mut c.grpc_service,
    ] {
        r(field);
    }
    c.args.iter_mut().for_each(r);
    c.header.values_mut().flatten().for_each(r);
    r(&mut gc.service_port_label);
    r(&mut gc.service_address);
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
    fn check_texts_are_interpolated_with_their_tasks_env_before_the_id_is_taken() {
        let group = drover_structs::TaskGroup {
            name: "g".into(),
            services: Some(
                serde_json::json!([{"Name": "api", "PortLabel": "http", "Checks": [
                    {"Name": "c", "Type": "script", "Command": "${NOMAD_TASK_DIR}/check.sh",
                     "Args": ["${NOMAD_ALLOC_ID}"], "TaskName": "web", "Interval": 1, "Timeout": 1}
                ]}]),
            ),
            ..Default::default()
        };
        let alloc = Allocation {
            id: "a1".into(),
            task_group: "g".into(),
            ..Default::default()
        };
        let resolve = |task: &str, text: &str| {
            text.replace("${NOMAD_TASK_DIR}", &format!("/t/{task}/local"))
                .replace("${NOMAD_ALLOC_ID}", "a1")
        };
        let checks = of_alloc(&alloc, &group, &resolve);
        let c = &checks[0].1.check;
        assert_eq!(c.command, "/t/web/local/check.sh");
        assert_eq!(c.args, ["a1"]);
        let plain = of_alloc(&alloc, &group, &|_, t| t.to_string());
        assert_eq!(
            checks[0].0, plain[0].0,
            "the command is not part of Nomad's check id"
        );
    }

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
