//! `/v1/operator/...`: the Raft configuration and removing peers, whole-state snapshots, and
//! (Drover's own) a digest of the state to compare servers.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::AppState;
use crate::error::ApiError;
use crate::query::{Params, flag};
use crate::response::{QueryMeta, respond_json};

/// Largest snapshot archive accepted by `PUT /v1/operator/snapshot`.
pub const MAX_SNAPSHOT_BYTES: usize = 256 * 1024 * 1024;

/// `GET /v1/operator/raft/configuration`: Nomad's `RaftConfigurationResponse`.
pub(crate) async fn raft_configuration(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let (members, index) = s.server.raft_configuration();
    let servers: Vec<_> = members
        .iter()
        .map(|m| {
            json!({
                "ID": m.id.to_string(),
                "Node": m.name,
                "Address": m.address,
                "Leader": m.leader,
                "Voter": m.voter,
                "RaftProtocol": "3",
            })
        })
        .collect();
    let body = json!({"Servers": servers, "Index": index});
    respond_json(&body, Some(QueryMeta::new(&s, index)), pretty)
}

/// `DELETE /v1/operator/raft/peer?address=IP:port` or `?id=ID`: removes a server from the
/// Raft configuration. Empty 200 answer, as Nomad's.
pub(crate) async fn remove_peer(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let id = params.get("id");
    let address = params.get("address");
    let id = match (id, address) {
        (None, None) => {
            return Err(ApiError::bad_request(
                "Must specify either ?id with the server's ID or ?address with IP:port of peer to remove",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "Must specify only one of ?id or ?address",
            ));
        }
        (Some(id), None) => Some(id.trim().parse::<u64>().map_err(|_| {
            ApiError::not_found(format!("id {id:?} was not found in the Raft configuration"))
        })?),
        (None, Some(_)) => None,
    };
    let index = s.server.remove_peer(id, address.cloned()).await?;
    let mut response = StatusCode::OK.into_response();
    QueryMeta::new(&s, index).apply(response.headers_mut());
    Ok(response)
}

/// `GET /v1/operator/snapshot`: the whole state as a checksummed archive.
pub(crate) async fn snapshot_save(State(s): State<AppState>) -> Result<Response, ApiError> {
    let archive = s.server.save_snapshot().await?;
    let index = drover_server::snapshot_archive::open(&archive)
        .map(|(meta, _)| meta.index)
        .unwrap_or(0);
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        archive,
    )
        .into_response();
    QueryMeta::new(&s, index).apply(response.headers_mut());
    Ok(response)
}

/// `PUT /v1/operator/snapshot`: replaces the whole state with an archive from
/// `GET /v1/operator/snapshot`. A truncated or corrupt archive is refused (400) and changes
/// nothing.
pub(crate) async fn snapshot_restore(
    State(s): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let index = s.server.restore_snapshot(body.to_vec()).await?;
    let mut response = StatusCode::OK.into_response();
    QueryMeta::new(&s, index).apply(response.headers_mut());
    Ok(response)
}

/// `GET /v1/operator/raft/state-digest`: a digest of every state table on the server that
/// answers (Drover's own; `?stale` to ask each server about itself without a read barrier).
pub(crate) async fn state_digest(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let d = s.server.state_digest();
    let body = json!({
        "Digest": format!("{:016x}", d.digest),
        "Index": d.index,
        "AppliedIndex": d.applied_index,
        "ID": s.server.id().to_string(),
        "Address": s.server.own_peer().address,
    });
    respond_json(&body, Some(QueryMeta::new(&s, d.index)), pretty)
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};

    use crate::test_support::{TestApi, web_job};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn raft_configuration_lists_the_single_voter_like_nomad() {
        let api = TestApi::start().await;
        let r = api.get("/v1/operator/raft/configuration").await;
        assert_eq!(r.status, StatusCode::OK);
        let body = r.json();
        let servers = body["Servers"].as_array().unwrap();
        assert_eq!(servers.len(), 1);
        assert_eq!(servers[0]["Address"], "127.0.0.1:4647");
        assert_eq!(servers[0]["Leader"], true);
        assert_eq!(servers[0]["Voter"], true);
        assert_eq!(servers[0]["ID"], api.server.id().to_string());
        assert!(body["Index"].as_u64().unwrap() > 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn removing_a_peer_needs_exactly_one_known_name() {
        let api = TestApi::start().await;
        let r = api
            .call(Method::DELETE, "/v1/operator/raft/peer", None)
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let r = api
            .call(
                Method::DELETE,
                "/v1/operator/raft/peer?id=1&address=x:1",
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let r = api
            .call(
                Method::DELETE,
                "/v1/operator/raft/peer?address=10.9.9.9:4647",
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
        assert!(r.text().contains("was not found in the Raft configuration"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_saved_snapshot_restores_and_a_damaged_one_is_refused() {
        let api = TestApi::start().await;
        api.register(web_job("kept")).await;
        let saved = api.raw(Method::GET, "/v1/operator/snapshot", None).await;
        assert_eq!(saved.status(), StatusCode::OK);
        let archive = http_body_util::BodyExt::collect(saved.into_body())
            .await
            .unwrap()
            .to_bytes();
        api.register(web_job("dropped")).await;

        let truncated = String::from_utf8_lossy(&archive[..archive.len() - 3]).into_owned();
        let r = api
            .call(Method::PUT, "/v1/operator/snapshot", Some(&truncated))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(r.text().contains("truncated"), "{}", r.text());
        assert_eq!(api.get("/v1/job/dropped").await.status, StatusCode::OK);

        let whole = String::from_utf8(archive.to_vec()).expect("archives of JSON state are text");
        let r = api
            .call(Method::PUT, "/v1/operator/snapshot", Some(&whole))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(api.get("/v1/job/kept").await.status, StatusCode::OK);
        assert_eq!(
            api.get("/v1/job/dropped").await.status,
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_state_digest_changes_with_the_state() {
        let api = TestApi::start().await;
        let before = api.get("/v1/operator/raft/state-digest").await.json();
        api.register(web_job("web")).await;
        let after = api.get("/v1/operator/raft/state-digest?stale").await.json();
        assert_ne!(before["Digest"], after["Digest"]);
        assert!(after["Index"].as_u64() > before["Index"].as_u64());
    }
}
