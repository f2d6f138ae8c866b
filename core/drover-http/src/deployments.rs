//! `/v1/deployments` and `/v1/deployment/...`: reading deployments and the operator's
//! fail, pause/resume, promote and allocation-health calls, in Nomad's shapes.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use drover_server::deployments::{DeploymentRequest, DeploymentUpdateResult};
use drover_state::Table;
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::body::decode_body;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking};
use crate::response::{QueryMeta, respond_json};

/// `GET /v1/deployments`: full deployments, `?prefix` on the id, in the request's namespace
/// (`*`: all).
pub(crate) async fn list(
    State(s): State<AppState>,
    perms: Option<axum::Extension<drover_server::acl::Permissions>>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let perms = perms.map(|axum::Extension(p)| p);
    let (meta, list) = blocking(&s, &[Table::Deployments], &opts, |snap| {
        let list: Vec<_> = snap
            .deployments(None, &opts.prefix)
            .into_iter()
            .filter(|d| opts.in_namespace(&d.namespace))
            // With `namespace=*`, only the namespaces the token may read.
            .filter(|d| {
                crate::authorize::may(
                    perms.as_ref(),
                    &d.namespace,
                    drover_server::acl::policy::CAP_READ_JOB,
                )
            })
            .collect();
        (snap.table_index(Table::Deployments), list)
    })
    .await;
    respond_json(&list, Some(meta), opts.pretty)
}

/// `GET /v1/deployment/:id`.
pub(crate) async fn get_one(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, d) = blocking(&s, &[Table::Deployments], &opts, |snap| {
        let d = snap.deployment(&id);
        let index = d
            .as_ref()
            .map(|d| d.modify_index)
            .unwrap_or_else(|| snap.table_index(Table::Deployments));
        (index, d)
    })
    .await;
    let d = d.ok_or_else(|| ApiError::not_found("deployment not found").with_meta(meta))?;
    respond_json(&*d, Some(meta), opts.pretty)
}

/// `GET /v1/deployment/allocations/:id`: stubs of the deployment's allocations.
pub(crate) async fn allocations(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let tables = [Table::Allocs, Table::Deployments];
    let (meta, stubs) = blocking(&s, &tables, &opts, |snap| {
        let stubs: Vec<_> = snap
            .deployment(&id)
            .map(|d| {
                snap.allocs_by_job(&d.namespace, &d.job_id)
                    .iter()
                    .filter(|a| a.deployment_id == d.id)
                    .map(|a| a.stub())
                    .collect()
            })
            .unwrap_or_default();
        (snap.max_index(&tables), stubs)
    })
    .await;
    respond_json(&stubs, Some(meta), opts.pretty)
}

/// Nomad's `DeploymentPauseRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PauseBody {
    #[serde(rename = "Pause")]
    pause: bool,
}

/// Nomad's `DeploymentPromoteRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PromoteBody {
    #[serde(rename = "All")]
    all: bool,
    #[serde(rename = "Groups")]
    groups: Vec<String>,
}

/// Nomad's `DeploymentAllocHealthRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AllocHealthBody {
    #[serde(rename = "HealthyAllocationIDs")]
    healthy: Vec<String>,
    #[serde(rename = "UnhealthyAllocationIDs")]
    unhealthy: Vec<String>,
}

/// `PUT|POST /v1/deployment/{fail,pause,promote,allocation-health,unblock}/:id`.
pub(crate) async fn operate(
    State(s): State<AppState>,
    Path((op, id)): Path<(String, String)>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let request = match op.as_str() {
        "fail" => DeploymentRequest::Fail { id },
        "unblock" => DeploymentRequest::Unblock { id },
        "pause" => {
            let b: PauseBody = decode_body(&body, "request")?;
            DeploymentRequest::Pause { id, pause: b.pause }
        }
        "promote" => {
            let b: PromoteBody = decode_body(&body, "request")?;
            DeploymentRequest::Promote {
                id,
                all: b.all || b.groups.is_empty(),
                groups: b.groups,
            }
        }
        "allocation-health" => {
            let b: AllocHealthBody = decode_body(&body, "request")?;
            DeploymentRequest::AllocHealth {
                id,
                healthy: b.healthy,
                unhealthy: b.unhealthy,
            }
        }
        other => {
            return Err(ApiError::not_found(format!(
                "unknown deployment operation {other:?}"
            )));
        }
    };
    let result = s.server.deployment_op(request).await?;
    update_response(&s, result, opts.pretty)
}

