//! `/v1/nodes` and `/v1/node/:id[/allocations|/eligibility|/drain]`. The node secret never leaves.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use drover_state::Table;
use drover_structs::{NODE_ELIGIBLE, NODE_INELIGIBLE};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::body::decode_body;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking, flag};
use crate::response::{QueryMeta, respond_json};

/// `GET /v1/nodes`: node stubs, `?prefix` on the id.
pub(crate) async fn list(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    // Nomad's `?resources=true`: each stub also carries the node's and its reserved resources.
    let with_resources = flag(&params, "resources")?;
    let (meta, stubs) = blocking(&s, &[Table::Nodes], &opts, |snap| {
        let stubs: Vec<_> = snap
            .nodes_by_prefix(&opts.prefix)
            .iter()
            .map(|n| {
                let mut stub = n.stub();
                if with_resources {
                    stub.node_resources = Some(n.node_resources.clone());
                    stub.reserved_resources = Some(n.reserved_resources.clone());
                }
                stub
            })
            .collect();
        (snap.table_index(Table::Nodes), stubs)
    })
    .await;
    respond_json(&stubs, Some(meta), opts.pretty)
}

/// `GET /v1/node/:id`: the node without its secret.
pub(crate) async fn get_one(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, node) = blocking(&s, &[Table::Nodes], &opts, |snap| {
        let node = snap.node(&id);
        let index = node
            .as_ref()
            .map(|n| n.modify_index)
            .unwrap_or_else(|| snap.table_index(Table::Nodes));
        (index, node)
    })
    .await;
    let node = node.ok_or_else(|| ApiError::not_found("node not found").with_meta(meta))?;
    respond_json(&node.sanitized(), Some(meta), opts.pretty)
}

/// `GET /v1/node/:id/allocations`: the node's full allocations.
pub(crate) async fn allocations(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, allocs) = blocking(&s, &[Table::Allocs], &opts, |snap| {
        (snap.table_index(Table::Allocs), snap.allocs_by_node(&id))
    })
    .await;
    respond_json(&allocs, Some(meta), opts.pretty)
}

/// Nomad's `NodeUpdateEligibilityRequest` (the node id comes from the path).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EligibilityRequest {
    #[serde(rename = "Eligibility")]
    eligibility: String,
}

/// `POST|PUT /v1/node/:id/eligibility`: `{"Eligibility": "eligible"|"ineligible"}`.
pub(crate) async fn eligibility(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let request: EligibilityRequest = decode_body(&body, "request")?;
    let eligible = match request.eligibility.as_str() {
        NODE_ELIGIBLE => true,
        NODE_INELIGIBLE => false,
        other => {
            return Err(ApiError::bad_request(format!(
                "invalid scheduling eligibility {other:?}"
            )));
        }
    };
    let index = s.server.set_node_eligibility(&id, eligible).await?;
    let meta = QueryMeta::new(&s, index);
    // Nomad's NodeEligibilityUpdateResponse.
    let body = json!({
        "EvalIDs": Value::Null,
        "EvalCreateIndex": 0,
        "NodeModifyIndex": index,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), pretty)
}

/// `PUT /v1/node/:id/purge`: removes the node; its jobs are evaluated (Nomad's
/// `NodePurgeResponse`).
pub(crate) async fn purge(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let result = s.server.purge_node(&id).await?;
    node_evals_response(&s, result, pretty)
}

/// `PUT /v1/node/:id/evaluate`: an evaluation of every job with work on the node (Nomad's
/// `NodeUpdateResponse`).
pub(crate) async fn evaluate(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let result = s.server.evaluate_node(&id).await?;
    node_evals_response(&s, result, pretty)
}

fn node_evals_response(
    s: &AppState,
    result: drover_server::NodeEvalResult,
    pretty: bool,
) -> Result<Response, ApiError> {
    let meta = QueryMeta::new(s, result.eval_create_index.max(result.node_modify_index));
    let body = json!({
        "EvalIDs": result.eval_ids,
        "EvalCreateIndex": result.eval_create_index,
        "NodeModifyIndex": result.node_modify_index,
        "HeartbeatTTL": 0,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), pretty)
}

/// Nomad's `DrainSpec`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DrainSpecBody {
    #[serde(rename = "Deadline")]
    deadline: i64,
    #[serde(rename = "IgnoreSystemJobs")]
    ignore_system_jobs: bool,
}

/// Nomad's `NodeUpdateDrainRequest` (the node id comes from the path).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DrainRequest {
    #[serde(rename = "DrainSpec")]
    drain_spec: Option<DrainSpecBody>,
    #[serde(rename = "MarkEligible")]
    mark_eligible: bool,
}

