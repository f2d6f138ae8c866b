//! Deployment operations: the operator's `deployment fail|pause|resume|promote` and manual
//! allocation health (`/v1/deployment/...`), and what failing a deployment means, shared with
//! the leader's watcher (`deployment_watcher`): the failed status with Nomad's description and,
//! when a group has `auto_revert`, a rollback to the job's latest stable version, registered in
//! the same log entry.

use std::sync::Arc;

use drover_state::StateSnapshot;
use drover_structs::time::{format_rfc3339_nanos, now_nanos};
use drover_structs::{
    DEPLOYMENT_DESC_FAILED_BY_USER, DEPLOYMENT_DESC_PAUSED, DEPLOYMENT_DESC_RUNNING,
    DEPLOYMENT_STATUS_FAILED, DEPLOYMENT_STATUS_PAUSED, DEPLOYMENT_STATUS_RUNNING, Deployment,
    DeploymentStatusUpdate, Evaluation, Job, desc_no_rollback_target, desc_rollback,
    desc_rollback_noop,
};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::rpc::{Reply, Request};
use crate::server::Server;

/// Nomad's `EvalTriggerDeploymentWatcher`.
pub(crate) const TRIGGER_DEPLOYMENT_WATCHER: &str = "deployment-watcher";
/// Nomad's `EvalTriggerRollback`.
const TRIGGER_ROLLBACK: &str = "rollback";

/// A deployment write: status changes, the job a rollback registers, manual allocation
/// health, and the evaluations that follow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeploymentWrite {
    pub updates: Vec<DeploymentStatusUpdate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<Job>,
    /// Allocations an operator marked healthy or unhealthy, with the time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_health: Option<AllocHealth>,
    /// Canaries promoted (checked healthy by the leader first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote: Option<Promotion>,
    pub evals: Vec<Evaluation>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promotion {
    pub deployment_id: String,
    /// The groups promoted; empty: all.
    pub groups: Vec<String>,
    /// Unix nanoseconds: the progress deadlines start again from here.
    pub at: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocHealth {
    pub healthy: Vec<String>,
    pub unhealthy: Vec<String>,
    pub timestamp: String,
}

/// What a deployment operation answers (Nomad's `DeploymentUpdateResponse`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentUpdateResult {
    pub eval_id: String,
    pub eval_create_index: u64,
    pub deployment_modify_index: u64,
    /// The job version a rollback registered.
    pub reverted_job_version: Option<u64>,
    pub index: u64,
}

/// The operator's deployment calls, routed to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum DeploymentRequest {
    Fail {
        id: String,
    },
    Pause {
        id: String,
        pause: bool,
    },
    /// Nomad's `DeploymentPromoteRequest`: `all`, or the named groups.
    Promote {
        id: String,
        all: bool,
        groups: Vec<String>,
    },
    AllocHealth {
        id: String,
        healthy: Vec<String>,
        unhealthy: Vec<String>,
    },
    /// Nomad's `Deployment.Unblock`: a blocked multiregion deployment is successful.
    Unblock {
        id: String,
    },
}

/// The status update that fails `d` with `base` as the reason, and the job a rollback
/// registers (Nomad's watcher: the latest stable version, unless none exists or it has the
/// current spec).
pub(crate) fn fail_with_rollback(
    snap: &StateSnapshot,
    d: &Deployment,
    base: &str,
) -> (DeploymentStatusUpdate, Option<Job>) {
    let mut description = base.to_string();
    let mut rollback = None;
    if d.task_groups.values().any(|g| g.auto_revert) {
        let current = snap.job(&d.namespace, &d.job_id);
        let stable = snap
            .job_versions(&d.namespace, &d.job_id)
            .into_iter()
            .find(|j| j.stable && j.version != d.job_version);
        match (stable, current) {
            (None, _) => description = desc_no_rollback_target(base),
            (Some(s), Some(cur)) if !cur.spec_changed(&s) => {
                description = desc_rollback_noop(base, s.version);
            }
            (Some(s), _) => {
                description = desc_rollback(base, s.version);
                let mut job = (*s).clone();
                job.stop = false;
                job.stable = false;
                job.submit_time = now_nanos();
                rollback = Some(job);
            }
        }
    }
    let update = DeploymentStatusUpdate {
        deployment_id: d.id.clone(),
        status: DEPLOYMENT_STATUS_FAILED.into(),
        status_description: description,
    };
    (update, rollback)
}

