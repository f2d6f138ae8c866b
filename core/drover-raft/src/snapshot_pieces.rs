//! A snapshot's payload in redb, in pieces: written as it is encoded ([`SnapshotStager`]) or as
//! it arrives from the leader ([`IncomingSnapshot`]), read as a stream to restore the state
//! machine ([`SnapshotReader`]), and read piece by piece to send it to a follower
//! ([`OutgoingSnapshot`]).
//!
//! Every table here holds `position -> piece`. A payload is never whole in memory on its way
//! in or out: the state of a million allocations is gigabytes, and a leader holding it once
//! more per follower it sends it to would be killed for it. Each piece written is its own
//! non-durable write transaction, so the log's commits interleave; the transaction that
//! installs the payload (renaming its table) is durable and makes them durable with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use raft::eraftpb::{Message, MessageType, SnapshotMetadata};
use redb::{Database, Durability, ReadableDatabase};
use redb::{ReadTransaction, TableDefinition};
use tokio::sync::oneshot;

use crate::driver::Command;
use crate::error::RaftError;
use crate::store::{KEY_SNAPSHOT_DATA, KEY_SNAPSHOT_META, META, read_proto};

type Pieces = TableDefinition<'static, u32, &'static [u8]>;

/// The installed snapshot's payload, by position: redb refuses values over 3 GiB, and the
/// state of a million allocations comes close to that.
pub(crate) const SNAPSHOT_CHUNKS: Pieces = TableDefinition::new("raft_snapshot_chunks");
/// A snapshot being written by a [`SnapshotStager`] before it replaces the installed one (by
/// renaming the table, in the transaction that compacts the log).
pub(crate) const SNAPSHOT_STAGED: Pieces = TableDefinition::new("raft_snapshot_staged");
/// A snapshot arriving from the leader ([`IncomingSnapshot`]), installed the same way once
/// raft accepts it.
pub(crate) const SNAPSHOT_RECEIVED: Pieces = TableDefinition::new("raft_snapshot_received");
/// In `META`: index and term (16 bytes, little endian) of the snapshot `SNAPSHOT_RECEIVED`
/// holds whole. Absent while pieces are still arriving.
const KEY_SNAPSHOT_RECEIVED: &str = "snapshot_received";

/// Size of one piece of a payload this server writes (tiny in tests, so every snapshot there
/// has many): what a snapshot being written holds in memory at most. Pieces of other sizes
/// (files written before, a leader's) read the same.
#[cfg(not(test))]
pub(crate) const SNAPSHOT_CHUNK_BYTES: usize = 8 * 1024 * 1024;
#[cfg(test)]
pub(crate) const SNAPSHOT_CHUNK_BYTES: usize = 4;

fn storage(context: &'static str) -> impl FnOnce(redb::Error) -> RaftError {
    move |e| RaftError::storage(context, e)
}

/// Appends pieces to one table, each in its own non-durable write transaction; the first one
/// empties the table of whatever an unfinished payload left there.
struct PieceWriter {
    db: Arc<Database>,
    table: Pieces,
    next: u32,
    written: u64,
}

impl PieceWriter {
    fn new(db: Arc<Database>, table: Pieces) -> PieceWriter {
        PieceWriter {
            db,
            table,
            next: 0,
            written: 0,
        }
    }

    fn write(&mut self, piece: &[u8]) -> Result<(), RaftError> {
        let mut txn = self
            .db
            .begin_write()
            .map_err(|e| storage("begin write")(e.into()))?;
        // Made durable with the transaction that installs it.
        txn.set_durability(Durability::None)
            .map_err(|e| storage("set durability")(e.into()))?;
        {
            let mut table = txn
                .open_table(self.table)
                .map_err(|e| storage("open snapshot table")(e.into()))?;
            if self.next == 0 {
                table
                    .retain(|_, _| false)
                    .map_err(|e| storage("drop unfinished snapshot")(e.into()))?;
            }
            table
                .insert(self.next, piece)
                .map_err(|e| storage("write snapshot piece")(e.into()))?;
        }
        txn.commit()
            .map_err(|e| storage("commit snapshot piece")(e.into()))?;
        self.written += piece.len() as u64;
        self.next += 1;
        Ok(())
    }

