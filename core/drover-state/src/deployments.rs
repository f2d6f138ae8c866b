//! The deployments table (by id, with a by-job index) and the bookkeeping Nomad's state store
//! does for deployments inside other writes:
//!
//! - an allocation written with a deployment id counts as placed in its group's state the
//!   first time it joins that deployment, and as healthy or unhealthy when its client first
//!   reports the health (a healthy one that turns unhealthy moves between the counts);
//!   Nomad's `updateDeploymentWithAlloc`, including the progress deadline it moves;
//! - a deployment that ends `successful` marks its job version stable.

use std::sync::Arc;

use drover_structs::time::{format_rfc3339_nanos, parse_rfc3339_nanos};
use drover_structs::{
    Allocation, DEPLOYMENT_STATUS_SUCCESSFUL, Deployment, DeploymentStatusUpdate, ZERO_TIME,
};

use crate::StateError;
use crate::store::StateStore;
use crate::tables::{NsKey, StateSnapshot, Table, Tables};

fn job_key(d: &Deployment) -> NsKey {
    (d.namespace.clone(), d.job_id.clone())
}

impl StateSnapshot {
    pub fn deployment(&self, id: &str) -> Option<Arc<Deployment>> {
        self.t.deployments.get(id).cloned()
    }

    /// Deployments of a namespace (`None`: all) whose id starts with `prefix`, by id.
    pub fn deployments(&self, namespace: Option<&str>, prefix: &str) -> Vec<Arc<Deployment>> {
        self.t
            .deployments
            .range(prefix.to_string()..)
            .take_while(|(id, _)| id.starts_with(prefix))
            .filter(|(_, d)| namespace.is_none_or(|ns| ns == d.namespace))
            .map(|(_, d)| d.clone())
            .collect()
    }

    /// A job's deployments, newest (highest create index) first.
    pub fn deployments_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Deployment>> {
        let k = (namespace.to_string(), job_id.to_string());
        let mut out: Vec<Arc<Deployment>> = self
            .t
            .deployments_by_job
            .get(&k)
            .into_iter()
            .flatten()
            .filter_map(|id| self.t.deployments.get(id).cloned())
            .collect();
        out.sort_by_key(|d| std::cmp::Reverse(d.create_index));
        out
    }

    /// Nomad's `LatestDeploymentByJobID`.
    pub fn latest_deployment(&self, namespace: &str, job_id: &str) -> Option<Arc<Deployment>> {
        self.deployments_by_job(namespace, job_id)
            .into_iter()
            .next()
    }
}

/// Stores a deployment (new ones get `index` as their create index).
pub(crate) fn upsert_in(t: &mut Tables, index: u64, mut d: Deployment) {
    match t.deployments.get(&d.id) {
        Some(existing) => d.create_index = existing.create_index,
        None => {
            d.create_index = index;
            t.deployments_by_job
                .entry(job_key(&d))
                .or_default()
                .insert(d.id.clone());
        }
    }
    d.modify_index = index;
    t.deployments.insert(d.id.clone(), Arc::new(d));
}

/// Applies a status change; a successful deployment marks its job version stable. Unknown
/// deployments are skipped (a plan may name one the GC removed since). `ModifyTime` stays:
/// the update carries no time, and every server must store the same deployment (a clock read
/// here would differ from server to server).
pub(crate) fn update_status_in(t: &mut Tables, index: u64, update: &DeploymentStatusUpdate) {
    let Some(existing) = t.deployments.get(&update.deployment_id).cloned() else {
        return;
    };
    let mut d = (*existing).clone();
    d.status = update.status.clone();
    d.status_description = update.status_description.clone();
    if d.status == DEPLOYMENT_STATUS_SUCCESSFUL {
        crate::store::set_job_stability_in(t, index, &d.namespace, &d.job_id, d.job_version, true);
    }
    upsert_in(t, index, d);
}

/// The deployments one write's allocations changed, copied once each and stored at the end
/// of the write (a plan placing a thousand allocations of one deployment stores it once).
#[derive(Default)]
pub(crate) struct DeploymentsPending {
    changed: std::collections::HashMap<String, (u64, Deployment)>,
}

