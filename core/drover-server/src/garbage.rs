//! The leader's garbage collector of evaluations, allocations and jobs (Nomad's core
//! scheduler `eval-gc` and `job-gc`), every [`GC_INTERVAL`] while this server leads, and at
//! once for `PUT /v1/system/gc` (Nomad's forced GC: every age threshold taken as zero).
//!
//! What goes, decided by [`plan`] from one snapshot (pure logic, unit-tested):
//! - an allocation its client ended, last modified before the threshold, unless its job may
//!   still need it: a failed allocation of a live job that was not replaced (a reschedule may
//!   follow) and the ended allocations of a batch job that is not dead (the scheduler counts
//!   them as work done);
//! - an evaluation that is terminal, older than the threshold, all of whose allocations go;
//! - a job that is dead (stopped, or a batch job with nothing left to run), not a periodic or
//!   parameterized parent still registered, older than the threshold, all of whose
//!   evaluations and allocations go: it is purged with them;
//! - a deployment that ended (not active), last changed before the threshold, that no live
//!   allocation belongs to (Nomad's `deployment-gc`).
//!
//! The state keeps every allocation its client has not ended, whatever a plan says
//! (`StateStore::reap`), so a pass decided on an old snapshot cannot remove a live one.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use drover_state::{CsiVolumeFilter, StateSnapshot};
use drover_structs::{ALLOC_CLIENT_FAILED, ALLOC_DESIRED_RUN, Allocation, Evaluation, Job};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::leader_task::LeaderTask;
use crate::server::Inner;

/// How often the leader collects (Nomad's `eval_gc_interval`/`job_gc_interval` are 5m).
pub const GC_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// Evaluations and allocations per reap entry.
const REAP_CHUNK: usize = 1000;

/// Ages after which ended objects are collected (Nomad's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcThresholds {
    pub eval: Duration,
    pub batch_eval: Duration,
    pub job: Duration,
    pub deployment: Duration,
}

impl Default for GcThresholds {
    fn default() -> Self {
        GcThresholds {
            eval: Duration::from_secs(3600),
            batch_eval: Duration::from_secs(24 * 3600),
            job: Duration::from_secs(4 * 3600),
            deployment: Duration::from_secs(3600),
        }
    }
}

impl GcThresholds {
    /// Forced collection: age does not matter.
    pub const FORCE: GcThresholds = GcThresholds {
        eval: Duration::ZERO,
        batch_eval: Duration::ZERO,
        job: Duration::ZERO,
        deployment: Duration::ZERO,
    };
}

/// What one pass removes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GcPlan {
    pub jobs: Vec<(String, String)>,
    pub evals: Vec<String>,
    pub allocs: Vec<String>,
    pub deployments: Vec<String>,
}

impl GcPlan {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.evals.is_empty()
            && self.allocs.is_empty()
            && self.deployments.is_empty()
    }
}

/// Whether `t` (Unix nanoseconds) is at least `age` before `now`.
fn older(t: i64, now: i64, age: Duration) -> bool {
    let age = i64::try_from(age.as_nanos()).unwrap_or(i64::MAX);
    now.saturating_sub(t) >= age
}

/// A job that ended for good: stopped, or dead with nothing left to run.
fn job_is_dead(job: &Job) -> bool {
    job.stop || job.status == drover_structs::JOB_STATUS_DEAD
}

fn alloc_goes(
    a: &Allocation,
    job: Option<&Job>,
    now: i64,
    age: Duration,
    claimed: &HashSet<&str>,
) -> bool {
    if !a.client_terminal() || !older(a.modify_time, now, age) || claimed.contains(a.id.as_str()) {
        return false;
    }
    let Some(job) = job.filter(|j| !j.stop) else {
        // The job is gone or stopped: nothing will need this allocation again.
        return true;
    };
    if job.is_batch_like() {
        // Counted as work done until the whole job is.
        return job.status == drover_structs::JOB_STATUS_DEAD;
    }
    // A failed allocation the scheduler may still reschedule.
    let may_reschedule = a.client_status == ALLOC_CLIENT_FAILED
        && a.desired_status == ALLOC_DESIRED_RUN
        && a.next_allocation.is_empty();
    !may_reschedule
}

