//! The client's link to remote servers (a client-only agent): `drover_client::ServerConn` over
//! the servers' RPC. Calls go to the server that answered last; when it cannot be reached, or
//! has no leader to offer, the next one in the list is tried.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use drover_client::ServerConn;
use drover_rpc::{Faults, RpcClient};
use drover_server::csi::{CsiReply, CsiRequest};
use drover_server::rpc::{EndpointResult, ErrorKind, METHOD_ENDPOINT, Reply, Request};
use drover_structs::csi::{CsiVolumeClaim, CsiVolumeClaimRequest, CsiVolumeClaimResponse};
use drover_structs::{AllocClientUpdate, Allocation, Node};

/// Time a call may take on the server, besides a blocking query's own wait.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub struct RemoteServers {
    rpc: Arc<RpcClient>,
    /// Replaced whole by `PUT /v1/agent/servers`; each call reads it once.
    servers: std::sync::RwLock<Vec<String>>,
    /// Index in `servers` of the one that answered last.
    current: AtomicUsize,
}

impl RemoteServers {
    /// `servers` are RPC addresses (`host:port`); at least one. With `tls` on for RPC, the
    /// servers are dialled over mutual TLS with the agent's certificate.
    pub fn new(servers: Vec<String>, tls: Option<Arc<drover_tls::AgentTls>>) -> RemoteServers {
        RemoteServers {
            rpc: Arc::new(RpcClient::with_tls("", Arc::new(Faults::none()), tls)),
            servers: std::sync::RwLock::new(servers),
            current: AtomicUsize::new(0),
        }
    }

    /// The RPC client, shared with the sessions to the same servers (one connection each).
    pub fn rpc(&self) -> Arc<RpcClient> {
        self.rpc.clone()
    }

    /// The servers calls go to, in order.
    pub fn servers(&self) -> Vec<String> {
        self.servers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the servers calls go to (Nomad's `PUT /v1/agent/servers`). The sessions this
    /// agent opened at start stay as they are: servers reach the node through them, or
    /// through a peer that has one.
    pub fn set_servers(&self, servers: Vec<String>) {
        *self.servers.write().unwrap_or_else(|p| p.into_inner()) = servers;
        self.current.store(0, Ordering::Relaxed);
    }

    /// A tunnel to the HTTP API of the current server, failing over through the list.
    async fn api_tunnel(&self) -> Result<drover_rpc::TunnelIo, String> {
        let start = self.current.load(Ordering::Relaxed);
        let mut last_error = String::from("no server configured");
        let servers = self.servers();
        for attempt in 0..servers.len() {
            let addr = &servers[(start + attempt) % servers.len()];
            match self
                .rpc
                .open_tunnel(addr, &drover_rpc::TunnelTarget::Api)
                .await
            {
                Ok(io) => return Ok(io),
                Err(e) => last_error = e.to_string(),
            }
        }
        Err(format!("no server to forward the request to: {last_error}"))
    }

    /// Sends `request` to the current server, failing over through the list. The client's
    /// calls are safe to repeat (registration, heartbeat, status updates carry their whole
    /// state), so a call whose outcome is unknown is sent to the next server too.
    async fn call(&self, request: &Request, timeout: Duration) -> Result<Reply, String> {
        let body = drover_server::rpc::encode(request);
        let start = self.current.load(Ordering::Relaxed);
        let mut last_error = String::from("no server configured");
        let servers = self.servers();
        for attempt in 0..servers.len() {
            let i = (start + attempt) % servers.len();
            let addr = &servers[i];
            match self
                .rpc
                .call(addr, METHOD_ENDPOINT, body.clone(), timeout)
                .await
            {
                Ok(answer) => match serde_json::from_slice::<EndpointResult>(&answer) {
                    Ok(Ok(reply)) => {
                        self.current.store(i, Ordering::Relaxed);
                        return Ok(reply);
                    }
                    Ok(Err(e)) if matches!(e.kind, ErrorKind::NoLeader | ErrorKind::NotLeader) => {
                        last_error = format!("{addr}: {}", e.message);
                    }
                    Ok(Err(e)) => return Err(e.message),
                    Err(e) => last_error = format!("{addr}: undecodable answer: {e}"),
                },
                Err(e) => last_error = e.to_string(),
            }
            tracing::debug!(server = %addr, error = %last_error, "server call failed: trying the next server");
        }
        Err(last_error)
    }
}

impl drover_http::TunnelOpener for RemoteServers {
    fn open(
        &self,
        to: drover_http::Upstream,
    ) -> drover_http::BoxFuture<'_, Result<drover_rpc::TunnelIo, String>> {
        Box::pin(async move {
            match to {
                // Requests for another region go to a server, which forwards them.
                drover_http::Upstream::Server | drover_http::Upstream::Region(_) => {
                    self.api_tunnel().await
                }
                // A client agent reaches other nodes through a server only.
                drover_http::Upstream::Node(node_id) => Err(format!("No path to node {node_id}")),
            }
        })
    }
}

fn unexpected(reply: Reply) -> String {
    format!("unexpected server reply: {reply:?}")
}

impl ServerConn for RemoteServers {
    async fn sign_mesh_leaf(
        &self,
        node_id: &str,
        alloc_id: &str,
        task: &str,
    ) -> Result<drover_structs::mesh::MeshLeaf, String> {
        let request = Request::Mesh(drover_server::mesh::MeshRequest::SignLeaf {
            node_id: node_id.to_string(),
            alloc_id: alloc_id.to_string(),
            task: task.to_string(),
        });
        match self.call(&request, CALL_TIMEOUT).await? {
            Reply::Mesh(drover_server::mesh::MeshReply::Leaf(leaf)) => Ok(leaf),
            other => Err(unexpected(other)),
        }
    }

