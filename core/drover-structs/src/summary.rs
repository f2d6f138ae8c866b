//! Job summaries: counts of allocations per task group and state, as `GET /v1/job/:id/summary`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSummary {
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Summary")]
    pub summary: BTreeMap<String, TaskGroupSummary>,
    #[serde(rename = "Children")]
    pub children: JobChildrenSummary,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskGroupSummary {
    #[serde(rename = "Queued")]
    pub queued: i64,
    #[serde(rename = "Complete")]
    pub complete: i64,
    #[serde(rename = "Failed")]
    pub failed: i64,
    #[serde(rename = "Running")]
    pub running: i64,
    #[serde(rename = "Starting")]
    pub starting: i64,
    #[serde(rename = "Lost")]
    pub lost: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobChildrenSummary {
    #[serde(rename = "Pending")]
    pub pending: i64,
    #[serde(rename = "Running")]
    pub running: i64,
    #[serde(rename = "Dead")]
    pub dead: i64,
}