/// Nomad's `DeploymentUpdateResponse`.
fn update_response(
    s: &AppState,
    r: DeploymentUpdateResult,
    pretty: bool,
) -> Result<Response, ApiError> {
    let meta = QueryMeta::new(s, r.index);
    let body = json!({
        "EvalID": r.eval_id,
        "EvalCreateIndex": r.eval_create_index,
        "DeploymentModifyIndex": r.deployment_modify_index,
        "RevertedJobVersion": r.reverted_job_version,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), pretty)
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};
    use serde_json::json;

    use crate::test_support::{TestApi, web_job};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_service_job_gets_a_deployment_an_operator_can_pause_resume_and_fail() {
        let api = TestApi::start().await;
        api.register_node("n1").await;
        let mut job = web_job("web");
        job["TaskGroups"][0]["Update"] = json!({"MaxParallel": 1, "HealthCheck": "task_states",
            "MinHealthyTime": 1_000_000_000i64, "HealthyDeadline": 60_000_000_000i64,
            "ProgressDeadline": 120_000_000_000i64});
        api.register(job).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let id = loop {
            let latest = api.get("/v1/job/web/deployment").await.json();
            if let Some(id) = latest["ID"].as_str() {
                break id.to_string();
            }
            assert!(std::time::Instant::now() < deadline, "no deployment");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let list = api.get("/v1/deployments").await.json();
        assert_eq!(list[0]["ID"], id.as_str());
        assert_eq!(list[0]["Status"], "running");
        let by_job = api.get("/v1/job/web/deployments").await.json();
        assert_eq!(by_job.as_array().map(Vec::len), Some(1));
        let d = api.get(&format!("/v1/deployment/{id}")).await.json();
        assert_eq!(d["TaskGroups"]["web"]["DesiredTotal"], 1, "{d}");
        let allocs = api
            .get(&format!("/v1/deployment/allocations/{id}"))
            .await
            .json();
        assert_eq!(allocs.as_array().map(Vec::len), Some(1), "{allocs}");

        let pause = |p: bool| json!({"DeploymentID": id, "Pause": p});
        let r = api
            .put(&format!("/v1/deployment/pause/{id}"), &pause(true))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let d = api.get(&format!("/v1/deployment/{id}")).await.json();
        assert_eq!(
            (d["Status"].as_str(), d["StatusDescription"].as_str()),
            (Some("paused"), Some("Deployment is paused"))
        );
        let r = api
            .put(&format!("/v1/deployment/pause/{id}"), &pause(false))
            .await;
        assert!(r.json()["EvalID"].as_str().is_some_and(|e| !e.is_empty()));
        let r = api
            .call(Method::PUT, &format!("/v1/deployment/promote/{id}"), None)
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "no canaries to promote")
        );
        let r = api
            .call(Method::PUT, &format!("/v1/deployment/fail/{id}"), None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let d = api.get(&format!("/v1/deployment/{id}")).await.json();
        assert_eq!(
            (d["Status"].as_str(), d["StatusDescription"].as_str()),
            (Some("failed"), Some("Deployment marked as failed"))
        );
        let r = api
            .call(Method::PUT, &format!("/v1/deployment/fail/{id}"), None)
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "can't fail terminal deployment")
        );
        let r = api.get("/v1/deployment/nope").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "deployment not found")
        );
    }
}
