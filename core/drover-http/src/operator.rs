//! `/v1/operator/...`: the Raft configuration and removing peers, whole-state snapshots, the
//! scheduler configuration, and (Drover's own) a digest of the state to compare servers.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_structs::SchedulerConfiguration;
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

/// `GET /v1/operator/snapshot`: the whole state as a checksummed archive, streamed as it is
/// encoded. A failure half-way aborts the transfer, so the client never gets a short archive
/// that looks complete (and the archive's checksum would refuse it anyway).
pub(crate) async fn snapshot_save(State(s): State<AppState>) -> Result<Response, ApiError> {
    let (tx, body) = crate::stream::channel_body();
    let writer = crate::stream::PieceWriter::new(tx.clone());
    let index = s
        .server
        .save_snapshot_to(writer, move |written| {
            if let Err(e) = written {
                tracing::warn!(error = %e, "operator snapshot not sent whole");
                let _ = tx.blocking_send(Err(e));
            }
        })
        .await?;
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        body,
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
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            // Saving streams at any size; restoring still goes through one log entry.
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "snapshot archive is larger than {} MiB: restoring a state this large is not supported yet",
                    MAX_SNAPSHOT_BYTES / (1024 * 1024)
                ),
            )
        } else {
            ApiError::bad_request(format!("snapshot archive not received: {rejection}"))
        }
    })?;
    let index = s.server.restore_snapshot(body.to_vec()).await?;
    let mut response = StatusCode::OK.into_response();
    QueryMeta::new(&s, index).apply(response.headers_mut());
    Ok(response)
}

/// `GET /v1/operator/scheduler/configuration`: Nomad's `SchedulerConfigurationResponse`.
pub(crate) async fn scheduler_configuration(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let (config, index) = s
        .server
        .scheduler_config(params.contains_key("stale"))
        .await?;
    let meta = QueryMeta::new(&s, index);
    let body = json!({
        "SchedulerConfig": config,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
        "NextToken": "",
    });
    respond_json(&body, Some(meta), pretty)
}