/// `POST|PUT /v1/node/:id/drain`: a `DrainSpec` starts draining the node (it turns
/// ineligible), `null` stops it (`MarkEligible` makes it eligible again).
pub(crate) async fn drain(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let request: DrainRequest = decode_body(&body, "request")?;
    let spec = request
        .drain_spec
        .map(|d| drover_server::drainer::DrainSpec {
            deadline: d.deadline,
            ignore_system_jobs: d.ignore_system_jobs,
        });
    let index = s
        .server
        .drain_node(&id, spec, request.mark_eligible)
        .await?;
    let meta = QueryMeta::new(&s, index);
    // Nomad's NodeDrainUpdateResponse.
    let body = json!({
        "NodeModifyIndex": index,
        "EvalIDs": Value::Null,
        "EvalCreateIndex": 0,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), pretty)
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};

    use crate::test_support::TestApi;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn node_lists_carry_resources_only_when_asked() {
        let api = TestApi::start().await;
        api.register_node("0d816e8c-19bd-2066-474e-6f7e52291a4c")
            .await;
        let plain = api.get("/v1/nodes").await.json();
        assert!(plain[0]["NodeResources"].is_null(), "{plain}");
        let full = api.get("/v1/nodes?resources=true").await.json();
        assert_eq!(full[0]["NodeResources"]["Cpu"]["CpuShares"], 8000, "{full}");
        assert_eq!(full[0]["NodeResources"]["Memory"]["MemoryMB"], 16_384);
        assert!(full[0]["ReservedResources"].is_object(), "{full}");
        let r = api.get("/v1/nodes?resources=maybe").await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nodes_never_show_their_secret() {
        let api = TestApi::start().await;
        let id = api
            .register_node("0d816e8c-19bd-2066-474e-6f7e52291a4c")
            .await;
        let list = api.get("/v1/nodes").await;
        assert_eq!(list.status, StatusCode::OK);
        assert!(list.index() > 0);
        assert_eq!(list.json()[0]["ID"], id.as_str());
        assert_eq!(list.json()[0]["Status"], "ready");
        assert!(!list.text().contains("node-secret-do-not-leak"));
        assert_eq!(
            api.get("/v1/nodes?prefix=0d81").await.json()[0]["ID"],
            id.as_str()
        );
        assert_eq!(
            api.get("/v1/nodes?prefix=ffff").await.json(),
            serde_json::json!([])
        );

        let r = api.get(&format!("/v1/node/{id}")).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.json()["SecretID"], "");
        assert!(!r.text().contains("node-secret-do-not-leak"));
        assert_eq!(r.index(), r.json()["ModifyIndex"].as_u64().unwrap());

        let r = api.get("/v1/node/nope").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "node not found")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn eligibility_is_toggled_and_checked() {
        let api = TestApi::start().await;
        let id = api.register_node("n1").await;
        let body = serde_json::json!({"Eligibility": "ineligible"});
        let r = api
            .call(
                Method::POST,
                &format!("/v1/node/{id}/eligibility"),
                Some(&body.to_string()),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(r.json()["NodeModifyIndex"].as_u64(), Some(r.index()));
        let node = api.get(&format!("/v1/node/{id}")).await.json();
        assert_eq!(node["SchedulingEligibility"], "ineligible");

        let bad = serde_json::json!({"Eligibility": "maybe"});
        let r = api.put(&format!("/v1/node/{id}/eligibility"), &bad).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.text(), "invalid scheduling eligibility \"maybe\"");
        let r = api.put("/v1/node/nope/eligibility", &body).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_purged_node_is_gone_and_its_allocations_are_lost() {
        let api = TestApi::start().await;
        let id = api.register_node("n1").await;
        api.register(crate::test_support::web_job("web")).await;
        let allocs = |api: &TestApi| {
            let snap = api.server.snapshot();
            snap.allocs_by_job("default", "web")
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while allocs(&api).is_empty() {
            assert!(std::time::Instant::now() < deadline, "web was never placed");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }

        let r = api.call(Method::PUT, "/v1/node/nope/purge", None).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "node not found")
        );
        let r = api
            .call(Method::PUT, &format!("/v1/node/{id}/evaluate"), None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(
            r.json()["EvalIDs"].as_array().map(Vec::len),
            Some(1),
            "{}",
            r.text()
        );
        assert!(api.get(&format!("/v1/node/{id}")).await.status == StatusCode::OK);

        let r = api
            .call(Method::PUT, &format!("/v1/node/{id}/purge"), None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let body = r.json();
        assert_eq!(body["EvalIDs"].as_array().map(Vec::len), Some(1), "{body}");
        assert!(body["EvalCreateIndex"].as_u64() > body["NodeModifyIndex"].as_u64());
        let r = api.get(&format!("/v1/node/{id}")).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        while !allocs(&api).iter().any(|a| a.client_status == "lost") {
            assert!(
                std::time::Instant::now() < deadline,
                "the purged node's allocation was never lost"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}