/// The evaluation's fate and which of its allocations go.
fn eval_goes<'a>(
    e: &Evaluation,
    allocs: &'a [Arc<Allocation>],
    job: Option<&Job>,
    now: i64,
    th: &GcThresholds,
    claimed: &HashSet<&str>,
) -> (bool, Vec<&'a str>) {
    let age = if job.is_some_and(Job::is_batch_like) {
        th.batch_eval
    } else {
        th.eval
    };
    let going: Vec<&str> = allocs
        .iter()
        .filter(|a| alloc_goes(a, job, now, age, claimed))
        .map(|a| a.id.as_str())
        .collect();
    // A batch job still alive keeps its evaluations: they hold its history of placements.
    let job_keeps = job.is_some_and(|j| j.is_batch_like() && !job_is_dead(j));
    let goes =
        e.terminal() && older(e.modify_time, now, age) && going.len() == allocs.len() && !job_keeps;
    (goes, going)
}

/// What to collect from `snap` at `now` (Unix nanoseconds).
pub fn plan(snap: &StateSnapshot, now: i64, th: &GcThresholds) -> GcPlan {
    // Allocations a CSI volume still names are left to the volume watcher first.
    let volumes = snap.csi_volumes(&CsiVolumeFilter {
        namespace: None,
        prefix: "",
        plugin_id: None,
        node_id: None,
    });
    let claimed: HashSet<&str> = volumes
        .iter()
        .flat_map(|v| {
            v.read_allocs
                .keys()
                .chain(v.write_allocs.keys())
                .chain(v.past_claims.keys())
        })
        .map(String::as_str)
        .collect();
    let mut out = GcPlan::default();
    let mut seen_jobs: HashSet<(String, String)> = HashSet::new();
    for e in snap.evals() {
        let key = (e.namespace.clone(), e.job_id.clone());
        if !seen_jobs.insert(key.clone()) {
            continue;
        }
        // Every evaluation and allocation of one job at once.
        let job = snap.job(&key.0, &key.1);
        let evals = snap.evals_by_job(&key.0, &key.1);
        let allocs = snap.allocs_by_job(&key.0, &key.1);
        let mut all_evals_go = true;
        let mut evals_going = Vec::new();
        let mut allocs_going: Vec<String> = Vec::new();
        for e in &evals {
            let mine: Vec<Arc<Allocation>> = allocs
                .iter()
                .filter(|a| a.eval_id == e.id)
                .cloned()
                .collect();
            let (goes, going) = eval_goes(e, &mine, job.as_deref(), now, th, &claimed);
            allocs_going.extend(going.into_iter().map(String::from));
            if goes {
                evals_going.push(e.id.clone());
            } else {
                all_evals_go = false;
            }
        }
        // Allocations whose evaluation is already gone (collected earlier).
        for a in &allocs {
            let has_eval = evals.iter().any(|e| e.id == a.eval_id);
            if !has_eval && alloc_goes(a, job.as_deref(), now, th.eval, &claimed) {
                allocs_going.push(a.id.clone());
            }
        }
        let every_alloc_goes = allocs.iter().all(|a| allocs_going.contains(&a.id));
        if let Some(job) = &job {
            let parent = (job.is_periodic() || job.is_parameterized()) && !job.stop;
            if all_evals_go
                && every_alloc_goes
                && job_is_dead(job)
                && !parent
                && older(job.submit_time, now, th.job)
            {
                out.jobs.push(key);
            }
        }
        out.evals.extend(evals_going);
        out.allocs.extend(allocs_going);
    }
    out.allocs.sort();
    out.allocs.dedup();
    for d in snap.deployments(None, "") {
        if d.active() || !older(d.modify_time, now, th.deployment) {
            continue;
        }
        let live = snap
            .allocs_by_job(&d.namespace, &d.job_id)
            .iter()
            .any(|a| a.deployment_id == d.id && !a.terminal());
        if !live {
            out.deployments.push(d.id.clone());
        }
    }
    out
}