/// `PUT|POST /v1/operator/scheduler/configuration[?cas=<ModifyIndex>]`: replaces the
/// configuration with the body (Nomad's `SchedulerConfiguration`; its indexes are ignored).
/// Answers Nomad's `SchedulerSetConfigurationResponse`; a lost check-and-set is
/// `"Updated": false`, not an error.
pub(crate) async fn scheduler_set_configuration(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let parsed = crate::body::parse_json(&body).map_err(|e| {
        ApiError::bad_request(format!("Error parsing scheduler config: {}", e.message))
    })?;
    let mut config: SchedulerConfiguration = if parsed.is_null() {
        SchedulerConfiguration::default()
    } else {
        drover_structs::decode::decode(parsed, "SchedulerConfiguration")
            .map_err(|e| ApiError::bad_request(format!("Error parsing scheduler config: {e}")))?
    };
    config.create_index = 0;
    config.modify_index = 0;
    config.validate().map_err(ApiError::bad_request)?;
    let cas = match params.get("cas") {
        None => None,
        Some(v) => Some(
            v.trim()
                .parse::<u64>()
                .map_err(|e| ApiError::bad_request(format!("Error parsing cas value: {e}")))?,
        ),
    };
    let (updated, index) = s.server.set_scheduler_config(config, cas).await?;
    let meta = QueryMeta::new(&s, index);
    let body = json!({"Updated": updated, "Index": meta.index});
    respond_json(&body, Some(meta), pretty)
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

    use serde_json::Value;

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

        let truncated = archive[..archive.len() - 3].to_vec();
        let r = api
            .call_bytes(Method::PUT, "/v1/operator/snapshot", Some(truncated))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(r.text().contains("truncated"), "{}", r.text());
        assert_eq!(api.get("/v1/job/dropped").await.status, StatusCode::OK);

        let mut oversized = archive.to_vec();
        oversized.resize(super::MAX_SNAPSHOT_BYTES + 1, b'x');
        let r = api
            .call_bytes(Method::PUT, "/v1/operator/snapshot", Some(oversized))
            .await;
        assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(r.text().contains("larger than 256 MiB"), "{}", r.text());
        assert_eq!(api.get("/v1/job/dropped").await.status, StatusCode::OK);

        let r = api
            .call_bytes(Method::PUT, "/v1/operator/snapshot", Some(archive.to_vec()))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(api.get("/v1/job/kept").await.status, StatusCode::OK);
        assert_eq!(
            api.get("/v1/job/dropped").await.status,
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scheduler_configuration_reads_sets_with_check_and_set_and_refuses_bad_algorithms() {
        let api = TestApi::start().await;
        let r = api.get("/v1/operator/scheduler/configuration").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let body = r.json();
        assert_eq!(body["SchedulerConfig"]["SchedulerAlgorithm"], "binpack");
        assert_eq!(
            body["SchedulerConfig"]["PreemptionConfig"],
            serde_json::json!({
                "SystemSchedulerEnabled": true,
                "SysBatchSchedulerEnabled": false,
                "BatchSchedulerEnabled": false,
                "ServiceSchedulerEnabled": false
            })
        );
        assert_eq!(body["KnownLeader"], true);
        assert!(body["Index"].as_u64().unwrap() > 0);

        let spread = serde_json::json!({
            "SchedulerAlgorithm": "spread",
            "PreemptionConfig": {"ServiceSchedulerEnabled": true}
        });
        let r = api
            .put("/v1/operator/scheduler/configuration?cas=0", &spread)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let set = r.json();
        assert_eq!(set["Updated"], true);
        let index = set["Index"].as_u64().unwrap();
        assert_eq!(r.index(), index);

        let body = api.get("/v1/operator/scheduler/configuration").await.json();
        let config = &body["SchedulerConfig"];
        assert_eq!(config["SchedulerAlgorithm"], "spread");
        assert_eq!(config["PreemptionConfig"]["ServiceSchedulerEnabled"], true);
        assert_eq!(config["PreemptionConfig"]["SystemSchedulerEnabled"], false);
        assert_eq!(config["ModifyIndex"].as_u64(), Some(index));
        assert_eq!(body["Index"].as_u64(), Some(index));

        // A stale check-and-set changes nothing and says so.
        let r = api
            .put(
                "/v1/operator/scheduler/configuration?cas=1",
                &serde_json::json!({"SchedulerAlgorithm": "binpack"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(r.json()["Updated"], false);

        // Without cas an empty algorithm is stored and reported as binpack.
        let r = api
            .call(
                Method::POST,
                "/v1/operator/scheduler/configuration",
                Some(r#"{"SchedulerAlgorithm": ""}"#),
            )
            .await;
        assert_eq!(r.json()["Updated"], true, "{}", r.text());
        let body = api.get("/v1/operator/scheduler/configuration").await.json();
        assert_eq!(body["SchedulerConfig"]["SchedulerAlgorithm"], "binpack");

        let r = api
            .put(
                "/v1/operator/scheduler/configuration",
                &serde_json::json!({"SchedulerAlgorithm": "roundrobin"}),
            )
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "invalid scheduler algorithm: roundrobin"
            )
        );
        let r = api
            .put(
                "/v1/operator/scheduler/configuration?cas=x",
                &serde_json::json!({}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text().starts_with("Error parsing cas value"),
            "{}",
            r.text()
        );
        let r = api
            .put(
                "/v1/operator/scheduler/configuration",
                &serde_json::json!({"PauseEvalBroker": "yes"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text().starts_with(
                "Error parsing scheduler config: SchedulerConfiguration: PauseEvalBroker"
            ),
            "{}",
            r.text()
        );
    }

    /// The node the single allocation of `job` was placed on.
    async fn placed_node(api: &TestApi, job: &str) -> String {
        for _ in 0..200 {
            let allocs = api.get(&format!("/v1/job/{job}/allocations")).await.json();
            if let Some(node) = allocs[0]["NodeID"].as_str() {
                return node.to_string();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("{job} was not placed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_stored_algorithm_decides_where_the_scheduler_places() {
        let api = TestApi::start().await;
        api.register_node("n1").await;
        api.register_node("n2").await;
        api.register(web_job("first")).await;
        let first = placed_node(&api, "first").await;
        // Binpack (the default) puts the next job beside the first.
        api.register(web_job("binpacked")).await;
        assert_eq!(placed_node(&api, "binpacked").await, first);

        let r = api
            .put(
                "/v1/operator/scheduler/configuration",
                &serde_json::json!({"SchedulerAlgorithm": "spread"}),
            )
            .await;
        assert_eq!(r.json()["Updated"], true, "{}", r.text());
        api.register(web_job("spread")).await;
        assert_ne!(placed_node(&api, "spread").await, first);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pausing_the_eval_broker_holds_evaluations_until_resumed() {
        let api = TestApi::start().await;
        api.register_node("n1").await;
        let pause = |paused: bool| serde_json::json!({"PauseEvalBroker": paused});
        let r = api
            .put("/v1/operator/scheduler/configuration", &pause(true))
            .await;
        assert_eq!(r.json()["Updated"], true, "{}", r.text());
        let reg = api.register(web_job("held")).await;
        let eval_uri = format!("/v1/evaluation/{}", reg["EvalID"].as_str().unwrap());
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(api.get(&eval_uri).await.json()["Status"], "pending");

        api.put("/v1/operator/scheduler/configuration", &pause(false))
            .await;
        placed_node(&api, "held").await;
        let mut status = Value::Null;
        for _ in 0..100 {
            status = api.get(&eval_uri).await.json()["Status"].clone();
            if status == "complete" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(status, "complete");
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
