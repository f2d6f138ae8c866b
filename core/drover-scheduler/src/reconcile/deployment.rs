//! The reconciler's deployment bookkeeping (Nomad's `allocReconciler` deployment parts):
//! which deployment is current, when one is created, how many destructive updates a group
//! may make now (`max_parallel` minus the deployment's allocations not yet healthy, nothing
//! while paused or failed or with an unhealthy one, nothing while canaries wait for their
//! promotion), which canaries are stopped (an older or failed deployment's, unpromoted), and
//! when a deployment is complete.

use std::sync::Arc;

use drover_structs::{
    Allocation, DEPLOYMENT_DESC_BLOCKED, DEPLOYMENT_DESC_NEWER_JOB,
    DEPLOYMENT_DESC_PENDING_FOR_PEER, DEPLOYMENT_DESC_STOPPED_JOB, DEPLOYMENT_DESC_SUCCESSFUL,
    DEPLOYMENT_STATUS_BLOCKED, DEPLOYMENT_STATUS_CANCELLED, DEPLOYMENT_STATUS_FAILED,
    DEPLOYMENT_STATUS_PAUSED, DEPLOYMENT_STATUS_PENDING, DEPLOYMENT_STATUS_RUNNING,
    DEPLOYMENT_STATUS_SUCCESSFUL, Deployment, DeploymentState, DeploymentStatusUpdate, Job,
    TaskGroup, UpdateStrategy,
};

/// A group's update strategy when it asks for deployments (Nomad's `!IsEmpty()`).
pub(crate) fn strategy(tg: &TaskGroup) -> Option<&UpdateStrategy> {
    tg.update.as_ref().filter(|u| u.max_parallel > 0)
}

pub(crate) struct DeploymentTrack {
    /// The job version's deployment that is not successful (Nomad's `a.deployment`).
    pub current: Option<Deployment>,
    /// The latest deployment when it is not current (Nomad's `a.oldDeployment`).
    old: Option<Arc<Deployment>>,
    /// `current` was created by this pass and goes into the plan whole.
    pub created: bool,
    pub paused: bool,
    pub failed: bool,
    pub updates: Vec<DeploymentStatusUpdate>,
    now: i64,
    eval_priority: i64,
    /// The job is multiregion: its deployments are marked so, wait as `blocked` when
    /// complete, and (`pending_start`) start `pending` in a region that is not among the
    /// first `max_parallel` of the rollout.
    multiregion: bool,
    pending_start: bool,
}

fn status_update(d: &Deployment, status: &str, description: &str) -> DeploymentStatusUpdate {
    DeploymentStatusUpdate {
        deployment_id: d.id.clone(),
        status: status.into(),
        status_description: description.into(),
    }
}

impl DeploymentTrack {
    /// Nomad's `cancelUnneededDeployments`: a deployment of a stopped job, or of another
    /// version, is cancelled while active and is not current; a successful one is not either.
    pub(crate) fn new(
        latest: Option<&Arc<Deployment>>,
        job: Option<&Job>,
        now: i64,
        eval_priority: i64,
    ) -> Self {
        let mut t = DeploymentTrack {
            current: None,
            old: None,
            created: false,
            paused: false,
            failed: false,
            updates: Vec::new(),
            now,
            eval_priority,
            multiregion: false,
            pending_start: false,
        };
        if let Some(spec) = job.and_then(Job::multiregion_spec)
            && let Some(job) = job
        {
            t.multiregion = true;
            t.pending_start = !spec.starts_at_once(&job.region);
            // This version's deployment is yet to be created: it will be pending, so nothing
            // is placed before a peer region starts it.
            if t.pending_start && !latest.is_some_and(|d| d.is_for(job)) {
                t.paused = true;
            }
        }
        let Some(d) = latest else { return t };
        t.old = Some(d.clone());
        match job {
            Some(job) if !job.stop => {
                if !d.is_for(job) {
                    if d.active() {
                        t.updates.push(status_update(
                            d,
                            DEPLOYMENT_STATUS_CANCELLED,
                            DEPLOYMENT_DESC_NEWER_JOB,
                        ));
                    }
                } else if d.status != DEPLOYMENT_STATUS_SUCCESSFUL {
                    t.paused = matches!(
                        d.status.as_str(),
                        DEPLOYMENT_STATUS_PAUSED | DEPLOYMENT_STATUS_PENDING
                    );
                    t.failed = d.status == DEPLOYMENT_STATUS_FAILED;
                    t.current = Some((**d).clone());
                    t.old = None;
                }
            }
            _ => {
                if d.active() {
                    t.updates.push(status_update(
                        d,
                        DEPLOYMENT_STATUS_CANCELLED,
                        DEPLOYMENT_DESC_STOPPED_JOB,
                    ));
                }
            }
        }
        t
    }

