//! What happens to a group's allocations when their client stops heartbeating: Nomad's
//! `disconnect` block (`DisconnectStrategy`), the older `max_client_disconnect`,
//! `stop_after_client_disconnect` and `prevent_reschedule_on_lost` group fields, and the
//! allocation's `AllocStates` history that the scheduler reads the disconnect times from.

use serde::{Deserialize, Serialize};

use crate::alloc::{ALLOC_CLIENT_UNKNOWN, Allocation};
use crate::job::{Job, TaskGroup};
use crate::multierror::MultiError;
use crate::time::{format_rfc3339_nanos, parse_rfc3339_nanos};

/// `disconnect.reconcile`: which allocation survives when a disconnected client comes back.
pub const RECONCILE_KEEP_ORIGINAL: &str = "keep_original";
pub const RECONCILE_KEEP_REPLACEMENT: &str = "keep_replacement";
pub const RECONCILE_BEST_SCORE: &str = "best_score";
pub const RECONCILE_LONGEST_RUNNING: &str = "longest_running";

/// `AllocState.Field` of client status transitions (Nomad's `AllocStateFieldClientStatus`).
pub const ALLOC_STATE_FIELD_CLIENT_STATUS: &str = "ClientStatus";

/// Nomad's `DefaultKillTimeout` (5 s), in nanoseconds: added to `stop_on_client_after`.
pub const DEFAULT_KILL_TIMEOUT: i64 = 5_000_000_000;

/// Nomad's `DisconnectStrategy` (durations in nanoseconds).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DisconnectStrategy {
    /// How long a disconnected node's allocations stay `unknown` before they are `lost`.
    #[serde(rename = "LostAfter")]
    pub lost_after: i64,
    /// Whether to place replacements while the node is disconnected (default true).
    #[serde(rename = "Replace")]
    pub replace: Option<bool>,
    /// `keep_original`, `keep_replacement`, `best_score` (default) or `longest_running`.
    #[serde(rename = "Reconcile")]
    pub reconcile: String,
    /// How long a disconnected client keeps running the allocations (client side); the
    /// servers delay the replacement of a lost allocation by as much.
    #[serde(rename = "StopOnClientAfter")]
    pub stop_on_client_after: Option<i64>,
}

impl DisconnectStrategy {
    /// Nomad's `DisconnectStrategy.Validate`, its errors in Nomad's words.
    pub fn validate(&self, job: &Job) -> Result<(), MultiError> {
        let mut m = MultiError::new();
        if let Some(stop) = self.stop_on_client_after {
            if stop < 0 {
                m.push("stop_after cannot be a negative duration");
            }
            if !matches!(
                job.job_type.as_str(),
                crate::job::JOB_TYPE_SERVICE | crate::job::JOB_TYPE_BATCH
            ) {
                m.push("stop_after can only be used with service or batch job types");
            }
        }
        if self.lost_after < 0 {
            m.push("lost_after cannot be a negative duration");
        }
        if self.stop_on_client_after.is_some() && self.lost_after != 0 {
            m.push("Disconnect cannot be configured with both lost_after and stop_after");
            return m.into_result();
        }
        match self.reconcile.as_str() {
            ""
            | RECONCILE_BEST_SCORE
            | RECONCILE_LONGEST_RUNNING
            | RECONCILE_KEEP_ORIGINAL
            | RECONCILE_KEEP_REPLACEMENT => {}
            other => m.push(format!("reconcile option is invalid: {other}")),
        }
        m.into_result()
    }
}

impl TaskGroup {
    /// Nomad's `GetDisconnectLostTimeout`: `max_client_disconnect`, else `disconnect.lost_after`;
    /// 0 when the group does not allow its node to disconnect.
    pub fn disconnect_lost_after(&self) -> i64 {
        if let Some(d) = self.max_client_disconnect {
            return d;
        }
        self.disconnect.as_ref().map(|d| d.lost_after).unwrap_or(0)
    }

