//! Operator snapshot archives (`drover operator snapshot save/restore`): the whole state with
//! a SHA-256 checksum, so a truncated or corrupt file is refused before anything changes.
//!
//! Layout (version 2, written as the state is encoded, so a save never holds the state's
//! encoding in memory): the line `DROVER-SNAPSHOT-2`, a line of JSON with the Raft index and
//! term, the state store's snapshot encoding, then a newline and a last line of JSON with the
//! state's size and SHA-256. The size and checksum come last because they are known only once
//! the state is written; the last line is found from the end of the archive.
//!
//! Version 1 archives (the line `DROVER-SNAPSHOT-1`, one line of JSON with index, term, size
//! and SHA-256, then exactly `Size` bytes of state) are still read.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const MAGIC_V1: &[u8] = b"DROVER-SNAPSHOT-1\n";
const MAGIC_V2: &[u8] = b"DROVER-SNAPSHOT-2\n";
/// Longer than any last line a version 2 archive can have (`{"Size":<20 digits>,"SHA256":"<64
/// hex>"}` and its newlines): what a streaming check keeps back from the hash until the end.
const TAIL_WINDOW: usize = 256;

/// The metadata of an archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveMeta {
    /// Raft index the state was taken at.
    #[serde(rename = "Index")]
    pub index: u64,
    #[serde(rename = "Term")]
    pub term: u64,
    /// Length of the state payload in bytes.
    #[serde(rename = "Size")]
    pub size: u64,
    /// Hex SHA-256 of the state payload.
    #[serde(rename = "SHA256")]
    pub sha256: String,
}

/// The first metadata line of a version 2 archive.
#[derive(Serialize, Deserialize)]
struct Head {
    #[serde(rename = "Index")]
    index: u64,
    #[serde(rename = "Term")]
    term: u64,
}

/// The last line of a version 2 archive.
#[derive(Serialize, Deserialize)]
struct Tail {
    #[serde(rename = "Size")]
    size: u64,
    #[serde(rename = "SHA256")]
    sha256: String,
}

/// Why an archive is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("not a Drover snapshot archive (missing the DROVER-SNAPSHOT-1 or -2 header)")]
    NotAnArchive,
    #[error("snapshot archive metadata is unreadable: {0}")]
    BadMetadata(String),
    #[error(
        "snapshot archive is truncated or has trailing data: {got} bytes of state, expected {expected}"
    )]
    WrongSize { expected: u64, got: u64 },
    #[error("snapshot archive is corrupt: SHA-256 of the state is {got}, expected {expected}")]
    Checksum { expected: String, got: String },
    #[error("snapshot archive is truncated or damaged: {0}")]
    Truncated(String),
    #[error("snapshot archive cannot be read: {0}")]
    Read(String),
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes a version 2 archive into `out` as the state is written into it: everything written
/// to the writer is the state's encoding; [`ArchiveWriter::finish`] adds the size and checksum.
pub struct ArchiveWriter<W: Write> {
    out: W,
    hasher: Sha256,
    size: u64,
    index: u64,
    term: u64,
}

impl<W: Write> ArchiveWriter<W> {
    /// Writes the archive's head for a state taken at `index`, `term`.
    pub fn new(mut out: W, index: u64, term: u64) -> io::Result<ArchiveWriter<W>> {
        out.write_all(MAGIC_V2)?;
        serde_json::to_writer(&mut out, &Head { index, term })?;
        out.write_all(b"\n")?;
        Ok(ArchiveWriter {
            out,
            hasher: Sha256::new(),
            size: 0,
            index,
            term,
        })
    }

    /// Writes the last line, flushes, and returns the writer and what the archive holds.
    pub fn finish(mut self) -> io::Result<(W, ArchiveMeta)> {
        let meta = ArchiveMeta {
            index: self.index,
            term: self.term,
            size: self.size,
            sha256: hex(&self.hasher.finalize()),
        };
        self.out.write_all(b"\n")?;
        let tail = Tail {
            size: meta.size,
            sha256: meta.sha256.clone(),
        };
        serde_json::to_writer(&mut self.out, &tail)?;
        self.out.write_all(b"\n")?;
        self.out.flush()?;
        Ok((self.out, meta))
    }
}

