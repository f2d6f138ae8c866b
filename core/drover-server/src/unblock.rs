//! Missed unblocks (Nomad's `BlockedEvals.missedUnblock`): a scheduler that ran on a snapshot
//! older than the last time blocked evaluations were let go (capacity changed, a CSI volume
//! claim was freed) may block an evaluation that the change would have let through; that
//! evaluation was not in the blocked set when the unblock came, so it must be enqueued again at
//! once instead of waiting for the next change.
//!
//! The worker stamps every evaluation it creates with the index of the snapshot the scheduler
//! used (Nomad's `Worker.CreateEval`); an evaluation without one is blocked as before.

use std::collections::HashMap;

use drover_structs::{Evaluation, Job};

use crate::volume_watcher::job_uses_csi_volume;

/// The state indexes at which blocked evaluations were last let go.
#[derive(Debug, Default)]
pub(crate) struct UnblockIndexes {
    /// Every blocked evaluation was let go (capacity changed).
    all: u64,
    /// The evaluations of jobs asking for a CSI volume were, by (namespace, volume id).
    csi_volumes: HashMap<(String, String), u64>,
}

impl UnblockIndexes {
    pub fn unblocked_all(&mut self, index: u64) {
        self.all = self.all.max(index);
    }

    pub fn unblocked_csi_volume(&mut self, namespace: &str, volume_id: &str, index: u64) {
        let at = self
            .csi_volumes
            .entry((namespace.to_string(), volume_id.to_string()))
            .or_default();
        *at = (*at).max(index);
    }

    /// Whether `eval`, blocked by a scheduler that ran on the snapshot it names, missed an
    /// unblock that happened after that snapshot. `job` is the evaluation's job, if it still
    /// exists.
    pub fn missed(&self, eval: &Evaluation, job: Option<&Job>) -> bool {
        let seen = eval.snapshot_index;
        if seen == 0 {
            return false;
        }
        if self.all > seen {
            return true;
        }
        job.is_some_and(|job| {
            self.csi_volumes.iter().any(|((namespace, volume_id), at)| {
                *at > seen && *namespace == eval.namespace && job_uses_csi_volume(job, volume_id)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job_with_volume(source: &str) -> Job {
        let mut job = Job {
            id: "second".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        job.task_groups.push(drover_structs::TaskGroup {
            name: "g".into(),
            volumes: Some(json!({"data": {"Type": "csi", "Source": source}})),
            ..Default::default()
        });
        job
    }

    fn blocked_at(snapshot_index: u64) -> Evaluation {
        Evaluation {
            namespace: "default".into(),
            job_id: "second".into(),
            snapshot_index,
            ..Default::default()
        }
    }

    #[test]
    fn a_claim_freed_after_the_schedulers_snapshot_is_a_missed_unblock() {
        let mut u = UnblockIndexes::default();
        let job = job_with_volume("data");
        u.unblocked_csi_volume("default", "data", 57);
        assert!(
            u.missed(&blocked_at(50), Some(&job)),
            "freed after the snapshot"
        );
        assert!(
            !u.missed(&blocked_at(57), Some(&job)),
            "the scheduler saw it"
        );
        assert!(!u.missed(&blocked_at(60), Some(&job)));
    }

    #[test]
    fn only_jobs_asking_for_the_freed_volume_missed_it() {
        let mut u = UnblockIndexes::default();
        u.unblocked_csi_volume("default", "data", 57);
        assert!(!u.missed(&blocked_at(50), Some(&job_with_volume("other"))));
        assert!(!u.missed(&blocked_at(50), None), "the job is gone");
        let mut elsewhere = blocked_at(50);
        elsewhere.namespace = "prod".into();
        assert!(!u.missed(&elsewhere, Some(&job_with_volume("data"))));
    }

    #[test]
    fn capacity_let_go_after_the_snapshot_is_missed_by_every_job() {
        let mut u = UnblockIndexes::default();
        u.unblocked_all(40);
        u.unblocked_all(30);
        assert!(u.missed(&blocked_at(39), None));
        assert!(
            !u.missed(&blocked_at(40), None),
            "indexes only move forward"
        );
    }

    #[test]
    fn an_evaluation_without_a_snapshot_index_is_blocked_as_before() {
        let mut u = UnblockIndexes::default();
        u.unblocked_all(40);
        assert!(!u.missed(&blocked_at(0), None));
    }
}