/// Nomad's promotion checks (`UpdateDeploymentPromotion`): every canary of the promoted
/// groups is healthy and each group has all it wants; then the write promoting them, with an
/// evaluation that lets the rollout go on.
pub(crate) fn promote_write(
    snap: &StateSnapshot,
    d: &Deployment,
    groups: Vec<String>,
) -> Result<DeploymentWrite, ServerError> {
    let chosen = |name: &str| groups.is_empty() || groups.iter().any(|g| g == name);
    let mut problems = drover_structs::MultiError::new();
    let mut have_canaries = false;
    for (name, g) in d.task_groups.iter().filter(|(n, _)| chosen(n)) {
        if g.desired_canaries == 0 {
            continue;
        }
        let mut healthy = 0;
        for id in g.placed_canaries.iter().flatten() {
            let Some(a) = snap.alloc(id) else { continue };
            let ok = !a.terminal() && a.deployment_status.as_ref().is_some_and(|s| s.is_healthy());
            if ok {
                healthy += 1;
                have_canaries = true;
            } else {
                problems.push(format!(
                    "Canary allocation {:?} for group {name:?} is not healthy",
                    a.id
                ));
            }
        }
        if healthy != g.desired_canaries {
            problems.push(format!(
                "Task group {name:?} has {healthy}/{} healthy allocations",
                g.desired_canaries
            ));
        }
    }
    if !problems.errors.is_empty() {
        return Err(ServerError::BadRequest(problems.to_string()));
    }
    if !have_canaries {
        return Err(ServerError::BadRequest("no canaries to promote".into()));
    }
    Ok(DeploymentWrite {
        promote: Some(Promotion {
            deployment_id: d.id.clone(),
            groups,
            at: now_nanos(),
        }),
        evals: vec![deployment_eval(snap, d, TRIGGER_DEPLOYMENT_WATCHER)],
        ..Default::default()
    })
}

/// An evaluation of the deployment's job, for the scheduler to act on what changed.
pub(crate) fn deployment_eval(snap: &StateSnapshot, d: &Deployment, trigger: &str) -> Evaluation {
    let mut e = match snap.job(&d.namespace, &d.job_id) {
        Some(job) => Evaluation::for_job(&job, trigger),
        None => Evaluation {
            id: drover_structs::generate_id(),
            namespace: d.namespace.clone(),
            job_id: d.job_id.clone(),
            priority: d.eval_priority,
            eval_type: drover_structs::JOB_TYPE_SERVICE.into(),
            triggered_by: trigger.into(),
            status: drover_structs::EVAL_STATUS_PENDING.into(),
            ..Default::default()
        },
    };
    e.deployment_id = d.id.clone();
    e
}

/// A failing write for `d`: the status, the rollback and its evaluation (or the deployment
/// watcher's evaluation without one).
pub(crate) fn fail_write(snap: &StateSnapshot, d: &Deployment, base: &str) -> DeploymentWrite {
    let (update, rollback) = fail_with_rollback(snap, d, base);
    let eval = match &rollback {
        Some(job) => {
            let mut e = Evaluation::for_job(job, TRIGGER_ROLLBACK);
            e.deployment_id = d.id.clone();
            e
        }
        None => deployment_eval(snap, d, TRIGGER_DEPLOYMENT_WATCHER),
    };
    DeploymentWrite {
        updates: vec![update],
        rollback,
        evals: vec![eval],
        ..Default::default()
    }
}

impl Server {
    fn known_deployment(&self, id: &str) -> Result<(StateSnapshot, Arc<Deployment>), ServerError> {
        let snap = self.snapshot();
        let d = snap
            .deployment(id)
            .ok_or_else(|| ServerError::NotFound(format!("deployment not found: {id}")))?;
        Ok((snap, d))
    }

