//! What a client-only agent answers about itself (health, self report); the rest of its API
//! is drover-http's `client_agent_router`: its client endpoints, and everything else forwarded
//! to a server.

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use drover_client::Client;
use serde_json::json;

fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub fn router(
    client: Option<Client>,
    agent: drover_http::AgentInfo,
    servers: Vec<String>,
) -> Router {
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
    Router::new()
        .route(
            "/v1/agent/health",
            get(|| async {
                json_response(
                    StatusCode::OK,
                    json!({"client": {"ok": true, "message": "ok"}}),
                )
            }),
        )
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
}