    /// Nomad's `cancelUnneededCanaries`: the unpromoted canaries of the old deployment and of
    /// a failed current one, to stop.
    pub(crate) fn canaries_to_stop(&self) -> Vec<String> {
        let unpromoted = |d: &Deployment| -> Vec<String> {
            d.task_groups
                .values()
                .filter(|g| !g.promoted)
                .flat_map(|g| g.placed_canaries.clone().unwrap_or_default())
                .collect()
        };
        let mut out = self.old.as_deref().map(unpromoted).unwrap_or_default();
        if let Some(d) = self.current.as_ref().filter(|_| self.failed) {
            out.extend(unpromoted(d));
        }
        out
    }

    /// The current deployment's placed canaries, of every group.
    pub(crate) fn current_canaries(&self) -> Vec<String> {
        self.current
            .iter()
            .flat_map(|d| d.task_groups.values())
            .flat_map(|g| g.placed_canaries.clone().unwrap_or_default())
            .collect()
    }

    /// The id placements and in-place updates join: the current deployment, if active.
    pub(crate) fn active_id(&self) -> Option<&str> {
        self.current
            .as_ref()
            .filter(|d| d.active())
            .map(|d| d.id.as_str())
    }

    /// New placements may go ahead (not paused, not failed).
    pub(crate) fn place_ready(&self) -> bool {
        !self.paused && !self.failed
    }

    /// The group's state in the current deployment, or a new one; and whether it existed.
    pub(crate) fn group_state(&self, tg: &TaskGroup) -> (DeploymentState, bool) {
        if let Some(s) = self
            .current
            .as_ref()
            .and_then(|d| d.task_groups.get(&tg.name))
        {
            return (s.clone(), true);
        }
        let state = match strategy(tg) {
            Some(u) => DeploymentState::for_group(u, tg.count),
            None => DeploymentState {
                desired_total: tg.count,
                ..Default::default()
            },
        };
        (state, false)
    }

    /// Nomad's `computeUnderProvisionedBy`: how many destructive updates (and placements
    /// beyond the count's) the group may start now.
    pub(crate) fn under_provisioned_by(
        &self,
        tg: &TaskGroup,
        untainted: &[Arc<Allocation>],
        changing: usize,
        canarying: bool,
    ) -> usize {
        let Some(u) = strategy(tg) else {
            return tg.count.max(0) as usize;
        };
        if changing == 0 {
            return tg.count.max(0) as usize;
        }
        let Some(d) = &self.current else {
            return u.max_parallel as usize;
        };
        if !self.place_ready() || canarying {
            return 0;
        }
        let mut limit = u.max_parallel;
        for a in untainted.iter().filter(|a| a.deployment_id == d.id) {
            match a.deployment_status.as_ref().and_then(|s| s.healthy) {
                // An unhealthy allocation stops the rollout.
                Some(false) => return 0,
                Some(true) => {}
                None => limit -= 1,
            }
        }
        limit.max(0) as usize
    }

    /// Nomad's `createDeployment`: a group with an update strategy and a count gets a
    /// deployment the first time the version runs, or when its spec changes.
    pub(crate) fn attach(
        &mut self,
        job: &Job,
        tg: &TaskGroup,
        state: DeploymentState,
        existing: bool,
        all: &[Arc<Allocation>],
        updating_spec: bool,
    ) {
        if existing || strategy(tg).is_none() || state.desired_total == 0 {
            return;
        }
        let had_running = all.iter().any(|a| {
            a.job
                .as_ref()
                .is_some_and(|j| j.version == job.version && j.create_index == job.create_index)
        });
        if had_running && !updating_spec {
            return;
        }
        if self.current.is_none() {
            let mut d = Deployment::for_job(job, self.eval_priority, self.now);
            d.is_multiregion = self.multiregion;
            if self.pending_start {
                d.status = DEPLOYMENT_STATUS_PENDING.into();
                d.status_description = DEPLOYMENT_DESC_PENDING_FOR_PEER.into();
            }
            self.current = Some(d);
            self.created = true;
        }
        if let Some(d) = self.current.as_mut() {
            d.task_groups.insert(tg.name.clone(), state);
        }
    }

    /// Nomad's `isDeploymentComplete` for one group: nothing left to do and enough healthy
    /// allocations of the deployment.
    pub(crate) fn group_complete(&self, group: &str, remaining: usize) -> bool {
        if remaining != 0 {
            return false;
        }
        let Some(d) = &self.current else {
            return false;
        };
        match d.task_groups.get(group) {
            Some(s) => {
                s.healthy_allocs >= s.desired_total.max(s.desired_canaries) && !s.awaits_promotion()
            }
            None => true,
        }
    }

