//! The decisions an observer takes on each result, as pure state machines: the status a
//! check shows (Consul's `success_before_passing` / `failures_before_critical` thresholds over
//! the raw results) and when `check_restart` restarts the task (Nomad's check watcher).

use std::collections::BTreeMap;

use drover_structs::service_check::*;

/// The status a check shows after its raw results, with its pass/fail thresholds.
#[derive(Debug, Clone)]
pub(super) struct Thresholds {
    success_before_passing: i64,
    failures_before_critical: i64,
    successes: i64,
    failures: i64,
    shown: &'static str,
}

impl Thresholds {
    /// Before any run: the check's `initial_status` (Consul's names), pending without one.
    pub(super) fn new(check: &ServiceCheck) -> Thresholds {
        Thresholds {
            success_before_passing: check.success_before_passing,
            failures_before_critical: check.failures_before_critical,
            successes: 0,
            failures: 0,
            shown: initial_status(&check.initial_status),
        }
    }

    pub(super) fn shown(&self) -> &'static str {
        self.shown
    }

    /// The status shown after a run that found `raw` (success, warning or failure): a change
    /// towards passing waits for `success_before_passing` successes in a row, one towards
    /// failing for `failures_before_critical` failures in a row.
    pub(super) fn apply(&mut self, raw: &str) -> &'static str {
        match raw {
            CHECK_SUCCESS => {
                self.failures = 0;
                self.successes += 1;
                if self.successes >= self.success_before_passing {
                    self.shown = CHECK_SUCCESS;
                }
            }
            CHECK_WARNING => {
                self.successes = 0;
                self.failures = 0;
                self.shown = CHECK_WARNING;
            }
            _ => {
                self.successes = 0;
                self.failures += 1;
                if self.failures >= self.failures_before_critical {
                    self.shown = CHECK_FAILURE;
                }
            }
        }
        self.shown
    }
}

fn initial_status(consul: &str) -> &'static str {
    match consul {
        "passing" => CHECK_SUCCESS,
        "warning" => CHECK_WARNING,
        "critical" => CHECK_FAILURE,
        _ => CHECK_PENDING,
    }
}

/// Nomad's check watcher for one check with a `check_restart`: the task restarts once the
/// check has shown unhealthy (failure or pending, warning unless `ignore_warnings`) for
/// `limit` results in a row, counted after the `grace` that follows each start of the task.
/// Times are Unix nanoseconds.
#[derive(Debug, Clone)]
pub(super) struct Restarter {
    /// `interval * (limit - 1)`: how long unhealthy results may go on (0 for `limit = 1`).
    window: i64,
    grace: i64,
    ignore_warnings: bool,
    grace_until: i64,
    unhealthy_since: Option<i64>,
}

impl Restarter {
    pub(super) fn new(check: &ServiceCheck, policy: &CheckRestart, now: i64) -> Restarter {
        Restarter {
            window: check.interval.saturating_mul(policy.limit - 1),
            grace: policy.grace.max(0),
            ignore_warnings: policy.ignore_warnings,
            grace_until: now.saturating_add(policy.grace.max(0)),
            unhealthy_since: None,
        }
    }

    /// The task started (again): a new grace period, nothing counted yet.
    pub(super) fn task_started(&mut self, now: i64) {
        self.grace_until = now.saturating_add(self.grace);
        self.unhealthy_since = None;
    }

    /// Whether the task must restart after the check showed `status` at `now`. Once it says
    /// so it counts again from nothing (the restart's start brings a new grace period).
    pub(super) fn apply(&mut self, now: i64, status: &str) -> bool {
        let unhealthy = match status {
            CHECK_FAILURE | CHECK_PENDING => true,
            CHECK_WARNING => !self.ignore_warnings,
            _ => false,
        };
        if !unhealthy {
            self.unhealthy_since = None;
            return false;
        }
        if now < self.grace_until {
            return false;
        }
        let since = *self.unhealthy_since.get_or_insert(now);
        if now >= since.saturating_add(self.window) {
            self.unhealthy_since = None;
            return true;
        }
        false
    }
}

/// Whether a check showing `status` passes for a deployment: a success, or a warning when
/// the check's `on_update` is `ignore_warnings`.
fn passes(status: &str, on_update: &str) -> bool {
    status == CHECK_SUCCESS || (status == CHECK_WARNING && on_update == "ignore_warnings")
}

