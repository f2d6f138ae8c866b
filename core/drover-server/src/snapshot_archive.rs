//! Operator snapshot archives (`drover operator snapshot save/restore`): the whole state with
//! a SHA-256 checksum, so a truncated or corrupt file is refused before anything changes.
//!
//! Layout: the line `DROVER-SNAPSHOT-1`, one line of JSON metadata, then the state store's
//! snapshot encoding (exactly `Size` bytes, hashing to `SHA256`).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const MAGIC: &[u8] = b"DROVER-SNAPSHOT-1\n";

/// The metadata line of an archive.
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

/// Why an archive is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("not a Drover snapshot archive (missing the DROVER-SNAPSHOT-1 header)")]
    NotAnArchive,
    #[error("snapshot archive metadata is unreadable: {0}")]
    BadMetadata(String),
    #[error(
        "snapshot archive is truncated or has trailing data: {got} bytes of state, expected {expected}"
    )]
    WrongSize { expected: u64, got: u64 },
    #[error("snapshot archive is corrupt: SHA-256 of the state is {got}, expected {expected}")]
    Checksum { expected: String, got: String },
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An archive of `state` (a state store snapshot taken at `index`, `term`).
pub fn build(index: u64, term: u64, state: &[u8]) -> Vec<u8> {
    let meta = ArchiveMeta {
        index,
        term,
        size: state.len() as u64,
        sha256: sha256_hex(state),
    };
    // Plain data: serialising cannot fail.
    let meta = serde_json::to_vec(&meta).unwrap_or_default();
    let mut out = Vec::with_capacity(MAGIC.len() + meta.len() + 1 + state.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&meta);
    out.push(b'\n');
    out.extend_from_slice(state);
    out
}

/// Reads an archive's metadata and checks the state against it; returns the metadata and
/// the state payload.
pub fn open(archive: &[u8]) -> Result<(ArchiveMeta, &[u8]), ArchiveError> {
    let rest = archive
        .strip_prefix(MAGIC)
        .ok_or(ArchiveError::NotAnArchive)?;
    let newline = rest
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| ArchiveError::BadMetadata("no end of the metadata line".into()))?;
    let meta: ArchiveMeta = serde_json::from_slice(&rest[..newline])
        .map_err(|e| ArchiveError::BadMetadata(e.to_string()))?;
    let state = &rest[newline + 1..];
    if state.len() as u64 != meta.size {
        return Err(ArchiveError::WrongSize {
            expected: meta.size,
            got: state.len() as u64,
        });
    }
    let got = sha256_hex(state);
    if !got.eq_ignore_ascii_case(&meta.sha256) {
        return Err(ArchiveError::Checksum {
            expected: meta.sha256,
            got,
        });
    }
    Ok((meta, state))
}

/// The state payload of a sound archive.
pub fn verify(archive: &[u8]) -> Result<&[u8], ArchiveError> {
    open(archive).map(|(_, state)| state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_round_trips() {
        let a = build(42, 3, b"the state");
        let (meta, state) = open(&a).unwrap();
        assert_eq!((meta.index, meta.term, meta.size), (42, 3, 9));
        assert_eq!(state, b"the state");
    }

    #[test]
    fn truncated_corrupt_and_foreign_archives_are_refused() {
        let a = build(42, 3, b"the state");
        assert!(matches!(
            verify(&a[..a.len() - 1]),
            Err(ArchiveError::WrongSize {
                expected: 9,
                got: 8
            })
        ));
        let mut corrupt = a.clone();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0x20;
        assert!(matches!(
            verify(&corrupt),
            Err(ArchiveError::Checksum { .. })
        ));
        assert_eq!(verify(b"{\"Jobs\":[]}"), Err(ArchiveError::NotAnArchive));
        assert!(matches!(
            verify(&a[..MAGIC.len() + 5]),
            Err(ArchiveError::BadMetadata(_))
        ));
    }
}
