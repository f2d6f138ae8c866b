//! Nomad's periodic dispatcher, on the leader: it tracks every active periodic job (periodic,
//! enabled, not stopped), sleeps until the earliest next launch, and launches a child job
//! `<parent>/periodic-<unix seconds>` with `ParentID` set and an evaluation, in one log entry.
//! `prohibit_overlap` skips a launch while an earlier child still has a live evaluation or
//! allocation. The state keeps each job's last launch (`PeriodicLaunch`, written by the FSM
//! from the child's id), so a new leader launches a missed run once instead of relaunching
//! or forgetting it. `drover job periodic force` launches now, whatever the schedule.
//!
//! The periodic parent itself never gets an evaluation, so it never gets allocations.

mod schedule;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use drover_state::{StateSnapshot, Table};
use drover_structs::time::now_nanos;
use drover_structs::{
    Evaluation, Job, MultiError, PeriodicConfig, TRIGGER_PERIODIC_JOB, periodic_child_id,
};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::leader_task::LeaderTask;
use crate::rpc::{Reply, Request};
use crate::server::{Inner, Server};

/// The longest the dispatcher sleeps without looking at the jobs again.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// The dispatcher task of this server, running while it leads.
#[derive(Default)]
pub(crate) struct PeriodicDispatcher {
    task: LeaderTask,
}

impl PeriodicDispatcher {
    /// Starts (or restarts) dispatching from the current state. On the leader.
    pub(crate) fn start(&self, inner: Arc<Inner>) {
        self.task.start(run(inner));
    }

    /// Stops dispatching (leadership lost, or shutdown). A launch being proposed may still
    /// commit; the launch record then tells the next leader it happened.
    pub(crate) fn stop(&self) {
        self.task.stop();
    }
}

/// When a periodic job launches next, as `job status` shows it (Nomad's `PeriodicConfig.Next`
/// on the job's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextLaunch {
    /// Unix nanoseconds.
    pub at: i64,
    /// Seconds east of UTC of the job's time zone at `at`.
    pub utc_offset_secs: i32,
}

/// The next launch after `after` (unix nanoseconds) of a job with periodic block `config`,
/// computed as the dispatcher computes it (its cron expressions in its time zone). `None`
/// when the schedule matches no later time; an error for an unknown zone or a bad expression.
pub fn next_periodic_launch(
    config: &PeriodicConfig,
    after: i64,
) -> Result<Option<NextLaunch>, String> {
    let Some(at) = schedule::next_launch(config, after)? else {
        return Ok(None);
    };
    let utc_offset_secs = schedule::utc_offset_secs(config.zone_name(), at)?;
    Ok(Some(NextLaunch {
        at,
        utc_offset_secs,
    }))
}

/// Refuses a periodic job whose `time_zone` is unknown (Nomad checks it in
/// `PeriodicConfig.Validate`; the model crate does no IO, so it is checked here).
pub(crate) fn validate_time_zone(job: &Job) -> Result<(), ServerError> {
    let Some(p) = job.periodic_config().filter(|p| p.enabled) else {
        return Ok(());
    };
    if p.time_zone.is_empty() {
        return Ok(());
    }
    schedule::zone(&p.time_zone).map(|_| ()).map_err(|e| {
        let mut m = MultiError::new();
        m.push(format!("Invalid time zone {:?}: {e}", p.time_zone));
        ServerError::Validation(m)
    })
}

/// Nomad's `validateJobUpdate` rules for periodic and parameterized jobs.
pub(crate) fn check_update(old: Option<&Job>, new: &Job) -> Result<(), ServerError> {
    let bad = |m: &str| Err(ServerError::BadRequest(m.to_string()));
    let Some(old) = old else {
        if new.dispatched {
            return bad("job can't be submitted with 'Dispatched' set");
        }
        return Ok(());
    };
    match (old.is_periodic(), new.is_periodic()) {
        (true, false) => return bad("cannot update periodic job to being non-periodic"),
        (false, true) => return bad("cannot update non-periodic job to being periodic"),
        _ => {}
    }
    match (old.is_parameterized(), new.is_parameterized()) {
        (true, false) => {
            return bad("cannot update parameterized job to being non-parameterized");
        }
        (false, true) => {
            return bad("cannot update non-parameterized job to being parameterized");
        }
        _ => {}
    }
    if old.dispatched != new.dispatched {
        return bad("field 'Dispatched' is read-only");
    }
    Ok(())
}

/// A periodic job the dispatcher follows.
struct Tracked {
    config: PeriodicConfig,
    job_modify_index: u64,
    /// Unix nanoseconds of the next launch; `None` when the schedule has no more.
    next: Option<i64>,
}

type Key = (String, String);

