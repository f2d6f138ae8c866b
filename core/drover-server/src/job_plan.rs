//! `job plan`: what registering a job would do, without doing it (Nomad's `Job.Plan`). The job
//! is put into a copy of this server's state view (never proposed), an evaluation that asks
//! for annotations runs the real scheduler against it, and a planner that commits nothing
//! keeps the plan, the evaluation's outcome and the evaluations it would create.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_scheduler::{Planner, SchedulerError, State};
use drover_structs::diff::JobDiff;
use drover_structs::{
    AllocMetric, Allocation, EVAL_STATUS_PENDING, Evaluation, Job, Node, Plan, PlanAnnotations,
    PlanResult, TRIGGER_JOB_REGISTER, generate_id, validate,
};

use crate::ServerError;
use crate::sched_state::SnapshotState;
use crate::server::Server;

/// Nomad's `JobPlanResponse`, less the query metadata.
#[derive(Debug, Clone, Default)]
pub struct JobPlanResult {
    pub annotations: Option<PlanAnnotations>,
    /// Placements that would fail, by task group.
    pub failed_tg_allocs: BTreeMap<String, AllocMetric>,
    /// The stored job's `JobModifyIndex` (0 for a new job): what `job run -check-index`
    /// compares against.
    pub job_modify_index: u64,
    /// Evaluations the scheduler would create (blocked, follow-ups).
    pub created_evals: Vec<Evaluation>,
    /// The difference to the stored job, annotated with the scheduler's decisions; only when
    /// asked for.
    pub diff: Option<JobDiff>,
    /// Unix nanoseconds of the next launch of a periodic job; 0 otherwise.
    pub next_periodic_launch: i64,
    pub warnings: String,
}

impl Server {
    /// Plans `job` (canonicalised) against the current state: validated as a registration
    /// would be, then scheduled dry. Nothing is written.
    /// A multiregion job is planned as its copy for this region (Nomad's
    /// `interpolateMultiregionFields`).
    pub async fn plan_job(&self, job: Job, diff: bool) -> Result<JobPlanResult, ServerError> {
        let job = match job.multiregion_spec() {
            Some(spec) => match spec.regions().iter().find(|r| r.name == self.region()) {
                Some(region) => job.regional_copy(region),
                None => job,
            },
            None => job,
        };
        validate::validate_job(&job).map_err(ServerError::Validation)?;
        crate::periodic::validate_time_zone(&job)?;
        crate::unsupported::refuse_unacted(&job).map_err(ServerError::Validation)?;
        // The plan is read against what every acknowledged write left.
        self.read_barrier().await?;
        let snap = self.inner.state.snapshot();
        let config = crate::sched_config::effective(&self.inner.sched_config, &snap);
        tokio::task::spawn_blocking(move || plan_against(SnapshotState(snap), job, diff, &config))
            .await
            .map_err(|e| ServerError::Internal(format!("planning the job failed: {e}")))?
    }
}

