//! Evaluations: the unit of scheduling work.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::alloc::AllocMetric;

pub const EVAL_STATUS_BLOCKED: &str = "blocked";
pub const EVAL_STATUS_PENDING: &str = "pending";
pub const EVAL_STATUS_COMPLETE: &str = "complete";
pub const EVAL_STATUS_FAILED: &str = "failed";
pub const EVAL_STATUS_CANCELED: &str = "canceled";

pub const TRIGGER_JOB_REGISTER: &str = "job-register";
pub const TRIGGER_JOB_DEREGISTER: &str = "job-deregister";
pub const TRIGGER_NODE_UPDATE: &str = "node-update";
pub const TRIGGER_ALLOC_STOP: &str = "alloc-stop";
pub const TRIGGER_RETRY_FAILED_ALLOC: &str = "alloc-failure";
pub const TRIGGER_QUEUED_ALLOCS: &str = "queued-allocs";
pub const TRIGGER_MAX_PLANS: &str = "max-plan-attempts";
/// The `lost_after` deadline of allocations on a disconnected node.
pub const TRIGGER_MAX_DISCONNECT_TIMEOUT: &str = "max-disconnect-timeout";
/// A disconnected client reported its allocations again.
pub const TRIGGER_RECONNECT: &str = "reconnect";

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// Nomad omits empty fields of evaluations in its JSON; so does Drover.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Evaluation {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Priority")]
    pub priority: i64,
    #[serde(rename = "Type")]
    pub eval_type: String,
    #[serde(rename = "TriggeredBy")]
    pub triggered_by: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "JobModifyIndex", skip_serializing_if = "is_zero_u64")]
    pub job_modify_index: u64,
    #[serde(rename = "NodeID", skip_serializing_if = "String::is_empty")]
    pub node_id: String,
    #[serde(rename = "NodeModifyIndex", skip_serializing_if = "is_zero_u64")]
    pub node_modify_index: u64,
    #[serde(rename = "DeploymentID", skip_serializing_if = "String::is_empty")]
    pub deployment_id: String,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "StatusDescription", skip_serializing_if = "String::is_empty")]
    pub status_description: String,
    /// Nanoseconds to wait before the eval may be processed.
    #[serde(rename = "Wait", skip_serializing_if = "is_zero_i64")]
    pub wait: i64,
    /// Unix nanoseconds before which the evaluation must not be processed (reschedule delays).
    #[serde(rename = "WaitUntil", skip_serializing_if = "is_zero_i64")]
    pub wait_until: i64,
    #[serde(rename = "NextEval", skip_serializing_if = "String::is_empty")]
    pub next_eval: String,
    #[serde(rename = "PreviousEval", skip_serializing_if = "String::is_empty")]
    pub previous_eval: String,
    #[serde(rename = "BlockedEval", skip_serializing_if = "String::is_empty")]
    pub blocked_eval: String,
    #[serde(rename = "FailedTGAllocs", skip_serializing_if = "Option::is_none")]
    pub failed_tg_allocs: Option<BTreeMap<String, AllocMetric>>,
    #[serde(rename = "ClassEligibility", skip_serializing_if = "Option::is_none")]
    pub class_eligibility: Option<BTreeMap<String, bool>>,
    #[serde(
        rename = "EscapedComputedClass",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub escaped_computed_class: bool,
    #[serde(rename = "QueuedAllocations", skip_serializing_if = "Option::is_none")]
    pub queued_allocations: Option<BTreeMap<String, i64>>,
    /// Nomad's `AnnotatePlan`: the scheduler records its decisions per task group in the
    /// plan (`job plan`'s dry run). Never set on an evaluation that is stored.
    #[serde(
        rename = "AnnotatePlan",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub annotate_plan: bool,
    #[serde(rename = "SnapshotIndex", skip_serializing_if = "is_zero_u64")]
    pub snapshot_index: u64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

impl Evaluation {
    /// A pending evaluation for a job.
    pub fn for_job(job: &crate::job::Job, triggered_by: &str) -> Self {
        let now = crate::time::now_nanos();
        Evaluation {
            id: crate::generate_id(),
            namespace: job.namespace.clone(),
            priority: job.priority,
            eval_type: job.job_type.clone(),
            triggered_by: triggered_by.to_string(),
            job_id: job.id.clone(),
            job_modify_index: job.job_modify_index,
            status: EVAL_STATUS_PENDING.to_string(),
            create_time: now,
            modify_time: now,
            ..Default::default()
        }
    }

    pub fn terminal(&self) -> bool {
        matches!(
            self.status.as_str(),
            EVAL_STATUS_COMPLETE | EVAL_STATUS_FAILED | EVAL_STATUS_CANCELED
        )
    }
}
