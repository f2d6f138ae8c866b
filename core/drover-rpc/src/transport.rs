//! `drover_raft::Transport` over the RPC: the driver thread queues messages without blocking;
//! one task per peer sends whatever queued as one `Raft` call, one call in flight at a time.
//! A peer that cannot be reached is reported to Raft (which then probes instead of streaming)
//! and retried with backoff; what queued meanwhile is dropped, as Raft resends what matters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use drover_raft::eraftpb::{Message, MessageType};
use drover_raft::{RaftNode, Transport};
use protobuf::Message as _;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::client::RpcClient;
use crate::proto::SnapshotPiece;

/// Messages queued for one peer before new ones are dropped (Raft retries).
const QUEUE_LIMIT: usize = 4096;
/// One call carries at most this much (raft bounds each append to 1 MiB).
const BATCH_BYTES: usize = 16 * 1024 * 1024;
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// A snapshot's transfer and install on the follower: gigabytes, then a restore of as many.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(600);
/// Snapshot pieces read ahead of the network (each up to 8 MiB).
const SNAPSHOT_READ_AHEAD: usize = 2;

/// The Raft transport of one server. Create it, start the `RaftNode` with it, then `attach`
/// the node (messages produced before that are dropped).
#[derive(Clone)]
pub struct RaftTransport {
    inner: Arc<Inner>,
}

struct Inner {
    client: Arc<RpcClient>,
    node: OnceLock<RaftNode>,
    /// Addresses seen on inbound traffic, for peers the node's book does not hold yet: a
    /// server being added knows nobody until the leader's snapshot arrives, and must answer
    /// the leader to get it.
    heard_from: Mutex<HashMap<u64, String>>,
    queues: Mutex<HashMap<u64, mpsc::Sender<Message>>>,
    runtime: Handle,
}

impl RaftTransport {
    /// Sender tasks run on `runtime` (the driver thread is not a tokio thread).
    pub fn new(client: Arc<RpcClient>, runtime: Handle) -> RaftTransport {
        RaftTransport {
            inner: Arc::new(Inner {
                client,
                node: OnceLock::new(),
                heard_from: Mutex::new(HashMap::new()),
                queues: Mutex::new(HashMap::new()),
                runtime,
            }),
        }
    }

    /// Connects the transport to the node it serves: peer addresses come from its peer book,
    /// and delivery failures are reported to it.
    pub fn attach(&self, node: RaftNode) {
        let _ = self.inner.node.set(node);
    }

    /// Records that raft id `peer` sent from `addr` (see `Inner::heard_from`).
    pub fn heard_from(&self, peer: u64, addr: &str) {
        if peer == 0 || addr.is_empty() {
            return;
        }
        let mut heard = self
            .inner
            .heard_from
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if heard.get(&peer).map(String::as_str) != Some(addr) {
            heard.insert(peer, addr.to_string());
        }
    }

    fn queue(&self, peer: u64) -> mpsc::Sender<Message> {
        let mut queues = self.inner.queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = queues.get(&peer).filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::channel(QUEUE_LIMIT);
        queues.insert(peer, tx.clone());
        self.inner
            .runtime
            .spawn(run_peer(Arc::downgrade(&self.inner), peer, rx));
        tx
    }
}

impl Transport for RaftTransport {
    fn send(&self, msgs: Vec<Message>) {
        for msg in msgs {
            let to = msg.to;
            if let Err(e) = self.queue(to).try_send(msg) {
                let msg = match e {
                    mpsc::error::TrySendError::Full(m) | mpsc::error::TrySendError::Closed(m) => m,
                };
                if let Some(node) = self.inner.node.get() {
                    report_lost(node, to, std::slice::from_ref(&msg));
                }
            }
        }
    }
}

/// Tells Raft a peer did not get `lost`.
fn report_lost(node: &RaftNode, peer: u64, lost: &[Message]) {
    node.report_unreachable(peer);
    if lost
        .iter()
        .any(|m| m.get_msg_type() == MessageType::MsgSnapshot)
    {
        node.report_snapshot(peer, false);
    }
}

