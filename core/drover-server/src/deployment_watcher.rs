//! The leader's deployment watcher (Nomad's `deploymentwatcher`), started and stopped with
//! leadership. For every active deployment it:
//!
//! - fails it when an allocation of it turned unhealthy ("Failed due to unhealthy
//!   allocations") or a group missed its progress deadline ("Failed due to progress
//!   deadline"), rolling back to the latest stable job version when a group has `auto_revert`
//!   (see `deployments::fail_write`);
//! - promotes its canaries when every group with canaries has `auto_promote` and all of them
//!   are healthy;
//! - creates an evaluation of the job whenever more of its allocations became healthy, so
//!   the scheduler starts the next `max_parallel` replacements.
//!
//! `plan` is pure logic over a snapshot and what the watcher saw before; every action is one
//! log entry, so a new leader carries on (it evaluates, once, each active deployment that has
//! healthy allocations: their evaluation may have been lost with the old leader).

use std::collections::HashMap;
use std::time::Duration;

use drover_state::{StateSnapshot, Table};
use drover_structs::time::{now_nanos, parse_rfc3339_nanos};
use drover_structs::{
    DEPLOYMENT_DESC_FAILED_ALLOCATIONS, DEPLOYMENT_DESC_PROGRESS_DEADLINE,
    DEPLOYMENT_STATUS_RUNNING, Deployment, ZERO_TIME,
};

use crate::deployments::{
    DeploymentWrite, TRIGGER_DEPLOYMENT_WATCHER, deployment_eval, fail_write, promote_write,
};
use crate::leader_task::LeaderTask;
use crate::server::Server;

/// A pass runs at least this often, so progress deadlines are noticed without a write.
const PASS_WAIT: Duration = Duration::from_millis(500);

/// Healthy allocation counts last acted on, by deployment.
pub(crate) type Seen = HashMap<String, i64>;

fn healthy_total(d: &Deployment) -> i64 {
    d.task_groups.values().map(|g| g.healthy_allocs).sum()
}

/// Why `d` fails now, if it does.
fn failure(d: &Deployment, now: i64) -> Option<&'static str> {
    if d.task_groups.values().any(|g| g.unhealthy_allocs > 0) {
        return Some(DEPLOYMENT_DESC_FAILED_ALLOCATIONS);
    }
    // A paused deployment waits for its operator, deadline or not.
    if d.status != DEPLOYMENT_STATUS_RUNNING {
        return None;
    }
    let missed = d.task_groups.values().any(|g| {
        g.progress_deadline > 0
            && g.require_progress_by != ZERO_TIME
            && g.healthy_allocs < g.desired_total
            && parse_rfc3339_nanos(&g.require_progress_by).is_some_and(|by| now > by)
    });
    missed.then_some(DEPLOYMENT_DESC_PROGRESS_DEADLINE)
}

/// Nomad's `autoPromoteDeployment`: every group with canaries promotes automatically and has
/// all its canaries placed and healthy.
fn auto_promotes(snap: &StateSnapshot, d: &Deployment) -> bool {
    if d.status != DEPLOYMENT_STATUS_RUNNING || !d.requires_promotion() {
        return false;
    }
    d.task_groups
        .values()
        .filter(|g| g.desired_canaries > 0)
        .all(|g| {
            let placed = g.placed_canaries.as_deref().unwrap_or_default();
            g.auto_promote
                && placed.len() as i64 == g.desired_canaries
                && placed.iter().all(|id| {
                    snap.alloc(id).is_some_and(|a| {
                        a.deployment_status.as_ref().is_some_and(|s| s.is_healthy())
                    })
                })
        })
}

/// The writes one pass asks for.
pub(crate) fn plan(snap: &StateSnapshot, now: i64, seen: &mut Seen) -> Vec<DeploymentWrite> {
    let mut writes = Vec::new();
    let deployments = snap.deployments(None, "");
    seen.retain(|id, _| deployments.iter().any(|d| d.id == *id && d.active()));
    for d in deployments.iter().filter(|d| d.active()) {
        if let Some(reason) = failure(d, now) {
            writes.push(fail_write(snap, d, reason));
            seen.remove(&d.id);
            continue;
        }
        if auto_promotes(snap, d)
            && let Ok(w) = promote_write(snap, d, Vec::new())
        {
            writes.push(w);
            continue;
        }
        let healthy = healthy_total(d);
        // First seen (a new deployment, or every one after a leadership change): evaluated
        // only if some allocation is healthy already, whose evaluation may have been missed.
        // A new deployment has its job's evaluation running, and clusters with thousands of
        // deployments must not get an evaluation each per leader change.
        let before = seen.insert(d.id.clone(), healthy).unwrap_or(0);
        if d.status == DEPLOYMENT_STATUS_RUNNING && healthy > before {
            writes.push(DeploymentWrite {
                evals: vec![deployment_eval(snap, d, TRIGGER_DEPLOYMENT_WATCHER)],
                ..Default::default()
            });
        }
    }
    writes
}

/// The watcher, started and stopped with leadership.
#[derive(Default)]
pub(crate) struct DeploymentWatcher {
    task: LeaderTask,
}

