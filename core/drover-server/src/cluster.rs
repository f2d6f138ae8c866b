//! Forming and joining a cluster, and the server's side of the RPC.
//!
//! Before Raft starts, a server with `bootstrap_expect = N > 1` and an empty data dir
//! *discovers*: it asks the servers it was told to join (and those they know, transitively)
//! who they are. As soon as it knows N servers and none of them runs a cluster yet, it
//! bootstraps Raft with all of them as voters. Every server reaches the same set, so they all
//! write the same first configuration (hashicorp/raft's `BootstrapCluster` does the same).
//! If one of them already runs a cluster, it joins that instead: it starts Raft with no
//! configuration and asks the leader to add it (`AddPeer`), then receives a snapshot.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use drover_net::{CallFuture, Handler, HandlerError, PeerNet, PeerRole};
use drover_raft::eraftpb::Message;
use drover_raft::{IncomingSnapshot, PeerBook, PeerInfo};
use tokio::sync::watch;

use crate::ServerError;
use crate::rpc::{
    METHOD_ENDPOINT, METHOD_FORWARD, METHOD_FORWARD_RESTORE, METHOD_RESTORE, METHOD_STATUS,
    Request, StatusReply, StatusRequest, decode, encode,
};
use crate::server::Server;

/// How a server starts Raft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StartPlan {
    /// The data dir holds a configuration: carry on with it.
    Restart,
    /// Write the first configuration: these voters, reached there.
    Bootstrap { voters: Vec<u64>, book: PeerBook },
    /// A cluster exists: start empty and ask to be added.
    Join,
}

/// Answers RPC calls: discovery before Raft runs, then everything else through the server.
pub(crate) struct RpcEndpoint {
    id: u64,
    own: PeerInfo,
    bootstrap_expect: u32,
    /// Servers met during discovery (they called us, or someone named them).
    discovered: Mutex<PeerBook>,
    server: OnceLock<Server>,
}

impl RpcEndpoint {
    pub fn new(id: u64, own: PeerInfo, bootstrap_expect: u32) -> RpcEndpoint {
        RpcEndpoint {
            id,
            own,
            bootstrap_expect,
            discovered: Mutex::new(PeerBook::new()),
            server: OnceLock::new(),
        }
    }

    /// Raft runs: from now on calls reach the server.
    pub fn attach(&self, server: Server) {
        let _ = self.server.set(server);
    }

    fn learn(&self, id: u64, peer: PeerInfo) {
        if id == 0 || id == self.id || peer.address.is_empty() {
            return;
        }
        self.discovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, peer);
    }

    /// Every server this one knows, itself included.
    pub fn known(&self) -> PeerBook {
        let mut book = self
            .discovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(server) = self.server.get() {
            book.extend(server.raft_status().peers);
        }
        book.insert(self.id, self.own.clone());
        book
    }

    fn status(&self) -> StatusReply {
        let (initialized, leader) = match self.server.get() {
            Some(server) => (
                !server.raft_status().voters.is_empty(),
                server.leader_address().unwrap_or_default(),
            ),
            None => (false, String::new()),
        };
        StatusReply {
            id: self.id,
            address: self.own.address.clone(),
            name: self.own.name.clone(),
            initialized,
            bootstrap_expect: self.bootstrap_expect,
            known: self
                .known()
                .into_iter()
                .map(|(id, p)| (id, p.address, p.name))
                .collect(),
            leader,
        }
    }
}

fn refused(why: impl Into<String>) -> CallFuture {
    let why = why.into();
    Box::pin(async move { Err(HandlerError::Refused(why)) })
}

impl Handler for RpcEndpoint {
    fn raft(&self, from_addr: String, messages: Vec<Message>) {
        // Before Raft runs, messages are dropped like a down server's: senders retry.
        if let Some(server) = self.server.get() {
            for m in messages {
                server.inner.net.heard_from(m.from, &from_addr);
                server.inner.raft.step(m);
            }
        }
    }

