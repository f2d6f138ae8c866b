//! `PUT|POST /v1/client/allocation/:id/signal` and `/restart`: Nomad's `alloc signal` and
//! `alloc restart`, served by the node that runs the allocation. Both answer Nomad's
//! `GenericResponse`; errors carry Nomad's texts (404 for an allocation this client does not
//! run, else 500 as Nomad's client RPC errors surface).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use drover_client::alloc_control::AllocControlError;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::NodeClient;
use crate::body::decode_body;
use crate::client_api::ClientState;
use crate::client_fs::{local_client, not_on_this_node};
use crate::error::ApiError;
use crate::query::{Params, flag};
use crate::response::respond_json;

/// What [`NodeClient::signal`] and [`NodeClient::restart`] return.
pub type ControlFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(), AllocControlError>> + Send + 'a>>;

/// The answer of a client that cannot do `what`.
pub(crate) fn not_supported(what: &str) -> ControlFuture<'static> {
    let e = AllocControlError::NotSupported(format!("{what} is not supported by this client"));
    Box::pin(async move { Err(e) })
}

/// Nomad's `AllocSignalRequest` body.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AllocSignalRequest {
    #[serde(rename = "Task")]
    task: String,
    #[serde(rename = "Signal")]
    signal: String,
}

/// The body of Nomad's restart request.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AllocRestartRequest {
    #[serde(rename = "TaskName")]
    task_name: String,
    #[serde(rename = "AllTasks")]
    all_tasks: bool,
}

/// `PUT|POST /v1/client/allocation/:id/signal` with `{"Task", "Signal"}`: an empty task is
/// every task, an empty signal the client's default.
pub(crate) async fn signal(
    State(s): State<ClientState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let request = signal_request(&body)?;
    let client = Arc::clone(local_client(&s)?);
    let task = Some(request.task).filter(|t| !t.is_empty());
    let result = client.signal(id.clone(), task, request.signal).await;
    answer(&s, &client, &id, result, pretty)
}

/// `PUT|POST /v1/client/allocation/:id/restart` with `{"TaskName", "AllTasks"}` (the body may
/// be empty): one task, or the running tasks.
pub(crate) async fn restart(
    State(s): State<ClientState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let request: AllocRestartRequest = decode_body(&body, "AllocRestartRequest")?;
    let client = Arc::clone(local_client(&s)?);
    let task = Some(request.task_name).filter(|t| !t.is_empty());
    let result = client.restart(id.clone(), task, request.all_tasks).await;
    answer(&s, &client, &id, result, pretty)
}

/// Nomad's `decodeBody`, which wants a body, with its error texts.
fn signal_request(body: &Bytes) -> Result<AllocSignalRequest, ApiError> {
    let failed = |reason: String| ApiError::bad_request(format!("Failed to decode body: {reason}"));
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(failed("Request body is empty".into()));
    }
    match serde_json::from_slice(body).map_err(|e| failed(e.to_string()))? {
        Value::Null => Ok(AllocSignalRequest::default()),
        value => drover_structs::decode::decode(value, "AllocSignalRequest")
            .map_err(|e| failed(e.to_string())),
    }
}

