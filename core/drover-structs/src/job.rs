//! Jobs, task groups and tasks as Nomad's server stores and returns them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::resources::{NetworkResource, Resources};

pub const JOB_TYPE_SERVICE: &str = "service";
/// Nomad's `JobDefaultPriority`: a job's priority when it names none.
pub const JOB_DEFAULT_PRIORITY: i64 = 50;
pub const JOB_TYPE_BATCH: &str = "batch";
pub const JOB_TYPE_SYSTEM: &str = "system";
pub const JOB_TYPE_SYSBATCH: &str = "sysbatch";

pub const JOB_STATUS_PENDING: &str = "pending";
pub const JOB_STATUS_RUNNING: &str = "running";
pub const JOB_STATUS_DEAD: &str = "dead";

/// Free-form JSON kept as the user wrote it (blocks Drover carries but does not interpret yet).
pub type Opaque = Option<serde_json::Value>;
pub type Meta = Option<BTreeMap<String, String>>;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Job {
    #[serde(rename = "Stop")]
    pub stop: bool,
    #[serde(rename = "Region")]
    pub region: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "ParentID")]
    pub parent_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Type")]
    pub job_type: String,
    #[serde(rename = "Priority")]
    pub priority: i64,
    #[serde(rename = "AllAtOnce")]
    pub all_at_once: bool,
    #[serde(rename = "Datacenters")]
    pub datacenters: Vec<String>,
    #[serde(rename = "Constraints")]
    pub constraints: Option<Vec<Constraint>>,
    #[serde(rename = "Affinities")]
    pub affinities: Option<Vec<Affinity>>,
    #[serde(rename = "Spreads")]
    pub spreads: Option<Vec<Spread>>,
    #[serde(rename = "TaskGroups")]
    pub task_groups: Vec<TaskGroup>,
    #[serde(rename = "Update")]
    pub update: UpdateStrategy,
    #[serde(rename = "Multiregion")]
    pub multiregion: Opaque,
    #[serde(rename = "Periodic")]
    pub periodic: Opaque,
    #[serde(rename = "ParameterizedJob")]
    pub parameterized_job: Opaque,
    #[serde(rename = "Dispatched")]
    pub dispatched: bool,
    #[serde(rename = "Payload")]
    pub payload: Opaque,
    /// The token the dispatch that created this child carried (Nomad's
    /// `DispatchIdempotencyToken`): a later dispatch of the same parent with the same token
    /// returns this child instead of creating another. Left out of the JSON when empty, as in
    /// the reference job samples (Nomad versions before the token).
    #[serde(
        rename = "DispatchIdempotencyToken",
        skip_serializing_if = "String::is_empty"
    )]
    pub dispatch_idempotency_token: String,
    #[serde(rename = "Meta")]
    pub meta: Meta,
    #[serde(rename = "ConsulToken")]
    pub consul_token: String,
    #[serde(rename = "ConsulNamespace")]
    pub consul_namespace: String,
    #[serde(rename = "VaultToken")]
    pub vault_token: String,
    #[serde(rename = "VaultNamespace")]
    pub vault_namespace: String,
    #[serde(rename = "NomadTokenID")]
    pub nomad_token_id: String,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    #[serde(rename = "Stable")]
    pub stable: bool,
    #[serde(rename = "Version")]
    pub version: u64,
    #[serde(rename = "SubmitTime")]
    pub submit_time: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
}

impl Job {
    pub fn lookup_task_group(&self, name: &str) -> Option<&TaskGroup> {
        self.task_groups.iter().find(|g| g.name == name)
    }

    /// Batch and sysbatch jobs run to completion; the others are kept running.
    pub fn is_batch_like(&self) -> bool {
        self.job_type == JOB_TYPE_BATCH || self.job_type == JOB_TYPE_SYSBATCH
    }

    pub fn is_periodic(&self) -> bool {
        self.periodic.as_ref().is_some_and(|p| !p.is_null())
    }

    /// Nomad's `IsParameterized`: a dispatched child keeps the block but is a plain job.
    pub fn is_parameterized(&self) -> bool {
        !self.dispatched
            && self
                .parameterized_job
                .as_ref()
                .is_some_and(|p| !p.is_null())
    }

    /// Whether two versions of a job differ in anything that needs new allocations (Nomad's
    /// "destructive update" test, simplified to the task groups and the job's constraints).
    /// Sets the version and indexes this job takes when it is registered at `index` over
    /// `existing` (the stored job, if any): a new version only when the spec or the stop flag
    /// changed, so that re-registering the same job keeps its version, stability and
    /// `JobModifyIndex`.
    pub fn registered_over(&mut self, existing: Option<&Job>, index: u64) {
        match existing {
            Some(existing) => {
                self.create_index = existing.create_index;
                if existing.spec_changed(self) || existing.stop != self.stop {
                    self.version = existing.version + 1;
                    self.job_modify_index = index;
                } else {
                    self.version = existing.version;
                    self.job_modify_index = existing.job_modify_index;
                    self.stable = existing.stable;
                }
            }
            None => {
                self.create_index = index;
                self.version = 0;
                self.job_modify_index = index;
            }
        }
        self.modify_index = index;
    }

