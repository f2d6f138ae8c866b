//! The Raft log, hard state, conf state and newest snapshot, kept in one redb file.
//!
//! Every entry after the newest snapshot is also kept in memory, so the `raft::Storage` reads
//! that raft does on its hot path never touch the disk, but only its index and term once it is
//! applied and either every other server holds it or it is older than the newest
//! `tail_budget` bytes of payload (`release_applied`): a plan
//! entry carries a thousand allocations, and thousands of them between two snapshots would
//! otherwise hold gigabytes. A released payload is read back from redb when raft asks for it
//! (a follower far behind). The snapshot payload stays on disk: it is read when a follower
//! needs it.
//!
//! Writes happen in `write`: one redb transaction per call, so the driver's one call per Ready is
//! one fsync for every entry in that Ready (group commit).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use crate::error::RaftError;
use crate::peers::{PeerBook, decode_book, encode_book, wrap_snapshot_reference};
use crate::snapshot_pieces::{
    SNAPSHOT_CHUNK_BYTES, SNAPSHOT_CHUNKS, SNAPSHOT_RECEIVED, SNAPSHOT_STAGED, SnapshotReader,
    SnapshotStager, forget_received, read_received,
};

/// Raft log: index -> protobuf-encoded `Entry`.
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// Everything else, each under its own key, protobuf-encoded where it is a raft type.
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");

const KEY_FORMAT: &str = "format";
const KEY_HARD_STATE: &str = "hard_state";
const KEY_CONF_STATE: &str = "conf_state";
pub(crate) const KEY_SNAPSHOT_META: &str = "snapshot_meta";
/// The snapshot payload as one value, as files written before `SNAPSHOT_CHUNKS` hold it.
pub(crate) const KEY_SNAPSHOT_DATA: &str = "snapshot_data";
/// The peer book (raft id -> RPC address), JSON.
const KEY_PEERS: &str = "peers";

/// Layout version of this file. A file with another version is refused, never guessed at.
const FORMAT_VERSION: u32 = 1;

/// A snapshot to install in a `write`: raft's metadata plus the state machine's payload.
pub(crate) struct SnapshotToSave<'a> {
    pub meta: SnapshotMetadata,
    pub data: SnapshotData<'a>,
}

/// Where a snapshot's payload comes from.
pub(crate) enum SnapshotData<'a> {
    /// In memory: written in pieces by the `write` that installs it.
    Bytes(&'a [u8]),
    /// Already written by a [`SnapshotStager`] that finished: `write` only swaps it in.
    Staged,
    /// Received whole from the leader (`IncomingSnapshot`): `write` only swaps it in.
    Received,
}

/// Counters of redb write transactions, for group-commit checks and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Write transactions committed since the node started.
    pub commits: u64,
    /// Of those, the ones committed with `Durability::Immediate` (an fsync each).
    pub durable_commits: u64,
    /// Payload bytes of the log entries held in memory (the rest is read from redb).
    pub log_bytes_in_memory: u64,
}

/// redb's page cache. It keeps the pages written last, which the store never reads again:
/// entries are served from memory, released ones rarely. Its default (1 GiB), and then
/// 32 MiB, made every server, the dev agent included, grow with each write until the cache
/// was full (a heap profile of a dev agent after 50 tasks: 1.5 MB of its live 4.6 MB).
const REDB_CACHE_BYTES: usize = 1024 * 1024;

pub(crate) struct RedbStore {
    /// Shared with a [`SnapshotStager`] writing a snapshot on another thread; redb runs one
    /// write transaction at a time, so theirs and the log's take turns.
    db: Arc<Database>,
    hard_state: HardState,
    /// The hard state as last written, to skip rewriting an unchanged one.
    persisted_hard_state: HardState,
    conf_state: ConfState,
    conf_state_dirty: bool,
    /// Where every server of the configuration is reached.
    peers: PeerBook,
    peers_dirty: bool,
    /// A non-durable commit happened since the last durable one.
    unsynced: bool,
    /// Metadata of the newest snapshot; index 0 means there is none.
    snapshot_meta: SnapshotMetadata,
    /// Every entry after `snapshot_meta.index`, contiguous. Entries up to `released_upto`
    /// hold no payload here (only index, term and type): it is read from redb when asked for.
    entries: VecDeque<Entry>,
    /// Highest index whose payload was released from memory (0: none).
    released_upto: u64,
    /// Lowest index the log table may still hold at or below the snapshot: entries a snapshot
    /// covers are deleted a few per write ([`COMPACT_PER_WRITE`]), not all in the write that
    /// installs it.
    compacted_from: u64,
    stats: StorageStats,
}

/// Entries covered by the snapshot deleted from the log table per write. Deleting them all
/// when a snapshot is installed (7,500 entries, 1.4 GB, at a million allocations) held the
/// log up for a second.
const COMPACT_PER_WRITE: u64 = 32;

impl RedbStore {
    /// Opens (or creates) the file and loads hard state, conf state, snapshot metadata and the
    /// log tail into memory, checking that the log continues the snapshot without gaps.
    pub fn open(path: &Path) -> Result<RedbStore, RaftError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| RaftError::CreateDir {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let db = Database::builder()
            .set_cache_size(REDB_CACHE_BYTES)
            .create(path)
            .map_err(|e| RaftError::storage("open database", e))?;
        let mut store = RedbStore {
            db: Arc::new(db),
            hard_state: HardState::default(),
            persisted_hard_state: HardState::default(),
            conf_state: ConfState::default(),
            conf_state_dirty: false,
            peers: PeerBook::new(),
            peers_dirty: false,
            unsynced: false,
            snapshot_meta: SnapshotMetadata::default(),
            entries: VecDeque::new(),
            released_upto: 0,
            compacted_from: 0,
            stats: StorageStats::default(),
        };
        store.load()?;
        Ok(store)
    }

