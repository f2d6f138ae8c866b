//! The replicated state machine: Raft log entries and how they change the state store.
//!
//! Entries are versioned JSON (`{"V":1,"Type":"JobRegister",...}`): added fields are tolerated,
//! and an entry type or version this server does not know is an error, never skipped.

use std::sync::Arc;

use drover_state::StateStore;
use drover_structs::{
    AllocClientUpdate, Allocation, Evaluation, Job, Node, serialize_allocations_as_held,
};
use serde::{Deserialize, Serialize};

/// 2: externally tagged entries (`{"V":2,"E":{"JobRegister":{...}}}`).
pub const LOG_ENTRY_VERSION: u32 = 2;

// Entries are built once per proposal and encoded right away; boxing the large variants would
// buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LogEntry {
    /// A job (new or a new version) and the evaluation it triggers. With `enforce_index`
    /// (Nomad's check-and-set), the entry applies only if the job's `JobModifyIndex` is still
    /// that value (0: the job must not exist); otherwise it changes nothing and the proposer is
    /// told why. Checked here, in log order, so two writers expecting the same index cannot
    /// both succeed.
    JobRegister {
        job: Job,
        evals: Vec<Evaluation>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        enforce_index: Option<u64>,
        /// The job file the version came from, when the client sent it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        submission: Option<drover_structs::JobSubmission>,
    },
    /// `purge` removes the job; otherwise it was already re-registered with `Stop` set.
    JobPurge {
        namespace: String,
        job_id: String,
        evals: Vec<Evaluation>,
    },
    EvalUpdate {
        evals: Vec<Evaluation>,
    },
    EvalDelete {
        ids: Vec<String>,
    },
    /// Garbage collection (Nomad's eval reap): evaluations and the allocations their clients
    /// ended (the state keeps any other allocation named).
    GcReap {
        evals: Vec<String>,
        allocs: Vec<String>,
    },
    /// The committed part of a plan. Placements carry no job: they run the job version named
    /// here, which the FSM links from the job versions table.
    /// Allocations are written as held (`AllocationAsHeld`): decoding gives back exactly what
    /// was encoded, which lets the leader apply its own entry without decoding it.
    PlanResults {
        job: Option<(String, String, u64)>,
        #[serde(serialize_with = "serialize_allocations_as_held")]
        stopped: Vec<Allocation>,
        #[serde(serialize_with = "serialize_allocations_as_held")]
        placed: Vec<Allocation>,
        evals: Vec<Evaluation>,
        /// The deployment the plan created, stored before its placements.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deployment: Option<drover_structs::Deployment>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        deployment_updates: Vec<drover_structs::DeploymentStatusUpdate>,
        /// Unix nanoseconds, the leader's clock when it committed the plan: the allocations'
        /// `ModifyTime` (0 in entries written before it was carried: the applying server's).
        #[serde(default, skip_serializing_if = "is_zero")]
        at: i64,
    },
    /// Several plans' committed parts in one entry (the plan applier batches what queued up
    /// while the previous entry committed); applied in order, as separate `PlanResults` would be.
    PlanResultsBatch {
        plans: Vec<PlanResultsPart>,
    },
    AllocClientUpdate {
        updates: Vec<AllocClientUpdate>,
        evals: Vec<Evaluation>,
    },
    AllocDesiredUpdate {
        ids: Vec<String>,
        desired_status: String,
        desired_description: String,
        evals: Vec<Evaluation>,
    },
    NodeRegister {
        node: Node,
    },
    NodeStatusUpdate {
        node_id: String,
        status: String,
        updated_at: i64,
        evals: Vec<Evaluation>,
    },
    NodeEligibility {
        node_id: String,
        eligibility: String,
    },
    /// Nodes purged by an operator (`PUT /v1/node/:id/purge`), with the evaluations of the
    /// jobs that had allocations on them; an unknown node refuses the entry.
    NodeDeregister {
        node_ids: Vec<String>,
        evals: Vec<Evaluation>,
    },
    /// Starts (`strategy` set, Nomad's `DrainStrategy` JSON) or ends a node's drain.
    NodeDrain {
        node_id: String,
        strategy: Option<serde_json::Value>,
        mark_eligible: bool,
        /// The node event recorded with it ("Node drain strategy set", ...).
        event: String,
        /// Unix nanoseconds on the leader: the event's time (0 in older entries: the
        /// applying server's clock).
        #[serde(default, skip_serializing_if = "is_zero")]
        at: i64,
    },
    /// The drainer's migrations: allocations marked to move, and their jobs' evaluations.
    AllocMigrate {
        ids: Vec<String>,
        evals: Vec<Evaluation>,
    },
    /// The operator's scheduler configuration; with `cas`, only if the stored `ModifyIndex`
    /// is still that value (0: none stored).
    SchedulerConfigUpdate {
        config: drover_structs::SchedulerConfiguration,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cas: Option<u64>,
    },
    /// A scaling event of a job's group (`job scale`).
    ScalingEvent {
        namespace: String,
        job_id: String,
        group: String,
        event: drover_structs::ScalingEvent,
    },
    /// Ended deployments the garbage collector removes.
    DeploymentDelete {
        ids: Vec<String>,
    },
    /// Marks one version of a job stable or not (`PUT /v1/job/:id/stable`).
    JobStability {
        namespace: String,
        job_id: String,
        version: u64,
        stable: bool,
    },
    /// Failed allocations marked to be rescheduled now (`job eval -force-reschedule`), with
    /// the job's evaluation.
    AllocForceReschedule {
        ids: Vec<String>,
        evals: Vec<Evaluation>,
    },
    /// Deployment status changes, rollbacks and manual allocation health (see
    /// `crate::deployments`).
    Deployment(crate::deployments::DeploymentWrite),
    /// CSI volumes and plugins (see `crate::csi`).
    Csi(crate::csi::CsiEntry),
    /// The mesh CA and intentions (see `crate::mesh`).
    Mesh(crate::mesh::MeshEntry),
    /// Namespaces created or updated (validated by the leader).
    NamespaceUpsert {
        namespaces: Vec<drover_structs::Namespace>,
    },
    /// Namespaces deleted (the leader checked that nothing live is left in them).
    NamespaceDelete {
        names: Vec<String>,
    },
    /// ACL policies created or updated (their rules parsed by the leader).
    AclPolicyUpsert {
        policies: Vec<drover_structs::AclPolicy>,
    },
    AclPolicyDelete {
        names: Vec<String>,
    },
    /// ACL tokens created or updated (ids, secrets and times set by the leader).
    AclTokenUpsert {
        tokens: Vec<drover_structs::AclToken>,
    },
    AclTokenDelete {
        accessors: Vec<String>,
    },
    /// The first management token; the bootstrap is done at this entry's index.
    AclBootstrap {
        token: drover_structs::AclToken,
    },
    /// A variable set or deleted (validated by the leader; check-and-set decided here). `at`
    /// is the leader's clock, unix nanoseconds.
    VariableWrite {
        variable: drover_structs::Variable,
        op: drover_structs::VariableWrite,
        at: i64,
    },
}

