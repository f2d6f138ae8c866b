//! CSI calls between agents: a server's controller and node-detach calls (Nomad's `ClientCSI`
//! RPCs) go to the node that runs the plugin — the client of this agent, or another node
//! through a tunnel, where the agent's internal `/v1/internal/csi/:op` routes answer them
//! with its own plugins. Those routes are served only to tunnels from servers, never on the
//! agent's HTTP listener.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::post;
use drover_http::{TunnelOpener, Upstream};
use drover_server::csi::{
    ControllerCreateSnapshotRequest, ControllerCreateVolumeRequest, ControllerCreateVolumeResponse,
    ControllerDeleteSnapshotRequest, ControllerDeleteVolumeRequest, ControllerListSnapshotsRequest,
    ControllerListVolumesRequest, ControllerPublishVolumeRequest, ControllerUnpublishVolumeRequest,
    ControllerValidateVolumeRequest, CsiClientRpc, CsiRpcFuture, NodeDetachVolumeRequest,
};
use drover_structs::csi::{CsiSnapshot, CsiSnapshotList, CsiVolumeExternalList};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::agent_csi::LocalCsiRpc;

const VALIDATE: &str = "controller_validate_volume";
const CREATE: &str = "controller_create_volume";
const DELETE: &str = "controller_delete_volume";
const PUBLISH: &str = "controller_publish_volume";
const UNPUBLISH: &str = "controller_unpublish_volume";
const DETACH: &str = "node_detach_volume";
const CREATE_SNAPSHOT: &str = "controller_create_snapshot";
const DELETE_SNAPSHOT: &str = "controller_delete_snapshot";
const LIST_SNAPSHOTS: &str = "controller_list_snapshots";
const LIST_VOLUMES: &str = "controller_list_volumes";

/// [`CsiClientRpc`] of a server: each call answered by the node it names.
pub struct RoutedCsiRpc {
    /// The client of this agent, if it runs one.
    local: Option<(String, LocalCsiRpc)>,
    tunnels: Arc<dyn TunnelOpener>,
}

impl RoutedCsiRpc {
    pub fn new(local: Option<drover_client::Client>, tunnels: Arc<dyn TunnelOpener>) -> Self {
        RoutedCsiRpc {
            local: local.map(|c| (c.node_id(), LocalCsiRpc(c))),
            tunnels,
        }
    }

    /// The local client, when the call is for this node (or names none and there is one).
    fn here(&self, node_id: &str) -> Option<&LocalCsiRpc> {
        self.local
            .as_ref()
            .filter(|(own, _)| node_id.is_empty() || node_id == own)
            .map(|(_, rpc)| rpc)
    }

    /// Sends call `op` to node `node_id` and decodes its answer.
    async fn remote<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        node_id: &str,
        op: &str,
        req: &Req,
    ) -> Result<Resp, String> {
        if node_id.is_empty() {
            return Err(format!("CSI call {op} names no node to run on"));
        }
        let io = self
            .tunnels
            .open(Upstream::Node(node_id.to_string()))
            .await?;
        let body = serde_json::to_vec(req).map_err(|e| format!("encoding {op}: {e}"))?;
        let (status, answer) =
            drover_http::call_over(io, "POST", &format!("/v1/internal/csi/{op}"), body).await?;
        if !status.is_success() {
            return Err(format!(
                "node {node_id} answered {op} with {status}: {}",
                String::from_utf8_lossy(&answer)
            ));
        }
        serde_json::from_slice::<Result<Resp, String>>(&answer)
            .map_err(|e| format!("undecodable answer of node {node_id} to {op}: {e}"))?
    }
}

impl CsiClientRpc for RoutedCsiRpc {
    fn controller_validate_volume(
        &self,
        req: ControllerValidateVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        match self.here(&req.controller_node_id) {
            Some(local) => local.controller_validate_volume(req),
            None => {
                Box::pin(async move { self.remote(&req.controller_node_id, VALIDATE, &req).await })
            }
        }
    }