    /// Nomad's `GetDisconnectStopTimeout`: `stop_after_client_disconnect`, else
    /// `disconnect.stop_on_client_after`.
    pub fn disconnect_stop_after(&self) -> Option<i64> {
        self.stop_after_client_disconnect.or_else(|| {
            self.disconnect
                .as_ref()
                .and_then(|d| d.stop_on_client_after)
        })
    }

    /// Nomad's `TaskGroup.Replace`: whether allocations of a disconnected (or down) node are
    /// replaced while it is away.
    pub fn disconnect_replace(&self) -> bool {
        if self.prevent_reschedule_on_lost {
            return false;
        }
        self.disconnect
            .as_ref()
            .and_then(|d| d.replace)
            .unwrap_or(true)
    }

    /// Nomad's `ReconcileStrategy`: `best_score` unless the group says otherwise.
    pub fn disconnect_reconcile(&self) -> &str {
        match self.disconnect.as_ref().map(|d| d.reconcile.as_str()) {
            Some(r) if !r.is_empty() => r,
            _ => RECONCILE_BEST_SCORE,
        }
    }
}

/// The disconnect part of Nomad's `TaskGroup.Validate`, pushed onto the job's errors.
pub(crate) fn validate_group_disconnect(m: &mut MultiError, job: &Job, tg: &TaskGroup) {
    if tg.max_client_disconnect.is_some() && tg.stop_after_client_disconnect.is_some() {
        m.push(
            "Task group cannot be configured with both max_client_disconnect and stop_after_client_disconnect",
        );
    }
    if tg.max_client_disconnect.is_some_and(|d| d < 0) {
        m.push("max_client_disconnect cannot be negative");
    }
    if let Some(d) = &tg.disconnect {
        if tg.max_client_disconnect.is_some() {
            m.push("using both lost_after and max_client_disconnect is not allowed");
        }
        if tg.stop_after_client_disconnect.is_some() {
            m.push(
                "using both stop_after_client_disconnect and stop_on_client_after is not allowed",
            );
        }
        if tg.prevent_reschedule_on_lost {
            m.push("using both prevent_reschedule_on_lost and replace is not allowed");
        }
        if let Err(e) = d.validate(job) {
            m.push(e.to_string());
        }
    }
}

/// One transition of an allocation (Nomad's `AllocState`): today only client status changes
/// the servers make (`unknown` when the node disconnects, `lost`, back to `running`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocState {
    #[serde(rename = "Field")]
    pub field: String,
    #[serde(rename = "Value")]
    pub value: String,
    /// RFC 3339 with nanoseconds, UTC, as Nomad's JSON has it.
    #[serde(rename = "Time")]
    pub time: String,
}

impl AllocState {
    pub fn client_status(value: &str, at_nanos: i64) -> Self {
        AllocState {
            field: ALLOC_STATE_FIELD_CLIENT_STATUS.into(),
            value: value.into(),
            time: format_rfc3339_nanos(at_nanos),
        }
    }

    /// Unix nanoseconds; 0 when the time cannot be read.
    pub fn time_nanos(&self) -> i64 {
        parse_rfc3339_nanos(&self.time).unwrap_or(0)
    }
}

impl Allocation {
    /// Nomad's `AppendState` for the client status.
    pub fn append_client_state(&mut self, value: &str, at_nanos: i64) {
        self.alloc_states
            .get_or_insert_with(Vec::new)
            .push(AllocState::client_status(value, at_nanos));
    }

    fn client_states(&self) -> impl DoubleEndedIterator<Item = &AllocState> {
        self.alloc_states
            .iter()
            .flatten()
            .filter(|s| s.field == ALLOC_STATE_FIELD_CLIENT_STATUS)
    }

    /// Nomad's `NeedsToReconnect`: the last client status the servers recorded is `unknown`.
    pub fn needs_to_reconnect(&self) -> bool {
        self.client_states()
            .next_back()
            .is_some_and(|s| s.value == ALLOC_CLIENT_UNKNOWN)
    }

    /// Nomad's `LastUnknown`: when the allocation last became `unknown` (0: never).
    pub fn last_unknown(&self) -> i64 {
        let mut last = 0;
        let mut found = false;
        for s in self.client_states().rev() {
            if s.value == ALLOC_CLIENT_UNKNOWN {
                last = s.time_nanos();
                found = true;
            } else if found {
                break;
            }
        }
        last
    }

