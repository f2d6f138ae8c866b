//! Drover's HTTP API: Nomad's `/v1` surface (paths, PascalCase JSON, `X-Nomad-*` headers,
//! blocking queries, plain-text errors) served with axum over a [`drover_server::Server`] and,
//! on agents that run a client, the node's allocation directories and logs.
//!
//! Must not depend on: drover-raft or drover-scheduler directly, drivers or plugins. It reads
//! state through the server's snapshots and writes only through the server's endpoints; the
//! client side is reached through the [`NodeClient`] trait so the agent decides what backs it.

mod acl;
mod agent;
mod alloc_control;
mod alloc_exec;
mod allocs;
mod authorize;
mod body;
mod client_api;
mod client_fs;
mod client_fs_stream;
mod client_gc;
mod consistency;
mod csi;
mod deployments;
mod error;
mod evals;
mod events;
mod https;
mod intentions;
mod job_plan;
mod job_versions;
mod jobs;
mod jobspec;
mod logs;
mod metrics;
mod monitor;
mod namespaces;
mod node_meta;
mod nodes;
mod operator;
mod proxy;
mod query;
mod region;
mod response;
mod scaling;
mod search;
mod services;
mod starting;
mod stream;
mod system;
#[cfg(test)]
mod test_support;
mod variables;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post, put};

pub use alloc_control::ControlFuture;
pub use client_api::{BoxFuture, NoTunnels, TunnelOpener, Upstream};
pub use metrics::metrics_response;
pub use monitor::{LogFeed, LogRecord, level_rank, log_feed, monitor};
pub use proxy::{call_over, serve_connection};
pub use query::parse_go_duration;
pub use starting::{ReadyRouter, late_router, starting_router};
pub use system::host_data_response;

/// Largest request body accepted (a job with many groups stays far below this).
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// What the agent tells the API about itself (`/v1/agent/self`, `/v1/status/leader`...).
#[derive(Debug, Clone)]
pub struct AgentInfo {
    pub name: String,
    pub region: String,
    pub datacenter: String,
    pub http_addr: SocketAddr,
    pub rpc_addr: SocketAddr,
    pub server: bool,
    pub client: bool,
    pub version: String,
    /// The agent configuration, returned as `config` by `/v1/agent/self`.
    pub config_json: serde_json::Value,
    /// `telemetry { prometheus_metrics }`: whether `/v1/metrics?format=prometheus` is served.
    pub prometheus_metrics: bool,
    /// `enable_debug` (on in dev mode): whether an agent without ACLs serves `/v1/agent/host`.
    pub enable_debug: bool,
}

