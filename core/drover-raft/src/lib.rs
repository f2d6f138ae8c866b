//! drover-raft: a replicated log node driving the `raft` crate (tikv raft-rs), with the log,
//! hard state, conf state and snapshots in one redb file (`<data_dir>/raft/raft.redb`).
//!
//! Entries are opaque bytes: the server's FSM gives them meaning through `StateMachine`.
//! Proposals are group-committed: everything queued while the previous Ready was being
//! written shares the next redb transaction, so one fsync covers many entries.
//!
//! Snapshots for followers travel beside the Raft message: `RaftNode::outgoing_snapshot` reads
//! the payload piece by piece from redb, `RaftNode::incoming_snapshot` writes it piece by piece
//! on the receiving server, and only then is the message stepped. A transport carries both.
//! A state machine restores a snapshot as a stream (`SnapshotReader`, pieces read ahead on a
//! thread of its own), and is shown a run of committed entries before applying them
//! (`StateMachine::prepare`), so it can decode ahead.
//!
//! Membership: voters are raft ids; their RPC addresses (the `PeerBook`) travel in conf change
//! contexts and in snapshots, so every server knows them. Reads can be made linearizable on any
//! server with `read_index`. A `peers.json` beside the log forces a configuration after quorum
//! was lost, as in Nomad.
//!
//! Must not depend on any other Drover crate; the transport between servers is a trait
//! (`Transport`) implemented elsewhere.

mod config;
mod driver;
mod error;
mod log_bridge;
mod node;
mod peers;
mod snapshot_pieces;
mod store;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use config::{DEFAULT_LOG_MEMORY_BYTES, DEFAULT_MAX_ENTRY_BYTES, RaftConfig};
pub use error::RaftError;
pub use node::{
    Applied, DeferredSnapshot, LeaderState, NoTransport, RaftNode, RaftStatus, StateMachine,
    Transport,
};
pub use peers::{PEERS_JSON, PeerBook, PeerInfo};
pub use snapshot_pieces::{IncomingSnapshot, OutgoingSnapshot, SnapshotHandedOver};
pub use store::StorageStats;

/// A log entry's payload as `StateMachine::prepare` is given it: shared, not copied.
pub use bytes::Bytes;
/// The raft crate's message types, for transports.
pub use raft::eraftpb;
