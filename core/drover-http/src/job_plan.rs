//! `PUT|POST /v1/job/:id/plan`: the scheduler's dry run of a job (Nomad's `JobPlanRequest`
//! and `JobPlanResponse`); the server plans, nothing is written.

use axum::body::Bytes;
use axum::response::Response;
use serde_json::{Value, json};

use crate::AppState;
use crate::body::{decode_body, default_job_scope};
use crate::error::ApiError;
use crate::query::{Params, QueryOptions};
use crate::response::{QueryMeta, respond_json};

/// `PUT|POST /v1/job/:id/plan`: what registering the body's job would do (Nomad's
/// `JobPlanResponse`); nothing is written.
pub(crate) async fn plan(
    s: &AppState,
    params: &Params,
    body: &Bytes,
    id: &str,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(params)?;
    let request: crate::body::JobPlanRequest = decode_body(body, "request")?;
    let Some(mut job_json) = request.job else {
        return Err(ApiError::bad_request("Job must be specified"));
    };
    match job_json.get("ID").and_then(Value::as_str) {
        None => return Err(ApiError::bad_request("Job ID hasn't been provided")),
        Some(job_id) if job_id != id => {
            return Err(ApiError::bad_request("Job ID does not match"));
        }
        Some(_) => {}
    }
    default_job_scope(&mut job_json, opts.write_namespace(), &s.agent.region);
    let job = drover_structs::decode::decode_api_job(job_json)?;
    let r = s.server.plan_job(job, request.diff).await?;
    let meta = QueryMeta::new(s, r.job_modify_index);
    let next_launch = if r.next_periodic_launch == 0 {
        drover_structs::deployment::ZERO_TIME.to_string()
    } else {
        drover_structs::time::format_rfc3339_nanos(r.next_periodic_launch)
    };
    let body = json!({
        "Annotations": r.annotations,
        "FailedTGAllocs": (!r.failed_tg_allocs.is_empty()).then_some(&r.failed_tg_allocs),
        "JobModifyIndex": r.job_modify_index,
        "CreatedEvals": (!r.created_evals.is_empty()).then_some(&r.created_evals),
        "Diff": r.diff,
        "NextPeriodicLaunch": next_launch,
        "Warnings": r.warnings,
        "Index": r.job_modify_index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), opts.pretty)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::{Value, json};

    use crate::test_support::{TestApi, web_job};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plan_answers_the_annotated_diff_and_writes_nothing() {
        let api = TestApi::start().await;
        api.register_node("n1").await;
        let r = api
            .put(
                "/v1/job/web/plan",
                &json!({"Job": web_job("web"), "Diff": true}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let plan = r.json();
        assert_eq!(plan["Diff"]["Type"], "Added", "{plan}");
        assert_eq!(plan["JobModifyIndex"], 0);
        assert_eq!(plan["NextPeriodicLaunch"], "0001-01-01T00:00:00Z");
        let tg = plan["Diff"]["TaskGroups"][0].clone();
        assert_eq!(tg["Updates"]["create"], 1, "{plan}");
        let updates = &plan["Annotations"]["DesiredTGUpdates"];
        assert_eq!(updates.as_object().map(|m| m.len()), Some(1), "{plan}");
        assert_eq!(
            api.get("/v1/job/web").await.status,
            StatusCode::NOT_FOUND,
            "a plan registers nothing"
        );

        let reg = api.register(web_job("web")).await;
        let mut changed = web_job("web");
        changed["Meta"] = json!({"tag": "b"});
        let plan = api
            .put("/v1/job/web/plan", &json!({"Job": changed, "Diff": true}))
            .await
            .json();
        assert_eq!(plan["JobModifyIndex"], reg["JobModifyIndex"], "{plan}");
        assert_eq!(plan["Diff"]["Type"], "Edited", "{plan}");
        assert_eq!(plan["Diff"]["Fields"][0]["Name"], "Meta[tag]", "{plan}");
        let without = api
            .put("/v1/job/web/plan", &json!({"Job": web_job("web")}))
            .await
            .json();
        assert_eq!(without["Diff"], Value::Null, "no diff unless asked");

        let r = api
            .put("/v1/job/other/plan", &json!({"Job": web_job("web")}))
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "Job ID does not match")
        );

        api.register(changed).await;
        let versions = api.get("/v1/job/web/versions?diffs=true").await.json();
        let diffs = versions["Diffs"].as_array().expect("diffs");
        assert_eq!(diffs.len(), 1, "{versions}");
        assert_eq!(diffs[0]["Type"], "Edited");
        assert_eq!(diffs[0]["Fields"][0]["New"], "b", "{versions}");
        assert_eq!(
            api.get("/v1/job/web/versions").await.json()["Diffs"],
            Value::Null
        );
    }
}
