//! What a client-only agent answers about itself (health, self report); the rest of its API
//! is drover-http's `client_agent_router`: its client endpoints, and everything else forwarded
//! to a server.

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

use axum::extract::Query;
use axum::routing::put;
use drover_client::Client;
use serde_json::json;

use crate::agent_remote::RemoteServers;

fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `/v1/agent/health` alone (a client agent that forwards everything else).
pub fn health_router() -> Router {
    Router::new().route(
        "/v1/agent/health",
        get(|| async {
            json_response(
                StatusCode::OK,
                json!({"client": {"ok": true, "message": "ok"}}),
            )
        }),
    )
}

pub fn router(
    client: Option<Client>,
    agent: drover_http::AgentInfo,
    remote: Arc<RemoteServers>,
) -> Router {
    let servers = remote.servers();
    let (metrics_client, metrics_agent) = (client.clone(), agent.clone());
    let enable_debug = agent.enable_debug;
    let node_id = client.as_ref().map(Client::node_id).unwrap_or_default();
    let self_report = json!({
        "config": agent.config_json,
        "member": {
            "Name": agent.name,
            "Tags": {"region": agent.region, "dc": agent.datacenter, "build": agent.version},
            "Status": "alive",
        },
        "stats": {
            "client": {"node_id": node_id, "known_servers": servers.join(",")},
        },
    });
    health_router()
        .route(
            "/v1/agent/self",
            get(move || {
                let mut body = self_report.clone();
                // Nomad's `last_heartbeat`: the time since the last heartbeat reached a server.
                if let Some(c) = &client {
                    let since = c.last_heartbeat().elapsed().unwrap_or_default();
                    body["stats"]["client"]["last_heartbeat"] =
                        json!(crate::cli::timefmt::go_duration(since.as_nanos() as i64));
                }
                async move { json_response(StatusCode::OK, body) }
            }),
        )
        .route(
            "/v1/agent/host",
            get(
                move |Query(params): Query<std::collections::BTreeMap<String, String>>| async move {
                    // A client agent does not know the servers' ACL state: only its own
                    // `enable_debug` opens its host data.
                    drover_http::host_data_response(enable_debug, params.contains_key("pretty"))
                        .await
                },
            ),
        )
        .merge(server_list_routes(remote))
        .merge(metrics_routes(metrics_client, metrics_agent))
}

/// `/v1/metrics` of a client-only agent: its own figures (allocations it runs, time since
/// its last heartbeat), not a server's.
fn metrics_routes(client: Option<Client>, agent: drover_http::AgentInfo) -> Router {
    Router::new().route(
        "/v1/metrics",
        get(
            move |Query(params): Query<std::collections::BTreeMap<String, String>>| {
                let gauges = client.as_ref().map(Client::gauges).unwrap_or_default();
                let format = params.get("format").cloned();
                let pretty = params.contains_key("pretty");
                let agent = agent.clone();
                async move { drover_http::metrics_response(gauges, &agent, format.as_deref(), pretty) }
            },
        ),
    )
}

/// What Nomad's client agent answers itself rather than through a server: its server list
/// (`GET`, and `PUT ?address=...` replacing it), and `join`/`force-leave`, which only a server
/// agent serves (501 "Invalid method", as Nomad).
fn server_list_routes(remote: Arc<RemoteServers>) -> Router {
    let listed = remote.clone();
    Router::new()
        .route(
            "/v1/agent/servers",
            get(move || {
                let servers = listed.servers();
                async move { json_response(StatusCode::OK, json!(servers)) }
            })
            .put(
                move |Query(pairs): Query<Vec<(String, String)>>| async move {
                    let servers = new_server_list(&pairs);
                    if servers.is_empty() {
                        return (StatusCode::BAD_REQUEST, "missing server address").into_response();
                    }
                    tracing::info!(?servers, "agent: server list replaced");
                    remote.set_servers(servers);
                    json_response(StatusCode::OK, serde_json::Value::Null)
                },
            ),
        )
        .route("/v1/agent/join", put(invalid_method).post(invalid_method))
        // The agent's own log, not a server's.
        .route("/v1/agent/monitor", get(drover_http::monitor))
        .route(
            "/v1/agent/force-leave",
            put(invalid_method).post(invalid_method),
        )
}

async fn invalid_method() -> Response {
    (StatusCode::NOT_IMPLEMENTED, "Invalid method").into_response()
}

/// The `address` parameters of `PUT /v1/agent/servers`, each with the RPC port 4647 when it
/// names none.
fn new_server_list(pairs: &[(String, String)]) -> Vec<String> {
    let mut servers: Vec<String> = Vec::new();
    for (k, v) in pairs {
        let v = v.trim();
        if k != "address" || v.is_empty() {
            continue;
        }
        let addr = if v
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            v.to_string()
        } else {
            format!("{v}:4647")
        };
        if !servers.contains(&addr) {
            servers.push(addr);
        }
    }
    servers
}

#[cfg(test)]
mod tests {
    use super::new_server_list;

    #[test]
    fn a_new_server_list_takes_every_address_with_the_rpc_port_by_default() {
        let pairs = [
            ("address".to_string(), "10.0.0.1".to_string()),
            ("address".to_string(), "10.0.0.2:5000".to_string()),
            ("address".to_string(), "10.0.0.1".to_string()),
            ("stale".to_string(), String::new()),
        ];
        assert_eq!(
            new_server_list(&pairs),
            vec!["10.0.0.1:4647".to_string(), "10.0.0.2:5000".to_string()]
        );
        assert!(new_server_list(&[]).is_empty());
    }
}
