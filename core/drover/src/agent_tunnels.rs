//! The agent's tunnels (drover-rpc) behind the HTTP API's [`drover_http::TunnelOpener`]: a
//! server reaches nodes through their sessions and serves its API to client agents; a
//! client-only agent keeps a session with each of its servers and answers the calls that
//! arrive through them with its node's client endpoints.

use std::sync::Arc;

use drover_http::{BoxFuture, NodeClient, TunnelOpener, Upstream};
use drover_rpc::{RpcClient, TunnelAcceptor, TunnelHub, TunnelIo};
use drover_server::Server;

/// A server agent's side: tunnels to nodes and to other regions' servers, and its API for
/// tunnels that end here.
pub struct ServerTunnels {
    hub: Arc<TunnelHub>,
    /// Knows the other regions' servers; set with the API (the server starts after this).
    server: std::sync::OnceLock<Server>,
}

impl ServerTunnels {
    pub fn new(hub: Arc<TunnelHub>) -> ServerTunnels {
        ServerTunnels {
            hub,
            server: std::sync::OnceLock::new(),
        }
    }

    /// The API of one of `region`'s servers, trying them in turn.
    async fn region_api(&self, region: &str) -> Result<TunnelIo, String> {
        let servers = self
            .server
            .get()
            .map(|s| s.region_servers(region))
            .unwrap_or_default();
        let mut last = drover_server::federation::NO_REGION_PATH.to_string();
        for addr in servers {
            match self.hub.to_server_api(&addr).await {
                Ok(io) => return Ok(io),
                Err(e) => last = format!("region {region:?} server {addr}: {e}"),
            }
        }
        Err(last)
    }

    /// Serves `router` (this server's whole API) on the tunnels client agents open to it;
    /// `own_rpc` is this server's RPC address, left out of the peers asked for a node.
    pub fn serve_api(&self, server: Server, own_rpc: String, router: axum::Router) {
        let _ = self.server.set(server.clone());
        self.hub.set_acceptor(Arc::new(ApiAcceptor {
            server,
            own_rpc,
            router,
        }));
    }
}

impl TunnelOpener for ServerTunnels {
    fn open(&self, to: Upstream) -> BoxFuture<'_, Result<TunnelIo, String>> {
        Box::pin(async move {
            match to {
                Upstream::Node(node_id) => self
                    .hub
                    .to_node(&node_id, true)
                    .await
                    .map_err(|e| e.to_string()),
                Upstream::Server => Err("a server forwards client calls to nodes only".into()),
                Upstream::Region(region) => self.region_api(&region).await,
            }
        })
    }
}

struct ApiAcceptor {
    server: Server,
    own_rpc: String,
    router: axum::Router,
}

impl TunnelAcceptor for ApiAcceptor {
    fn serve_api(&self, io: TunnelIo) {
        tokio::spawn(drover_http::serve_connection(io, self.router.clone()));
    }

    fn peers(&self) -> Vec<String> {
        let (members, _) = self.server.raft_configuration();
        members
            .into_iter()
            .map(|m| m.address)
            .filter(|a| !a.is_empty() && *a != self.own_rpc)
            .collect()
    }
}

/// Keeps a session with every server in `servers` for node `node_id`; what the servers ask
/// through them is answered by `client`'s own endpoints and the agent's `internal` routes.
/// Ends when the handles are aborted.
pub fn keep_sessions(
    rpc: Arc<RpcClient>,
    servers: &[String],
    node_id: &str,
    client: Arc<dyn NodeClient>,
    internal: axum::Router,
) -> Vec<tokio::task::JoinHandle<()>> {
    let router = drover_http::node_router(client, internal);
    let accept: Arc<dyn Fn(TunnelIo) + Send + Sync> = Arc::new(move |io| {
        tokio::spawn(drover_http::serve_connection(io, router.clone()));
    });
    servers
        .iter()
        .map(|addr| {
            drover_rpc::keep_session(
                rpc.clone(),
                addr.clone(),
                node_id.to_string(),
                accept.clone(),
            )
        })
        .collect()
}
