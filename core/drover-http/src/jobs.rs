//! `/v1/jobs` and `/v1/job/:id[/...]`: listing, reading, registering and stopping jobs.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use drover_state::Table;
use serde_json::{Value, json};

use crate::AppState;
use crate::body::{JobRequest, decode_body, default_job_scope};
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking, flag};
use crate::response::{QueryMeta, respond_json};

/// What follows the job id in `/v1/job/:id/...`. Job ids may hold `/` (dispatched and periodic
/// children do), so as in Nomad the known suffixes are matched from the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobPath<'a> {
    Job(&'a str),
    Allocations(&'a str),
    Evaluations(&'a str),
    Summary(&'a str),
    Versions(&'a str),
    /// `GET /v1/job/:id/submission?version=N`: the job file version N came from.
    Submission(&'a str),
    /// `GET /v1/job/:id/services`: the service registrations of the job's allocations.
    Services(&'a str),
    /// The job's deployments, newest first, and its latest one (or `null`).
    Deployments(&'a str),
    LatestDeployment(&'a str),
    /// `POST /v1/job/:id/periodic/force`.
    PeriodicForce(&'a str),
    /// `POST /v1/job/:id/dispatch`.
    Dispatch(&'a str),
    /// `GET|POST /v1/job/:id/scale`.
    Scale(&'a str),
    /// `POST /v1/job/:id/plan`.
    Plan(&'a str),
    /// `POST /v1/job/:id/{revert,stable,evaluate}`.
    Version(&'a str, crate::job_versions::VersionCall),
}

fn split_job_path(rest: &str) -> JobPath<'_> {
    if let Some(id) = rest.strip_suffix("/allocations") {
        return JobPath::Allocations(id);
    }
    if let Some(id) = rest.strip_suffix("/evaluations") {
        return JobPath::Evaluations(id);
    }
    if let Some(id) = rest.strip_suffix("/summary") {
        return JobPath::Summary(id);
    }
    if let Some(id) = rest.strip_suffix("/versions") {
        return JobPath::Versions(id);
    }
    if let Some(id) = rest.strip_suffix("/submission") {
        return JobPath::Submission(id);
    }
    if let Some(id) = rest.strip_suffix("/services") {
        return JobPath::Services(id);
    }
    if let Some(id) = rest.strip_suffix("/deployments") {
        return JobPath::Deployments(id);
    }
    if let Some(id) = rest.strip_suffix("/deployment") {
        return JobPath::LatestDeployment(id);
    }
    if let Some(id) = rest.strip_suffix("/periodic/force") {
        return JobPath::PeriodicForce(id);
    }
    if let Some(id) = rest.strip_suffix("/dispatch") {
        return JobPath::Dispatch(id);
    }
    if let Some(id) = rest.strip_suffix("/scale") {
        return JobPath::Scale(id);
    }
    if let Some(id) = rest.strip_suffix("/plan") {
        return JobPath::Plan(id);
    }
    if let Some((id, suffix)) = rest.rsplit_once('/')
        && let Some(call) = crate::job_versions::VersionCall::of_suffix(suffix)
    {
        return JobPath::Version(id, call);
    }
    JobPath::Job(rest)
}

fn invalid_method() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Invalid method")
}

/// `GET /v1/jobs`: job stubs with their summaries, `?prefix` on the id.
pub(crate) async fn list(
    State(s): State<AppState>,
    perms: Option<axum::Extension<drover_server::acl::Permissions>>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let tables = [Table::Jobs, Table::JobSummary];
    let perms = perms.map(|axum::Extension(p)| p);
    let (meta, stubs) = blocking(&s, &tables, &opts, |snap| {
        let stubs: Vec<_> = snap
            .jobs(opts.namespace.as_deref())
            .iter()
            .filter(|j| j.id.starts_with(&opts.prefix))
            // With `namespace=*`, only the namespaces the token may list jobs in.
            .filter(|j| {
                crate::authorize::may(
                    perms.as_ref(),
                    &j.namespace,
                    drover_server::acl::policy::CAP_LIST_JOBS,
                )
            })
            .map(|j| {
                let summary = snap
                    .job_summary_with_children(&j.namespace, &j.id)
                    .map(|(s, _)| s);
                j.stub(summary)
            })
            .collect();
        (snap.max_index(&tables), stubs)
    })
    .await;
    respond_json(&stubs, Some(meta), opts.pretty)
}

/// `PUT|POST /v1/jobs`: registers the job in the body.
pub(crate) async fn register(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    register_job(&s, &params, &body, None).await
}

/// `GET /v1/job/:id[/allocations|/evaluations|/summary|/versions]`.
pub(crate) async fn job_get(
    State(s): State<AppState>,
    Path(rest): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let ns = opts.write_namespace().to_string();
    match split_job_path(&rest) {
        JobPath::Job(id) => {
            let (meta, job) = blocking(&s, &[Table::Jobs], &opts, |snap| {
                let job = snap.job(&ns, id);
                let index = job
                    .as_ref()
                    .map(|j| j.modify_index)
                    .unwrap_or_else(|| snap.table_index(Table::Jobs));
                (index, job)
            })
            .await;
            let job = job.ok_or_else(|| ApiError::not_found("job not found").with_meta(meta))?;
            respond_json(&*job, Some(meta), opts.pretty)
        }
        JobPath::Allocations(id) => {
            let (meta, stubs) = blocking(&s, &[Table::Allocs], &opts, |snap| {
                let stubs: Vec<_> = snap
                    .allocs_by_job(&ns, id)
                    .iter()
                    .map(|a| a.stub())
                    .collect();
                (snap.table_index(Table::Allocs), stubs)
            })
            .await;
            respond_json(&stubs, Some(meta), opts.pretty)
        }
        JobPath::Evaluations(id) => {
            let (meta, evals) = blocking(&s, &[Table::Evals], &opts, |snap| {
                (snap.table_index(Table::Evals), snap.evals_by_job(&ns, id))
            })
            .await;
            respond_json(&evals, Some(meta), opts.pretty)
        }
        JobPath::Summary(id) => {
            // Jobs too: the children counts change with the child jobs' statuses.
            let tables = [Table::JobSummary, Table::Jobs];
            let (meta, summary) = blocking(&s, &tables, &opts, |snap| {
                match snap.job_summary_with_children(&ns, id) {
                    Some((summary, index)) => (index, Some(summary)),
                    None => (snap.table_index(Table::JobSummary), None),
                }
            })
            .await;
            let summary =
                summary.ok_or_else(|| ApiError::not_found("job not found").with_meta(meta))?;
            respond_json(&summary, Some(meta), opts.pretty)
        }
        JobPath::Submission(id) => {
            // Nomad's text for a missing or bad version.
            let version: u64 = params
                .get("version")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    ApiError::bad_request("Unable to parse job submission version parameter")
                })?;
            let (meta, submission) = blocking(&s, &[Table::JobVersions], &opts, |snap| {
                (
                    snap.table_index(Table::JobVersions),
                    snap.job_submission(&ns, id, version),
                )
            })
            .await;
            let submission = submission
                .ok_or_else(|| ApiError::not_found("job source not found").with_meta(meta))?;
            respond_json(&*submission, Some(meta), opts.pretty)
        }
        JobPath::Services(id) => {
            let (meta, regs) = blocking(&s, &[Table::Allocs], &opts, |snap| {
                let regs: Vec<_> = snap
                    .service_registrations(Some(&ns))
                    .into_iter()
                    .filter(|r| r.job_id == id)
                    .collect();
                (snap.table_index(Table::Allocs), regs)
            })
            .await;
            respond_json(&regs, Some(meta), opts.pretty)
        }
        JobPath::Versions(id) => {
            let diffs = flag(&params, "diffs")?;
            let (meta, versions) = blocking(&s, &[Table::JobVersions], &opts, |snap| {
                (
                    snap.table_index(Table::JobVersions),
                    snap.job_versions(&ns, id),
                )
            })
            .await;
            if versions.is_empty() {
                return Err(ApiError::not_found("job versions not found").with_meta(meta));
            }
            // Nomad's JobVersionsResponse: with `diffs`, each version against the one before
            // it, newest first.
            let diffs = if diffs {
                let mut out = Vec::with_capacity(versions.len().saturating_sub(1));
                for pair in versions.windows(2) {
                    let d = drover_structs::diff::job_diff(Some(&pair[1]), Some(&pair[0]), true)
                        .map_err(|e| ApiError::internal(e.to_string()))?;
                    out.push(d);
                }
                Some(out)
            } else {
                None
            };
            let body = json!({
                "Versions": versions,
                "Diffs": diffs,
                "Index": meta.index,
                "LastContact": 0,
                "KnownLeader": meta.known_leader,
            });
            respond_json(&body, Some(meta), opts.pretty)
        }
        JobPath::Deployments(id) => {
            let (meta, list) = blocking(&s, &[Table::Deployments], &opts, |snap| {
                (
                    snap.table_index(Table::Deployments),
                    snap.deployments_by_job(&ns, id),
                )
            })
            .await;
            respond_json(&list, Some(meta), opts.pretty)
        }
        JobPath::LatestDeployment(id) => {
            let (meta, latest) = blocking(&s, &[Table::Deployments], &opts, |snap| {
                (
                    snap.table_index(Table::Deployments),
                    snap.latest_deployment(&ns, id),
                )
            })
            .await;
            respond_json(&latest, Some(meta), opts.pretty)
        }
        JobPath::Scale(id) => crate::scaling::status(&s, &params, id).await,
        JobPath::PeriodicForce(_)
        | JobPath::Dispatch(_)
        | JobPath::Plan(_)
        | JobPath::Version(..) => Err(invalid_method()),
    }
}

/// `PUT|POST /v1/job/:id`: registers the job in the body, whose ID must be `:id`.
pub(crate) async fn job_write(
    State(s): State<AppState>,
    Path(rest): Path<String>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    match split_job_path(&rest) {
        JobPath::Job(id) => register_job(&s, &params, &body, Some(id)).await,
        JobPath::PeriodicForce(id) => periodic_force(&s, &params, id).await,
        JobPath::Dispatch(id) => dispatch(&s, &params, &body, id).await,
        JobPath::Version(id, call) => {
            crate::job_versions::handle(&s, &params, &body, id, call).await
        }
        JobPath::Scale(id) => crate::scaling::scale(&s, &params, &body, id).await,
        JobPath::Plan(id) => crate::job_plan::plan(&s, &params, &body, id).await,
        _ => Err(invalid_method()),
    }
}

/// `DELETE /v1/job/:id[?purge=true][&global=true]`: stops the job, or with `purge` removes
/// it; with `global`, a multiregion job in every region of its block.
pub(crate) async fn job_delete(
    State(s): State<AppState>,
    Path(rest): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let JobPath::Job(id) = split_job_path(&rest) else {
        return Err(invalid_method());
    };
    let opts = QueryOptions::parse(&params)?;
    let purge = flag(&params, "purge")?;
    let (eval_id, index) = if flag(&params, "global")? {
        s.server
            .deregister_job_global(opts.write_namespace(), id, purge)
            .await?
    } else {
        s.server
            .deregister_job(opts.write_namespace(), id, purge)
            .await?
    };
    let meta = QueryMeta::new(&s, index);
    // Nomad's JobDeregisterResponse.
    let body = json!({
        "EvalID": eval_id,
        "EvalCreateIndex": index,
        "JobModifyIndex": index,
        "VolumeEvalID": "",
        "VolumeEvalIndex": 0,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), opts.pretty)
}

/// `PUT|POST /v1/job/:id/periodic/force`: launches the periodic job now. Answers Nomad's
/// `PeriodicForceResponse`.
async fn periodic_force(s: &AppState, params: &Params, id: &str) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(params)?;
    let (eval_id, index) = s.server.force_periodic(opts.write_namespace(), id).await?;
    let meta = QueryMeta::new(s, index);
    let body = json!({
        "EvalID": eval_id,
        "EvalCreateIndex": index,
        "Index": meta.index,
    });
    respond_json(&body, Some(meta), opts.pretty)
}

/// `PUT|POST /v1/job/:id/dispatch`: dispatches the parameterized job with the body's payload
/// (base64) and meta (Nomad's `JobDispatchRequest`). Answers Nomad's `JobDispatchResponse`.
async fn dispatch(
    s: &AppState,
    params: &Params,
    body: &Bytes,
    id: &str,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(params)?;
    let request: drover_structs::JobDispatchRequest = decode_body(body, "request")?;
    if !request.job_id.is_empty() && request.job_id != id {
        return Err(ApiError::bad_request("Job ID does not match"));
    }
    let payload = request.payload_bytes().map_err(ApiError::bad_request)?;
    // As Nomad's `parseWriteRequest`: the `idempotency_token` query parameter (what Nomad's
    // API client sends) wins over the body's field.
    let idempotency_token = params
        .get("idempotency_token")
        .cloned()
        .unwrap_or(request.idempotency_token);
    let result = s
        .server
        .dispatch_job(drover_server::DispatchRequest {
            namespace: opts.write_namespace().to_string(),
            job_id: id.to_string(),
            payload,
            meta: request.meta.unwrap_or_default(),
            id_prefix_template: request.id_prefix_template,
            idempotency_token,
        })
        .await?;
    let meta = QueryMeta::new(s, result.index);
    let body = json!({
        "DispatchedJobID": result.dispatched_job_id,
        "EvalID": result.eval_id,
        "EvalCreateIndex": result.eval_create_index,
        "JobCreateIndex": result.job_create_index,
        "Index": meta.index,
    });
    respond_json(&body, Some(meta), opts.pretty)
}

/// Decodes a `JobRegisterRequest` body and registers its job; `path_id` is the `:id` of
/// `/v1/job/:id`, which the job's ID must match.
async fn register_job(
    s: &AppState,
    params: &Params,
    body: &Bytes,
    path_id: Option<&str>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(params)?;
    let request: JobRequest = decode_body(body, "request")?;
    let Some(mut job_json) = request.job else {
        return Err(ApiError::bad_request("Job must be specified"));
    };
    if let Some(path_id) = path_id {
        match job_json.get("ID").and_then(Value::as_str) {
            None => return Err(ApiError::bad_request("Job ID hasn't been provided")),
            Some(id) if id != path_id => {
                return Err(ApiError::bad_request("Job ID does not match name"));
            }
            Some(_) => {}
        }
    }
    default_job_scope(&mut job_json, opts.write_namespace(), &s.agent.region);
    let job = drover_structs::decode::decode_api_job(job_json)?;
    let enforce = request.enforce_index.then_some(request.job_modify_index);
    let result = s
        .server
        .register_job_with_source(job, enforce, request.submission)
        .await?;
    register_response(s, &result, opts.pretty)
}

/// Nomad's `JobRegisterResponse`, which registration, revert, evaluate and scale all answer.
pub(crate) fn register_response(
    s: &AppState,
    result: &drover_server::RegisterResult,
    pretty: bool,
) -> Result<Response, ApiError> {
    let meta = QueryMeta::new(s, result.index);
    let body = json!({
        "EvalID": result.eval_id,
        "EvalCreateIndex": result.eval_create_index,
        "JobModifyIndex": result.job_modify_index,
        "Warnings": result.warnings,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), pretty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_paths_split_known_suffixes_from_the_end() {
        assert_eq!(split_job_path("web"), JobPath::Job("web"));
        assert_eq!(split_job_path("web/summary"), JobPath::Summary("web"));
        assert_eq!(
            split_job_path("batch/dispatch-1234/allocations"),
            JobPath::Allocations("batch/dispatch-1234")
        );
        assert_eq!(
            split_job_path("batch/periodic-99"),
            JobPath::Job("batch/periodic-99")
        );
        assert_eq!(split_job_path("web/plan"), JobPath::Plan("web"));
        assert_eq!(
            split_job_path("cron/x/periodic/force"),
            JobPath::PeriodicForce("cron/x")
        );
        assert_eq!(
            split_job_path("render/dispatch"),
            JobPath::Dispatch("render")
        );
        assert_eq!(
            split_job_path("web/deployment"),
            JobPath::LatestDeployment("web")
        );
        assert_eq!(
            split_job_path("web/deployments"),
            JobPath::Deployments("web")
        );
    }

    use crate::test_support::{TestApi, web_job};
    use axum::http::Method;
    use std::time::{Duration, Instant};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn registered_job_reads_back_with_nomads_headers() {
        let api = TestApi::start().await;
        let reg = api.register(web_job("web")).await;
        assert!(!reg["EvalID"].as_str().unwrap().is_empty(), "{reg}");
        assert!(reg["JobModifyIndex"].as_u64().unwrap() > 0);
        assert!(reg["Index"].as_u64().unwrap() > 0);
        assert_eq!(reg["KnownLeader"], true);

        let r = api.get("/v1/job/web").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let job = r.json();
        assert_eq!(job["ID"], "web");
        assert_eq!(job["Namespace"], "default");
        assert_eq!(job["Region"], "global");
        assert_eq!(job["Priority"], 50);
        assert_eq!(r.index(), job["ModifyIndex"].as_u64().unwrap());
        assert_eq!(r.header("X-Nomad-KnownLeader").as_deref(), Some("true"));
        assert_eq!(r.header("X-Nomad-LastContact").as_deref(), Some("0"));
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/json")
        );

        let list = api.get("/v1/jobs").await;
        assert_eq!(list.status, StatusCode::OK);
        assert!(list.index() >= job["ModifyIndex"].as_u64().unwrap());
        let stubs = list.json();
        assert_eq!(stubs.as_array().unwrap().len(), 1);
        assert_eq!(stubs[0]["ID"], "web");
        assert_eq!(stubs[0]["JobSummary"]["JobID"], "web");
        assert!(stubs[0].get("TaskGroups").is_none(), "list returns stubs");

        let none = api.get("/v1/jobs?prefix=zzz").await.json();
        assert_eq!(none, serde_json::json!([]));
        let other_ns = api.get("/v1/jobs?namespace=other").await.json();
        assert_eq!(other_ns, serde_json::json!([]));
        let all_ns = api.get("/v1/jobs?namespace=*").await.json();
        assert_eq!(all_ns.as_array().unwrap().len(), 1);

        let summary = api.get("/v1/job/web/summary").await;
        assert_eq!(summary.status, StatusCode::OK);
        assert!(summary.json()["Summary"].get("web").is_some());
        let evals = api.get("/v1/job/web/evaluations").await.json();
        assert_eq!(evals[0]["ID"], reg["EvalID"]);
        let versions = api.get("/v1/job/web/versions").await.json();
        assert_eq!(versions["Versions"][0]["ID"], "web");
        assert_eq!(
            api.get("/v1/job/web/allocations").await.status,
            StatusCode::OK
        );
        let latest = api.get("/v1/job/web/deployment").await;
        assert_eq!(latest.json(), Value::Null);
        assert!(latest.index() > 0);
        assert_eq!(api.get("/v1/job/web/deployments").await.json(), json!([]));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_query_returns_after_a_change() {
        let api = TestApi::start().await;
        api.register(web_job("web")).await;
        let first = api.get("/v1/job/web").await;
        let index = first.index();

        let router_api = &api;
        let uri = format!("/v1/job/web?index={index}&wait=20s");
        let started = Instant::now();
        let (blocked, ()) = tokio::join!(router_api.get(&uri), async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut changed = web_job("web");
            changed["Meta"] = serde_json::json!({"rev": "2"});
            router_api.register(changed).await;
        });
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "woke on the change"
        );
        assert_eq!(blocked.status, StatusCode::OK);
        assert!(blocked.index() > index);
        assert_eq!(blocked.json()["Meta"]["rev"], "2");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_query_times_out_with_the_same_index() {
        // Nodes, unlike jobs, see no background writes (the scheduler updates job summaries).
        let api = TestApi::start().await;
        let node_id = api.register_node("n1").await;
        let index = api.get("/v1/nodes").await.index();
        let started = Instant::now();
        let r = api
            .get(&format!("/v1/nodes?index={index}&wait=400ms"))
            .await;
        assert!(started.elapsed() >= Duration::from_millis(400));
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.index(), index);
        assert_eq!(r.json()[0]["ID"], node_id.as_str());

        let started = Instant::now();
        let r = api
            .get(&format!("/v1/node/{node_id}?index={index}&wait=300ms"))
            .await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(r.index(), index);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_job_is_a_400_naming_the_field() {
        let api = TestApi::start().await;
        let mut job = web_job("web");
        job["TaskGroups"][0]["Count"] = serde_json::json!("three");
        let r = api
            .put("/v1/jobs", &serde_json::json!({ "Job": job }))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text()
                .starts_with("failed to decode Job: TaskGroups[0].Count: invalid type"),
            "{}",
            r.text()
        );

        let r = api.call(Method::PUT, "/v1/jobs", Some("{\"Job\": {")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text().starts_with("failed to decode request body"),
            "{}",
            r.text()
        );
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/plain; charset=utf-8")
        );

        let r = api.put("/v1/jobs", &serde_json::json!({})).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "Job must be specified")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn invalid_job_is_a_400_with_nomads_multi_error() {
        let api = TestApi::start().await;
        let mut job = web_job("web");
        // (No datacenters is no error since Nomad 1.5: the job gets ["*"].)
        job["Priority"] = serde_json::json!(500);
        job["TaskGroups"][0]["Count"] = serde_json::json!(-1);
        let r = api
            .put("/v1/jobs", &serde_json::json!({ "Job": job }))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let text = r.text();
        assert!(text.contains(" errors occurred:\n\t* "), "{text}");
        assert!(text.ends_with("\n\n"), "{text:?}");
        assert_eq!(api.get("/v1/job/web").await.status, StatusCode::NOT_FOUND);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn register_at_job_path_checks_the_id() {
        let api = TestApi::start().await;
        let body = serde_json::json!({ "Job": web_job("web") });
        let r = api.put("/v1/job/other", &body).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "Job ID does not match name")
        );
        let r = api.put("/v1/job/web", &body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert!(r.index() > 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn enforce_index_conflict_is_reported() {
        let api = TestApi::start().await;
        api.register(web_job("web")).await;
        let body =
            serde_json::json!({ "Job": web_job("web"), "EnforceIndex": true, "JobModifyIndex": 0 });
        let r = api.put("/v1/jobs", &body).await;
        assert_eq!(r.status, StatusCode::CONFLICT);
        assert!(
            r.text().starts_with("Enforcing job modify index 0"),
            "{}",
            r.text()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn missing_jobs_and_paths_are_404s_and_wrong_methods_405s() {
        let api = TestApi::start().await;
        let r = api.get("/v1/job/nope").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "job not found")
        );
        assert!(r.index() > 0, "a 404 read still carries the index");
        assert_eq!(
            api.get("/v1/job/nope/summary").await.status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            api.get("/v1/job/nope/versions").await.status,
            StatusCode::NOT_FOUND
        );
        // Nomad 1.1 answers a deregistration of an unknown job with an evaluation of it.
        for path in ["/v1/job/nope", "/v1/job/nope?purge=true"] {
            let r = api.call(Method::DELETE, path, None).await;
            assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text());
            let body = r.json();
            let eval_id = body["EvalID"].as_str().unwrap_or_default().to_string();
            assert!(!eval_id.is_empty(), "{body}");
            assert_eq!(body["JobModifyIndex"], body["EvalCreateIndex"], "{body}");
            let eval = api.get(&format!("/v1/evaluation/{eval_id}")).await.json();
            assert_eq!(
                (
                    &eval["JobID"],
                    &eval["TriggeredBy"],
                    &eval["Type"],
                    &eval["Priority"]
                ),
                (
                    &"nope".into(),
                    &"job-deregister".into(),
                    &"service".into(),
                    &50.into()
                ),
                "{eval}"
            );
            // The scheduler finds nothing to stop and completes it.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let eval = api.get(&format!("/v1/evaluation/{eval_id}")).await.json();
                if eval["Status"] == "complete" {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "{eval}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        assert_eq!(api.get("/v1/job/nope").await.status, StatusCode::NOT_FOUND);

        let r = api.get("/v1/no/such/path").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "404 page not found")
        );
        let r = api.call(Method::DELETE, "/v1/jobs", None).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::METHOD_NOT_ALLOWED, "Invalid method")
        );
        let r = api.call(Method::DELETE, "/v1/job/web/summary", None).await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            api.get("/v1/job/web/plan").await.status,
            StatusCode::METHOD_NOT_ALLOWED
        );
        let r = api.get("/v1/job/web/services").await;
        assert_eq!((r.status, r.text().as_str()), (StatusCode::OK, "[]"));
    }

    fn periodic_job(id: &str, spec: &str) -> Value {
        let mut job = web_job(id);
        job["Type"] = json!("batch");
        job["Periodic"] = json!({"Spec": spec, "ProhibitOverlap": true});
        job
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn forcing_a_periodic_job_launches_a_child_and_the_parent_gets_nothing() {
        let api = TestApi::start().await;
        let reg = api.register(periodic_job("cron", "0 0 1 1 * 2099")).await;
        assert_eq!(reg["EvalID"], "", "the parent gets no evaluation");
        let parent = api.get("/v1/job/cron").await.json();
        assert_eq!(parent["Status"], "running");
        assert_eq!(parent["Periodic"]["TimeZone"], "UTC");

        let r = api
            .call(Method::POST, "/v1/job/cron/periodic/force", None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let forced = r.json();
        let eval_id = forced["EvalID"].as_str().unwrap().to_string();
        assert_eq!(forced["EvalCreateIndex"], forced["Index"]);
        assert_eq!(r.index(), forced["Index"].as_u64().unwrap());

        let eval = api.get(&format!("/v1/evaluation/{eval_id}")).await.json();
        assert_eq!(eval["TriggeredBy"], "periodic-job");
        let child_id = eval["JobID"].as_str().unwrap().to_string();
        assert!(child_id.starts_with("cron/periodic-"), "{child_id}");
        let child = api.get(&format!("/v1/job/{child_id}")).await.json();
        assert_eq!(child["ParentID"], "cron");
        assert_eq!(child["Periodic"], Value::Null);
        assert!(
            api.get("/v1/job/cron/allocations")
                .await
                .json()
                .as_array()
                .unwrap()
                .is_empty()
        );
        let stubs = api.get("/v1/jobs?prefix=cron").await.json();
        assert_eq!(stubs.as_array().unwrap().len(), 2);

        let r = api
            .call(Method::POST, "/v1/job/nope/periodic/force", None)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        api.register(web_job("web")).await;
        let r = api
            .call(Method::PUT, "/v1/job/web/periodic/force", None)
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "can't force launch non-periodic job"
            )
        );
        let r = api.get("/v1/job/cron/periodic/force").await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);

        // Stopping the parent makes no evaluation and stops its launches.
        let r = api.call(Method::DELETE, "/v1/job/cron", None).await;
        assert_eq!(r.json()["EvalID"], "", "{}", r.text());
        let r = api
            .call(Method::POST, "/v1/job/cron/periodic/force", None)
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text().contains("can't force run non-tracked job"),
            "{}",
            r.text()
        );
    }

    fn parameterized_job(id: &str) -> Value {
        let mut job = web_job(id);
        job["Type"] = json!("batch");
        job["ParameterizedJob"] =
            json!({"Payload": "required", "MetaRequired": ["frame"], "MetaOptional": ["note"]});
        job["TaskGroups"][0]["Tasks"][0]["DispatchPayload"] = json!({"File": "input.txt"});
        job
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_repeated_idempotency_token_returns_the_existing_child_without_an_evaluation() {
        let api = TestApi::start().await;
        api.register(parameterized_job("render")).await;
        let body = json!({"Payload": "eA==", "Meta": {"frame": "1"}, "IdempotencyToken": "t1"});
        let first = api.put("/v1/job/render/dispatch", &body).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.text());
        let first = first.json();
        let child_id = first["DispatchedJobID"].as_str().unwrap().to_string();
        assert!(!first["EvalID"].as_str().unwrap().is_empty());
        let child = api.get(&format!("/v1/job/{child_id}")).await.json();
        assert_eq!(child["DispatchIdempotencyToken"], "t1");

        // The same token again, in the body or as Nomad's client sends it (query): same child.
        let again = api.put("/v1/job/render/dispatch", &body).await;
        assert_eq!(again.status, StatusCode::OK, "{}", again.text());
        let again_index = again.index();
        let again = again.json();
        assert_eq!(again["DispatchedJobID"], child_id.as_str());
        assert_eq!(again["EvalID"], "");
        assert_eq!(again["EvalCreateIndex"], 0);
        assert_eq!(again["JobCreateIndex"], child["CreateIndex"]);
        assert_eq!(again["Index"], child["ModifyIndex"]);
        assert_eq!(again_index, child["ModifyIndex"].as_u64().unwrap());
        let by_query = api
            .put(
                "/v1/job/render/dispatch?idempotency_token=t1",
                &json!({"Payload": "eA==", "Meta": {"frame": "1"}}),
            )
            .await
            .json();
        assert_eq!(by_query["DispatchedJobID"], child_id.as_str());

        // Another token, or none, dispatches anew.
        let other = api
            .put(
                "/v1/job/render/dispatch",
                &json!({"Payload": "eA==", "Meta": {"frame": "1"}, "IdempotencyToken": "t2"}),
            )
            .await
            .json();
        assert_ne!(other["DispatchedJobID"], child_id.as_str());
        let plain = json!({"Payload": "eA==", "Meta": {"frame": "1"}});
        let a = api.put("/v1/job/render/dispatch", &plain).await.json();
        let b = api.put("/v1/job/render/dispatch", &plain).await.json();
        assert_ne!(a["DispatchedJobID"], b["DispatchedJobID"]);
        let children: Vec<Value> = api
            .get("/v1/jobs?prefix=render/")
            .await
            .json()
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(children.len(), 4);
        // A failed validation is reported even when the token's child exists.
        let r = api
            .put(
                "/v1/job/render/dispatch",
                &json!({"Meta": {"frame": "1"}, "IdempotencyToken": "t1"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_parents_summary_counts_its_children_by_status() {
        let api = TestApi::start().await;
        api.register(parameterized_job("render")).await;
        let summary = api.get("/v1/job/render/summary").await.json();
        assert_eq!(
            summary["Children"],
            json!({"Pending": 0, "Running": 0, "Dead": 0})
        );
        let body = json!({"Payload": "eA==", "Meta": {"frame": "1"}});
        let mut ids = Vec::new();
        for _ in 0..2 {
            let out = api.put("/v1/job/render/dispatch", &body).await.json();
            ids.push(out["DispatchedJobID"].as_str().unwrap().to_string());
        }
        let r = api
            .call(Method::DELETE, &format!("/v1/job/{}", ids[0]), None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        // The counts follow the children's statuses, which the stop moves on asynchronously.
        // Up to 20 s: on a loaded 2-core machine the stop's evaluation can take seconds.
        let mut last = Value::Null;
        for _ in 0..400 {
            let mut expected = json!({"Pending": 0, "Running": 0, "Dead": 0});
            for id in &ids {
                let status = api.get(&format!("/v1/job/{id}")).await.json()["Status"].clone();
                let key = match status.as_str() {
                    Some("running") => "Running",
                    Some("dead") => "Dead",
                    _ => "Pending",
                };
                expected[key] = json!(expected[key].as_i64().unwrap() + 1);
            }
            last = api.get("/v1/job/render/summary").await.json()["Children"].clone();
            if last == expected && expected["Dead"] == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let evals = api
            .get(&format!("/v1/job/{}/evaluations", ids[0]))
            .await
            .json();
        let job0 = api.get(&format!("/v1/job/{}", ids[0])).await.json();
        let allocs0 = api
            .get(&format!("/v1/job/{}/allocations", ids[0]))
            .await
            .json();
        assert_eq!(
            last["Dead"], 1,
            "{last}\nstop={} status={}\nevals={evals:#}\nallocs={allocs0}",
            job0["Stop"], job0["Status"]
        );
        assert_eq!(
            last["Pending"].as_i64().unwrap() + last["Running"].as_i64().unwrap(),
            1,
            "{last}"
        );
        let stub = &api.get("/v1/jobs?prefix=render").await.json()[0];
        assert_eq!(stub["ID"], "render");
        assert_eq!(stub["JobSummary"]["Children"], last);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dispatching_registers_a_child_with_payload_and_meta_and_checks_the_rules() {
        let api = TestApi::start().await;
        let reg = api.register(parameterized_job("render")).await;
        assert_eq!(reg["EvalID"], "", "the parent gets no evaluation");
        assert_eq!(api.get("/v1/job/render").await.json()["Status"], "running");
        let stub = &api.get("/v1/jobs?prefix=render").await.json()[0];
        assert_eq!(stub["ParameterizedJob"], true);

        let body = json!({"Payload": "ZnJhbWUtNDI=", "Meta": {"frame": "42"}});
        let r = api.put("/v1/job/render/dispatch", &body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let out = r.json();
        let child_id = out["DispatchedJobID"].as_str().unwrap().to_string();
        assert!(child_id.starts_with("render/dispatch-"), "{child_id}");
        assert!(!out["EvalID"].as_str().unwrap().is_empty());
        assert_eq!(out["Index"], out["EvalCreateIndex"]);
        assert_eq!(r.index(), out["Index"].as_u64().unwrap());

        let child = api.get(&format!("/v1/job/{child_id}")).await.json();
        assert_eq!(child["ParentID"], "render");
        assert_eq!(child["Dispatched"], true);
        assert_eq!(child["Meta"]["frame"], "42");
        let payload = drover_structs::decode_job_payload(&child["Payload"]).unwrap();
        assert_eq!(payload, b"frame-42");
        let stubs = api.get("/v1/jobs?prefix=render/").await.json();
        assert_eq!(stubs[0]["ParameterizedJob"], false);

        let cases = [
            (
                json!({"Meta": {"frame": "1"}}),
                StatusCode::BAD_REQUEST,
                "Payload is not provided but required by parameterized job",
            ),
            (
                json!({"Payload": "eA==", "Meta": {}}),
                StatusCode::BAD_REQUEST,
                "Dispatch did not provide required meta keys: [frame]",
            ),
            (
                json!({"Payload": "eA==", "Meta": {"frame": "1", "color": "red"}}),
                StatusCode::BAD_REQUEST,
                "Dispatch request included unpermitted metadata keys: [color]",
            ),
            (
                json!({"JobID": "other", "Payload": "eA=="}),
                StatusCode::BAD_REQUEST,
                "Job ID does not match",
            ),
        ];
        for (body, status, text) in cases {
            let r = api.put("/v1/job/render/dispatch", &body).await;
            assert_eq!((r.status, r.text().as_str()), (status, text), "{body}");
        }
        // 16385 bytes of "x": "xxx" is "eHh4" in base64, "xx" is "eHg=".
        let payload = format!("{}eHg=", "eHh4".repeat(5461));
        let r = api
            .put(
                "/v1/job/render/dispatch",
                &json!({"Payload": payload, "Meta": {"frame": "1"}}),
            )
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "Payload exceeds maximum size; 16385 > 16384"
            )
        );
        let r = api.put("/v1/job/nope/dispatch", &json!({})).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "parameterized job not found")
        );
        api.register(web_job("web")).await;
        let r = api.put("/v1/job/web/dispatch", &json!({})).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "Specified job \"web\" is not a parameterized job"
            )
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn periodic_jobs_with_unknown_zones_or_changing_kind_are_refused() {
        let api = TestApi::start().await;
        let mut job = periodic_job("tz", "0 0 * * *");
        job["Periodic"]["TimeZone"] = json!("Nowhere/City");
        let r = api.put("/v1/jobs", &json!({ "Job": job })).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text().contains("Invalid time zone \"Nowhere/City\""),
            "{}",
            r.text()
        );

        api.register(periodic_job("kind", "0 0 * * *")).await;
        let mut plain = web_job("kind");
        plain["Type"] = json!("batch");
        let r = api.put("/v1/jobs", &json!({ "Job": plain })).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "cannot update periodic job to being non-periodic"
            )
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delete_stops_the_job_and_purge_removes_it() {
        let api = TestApi::start().await;
        api.register(web_job("web")).await;
        let r = api.call(Method::DELETE, "/v1/job/web", None).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let body = r.json();
        assert!(!body["EvalID"].as_str().unwrap().is_empty());
        assert_eq!(body["JobModifyIndex"].as_u64(), Some(r.index()));
        assert_eq!(api.get("/v1/job/web").await.json()["Stop"], true);

        let r = api
            .call(Method::DELETE, "/v1/job/web?purge=true", None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(api.get("/v1/job/web").await.status, StatusCode::NOT_FOUND);

        let r = api
            .call(Method::DELETE, "/v1/job/web?purge=maybe", None)
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }
}
