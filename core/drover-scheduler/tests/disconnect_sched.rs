//! Clients that stop heartbeating: lost allocations, `stop_after_client_disconnect`, and the
//! `disconnect` block (unknown allocations, their `lost_after` deadline, reconnecting).

use std::sync::Arc;

use drover_scheduler::State;
use drover_scheduler::harness::{Harness, mock_job, mock_node, register_eval};
use drover_structs::{
    ALLOC_CLIENT_LOST, ALLOC_CLIENT_RUNNING, ALLOC_CLIENT_UNKNOWN, ALLOC_DESIRED_RUN,
    ALLOC_DESIRED_STOP, Allocation, DisconnectStrategy, EVAL_STATUS_BLOCKED, Evaluation, Job,
    NODE_STATUS_DISCONNECTED, NODE_STATUS_DOWN, NODE_STATUS_READY, Node, RECONCILE_KEEP_ORIGINAL,
    RECONCILE_KEEP_REPLACEMENT, TRIGGER_MAX_DISCONNECT_TIMEOUT, TRIGGER_NODE_UPDATE,
    TRIGGER_RETRY_FAILED_ALLOC, time::now_nanos,
};

const SEC: i64 = 1_000_000_000;

/// Two nodes, the job's `count` allocations running on the first.
fn running_on_first(job: Job, count: i64) -> (Harness, Arc<Node>, Arc<Node>, Arc<Job>) {
    let mut h = Harness::new();
    let first = h.upsert_node(mock_node());
    let mut job = job;
    job.task_groups[0].count = count;
    let job = h.upsert_job(job);
    h.process(&register_eval(&job)).unwrap();
    for a in h.live_allocs(&job) {
        let mut a = (*a).clone();
        a.client_status = ALLOC_CLIENT_RUNNING.into();
        h.upsert_alloc(a);
    }
    let second = h.upsert_node(mock_node());
    (h, first, second, job)
}

fn set_status(h: &mut Harness, node: &Node, status: &str) {
    let mut n = node.clone();
    n.status = status.into();
    h.upsert_node(n);
}

fn node_eval(job: &Job, node: &Node) -> Evaluation {
    Evaluation {
        triggered_by: TRIGGER_NODE_UPDATE.into(),
        node_id: node.id.clone(),
        ..register_eval(job)
    }
}

fn on_node(h: &Harness, job: &Job, node: &Node) -> Vec<Arc<Allocation>> {
    h.live_allocs(job)
        .into_iter()
        .filter(|a| a.node_id == node.id)
        .collect()
}

fn with_disconnect(d: DisconnectStrategy) -> Job {
    let mut job = mock_job();
    job.task_groups[0].disconnect = Some(d);
    job
}

#[test]
fn stop_after_client_disconnect_delays_the_replacement_until_its_evaluation() {
    let mut job = mock_job();
    job.task_groups[0].stop_after_client_disconnect = Some(60 * SEC);
    let (mut h, first, second, job) = running_on_first(job, 2);
    set_status(&mut h, &first, NODE_STATUS_DOWN);
    let before = now_nanos();
    h.process(&node_eval(&job, &first)).unwrap();

    // Both lost, nothing placed, no blocked evaluation: one delayed evaluation instead.
    let stops = h.last_plan_stops();
    assert_eq!(stops.len(), 2);
    assert!(h.last_plan_allocs().is_empty());
    assert!(
        h.created_evals
            .iter()
            .all(|e| e.status != EVAL_STATUS_BLOCKED)
    );
    assert_eq!(h.created_evals.len(), 1);
    let followup = h.created_evals[0].clone();
    assert_eq!(followup.triggered_by, TRIGGER_RETRY_FAILED_ALLOC);
    // 60 s plus the default 5 s kill timeout, from when they were lost.
    assert!(followup.wait_until >= before + 65 * SEC);
    assert!(followup.wait_until <= now_nanos() + 65 * SEC);
    for s in stops {
        assert_eq!(s.client_status, ALLOC_CLIENT_LOST);
        assert_eq!(s.followup_eval_id, followup.id);
    }

    // Another evaluation before the delay places nothing either.
    h.process(&register_eval(&job)).unwrap();
    assert!(h.live_allocs(&job).is_empty());

    // The delayed evaluation places the replacements, linked to the lost allocations.
    let lost: Vec<String> = h
        .state
        .allocs_by_job(&job.namespace, &job.id)
        .iter()
        .map(|a| a.id.clone())
        .collect();
    h.process(&followup).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 2);
    for a in &live {
        assert_eq!(a.node_id, second.id);
        assert!(lost.contains(&a.previous_allocation));
    }
}