    fn load(&mut self) -> Result<(), RaftError> {
        // A write transaction, so a fresh file gets its tables and format version on first open.
        let txn = self
            .db
            .begin_write()
            .map_err(|e| RaftError::storage("begin load", e))?;
        let fresh;
        {
            let mut meta = txn
                .open_table(META)
                .map_err(|e| RaftError::storage("open meta table", e))?;
            let format = meta
                .get(KEY_FORMAT)
                .map_err(|e| RaftError::storage("read format", e))?
                .map(|v| v.value().to_vec());
            fresh = format.is_none();
            match format {
                None => {
                    meta.insert(KEY_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice())
                        .map_err(|e| RaftError::storage("write format", e))?;
                }
                Some(bytes) => {
                    let version = <[u8; 4]>::try_from(bytes.as_slice())
                        .map(u32::from_le_bytes)
                        .map_err(|_| {
                            RaftError::CorruptStorage("unreadable format version".into())
                        })?;
                    if version != FORMAT_VERSION {
                        return Err(RaftError::CorruptStorage(format!(
                            "unknown format version {version} (this build reads {FORMAT_VERSION})"
                        )));
                    }
                }
            }
            self.hard_state = read_proto(&meta, KEY_HARD_STATE)?.unwrap_or_default();
            self.persisted_hard_state = self.hard_state.clone();
            self.conf_state = read_proto(&meta, KEY_CONF_STATE)?.unwrap_or_default();
            self.snapshot_meta = read_proto(&meta, KEY_SNAPSHOT_META)?.unwrap_or_default();
            if let Some(book) = meta
                .get(KEY_PEERS)
                .map_err(|e| RaftError::storage("read peers", e))?
            {
                self.peers = decode_book(book.value()).map_err(RaftError::CorruptStorage)?;
            }

            let log = txn
                .open_table(LOG)
                .map_err(|e| RaftError::storage("open log table", e))?;
            // Entries the snapshot covers may still be there, waiting to be deleted.
            self.compacted_from = log
                .first()
                .map_err(|e| RaftError::storage("scan log", e))?
                .map_or(0, |(key, _)| key.value());
            let rows = log
                .range::<u64>(self.snapshot_meta.index + 1..)
                .map_err(|e| RaftError::storage("scan log", e))?;
            for (expected, row) in (self.snapshot_meta.index + 1..).zip(rows) {
                let (key, value) = row.map_err(|e| RaftError::storage("scan log", e))?;
                let index = key.value();
                let entry = Entry::parse_from_bytes(value.value()).map_err(|e| {
                    RaftError::CorruptStorage(format!("log entry {index} does not decode: {e}"))
                })?;
                if index != expected || entry.index != index {
                    return Err(RaftError::CorruptStorage(format!(
                        "log is not contiguous: expected entry {expected}, found key {index} \
                         holding entry {}",
                        entry.index
                    )));
                }
                self.stats.log_bytes_in_memory += entry.data.len() as u64;
                self.entries.push_back(entry);
            }
        }
        if fresh {
            txn.commit()
                .map_err(|e| RaftError::storage("commit format", e))?;
        } else {
            txn.abort().map_err(|e| RaftError::storage("end load", e))?;
        }
        // The commit index is written lazily (raft does not require it to be durable), so it may
        // trail the snapshot or, never, pass the log's end; bring it inside that range.
        self.hard_state.commit = self
            .hard_state
            .commit
            .max(self.snapshot_meta.index)
            .min(self.last_index());
        Ok(())
    }

    /// Whether the file at `path` holds a configuration (see `is_initialized`), read without
    /// loading the log: a large log takes a while to load, and starting loads it anyway.
    pub fn holds_configuration(path: &Path) -> Result<bool, RaftError> {
        let db = Database::builder()
            .set_cache_size(REDB_CACHE_BYTES)
            .create(path)
            .map_err(|e| RaftError::storage("open database", e))?;
        let txn = db
            .begin_read()
            .map_err(|e| RaftError::storage("begin read", e))?;
        let meta = match txn.open_table(META) {
            Ok(meta) => meta,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(false),
            Err(e) => return Err(RaftError::storage("open meta table", e)),
        };
        let conf_state: ConfState = read_proto(&meta, KEY_CONF_STATE)?.unwrap_or_default();
        Ok(conf_state != ConfState::default())
    }

    /// True once a configuration was bootstrapped or received with a snapshot.
    pub fn is_initialized(&self) -> bool {
        self.conf_state != ConfState::default()
    }

    /// Starts a fresh log: a snapshot at index 1, term 1 holding `voters` and the fresh state
    /// machine's `data`, durably. The first configuration is thus in a snapshot rather than
    /// only in this file, so a server added later receives it with the snapshot (raft-rs's
    /// recommended bootstrap; its examples do the same).
    pub fn bootstrap(
        &mut self,
        voters: &[u64],
        peers: PeerBook,
        data: &[u8],
    ) -> Result<(), RaftError> {
        let meta = SnapshotMetadata {
            index: 1,
            term: 1,
            conf_state: Some(ConfState::from((voters.to_vec(), Vec::<u64>::new()))).into(),
            ..SnapshotMetadata::default()
        };
        self.hard_state.term = self.hard_state.term.max(1);
        self.set_peers(peers);
        self.write_snapshot_durably(meta, data)
    }

    /// Writes a snapshot held in memory, durably, as the only write of its transaction.
    fn write_snapshot_durably(
        &mut self,
        meta: SnapshotMetadata,
        data: &[u8],
    ) -> Result<(), RaftError> {
        let data = SnapshotData::Bytes(data);
        self.write(Some(SnapshotToSave { meta, data }), &[], true)
    }

