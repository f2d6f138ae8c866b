//! The public face of a Raft node: the `RaftNode` handle and the traits its user implements.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use raft::eraftpb::{ConfChangeSingle, ConfChangeType, ConfChangeV2, Message, MessageType};
use tokio::sync::{oneshot, watch};

use crate::config::RaftConfig;
use crate::driver::{Command, Driver};
use crate::error::RaftError;
use crate::peers::{PeerBook, PeerInfo};
use crate::snapshot_pieces::{IncomingSnapshot, OutgoingSnapshot, ReceiveSlot};
use crate::store::StorageStats;

/// The replicated state machine. Every server applies the same entries in the same order.
/// A snapshot of the state taken now, written later into the writer it is given
/// ([`StateMachine::snapshot_deferred`]).
pub type DeferredSnapshot = Box<dyn FnOnce(&mut dyn std::io::Write) -> std::io::Result<()> + Send>;

pub trait StateMachine: Send + 'static {
    /// Apply one committed normal entry. Deterministic. Called in log order exactly once per
    /// entry per process lifetime (after a restart, entries after the newest snapshot are
    /// re-applied to a fresh state machine). Returns a response for the proposer (empty when
    /// there is nothing to say); `RaftNode::propose_for_response` hands it over, and it is
    /// dropped on servers where nobody waits for the entry.
    fn apply(&mut self, index: u64, data: &[u8]) -> Vec<u8>;
    /// The committed normal entries about to be applied, in log order, before `apply` sees
    /// the first of them: a state machine may decode them ahead, on threads of its own,
    /// while `apply` works through the ones before (a restart replays hundreds of entries).
    /// Each still comes to `apply`, with the same bytes, unless the process stops first.
    /// The default does nothing.
    fn prepare(&mut self, _entries: &[(u64, bytes::Bytes)]) {}
    /// Serialize the whole state (taken at the last applied index). Also called once on the
    /// fresh state machine when a new cluster is bootstrapped: that snapshot, at index 1,
    /// carries the first configuration to servers added later.
    fn snapshot(&self) -> Vec<u8>;
    /// The state as of now, serialized later: the driver runs the returned closure on a thread
    /// of its own, so a large state does not stop the log while it is encoded, and the closure
    /// writes into storage as it goes (in pieces of a few MiB), so the encoding is never held
    /// whole in memory. It must write what `snapshot` would have given at this moment. `None`
    /// (the default): the driver calls `snapshot` on its own thread.
    fn snapshot_deferred(&self) -> Option<DeferredSnapshot> {
        None
    }
    /// Replace the whole state with a snapshot's data, read from `data` as it is decoded (a
    /// large state's payload is gigabytes, never handed over whole). A payload it cannot read
    /// (corrupt, cut short, or an unknown version) is an error, never a silently empty state.
    fn restore(&mut self, index: u64, data: &mut dyn std::io::Read) -> Result<(), String>;
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

/// A proposal's entry once applied: its index and what the state machine answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    pub index: u64,
    pub response: Vec<u8>,
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
    /// Non-voting members of the applied configuration, sorted.
    pub learners: Vec<u64>,
    /// On the leader: the highest log index each member (itself included) is known to hold.
    /// Empty elsewhere.
    pub matched: std::collections::BTreeMap<u64, u64>,
    /// Where the members are reached (may also hold servers being added).
    pub peers: PeerBook,
    /// redb write transactions so far: far fewer than entries, thanks to group commit.
    pub storage: StorageStats,
    /// Set once the driver stopped: why.
    pub stopped: Option<String>,
}

fn single_change(kind: ConfChangeType, id: u64) -> ConfChangeV2 {
    let mut single = ConfChangeSingle::default();
    single.set_change_type(kind);
    single.node_id = id;
    let mut change = ConfChangeV2::default();
    change.mut_changes().push(single);
    change
}

