//! Rescheduling failed allocations (Nomad's `ReschedulePolicy` semantics): whether a failed
//! allocation may be replaced, when (after its delay), and the reschedule history carried by
//! the replacement.

use drover_structs::{Allocation, Job, ReschedulePolicy};
use serde_json::{Value, json};

/// How many past reschedule events an unlimited policy keeps on the replacement.
const MAX_PAST_RESCHEDULE_EVENTS: usize = 5;

/// One entry of an allocation's `RescheduleTracker.Events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RescheduleEvent {
    /// Unix nanoseconds.
    pub time: i64,
    pub prev_alloc_id: String,
    pub prev_node_id: String,
    /// Nanoseconds.
    pub delay: i64,
}

/// The events recorded on an allocation (its `RescheduleTracker` is kept as Nomad's JSON).
pub(crate) fn tracker_events(alloc: &Allocation) -> Vec<RescheduleEvent> {
    alloc
        .reschedule_tracker
        .as_ref()
        .and_then(|t| t.get("Events"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| RescheduleEvent {
            time: e.get("RescheduleTime").and_then(Value::as_i64).unwrap_or(0),
            prev_alloc_id: str_field(e, "PrevAllocID"),
            prev_node_id: str_field(e, "PrevNodeID"),
            delay: e.get("Delay").and_then(Value::as_i64).unwrap_or(0),
        })
        .collect()
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn tracker_json(events: &[RescheduleEvent]) -> Value {
    let events: Vec<Value> = events
        .iter()
        .map(|e| {
            json!({
                "RescheduleTime": e.time,
                "PrevAllocID": e.prev_alloc_id,
                "PrevNodeID": e.prev_node_id,
                "Delay": e.delay,
            })
        })
        .collect();
    json!({ "Events": events })
}

/// The reschedule policy of the allocation's group, in the job version it runs.
pub(crate) fn policy<'a>(
    alloc: &'a Allocation,
    current: Option<&'a Job>,
) -> Option<&'a ReschedulePolicy> {
    alloc
        .job
        .as_deref()
        .or(current)?
        .lookup_task_group(&alloc.task_group)?
        .reschedule_policy
        .as_ref()
}

/// When the allocation failed: the latest `FinishedAt` of its tasks, else its modify time.
pub(crate) fn last_event_time(alloc: &Allocation) -> i64 {
    alloc
        .task_states
        .iter()
        .flat_map(|m| m.values())
        .filter_map(|s| s.finished_at.as_deref())
        .filter_map(drover_structs::time::parse_rfc3339_nanos)
        .max()
        .unwrap_or(alloc.modify_time)
}

/// The delay before the next reschedule, grown by the policy's delay function.
pub(crate) fn next_delay(alloc: &Allocation, policy: &ReschedulePolicy) -> i64 {
    let events = tracker_events(alloc);
    let Some(last) = events.last() else {
        return policy.delay;
    };
    let mut delay = match policy.delay_function.as_str() {
        "exponential" => last.delay.saturating_mul(2),
        "fibonacci" => match events.len() {
            n if n >= 2 => {
                let (n1, n2) = (last.delay, events[n - 2].delay);
                // A delay that was reset after reaching the ceiling starts a new series.
                if n2 == policy.max_delay && n1 == policy.delay {
                    n1
                } else {
                    n1.saturating_add(n2)
                }
            }
            _ => policy.delay,
        },
        _ => return policy.delay,
    };
    if policy.max_delay > 0 && delay > policy.max_delay {
        delay = policy.max_delay;
        // Long enough since the last reschedule: start over from the base delay.
        if last_event_time(alloc).saturating_sub(last.time) > delay {
            delay = policy.delay;
        }
    }
    delay
}

/// Nomad's `NextRescheduleTime`: when the failed allocation may be replaced and whether it may
/// be at all (attempts left within the interval, or an unlimited policy).
pub(crate) fn next_reschedule_time(
    alloc: &Allocation,
    policy: Option<&ReschedulePolicy>,
) -> (i64, bool) {
    let fail_time = last_event_time(alloc);
    let Some(policy) = policy else {
        return (0, false);
    };
    if alloc.server_terminal()
        || alloc.client_status != drover_structs::ALLOC_CLIENT_FAILED
        || fail_time == 0
    {
        return (0, false);
    }
    next_reschedule_time_by_time(alloc, policy, fail_time)
}

