//! Deployment health of an allocation (Nomad's `client/allochealth` tracker and the alloc
//! runner's health hook): whether the allocation's tasks came up and stayed up for the
//! group's `update { min_healthy_time }` before its `healthy_deadline`.
//!
//! The decision is [`decide`], a pure function of the group's update strategy, its tasks and
//! their states, when tracking began and the time now; the allocation runner calls it after
//! every task state change and when the time it names comes, and reports the result once in
//! its client update (`AllocClientUpdate.deployment_status`).
//!
//! With `health_check = "checks"` the allocation's healthiness checks must pass too (see
//! [`Checks`]); an allocation without checks is decided from its task states alone, as with
//! `"task_states"`.

use std::collections::BTreeMap;

use drover_structs::time::{format_rfc3339_nanos, go_duration, parse_rfc3339_nanos};
use drover_structs::*;

use crate::lifecycle::{Stage, stage_of};

/// Nomad's `AllocHealthEventSource`: the type of the task events that say why an allocation
/// is unhealthy.
pub const TASK_EVENT_ALLOC_UNHEALTHY: &str = "Alloc Unhealthy";

/// `update { health_check }` values (Nomad's `UpdateStrategyHealthCheck_*`).
pub const HEALTH_CHECK_CHECKS: &str = "checks";
pub const HEALTH_CHECK_TASK_STATES: &str = "task_states";
pub const HEALTH_CHECK_MANUAL: &str = "manual";

/// What [`decide`] concluded.
#[derive(Debug, Clone, PartialEq)]
pub enum Health {
    /// Every task that must run has run without a restart for `min_healthy_time`, since
    /// `at` (Unix nanoseconds).
    Healthy { at: i64 },
    /// A task failed, or `healthy_deadline` passed first. `events` are the "Alloc
    /// Unhealthy" events for the tasks that made it so.
    Unhealthy {
        reason: String,
        events: BTreeMap<String, TaskEvent>,
    },
    /// Not decided yet; nothing changes before `next_check` (Unix nanoseconds) unless a task
    /// state does.
    Pending { next_check: i64 },
}

/// The group's update strategy, if this allocation's health is for the client to track:
/// it is part of a deployment, its group has an `update` block whose health is not set by
/// hand, and it has no health yet (one decided before an agent restart stays decided).
pub fn tracked_strategy<'a>(
    alloc: &Allocation,
    group: &'a TaskGroup,
) -> Option<&'a UpdateStrategy> {
    if alloc.deployment_id.is_empty() {
        return None;
    }
    if alloc
        .deployment_status
        .as_ref()
        .is_some_and(|s| s.healthy.is_some())
    {
        return None;
    }
    // Nomad's `UpdateStrategy.IsEmpty`: no `max_parallel`, no update block.
    let update = group.update.as_ref().filter(|u| u.max_parallel > 0)?;
    (update.health_check != HEALTH_CHECK_MANUAL).then_some(update)
}

/// The health an allocation reports once decided, keeping what only the servers set (the
/// canary mark and the modify index) from the status it had.
pub fn decided_status(
    prior: Option<&AllocDeploymentStatus>,
    healthy: bool,
    at: i64,
) -> AllocDeploymentStatus {
    AllocDeploymentStatus {
        healthy: Some(healthy),
        timestamp: format_rfc3339_nanos(at),
        ..prior.cloned().unwrap_or_default()
    }
}

/// Since when the task runs without a restart: its start, or its last restart if later
/// (Drover keeps a task's first `StartedAt` across restarts; `LastRestart` is set just before
/// the task is started again).
fn running_since(state: &TaskState) -> Option<i64> {
    let started = state.started_at.as_deref().and_then(parse_rfc3339_nanos);
    let restarted = state.last_restart.as_deref().and_then(parse_rfc3339_nanos);
    started.max(restarted)
}

/// Tasks that never count: poststop tasks wait for the others to end.
fn counts(task: &Task) -> bool {
    stage_of(task) != Stage::Poststop
}