/// The node agent running beside this API, for the `/v1/client/...` endpoints.
pub trait NodeClient: Send + Sync + 'static {
    fn node_id(&self) -> String;
    /// Root directory of that allocation on this node (`<data_dir>/alloc/<alloc_id>`), `None`
    /// if the client does not know the allocation.
    fn alloc_dir(&self, alloc_id: &str) -> Option<PathBuf>;
    /// When the client's last heartbeat reached a server (`last_heartbeat` of
    /// `/v1/agent/self`); `None` when unknown.
    fn last_heartbeat(&self) -> Option<std::time::SystemTime> {
        None
    }
    /// Host statistics in Nomad's `HostStats` shape, for `/v1/client/stats`.
    fn stats(&self) -> serde_json::Value;
    /// The client's gauges for `/v1/metrics` (allocation counts; host and allocation figures
    /// when published).
    fn gauges(&self) -> Vec<drover_structs::metrics::Gauge> {
        Vec::new()
    }
    /// Resource usage of an allocation this client runs (of one task, if given) in Nomad's
    /// `AllocResourceUsage` shape, for `/v1/client/allocation/:id/stats`; `None` when the
    /// client does not run it. Blocks on the drivers; the API calls it on a blocking thread.
    fn alloc_stats(&self, alloc_id: &str, task: Option<&str>) -> Option<serde_json::Value> {
        let _ = (alloc_id, task);
        None
    }
    /// The latest result of each service check of an allocation this client runs, by check
    /// id, in Nomad's `CheckQueryResult` shape (`/v1/client/allocation/:id/checks`); `None`
    /// when the client does not know the allocation.
    fn alloc_checks(&self, alloc_id: &str) -> Option<serde_json::Value> {
        let _ = alloc_id;
        None
    }
    /// Nomad's `alloc signal`: sends `signal` to task `task` of an allocation this client runs,
    /// or to all of its tasks, for `/v1/client/allocation/:id/signal`.
    fn signal(&self, alloc_id: String, task: Option<String>, signal: String) -> ControlFuture<'_> {
        let _ = (alloc_id, task, signal);
        alloc_control::not_supported("signalling allocations")
    }
    /// Nomad's `alloc exec`: runs `options.command` in task `task` of an allocation this client
    /// runs, relaying `stream`, for `/v1/client/allocation/:id/exec`. Blocks on the driver; the
    /// API calls it on a blocking thread.
    fn exec(
        &self,
        alloc_id: &str,
        task: &str,
        options: &drover_client::alloc_exec::ExecOptions,
        stream: &dyn drover_client::alloc_exec::ExecStream,
    ) -> Result<drover_client::alloc_exec::ExitResult, drover_client::alloc_exec::ExecError> {
        let _ = (alloc_id, task, options, stream);
        Err(drover_client::alloc_exec::ExecError::Unavailable(
            "exec is not supported by this client".into(),
        ))
    }
    /// Nomad's `alloc restart`: restarts task `task` of an allocation this client runs, or its
    /// running tasks, for `/v1/client/allocation/:id/restart`.
    fn restart(
        &self,
        alloc_id: String,
        task: Option<String>,
        all_tasks: bool,
    ) -> ControlFuture<'_> {
        let _ = (alloc_id, task, all_tasks);
        alloc_control::not_supported("restarting allocations")
    }
    /// The node's metadata, merged, dynamic and static (`GET /v1/client/metadata`). Blocks
    /// on the client state; the API calls it on a blocking thread.
    fn node_meta(
        &self,
    ) -> Result<drover_client::node_meta::NodeMetaView, drover_client::node_meta::NodeMetaError>
    {
        Err(drover_client::node_meta::NodeMetaError::NotSupported)
    }
    /// Sets and unsets dynamic node metadata (`POST /v1/client/metadata`). Blocks like
    /// [`NodeClient::node_meta`].
    fn apply_node_meta(
        &self,
        changes: drover_client::node_meta::MetaChanges,
    ) -> Result<drover_client::node_meta::NodeMetaView, drover_client::node_meta::NodeMetaError>
    {
        let _ = changes;
        Err(drover_client::node_meta::NodeMetaError::NotSupported)
    }
    /// Garbage-collects an allocation that ended on this node (`/v1/client/allocation/:id/gc`).
    /// Blocks on the filesystem; the API calls it on a blocking thread.
    fn collect_alloc(&self, alloc_id: &str) -> Result<(), drover_client::gc::GcError> {
        Err(drover_client::gc::GcError::Unknown(alloc_id.to_string()))
    }
    /// Garbage-collects every allocation that ended on this node (`/v1/client/gc`); returns how
    /// many went and what failed. Blocks like [`NodeClient::collect_alloc`].
    fn collect_all(&self) -> (usize, Vec<drover_client::gc::GcError>) {
        (0, Vec::new())
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub server: drover_server::Server,
    pub client: Option<Arc<dyn NodeClient>>,
    pub agent: Arc<AgentInfo>,
}