impl<W: Write> Write for ArchiveWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// An archive of `state` (a state store snapshot taken at `index`, `term`), in memory.
pub fn build(index: u64, term: u64, state: &[u8]) -> Vec<u8> {
    let mut writer = match ArchiveWriter::new(Vec::with_capacity(state.len() + 256), index, term) {
        Ok(w) => w,
        // Writing into a Vec, and serialising two integers, cannot fail.
        Err(_) => return Vec::new(),
    };
    if writer.write_all(state).is_err() {
        return Vec::new();
    }
    writer.finish().map(|(out, _)| out).unwrap_or_default()
}

/// Checks an archive read from `input` without holding it: its metadata, size and checksum.
/// Returns the metadata and the length of the archive's head (where the state starts).
pub fn check(input: &mut dyn Read) -> Result<(ArchiveMeta, usize), ArchiveError> {
    let read_err = |e: io::Error| ArchiveError::Read(e.to_string());
    let mut magic = Vec::with_capacity(MAGIC_V1.len());
    input
        .take(MAGIC_V1.len() as u64)
        .read_to_end(&mut magic)
        .map_err(read_err)?;
    let v2 = match magic.as_slice() {
        m if m == MAGIC_V1 => false,
        m if m == MAGIC_V2 => true,
        _ => return Err(ArchiveError::NotAnArchive),
    };
    let head = read_line(input).map_err(read_err)?;
    let head_len = MAGIC_V1.len() + head.len() + 1;
    let bad_meta = |e: serde_json::Error| ArchiveError::BadMetadata(e.to_string());
    let mut hasher = Sha256::new();
    if !v2 {
        let meta: ArchiveMeta = serde_json::from_slice(&head).map_err(bad_meta)?;
        let size = hash_to_end(input, &mut hasher, 0).map_err(read_err)?.0;
        compare(&meta, size, hex(&hasher.finalize()))?;
        return Ok((meta, head_len));
    }
    let head: Head = serde_json::from_slice(&head).map_err(bad_meta)?;
    // The last line is found from the end: the bytes that may hold it are hashed only once
    // the end shows which of them are state.
    let (hashed, kept) = hash_to_end(input, &mut hasher, TAIL_WINDOW).map_err(read_err)?;
    let no_tail =
        || ArchiveError::Truncated("no last line with the state's size and checksum".into());
    let body = kept.strip_suffix(b"\n").ok_or_else(no_tail)?;
    let split = body.iter().rposition(|b| *b == b'\n').ok_or_else(no_tail)?;
    let tail: Tail = serde_json::from_slice(&body[split + 1..]).map_err(|e| {
        ArchiveError::Truncated(format!(
            "the last line is not the state's size and checksum ({e})"
        ))
    })?;
    hasher.update(&body[..split]);
    let meta = ArchiveMeta {
        index: head.index,
        term: head.term,
        size: tail.size,
        sha256: tail.sha256,
    };
    compare(&meta, hashed + split as u64, hex(&hasher.finalize()))?;
    Ok((meta, head_len))
}

fn compare(meta: &ArchiveMeta, size: u64, sha256: String) -> Result<(), ArchiveError> {
    if size != meta.size {
        return Err(ArchiveError::WrongSize {
            expected: meta.size,
            got: size,
        });
    }
    if !sha256.eq_ignore_ascii_case(&meta.sha256) {
        return Err(ArchiveError::Checksum {
            expected: meta.sha256.clone(),
            got: sha256,
        });
    }
    Ok(())
}

/// Hashes everything `input` still holds but its last `keep_back` bytes, which it returns
/// unhashed, with the count of bytes hashed.
fn hash_to_end(
    input: &mut dyn Read,
    hasher: &mut Sha256,
    keep_back: usize,
) -> io::Result<(u64, Vec<u8>)> {
    let mut hashed = 0u64;
    let mut pending: Vec<u8> = Vec::with_capacity(256 * 1024);
    let mut buf = vec![0u8; 128 * 1024];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return Ok((hashed, pending)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        pending.extend_from_slice(&buf[..n]);
        if pending.len() > keep_back {
            let ready = pending.len() - keep_back;
            hasher.update(&pending[..ready]);
            hashed += ready as u64;
            pending.drain(..ready);
        }
    }
}