    fn incoming_snapshot(&self, from_addr: &str, from: u64) -> Result<IncomingSnapshot, String> {
        let server = self
            .server
            .get()
            .ok_or_else(|| "raft is not running yet".to_string())?;
        server.inner.net.heard_from(from, from_addr);
        server
            .inner
            .raft
            .incoming_snapshot()
            .map_err(|e| e.to_string())
    }

    fn call(&self, from_addr: String, role: PeerRole, method: String, body: Vec<u8>) -> CallFuture {
        if let Err(why) = role_may_call(role, &method, &body) {
            tracing::warn!(%from_addr, ?role, %method, "RPC call refused: {why}");
            return refused(why);
        }
        match method.as_str() {
            METHOD_STATUS => {
                if let Ok(hello) = serde_json::from_slice::<StatusRequest>(&body) {
                    self.learn(hello.id, PeerInfo::new(hello.address, hello.name));
                }
                let reply = encode(&self.status());
                Box::pin(async move { Ok(reply) })
            }
            crate::federation::METHOD_FEDERATION => {
                let Some(server) = self.server.get() else {
                    return refused("the server is starting: no raft yet");
                };
                let reply = server.serve_federation(&body);
                Box::pin(async move { reply.map_err(|e| HandlerError::Refused(e.to_string())) })
            }
            crate::members::METHOD_MEMBER => {
                let Some(server) = self.server.get() else {
                    return refused("the server is starting: no raft yet");
                };
                let reply = encode(&server.member_report());
                Box::pin(async move { Ok(reply) })
            }
            METHOD_ENDPOINT | METHOD_FORWARD | METHOD_RESTORE | METHOD_FORWARD_RESTORE => {
                let Some(server) = self.server.get().cloned() else {
                    return refused("the server is starting: no raft yet");
                };
                let leader_only = method == METHOD_FORWARD || method == METHOD_FORWARD_RESTORE;
                tracing::trace!(%from_addr, %method, "RPC call");
                Box::pin(async move {
                    Ok(if method == METHOD_ENDPOINT || method == METHOD_FORWARD {
                        server.serve_endpoint(leader_only, &body).await
                    } else {
                        server.serve_restore(leader_only, body).await
                    })
                })
            }
            other => refused(format!("unknown RPC method {other:?}")),
        }
    }
}

/// What a caller's certificate allows (with `verify_server_hostname`; without it every
/// certificate the CA signed is trusted alike): a server's, everything; a client's, only what
/// client agents send; any other (a CLI's, another region's), nothing.
pub(crate) fn role_may_call(role: PeerRole, method: &str, body: &[u8]) -> Result<(), String> {
    if role.may_act_as_server() {
        return Ok(());
    }
    let client_call = role.may_act_as_client()
        && method == METHOD_ENDPOINT
        && decode::<crate::rpc::Request>("endpoint request", body)
            .is_ok_and(|request| request.is_client_call());
    if client_call {
        Ok(())
    } else {
        Err(format!(
            "Permission denied: a {role:?} certificate may not call {method} (servers need server.<region>.nomad)"
        ))
    }
}

