//! Tunnels: byte streams carried by the RPC connection, so a server reaches a client agent over
//! the connection the client opened (clients behind NAT, or without an inbound port, stay
//! reachable), as Nomad's servers do over the client's yamux session.
//!
//! - A client agent keeps a `Session` call open to each of its servers ([`keep_session`]).
//! - A server that needs the client's API ([`TunnelHub::to_node`]) asks down the session for a
//!   tunnel; the client opens a `Tunnel` call answering that request, and both ends get a
//!   [`TunnelIo`]. A server without the node's session asks its peers, which hold it or refuse
//!   (one hop only: a relayed request is never relayed again).
//! - A client agent opens a `Tunnel` to a server's HTTP API ([`TunnelTarget::Api`]) to forward
//!   the requests it cannot answer itself.
//!
//! What travels inside is opaque here (the agent speaks HTTP/1.1 over it). Each tunnel is one
//! gRPC stream on the cached connection, with a pump task per direction.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use drover_net::RpcError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use crate::client::RpcClient;
use crate::proto::tunnel_open::Target;
use crate::proto::{SessionDown, TunnelFrame, TunnelOpen};

/// One end of a tunnel: a bidirectional byte stream. Dropping it closes the tunnel; shutting
/// down its write side half-closes it.
pub type TunnelIo = tokio::io::DuplexStream;

/// Bytes buffered in each direction between a tunnel's gRPC stream and its [`TunnelIo`].
const PIPE_BYTES: usize = 256 * 1024;
/// Largest data frame sent.
const FRAME_BYTES: usize = 64 * 1024;
/// How long a client may take to answer a session's request for a tunnel.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a tunnel leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunnelTarget {
    /// The HTTP API of the server called.
    Api,
    /// The client API of node `node_id`. `relayed` is set by a server asking a peer, which
    /// must then hold the node's session itself.
    Node { node_id: String, relayed: bool },
    /// A client answering its session's request `id`.
    Answer { id: u64 },
}

impl TunnelTarget {
    pub(crate) fn to_open(&self, from_addr: &str) -> TunnelOpen {
        let mut open = TunnelOpen {
            from_addr: from_addr.to_string(),
            ..TunnelOpen::default()
        };
        match self {
            TunnelTarget::Api => open.set_target(Target::Api),
            TunnelTarget::Node { node_id, relayed } => {
                open.set_target(Target::Node);
                open.node_id = node_id.clone();
                open.relayed = *relayed;
            }
            TunnelTarget::Answer { id } => {
                open.set_target(Target::Answer);
                open.answer_id = *id;
            }
        }
        open
    }

    pub(crate) fn from_open(open: &TunnelOpen) -> TunnelTarget {
        match open.target() {
            Target::Api => TunnelTarget::Api,
            Target::Node => TunnelTarget::Node {
                node_id: open.node_id.clone(),
                relayed: open.relayed,
            },
            Target::Answer => TunnelTarget::Answer { id: open.answer_id },
        }
    }
}

/// Why no tunnel could be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TunnelError {
    /// Neither this server nor any peer holds a session of the node (Nomad's text).
    #[error("No path to node {node_id}")]
    NoPath { node_id: String },
    /// The node's client did not answer the request for a tunnel in time.
    #[error("node {node_id} did not open the requested tunnel within {ANSWER_TIMEOUT:?}")]
    NoAnswer { node_id: String },
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// What a server does with tunnels that end at it.
pub trait TunnelAcceptor: Send + Sync + 'static {
    /// Serves this server's HTTP API on `io` (one connection; returns at once).
    fn serve_api(&self, io: TunnelIo);
    /// RPC addresses of the other servers, asked for a node whose session is not here.
    fn peers(&self) -> Vec<String>;
}

struct Session {
    /// Tells a newer session of the same node from the one it replaced.
    generation: u64,
    requests: mpsc::Sender<Result<SessionDown, Status>>,
}

/// A server's client sessions and the tunnels asked of them.
pub struct TunnelHub {
    client: Arc<RpcClient>,
    sessions: Mutex<HashMap<String, Session>>,
    /// Tunnel requests sent down a session, waiting for the client's answer.
    pending: Mutex<HashMap<u64, oneshot::Sender<TunnelIo>>>,
    next_id: AtomicU64,
    acceptor: OnceLock<Arc<dyn TunnelAcceptor>>,
}