/// A metadata line, without its newline: at most 4 KiB, or it is not one.
// The line is under 100 bytes, and the callers read from a slice or a `BufReader`.
#[allow(clippy::unbuffered_bytes)]
fn read_line(input: &mut dyn Read) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    for byte in input.take(4097).bytes() {
        match byte? {
            b'\n' => break,
            b => line.push(b),
        }
    }
    Ok(line)
}

/// Checks an archive in memory; returns its metadata and its state payload.
pub fn open(archive: &[u8]) -> Result<(ArchiveMeta, &[u8]), ArchiveError> {
    let (meta, head_len) = check(&mut &archive[..])?;
    // `check` counted `meta.size` bytes of state after the head; a head without its newline
    // at the very end of a version 1 archive is the one way the slice could fall outside.
    let state = usize::try_from(meta.size)
        .ok()
        .and_then(|size| archive.get(head_len..head_len.checked_add(size)?))
        .ok_or(ArchiveError::WrongSize {
            expected: meta.size,
            got: archive.len().saturating_sub(head_len) as u64,
        })?;
    Ok((meta, state))
}

/// The state payload of a sound archive.
pub fn verify(archive: &[u8]) -> Result<&[u8], ArchiveError> {
    open(archive).map(|(_, state)| state)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 1 archive, as Drover wrote them before archives were streamed.
    fn build_v1(index: u64, term: u64, state: &[u8]) -> Vec<u8> {
        let meta = ArchiveMeta {
            index,
            term,
            size: state.len() as u64,
            sha256: hex(&Sha256::digest(state)),
        };
        let mut out = MAGIC_V1.to_vec();
        out.extend_from_slice(&serde_json::to_vec(&meta).unwrap());
        out.push(b'\n');
        out.extend_from_slice(state);
        out
    }

    #[test]
    fn an_archive_round_trips_whatever_its_state_holds() {
        // Newlines in the state, and a state longer than the window kept back from the hash.
        let long: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for state in [&b"the state"[..], b"", b"\n\n{\"Size\":1}\n", &long] {
            let a = build(42, 3, state);
            let (meta, got) = open(&a).unwrap();
            assert_eq!(
                (meta.index, meta.term, meta.size),
                (42, 3, state.len() as u64)
            );
            assert_eq!(got, state);
        }
    }

    #[test]
    fn version_1_archives_are_still_read() {
        let a = build_v1(42, 3, b"the state");
        let (meta, state) = open(&a).unwrap();
        assert_eq!((meta.index, meta.term, meta.size), (42, 3, 9));
        assert_eq!(state, b"the state");
        assert!(matches!(
            verify(&a[..a.len() - 1]),
            Err(ArchiveError::WrongSize {
                expected: 9,
                got: 8
            })
        ));
    }

    #[test]
    fn truncated_corrupt_and_foreign_archives_are_refused() {
        let a = build(42, 3, b"the state");
        // Cut anywhere, the archive is refused, whichever check notices first.
        for cut in 0..a.len() {
            assert!(verify(&a[..cut]).is_err(), "cut at {cut} accepted");
        }
        let state_end = a.len() - 2 - a.iter().rev().skip(1).position(|b| *b == b'\n').unwrap();
        let mut corrupt = a.clone();
        corrupt[state_end - 1] ^= 0x20;
        assert!(matches!(
            verify(&corrupt),
            Err(ArchiveError::Checksum { .. })
        ));
        let mut longer = a.clone();
        longer.splice(state_end..state_end, *b"!");
        assert!(matches!(
            verify(&longer),
            Err(ArchiveError::WrongSize {
                expected: 9,
                got: 10
            })
        ));
        assert_eq!(verify(b"{\"Jobs\":[]}"), Err(ArchiveError::NotAnArchive));
    }
}
