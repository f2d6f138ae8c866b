//! `/v1/client/fs/{ls,stat,cat}/:alloc` and `/v1/client/stats`, answered by the node that
//! runs the allocation (`client_api` brings the call there).

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_client::allocdir::{AllocDir, AllocDirError};
use tokio::io::AsyncReadExt;

use crate::NodeClient;
use crate::client_api::ClientState;
use crate::error::ApiError;
use crate::query::{Params, flag};
use crate::response::respond_json;
use crate::stream::channel_body;

/// Bytes read per piece when streaming a file.
const CAT_CHUNK: usize = 64 * 1024;

/// The local client, or Nomad's answer on an agent without one.
pub(crate) fn local_client(s: &ClientState) -> Result<&Arc<dyn NodeClient>, ApiError> {
    s.client
        .as_ref()
        .ok_or_else(|| ApiError::bad_request("node is not running a Nomad Client"))
}

/// The directory of an allocation this node runs.
pub(crate) fn local_alloc_dir(s: &ClientState, alloc_id: &str) -> Result<AllocDir, ApiError> {
    let client = local_client(s)?;
    if alloc_id.is_empty() {
        return Err(ApiError::bad_request("must provide a valid alloc id"));
    }
    let Some(root) = client.alloc_dir(alloc_id) else {
        return Err(not_on_this_node(s, client, alloc_id));
    };
    alloc_dir_at(&root, alloc_id)
}

/// The answer about an allocation the local client does not have. Calls for allocations of
/// other nodes never get here (`client_api` sends them on), so it is unknown.
pub(crate) fn not_on_this_node(
    _s: &ClientState,
    _client: &Arc<dyn NodeClient>,
    alloc_id: &str,
) -> ApiError {
    ApiError::not_found(format!("Unknown allocation \"{alloc_id}\""))
}

/// Rebuilds the [`AllocDir`] whose root the client reported, which by the client's layout is
/// `<data_dir>/alloc/<alloc_id>`.
fn alloc_dir_at(root: &Path, alloc_id: &str) -> Result<AllocDir, ApiError> {
    let data_dir = root
        .parent()
        .filter(|parent| parent.file_name() == Some(OsStr::new("alloc")))
        .and_then(Path::parent);
    match data_dir {
        Some(data_dir) if root.file_name() == Some(OsStr::new(alloc_id)) => {
            AllocDir::new(data_dir, alloc_id).map_err(alloc_dir_error)
        }
        _ => Err(ApiError::internal(format!(
            "allocation directory {} is not laid out as <data_dir>/alloc/{alloc_id}",
            root.display()
        ))),
    }
}

pub(crate) fn alloc_dir_error(e: AllocDirError) -> ApiError {
    let status = match &e {
        AllocDirError::NotFound(_) => StatusCode::NOT_FOUND,
        AllocDirError::InvalidAllocId(_)
        | AllocDirError::InvalidTaskName(_)
        | AllocDirError::PathEscapes(_) => StatusCode::BAD_REQUEST,
        AllocDirError::SecretPath(_) => StatusCode::FORBIDDEN,
        AllocDirError::Io { .. } | AllocDirError::Unmount { .. } => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    ApiError::new(status, e.to_string())
}

/// Runs blocking filesystem work off the async threads.
pub(crate) async fn blocking_fs<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::internal(format!("filesystem task failed: {e}")))?
}

fn required_path(params: &Params) -> Result<String, ApiError> {
    params
        .get("path")
        .filter(|p| !p.is_empty())
        .cloned()
        .ok_or_else(|| ApiError::bad_request("must provide a file name"))
}

/// `GET /v1/client/fs/ls/:alloc?path=`: a directory listing (`/` when no path).
pub(crate) async fn ls(
    State(s): State<ClientState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let dir = local_alloc_dir(&s, &alloc_id)?;
    let path = params
        .get("path")
        .filter(|p| !p.is_empty())
        .cloned()
        .unwrap_or_else(|| "/".to_string());
    let entries = blocking_fs(move || dir.list(&path).map_err(alloc_dir_error)).await?;
    respond_json(&entries, None, pretty)
}

/// `GET /v1/client/fs/stat/:alloc?path=`: one file's description.
pub(crate) async fn stat(
    State(s): State<ClientState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let dir = local_alloc_dir(&s, &alloc_id)?;
    let path = required_path(&params)?;
    let info = blocking_fs(move || dir.stat(&path).map_err(alloc_dir_error)).await?;
    respond_json(&info, None, pretty)
}

