//! The client endpoints (`/v1/client/...`) and where each call is answered. Every agent
//! serves them: the node that runs the allocation (or is named by `node_id`) answers; any other
//! agent passes the call on over a tunnel, untouched and streaming. A server sends it to the
//! node (over the node's session with it, or through the server that holds one); a client-only
//! agent sends it to a server, which does the rest; what a server asks of a node through a
//! tunnel is answered there or not at all, so a call never loops.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use tokio::io::DuplexStream;

use crate::error::ApiError;
use crate::{
    NodeClient, alloc_control, alloc_exec, allocs, client_fs, client_fs_stream, client_gc, logs,
    node_meta, proxy,
};

/// What the client endpoints' handlers share: the node client beside this API, if any.
#[derive(Clone)]
pub(crate) struct ClientState {
    pub client: Option<Arc<dyn NodeClient>>,
}

/// Where a forwarded call goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// The client API of this node.
    Node(String),
    /// A server's HTTP API (from a client-only agent).
    Server,
    /// The HTTP API of a server of this region (a request with `?region=` naming another
    /// region than the server's own).
    Region(String),
}

/// A boxed future, as [`TunnelOpener`] returns them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Opens connections to other agents: the agent decides what carries them (drover-rpc's
/// tunnels in the `drover` binary).
pub trait TunnelOpener: Send + Sync + 'static {
    /// A fresh connection to `to`, speaking HTTP/1.1; the error says why there is none.
    fn open(&self, to: Upstream) -> BoxFuture<'_, Result<DuplexStream, String>>;
}

/// An agent that reaches nobody (tests, an agent without RPC).
pub struct NoTunnels;

impl TunnelOpener for NoTunnels {
    fn open(&self, to: Upstream) -> BoxFuture<'_, Result<DuplexStream, String>> {
        Box::pin(async move {
            Err(match to {
                Upstream::Node(node_id) => format!("No path to node {node_id}"),
                Upstream::Server => "no server to forward to".to_string(),
                Upstream::Region(_) => drover_server::federation::NO_REGION_PATH.to_string(),
            })
        })
    }
}

/// Who answers the client endpoints of an agent.
#[derive(Clone)]
pub(crate) enum ClientRouting {
    /// A server agent: calls for other nodes go to them.
    Server {
        server: drover_server::Server,
        tunnels: Arc<dyn TunnelOpener>,
    },
    /// A client-only agent: calls for other nodes go to a server.
    ClientOnly { tunnels: Arc<dyn TunnelOpener> },
    /// Answered here or not at all: what a server asks of this node through a tunnel.
    LocalOnly,
}

#[derive(Clone)]
struct Dispatch {
    client: Option<Arc<dyn NodeClient>>,
    routing: ClientRouting,
}

/// What a client call is about, read from its path and query.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CallTarget {
    Alloc(String),
    Node(String),
    /// No node named: the local one.
    Local,
}

fn call_target(uri: &axum::http::Uri) -> CallTarget {
    let rest = uri.path().strip_prefix("/v1/client/").unwrap_or_default();
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["fs", _, alloc, ..] | ["allocation", alloc, ..] if !alloc.is_empty() => {
            CallTarget::Alloc(alloc.to_string())
        }
        _ => {
            let node = uri.query().unwrap_or_default().split('&').find_map(|kv| {
                kv.strip_prefix("node_id=")
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
            });
            node.map_or(CallTarget::Local, CallTarget::Node)
        }
    }
}

enum Place {
    Here,
    There(Upstream),
}

impl Dispatch {
    fn local_node(&self) -> Option<String> {
        self.client.as_ref().map(|c| c.node_id())
    }

    fn runs_here(&self, alloc_id: &str) -> bool {
        self.client
            .as_ref()
            .is_some_and(|c| c.alloc_dir(alloc_id).is_some())
    }

    fn place(&self, target: &CallTarget) -> Result<Place, ApiError> {
        let own = self.local_node();
        match (&self.routing, target) {
            (ClientRouting::LocalOnly, _) | (_, CallTarget::Local) => Ok(Place::Here),
            (_, CallTarget::Alloc(id)) if self.runs_here(id) => Ok(Place::Here),
            (_, CallTarget::Node(id)) if own.as_ref() == Some(id) => Ok(Place::Here),
            (ClientRouting::ClientOnly { .. }, _) => Ok(Place::There(Upstream::Server)),
            (ClientRouting::Server { server, .. }, CallTarget::Alloc(id)) => {
                match server.snapshot().alloc(id) {
                    Some(alloc)
                        if !alloc.node_id.is_empty() && Some(&alloc.node_id) != own.as_ref() =>
                    {
                        Ok(Place::There(Upstream::Node(alloc.node_id.clone())))
                    }
                    // Ours, or unknown: the handler says so in Nomad's words.
                    _ => Ok(Place::Here),
                }
            }
            (ClientRouting::Server { server, .. }, CallTarget::Node(id)) => {
                if server.snapshot().node(id).is_none() {
                    return Err(ApiError::not_found(format!("Unknown node {id}")));
                }
                Ok(Place::There(Upstream::Node(id.clone())))
            }
        }
    }

    fn tunnels(&self) -> Option<&Arc<dyn TunnelOpener>> {
        match &self.routing {
            ClientRouting::Server { tunnels, .. } | ClientRouting::ClientOnly { tunnels } => {
                Some(tunnels)
            }
            ClientRouting::LocalOnly => None,
        }
    }
}

