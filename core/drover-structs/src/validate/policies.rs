//! Nomad 1.1's rules for the policy blocks: restart, reschedule (with its delay arithmetic),
//! update, migrate, ephemeral disk, logs, periodic and parameterized.

use serde_json::Value;

use super::gofmt::{duration, quote, quoted_list, string_list};
use super::json::{bool_of, str_of, strs};
use crate::cron;
use crate::job::*;
use crate::multierror::MultiError;

const SEC: i64 = 1_000_000_000;
const RESTART_MIN_INTERVAL: i64 = 5 * SEC;
const RESCHEDULE_MIN_INTERVAL: i64 = 15 * SEC;
const RESCHEDULE_MIN_DELAY: i64 = 5 * SEC;
const DELAY_FUNCTIONS: [&str; 3] = ["constant", "exponential", "fibonacci"];

/// Nomad's `RestartPolicy.Validate`.
pub(crate) fn validate_restart(r: &RestartPolicy) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    match r.mode.as_str() {
        RESTART_MODE_DELAY | RESTART_MODE_FAIL => {}
        other => m.push(format!("Unsupported restart mode: {}", quote(other))),
    }
    if r.attempts == 0 && r.mode != RESTART_MODE_FAIL {
        m.push(format!(
            "Restart policy {} with {} attempts is ambiguous",
            quote(&r.mode),
            r.attempts
        ));
    }
    if r.interval < RESTART_MIN_INTERVAL {
        m.push(format!(
            "Interval can not be less than {} (got {})",
            duration(RESTART_MIN_INTERVAL),
            duration(r.interval)
        ));
    }
    if r.attempts.saturating_mul(r.delay) > r.interval {
        m.push(format!(
            "Nomad can't restart the TaskGroup {} times in an interval of {} with a delay of {}",
            r.attempts,
            duration(r.interval),
            duration(r.delay)
        ));
    }
    m.into_result()
}

/// Nomad's `ReschedulePolicy.Validate`: nothing to check unless rescheduling is enabled.
pub(crate) fn validate_reschedule(r: &ReschedulePolicy) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if !(r.attempts > 0 || r.unlimited) {
        return Ok(());
    }
    if r.attempts > 0 {
        if r.interval <= 0 {
            m.push("Interval must be a non zero value if Attempts > 0");
        }
        if r.unlimited {
            m.push(format!(
                "Reschedule Policy with Attempts = {}, Interval = {}, and Unlimited = {} is ambiguous",
                r.attempts,
                duration(r.interval),
                r.unlimited
            ));
            m.push("If Attempts >0, Unlimited cannot also be set to true");
        }
    }
    let mut delay_pre_check = true;
    if r.delay < RESCHEDULE_MIN_DELAY {
        m.push(format!(
            "Delay cannot be less than {} (got {})",
            duration(RESCHEDULE_MIN_DELAY),
            duration(r.delay)
        ));
        delay_pre_check = false;
    }
    if !DELAY_FUNCTIONS.contains(&r.delay_function.as_str()) {
        m.push(format!(
            "Invalid delay function {}, must be one of {}",
            quote(&r.delay_function),
            quoted_list(&DELAY_FUNCTIONS)
        ));
        delay_pre_check = false;
    }
    if r.delay_function != "constant" {
        if r.max_delay < RESCHEDULE_MIN_DELAY {
            // Nomad prints the delay here, not the max delay.
            m.push(format!(
                "Max Delay cannot be less than {} (got {})",
                duration(RESCHEDULE_MIN_DELAY),
                duration(r.delay)
            ));
            delay_pre_check = false;
        }
        if r.max_delay < r.delay {
            m.push(format!(
                "Max Delay cannot be less than Delay {} (got {})",
                duration(r.delay),
                duration(r.max_delay)
            ));
            delay_pre_check = false;
        }
    }
    if !r.unlimited {
        if r.interval < RESCHEDULE_MIN_INTERVAL {
            m.push(format!(
                "Interval cannot be less than {} (got {})",
                duration(RESCHEDULE_MIN_INTERVAL),
                duration(r.interval)
            ));
        }
        if delay_pre_check {
            // multierror.Append flattens the cross-check's errors into this list.
            if let Some(errors) = delay_params_errors(r) {
                m.errors.extend(errors);
            }
        }
    }
    m.into_result()
}

