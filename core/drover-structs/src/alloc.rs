//! Allocations: one placement of a task group on a node, with what the client reports back.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::job::{Job, Opaque};
use crate::resources::{AllocatedResources, Resources};
use crate::vec_map::VecMap;

mod json;
mod scorer;
pub use json::{
    AllocationAsHeld, AllocationHeldWithoutJob, LegacyResources, legacy_resources,
    serialize_allocations_as_held,
};
pub use scorer::{
    SCORE_BINPACK, SCORE_JOB_ANTI_AFFINITY, SCORE_NODE_AFFINITY, SCORE_PREEMPTION,
    SCORE_RESCHEDULE_PENALTY, SCORE_SPREAD, ScorerName,
};

pub const ALLOC_DESIRED_RUN: &str = "run";
pub const ALLOC_DESIRED_STOP: &str = "stop";
pub const ALLOC_DESIRED_EVICT: &str = "evict";

pub const ALLOC_CLIENT_PENDING: &str = "pending";
pub const ALLOC_CLIENT_RUNNING: &str = "running";
pub const ALLOC_CLIENT_COMPLETE: &str = "complete";
pub const ALLOC_CLIENT_FAILED: &str = "failed";
pub const ALLOC_CLIENT_LOST: &str = "lost";
/// On a disconnected node: maybe still running, not heard of.
pub const ALLOC_CLIENT_UNKNOWN: &str = "unknown";

pub const TASK_STATE_PENDING: &str = "pending";
pub const TASK_STATE_RUNNING: &str = "running";
pub const TASK_STATE_DEAD: &str = "dead";

/// JSON an allocation mostly holds none of, boxed so that the empty case costs a pointer.
pub type BoxedOpaque = Option<Box<serde_json::Value>>;

/// Serialized by hand (`alloc_json.rs`): the legacy resource fields a stored allocation drops
/// are derived again from `AllocatedResources` when it is written out.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Allocation {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "NodeName")]
    pub node_name: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    /// The job version this allocation runs. Shared between allocations, never copied per alloc.
    #[serde(rename = "Job")]
    pub job: Option<Arc<Job>>,
    #[serde(rename = "TaskGroup")]
    pub task_group: String,
    /// Boxed, as the other fields a stored allocation mostly leaves empty: the legacy
    /// resources are dropped once stored (`drop_derivable_legacy_resources`), and an
    /// allocation must fit mimalloc's 1 KiB size class (see the size test below).
    #[serde(rename = "Resources")]
    pub resources: Option<Box<Resources>>,
    #[serde(rename = "SharedResources")]
    pub shared_resources: Option<Box<Resources>>,
    #[serde(rename = "TaskResources")]
    pub task_resources: Option<BTreeMap<String, Resources>>,
    #[serde(rename = "AllocatedResources")]
    pub allocated_resources: Option<AllocatedResources>,
    #[serde(rename = "Metrics")]
    pub metrics: Option<AllocMetric>,
    #[serde(rename = "DesiredStatus")]
    pub desired_status: String,
    #[serde(rename = "DesiredDescription")]
    pub desired_description: String,
    #[serde(rename = "DesiredTransition")]
    pub desired_transition: DesiredTransition,
    #[serde(rename = "ClientStatus")]
    pub client_status: String,
    #[serde(rename = "ClientDescription")]
    pub client_description: String,
    #[serde(rename = "TaskStates")]
    pub task_states: Option<BTreeMap<String, TaskState>>,
    #[serde(rename = "DeploymentID")]
    pub deployment_id: String,
    /// Boxed: most allocations have none, and a million of them must stay small.
    #[serde(rename = "DeploymentStatus")]
    pub deployment_status: Option<Box<crate::deployment::AllocDeploymentStatus>>,
    #[serde(rename = "FollowupEvalID")]
    pub followup_eval_id: String,
    #[serde(rename = "RescheduleTracker")]
    pub reschedule_tracker: BoxedOpaque,
    #[serde(rename = "PreemptedAllocations")]
    pub preempted_allocations: Option<Vec<String>>,
    #[serde(rename = "PreemptedByAllocation")]
    pub preempted_by_allocation: String,
    #[serde(
        rename = "PreviousAllocation",
        skip_serializing_if = "String::is_empty"
    )]
    pub previous_allocation: String,
    #[serde(rename = "NextAllocation", skip_serializing_if = "String::is_empty")]
    pub next_allocation: String,
    #[serde(rename = "NetworkStatus")]
    pub network_status: BoxedOpaque,
    /// Client status changes the servers made (Nomad's `AllocStates`).
    #[serde(rename = "AllocStates")]
    pub alloc_states: Option<Vec<crate::disconnect::AllocState>>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "AllocModifyIndex")]
    pub alloc_modify_index: u64,
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

