//! `/v1/client/gc[?node_id=]` and `/v1/client/allocation/:id/gc`: garbage collection of the
//! allocations that ended on the node (their directories and client records), on request.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use drover_client::gc::GcError;

use crate::client_api::ClientState;
use crate::client_fs::local_client;
use crate::error::ApiError;

fn gc_error(e: GcError) -> ApiError {
    let status = match &e {
        GcError::Unknown(_) => StatusCode::NOT_FOUND,
        GcError::Running(_) => StatusCode::BAD_REQUEST,
        GcError::Dir { .. } | GcError::State { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, e.to_string())
}

/// Nomad answers a collection with an empty JSON body.
fn collected() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        "null",
    )
        .into_response()
}

pub(crate) async fn collect_alloc(
    State(s): State<ClientState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let client = Arc::clone(local_client(&s)?);
    tokio::task::spawn_blocking(move || client.collect_alloc(&id))
        .await
        .map_err(|e| ApiError::internal(format!("garbage collection failed: {e}")))?
        .map_err(gc_error)?;
    Ok(collected())
}

pub(crate) async fn collect_all(State(s): State<ClientState>) -> Result<Response, ApiError> {
    let client = Arc::clone(local_client(&s)?);
    let (_, failed) = tokio::task::spawn_blocking(move || client.collect_all())
        .await
        .map_err(|e| ApiError::internal(format!("garbage collection failed: {e}")))?;
    if !failed.is_empty() {
        let lines: Vec<String> = failed.iter().map(ToString::to_string).collect();
        return Err(ApiError::internal(lines.join("\n")));
    }
    Ok(collected())
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};

    use crate::test_support::api_with_client;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn collecting_an_unknown_allocation_is_a_404_and_collecting_all_answers_null() {
        let (api, _) = api_with_client("node-1").await;
        let r = api
            .call(Method::PUT, "/v1/client/allocation/nope/gc", None)
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "Unknown allocation \"nope\"")
        );
        let r = api.call(Method::PUT, "/v1/client/gc", None).await;
        assert_eq!((r.status, r.text().as_str()), (StatusCode::OK, "null"));
    }
}