    /// Writes an empty piece if there was none: an empty payload is one empty piece, so "no
    /// snapshot" stays distinct. Returns the payload's size.
    fn finish(mut self) -> Result<u64, RaftError> {
        if self.next == 0 {
            self.write(&[])?;
        }
        Ok(self.written)
    }
}

/// Writes a snapshot's payload into the staging table as the state machine encodes it, a
/// piece (`SNAPSHOT_CHUNK_BYTES`) per write transaction, so memory holds one piece at most.
/// [`SnapshotStager::finish`] writes the last; a store `write` with `SnapshotData::Staged`
/// then installs it.
pub(crate) struct SnapshotStager {
    pieces: PieceWriter,
    piece: Vec<u8>,
    /// Set by the node stopping: the next write fails, so the encoder ends (and lets go of
    /// the database) within one piece instead of finishing a snapshot nobody will install.
    abandoned: Arc<AtomicBool>,
}

impl SnapshotStager {
    pub fn new(db: Arc<Database>) -> SnapshotStager {
        SnapshotStager {
            pieces: PieceWriter::new(db, SNAPSHOT_STAGED),
            piece: Vec::new(),
            abandoned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What makes this stager's writes fail from now on.
    pub fn abandon_handle(&self) -> Arc<AtomicBool> {
        self.abandoned.clone()
    }

    fn write_piece(&mut self) -> std::io::Result<()> {
        self.pieces
            .write(&self.piece)
            .map_err(|e| std::io::Error::other(format!("staged snapshot: {e}")))?;
        self.piece.clear();
        Ok(())
    }

    /// Writes the last piece; returns the payload's size.
    pub fn finish(mut self) -> std::io::Result<u64> {
        if !self.piece.is_empty() {
            self.write_piece()?;
        }
        self.pieces
            .finish()
            .map_err(|e| std::io::Error::other(format!("staged snapshot: {e}")))
    }
}

impl std::io::Write for SnapshotStager {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.abandoned.load(Ordering::Relaxed) {
            return Err(std::io::Error::other(
                "snapshot abandoned: the raft node is stopping",
            ));
        }
        if self.piece.capacity() == 0 {
            self.piece.reserve_exact(SNAPSHOT_CHUNK_BYTES);
        }
        let room = SNAPSHOT_CHUNK_BYTES - self.piece.len();
        let taken = buf.len().min(room);
        self.piece.extend_from_slice(&buf[..taken]);
        if self.piece.len() == SNAPSHOT_CHUNK_BYTES {
            self.write_piece()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn received_marker(index: u64, term: u64) -> [u8; 16] {
    let mut marker = [0; 16];
    marker[..8].copy_from_slice(&index.to_le_bytes());
    marker[8..].copy_from_slice(&term.to_le_bytes());
    marker
}

/// The payload of the snapshot at `meta` that [`IncomingSnapshot`] received whole; an error
/// if what the table holds is another snapshot, or one cut short.
pub(crate) fn read_received(
    db: &Database,
    meta: &SnapshotMetadata,
) -> Result<SnapshotReader, RaftError> {
    let txn = db
        .begin_read()
        .map_err(|e| storage("begin snapshot read")(e.into()))?;
    let marker = txn
        .open_table(META)
        .map_err(|e| storage("open meta table")(e.into()))?
        .get(KEY_SNAPSHOT_RECEIVED)
        .map_err(|e| storage("read received snapshot")(e.into()))?
        .map(|v| v.value().to_vec());
    if marker.as_deref() != Some(received_marker(meta.index, meta.term).as_slice()) {
        return Err(RaftError::SnapshotTransfer(format!(
            "the payload of snapshot {} (term {}) was not received whole",
            meta.index, meta.term
        )));
    }
    let pieces = StoredPieces::of_table(&txn, SNAPSHOT_RECEIVED)?.ok_or_else(|| {
        RaftError::CorruptStorage(format!("received snapshot {} has no pieces", meta.index))
    })?;
    Ok(SnapshotReader::new(pieces))
}

/// Changes the `META` table in a transaction of its own (made durable with the next durable one).
fn write_meta(
    db: &Database,
    change: impl FnOnce(&mut redb::Table<&str, &[u8]>) -> Result<(), RaftError>,
) -> Result<(), RaftError> {
    let mut txn = db
        .begin_write()
        .map_err(|e| storage("begin write")(e.into()))?;
    txn.set_durability(Durability::None)
        .map_err(|e| storage("set durability")(e.into()))?;
    {
        let mut meta = txn
            .open_table(META)
            .map_err(|e| storage("open meta table")(e.into()))?;
        change(&mut meta)?;
    }
    txn.commit().map_err(|e| storage("commit")(e.into()))
}

/// Drops the "received whole" marker, in the transaction that installs the received payload.
pub(crate) fn forget_received(meta: &mut redb::Table<&str, &[u8]>) -> Result<(), RaftError> {
    meta.remove(KEY_SNAPSHOT_RECEIVED)
        .map(|_| ())
        .map_err(|e| storage("drop received snapshot marker")(e.into()))
}

/// The pieces of a stored payload in order, as one read transaction saw them: a snapshot
/// installed meanwhile does not change what is read.
struct StoredPieces {
    rows: Option<redb::Range<'static, u32, &'static [u8]>>,
    /// A payload stored as one value (files written before pieces), given in pieces.
    whole: Option<(Vec<u8>, usize)>,
    expected: u32,
}

impl StoredPieces {
    /// `None` when there is no such table (nothing was ever stored there).
    fn of_table(txn: &ReadTransaction, table: Pieces) -> Result<Option<StoredPieces>, RaftError> {
        let table = match txn.open_table(table) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(storage("open snapshot table")(e.into())),
        };
        let rows = table
            .range::<u32>(..)
            .map_err(|e| storage("read snapshot")(e.into()))?;
        Ok(Some(StoredPieces {
            rows: Some(rows),
            whole: None,
            expected: 0,
        }))
    }

    fn whole(payload: Vec<u8>) -> StoredPieces {
        StoredPieces {
            rows: None,
            whole: Some((payload, 0)),
            expected: 0,
        }
    }

    /// The installed snapshot's pieces if it is the one at `index` and `term`; an error if
    /// another one replaced it meanwhile. `None` for either: whatever is installed.
    fn installed(db: &Database, expect: Option<(u64, u64)>) -> Result<StoredPieces, RaftError> {
        let txn = db
            .begin_read()
            .map_err(|e| storage("begin snapshot read")(e.into()))?;
        let meta = txn
            .open_table(META)
            .map_err(|e| storage("open meta table")(e.into()))?;
        let stored: SnapshotMetadata = read_proto(&meta, KEY_SNAPSHOT_META)?.unwrap_or_default();
        if let Some((index, term)) = expect
            && (stored.index, stored.term) != (index, term)
        {
            return Err(RaftError::SnapshotTransfer(format!(
                "snapshot {index} (term {term}) is no longer stored (the newest is {} of term {})",
                stored.index, stored.term
            )));
        }
        if let Some(whole) = meta
            .get(KEY_SNAPSHOT_DATA)
            .map_err(|e| storage("read snapshot")(e.into()))?
        {
            return Ok(StoredPieces::whole(whole.value().to_vec()));
        }
        StoredPieces::of_table(&txn, SNAPSHOT_CHUNKS)?.ok_or_else(|| {
            RaftError::CorruptStorage(format!(
                "snapshot {} has metadata but no payload",
                stored.index
            ))
        })
    }
}

/// One piece as read: still in redb's buffer, or (from a payload stored whole) a copy.
enum Piece {
    Stored(redb::AccessGuard<'static, &'static [u8]>),
    Owned(Vec<u8>),
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Stored(guard) => guard.value(),
            Piece::Owned(bytes) => bytes,
        }
    }

    fn into_vec(self) -> Vec<u8> {
        match self {
            Piece::Stored(guard) => guard.value().to_vec(),
            Piece::Owned(bytes) => bytes,
        }
    }
}

impl Iterator for StoredPieces {
    type Item = Result<Piece, RaftError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some((whole, at)) = &mut self.whole {
            if *at >= whole.len() && !(whole.is_empty() && self.expected == 0) {
                return None;
            }
            let end = (*at + SNAPSHOT_CHUNK_BYTES).min(whole.len());
            let piece = whole[*at..end].to_vec();
            *at = end;
            self.expected += 1;
            return Some(Ok(Piece::Owned(piece)));
        }
        let row = self.rows.as_mut()?.next()?;
        let expected = self.expected;
        self.expected += 1;
        Some(match row {
            Ok((key, _)) if key.value() != expected => Err(RaftError::CorruptStorage(format!(
                "snapshot piece {expected} is missing"
            ))),
            Ok((_, value)) => Ok(Piece::Stored(value)),
            Err(e) => Err(storage("read snapshot")(e.into())),
        })
    }
}

