//! `/v1/allocations`, `/v1/allocation/:id[/stop]` and, served by the node that runs it,
//! `/v1/client/allocation/:id/stats`.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use drover_state::Table;
use serde_json::json;

use crate::AppState;
use crate::client_fs::{local_client, not_on_this_node};
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking, flag};
use crate::response::{QueryMeta, respond_json};

/// `GET /v1/allocations`: allocation stubs, `?prefix` on the id, `?task_states=false` to leave
/// the task states out.
pub(crate) async fn list(
    State(s): State<AppState>,
    perms: Option<axum::Extension<drover_server::acl::Permissions>>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let perms = perms.map(|axum::Extension(p)| p);
    let with_task_states = !matches!(params.get("task_states").map(String::as_str), Some(v) if crate::query::parse_go_bool(v) == Some(false));
    // Nomad's `?resources=true`: each stub also carries the allocation's resources.
    let with_resources = crate::query::flag(&params, "resources")?;
    let (meta, stubs) = blocking(&s, &[Table::Allocs], &opts, |snap| {
        let stubs: Vec<_> = snap
            .allocs_by_prefix(&opts.prefix)
            .iter()
            .filter(|a| opts.in_namespace(&a.namespace))
            // With `namespace=*`, only the namespaces the token may read.
            .filter(|a| {
                crate::authorize::may(
                    perms.as_ref(),
                    &a.namespace,
                    drover_server::acl::policy::CAP_READ_JOB,
                )
            })
            .map(|a| {
                let mut stub = a.stub();
                if !with_task_states {
                    stub.task_states = None;
                }
                if with_resources {
                    stub.allocated_resources = a.allocated_resources.clone();
                }
                stub
            })
            .collect();
        (snap.table_index(Table::Allocs), stubs)
    })
    .await;
    respond_json(&stubs, Some(meta), opts.pretty)
}

/// `GET /v1/allocation/:id`: the full allocation; the id must be whole.
pub(crate) async fn get_one(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, alloc) = blocking(&s, &[Table::Allocs], &opts, |snap| {
        let alloc = snap.alloc(&id);
        let index = alloc
            .as_ref()
            .map(|a| a.modify_index)
            .unwrap_or_else(|| snap.table_index(Table::Allocs));
        (index, alloc)
    })
    .await;
    let alloc = alloc.ok_or_else(|| ApiError::not_found("alloc not found").with_meta(meta))?;
    respond_json(&*alloc, Some(meta), opts.pretty)
}

/// `POST|PUT /v1/allocation/:id/stop`: Nomad's `AllocStopResponse`.
pub(crate) async fn stop(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let (eval_id, index) = s.server.stop_alloc(&id).await?;
    let meta = QueryMeta::new(&s, index);
    respond_json(
        &json!({"EvalID": eval_id, "Index": meta.index}),
        Some(meta),
        pretty,
    )
}

/// `GET /v1/client/allocation/:id/stats[?task=]`: the resource usage of an allocation this
/// node runs (Nomad's `AllocResourceUsage`), sampled from its drivers now.
pub(crate) async fn client_stats(
    State(s): State<crate::client_api::ClientState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let client = Arc::clone(local_client(&s)?);
    let task = params.get("task").filter(|t| !t.is_empty()).cloned();
    let sampler = Arc::clone(&client);
    let alloc_id = id.clone();
    let usage =
        tokio::task::spawn_blocking(move || sampler.alloc_stats(&alloc_id, task.as_deref()))
            .await
            .map_err(|e| ApiError::internal(format!("collecting allocation stats failed: {e}")))?;
    match usage {
        Some(usage) => respond_json(&usage, None, pretty),
        None => Err(not_on_this_node(&s, &client, &id)),
    }
}

