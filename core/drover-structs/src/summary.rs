//! Job summaries: counts of allocations per task group and state, as `GET /v1/job/:id/summary`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::{JOB_STATUS_DEAD, JOB_STATUS_RUNNING};

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

impl JobChildrenSummary {
    /// Counts one child job by its status, as Nomad's state store does: `running` and `dead`
    /// are themselves, anything else (`pending`, or no status yet) is pending.
    pub fn count(&mut self, status: &str) {
        match status {
            JOB_STATUS_RUNNING => self.running += 1,
            JOB_STATUS_DEAD => self.dead += 1,
            _ => self.pending += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_counted_by_status_with_unknown_as_pending() {
        let mut c = JobChildrenSummary::default();
        for status in ["running", "dead", "dead", "pending", ""] {
            c.count(status);
        }
        assert_eq!(
            c,
            JobChildrenSummary {
                pending: 2,
                running: 1,
                dead: 2
            }
        );
    }
}