/// On the wire: `{"V":1,"E":{"JobRegister":{...}}}`. The entry is externally tagged so that
/// decoding streams straight into the types (an internally tagged enum buffers every entry into
/// an intermediate tree first, which dominated the cost of large plan entries).
#[derive(Serialize)]
struct EnvelopeRef<'a> {
    #[serde(rename = "V")]
    v: u32,
    #[serde(rename = "E")]
    entry: &'a LogEntry,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "V")]
    v: u32,
    #[serde(rename = "E")]
    entry: LogEntry,
}

/// Only the version, to explain an entry that failed to decode.
#[derive(Deserialize)]
struct VersionOnly {
    #[serde(rename = "V")]
    v: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum FsmError {
    #[error(
        "log entry version {0} is not supported (this server applies version {LOG_ENTRY_VERSION})"
    )]
    UnknownVersion(u32),
    #[error("log entry cannot be decoded: {0}")]
    Malformed(String),
    #[error("log entry at index {index} failed to apply: {message}")]
    Apply { index: u64, message: String },
    /// A condition of the entry did not hold (check-and-set); nothing was written. Not a
    /// fault: the proposer gets the message as the entry's response.
    #[error("{0}")]
    Rejected(String),
}

/// A log entry that replaces the whole state (operator snapshot restore) is this prefix and
/// then a state store snapshot, not JSON: the payload is large and already encoded.
pub const RESTORE_ENTRY_MAGIC: &[u8] = b"DROVER-RESTORE-1\n";

