//! drover-rpc: the RPC between Drover servers, and from clients to servers, over gRPC
//! (tonic) on the RPC port (4647 by default).
//!
//! `Raft` carries raft-rs messages (protobuf bytes inside our own message), `InstallSnapshot`
//! a raft snapshot message with its payload streamed in pieces beside it, and
//! `Call` carries one endpoint request as JSON (method name + body). This crate moves bytes
//! and knows nothing of what the endpoints mean: the server implements `drover_net::Handler`,
//! and [`GrpcNet`] implements the server's `drover_net::PeerNet` with what follows.
//!
//! - [`serve`] runs the service on a listener.
//! - [`RpcClient`] calls other servers, one cached HTTP/2 connection per address, and says
//!   whether a failed call may have been executed ([`RpcError::is_not_sent`]).
//! - [`RaftTransport`] implements `drover_raft::Transport`: a bounded queue and a sender task
//!   per peer, reconnecting with backoff and reporting unreachable peers to Raft.
//! - [`tunnel`]: byte streams over the RPC connection, so servers reach client agents over
//!   the sessions the clients opened, and clients reach servers' HTTP API.
//! - TLS (`tls`): with the agent's `tls { rpc = true }`, the port speaks only mutual TLS and
//!   every call knows what its caller's certificate says it is (`drover_net::PeerRole`):
//!   Raft wants a server certificate, sessions and tunnels a client's or a server's.
//! - [`Faults`] drops traffic to and from listed addresses, for partition tests
//!   (`DROVER_TEST_FAULTS=<file>`).
//!
//! Must not depend on the server, state, HTTP or client crates: only on drover-raft, whose
//! messages it carries, drover-net, whose traits it implements, and drover-tls, whose
//! configurations secure its connections.

mod client;
mod faults;
mod net;
mod service;
mod tls;
mod transport;
pub mod tunnel;

/// Generated from `proto/drover_rpc.proto`.
pub mod proto {
    tonic::include_proto!("drover.rpc.v1");
}

pub use client::{RpcClient, SessionLink};
pub use drover_net::{CallFuture, Handler, HandlerError, PeerRole, RpcError};
pub use faults::{FAULTS_ENV, Faults};
pub use net::GrpcNet;
pub use service::serve;
pub use transport::RaftTransport;
pub use tunnel::{TunnelAcceptor, TunnelError, TunnelHub, TunnelIo, TunnelTarget, keep_session};

/// Largest message either side accepts: operator snapshot restores travel whole (raft
/// snapshots go in pieces, `InstallSnapshot`).
pub const MAX_MESSAGE_BYTES: usize = 512 * 1024 * 1024;

#[cfg(test)]
mod tests;