/// What the allocation's service checks say, for `health_check = "checks"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checks {
    /// Not asked for, or the allocation has no healthiness check.
    NotUsed,
    /// Every healthiness check has passed since `since` (Unix nanoseconds).
    Passing { since: i64 },
    /// A healthiness check does not pass (or has no result yet).
    NotPassing,
}

/// [`decide_with_checks`] for an allocation whose checks do not count.
pub fn decide(
    update: &UpdateStrategy,
    tasks: &[Task],
    states: &BTreeMap<String, TaskState>,
    tracking_started: i64,
    now: i64,
) -> Health {
    decide_with_checks(
        update,
        tasks,
        states,
        tracking_started,
        now,
        Checks::NotUsed,
    )
}

/// Nomad's `Tracker.watchTaskEvents`, decided at `now` for an allocation whose tracking began
/// at `tracking_started` (the healthy deadline runs from there, as Nomad's health hook sets it
/// when it starts watching). Times are Unix nanoseconds.
///
/// Poststop tasks are left out; a non-sidecar poststart task that completed successfully is
/// done; a non-sidecar prestart task counts once it completed successfully; every other task
/// must be running. A failed task, or one dead that should run, makes the allocation
/// unhealthy at once. With `checks` in use, the allocation is healthy once its tasks and its
/// checks have both been so for `min_healthy_time` (Nomad's `watchNomadEvents`).
pub fn decide_with_checks(
    update: &UpdateStrategy,
    tasks: &[Task],
    states: &BTreeMap<String, TaskState>,
    tracking_started: i64,
    now: i64,
    checks: Checks,
) -> Health {
    let deadline = tracking_started.saturating_add(update.healthy_deadline.max(0));
    let min_healthy = update.min_healthy_time.max(0);
    let mut all_started = true;
    let mut latest_start: Option<i64> = None;
    for task in tasks.iter().filter(|t| counts(t)) {
        let Some(state) = states.get(&task.name) else {
            all_started = false;
            continue;
        };
        let stage = stage_of(task);
        let succeeded = state.state == TASK_STATE_DEAD && !state.failed;
        if stage == Stage::PoststartEphemeral && succeeded {
            continue;
        }
        if state.failed || (state.state == TASK_STATE_DEAD && stage != Stage::PrestartEphemeral) {
            let why = if state.failed { "failed" } else { "is dead" };
            return unhealthy(
                format!("task {:?} {why}", task.name),
                update,
                tasks,
                states,
                deadline,
                now,
            );
        }
        if state.state != TASK_STATE_RUNNING && !succeeded {
            all_started = false;
            continue;
        }
        if let Some(since) = running_since(state) {
            latest_start = latest_start.max(Some(since));
        }
    }
    match checks {
        Checks::NotUsed => {}
        Checks::Passing { since } => latest_start = latest_start.max(Some(since)),
        Checks::NotPassing => all_started = false,
    }
    let healthy_at = latest_start
        .filter(|_| all_started)
        .map(|since| since.saturating_add(min_healthy));
    if let Some(at) = healthy_at
        && at <= deadline
        && at <= now
    {
        return Health::Healthy { at };
    }
    if now >= deadline {
        let reason = if checks == Checks::NotPassing {
            "service checks not passing by healthy_deadline".to_string()
        } else {
            format!(
                "not healthy by healthy_deadline of {}",
                go_duration(update.healthy_deadline)
            )
        };
        let mut health = unhealthy(reason, update, tasks, states, deadline, now);
        if checks == Checks::NotPassing
            && let Health::Unhealthy { events, .. } = &mut health
            && events.is_empty()
        {
            // Tasks ran long enough: the checks are to blame (Nomad's event text).
            for t in tasks.iter().filter(|t| counts(t)) {
                let mut ev = TaskEvent::new(TASK_EVENT_ALLOC_UNHEALTHY)
                    .with_message("Services not healthy by deadline");
                ev.time = now;
                events.insert(t.name.clone(), ev);
            }
        }
        return health;
    }
    Health::Pending {
        next_check: healthy_at.map_or(deadline, |at| at.min(deadline)),
    }
}