fn next_or_log(job: &Job, config: &PeriodicConfig, after: i64) -> Option<i64> {
    match schedule::next_launch(config, after) {
        Ok(next) => next,
        Err(e) => {
            tracing::error!(job = %job.id, namespace = %job.namespace, error = %e,
                "failed to determine the next periodic launch");
            None
        }
    }
}

/// Follows the state's active periodic jobs: new or changed ones get their next launch
/// computed from now (as Nomad's `Add`), gone or inactive ones are dropped.
fn sync_tracked(tracked: &mut HashMap<Key, Tracked>, snap: &StateSnapshot, now: i64) {
    let mut active = HashMap::new();
    for job in snap.jobs(None) {
        if !job.is_periodic() || !job.is_periodic_active() {
            continue;
        }
        let Some(config) = job.periodic_config() else {
            continue;
        };
        let key = (job.namespace.clone(), job.id.clone());
        let entry = match tracked.remove(&key) {
            Some(t) if t.config == config && t.job_modify_index == job.job_modify_index => t,
            _ => Tracked {
                next: next_or_log(&job, &config, now),
                config,
                job_modify_index: job.job_modify_index,
            },
        };
        active.insert(key, entry);
    }
    *tracked = active;
}

async fn run(inner: Arc<Inner>) {
    restore_missed_launches(&inner).await;
    let mut tracked: HashMap<Key, Tracked> = HashMap::new();
    loop {
        if !inner.is_leader() {
            return;
        }
        let snap = inner.state.snapshot();
        let seen = snap.table_index(Table::Jobs);
        let now = now_nanos();
        sync_tracked(&mut tracked, &snap, now);
        let due: Vec<(Key, i64)> = tracked
            .iter()
            .filter_map(|(k, t)| t.next.filter(|n| *n <= now).map(|n| (k.clone(), n)))
            .collect();
        for (key, launch) in due {
            let Some(job) = snap.job(&key.0, &key.1) else {
                continue;
            };
            if let Some(t) = tracked.get_mut(&key) {
                // As Nomad: the next launch follows the one being made, not the clock.
                t.next = next_or_log(&job, &t.config, launch);
            }
            launch_if_allowed(&inner, &job, launch).await;
        }
        let wait = tracked
            .values()
            .filter_map(|t| t.next)
            .min()
            .map(|n| Duration::from_nanos(n.saturating_sub(now_nanos()).max(0) as u64))
            .unwrap_or(MAX_SLEEP)
            .min(MAX_SLEEP);
        if !wait.is_zero() {
            // Wakes early when a job changes: a new periodic job may launch sooner.
            inner.state.wait_for(&[Table::Jobs], seen, wait).await;
        }
    }
}

/// Whether a scheduled launch of `job` may happen: not when it prohibits overlap and an
/// earlier child still has a live evaluation or allocation.
fn overlap_allows_launch(snap: &StateSnapshot, job: &Job) -> bool {
    let prohibit = job.periodic_config().is_some_and(|p| p.prohibit_overlap);
    !(prohibit && snap.has_running_periodic_child(&job.namespace, &job.id))
}

/// Launches `job` at `launch` unless it prohibits overlap and a child still runs.
async fn launch_if_allowed(inner: &Arc<Inner>, job: &Job, launch: i64) {
    if !overlap_allows_launch(&inner.state.snapshot(), job) {
        tracing::debug!(job = %job.id, "skipping periodic launch: the job prohibits overlap");
        return;
    }
    if let Err(e) = launch_child(inner, job, launch).await {
        tracing::warn!(job = %job.id, error = %e, "periodic launch failed");
    }
}

/// Nomad's `restorePeriodicDispatcher`: a job whose next launch after its last recorded one
/// is already past (the previous leader missed it) is launched once, now.
async fn restore_missed_launches(inner: &Arc<Inner>) {
    let snap = inner.state.snapshot();
    let now = now_nanos();
    for job in snap.jobs(None) {
        if !job.is_periodic_active() {
            continue;
        }
        let Some(config) = job.periodic_config() else {
            continue;
        };
        let Some(last) = snap.periodic_launch(&job.namespace, &job.id) else {
            tracing::warn!(job = %job.id, "periodic job has no recorded launch");
            continue;
        };
        if launch_was_missed(&job, &config, last.launch, now) {
            tracing::info!(job = %job.id, "launching a periodic run missed during the leader change");
            launch_if_allowed(inner, &job, now).await;
        }
    }
}

/// Whether the launch that should follow the last recorded one (`last`) is already past.
fn launch_was_missed(job: &Job, config: &PeriodicConfig, last: i64, now: i64) -> bool {
    next_or_log(job, config, last).is_some_and(|next| next < now)
}

