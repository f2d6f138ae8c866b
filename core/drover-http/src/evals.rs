//! `/v1/evaluations` and `/v1/evaluation/:id[/allocations]`.

use axum::extract::{Path, Query, State};
use axum::response::Response;
use drover_state::Table;

use crate::AppState;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking};
use crate::response::respond_json;

/// `GET /v1/evaluations`: full evaluations, `?prefix` on the id, `?job` and `?status` filters.
pub(crate) async fn list(
    State(s): State<AppState>,
    perms: Option<axum::Extension<drover_server::acl::Permissions>>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let perms = perms.map(|axum::Extension(p)| p);
    let job = params.get("job").filter(|j| !j.is_empty());
    let status = params.get("status").filter(|st| !st.is_empty());
    let (meta, evals) = blocking(&s, &[Table::Evals], &opts, |snap| {
        let evals: Vec<_> = snap
            .evals_by_prefix(&opts.prefix)
            .into_iter()
            .filter(|e| opts.in_namespace(&e.namespace))
            // With `namespace=*`, only the namespaces the token may read.
            .filter(|e| {
                crate::authorize::may(
                    perms.as_ref(),
                    &e.namespace,
                    drover_server::acl::policy::CAP_READ_JOB,
                )
            })
            .filter(|e| job.is_none_or(|j| *j == e.job_id))
            .filter(|e| status.is_none_or(|st| *st == e.status))
            .collect();
        (snap.table_index(Table::Evals), evals)
    })
    .await;
    respond_json(&evals, Some(meta), opts.pretty)
}

/// `GET /v1/evaluation/:id`.
pub(crate) async fn get_one(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, eval) = blocking(&s, &[Table::Evals], &opts, |snap| {
        let eval = snap.eval(&id);
        let index = eval
            .as_ref()
            .map(|e| e.modify_index)
            .unwrap_or_else(|| snap.table_index(Table::Evals));
        (index, eval)
    })
    .await;
    let eval = eval.ok_or_else(|| ApiError::not_found("eval not found").with_meta(meta))?;
    respond_json(&*eval, Some(meta), opts.pretty)
}

/// `GET /v1/evaluation/:id/allocations`: stubs of the allocations the evaluation placed.
pub(crate) async fn allocations(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, stubs) = blocking(&s, &[Table::Allocs], &opts, |snap| {
        let stubs: Vec<_> = snap.allocs_by_eval(&id).iter().map(|a| a.stub()).collect();
        (snap.table_index(Table::Allocs), stubs)
    })
    .await;
    respond_json(&stubs, Some(meta), opts.pretty)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use crate::test_support::{TestApi, web_job};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn evaluations_are_listed_filtered_and_read() {
        let api = TestApi::start().await;
        let reg = api.register(web_job("web")).await;
        let eval_id = reg["EvalID"].as_str().unwrap();

        let r = api.get("/v1/evaluations").await;
        assert_eq!(r.status, StatusCode::OK);
        assert!(r.index() >= reg["EvalCreateIndex"].as_u64().unwrap());
        assert_eq!(r.json()[0]["ID"], eval_id);
        assert_eq!(
            api.get("/v1/evaluations?job=web").await.json()[0]["ID"],
            eval_id
        );
        assert_eq!(
            api.get("/v1/evaluations?job=other").await.json(),
            serde_json::json!([])
        );
        let prefixed = api
            .get(&format!("/v1/evaluations?prefix={}", &eval_id[..4]))
            .await;
        assert_eq!(prefixed.json()[0]["ID"], eval_id);

        let r = api.get(&format!("/v1/evaluation/{eval_id}")).await;
        assert_eq!(r.status, StatusCode::OK);
        let eval = r.json();
        assert_eq!(eval["JobID"], "web");
        assert_eq!(eval["TriggeredBy"], "job-register");
        assert_eq!(r.index(), eval["ModifyIndex"].as_u64().unwrap());

        let r = api.get("/v1/evaluation/nope").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "eval not found")
        );
    }
}