/// Runs one pass on the leader; returns what it removed.
pub(crate) async fn run_pass(inner: &Inner, th: &GcThresholds) -> Result<GcPlan, ServerError> {
    let plan = plan(
        &inner.state.snapshot(),
        drover_structs::time::now_nanos(),
        th,
    );
    if plan.is_empty() {
        return Ok(plan);
    }
    for (namespace, job_id) in &plan.jobs {
        inner
            .apply(LogEntry::JobPurge {
                namespace: namespace.clone(),
                job_id: job_id.clone(),
                evals: Vec::new(),
            })
            .await?;
    }
    // In pieces: one entry stays small however much has piled up.
    let (evals, allocs): (Vec<&[String]>, Vec<&[String]>) = (
        plan.evals.chunks(REAP_CHUNK).collect(),
        plan.allocs.chunks(REAP_CHUNK).collect(),
    );
    for i in 0..evals.len().max(allocs.len()) {
        inner
            .apply(LogEntry::GcReap {
                evals: evals.get(i).map_or_else(Vec::new, |c| c.to_vec()),
                allocs: allocs.get(i).map_or_else(Vec::new, |c| c.to_vec()),
            })
            .await?;
    }
    for ids in plan.deployments.chunks(REAP_CHUNK) {
        inner
            .apply(LogEntry::DeploymentDelete { ids: ids.to_vec() })
            .await?;
    }
    tracing::info!(
        jobs = plan.jobs.len(),
        evals = plan.evals.len(),
        allocs = plan.allocs.len(),
        deployments = plan.deployments.len(),
        "garbage collected"
    );
    Ok(plan)
}

/// The periodic collector, started and stopped with leadership.
#[derive(Default)]
pub(crate) struct GarbageCollector {
    task: LeaderTask,
}

impl GarbageCollector {
    pub(crate) fn start(&self, inner: Arc<Inner>) {
        self.task.start(async move {
            loop {
                tokio::time::sleep(GC_INTERVAL).await;
                if let Err(e) = run_pass(&inner, &GcThresholds::default()).await {
                    tracing::warn!(error = %e, "garbage collection pass failed");
                }
            }
        });
    }