    /// When the allocation first became `lost` (0: never): `stop_on_client_after` counts from it.
    pub fn first_lost(&self) -> i64 {
        self.client_states()
            .find(|s| s.value == crate::alloc::ALLOC_CLIENT_LOST)
            .map(AllocState::time_nanos)
            .unwrap_or(0)
    }

    fn group<'a>(&'a self, current: Option<&'a Job>) -> Option<&'a TaskGroup> {
        self.job
            .as_deref()
            .or(current)?
            .lookup_task_group(&self.task_group)
    }

    /// Nomad's `Expired`: an `unknown` allocation whose `lost_after` passed at `now`.
    pub fn disconnect_expired(&self, current: Option<&Job>, now: i64) -> bool {
        if self.client_status != ALLOC_CLIENT_UNKNOWN {
            return false;
        }
        let last = self.last_unknown();
        if last == 0 {
            return false;
        }
        let Some(tg) = self.group(current) else {
            return false;
        };
        last.saturating_add(tg.disconnect_lost_after()) <= now
    }

    /// Nomad's `DisconnectTimeout`: when an allocation disconnecting at `now` becomes lost.
    pub fn disconnect_timeout(&self, current: Option<&Job>, now: i64) -> i64 {
        let lost_after = self.group(current).map(|tg| tg.disconnect_lost_after());
        now.saturating_add(lost_after.unwrap_or(0))
    }

    /// Nomad's `SupportsDisconnectedClients`: the group sets a lost timeout.
    pub fn supports_disconnect(&self, current: Option<&Job>) -> bool {
        self.group(current)
            .is_some_and(|tg| tg.disconnect_lost_after() != 0)
    }

    /// Nomad's `ReplaceOnDisconnect`.
    pub fn replace_on_disconnect(&self, current: Option<&Job>) -> bool {
        self.group(current).is_none_or(|tg| tg.disconnect_replace())
    }