    async fn mesh_view(&self, namespace: &str) -> Result<drover_structs::mesh::MeshView, String> {
        let request = Request::Mesh(drover_server::mesh::MeshRequest::View {
            namespace: namespace.to_string(),
        });
        match self.call(&request, CALL_TIMEOUT).await? {
            Reply::Mesh(drover_server::mesh::MeshReply::View(view)) => Ok(view),
            other => Err(unexpected(other)),
        }
    }

    async fn service_registrations(
        &self,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<Vec<drover_structs::ServiceRegistration>, String> {
        let request = Request::Services(drover_server::service_catalog::ServiceQuery {
            namespace: namespace.to_string(),
            name: name.map(str::to_string),
        });
        match self.call(&request, CALL_TIMEOUT).await? {
            Reply::Services(list) => Ok(list),
            other => Err(unexpected(other)),
        }
    }

    async fn register_node(&self, node: Node) -> Result<Duration, String> {
        match self
            .call(&Request::RegisterNode { node }, CALL_TIMEOUT)
            .await?
        {
            Reply::Ttl { ttl_ms, .. } => Ok(Duration::from_millis(ttl_ms)),
            other => Err(unexpected(other)),
        }
    }

    async fn heartbeat(&self, node_id: &str) -> Result<Duration, String> {
        let request = Request::Heartbeat {
            node_id: node_id.to_string(),
        };
        match self.call(&request, CALL_TIMEOUT).await? {
            Reply::Ttl { ttl_ms, .. } => Ok(Duration::from_millis(ttl_ms)),
            other => Err(unexpected(other)),
        }
    }

    async fn node_allocs(
        &self,
        node_id: &str,
        min_index: u64,
        wait: Duration,
    ) -> Result<(Vec<Arc<Allocation>>, u64), String> {
        let request = Request::NodeAllocs {
            node_id: node_id.to_string(),
            min_index,
            wait_ms: wait.as_millis() as u64,
        };
        match self.call(&request, wait + CALL_TIMEOUT).await? {
            Reply::NodeAllocs { allocs, index } => Ok((allocs, index)),
            other => Err(unexpected(other)),
        }
    }

    async fn update_allocs(&self, updates: Vec<AllocClientUpdate>) -> Result<(), String> {
        match self
            .call(&Request::UpdateAllocs { updates }, CALL_TIMEOUT)
            .await?
        {
            Reply::Index(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn claim_csi_volume(
        &self,
        request: CsiVolumeClaimRequest,
    ) -> Result<CsiVolumeClaimResponse, String> {
        let request = Request::Csi(CsiRequest::Claim { request });
        match self.call(&request, CALL_TIMEOUT).await? {
            Reply::Csi(CsiReply::Claim(r)) => Ok(*r),
            other => Err(unexpected(other)),
        }
    }

    async fn unpublish_csi_volume(
        &self,
        namespace: &str,
        volume_id: &str,
        claim: CsiVolumeClaim,
    ) -> Result<(), String> {
        let request = Request::Csi(CsiRequest::Unpublish {
            namespace: namespace.to_string(),
            volume_id: volume_id.to_string(),
            claim,
        });
        match self.call(&request, CALL_TIMEOUT).await? {
            Reply::Csi(CsiReply::Index(_)) => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}
