//! The server side of Drover: Raft-replicated state, the eval broker, scheduler workers, the plan
//! applier, node heartbeats, and the endpoints that turn API requests into log entries.
//!
//! Must not depend on: HTTP (axum), the client, drivers or plugins. The HTTP layer and the client
//! call into [`Server`]; the server never calls out to them.

mod broker;
pub mod fsm;
mod heartbeat;
pub mod plan_apply;
mod sched_state;
mod server;
mod worker;

pub use broker::{BrokerError, BrokerStats, EvalBroker};
pub use server::{RegisterResult, Server, ServerConfig};

use drover_structs::MultiError;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The job failed validation; the text is Nomad's multi-error.
    #[error("{0}")]
    Validation(MultiError),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("no cluster leader")]
    NoLeader,
    #[error("raft: {0}")]
    Raft(#[from] drover_raft::RaftError),
    #[error("{0}")]
    Internal(String),
}