/// The dry run itself, over a state view.
pub(crate) fn plan_against(
    state: impl State,
    mut job: Job,
    diff: bool,
    config: &drover_scheduler::SchedulerConfig,
) -> Result<JobPlanResult, ServerError> {
    let old = state.job(&job.namespace, &job.id);
    // As Nomad: a job whose spec did not change is planned as the stored version (so its
    // allocations and deployment are kept); otherwise it goes in as the next version.
    let (job_modify_index, eval_modify_index) = match &old {
        Some(o) if !o.spec_changed(&job) && o.stop == job.stop => {
            job.registered_over(Some(o), o.job_modify_index);
            (o.job_modify_index, 0)
        }
        Some(o) => {
            let index = o.job_modify_index + 1;
            job.registered_over(Some(o), index);
            (o.job_modify_index, index)
        }
        None => {
            job.registered_over(None, state.index() + 1);
            (0, 0)
        }
    };
    let job = Arc::new(job);
    let now = drover_structs::time::now_nanos();
    let eval = Evaluation {
        id: generate_id(),
        namespace: job.namespace.clone(),
        priority: job.priority,
        eval_type: job.job_type.clone(),
        triggered_by: TRIGGER_JOB_REGISTER.to_string(),
        job_id: job.id.clone(),
        job_modify_index: eval_modify_index,
        status: EVAL_STATUS_PENDING.to_string(),
        annotate_plan: true,
        create_time: now,
        modify_time: now,
        ..Default::default()
    };
    let view = PlannedJobState {
        inner: state,
        job: job.clone(),
    };
    let mut planner = DryRunPlanner::default();
    drover_scheduler::process_eval(&view, &mut planner, &eval, config)
        .map_err(|e| ServerError::Internal(format!("planning the job failed: {e}")))?;
    // One plan per dry run: the planner commits everything, so the scheduler never retries.
    let annotations = match planner.plans.as_slice() {
        [plan] => plan.annotations.clone(),
        [] => None,
        plans => {
            return Err(ServerError::Internal(format!(
                "the scheduler made {} plans for one dry run",
                plans.len()
            )));
        }
    };
    let failed_tg_allocs = planner
        .updated
        .last()
        .and_then(|e| e.failed_tg_allocs.clone())
        .unwrap_or_default();
    let diff = if diff {
        let mut d = drover_structs::diff::job_diff(old.as_deref(), Some(&job), true)
            .map_err(|e| ServerError::BadRequest(e.to_string()))?;
        drover_scheduler::annotate::annotate(&mut d, annotations.as_ref());
        Some(d)
    } else {
        None
    };
    let next_periodic_launch = match job.periodic_config().filter(|p| p.enabled) {
        Some(p) if !job.stop => crate::periodic::next_periodic_launch(&p, now)
            .map_err(ServerError::BadRequest)?
            .map_or(0, |n| n.at),
        _ => 0,
    };
    Ok(JobPlanResult {
        annotations,
        failed_tg_allocs,
        job_modify_index,
        created_evals: planner.created,
        diff,
        next_periodic_launch,
        warnings: String::new(),
    })
}

/// The state with the planned job in place of the stored one.
struct PlannedJobState<S> {
    inner: S,
    job: Arc<Job>,
}

impl<S: State> State for PlannedJobState<S> {
    fn index(&self) -> u64 {
        self.inner.index()
    }
    fn job(&self, namespace: &str, id: &str) -> Option<Arc<Job>> {
        if namespace == self.job.namespace && id == self.job.id {
            return Some(self.job.clone());
        }
        self.inner.job(namespace, id)
    }
    fn nodes(&self) -> Vec<Arc<Node>> {
        self.inner.nodes()
    }
    fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.inner.node(id)
    }
    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.inner.allocs_by_job(namespace, job_id)
    }
    fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.inner.allocs_by_node(node_id)
    }
    fn node_usage(&self, node_id: &str) -> Option<Arc<drover_structs::usage::NodeAllocUsage>> {
        self.inner.node_usage(node_id)
    }
    fn alloc(&self, id: &str) -> Option<Arc<Allocation>> {
        self.inner.alloc(id)
    }
    fn csi_volume(&self, namespace: &str, id: &str) -> Option<Arc<drover_structs::CsiVolume>> {
        self.inner.csi_volume(namespace, id)
    }
    fn csi_volumes_per_plugin_on_node(&self, node_id: &str) -> BTreeMap<String, u64> {
        self.inner.csi_volumes_per_plugin_on_node(node_id)
    }
    fn latest_deployment(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Option<Arc<drover_structs::Deployment>> {
        self.inner.latest_deployment(namespace, job_id)
    }
}

/// A planner that commits every plan in full, in memory, and keeps what it was given.
#[derive(Default)]
struct DryRunPlanner {
    plans: Vec<Plan>,
    updated: Vec<Evaluation>,
    created: Vec<Evaluation>,
}