    /// Replaces the configuration with `conf_state` by writing a snapshot of `data` (the state
    /// machine with every entry of the log applied) at the log's last entry, as the recovery
    /// from `peers.json` requires. The log is emptied; the commit index moves to its end.
    pub fn force_configuration(
        &mut self,
        conf_state: ConfState,
        peers: PeerBook,
        data: &[u8],
    ) -> Result<(), RaftError> {
        let index = self.last_index();
        let Some(term) = self.term_of(index) else {
            return Err(RaftError::CorruptStorage(format!(
                "last log entry {index} has no term"
            )));
        };
        let meta = SnapshotMetadata {
            index,
            term,
            conf_state: Some(conf_state).into(),
            ..SnapshotMetadata::default()
        };
        self.hard_state.commit = index;
        self.set_peers(peers);
        self.write_snapshot_durably(meta, data)
    }

    #[cfg(test)]
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    pub fn peers(&self) -> &PeerBook {
        &self.peers
    }

    /// Replaces the peer book in memory; it is written by the next `write`.
    pub fn set_peers(&mut self, peers: PeerBook) {
        if peers != self.peers {
            self.peers = peers;
            self.peers_dirty = true;
        }
    }

    pub fn snapshot_meta(&self) -> &SnapshotMetadata {
        &self.snapshot_meta
    }

    pub fn stats(&self) -> StorageStats {
        self.stats
    }

    pub fn first_index(&self) -> u64 {
        self.snapshot_meta.index + 1
    }

    pub fn last_index(&self) -> u64 {
        self.snapshot_meta.index + self.entries.len() as u64
    }

    /// The term of the entry at `index`, if it is in the log or is the snapshot's last entry.
    pub fn term_of(&self, index: u64) -> Option<u64> {
        if index == self.snapshot_meta.index {
            return Some(self.snapshot_meta.term);
        }
        self.entry(index).map(|e| e.term)
    }

    fn entry(&self, index: u64) -> Option<&Entry> {
        let offset = index.checked_sub(self.first_index())?;
        self.entries.get(usize::try_from(offset).ok()?)
    }

    /// Entries `[low, high)`, clamped to what the log holds; released payloads are read back
    /// from redb, but only about `max_bytes` of them (raft cuts the answer to that size).
    pub fn entries_between(
        &self,
        low: u64,
        high: u64,
        max_bytes: Option<u64>,
    ) -> Result<Vec<Entry>, RaftError> {
        let low = low.max(self.first_index());
        let high = high.min(self.last_index() + 1);
        let on_disk_end = high.min(self.released_upto + 1);
        if low < on_disk_end {
            let mut out = self.read_entries(low, on_disk_end, max_bytes)?;
            if out.len() as u64 == on_disk_end - low {
                out.extend((on_disk_end..high).filter_map(|i| self.entry(i).cloned()));
            }
            return Ok(out);
        }
        Ok((low..high).filter_map(|i| self.entry(i).cloned()).collect())
    }

    /// Entries `[low, high)` as stored in redb, stopping after the first one that passes
    /// `max_bytes` of payload in total.
    fn read_entries(
        &self,
        low: u64,
        high: u64,
        max_bytes: Option<u64>,
    ) -> Result<Vec<Entry>, RaftError> {
        let txn = self
            .db
            .begin_read()
            .map_err(|e| RaftError::storage("begin log read", e))?;
        let log = txn
            .open_table(LOG)
            .map_err(|e| RaftError::storage("open log table", e))?;
        let rows = log
            .range(low..high)
            .map_err(|e| RaftError::storage("read log", e))?;
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for (expected, row) in (low..).zip(rows) {
            let (key, value) = row.map_err(|e| RaftError::storage("read log", e))?;
            let entry = Entry::parse_from_bytes(value.value()).map_err(|e| {
                RaftError::CorruptStorage(format!("log entry {} does not decode: {e}", key.value()))
            })?;
            if entry.index != expected {
                return Err(RaftError::CorruptStorage(format!(
                    "log is not contiguous: expected entry {expected}, found {}",
                    entry.index
                )));
            }
            bytes += entry.data.len() as u64;
            out.push(entry);
            if max_bytes.is_some_and(|max| bytes > max) {
                return Ok(out);
            }
        }
        if out.len() as u64 != high - low {
            return Err(RaftError::CorruptStorage(format!(
                "log entries [{low}, {high}) are missing from the file"
            )));
        }
        Ok(out)
    }

    /// Drops from memory the payloads of applied entries (every entry held here is already in
    /// redb), oldest first: every one that each other server holds already (`held_by_all`,
    /// from the leader's view of its followers; a server that is not leading sends no entry),
    /// then more until at most `tail_budget` payload bytes remain. Raft reads unapplied
    /// entries to apply them, so those stay. A server alone in its cluster (a dev agent) keeps
    /// no applied payload at all, so its memory does not grow with its log.
    pub fn release_applied(&mut self, applied: u64, held_by_all: u64, tail_budget: u64) {
        loop {
            let next = self.released_upto.max(self.snapshot_meta.index) + 1;
            if next > applied
                || (next > held_by_all && self.stats.log_bytes_in_memory <= tail_budget)
            {
                break;
            }
            let Some(offset) = next
                .checked_sub(self.first_index())
                .and_then(|o| usize::try_from(o).ok())
            else {
                break;
            };
            let Some(entry) = self.entries.get_mut(offset) else {
                break;
            };
            self.stats.log_bytes_in_memory -= entry.data.len() as u64;
            entry.data = Default::default();
            entry.context = Default::default();
            self.released_upto = next;
        }
    }

    fn forget_entries_bytes(&mut self, range: std::ops::Range<usize>) {
        let released = self.released_upto;
        let freed: u64 = self
            .entries
            .range(range)
            .filter(|e| e.index > released)
            .map(|e| e.data.len() as u64)
            .sum();
        self.stats.log_bytes_in_memory -= freed;
    }

    /// Replaces the hard state in memory; it is written by the next `write`.
    pub fn set_hard_state(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    /// Raises the commit index in memory; it is written by the next `write`.
    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = self.hard_state.commit.max(commit);
    }