    pub(crate) fn stop(&self) {
        self.task.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_state::StateStore;
    use drover_structs::{
        ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_RUNNING, EVAL_STATUS_COMPLETE, TaskGroup,
    };

    const HOUR: i64 = 3_600_000_000_000;

    /// When the test objects were written; the store may stamp its own clock on some, so
    /// every "now" below is counted from a time after the writes.
    fn t0() -> i64 {
        drover_structs::time::now_nanos()
    }

    fn job(id: &str, kind: &str, stop: bool) -> Job {
        Job {
            id: id.into(),
            name: id.into(),
            namespace: "default".into(),
            job_type: kind.into(),
            stop,
            submit_time: t0(),
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count: 1,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn eval(id: &str, job: &str) -> Evaluation {
        Evaluation {
            id: id.into(),
            namespace: "default".into(),
            job_id: job.into(),
            status: EVAL_STATUS_COMPLETE.into(),
            modify_time: t0(),
            ..Default::default()
        }
    }

    fn alloc(id: &str, job: &str, eval: &str, status: &str) -> Allocation {
        Allocation {
            id: id.into(),
            namespace: "default".into(),
            job_id: job.into(),
            eval_id: eval.into(),
            node_id: "n1".into(),
            task_group: "g".into(),
            name: format!("{job}.g[0]"),
            desired_status: ALLOC_DESIRED_RUN.into(),
            client_status: status.into(),
            modify_time: t0(),
            ..Default::default()
        }
    }

    /// A state with `job` (as given), one evaluation and allocations of it.
    fn state(job: Job, allocs: Vec<Allocation>) -> StateStore {
        let s = StateStore::new();
        let id = job.id.clone();
        s.upsert_job(1, job.clone());
        s.upsert_evals(2, vec![eval(&format!("{id}-e"), &id)]);
        s.upsert_plan_results(3, Some(Arc::new(job)), vec![], allocs, vec![]);
        s
    }

    #[test]
    fn a_stopped_service_job_goes_with_its_evaluations_and_ended_allocations() {
        let s = state(
            job("web", "service", true),
            vec![alloc("a1", "web", "web-e", ALLOC_CLIENT_COMPLETE)],
        );
        let p = plan(&s.snapshot(), t0() + 10 * HOUR, &GcThresholds::default());
        assert_eq!(p.jobs, vec![("default".to_string(), "web".to_string())]);
        assert_eq!(p.evals, vec!["web-e".to_string()]);
        assert_eq!(p.allocs, vec!["a1".to_string()]);
    }

    #[test]
    fn nothing_younger_than_the_thresholds_goes_unless_forced() {
        let s = state(
            job("web", "service", true),
            vec![alloc("a1", "web", "web-e", ALLOC_CLIENT_COMPLETE)],
        );
        let soon = t0() + HOUR / 2;
        assert!(plan(&s.snapshot(), soon, &GcThresholds::default()).is_empty());
        assert!(!plan(&s.snapshot(), soon, &GcThresholds::FORCE).is_empty());
    }

    #[test]
    fn a_running_allocation_keeps_its_evaluation_and_its_job() {
        let s = state(
            job("web", "service", false),
            vec![
                alloc("a1", "web", "web-e", ALLOC_CLIENT_RUNNING),
                alloc("a2", "web", "web-e", ALLOC_CLIENT_COMPLETE),
            ],
        );
        let p = plan(&s.snapshot(), t0() + 10 * HOUR, &GcThresholds::FORCE);
        assert!(p.jobs.is_empty() && p.evals.is_empty(), "{p:?}");
        assert_eq!(p.allocs, vec!["a2".to_string()]);
    }

    #[test]
    fn a_live_batch_job_keeps_its_ended_allocations_and_a_dead_one_goes() {
        // One allocation still runs: the job is alive, and its finished one counts as work
        // done.
        let mut running = alloc("a2", "b", "b-e", ALLOC_CLIENT_RUNNING);
        running.name = "b.g[1]".into();
        let live = state(
            job("b", "batch", false),
            vec![alloc("a1", "b", "b-e", ALLOC_CLIENT_COMPLETE), running],
        );
        assert!(plan(&live.snapshot(), t0() + 100 * HOUR, &GcThresholds::FORCE).is_empty());
        let mut dead = job("b", "batch", false);
        dead.status = drover_structs::JOB_STATUS_DEAD.into();
        let s = state(dead, vec![alloc("a1", "b", "b-e", ALLOC_CLIENT_COMPLETE)]);
        let p = plan(&s.snapshot(), t0() + 100 * HOUR, &GcThresholds::FORCE);
        assert_eq!(p.allocs, vec!["a1".to_string()]);
    }

    #[test]
    fn a_failed_allocation_that_may_be_rescheduled_is_kept() {
        let s = state(
            job("web", "service", false),
            vec![alloc("a1", "web", "web-e", ALLOC_CLIENT_FAILED)],
        );
        let p = plan(&s.snapshot(), t0() + 10 * HOUR, &GcThresholds::FORCE);
        assert!(p.allocs.is_empty() && p.evals.is_empty(), "{p:?}");
    }

    #[test]
    fn a_registered_periodic_parent_is_never_purged() {
        let mut parent = job("cron", "batch", false);
        parent.periodic = Some(serde_json::json!({"Enabled": true, "Spec": "* * * * *"}));
        parent.status = drover_structs::JOB_STATUS_DEAD.into();
        let s = state(parent, vec![]);
        let p = plan(&s.snapshot(), t0() + 100 * HOUR, &GcThresholds::FORCE);
        assert!(p.jobs.is_empty(), "{p:?}");
    }

    #[test]
    fn an_ended_deployment_goes_after_its_threshold_unless_a_live_allocation_belongs_to_it() {
        let s = StateStore::new();
        s.upsert_job(1, job("web", "service", false));
        let snapshot_job = s.snapshot().job("default", "web").unwrap();
        let mut ended = drover_structs::Deployment::for_job(&snapshot_job, 50, t0());
        ended.status = drover_structs::DEPLOYMENT_STATUS_SUCCESSFUL.into();
        let mut running = drover_structs::Deployment::for_job(&snapshot_job, 50, t0());
        running.id = "running".into();
        let mut held = ended.clone();
        held.id = "held".into();
        s.upsert_deployments(2, vec![ended.clone(), running, held], &[], vec![]);
        let live = Allocation {
            id: "a1".into(),
            namespace: "default".into(),
            job_id: "web".into(),
            deployment_id: "held".into(),
            desired_status: ALLOC_DESIRED_RUN.into(),
            client_status: ALLOC_CLIENT_RUNNING.into(),
            ..Default::default()
        };
        s.upsert_plan_results(3, Some(snapshot_job), vec![], vec![live], vec![]);
        let snap = s.snapshot();
        let soon = plan(&snap, t0(), &GcThresholds::default());
        assert!(soon.deployments.is_empty(), "younger than an hour");
        let later = plan(&snap, t0() + 2 * HOUR, &GcThresholds::default());
        assert_eq!(later.deployments, vec![ended.id.clone()]);
        let forced = plan(&snap, t0(), &GcThresholds::FORCE);
        assert_eq!(forced.deployments, vec![ended.id]);
    }
}