impl Planner for DryRunPlanner {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Box<dyn State>>), SchedulerError> {
        let result = PlanResult {
            node_update: plan.node_update.clone(),
            node_allocation: plan.node_allocation.clone(),
            node_preemptions: plan.node_preemptions.clone(),
            refresh_index: 0,
            alloc_index: plan.snapshot_index,
        };
        self.plans.push(plan);
        Ok((result, None))
    }
    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.updated.push(eval);
        Ok(())
    }
    fn create_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.created.push(eval);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_scheduler::harness::{Harness, mock_job, mock_node, register_eval};
    use drover_structs::diff::DiffType;

    fn config() -> drover_scheduler::SchedulerConfig {
        drover_scheduler::SchedulerConfig::default()
    }

    fn two_nodes() -> Harness {
        let mut h = Harness::new();
        h.upsert_node(mock_node());
        h.upsert_node(mock_node());
        h
    }

    #[test]
    fn a_new_job_plans_its_placements_and_nothing_is_written() {
        let h = two_nodes();
        let mut job = mock_job();
        job.task_groups[0].count = 3;
        let before = h.state.index();
        let r = plan_against(h.state.clone(), job.clone(), true, &config()).unwrap();
        let tg = &job.task_groups[0].name;
        let a = r.annotations.expect("annotations");
        assert_eq!(a.desired_tg_updates[tg].place, 3);
        assert_eq!(r.job_modify_index, 0);
        assert!(r.failed_tg_allocs.is_empty());
        assert_eq!(r.diff.expect("diff").diff_type, DiffType::Added);
        assert_eq!(h.state.index(), before);
        assert!(h.state.job(&job.namespace, &job.id).is_none());
        assert!(h.state.allocs().is_empty());
    }

    #[test]
    fn a_count_change_of_a_running_job_places_the_difference_and_updates_the_rest_in_place() {
        let mut h = two_nodes();
        let mut job = mock_job();
        job.task_groups[0].count = 1;
        let stored = h.upsert_job(job);
        h.process(&register_eval(&stored)).unwrap();
        let mut bigger = (*stored).clone();
        bigger.task_groups[0].count = 2;
        let r = plan_against(h.state.clone(), bigger, true, &config()).unwrap();
        let tg = &stored.task_groups[0].name;
        let u = r.annotations.unwrap().desired_tg_updates[tg];
        // Nomad's "(1 create, 1 in-place update)": the new version reaches the running one
        // without a restart.
        assert_eq!((u.place, u.in_place_update, u.ignore), (1, 1, 0), "{u:?}");
        assert_eq!(r.job_modify_index, stored.job_modify_index);
        assert_eq!(r.diff.unwrap().diff_type, DiffType::Edited);
        assert_eq!(h.state.allocs().len(), 1);
    }

    #[test]
    fn an_unchanged_job_plans_nothing_but_ignores() {
        let mut h = two_nodes();
        let stored = h.upsert_job(mock_job());
        h.process(&register_eval(&stored)).unwrap();
        let r = plan_against(h.state.clone(), (*stored).clone(), true, &config()).unwrap();
        let tg = &stored.task_groups[0].name;
        let u = r.annotations.unwrap().desired_tg_updates[tg];
        assert_eq!(u.ignore, stored.task_groups[0].count as u64, "{u:?}");
        assert_eq!(u.place + u.stop + u.destructive_update, 0, "{u:?}");
        assert_eq!(r.diff.unwrap().diff_type, DiffType::None);
    }

    #[test]
    fn a_job_that_cannot_fit_reports_the_failed_group_and_a_blocked_evaluation() {
        let h = two_nodes();
        let mut job = mock_job();
        job.task_groups[0].tasks[0].resources.memory_mb = 1 << 30;
        let r = plan_against(h.state.clone(), job.clone(), false, &config()).unwrap();
        assert!(
            r.failed_tg_allocs.contains_key(&job.task_groups[0].name),
            "{r:?}"
        );
        assert_eq!(r.created_evals.len(), 1);
        assert!(r.diff.is_none());
    }
}