/// The entry that replaces the whole state with `snapshot` (a state store encoding).
pub fn restore_entry(snapshot: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(RESTORE_ENTRY_MAGIC.len() + snapshot.len());
    entry.extend_from_slice(RESTORE_ENTRY_MAGIC);
    entry.extend_from_slice(snapshot);
    entry
}

/// The message Nomad answers a failed check-and-set with.
pub fn enforce_index_error(want: u64, have: u64) -> String {
    if want == 0 {
        format!("Enforcing job modify index {want}: job already exists")
    } else {
        format!(
            "Enforcing job modify index {want}: job exists with conflicting job modify index: {have}"
        )
    }
}

/// One plan's committed part inside a [`LogEntry::PlanResultsBatch`]; the fields mean what
/// they mean in [`LogEntry::PlanResults`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanResultsPart {
    pub job: Option<(String, String, u64)>,
    #[serde(serialize_with = "serialize_allocations_as_held")]
    pub stopped: Vec<Allocation>,
    #[serde(serialize_with = "serialize_allocations_as_held")]
    pub placed: Vec<Allocation>,
    pub evals: Vec<Evaluation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<drover_structs::Deployment>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployment_updates: Vec<drover_structs::DeploymentStatusUpdate>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub at: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// The time a plan entry carries, or (older entries) the applying server's clock.
fn plan_time(at: i64) -> i64 {
    if at > 0 {
        at
    } else {
        drover_structs::time::now_nanos()
    }
}

impl LogEntry {
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain data into a Vec cannot fail.
        serde_json::to_vec(&EnvelopeRef {
            v: LOG_ENTRY_VERSION,
            entry: self,
        })
        .unwrap_or_default()
    }

    pub fn decode(data: &[u8]) -> Result<LogEntry, FsmError> {
        match serde_json::from_slice::<Envelope>(data) {
            Ok(env) if env.v == LOG_ENTRY_VERSION => Ok(env.entry),
            Ok(env) => Err(FsmError::UnknownVersion(env.v)),
            Err(e) => match serde_json::from_slice::<VersionOnly>(data) {
                Ok(v) if v.v != LOG_ENTRY_VERSION => Err(FsmError::UnknownVersion(v.v)),
                _ => Err(FsmError::Malformed(e.to_string())),
            },
        }
    }
}

