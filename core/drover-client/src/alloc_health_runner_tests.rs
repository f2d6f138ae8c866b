//! Deployment health through a real allocation runner and task runners, over the scripted
//! driver of the lifecycle tests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_structs::time::parse_rfc3339_nanos;
use drover_structs::*;

use super::{HEALTH_CHECK_MANUAL, HEALTH_CHECK_TASK_STATES, TASK_EVENT_ALLOC_UNHEALTHY};
use crate::lifecycle::runner_tests::{Harness, task};

const MS: i64 = 1_000_000;

/// An allocation of deployment "d1" of a service job whose group runs `tasks` with this
/// `update` block (and restarts on failure up to `attempts` times, at once).
fn deployment_alloc(tasks: Vec<Task>, check: &str, min_ms: i64, deadline_ms: i64) -> Allocation {
    deployment_alloc_restarting(tasks, check, min_ms, deadline_ms, 0)
}

fn deployment_alloc_restarting(
    tasks: Vec<Task>,
    check: &str,
    min_ms: i64,
    deadline_ms: i64,
    attempts: i64,
) -> Allocation {
    let group = TaskGroup {
        name: "g".into(),
        restart_policy: Some(RestartPolicy {
            attempts,
            interval: 600_000 * MS,
            delay: 0,
            mode: RESTART_MODE_FAIL.into(),
        }),
        update: Some(UpdateStrategy {
            max_parallel: 1,
            health_check: check.into(),
            min_healthy_time: min_ms * MS,
            healthy_deadline: deadline_ms * MS,
            ..Default::default()
        }),
        tasks,
        ..Default::default()
    };
    let job = Job {
        id: "j".into(),
        job_type: JOB_TYPE_SERVICE.into(),
        task_groups: vec![group],
        ..Default::default()
    };
    Allocation {
        id: uuid::Uuid::new_v4().to_string(),
        job_id: "j".into(),
        task_group: "g".into(),
        deployment_id: "d1".into(),
        job: Some(Arc::new(job)),
        ..Default::default()
    }
}

/// Reads reports until one carries a deployment status; returns it and every report read.
async fn until_health(h: &mut Harness) -> (AllocClientUpdate, Vec<AllocClientUpdate>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no health reported; log {:?}", h.log());
        if let Ok(Some(u)) = tokio::time::timeout(left, h.updates.recv()).await {
            seen.push(u.clone());
            if u.deployment_status.is_some() {
                return (u, seen);
            }
        }
    }
}

/// Every report that comes within `wait`.
async fn reports_within(h: &mut Harness, wait: Duration) -> Vec<AllocClientUpdate> {
    let until = tokio::time::Instant::now() + wait;
    let mut seen = Vec::new();
    while let Ok(Some(u)) = tokio::time::timeout_at(until, h.updates.recv()).await {
        seen.push(u);
    }
    seen
}

/// Reads reports until the runner is gone (its report channel closes); returns the last one,
/// or `last` if none came.
async fn until_closed(h: &mut Harness, mut last: AllocClientUpdate) -> AllocClientUpdate {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), h.updates.recv()).await {
            Ok(Some(u)) => last = u,
            Ok(None) => return last,
            Err(_) => panic!("the allocation runner did not end; log {:?}", h.log()),
        }
    }
}