fn unhealthy(
    reason: String,
    update: &UpdateStrategy,
    tasks: &[Task],
    states: &BTreeMap<String, TaskState>,
    deadline: i64,
    now: i64,
) -> Health {
    let events = tasks
        .iter()
        .filter(|t| counts(t))
        .filter_map(|t| {
            let message = task_event_message(t, states.get(&t.name)?, update, deadline)?;
            let mut ev = TaskEvent::new(TASK_EVENT_ALLOC_UNHEALTHY).with_message(message);
            ev.time = now;
            Some((t.name.clone(), ev))
        })
        .collect();
    Health::Unhealthy { reason, events }
}

/// Nomad's `taskHealthState.event`: why this task made the allocation unhealthy, if it did.
/// (Nomad measures the running case against a zero deadline, so it names every running task;
/// this uses the allocation's real healthy deadline.)
fn task_event_message(
    task: &Task,
    state: &TaskState,
    update: &UpdateStrategy,
    deadline: i64,
) -> Option<String> {
    if state.failed {
        return Some("Unhealthy because of failed task".into());
    }
    match state.state.as_str() {
        TASK_STATE_PENDING => Some(format!(
            "Task not running by healthy_deadline of {}",
            go_duration(update.healthy_deadline)
        )),
        TASK_STATE_DEAD => {
            // Non-sidecar lifecycle tasks are meant to end: healthy once they succeeded.
            let ephemeral = matches!(
                stage_of(task),
                Stage::PrestartEphemeral | Stage::PoststartEphemeral
            );
            (!ephemeral).then(|| "Unhealthy because of dead task".into())
        }
        TASK_STATE_RUNNING => {
            let since = running_since(state)?;
            (since.saturating_add(update.min_healthy_time.max(0)) > deadline).then(|| {
                format!(
                    "Task not running for min_healthy_time of {} by healthy_deadline of {}",
                    go_duration(update.min_healthy_time),
                    go_duration(update.healthy_deadline)
                )
            })
        }
        _ => None,
    }
}

