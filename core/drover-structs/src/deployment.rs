//! Deployments (Nomad's `structs.Deployment`): the rollout of one job version, per task group
//! counted in a `DeploymentState`, with Nomad's statuses and description texts, and the
//! health a client reports for an allocation that is part of one (`AllocDeploymentStatus`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::{Job, UpdateStrategy};

pub const DEPLOYMENT_STATUS_RUNNING: &str = "running";
pub const DEPLOYMENT_STATUS_PAUSED: &str = "paused";
pub const DEPLOYMENT_STATUS_FAILED: &str = "failed";
pub const DEPLOYMENT_STATUS_SUCCESSFUL: &str = "successful";
pub const DEPLOYMENT_STATUS_CANCELLED: &str = "cancelled";
pub const DEPLOYMENT_STATUS_PENDING: &str = "pending";
pub const DEPLOYMENT_STATUS_BLOCKED: &str = "blocked";
pub const DEPLOYMENT_STATUS_UNBLOCKING: &str = "unblocking";

pub const DEPLOYMENT_DESC_RUNNING: &str = "Deployment is running";
pub const DEPLOYMENT_DESC_RUNNING_NEEDS_PROMOTION: &str =
    "Deployment is running but requires manual promotion";
pub const DEPLOYMENT_DESC_RUNNING_AUTO_PROMOTION: &str =
    "Deployment is running pending automatic promotion";
pub const DEPLOYMENT_DESC_PAUSED: &str = "Deployment is paused";
pub const DEPLOYMENT_DESC_SUCCESSFUL: &str = "Deployment completed successfully";
pub const DEPLOYMENT_DESC_STOPPED_JOB: &str = "Cancelled because job is stopped";
pub const DEPLOYMENT_DESC_NEWER_JOB: &str = "Cancelled due to newer version of job";
pub const DEPLOYMENT_DESC_FAILED_ALLOCATIONS: &str = "Failed due to unhealthy allocations";
pub const DEPLOYMENT_DESC_PROGRESS_DEADLINE: &str = "Failed due to progress deadline";
pub const DEPLOYMENT_DESC_FAILED_BY_USER: &str = "Deployment marked as failed";
pub const DEPLOYMENT_DESC_FAILED_BY_PEER: &str = "Failed because of an error in peer region";
pub const DEPLOYMENT_DESC_BLOCKED: &str = "Deployment is complete but waiting for peer region";
pub const DEPLOYMENT_DESC_UNBLOCKING: &str = "Deployment is unblocking remaining regions";
pub const DEPLOYMENT_DESC_PENDING_FOR_PEER: &str = "Deployment is pending, waiting for peer region";

/// Nomad's `DeploymentStatusDescriptionRollback`.
pub fn desc_rollback(base: &str, job_version: u64) -> String {
    format!("{base} - rolling back to job version {job_version}")
}

/// Nomad's `DeploymentStatusDescriptionRollbackNoop`.
pub fn desc_rollback_noop(base: &str, job_version: u64) -> String {
    format!(
        "{base} - not rolling back to stable job version {job_version} as current job has same specification"
    )
}

/// Nomad's `DeploymentStatusDescriptionNoRollbackTarget`.
pub fn desc_no_rollback_target(base: &str) -> String {
    format!("{base} - no stable job version to auto revert to")
}

/// Go's zero `time.Time` as JSON.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// One task group's part of a deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeploymentState {
    #[serde(rename = "AutoRevert")]
    pub auto_revert: bool,
    #[serde(rename = "AutoPromote")]
    pub auto_promote: bool,
    /// Nanoseconds.
    #[serde(rename = "ProgressDeadline")]
    pub progress_deadline: i64,
    /// RFC 3339 (Go's `time.Time`); the zero time while no progress is required yet.
    #[serde(rename = "RequireProgressBy")]
    pub require_progress_by: String,
    #[serde(rename = "Promoted")]
    pub promoted: bool,
    #[serde(rename = "PlacedCanaries")]
    pub placed_canaries: Option<Vec<String>>,
    #[serde(rename = "DesiredCanaries")]
    pub desired_canaries: i64,
    #[serde(rename = "DesiredTotal")]
    pub desired_total: i64,
    #[serde(rename = "PlacedAllocs")]
    pub placed_allocs: i64,
    #[serde(rename = "HealthyAllocs")]
    pub healthy_allocs: i64,
    #[serde(rename = "UnhealthyAllocs")]
    pub unhealthy_allocs: i64,
}

impl Default for DeploymentState {
    fn default() -> Self {
        DeploymentState {
            auto_revert: false,
            auto_promote: false,
            progress_deadline: 0,
            require_progress_by: ZERO_TIME.into(),
            promoted: false,
            placed_canaries: None,
            desired_canaries: 0,
            desired_total: 0,
            placed_allocs: 0,
            healthy_allocs: 0,
            unhealthy_allocs: 0,
        }
    }
}

