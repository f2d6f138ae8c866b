//! JSON answers and the `X-Nomad-*` headers Nomad's clients require on them.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::AppState;
use crate::error::ApiError;

/// Nomad's `QueryMeta` as headers: the Go API client refuses a read without a parseable
/// `X-Nomad-Index` and `X-Nomad-LastContact`, and a write without `X-Nomad-Index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueryMeta {
    /// Raft index of the data answered (never 0: clients treat 0 as "no index").
    pub index: u64,
    pub known_leader: bool,
}

impl QueryMeta {
    pub fn new(state: &AppState, index: u64) -> Self {
        QueryMeta {
            index: index.max(1),
            known_leader: known_leader(state),
        }
    }

    pub fn apply(&self, headers: &mut HeaderMap) {
        headers.insert("X-Nomad-Index", HeaderValue::from(self.index));
        // A single server applies locally: it is never behind a leader it heard from.
        headers.insert("X-Nomad-LastContact", HeaderValue::from_static("0"));
        headers.insert(
            "X-Nomad-KnownLeader",
            HeaderValue::from_static(if self.known_leader { "true" } else { "false" }),
        );
    }
}

pub(crate) fn known_leader(state: &AppState) -> bool {
    state.server.is_leader() || state.server.raft_status().leader_id.is_some()
}

/// Serialises `value` (indented when `pretty`); the only failure, a map with non-string keys,
/// cannot happen with the model's types but is answered as a 500 rather than a panic.
pub(crate) fn json_body<T: Serialize + ?Sized>(
    value: &T,
    pretty: bool,
) -> Result<Vec<u8>, ApiError> {
    let encoded = if pretty {
        serde_json::to_vec_pretty(value)
    } else {
        serde_json::to_vec(value)
    };
    encoded.map_err(|e| ApiError::internal(format!("failed to encode response: {e}")))
}

/// Nomad's answer to a write that returns nothing (namespaces, ACL policies): 200, no body,
/// the write's index in the headers.
pub(crate) fn written(state: &AppState, index: u64) -> Result<Response, ApiError> {
    let mut response = StatusCode::OK.into_response();
    QueryMeta::new(state, index).apply(response.headers_mut());
    Ok(response)
}

/// A 200 JSON answer, with the query meta headers when given.
pub(crate) fn respond_json<T: Serialize + ?Sized>(
    value: &T,
    meta: Option<QueryMeta>,
    pretty: bool,
) -> Result<Response, ApiError> {
    let body = json_body(value, pretty)?;
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if let Some(meta) = meta {
        meta.apply(response.headers_mut());
    }
    Ok(response)
}
