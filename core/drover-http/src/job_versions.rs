//! `PUT|POST /v1/job/:id/revert`, `/stable` and `/evaluate` (Nomad's `JobRevertRequest`,
//! `JobStabilityRequest` and `JobEvaluateRequest`), answered in Nomad's shapes.

use axum::body::Bytes;
use axum::response::Response;
use drover_server::job_versions::JobVersionRequest;
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::body::decode_body;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions};
use crate::response::{QueryMeta, respond_json};

/// Nomad's `JobRevertRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RevertBody {
    #[serde(rename = "JobVersion")]
    job_version: u64,
    #[serde(rename = "EnforcePriorVersion")]
    enforce_prior_version: Option<u64>,
}

/// Nomad's `JobStabilityRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StableBody {
    #[serde(rename = "JobVersion")]
    job_version: u64,
    #[serde(rename = "Stable")]
    stable: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EvalOptions {
    #[serde(rename = "ForceReschedule")]
    force_reschedule: bool,
}

/// Nomad's `JobEvaluateRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EvaluateBody {
    #[serde(rename = "EvalOptions")]
    eval_options: EvalOptions,
}

/// Which of the three calls a path suffix names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VersionCall {
    Revert,
    Stable,
    Evaluate,
}

impl VersionCall {
    pub(crate) fn of_suffix(suffix: &str) -> Option<VersionCall> {
        match suffix {
            "revert" => Some(VersionCall::Revert),
            "stable" => Some(VersionCall::Stable),
            "evaluate" => Some(VersionCall::Evaluate),
            _ => None,
        }
    }
}

pub(crate) async fn handle(
    s: &AppState,
    params: &Params,
    body: &Bytes,
    id: &str,
    call: VersionCall,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(params)?;
    let namespace = opts.write_namespace().to_string();
    let job_id = id.to_string();
    let request = match call {
        VersionCall::Revert => {
            let b: RevertBody = decode_body(body, "request")?;
            JobVersionRequest::Revert {
                namespace,
                job_id,
                version: b.job_version,
                enforce_prior_version: b.enforce_prior_version,
            }
        }
        VersionCall::Stable => {
            let b: StableBody = decode_body(body, "request")?;
            JobVersionRequest::Stable {
                namespace,
                job_id,
                version: b.job_version,
                stable: b.stable,
            }
        }
        VersionCall::Evaluate => {
            let b: EvaluateBody = decode_body(body, "request")?;
            JobVersionRequest::Evaluate {
                namespace,
                job_id,
                force_reschedule: b.eval_options.force_reschedule,
            }
        }
    };
    let r = s.server.job_version_op(request).await?;
    if call != VersionCall::Stable {
        return crate::jobs::register_response(s, &r, opts.pretty);
    }
    // Nomad's JobStabilityResponse.
    let meta = QueryMeta::new(s, r.index);
    respond_json(&json!({"Index": meta.index}), Some(meta), opts.pretty)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::json;

    use crate::test_support::{TestApi, web_job};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_is_reverted_marked_stable_and_evaluated_with_nomads_errors() {
        let api = TestApi::start().await;
        api.register(web_job("web")).await;
        let mut v1 = web_job("web");
        v1["Meta"] = json!({"v": "1"});
        api.register(v1).await;
        assert_eq!(api.get("/v1/job/web").await.json()["Version"], 1);

        let r = api
            .put(
                "/v1/job/web/revert",
                &json!({"JobID": "web", "JobVersion": 1}),
            )
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "can't revert to current version")
        );
        let r = api
            .put(
                "/v1/job/web/revert",
                &json!({"JobID": "web", "JobVersion": 9}),
            )
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert_eq!(
            r.text(),
            "job \"web\" in namespace \"default\" at version 9 not found"
        );
        let r = api
            .put(
                "/v1/job/web/revert",
                &json!({"JobVersion": 0, "EnforcePriorVersion": 0}),
            )
            .await;
        assert_eq!(r.text(), "Current job has version 1; enforcing version 0");
        let r = api
            .put("/v1/job/web/revert", &json!({"JobVersion": 0}))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert!(r.json()["EvalID"].as_str().is_some_and(|e| !e.is_empty()));
        let job = api.get("/v1/job/web").await.json();
        assert_eq!(job["Version"], 2);
        assert!(job["Meta"].is_null(), "version 0's spec: {job}");

        let r = api
            .put(
                "/v1/job/web/stable",
                &json!({"JobVersion": 2, "Stable": true}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(api.get("/v1/job/web").await.json()["Stable"], true);
        let r = api
            .put(
                "/v1/job/web/stable",
                &json!({"JobVersion": 7, "Stable": true}),
            )
            .await;
        assert_eq!(r.text(), "job \"web\" at version 7 not found");

        let r = api
            .put(
                "/v1/job/web/evaluate",
                &json!({"EvalOptions": {"ForceReschedule": true}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let eval = r.json()["EvalID"].as_str().unwrap().to_string();
        let e = api.get(&format!("/v1/evaluation/{eval}")).await.json();
        assert_eq!(e["TriggeredBy"], "job-register");
        let r = api.put("/v1/job/nope/evaluate", &json!({})).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "job not found")
        );
    }
}
