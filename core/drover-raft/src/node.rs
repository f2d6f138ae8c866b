//! The public face of a Raft node: the `RaftNode` handle and the traits its user implements.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use raft::eraftpb::{ConfChangeV2, Message};
use tokio::sync::{oneshot, watch};

use crate::config::RaftConfig;
use crate::driver::{Command, Driver};
use crate::error::RaftError;
use crate::store::StorageStats;

/// The replicated state machine. Every server applies the same entries in the same order.
pub trait StateMachine: Send + 'static {
    /// Apply one committed normal entry. Deterministic. Called in log order exactly once per
    /// entry per process lifetime (after a restart, entries after the newest snapshot are
    /// re-applied to a fresh state machine).
    fn apply(&mut self, index: u64, data: &[u8]);
    /// Serialize the whole state (taken at the last applied index). Also called once on the
    /// fresh state machine when a new cluster is bootstrapped: that snapshot, at index 1,
    /// carries the first configuration to servers added later.
    fn snapshot(&self) -> Vec<u8>;
    /// Replace the whole state with a snapshot's data. A payload it cannot read (corrupt, or
    /// an unknown version) is an error, never a silently empty state.
    fn restore(&mut self, index: u64, data: &[u8]) -> Result<(), String>;
}

/// Carries Raft messages to other servers. Called from the driver thread, so it must not
/// block: queue and return. Lost messages are fine (Raft retries), and a transport that
/// notices a dead peer may tell the node with `RaftNode::report_unreachable`.
pub trait Transport: Send + Sync + 'static {
    fn send(&self, msgs: Vec<Message>);
}

/// Transport of a single-voter cluster: there is nobody to talk to.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTransport;

impl Transport for NoTransport {
    fn send(&self, msgs: Vec<Message>) {
        if !msgs.is_empty() {
            tracing::debug!(count = msgs.len(), "no transport: dropping raft messages");
        }
    }
}

/// Who leads, as seen by this node. Published on `RaftNode::leadership` whenever a field
/// changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaderState {
    pub term: u64,
    /// The leader this node knows of, if any (itself included).
    pub leader_id: Option<u64>,
    /// This node leads AND has applied every entry committed before its term (Nomad's
    /// leadership barrier), so leader-only work started on this signal sees the whole state.
    /// `RaftStatus::is_leader` is the bare Raft role, which turns true a little earlier.
    pub is_leader: bool,
}

/// A point-in-time view of the node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RaftStatus {
    pub id: u64,
    pub leader_id: Option<u64>,
    pub term: u64,
    /// The Raft role is leader (see `LeaderState::is_leader` for the barrier-gated signal).
    pub is_leader: bool,
    pub commit_index: u64,
    pub applied_index: u64,
    pub first_log_index: u64,
    pub last_log_index: u64,
    /// Index of the newest snapshot (0: none yet).
    pub snapshot_index: u64,
    /// Voters of the applied configuration, sorted.
    pub voters: Vec<u64>,
    /// redb write transactions so far: far fewer than entries, thanks to group commit.
    pub storage: StorageStats,
    /// Set once the driver stopped: why.
    pub stopped: Option<String>,
}

/// What the driver thread shares with the handles.
pub(crate) struct Published {
    status: Mutex<RaftStatus>,
    leadership: watch::Sender<LeaderState>,
}

impl Published {
    pub(crate) fn new(status: RaftStatus) -> Published {
        let (leadership, _) = watch::channel(LeaderState::default());
        Published {
            status: Mutex::new(status),
            leadership,
        }
    }

    pub(crate) fn status(&self) -> MutexGuard<'_, RaftStatus> {
        // Poisoning only means a panic elsewhere while holding the lock; the status is plain
        // data and stays readable.
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_leadership(&self, state: LeaderState) {
        self.leadership.send_if_modified(|current| {
            let changed = *current != state;
            *current = state;
            changed
        });
    }
}

struct Inner {
    id: u64,
    max_entry_bytes: usize,
    commands: mpsc::Sender<Command>,
    published: Arc<Published>,
    shutting_down: AtomicBool,
    driver: Mutex<Option<JoinHandle<()>>>,
}