/// Adds `ev` to a task state's events as the task runner does (the last 10 are kept).
pub(crate) fn push_event(state: &mut TaskState, ev: TaskEvent) {
    state.events.push(ev);
    if state.events.len() > 10 {
        let excess = state.events.len() - 10;
        state.events.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SEC: i64 = 1_000_000_000;
    /// Tracking starts here.
    const T0: i64 = 1_700_000_000 * SEC;

    fn update(check: &str, min_healthy: i64, deadline: i64) -> UpdateStrategy {
        UpdateStrategy {
            max_parallel: 1,
            health_check: check.into(),
            min_healthy_time: min_healthy,
            healthy_deadline: deadline,
            ..Default::default()
        }
    }

    fn task(name: &str, hook: Option<&str>, sidecar: bool) -> Task {
        Task {
            name: name.into(),
            lifecycle: hook.map(|h| json!({"Hook": h, "Sidecar": sidecar})),
            ..Default::default()
        }
    }

    fn pending() -> TaskState {
        TaskState {
            state: TASK_STATE_PENDING.into(),
            ..Default::default()
        }
    }

    fn running(since: i64) -> TaskState {
        TaskState {
            state: TASK_STATE_RUNNING.into(),
            started_at: Some(format_rfc3339_nanos(since)),
            ..Default::default()
        }
    }

    fn dead(started: i64, failed: bool) -> TaskState {
        TaskState {
            state: TASK_STATE_DEAD.into(),
            failed,
            started_at: Some(format_rfc3339_nanos(started)),
            finished_at: Some(format_rfc3339_nanos(started + SEC)),
            ..Default::default()
        }
    }

    fn states(list: &[(&str, TaskState)]) -> BTreeMap<String, TaskState> {
        list.iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect()
    }

    fn messages(h: &Health) -> BTreeMap<String, String> {
        match h {
            Health::Unhealthy { events, .. } => events
                .iter()
                .map(|(t, e)| {
                    assert_eq!(e.event_type, TASK_EVENT_ALLOC_UNHEALTHY);
                    assert_eq!(e.display_message, e.message);
                    (t.clone(), e.message.clone())
                })
                .collect(),
            other => panic!("not unhealthy: {other:?}"),
        }
    }

    #[test]
    fn with_checks_both_tasks_and_checks_must_be_healthy_for_min_healthy_time() {
        let u = update(HEALTH_CHECK_CHECKS, 10 * SEC, 60 * SEC);
        let tasks = vec![task("web", None, false)];
        let s = states(&[("web", running(T0 + SEC))]);
        let decide_at = |now, checks| decide_with_checks(&u, &tasks, &s, T0, now, checks);
        assert_eq!(
            decide_at(T0 + 20 * SEC, Checks::NotPassing),
            Health::Pending {
                next_check: T0 + 60 * SEC
            }
        );
        // Passing since 15 s: healthy 10 s later, not at the task's start plus 10 s.
        let passing = Checks::Passing {
            since: T0 + 15 * SEC,
        };
        assert_eq!(
            decide_at(T0 + 20 * SEC, passing),
            Health::Pending {
                next_check: T0 + 25 * SEC
            }
        );
        assert_eq!(
            decide_at(T0 + 25 * SEC, passing),
            Health::Healthy { at: T0 + 25 * SEC }
        );
        // Never passing: unhealthy at the deadline, the checks named as the cause.
        match decide_at(T0 + 60 * SEC, Checks::NotPassing) {
            Health::Unhealthy { reason, events } => {
                assert!(reason.contains("service checks"), "{reason}");
                assert_eq!(events["web"].message, "Services not healthy by deadline");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn healthy_once_every_task_ran_for_min_healthy_time() {
        let u = update(HEALTH_CHECK_TASK_STATES, 10 * SEC, 300 * SEC);
        let tasks = vec![task("web", None, false), task("api", None, false)];
        let s = states(&[("web", running(T0 + SEC)), ("api", running(T0 + 3 * SEC))]);
        // Waits for the later start plus min_healthy_time, no earlier.
        assert_eq!(
            decide(&u, &tasks, &s, T0, T0 + 5 * SEC),
            Health::Pending {
                next_check: T0 + 13 * SEC
            }
        );
        assert_eq!(
            decide(&u, &tasks, &s, T0, T0 + 13 * SEC),
            Health::Healthy { at: T0 + 13 * SEC }
        );
        // Decided late (say after an agent restart): still the moment it became healthy.
        assert_eq!(
            decide(&u, &tasks, &s, T0, T0 + 60 * SEC),
            Health::Healthy { at: T0 + 13 * SEC }
        );
        // "checks" without any check is decided by the task states alone.
        let c = update(HEALTH_CHECK_CHECKS, 10 * SEC, 300 * SEC);
        assert_eq!(
            decide(&c, &tasks, &s, T0, T0 + 13 * SEC),
            Health::Healthy { at: T0 + 13 * SEC }
        );
    }

    #[test]
    fn a_task_not_yet_running_keeps_it_pending_until_the_deadline() {
        let u = update(HEALTH_CHECK_TASK_STATES, 10 * SEC, 300 * SEC);
        let tasks = vec![task("web", None, false), task("api", None, false)];
        let s = states(&[("web", running(T0)), ("api", pending())]);
        assert_eq!(
            decide(&u, &tasks, &s, T0, T0 + 20 * SEC),
            Health::Pending {
                next_check: T0 + 300 * SEC
            }
        );
        // A task without any state yet is not running either.
        let s = states(&[("web", running(T0))]);
        assert!(matches!(
            decide(&u, &tasks, &s, T0, T0 + 20 * SEC),
            Health::Pending { .. }
        ));
    }

    #[test]
    fn a_restart_starts_min_healthy_time_again() {
        let u = update(HEALTH_CHECK_TASK_STATES, 10 * SEC, 300 * SEC);
        let tasks = vec![task("web", None, false)];
        let mut web = running(T0);
        web.restarts = 1;
        web.last_restart = Some(format_rfc3339_nanos(T0 + 8 * SEC));
        let s = states(&[("web", web.clone())]);
        assert_eq!(
            decide(&u, &tasks, &s, T0, T0 + 10 * SEC),
            Health::Pending {
                next_check: T0 + 18 * SEC
            }
        );
        assert_eq!(
            decide(&u, &tasks, &s, T0, T0 + 18 * SEC),
            Health::Healthy { at: T0 + 18 * SEC }
        );
        // While it waits to be started again it is pending: not healthy.
        web.state = TASK_STATE_PENDING.into();
        let s = states(&[("web", web)]);
        assert!(matches!(
            decide(&u, &tasks, &s, T0, T0 + 30 * SEC),
            Health::Pending { .. }
        ));
    }

    #[test]
    fn a_failed_task_is_unhealthy_at_once() {
        let u = update(HEALTH_CHECK_TASK_STATES, 10 * SEC, 300 * SEC);
        let tasks = vec![task("web", None, false), task("api", None, false)];
        let s = states(&[("web", dead(T0, true)), ("api", running(T0))]);
        let h = decide(&u, &tasks, &s, T0, T0 + 2 * SEC);
        assert!(
            matches!(&h, Health::Unhealthy { reason, .. } if reason == "task \"web\" failed"),
            "{h:?}"
        );
        // Only the failed task is to blame: the other has time left before the deadline.
        assert_eq!(
            messages(&h),
            BTreeMap::from([("web".into(), "Unhealthy because of failed task".into())])
        );
        // A main task that ended, even successfully, is not running as it should.
        let s = states(&[("web", dead(T0, false)), ("api", running(T0))]);
        let h = decide(&u, &tasks, &s, T0, T0 + 2 * SEC);
        assert_eq!(
            messages(&h),
            BTreeMap::from([("web".into(), "Unhealthy because of dead task".into())])
        );
    }

    #[test]
    fn the_healthy_deadline_makes_it_unhealthy_with_nomads_events() {
        let u = update(HEALTH_CHECK_TASK_STATES, 10 * SEC, 300 * SEC);
        let tasks = vec![
            task("web", None, false),
            task("api", None, false),
            task("ok", None, false),
        ];
        let s = states(&[
            ("web", pending()),
            ("api", running(T0 + 295 * SEC)),
            ("ok", running(T0)),
        ]);
        assert!(matches!(
            decide(&u, &tasks, &s, T0, T0 + 299 * SEC),
            Health::Pending { next_check } if next_check == T0 + 300 * SEC
        ));
        let h = decide(&u, &tasks, &s, T0, T0 + 300 * SEC);
        assert!(
            matches!(&h, Health::Unhealthy { reason, .. }
                if reason == "not healthy by healthy_deadline of 5m0s"),
            "{h:?}"
        );
        assert_eq!(
            messages(&h),
            BTreeMap::from([
                (
                    "web".into(),
                    "Task not running by healthy_deadline of 5m0s".into()
                ),
                (
                    "api".into(),
                    "Task not running for min_healthy_time of 10s by healthy_deadline of 5m0s"
                        .into()
                ),
            ])
        );
        if let Health::Unhealthy { events, .. } = &h {
            assert_eq!(events["web"].time, T0 + 300 * SEC);
        }
        // Healthy only after the deadline: the deadline wins.
        let s = states(&[("web", running(T0 + 295 * SEC))]);
        let one = vec![task("web", None, false)];
        assert!(matches!(
            decide(&u, &one, &s, T0, T0 + 305 * SEC),
            Health::Unhealthy { .. }
        ));
    }

    #[test]
    fn prestart_tasks_count_once_done_sidecars_must_run_and_poststop_is_left_out() {
        let u = update(HEALTH_CHECK_TASK_STATES, 10 * SEC, 300 * SEC);
        let tasks = vec![
            task("init", Some("prestart"), false),
            task("proxy", Some("prestart"), true),
            task("main", None, false),
            task("after", Some("poststart"), false),
            task("cleanup", Some("poststop"), false),
        ];
        // The prestart task completed, the poststart one too, poststop waits: healthy.
        let s = states(&[
            ("init", dead(T0, false)),
            ("proxy", running(T0 + SEC)),
            ("main", running(T0 + 2 * SEC)),
            ("after", dead(T0 + 3 * SEC, false)),
            ("cleanup", pending()),
        ]);
        assert_eq!(
            decide(&u, &tasks, &s, T0, T0 + 12 * SEC),
            Health::Healthy { at: T0 + 12 * SEC }
        );
        // The prestart task still runs: main has not started, nothing to decide yet.
        let s = states(&[
            ("init", running(T0)),
            ("proxy", running(T0)),
            ("main", pending()),
            ("after", pending()),
            ("cleanup", pending()),
        ]);
        assert!(matches!(
            decide(&u, &tasks, &s, T0, T0 + 20 * SEC),
            Health::Pending { .. }
        ));
        // A failed prestart task fails it.
        let s = states(&[("init", dead(T0, true)), ("main", pending())]);
        assert!(matches!(
            decide(&u, &tasks, &s, T0, T0 + 2 * SEC),
            Health::Unhealthy { .. }
        ));
        // A dead sidecar fails it.
        let s = states(&[
            ("init", dead(T0, false)),
            ("proxy", dead(T0, false)),
            ("main", running(T0)),
            ("after", dead(T0, false)),
        ]);
        let h = decide(&u, &tasks, &s, T0, T0 + 2 * SEC);
        assert_eq!(
            messages(&h),
            BTreeMap::from([("proxy".into(), "Unhealthy because of dead task".into())])
        );
        // At the deadline, the pending poststop task is not blamed.
        let s = states(&[
            ("init", dead(T0, false)),
            ("proxy", running(T0)),
            ("main", pending()),
            ("after", pending()),
            ("cleanup", pending()),
        ]);
        let h = decide(&u, &tasks, &s, T0, T0 + 300 * SEC);
        assert_eq!(
            messages(&h).keys().collect::<Vec<_>>(),
            vec!["after", "main"]
        );
    }

    #[test]
    fn tracked_only_in_a_deployment_with_automatic_health_and_no_health_yet() {
        let group = |check: &str| TaskGroup {
            name: "g".into(),
            update: Some(update(check, SEC, 10 * SEC)),
            ..Default::default()
        };
        let alloc = Allocation {
            deployment_id: "d1".into(),
            ..Default::default()
        };
        assert!(tracked_strategy(&alloc, &group(HEALTH_CHECK_TASK_STATES)).is_some());
        assert!(tracked_strategy(&alloc, &group(HEALTH_CHECK_CHECKS)).is_some());
        assert!(tracked_strategy(&alloc, &group(HEALTH_CHECK_MANUAL)).is_none());
        let no_update = TaskGroup::default();
        assert!(tracked_strategy(&alloc, &no_update).is_none());
        let mut empty = group(HEALTH_CHECK_TASK_STATES);
        empty.update.as_mut().unwrap().max_parallel = 0;
        assert!(tracked_strategy(&alloc, &empty).is_none());
        let outside = Allocation::default();
        assert!(tracked_strategy(&outside, &group(HEALTH_CHECK_TASK_STATES)).is_none());
        // A canary mark without health is still tracked; decided health is not again.
        let mut canary = alloc.clone();
        canary.deployment_status = Some(Box::new(AllocDeploymentStatus {
            canary: true,
            ..Default::default()
        }));
        assert!(tracked_strategy(&canary, &group(HEALTH_CHECK_TASK_STATES)).is_some());
        let mut decided = canary.clone();
        decided.deployment_status.as_mut().unwrap().healthy = Some(false);
        assert!(tracked_strategy(&decided, &group(HEALTH_CHECK_TASK_STATES)).is_none());
    }

    #[test]
    fn the_decided_status_keeps_the_servers_canary_mark_and_index() {
        let prior = AllocDeploymentStatus {
            canary: true,
            modify_index: 7,
            ..Default::default()
        };
        let s = decided_status(Some(&prior), true, T0);
        assert_eq!(s.healthy, Some(true));
        assert!(s.canary);
        assert_eq!(s.modify_index, 7);
        assert_eq!(parse_rfc3339_nanos(&s.timestamp), Some(T0));
        assert_eq!(decided_status(None, false, T0).healthy, Some(false));
    }
}

#[cfg(test)]
#[path = "alloc_health_runner_tests.rs"]
mod runner_tests;
