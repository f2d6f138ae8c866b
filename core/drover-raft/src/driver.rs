//! The driver: one thread that owns the `RawNode`, its redb store and the state machine.
//!
//! Each turn it takes every queued command (up to `max_batch`), ticks when a tick is due, then
//! handles the Ready: one redb transaction for all new entries and the hard state, messages
//! out, committed entries into the state machine, proposals answered. Doing everything on one
//! thread is what makes "applied in log order, answered after apply" hold without locks, and
//! draining the queue before each Ready is the group commit.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, Message, MessageType,
    SnapshotMetadata,
};
use raft::{RawNode, SnapshotStatus, StateRole};
use tokio::sync::oneshot;

use crate::config::RaftConfig;
use crate::error::RaftError;
use crate::log_bridge;
use crate::node::{Applied, LeaderState, Published, RaftStatus, StateMachine, Transport};
use crate::peers::{PeerInfo, Recovery, read_recovery, unwrap_snapshot_reference};
use crate::store::{RedbStore, SnapshotData, SnapshotToSave};

type Reply = oneshot::Sender<Result<Applied, RaftError>>;
type ReadReply = oneshot::Sender<Result<u64, RaftError>>;

pub(crate) enum Command {
    Propose {
        data: Vec<u8>,
        reply: Reply,
    },
    ProposeConfChange {
        change: ConfChangeV2,
        reply: Reply,
    },
    ReadIndex {
        reply: ReadReply,
    },
    TransferLeader(u64),
    Step(Message),
    /// A `MsgSnapshot` whose payload `IncomingSnapshot` received whole; `done` once handled.
    StepSnapshot {
        msg: Message,
        done: oneshot::Sender<()>,
    },
    ReportUnreachable(u64),
    ReportSnapshot {
        peer: u64,
        delivered: bool,
    },
    Shutdown,
}

/// A proposal appended by this node as leader, waiting for its entry to be applied.
struct Pending {
    index: u64,
    term: u64,
    /// Raft turns a conf change it cannot take now into an empty normal entry; the answer
    /// must then say "dropped", not "applied".
    conf_change: bool,
    reply: Reply,
}

/// A threshold snapshot being encoded and staged on a thread of its own.
struct SnapshotEncoding {
    /// Its metadata and the payload's size once written, or why it was not.
    done: Receiver<(SnapshotMetadata, std::io::Result<u64>)>,
    /// Makes its writes fail, so it ends early.
    abandon: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
    started: Instant,
}

pub(crate) struct Driver<S: StateMachine> {
    id: u64,
    raw: RawNode<RedbStore>,
    sm: S,
    transport: Arc<dyn Transport>,
    commands: Receiver<Command>,
    published: Arc<Published>,
    tick_interval: Duration,
    max_batch: usize,
    snapshot_threshold: u64,
    /// Applied log payload bytes kept in memory (`RaftConfig::log_memory_bytes`).
    log_memory_bytes: u64,
    /// In index order: the driver appends them in order and answers them in order.
    pending: VecDeque<Pending>,
    applied: u64,
    /// The term in which this node became leader, and the last index it must apply before
    /// announcing it (the leadership barrier). None while not leading.
    leading: Option<(u64, u64)>,
    /// Take a snapshot at the end of this Ready whatever the threshold says.
    snapshot_due: bool,
    /// A snapshot being encoded on its own thread (`StateMachine::snapshot_deferred`): its
    /// metadata, fixed when it was taken, comes back with the data.
    snapshot_encoding: Option<SnapshotEncoding>,
    /// Received snapshots stepped this turn, told once their Ready was handled.
    snapshots_handed_over: Vec<oneshot::Sender<()>>,
    /// Settled proposals, answered by the next `publish`.
    answers: Vec<(Reply, Result<Applied, RaftError>)>,
    /// ReadIndex requests sent to the leader, by request context.
    reads_asked: HashMap<Vec<u8>, ReadReply>,
    /// ReadIndex requests the leader answered, waiting for this node to apply that index.
    reads_confirmed: Vec<(u64, ReadReply)>,
    next_read_ctx: u64,
    /// When this node last heard from the leader it follows.
    leader_contact: Option<Instant>,
}