    /// Nomad's `WaitClientStop`: when the replacement of this lost allocation may be placed
    /// (the lost time, or `now` before it was marked lost, plus the stop delay and the
    /// longest kill timeout). `None` when the group sets no (or a zero) stop delay.
    pub fn wait_client_stop(&self, current: Option<&Job>, now: i64) -> Option<i64> {
        let tg = self.group(current)?;
        let stop = tg.disconnect_stop_after().filter(|d| *d != 0)?;
        let lost = match self.first_lost() {
            0 => now,
            t => t,
        };
        let kill = tg
            .tasks
            .iter()
            .map(|t| t.kill_timeout)
            .fold(DEFAULT_KILL_TIMEOUT, i64::max);
        Some(lost.saturating_add(stop).saturating_add(kill))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JOB_TYPE_SERVICE;

    const SEC: i64 = 1_000_000_000;

    fn job_with(tg: TaskGroup) -> Job {
        Job {
            id: "j".into(),
            job_type: JOB_TYPE_SERVICE.into(),
            task_groups: vec![tg],
            ..Default::default()
        }
    }

    #[test]
    fn old_and_new_disconnect_fields_cannot_be_mixed() {
        let tg = TaskGroup {
            name: "g".into(),
            max_client_disconnect: Some(60 * SEC),
            stop_after_client_disconnect: Some(SEC),
            prevent_reschedule_on_lost: true,
            disconnect: Some(DisconnectStrategy {
                lost_after: SEC,
                ..Default::default()
            }),
            ..Default::default()
        };
        let job = job_with(tg.clone());
        let mut m = MultiError::new();
        validate_group_disconnect(&mut m, &job, &tg);
        let text = m.into_result().unwrap_err().to_string();
        for want in [
            "Task group cannot be configured with both max_client_disconnect and stop_after_client_disconnect",
            "using both lost_after and max_client_disconnect is not allowed",
            "using both stop_after_client_disconnect and stop_on_client_after is not allowed",
            "using both prevent_reschedule_on_lost and replace is not allowed",
        ] {
            assert!(text.contains(want), "{want} missing from {text}");
        }
    }

    #[test]
    fn disconnect_block_is_validated_as_nomad_does() {
        let job = job_with(TaskGroup::default());
        let both = DisconnectStrategy {
            lost_after: -SEC,
            stop_on_client_after: Some(-SEC),
            ..Default::default()
        };
        let text = both.validate(&job).unwrap_err().to_string();
        assert!(text.contains("lost_after cannot be a negative duration"));
        assert!(text.contains("stop_after cannot be a negative duration"));
        assert!(
            text.contains("Disconnect cannot be configured with both lost_after and stop_after")
        );
        let bad = DisconnectStrategy {
            lost_after: SEC,
            reconcile: "newest".into(),
            ..Default::default()
        };
        assert!(
            bad.validate(&job)
                .unwrap_err()
                .to_string()
                .contains("reconcile option is invalid: newest")
        );
        let system = Job {
            job_type: crate::job::JOB_TYPE_SYSTEM.into(),
            ..job.clone()
        };
        let stop = DisconnectStrategy {
            stop_on_client_after: Some(SEC),
            ..Default::default()
        };
        assert!(
            stop.validate(&system)
                .unwrap_err()
                .to_string()
                .contains("stop_after can only be used with service or batch job types")
        );
        assert!(stop.validate(&job).is_ok());
    }

    #[test]
    fn max_client_disconnect_wins_over_the_disconnect_block() {
        let mut tg = TaskGroup {
            disconnect: Some(DisconnectStrategy {
                lost_after: 5 * SEC,
                replace: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(tg.disconnect_lost_after(), 5 * SEC);
        assert!(!tg.disconnect_replace());
        assert_eq!(tg.disconnect_reconcile(), RECONCILE_BEST_SCORE);
        tg.max_client_disconnect = Some(7 * SEC);
        assert_eq!(tg.disconnect_lost_after(), 7 * SEC);
        tg.disconnect = None;
        tg.stop_after_client_disconnect = Some(3 * SEC);
        assert_eq!(tg.disconnect_stop_after(), Some(3 * SEC));
        assert!(tg.disconnect_replace());
    }

    #[test]
    fn unknown_allocations_expire_after_lost_after() {
        let tg = TaskGroup {
            name: "g".into(),
            max_client_disconnect: Some(10 * SEC),
            ..Default::default()
        };
        let job = std::sync::Arc::new(job_with(tg));
        let mut a = Allocation {
            task_group: "g".into(),
            job: Some(job),
            client_status: ALLOC_CLIENT_UNKNOWN.into(),
            ..Default::default()
        };
        assert!(!a.needs_to_reconnect());
        a.append_client_state(ALLOC_CLIENT_UNKNOWN, 100 * SEC);
        assert!(a.needs_to_reconnect());
        assert_eq!(a.last_unknown(), 100 * SEC);
        assert!(!a.disconnect_expired(None, 109 * SEC));
        assert!(a.disconnect_expired(None, 110 * SEC));
        assert_eq!(a.disconnect_timeout(None, 100 * SEC), 110 * SEC);
        a.append_client_state(crate::alloc::ALLOC_CLIENT_RUNNING, 120 * SEC);
        assert!(!a.needs_to_reconnect());
    }

    #[test]
    fn stop_after_counts_from_the_lost_time_plus_the_kill_timeout() {
        let tg = TaskGroup {
            name: "g".into(),
            stop_after_client_disconnect: Some(30 * SEC),
            tasks: vec![crate::job::Task {
                kill_timeout: 9 * SEC,
                ..Default::default()
            }],
            ..Default::default()
        };
        let job = std::sync::Arc::new(job_with(tg));
        let mut a = Allocation {
            task_group: "g".into(),
            job: Some(job),
            ..Default::default()
        };
        assert_eq!(a.wait_client_stop(None, 100 * SEC), Some(139 * SEC));
        a.append_client_state(crate::alloc::ALLOC_CLIENT_LOST, 50 * SEC);
        assert_eq!(a.wait_client_stop(None, 100 * SEC), Some(89 * SEC));
    }
}
