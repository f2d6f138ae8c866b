//! The server side of Drover: Raft-replicated state, the eval broker, scheduler workers, the plan
//! applier, node heartbeats, and the endpoints that turn API requests into log entries.
//!
//! In a cluster, writes run on the leader (followers forward them over the network of
//! `drover-net`'s traits, which drover-rpc implements with gRPC), reads run
//! anywhere after a read barrier, and servers find each other with `bootstrap_expect` and
//! `join` (see `cluster`).
//!
//! Must not depend on: HTTP (axum), the client, drivers or plugins. The HTTP layer and the client
//! call into [`Server`]; the server never calls out to them.

pub mod acl;
mod broker;
mod cluster;
#[cfg(test)]
mod cluster_tests;
pub mod csi;
mod decode_ahead;
mod deployment_watcher;
pub mod deployments;
mod dispatch;
pub mod drainer;
pub mod events;
pub mod federation;
pub mod fsm;
pub mod garbage;
mod heartbeat;
#[cfg(test)]
mod heartbeat_tests;
mod identity;
pub mod job_plan;
pub mod job_versions;
mod leader_task;
mod leadership;
mod members;
pub mod mesh;
pub mod metrics;
pub mod multiregion;
pub mod namespaces;
mod node_ops;
mod operator;
mod periodic;
pub mod plan_apply;
mod proposed;
mod routing;
pub mod rpc;
pub mod scaling;
mod sched_config;
mod sched_state;
mod server;
pub mod service_catalog;
pub mod snapshot_archive;
#[cfg(test)]
mod test_server;
mod unblock;
pub mod unsupported;
pub mod variables;
mod volume_watcher;
mod worker;

pub use broker::{BrokerError, BrokerStats, EvalBroker};
pub use dispatch::{DispatchRequest, DispatchResult};
pub use members::{JoinTargets, Member, MemberReport};
pub use node_ops::NodeEvalResult;
pub use operator::{RaftMember, StateDigest};
pub use periodic::{NextLaunch, next_periodic_launch};
pub use routing::RPC_HOLD_TIMEOUT;
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
    /// ACLs refuse the request (Nomad's 403: "Permission denied", "ACL token not found").
    #[error("{0}")]
    Forbidden(String),
    #[error("no cluster leader")]
    NoLeader,
    #[error("raft: {0}")]
    Raft(#[from] drover_raft::RaftError),
    #[error("{0}")]
    Internal(String),
}

impl ServerError {
    /// True when the request certainly was not executed (it never reached the log), so it
    /// may be sent again, to the leader.
    pub fn not_executed(&self) -> bool {
        use drover_raft::RaftError;
        matches!(
            self,
            ServerError::Raft(
                RaftError::NotLeader { .. }
                    | RaftError::ProposalDropped { .. }
                    | RaftError::ShuttingDown
            )
        )
    }
}