/// Nomad's `validateDelayParams`: whether `attempts` reschedules fit in the interval.
fn delay_params_errors(r: &ReschedulePolicy) -> Option<Vec<String>> {
    let (ok, possible, recommended) = viable_attempts(r);
    if ok {
        return None;
    }
    let first = if r.delay_function == "constant" {
        format!(
            "Nomad can only make {possible} attempts in {} with initial delay {} and delay function {}",
            duration(r.interval),
            duration(r.delay),
            quote(&r.delay_function)
        )
    } else {
        format!(
            "Nomad can only make {possible} attempts in {} with initial delay {}, delay function {}, and delay ceiling {}",
            duration(r.interval),
            duration(r.delay),
            quote(&r.delay_function),
            duration(r.max_delay)
        )
    };
    // time.Duration.Round(time.Second): halves away from zero.
    let rounded = (recommended + SEC / 2).div_euclid(SEC) * SEC;
    Some(vec![
        first,
        format!(
            "Set the interval to at least {} to accommodate {} attempts",
            duration(rounded),
            r.attempts
        ),
    ])
}

/// Nomad's `viableAttempts`: (fits, attempts that fit, interval that would fit them all).
fn viable_attempts(r: &ReschedulePolicy) -> (bool, i64, i64) {
    let mut possible = 0i64;
    let mut recommended = 0i64;
    let mut valid = true;
    match r.delay_function.as_str() {
        "constant" => {
            recommended = r.attempts.saturating_mul(r.delay);
            if r.interval < recommended {
                possible = if r.delay > 0 { r.interval / r.delay } else { 0 };
                valid = false;
            }
        }
        "exponential" => {
            // Past 2^62 the delay is capped by MaxDelay anyway; bounding the loop keeps a
            // huge attempt count from spinning.
            for i in 0..r.attempts.min(10_000) {
                let factor = if i < 62 { 1i64 << i } else { i64::MAX };
                let mut next = factor.saturating_mul(r.delay);
                if next > r.max_delay {
                    next = r.max_delay;
                    recommended = recommended.saturating_add(next);
                } else {
                    recommended = next;
                }
                if recommended < r.interval {
                    possible += 1;
                }
            }
            if possible < r.attempts {
                valid = false;
            }
        }
        "fibonacci" => {
            let mut slots = vec![r.delay, r.delay];
            let mut reached_ceiling = false;
            for i in 2..r.attempts.clamp(2, 10_000) as usize {
                let next = if reached_ceiling {
                    slots[i - 1].saturating_add(r.max_delay)
                } else {
                    let n = slots[i - 1].saturating_add(slots[i - 2]);
                    if n > r.max_delay {
                        reached_ceiling = true;
                        r.max_delay
                    } else {
                        n
                    }
                };
                slots.push(next);
            }
            recommended = slots.last().copied().unwrap_or(0);
            if r.interval < recommended {
                valid = false;
                if let Some(i) = slots.iter().position(|s| *s > r.interval) {
                    possible = i as i64;
                }
            }
        }
        _ => return (false, 0, 0),
    }
    (valid, possible.max(0), recommended)
}

