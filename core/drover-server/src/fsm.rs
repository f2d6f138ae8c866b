//! The replicated state machine: Raft log entries and how they change the state store.
//!
//! Entries are versioned JSON (`{"V":1,"Type":"JobRegister",...}`): added fields are tolerated,
//! and an entry type or version this server does not know is an error, never skipped.

use std::sync::Arc;

use drover_state::StateStore;
use drover_structs::{AllocClientUpdate, Allocation, Evaluation, Job, Node};
use serde::{Deserialize, Serialize};

pub const LOG_ENTRY_VERSION: u32 = 1;

// Entries are built once per proposal and encoded right away; boxing the large variants would
// buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "Type")]
pub enum LogEntry {
    /// A job (new or a new version) and the evaluation it triggers.
    JobRegister {
        job: Job,
        evals: Vec<Evaluation>,
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
    /// The committed part of a plan. Placements carry no job: they run the job version named
    /// here, which the FSM links from the job versions table.
    PlanResults {
        job: Option<(String, String, u64)>,
        stopped: Vec<Allocation>,
        placed: Vec<Allocation>,
        evals: Vec<Evaluation>,
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
}

#[derive(Serialize)]
struct EnvelopeRef<'a> {
    #[serde(rename = "V")]
    v: u32,
    #[serde(flatten)]
    entry: &'a LogEntry,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "V")]
    v: u32,
    #[serde(flatten)]
    entry: serde_json::Value,
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
        let env: Envelope =
            serde_json::from_slice(data).map_err(|e| FsmError::Malformed(e.to_string()))?;
        if env.v != LOG_ENTRY_VERSION {
            return Err(FsmError::UnknownVersion(env.v));
        }
        serde_json::from_value(env.entry).map_err(|e| FsmError::Malformed(e.to_string()))
    }
}

/// Applies decoded entries to the state store.
pub fn apply_entry(state: &StateStore, index: u64, entry: LogEntry) -> Result<(), FsmError> {
    match entry {
        LogEntry::JobRegister { job, evals } => {
            state.upsert_job(index, job);
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
        LogEntry::PlanResults {
            job,
            stopped,
            placed,
            evals,
        } => {
            let job: Option<Arc<Job>> =
                job.and_then(|(ns, id, version)| state.snapshot().job_version(&ns, &id, version));
            state.upsert_plan_results(index, job, stopped, placed, evals);
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
    }
    Ok(())
}

/// The state machine Raft drives.
pub struct Fsm {
    pub state: Arc<StateStore>,
}

impl drover_raft::StateMachine for Fsm {
    fn apply(&mut self, index: u64, data: &[u8]) {
        let result = LogEntry::decode(data).and_then(|e| apply_entry(&self.state, index, e));
        if let Err(e) = result {
            // Deterministic on every server: the same entry fails the same way everywhere, so
            // the replicas stay equal. It is logged loudly rather than skipped silently.
            tracing::error!(index, error = %e, "log entry not applied");
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        self.state.snapshot().encode()
    }

    fn restore(&mut self, _index: u64, data: &[u8]) -> Result<(), String> {
        self.state.restore(data).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_entry_type_and_version_are_errors() {
        let e = LogEntry::decode(br#"{"V":1,"Type":"Bogus"}"#).unwrap_err();
        assert!(e.to_string().contains("Bogus"), "{e}");
        let e = LogEntry::decode(br#"{"V":7,"Type":"EvalDelete","ids":[]}"#).unwrap_err();
        assert!(matches!(e, FsmError::UnknownVersion(7)));
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