/// Nomad's empty `GenericResponse`, or the client's refusal.
fn answer(
    s: &ClientState,
    client: &Arc<dyn NodeClient>,
    alloc_id: &str,
    result: Result<(), AllocControlError>,
    pretty: bool,
) -> Result<Response, ApiError> {
    match result {
        Ok(()) => respond_json(&json!({"Index": 0}), None, pretty),
        Err(AllocControlError::UnknownAlloc(_)) => Err(not_on_this_node(s, client, alloc_id)),
        Err(e @ AllocControlError::UnknownSignal(_)) => Err(ApiError::bad_request(e.to_string())),
        Err(e @ AllocControlError::NotSupported(_)) => {
            Err(ApiError::new(StatusCode::NOT_IMPLEMENTED, e.to_string()))
        }
        Err(e) => Err(ApiError::internal(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::http::{Method, StatusCode};
    use drover_client::alloc_control::AllocControlError;
    use serde_json::{Value, json};

    use super::ControlFuture;
    use crate::NodeClient;
    use crate::test_support::TestApi;

    /// What the fake client was asked.
    #[derive(Debug, Clone, PartialEq)]
    enum Asked {
        Signal(String, Option<String>, String),
        Restart(String, Option<String>, bool),
    }

    /// Runs allocation "a1" with tasks "web" (running) and "done" (dead); records every request.
    #[derive(Default)]
    struct Lifecycle {
        asked: Mutex<Vec<Asked>>,
    }

    fn outcome(alloc_id: &str, task: Option<&str>) -> Result<(), AllocControlError> {
        match (alloc_id, task) {
            ("a1", None | Some("web")) => Ok(()),
            ("a1", Some("done")) => Err(AllocControlError::TaskNotRunning),
            ("a1", Some(_)) => Err(AllocControlError::SignalUnknownTask("x".into())),
            (other, _) => Err(AllocControlError::UnknownAlloc(other.into())),
        }
    }

    impl NodeClient for Lifecycle {
        fn node_id(&self) -> String {
            "node-1".into()
        }
        fn alloc_dir(&self, _: &str) -> Option<std::path::PathBuf> {
            None
        }
        fn stats(&self) -> Value {
            Value::Null
        }
        fn signal(
            &self,
            alloc_id: String,
            task: Option<String>,
            signal: String,
        ) -> ControlFuture<'_> {
            let result = if signal == "SIGFOO" {
                Err(AllocControlError::UnknownSignal(signal.clone()))
            } else {
                outcome(&alloc_id, task.as_deref())
            };
            self.asked
                .lock()
                .unwrap()
                .push(Asked::Signal(alloc_id, task, signal));
            Box::pin(async move { result })
        }
        fn restart(
            &self,
            alloc_id: String,
            task: Option<String>,
            all_tasks: bool,
        ) -> ControlFuture<'_> {
            let result = outcome(&alloc_id, task.as_deref());
            self.asked
                .lock()
                .unwrap()
                .push(Asked::Restart(alloc_id, task, all_tasks));
            Box::pin(async move { result })
        }
    }

    /// A client that implements neither (the trait's defaults).
    struct Bare;

    impl NodeClient for Bare {
        fn node_id(&self) -> String {
            "node-1".into()
        }
        fn alloc_dir(&self, _: &str) -> Option<std::path::PathBuf> {
            None
        }
        fn stats(&self) -> Value {
            Value::Null
        }
    }

    async fn api_with(client: Arc<Lifecycle>) -> TestApi {
        TestApi::start_with(move |_| Some(client as Arc<dyn NodeClient>)).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn signal_and_restart_reach_the_local_client_and_answer_a_generic_response() {
        let client = Arc::new(Lifecycle::default());
        let api = api_with(Arc::clone(&client)).await;

        let r = api
            .call(
                Method::PUT,
                "/v1/client/allocation/a1/signal",
                Some(r#"{"Task": "web", "Signal": "SIGUSR1"}"#),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(r.json(), json!({"Index": 0}));
        let r = api
            .call(Method::POST, "/v1/client/allocation/a1/signal", Some("{}"))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());

        let r = api
            .call(Method::POST, "/v1/client/allocation/a1/restart", None)
            .await;
        assert_eq!(
            r.status,
            StatusCode::OK,
            "an empty body restarts the running tasks"
        );
        assert_eq!(r.json(), json!({"Index": 0}));
        let r = api
            .call(
                Method::PUT,
                "/v1/client/allocation/a1/restart",
                Some(r#"{"TaskName": "web", "AllTasks": false}"#),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let r = api
            .call(
                Method::PUT,
                "/v1/client/allocation/a1/restart",
                Some(r#"{"AllTasks": true}"#),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());

        assert_eq!(
            *client.asked.lock().unwrap(),
            [
                Asked::Signal("a1".into(), Some("web".into()), "SIGUSR1".into()),
                Asked::Signal("a1".into(), None, String::new()),
                Asked::Restart("a1".into(), None, false),
                Asked::Restart("a1".into(), Some("web".into()), false),
                Asked::Restart("a1".into(), None, true),
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn refusals_carry_nomads_status_and_text() {
        let api = api_with(Arc::new(Lifecycle::default())).await;
        let cases = [
            (
                "/v1/client/allocation/nope/signal",
                r#"{"Signal": "SIGHUP"}"#,
                StatusCode::NOT_FOUND,
                "Unknown allocation \"nope\"",
            ),
            (
                "/v1/client/allocation/a1/signal",
                r#"{"Task": "done"}"#,
                StatusCode::INTERNAL_SERVER_ERROR,
                "Task not running",
            ),
            (
                "/v1/client/allocation/a1/signal",
                r#"{"Task": "other"}"#,
                StatusCode::INTERNAL_SERVER_ERROR,
                "Task not found",
            ),
            (
                "/v1/client/allocation/a1/signal",
                r#"{"Signal": "SIGFOO"}"#,
                StatusCode::BAD_REQUEST,
                "unknown signal \"SIGFOO\"",
            ),
            (
                "/v1/client/allocation/a1/signal",
                "",
                StatusCode::BAD_REQUEST,
                "Failed to decode body: Request body is empty",
            ),
            (
                "/v1/client/allocation/nope/restart",
                "",
                StatusCode::NOT_FOUND,
                "Unknown allocation \"nope\"",
            ),
            (
                "/v1/client/allocation/a1/restart",
                r#"{"TaskName": "done"}"#,
                StatusCode::INTERNAL_SERVER_ERROR,
                "Task not running",
            ),
        ];
        for (path, body, status, text) in cases {
            let r = api.call(Method::PUT, path, Some(body)).await;
            assert_eq!(
                (r.status, r.text().as_str()),
                (status, text),
                "{path} {body}"
            );
        }
        let r = api.get("/v1/client/allocation/a1/signal").await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
        let r = api
            .call(Method::PUT, "/v1/client/allocation/a1/signal", Some("{"))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text().starts_with("Failed to decode body: "),
            "{}",
            r.text()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn agents_without_a_client_or_its_support_refuse() {
        let api = TestApi::start().await;
        let r = api
            .call(Method::PUT, "/v1/client/allocation/a1/restart", None)
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "node is not running a Nomad Client"
            )
        );

        let bare = TestApi::start_with(|_| Some(Arc::new(Bare) as Arc<dyn NodeClient>)).await;
        for action in ["signal", "restart"] {
            let r = bare
                .call(
                    Method::PUT,
                    &format!("/v1/client/allocation/a1/{action}"),
                    Some("{}"),
                )
                .await;
            assert_eq!(r.status, StatusCode::NOT_IMPLEMENTED, "{action}");
            assert!(r.text().contains("not supported"), "{}", r.text());
        }
    }
}