/// The child of `parent` launched at `launch` (Nomad's `deriveJob`): a copy named
/// `<parent>/periodic-<unix seconds>`, no longer periodic.
fn derive_child(parent: &Job, launch: i64) -> Job {
    let id = periodic_child_id(&parent.id, launch.div_euclid(1_000_000_000));
    Job {
        parent_id: parent.id.clone(),
        name: id.clone(),
        id,
        periodic: None,
        status: String::new(),
        status_description: String::new(),
        stable: false,
        version: 0,
        create_index: 0,
        modify_index: 0,
        job_modify_index: 0,
        submit_time: now_nanos(),
        ..parent.clone()
    }
}

/// Registers the child launched at `launch` and its evaluation in one entry, then hands the
/// evaluation to the broker. Returns the evaluation as stored.
pub(crate) async fn launch_child(
    inner: &Arc<Inner>,
    parent: &Job,
    launch: i64,
) -> Result<Evaluation, ServerError> {
    let child = derive_child(parent, launch);
    let eval = Evaluation::for_job(&child, TRIGGER_PERIODIC_JOB);
    tracing::debug!(job = %parent.id, child = %child.id, "launching periodic job");
    inner
        .apply(LogEntry::JobRegister {
            job: child,
            evals: vec![eval.clone()],
            enforce_index: None,
            submission: None,
        })
        .await?;
    let stored = inner
        .state
        .snapshot()
        .eval(&eval.id)
        .ok_or_else(|| ServerError::Internal("launch evaluation vanished".into()))?;
    inner.enqueue_when_due((*stored).clone());
    Ok((*stored).clone())
}