/// The whole `/v1` API of a server agent. Client calls for allocations on other nodes go
/// through `tunnels`.
pub fn router(
    server: drover_server::Server,
    client: Option<Arc<dyn NodeClient>>,
    agent: AgentInfo,
    tunnels: Arc<dyn TunnelOpener>,
) -> Router {
    let regions = region::RegionRouting {
        server: server.clone(),
        tunnels: tunnels.clone(),
    };
    let routing = client_api::ClientRouting::Server {
        server: server.clone(),
        tunnels,
    };
    let client_routes = client_api::routes(client.clone(), routing);
    let state = AppState {
        server,
        client,
        agent: Arc::new(agent),
    };
    Router::new()
        .route(
            "/v1/jobs",
            get(jobs::list).put(jobs::register).post(jobs::register),
        )
        .route("/v1/jobs/parse", post(jobspec::parse).put(jobspec::parse))
        .route(
            "/v1/job/{*rest}",
            get(jobs::job_get)
                .put(jobs::job_write)
                .post(jobs::job_write)
                .delete(jobs::job_delete),
        )
        .route(
            "/v1/validate/job",
            post(jobspec::validate).put(jobspec::validate),
        )
        .route("/v1/scaling/policies", get(scaling::list))
        .route("/v1/scaling/policy/{id}", get(scaling::get_one))
        .route("/v1/deployments", get(deployments::list))
        .route("/v1/deployment/{id}", get(deployments::get_one))
        .route(
            "/v1/deployment/allocations/{id}",
            get(deployments::allocations),
        )
        .route(
            "/v1/deployment/{op}/{id}",
            put(deployments::operate).post(deployments::operate),
        )
        .route("/v1/allocations", get(allocs::list))
        .route("/v1/allocation/{id}", get(allocs::get_one))
        .route(
            "/v1/allocation/{id}/stop",
            post(allocs::stop).put(allocs::stop),
        )
        .route("/v1/connect/intentions", get(intentions::list))
        .route(
            "/v1/connect/intentions/exact",
            get(intentions::exact)
                .put(intentions::exact)
                .post(intentions::exact)
                .delete(intentions::exact),
        )
        .route("/v1/services", get(services::list))
        .route("/v1/service/{name}", get(services::get_one))
        .route("/v1/service/{name}/{id}", delete(services::delete_one))
        .route("/v1/evaluations", get(evals::list))
        .route("/v1/evaluation/{id}", get(evals::get_one))
        .route("/v1/evaluation/{id}/allocations", get(evals::allocations))
        .route("/v1/nodes", get(nodes::list))
        .route("/v1/node/{id}", get(nodes::get_one))
        .route("/v1/node/{id}/allocations", get(nodes::allocations))
        .route(
            "/v1/node/{id}/eligibility",
            post(nodes::eligibility).put(nodes::eligibility),
        )
        .route("/v1/node/{id}/drain", post(nodes::drain).put(nodes::drain))
        .route("/v1/node/{id}/purge", post(nodes::purge).put(nodes::purge))
        .route(
            "/v1/node/{id}/evaluate",
            post(nodes::evaluate).put(nodes::evaluate),
        )
        .route("/v1/agent/self", get(agent::agent_self))
        .route("/v1/agent/members", get(agent::members))
        .route("/v1/agent/health", get(agent::health))
        .route("/v1/agent/join", post(agent::join).put(agent::join))
        .route(
            "/v1/agent/force-leave",
            post(agent::force_leave).put(agent::force_leave),
        )
        .route(
            "/v1/agent/servers",
            get(agent::servers)
                .put(agent::set_servers)
                .post(agent::set_servers),
        )
        .route("/v1/system/gc", post(system::gc).put(system::gc))
        .route(
            "/v1/system/reconcile/summaries",
            post(system::reconcile_summaries).put(system::reconcile_summaries),
        )
        .route("/v1/metrics", get(metrics::metrics))
        .route("/v1/agent/host", get(system::agent_host))
        .route("/v1/agent/pprof/", get(system::pprof))
        .route("/v1/agent/pprof/{*profile}", get(system::pprof))
        .route("/v1/agent/monitor", get(monitor::monitor))
        .route("/v1/event/stream", get(events::stream))
        .route("/v1/search", post(search::prefix).put(search::prefix))
        .route("/v1/search/fuzzy", post(search::fuzzy).put(search::fuzzy))
        .route("/v1/status/leader", get(agent::leader))
        .route("/v1/status/peers", get(agent::peers))
        .route("/v1/regions", get(agent::regions))
        .route(
            "/v1/acl/bootstrap",
            put(acl::bootstrap).post(acl::bootstrap),
        )
        .route("/v1/acl/policies", get(acl::policies))
        .route(
            "/v1/acl/policy/{name}",
            get(acl::policy)
                .put(acl::policy_write)
                .post(acl::policy_write)
                .delete(acl::policy_delete),
        )
        .route("/v1/acl/tokens", get(acl::tokens))
        .route(
            "/v1/acl/token",
            put(acl::token_create).post(acl::token_create),
        )
        .route(
            "/v1/acl/token/{accessor}",
            get(acl::token)
                .put(acl::token_update)
                .post(acl::token_update)
                .delete(acl::token_delete),
        )
        .route("/v1/vars", get(variables::list))
        .route(
            "/v1/var/{*path}",
            get(variables::get_one)
                .put(variables::write)
                .post(variables::write)
                .delete(variables::write),
        )
        .route("/v1/namespaces", get(namespaces::list))
        .route(
            "/v1/namespace",
            put(namespaces::upsert).post(namespaces::upsert),
        )
        .route(
            "/v1/namespace/{name}",
            get(namespaces::get_one)
                .put(namespaces::upsert_named)
                .post(namespaces::upsert_named)
                .delete(namespaces::delete),
        )
        .route(
            "/v1/operator/raft/configuration",
            get(operator::raft_configuration),
        )
        .route("/v1/operator/raft/peer", delete(operator::remove_peer))
        .route(
            "/v1/operator/raft/state-digest",
            get(operator::state_digest),
        )
        .route(
            "/v1/operator/scheduler/configuration",
            get(operator::scheduler_configuration)
                .put(operator::scheduler_set_configuration)
                .post(operator::scheduler_set_configuration),
        )
        .route(
            "/v1/operator/snapshot",
            get(operator::snapshot_save)
                .put(operator::snapshot_restore)
                .layer(DefaultBodyLimit::max(operator::MAX_SNAPSHOT_BYTES)),
        )
        .merge(csi::routes())
        .with_state(state.clone())
        .merge(client_routes)
        .fallback(error::not_found_fallback)
        .method_not_allowed_fallback(error::method_not_allowed_fallback)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            consistency::layer,
        ))
        // Before anything runs: the token's permissions (ACLs on) or none to check.
        .layer(axum::middleware::from_fn_with_state(
            state,
            authorize::layer,
        ))
        // Outermost: a request for another region is not this server's to answer at all.
        .layer(axum::middleware::from_fn_with_state(regions, region::layer))
}