#[test]
fn allocations_on_a_down_node_are_lost_from_any_unended_client_status() {
    let (mut h, first, _, job) = running_on_first(mock_job(), 1);
    // The servers had already stopped it, the client never said it ended; it was unknown.
    let a = on_node(&h, &job, &first).remove(0);
    let mut stopped = (*a).clone();
    stopped.desired_status = ALLOC_DESIRED_STOP.into();
    stopped.client_status = ALLOC_CLIENT_UNKNOWN.into();
    h.upsert_alloc(stopped);
    set_status(&mut h, &first, NODE_STATUS_DOWN);
    h.process(&node_eval(&job, &first)).unwrap();
    let stops = h.last_plan_stops();
    assert!(
        stops
            .iter()
            .any(|s| s.id == a.id && s.client_status == ALLOC_CLIENT_LOST)
    );
}

#[test]
fn a_disconnected_nodes_allocations_become_unknown_until_lost_after() {
    let job = with_disconnect(DisconnectStrategy {
        lost_after: 3600 * SEC,
        replace: Some(true),
        reconcile: RECONCILE_KEEP_ORIGINAL.into(),
        ..Default::default()
    });
    let (mut h, first, second, job) = running_on_first(job, 1);
    let original = on_node(&h, &job, &first).remove(0);
    set_status(&mut h, &first, NODE_STATUS_DISCONNECTED);
    let before = now_nanos();
    h.process(&node_eval(&job, &first)).unwrap();

    let unknown = h.state.alloc(&original.id).unwrap();
    assert_eq!(unknown.client_status, ALLOC_CLIENT_UNKNOWN);
    assert_eq!(unknown.desired_status, ALLOC_DESIRED_RUN);
    assert!(unknown.needs_to_reconnect());
    let timeout = h
        .created_evals
        .iter()
        .find(|e| e.triggered_by == TRIGGER_MAX_DISCONNECT_TIMEOUT)
        .expect("a lost_after evaluation")
        .clone();
    assert_eq!(unknown.followup_eval_id, timeout.id);
    assert!(timeout.wait_until >= before + 3600 * SEC);
    // replace = true: a replacement runs meanwhile, the original is not stopped.
    let replacement = on_node(&h, &job, &second).remove(0);
    assert_eq!(replacement.previous_allocation, original.id);
    assert!(h.last_plan_stops().is_empty());

    // Past lost_after the unknown allocation is lost; its replacement stays.
    let mut expired = (*unknown).clone();
    expired.alloc_states = None;
    expired.append_client_state(ALLOC_CLIENT_UNKNOWN, now_nanos() - 3601 * SEC);
    h.upsert_alloc(expired);
    h.process(&timeout).unwrap();
    let lost = h.state.alloc(&original.id).unwrap();
    assert_eq!(
        (lost.desired_status.as_str(), lost.client_status.as_str()),
        (ALLOC_DESIRED_STOP, ALLOC_CLIENT_LOST)
    );
    assert_eq!(h.live_allocs(&job).len(), 1);
}

#[test]
fn replace_false_keeps_unknown_allocations_without_replacements() {
    let job = with_disconnect(DisconnectStrategy {
        lost_after: 3600 * SEC,
        replace: Some(false),
        ..Default::default()
    });
    let (mut h, first, second, job) = running_on_first(job, 2);
    set_status(&mut h, &first, NODE_STATUS_DISCONNECTED);
    h.process(&node_eval(&job, &first)).unwrap();
    assert!(on_node(&h, &job, &second).is_empty());
    let unknown = on_node(&h, &job, &first);
    assert_eq!(unknown.len(), 2);
    assert!(
        unknown
            .iter()
            .all(|a| a.client_status == ALLOC_CLIENT_UNKNOWN)
    );
}