impl DeploymentState {
    /// The state a group starts a deployment with (Nomad's `initializeDeploymentState`):
    /// canaries are wanted only once an update needs them, which the reconciler decides.
    pub fn for_group(update: &UpdateStrategy, count: i64) -> Self {
        DeploymentState {
            auto_revert: update.auto_revert,
            auto_promote: update.auto_promote,
            progress_deadline: update.progress_deadline,
            desired_total: count,
            ..Default::default()
        }
    }

    /// Canaries are wanted and not yet promoted.
    pub fn awaits_promotion(&self) -> bool {
        self.desired_canaries > 0 && !self.promoted
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Deployment {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "JobVersion")]
    pub job_version: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    #[serde(rename = "JobSpecModifyIndex")]
    pub job_spec_modify_index: u64,
    #[serde(rename = "JobCreateIndex")]
    pub job_create_index: u64,
    #[serde(rename = "IsMultiregion")]
    pub is_multiregion: bool,
    #[serde(rename = "TaskGroups")]
    pub task_groups: BTreeMap<String, DeploymentState>,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    #[serde(rename = "EvalPriority")]
    pub eval_priority: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    /// Unix nanoseconds.
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

impl Deployment {
    /// Nomad's `NewDeployment`: running, for the job as it is now.
    pub fn for_job(job: &Job, eval_priority: i64, now: i64) -> Self {
        Deployment {
            id: crate::generate_id(),
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            job_version: job.version,
            job_modify_index: job.modify_index,
            job_spec_modify_index: job.job_modify_index,
            job_create_index: job.create_index,
            is_multiregion: false,
            task_groups: BTreeMap::new(),
            status: DEPLOYMENT_STATUS_RUNNING.into(),
            status_description: DEPLOYMENT_DESC_RUNNING.into(),
            eval_priority,
            create_index: 0,
            modify_index: 0,
            create_time: now,
            modify_time: now,
        }
    }

    /// Nomad's `Active`: running, paused, blocked, unblocking or pending.
    pub fn active(&self) -> bool {
        matches!(
            self.status.as_str(),
            DEPLOYMENT_STATUS_RUNNING
                | DEPLOYMENT_STATUS_PAUSED
                | DEPLOYMENT_STATUS_BLOCKED
                | DEPLOYMENT_STATUS_UNBLOCKING
                | DEPLOYMENT_STATUS_PENDING
        )
    }

    /// Whether the deployment is of this version of the job (not of an older one, nor of an
    /// earlier job of the same id).
    pub fn is_for(&self, job: &Job) -> bool {
        self.job_create_index == job.create_index && self.job_version == job.version
    }

    /// Some group's canaries wait for a promotion.
    pub fn requires_promotion(&self) -> bool {
        self.task_groups
            .values()
            .any(DeploymentState::awaits_promotion)
    }
}

/// A status change the scheduler or the deployment watcher makes (Nomad's
/// `DeploymentStatusUpdate`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeploymentStatusUpdate {
    #[serde(rename = "DeploymentID")]
    pub deployment_id: String,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
}

/// The deployment health of an allocation, as its client reports it (Nomad's
/// `AllocDeploymentStatus`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocDeploymentStatus {
    /// `None` until the client decided.
    #[serde(rename = "Healthy")]
    pub healthy: Option<bool>,
    /// RFC 3339: when the health was decided.
    #[serde(rename = "Timestamp")]
    pub timestamp: String,
    #[serde(rename = "Canary")]
    pub canary: bool,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl AllocDeploymentStatus {
    pub fn is_healthy(&self) -> bool {
        self.healthy == Some(true)
    }
    pub fn is_unhealthy(&self) -> bool {
        self.healthy == Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_is_nomads_json() {
        let job = Job {
            id: "web".into(),
            namespace: "default".into(),
            version: 3,
            create_index: 10,
            ..Default::default()
        };
        let mut d = Deployment::for_job(&job, 50, 1);
        let mut state = DeploymentState::for_group(
            &UpdateStrategy {
                max_parallel: 1,
                canary: 1,
                auto_revert: true,
                progress_deadline: 600_000_000_000,
                ..Default::default()
            },
            4,
        );
        assert_eq!(state.desired_canaries, 0, "until an update needs them");
        state.desired_canaries = 1;
        d.task_groups.insert("g".into(), state);
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["Status"], "running");
        assert_eq!(v["StatusDescription"], "Deployment is running");
        assert_eq!(v["JobVersion"], 3);
        let g = &v["TaskGroups"]["g"];
        assert_eq!(g["DesiredTotal"], 4);
        assert_eq!(g["DesiredCanaries"], 1);
        assert_eq!(g["RequireProgressBy"], ZERO_TIME);
        assert!(g["PlacedCanaries"].is_null());
        assert!(d.is_for(&job) && d.active() && d.requires_promotion());
        let back: Deployment = serde_json::from_value(v).unwrap();
        assert_eq!(back, d);
    }
}
