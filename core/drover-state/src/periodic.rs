//! Periodic launch records (Nomad's `periodic_launch` table) and the lookups the periodic
//! dispatcher makes: a periodic job's children and whether any of them still runs.

use std::sync::Arc;

use drover_structs::{Job, PeriodicLaunch, launch_time_from_child_id};

use crate::tables::{NsKey, StateSnapshot, Tables};

/// Keeps the launch records in step with a job being written at `index` (Nomad's FSM does this
/// on every job upsert): a periodic job gets its registration time as first record, and a child
/// of a periodic job moves its parent's record to the launch time its id carries. Records only
/// move forward, so re-registering an older child never makes a launch look missed.
pub(crate) fn record_launch(t: &mut Tables, job: &Job, index: u64) {
    let own: NsKey = (job.namespace.clone(), job.id.clone());
    if job.is_periodic_active() && !t.periodic_launches.contains_key(&own) {
        t.periodic_launches.insert(
            own,
            Arc::new(PeriodicLaunch {
                id: job.id.clone(),
                namespace: job.namespace.clone(),
                launch: job.submit_time,
                create_index: index,
                modify_index: index,
            }),
        );
    }
    if job.parent_id.is_empty() {
        return;
    }
    let parent_key: NsKey = (job.namespace.clone(), job.parent_id.clone());
    let Some(parent) = t.jobs.get(&parent_key) else {
        return;
    };
    if !parent.is_periodic() || parent.is_parameterized() {
        return;
    }
    let Some(secs) = launch_time_from_child_id(&job.id) else {
        return;
    };
    let launch = secs.saturating_mul(1_000_000_000);
    let existing = t.periodic_launches.get(&parent_key).cloned();
    if existing.as_ref().is_some_and(|e| e.launch >= launch) {
        return;
    }
    t.periodic_launches.insert(
        parent_key,
        Arc::new(PeriodicLaunch {
            id: parent.id.clone(),
            namespace: parent.namespace.clone(),
            launch,
            create_index: existing.map(|e| e.create_index).unwrap_or(index),
            modify_index: index,
        }),
    );
}

impl StateSnapshot {
    pub fn periodic_launch(&self, ns: &str, id: &str) -> Option<Arc<PeriodicLaunch>> {
        self.t
            .periodic_launches
            .get(&(ns.to_string(), id.to_string()))
            .cloned()
    }

    /// Jobs of `ns` whose id starts with `prefix`.
    pub fn jobs_by_id_prefix(&self, ns: &str, prefix: &str) -> Vec<Arc<Job>> {
        let start = (ns.to_string(), prefix.to_string());
        self.t
            .jobs
            .range(start..)
            .take_while(|((n, id), _)| n == ns && id.starts_with(prefix))
            .map(|(_, j)| j.clone())
            .collect()
    }

    /// The jobs `parent` launched or dispatched (ids `<parent>/...`, `ParentID` = parent).
    pub fn child_jobs(&self, ns: &str, parent: &str) -> Vec<Arc<Job>> {
        self.jobs_by_id_prefix(ns, &format!("{parent}/"))
            .into_iter()
            .filter(|j| j.parent_id == parent)
            .collect()
    }

    /// Nomad's `RunningChildren`: whether a periodic child of `parent` still has an evaluation
    /// that is not terminal or an allocation that is not terminal.
    pub fn has_running_periodic_child(&self, ns: &str, parent: &str) -> bool {
        let prefix = format!("{parent}{}", drover_structs::PERIODIC_LAUNCH_SUFFIX);
        self.jobs_by_id_prefix(ns, &prefix)
            .iter()
            .filter(|child| child.parent_id == parent)
            .any(|child| {
                self.evals_by_job(ns, &child.id).iter().any(|e| {
                    !e.terminal() || self.allocs_by_eval(&e.id).iter().any(|a| !a.terminal())
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use drover_structs::*;

    use crate::StateStore;

    fn periodic_parent(id: &str) -> Job {
        Job {
            id: id.into(),
            name: id.into(),
            namespace: "default".into(),
            job_type: "batch".into(),
            submit_time: 5_000_000_000,
            periodic: Some(serde_json::json!({
                "Enabled": true, "Spec": "* * * * *", "SpecType": "cron",
                "ProhibitOverlap": true, "TimeZone": "UTC"
            })),
            ..Default::default()
        }
    }

    fn child(parent: &Job, secs: i64) -> Job {
        Job {
            id: periodic_child_id(&parent.id, secs),
            parent_id: parent.id.clone(),
            periodic: None,
            ..parent.clone()
        }
    }

    #[test]
    fn registration_then_children_move_the_launch_record_forward_only() {
        let s = StateStore::new();
        let parent = periodic_parent("cron");
        s.upsert_job(3, parent.clone());
        let l = s.snapshot().periodic_launch("default", "cron").unwrap();
        assert_eq!((l.launch, l.create_index), (5_000_000_000, 3));

        s.upsert_job(4, child(&parent, 100));
        s.upsert_job(5, child(&parent, 60));
        let l = s.snapshot().periodic_launch("default", "cron").unwrap();
        assert_eq!(
            (l.launch, l.create_index, l.modify_index),
            (100_000_000_000, 3, 4)
        );
        assert_eq!(s.snapshot().child_jobs("default", "cron").len(), 2);

        s.delete_job(6, "default", "cron").unwrap();
        assert!(s.snapshot().periodic_launch("default", "cron").is_none());
    }

    #[test]
    fn disabled_periodic_jobs_get_no_record() {
        let s = StateStore::new();
        let mut parent = periodic_parent("off");
        parent.periodic = Some(serde_json::json!({"Enabled": false, "Spec": "* * * * *"}));
        s.upsert_job(3, parent);
        assert!(s.snapshot().periodic_launch("default", "off").is_none());
    }

    #[test]
    fn a_child_runs_while_an_eval_or_an_alloc_is_live() {
        let s = StateStore::new();
        let parent = periodic_parent("p");
        s.upsert_job(2, parent.clone());
        let c = child(&parent, 10);
        s.upsert_job(3, c.clone());
        assert!(!s.snapshot().has_running_periodic_child("default", "p"));

        let mut eval = Evaluation::for_job(&c, TRIGGER_PERIODIC_JOB);
        s.upsert_evals(4, vec![eval.clone()]);
        assert!(s.snapshot().has_running_periodic_child("default", "p"));

        eval.status = EVAL_STATUS_COMPLETE.into();
        s.upsert_evals(5, vec![eval.clone()]);
        let alloc = Allocation {
            id: "a1".into(),
            namespace: "default".into(),
            job_id: c.id.clone(),
            eval_id: eval.id.clone(),
            node_id: "n1".into(),
            task_group: "g".into(),
            desired_status: ALLOC_DESIRED_RUN.into(),
            client_status: ALLOC_CLIENT_RUNNING.into(),
            ..Default::default()
        };
        s.upsert_plan_results(6, None, vec![], vec![alloc], vec![]);
        assert!(s.snapshot().has_running_periodic_child("default", "p"));
        s.update_allocs_from_client(
            7,
            vec![AllocClientUpdate {
                id: "a1".into(),
                client_status: ALLOC_CLIENT_COMPLETE.into(),
                ..Default::default()
            }],
        );
        assert!(!s.snapshot().has_running_periodic_child("default", "p"));
    }
}
