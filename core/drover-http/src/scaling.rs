//! `/v1/job/:id/scale` (Nomad's scale status and `JobScaleRequest`), `/v1/scaling/policies`
//! and `/v1/scaling/policy/:id`: the groups' scaling policies, read from the jobs that hold
//! them.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use drover_server::scaling::ScaleRequest;
use drover_state::{StateSnapshot, Table};
use drover_structs::Job;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::body::decode_body;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking};
use crate::response::respond_json;

/// `GET /v1/job/:id/scale`: Nomad's `JobScaleStatus`.
pub(crate) async fn status(s: &AppState, params: &Params, id: &str) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(params)?;
    let ns = opts.write_namespace().to_string();
    let tables = [
        Table::Jobs,
        Table::Deployments,
        Table::Allocs,
        Table::ScalingEvents,
    ];
    let (meta, status) = blocking(s, &tables, &opts, |snap| {
        (snap.max_index(&tables), scale_status(snap, &ns, id))
    })
    .await;
    let status = status.ok_or_else(|| ApiError::not_found("job not found").with_meta(meta))?;
    respond_json(&status, Some(meta), opts.pretty)
}

fn scale_status(snap: &StateSnapshot, ns: &str, id: &str) -> Option<Value> {
    let job = snap.job(ns, id)?;
    let deployment = snap.latest_deployment(ns, id);
    let events = snap.scaling_events(ns, id);
    let allocs = snap.allocs_by_job(ns, id);
    let mut groups = Map::new();
    for tg in &job.task_groups {
        let state = deployment
            .as_ref()
            .and_then(|d| d.task_groups.get(&tg.name));
        let running = allocs
            .iter()
            .filter(|a| a.task_group == tg.name && a.client_status == "running")
            .count();
        let group_events = events
            .as_ref()
            .and_then(|e| e.get(&tg.name).cloned())
            .map(|e| json!(e))
            .unwrap_or(Value::Null);
        groups.insert(
            tg.name.clone(),
            json!({
                "Desired": tg.count,
                "Placed": state.map_or(0, |s| s.placed_allocs),
                "Running": running,
                "Healthy": state.map_or(0, |s| s.healthy_allocs),
                "Unhealthy": state.map_or(0, |s| s.unhealthy_allocs),
                "Events": group_events,
            }),
        );
    }
    Some(json!({
        "JobID": job.id,
        "Namespace": job.namespace,
        "JobCreateIndex": job.create_index,
        "JobModifyIndex": job.modify_index,
        "JobStopped": job.stop,
        "TaskGroups": groups,
    }))
}

/// Nomad's `ScalingRequest` body.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ScaleBody {
    #[serde(rename = "Count")]
    count: Option<i64>,
    #[serde(rename = "Target")]
    target: std::collections::BTreeMap<String, String>,
    #[serde(rename = "Message")]
    message: String,
    #[serde(rename = "Error")]
    error: bool,
    #[serde(rename = "Meta")]
    meta: Option<std::collections::BTreeMap<String, Value>>,
    #[serde(rename = "PolicyOverride")]
    policy_override: bool,
}

/// `PUT|POST /v1/job/:id/scale`.
pub(crate) async fn scale(
    s: &AppState,
    params: &Params,
    body: &Bytes,
    id: &str,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(params)?;
    let b: ScaleBody = decode_body(body, "request")?;
    if b.target
        .get("Job")
        .is_some_and(|j| !j.is_empty() && j != id)
    {
        return Err(ApiError::bad_request("job ID in payload did not match URL"));
    }
    let Some(group) = b.target.get("Group").filter(|g| !g.is_empty()) else {
        return Err(ApiError::bad_request(
            "missing task group name for scaling action",
        ));
    };
    let request = ScaleRequest {
        namespace: opts.write_namespace().to_string(),
        job_id: id.to_string(),
        group: group.clone(),
        count: b.count,
        message: b.message,
        error: b.error,
        meta: b.meta,
        policy_override: b.policy_override,
    };
    let r = s.server.scale_job(request).await?;
    crate::jobs::register_response(s, &r, opts.pretty)
}

/// Every group policy of `jobs`, completed as Nomad stores it (its indexes are its job's).
fn policies(jobs: &[Arc<Job>]) -> Vec<Value> {
    let mut out = Vec::new();
    for job in jobs {
        for tg in &job.task_groups {
            let Some(Value::Object(p)) = tg.scaling.clone() else {
                continue;
            };
            let mut p = p;
            p.insert("CreateIndex".into(), json!(job.create_index));
            p.insert("ModifyIndex".into(), json!(job.modify_index));
            out.push(Value::Object(p));
        }
    }
    out
}