/// Applies decoded entries to the state store.
pub fn apply_entry(state: &StateStore, index: u64, entry: LogEntry) -> Result<(), FsmError> {
    match entry {
        LogEntry::JobRegister {
            job,
            evals,
            enforce_index,
            submission,
        } => {
            if let Some(want) = enforce_index {
                let have = state
                    .snapshot()
                    .job(&job.namespace, &job.id)
                    .map(|j| j.job_modify_index)
                    .unwrap_or(0);
                if want != have {
                    return Err(FsmError::Rejected(enforce_index_error(want, have)));
                }
            }
            state.upsert_job_with_source(index, job, submission);
            if !evals.is_empty() {
                state.upsert_evals(index, evals);
            }
        }
        LogEntry::JobPurge {
            namespace,
            job_id,
            evals,
        } => {
            // Purging a job that is already gone is not an error for the log: the endpoint
            // checked, and a duplicate entry must still apply deterministically.
            let _ = state.delete_job(index, &namespace, &job_id);
            if !evals.is_empty() {
                state.upsert_evals(index, evals);
            }
        }
        LogEntry::EvalUpdate { evals } => state.upsert_evals(index, evals),
        LogEntry::EvalDelete { ids } => state.delete_evals(index, &ids),
        LogEntry::GcReap { evals, allocs } => state.reap(index, &evals, &allocs),
        LogEntry::PlanResults {
            job,
            stopped,
            placed,
            evals,
            deployment,
            deployment_updates,
            at,
        } => {
            let job: Option<Arc<Job>> =
                job.and_then(|(ns, id, version)| state.snapshot().job_version(&ns, &id, version));
            let deployments = drover_state::PlanDeploymentChanges {
                deployment,
                updates: deployment_updates,
            };
            let at = plan_time(at);
            state.upsert_plan_results_with(index, job, stopped, placed, evals, deployments, at);
        }
        LogEntry::PlanResultsBatch { plans } => {
            for p in plans {
                let job: Option<Arc<Job>> = p
                    .job
                    .and_then(|(ns, id, version)| state.snapshot().job_version(&ns, &id, version));
                let deployments = drover_state::PlanDeploymentChanges {
                    deployment: p.deployment,
                    updates: p.deployment_updates,
                };
                state.upsert_plan_results_with(
                    index,
                    job,
                    p.stopped,
                    p.placed,
                    p.evals,
                    deployments,
                    plan_time(p.at),
                );
            }
        }
        LogEntry::AllocClientUpdate { updates, evals } => {
            state.update_allocs_from_client(index, updates);
            if !evals.is_empty() {
                state.upsert_evals(index, evals);
            }
        }
        LogEntry::AllocDesiredUpdate {
            ids,
            desired_status,
            desired_description,
            evals,
        } => {
            state.update_allocs_desired(index, &ids, &desired_status, &desired_description);
            if !evals.is_empty() {
                state.upsert_evals(index, evals);
            }
        }
        LogEntry::NodeRegister { node } => state.upsert_node(index, node),
        LogEntry::NodeStatusUpdate {
            node_id,
            status,
            updated_at,
            evals,
        } => {
            state
                .update_node_status(index, &node_id, &status, updated_at)
                .map_err(|e| FsmError::Apply {
                    index,
                    message: e.to_string(),
                })?;
            if !evals.is_empty() {
                state.upsert_evals(index, evals);
            }
        }
        LogEntry::NodeEligibility {
            node_id,
            eligibility,
        } => state
            .update_node_eligibility(index, &node_id, &eligibility)
            .map_err(|e| FsmError::Apply {
                index,
                message: e.to_string(),
            })?,
        LogEntry::NodeDeregister { node_ids, evals } => state
            .delete_nodes(index, &node_ids, evals)
            .map_err(|e| FsmError::Rejected(e.to_string()))?,
        LogEntry::NodeDrain {
            node_id,
            strategy,
            mark_eligible,
            event,
            at,
        } => state
            .update_node_drain(
                index,
                &node_id,
                strategy,
                mark_eligible,
                &event,
                plan_time(at),
            )
            .map_err(|e| FsmError::Apply {
                index,
                message: e.to_string(),
            })?,
        LogEntry::AllocMigrate { ids, evals } => {
            state.mark_allocs_for_migration(index, &ids, evals)
        }
        LogEntry::SchedulerConfigUpdate { config, cas } => {
            if !state.set_scheduler_config(index, config, cas) {
                return Err(FsmError::Rejected(crate::sched_config::CAS_REJECTED.into()));
            }
        }
        LogEntry::DeploymentDelete { ids } => state.delete_deployments(index, &ids),
        LogEntry::NamespaceUpsert { namespaces } => state.upsert_namespaces(index, namespaces),
        LogEntry::NamespaceDelete { names } => state.delete_namespaces(index, &names),
        LogEntry::AclPolicyUpsert { policies } => state.upsert_acl_policies(index, policies),
        LogEntry::AclPolicyDelete { names } => state.delete_acl_policies(index, &names),
        LogEntry::AclTokenUpsert { tokens } => state.upsert_acl_tokens(index, tokens),
        LogEntry::AclTokenDelete { accessors } => state.delete_acl_tokens(index, &accessors),
        LogEntry::AclBootstrap { token } => state.acl_bootstrap(index, token),
        LogEntry::VariableWrite { variable, op, at } => {
            if !state.write_variable(index, at, variable, op) {
                return Err(FsmError::Rejected(crate::variables::CAS_REJECTED.into()));
            }
        }
        LogEntry::ScalingEvent {
            namespace,
            job_id,
            group,
            event,
        } => state.add_scaling_event(index, &namespace, &job_id, &group, event),
        LogEntry::JobStability {
            namespace,
            job_id,
            version,
            stable,
        } => state
            .set_job_stability(index, &namespace, &job_id, version, stable)
            .map_err(|e| FsmError::Rejected(e.to_string()))?,
        LogEntry::AllocForceReschedule { ids, evals } => {
            state.mark_allocs_force_reschedule(index, &ids, evals)
        }
        LogEntry::Deployment(w) => {
            if let Some(job) = w.rollback {
                state.upsert_job(index, job);
            }
            if let Some(h) = &w.alloc_health {
                state.set_alloc_deployment_health(index, &h.healthy, &h.unhealthy, &h.timestamp);
            }
            if let Some(p) = &w.promote {
                state.promote_deployment(index, &p.deployment_id, &p.groups, p.at);
            }
            state.upsert_deployments(index, Vec::new(), &w.updates, w.evals);
        }
        LogEntry::Csi(entry) => crate::csi::apply_entry(state, index, entry)?,
        LogEntry::Mesh(entry) => crate::mesh::apply_entry(state, index, entry)?,
    }
    Ok(())
}