/// What the driver thread shares with the handles.
pub(crate) struct Published {
    status: Mutex<RaftStatus>,
    leadership: watch::Sender<LeaderState>,
    /// When this node last heard from the leader it knows (now, on the leader itself).
    leader_contact: Mutex<Option<Instant>>,
}

impl Published {
    pub(crate) fn new(status: RaftStatus) -> Published {
        let (leadership, _) = watch::channel(LeaderState::default());
        Published {
            status: Mutex::new(status),
            leadership,
            leader_contact: Mutex::new(None),
        }
    }

    /// Publishes a changed peer book at once, before the status at the end of the turn: the
    /// transport needs a new member's address for the messages of this very turn.
    pub(crate) fn set_peers(&self, peers: &PeerBook) {
        self.status().peers.clone_from(peers);
    }

    pub(crate) fn set_leader_contact(&self, at: Option<Instant>) {
        *self
            .leader_contact
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = at;
    }

    fn leader_contact(&self) -> Option<Instant> {
        *self
            .leader_contact
            .lock()
            .unwrap_or_else(|p| p.into_inner())
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
    /// The store's file: snapshot pieces are read for followers and written as they arrive
    /// from the leader beside the driver thread, never passing through it. Weak: a stopped
    /// node lets go of the file, so its data dir can be opened again.
    db: std::sync::Weak<redb::Database>,
    receive_slot: Arc<ReceiveSlot>,
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
        let db = Arc::downgrade(&driver.database());
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
                db,
                receive_slot: Arc::default(),
            }),
        })
    }

    /// Appends `data` to the log. Resolves with the entry's index once it is committed AND
    /// applied to this node's state machine. `NotLeader` on a follower; `LeadershipLost` if
    /// the node stopped leading before the entry was applied (it may still commit).
    pub async fn propose(&self, data: Vec<u8>) -> Result<u64, RaftError> {
        self.propose_for_response(data).await.map(|a| a.index)
    }

    /// As `propose`, and also returns what the state machine's `apply` answered for the entry.
    pub async fn propose_for_response(&self, data: Vec<u8>) -> Result<Applied, RaftError> {
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
    /// A change that raft ignores because another one is still pending fails with
    /// `ProposalDropped`.
    pub async fn propose_conf_change(&self, change: ConfChangeV2) -> Result<u64, RaftError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::ProposeConfChange { change, reply })?;
        answer
            .await
            .map_err(|_| self.stopped_error())?
            .map(|a| a.index)
    }

    /// Adds `id` as a voter reached at `peer` (or updates the address of a member). Resolves
    /// once the new configuration is applied here.
    pub async fn add_voter(&self, id: u64, peer: PeerInfo) -> Result<u64, RaftError> {
        let mut change = single_change(ConfChangeType::AddNode, id);
        change.context = peer.encode().into();
        self.propose_conf_change(change).await
    }

    /// Adds `id` as a learner (a non-voting member: it receives the log but counts towards no
    /// quorum) reached at `peer`. `add_voter` on a learner promotes it.
    pub async fn add_learner(&self, id: u64, peer: PeerInfo) -> Result<u64, RaftError> {
        let mut change = single_change(ConfChangeType::AddLearnerNode, id);
        change.context = peer.encode().into();
        self.propose_conf_change(change).await
    }

    /// Removes the member `id` from the configuration.
    pub async fn remove_member(&self, id: u64) -> Result<u64, RaftError> {
        self.propose_conf_change(single_change(ConfChangeType::RemoveNode, id))
            .await
    }

    /// Asks the leader to hand leadership to `to` (raft's leader transfer). Fire and forget:
    /// watch `leadership()` for the outcome.
    pub fn transfer_leadership(&self, to: u64) {
        let _ = self.inner.commands.send(Command::TransferLeader(to));
    }

    /// Raft's ReadIndex: resolves with the leader's commit index once this node has applied
    /// up to it, so a read of the state machine afterwards sees every write acknowledged before
    /// the call (linearizable reads on any server). Fails with `NoLeader` if no leader confirmed
    /// within `timeout`.
    pub async fn read_index(&self, timeout: Duration) -> Result<u64, RaftError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // A request can be dropped silently (a new leader that has not committed in its term
        // yet, a lost message): retry in short rounds until the deadline.
        let round = Duration::from_millis(300);
        loop {
            let (reply, answer) = oneshot::channel();
            self.send(Command::ReadIndex { reply })?;
            let now = tokio::time::Instant::now();
            let until = deadline.min(now + round);
            match tokio::time::timeout_at(until, answer).await {
                Ok(Ok(Ok(index))) => return Ok(index),
                Ok(Ok(Err(RaftError::NotLeader { .. }))) | Err(_) => {}
                Ok(Ok(Err(e))) => return Err(e),
                Ok(Err(_closed)) => return Err(self.stopped_error()),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RaftError::NoLeader { waited: timeout });
            }
            // No leader known: wait for one rather than spin.
            let mut leadership = self.leadership();
            let _ = tokio::time::timeout_at(
                deadline.min(tokio::time::Instant::now() + Duration::from_millis(50)),
                leadership.wait_for(|s| s.leader_id.is_some()),
            )
            .await;
        }
    }

    /// Time since this node last heard from the leader; zero on the leader itself, `None`
    /// when no leader is known.
    pub fn last_leader_contact(&self) -> Option<Duration> {
        if self.inner.published.status().is_leader {
            return Some(Duration::ZERO);
        }
        self.inner.published.leader_contact().map(|at| at.elapsed())
    }

    /// Hands an inbound message from the transport to the node. Messages reaching a stopped
    /// node are dropped, as a network would.
    pub fn step(&self, msg: Message) {
        let _ = self.inner.commands.send(Command::Step(msg));
    }

    /// The payload of the snapshot `msg` (a `MsgSnapshot` this node sent) announces, piece by
    /// piece, for the transport to send beside the message. An error if it is not a
    /// snapshot message or a newer snapshot replaced that one meanwhile (report the snapshot
    /// failed: raft sends the newer one).
    pub fn outgoing_snapshot(&self, msg: &Message) -> Result<OutgoingSnapshot, RaftError> {
        if msg.get_msg_type() != MessageType::MsgSnapshot {
            return Err(RaftError::SnapshotTransfer(format!(
                "a {:?} carries no snapshot",
                msg.get_msg_type()
            )));
        }
        let meta = msg.get_snapshot().get_metadata();
        OutgoingSnapshot::open(&*self.database()?, meta.index, meta.term)
    }

    /// Starts receiving a snapshot's payload from the leader; [`IncomingSnapshot::finish`]
    /// then hands raft the message that announced it. One at a time: an error while another
    /// is being received.
    pub fn incoming_snapshot(&self) -> Result<IncomingSnapshot, RaftError> {
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err(RaftError::ShuttingDown);
        }
        IncomingSnapshot::begin(
            self.database()?,
            self.inner.receive_slot.clone(),
            self.inner.commands.clone(),
        )
    }

    fn database(&self) -> Result<Arc<redb::Database>, RaftError> {
        self.inner.db.upgrade().ok_or(RaftError::ShuttingDown)
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

    /// True when `cfg`'s data dir holds a configuration (or a `peers.json` to recover one
    /// from): starting there needs no bootstrap. Opens and closes the store.
    pub fn has_state(cfg: &RaftConfig) -> Result<bool, RaftError> {
        if cfg.recovery_path().exists() {
            return Ok(true);
        }
        if !cfg.db_path().exists() {
            return Ok(false);
        }
        crate::store::RedbStore::holds_configuration(&cfg.db_path())
    }

    /// Where member `id` is reached, if known.
    pub fn peer(&self, id: u64) -> Option<PeerInfo> {
        self.inner.published.status().peers.get(&id).cloned()
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