impl Server {
    /// Launches a periodic job now (Nomad's `Periodic.Force`). Returns the evaluation id and
    /// its create index.
    pub async fn force_periodic(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<(String, u64), ServerError> {
        match self
            .route(Request::PeriodicForce {
                namespace: namespace.into(),
                job_id: job_id.into(),
            })
            .await?
        {
            Reply::Eval { eval_id, index } => Ok((eval_id, index)),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    /// On the leader.
    pub(crate) async fn force_periodic_here(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<Reply, ServerError> {
        if job_id.is_empty() {
            return Err(ServerError::BadRequest(
                "missing job ID for evaluation".into(),
            ));
        }
        let job = self
            .snapshot()
            .job(namespace, job_id)
            .ok_or_else(|| ServerError::NotFound("job not found".into()))?;
        if !job.is_periodic() {
            return Err(ServerError::BadRequest(
                "can't force launch non-periodic job".into(),
            ));
        }
        if !job.is_periodic_active() {
            return Err(ServerError::BadRequest(format!(
                "force launch for job {job_id:?} failed: can't force run non-tracked job {job_id:?} ({namespace})"
            )));
        }
        let eval = launch_child(&self.inner, &job, now_nanos()).await?;
        Ok(Reply::Eval {
            eval_id: eval.id,
            index: eval.create_index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_state::StateStore;
    use drover_structs::*;

    fn periodic_job(id: &str, spec: &str, prohibit_overlap: bool) -> Job {
        Job {
            id: id.into(),
            name: id.into(),
            namespace: "default".into(),
            job_type: "batch".into(),
            submit_time: 1,
            periodic: Some(serde_json::json!({
                "Enabled": true, "Spec": spec, "SpecType": "cron",
                "ProhibitOverlap": prohibit_overlap, "TimeZone": "UTC"
            })),
            ..Default::default()
        }
    }

    #[test]
    fn the_next_launch_is_on_the_jobs_clock() {
        let paris = PeriodicConfig {
            enabled: true,
            spec: "0 1 * * *".into(),
            spec_type: "cron".into(),
            time_zone: "Europe/Paris".into(),
            ..Default::default()
        };
        // 2024-01-15T12:00:00Z: the next 01:00 in Paris (UTC+1) is 2024-01-16T00:00:00Z.
        let after = 1_705_320_000 * 1_000_000_000;
        assert_eq!(
            next_periodic_launch(&paris, after),
            Ok(Some(NextLaunch {
                at: 1_705_363_200 * 1_000_000_000,
                utc_offset_secs: 3600,
            }))
        );
        let never = PeriodicConfig {
            spec: "0 0 1 1 * 2000".into(),
            time_zone: String::new(),
            ..paris.clone()
        };
        assert_eq!(next_periodic_launch(&never, after), Ok(None));
        let nowhere = PeriodicConfig {
            time_zone: "Mars/Olympus_Mons".into(),
            ..paris
        };
        assert!(next_periodic_launch(&nowhere, after).is_err());
    }

    #[test]
    fn children_are_named_by_launch_second_and_are_not_periodic() {
        let parent = periodic_job("nightly", "0 0 * * *", false);
        let child = derive_child(&parent, 1_700_000_000_600_000_000);
        assert_eq!(child.id, "nightly/periodic-1700000000");
        assert_eq!(child.name, child.id);
        assert_eq!(child.parent_id, "nightly");
        assert!(!child.is_periodic());
        assert_eq!(child.job_type, "batch");
    }

    #[test]
    fn tracking_follows_active_periodic_jobs_and_their_changes() {
        let state = StateStore::new();
        state.upsert_job(2, periodic_job("a", "0 0 * * *", false));
        let mut disabled = periodic_job("b", "0 0 * * *", false);
        disabled.periodic = Some(serde_json::json!({"Enabled": false, "Spec": "* * * * *"}));
        state.upsert_job(3, disabled);
        let mut tracked = HashMap::new();
        let now = 1_700_000_000 * 1_000_000_000;
        sync_tracked(&mut tracked, &state.snapshot(), now);
        assert_eq!(tracked.len(), 1);
        let midnight = tracked[&("default".to_string(), "a".to_string())].next;
        assert_eq!(midnight, Some(1_700_006_400 * 1_000_000_000));

        // A new schedule is picked up; a stopped job is dropped.
        state.upsert_job(4, periodic_job("a", "0 12 * * *", false));
        sync_tracked(&mut tracked, &state.snapshot(), now);
        assert_ne!(
            tracked[&("default".to_string(), "a".to_string())].next,
            midnight
        );
        let mut stopped = periodic_job("a", "0 12 * * *", false);
        stopped.stop = true;
        state.upsert_job(5, stopped);
        sync_tracked(&mut tracked, &state.snapshot(), now);
        assert!(tracked.is_empty());
    }

    #[test]
    fn a_new_leader_relaunches_only_a_launch_that_was_missed() {
        let job = periodic_job("hourly", "0 * * * *", false);
        let config = job.periodic_config().unwrap();
        let s = 1_000_000_000;
        // Last launch at 10:00:00; now 10:59:59: the 11:00 run is still ahead.
        let ten = 1_700_042_400 * s;
        assert!(!launch_was_missed(&job, &config, ten, ten + 3599 * s));
        // Now 11:00:30: the 11:00 run was missed (the leader changed in between).
        assert!(launch_was_missed(&job, &config, ten, ten + 3630 * s));
    }

    #[test]
    fn overlap_is_prohibited_only_while_a_child_is_live() {
        let state = StateStore::new();
        let parent = periodic_job("p", "* * * * *", true);
        state.upsert_job(2, parent.clone());
        let child = derive_child(&parent, 60 * 1_000_000_000);
        let mut eval = Evaluation::for_job(&child, TRIGGER_PERIODIC_JOB);
        state.upsert_job(3, child);
        state.upsert_evals(3, vec![eval.clone()]);
        let snap = state.snapshot();
        assert!(!overlap_allows_launch(&snap, &parent));
        let overlapping = periodic_job("p", "* * * * *", false);
        assert!(overlap_allows_launch(&snap, &overlapping));
        // The child's launch moved the parent's record.
        assert_eq!(
            snap.periodic_launch("default", "p").unwrap().launch,
            60 * 1_000_000_000
        );
        eval.status = EVAL_STATUS_COMPLETE.into();
        state.upsert_evals(4, vec![eval]);
        assert!(overlap_allows_launch(&state.snapshot(), &parent));
    }

    #[test]
    fn periodic_and_parameterized_jobs_cannot_change_kind() {
        let periodic = periodic_job("p", "* * * * *", false);
        let plain = Job {
            periodic: None,
            ..periodic.clone()
        };
        assert!(check_update(Some(&periodic), &periodic).is_ok());
        assert_eq!(
            check_update(Some(&periodic), &plain)
                .unwrap_err()
                .to_string(),
            "cannot update periodic job to being non-periodic"
        );
        assert_eq!(
            check_update(Some(&plain), &periodic)
                .unwrap_err()
                .to_string(),
            "cannot update non-periodic job to being periodic"
        );
        let dispatched = Job {
            dispatched: true,
            ..plain.clone()
        };
        assert_eq!(
            check_update(None, &dispatched).unwrap_err().to_string(),
            "job can't be submitted with 'Dispatched' set"
        );
    }

    #[test]
    fn unknown_time_zones_are_validation_errors() {
        let mut job = periodic_job("p", "* * * * *", false);
        assert!(validate_time_zone(&job).is_ok());
        job.periodic = Some(serde_json::json!({
            "Enabled": true, "Spec": "* * * * *", "SpecType": "cron", "TimeZone": "Nowhere/City"
        }));
        let err = validate_time_zone(&job).unwrap_err().to_string();
        assert!(
            err.contains("Invalid time zone \"Nowhere/City\": unknown time zone Nowhere/City"),
            "{err}"
        );
    }
}