/// Nomad's `NextRescheduleTimeByTime`: as `next_reschedule_time`, counting from `fail_time`
/// whatever the allocation's status (a disconnect is a failure at the time it is noticed).
pub(crate) fn next_reschedule_time_by_time(
    alloc: &Allocation,
    policy: &ReschedulePolicy,
    fail_time: i64,
) -> (i64, bool) {
    let delay = next_delay(alloc, policy);
    let at = fail_time.saturating_add(delay);
    let events = tracker_events(alloc);
    let mut eligible = policy.unlimited || (policy.attempts > 0 && events.is_empty());
    if policy.attempts > 0 && !events.is_empty() {
        let attempted = events
            .iter()
            .filter(|e| fail_time.saturating_sub(e.time) < policy.interval)
            .count() as i64;
        eligible = attempted < policy.attempts && delay < policy.interval;
    }
    (at, eligible)
}

/// The tracker for `prev`'s replacement: the relevant past events plus this reschedule.
pub(crate) fn next_tracker(
    prev: &Allocation,
    policy: Option<&ReschedulePolicy>,
    now: i64,
) -> Value {
    let past = tracker_events(prev);
    let mut events: Vec<RescheduleEvent> = match policy {
        Some(p) if p.attempts > 0 => past
            .into_iter()
            .filter(|e| p.interval > 0 && now.saturating_sub(e.time) <= p.interval)
            .collect(),
        _ => {
            let skip = past.len().saturating_sub(MAX_PAST_RESCHEDULE_EVENTS);
            past.into_iter().skip(skip).collect()
        }
    };
    events.push(RescheduleEvent {
        time: now,
        prev_alloc_id: prev.id.clone(),
        prev_node_id: prev.node_id.clone(),
        delay: policy.map(|p| next_delay(prev, p)).unwrap_or(0),
    });
    tracker_json(&events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::ALLOC_CLIENT_FAILED;

    const SEC: i64 = 1_000_000_000;

    fn failed(at: i64, events: &[(i64, i64)]) -> Allocation {
        let ev: Vec<RescheduleEvent> = events
            .iter()
            .map(|(t, d)| RescheduleEvent {
                time: *t,
                prev_alloc_id: "p".into(),
                prev_node_id: "n0".into(),
                delay: *d,
            })
            .collect();
        Allocation {
            id: "a".into(),
            node_id: "n1".into(),
            client_status: ALLOC_CLIENT_FAILED.into(),
            modify_time: at,
            reschedule_tracker: (!ev.is_empty()).then(|| Box::new(tracker_json(&ev))),
            ..Default::default()
        }
    }

    fn policy(
        attempts: i64,
        interval: i64,
        delay: i64,
        func: &str,
        unlimited: bool,
    ) -> ReschedulePolicy {
        ReschedulePolicy {
            attempts,
            interval,
            delay,
            delay_function: func.into(),
            max_delay: 60 * SEC,
            unlimited,
        }
    }

    #[test]
    fn attempts_are_counted_within_the_interval() {
        let p = policy(2, 3600 * SEC, 5 * SEC, "constant", false);
        let t = 10_000 * SEC;
        assert_eq!(
            next_reschedule_time(&failed(t, &[]), Some(&p)),
            (t + 5 * SEC, true)
        );
        let once = failed(t, &[(t - 100 * SEC, 5 * SEC)]);
        assert!(next_reschedule_time(&once, Some(&p)).1);
        let twice = failed(t, &[(t - 100 * SEC, 5 * SEC), (t - 50 * SEC, 5 * SEC)]);
        assert!(!next_reschedule_time(&twice, Some(&p)).1);
        let long_ago = failed(t, &[(t - 7200 * SEC, 5 * SEC), (t - 50 * SEC, 5 * SEC)]);
        assert!(next_reschedule_time(&long_ago, Some(&p)).1);
    }

    #[test]
    fn unlimited_policies_grow_the_delay_up_to_the_ceiling() {
        let p = policy(0, 0, 5 * SEC, "exponential", true);
        let t = 10_000 * SEC;
        let a = failed(t, &[(t - SEC, 20 * SEC)]);
        assert_eq!(next_reschedule_time(&a, Some(&p)), (t + 40 * SEC, true));
        let b = failed(t, &[(t - SEC, 40 * SEC)]);
        assert_eq!(next_delay(&b, &p), 60 * SEC);
        let fib = policy(0, 0, 5 * SEC, "fibonacci", true);
        let c = failed(t, &[(t - 3 * SEC, 5 * SEC), (t - SEC, 10 * SEC)]);
        assert_eq!(next_delay(&c, &fib), 15 * SEC);
    }

    #[test]
    fn only_failed_allocations_reschedule() {
        let p = policy(1, 3600 * SEC, 5 * SEC, "constant", false);
        let mut a = failed(100 * SEC, &[]);
        a.client_status = "complete".into();
        assert!(!next_reschedule_time(&a, Some(&p)).1);
        assert!(!next_reschedule_time(&failed(100 * SEC, &[]), None).1);
    }

    #[test]
    fn the_replacement_tracker_appends_this_reschedule() {
        let p = policy(0, 0, 5 * SEC, "constant", true);
        let prev = failed(100 * SEC, &[(10 * SEC, 5 * SEC)]);
        let tracker = next_tracker(&prev, Some(&p), 200 * SEC);
        let next = Allocation {
            reschedule_tracker: Some(Box::new(tracker)),
            ..Default::default()
        };
        let events = tracker_events(&next);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].prev_alloc_id, "a");
        assert_eq!(events[1].prev_node_id, "n1");
        assert_eq!(events[1].time, 200 * SEC);
    }

    #[test]
    fn delay_functions_table() {
        struct Case {
            name: &'static str,
            func: &'static str,
            max_delay: i64,
            /// Delays of the past reschedules, oldest first, each `SEC` apart ending at `t - SEC`.
            past: Vec<i64>,
            /// How long after the last reschedule the allocation failed.
            failed_after: i64,
            want: i64,
        }
        let cases = vec![
            Case {
                name: "constant: always the base delay",
                func: "constant",
                max_delay: 0,
                past: vec![5, 5, 5],
                failed_after: 1,
                want: 5,
            },
            Case {
                name: "first reschedule: the base delay whatever the function",
                func: "exponential",
                max_delay: 60,
                past: vec![],
                failed_after: 1,
                want: 5,
            },
            Case {
                name: "exponential doubles the last delay",
                func: "exponential",
                max_delay: 600,
                past: vec![5, 10, 20],
                failed_after: 1,
                want: 40,
            },
            Case {
                name: "exponential stops at max_delay",
                func: "exponential",
                max_delay: 30,
                past: vec![5, 10, 20],
                failed_after: 1,
                want: 30,
            },
            Case {
                name: "past max_delay and failed long after the last reschedule: start over",
                func: "exponential",
                max_delay: 30,
                past: vec![5, 10, 20],
                failed_after: 31,
                want: 5,
            },
            Case {
                name: "fibonacci: one past delay gives the base delay",
                func: "fibonacci",
                max_delay: 600,
                past: vec![5],
                failed_after: 1,
                want: 5,
            },
            Case {
                name: "fibonacci adds the last two delays",
                func: "fibonacci",
                max_delay: 600,
                past: vec![5, 5, 10, 15],
                failed_after: 1,
                want: 25,
            },
            Case {
                name: "fibonacci stops at max_delay",
                func: "fibonacci",
                max_delay: 20,
                past: vec![5, 5, 10, 15],
                failed_after: 1,
                want: 20,
            },
            Case {
                name: "fibonacci starts a new series after a reset from the ceiling",
                func: "fibonacci",
                max_delay: 20,
                past: vec![10, 20, 5],
                failed_after: 1,
                want: 5,
            },
        ];
        for c in cases {
            let t = 100_000 * SEC;
            let n = c.past.len() as i64;
            let events: Vec<(i64, i64)> = c
                .past
                .iter()
                .enumerate()
                .map(|(i, d)| (t - (n - i as i64) * SEC * 100, d * SEC))
                .collect();
            let last = events.last().map(|(at, _)| *at).unwrap_or(t);
            let a = failed(last + c.failed_after * SEC, &events);
            let mut p = policy(0, 0, 5 * SEC, c.func, true);
            p.max_delay = c.max_delay * SEC;
            assert_eq!(next_delay(&a, &p), c.want * SEC, "{}", c.name);
            let (at, eligible) = next_reschedule_time(&a, Some(&p));
            assert!(eligible, "{}: unlimited policies always reschedule", c.name);
            assert_eq!(at, last + c.failed_after * SEC + c.want * SEC, "{}", c.name);
        }
    }

    #[test]
    fn attempts_within_the_interval_table() {
        // (attempts, interval s, past reschedules s before the failure, delay s, eligible)
        let cases: [(i64, i64, &[i64], i64, bool); 5] = [
            (1, 3600, &[], 5, true),
            (1, 3600, &[100], 5, false),
            (1, 3600, &[7200], 5, true),
            (3, 3600, &[100, 50], 5, true),
            // A delay as long as the interval leaves no room for the attempt.
            (3, 60, &[100], 60, false),
        ];
        for (attempts, interval, past, delay, want) in cases {
            let t = 100_000 * SEC;
            let events: Vec<(i64, i64)> = past
                .iter()
                .map(|ago| (t - ago * SEC, delay * SEC))
                .collect();
            let a = failed(t, &events);
            let p = policy(attempts, interval * SEC, delay * SEC, "constant", false);
            assert_eq!(
                next_reschedule_time(&a, Some(&p)).1,
                want,
                "attempts {attempts} interval {interval} past {past:?}"
            );
        }
    }
}