    /// Nomad's `computeDeploymentUpdates`: a complete deployment is marked successful (a
    /// multiregion one `blocked`, until its peers are done); a new one whose canaries wait
    /// says for what.
    pub(crate) fn finish(&mut self, complete: bool) {
        if self.created
            && let Some(d) = self.current.as_mut()
            && d.requires_promotion()
            && d.status != DEPLOYMENT_STATUS_PENDING
        {
            let auto = d.task_groups.values().any(|g| g.auto_promote);
            d.status_description = if auto {
                drover_structs::DEPLOYMENT_DESC_RUNNING_AUTO_PROMOTION
            } else {
                drover_structs::DEPLOYMENT_DESC_RUNNING_NEEDS_PROMOTION
            }
            .into();
        }
        if !complete {
            return;
        }
        let Some(d) = self.current.as_ref().filter(|_| !self.created) else {
            return;
        };
        if d.is_multiregion {
            // Blocked, unblocking and successful come after a multiregion completion; a
            // paused or pending one waits for whoever holds it.
            if d.status == DEPLOYMENT_STATUS_RUNNING {
                self.updates.push(status_update(
                    d,
                    DEPLOYMENT_STATUS_BLOCKED,
                    DEPLOYMENT_DESC_BLOCKED,
                ));
            }
        } else if d.status != DEPLOYMENT_STATUS_SUCCESSFUL {
            self.updates.push(status_update(
                d,
                DEPLOYMENT_STATUS_SUCCESSFUL,
                DEPLOYMENT_DESC_SUCCESSFUL,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::AllocDeploymentStatus;

    fn job(version: u64) -> Job {
        Job {
            id: "web".into(),
            namespace: "default".into(),
            version,
            create_index: 5,
            ..Default::default()
        }
    }

    fn group(max_parallel: i64) -> TaskGroup {
        TaskGroup {
            name: "g".into(),
            count: 4,
            update: Some(UpdateStrategy {
                max_parallel,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn in_deployment(d: &str, healthy: Option<bool>) -> Arc<Allocation> {
        Arc::new(Allocation {
            deployment_id: d.into(),
            deployment_status: healthy.map(|h| {
                Box::new(AllocDeploymentStatus {
                    healthy: Some(h),
                    ..Default::default()
                })
            }),
            ..Default::default()
        })
    }

    #[test]
    fn a_deployment_of_an_older_version_or_a_stopped_job_is_cancelled_in_nomads_words() {
        let d = Arc::new(Deployment::for_job(&job(1), 50, 0));
        let t = DeploymentTrack::new(Some(&d), Some(&job(2)), 0, 50);
        assert!(t.current.is_none());
        assert_eq!(t.updates[0].status, "cancelled");
        assert_eq!(
            t.updates[0].status_description,
            "Cancelled due to newer version of job"
        );
        let stopped = Job {
            stop: true,
            ..job(1)
        };
        let t = DeploymentTrack::new(Some(&d), Some(&stopped), 0, 50);
        assert_eq!(
            t.updates[0].status_description,
            "Cancelled because job is stopped"
        );
        let t = DeploymentTrack::new(Some(&d), Some(&job(1)), 0, 50);
        assert!(t.updates.is_empty() && t.current.is_some());
    }

    #[test]
    fn the_rollout_moves_max_parallel_minus_what_is_not_healthy_yet_and_stops_on_unhealthy() {
        let d = Arc::new(Deployment::for_job(&job(1), 50, 0));
        let t = DeploymentTrack::new(Some(&d), Some(&job(1)), 0, 50);
        let tg = group(2);
        assert_eq!(t.under_provisioned_by(&tg, &[], 3, false), 2);
        let pending = in_deployment(&d.id, None);
        let healthy = in_deployment(&d.id, Some(true));
        assert_eq!(
            t.under_provisioned_by(&tg, std::slice::from_ref(&pending), 3, false),
            1
        );
        assert_eq!(
            t.under_provisioned_by(&tg, std::slice::from_ref(&healthy), 3, false),
            2
        );
        assert_eq!(
            t.under_provisioned_by(&tg, std::slice::from_ref(&healthy), 3, true),
            0,
            "canaries wait"
        );
        let unhealthy = in_deployment(&d.id, Some(false));
        assert_eq!(
            t.under_provisioned_by(&tg, &[healthy, unhealthy], 3, false),
            0
        );
        assert_eq!(
            t.under_provisioned_by(&tg, &[], 0, false),
            4,
            "nothing to change: the whole count"
        );
        let none = DeploymentTrack::new(None, Some(&job(1)), 0, 50);
        assert_eq!(none.under_provisioned_by(&tg, &[], 3, false), 2);
    }

    #[test]
    fn a_deployment_is_created_on_the_first_run_or_a_spec_change_only() {
        let tg = group(1);
        let j = job(1);
        let mut t = DeploymentTrack::new(None, Some(&j), 0, 50);
        let (state, existing) = t.group_state(&tg);
        t.attach(&j, &tg, state.clone(), existing, &[], false);
        assert!(t.created);
        assert_eq!(
            t.current.as_ref().unwrap().task_groups["g"].desired_total,
            4
        );

        let running = Arc::new(Allocation {
            job: Some(Arc::new(j.clone())),
            ..Default::default()
        });
        let mut t = DeploymentTrack::new(None, Some(&j), 0, 50);
        t.attach(
            &j,
            &tg,
            state.clone(),
            false,
            std::slice::from_ref(&running),
            false,
        );
        assert!(t.current.is_none(), "same version running, nothing changes");
        t.attach(&j, &tg, state, false, &[running], true);
        assert!(t.current.is_some());
    }
}