/// A handle on a running node. Cheap to clone; every clone drives the same node.
#[derive(Clone)]
pub struct RaftNode {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RaftNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftNode")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

impl RaftNode {
    /// Opens `<data_dir>/raft/raft.redb`, bootstraps `initial_voters` into a fresh one,
    /// restores the newest snapshot into `sm` and re-applies the committed entries after it
    /// (all before returning), then spawns the driver thread. A node that is the only voter
    /// campaigns at once.
    pub fn start<S: StateMachine>(
        cfg: RaftConfig,
        sm: S,
        transport: Arc<dyn Transport>,
    ) -> Result<RaftNode, RaftError> {
        cfg.validate()?;
        let (commands, rx) = mpsc::channel();
        let published = Arc::new(Published::new(RaftStatus {
            id: cfg.id,
            ..RaftStatus::default()
        }));
        let driver = Driver::open(&cfg, sm, transport, rx, Arc::clone(&published))?;
        let handle = std::thread::Builder::new()
            .name(format!("raft-{}", cfg.id))
            .spawn(move || driver.run())
            .map_err(|e| RaftError::Stopped {
                reason: format!("cannot spawn the driver thread: {e}"),
            })?;
        Ok(RaftNode {
            inner: Arc::new(Inner {
                id: cfg.id,
                max_entry_bytes: cfg.max_entry_bytes,
                commands,
                published,
                shutting_down: AtomicBool::new(false),
                driver: Mutex::new(Some(handle)),
            }),
        })
    }

    /// Appends `data` to the log. Resolves with the entry's index once it is committed AND
    /// applied to this node's state machine. `NotLeader` on a follower; `LeadershipLost` if
    /// the node stopped leading before the entry was applied (it may still commit).
    pub async fn propose(&self, data: Vec<u8>) -> Result<u64, RaftError> {
        if data.is_empty() {
            return Err(RaftError::EmptyEntry);
        }
        if data.len() > self.inner.max_entry_bytes {
            return Err(RaftError::EntryTooLarge {
                size: data.len(),
                max: self.inner.max_entry_bytes,
            });
        }
        let (reply, answer) = oneshot::channel();
        self.send(Command::Propose { data, reply })?;
        answer.await.map_err(|_| self.stopped_error())?
    }

    /// Proposes a membership change (add or remove voters and learners). Resolves with the
    /// entry's index once applied, i.e. once the new configuration is in effect here.
    pub async fn propose_conf_change(&self, change: ConfChangeV2) -> Result<u64, RaftError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::ProposeConfChange { change, reply })?;
        answer.await.map_err(|_| self.stopped_error())?
    }

    /// Hands an inbound message from the transport to the node. Messages reaching a stopped
    /// node are dropped, as a network would.
    pub fn step(&self, msg: Message) {
        let _ = self.inner.commands.send(Command::Step(msg));
    }

    /// Tells Raft that the transport could not reach `peer`, so the leader probes it again
    /// instead of streaming entries into the void.
    pub fn report_unreachable(&self, peer: u64) {
        let _ = self.inner.commands.send(Command::ReportUnreachable(peer));
    }

    /// Tells Raft whether a snapshot message to `peer` was delivered.
    pub fn report_snapshot(&self, peer: u64, delivered: bool) {
        let _ = self
            .inner
            .commands
            .send(Command::ReportSnapshot { peer, delivered });
    }

    pub fn id(&self) -> u64 {
        self.inner.id
    }

    pub fn status(&self) -> RaftStatus {
        self.inner.published.status().clone()
    }

    /// Changes when this node gains or loses leadership or the leader changes.
    pub fn leadership(&self) -> watch::Receiver<LeaderState> {
        self.inner.published.leadership.subscribe()
    }

    /// Waits until some node (maybe this one) is known to lead.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<(), RaftError> {
        let mut leadership = self.leadership();
        match tokio::time::timeout(timeout, leadership.wait_for(|s| s.leader_id.is_some())).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_closed)) => Err(self.stopped_error()),
            Err(_elapsed) => {
                if self.inner.published.status().stopped.is_some() {
                    Err(self.stopped_error())
                } else {
                    Err(RaftError::NoLeader { waited: timeout })
                }
            }
        }
    }

    /// Stops the driver: pending proposals fail with `ShuttingDown`, the hard state is
    /// flushed and the redb file closed before this returns (so the same data dir can be
    /// opened again at once). Idempotent.
    pub fn shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        let _ = self.inner.commands.send(Command::Shutdown);
        let handle = self
            .inner
            .driver
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(handle) = handle {
            // The driver itself may end up here (a state machine holding a handle): joining
            // itself would deadlock, and it stops right after anyway.
            if handle.thread().id() != std::thread::current().id() && handle.join().is_err() {
                tracing::error!(id = self.inner.id, "raft driver thread panicked");
            }
        }
    }

    fn send(&self, cmd: Command) -> Result<(), RaftError> {
        if self.inner.shutting_down.load(Ordering::SeqCst) {
            return Err(RaftError::ShuttingDown);
        }
        self.inner
            .commands
            .send(cmd)
            .map_err(|_| self.stopped_error())
    }

    /// The error for a request the driver will never answer.
    fn stopped_error(&self) -> RaftError {
        if self.inner.shutting_down.load(Ordering::SeqCst) {
            return RaftError::ShuttingDown;
        }
        match self.inner.published.status().stopped.clone() {
            Some(reason) => RaftError::Stopped { reason },
            None => RaftError::ShuttingDown,
        }
    }
}