/// The state machine Raft drives.
pub struct Fsm {
    pub state: Arc<StateStore>,
    /// Entries this server proposed, already decoded (see `crate::proposed`).
    pub(crate) proposed: Arc<crate::proposed::ProposedEntries>,
    /// Where the changes of applied entries go (`/v1/event/stream`).
    pub(crate) events: Arc<crate::events::EventBroker>,
    /// Entries of a long run (replay, catch-up) decoded while earlier ones apply.
    pub(crate) decode_ahead: crate::decode_ahead::DecodeAhead,
}

impl drover_raft::StateMachine for Fsm {
    /// Answers an empty response when the entry applied, else the reason it did not.
    fn apply(&mut self, index: u64, data: &[u8]) -> Vec<u8> {
        if let Some(snapshot) = data.strip_prefix(RESTORE_ENTRY_MAGIC) {
            return match self.state.restore(snapshot) {
                Ok(()) => {
                    // The restored tables carry their own (older) indexes; an empty write at
                    // this entry's index moves the store's index past every earlier one, so
                    // waiters on "applied up to X" are not left behind.
                    self.state.upsert_evals(index, Vec::new());
                    tracing::warn!(index, "state replaced by an operator snapshot restore");
                    Vec::new()
                }
                Err(e) => {
                    tracing::error!(index, error = %e, "snapshot restore entry not applied");
                    format!("snapshot restore failed: {e}").into_bytes()
                }
            };
        }
        let entry = match self.proposed.take(data) {
            Some(entry) => Ok(entry),
            None => match self.decode_ahead.take(index, data) {
                Some(decoded) => decoded,
                None => LogEntry::decode(data),
            },
        };
        let result = entry.and_then(|e| {
            // What the entry touches is read before it is consumed; the events themselves
            // after, from the state it left, and only for an entry that applied.
            let touched = if self.events.enabled() {
                crate::events::EntryEvents::of(&e, || self.state.snapshot())
            } else {
                None
            };
            apply_entry(&self.state, index, e)?;
            if let Some(touched) = touched {
                if self.decode_ahead.running() {
                    self.events
                        .publish_built(index, touched, &self.state.snapshot());
                } else {
                    self.events
                        .publish_applied(index, touched, self.state.snapshot());
                }
            }
            Ok(())
        });
        match result {
            Ok(()) => Vec::new(),
            Err(FsmError::Rejected(why)) => {
                tracing::debug!(index, reason = %why, "log entry refused by its condition");
                why.into_bytes()
            }
            Err(e) => {
                // Deterministic on every server: the same entry fails the same way everywhere,
                // so the replicas stay equal. It is logged loudly rather than skipped silently.
                tracing::error!(index, error = %e, "log entry not applied");
                e.to_string().into_bytes()
            }
        }
    }

