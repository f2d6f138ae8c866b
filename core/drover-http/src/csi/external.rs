//! `GET /v1/volumes/external?plugin_id=P[&per_page=N][&next_token=T]`: one page of the volumes
//! the plugin's storage provider knows, from a controller's `ListVolumes` (Nomad's
//! `CSIVolume.ListExternal`): `{"Volumes": [...], "NextToken": ...}`.

use axum::Router;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use serde_json::json;

use super::snapshot::per_page;
use crate::AppState;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions};
use crate::response::{QueryMeta, respond_json};

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/v1/volumes/external", get(list))
}

async fn list(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let per_page = per_page(&params)?;
    let plugin_id = params.get("plugin_id").cloned().unwrap_or_default();
    let next_token = params.get("next_token").cloned().unwrap_or_default();
    let (list, index) = s
        .server
        .list_external_csi_volumes(&plugin_id, per_page, &next_token)
        .await?;
    let meta = QueryMeta::new(&s, index);
    let body = json!({
        "Volumes": list.volumes,
        "NextToken": list.next_token,
    });
    respond_json(&body, Some(meta), opts.pretty)
}