impl Allocation {
    /// Terminal allocations no longer hold resources on their node.
    pub fn terminal(&self) -> bool {
        self.server_terminal() || self.client_terminal()
    }

    /// The servers want it stopped.
    pub fn server_terminal(&self) -> bool {
        self.desired_status == ALLOC_DESIRED_STOP || self.desired_status == ALLOC_DESIRED_EVICT
    }

    /// The client says it ended.
    pub fn client_terminal(&self) -> bool {
        matches!(
            self.client_status.as_str(),
            ALLOC_CLIENT_COMPLETE | ALLOC_CLIENT_FAILED | ALLOC_CLIENT_LOST
        )
    }

    /// The allocation's index in its group, parsed from its name `job.group[N]`.
    pub fn index(&self) -> Option<u64> {
        let open = self.name.rfind('[')?;
        let close = self.name.rfind(']')?;
        self.name.get(open + 1..close)?.parse().ok()
    }

    pub fn job_version(&self) -> u64 {
        self.job.as_ref().map(|j| j.version).unwrap_or(0)
    }

    /// The list view of `GET /v1/allocations`.
    pub fn stub(&self) -> AllocListStub {
        AllocListStub {
            id: self.id.clone(),
            eval_id: self.eval_id.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            node_id: self.node_id.clone(),
            node_name: self.node_name.clone(),
            job_id: self.job_id.clone(),
            job_type: self
                .job
                .as_ref()
                .map(|j| j.job_type.clone())
                .unwrap_or_default(),
            job_version: self.job_version(),
            task_group: self.task_group.clone(),
            allocated_resources: None,
            desired_status: self.desired_status.clone(),
            desired_description: self.desired_description.clone(),
            client_status: self.client_status.clone(),
            client_description: self.client_description.clone(),
            desired_transition: self.desired_transition.clone(),
            task_states: self.task_states.clone(),
            deployment_status: self.deployment_status.clone(),
            followup_eval_id: self.followup_eval_id.clone(),
            reschedule_tracker: self.reschedule_tracker.as_deref().cloned(),
            preempted_allocations: self.preempted_allocations.clone(),
            preempted_by_allocation: self.preempted_by_allocation.clone(),
            create_index: self.create_index,
            modify_index: self.modify_index,
            create_time: self.create_time,
            modify_time: self.modify_time,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "NodeName")]
    pub node_name: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "JobType")]
    pub job_type: String,
    #[serde(rename = "JobVersion")]
    pub job_version: u64,
    #[serde(rename = "TaskGroup")]
    pub task_group: String,
    #[serde(rename = "AllocatedResources")]
    pub allocated_resources: Option<AllocatedResources>,
    #[serde(rename = "DesiredStatus")]
    pub desired_status: String,
    #[serde(rename = "DesiredDescription")]
    pub desired_description: String,
    #[serde(rename = "ClientStatus")]
    pub client_status: String,
    #[serde(rename = "ClientDescription")]
    pub client_description: String,
    #[serde(rename = "DesiredTransition")]
    pub desired_transition: DesiredTransition,
    #[serde(rename = "TaskStates")]
    pub task_states: Option<BTreeMap<String, TaskState>>,
    /// Boxed: most allocations have none, and a million of them must stay small.
    #[serde(rename = "DeploymentStatus")]
    pub deployment_status: Option<Box<crate::deployment::AllocDeploymentStatus>>,
    #[serde(rename = "FollowupEvalID")]
    pub followup_eval_id: String,
    #[serde(rename = "RescheduleTracker")]
    pub reschedule_tracker: Opaque,
    #[serde(rename = "PreemptedAllocations")]
    pub preempted_allocations: Option<Vec<String>>,
    #[serde(rename = "PreemptedByAllocation")]
    pub preempted_by_allocation: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DesiredTransition {
    #[serde(rename = "Migrate")]
    pub migrate: Option<bool>,
    #[serde(rename = "Reschedule")]
    pub reschedule: Option<bool>,
    #[serde(rename = "ForceReschedule")]
    pub force_reschedule: Option<bool>,
}

/// What the client reports about one task of an allocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskState {
    #[serde(rename = "State")]
    pub state: String,
    #[serde(rename = "Failed")]
    pub failed: bool,
    #[serde(rename = "Restarts")]
    pub restarts: u64,
    /// RFC 3339, null until the first restart.
    #[serde(rename = "LastRestart")]
    pub last_restart: Option<String>,
    #[serde(rename = "StartedAt")]
    pub started_at: Option<String>,
    #[serde(rename = "FinishedAt")]
    pub finished_at: Option<String>,
    #[serde(rename = "Events")]
    pub events: Vec<TaskEvent>,
    #[serde(rename = "TaskHandle")]
    pub task_handle: Opaque,
}

