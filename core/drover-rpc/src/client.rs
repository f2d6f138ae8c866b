//! The calling side: one cached HTTP/2 channel per address, and errors that say whether the
//! call may have run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_net::RpcError;
use drover_tls::AgentTls;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request};

use crate::MAX_MESSAGE_BYTES;
use crate::faults::Faults;
use crate::proto::drover_client::DroverClient;
use crate::proto::{CallRequest, RaftBatch, SessionDown, SessionUp, SnapshotPiece, TunnelFrame};
use crate::tunnel::{TunnelIo, TunnelTarget, bridge};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long opening a session or a tunnel may take (a relayed tunnel waits on the client).
const OPEN_TIMEOUT: Duration = Duration::from_secs(15);

/// Calls servers' RPC endpoints. Cheap to share; connections are made on first use and
/// dropped when a call on them fails.
pub struct RpcClient {
    own_addr: String,
    faults: Arc<Faults>,
    /// Dial over TLS with the agent's certificate when set (and on for RPC).
    tls: Option<Arc<AgentTls>>,
    channels: Mutex<HashMap<String, Channel>>,
}

impl RpcClient {
    /// `own_addr` is this server's RPC address (empty for clients), sent with every call.
    pub fn new(own_addr: impl Into<String>, faults: Arc<Faults>) -> RpcClient {
        RpcClient::with_tls(own_addr, faults, None)
    }

    /// As [`RpcClient::new`], dialling over TLS when `tls` has it on for RPC.
    pub fn with_tls(
        own_addr: impl Into<String>,
        faults: Arc<Faults>,
        tls: Option<Arc<AgentTls>>,
    ) -> RpcClient {
        RpcClient {
            own_addr: own_addr.into(),
            faults,
            tls: tls.filter(|t| t.rpc_enabled()),
            channels: Mutex::new(HashMap::new()),
        }
    }

    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    fn cached(&self, addr: &str) -> Option<Channel> {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(addr)
            .cloned()
    }

    fn evict(&self, addr: &str) {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(addr);
    }

