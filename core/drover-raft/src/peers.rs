//! Who the voters are and where to reach them: the replicated peer book, the envelope that
//! carries it inside snapshots sent to followers, and Nomad's `peers.json` recovery file.
//!
//! Raft itself knows voters only by id. Their RPC addresses travel with the configuration: a
//! conf change's `context` holds the added server's [`PeerInfo`], the bootstrap snapshot holds
//! the first voters' infos, and every snapshot sent to a follower carries the whole book. So
//! every server that applied the same log knows the same addresses.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::RaftError;

/// Where a server is reached, as the cluster knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// RPC address, `host:port`.
    #[serde(rename = "Address")]
    pub address: String,
    /// The server's name (Nomad's `<node>.<region>`), for display only.
    #[serde(rename = "Name", default)]
    pub name: String,
}

impl PeerInfo {
    pub fn new(address: impl Into<String>, name: impl Into<String>) -> PeerInfo {
        PeerInfo {
            address: address.into(),
            name: name.into(),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        // Serialising two strings into a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn decode(data: &[u8]) -> Result<PeerInfo, String> {
        serde_json::from_slice(data).map_err(|e| format!("undecodable peer info: {e}"))
    }
}

/// Raft id -> where that server is. Ordered, so encodings are deterministic.
pub type PeerBook = BTreeMap<u64, PeerInfo>;

pub(crate) fn encode_book(book: &PeerBook) -> Vec<u8> {
    serde_json::to_vec(book).unwrap_or_default()
}

pub(crate) fn decode_book(data: &[u8]) -> Result<PeerBook, String> {
    serde_json::from_slice(data).map_err(|e| format!("undecodable peer book: {e}"))
}

/// A snapshot message to a follower carries `MAGIC | peer book JSON`: the state payload
/// travels beside the message, piece by piece (`OutgoingSnapshot`, `IncomingSnapshot`).
const ENVELOPE_MAGIC: &[u8; 6] = b"DRSNB1";

/// The data of a snapshot message for a follower: the peer book.
pub(crate) fn wrap_snapshot_reference(book: &PeerBook) -> Vec<u8> {
    let mut out = ENVELOPE_MAGIC.to_vec();
    out.extend_from_slice(&encode_book(book));
    out
}

/// The peer book of a snapshot message from the leader.
pub(crate) fn unwrap_snapshot_reference(data: &[u8]) -> Result<PeerBook, String> {
    let book = data
        .strip_prefix(ENVELOPE_MAGIC.as_slice())
        .ok_or_else(|| "not a drover raft snapshot message (bad magic)".to_string())?;
    decode_book(book)
}

/// One entry of Nomad's `peers.json` for Raft protocol 3.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct RecoveryEntry {
    id: String,
    address: String,
    #[serde(default)]
    non_voter: bool,
}

/// The configuration an operator forces with `peers.json` after quorum was lost.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Recovery {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub book: PeerBook,
}

/// File name of the recovery file, beside `raft.redb` (Nomad: `<data_dir>/server/raft/peers.json`).
pub const PEERS_JSON: &str = "peers.json";

/// Reads `peers.json` if there is one. Ids are this cluster's decimal raft ids (as listed by
/// `operator raft list-peers`).
pub(crate) fn read_recovery(path: &Path) -> Result<Option<Recovery>, RaftError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(RaftError::Recovery(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    parse_recovery(&text)
        .map(Some)
        .map_err(|why| RaftError::Recovery(format!("{}: {why}", path.display())))
}

fn parse_recovery(text: &str) -> Result<Recovery, String> {
    let entries: Vec<RecoveryEntry> = serde_json::from_str(text).map_err(|e| {
        format!(
            "expected Nomad's raft v3 format [{{\"id\": ..., \"address\": ..., \"non_voter\": ...}}]: {e}"
        )
    })?;
    let mut recovery = Recovery::default();
    for entry in entries {
        let id: u64 = entry
            .id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id != 0)
            .ok_or_else(|| format!("id {:?} is not a server's raft id", entry.id))?;
        if entry.address.trim().is_empty() {
            return Err(format!("server {id} has no address"));
        }
        if recovery.book.contains_key(&id) {
            return Err(format!("server {id} is listed twice"));
        }
        if entry.non_voter {
            recovery.learners.push(id);
        } else {
            recovery.voters.push(id);
        }
        recovery
            .book
            .insert(id, PeerInfo::new(entry.address.trim(), String::new()));
    }
    if recovery.voters.is_empty() {
        return Err("no voter listed".into());
    }
    Ok(recovery)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_envelope_round_trips_and_refuses_garbage() {
        let mut book = PeerBook::new();
        book.insert(7, PeerInfo::new("127.0.0.1:4647", "a.global"));
        let wrapped = wrap_snapshot_reference(&book);
        assert_eq!(unwrap_snapshot_reference(&wrapped).unwrap(), book);
        assert!(
            unwrap_snapshot_reference(b"TSM1{}")
                .unwrap_err()
                .contains("bad magic")
        );
        assert!(
            unwrap_snapshot_reference(&wrapped[..9])
                .unwrap_err()
                .contains("undecodable peer book")
        );
    }

    #[test]
    fn peers_json_in_nomads_v3_format_parses() {
        let r = parse_recovery(
            r#"[{"id":"11","address":"10.0.0.1:4647","non_voter":false},
                {"id":"12","address":"10.0.0.2:4647"},
                {"id":"13","address":"10.0.0.3:4647","non_voter":true}]"#,
        )
        .unwrap();
        assert_eq!(r.voters, vec![11, 12]);
        assert_eq!(r.learners, vec![13]);
        assert_eq!(r.book[&12].address, "10.0.0.2:4647");
    }

    #[test]
    fn peers_json_with_bad_ids_or_no_voter_is_refused() {
        for (text, why) in [
            (
                r#"[{"id":"abc","address":"x:1"}]"#,
                "not a server's raft id",
            ),
            (r#"[{"id":"0","address":"x:1"}]"#, "not a server's raft id"),
            (r#"[{"id":"1","address":""}]"#, "no address"),
            (
                r#"[{"id":"1","address":"x:1","non_voter":true}]"#,
                "no voter",
            ),
            (r#"["10.0.0.1:4647"]"#, "raft v3 format"),
            (
                r#"[{"id":"1","address":"x:1"},{"id":"1","address":"y:1"}]"#,
                "twice",
            ),
        ] {
            let e = parse_recovery(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
