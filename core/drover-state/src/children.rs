//! What a parent job (periodic or parameterized) knows of its children: Nomad's `Children`
//! counts in the parent's job summary, computed from the children's statuses when read, and the
//! child a dispatch idempotency token already created.

use std::sync::Arc;

use drover_structs::{Job, JobChildrenSummary, JobSummary};

use crate::tables::StateSnapshot;

impl StateSnapshot {
    /// Nomad's `JobChildrenSummary` of `parent`: its children counted by status.
    pub fn children_summary(&self, ns: &str, parent: &str) -> JobChildrenSummary {
        let mut summary = JobChildrenSummary::default();
        for child in self.child_jobs(ns, parent) {
            summary.count(&child.status);
        }
        summary
    }

    /// The summary of job `id` with its `Children` filled in, and the index it reflects: the
    /// summary's own, or a later one when a child changed since. `None` when the job has no
    /// summary.
    pub fn job_summary_with_children(&self, ns: &str, id: &str) -> Option<(JobSummary, u64)> {
        let stored = self.job_summary(ns, id)?;
        let mut summary = (*stored).clone();
        let mut index = summary.modify_index;
        for child in self.child_jobs(ns, id) {
            summary.children.count(&child.status);
            index = index.max(child.modify_index);
        }
        Some((summary, index))
    }

    /// The child of `parent` that a dispatch with `token` created, while it is not garbage
    /// collected, whatever its status (Nomad's check in `Job.Dispatch`). An empty token never
    /// matches.
    pub fn dispatched_child_with_token(
        &self,
        ns: &str,
        parent: &str,
        token: &str,
    ) -> Option<Arc<Job>> {
        if token.is_empty() {
            return None;
        }
        self.child_jobs(ns, parent)
            .into_iter()
            .find(|child| child.dispatch_idempotency_token == token)
    }
}

#[cfg(test)]
mod tests {
    use drover_structs::*;

    use crate::StateStore;

    fn job(id: &str, parent: &str, status: &str, token: &str) -> Job {
        Job {
            id: id.into(),
            name: id.into(),
            namespace: "default".into(),
            parent_id: parent.into(),
            job_type: "batch".into(),
            status: status.into(),
            dispatch_idempotency_token: token.into(),
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count: 1,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_parent_summary_counts_only_its_own_children_by_status() {
        let s = StateStore::new();
        s.upsert_job(2, job("render", "", "", ""));
        // No evaluation yet: pending.
        s.upsert_job(3, job("render/dispatch-1-a", "render", "", ""));
        // Stopped: dead.
        let mut stopped = job("render/dispatch-2-b", "render", "", "");
        stopped.stop = true;
        s.upsert_job(4, stopped);
        // A periodic child is running while it is not stopped.
        let mut periodic = job("render/dispatch-3-c", "render", "", "");
        periodic.periodic = Some(serde_json::json!({"Enabled": true, "Spec": "@daily"}));
        s.upsert_job(5, periodic);
        // Same id prefix, another parent: not a child of "render".
        s.upsert_job(6, job("render/dispatch-4-d", "other", "", ""));
        let snap = s.snapshot();
        let expected = JobChildrenSummary {
            pending: 1,
            running: 1,
            dead: 1,
        };
        assert_eq!(snap.children_summary("default", "render"), expected);
        let (summary, index) = snap.job_summary_with_children("default", "render").unwrap();
        assert_eq!(summary.children, expected);
        assert_eq!(index, 5, "the latest change of a child");
        assert!(snap.job_summary_with_children("default", "nope").is_none());
        let (lone, _) = snap
            .job_summary_with_children("default", "render/dispatch-1-a")
            .unwrap();
        assert_eq!(lone.children, JobChildrenSummary::default());
    }

    #[test]
    fn a_token_finds_the_child_it_dispatched_whatever_its_status() {
        let s = StateStore::new();
        s.upsert_job(2, job("render", "", "", ""));
        s.upsert_job(3, job("render/dispatch-1-a", "render", "", "tok-1"));
        s.upsert_job(4, job("render/dispatch-2-b", "render", "", ""));
        s.upsert_job(5, job("render/dispatch-3-c", "other", "", "tok-2"));
        let snap = s.snapshot();
        assert_eq!(
            snap.dispatched_child_with_token("default", "render", "tok-1")
                .map(|c| c.id.clone()),
            Some("render/dispatch-1-a".to_string())
        );
        assert!(
            snap.dispatched_child_with_token("default", "render", "tok-2")
                .is_none()
        );
        assert!(
            snap.dispatched_child_with_token("default", "render", "")
                .is_none()
        );
        assert!(
            snap.dispatched_child_with_token("other-ns", "render", "tok-1")
                .is_none()
        );
    }
}