impl TunnelHub {
    pub(crate) fn new(client: Arc<RpcClient>) -> TunnelHub {
        TunnelHub {
            client,
            sessions: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            acceptor: OnceLock::new(),
        }
    }

    /// Sets what serves the tunnels ending here; only the first call counts (the agent
    /// builds its HTTP API after the server starts).
    pub fn set_acceptor(&self, acceptor: Arc<dyn TunnelAcceptor>) {
        if self.acceptor.set(acceptor).is_err() {
            tracing::warn!("the tunnel acceptor is already set");
        }
    }

    pub(crate) fn acceptor(&self) -> Option<&Arc<dyn TunnelAcceptor>> {
        self.acceptor.get()
    }

    /// Nodes whose clients hold a session with this server.
    pub fn connected_nodes(&self) -> Vec<String> {
        let mut nodes: Vec<String> = lock(&self.sessions).keys().cloned().collect();
        nodes.sort();
        nodes
    }

    pub(crate) fn register_session(
        &self,
        node_id: &str,
        requests: mpsc::Sender<Result<SessionDown, Status>>,
    ) -> u64 {
        let generation = self.next_id.fetch_add(1, Ordering::Relaxed);
        let replaced = lock(&self.sessions).insert(
            node_id.to_string(),
            Session {
                generation,
                requests,
            },
        );
        tracing::debug!(
            node_id,
            replaced = replaced.is_some(),
            "client session opened"
        );
        generation
    }

    pub(crate) fn end_session(&self, node_id: &str, generation: u64) {
        let mut sessions = lock(&self.sessions);
        if sessions
            .get(node_id)
            .is_some_and(|s| s.generation == generation)
        {
            sessions.remove(node_id);
            tracing::debug!(node_id, "client session closed");
        }
    }

    /// Hands a client's answering tunnel to whoever asked for it; false if nobody waits.
    pub(crate) fn answer(&self, id: u64, io: TunnelIo) -> bool {
        match lock(&self.pending).remove(&id) {
            Some(waiter) => waiter.send(io).is_ok(),
            None => false,
        }
    }

    /// A tunnel to node `node_id`'s client API: through its session with this server, else
    /// (when `relay`) through the first peer that holds one.
    /// A connection to the HTTP API of the server at `addr` (RPC address): how a request for
    /// another region reaches one of its servers.
    pub async fn to_server_api(&self, addr: &str) -> Result<TunnelIo, TunnelError> {
        Ok(self.client.open_tunnel(addr, &TunnelTarget::Api).await?)
    }

    pub async fn to_node(&self, node_id: &str, relay: bool) -> Result<TunnelIo, TunnelError> {
        if let Some(io) = self.through_session(node_id).await? {
            return Ok(io);
        }
        if relay && let Some(acceptor) = self.acceptor.get() {
            let target = TunnelTarget::Node {
                node_id: node_id.to_string(),
                relayed: true,
            };
            for peer in acceptor.peers() {
                match self.client.open_tunnel(&peer, &target).await {
                    Ok(io) => return Ok(io),
                    Err(e) => {
                        tracing::debug!(%peer, node_id, error = %e, "peer has no path to the node")
                    }
                }
            }
        }
        Err(TunnelError::NoPath {
            node_id: node_id.to_string(),
        })
    }

