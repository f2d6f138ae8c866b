//! The state store: every table of cluster state in memory, as persistent (copy-on-write) maps so
//! that a snapshot for a scheduler or a reader is O(1) and never blocks writers. Every table keeps
//! the Raft index of its last change; blocking queries wait on those indexes.
//!
//! Only the FSM writes, always with the Raft index of the entry it applies. The store knows
//! nothing of Raft, the network or the scheduler.
//!
//! Must not depend on: Raft, the server, HTTP, drivers. Only drover-structs, imbl, serde and
//! tokio's `sync` (for change notification).

mod acl;
mod children;
mod csi;
mod deployments;
mod mesh;
mod namespaces;
mod periodic;
mod scheduler_config;
mod snapshot_codec;
mod store;
mod tables;
mod variables;

pub use csi::{CsiStateError, CsiVolumeFilter};
pub use snapshot_codec::{SNAPSHOT_VERSION, SnapshotError};
pub use store::{PlanDeploymentChanges, StateStore};
pub use tables::{StateSnapshot, Table};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("job {namespace}/{id} not found")]
    JobNotFound { namespace: String, id: String },
    #[error("node {0} not found")]
    NodeNotFound(String),
    #[error("{0}")]
    Invalid(String),
}