const DISCOVERY_ROUND: Duration = Duration::from_millis(500);
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// Discovery (see the module doc): returns once this server should bootstrap or join.
/// Runs until then, however long the other servers take to appear, or until shutdown.
pub(crate) async fn discover(
    join: &[String],
    later: &crate::members::JoinTargets,
    endpoint: &RpcEndpoint,
    net: &dyn PeerNet,
    mut shutdown: watch::Receiver<bool>,
) -> Result<StartPlan, ServerError> {
    // 0: never bootstrap, only join a cluster that exists.
    let expect = endpoint.bootstrap_expect as usize;
    let hello = encode(&StatusRequest {
        id: endpoint.id,
        address: endpoint.own.address.clone(),
        name: endpoint.own.name.clone(),
    });
    let mut last_report = Instant::now();
    tracing::info!(
        expect,
        ?join,
        "waiting for {expect} servers to bootstrap the cluster"
    );
    loop {
        let mut targets: BTreeSet<String> = join.iter().cloned().collect();
        targets.extend(later.list());
        targets.extend(endpoint.known().into_values().map(|p| p.address));
        targets.remove(&endpoint.own.address);
        for addr in targets {
            let body = match net
                .call(&addr, METHOD_STATUS, hello.clone(), STATUS_TIMEOUT)
                .await
            {
                Ok(body) => body,
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "discovery: no answer");
                    continue;
                }
            };
            let Ok(status) = decode::<StatusReply>("status", &body) else {
                continue;
            };
            if status.id == endpoint.id {
                continue;
            }
            endpoint.learn(status.id, PeerInfo::new(&status.address, &status.name));
            for (id, address, name) in status.known {
                endpoint.learn(id, PeerInfo::new(address, name));
            }
            if status.initialized {
                tracing::info!(server = %status.address, "a cluster exists: joining it");
                return Ok(StartPlan::Join);
            }
        }
        let known = endpoint.known();
        if expect > 0 && known.len() >= expect {
            let voters: Vec<u64> = known.keys().copied().collect();
            tracing::info!(?voters, "found {} servers: bootstrapping", known.len());
            return Ok(StartPlan::Bootstrap {
                voters,
                book: known,
            });
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            tracing::info!(
                known = known.len(),
                expect,
                "still waiting for servers to bootstrap the cluster"
            );
            last_report = Instant::now();
        }
        tokio::select! {
            _ = tokio::time::sleep(DISCOVERY_ROUND) => {}
            _ = shutdown.wait_for(|s| *s) => {
                return Err(ServerError::Internal("shut down before the cluster formed".into()));
            }
        }
    }
}

const JOIN_ROUND: Duration = Duration::from_secs(1);

/// Makes sure this server is a voter of its cluster at its current address: asks to be added
/// (through the leader it knows, or through the `targets`) until the applied configuration says
/// so. Ends then, or at shutdown.
pub(crate) async fn keep_membership(server: Server, targets: Vec<String>) {
    let id = server.id();
    let own = server.own_peer();
    let request = Request::AddPeer {
        id,
        address: own.address.clone(),
        name: own.name.clone(),
    };
    let body = encode(&request);
    let mut shutdown = server.inner.shutdown_rx.clone();
    let mut announced = false;
    loop {
        let status = server.raft_status();
        if status.voters.contains(&id) && status.peers.get(&id) == Some(&own) {
            if announced {
                tracing::info!(id, address = %own.address, "joined the cluster");
            }
            return;
        }
        if !announced {
            tracing::info!(id, address = %own.address, "asking the cluster to add this server");
            announced = true;
        }
        let leader_reachable = status
            .leader_id
            .is_some_and(|leader| status.peers.contains_key(&leader));
        let done = if leader_reachable {
            match server.route(request.clone()).await {
                Ok(_) => true,
                Err(e) => {
                    tracing::debug!(error = %e, "join through the leader failed");
                    false
                }
            }
        } else {
            let mut done = false;
            let mut candidates: BTreeSet<String> = targets.iter().cloned().collect();
            candidates.extend(status.peers.values().map(|p| p.address.clone()));
            candidates.remove(&own.address);
            for addr in candidates {
                match server
                    .inner
                    .net
                    .call(
                        &addr,
                        METHOD_ENDPOINT,
                        body.clone(),
                        Duration::from_secs(10),
                    )
                    .await
                {
                    Ok(answer) => {
                        match decode::<crate::rpc::EndpointResult>("join answer", &answer) {
                            Ok(Ok(_)) => {
                                done = true;
                                break;
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(%addr, error = %e.message, "join refused")
                            }
                            Err(e) => tracing::debug!(%addr, error = %e, "join answer"),
                        }
                    }
                    Err(e) => tracing::debug!(%addr, error = %e, "join call failed"),
                }
            }
            done
        };
        // Once accepted, the configuration arrives with the next appends or a snapshot.
        let pause = if done {
            Duration::from_millis(200)
        } else {
            JOIN_ROUND
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