    /// `Ok(None)` when this server holds no live session of the node.
    async fn through_session(&self, node_id: &str) -> Result<Option<TunnelIo>, TunnelError> {
        let Some((generation, requests)) = lock(&self.sessions)
            .get(node_id)
            .map(|s| (s.generation, s.requests.clone()))
        else {
            return Ok(None);
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        if requests
            .send(Ok(SessionDown { tunnel_id: id }))
            .await
            .is_err()
        {
            lock(&self.pending).remove(&id);
            self.end_session(node_id, generation);
            return Ok(None);
        }
        match tokio::time::timeout(ANSWER_TIMEOUT, rx).await {
            Ok(Ok(io)) => Ok(Some(io)),
            _ => {
                lock(&self.pending).remove(&id);
                Err(TunnelError::NoAnswer {
                    node_id: node_id.to_string(),
                })
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Joins a tunnel's gRPC streams to a [`TunnelIo`]: frames from `inbound` are written to it,
/// what is written to it leaves as frames through `outbound` (each made by `wrap`). The end
/// of either side ends (or half-closes) the other.
pub(crate) fn bridge<S, T>(
    mut inbound: S,
    outbound: mpsc::Sender<T>,
    wrap: fn(TunnelFrame) -> T,
) -> TunnelIo
where
    S: Stream<Item = Result<TunnelFrame, Status>> + Unpin + Send + 'static,
    T: Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
    let (mut from_io, mut to_io) = tokio::io::split(ours);
    tokio::spawn(async move {
        while let Some(Ok(frame)) = inbound.next().await {
            if !frame.data.is_empty() && to_io.write_all(&frame.data).await.is_err() {
                break;
            }
        }
        let _ = to_io.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; FRAME_BYTES];
        loop {
            match from_io.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let frame = TunnelFrame {
                        open: None,
                        data: buf[..n].to_vec(),
                    };
                    if outbound.send(wrap(frame)).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    theirs
}

/// Keeps a session with the server at `addr` for node `node_id` until the returned handle is
/// aborted: reconnects with backoff, and hands every tunnel the server asks for to `accept`.
pub fn keep_session(
    client: Arc<RpcClient>,
    addr: String,
    node_id: String,
    accept: Arc<dyn Fn(TunnelIo) + Send + Sync>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(250);
        loop {
            match client.open_session(&addr, &node_id).await {
                Ok(mut requests) => {
                    backoff = Duration::from_millis(250);
                    tracing::debug!(server = %addr, "session with server open");
                    while let Some(id) = requests.next_request().await {
                        let (client, addr, accept) = (client.clone(), addr.clone(), accept.clone());
                        tokio::spawn(async move {
                            let target = TunnelTarget::Answer { id };
                            match client.open_tunnel(&addr, &target).await {
                                Ok(io) => accept(io),
                                Err(e) => {
                                    tracing::warn!(server = %addr, error = %e, "answering a tunnel request failed")
                                }
                            }
                        });
                    }
                    tracing::debug!(server = %addr, "session with server ended");
                }
                Err(e) => tracing::debug!(server = %addr, error = %e, "opening a session failed"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::{Faults, Handler, RpcClient};

    /// A hub for a server that holds no sessions yet.
    pub(crate) fn hub() -> Arc<TunnelHub> {
        Arc::new(TunnelHub::new(Arc::new(RpcClient::new(
            "",
            Arc::new(Faults::none()),
        ))))
    }

    /// Answers every line it reads with a prefix, until the stream ends.
    async fn answer_lines(io: TunnelIo, prefix: &'static str) {
        let (rd, mut wr) = tokio::io::split(io);
        let mut lines = tokio::io::BufReader::new(rd);
        let mut line = String::new();
        while tokio::io::AsyncBufReadExt::read_line(&mut lines, &mut line)
            .await
            .is_ok_and(|n| n > 0)
        {
            let answer = format!("{prefix}{line}");
            if wr.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            line.clear();
        }
    }

    async fn ask(io: &mut TunnelIo, line: &str) -> String {
        io.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while io.read(&mut byte).await.unwrap() == 1 && byte[0] != b'\n' {
            got.push(byte[0]);
        }
        String::from_utf8(got).unwrap()
    }

    struct Acceptor {
        peers: Vec<String>,
    }

    impl TunnelAcceptor for Acceptor {
        fn serve_api(&self, io: TunnelIo) {
            tokio::spawn(answer_lines(io, "api:"));
        }
        fn peers(&self) -> Vec<String> {
            self.peers.clone()
        }
    }

    struct NoCalls;

    impl Handler for NoCalls {
        fn raft(&self, _: String, _: Vec<drover_raft::eraftpb::Message>) {}
        fn call(&self, _: String, _: crate::PeerRole, _: String, _: Vec<u8>) -> crate::CallFuture {
            Box::pin(async { Err(crate::HandlerError::Refused("no calls here".into())) })
        }
    }

    /// A server on loopback with its hub; `peers` get the acceptor once all are known.
    async fn server() -> (String, Arc<TunnelHub>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let client = Arc::new(RpcClient::new(addr.clone(), Arc::new(Faults::none())));
        let hub = Arc::new(TunnelHub::new(client));
        tokio::spawn(crate::serve(
            listener,
            Arc::new(NoCalls),
            Arc::new(Faults::none()),
            hub.clone(),
            None,
            std::future::pending(),
        ));
        (addr, hub)
    }

    async fn wait_for_session(hub: &TunnelHub, node: &str) {
        for _ in 0..200 {
            if hub.connected_nodes().iter().any(|n| n == node) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no session of {node} arrived");
    }

    fn client() -> Arc<RpcClient> {
        Arc::new(RpcClient::new("", Arc::new(Faults::none())))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_reaches_a_client_over_the_session_the_client_opened() {
        let (addr, hub) = server().await;
        hub.set_acceptor(Arc::new(Acceptor { peers: vec![] }));
        let session = keep_session(
            client(),
            addr,
            "node-a".into(),
            Arc::new(|io| {
                tokio::spawn(answer_lines(io, "node-a:"));
            }),
        );
        wait_for_session(&hub, "node-a").await;
        let mut io = hub.to_node("node-a", true).await.unwrap();
        assert_eq!(ask(&mut io, "hello").await, "node-a:hello");
        // A second tunnel at the same time is its own stream.
        let mut other = hub.to_node("node-a", true).await.unwrap();
        assert_eq!(ask(&mut other, "two").await, "node-a:two");
        assert_eq!(ask(&mut io, "again").await, "node-a:again");

        // Once the client goes, so does its session, and with it the path.
        session.abort();
        drop((io, other));
        for _ in 0..200 {
            if hub.connected_nodes().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let gone = hub.to_node("node-a", true).await.unwrap_err();
        assert_eq!(gone.to_string(), "No path to node node-a");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_without_the_session_relays_through_the_peer_that_has_it() {
        let (addr_1, hub_1) = server().await;
        let (addr_2, hub_2) = server().await;
        hub_1.set_acceptor(Arc::new(Acceptor {
            peers: vec![addr_2.clone()],
        }));
        hub_2.set_acceptor(Arc::new(Acceptor {
            peers: vec![addr_1.clone()],
        }));
        let _session = keep_session(
            client(),
            addr_2.clone(),
            "node-b".into(),
            Arc::new(|io| {
                tokio::spawn(answer_lines(io, "node-b:"));
            }),
        );
        wait_for_session(&hub_2, "node-b").await;
        let mut relayed = hub_1.to_node("node-b", true).await.unwrap();
        assert_eq!(ask(&mut relayed, "via peer").await, "node-b:via peer");
        // Without relaying, only a server holding the session answers.
        assert!(matches!(
            hub_1.to_node("node-b", false).await,
            Err(TunnelError::NoPath { .. })
        ));
        // Nobody has a session of an unknown node: refused by the peer, not retried forever.
        let refused = client()
            .open_tunnel(
                &addr_1,
                &TunnelTarget::Node {
                    node_id: "nobody".into(),
                    relayed: false,
                },
            )
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("No path to node nobody"),
            "{refused}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_reaches_the_servers_api_through_a_tunnel() {
        let (addr, hub) = server().await;
        let c = client();
        // No API yet: refused with a reason.
        let early = c.open_tunnel(&addr, &TunnelTarget::Api).await.unwrap_err();
        assert!(early.to_string().contains("serves no API"), "{early}");
        hub.set_acceptor(Arc::new(Acceptor { peers: vec![] }));
        let mut io = c.open_tunnel(&addr, &TunnelTarget::Api).await.unwrap();
        assert_eq!(ask(&mut io, "GET /v1/jobs").await, "api:GET /v1/jobs");
        // Half-closing our side ends the far side's reader, which then closes the tunnel.
        io.shutdown().await.unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), io.read_to_end(&mut rest))
            .await
            .expect("the tunnel closes")
            .unwrap();
        assert!(rest.is_empty());
    }

    #[test]
    fn targets_survive_the_wire() {
        for target in [
            TunnelTarget::Api,
            TunnelTarget::Node {
                node_id: "n1".into(),
                relayed: true,
            },
            TunnelTarget::Answer { id: 42 },
        ] {
            assert_eq!(TunnelTarget::from_open(&target.to_open("a:1")), target);
        }
    }
}
