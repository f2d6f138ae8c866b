//! The server side: the tonic service that hands Raft messages and endpoint calls to a
//! `drover_net::Handler`.

use std::future::Future;
use std::sync::Arc;

use drover_net::{Handler, HandlerError, PeerRole};
use drover_raft::eraftpb::Message;
use drover_tls::AgentTls;
use protobuf::Message as _;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status, Streaming};

use crate::MAX_MESSAGE_BYTES;
use crate::faults::Faults;
use crate::proto::drover_server::{Drover, DroverServer};
use crate::proto::{
    CallReply, CallRequest, RaftAck, RaftBatch, SessionDown, SessionUp, SnapshotPiece, TunnelFrame,
};
use crate::tunnel::{TunnelError, TunnelHub, TunnelTarget, bridge};

/// Session messages queued for a client before the server stops waiting for it.
const SESSION_QUEUE: usize = 64;
/// Frames queued towards the far end of a tunnel.
const TUNNEL_QUEUE: usize = 8;
/// How often the server pings idle connections, so it notices clients that went away (and
/// drops their sessions) without waiting for TCP.
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

struct Service {
    handler: Arc<dyn Handler>,
    faults: Arc<Faults>,
    tunnels: Arc<TunnelHub>,
}

/// What the caller's certificate says it is: set on every connection of a TLS port, absent
/// on a plain one.
fn role_of<T>(request: &Request<T>) -> PeerRole {
    request
        .extensions()
        .get::<PeerRole>()
        .copied()
        .unwrap_or(PeerRole::Unchecked)
}

fn not_a_client(role: PeerRole) -> Status {
    Status::permission_denied(format!(
        "a {role:?} certificate may not open sessions or tunnels (it needs client.<region>.nomad or server.<region>.nomad)"
    ))
}

fn tunnel_status(e: TunnelError) -> Status {
    match e {
        TunnelError::NoPath { .. } => Status::not_found(e.to_string()),
        _ => Status::unavailable(e.to_string()),
    }
}

