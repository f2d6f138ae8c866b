//! `/v1/system/gc` (the leader's garbage collector of ended evaluations, allocations and
//! jobs, run at once with every age threshold at zero) and `/v1/system/reconcile/summaries`,
//! which answers 501: Drover keeps job summaries in the FSM with every write instead of
//! reconciling them. Nodes are not collected yet.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiError;

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

/// `/v1/agent/host`: not built yet (Nomad's host data: OS, network, resolv.conf, hosts,
/// environment, disks).
pub(crate) async fn agent_host() -> ApiError {
    ApiError::not_implemented("the agent's host data (/v1/agent/host)")
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
    async fn pprof_and_host_data_answer_501() {
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
}