/// The API of a client-only agent: its client endpoints for its own allocations, `local`
/// (its self report and health), and everything else forwarded to a server through
/// `tunnels`, as Nomad's client agents forward to their servers.
pub fn client_agent_router(
    client: Arc<dyn NodeClient>,
    local: Router,
    tunnels: Arc<dyn TunnelOpener>,
) -> Router {
    let routing = client_api::ClientRouting::ClientOnly {
        tunnels: tunnels.clone(),
    };
    client_api::routes(Some(client), routing)
        .merge(local)
        .fallback(move |request: axum::extract::Request| {
            let tunnels = tunnels.clone();
            async move {
                use axum::response::IntoResponse;
                client_api::forward(tunnels.as_ref(), Upstream::Server, request)
                    .await
                    .unwrap_or_else(IntoResponse::into_response)
            }
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// The API of a client-only agent in a cluster with ACLs: it cannot check tokens itself, so
/// everything but its health goes to a server, which checks the token and reaches this node
/// back through its tunnel for the client calls.
pub fn client_agent_router_with_acls(
    local_health: Router,
    tunnels: Arc<dyn TunnelOpener>,
) -> Router {
    local_health
        .fallback(move |request: axum::extract::Request| {
            let tunnels = tunnels.clone();
            async move {
                use axum::response::IntoResponse;
                client_api::forward(tunnels.as_ref(), Upstream::Server, request)
                    .await
                    .unwrap_or_else(IntoResponse::into_response)
            }
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// The client endpoints of this node alone, plus the agent's `internal` routes (calls only
/// servers make, such as CSI controller calls): what a server's call through a tunnel
/// reaches. Never served on the agent's own listener.
pub fn node_router(client: Arc<dyn NodeClient>, internal: Router) -> Router {
    client_api::routes(Some(client), client_api::ClientRouting::LocalOnly)
        .merge(internal)
        .fallback(error::not_found_fallback)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// How long [`serve`] waits, after `shutdown` completes, for open requests to finish.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Serves `router` on `listener` until `shutdown` completes: over TLS when `tls` has it on
/// for HTTP, else in plain text. New connections stop at once; requests in flight get
/// [`SHUTDOWN_GRACE`] to finish. Long ones (a followed log stream, a blocking query) are then
/// left behind: they end with the runtime or when their client goes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Option<Arc<drover_tls::AgentTls>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Some(tls) = tls.filter(|t| t.http_enabled()) {
        https::serve(listener, router, tls, shutdown).await;
        return Ok(());
    }
    let (fired_tx, mut fired_rx) = tokio::sync::watch::channel(false);
    let graceful = axum::serve(listener, router).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = fired_tx.send(true);
    });
    let grace_over = async move {
        // An error means the sender is gone, which only happens once serving ended.
        let _ = fired_rx.wait_for(|fired| *fired).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        served = graceful => served,
        () = grace_over => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::{Method, StatusCode};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::test_support::TestApi;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_answers_over_tcp_and_stops_on_shutdown() {
        let api = TestApi::start().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(super::serve(
            listener,
            api.router.clone(),
            None,
            async move {
                let _ = stop_rx.await;
            },
        ));

        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        conn.read_to_string(&mut response).await.unwrap();
        let lower = response.to_ascii_lowercase();
        assert!(lower.starts_with("http/1.1 200 ok\r\n"), "{response}");
        assert!(lower.contains("\r\nx-nomad-index: "), "{response}");
        assert!(
            lower.contains("\r\nx-nomad-knownleader: true\r\n"),
            "{response}"
        );
        assert!(response.ends_with("\r\n\r\n[]"), "{response}");

        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), serving)
            .await
            .expect("serve ends after shutdown")
            .unwrap()
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bodies_over_the_limit_are_refused() {
        let api = TestApi::start().await;
        let huge = format!(
            "{{\"Job\": {{\"ID\": \"{}\"}}}}",
            "x".repeat(super::MAX_BODY_BYTES)
        );
        let r = api.call(Method::PUT, "/v1/jobs", Some(&huge)).await;
        assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    }
}