pub const TASK_EVENT_RECEIVED: &str = "Received";
pub const TASK_EVENT_SETUP: &str = "Task Setup";
pub const TASK_EVENT_STARTED: &str = "Started";
pub const TASK_EVENT_TERMINATED: &str = "Terminated";
pub const TASK_EVENT_RESTARTING: &str = "Restarting";
pub const TASK_EVENT_NOT_RESTARTING: &str = "Not Restarting";
pub const TASK_EVENT_DRIVER_FAILURE: &str = "Driver Failure";
pub const TASK_EVENT_KILLING: &str = "Killing";
pub const TASK_EVENT_KILLED: &str = "Killed";
pub const TASK_EVENT_SETUP_FAILURE: &str = "Setup Failure";
/// The client fetches the task's `artifact` blocks.
pub const TASK_EVENT_DOWNLOADING_ARTIFACTS: &str = "Downloading Artifacts";
/// An artifact could not be fetched (or failed its checksum); the task did not start.
pub const TASK_EVENT_ARTIFACT_DOWNLOAD_FAILED: &str = "Failed Artifact Download";
pub const TASK_EVENT_SIBLING_FAILED: &str = "Sibling Task Failed";
/// Nomad's `TaskLeaderDead`: the group's leader task finished, so the others are stopped.
pub const TASK_EVENT_LEADER_DEAD: &str = "Leader Task Dead";
/// Nomad's `TaskMainDead`: only sidecars are left, so they are stopped.
pub const TASK_EVENT_MAIN_DEAD: &str = "Main Tasks Dead";
/// Nomad's `TaskWaitingShuttingDownDelay`: the task's `shutdown_delay` runs before the kill.
pub const TASK_EVENT_WAITING_SHUTDOWN_DELAY: &str = "Waiting for shutdown delay";
/// Nomad's `TaskSignaling`: the task is being sent a signal (`alloc signal`).
pub const TASK_EVENT_SIGNALING: &str = "Signaling";
/// Nomad's `TaskRestartSignal`: the task was asked to restart (`alloc restart`).
pub const TASK_EVENT_RESTART_SIGNAL: &str = "Restart Signaled";

/// One entry of a task's event history, with every field Nomad writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskEvent {
    #[serde(rename = "Type")]
    pub event_type: String,
    /// Unix nanoseconds.
    #[serde(rename = "Time")]
    pub time: i64,
    #[serde(rename = "Message")]
    pub message: String,
    #[serde(rename = "DisplayMessage")]
    pub display_message: String,
    #[serde(rename = "Details")]
    pub details: BTreeMap<String, String>,
    #[serde(rename = "FailsTask")]
    pub fails_task: bool,
    #[serde(rename = "RestartReason")]
    pub restart_reason: String,
    #[serde(rename = "SetupError")]
    pub setup_error: String,
    #[serde(rename = "DriverError")]
    pub driver_error: String,
    #[serde(rename = "ExitCode")]
    pub exit_code: i64,
    #[serde(rename = "Signal")]
    pub signal: i64,
    #[serde(rename = "KillTimeout")]
    pub kill_timeout: i64,
    #[serde(rename = "KillError")]
    pub kill_error: String,
    #[serde(rename = "KillReason")]
    pub kill_reason: String,
    #[serde(rename = "StartDelay")]
    pub start_delay: i64,
    #[serde(rename = "DownloadError")]
    pub download_error: String,
    #[serde(rename = "ValidationError")]
    pub validation_error: String,
    #[serde(rename = "DiskLimit")]
    pub disk_limit: i64,
    #[serde(rename = "FailedSibling")]
    pub failed_sibling: String,
    #[serde(rename = "VaultError")]
    pub vault_error: String,
    #[serde(rename = "TaskSignalReason")]
    pub task_signal_reason: String,
    #[serde(rename = "TaskSignal")]
    pub task_signal: String,
    #[serde(rename = "DriverMessage")]
    pub driver_message: String,
    #[serde(rename = "GenericSource")]
    pub generic_source: String,
}

impl TaskEvent {
    /// A new event of `event_type` stamped now, with Nomad's display message for that type.
    pub fn new(event_type: &str) -> Self {
        let mut e = TaskEvent {
            event_type: event_type.to_string(),
            time: crate::time::now_nanos(),
            ..Default::default()
        };
        e.display_message = e.default_display_message();
        e
    }

