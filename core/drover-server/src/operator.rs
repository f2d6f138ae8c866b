//! Operator work on the cluster: the Raft configuration and changes to it, snapshots of the
//! whole state (save and restore), and a digest of the state to compare servers.

use drover_raft::PeerInfo;
use drover_state::StateStore;

use crate::ServerError;
use crate::server::Server;
use crate::snapshot_archive::{ArchiveMeta, ArchiveWriter};

/// One server of the Raft configuration (Nomad's `RaftServer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftMember {
    pub id: u64,
    /// The server's name, if it told the cluster.
    pub name: String,
    /// Its RPC address.
    pub address: String,
    pub leader: bool,
    pub voter: bool,
}

/// A digest of the state tables and the index it was taken at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateDigest {
    pub digest: u64,
    /// The state store's latest index.
    pub index: u64,
    /// Raft's applied index on this server.
    pub applied_index: u64,
}

/// How far behind the commit index a non-voter may be and still be made a voter: it then
/// catches up with ordinary appends within moments.
const PROMOTION_LAG: u64 = 256;

impl Server {
    /// The applied Raft configuration as this server sees it, and its applied index.
    pub fn raft_configuration(&self) -> (Vec<RaftMember>, u64) {
        let status = self.inner.raft.status();
        let member = |id: u64, voter: bool| {
            let peer = status.peers.get(&id).cloned().unwrap_or_else(|| {
                if id == self.inner.id {
                    self.inner.own.clone()
                } else {
                    PeerInfo::default()
                }
            });
            RaftMember {
                id,
                name: peer.name,
                address: peer.address,
                leader: status.leader_id == Some(id),
                voter,
            }
        };
        let mut members: Vec<RaftMember> = status
            .voters
            .iter()
            .map(|id| member(*id, true))
            .chain(status.learners.iter().map(|id| member(*id, false)))
            .collect();
        members.sort_by(|a, b| a.address.cmp(&b.address).then(a.id.cmp(&b.id)));
        (members, status.applied_index)
    }

