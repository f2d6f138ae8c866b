//! `/v1/client/metadata`: the node's dynamic metadata, read (`GET`) and changed (`POST`, Nomad's
//! `NodeMetaApplyRequest`), answered with Nomad's `NodeMetaResponse`. The node is the one
//! `?node_id=` or the body's `NodeID` names (see `client_api`), else this agent's.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::response::Response;
use drover_client::node_meta::{MetaChanges, NodeMetaError};
use serde_json::Value;

use crate::body::parse_json;
use crate::client_api::ClientState;
use crate::client_fs::local_client;
use crate::error::ApiError;
use crate::query::{Params, flag};
use crate::response::respond_json;

/// The `Meta` of Nomad's `NodeMetaApplyRequest` (its `NodeID` picked the node already). Read
/// by hand: the generic decoder drops `null`s, and here a `null` unsets a key.
fn meta_changes(body: &Bytes) -> Result<MetaChanges, ApiError> {
    let request = parse_json(body)?;
    let meta = match request.get("Meta") {
        None | Some(Value::Null) => return Ok(MetaChanges::new()),
        Some(Value::Object(meta)) => meta,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "request: Meta: expected an object of strings, got {other}"
            )));
        }
    };
    meta.iter()
        .map(|(key, value)| match value {
            Value::String(s) => Ok((key.clone(), Some(s.clone()))),
            Value::Null => Ok((key.clone(), None)),
            other => Err(ApiError::bad_request(format!(
                "request: Meta.{key}: expected a string or null, got {other}"
            ))),
        })
        .collect()
}

fn meta_error(e: NodeMetaError) -> ApiError {
    if e.is_bad_input() {
        ApiError::bad_request(e.to_string())
    } else {
        ApiError::internal(e.to_string())
    }
}

pub(crate) async fn read(
    State(s): State<ClientState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let client = Arc::clone(local_client(&s)?);
    let view = tokio::task::spawn_blocking(move || client.node_meta())
        .await
        .map_err(|e| ApiError::internal(format!("reading node metadata: {e}")))?
        .map_err(meta_error)?;
    respond_json(&view, None, pretty)
}

pub(crate) async fn apply(
    State(s): State<ClientState>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let changes = meta_changes(&body)?;
    let client = Arc::clone(local_client(&s)?);
    let view = tokio::task::spawn_blocking(move || client.apply_node_meta(changes))
        .await
        .map_err(|e| ApiError::internal(format!("applying node metadata: {e}")))?
        .map_err(meta_error)?;
    respond_json(&view, None, pretty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_unsets_and_anything_but_a_string_is_refused_naming_the_key() {
        let body = Bytes::from_static(br#"{"NodeID": "n", "Meta": {"a": "1", "b": null}}"#);
        let changes = meta_changes(&body).unwrap();
        assert_eq!(changes["a"].as_deref(), Some("1"));
        assert_eq!(changes["b"], None);
        let bad = Bytes::from_static(br#"{"Meta": {"a": 1}}"#);
        let e = meta_changes(&bad).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert_eq!(
            e.message,
            "request: Meta.a: expected a string or null, got 1"
        );
    }
}