    /// Replaces the conf state in memory; it is written by the next `write`.
    pub fn set_conf_state(&mut self, cs: ConfState) {
        self.conf_state = cs;
        self.conf_state_dirty = true;
    }

    /// A writer of the next snapshot's payload, for another thread: it replaces whatever an
    /// earlier, unfinished one left in the staging table.
    pub fn snapshot_stager(&self) -> SnapshotStager {
        SnapshotStager::new(self.db.clone())
    }

    /// The file, for what reads and writes snapshot pieces beside the driver thread.
    pub fn database(&self) -> Arc<Database> {
        self.db.clone()
    }

    /// The payload of the snapshot at `meta` as received from the leader, as a stream.
    pub fn received_snapshot(&self, meta: &SnapshotMetadata) -> Result<SnapshotReader, RaftError> {
        read_received(&self.db, meta)
    }

    /// The newest snapshot's payload, as a stream.
    pub fn snapshot_reader(&self) -> Result<SnapshotReader, RaftError> {
        SnapshotReader::installed(&self.db)
    }

    /// The newest snapshot's payload, whole (small payloads only: tests).
    #[cfg(test)]
    pub fn snapshot_data(&self) -> Result<Vec<u8>, RaftError> {
        use std::io::Read;
        let mut data = Vec::new();
        self.snapshot_reader()?
            .read_to_end(&mut data)
            .map_err(|e| RaftError::CorruptStorage(e.to_string()))?;
        Ok(data)
    }

    /// Persists, in ONE redb transaction: an optional snapshot (dropping the log it covers),
    /// new entries (replacing any conflicting suffix), and the hard and conf state if they
    /// changed. `durable` picks `Durability::Immediate` (fsync) over `Durability::None`;
    /// `write(None, &[], true)` is thus a flush. Memory is updated only after the commit
    /// succeeded. Nothing to write writes nothing.
    pub fn write(
        &mut self,
        snapshot: Option<SnapshotToSave<'_>>,
        entries: &[Entry],
        durable: bool,
    ) -> Result<(), RaftError> {
        let hard_state_changed = self.hard_state != self.persisted_hard_state;
        // A durable write with nothing new still commits if earlier non-durable commits wait
        // for an fsync: it makes them durable.
        let sync_needed = durable && self.unsynced;
        if snapshot.is_none()
            && entries.is_empty()
            && !hard_state_changed
            && !self.conf_state_dirty
            && !self.peers_dirty
            && !sync_needed
        {
            return Ok(());
        }
        // Where the log stands once the snapshot (if any) is installed.
        let mut keep_tail = true;
        let mut base_index = self.snapshot_meta.index;
        let mut last_index = self.last_index();
        if let Some(snap) = &snapshot
            && snap.meta.index < self.snapshot_meta.index
        {
            return Err(RaftError::CorruptStorage(format!(
                "snapshot at {} is older than the stored one at {}",
                snap.meta.index, self.snapshot_meta.index
            )));
        }
        if let Some(snap) = &snapshot {
            // Raft's rule: keep the entries after the snapshot only if the log holds the
            // snapshot's last entry with the same term; otherwise the log is replaced.
            let index = snap.meta.index;
            keep_tail = self.term_of(index) == Some(snap.meta.term) && index <= last_index;
            base_index = index;
            last_index = if keep_tail { last_index } else { index };
        }
        if let Some(first) = entries.first()
            && (first.index <= base_index || first.index > last_index + 1)
        {
            return Err(RaftError::CorruptStorage(format!(
                "append of entries from {} to a log holding ({base_index}, {last_index}]",
                first.index
            )));
        }

        // A few of the entries the snapshot covers are deleted, oldest first.
        let covered_upto = snapshot
            .as_ref()
            .map_or(self.snapshot_meta.index, |snap| snap.meta.index);
        let compact_upto = covered_upto.min(self.compacted_from + COMPACT_PER_WRITE - 1);
        let mut txn = self
            .db
            .begin_write()
            .map_err(|e| RaftError::storage("begin write", e))?;
        txn.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })
        .map_err(|e| RaftError::storage("set durability", e))?;
        {
            let mut log = txn
                .open_table(LOG)
                .map_err(|e| RaftError::storage("open log table", e))?;
            let mut meta = txn
                .open_table(META)
                .map_err(|e| RaftError::storage("open meta table", e))?;
            if let Some(snap) = &snapshot
                && !keep_tail
            {
                // A log that disagrees with the snapshot goes now; what it covers goes below.
                log.retain_in(snap.meta.index + 1.., |_, _| false)
                    .map_err(|e| RaftError::storage("replace log", e))?;
            }
            if self.compacted_from <= compact_upto {
                log.retain_in(self.compacted_from..=compact_upto, |_, _| false)
                    .map_err(|e| RaftError::storage("compact log", e))?;
            }
            if let Some(snap) = &snapshot {
                meta.insert(KEY_SNAPSHOT_META, encode(&snap.meta)?.as_slice())
                    .map_err(|e| RaftError::storage("write snapshot metadata", e))?;
                meta.remove(KEY_SNAPSHOT_DATA)
                    .map_err(|e| RaftError::storage("drop old snapshot", e))?;
                match snap.data {
                    SnapshotData::Bytes(data) => {
                        let mut chunks = txn
                            .open_table(SNAPSHOT_CHUNKS)
                            .map_err(|e| RaftError::storage("open snapshot table", e))?;
                        chunks
                            .retain(|_, _| false)
                            .map_err(|e| RaftError::storage("drop old snapshot", e))?;
                        // An empty payload is still one (empty) piece, so "no snapshot" stays
                        // distinct.
                        let pieces = data.chunks(SNAPSHOT_CHUNK_BYTES);
                        let pieces = pieces.chain((data.is_empty()).then_some(&[][..]));
                        for (i, piece) in (0u32..).zip(pieces) {
                            chunks
                                .insert(i, piece)
                                .map_err(|e| RaftError::storage("write snapshot", e))?;
                        }
                    }
                    SnapshotData::Staged | SnapshotData::Received => {
                        let written = match snap.data {
                            SnapshotData::Received => {
                                forget_received(&mut meta)?;
                                SNAPSHOT_RECEIVED
                            }
                            _ => SNAPSHOT_STAGED,
                        };
                        // Dropping the old pieces and renaming the new ones costs the same
                        // whatever their size: nothing is copied.
                        txn.delete_table(SNAPSHOT_CHUNKS)
                            .map_err(|e| RaftError::storage("drop old snapshot", e))?;
                        txn.rename_table(written, SNAPSHOT_CHUNKS)
                            .map_err(|e| RaftError::storage("install snapshot", e))?;
                    }
                }
            }
            if let Some(first) = entries.first()
                && first.index <= last_index
            {
                log.retain_in(first.index.., |_, _| false)
                    .map_err(|e| RaftError::storage("truncate log", e))?;
            }
            for entry in entries {
                log.insert(entry.index, encode(entry)?.as_slice())
                    .map_err(|e| RaftError::storage("append entry", e))?;
            }
            let mut hard_state = self.hard_state.clone();
            let mut conf_state = self.conf_state.clone();
            if let Some(snap) = &snapshot {
                hard_state.commit = hard_state.commit.max(snap.meta.index);
                conf_state = snap.meta.get_conf_state().clone();
            }
            if hard_state != self.persisted_hard_state {
                meta.insert(KEY_HARD_STATE, encode(&hard_state)?.as_slice())
                    .map_err(|e| RaftError::storage("write hard state", e))?;
            }
            if self.conf_state_dirty || snapshot.is_some() {
                meta.insert(KEY_CONF_STATE, encode(&conf_state)?.as_slice())
                    .map_err(|e| RaftError::storage("write conf state", e))?;
            }
            if self.peers_dirty {
                meta.insert(KEY_PEERS, encode_book(&self.peers).as_slice())
                    .map_err(|e| RaftError::storage("write peers", e))?;
            }
        }
        txn.commit().map_err(|e| RaftError::storage("commit", e))?;
        self.compacted_from = self.compacted_from.max(compact_upto + 1);
        self.stats.commits += 1;
        if durable {
            self.stats.durable_commits += 1;
        }
        self.unsynced = !durable;

        // The transaction is in; mirror it in memory.
        if let Some(snap) = snapshot {
            if keep_tail {
                let covered = (snap.meta.index - self.snapshot_meta.index) as usize;
                self.forget_entries_bytes(0..covered);
                self.entries.drain(..covered);
            } else {
                self.forget_entries_bytes(0..self.entries.len());
                self.entries.clear();
                self.released_upto = 0;
            }
            self.hard_state.commit = self.hard_state.commit.max(snap.meta.index);
            self.conf_state = snap.meta.get_conf_state().clone();
            self.snapshot_meta = snap.meta;
        }
        if let Some(first) = entries.first() {
            let keep = (first.index - self.first_index()) as usize;
            self.forget_entries_bytes(keep..self.entries.len());
            self.entries.truncate(keep);
            self.released_upto = self.released_upto.min(first.index - 1);
            self.stats.log_bytes_in_memory +=
                entries.iter().map(|e| e.data.len() as u64).sum::<u64>();
            self.entries.extend(entries.iter().cloned());
        }
        self.persisted_hard_state = self.hard_state.clone();
        self.conf_state_dirty = false;
        self.peers_dirty = false;
        Ok(())
    }
}

