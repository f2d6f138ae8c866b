//! Encoding of the whole state for Raft snapshots and operator archives: versioned, so an
//! unknown version is refused with a clear error, and JSON inside, so added fields are
//! tolerated. Version 2 ([`rows`]) is written and streams both ways; version 1 ([`v1`]), one
//! JSON document, is still read. Allocations are stored without their job; restore links
//! each to the job version it ran.

mod builder;
mod rows;
#[cfg(test)]
mod tests;
mod v1;

use std::io::{Read, Write};

use serde::Deserialize;

use crate::store::StateStore;
use crate::tables::{StateSnapshot, Tables};

/// The encoding this server writes.
pub const SNAPSHOT_VERSION: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "state snapshot version {0} is not supported (this server reads versions 1 and {SNAPSHOT_VERSION})"
    )]
    UnknownVersion(u32),
    #[error("state snapshot is malformed: {0}")]
    Malformed(String),
    #[error("reading the state snapshot: {0}")]
    Read(#[source] std::io::Error),
}

/// The version of an encoding that opens with it, as servers write it: read without parsing
/// the gigabytes after it.
fn leading_version(data: &[u8]) -> Option<u32> {
    let rest = data.strip_prefix(br#"{"version":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if !matches!(rest.get(digits), Some(b',' | b'}')) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// Reads into `buf` until it is full or the payload ends; how many bytes it holds.
pub(super) fn read_up_to(r: &mut dyn Read, buf: &mut [u8]) -> Result<usize, SnapshotError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(SnapshotError::Read(e)),
        }
    }
    Ok(got)
}

/// Decodes an encoding of any version this server reads, as it is read from `r`.
fn decode(r: &mut dyn Read) -> Result<Tables, SnapshotError> {
    let mut head = [0u8; rows::HEADER.len()];
    let got = read_up_to(r, &mut head)?;
    let head = &head[..got];
    if head == rows::HEADER {
        return rows::decode(r);
    }
    // Version 1 is one document, read whole; so is anything not opening as servers write it.
    let mut data = head.to_vec();
    r.read_to_end(&mut data).map_err(SnapshotError::Read)?;
    let version = match leading_version(&data) {
        Some(version) => version,
        None => {
            #[derive(Deserialize)]
            struct VersionOnly {
                version: u32,
            }
            serde_json::from_slice::<VersionOnly>(&data)
                .map_err(|e| SnapshotError::Malformed(e.to_string()))?
                .version
        }
    };
    match version {
        1 => v1::decode(&data),
        2 => Err(SnapshotError::Malformed(
            "a version 2 snapshot must open with its header".into(),
        )),
        other => Err(SnapshotError::UnknownVersion(other)),
    }
}

impl StateSnapshot {
    /// Encodes every table for a Raft snapshot.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Writing into a Vec cannot fail, nor can serialising plain data structs.
        let _ = rows::encode_to(self, &mut out);
        out
    }

    /// Encodes every table into `out` as it goes, never holding the whole encoding: memory
    /// stays flat whatever the state's size.
    pub fn encode_to(&self, out: &mut dyn Write) -> std::io::Result<()> {
        rows::encode_to(self, out)
    }
}

impl StateStore {
    /// Replaces the whole state with a decoded snapshot. On error nothing changes.
    pub fn restore(&self, mut data: &[u8]) -> Result<(), SnapshotError> {
        self.restore_from(&mut data)
    }

    /// Replaces the whole state with a snapshot decoded as it is read from `data`. On error
    /// nothing changes.
    pub fn restore_from(&self, data: &mut dyn Read) -> Result<(), SnapshotError> {
        let t = decode(data)?;
        self.replace(t);
        Ok(())
    }
}