impl DeploymentsPending {
    /// Nomad's `updateDeploymentWithAlloc`: `a` (about to be stored, replacing `old`) moves
    /// its deployment's counts. Cheap for allocations of no deployment, as nearly all are at
    /// scale.
    pub(crate) fn alloc_written(
        &mut self,
        t: &Tables,
        index: u64,
        old: Option<&Allocation>,
        a: &mut Allocation,
    ) {
        if a.deployment_id.is_empty() {
            return;
        }
        let health = |x: &Allocation| x.deployment_status.as_ref().and_then(|s| s.healthy);
        let (mut placed, mut healthy, mut unhealthy) = (0, 0, 0);
        match old {
            // A placement joins with no health; an in-place update may bring its health along.
            None => placed = 1,
            Some(o) if o.deployment_id != a.deployment_id => {
                placed = 1;
                if health(a) == Some(true) {
                    healthy = 1;
                }
            }
            Some(o) => match (health(o), health(a)) {
                (None, Some(true)) => healthy = 1,
                (None, Some(false)) => unhealthy = 1,
                (Some(true), Some(false)) => {
                    healthy = -1;
                    unhealthy = 1;
                }
                _ => {}
            },
        }
        if placed == 0 && healthy == 0 && unhealthy == 0 {
            return;
        }
        let d = match self.changed.entry(a.deployment_id.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => &mut e.into_mut().1,
            std::collections::hash_map::Entry::Vacant(e) => {
                let Some(stored) = t.deployments.get(&a.deployment_id) else {
                    return;
                };
                &mut e.insert((index, (**stored).clone())).1
            }
        };
        let Some(state) = d.task_groups.get_mut(&a.task_group) else {
            return;
        };
        if (healthy != 0 || unhealthy != 0)
            && let Some(s) = a.deployment_status.as_mut()
        {
            s.modify_index = index;
        }
        state.placed_allocs += placed;
        state.healthy_allocs += healthy;
        state.unhealthy_allocs += unhealthy;
        if a.deployment_status.as_ref().is_some_and(|s| s.canary) {
            let canaries = state.placed_canaries.get_or_insert_with(Vec::new);
            if !canaries.contains(&a.id) {
                canaries.push(a.id.clone());
            }
        }
        let deadline = state.progress_deadline;
        if deadline != 0 {
            let current = parse_rfc3339_nanos(&state.require_progress_by);
            let unset = state.require_progress_by == ZERO_TIME || current.is_none();
            if placed != 0 && unset {
                // The modify time, not the create time: an in-place update can move an
                // allocation into a new deployment.
                state.require_progress_by = format_rfc3339_nanos(a.modify_time + deadline);
            } else if healthy > 0 {
                let at = a
                    .deployment_status
                    .as_ref()
                    .and_then(|s| parse_rfc3339_nanos(&s.timestamp))
                    .unwrap_or(a.modify_time);
                if current.is_none_or(|c| at + deadline > c) {
                    state.require_progress_by = format_rfc3339_nanos(at + deadline);
                }
            }
        }
    }

    pub(crate) fn flush(self, t: &mut Tables) {
        for (_, (index, d)) in self.changed {
            upsert_in(t, index, d);
        }
    }
}

impl StateStore {
    /// Stores deployments and status changes (the deployment watcher's and the operator's
    /// writes), with the evaluations that come with them.
    pub fn upsert_deployments(
        &self,
        index: u64,
        deployments: Vec<Deployment>,
        updates: &[DeploymentStatusUpdate],
        evals: Vec<drover_structs::Evaluation>,
    ) {
        self.write(
            index,
            &[
                Table::Deployments,
                Table::Evals,
                Table::Jobs,
                Table::JobVersions,
            ],
            |t| {
                for d in deployments {
                    upsert_in(t, index, d);
                }
                for u in updates {
                    update_status_in(t, index, u);
                }
                crate::store::upsert_evals_in(t, index, evals);
            },
        )
    }

    /// Nomad's `UpdateDeploymentPromotion` once checked: the groups (all when empty) are
    /// promoted, their progress deadline starts again, and a running deployment that needs no
    /// more promotion says it is running.
    pub fn promote_deployment(&self, index: u64, id: &str, groups: &[String], now: i64) {
        self.write(index, &[Table::Deployments], |t| {
            let Some(existing) = t.deployments.get(id).cloned() else {
                return;
            };
            let mut d = (*existing).clone();
            for (name, g) in d.task_groups.iter_mut() {
                if !groups.is_empty() && !groups.contains(name) {
                    continue;
                }
                if g.progress_deadline > 0 && g.require_progress_by != ZERO_TIME {
                    g.require_progress_by = format_rfc3339_nanos(now + g.progress_deadline);
                }
                g.promoted = true;
            }
            if !d.requires_promotion() && d.status == drover_structs::DEPLOYMENT_STATUS_RUNNING {
                d.status_description = drover_structs::DEPLOYMENT_DESC_RUNNING.into();
            }
            d.modify_time = now;
            upsert_in(t, index, d);
        })
    }

    /// Removes deployments (garbage collection).
    pub fn delete_deployments(&self, index: u64, ids: &[String]) {
        self.write(index, &[Table::Deployments], |t| {
            for id in ids {
                if let Some(d) = t.deployments.remove(id)
                    && let Some(set) = t.deployments_by_job.get_mut(&job_key(&d))
                {
                    set.remove(id);
                }
            }
        })
    }