/// `GET /v1/client/allocation/:id/checks`: the latest result of each service check of an
/// allocation this node runs, by check id (Nomad's `map[CheckID]CheckQueryResult`).
pub(crate) async fn client_checks(
    State(s): State<crate::client_api::ClientState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let client = local_client(&s)?;
    match client.alloc_checks(&id) {
        Some(results) => respond_json(&results, None, pretty),
        None => Err(not_on_this_node(&s, client, &id)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use axum::http::{Method, StatusCode};
    use serde_json::Value;

    use crate::test_support::{TestApi, web_job};

    /// Waits (through blocking queries) until the job has an allocation; returns its stub.
    async fn first_alloc(api: &TestApi, job: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut index = 0;
        loop {
            let r = api
                .get(&format!("/v1/job/{job}/allocations?index={index}&wait=2s"))
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text());
            index = r.index();
            if let Some(first) = r.json().as_array().and_then(|a| a.first().cloned()) {
                return first;
            }
            assert!(Instant::now() < deadline, "no allocation placed in time");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn allocation_lists_carry_resources_only_when_asked() {
        let api = TestApi::start().await;
        api.register_node("9f773057-049e-c568-1bcf-300fae47b4b0")
            .await;
        api.register(web_job("web")).await;
        let stub = first_alloc(&api, "web").await;
        assert!(stub["AllocatedResources"].is_null(), "{stub}");
        let full = api.get("/v1/allocations?resources=true").await.json();
        let tasks = &full[0]["AllocatedResources"]["Tasks"];
        assert!(tasks.as_object().is_some_and(|t| !t.is_empty()), "{full}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn placed_allocations_are_listed_read_and_stopped() {
        let api = TestApi::start().await;
        let node_id = api
            .register_node("9f773057-049e-c568-1bcf-300fae47b4b0")
            .await;
        api.register(web_job("web")).await;
        let stub = first_alloc(&api, "web").await;
        let id = stub["ID"].as_str().unwrap().to_string();
        assert!(stub.get("Job").is_none(), "lists return stubs");
        assert_eq!(stub["NodeID"], node_id.as_str());

        let r = api.get(&format!("/v1/allocation/{id}")).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let alloc = r.json();
        assert_eq!(alloc["Job"]["ID"], "web");
        assert_eq!(r.index(), alloc["ModifyIndex"].as_u64().unwrap());

        let by_prefix = api
            .get(&format!("/v1/allocations?prefix={}", &id[..8]))
            .await;
        assert_eq!(by_prefix.json()[0]["ID"], id.as_str());
        let no_states = api.get("/v1/allocations?task_states=false").await.json();
        assert_eq!(no_states[0]["TaskStates"], Value::Null);
        let short = api.get(&format!("/v1/allocation/{}", &id[..8])).await;
        assert_eq!(
            short.status,
            StatusCode::NOT_FOUND,
            "the API wants whole ids"
        );

        let eval_allocs = api
            .get(&format!(
                "/v1/evaluation/{}/allocations",
                alloc["EvalID"].as_str().unwrap()
            ))
            .await
            .json();
        assert_eq!(eval_allocs[0]["ID"], id.as_str());
        let node_allocs = api
            .get(&format!("/v1/node/{node_id}/allocations"))
            .await
            .json();
        assert_eq!(node_allocs[0]["ID"], id.as_str());
        assert_eq!(
            node_allocs[0]["Job"]["ID"], "web",
            "node allocations are full"
        );

        let r = api
            .call(Method::POST, &format!("/v1/allocation/{id}/stop"), None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let stop = r.json();
        assert!(!stop["EvalID"].as_str().unwrap().is_empty());
        assert_eq!(stop["Index"].as_u64(), Some(r.index()));
        let after = api.get(&format!("/v1/allocation/{id}")).await.json();
        assert_eq!(after["DesiredStatus"], "stop");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_allocations_are_404s() {
        let api = TestApi::start().await;
        let r = api.get("/v1/allocation/nope").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "alloc not found")
        );
        let r = api
            .call(Method::PUT, "/v1/allocation/nope/stop", None)
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "alloc not found")
        );
        let r = api.get("/v1/allocations").await;
        assert_eq!(r.json(), serde_json::json!([]));
        assert!(r.index() > 0);
        let r = api.get("/v1/allocation/nope/stop").await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    }

    /// A client that runs allocation "a1" with one task, "web".
    struct StatsClient;

    impl crate::NodeClient for StatsClient {
        fn node_id(&self) -> String {
            "node-1".into()
        }
        fn alloc_dir(&self, _: &str) -> Option<std::path::PathBuf> {
            None
        }
        fn stats(&self) -> Value {
            Value::Null
        }
        fn alloc_stats(&self, alloc_id: &str, task: Option<&str>) -> Option<Value> {
            (alloc_id == "a1").then(|| {
                serde_json::json!({
                    "ResourceUsage": {"MemoryStats": {"RSS": 4096, "Measured": ["RSS"]}},
                    "Tasks": {task.unwrap_or("web"): {"Timestamp": 1}},
                    "Timestamp": 1,
                })
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_allocation_stats_come_from_the_local_client() {
        let api = TestApi::start_with(|_| {
            Some(std::sync::Arc::new(StatsClient) as std::sync::Arc<dyn crate::NodeClient>)
        })
        .await;
        let r = api.get("/v1/client/allocation/a1/stats").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let usage = r.json();
        assert_eq!(usage["ResourceUsage"]["MemoryStats"]["RSS"], 4096);
        assert!(usage["Tasks"]["web"].is_object());
        let r = api.get("/v1/client/allocation/a1/stats?task=db").await;
        assert!(
            r.json()["Tasks"]["db"].is_object(),
            "the task filter is passed on"
        );
        let r = api.get("/v1/client/allocation/nope/stats").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "Unknown allocation \"nope\"")
        );

        let without_client = TestApi::start().await;
        let r = without_client.get("/v1/client/allocation/a1/stats").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "node is not running a Nomad Client"
            )
        );
    }
}