    /// Removes a server from the Raft configuration, named by id or RPC address (Nomad's
    /// `operator raft remove-peer`). Returns the index of the configuration change.
    pub async fn remove_peer(
        &self,
        id: Option<u64>,
        address: Option<String>,
    ) -> Result<u64, ServerError> {
        if id.is_none() && address.as_deref().is_none_or(str::is_empty) {
            return Err(ServerError::BadRequest(
                "Must specify either ?id with the server's ID or ?address with IP:port of peer to remove"
                    .into(),
            ));
        }
        match self
            .route(crate::rpc::Request::RemovePeer { id, address })
            .await?
        {
            crate::rpc::Reply::Index(index) => Ok(index),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    /// On the leader: removes the member. The leader removing itself first hands leadership
    /// to another voter, then the request goes there.
    pub(crate) async fn remove_peer_here(
        &self,
        id: Option<u64>,
        address: Option<&str>,
    ) -> Result<u64, ServerError> {
        let status = self.inner.raft.status();
        let members: Vec<u64> = status
            .voters
            .iter()
            .chain(status.learners.iter())
            .copied()
            .collect();
        let target = match (id, address.filter(|a| !a.is_empty())) {
            (Some(id), _) => members.iter().copied().find(|m| *m == id).ok_or_else(|| {
                ServerError::NotFound(format!(
                    "id {:?} was not found in the Raft configuration",
                    id.to_string()
                ))
            })?,
            (None, Some(addr)) => members
                .iter()
                .copied()
                .find(|m| status.peers.get(m).is_some_and(|p| p.address == addr))
                .ok_or_else(|| {
                    ServerError::NotFound(format!(
                        "address {addr:?} was not found in the Raft configuration"
                    ))
                })?,
            (None, None) => {
                return Err(ServerError::BadRequest(
                    "Must specify either ?id with the server's ID or ?address with IP:port of peer to remove"
                        .into(),
                ));
            }
        };
        if target == self.inner.id {
            let Some(successor) = status.voters.iter().copied().find(|v| *v != target) else {
                return Err(ServerError::BadRequest(
                    "cannot remove the only voter of the cluster".into(),
                ));
            };
            tracing::info!(
                successor,
                "removing the leader: handing leadership over first"
            );
            self.inner.raft.transfer_leadership(successor);
            // Not executed: the caller retries at the new leader.
            return Err(ServerError::Raft(drover_raft::RaftError::NotLeader {
                leader_hint: Some(successor),
            }));
        }
        tracing::info!(id = target, "removing a server from the raft configuration");
        Ok(self.inner.raft.remove_member(target).await?)
    }

    /// On the leader: adds a joining server, or updates a member's address. A new server
    /// joins as a non-voter and is made a voter once it holds the log up to
    /// `PROMOTION_LAG` entries of the commit index (the joining server asks again every
    /// round until then): one still receiving a snapshot of gigabytes counts towards no
    /// quorum, so the cluster keeps committing meanwhile (Nomad's autopilot stages new
    /// servers the same way).
    pub(crate) async fn add_peer_here(&self, id: u64, peer: PeerInfo) -> Result<u64, ServerError> {
        if id == 0 || peer.address.is_empty() {
            return Err(ServerError::BadRequest(
                "a joining server needs an id and an address".into(),
            ));
        }
        let status = self.inner.raft.status();
        if status.voters.contains(&id) && status.peers.get(&id) == Some(&peer) {
            return Ok(status.applied_index);
        }
        if status.voters.contains(&id) {
            tracing::info!(id, address = %peer.address, "updating a server's address");
            return Ok(self.inner.raft.add_voter(id, peer).await?);
        }
        if !status.learners.contains(&id) {
            tracing::info!(id, address = %peer.address, "adding a server to the raft configuration as a non-voter");
            return Ok(self.inner.raft.add_learner(id, peer).await?);
        }
        // Nothing acknowledged yet (0) is not caught up, however short the log.
        let matched = status.matched.get(&id).copied().unwrap_or(0);
        if matched == 0 || matched + PROMOTION_LAG < status.commit_index {
            // Still catching up: asked again next round.
            return Ok(status.applied_index);
        }
        tracing::info!(id, address = %peer.address, matched, "a non-voter caught up: making it a voter");
        Ok(self.inner.raft.add_voter(id, peer).await?)
    }

    /// The whole state as an operator snapshot archive in memory, taken once this server
    /// caught up with the leader (tests; the API streams it with `save_snapshot_to`).
    #[cfg(test)]
    pub(crate) async fn save_snapshot(&self) -> Result<Vec<u8>, ServerError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.save_snapshot_to(Vec::new(), move |written| {
            let _ = tx.send(written);
        })
        .await?;
        let written = rx.await.map_err(|_| {
            ServerError::Internal("the snapshot writer ended without a result".into())
        })?;
        written
            .map(|(archive, _)| archive)
            .map_err(|e| ServerError::Internal(format!("writing the snapshot archive: {e}")))
    }

    /// Writes the whole state as an operator snapshot archive into `out`, on a thread of its
    /// own, as it is encoded: the archive is never held in memory, whatever the state's size.
    /// The state is taken once this server caught up with the leader, and its index returned
    /// at once; `done` gets the writer back and the archive's metadata, or why writing failed
    /// (a reader that went away makes `out` fail, which ends the encoding early).
    pub async fn save_snapshot_to<W, F>(&self, out: W, done: F) -> Result<u64, ServerError>
    where
        W: std::io::Write + Send + 'static,
        F: FnOnce(std::io::Result<(W, ArchiveMeta)>) + Send + 'static,
    {
        self.read_barrier().await?;
        let term = self.inner.raft.status().term;
        let snap = self.inner.state.snapshot();
        let index = snap.latest_index();
        std::thread::Builder::new()
            .name("drover-snapshot-save".into())
            .spawn(move || {
                let written = ArchiveWriter::new(out, index, term).and_then(|mut archive| {
                    snap.encode_to(&mut archive)?;
                    archive.finish()
                });
                done(written);
            })
            .map_err(|e| ServerError::Internal(format!("cannot start the snapshot writer: {e}")))?;
        Ok(index)
    }

    /// On the leader: replaces the whole state with `state` (already checked) through one log
    /// entry, then restarts the leader's subsystems on it.
    pub(crate) async fn restore_here(
        &self,
        state: Vec<u8>,
    ) -> Result<crate::rpc::Reply, ServerError> {
        // Decodes on a scratch store first: a payload every server would refuse never enters
        // the log.
        StateStore::new()
            .restore(&state)
            .map_err(|e| ServerError::BadRequest(format!("snapshot state does not decode: {e}")))?;
        let applied = self
            .inner
            .raft
            .propose_for_response(crate::fsm::restore_entry(&state))
            .await?;
        if !applied.response.is_empty() {
            return Err(ServerError::Internal(
                String::from_utf8_lossy(&applied.response).into_owned(),
            ));
        }
        crate::server::reestablish_leadership(&self.inner).await;
        Ok(crate::rpc::Reply::Index(applied.index))
    }

    /// A digest of every state table on this server, to compare servers.
    pub fn state_digest(&self) -> StateDigest {
        let snap = self.inner.state.snapshot();
        StateDigest {
            digest: snap.digest(),
            index: snap.latest_index(),
            applied_index: self.inner.raft.status().applied_index,
        }
    }
}