/// `GET /v1/scaling/policies[?job=&type=]`: Nomad's `ScalingPolicyListStub`s.
pub(crate) async fn list(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let job_filter = params.get("job").filter(|j| !j.is_empty()).cloned();
    let type_filter = params.get("type").filter(|t| !t.is_empty()).cloned();
    let (meta, list) = blocking(&s, &[Table::Jobs], &opts, |snap| {
        let jobs: Vec<Arc<Job>> = snap
            .jobs(None)
            .into_iter()
            .filter(|j| opts.in_namespace(&j.namespace))
            .filter(|j| job_filter.as_ref().is_none_or(|f| *f == j.id))
            .collect();
        let stubs: Vec<Value> = policies(&jobs)
            .into_iter()
            .filter(|p| {
                type_filter.as_ref().is_none_or(|t| {
                    p["Type"]
                        .as_str()
                        .is_some_and(|pt| pt.starts_with(t.as_str()))
                })
            })
            .map(|p| {
                json!({
                    "ID": p["ID"], "Enabled": p["Enabled"], "Type": p["Type"],
                    "Target": p["Target"], "CreateIndex": p["CreateIndex"],
                    "ModifyIndex": p["ModifyIndex"],
                })
            })
            .collect();
        (snap.table_index(Table::Jobs), stubs)
    })
    .await;
    respond_json(&list, Some(meta), opts.pretty)
}

/// `GET /v1/scaling/policy/:id`.
pub(crate) async fn get_one(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, found) = blocking(&s, &[Table::Jobs], &opts, |snap| {
        // Only the namespace the request names: the token was checked against it.
        let jobs: Vec<Arc<Job>> = snap
            .jobs(None)
            .into_iter()
            .filter(|j| opts.in_namespace(&j.namespace))
            .collect();
        let found = policies(&jobs)
            .into_iter()
            .find(|p| p["ID"].as_str() == Some(id.as_str()));
        (snap.table_index(Table::Jobs), found)
    })
    .await;
    let p = found.ok_or_else(|| ApiError::not_found("Scaling policy not found").with_meta(meta))?;
    respond_json(&p, Some(meta), opts.pretty)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::json;

    use crate::test_support::{TestApi, web_job};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_group_scales_within_its_policy_and_keeps_its_events() {
        let api = TestApi::start().await;
        let mut job = web_job("web");
        job["TaskGroups"][0]["Scaling"] = json!({"Min": 1, "Max": 3});
        api.register(job).await;
        let scale = |count: i64| {
            json!({"Count": count, "Target": {"Group": "web"},
            "Message": format!("to {count}")})
        };
        let r = api.put("/v1/job/web/scale", &scale(5)).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "group count was greater than scaling policy maximum: 5 > 3"
            )
        );
        let r = api.put("/v1/job/web/scale", &scale(0)).await;
        assert_eq!(
            r.text(),
            "group count was less than scaling policy minimum: 0 < 1"
        );
        assert_eq!(
            api.get("/v1/job/web").await.json()["Version"],
            0,
            "nothing changed"
        );
        let r = api.put("/v1/job/web/scale", &scale(2)).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert!(r.json()["EvalID"].as_str().is_some_and(|e| !e.is_empty()));
        let job = api.get("/v1/job/web").await.json();
        assert_eq!(
            (
                job["Version"].as_u64(),
                job["TaskGroups"][0]["Count"].as_i64()
            ),
            (Some(1), Some(2))
        );

        let status = api.get("/v1/job/web/scale").await.json();
        let g = &status["TaskGroups"]["web"];
        assert_eq!(g["Desired"], 2, "{status}");
        assert_eq!(g["Events"][0]["Count"], 2);
        assert_eq!(g["Events"][0]["PreviousCount"], 1);
        assert_eq!(g["Events"][0]["Message"], "to 2");

        let list = api.get("/v1/scaling/policies").await.json();
        assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
        let id = list[0]["ID"].as_str().unwrap().to_string();
        assert_eq!(list[0]["Target"]["Group"], "web");
        let v0_id = id.clone();
        let p = api.get(&format!("/v1/scaling/policy/{id}")).await.json();
        assert_eq!((p["Min"].as_i64(), p["Max"].as_i64()), (Some(1), Some(3)));
        assert_eq!(p["ID"], v0_id.as_str(), "the id is kept across versions");
        let r = api.get("/v1/scaling/policy/nope").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }
}