    /// Entries this server proposed are decoded already, and a restore entry is not JSON:
    /// the rest are decoded ahead (`crate::decode_ahead`).
    fn prepare(&mut self, entries: &[(u64, drover_raft::Bytes)]) {
        // Most Readies on a leader are a few entries: not worth comparing with the kept ones.
        if entries.len() < crate::decode_ahead::MIN_ENTRIES {
            self.decode_ahead.start(Vec::new());
            return;
        }
        let to_decode = entries
            .iter()
            .filter(|(_, data)| {
                !data.starts_with(RESTORE_ENTRY_MAGIC) && !self.proposed.holds(data)
            })
            .cloned()
            .collect();
        self.decode_ahead.start(to_decode);
    }

    fn snapshot(&self) -> Vec<u8> {
        self.state.snapshot().encode()
    }

    /// The state store's snapshots cost nothing to take and stay as they were while the store
    /// moves on: a million allocations are encoded (gigabytes, tens of seconds) without
    /// holding up the log, and written into the Raft store piece by piece as they are encoded.
    fn snapshot_deferred(&self) -> Option<drover_raft::DeferredSnapshot> {
        let snap = self.state.snapshot();
        Some(Box::new(move |out| snap.encode_to(out)))
    }

    fn restore(&mut self, _index: u64, data: &mut dyn std::io::Read) -> Result<(), String> {
        self.state.restore_from(data).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_entry_type_and_version_are_errors() {
        let e = LogEntry::decode(br#"{"V":2,"E":{"Bogus":{}}}"#).unwrap_err();
        assert!(e.to_string().contains("Bogus"), "{e}");
        let e = LogEntry::decode(br#"{"V":7,"E":{"EvalDelete":{"ids":[]}}}"#).unwrap_err();
        assert!(matches!(e, FsmError::UnknownVersion(7)));
    }

    #[test]
    fn scheduler_config_entry_applies_and_a_stale_check_and_set_is_refused() {
        let state = StateStore::new();
        let spread = drover_structs::SchedulerConfiguration {
            scheduler_algorithm: "spread".into(),
            ..Default::default()
        };
        let entry = LogEntry::SchedulerConfigUpdate {
            config: spread.clone(),
            cas: Some(0),
        };
        let decoded = LogEntry::decode(&entry.encode()).unwrap();
        apply_entry(&state, 7, decoded).unwrap();
        let stored = state.snapshot().scheduler_config().unwrap();
        assert_eq!(
            (stored.scheduler_algorithm.as_str(), stored.modify_index),
            ("spread", 7)
        );

        let stale = LogEntry::SchedulerConfigUpdate {
            config: drover_structs::SchedulerConfiguration::default(),
            cas: Some(3),
        };
        let err = apply_entry(&state, 8, stale).unwrap_err();
        assert!(matches!(err, FsmError::Rejected(ref m) if m == crate::sched_config::CAS_REJECTED));
        assert_eq!(
            state
                .snapshot()
                .scheduler_config()
                .unwrap()
                .scheduler_algorithm,
            "spread"
        );
        // Without check-and-set an empty algorithm is stored as binpack.
        let plain = LogEntry::SchedulerConfigUpdate {
            config: drover_structs::SchedulerConfiguration::default(),
            cas: None,
        };
        apply_entry(&state, 9, plain).unwrap();
        assert_eq!(
            state
                .snapshot()
                .scheduler_config()
                .unwrap()
                .scheduler_algorithm,
            "binpack"
        );
    }

    #[test]
    fn entries_round_trip() {
        let e = LogEntry::EvalDelete {
            ids: vec!["a".into()],
        };
        let d = LogEntry::decode(&e.encode()).unwrap();
        assert!(matches!(d, LogEntry::EvalDelete { ids } if ids == vec!["a".to_string()]));
    }
}