impl DeploymentWatcher {
    pub(crate) fn start(&self, server: Server) {
        self.task.start(async move {
            let watched = [Table::Deployments, Table::Allocs];
            let mut after = 0;
            let mut seen = Seen::new();
            let mut multiregion = crate::multiregion::SeenStatus::new();
            loop {
                let snap = server
                    .inner
                    .state
                    .wait_for(&watched, after, PASS_WAIT)
                    .await;
                after = snap.max_index(&watched).max(1);
                for write in plan(&snap, now_nanos(), &mut seen) {
                    if let Err(e) = server.apply_deployment_write(write).await {
                        tracing::warn!(error = %e, "deployment watcher write failed");
                        // Seen again next pass.
                        seen.clear();
                    }
                }
                crate::multiregion::coordinate(&server, &snap, &mut multiregion).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    pub(crate) fn stop(&self) {
        self.task.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_state::StateStore;
    use drover_structs::time::format_rfc3339_nanos;
    use drover_structs::{DeploymentState, Job, UpdateStrategy};

    const SEC: i64 = 1_000_000_000;

    fn store_with(d: &Deployment, stable_v0: bool) -> StateStore {
        let s = StateStore::new();
        let job = Job {
            id: "web".into(),
            namespace: "default".into(),
            job_type: "service".into(),
            priority: 50,
            ..Default::default()
        };
        s.upsert_job(1, job.clone());
        if stable_v0 {
            s.set_job_stability(2, "default", "web", 0, true).unwrap();
        }
        let mut v1 = job;
        v1.meta = Some([("v".to_string(), "1".to_string())].into());
        s.upsert_job(3, v1);
        s.upsert_deployments(4, vec![d.clone()], &[], vec![]);
        s
    }

    fn deployment(auto_revert: bool) -> Deployment {
        let job = Job {
            id: "web".into(),
            namespace: "default".into(),
            version: 1,
            ..Default::default()
        };
        let mut d = Deployment::for_job(&job, 50, 0);
        let update = UpdateStrategy {
            max_parallel: 1,
            auto_revert,
            progress_deadline: 10 * SEC,
            ..Default::default()
        };
        d.task_groups
            .insert("g".into(), DeploymentState::for_group(&update, 2));
        d
    }

    #[test]
    fn more_healthy_allocations_get_the_job_evaluated_once() {
        let mut d = deployment(false);
        let s = store_with(&d, false);
        let mut seen = Seen::new();
        assert!(
            plan(&s.snapshot(), 0, &mut seen).is_empty(),
            "first sight with nothing healthy: nothing"
        );
        assert!(plan(&s.snapshot(), 0, &mut seen).is_empty(), "nothing new");
        if let Some(g) = d.task_groups.get_mut("g") {
            g.healthy_allocs = 1;
        }
        s.upsert_deployments(5, vec![d], &[], vec![]);
        let w = plan(&s.snapshot(), 0, &mut seen);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].evals[0].triggered_by, "deployment-watcher");
        assert!(w[0].updates.is_empty());
        assert_eq!(
            plan(&s.snapshot(), 0, &mut Seen::new()).len(),
            1,
            "a new leader evaluates a deployment with healthy allocations"
        );
    }

    #[test]
    fn an_unhealthy_allocation_fails_the_deployment_and_reverts_to_the_stable_version() {
        let mut d = deployment(true);
        if let Some(g) = d.task_groups.get_mut("g") {
            g.unhealthy_allocs = 1;
        }
        let s = store_with(&d, true);
        let w = plan(&s.snapshot(), 0, &mut Seen::new());
        assert_eq!(w[0].updates[0].status, "failed");
        assert_eq!(
            w[0].updates[0].status_description,
            "Failed due to unhealthy allocations - rolling back to job version 0"
        );
        let job = w[0].rollback.as_ref().expect("a rollback");
        assert_eq!(job.version, 0);
        assert_eq!(w[0].evals[0].triggered_by, "rollback");

        let s = store_with(&d, false);
        let w = plan(&s.snapshot(), 0, &mut Seen::new());
        assert_eq!(
            w[0].updates[0].status_description,
            "Failed due to unhealthy allocations - no stable job version to auto revert to"
        );
        assert!(w[0].rollback.is_none());
    }

    #[test]
    fn a_missed_progress_deadline_fails_a_running_deployment_only() {
        let mut d = deployment(false);
        if let Some(g) = d.task_groups.get_mut("g") {
            g.require_progress_by = format_rfc3339_nanos(100 * SEC);
        }
        let s = store_with(&d, false);
        assert!(
            plan(&s.snapshot(), 99 * SEC, &mut Seen::new())
                .iter()
                .all(|w| w.updates.is_empty())
        );
        let w = plan(&s.snapshot(), 101 * SEC, &mut Seen::new());
        assert_eq!(
            w[0].updates[0].status_description,
            "Failed due to progress deadline"
        );
        d.status = drover_structs::DEPLOYMENT_STATUS_PAUSED.into();
        let s = store_with(&d, false);
        assert!(plan(&s.snapshot(), 101 * SEC, &mut Seen::new()).is_empty());
    }
}