impl<S: StateMachine> Driver<S> {
    /// Opens the store, bootstraps or restores, and brings `sm` up to the committed index.
    pub(crate) fn open(
        cfg: &RaftConfig,
        mut sm: S,
        transport: Arc<dyn Transport>,
        commands: Receiver<Command>,
        published: Arc<Published>,
    ) -> Result<Driver<S>, RaftError> {
        let opening = Instant::now();
        let mut store = RedbStore::open(&cfg.db_path())?;
        tracing::info!(
            id = cfg.id,
            log_bytes = store.stats().log_bytes_in_memory,
            open_ms = opening.elapsed().as_millis() as u64,
            "raft store opened"
        );
        let recovery = read_recovery(&cfg.recovery_path())?;
        let mut bootstrapped = false;
        if !store.is_initialized() && recovery.is_none() && !cfg.initial_voters.is_empty() {
            tracing::info!(id = cfg.id, voters = ?cfg.initial_voters, "bootstrapping a new raft cluster");
            store.bootstrap(
                &cfg.initial_voters,
                cfg.initial_peers.clone(),
                &sm.snapshot(),
            )?;
            bootstrapped = true;
        }
        let snapshot_index = store.snapshot_meta().index;
        // Just bootstrapped, the snapshot came from `sm` itself: nothing to restore.
        if snapshot_index > 0 && !bootstrapped {
            let started = Instant::now();
            let mut data = store.snapshot_reader()?;
            sm.restore(snapshot_index, &mut data)
                .map_err(|reason| RaftError::SnapshotRestore {
                    index: snapshot_index,
                    reason,
                })?;
            tracing::info!(
                id = cfg.id,
                index = snapshot_index,
                restored_ms = started.elapsed().as_millis() as u64,
                "state restored from the snapshot"
            );
        }
        if let Some(recovery) = recovery {
            recover(cfg.id, &mut store, &mut sm, recovery)?;
            // Nomad removes the file once it is applied: a second start must not force the
            // configuration again over whatever changed since.
            std::fs::remove_file(cfg.recovery_path()).map_err(|e| {
                RaftError::Recovery(format!(
                    "recovered, but cannot remove {}: {e}",
                    cfg.recovery_path().display()
                ))
            })?;
        }
        let snapshot_index = store.snapshot_meta().index;
        let single_voter = store.conf_state().voters == [cfg.id]
            && store.conf_state().learners.is_empty()
            && store.conf_state().voters_outgoing.is_empty();

        let raft_cfg = raft::Config {
            id: cfg.id,
            election_tick: cfg.election_tick,
            heartbeat_tick: cfg.heartbeat_tick,
            applied: snapshot_index,
            // Bounds one append message; followers catching up get many of them.
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: 256,
            // A leader cut off from a quorum steps down (failing its pending proposals)
            // instead of accepting writes it can never commit.
            check_quorum: true,
            // A rejoining partitioned server does not depose a healthy leader.
            pre_vote: true,
            ..raft::Config::default()
        };
        let raw = RawNode::new(&raft_cfg, store, &log_bridge::logger())?;
        let mut driver = Driver {
            id: cfg.id,
            raw,
            sm,
            transport,
            commands,
            published,
            tick_interval: cfg.tick_interval,
            max_batch: cfg.max_batch,
            snapshot_threshold: cfg.snapshot_threshold,
            log_memory_bytes: cfg.log_memory_bytes,
            pending: VecDeque::new(),
            applied: snapshot_index,
            leading: None,
            snapshot_due: false,
            snapshot_encoding: None,
            snapshots_handed_over: Vec::new(),
            answers: Vec::new(),
            reads_asked: HashMap::new(),
            reads_confirmed: Vec::new(),
            next_read_ctx: 1,
            leader_contact: None,
        };
        // Re-apply the committed log after the snapshot before start() returns, so the state
        // machine is current when the caller first looks at it.
        let replay = Instant::now();
        driver.process_ready()?;
        tracing::info!(
            id = cfg.id,
            entries = driver.applied - snapshot_index,
            replay_ms = replay.elapsed().as_millis() as u64,
            "log after the snapshot applied"
        );
        if single_voter {
            driver.raw.campaign()?;
            driver.process_ready()?;
        }
        driver.publish(None);
        Ok(driver)
    }

