//! The restart tracker: decides, after a task exits or fails to start, whether it restarts and
//! after what delay, following the task's `restart` policy exactly as Nomad's client does.

use std::time::{Duration, Instant};

use drover_abi::ExitResult;
use drover_structs::{RESTART_MODE_FAIL, RestartPolicy};

pub const REASON_NO_RESTARTS_ALLOWED: &str = "Policy allows no restarts";
pub const REASON_UNRECOVERABLE: &str = "Error was unrecoverable";
pub const REASON_WITHIN_POLICY: &str = "Restart within policy";
pub const REASON_DELAY: &str = "Exceeded allowed attempts, applying a delay";
pub const REASON_SUCCESS: &str = "Restart unnecessary as task terminated successfully";

/// What to do with a task that stopped running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after the delay.
    Restart(Duration),
    /// Leave it dead, successfully.
    Terminated,
    /// Leave it dead, failed.
    NotRestarting,
}

#[derive(Debug)]
pub struct RestartTracker {
    policy: RestartPolicy,
    /// Batch tasks that exit 0 are done; service tasks are restarted even then.
    restart_on_success: bool,
    count: i64,
    interval_start: Instant,
    reason: String,
    jitter_seed: u64,
}

impl RestartTracker {
    pub fn new(policy: RestartPolicy, batch: bool) -> Self {
        RestartTracker {
            policy,
            restart_on_success: !batch,
            count: 0,
            interval_start: Instant::now(),
            reason: String::new(),
            jitter_seed: std::process::id() as u64 ^ drover_structs::time::now_nanos() as u64,
        }
    }

    /// Why the last decision was taken, in Nomad's words.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// After the task exited.
    pub fn on_exit(&mut self, exit: &ExitResult) -> Decision {
        if self.policy.attempts == 0 {
            if !self.restart_on_success && exit.successful() {
                self.reason = REASON_SUCCESS.into();
                return Decision::Terminated;
            }
            self.reason = REASON_NO_RESTARTS_ALLOWED.into();
            return Decision::NotRestarting;
        }
        self.roll_interval();
        self.count += 1;
        if exit.successful() && !self.restart_on_success {
            self.reason = REASON_SUCCESS.into();
            return Decision::Terminated;
        }
        self.over_attempts().unwrap_or_else(|| {
            self.reason = REASON_WITHIN_POLICY.into();
            Decision::Restart(self.jittered_delay())
        })
    }

    /// After the task was stopped because a check stayed unhealthy (Nomad's check watcher
    /// restarts with `failure = true`): an attempt, as a failed exit is.
    pub fn on_failure(&mut self) -> Decision {
        // The same count and limits as a recoverable start failure.
        self.on_start_error(true)
    }

    /// After the driver failed to start the task.
    pub fn on_start_error(&mut self, recoverable: bool) -> Decision {
        if self.policy.attempts == 0 {
            self.reason = REASON_NO_RESTARTS_ALLOWED.into();
            return Decision::NotRestarting;
        }
        self.roll_interval();
        self.count += 1;
        if !recoverable {
            self.reason = REASON_UNRECOVERABLE.into();
            return Decision::NotRestarting;
        }
        self.over_attempts().unwrap_or_else(|| {
            self.reason = REASON_WITHIN_POLICY.into();
            Decision::Restart(self.jittered_delay())
        })
    }

    fn roll_interval(&mut self) {
        let interval = Duration::from_nanos(self.policy.interval.max(0) as u64);
        if Instant::now() > self.interval_start + interval {
            self.count = 0;
            self.interval_start = Instant::now();
        }
    }

    fn over_attempts(&mut self) -> Option<Decision> {
        if self.count <= self.policy.attempts {
            return None;
        }
        if self.policy.mode == RESTART_MODE_FAIL {
            self.reason = format!(
                "Exceeded allowed attempts {} in interval {} and mode is \"fail\"",
                self.policy.attempts,
                drover_structs::format_go_duration_secs(self.policy.interval as f64 / 1e9)
            );
            return Some(Decision::NotRestarting);
        }
        self.reason = REASON_DELAY.into();
        let interval = Duration::from_nanos(self.policy.interval.max(0) as u64);
        let end = self.interval_start + interval;
        Some(Decision::Restart(
            end.saturating_duration_since(Instant::now()),
        ))
    }

    /// The policy's delay plus up to 25% jitter, as Nomad adds.
    fn jittered_delay(&mut self) -> Duration {
        let d = self.policy.delay.max(0) as u64;
        // xorshift: enough randomness to spread restarts, no dependency needed.
        self.jitter_seed ^= self.jitter_seed << 13;
        self.jitter_seed ^= self.jitter_seed >> 7;
        self.jitter_seed ^= self.jitter_seed << 17;
        let j = if d == 0 {
            0
        } else {
            self.jitter_seed % d.max(1) / 4
        };
        Duration::from_nanos(d + j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(attempts: i64, mode: &str) -> RestartPolicy {
        RestartPolicy {
            attempts,
            interval: 60_000_000_000,
            delay: 1_000_000_000,
            mode: mode.into(),
        }
    }

    fn fail() -> ExitResult {
        ExitResult {
            exit_code: 1,
            ..Default::default()
        }
    }

    #[test]
    fn batch_success_terminates_service_success_restarts() {
        let mut b = RestartTracker::new(policy(2, "fail"), true);
        assert_eq!(b.on_exit(&ExitResult::default()), Decision::Terminated);
        let mut s = RestartTracker::new(policy(2, "fail"), false);
        assert!(matches!(
            s.on_exit(&ExitResult::default()),
            Decision::Restart(_)
        ));
    }

    #[test]
    fn fail_mode_stops_after_attempts_with_nomads_reason() {
        let mut t = RestartTracker::new(policy(2, "fail"), false);
        let d = t.on_exit(&fail());
        let Decision::Restart(delay) = d else {
            panic!("{d:?}")
        };
        assert!(delay >= Duration::from_secs(1) && delay <= Duration::from_millis(1250));
        assert!(matches!(t.on_exit(&fail()), Decision::Restart(_)));
        assert_eq!(t.on_exit(&fail()), Decision::NotRestarting);
        assert_eq!(
            t.reason(),
            "Exceeded allowed attempts 2 in interval 1m0s and mode is \"fail\""
        );
    }

    #[test]
    fn zero_attempts_never_restart_and_unrecoverable_start_errors_fail() {
        let mut t = RestartTracker::new(policy(0, "fail"), false);
        assert_eq!(t.on_exit(&fail()), Decision::NotRestarting);
        assert_eq!(t.reason(), REASON_NO_RESTARTS_ALLOWED);
        let mut t = RestartTracker::new(policy(3, "fail"), false);
        assert_eq!(t.on_start_error(false), Decision::NotRestarting);
        assert_eq!(t.reason(), REASON_UNRECOVERABLE);
    }

    #[test]
    fn delay_mode_waits_for_the_interval_to_end() {
        let mut t = RestartTracker::new(policy(1, "delay"), false);
        assert!(matches!(t.on_exit(&fail()), Decision::Restart(_)));
        let Decision::Restart(d) = t.on_exit(&fail()) else {
            panic!()
        };
        assert!(d > Duration::from_secs(50), "{d:?}");
        assert_eq!(t.reason(), REASON_DELAY);
    }
}