/// `GET /v1/client/fs/cat/:alloc?path=`: a file's contents, streamed.
pub(crate) async fn cat(
    State(s): State<ClientState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let dir = local_alloc_dir(&s, &alloc_id)?;
    let path = required_path(&params)?;
    let (host_path, content_type) = blocking_fs(move || {
        let info = dir.stat(&path).map_err(alloc_dir_error)?;
        if info.is_dir {
            return Err(ApiError::bad_request(format!(
                "file {path:?} is a directory"
            )));
        }
        let host_path = dir.resolve_readable(&path).map_err(alloc_dir_error)?;
        Ok((host_path, info.content_type))
    })
    .await?;
    let mut file = tokio::fs::File::open(&host_path)
        .await
        .map_err(|e| ApiError::internal(format!("cannot open {}: {e}", host_path.display())))?;
    let (tx, body) = channel_body();
    tokio::spawn(async move {
        let mut buf = vec![0u8; CAT_CHUNK];
        loop {
            let piece = match file.read(&mut buf).await {
                Ok(0) => return,
                Ok(n) => Ok(Bytes::copy_from_slice(&buf[..n])),
                Err(e) => Err(e),
            };
            let failed = piece.is_err();
            if tx.send(piece).await.is_err() || failed {
                return;
            }
        }
    });
    let content_type = if content_type.is_empty() {
        "application/octet-stream".to_string()
    } else {
        content_type
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// `GET /v1/client/stats[?node_id=]`: the node's host statistics (calls naming another node
/// are sent there before they get here).
pub(crate) async fn stats(
    State(s): State<ClientState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let client = local_client(&s)?;
    if let Some(node_id) = params.get("node_id").filter(|n| !n.is_empty())
        && *node_id != client.node_id()
    {
        return Err(ApiError::not_found(format!("Unknown node {node_id}")));
    }
    respond_json(&client.stats(), None, pretty)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use drover_client::allocdir::AllocDir;
    use serde_json::json;

    use crate::test_support::{TestApi, api_with_client};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ls_stat_and_cat_serve_the_alloc_dir() {
        let (api, data_dir) = api_with_client("node-1").await;
        let dir = AllocDir::new(&data_dir, "a1").unwrap();
        dir.build(&["web".to_string()]).unwrap();
        let task = dir.task_dir("web").unwrap();
        std::fs::write(task.local_dir.join("hello.txt"), "hello world\n").unwrap();
        std::fs::write(task.secrets_dir.join("token"), "s3cret").unwrap();

        let r = api.get("/v1/client/fs/ls/a1").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let names: Vec<_> = r
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["Name"].clone())
            .collect();
        assert_eq!(names, vec![json!("alloc"), json!("web")]);

        let r = api.get("/v1/client/fs/ls/a1?path=/web/local").await;
        assert_eq!(r.json()[0]["Name"], "hello.txt");
        assert_eq!(r.json()[0]["IsDir"], false);

        let r = api
            .get("/v1/client/fs/stat/a1?path=web/local/hello.txt")
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(r.json()["Size"], 12);

        let r = api
            .get("/v1/client/fs/cat/a1?path=web/local/hello.txt")
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(r.text(), "hello world\n");

        let r = api.get("/v1/client/fs/cat/a1?path=web/secrets/token").await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert!(!r.text().contains("s3cret"));
        let r = api.get("/v1/client/fs/cat/a1?path=web/local").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "file \"web/local\" is a directory")
        );
        let r = api
            .get("/v1/client/fs/cat/a1?path=../../../etc/passwd")
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let r = api.get("/v1/client/fs/stat/a1?path=web/missing").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        let r = api.get("/v1/client/fs/stat/a1").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "must provide a file name")
        );
        let r = api.get("/v1/client/fs/ls/unknown").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "Unknown allocation \"unknown\"")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_endpoints_need_a_client() {
        let api = TestApi::start().await;
        let r = api.get("/v1/client/fs/ls/a1").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "node is not running a Nomad Client"
            )
        );
        assert_eq!(
            api.get("/v1/client/stats").await.status,
            StatusCode::BAD_REQUEST
        );

        let (api, _) = api_with_client("node-1").await;
        let r = api.get("/v1/client/stats").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.json()["Uptime"], 42);
        assert_eq!(
            api.get("/v1/client/stats?node_id=node-1").await.status,
            StatusCode::OK
        );
        let r = api.get("/v1/client/stats?node_id=other").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "Unknown node other")
        );
        let health = api.get("/v1/agent/health").await.json();
        assert_eq!(health["client"], json!({"ok": true, "message": "ok"}));
    }
}