#[tonic::async_trait]
impl Drover for Service {
    type SessionStream = ReceiverStream<Result<SessionDown, Status>>;
    type TunnelStream = ReceiverStream<Result<TunnelFrame, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<SessionUp>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let role = role_of(&request);
        if !role.may_act_as_client() {
            return Err(not_a_client(role));
        }
        let mut inbound = request.into_inner();
        let node_id = match inbound.message().await? {
            Some(hello) if !hello.node_id.is_empty() => hello.node_id,
            _ => {
                return Err(Status::invalid_argument(
                    "a session starts with its node id",
                ));
            }
        };
        let (tx, rx) = mpsc::channel(SESSION_QUEUE);
        let generation = self.tunnels.register_session(&node_id, tx.clone());
        let hub = self.tunnels.clone();
        tokio::spawn(async move {
            // The session lasts while both sides of the call do.
            loop {
                tokio::select! {
                    m = inbound.message() => if !matches!(m, Ok(Some(_))) { break },
                    () = tx.closed() => break,
                }
            }
            hub.end_session(&node_id, generation);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn tunnel(
        &self,
        request: Request<Streaming<TunnelFrame>>,
    ) -> Result<Response<Self::TunnelStream>, Status> {
        let role = role_of(&request);
        if !role.may_act_as_client() {
            return Err(not_a_client(role));
        }
        let mut inbound = request.into_inner();
        let open = match inbound.message().await? {
            Some(TunnelFrame {
                open: Some(open), ..
            }) => open,
            _ => return Err(Status::invalid_argument("a tunnel starts with its target")),
        };
        if !open.from_addr.is_empty() && self.faults.blocks(&open.from_addr) {
            return Err(Status::failed_precondition(
                "dropped by the test fault filter",
            ));
        }
        let target = TunnelTarget::from_open(&open);
        // Reach the far end first: a refusal is then the call's status, not a broken stream.
        let far = match &target {
            TunnelTarget::Node { node_id, relayed } => Some(
                self.tunnels
                    .to_node(node_id, !relayed)
                    .await
                    .map_err(tunnel_status)?,
            ),
            _ => None,
        };
        let (tx, rx) = mpsc::channel(TUNNEL_QUEUE);
        let near = bridge(inbound, tx, Ok);
        match target {
            TunnelTarget::Api => match self.tunnels.acceptor() {
                Some(acceptor) => acceptor.serve_api(near),
                None => return Err(Status::unavailable("this server serves no API yet")),
            },
            TunnelTarget::Answer { id } => {
                if !self.tunnels.answer(id, near) {
                    return Err(Status::not_found(format!(
                        "no tunnel request {id} is waiting"
                    )));
                }
            }
            TunnelTarget::Node { .. } => {
                if let Some(mut far) = far {
                    let mut near = near;
                    tokio::spawn(async move {
                        let _ = tokio::io::copy_bidirectional(&mut near, &mut far).await;
                    });
                }
            }
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn raft(&self, request: Request<RaftBatch>) -> Result<Response<RaftAck>, Status> {
        let role = role_of(&request);
        if !role.may_act_as_server() {
            // A client certificate can never join as a server.
            return Err(Status::permission_denied(format!(
                "raft messages need a server certificate (server.<region>.nomad); the caller's is {role:?}"
            )));
        }
        let batch = request.into_inner();
        if self.faults.blocks(&batch.from_addr) {
            return Err(Status::unavailable("dropped by the test fault filter"));
        }
        let mut messages = Vec::with_capacity(batch.messages.len());
        for bytes in &batch.messages {
            let message = Message::parse_from_bytes(bytes)
                .map_err(|e| Status::invalid_argument(format!("undecodable raft message: {e}")))?;
            messages.push(message);
        }
        self.handler.raft(batch.from_addr, messages);
        Ok(Response::new(RaftAck {}))
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<SnapshotPiece>>,
    ) -> Result<Response<RaftAck>, Status> {
        let role = role_of(&request);
        if !role.may_act_as_server() {
            return Err(Status::permission_denied(format!(
                "raft snapshots need a server certificate (server.<region>.nomad); the caller's is {role:?}"
            )));
        }
        let mut pieces = request.into_inner();
        let first = pieces
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("a snapshot stream with no pieces"))?;
        if self.faults.blocks(&first.from_addr) {
            return Err(Status::unavailable("dropped by the test fault filter"));
        }
        let msg = Message::parse_from_bytes(&first.message)
            .map_err(|e| Status::invalid_argument(format!("undecodable raft message: {e}")))?;
        let mut incoming = self
            .handler
            .incoming_snapshot(&first.from_addr, msg.from)
            .map_err(Status::unavailable)?;
        let transfer = |e: drover_raft::RaftError| Status::unavailable(e.to_string());
        let payload_bytes = loop {
            let piece = pieces.message().await?.ok_or_else(|| {
                Status::aborted("the snapshot stream ended before its last piece")
            })?;
            if !piece.data.is_empty() {
                // One redb transaction per piece: off the runtime's workers.
                incoming = tokio::task::spawn_blocking(move || {
                    incoming.write(&piece.data).map(|()| incoming)
                })
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(transfer)?;
            }
            if piece.last {
                break piece.payload_bytes;
            }
        };
        if incoming.received() != payload_bytes {
            return Err(Status::invalid_argument(format!(
                "snapshot payload of {} bytes received, {payload_bytes} announced",
                incoming.received()
            )));
        }
        let handed_over = tokio::task::spawn_blocking(move || incoming.finish(msg))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(transfer)?;
        handed_over.handled().await.map_err(transfer)?;
        Ok(Response::new(RaftAck {}))
    }

    async fn call(&self, request: Request<CallRequest>) -> Result<Response<CallReply>, Status> {
        let role = role_of(&request);
        let call = request.into_inner();
        if !call.from_addr.is_empty() && self.faults.blocks(&call.from_addr) {
            return Err(Status::failed_precondition(
                "dropped by the test fault filter",
            ));
        }
        match self
            .handler
            .call(call.from_addr, role, call.method, call.body)
            .await
        {
            Ok(body) => Ok(Response::new(CallReply { body })),
            // FailedPrecondition is how the client tells "not executed" from "maybe executed".
            Err(HandlerError::Refused(why)) => Err(Status::failed_precondition(why)),
        }
    }
}

/// Serves the RPC on `listener` until `shutdown` completes: over mutual TLS when `tls` has
/// it on for RPC (plain connections are then refused), else in plain text.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handler: Arc<dyn Handler>,
    faults: Arc<Faults>,
    tunnels: Arc<TunnelHub>,
    tls: Option<Arc<AgentTls>>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let service = DroverServer::new(Service {
        handler,
        faults,
        tunnels,
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT));
    if let Some(tls) = tls.filter(|t| t.rpc_enabled()) {
        let incoming = ReceiverStream::new(crate::tls::accept(listener, tls));
        return server
            .serve_with_incoming_shutdown(service, incoming, shutdown)
            .await;
    }
    // Raft heartbeats and small appends must not wait for Nagle.
    let incoming = TcpListenerStream::new(listener).map(|conn| {
        if let Ok(stream) = &conn {
            let _ = stream.set_nodelay(true);
        }
        conn
    });
    server
        .serve_with_incoming_shutdown(service, incoming, shutdown)
        .await
}