#[test]
fn max_client_disconnect_delays_the_replacement_by_the_reschedule_policy() {
    let mut job = mock_job();
    job.task_groups[0].max_client_disconnect = Some(3600 * SEC);
    let (mut h, first, second, job) = running_on_first(job, 1);
    set_status(&mut h, &first, NODE_STATUS_DISCONNECTED);
    h.process(&node_eval(&job, &first)).unwrap();
    // No disconnect block: the group's reschedule delay (30 s) applies from the disconnect.
    assert!(on_node(&h, &job, &second).is_empty());
    let unknown = on_node(&h, &job, &first).remove(0);
    assert_eq!(unknown.client_status, ALLOC_CLIENT_UNKNOWN);
    let resched = h
        .created_evals
        .iter()
        .find(|e| e.id == unknown.followup_eval_id)
        .expect("the unknown allocation points at its reschedule evaluation")
        .clone();
    assert_eq!(resched.triggered_by, TRIGGER_RETRY_FAILED_ALLOC);
    assert!(
        h.created_evals
            .iter()
            .any(|e| e.triggered_by == TRIGGER_MAX_DISCONNECT_TIMEOUT)
    );
    h.process(&resched).unwrap();
    let replacement = on_node(&h, &job, &second).remove(0);
    assert_eq!(replacement.previous_allocation, unknown.id);
    assert_eq!(
        h.state.alloc(&unknown.id).unwrap().client_status,
        ALLOC_CLIENT_UNKNOWN
    );
}

/// Disconnects the first node, lets a replacement run on the second, then brings the first
/// back with the original reported running. Returns the original's and replacement's ids.
fn reconnect(strategy: &str) -> (Harness, Arc<Job>, String, String) {
    let job = with_disconnect(DisconnectStrategy {
        lost_after: 3600 * SEC,
        replace: Some(true),
        reconcile: strategy.into(),
        ..Default::default()
    });
    let (mut h, first, second, job) = running_on_first(job, 1);
    let original = on_node(&h, &job, &first).remove(0).id.clone();
    set_status(&mut h, &first, NODE_STATUS_DISCONNECTED);
    h.process(&node_eval(&job, &first)).unwrap();
    let replacement = on_node(&h, &job, &second).remove(0).id.clone();
    let mut r = (*h.state.alloc(&replacement).unwrap()).clone();
    r.client_status = ALLOC_CLIENT_RUNNING.into();
    h.upsert_alloc(r);
    set_status(&mut h, &first, NODE_STATUS_READY);
    let mut back = (*h.state.alloc(&original).unwrap()).clone();
    back.client_status = ALLOC_CLIENT_RUNNING.into();
    h.upsert_alloc(back);
    h.process(&node_eval(&job, &first)).unwrap();
    (h, job, original, replacement)
}

#[test]
fn reconnecting_with_keep_original_stops_the_replacement() {
    let (h, job, original, replacement) = reconnect(RECONCILE_KEEP_ORIGINAL);
    let stopped = h.state.alloc(&replacement).unwrap();
    assert_eq!(stopped.desired_status, ALLOC_DESIRED_STOP);
    assert_eq!(
        stopped.desired_description,
        "alloc not needed due to disconnected client reconnect"
    );
    let kept = h.state.alloc(&original).unwrap();
    assert_eq!(kept.desired_status, ALLOC_DESIRED_RUN);
    assert!(!kept.needs_to_reconnect(), "reconnect recorded");
    assert_eq!(h.live_allocs(&job).len(), 1);
}

#[test]
fn reconnecting_with_keep_replacement_stops_the_original() {
    let (h, job, original, replacement) = reconnect(RECONCILE_KEEP_REPLACEMENT);
    let stopped = h.state.alloc(&original).unwrap();
    assert_eq!(stopped.desired_status, ALLOC_DESIRED_STOP);
    assert_eq!(
        stopped.desired_description,
        "alloc not needed due to job update"
    );
    assert_eq!(
        h.state.alloc(&replacement).unwrap().desired_status,
        ALLOC_DESIRED_RUN
    );
    assert_eq!(h.live_allocs(&job).len(), 1);
}