/// The installed snapshot's payload, piece by piece, to send to a follower.
pub struct OutgoingSnapshot(StoredPieces);

impl OutgoingSnapshot {
    /// Opens the installed snapshot if it is the one at `index` and `term` (the one a
    /// `MsgSnapshot` names); an error if another one replaced it meanwhile.
    pub(crate) fn open(
        db: &Database,
        index: u64,
        term: u64,
    ) -> Result<OutgoingSnapshot, RaftError> {
        StoredPieces::installed(db, Some((index, term))).map(OutgoingSnapshot)
    }
}

impl Iterator for OutgoingSnapshot {
    type Item = Result<Vec<u8>, RaftError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|piece| piece.map(Piece::into_vec))
    }
}

/// A stored payload as a byte stream, for the state machine to decode as it is read: at most
/// a few pieces (a few MiB each) of it are in memory, never the gigabytes of a large state.
/// The pieces are read from redb by a thread of its own, two ahead of the reader, so reading
/// the file overlaps with decoding.
pub struct SnapshotReader {
    pieces: std::sync::mpsc::Receiver<Result<Piece, RaftError>>,
    piece: Piece,
    at: usize,
}

/// Pieces read ahead of the reader.
const READ_AHEAD: usize = 2;

impl SnapshotReader {
    fn new(stored: StoredPieces) -> SnapshotReader {
        let (send, pieces) = std::sync::mpsc::sync_channel(READ_AHEAD);
        let failed = send.clone();
        let spawned = std::thread::Builder::new()
            .name("drover-snap-read".into())
            .spawn(move || {
                for piece in stored {
                    // The reader is gone (done, or it stopped at an error).
                    if send.send(piece).is_err() {
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            let _ = failed.try_send(Err(RaftError::Stopped {
                reason: format!("cannot start a thread to read the snapshot: {e}"),
            }));
        }
        SnapshotReader {
            pieces,
            piece: Piece::Owned(Vec::new()),
            at: 0,
        }
    }

    /// The installed snapshot's payload.
    pub(crate) fn installed(db: &Database) -> Result<SnapshotReader, RaftError> {
        StoredPieces::installed(db, None).map(SnapshotReader::new)
    }
}

impl std::io::Read for SnapshotReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.piece.bytes().len() {
            match self.pieces.recv() {
                // Every piece was read (the thread ended).
                Err(_) => return Ok(0),
                Ok(Err(e)) => return Err(std::io::Error::other(e)),
                Ok(Ok(piece)) => {
                    self.piece = piece;
                    self.at = 0;
                }
            }
        }
        let piece = self.piece.bytes();
        let n = buf.len().min(piece.len() - self.at);
        buf[..n].copy_from_slice(&piece[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Refuses a second snapshot arriving while one is: both would write the same table.
#[derive(Debug, Default)]
pub(crate) struct ReceiveSlot(AtomicBool);

/// Held while a snapshot is received and until the driver has handled it.
struct SlotGuard(Arc<ReceiveSlot>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.0.store(false, Ordering::Release);
    }
}

/// A snapshot arriving from the leader: its pieces go to redb as they come, then
/// [`IncomingSnapshot::finish`] hands raft the message that announced it. Dropped unfinished
/// (the leader went away, the stream broke), it changes nothing: the leader sends it again.
pub struct IncomingSnapshot {
    pieces: PieceWriter,
    commands: std::sync::mpsc::Sender<Command>,
    _slot: SlotGuard,
}

impl IncomingSnapshot {
    pub(crate) fn begin(
        db: Arc<Database>,
        slot: Arc<ReceiveSlot>,
        commands: std::sync::mpsc::Sender<Command>,
    ) -> Result<IncomingSnapshot, RaftError> {
        if slot.0.swap(true, Ordering::AcqRel) {
            return Err(RaftError::SnapshotTransfer(
                "another snapshot is being received".into(),
            ));
        }
        let guard = SlotGuard(slot);
        // Not "received whole" until `finish` says so again.
        write_meta(&db, forget_received)?;
        Ok(IncomingSnapshot {
            pieces: PieceWriter::new(db, SNAPSHOT_RECEIVED),
            commands,
            _slot: guard,
        })
    }

    /// Writes the next piece of the payload (blocking: one redb transaction).
    pub fn write(&mut self, piece: &[u8]) -> Result<(), RaftError> {
        self.pieces.write(piece)
    }

    /// Payload bytes written so far.
    pub fn received(&self) -> u64 {
        self.pieces.written
    }

    /// Marks the payload whole and steps `msg` (the `MsgSnapshot` that announced it) into
    /// raft. Blocking: one redb transaction. The returned handle resolves once the driver
    /// has handled it (installed the snapshot, or found it stale).
    pub fn finish(self, msg: Message) -> Result<SnapshotHandedOver, RaftError> {
        if msg.get_msg_type() != MessageType::MsgSnapshot {
            return Err(RaftError::SnapshotTransfer(format!(
                "a snapshot's payload came with a {:?}, not a MsgSnapshot",
                msg.get_msg_type()
            )));
        }
        let meta = msg.get_snapshot().get_metadata();
        let marker = received_marker(meta.index, meta.term);
        let IncomingSnapshot {
            pieces,
            commands,
            _slot,
        } = self;
        let db = pieces.db.clone();
        pieces.finish()?;
        write_meta(&db, |meta| {
            meta.insert(KEY_SNAPSHOT_RECEIVED, marker.as_slice())
                .map(|_| ())
                .map_err(|e| storage("mark snapshot received")(e.into()))
        })?;
        let (done, handled) = oneshot::channel();
        commands
            .send(Command::StepSnapshot { msg, done })
            .map_err(|_| RaftError::ShuttingDown)?;
        Ok(SnapshotHandedOver { handled, _slot })
    }
}

/// A received snapshot raft has been given; the slot stays taken until the driver handled it.
pub struct SnapshotHandedOver {
    handled: oneshot::Receiver<()>,
    _slot: SlotGuard,
}

impl SnapshotHandedOver {
    /// Waits until the driver handled the snapshot; an error if the node stopped first.
    pub async fn handled(self) -> Result<(), RaftError> {
        self.handled.await.map_err(|_| RaftError::ShuttingDown)
    }

    /// [`SnapshotHandedOver::handled`] for a thread outside any runtime.
    pub fn wait(self) -> Result<(), RaftError> {
        self.handled
            .blocking_recv()
            .map_err(|_| RaftError::ShuttingDown)
    }
}