    /// The thread body: runs until shutdown, a fatal error, or every handle is gone.
    pub(crate) fn run(mut self) {
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| self.run_loop()));
        let result = match outcome {
            Ok(result) => result,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                    .unwrap_or_else(|| "unknown panic".to_string());
                Err(RaftError::Stopped {
                    reason: format!("driver panicked: {what}"),
                })
            }
        };
        self.stop(result);
    }

    fn run_loop(&mut self) -> Result<(), RaftError> {
        let mut next_tick = Instant::now() + self.tick_interval;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            let mut shutdown = match self.commands.recv_timeout(wait) {
                Ok(cmd) => self.handle(cmd),
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => true,
            };
            // Group commit: everything queued meanwhile joins this Ready.
            let mut taken = 1;
            while !shutdown && taken < self.max_batch {
                match self.commands.try_recv() {
                    Ok(cmd) => {
                        shutdown = self.handle(cmd);
                        taken += 1;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => shutdown = true,
                }
            }
            if Instant::now() >= next_tick {
                self.raw.tick();
                next_tick = Instant::now() + self.tick_interval;
                // Readers that gave up (timed out) leave closed channels behind.
                self.reads_asked.retain(|_, reply| !reply.is_closed());
                self.reads_confirmed.retain(|(_, reply)| !reply.is_closed());
            }
            self.process_ready()?;
            for done in self.snapshots_handed_over.drain(..) {
                let _ = done.send(());
            }
            self.store_encoded_snapshot()?;
            self.publish(None);
            if shutdown {
                return Ok(());
            }
        }
    }

    /// The store's file, for snapshot pieces read and written beside this thread.
    pub(crate) fn database(&self) -> Arc<redb::Database> {
        self.raw.store().database()
    }

    /// Handles one command; true means "shut down".
    fn handle(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Propose { data, reply } => {
                if let Err(e) = self.check_leader() {
                    let _ = reply.send(Err(e));
                    return false;
                }
                let result = self.raw.propose(Vec::new(), data);
                self.track(result, false, reply);
            }
            Command::ProposeConfChange { change, reply } => {
                if let Err(e) = self.check_leader() {
                    let _ = reply.send(Err(e));
                    return false;
                }
                let result = self.raw.propose_conf_change(Vec::new(), change);
                self.track(result, true, reply);
            }
            Command::ReadIndex { reply } => {
                if self.raw.raft.leader_id == 0 {
                    let _ = reply.send(Err(RaftError::NotLeader { leader_hint: None }));
                    return false;
                }
                let ctx = self.next_read_ctx.to_le_bytes().to_vec();
                self.next_read_ctx += 1;
                self.reads_asked.insert(ctx.clone(), reply);
                self.raw.read_index(ctx);
            }
            Command::TransferLeader(to) => {
                if self.raw.raft.state == StateRole::Leader && to != self.id {
                    tracing::info!(id = self.id, to, "transferring leadership");
                    self.raw.transfer_leader(to);
                }
            }
            Command::Step(msg) if msg.get_msg_type() == MessageType::MsgSnapshot => {
                // Its payload was not received: only `StepSnapshot` may carry a snapshot.
                tracing::warn!(
                    id = self.id,
                    from = msg.from,
                    "snapshot message without its payload ignored"
                );
            }
            Command::StepSnapshot { msg, done } => {
                if let Err(e) = self.raw.step(msg) {
                    tracing::debug!(id = self.id, error = %e, "raft snapshot ignored");
                }
                self.snapshots_handed_over.push(done);
            }
            Command::Step(msg) => {
                let from = msg.from;
                if let Err(e) = self.raw.step(msg) {
                    tracing::debug!(id = self.id, error = %e, "raft message ignored");
                }
                if from != 0 && from == self.raw.raft.leader_id {
                    self.leader_contact = Some(Instant::now());
                }
            }
            Command::ReportUnreachable(peer) => self.raw.report_unreachable(peer),
            Command::ReportSnapshot { peer, delivered } => {
                let status = if delivered {
                    SnapshotStatus::Finish
                } else {
                    SnapshotStatus::Failure
                };
                self.raw.report_snapshot(peer, status);
            }
            Command::Shutdown => return true,
        }
        false
    }

    fn check_leader(&self) -> Result<(), RaftError> {
        if self.raw.raft.state == StateRole::Leader {
            Ok(())
        } else {
            let leader = self.raw.raft.leader_id;
            Err(RaftError::NotLeader {
                leader_hint: (leader != 0 && leader != self.id).then_some(leader),
            })
        }
    }

    /// Records an accepted proposal (its entry is the log's last one) or answers a refused one.
    fn track(&mut self, result: raft::Result<()>, conf_change: bool, reply: Reply) {
        match result {
            Ok(()) => self.pending.push_back(Pending {
                index: self.raw.raft.raft_log.last_index(),
                term: self.raw.raft.term,
                conf_change,
                reply,
            }),
            Err(raft::Error::ProposalDropped) => {
                let _ = reply.send(Err(RaftError::ProposalDropped {
                    reason: "raft refused it (leadership transfer or change in progress)".into(),
                }));
            }
            Err(e) => {
                let _ = reply.send(Err(RaftError::Raft(e)));
            }
        }
    }

    /// Handles Readies until raft has nothing more to say.
    fn process_ready(&mut self) -> Result<(), RaftError> {
        while self.raw.has_ready() {
            let mut rd = self.raw.ready();
            if rd.ss().is_some() {
                self.fail_pending_if_deposed();
            }
            for read in rd.take_read_states() {
                if let Some(reply) = self.reads_asked.remove(&read.request_ctx) {
                    self.reads_confirmed.push((read.index, reply));
                }
            }
            // A leader may send before persisting (Raft thesis 10.2.1); followers' messages
            // come back as persisted_messages below.
            self.send(rd.take_messages());

            let snapshot = rd.snapshot().clone();
            if !snapshot.is_empty() {
                let meta = snapshot.get_metadata();
                let book = unwrap_snapshot_reference(snapshot.get_data()).map_err(|reason| {
                    RaftError::SnapshotRestore {
                        index: meta.index,
                        reason,
                    }
                })?;
                let mut payload = self.raw.store().received_snapshot(meta)?;
                self.install_snapshot(meta, &mut payload)?;
                self.raw.mut_store().set_peers(book);
            }
            let committed = rd.take_committed_entries();
            self.apply(committed)?;

            if let Some(hs) = rd.hs() {
                self.raw.mut_store().set_hard_state(hs.clone());
            }
            // One transaction, one fsync, for every entry of this Ready. A Ready that only
            // moves the commit index needs no fsync (raft does not need it durable).
            let durable = rd.must_sync();
            let snapshot_to_save = (!snapshot.is_empty()).then(|| SnapshotToSave {
                meta: snapshot.get_metadata().clone(),
                data: SnapshotData::Received,
            });
            self.raw
                .mut_store()
                .write(snapshot_to_save, rd.entries(), durable)?;
            self.send(rd.take_persisted_messages());

            let mut light = self.raw.advance_append(rd);
            if let Some(commit) = light.commit_index() {
                self.raw.mut_store().set_commit(commit);
            }
            self.send(light.take_messages());
            self.apply(light.take_committed_entries())?;
            self.raw.advance_apply_to(self.applied);
            self.maybe_snapshot()?;
            let applied = self.applied;
            let held_by_all = self.held_by_every_other_server();
            self.raw
                .mut_store()
                .release_applied(applied, held_by_all, self.log_memory_bytes);
        }
        self.fail_pending_if_deposed();
        self.settle_reads();
        Ok(())
    }

    /// Answers the confirmed reads whose index this node has applied.
    fn settle_reads(&mut self) {
        if self.reads_confirmed.is_empty() {
            return;
        }
        let applied = self.applied;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.reads_confirmed)
            .into_iter()
            .partition(|(index, _)| *index <= applied);
        self.reads_confirmed = waiting;
        for (index, reply) in ready {
            let _ = reply.send(Ok(index));
        }
    }

    fn send(&self, msgs: Vec<Message>) {
        if !msgs.is_empty() {
            self.transport.send(msgs);
        }
    }

    /// A snapshot from the leader replaces the state machine's whole state.
    fn install_snapshot(
        &mut self,
        meta: &SnapshotMetadata,
        data: &mut dyn std::io::Read,
    ) -> Result<(), RaftError> {
        tracing::info!(
            id = self.id,
            index = meta.index,
            term = meta.term,
            "installing snapshot from the leader"
        );
        self.sm
            .restore(meta.index, data)
            .map_err(|reason| RaftError::SnapshotRestore {
                index: meta.index,
                reason,
            })?;
        self.applied = meta.index;
        Ok(())
    }

    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), RaftError> {
        let ahead: Vec<(u64, bytes::Bytes)> = entries
            .iter()
            .filter(|e| {
                e.index > self.applied
                    && e.get_entry_type() == EntryType::EntryNormal
                    && !e.data.is_empty()
            })
            .map(|e| (e.index, e.data.clone()))
            .collect();
        if ahead.len() > 1 {
            self.sm.prepare(&ahead);
        }
        drop(ahead);
        for entry in entries {
            if entry.index <= self.applied {
                continue;
            }
            let mut response = Vec::new();
            let is_conf_change = entry.get_entry_type() != EntryType::EntryNormal;
            match entry.get_entry_type() {
                // Empty normal entries are the no-ops new leaders append.
                EntryType::EntryNormal if entry.data.is_empty() => {}
                EntryType::EntryNormal => response = self.sm.apply(entry.index, &entry.data),
                EntryType::EntryConfChange => match ConfChange::parse_from_bytes(&entry.data) {
                    Ok(change) => {
                        let result = self.raw.apply_conf_change(&change);
                        let members = [(change.get_change_type(), change.node_id)];
                        self.conf_change_applied(entry.index, result, &members, &change.context)?;
                    }
                    Err(e) => self.conf_change_undecodable(entry.index, &e),
                },
                EntryType::EntryConfChangeV2 => match ConfChangeV2::parse_from_bytes(&entry.data) {
                    Ok(change) => {
                        let result = self.raw.apply_conf_change(&change);
                        let members: Vec<_> = change
                            .get_changes()
                            .iter()
                            .map(|c| (c.get_change_type(), c.node_id))
                            .collect();
                        self.conf_change_applied(entry.index, result, &members, &change.context)?;
                    }
                    Err(e) => self.conf_change_undecodable(entry.index, &e),
                },
            }
            self.applied = entry.index;
            self.answer(entry.index, entry.term, is_conf_change, response);
        }
        Ok(())
    }

    // A committed conf change that cannot apply is refused identically on every server, so
    // skipping it (loudly) keeps them in step; stopping would stop the whole cluster.
    fn conf_change_undecodable(&self, index: u64, error: &protobuf::ProtobufError) {
        tracing::error!(id = self.id, index, %error, "undecodable conf change skipped");
    }

    fn conf_change_applied(
        &mut self,
        index: u64,
        result: raft::Result<ConfState>,
        members: &[(ConfChangeType, u64)],
        context: &[u8],
    ) -> Result<(), RaftError> {
        match result {
            Ok(conf_state) => {
                tracing::info!(id = self.id, index, voters = ?conf_state.voters, learners = ?conf_state.learners, "configuration changed");
                // The added server's address travels in the context of its change.
                let mut book = self.raw.store().peers().clone();
                for (kind, id) in members {
                    match kind {
                        ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                            if context.is_empty() {
                                continue;
                            }
                            match PeerInfo::decode(context) {
                                Ok(peer) => {
                                    book.insert(*id, peer);
                                }
                                Err(e) => {
                                    tracing::warn!(id = self.id, index, member = id, error = %e, "conf change without a usable address");
                                }
                            }
                        }
                        ConfChangeType::RemoveNode => {
                            book.remove(id);
                        }
                    }
                }
                // Durable at once: restart takes the configuration from here, not the log.
                self.published.set_peers(&book);
                let store = self.raw.mut_store();
                store.set_peers(book);
                store.set_conf_state(conf_state);
                store.write(None, &[], true)?;
                // raft-rs refuses a snapshot whose configuration lacks the receiving server, and
                // a server just added may need one: snapshot now, with the new configuration.
                self.snapshot_due = true;
                Ok(())
            }
            Err(e) => {
                tracing::error!(id = self.id, index, error = %e, "invalid conf change skipped");
                Ok(())
            }
        }
    }

    /// Answers the proposal waiting on `index`, if this node made it.
    fn answer(&mut self, index: u64, term: u64, is_conf_change: bool, response: Vec<u8>) {
        let mut response = Some(response);
        while let Some(front) = self.pending.front() {
            if front.index > index {
                break;
            }
            let Some(pending) = self.pending.pop_front() else {
                break;
            };
            let result = if pending.index == index
                && pending.term == term
                && pending.conf_change
                && !is_conf_change
            {
                Err(RaftError::ProposalDropped {
                    reason: "another configuration change is still in progress".into(),
                })
            } else if pending.index == index && pending.term == term {
                Ok(Applied {
                    index,
                    response: response.take().unwrap_or_default(),
                })
            } else {
                Err(RaftError::ProposalDropped {
                    reason: format!(
                        "index {} was taken by another leader's entry",
                        pending.index
                    ),
                })
            };
            self.answers.push((pending.reply, result));
        }
    }

    /// Proposals of a term this node no longer leads will never be answered by apply here:
    /// fail them now rather than let callers hang.
    fn fail_pending_if_deposed(&mut self) {
        let leading_term = (self.raw.raft.state == StateRole::Leader).then_some(self.raw.raft.term);
        while let Some(front) = self.pending.front() {
            if Some(front.term) == leading_term {
                break;
            }
            if let Some(pending) = self.pending.pop_front() {
                self.answers.push((
                    pending.reply,
                    Err(RaftError::LeadershipLost {
                        index: pending.index,
                    }),
                ));
            }
        }
    }

    /// Every `snapshot_threshold` applied entries (or when due for another reason): snapshot
    /// the state machine and compact.
    /// The highest index every other server of the configuration holds, as far as this one
    /// knows: the leader's lowest follower `matched`, everything when it is alone. A server
    /// that is not leading sends no entries, so to it every entry is held.
    fn held_by_every_other_server(&self) -> u64 {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader {
            return u64::MAX;
        }
        raft.prs()
            .iter()
            .filter(|(id, _)| **id != self.id)
            .map(|(_, pr)| pr.matched)
            .min()
            .unwrap_or(u64::MAX)
    }

    fn maybe_snapshot(&mut self) -> Result<(), RaftError> {
        let store = self.raw.store();
        let since = self.applied.saturating_sub(store.snapshot_meta().index);
        let threshold_reached = self.snapshot_threshold > 0 && since >= self.snapshot_threshold;
        if since == 0 || !(threshold_reached || self.snapshot_due) {
            return Ok(());
        }
        // A state machine that can encode off this thread does so, one snapshot at a time:
        // one due for a configuration change waits for the encoding in flight (taken before
        // the change) and is taken next. Until it is installed, a server just added gets no
        // snapshot (`Storage::snapshot` offers none that does not name it), rather than this
        // thread stopping the log to encode gigabytes.
        if self.snapshot_encoding.is_some() {
            return Ok(());
        }
        self.snapshot_due = false;
        let Some(term) = store.term_of(self.applied) else {
            return Err(RaftError::CorruptStorage(format!(
                "applied entry {} is not in the log",
                self.applied
            )));
        };
        let index = self.applied;
        let meta = SnapshotMetadata {
            index,
            term,
            conf_state: Some(store.conf_state().clone()).into(),
            ..SnapshotMetadata::default()
        };
        if let Some(encode) = self.sm.snapshot_deferred() {
            let mut stager = self.raw.store().snapshot_stager();
            let abandon = stager.abandon_handle();
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name(format!("raft-snapshot-{}", self.id))
                .spawn(move || {
                    let written = encode(&mut stager).and_then(|()| stager.finish());
                    let _ = tx.send((meta, written));
                });
            match spawned {
                Ok(thread) => {
                    tracing::info!(id = self.id, index, "snapshot encoding off the raft thread");
                    self.snapshot_encoding = Some(SnapshotEncoding {
                        done: rx,
                        abandon,
                        thread,
                        started: Instant::now(),
                    })
                }
                Err(e) => tracing::error!(id = self.id, error = %e, "snapshot thread not started"),
            }
            return Ok(());
        }
        let data = self.sm.snapshot();
        tracing::debug!(
            id = self.id,
            index = meta.index,
            bytes = data.len(),
            "snapshot taken"
        );
        // Not durable by itself: if it is lost in a crash, so is the compaction (redb keeps
        // the transaction whole), and the next durable commit makes both durable.
        let data = SnapshotData::Bytes(&data);
        self.raw
            .mut_store()
            .write(Some(SnapshotToSave { meta, data }), &[], false)
    }

    /// Installs the snapshot written off this thread, once it is complete, and compacts the
    /// log up to it, unless a newer snapshot (one installed from the leader) got there first.
    fn store_encoded_snapshot(&mut self) -> Result<(), RaftError> {
        let Some(encoding) = &self.snapshot_encoding else {
            return Ok(());
        };
        let (meta, written) = match encoding.done.try_recv() {
            Ok(done) => done,
            Err(TryRecvError::Empty) => return Ok(()),
            Err(TryRecvError::Disconnected) => {
                tracing::error!(
                    id = self.id,
                    "snapshot encoding thread ended without a result"
                );
                self.snapshot_encoding = None;
                return Ok(());
            }
        };
        let took = encoding.started.elapsed();
        self.snapshot_encoding = None;
        let bytes = match written {
            Ok(bytes) => bytes,
            Err(e) => {
                // The log is not compacted: the next threshold tries again.
                tracing::error!(id = self.id, index = meta.index, error = %e, "snapshot not written");
                return Ok(());
            }
        };
        if meta.index <= self.raw.store().snapshot_meta().index {
            return Ok(());
        }
        tracing::info!(
            id = self.id,
            index = meta.index,
            bytes,
            encode_ms = took.as_millis() as u64,
            "snapshot encoded off the raft thread, installing"
        );
        // As in `maybe_snapshot`: made durable by the next durable commit.
        let data = SnapshotData::Staged;
        self.raw
            .mut_store()
            .write(Some(SnapshotToSave { meta, data }), &[], false)
    }

    /// Refreshes the status and the leadership signal, then sends the answers held back.
    fn publish(&mut self, stopped: Option<String>) {
        let raft = &self.raw.raft;
        let is_leader = raft.state == StateRole::Leader && stopped.is_none();
        if is_leader {
            if self.leading.map(|(term, _)| term) != Some(raft.term) {
                self.leading = Some((raft.term, raft.raft_log.last_index()));
                tracing::info!(id = self.id, term = raft.term, "became raft leader");
            }
        } else if let Some((term, _)) = self.leading.take() {
            tracing::info!(id = self.id, term, "no longer raft leader");
        }
        let barrier_passed = self
            .leading
            .is_some_and(|(_, barrier)| self.applied >= barrier);
        let leader_id = (raft.leader_id != 0 && stopped.is_none()).then_some(raft.leader_id);
        let store = self.raw.store();
        let mut voters = store.conf_state().voters.clone();
        voters.sort_unstable();
        let mut learners = store.conf_state().learners.clone();
        learners.sort_unstable();
        let contact = if is_leader {
            Some(Instant::now())
        } else if leader_id.is_some() {
            self.leader_contact
        } else {
            None
        };
        self.published.set_leader_contact(contact);
        let status = RaftStatus {
            id: self.id,
            leader_id,
            term: raft.term,
            is_leader,
            commit_index: raft.raft_log.committed,
            applied_index: self.applied,
            first_log_index: store.first_index(),
            last_log_index: store.last_index(),
            snapshot_index: store.snapshot_meta().index,
            voters,
            learners,
            matched: if is_leader {
                raft.prs()
                    .iter()
                    .map(|(id, pr)| (*id, pr.matched))
                    .collect()
            } else {
                Default::default()
            },
            peers: store.peers().clone(),
            storage: store.stats(),
            stopped,
        };
        *self.published.status() = status;
        self.published.set_leadership(LeaderState {
            term: raft.term,
            leader_id,
            is_leader: barrier_passed,
        });
        // Answered only now, so a caller that got its index sees it applied in `status()`.
        for (reply, result) in self.answers.drain(..) {
            let _ = reply.send(result);
        }
    }

    /// Fails whatever is in flight, flushes the commit index, and publishes the end.
    fn stop(mut self, result: Result<(), RaftError>) {
        // An encoder still writing stops at its next write; once joined, nothing of this node
        // holds the database, so the same process may open it again.
        if let Some(encoding) = self.snapshot_encoding.take() {
            encoding
                .abandon
                .store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = encoding.thread.join();
        }
        let (reason, error) = match result {
            Ok(()) => ("shut down".to_string(), None),
            Err(e) => {
                tracing::error!(id = self.id, error = %e, "raft driver stopped");
                (e.to_string(), Some(e.to_string()))
            }
        };
        let refusal = || match &error {
            None => RaftError::ShuttingDown,
            Some(reason) => RaftError::Stopped {
                reason: reason.clone(),
            },
        };
        for pending in self.pending.drain(..) {
            let _ = pending.reply.send(Err(refusal()));
        }
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::Propose { reply, .. } | Command::ProposeConfChange { reply, .. } => {
                    let _ = reply.send(Err(refusal()));
                }
                Command::ReadIndex { reply } => {
                    let _ = reply.send(Err(refusal()));
                }
                _ => {}
            }
        }
        for (_, reply) in self.reads_asked.drain() {
            let _ = reply.send(Err(refusal()));
        }
        for (_, reply) in self.reads_confirmed.drain(..) {
            let _ = reply.send(Err(refusal()));
        }
        if error.is_none()
            && let Err(e) = self.raw.mut_store().write(None, &[], true)
        {
            tracing::error!(id = self.id, error = %e, "cannot flush the raft hard state");
        }
        self.publish(Some(reason));
        // Dropping `self` drops the RawNode, its store and so the redb file.
    }
}

