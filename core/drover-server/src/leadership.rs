//! The leader's loop: starts the leader-only subsystems when this server gains leadership and
//! stops them when it loses it; while leading, marks silent nodes down (or disconnected) and
//! fails evaluations the broker gave up on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use drover_state::StateSnapshot;
use drover_structs::time::now_nanos;
use drover_structs::*;

use crate::fsm::LogEntry;
use crate::server::Inner;

/// Starts the leader's subsystems when this server gains leadership, stops them when it loses
/// it; while leading, marks nodes down whose heartbeats stopped and fails evaluations the
/// broker gave up on.
pub(crate) async fn leader_loop(inner: Arc<Inner>) {
    let mut leadership = inner.raft.leadership();
    let mut shutdown = inner.shutdown_rx.clone();
    let mut leading = false;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        let is_leader = leadership.borrow().is_leader;
        if is_leader && !leading {
            leading = true;
            establish_leadership(&inner).await;
        } else if !is_leader && leading {
            leading = false;
            stop_leader_subsystems(&inner);
            tracing::info!("leadership lost: leader subsystems stopped");
        }
        tokio::select! {
            _ = leadership.changed() => {}
            _ = tick.tick() => {
                if leading {
                    expire_nodes(&inner).await;
                    fail_undeliverable(&inner).await;
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Stops everything that runs only on the leader (the one list `establish_leadership` starts
/// again): losing leadership and an operator restore both go through it.
fn stop_leader_subsystems(inner: &Inner) {
    inner.periodic.stop();
    inner.volume_watcher.stop();
    inner.garbage.stop();
    inner.drainer.stop();
    inner.deployment_watcher.stop();
    inner.broker.set_enabled(false);
    inner.heartbeats.clear();
    inner
        .blocked
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
}

/// Restarts the leader's subsystems from the current state (after an operator restore
/// replaced it under them).
pub(crate) async fn reestablish_leadership(inner: &Arc<Inner>) {
    stop_leader_subsystems(inner);
    if inner.is_leader() {
        establish_leadership(inner).await;
    }
}

async fn establish_leadership(inner: &Arc<Inner>) {
    let snap = inner.state.snapshot();
    // An operator may have paused the broker (scheduler configuration): it stays off.
    inner
        .broker
        .set_enabled(!crate::sched_config::broker_paused(&snap));
    let mut pending = Vec::new();
    let mut blocked = Vec::new();
    for e in snap.evals() {
        match e.status.as_str() {
            EVAL_STATUS_PENDING => pending.push((*e).clone()),
            EVAL_STATUS_BLOCKED => blocked.push((*e).clone()),
            _ => {}
        }
    }
    let (np, nb) = (pending.len(), blocked.len());
    for e in pending {
        inner.enqueue_when_due(e);
    }
    {
        let mut b = inner.blocked.lock().unwrap_or_else(|e| e.into_inner());
        for e in blocked {
            b.insert((e.namespace.clone(), e.job_id.clone()), e);
        }
    }
    // Every live node gets the failover TTL (Nomad's initializeHeartbeatTimers): none is
    // marked down just because the leader changed. Raft reports leadership before this runs,
    // so a node may already have registered or heartbeated here and been given its own TTL:
    // that timer stays (timers are cleared when leadership ends, so it is this term's).
    for n in snap.nodes() {
        if n.status != NODE_STATUS_DOWN {
            inner
                .heartbeats
                .set_if_absent(&n.id, inner.config.failover_heartbeat_ttl);
        }
    }
    inner.periodic.start(inner.clone());
    inner.volume_watcher.start(inner.clone());
    inner.garbage.start(inner.clone());
    inner.drainer.start(inner.clone());
    inner.deployment_watcher.start(crate::server::Server {
        inner: inner.clone(),
    });
    tracing::info!(pending = np, blocked = nb, "leadership established");
}

/// Nomad's `disconnectState`: whether the node may be disconnected rather than down (one of
/// its allocations' groups allows a disconnect), and whether one such allocation still waits
/// to reconnect (wanted running, not past its `lost_after`).
fn disconnect_state(snap: &StateSnapshot, node: &Node, now: i64) -> (bool, bool) {
    if node.status == NODE_STATUS_DOWN || node.status == NODE_STATUS_INIT {
        return (false, false);
    }
    let mut can_disconnect = false;
    for a in snap.allocs_by_node(&node.id) {
        let allows = a.disconnect_timeout(None, now) > now;
        can_disconnect |= allows;
        if allows && a.desired_status == ALLOC_DESIRED_RUN && !a.disconnect_expired(None, now) {
            return (true, true);
        }
    }
    (can_disconnect, false)
}

/// A node-update evaluation of every job with a live allocation on the node.
pub(crate) fn node_job_evals(snap: &StateSnapshot, node_id: &str) -> Vec<Evaluation> {
    let jobs: BTreeSet<(String, String)> = snap
        .allocs_by_node(node_id)
        .iter()
        .filter(|a| !a.terminal())
        .map(|a| (a.namespace.clone(), a.job_id.clone()))
        .collect();
    jobs.iter()
        .filter_map(|(ns, id)| snap.job(ns, id))
        .map(|job| {
            let mut e = Evaluation::for_job(&job, TRIGGER_NODE_UPDATE);
            e.node_id = node_id.to_string();
            e
        })
        .collect()
}

async fn expire_nodes(inner: &Arc<Inner>) {
    for node_id in inner.heartbeats.take_expired() {
        let snap = inner.state.snapshot();
        let Some(node) = snap.node(&node_id) else {
            continue;
        };
        let status = match disconnect_state(&snap, &node, now_nanos()) {
            (true, true) => NODE_STATUS_DISCONNECTED,
            _ => NODE_STATUS_DOWN,
        };
        if status == NODE_STATUS_DISCONNECTED {
            // A disconnected node keeps a timer (Nomad resets it on every status but down):
            // once none of its allocations waits any more, it goes down.
            inner.reset_heartbeat(&node_id);
            if node.status == NODE_STATUS_DISCONNECTED {
                continue;
            }
        }
        let evals = node_job_evals(&snap, &node_id);
        tracing::warn!(node = %node_id, jobs = evals.len(), status, "node missed its heartbeat");
        let entry = LogEntry::NodeStatusUpdate {
            node_id: node_id.clone(),
            status: status.into(),
            updated_at: now_nanos() / 1_000_000_000,
            evals: evals.clone(),
        };
        match inner.apply(entry).await {
            Ok(index) => {
                for mut e in evals {
                    e.modify_index = index;
                    inner.enqueue_when_due(e);
                }
            }
            Err(e) => {
                // The timer was taken: without a new one the node would never be marked.
                tracing::warn!(error = %e, node = %node_id, "marking node down; retrying");
                inner.heartbeats.reset(&node_id, Duration::from_secs(1));
            }
        }
    }
}

async fn fail_undeliverable(inner: &Arc<Inner>) {
    let failed = inner.broker.take_failed();
    if failed.is_empty() {
        return;
    }
    let evals: Vec<Evaluation> = failed
        .iter()
        .map(|e| {
            let mut e = (**e).clone();
            e.status = EVAL_STATUS_FAILED.into();
            e.status_description = "evaluation reached delivery limit".into();
            e.modify_time = now_nanos();
            e
        })
        .collect();
    if let Err(e) = inner.apply(LogEntry::EvalUpdate { evals }).await {
        tracing::warn!(error = %e, "failing undeliverable evals");
    }
}