/// The node a call is for. `POST` (or `PUT`) `/v1/client/metadata` names it in its body (`NodeID`, as
/// Nomad's API client sends it), so that body is read here and put back.
async fn target_of(request: Request) -> Result<(CallTarget, Request), ApiError> {
    let target = call_target(request.uri());
    if target != CallTarget::Local
        || request.method() == axum::http::Method::GET
        || request.uri().path() != "/v1/client/metadata"
    {
        return Ok((target, request));
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, METADATA_BODY_LIMIT)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
    let named = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("NodeID")?.as_str().map(str::to_string))
        .filter(|id| !id.is_empty());
    let request = Request::from_parts(parts, axum::body::Body::from(bytes));
    Ok((named.map_or(CallTarget::Local, CallTarget::Node), request))
}

/// More than any metadata update needs.
const METADATA_BODY_LIMIT: usize = 1 << 20;

async fn dispatch(State(d): State<Dispatch>, request: Request, next: Next) -> Response {
    let (target, request) = match target_of(request).await {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    match d.place(&target) {
        Ok(Place::Here) => next.run(request).await,
        Ok(Place::There(upstream)) => match d.tunnels() {
            Some(tunnels) => forward(tunnels.as_ref(), upstream, request)
                .await
                .unwrap_or_else(IntoResponse::into_response),
            None => ApiError::internal("this agent forwards no calls").into_response(),
        },
        Err(e) => e.into_response(),
    }
}

/// Sends `request` to `upstream` through a fresh tunnel and answers with its answer.
pub(crate) async fn forward(
    tunnels: &dyn TunnelOpener,
    upstream: Upstream,
    request: Request,
) -> Result<Response, ApiError> {
    let io = tunnels.open(upstream).await.map_err(ApiError::internal)?;
    proxy::forward(io, request).await
}

/// The client endpoints, answered as `routing` says.
pub(crate) fn routes(client: Option<Arc<dyn NodeClient>>, routing: ClientRouting) -> Router {
    let dispatcher = Dispatch {
        client: client.clone(),
        routing,
    };
    Router::new()
        .route("/v1/client/fs/logs/{alloc}", get(logs::logs))
        .route("/v1/client/fs/ls/{alloc}", get(client_fs::ls))
        .route("/v1/client/fs/stat/{alloc}", get(client_fs::stat))
        .route("/v1/client/fs/cat/{alloc}", get(client_fs::cat))
        .route(
            "/v1/client/fs/readat/{alloc}",
            get(client_fs_stream::readat),
        )
        .route(
            "/v1/client/fs/stream/{alloc}",
            get(client_fs_stream::stream),
        )
        .route("/v1/client/stats", get(client_fs::stats))
        .route(
            "/v1/client/allocation/{id}/stats",
            get(allocs::client_stats),
        )
        .route(
            "/v1/client/allocation/{id}/checks",
            get(allocs::client_checks),
        )
        .route(
            "/v1/client/allocation/{id}/signal",
            put(alloc_control::signal).post(alloc_control::signal),
        )
        .route("/v1/client/allocation/{id}/exec", get(alloc_exec::exec))
        .route(
            "/v1/client/allocation/{id}/restart",
            put(alloc_control::restart).post(alloc_control::restart),
        )
        .route(
            "/v1/client/metadata",
            get(node_meta::read)
                .post(node_meta::apply)
                .put(node_meta::apply),
        )
        .route(
            "/v1/client/gc",
            get(client_gc::collect_all)
                .put(client_gc::collect_all)
                .post(client_gc::collect_all),
        )
        .route(
            "/v1/client/allocation/{id}/gc",
            get(client_gc::collect_alloc)
                .put(client_gc::collect_alloc)
                .post(client_gc::collect_alloc),
        )
        .route_layer(axum::middleware::from_fn_with_state(dispatcher, dispatch))
        .with_state(ClientState { client })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uri: &str) -> CallTarget {
        call_target(&uri.parse().unwrap())
    }

    #[test]
    fn a_client_call_is_about_the_allocation_or_node_it_names() {
        assert_eq!(
            target("/v1/client/fs/logs/a1?task=web&follow=true"),
            CallTarget::Alloc("a1".into())
        );
        assert_eq!(
            target("/v1/client/allocation/a2/stats"),
            CallTarget::Alloc("a2".into())
        );
        assert_eq!(
            target("/v1/client/stats?pretty=1&node_id=n1"),
            CallTarget::Node("n1".into())
        );
        assert_eq!(target("/v1/client/stats"), CallTarget::Local);
        assert_eq!(target("/v1/client/stats?node_id="), CallTarget::Local);
    }

    #[tokio::test]
    async fn a_metadata_update_is_for_the_node_its_body_names_and_keeps_its_body() {
        let request = |body: &str| {
            Request::builder()
                .method(axum::http::Method::POST)
                .uri("/v1/client/metadata")
                .body(axum::body::Body::from(body.to_string()))
                .unwrap()
        };
        let body = r#"{"NodeID": "n9", "Meta": {"a": null}}"#;
        let (t, kept) = target_of(request(body)).await.unwrap();
        assert_eq!(t, CallTarget::Node("n9".into()));
        let bytes = axum::body::to_bytes(kept.into_body(), 1024).await.unwrap();
        assert_eq!(&bytes[..], body.as_bytes());
        let (t, _) = target_of(request(r#"{"Meta": {}}"#)).await.unwrap();
        assert_eq!(t, CallTarget::Local);
        let (t, _) = target_of(request("not json")).await.unwrap();
        assert_eq!(t, CallTarget::Local, "the handler reports bad JSON");
    }
}
