//! `/v1/system/gc` (the leader's garbage collector of ended evaluations, allocations and
//! jobs, run at once with every age threshold at zero) and `/v1/system/reconcile/summaries`,
//! which answers 501: Drover keeps job summaries in the FSM with every write instead of
//! reconciling them. Nodes are not collected yet.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiError;
use crate::query::Params;

/// `PUT /v1/system/gc`: an empty 200 once the pass committed, as Nomad answers.
pub(crate) async fn gc(State(s): State<AppState>) -> Result<Response, ApiError> {
    let index = s.server.force_gc().await?;
    let mut response = axum::http::StatusCode::OK.into_response();
    crate::response::QueryMeta::new(&s, index).apply(response.headers_mut());
    Ok(response)
}

/// `PUT /v1/system/reconcile/summaries`.
pub(crate) async fn reconcile_summaries() -> ApiError {
    ApiError::not_implemented("job summary reconciliation (/v1/system/reconcile/summaries)")
}

/// `/v1/agent/pprof/*`: Go's profiles do not exist in a Rust agent.
pub(crate) async fn pprof() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_IMPLEMENTED,
        "pprof profiles are not supported: Drover's agent is not a Go program",
    )
}

/// `GET /v1/agent/host`: this agent's host in Nomad's `HostData` shape. As in Nomad, an agent
/// without ACLs serves it only with `enable_debug` (on in dev mode); with ACLs the token needs
/// `agent:read` (checked by `authorize`). `server_id`/`node_id` naming another agent are not
/// forwarded yet.
pub(crate) async fn agent_host(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = crate::query::flag(&params, "pretty")?;
    let named = |key: &str| params.get(key).filter(|v| !v.is_empty()).cloned();
    let (server_id, node_id) = (named("server_id"), named("node_id"));
    if server_id.is_some() && node_id.is_some() {
        return Err(ApiError::bad_request(
            "Can only forward to either client node or server",
        ));
    }
    let local_node = s.client.as_ref().map(|c| c.node_id());
    let elsewhere = server_id.as_ref().is_some_and(|id| *id != s.agent.name)
        || node_id
            .as_ref()
            .is_some_and(|id| Some(id) != local_node.as_ref());
    if elsewhere {
        return Err(ApiError::new(
            axum::http::StatusCode::NOT_IMPLEMENTED,
            "/v1/agent/host of another agent (server_id, node_id) is not supported: ask that agent",
        ));
    }
    host_data(s.server.acl_enabled() || s.agent.enable_debug, pretty).await
}

/// `/v1/agent/host` answered by an agent that decided whether it is `allowed` (a client-only
/// agent: by its `enable_debug`).
pub async fn host_data_response(allowed: bool, pretty: bool) -> Response {
    host_data(allowed, pretty)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The host data, or Nomad's 403 when not `allowed`.
async fn host_data(allowed: bool, pretty: bool) -> Result<Response, ApiError> {
    if !allowed {
        return Err(ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "Permission denied",
        ));
    }
    let data = tokio::task::spawn_blocking(drover_client::host_data::collect)
        .await
        .map_err(|e| ApiError::internal(format!("reading the host: {e}")))?;
    crate::response::respond_json(&data, None, pretty)
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};

    use crate::test_support::TestApi;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconciling_summaries_says_it_is_not_supported() {
        let api = TestApi::start().await;
        for path in ["/v1/system/reconcile/summaries"] {
            let r = api.call(Method::PUT, path, None).await;
            assert_eq!(r.status, StatusCode::NOT_IMPLEMENTED, "{path}");
            assert!(
                r.text().contains("not implemented by Drover"),
                "{}",
                r.text()
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pprof_answers_501() {
        let api = TestApi::start().await;
        for path in [
            "/v1/agent/pprof/profile?seconds=1",
            "/v1/agent/pprof/heap",
            "/v1/agent/pprof/",
        ] {
            let r = api.get(path).await;
            assert_eq!(r.status, StatusCode::NOT_IMPLEMENTED, "{path}");
            assert!(r.text().contains("not supported"), "{}", r.text());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn host_data_is_nomads_shape_and_other_agents_are_not_forwarded() {
        let api = TestApi::start().await;
        let r = api.get("/v1/agent/host").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let body = r.json();
        assert!(
            body["OS"]
                .as_str()
                .is_some_and(|os| os.starts_with("Linux")),
            "{body}"
        );
        assert!(
            body["Network"].as_array().is_some_and(|n| !n.is_empty()),
            "{body}"
        );
        let r = api.get("/v1/agent/host?server_id=a&node_id=b").await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let r = api.get("/v1/agent/host?server_id=another-server").await;
        assert_eq!(r.status, StatusCode::NOT_IMPLEMENTED, "{}", r.text());
        let r = api.get("/v1/agent/host?server_id=test-agent").await;
        assert_eq!(r.status, StatusCode::OK);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn host_data_needs_enable_debug_without_acls() {
        let response = super::host_data(false, false).await.unwrap_err();
        assert_eq!(
            (response.status, response.message.as_str()),
            (StatusCode::FORBIDDEN, "Permission denied")
        );
    }
}