    /// Nomad's `UpdateJobStability`: marks one version of a job stable or not.
    pub fn set_job_stability(
        &self,
        index: u64,
        namespace: &str,
        job_id: &str,
        version: u64,
        stable: bool,
    ) -> Result<(), StateError> {
        if self
            .snapshot()
            .job_version(namespace, job_id, version)
            .is_none()
        {
            return Err(StateError::JobNotFound {
                namespace: namespace.into(),
                id: format!("{job_id} version {version}"),
            });
        }
        self.write(index, &[Table::Jobs, Table::JobVersions], |t| {
            crate::store::set_job_stability_in(t, index, namespace, job_id, version, stable);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{
        AllocClientUpdate, AllocDeploymentStatus, DeploymentState, Job, UpdateStrategy,
    };

    fn setup() -> (StateStore, Deployment) {
        let s = StateStore::new();
        let job = Job {
            id: "web".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        s.upsert_job(1, job);
        let job = s.snapshot().job("default", "web").unwrap();
        let mut d = Deployment::for_job(&job, 50, 0);
        let update = UpdateStrategy {
            max_parallel: 1,
            progress_deadline: 10_000_000_000,
            ..Default::default()
        };
        d.task_groups
            .insert("g".into(), DeploymentState::for_group(&update, 2));
        (s, d)
    }

    fn alloc(id: &str, deployment: &str) -> Allocation {
        Allocation {
            id: id.into(),
            namespace: "default".into(),
            job_id: "web".into(),
            task_group: "g".into(),
            node_id: "n1".into(),
            deployment_id: deployment.into(),
            ..Default::default()
        }
    }

    /// A time well after the test's placements.
    fn later() -> i64 {
        drover_structs::time::now_nanos() + 100_000_000_000
    }

    fn health(id: &str, healthy: bool, at: i64) -> AllocClientUpdate {
        AllocClientUpdate {
            id: id.into(),
            client_status: "running".into(),
            deployment_status: Some(AllocDeploymentStatus {
                healthy: Some(healthy),
                timestamp: format_rfc3339_nanos(at),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn placements_and_reported_health_move_the_deployments_counts_and_deadline() {
        let (s, d) = setup();
        let id = d.id.clone();
        let job = s.snapshot().job("default", "web");
        let changes = crate::PlanDeploymentChanges {
            deployment: Some(d),
            updates: vec![],
        };
        s.upsert_plan_results_with(
            2,
            job,
            vec![],
            vec![alloc("a1", &id), alloc("a2", &id)],
            vec![],
            changes,
            drover_structs::time::now_nanos(),
        );
        let got = s.snapshot().deployment(&id).unwrap();
        let g = &got.task_groups["g"];
        assert_eq!((g.placed_allocs, g.healthy_allocs), (2, 0));
        assert_ne!(
            g.require_progress_by, ZERO_TIME,
            "the first placement starts the deadline"
        );
        assert_eq!(got.create_index, 2);

        let at = later();
        s.update_allocs_from_client(3, vec![health("a1", true, at)]);
        s.update_allocs_from_client(4, vec![health("a1", true, at)]);
        let g = s.snapshot().deployment(&id).unwrap().task_groups["g"].clone();
        assert_eq!(
            (g.healthy_allocs, g.unhealthy_allocs),
            (1, 0),
            "counted once"
        );
        assert_eq!(
            g.require_progress_by,
            format_rfc3339_nanos(at + 10_000_000_000),
            "the health's time plus the 10 s deadline"
        );
        s.update_allocs_from_client(5, vec![health("a1", false, at)]);
        let snap = s.snapshot();
        let g = &snap.deployment(&id).unwrap().task_groups["g"];
        assert_eq!((g.healthy_allocs, g.unhealthy_allocs), (0, 1));
        let a1 = snap.alloc("a1").unwrap();
        assert_eq!(a1.deployment_status.as_ref().unwrap().modify_index, 5);
        assert_eq!(snap.latest_deployment("default", "web").unwrap().id, id);
    }

    #[test]
    fn a_successful_deployment_marks_its_job_version_stable() {
        let (s, d) = setup();
        let id = d.id.clone();
        s.upsert_deployments(2, vec![d], &[], vec![]);
        assert!(!s.snapshot().job("default", "web").unwrap().stable);
        let update = DeploymentStatusUpdate {
            deployment_id: id.clone(),
            status: DEPLOYMENT_STATUS_SUCCESSFUL.into(),
            status_description: drover_structs::DEPLOYMENT_DESC_SUCCESSFUL.into(),
        };
        s.upsert_deployments(3, vec![], &[update], vec![]);
        let snap = s.snapshot();
        assert!(snap.job("default", "web").unwrap().stable);
        assert!(snap.job_version("default", "web", 0).unwrap().stable);
        assert_eq!(snap.deployment(&id).unwrap().status, "successful");
        s.delete_deployments(4, std::slice::from_ref(&id));
        assert!(s.snapshot().latest_deployment("default", "web").is_none());
    }
}