fn encode(msg: &impl protobuf::Message) -> Result<Vec<u8>, RaftError> {
    msg.write_to_bytes().map_err(RaftError::from_codec)
}

pub(crate) fn read_proto<M: protobuf::Message>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &'static str,
) -> Result<Option<M>, RaftError> {
    let Some(value) = table
        .get(key)
        .map_err(|e| RaftError::storage("read metadata", e))?
    else {
        return Ok(None);
    };
    M::parse_from_bytes(value.value())
        .map(Some)
        .map_err(|e| RaftError::CorruptStorage(format!("{key} does not decode: {e}")))
}

impl Storage for RedbStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let max_size = max_size.into();
        let mut entries = self.entries_between(low, high, max_size).map_err(|e| {
            tracing::error!(low, high, error = %e, "cannot read log entries");
            raft::Error::Store(StorageError::Unavailable)
        })?;
        raft::util::limit_size(&mut entries, max_size);
        Ok(entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if let Some(term) = self.term_of(idx) {
            return Ok(term);
        }
        if idx < self.first_index() {
            Err(raft::Error::Store(StorageError::Compacted))
        } else {
            Err(raft::Error::Store(StorageError::Unavailable))
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(RedbStore::first_index(self))
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(RedbStore::last_index(self))
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        // "Temporarily unavailable" makes raft retry later instead of treating it as fatal. A
        // server added after the newest snapshot was taken would refuse it (raft-rs restores
        // no snapshot whose configuration lacks it): the one due for the change is coming.
        let conf = self.snapshot_meta.get_conf_state();
        let names_target = conf.voters.contains(&to) || conf.learners.contains(&to);
        if self.snapshot_meta.index == 0
            || self.snapshot_meta.index < request_index
            || !names_target
        {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut snapshot = Snapshot::default();
        snapshot.set_metadata(self.snapshot_meta.clone());
        // The message carries the peer book only (the follower learns the configuration's
        // addresses with it); the transport sends the payload beside it, piece by piece
        // (`OutgoingSnapshot`), so it is never read whole here.
        snapshot.set_data(wrap_snapshot_reference(&self.peers).into());
        Ok(snapshot)
    }
}

/// Replaces the stored snapshot's payload, as disk corruption or a foreign writer would.
#[cfg(test)]
pub(crate) fn overwrite_snapshot_payload(path: &Path, data: &[u8]) {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut chunks = txn.open_table(SNAPSHOT_CHUNKS).unwrap();
        assert!(chunks.get(0).unwrap().is_some(), "no snapshot to corrupt");
        chunks.retain(|_, _| false).unwrap();
        chunks.insert(0, data).unwrap();
    }
    txn.commit().unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry {
            index,
            term,
            data: data.to_vec().into(),
            ..Entry::default()
        }
    }

    fn snapshot_meta(index: u64, term: u64, voters: Vec<u64>) -> SnapshotMetadata {
        SnapshotMetadata {
            index,
            term,
            conf_state: Some(ConfState::from((voters, Vec::<u64>::new()))).into(),
            ..SnapshotMetadata::default()
        }
    }

    #[test]
    fn a_configuration_is_seen_without_opening_the_store() {
        let dir = TempDir::new("store-holds-configuration");
        let path = dir.path().join("raft.redb");
        RedbStore::open(&path).unwrap();
        assert!(!RedbStore::holds_configuration(&path).unwrap());
        RedbStore::open(&path)
            .unwrap()
            .bootstrap(&[1], PeerBook::new(), b"fresh")
            .unwrap();
        assert!(RedbStore::holds_configuration(&path).unwrap());
    }

    #[test]
    fn entries_hard_state_and_conf_state_survive_reopen() {
        let dir = TempDir::new("store-reopen");
        let path = dir.path().join("raft.redb");
        {
            let mut store = RedbStore::open(&path).unwrap();
            assert!(!store.is_initialized());
            let mut book = PeerBook::new();
            book.insert(2, crate::PeerInfo::new("h2:4647", "two"));
            store.bootstrap(&[1, 2, 3], book, b"fresh").unwrap();
            assert_eq!((store.first_index(), store.last_index()), (2, 1));
            store.set_hard_state(HardState {
                term: 2,
                vote: 1,
                commit: 3,
                ..HardState::default()
            });
            store
                .write(
                    None,
                    &[entry(2, 1, b"a"), entry(3, 2, b"b"), entry(4, 2, b"c")],
                    true,
                )
                .unwrap();
        }
        let store = RedbStore::open(&path).unwrap();
        assert!(store.is_initialized());
        assert_eq!(store.conf_state().voters, vec![1, 2, 3]);
        assert_eq!(store.peers()[&2].address, "h2:4647");
        assert_eq!((store.hard_state().term, store.hard_state().vote), (2, 1));
        assert_eq!(store.hard_state().commit, 3);
        assert_eq!((store.first_index(), store.last_index()), (2, 4));
        assert_eq!(store.term_of(1), Some(1));
        assert_eq!(store.snapshot_data().unwrap(), b"fresh".to_vec());
        let datas: Vec<_> = store
            .entries_between(2, 5, None)
            .unwrap()
            .iter()
            .map(|e| e.data.to_vec())
            .collect();
        assert_eq!(datas, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn snapshot_payloads_are_stored_in_pieces_and_old_single_values_still_read() {
        let dir = TempDir::new("store-snapshot-pieces");
        let path = dir.path().join("raft.redb");
        {
            let mut store = RedbStore::open(&path).unwrap();
            // 4-byte pieces in tests: 11 bytes are three of them.
            store
                .bootstrap(&[1], PeerBook::new(), b"state at 1!")
                .unwrap();
            assert_eq!(store.snapshot_data().unwrap(), b"state at 1!".to_vec());
            store
                .write(
                    Some(SnapshotToSave {
                        meta: snapshot_meta(1, 1, vec![1]),
                        data: SnapshotData::Bytes(b""),
                    }),
                    &[],
                    true,
                )
                .unwrap();
            assert_eq!(store.snapshot_data().unwrap(), Vec::<u8>::new());
        }
        // A file written before the pieces: the payload is one value of the meta table.
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut chunks = txn.open_table(SNAPSHOT_CHUNKS).unwrap();
                chunks.retain(|_, _| false).unwrap();
                let mut meta = txn.open_table(META).unwrap();
                meta.insert(KEY_SNAPSHOT_DATA, b"old layout".as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.snapshot_data().unwrap(), b"old layout".to_vec());
    }

    #[test]
    fn a_staged_snapshot_replaces_the_stored_one_only_when_installed() {
        use std::io::Write as _;
        let dir = TempDir::new("store-snapshot-staged");
        let path = dir.path().join("raft.redb");
        {
            let mut store = RedbStore::open(&path).unwrap();
            store.bootstrap(&[1], PeerBook::new(), b"first").unwrap();
            let batch: Vec<Entry> = (2..=4).map(|i| entry(i, 1, b"x")).collect();
            store.write(None, &batch, true).unwrap();

            // An encoder that died halfway leaves pieces behind; the next one starts over.
            let mut abandoned = store.snapshot_stager();
            abandoned.write_all(b"garbage that is long").unwrap();
            drop(abandoned);
            assert_eq!(store.snapshot_data().unwrap(), b"first".to_vec());

            let mut stager = store.snapshot_stager();
            // Written in uneven slices: 4-byte pieces in tests, so this is four of them.
            for part in [&b"state"[..], b" at", b" 3, staged"] {
                stager.write_all(part).unwrap();
            }
            assert_eq!(stager.finish().unwrap(), 18);
            assert_eq!(
                store.snapshot_data().unwrap(),
                b"first".to_vec(),
                "not the stored snapshot until installed"
            );
            store
                .write(
                    Some(SnapshotToSave {
                        meta: snapshot_meta(3, 1, vec![1]),
                        data: SnapshotData::Staged,
                    }),
                    &[],
                    false,
                )
                .unwrap();
            assert_eq!(
                store.snapshot_data().unwrap(),
                b"state at 3, staged".to_vec()
            );
            assert_eq!(store.first_index(), 4, "log compacted up to the snapshot");
            store.write(None, &[], true).unwrap();
        }
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.snapshot_meta().index, 3);
        assert_eq!(
            store.snapshot_data().unwrap(),
            b"state at 3, staged".to_vec()
        );
        // An empty payload staged is one empty piece: still a snapshot.
        let stager = store.snapshot_stager();
        assert_eq!(stager.finish().unwrap(), 0);
    }

    /// A bootstrapped store in `dir` holding entries 2..=9, each a payload of 10 bytes.
    fn store_with_entries_2_to_9(dir: &TempDir) -> RedbStore {
        let mut store = RedbStore::open(&dir.path().join("raft.redb")).unwrap();
        store.bootstrap(&[1], PeerBook::new(), b"fresh").unwrap();
        let batch: Vec<Entry> = (2..=9).map(|i| entry(i, 1, &[i as u8; 10])).collect();
        store.write(None, &batch, true).unwrap();
        store
    }

    #[test]
    fn released_payloads_leave_memory_and_are_read_back_from_redb() {
        let dir = TempDir::new("store-release");
        let mut store = store_with_entries_2_to_9(&dir);
        assert_eq!(store.stats().log_bytes_in_memory, 80);

        // Applied up to 5, budget 15 bytes, no follower holds anything: 2..=5 go (40 bytes),
        // 6..=9 stay though over budget because they are not applied yet.
        store.release_applied(5, 0, 15);
        assert_eq!(store.stats().log_bytes_in_memory, 40);
        assert!(store.entry(5).unwrap().data.is_empty());
        assert_eq!(store.entry(6).unwrap().data.len(), 10);
        assert_eq!(store.term_of(3), Some(1));

        let all = store.entries_between(2, 10, None).unwrap();
        let datas: Vec<Vec<u8>> = all.iter().map(|e| e.data.to_vec()).collect();
        let want: Vec<Vec<u8>> = (2..=9).map(|i| vec![i as u8; 10]).collect();
        assert_eq!(datas, want);
        // A size cap stops the read from disk after the entry that passes it.
        assert_eq!(store.entries_between(2, 10, Some(15)).unwrap().len(), 2);

        // A conflicting append over released entries replaces them and counts the new ones.
        store.write(None, &[entry(4, 2, b"new")], true).unwrap();
        assert_eq!(store.last_index(), 4);
        assert_eq!(store.stats().log_bytes_in_memory, 3);
        let datas: Vec<Vec<u8>> = store
            .entries_between(2, 5, None)
            .unwrap()
            .iter()
            .map(|e| e.data.to_vec())
            .collect();
        assert_eq!(datas, vec![vec![2u8; 10], vec![3u8; 10], b"new".to_vec()]);
    }

    #[test]
    fn payloads_every_follower_holds_leave_memory_whatever_the_budget() {
        let dir = TempDir::new("store-release-held");
        let mut store = store_with_entries_2_to_9(&dir);

        // Within budget, but the followers hold up to 4: 2..=4 go, 5..=7 (applied) stay for a
        // follower that still needs them.
        store.release_applied(7, 4, 1_000);
        assert_eq!(store.stats().log_bytes_in_memory, 50);
        assert!(store.entry(4).unwrap().data.is_empty());
        assert_eq!(store.entry(5).unwrap().data.len(), 10);

        // Alone (every other server holds everything): each applied payload goes.
        store.release_applied(7, u64::MAX, 1_000);
        assert_eq!(store.stats().log_bytes_in_memory, 20);
        assert!(store.entry(7).unwrap().data.is_empty());
        assert_eq!(store.entry(8).unwrap().data.len(), 10);
    }

    #[test]
    fn one_write_is_one_commit_whatever_the_number_of_entries() {
        let dir = TempDir::new("store-commits");
        let mut store = RedbStore::open(&dir.path().join("raft.redb")).unwrap();
        let batch: Vec<Entry> = (1..=500).map(|i| entry(i, 1, b"x")).collect();
        store.write(None, &batch, true).unwrap();
        assert_eq!(store.stats().commits, 1);
        assert_eq!(store.stats().durable_commits, 1);
        // Nothing changed: nothing written.
        store.write(None, &[], true).unwrap();
        assert_eq!(store.stats().commits, 1);
    }

    #[test]
    fn a_flush_makes_earlier_non_durable_commits_durable() {
        let dir = TempDir::new("store-flush");
        let mut store = RedbStore::open(&dir.path().join("raft.redb")).unwrap();
        store.write(None, &[entry(1, 1, b"a")], false).unwrap();
        store.write(None, &[], false).unwrap();
        assert_eq!(
            store.stats().commits,
            1,
            "nothing new, not even a sync asked"
        );
        store.write(None, &[], true).unwrap();
        assert_eq!(
            store.stats(),
            StorageStats {
                commits: 2,
                durable_commits: 1,
                log_bytes_in_memory: 1
            }
        );
        store.write(None, &[], true).unwrap();
        assert_eq!(store.stats().commits, 2, "already durable");
    }

    #[test]
    fn conflicting_append_replaces_the_suffix_on_disk() {
        let dir = TempDir::new("store-conflict");
        let path = dir.path().join("raft.redb");
        {
            let mut store = RedbStore::open(&path).unwrap();
            store
                .write(
                    None,
                    &[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")],
                    true,
                )
                .unwrap();
            store.write(None, &[entry(2, 2, b"B")], true).unwrap();
            assert_eq!(store.last_index(), 2);
        }
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.last_index(), 2);
        assert_eq!(store.term_of(2), Some(2));
        assert_eq!(
            store.entries_between(2, 3, None).unwrap()[0].data.to_vec(),
            b"B".to_vec()
        );
    }

    /// Keys of the log table as stored.
    fn stored_log_keys(store: &RedbStore) -> Vec<u64> {
        let txn = store.db.begin_read().unwrap();
        let log = txn.open_table(LOG).unwrap();
        log.range::<u64>(..)
            .unwrap()
            .map(|row| row.unwrap().0.value())
            .collect()
    }

    #[test]
    fn entries_a_snapshot_covers_leave_the_table_a_few_per_write() {
        let dir = TempDir::new("store-compact-gradually");
        let path = dir.path().join("raft.redb");
        let covered = COMPACT_PER_WRITE * 2 + 5;
        {
            let mut store = RedbStore::open(&path).unwrap();
            let batch: Vec<Entry> = (1..=covered + 3).map(|i| entry(i, 1, b"x")).collect();
            store.write(None, &batch, true).unwrap();
            let snapshot = SnapshotToSave {
                meta: snapshot_meta(covered, 1, vec![1]),
                data: SnapshotData::Bytes(b"state"),
            };
            store.write(Some(snapshot), &[], true).unwrap();
            let keys = stored_log_keys(&store);
            assert_eq!(
                keys.first(),
                Some(&(COMPACT_PER_WRITE + 1)),
                "only the oldest went"
            );
            assert_eq!(
                (store.first_index(), store.last_index()),
                (covered + 1, covered + 3)
            );
        }
        // Reopened halfway: the covered entries still stored are not taken for the log.
        let mut store = RedbStore::open(&path).unwrap();
        assert_eq!(
            (store.first_index(), store.last_index()),
            (covered + 1, covered + 3)
        );
        // Writes with nothing in them are skipped; the log's next appends carry the deletes.
        store
            .write(None, &[entry(covered + 4, 1, b"y")], true)
            .unwrap();
        store
            .write(None, &[entry(covered + 5, 1, b"y")], true)
            .unwrap();
        assert_eq!(
            stored_log_keys(&store),
            (covered + 1..=covered + 5).collect::<Vec<_>>()
        );
    }

    #[test]
    fn local_snapshot_compacts_the_log_and_keeps_the_tail() {
        let dir = TempDir::new("store-compact");
        let path = dir.path().join("raft.redb");
        {
            let mut store = RedbStore::open(&path).unwrap();
            let batch: Vec<Entry> = (1..=10).map(|i| entry(i, 1, b"x")).collect();
            store.write(None, &batch, true).unwrap();
            store
                .write(
                    Some(SnapshotToSave {
                        meta: snapshot_meta(6, 1, vec![1, 2]),
                        data: SnapshotData::Bytes(b"state@6"),
                    }),
                    &[],
                    true,
                )
                .unwrap();
            assert_eq!((store.first_index(), store.last_index()), (7, 10));
        }
        let store = RedbStore::open(&path).unwrap();
        assert_eq!((store.first_index(), store.last_index()), (7, 10));
        assert_eq!(store.term_of(6), Some(1));
        assert_eq!(store.snapshot_data().unwrap(), b"state@6".to_vec());
        assert_eq!(
            store.term(5),
            Err(raft::Error::Store(StorageError::Compacted))
        );
        assert_eq!(
            store.entries(5, 8, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        );
        let snap = store.snapshot(0, 2).unwrap();
        assert_eq!(snap.get_metadata().index, 6);
        // A server the snapshot's configuration does not name would refuse it: none offered.
        assert_eq!(
            store.snapshot(0, 3),
            Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable
            ))
        );
        // The message names the snapshot; its payload goes beside it.
        assert!(crate::peers::unwrap_snapshot_reference(snap.get_data()).is_ok());
        let pieces: Vec<u8> = crate::snapshot_pieces::OutgoingSnapshot::open(&store.db, 6, 1)
            .unwrap()
            .flat_map(Result::unwrap)
            .collect();
        assert_eq!(pieces, b"state@6");
    }

    #[test]
    fn snapshot_from_a_diverging_leader_replaces_the_whole_log() {
        let dir = TempDir::new("store-install");
        let mut store = RedbStore::open(&dir.path().join("raft.redb")).unwrap();
        let batch: Vec<Entry> = (1..=5).map(|i| entry(i, 1, b"x")).collect();
        store.write(None, &batch, true).unwrap();
        // The leader's snapshot ends at index 4 but with term 3: our entries are stale.
        store
            .write(
                Some(SnapshotToSave {
                    meta: snapshot_meta(4, 3, vec![1, 2, 3]),
                    data: SnapshotData::Bytes(b"leader"),
                }),
                &[entry(5, 3, b"new")],
                true,
            )
            .unwrap();
        assert_eq!((store.first_index(), store.last_index()), (5, 5));
        assert_eq!(store.term_of(5), Some(3));
        assert_eq!(store.hard_state().commit, 4);
        assert_eq!(store.conf_state().voters, vec![1, 2, 3]);
    }

    #[test]
    fn a_file_with_an_unknown_format_version_is_refused() {
        let dir = TempDir::new("store-format");
        let path = dir.path().join("raft.redb");
        drop(RedbStore::open(&path).unwrap());
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut meta = txn.open_table(META).unwrap();
                meta.insert(KEY_FORMAT, 99u32.to_le_bytes().as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let err = RedbStore::open(&path).err().unwrap();
        assert!(
            matches!(&err, RaftError::CorruptStorage(m) if m.contains("unknown format version 99")),
            "{err}"
        );
    }

    #[test]
    fn an_append_leaving_a_gap_is_refused() {
        let dir = TempDir::new("store-gap");
        let mut store = RedbStore::open(&dir.path().join("raft.redb")).unwrap();
        store.write(None, &[entry(1, 1, b"a")], true).unwrap();
        let err = store.write(None, &[entry(3, 1, b"c")], true).err().unwrap();
        assert!(matches!(err, RaftError::CorruptStorage(_)), "{err}");
        assert_eq!(store.last_index(), 1);
    }
}