    pub fn with_message(mut self, msg: impl Into<String>) -> Self {
        self.message = msg.into();
        self.display_message = self.default_display_message();
        self
    }

    /// Nomad's `TaskEvent.PopulateEventDisplayMessage`, for the event types Drover emits.
    pub fn default_display_message(&self) -> String {
        match self.event_type.as_str() {
            TASK_EVENT_RECEIVED => "Task received by client".into(),
            TASK_EVENT_STARTED => "Task started by client".into(),
            TASK_EVENT_SETUP => self.message.clone(),
            TASK_EVENT_TERMINATED => {
                let mut parts = vec![format!("Exit Code: {}", self.exit_code)];
                if self.signal != 0 {
                    parts.push(format!("Signal: {}", self.signal));
                }
                if !self.message.is_empty() {
                    parts.push(format!("Exit Message: {:?}", self.message));
                }
                parts.join(", ")
            }
            TASK_EVENT_RESTARTING => {
                let secs = self.start_delay as f64 / 1e9;
                let mut s = format!("Task restarting in {}", format_go_duration_secs(secs));
                if !self.restart_reason.is_empty() {
                    s = format!("{} - {}", self.restart_reason, s);
                }
                s
            }
            TASK_EVENT_NOT_RESTARTING => {
                if self.restart_reason.is_empty() {
                    "Task not restarting".into()
                } else {
                    self.restart_reason.clone()
                }
            }
            TASK_EVENT_DRIVER_FAILURE => {
                if self.driver_error.is_empty() {
                    "Failure from driver".into()
                } else {
                    self.driver_error.clone()
                }
            }
            TASK_EVENT_KILLING => {
                format!(
                    "Sent interrupt. Waiting {} before force killing",
                    format_go_duration_secs(self.kill_timeout as f64 / 1e9)
                )
            }
            TASK_EVENT_KILLED => {
                if self.kill_error.is_empty() {
                    "Task successfully killed".into()
                } else {
                    self.kill_error.clone()
                }
            }
            TASK_EVENT_DOWNLOADING_ARTIFACTS => "Client is downloading artifacts".into(),
            TASK_EVENT_ARTIFACT_DOWNLOAD_FAILED => {
                if self.download_error.is_empty() {
                    "Failed to download artifacts".into()
                } else {
                    self.download_error.clone()
                }
            }
            TASK_EVENT_SETUP_FAILURE => {
                if self.setup_error.is_empty() {
                    "Task setup failed".into()
                } else {
                    self.setup_error.clone()
                }
            }
            TASK_EVENT_SIBLING_FAILED => {
                if self.failed_sibling.is_empty() {
                    "Task's sibling failed".into()
                } else {
                    format!("Task's sibling {:?} failed", self.failed_sibling)
                }
            }
            TASK_EVENT_SIGNALING => match (
                self.task_signal.is_empty(),
                self.task_signal_reason.is_empty(),
            ) {
                (true, true) => "Task being sent a signal".into(),
                (true, false) => self.task_signal_reason.clone(),
                (false, true) => format!("Task being sent signal {}", self.task_signal),
                (false, false) => format!(
                    "Task being sent signal {}: {}",
                    self.task_signal, self.task_signal_reason
                ),
            },
            TASK_EVENT_LEADER_DEAD => "Leader Task in Group dead".into(),
            TASK_EVENT_MAIN_DEAD => "Main tasks in the group died".into(),
            TASK_EVENT_RESTART_SIGNAL => {
                if self.restart_reason.is_empty() {
                    "Task signaled to restart".into()
                } else {
                    self.restart_reason.clone()
                }
            }
            _ => self.message.clone(),
        }
    }
}