/// Nomad's `UpdateStrategy.Validate`.
pub(crate) fn validate_update(u: &UpdateStrategy) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    match u.health_check.as_str() {
        "checks" | "task_states" | "manual" => {}
        other => m.push(format!("Invalid health check given: {}", quote(other))),
    }
    if u.max_parallel < 0 {
        m.push(format!(
            "Max parallel can not be less than zero: {} < 0",
            u.max_parallel
        ));
    }
    if u.canary < 0 {
        m.push(format!(
            "Canary count can not be less than zero: {} < 0",
            u.canary
        ));
    }
    if u.canary == 0 && u.auto_promote {
        m.push("Auto Promote requires a Canary count greater than zero");
    }
    if u.min_healthy_time < 0 {
        m.push(format!(
            "Minimum healthy time may not be less than zero: {}",
            duration(u.min_healthy_time)
        ));
    }
    if u.healthy_deadline <= 0 {
        m.push(format!(
            "Healthy deadline must be greater than zero: {}",
            duration(u.healthy_deadline)
        ));
    }
    if u.progress_deadline < 0 {
        m.push(format!(
            "Progress deadline must be zero or greater: {}",
            duration(u.progress_deadline)
        ));
    }
    if u.min_healthy_time >= u.healthy_deadline {
        m.push(format!(
            "Minimum healthy time must be less than healthy deadline: {} > {}",
            duration(u.min_healthy_time),
            duration(u.healthy_deadline)
        ));
    }
    if u.progress_deadline != 0 && u.healthy_deadline >= u.progress_deadline {
        m.push(format!(
            "Healthy deadline must be less than progress deadline: {} > {}",
            duration(u.healthy_deadline),
            duration(u.progress_deadline)
        ));
    }
    if u.stagger <= 0 {
        m.push(format!(
            "Stagger must be greater than zero: {}",
            duration(u.stagger)
        ));
    }
    m.into_result()
}

/// Nomad's `MigrateStrategy.Validate`.
pub(crate) fn validate_migrate(s: &MigrateStrategy) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if s.max_parallel < 0 {
        m.push(format!(
            "MaxParallel must be >= 0 but found {}",
            s.max_parallel
        ));
    }
    match s.health_check.as_str() {
        "checks" | "task_states" => {}
        "" => {
            if s.max_parallel > 0 {
                m.push("Missing HealthCheck");
            }
        }
        other => m.push(format!("Invalid HealthCheck: {}", quote(other))),
    }
    if s.min_healthy_time < 0 {
        m.push(format!(
            "MinHealthyTime is {} and must be >= 0",
            duration(s.min_healthy_time)
        ));
    }
    if s.healthy_deadline < 0 {
        m.push(format!(
            "HealthyDeadline is {} and must be >= 0",
            duration(s.healthy_deadline)
        ));
    }
    if s.min_healthy_time > s.healthy_deadline {
        m.push("MinHealthyTime must be less than HealthyDeadline");
    }
    m.into_result()
}

/// Nomad's `EphemeralDisk.Validate` (a single error, not a list).
pub(crate) fn validate_ephemeral_disk(d: &EphemeralDisk) -> Option<String> {
    (d.size_mb < 10).then(|| format!("minimum DiskMB value is 10; got {}", d.size_mb))
}

/// Nomad's `LogConfig.Validate`.
pub(crate) fn validate_log_config(l: &LogConfig) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if l.max_files < 1 {
        m.push(format!("minimum number of files is 1; got {}", l.max_files));
    }
    if l.max_file_size_mb < 1 {
        m.push(format!(
            "minimum file size is 1MB; got {}",
            l.max_file_size_mb
        ));
    }
    m.into_result()
}

/// Nomad's `PeriodicConfig.Validate` (only enabled configurations are checked).
pub(crate) fn validate_periodic(p: &Value) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if !bool_of(p, "Enabled") {
        return Ok(());
    }
    let spec = str_of(p, "Spec");
    // `crons = [...]` fills Specs instead of Spec.
    let specs = strs(p, "Specs");
    if spec.is_empty() && specs.is_empty() {
        m.push("Must specify a spec");
    }
    // Time zones are not checked: that needs the host's zone database, and this crate does no
    // IO. The periodic dispatcher reports an unknown zone when it loads the job.
    match str_of(p, "SpecType") {
        "cron" => {
            let all = (!spec.is_empty()).then_some(spec).into_iter().chain(specs);
            for spec in all {
                if let Err(e) = cron::CronExpr::parse(spec) {
                    m.push(format!("Invalid cron spec {}: {e}", quote(spec)));
                }
            }
        }
        "_internal_test" => {}
        other => m.push(format!(
            "Unknown periodic specification type {}",
            quote(other)
        )),
    }
    m.into_result()
}

