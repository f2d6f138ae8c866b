//! `/v1/volumes/snapshot`: CSI volume snapshots through the plugins' controllers (Nomad's
//! `CSISnapshotsRequest`): `PUT|POST` creates, `DELETE ?plugin_id=&snapshot_id=` deletes,
//! `GET ?plugin_id=[&per_page=][&next_token=]` lists one page. Secrets come in the create
//! body or in the `X-Nomad-CSI-Secrets` header (`key=value,key2=value2`); no answer carries
//! them.

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use drover_structs::CsiSnapshotCreateRequest;
use serde_json::json;

use super::write_answer;
use crate::AppState;
use crate::body::decode_body;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions};
use crate::response::{QueryMeta, respond_json};

/// The header Nomad's API client sends CSI secrets in.
pub(crate) const SECRETS_HEADER: &str = "X-Nomad-CSI-Secrets";

pub(super) fn routes() -> Router<AppState> {
    Router::new().route(
        "/v1/volumes/snapshot",
        get(list).put(create).post(create).delete(delete),
    )
}

/// Nomad's `parseCSISecrets`: `key=value` pairs split on commas, the value up to the next
/// comma; a pair without `=` is skipped, as Nomad does.
pub(crate) fn header_secrets(headers: &HeaderMap) -> BTreeMap<String, String> {
    let Some(raw) = headers.get(SECRETS_HEADER).and_then(|v| v.to_str().ok()) else {
        return BTreeMap::new();
    };
    raw.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `PUT|POST /v1/volumes/snapshot`: `{"Snapshots": [{SourceVolumeID, Name, Secrets,
/// Parameters, PluginID}]}`; answers `{"Snapshots": [...]}` as the plugins made them.
async fn create(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let mut request: CsiSnapshotCreateRequest = decode_body(&body, "request")?;
    let from_header = header_secrets(&headers);
    if !from_header.is_empty() {
        for snap in &mut request.snapshots {
            // The body's secrets win over the header's.
            let mut secrets = from_header.clone();
            secrets.extend(snap.secrets.take().unwrap_or_default());
            snap.secrets = Some(secrets);
        }
    }
    let (snapshots, index) = s
        .server
        .create_csi_snapshots(opts.write_namespace(), request.snapshots)
        .await?;
    let meta = QueryMeta::new(&s, index);
    let snapshots: Vec<_> = snapshots.iter().map(|snap| snap.sanitized()).collect();
    let body = json!({
        "Snapshots": snapshots,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), opts.pretty)
}

/// `DELETE /v1/volumes/snapshot?plugin_id=P&snapshot_id=S`.
async fn delete(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let param = |name: &str| params.get(name).cloned().unwrap_or_default();
    let snapshot = drover_structs::CsiSnapshot {
        id: param("snapshot_id"),
        plugin_id: param("plugin_id"),
        secrets: Some(header_secrets(&headers)),
        ..Default::default()
    };
    let index = s.server.delete_csi_snapshots(vec![snapshot]).await?;
    write_answer(&s, index, opts.pretty)
}

/// The `per_page` of a plugin's list (0 when absent: the plugin's choice).
pub(super) fn per_page(params: &Params) -> Result<i32, ApiError> {
    match params.get("per_page").map(String::as_str) {
        None | Some("") => Ok(0),
        Some(raw) => raw
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| ApiError::bad_request(format!("Invalid per_page: {raw:?}"))),
    }
}

/// `GET /v1/volumes/snapshot?plugin_id=P[&per_page=N][&next_token=T]`: one page of the
/// plugin's snapshots, `{"Snapshots": [...], "NextToken": ...}`.
async fn list(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let per_page = per_page(&params)?;
    let plugin_id = params.get("plugin_id").cloned().unwrap_or_default();
    let next_token = params.get("next_token").cloned().unwrap_or_default();
    let (list, index) = s
        .server
        .list_csi_snapshots(&plugin_id, per_page, &next_token, header_secrets(&headers))
        .await?;
    let meta = QueryMeta::new(&s, index);
    let snapshots: Vec<_> = list.snapshots.iter().map(|snap| snap.sanitized()).collect();
    let body = json!({
        "Snapshots": snapshots,
        "NextToken": list.next_token,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), opts.pretty)
}

#[cfg(test)]
mod tests;