fn health_events(state: &TaskState) -> Vec<&str> {
    state
        .events
        .iter()
        .filter(|e| e.event_type == TASK_EVENT_ALLOC_UNHEALTHY)
        .map(|e| e.display_message.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_after_min_healthy_time_reported_once_and_kept_through_a_restart() {
    let alloc = deployment_alloc(
        vec![task("web", None, false, None, 0)],
        HEALTH_CHECK_TASK_STATES,
        300,
        10_000,
    );
    let mut h = Harness::start_alloc(alloc);
    let (u, seen) = until_health(&mut h).await;
    let status = u.deployment_status.clone().expect("health");
    assert_eq!(status.healthy, Some(true), "{seen:#?}");
    let states = u.task_states.expect("task states");
    let web = &states["web"];
    assert_eq!(web.state, TASK_STATE_RUNNING);
    let started = parse_rfc3339_nanos(web.started_at.as_deref().unwrap()).unwrap();
    let at = parse_rfc3339_nanos(&status.timestamp).expect("an RFC 3339 timestamp");
    assert!(
        at >= started + 300 * MS,
        "healthy only after min_healthy_time"
    );
    assert!(health_events(web).is_empty());
    // A restart once healthy changes nothing: the same status rides on every later report.
    h.runner
        .control
        .restart(Some("web"), false)
        .await
        .expect("the task restarts");
    let later = reports_within(&mut h, Duration::from_millis(600)).await;
    assert!(!later.is_empty());
    assert!(
        later
            .iter()
            .all(|u| u.deployment_status.as_ref() == Some(&status)),
        "{later:#?}"
    );
    h.runner.stop();
    let last = until_closed(&mut h, u_last(&later)).await;
    assert_eq!(last.deployment_status.as_ref(), Some(&status));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_makes_it_unhealthy_at_once_with_an_event() {
    let alloc = deployment_alloc(
        vec![task("web", None, false, Some(50), 1)],
        HEALTH_CHECK_TASK_STATES,
        5_000,
        10_000,
    );
    let started = Instant::now();
    let mut h = Harness::start_alloc(alloc);
    let (u, _) = until_health(&mut h).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not by the deadline"
    );
    assert_eq!(u.deployment_status.as_ref().unwrap().healthy, Some(false));
    let states = u.task_states.clone().expect("task states");
    assert_eq!(
        health_events(&states["web"]),
        vec!["Unhealthy because of failed task"]
    );
    let last = until_closed(&mut h, u).await;
    assert_eq!(last.client_status, ALLOC_CLIENT_FAILED);
    assert_eq!(last.deployment_status.unwrap().healthy, Some(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_healthy_deadline_makes_it_unhealthy_and_the_task_keeps_the_event() {
    let alloc = deployment_alloc(
        vec![task("web", None, false, None, 0)],
        HEALTH_CHECK_TASK_STATES,
        2_000,
        300,
    );
    let started = Instant::now();
    let mut h = Harness::start_alloc(alloc);
    let (u, _) = until_health(&mut h).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(u.deployment_status.as_ref().unwrap().healthy, Some(false));
    let expected = vec!["Task not running for min_healthy_time of 2s by healthy_deadline of 300ms"];
    assert_eq!(
        health_events(&u.task_states.clone().unwrap()["web"]),
        expected
    );
    // The task runner took the event as its own: it is still there once the task is killed.
    h.runner.stop();
    let last = until_closed(&mut h, u).await;
    let states = last.task_states.expect("task states");
    assert_eq!(health_events(&states["web"]), expected);
    assert!(
        states["web"]
            .events
            .iter()
            .any(|e| e.event_type == TASK_EVENT_KILLED)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_keeps_restarting_never_gets_healthy() {
    // Exits (successfully, so a service task is started again) every 100ms.
    let alloc = deployment_alloc_restarting(
        vec![task("web", None, false, Some(100), 0)],
        HEALTH_CHECK_TASK_STATES,
        300,
        1_000,
        100,
    );
    let started = Instant::now();
    let mut h = Harness::start_alloc(alloc);
    let (u, _) = until_health(&mut h).await;
    assert!(started.elapsed() >= Duration::from_millis(1_000));
    assert_eq!(u.deployment_status.as_ref().unwrap().healthy, Some(false));
    let states = u.task_states.clone().expect("task states");
    assert!(states["web"].restarts > 0);
    assert_eq!(
        health_events(&states["web"]).len(),
        1,
        "{:#?}",
        states["web"]
    );
    h.runner.stop();
    until_closed(&mut h, u).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_health_and_health_decided_before_a_restart_are_not_tracked() {
    let manual = deployment_alloc(
        vec![task("web", None, false, None, 0)],
        HEALTH_CHECK_MANUAL,
        50,
        200,
    );
    let mut h = Harness::start_alloc(manual);
    let seen = reports_within(&mut h, Duration::from_millis(500)).await;
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|u| u.deployment_status.is_none()));
    h.runner.stop();
    let last = until_closed(&mut h, u_last(&seen)).await;
    assert!(last.deployment_status.is_none());

    // Unhealthy already (as kept in the client state): reported so, never decided again,
    // although the task now runs long enough to be healthy.
    let mut decided = deployment_alloc(
        vec![task("web", None, false, None, 0)],
        HEALTH_CHECK_TASK_STATES,
        50,
        10_000,
    );
    let stored = AllocDeploymentStatus {
        healthy: Some(false),
        timestamp: "2026-01-01T00:00:00Z".into(),
        canary: true,
        modify_index: 4,
    };
    decided.deployment_status = Some(Box::new(stored.clone()));
    let mut h = Harness::start_alloc(decided);
    let seen = reports_within(&mut h, Duration::from_millis(500)).await;
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|u| u.deployment_status.as_ref() == Some(&stored)),
        "{seen:#?}"
    );
    h.runner.stop();
    let last = until_closed(&mut h, u_last(&seen)).await;
    assert_eq!(last.deployment_status.as_ref(), Some(&stored));
}

fn u_last(seen: &[AllocClientUpdate]) -> AllocClientUpdate {
    seen.last().cloned().expect("a report")
}
