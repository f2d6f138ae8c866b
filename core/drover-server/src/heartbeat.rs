//! Node heartbeats: each node must heartbeat within its TTL, or the leader marks it down and
//! creates evaluations for the jobs it ran, so their allocations are replaced elsewhere.

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

    pub fn clear(&self) {
        self.lock().clear();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_nodes_are_taken_once() {
        let t = HeartbeatTimers::default();
        t.reset("a", Duration::from_millis(0));
        t.reset("b", Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(t.take_expired(), vec!["a".to_string()]);
        assert!(t.take_expired().is_empty());
    }
}