    async fn stub(&self, addr: &str) -> Result<DroverClient<Channel>, RpcError> {
        let not_sent = |reason: String| RpcError::NotSent {
            addr: addr.to_string(),
            reason,
        };
        if self.faults.blocks(addr) {
            return Err(not_sent("cut off by the test fault filter".into()));
        }
        let channel = match self.cached(addr) {
            Some(channel) => channel,
            None => {
                let endpoint = Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| not_sent(format!("invalid address: {e}")))?
                    .connect_timeout(CONNECT_TIMEOUT)
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(Duration::from_secs(10))
                    .keep_alive_timeout(Duration::from_secs(5));
                let connected = match &self.tls {
                    Some(tls) => {
                        endpoint
                            .connect_with_connector(crate::tls::TlsConnector {
                                tls: tls.clone(),
                                timeout: CONNECT_TIMEOUT,
                            })
                            .await
                    }
                    None => endpoint.connect().await,
                };
                let channel = connected.map_err(|e| not_sent(error_chain(&e)))?;
                self.channels
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(addr.to_string(), channel.clone());
                channel
            }
        };
        Ok(DroverClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    fn failure(&self, addr: &str, status: tonic::Status) -> RpcError {
        if status.code() == Code::FailedPrecondition {
            return RpcError::Refused {
                addr: addr.to_string(),
                reason: status.message().to_string(),
            };
        }
        // The channel may be broken; the next call connects afresh (and learns NotSent if
        // the peer is gone).
        self.evict(addr);
        RpcError::Failed {
            addr: addr.to_string(),
            reason: format!("{}: {}", status.code(), status.message()),
        }
    }

    /// Calls endpoint `method` on the server at `addr` with a JSON `body`; returns its JSON
    /// answer. Gives up after `timeout`.
    pub async fn call(
        &self,
        addr: &str,
        method: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, RpcError> {
        let mut stub = self.stub(addr).await?;
        let request = Request::new(CallRequest {
            from_addr: self.own_addr.clone(),
            method: method.to_string(),
            body,
        });
        match tokio::time::timeout(timeout, stub.call(request)).await {
            Ok(Ok(reply)) => Ok(reply.into_inner().body),
            Ok(Err(status)) => Err(self.failure(addr, status)),
            Err(_) => {
                self.evict(addr);
                Err(RpcError::Failed {
                    addr: addr.to_string(),
                    reason: format!("no answer within {timeout:?}"),
                })
            }
        }
    }

    /// Sends protobuf-encoded raft messages to the server at `addr`.
    pub async fn raft(
        &self,
        addr: &str,
        messages: Vec<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(), RpcError> {
        let mut stub = self.stub(addr).await?;
        let request = Request::new(RaftBatch {
            from_addr: self.own_addr.clone(),
            messages,
        });
        let answer = tokio::time::timeout(timeout, stub.raft(request)).await;
        self.acknowledged(addr, answer, || format!("no answer within {timeout:?}"))
    }

    /// The outcome of a call answered with an acknowledgement, or not within its time (the
    /// connection is then dropped: it may be the reason).
    fn acknowledged<T>(
        &self,
        addr: &str,
        answer: Result<Result<T, tonic::Status>, tokio::time::error::Elapsed>,
        late: impl FnOnce() -> String,
    ) -> Result<(), RpcError> {
        match answer {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => Err(self.failure(addr, status)),
            Err(_) => {
                self.evict(addr);
                Err(RpcError::Failed {
                    addr: addr.to_string(),
                    reason: late(),
                })
            }
        }
    }
}

impl RpcClient {
    /// Sends a raft snapshot to the server at `addr`: `pieces` are its stream (the message
    /// first, see `transport::send_snapshot`). Resolves once the follower handled it.
    pub async fn install_snapshot(
        &self,
        addr: &str,
        pieces: impl tokio_stream::Stream<Item = SnapshotPiece> + Send + 'static,
        timeout: Duration,
    ) -> Result<(), RpcError> {
        let mut stub = self.stub(addr).await?;
        let answer =
            tokio::time::timeout(timeout, stub.install_snapshot(Request::new(pieces))).await;
        self.acknowledged(addr, answer, || {
            format!("snapshot not installed within {timeout:?}")
        })
    }

    /// The address other servers reach this one at.
    pub(crate) fn own_addr(&self) -> &str {
        &self.own_addr
    }
}

impl RpcClient {
    /// Opens the session of client node `node_id` with the server at `addr`. The session
    /// lasts until the returned [`SessionLink`] is dropped or the connection fails.
    pub async fn open_session(&self, addr: &str, node_id: &str) -> Result<SessionLink, RpcError> {
        let mut stub = self.stub(addr).await?;
        let (tx, rx) = tokio::sync::mpsc::channel::<SessionUp>(1);
        let hello = SessionUp {
            node_id: node_id.to_string(),
        };
        // The receiver is alive (held by `rx`): this send cannot fail.
        let _ = tx.send(hello).await;
        let up = tokio_stream::wrappers::ReceiverStream::new(rx);
        match tokio::time::timeout(OPEN_TIMEOUT, stub.session(Request::new(up))).await {
            Ok(Ok(reply)) => Ok(SessionLink {
                requests: reply.into_inner(),
                _open: tx,
            }),
            Ok(Err(status)) => Err(self.failure(addr, status)),
            Err(_) => {
                self.evict(addr);
                Err(RpcError::Failed {
                    addr: addr.to_string(),
                    reason: format!("no session within {OPEN_TIMEOUT:?}"),
                })
            }
        }
    }

    /// Opens a tunnel to `target` through the server at `addr`.
    pub async fn open_tunnel(
        &self,
        addr: &str,
        target: &TunnelTarget,
    ) -> Result<TunnelIo, RpcError> {
        let mut stub = self.stub(addr).await?;
        let (tx, rx) = tokio::sync::mpsc::channel::<TunnelFrame>(8);
        let open = TunnelFrame {
            open: Some(target.to_open(&self.own_addr)),
            data: Vec::new(),
        };
        // The receiver is alive (held by `rx`): this send cannot fail.
        let _ = tx.send(open).await;
        let up = tokio_stream::wrappers::ReceiverStream::new(rx);
        match tokio::time::timeout(OPEN_TIMEOUT, stub.tunnel(Request::new(up))).await {
            Ok(Ok(reply)) => Ok(bridge(reply.into_inner(), tx, |frame| frame)),
            Ok(Err(status)) if status.code() == Code::NotFound => Err(RpcError::Refused {
                addr: addr.to_string(),
                reason: status.message().to_string(),
            }),
            Ok(Err(status)) => Err(self.failure(addr, status)),
            Err(_) => Err(RpcError::Failed {
                addr: addr.to_string(),
                reason: format!("no tunnel within {OPEN_TIMEOUT:?}"),
            }),
        }
    }
}

/// A client's open session: the tunnel requests its server sends. Dropping it ends the
/// session (its request side closes, which the server sees at once).
pub struct SessionLink {
    requests: tonic::Streaming<SessionDown>,
    /// Keeps the request side of the call open.
    _open: tokio::sync::mpsc::Sender<SessionUp>,
}

impl SessionLink {
    /// The next tunnel request; `None` when the session ended.
    pub async fn next_request(&mut self) -> Option<u64> {
        match self.requests.message().await {
            Ok(Some(down)) => Some(down.tunnel_id),
            _ => None,
        }
    }
}

/// An error and its sources on one line ("transport error: tcp connect error: Connection
/// refused").
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