    /// Routes a deployment operation to the leader.
    pub async fn deployment_op(
        &self,
        request: DeploymentRequest,
    ) -> Result<DeploymentUpdateResult, ServerError> {
        match self.route(Request::Deployment(request)).await? {
            Reply::Deployment(result) => Ok(result),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    pub(crate) async fn execute_deployment(
        &self,
        request: DeploymentRequest,
    ) -> Result<Reply, ServerError> {
        let write = match request {
            DeploymentRequest::Fail { id } => {
                let (snap, d) = self.known_deployment(&id)?;
                if !d.active() {
                    return Err(ServerError::BadRequest(
                        "can't fail terminal deployment".into(),
                    ));
                }
                fail_write(&snap, &d, DEPLOYMENT_DESC_FAILED_BY_USER)
            }
            DeploymentRequest::Pause { id, pause } => {
                let (snap, d) = self.known_deployment(&id)?;
                if !d.active() {
                    let verb = if pause { "pause" } else { "resume" };
                    return Err(ServerError::BadRequest(format!(
                        "can't {verb} terminal deployment"
                    )));
                }
                let (status, description) = if pause {
                    (DEPLOYMENT_STATUS_PAUSED, DEPLOYMENT_DESC_PAUSED)
                } else {
                    (DEPLOYMENT_STATUS_RUNNING, DEPLOYMENT_DESC_RUNNING)
                };
                DeploymentWrite {
                    updates: vec![DeploymentStatusUpdate {
                        deployment_id: d.id.clone(),
                        status: status.into(),
                        status_description: description.into(),
                    }],
                    // Resuming lets the scheduler go on; pausing needs no evaluation.
                    evals: if pause {
                        Vec::new()
                    } else {
                        vec![deployment_eval(&snap, &d, TRIGGER_DEPLOYMENT_WATCHER)]
                    },
                    ..Default::default()
                }
            }
            DeploymentRequest::Promote { id, all, groups } => {
                let (snap, d) = self.known_deployment(&id)?;
                if !d.active() {
                    return Err(ServerError::BadRequest(
                        "can't promote terminal deployment".into(),
                    ));
                }
                let groups = if all { Vec::new() } else { groups };
                promote_write(&snap, &d, groups)?
            }
            DeploymentRequest::Unblock { id } => {
                let (_, d) = self.known_deployment(&id)?;
                crate::multiregion::unblock_write(&d)?
            }
            DeploymentRequest::AllocHealth {
                id,
                healthy,
                unhealthy,
            } => {
                let (snap, d) = self.known_deployment(&id)?;
                if !d.active() {
                    return Err(ServerError::BadRequest(
                        "can't set health of allocations for a terminal deployment".into(),
                    ));
                }
                if healthy.is_empty() && unhealthy.is_empty() {
                    return Err(ServerError::BadRequest(
                        "must specify at least one healthy/unhealthy allocation ID".into(),
                    ));
                }
                for a in healthy.iter().chain(&unhealthy) {
                    let part = snap.alloc(a).is_some_and(|x| x.deployment_id == d.id);
                    if !part {
                        return Err(ServerError::BadRequest(format!(
                            "Allocation {a:?} is not part of the deployment"
                        )));
                    }
                }
                let health = AllocHealth {
                    timestamp: format_rfc3339_nanos(now_nanos()),
                    healthy,
                    unhealthy: unhealthy.clone(),
                };
                let mut write = if unhealthy.is_empty() {
                    DeploymentWrite {
                        evals: vec![deployment_eval(&snap, &d, TRIGGER_DEPLOYMENT_WATCHER)],
                        ..Default::default()
                    }
                } else {
                    fail_write(
                        &snap,
                        &d,
                        drover_structs::DEPLOYMENT_DESC_FAILED_ALLOCATIONS,
                    )
                };
                write.alloc_health = Some(health);
                write
            }
        };
        let result = self.apply_deployment_write(write).await?;
        Ok(Reply::Deployment(result))
    }

    /// Commits a deployment write and enqueues its evaluations.
    pub(crate) async fn apply_deployment_write(
        &self,
        write: DeploymentWrite,
    ) -> Result<DeploymentUpdateResult, ServerError> {
        let evals = write.evals.clone();
        let reverting = write.rollback.is_some();
        let deployment = write.updates.first().map(|u| u.deployment_id.clone());
        let index = self.inner.apply(LogEntry::Deployment(write)).await?;
        for mut e in evals.iter().cloned() {
            e.modify_index = index;
            self.inner.enqueue_when_due(e);
        }
        let snap = self.snapshot();
        let reverted_job_version = if reverting {
            evals
                .first()
                .and_then(|e| snap.job(&e.namespace, &e.job_id))
                .map(|j| j.version)
        } else {
            None
        };
        let deployment_modify_index = deployment
            .and_then(|id| snap.deployment(&id))
            .map_or(index, |d| d.modify_index);
        Ok(DeploymentUpdateResult {
            eval_id: evals.first().map(|e| e.id.clone()).unwrap_or_default(),
            eval_create_index: if evals.is_empty() { 0 } else { index },
            deployment_modify_index,
            reverted_job_version,
            index,
        })
    }
}