async fn run_peer(inner: Weak<Inner>, peer: u64, mut rx: mpsc::Receiver<Message>) {
    let mut backoff = MIN_BACKOFF;
    let mut failing = false;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let mut bytes = batch[0].compute_size() as usize;
        while bytes < BATCH_BYTES {
            match rx.try_recv() {
                Ok(m) => {
                    bytes += m.compute_size() as usize;
                    batch.push(m);
                }
                Err(_) => break,
            }
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let Some(node) = inner.node.get() else {
            continue;
        };
        let heard = || {
            inner
                .heard_from
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&peer)
                .cloned()
        };
        let Some(addr) = node.peer(peer).map(|p| p.address).or_else(heard) else {
            tracing::debug!(peer, "no address known for raft peer: messages dropped");
            report_lost(node, peer, &batch);
            continue;
        };
        // A snapshot goes on a call of its own, its payload beside it: the messages after it
        // (heartbeats) do not wait for gigabytes.
        let (snapshots, batch): (Vec<Message>, Vec<Message>) = batch
            .into_iter()
            .partition(|m| m.get_msg_type() == MessageType::MsgSnapshot);
        for msg in snapshots {
            let (client, node, addr) = (inner.client.clone(), node.clone(), addr.clone());
            inner
                .runtime
                .spawn(send_snapshot(client, node, peer, addr, msg));
        }
        if batch.is_empty() {
            continue;
        }
        let encoded: Result<Vec<Vec<u8>>, _> = batch.iter().map(|m| m.write_to_bytes()).collect();
        let encoded = match encoded {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(peer, error = %e, "cannot encode raft messages");
                report_lost(node, peer, &batch);
                continue;
            }
        };
        match inner.client.raft(&addr, encoded, SEND_TIMEOUT).await {
            Ok(()) => {
                if failing {
                    tracing::info!(peer, %addr, "raft peer reachable again");
                }
                failing = false;
                backoff = MIN_BACKOFF;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(peer, error = %e, "raft peer unreachable");
                }
                failing = true;
                report_lost(node, peer, &batch);
                let node = node.clone();
                drop(inner);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                // What queued during the backoff is stale: Raft probes afresh.
                let mut stale = Vec::new();
                while let Ok(m) = rx.try_recv() {
                    stale.push(m);
                }
                if !stale.is_empty() {
                    report_lost(&node, peer, &stale);
                }
            }
        }
    }
}

/// Sends snapshot `msg` to `peer` with its payload beside it and tells raft how it went.
async fn send_snapshot(
    client: Arc<RpcClient>,
    node: RaftNode,
    peer: u64,
    addr: String,
    msg: Message,
) {
    let index = msg.get_snapshot().get_metadata().index;
    let started = std::time::Instant::now();
    match stream_snapshot(&client, &node, &addr, msg).await {
        Ok(bytes) => {
            tracing::info!(
                peer,
                %addr,
                index,
                bytes,
                seconds = started.elapsed().as_secs_f64(),
                "snapshot sent"
            );
            node.report_snapshot(peer, true);
        }
        Err(why) => {
            tracing::warn!(peer, %addr, index, "snapshot not sent: {why}");
            node.report_snapshot(peer, false);
        }
    }
}

/// The message first, then the payload read from redb on a blocking thread, a few pieces
/// ahead of the network at most; a read error ends the stream without its last piece, which
/// the follower refuses. Returns the payload's size.
async fn stream_snapshot(
    client: &RpcClient,
    node: &RaftNode,
    addr: &str,
    msg: Message,
) -> Result<u64, String> {
    let message = msg.write_to_bytes().map_err(|e| e.to_string())?;
    let source = node.outgoing_snapshot(&msg).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel(SNAPSHOT_READ_AHEAD);
    let first = SnapshotPiece {
        from_addr: client.own_addr().to_string(),
        message,
        ..SnapshotPiece::default()
    };
    tx.send(first).await.map_err(|_| "stream closed")?;
    let reader = tokio::task::spawn_blocking(move || -> Result<u64, String> {
        let mut total = 0;
        for piece in source {
            let data = piece.map_err(|e| e.to_string())?;
            total += data.len() as u64;
            let piece = SnapshotPiece {
                data,
                ..SnapshotPiece::default()
            };
            tx.blocking_send(piece)
                .map_err(|_| "the call ended before the payload was sent")?;
        }
        let last = SnapshotPiece {
            last: true,
            payload_bytes: total,
            ..SnapshotPiece::default()
        };
        tx.blocking_send(last)
            .map_err(|_| "the call ended before the payload was sent")?;
        Ok(total)
    });
    let sent = client
        .install_snapshot(addr, ReceiverStream::new(rx), SNAPSHOT_TIMEOUT)
        .await;
    let read = reader.await.map_err(|e| e.to_string())?;
    sent.map_err(|e| e.to_string())?;
    read
}
