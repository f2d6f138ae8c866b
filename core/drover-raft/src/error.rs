//! Errors of the Raft node.

use std::time::Duration;

/// Everything that can go wrong starting a node or proposing to it.
#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    /// Proposals go to the leader; `leader_hint` is the leader this node knows of, if any.
    #[error("node is not the leader (leader: {leader_hint:?})")]
    NotLeader { leader_hint: Option<u64> },
    /// The node is stopping or stopped; the proposal was not appended.
    #[error("raft node is shutting down")]
    ShuttingDown,
    #[error("entry of {size} bytes exceeds the limit of {max} bytes")]
    EntryTooLarge { size: usize, max: usize },
    /// Empty normal entries are raft's own no-ops (a new leader's first entry), so the state
    /// machine never sees them; an empty proposal would be indistinguishable.
    #[error("empty entries are reserved for raft's own no-op entries")]
    EmptyEntry,
    /// The node stopped being leader after appending the entry and before applying it. The entry
    /// may still be committed by the next leader: the outcome is unknown to the caller.
    #[error(
        "leadership lost before the entry at index {index} was applied; it may or may not commit"
    )]
    LeadershipLost { index: u64 },
    /// Raft refused or overwrote the proposal (e.g. a leadership transfer is in progress, or the
    /// index was taken by another leader's entry).
    #[error("proposal dropped: {reason}")]
    ProposalDropped { reason: String },
    #[error("no leader known after waiting {waited:?}")]
    NoLeader { waited: Duration },
    #[error("invalid raft config: {0}")]
    InvalidConfig(String),
    #[error("raft storage: {context}: {source}")]
    Storage {
        context: &'static str,
        #[source]
        source: redb::Error,
    },
    #[error("raft storage: cannot create {path}: {source}")]
    CreateDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The redb file opened but its content breaks an invariant (undecodable record, a gap in
    /// the log, an unknown format version).
    #[error("corrupt raft storage: {0}")]
    CorruptStorage(String),
    /// The state machine refused a snapshot (corrupt or unknown payload).
    #[error("state machine cannot restore the snapshot at index {index}: {reason}")]
    SnapshotRestore { index: u64, reason: String },
    /// A snapshot could not be sent to or received from another server (replaced meanwhile,
    /// another one arriving, cut short); the leader sends it again.
    #[error("snapshot transfer: {0}")]
    SnapshotTransfer(String),
    /// `peers.json` is present but unusable; nothing was changed.
    #[error("raft recovery from peers.json: {0}")]
    Recovery(String),
    #[error("encoding a raft record: {0}")]
    Encode(#[source] protobuf::ProtobufError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// The driver stopped on a fatal error (storage failure, refused snapshot, panic).
    #[error("raft driver stopped: {reason}")]
    Stopped { reason: String },
}

impl RaftError {
    pub(crate) fn from_codec(e: protobuf::ProtobufError) -> RaftError {
        RaftError::Encode(e)
    }

    pub(crate) fn storage(context: &'static str, source: impl Into<redb::Error>) -> RaftError {
        RaftError::Storage {
            context,
            source: source.into(),
        }
    }
}