/// Forces the configuration of `peers.json` (Nomad's outage recovery, after
/// hashicorp/raft's `RecoverCluster`): every entry of the local log is applied to the state
/// machine (even ones that may never have committed: with quorum lost nobody can tell), the
/// result is written as a snapshot at the log's end carrying the new configuration, and the log
/// is emptied. Every surviving server must be given the same file.
fn recover<S: StateMachine>(
    id: u64,
    store: &mut RedbStore,
    sm: &mut S,
    recovery: Recovery,
) -> Result<(), RaftError> {
    let Recovery {
        voters,
        learners,
        mut book,
    } = recovery;
    // Keep the names the cluster knew; the file only has addresses.
    for (member, peer) in book.iter_mut() {
        if let Some(known) = store.peers().get(member) {
            peer.name.clone_from(&known.name);
        }
    }
    if !store.is_initialized() {
        tracing::warn!(
            id,
            ?voters,
            "peers.json on an empty data dir: bootstrapping with it"
        );
        if !learners.is_empty() {
            tracing::warn!(
                id,
                ?learners,
                "non-voters of peers.json ignored on an empty data dir"
            );
        }
        return store.bootstrap(&voters, book, &sm.snapshot());
    }
    let from = store.first_index();
    let to = store.last_index();
    for entry in store.entries_between(from, to + 1, None)? {
        if entry.get_entry_type() == EntryType::EntryNormal && !entry.data.is_empty() {
            sm.apply(entry.index, &entry.data);
        }
    }
    tracing::warn!(
        id,
        ?voters,
        ?learners,
        index = to,
        "recovering the raft configuration from peers.json"
    );
    let conf_state = ConfState::from((voters, learners));
    store.force_configuration(conf_state, book, &sm.snapshot())
}