/// Formats seconds as Go prints durations: `15s`, `1.5s`, `5m0s`, `1h0m0s`.
pub fn format_go_duration_secs(secs: f64) -> String {
    if secs < 60.0 {
        let s = format!("{secs:.9}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        return format!("{s}s");
    }
    let total = secs.round() as i64;
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else {
        format!("{m}m{s}s")
    }
}

/// How the scheduler arrived at a placement or failed one (Nomad's `AllocMetric`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocMetric {
    #[serde(rename = "NodesEvaluated")]
    pub nodes_evaluated: i64,
    #[serde(rename = "NodesFiltered")]
    pub nodes_filtered: i64,
    #[serde(rename = "NodesAvailable")]
    pub nodes_available: Option<VecMap<String, i64>>,
    #[serde(rename = "ClassFiltered")]
    pub class_filtered: Option<VecMap<String, i64>>,
    #[serde(rename = "ConstraintFiltered")]
    pub constraint_filtered: Option<VecMap<String, i64>>,
    #[serde(rename = "NodesExhausted")]
    pub nodes_exhausted: i64,
    #[serde(rename = "ClassExhausted")]
    pub class_exhausted: Option<VecMap<String, i64>>,
    #[serde(rename = "DimensionExhausted")]
    pub dimension_exhausted: Option<VecMap<String, i64>>,
    #[serde(rename = "QuotaExhausted")]
    pub quota_exhausted: Option<Vec<String>>,
    #[serde(rename = "ResourcesExhausted")]
    pub resources_exhausted: Option<serde_json::Value>,
    #[serde(rename = "Scores")]
    pub scores: Option<VecMap<String, f64>>,
    #[serde(rename = "ScoreMetaData")]
    pub score_meta_data: Option<Vec<NodeScoreMeta>>,
    /// Nanoseconds spent placing.
    #[serde(rename = "AllocationTime")]
    pub allocation_time: i64,
    #[serde(rename = "CoalescedFailures")]
    pub coalesced_failures: i64,
}

fn bump(map: &mut Option<VecMap<String, i64>>, key: &str) {
    let map = map.get_or_insert_with(VecMap::new);
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.to_string(), 1);
        }
    }
}

impl AllocMetric {
    pub fn filter_node(&mut self, node_class: &str, constraint: Option<&str>) {
        self.nodes_filtered += 1;
        if !node_class.is_empty() {
            bump(&mut self.class_filtered, node_class);
        }
        if let Some(c) = constraint {
            bump(&mut self.constraint_filtered, c);
        }
    }

    pub fn exhausted_node(&mut self, node_class: &str, dimension: &str) {
        self.nodes_exhausted += 1;
        if !node_class.is_empty() {
            bump(&mut self.class_exhausted, node_class);
        }
        if !dimension.is_empty() {
            bump(&mut self.dimension_exhausted, dimension);
        }
    }
}

/// Per-node scores of the top candidates, as `ScoreMetaData` lists them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeScoreMeta {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "Scores")]
    pub scores: VecMap<ScorerName, f64>,
    #[serde(rename = "NormScore")]
    pub norm_score: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_allocation_fits_mimallocs_1_kib_size_class() {
        // The state store holds each allocation in an `Arc` (two counters before it). mimalloc
        // rounds 1,025 bytes up to 1,280: a million allocations would hold 256 MB more.
        let held = std::mem::size_of::<Allocation>() + 2 * std::mem::size_of::<usize>();
        assert!(held <= 1024, "Arc<Allocation> takes {held} bytes");
    }

    #[test]
    fn alloc_index_comes_from_name() {
        let a = Allocation {
            name: "web.api[12]".into(),
            ..Default::default()
        };
        assert_eq!(a.index(), Some(12));
    }

    #[test]
    fn terminated_event_displays_exit_code() {
        let mut e = TaskEvent::new(TASK_EVENT_TERMINATED);
        e.exit_code = 3;
        assert_eq!(e.default_display_message(), "Exit Code: 3");
        assert_eq!(format_go_duration_secs(15.0), "15s");
        assert_eq!(format_go_duration_secs(300.0), "5m0s");
    }

    #[test]
    fn signal_and_restart_signal_events_display_nomads_text() {
        let mut e = TaskEvent::new(TASK_EVENT_SIGNALING);
        assert_eq!(e.display_message, "Task being sent a signal");
        e.task_signal = "SIGUSR1".into();
        assert_eq!(
            e.default_display_message(),
            "Task being sent signal SIGUSR1"
        );
        e.task_signal_reason = "template changed".into();
        assert_eq!(
            e.default_display_message(),
            "Task being sent signal SIGUSR1: template changed"
        );
        let mut r = TaskEvent::new(TASK_EVENT_RESTART_SIGNAL);
        assert_eq!(r.display_message, "Task signaled to restart");
        r.restart_reason = "User requested task to restart".into();
        assert_eq!(
            r.default_display_message(),
            "User requested task to restart"
        );
    }
}

/// What a client reports about one of its allocations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocClientUpdate {
    pub id: String,
    pub client_status: String,
    pub client_description: String,
    pub task_states: Option<BTreeMap<String, TaskState>>,
    /// Unix nanoseconds of the client's observation.
    #[serde(default)]
    pub modify_time: i64,
    /// The allocation's deployment health, once the client decided it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_status: Option<crate::deployment::AllocDeploymentStatus>,
    /// The allocation's own network (Nomad's `AllocNetworkStatus`: bridge mode's interface
    /// and address), once the client made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_status: Option<serde_json::Value>,
}