/// Nomad's `ParameterizedJobConfig.Validate`.
pub(crate) fn validate_parameterized(p: &Value) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    match str_of(p, "Payload") {
        "optional" | "required" | "forbidden" => {}
        other => m.push(format!("Unknown payload requirement: {}", quote(other))),
    }
    let required = strs(p, "MetaRequired");
    let optional = strs(p, "MetaOptional");
    let mut both: Vec<&str> = required
        .iter()
        .copied()
        .filter(|k| optional.contains(k))
        .collect();
    both.sort_unstable();
    both.dedup();
    if !both.is_empty() {
        m.push(format!(
            "Required and optional meta keys should be disjoint. Following keys exist in both: {}",
            string_list(&both)
        ));
    }
    m.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(r: Result<(), MultiError>) -> Vec<String> {
        r.err().map(|e| e.errors).unwrap_or_default()
    }

    fn resched(attempts: i64, interval: i64, delay: i64, f: &str, max: i64) -> ReschedulePolicy {
        ReschedulePolicy {
            attempts,
            interval,
            delay,
            delay_function: f.into(),
            max_delay: max,
            unlimited: false,
        }
    }

    #[test]
    fn restart_policy_texts_match_nomad() {
        let r = RestartPolicy {
            attempts: 10,
            interval: 2 * SEC,
            delay: SEC,
            mode: "bogus".into(),
        };
        assert_eq!(
            errors(validate_restart(&r)),
            [
                "Unsupported restart mode: \"bogus\"",
                "Interval can not be less than 5s (got 2s)",
                "Nomad can't restart the TaskGroup 10 times in an interval of 2s with a delay of 1s"
            ]
        );
        let r = RestartPolicy {
            attempts: 0,
            interval: 60 * SEC,
            delay: SEC,
            mode: "delay".into(),
        };
        assert_eq!(
            errors(validate_restart(&r)),
            ["Restart policy \"delay\" with 0 attempts is ambiguous"]
        );
    }

    #[test]
    fn disabled_reschedule_policy_is_not_checked() {
        assert!(validate_reschedule(&resched(0, 0, 0, "", 0)).is_ok());
    }

    #[test]
    fn reschedule_delay_function_and_max_delay_rules() {
        assert_eq!(
            errors(validate_reschedule(&resched(
                1,
                3600 * SEC,
                SEC,
                "linear",
                0
            ))),
            [
                "Delay cannot be less than 5s (got 1s)",
                "Invalid delay function \"linear\", must be one of [\"constant\" \"exponential\" \"fibonacci\"]",
                "Max Delay cannot be less than 5s (got 1s)",
                "Max Delay cannot be less than Delay 1s (got 0s)"
            ]
        );
    }

    #[test]
    fn reschedule_attempts_must_fit_in_the_interval() {
        assert_eq!(
            errors(validate_reschedule(&resched(
                10,
                60 * SEC,
                10 * SEC,
                "constant",
                0
            ))),
            [
                "Nomad can only make 6 attempts in 1m0s with initial delay 10s and delay function \"constant\"",
                "Set the interval to at least 1m40s to accommodate 10 attempts"
            ]
        );
        assert_eq!(
            errors(validate_reschedule(&resched(
                5,
                60 * SEC,
                10 * SEC,
                "exponential",
                60 * SEC
            ))),
            [
                "Nomad can only make 3 attempts in 1m0s with initial delay 10s, delay function \"exponential\", and delay ceiling 1m0s",
                "Set the interval to at least 2m40s to accommodate 5 attempts"
            ]
        );
        assert!(
            validate_reschedule(&resched(3, 3600 * SEC, 10 * SEC, "fibonacci", 60 * SEC)).is_ok()
        );
    }

    #[test]
    fn reschedule_attempts_with_unlimited_is_ambiguous() {
        let mut r = resched(2, 0, 30 * SEC, "exponential", 3600 * SEC);
        r.unlimited = true;
        assert_eq!(
            errors(validate_reschedule(&r)),
            [
                "Interval must be a non zero value if Attempts > 0",
                "Reschedule Policy with Attempts = 2, Interval = 0s, and Unlimited = true is ambiguous",
                "If Attempts >0, Unlimited cannot also be set to true"
            ]
        );
    }

    #[test]
    fn huge_attempt_counts_do_not_spin() {
        let r = resched(i64::MAX, 3600 * SEC, 10 * SEC, "fibonacci", 60 * SEC);
        assert!(validate_reschedule(&r).is_err());
        let r = resched(i64::MAX, 3600 * SEC, 10 * SEC, "exponential", 60 * SEC);
        assert!(validate_reschedule(&r).is_err());
    }

    #[test]
    fn update_strategy_rules() {
        let u = UpdateStrategy {
            stagger: 0,
            max_parallel: -1,
            health_check: "nope".into(),
            min_healthy_time: 10 * SEC,
            healthy_deadline: 5 * SEC,
            progress_deadline: 2 * SEC,
            auto_revert: false,
            auto_promote: true,
            canary: 0,
        };
        assert_eq!(
            errors(validate_update(&u)),
            [
                "Invalid health check given: \"nope\"",
                "Max parallel can not be less than zero: -1 < 0",
                "Auto Promote requires a Canary count greater than zero",
                "Minimum healthy time must be less than healthy deadline: 10s > 5s",
                "Healthy deadline must be less than progress deadline: 5s > 2s",
                "Stagger must be greater than zero: 0s"
            ]
        );
    }

    #[test]
    fn migrate_strategy_rules() {
        let s = MigrateStrategy {
            max_parallel: 1,
            health_check: String::new(),
            min_healthy_time: 20 * SEC,
            healthy_deadline: 10 * SEC,
        };
        assert_eq!(
            errors(validate_migrate(&s)),
            [
                "Missing HealthCheck",
                "MinHealthyTime must be less than HealthyDeadline"
            ]
        );
        let s = MigrateStrategy {
            max_parallel: -1,
            health_check: "x".into(),
            min_healthy_time: -SEC,
            healthy_deadline: 0,
        };
        assert_eq!(
            errors(validate_migrate(&s)),
            [
                "MaxParallel must be >= 0 but found -1",
                "Invalid HealthCheck: \"x\"",
                "MinHealthyTime is -1s and must be >= 0"
            ]
        );
    }

    #[test]
    fn periodic_cron_spec_is_parsed() {
        let p = json!({"Enabled": true, "Spec": "*/5 * * * *", "SpecType": "cron"});
        assert!(validate_periodic(&p).is_ok());
        let p = json!({"Enabled": true, "Spec": "* *", "SpecType": "cron"});
        assert_eq!(
            errors(validate_periodic(&p)),
            ["Invalid cron spec \"* *\": missing field(s)"]
        );
        let p = json!({"Enabled": true, "Spec": "", "SpecType": "rrule"});
        assert_eq!(
            errors(validate_periodic(&p)),
            [
                "Must specify a spec",
                "Unknown periodic specification type \"rrule\""
            ]
        );
        let p = json!({"Enabled": false, "Spec": "junk", "SpecType": "cron"});
        assert!(validate_periodic(&p).is_ok());
        let p = json!({"Enabled": true, "Spec": "", "Specs": ["*/5 * * * *", "0 61 * * *"], "SpecType": "cron"});
        assert_eq!(
            errors(validate_periodic(&p)),
            ["Invalid cron spec \"0 61 * * *\": syntax error in hour field: '61'"]
        );
    }

    #[test]
    fn parameterized_payload_and_meta_rules() {
        let p = json!({"Payload": "sometimes", "MetaRequired": ["a", "b"], "MetaOptional": ["b"]});
        assert_eq!(
            errors(validate_parameterized(&p)),
            [
                "Unknown payload requirement: \"sometimes\"",
                "Required and optional meta keys should be disjoint. Following keys exist in both: [b]"
            ]
        );
    }

    #[test]
    fn small_disk_and_log_limits() {
        assert_eq!(
            validate_ephemeral_disk(&EphemeralDisk {
                size_mb: 5,
                ..Default::default()
            })
            .as_deref(),
            Some("minimum DiskMB value is 10; got 5")
        );
        assert_eq!(
            errors(validate_log_config(&LogConfig {
                max_files: 0,
                max_file_size_mb: 0
            })),
            [
                "minimum number of files is 1; got 0",
                "minimum file size is 1MB; got 0"
            ]
        );
    }
}
