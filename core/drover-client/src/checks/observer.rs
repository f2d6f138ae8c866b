//! One check's observer: runs it on its interval, records each result and restarts its task
//! when `check_restart` says so.

use std::time::Duration;

use drover_structs::service_check::*;
use drover_structs::time::now_nanos;
use tokio::sync::watch;
use tokio::time::Instant;

use super::CheckEnv;
use super::probe::{self, HttpProbe, Outcome};
use super::status::{Restarter, Thresholds};

/// Runs check `gc` (id `id`) until `stop` turns true or its sender goes.
pub(super) async fn observe(
    env: CheckEnv,
    id: String,
    gc: GroupCheck,
    mut stop: watch::Receiver<bool>,
) {
    let c = &gc.check;
    // Validation keeps both at one second or more; the floor guards a spin all the same.
    let interval = Duration::from_nanos(c.interval.max(1_000_000_000) as u64);
    let timeout = Duration::from_nanos(c.timeout.max(1_000_000_000) as u64);
    let http = (c.check_type == "http").then(|| HttpProbe::new(c));
    let blank = CheckQueryResult {
        id,
        mode: c.mode().into(),
        group: env.alloc.name.clone(),
        task: if gc.task_service {
            gc.task.clone()
        } else {
            String::new()
        },
        service: gc.service.clone(),
        check: c.name.clone(),
        ..Default::default()
    };
    let record = |status: &str, outcome: Option<&Outcome>| {
        let mut r = blank.clone();
        r.status = status.to_string();
        if let Some(o) = outcome {
            r.status_code = o.status_code;
            r.output = o.output.clone();
        }
        r.timestamp = now_nanos() / 1_000_000_000;
        env.results.set(r);
    };
    let mut thresholds = Thresholds::new(c);
    let mut restarter = c
        .restart_policy()
        .map(|policy| Restarter::new(c, policy, now_nanos()));
    let mut runs = env.runs.clone();
    let run_of_task =
        |runs: &watch::Receiver<super::TaskRuns>| runs.borrow().get(&gc.task).copied().flatten();
    let mut task_run = run_of_task(&runs);
    record(thresholds.shown(), None);
    // Nomad's compromise between at once (too early) and a whole interval (slow).
    let mut next = Instant::now() + interval / 2;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            changed = runs.changed(), if !gc.task.is_empty() => {
                if changed.is_err() {
                    return;
                }
                let now_run = run_of_task(&runs);
                if now_run.is_some() && now_run != task_run {
                    // The task started again: the check starts over with it.
                    thresholds = Thresholds::new(c);
                    if let Some(r) = restarter.as_mut() {
                        r.task_started(now_nanos());
                    }
                    record(thresholds.shown(), None);
                    next = Instant::now() + interval / 2;
                }
                task_run = now_run;
                continue;
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
                continue;
            }
        }
        let outcome = run_once(&env, &gc, http.as_ref(), timeout).await;
        if stop.has_changed().is_err() || *stop.borrow() {
            // Stopped while it ran: the allocation's results are gone already.
            return;
        }
        let shown = thresholds.apply(outcome.status);
        record(shown, Some(&outcome));
        if let Some(r) = restarter.as_mut()
            && r.apply(now_nanos(), shown)
            && !gc.task.is_empty()
        {
            tracing::info!(alloc = %env.alloc.id, task = %gc.task, check = %c.name,
                "restarting the task: its check stayed unhealthy");
            env.control.restart_for_check(&gc.task, &c.name);
        }
        next = Instant::now() + interval;
    }
}

async fn run_once(
    env: &CheckEnv,
    gc: &GroupCheck,
    http: Option<&HttpProbe>,
    timeout: Duration,
) -> Outcome {
    let c = &gc.check;
    if c.check_type == "script" {
        let argv = std::iter::once(c.command.clone())
            .chain(c.args.iter().cloned())
            .collect();
        return probe::script(&env.live, &gc.task, argv, timeout).await;
    }
    let (host, port) = match probe::target(gc, &env.alloc, &env.node) {
        Ok(t) => t,
        Err(e) => {
            return Outcome {
                status: CHECK_FAILURE,
                status_code: 0,
                output: e,
            };
        }
    };
    match (c.check_type.as_str(), http) {
        ("http", Some(http)) => http.run(&host, port).await,
        ("grpc", _) => probe::grpc(&host, port, &c.grpc_service, timeout).await,
        _ => probe::tcp(&host, port, timeout).await,
    }
}
