//! Settings of one Raft node.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::RaftError;
use crate::peers::{PEERS_JSON, PeerBook};

/// Default cap on one proposal's size. Large enough for big job specs, small enough that one
/// entry fits in one transport message (gRPC's default limit is 4 MiB; the transport raises it).
pub const DEFAULT_MAX_ENTRY_BYTES: usize = 8 * 1024 * 1024;

/// Settings of one Raft node. `RaftConfig::new` fills in the timing and batching defaults.
#[derive(Debug, Clone)]
pub struct RaftConfig {
    /// This node's Raft id. Must be non-zero (0 means "none" to the raft crate).
    pub id: u64,
    /// The agent's data dir; the log lives in `<data_dir>/raft/raft.redb`.
    pub data_dir: PathBuf,
    /// Voters written into a fresh data dir. Ignored once the data dir holds a configuration.
    /// `[id]` is a single-voter cluster (the dev agent); empty means "wait to be added".
    pub initial_voters: Vec<u64>,
    /// Where the initial voters are reached, written with them into a fresh data dir.
    pub initial_peers: PeerBook,
    /// Length of one Raft tick.
    pub tick_interval: Duration,
    /// Ticks without a heartbeat before a follower campaigns (randomized up to 2x by raft).
    pub election_tick: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_tick: usize,
    /// Take a state machine snapshot and compact the log every this many applied entries.
    /// 0 disables snapshots.
    pub snapshot_threshold: u64,
    /// Most commands (proposals and inbound messages) folded into one Ready, so one fsync.
    pub max_batch: usize,
    /// Proposals larger than this are refused with `RaftError::EntryTooLarge`.
    pub max_entry_bytes: usize,
    /// Payload bytes of applied log entries kept in memory, newest first, for followers that
    /// are a little behind; older applied payloads are read back from redb when needed.
    pub log_memory_bytes: u64,
}

/// Default `log_memory_bytes`: a few plan entries of a thousand allocations.
pub const DEFAULT_LOG_MEMORY_BYTES: u64 = 16 * 1024 * 1024;

impl RaftConfig {
    /// A config with defaults close to Nomad's: 100 ms ticks, election after 10 ticks
    /// (1-2 s), heartbeats every 2 ticks, a snapshot every 8192 entries.
    pub fn new(id: u64, data_dir: impl Into<PathBuf>, initial_voters: Vec<u64>) -> RaftConfig {
        RaftConfig {
            id,
            data_dir: data_dir.into(),
            initial_voters,
            initial_peers: PeerBook::new(),
            tick_interval: Duration::from_millis(100),
            election_tick: 10,
            heartbeat_tick: 2,
            snapshot_threshold: 8192,
            max_batch: 4096,
            max_entry_bytes: DEFAULT_MAX_ENTRY_BYTES,
            log_memory_bytes: DEFAULT_LOG_MEMORY_BYTES,
        }
    }

    /// Path of the redb file holding log, hard state, conf state and snapshot.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("raft").join("raft.redb")
    }

    /// Path of Nomad's recovery file: when present at start, its configuration replaces the
    /// stored one (see `RaftNode::start`).
    pub fn recovery_path(&self) -> PathBuf {
        self.data_dir.join("raft").join(PEERS_JSON)
    }

    pub(crate) fn validate(&self) -> Result<(), RaftError> {
        let invalid = |why: &str| Err(RaftError::InvalidConfig(why.to_string()));
        if self.id == 0 {
            return invalid("id must be non-zero");
        }
        if self.initial_voters.contains(&0) {
            return invalid("initial_voters must not contain 0");
        }
        if self.tick_interval.is_zero() {
            return invalid("tick_interval must be positive");
        }
        if self.heartbeat_tick == 0 || self.election_tick <= self.heartbeat_tick {
            return invalid("need 0 < heartbeat_tick < election_tick");
        }
        if self.max_batch == 0 {
            return invalid("max_batch must be positive");
        }
        if self.max_entry_bytes == 0 {
            return invalid("max_entry_bytes must be positive");
        }
        Ok(())
    }
}
