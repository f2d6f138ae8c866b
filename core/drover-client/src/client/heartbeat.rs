//! The node's registration and heartbeats, and the allocations `stop_after_client_disconnect`
//! watches (the heartbeat loop keeps its interval below their shortest grace).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use drover_structs::Node;
use tokio::sync::watch;

use super::{ServerConn, Shared};
use crate::heartbeat_stop::{DisconnectStops, HeartbeatClock};

/// The allocations `stop_after_client_disconnect` watches: the runners with a grace that
/// still run.
pub(super) struct RunnerStops(pub(super) Arc<Shared>);

impl DisconnectStops for RunnerStops {
    fn watched(&self) -> HashMap<String, Duration> {
        let runners = self.0.runners.lock().unwrap_or_else(|e| e.into_inner());
        runners
            .iter()
            .filter(|(_, r)| !r.is_done() && !r.stop_requested())
            .filter_map(|(id, r)| Some((id.clone(), r.stop_after_disconnect?)))
            .collect()
    }

    fn stop(&self, alloc_id: &str) {
        let runners = self.0.runners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = runners.get(alloc_id) {
            r.stop();
        }
    }
}

/// Forgets the node events a registration delivered (the servers keep them now), without
/// waking the heartbeat loop.
fn events_delivered(shared: &Shared, sent: &Node) {
    let Some(sent_events) = sent.events.as_ref().filter(|e| !e.is_empty()) else {
        return;
    };
    shared.node.send_if_modified(|node| {
        let mut n = (**node).clone();
        if let Some(events) = n.events.as_mut() {
            events.retain(|e| !sent_events.contains(e));
        }
        n.events = n.events.filter(|e| !e.is_empty());
        *node = Arc::new(n);
        false
    });
}

/// Registers the node, then heartbeats at half the TTL; re-registers when the servers forgot it
/// and whenever the node changes (Nomad's node update: registration again).
pub(super) async fn register_and_heartbeat<S: ServerConn>(
    server: Arc<S>,
    shared: Arc<Shared>,
    clock: Arc<HeartbeatClock>,
    mut shutdown: watch::Receiver<bool>,
) {
    let heard = |clock: &Arc<HeartbeatClock>| {
        let clock = clock.clone();
        // The state write blocks; the time is the answer's arrival.
        let now = SystemTime::now();
        tokio::task::spawn_blocking(move || clock.heartbeat_ok(now))
    };
    let mut node = shared.node.subscribe();
    let current = |node: &mut watch::Receiver<Arc<Node>>| (**node.borrow_and_update()).clone();
    let mut ttl = loop {
        let sent = current(&mut node);
        match server.register_node(sent.clone()).await {
            Ok(ttl) => {
                heard(&clock);
                events_delivered(&shared, &sent);
                break ttl;
            }
            Err(e) => {
                tracing::warn!(error = %e, "registering node; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
    };
    let node_id = node.borrow().id.clone();
    tracing::info!(node = %node_id, "node registered");
    let stops = RunnerStops(shared.clone());
    let mut last_attempt = std::time::Instant::now();
    loop {
        // Half the TTL, and often enough that no allocation's stop_after_client_disconnect
        // runs out between two heartbeats that succeed.
        let due = heartbeat_interval(ttl, stops.watched().values().min().copied());
        let changed = tokio::select! {
            _ = tokio::time::sleep(HEARTBEAT_TICK) => {
                if last_attempt.elapsed() < due {
                    continue;
                }
                false
            }
            c = node.changed() => c.is_ok(),
            _ = shutdown.changed() => return,
        };
        last_attempt = std::time::Instant::now();
        if changed {
            let sent = current(&mut node);
            match server.register_node(sent.clone()).await {
                Ok(t) => {
                    ttl = t;
                    heard(&clock);
                    events_delivered(&shared, &sent);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "updating the node; will retry");
                    // Try again at the next turn.
                    node.mark_changed();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            continue;
        }
        match server.heartbeat(&node_id).await {
            Ok(t) => {
                ttl = t;
                heard(&clock);
            }
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat failed; re-registering");
                if let Ok(t) = server.register_node(current(&mut node)).await {
                    ttl = t;
                    heard(&clock);
                } else {
                    ttl = Duration::from_secs(2);
                }
            }
        }
    }
}

/// How often the heartbeat loop looks whether a heartbeat is due.
const HEARTBEAT_TICK: Duration = Duration::from_millis(250);

/// When the next heartbeat is due after a successful one: half the TTL the servers gave, but
/// at most a third of the shortest `stop_after_client_disconnect` of what runs here (a grace
/// shorter than the gap between heartbeats would stop allocations of a connected client).
fn heartbeat_interval(ttl: Duration, shortest_grace: Option<Duration>) -> Duration {
    let half = ttl / 2;
    match shortest_grace {
        Some(grace) => half.min(grace / 3).max(HEARTBEAT_TICK),
        None => half,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_come_often_enough_for_the_shortest_stop_after_client_disconnect() {
        let ttl = Duration::from_secs(20);
        assert_eq!(heartbeat_interval(ttl, None), Duration::from_secs(10));
        assert_eq!(
            heartbeat_interval(ttl, Some(Duration::from_secs(9))),
            Duration::from_secs(3)
        );
        assert_eq!(
            heartbeat_interval(ttl, Some(Duration::from_secs(60))),
            Duration::from_secs(10)
        );
        assert_eq!(
            heartbeat_interval(ttl, Some(Duration::from_millis(1))),
            HEARTBEAT_TICK
        );
    }
}
