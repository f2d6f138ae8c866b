//! `drover_net::PeerNet` over gRPC: the RPC client, the Raft transport, and the service on
//! this server's listener.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_net::{BoxFuture, Handler, PeerNet, RpcError};
use drover_raft::{RaftNode, Transport};

use drover_tls::AgentTls;

use crate::client::RpcClient;
use crate::faults::Faults;
use crate::transport::RaftTransport;
use crate::tunnel::TunnelHub;

/// The network of one server, on its RPC listener.
pub struct GrpcNet {
    client: Arc<RpcClient>,
    transport: RaftTransport,
    faults: Arc<Faults>,
    tunnels: Arc<TunnelHub>,
    tls: Option<Arc<AgentTls>>,
    /// Taken by `serve`.
    listener: Mutex<Option<tokio::net::TcpListener>>,
}

impl GrpcNet {
    /// `own_addr` is the address other servers reach `listener` at; with `tls` on for RPC,
    /// both serving and calling use mutual TLS. Must be called within a tokio runtime (the
    /// transport's sender tasks run on it).
    pub fn new(
        listener: tokio::net::TcpListener,
        own_addr: impl Into<String>,
        faults: Arc<Faults>,
        tls: Option<Arc<AgentTls>>,
    ) -> GrpcNet {
        let client = Arc::new(RpcClient::with_tls(own_addr, faults.clone(), tls.clone()));
        let transport = RaftTransport::new(client.clone(), tokio::runtime::Handle::current());
        let tunnels = Arc::new(TunnelHub::new(client.clone()));
        GrpcNet {
            client,
            transport,
            faults,
            tunnels,
            tls,
            listener: Mutex::new(Some(listener)),
        }
    }
}

impl GrpcNet {
    /// The client sessions held by this server and the tunnels through them.
    pub fn tunnels(&self) -> Arc<TunnelHub> {
        self.tunnels.clone()
    }
}

impl PeerNet for GrpcNet {
    fn call<'a>(
        &'a self,
        addr: &'a str,
        method: &'a str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, RpcError>> {
        Box::pin(self.client.call(addr, method, body, timeout))
    }

    fn raft_transport(&self) -> Arc<dyn Transport> {
        Arc::new(self.transport.clone())
    }

    fn attach(&self, node: RaftNode) {
        self.transport.attach(node);
    }

    fn heard_from(&self, peer: u64, addr: &str) {
        self.transport.heard_from(peer, addr);
    }

    fn serve(&self, handler: Arc<dyn Handler>, shutdown: BoxFuture<'static, ()>) {
        let taken = self
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(listener) = taken else {
            tracing::error!("the RPC listener is already served");
            return;
        };
        let (faults, tunnels, tls) = (self.faults.clone(), self.tunnels.clone(), self.tls.clone());
        tokio::spawn(async move {
            if let Err(e) =
                crate::service::serve(listener, handler, faults, tunnels, tls, shutdown).await
            {
                tracing::error!(error = %e, "RPC server stopped");
            }
        });
    }
}
