//! drover-net: what a Drover server needs from the network between servers, as traits.
//!
//! The server (drover-server) calls other servers and serves calls through [`PeerNet`] and
//! [`Handler`]; drover-rpc implements them over gRPC. Keeping the traits here keeps the
//! server free of the transport stack (tonic, hyper) and lets tests plug in other networks.
//!
//! Must not depend on any Drover crate but drover-raft (whose messages and nodes it names) and
//! drover-tls (whose [`PeerRole`] says who a caller is), nor on tonic or any HTTP stack.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use drover_raft::eraftpb::Message;
use drover_raft::{IncomingSnapshot, RaftNode, Transport};
pub use drover_tls::PeerRole;

/// A boxed future, as the traits here return them (they are used as trait objects).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What an endpoint call resolves to on the serving side: its answer, or a refusal.
pub type CallFuture = BoxFuture<'static, Result<Vec<u8>, HandlerError>>;

/// A call the handler did not execute at all, so the caller may safely send it elsewhere.
/// Application errors (a job that fails validation...) are part of the answer instead.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HandlerError {
    #[error("{0}")]
    Refused(String),
}

/// What a server does with what arrives from the network.
pub trait Handler: Send + Sync + 'static {
    /// Raft messages from the peer at `from_addr`, in its send order.
    fn raft(&self, from_addr: String, messages: Vec<Message>);
    /// A raft snapshot from raft id `from` at `from_addr` begins to arrive: where its payload
    /// goes ([`RaftNode::incoming_snapshot`]). Refused before Raft runs, like `raft`'s
    /// messages are dropped then. The default refuses: a handler without Raft.
    fn incoming_snapshot(&self, from_addr: &str, from: u64) -> Result<IncomingSnapshot, String> {
        let _ = (from_addr, from);
        Err("this server runs no raft".into())
    }
    /// One endpoint call from `from_addr` (empty for clients): `method` names it. `role` is
    /// what the caller's certificate says it is ([`PeerRole::Unchecked`] without TLS or
    /// without `verify_server_hostname`).
    fn call(&self, from_addr: String, role: PeerRole, method: String, body: Vec<u8>) -> CallFuture;
}

/// Why a call to another server failed, and so whether retrying it elsewhere is safe.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RpcError {
    /// Nothing reached the peer (no connection, fault filter): the call did not run.
    #[error("cannot reach {addr}: {reason}")]
    NotSent { addr: String, reason: String },
    /// The peer answered that it did not run the call.
    #[error("{addr} refused the call: {reason}")]
    Refused { addr: String, reason: String },
    /// The call was sent and its outcome is unknown (timeout, connection lost).
    #[error("call to {addr} failed: {reason}")]
    Failed { addr: String, reason: String },
}

impl RpcError {
    /// True when the call certainly did not run, so it may be sent again.
    pub fn is_not_sent(&self) -> bool {
        matches!(self, RpcError::NotSent { .. } | RpcError::Refused { .. })
    }
}

/// The network of one server: calls to others, the Raft transport, and serving its own
/// [`Handler`].
pub trait PeerNet: Send + Sync + 'static {
    /// Calls endpoint `method` on the server at `addr` (`host:port`); gives up after `timeout`.
    fn call<'a>(
        &'a self,
        addr: &'a str,
        method: &'a str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, RpcError>>;

    /// The Raft transport to start the node with.
    fn raft_transport(&self) -> Arc<dyn Transport>;

    /// The node the transport serves: peer addresses come from its book, delivery failures
    /// are reported to it.
    fn attach(&self, node: RaftNode);

    /// Raft id `peer` was heard from `addr` (a server being added knows nobody until the
    /// leader's snapshot arrives, and must answer the leader to get it).
    fn heard_from(&self, peer: u64, addr: &str);

    /// Starts serving `handler` on this server's listener until `shutdown` completes. Called
    /// once, before the server looks for other servers.
    fn serve(&self, handler: Arc<dyn Handler>, shutdown: BoxFuture<'static, ()>);
}

/// The network of a server alone: nobody to call, nothing to serve (in-process servers, tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoNet;

impl PeerNet for NoNet {
    fn call<'a>(
        &'a self,
        addr: &'a str,
        _method: &'a str,
        _body: Vec<u8>,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, RpcError>> {
        Box::pin(async move {
            Err(RpcError::NotSent {
                addr: addr.to_string(),
                reason: "this server has no network".into(),
            })
        })
    }

    fn raft_transport(&self) -> Arc<dyn Transport> {
        Arc::new(drover_raft::NoTransport)
    }

    fn attach(&self, _node: RaftNode) {}

    fn heard_from(&self, _peer: u64, _addr: &str) {}

    fn serve(&self, _handler: Arc<dyn Handler>, _shutdown: BoxFuture<'static, ()>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_calls_that_never_ran_may_be_retried() {
        let e = |f: fn(String, String) -> RpcError| f("a:1".into(), "x".into());
        assert!(e(|addr, reason| RpcError::NotSent { addr, reason }).is_not_sent());
        assert!(e(|addr, reason| RpcError::Refused { addr, reason }).is_not_sent());
        assert!(!e(|addr, reason| RpcError::Failed { addr, reason }).is_not_sent());
    }

    #[test]
    fn a_lone_server_reaches_nobody() {
        let rt = std::thread::spawn(|| {
            let fut = NoNet.call("h:1", "Status", Vec::new(), Duration::from_secs(1));
            // A future that is ready at once: poll it by hand.
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            let mut fut = fut;
            match fut.as_mut().poll(&mut cx) {
                std::task::Poll::Ready(r) => r.is_err_and(|e| e.is_not_sent()),
                std::task::Poll::Pending => false,
            }
        });
        assert!(rt.join().unwrap());
    }
}
