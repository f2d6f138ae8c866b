//! Node heartbeats: each node must heartbeat within its TTL, or the leader marks it down (or
//! disconnected, when its allocations' groups allow it) and creates evaluations for the jobs it
//! ran, so their allocations are replaced elsewhere.
//!
//! TTLs grow with the cluster as Nomad's heartbeater does: the TTL a node is given is
//! `max(min_heartbeat_ttl, nodes / max_heartbeats_per_second)` plus a random stagger of up to
//! as much again, and the server waits that plus `heartbeat_grace` before acting.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Default)]
pub(crate) struct HeartbeatTimers {
    deadlines: Mutex<HashMap<String, Instant>>,
}

impl HeartbeatTimers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.deadlines.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn reset(&self, node_id: &str, ttl: Duration) {
        self.lock()
            .insert(node_id.to_string(), Instant::now() + ttl);
    }

    /// Gives the node a timer only if it has none: a new leader's failover TTL must not
    /// stretch the timer of a node that already heartbeated to this leader.
    pub fn set_if_absent(&self, node_id: &str, ttl: Duration) {
        self.lock()
            .entry(node_id.to_string())
            .or_insert_with(|| Instant::now() + ttl);
    }

    /// Forgets a node's timer (a purged node has nothing left to miss).
    pub fn remove(&self, node_id: &str) {
        self.lock().remove(node_id);
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    /// When the node's timer expires.
    #[cfg(test)]
    pub fn deadline(&self, node_id: &str) -> Option<Instant> {
        self.lock().get(node_id).copied()
    }

    /// How many nodes have a timer.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Nomad's `resetHeartbeatTimer`: the TTL scaled to the number of nodes tracked, staggered
    /// at random, for the node to heartbeat within; the node's deadline is that plus `grace`.
    pub fn reset_scaled(
        &self,
        node_id: &str,
        min_ttl: Duration,
        max_per_second: f64,
        grace: Duration,
    ) -> Duration {
        let ttl = rate_scaled_interval(max_per_second, min_ttl, self.len());
        let ttl = ttl + random_stagger(ttl);
        self.reset(node_id, ttl + grace);
        ttl
    }

    /// Removes and returns the nodes whose deadline passed.
    pub fn take_expired(&self) -> Vec<String> {
        let now = Instant::now();
        let mut map = self.lock();
        let expired: Vec<String> = map
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            map.remove(id);
        }
        expired
    }
}

/// Nomad's `helper.RateScaledInterval`: the interval at which `n` nodes stay under `rate`
/// heartbeats a second, never below `min`.
pub(crate) fn rate_scaled_interval(rate: f64, min: Duration, n: usize) -> Duration {
    if rate <= 0.0 {
        return min;
    }
    let interval = Duration::from_secs_f64(n as f64 / rate);
    interval.max(min)
}

/// Nomad's `helper.RandomStagger`: a random duration below `intv`.
pub(crate) fn random_stagger(intv: Duration) -> Duration {
    let nanos = intv.as_nanos() as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    let r = uuid::Uuid::new_v4().as_u64_pair().0;
    Duration::from_nanos(r % nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_grow_with_the_node_count_past_the_rate_limit() {
        let min = Duration::from_secs(10);
        assert_eq!(rate_scaled_interval(50.0, min, 100), min);
        assert_eq!(
            rate_scaled_interval(50.0, min, 1000),
            Duration::from_secs(20)
        );
        assert_eq!(rate_scaled_interval(0.0, min, 1_000_000), min);
    }

    #[test]
    fn a_node_gets_its_ttl_plus_a_stagger_and_the_server_adds_the_grace() {
        let t = HeartbeatTimers::default();
        let (min, grace) = (Duration::from_secs(10), Duration::from_secs(5));
        for i in 0..20 {
            let ttl = t.reset_scaled(&format!("n{i}"), min, 50.0, grace);
            assert!(ttl >= min && ttl < 2 * min, "{ttl:?}");
            let deadline = t.lock()[&format!("n{i}")];
            let left = deadline - Instant::now();
            assert!(left > ttl && left <= ttl + grace, "{left:?} for {ttl:?}");
        }
        assert!(random_stagger(Duration::ZERO).is_zero());
    }

    #[test]
    fn expired_nodes_are_taken_once() {
        let t = HeartbeatTimers::default();
        t.reset("a", Duration::from_millis(0));
        t.reset("b", Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(t.take_expired(), vec!["a".to_string()]);
        assert!(t.take_expired().is_empty());
    }

    #[test]
    fn a_failover_ttl_does_not_stretch_a_timer_already_set() {
        let t = HeartbeatTimers::default();
        t.reset("a", Duration::from_millis(100));
        let before = t.deadline("a").unwrap();
        t.set_if_absent("a", Duration::from_secs(300));
        t.set_if_absent("b", Duration::from_secs(300));
        assert_eq!(t.deadline("a"), Some(before));
        assert!(t.deadline("b").unwrap() > before + Duration::from_secs(200));
    }
}