    fn controller_create_volume(
        &self,
        req: ControllerCreateVolumeRequest,
    ) -> CsiRpcFuture<'_, ControllerCreateVolumeResponse> {
        match self.here(&req.controller_node_id) {
            Some(local) => local.controller_create_volume(req),
            None => {
                Box::pin(async move { self.remote(&req.controller_node_id, CREATE, &req).await })
            }
        }
    }

    fn controller_delete_volume(&self, req: ControllerDeleteVolumeRequest) -> CsiRpcFuture<'_, ()> {
        match self.here(&req.controller_node_id) {
            Some(local) => local.controller_delete_volume(req),
            None => {
                Box::pin(async move { self.remote(&req.controller_node_id, DELETE, &req).await })
            }
        }
    }

    fn controller_publish_volume(
        &self,
        req: ControllerPublishVolumeRequest,
    ) -> CsiRpcFuture<'_, BTreeMap<String, String>> {
        match self.here(&req.controller_node_id) {
            Some(local) => local.controller_publish_volume(req),
            None => {
                Box::pin(async move { self.remote(&req.controller_node_id, PUBLISH, &req).await })
            }
        }
    }

    fn controller_unpublish_volume(
        &self,
        req: ControllerUnpublishVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        match self.here(&req.controller_node_id) {
            Some(local) => local.controller_unpublish_volume(req),
            None => {
                Box::pin(async move { self.remote(&req.controller_node_id, UNPUBLISH, &req).await })
            }
        }
    }

    fn controller_create_snapshot(
        &self,
        req: ControllerCreateSnapshotRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshot> {
        match self.here(&req.controller_node_id) {
            Some(local) => local.controller_create_snapshot(req),
            None => Box::pin(async move {
                self.remote(&req.controller_node_id, CREATE_SNAPSHOT, &req)
                    .await
            }),
        }
    }

    fn controller_delete_snapshot(
        &self,
        req: ControllerDeleteSnapshotRequest,
    ) -> CsiRpcFuture<'_, ()> {
        match self.here(&req.controller_node_id) {
            Some(local) => local.controller_delete_snapshot(req),
            None => Box::pin(async move {
                self.remote(&req.controller_node_id, DELETE_SNAPSHOT, &req)
                    .await
            }),
        }
    }

    fn controller_list_snapshots(
        &self,
        req: ControllerListSnapshotsRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshotList> {
        match self.here(&req.controller_node_id) {
            Some(local) => local.controller_list_snapshots(req),
            None => Box::pin(async move {
                self.remote(&req.controller_node_id, LIST_SNAPSHOTS, &req)
                    .await
            }),
        }
    }

    fn controller_list_volumes(
        &self,
        req: ControllerListVolumesRequest,
    ) -> CsiRpcFuture<'_, CsiVolumeExternalList> {
        match self.here(&req.controller_node_id) {
            Some(local) => local.controller_list_volumes(req),
            None => Box::pin(async move {
                self.remote(&req.controller_node_id, LIST_VOLUMES, &req)
                    .await
            }),
        }
    }

    fn node_detach_volume(&self, req: NodeDetachVolumeRequest) -> CsiRpcFuture<'_, ()> {
        match self.here(&req.node_id) {
            Some(local) => local.node_detach_volume(req),
            None => Box::pin(async move { self.remote(&req.node_id, DETACH, &req).await }),
        }
    }
}

/// Decodes a request, runs it, and encodes the outcome (a refusal travels as `Err`).
async fn answer<'r, Req, Resp, F>(body: &[u8], run: F) -> Result<Vec<u8>, String>
where
    Req: DeserializeOwned,
    Resp: Serialize,
    F: FnOnce(Req) -> CsiRpcFuture<'r, Resp>,
{
    let req: Req = serde_json::from_slice(body).map_err(|e| format!("undecodable request: {e}"))?;
    let outcome = run(req).await;
    serde_json::to_vec(&outcome).map_err(|e| format!("encoding the answer: {e}"))
}

async fn serve_call(
    State(rpc): State<Arc<LocalCsiRpc>>,
    Path(op): Path<String>,
    body: Bytes,
) -> Result<Vec<u8>, (axum::http::StatusCode, String)> {
    let r = rpc.as_ref();
    let encoded = match op.as_str() {
        VALIDATE => answer(&body, |q| r.controller_validate_volume(q)).await,
        CREATE => answer(&body, |q| r.controller_create_volume(q)).await,
        DELETE => answer(&body, |q| r.controller_delete_volume(q)).await,
        PUBLISH => answer(&body, |q| r.controller_publish_volume(q)).await,
        UNPUBLISH => answer(&body, |q| r.controller_unpublish_volume(q)).await,
        DETACH => answer(&body, |q| r.node_detach_volume(q)).await,
        CREATE_SNAPSHOT => answer(&body, |q| r.controller_create_snapshot(q)).await,
        DELETE_SNAPSHOT => answer(&body, |q| r.controller_delete_snapshot(q)).await,
        LIST_SNAPSHOTS => answer(&body, |q| r.controller_list_snapshots(q)).await,
        LIST_VOLUMES => answer(&body, |q| r.controller_list_volumes(q)).await,
        other => {
            return Err((
                axum::http::StatusCode::NOT_FOUND,
                format!("unknown CSI call {other:?}"),
            ));
        }
    };
    encoded.map_err(|e| (axum::http::StatusCode::BAD_REQUEST, e))
}

/// The routes that answer servers' CSI calls with this agent's plugins.
pub fn internal_routes(client: drover_client::Client) -> Router {
    Router::new()
        .route("/v1/internal/csi/{op}", post(serve_call))
        .with_state(Arc::new(LocalCsiRpc(client)))
}
