//! The server side: the tonic service that hands Raft messages and endpoint calls to a
//! `drover_net::Handler`.

use std::future::Future;
use std::sync::Arc;

use drover_net::{Handler, HandlerError};
use drover_raft::eraftpb::Message;
use protobuf::Message as _;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

use crate::MAX_MESSAGE_BYTES;
use crate::faults::Faults;
use crate::proto::drover_server::{Drover, DroverServer};
use crate::proto::{CallReply, CallRequest, RaftAck, RaftBatch};

struct Service {
    handler: Arc<dyn Handler>,
    faults: Arc<Faults>,
}

#[tonic::async_trait]
impl Drover for Service {
    async fn raft(&self, request: Request<RaftBatch>) -> Result<Response<RaftAck>, Status> {
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

    async fn call(&self, request: Request<CallRequest>) -> Result<Response<CallReply>, Status> {
        let call = request.into_inner();
        if !call.from_addr.is_empty() && self.faults.blocks(&call.from_addr) {
            return Err(Status::failed_precondition(
                "dropped by the test fault filter",
            ));
        }
        match self
            .handler
            .call(call.from_addr, call.method, call.body)
            .await
        {
            Ok(body) => Ok(Response::new(CallReply { body })),
            // FailedPrecondition is how the client tells "not executed" from "maybe executed".
            Err(HandlerError::Refused(why)) => Err(Status::failed_precondition(why)),
        }
    }
}

/// Serves the RPC on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handler: Arc<dyn Handler>,
    faults: Arc<Faults>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let service = DroverServer::new(Service { handler, faults })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Raft heartbeats and small appends must not wait for Nagle.
    let incoming = TcpListenerStream::new(listener).map(|conn| {
        if let Ok(stream) = &conn {
            let _ = stream.set_nodelay(true);
        }
        conn
    });
    tonic::transport::Server::builder()
        .serve_with_incoming_shutdown(service, incoming, shutdown)
        .await
}