    /// Nomad's `Job.SpecChanged`: `other` differs from this job in anything but the
    /// bookkeeping the servers keep (status, stability, version, indexes, submit time). Any
    /// other field, priority and update strategy included, makes a new version.
    pub fn spec_changed(&self, other: &Job) -> bool {
        let mut c = other.clone();
        c.status.clone_from(&self.status);
        c.status_description.clone_from(&self.status_description);
        c.stable = self.stable;
        c.version = self.version;
        c.create_index = self.create_index;
        c.modify_index = self.modify_index;
        c.job_modify_index = self.job_modify_index;
        c.submit_time = self.submit_time;
        *self != c
    }

    /// The list view of `GET /v1/jobs`.
    pub fn stub(&self, summary: Option<crate::summary::JobSummary>) -> JobListStub {
        JobListStub {
            id: self.id.clone(),
            parent_id: self.parent_id.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            datacenters: self.datacenters.clone(),
            multiregion: self.multiregion.clone(),
            job_type: self.job_type.clone(),
            priority: self.priority,
            periodic: self.is_periodic(),
            parameterized_job: self.is_parameterized(),
            stop: self.stop,
            status: self.status.clone(),
            status_description: self.status_description.clone(),
            job_summary: summary,
            create_index: self.create_index,
            modify_index: self.modify_index,
            job_modify_index: self.job_modify_index,
            submit_time: self.submit_time,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "ParentID")]
    pub parent_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Datacenters")]
    pub datacenters: Vec<String>,
    #[serde(rename = "Multiregion")]
    pub multiregion: Opaque,
    #[serde(rename = "Type")]
    pub job_type: String,
    #[serde(rename = "Priority")]
    pub priority: i64,
    #[serde(rename = "Periodic")]
    pub periodic: bool,
    #[serde(rename = "ParameterizedJob")]
    pub parameterized_job: bool,
    #[serde(rename = "Stop")]
    pub stop: bool,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    #[serde(rename = "JobSummary")]
    pub job_summary: Option<crate::summary::JobSummary>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    #[serde(rename = "SubmitTime")]
    pub submit_time: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskGroup {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Count")]
    pub count: i64,
    #[serde(rename = "Update")]
    pub update: Option<UpdateStrategy>,
    #[serde(rename = "Migrate")]
    pub migrate: Option<MigrateStrategy>,
    #[serde(rename = "Constraints")]
    pub constraints: Option<Vec<Constraint>>,
    #[serde(rename = "Scaling")]
    pub scaling: Opaque,
    #[serde(rename = "RestartPolicy")]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(rename = "Tasks")]
    pub tasks: Vec<Task>,
    #[serde(rename = "EphemeralDisk")]
    pub ephemeral_disk: Option<EphemeralDisk>,
    #[serde(rename = "Meta")]
    pub meta: Meta,
    #[serde(rename = "ReschedulePolicy")]
    pub reschedule_policy: Option<ReschedulePolicy>,
    #[serde(rename = "Affinities")]
    pub affinities: Option<Vec<Affinity>>,
    #[serde(rename = "Spreads")]
    pub spreads: Option<Vec<Spread>>,
    #[serde(rename = "Networks")]
    pub networks: Option<Vec<NetworkResource>>,
    #[serde(rename = "Consul")]
    pub consul: Opaque,
    #[serde(rename = "Services")]
    pub services: Opaque,
    #[serde(rename = "Volumes")]
    pub volumes: Opaque,
    #[serde(rename = "ShutdownDelay")]
    pub shutdown_delay: Option<i64>,
    #[serde(rename = "StopAfterClientDisconnect")]
    pub stop_after_client_disconnect: Option<i64>,
    // Fields newer than Nomad 1.1.2 are written only when set, so older jobs read back as
    // Nomad 1.1.2 wrote them.
    /// Nomad's older form of `disconnect.lost_after`.
    #[serde(
        rename = "MaxClientDisconnect",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_client_disconnect: Option<i64>,
    /// Nomad's older form of `disconnect.replace = false`.
    #[serde(
        rename = "PreventRescheduleOnLost",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub prevent_reschedule_on_lost: bool,
    #[serde(rename = "Disconnect", skip_serializing_if = "Option::is_none")]
    pub disconnect: Option<crate::disconnect::DisconnectStrategy>,
}

impl TaskGroup {
    /// The resources one allocation of this group asks for (tasks summed, plus the group's disk).
    pub fn combined_ask(&self) -> crate::resources::ComparableResources {
        let mut c = crate::resources::ComparableResources {
            disk_mb: self.ephemeral_disk.as_ref().map(|d| d.size_mb).unwrap_or(0),
            ..Default::default()
        };
        for t in &self.tasks {
            c.cpu_shares += t.resources.cpu;
            c.memory_mb += t.resources.memory_mb;
        }
        c
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Task {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Driver")]
    pub driver: String,
    #[serde(rename = "User")]
    pub user: String,
    #[serde(rename = "Config")]
    pub config: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(rename = "Env")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(rename = "Services")]
    pub services: Opaque,
    #[serde(rename = "Vault")]
    pub vault: Opaque,
    #[serde(rename = "Templates")]
    pub templates: Opaque,
    #[serde(rename = "Constraints")]
    pub constraints: Option<Vec<Constraint>>,
    #[serde(rename = "Affinities")]
    pub affinities: Option<Vec<Affinity>>,
    #[serde(rename = "Resources")]
    pub resources: Resources,
    #[serde(rename = "RestartPolicy")]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(rename = "DispatchPayload")]
    pub dispatch_payload: Opaque,
    #[serde(rename = "Lifecycle")]
    pub lifecycle: Opaque,
    #[serde(rename = "Meta")]
    pub meta: Meta,
    #[serde(rename = "KillTimeout")]
    pub kill_timeout: i64,
    #[serde(rename = "LogConfig")]
    pub log_config: Option<LogConfig>,
    #[serde(rename = "Artifacts")]
    pub artifacts: Opaque,
    #[serde(rename = "Leader")]
    pub leader: bool,
    #[serde(rename = "ShutdownDelay")]
    pub shutdown_delay: i64,
    #[serde(rename = "VolumeMounts")]
    pub volume_mounts: Opaque,
    #[serde(rename = "ScalingPolicies")]
    pub scaling_policies: Opaque,
    #[serde(rename = "KillSignal")]
    pub kill_signal: String,
    #[serde(rename = "Kind")]
    pub kind: String,
    #[serde(rename = "CSIPluginConfig")]
    pub csi_plugin_config: Opaque,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Constraint {
    #[serde(rename = "LTarget")]
    pub l_target: String,
    #[serde(rename = "RTarget")]
    pub r_target: String,
    #[serde(rename = "Operand")]
    pub operand: String,
}

impl std::fmt::Display for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.l_target, self.operand, self.r_target)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Affinity {
    #[serde(rename = "LTarget")]
    pub l_target: String,
    #[serde(rename = "RTarget")]
    pub r_target: String,
    #[serde(rename = "Operand")]
    pub operand: String,
    #[serde(rename = "Weight")]
    pub weight: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Spread {
    #[serde(rename = "Attribute")]
    pub attribute: String,
    #[serde(rename = "Weight")]
    pub weight: i64,
    #[serde(rename = "SpreadTarget")]
    pub spread_target: Option<Vec<SpreadTarget>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpreadTarget {
    #[serde(rename = "Value")]
    pub value: String,
    #[serde(rename = "Percent")]
    pub percent: i64,
}

/// `restart` block. Durations in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RestartPolicy {
    #[serde(rename = "Attempts")]
    pub attempts: i64,
    #[serde(rename = "Interval")]
    pub interval: i64,
    #[serde(rename = "Delay")]
    pub delay: i64,
    #[serde(rename = "Mode")]
    pub mode: String,
}

pub const RESTART_MODE_FAIL: &str = "fail";
pub const RESTART_MODE_DELAY: &str = "delay";

/// `reschedule` block. Durations in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReschedulePolicy {
    #[serde(rename = "Attempts")]
    pub attempts: i64,
    #[serde(rename = "Interval")]
    pub interval: i64,
    #[serde(rename = "Delay")]
    pub delay: i64,
    #[serde(rename = "DelayFunction")]
    pub delay_function: String,
    #[serde(rename = "MaxDelay")]
    pub max_delay: i64,
    #[serde(rename = "Unlimited")]
    pub unlimited: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EphemeralDisk {
    #[serde(rename = "Sticky")]
    pub sticky: bool,
    #[serde(rename = "SizeMB")]
    pub size_mb: i64,
    #[serde(rename = "Migrate")]
    pub migrate: bool,
}

/// `logs` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogConfig {
    #[serde(rename = "MaxFiles")]
    pub max_files: i64,
    #[serde(rename = "MaxFileSizeMB")]
    pub max_file_size_mb: i64,
}

/// `update` block. Durations in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateStrategy {
    #[serde(rename = "Stagger")]
    pub stagger: i64,
    #[serde(rename = "MaxParallel")]
    pub max_parallel: i64,
    #[serde(rename = "HealthCheck")]
    pub health_check: String,
    #[serde(rename = "MinHealthyTime")]
    pub min_healthy_time: i64,
    #[serde(rename = "HealthyDeadline")]
    pub healthy_deadline: i64,
    #[serde(rename = "ProgressDeadline")]
    pub progress_deadline: i64,
    #[serde(rename = "AutoRevert")]
    pub auto_revert: bool,
    #[serde(rename = "AutoPromote")]
    pub auto_promote: bool,
    #[serde(rename = "Canary")]
    pub canary: i64,
}

/// `migrate` block. Durations in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MigrateStrategy {
    #[serde(rename = "MaxParallel")]
    pub max_parallel: i64,
    #[serde(rename = "HealthCheck")]
    pub health_check: String,
    #[serde(rename = "MinHealthyTime")]
    pub min_healthy_time: i64,
    #[serde(rename = "HealthyDeadline")]
    pub healthy_deadline: i64,
}