/// For `health_check = "checks"`: `None` when the allocation has no healthiness check (its
/// health is its tasks' alone), else whether every healthiness check passes now. `checks` are
/// the allocation's checks by id; a check with no result yet does not pass.
pub(crate) fn checks_health(
    checks: &[(String, GroupCheck)],
    results: &BTreeMap<String, CheckQueryResult>,
) -> Option<bool> {
    let mut any = false;
    let mut all = true;
    for (id, gc) in checks {
        if gc.check.mode() != CHECK_MODE_HEALTHINESS {
            continue;
        }
        any = true;
        let status = results.get(id).map_or(CHECK_PENDING, |r| r.status.as_str());
        all &= passes(status, &gc.check.on_update);
    }
    any.then_some(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = 1_000_000_000;

    fn check(success_before: i64, failures_before: i64) -> ServiceCheck {
        ServiceCheck {
            interval: 2 * SEC,
            success_before_passing: success_before,
            failures_before_critical: failures_before,
            ..Default::default()
        }
    }

    #[test]
    fn without_thresholds_each_result_shows_at_once() {
        let mut t = Thresholds::new(&check(0, 0));
        assert_eq!(t.shown(), CHECK_PENDING);
        assert_eq!(t.apply(CHECK_FAILURE), CHECK_FAILURE);
        assert_eq!(t.apply(CHECK_SUCCESS), CHECK_SUCCESS);
        assert_eq!(t.apply(CHECK_WARNING), CHECK_WARNING);
    }

    #[test]
    fn thresholds_hold_a_status_until_enough_results_in_a_row() {
        let mut t = Thresholds::new(&check(3, 2));
        assert_eq!(t.apply(CHECK_SUCCESS), CHECK_PENDING);
        assert_eq!(t.apply(CHECK_SUCCESS), CHECK_PENDING);
        assert_eq!(t.apply(CHECK_SUCCESS), CHECK_SUCCESS);
        assert_eq!(t.apply(CHECK_FAILURE), CHECK_SUCCESS);
        assert_eq!(t.apply(CHECK_SUCCESS), CHECK_SUCCESS);
        assert_eq!(t.apply(CHECK_FAILURE), CHECK_SUCCESS);
        assert_eq!(t.apply(CHECK_FAILURE), CHECK_FAILURE);
        // One success after failing does not pass yet.
        assert_eq!(t.apply(CHECK_SUCCESS), CHECK_FAILURE);
    }

    #[test]
    fn initial_status_uses_consuls_names() {
        let mut c = check(0, 0);
        c.initial_status = "passing".into();
        assert_eq!(Thresholds::new(&c).shown(), CHECK_SUCCESS);
        c.initial_status = "critical".into();
        assert_eq!(Thresholds::new(&c).shown(), CHECK_FAILURE);
    }

    fn policy(limit: i64, grace: i64, ignore_warnings: bool) -> CheckRestart {
        CheckRestart {
            limit,
            grace,
            ignore_warnings,
        }
    }

    #[test]
    fn a_restart_comes_after_limit_unhealthy_results_past_the_grace() {
        let c = check(0, 0);
        let mut r = Restarter::new(&c, &policy(3, 5 * SEC, false), 0);
        // Within the grace period nothing counts.
        assert!(!r.apply(2 * SEC, CHECK_FAILURE));
        assert!(!r.apply(4 * SEC, CHECK_FAILURE));
        // Then three results in a row, two seconds apart.
        assert!(!r.apply(6 * SEC, CHECK_FAILURE));
        assert!(!r.apply(8 * SEC, CHECK_FAILURE));
        assert!(r.apply(10 * SEC, CHECK_FAILURE));
    }

    #[test]
    fn a_healthy_result_starts_the_count_over() {
        let c = check(0, 0);
        let mut r = Restarter::new(&c, &policy(2, 0, false), 0);
        assert!(!r.apply(2 * SEC, CHECK_FAILURE));
        assert!(!r.apply(4 * SEC, CHECK_SUCCESS));
        assert!(!r.apply(6 * SEC, CHECK_FAILURE));
        assert!(r.apply(8 * SEC, CHECK_FAILURE));
    }

    #[test]
    fn limit_one_restarts_on_the_first_unhealthy_result_and_warnings_may_be_ignored() {
        let c = check(0, 0);
        let mut r = Restarter::new(&c, &policy(1, 0, true), 0);
        assert!(!r.apply(SEC, CHECK_WARNING));
        assert!(r.apply(2 * SEC, CHECK_FAILURE));
        let mut strict = Restarter::new(&c, &policy(1, 0, false), 0);
        assert!(strict.apply(SEC, CHECK_WARNING));
    }

    #[test]
    fn a_task_start_brings_a_new_grace_period() {
        let c = check(0, 0);
        let mut r = Restarter::new(&c, &policy(1, 3 * SEC, false), 0);
        assert!(r.apply(4 * SEC, CHECK_FAILURE));
        r.task_started(10 * SEC);
        assert!(!r.apply(12 * SEC, CHECK_FAILURE));
        assert!(r.apply(14 * SEC, CHECK_FAILURE));
    }

    fn group_check(on_update: &str) -> GroupCheck {
        GroupCheck {
            service: "api".into(),
            service_port_label: "http".into(),
            service_address: String::new(),
            task: String::new(),
            task_service: false,
            check: ServiceCheck {
                on_update: on_update.into(),
                ..Default::default()
            },
        }
    }

    fn result(status: &str) -> CheckQueryResult {
        CheckQueryResult {
            status: status.into(),
            ..Default::default()
        }
    }

    #[test]
    fn deployment_health_needs_every_healthiness_check_passing() {
        let checks = vec![
            ("a".to_string(), group_check("require_healthy")),
            ("b".to_string(), group_check("ignore")),
            ("c".to_string(), group_check("ignore_warnings")),
        ];
        let mut results = BTreeMap::new();
        assert_eq!(checks_health(&checks, &results), Some(false));
        results.insert("a".to_string(), result(CHECK_SUCCESS));
        results.insert("b".to_string(), result(CHECK_FAILURE));
        results.insert("c".to_string(), result(CHECK_WARNING));
        assert_eq!(checks_health(&checks, &results), Some(true));
        results.insert("c".to_string(), result(CHECK_FAILURE));
        assert_eq!(checks_health(&checks, &results), Some(false));
        assert_eq!(checks_health(&checks[1..2], &results), None);
    }
}
