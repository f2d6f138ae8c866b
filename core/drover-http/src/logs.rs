//! `/v1/client/fs/logs/:alloc`: a task's stdout or stderr, as raw bytes (`plain=true`) or as
//! Nomad's stream of JSON frames, once or following new output until the client goes away.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_client::logs::{
    LogChunk, LogCursor, LogError, LogKind, LogOrigin, follow_logs, read_log_chunk, seek_logs,
};
use tokio::sync::mpsc;

use crate::client_api::ClientState;
use crate::client_fs::{blocking_fs, local_alloc_dir};
use crate::error::ApiError;
use crate::query::{Params, parse_go_bool};
use crate::stream::{Piece, channel_body};

/// While following in JSON mode with nothing new, an empty frame (`{}`) goes out this often, as
/// Nomad's stream framer sends heartbeats; it also reveals a client that went away.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// Largest piece of log read at once (Nomad's frame size).
const LOG_CHUNK: usize = 64 * 1024;

/// The query of a logs request, checked as Nomad checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LogsQuery {
    task: String,
    kind: LogKind,
    follow: bool,
    plain: bool,
    origin: LogOrigin,
    offset: u64,
}

/// A boolean query field in Go's `strconv.ParseBool` syntax; absent or empty is false.
pub(crate) fn parse_bool_field(params: &Params, name: &str) -> Result<bool, ApiError> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(false),
        Some(v) => parse_go_bool(v).ok_or_else(|| {
            ApiError::bad_request(format!(
                "failed to parse {name} field to boolean: strconv.ParseBool: parsing {v:?}: invalid syntax"
            ))
        }),
    }
}

impl LogsQuery {
    fn parse(params: &Params) -> Result<Self, ApiError> {
        let task = params
            .get("task")
            .filter(|t| !t.is_empty())
            .cloned()
            .ok_or_else(|| ApiError::bad_request("must provide task name"))?;
        let follow = parse_bool_field(params, "follow")?;
        let plain = parse_bool_field(params, "plain")?;
        let kind = match params.get("type").map(String::as_str) {
            Some("stdout") => LogKind::Stdout,
            Some("stderr") => LogKind::Stderr,
            _ => {
                return Err(ApiError::bad_request(
                    "must provide log type (stdout/stderr)",
                ));
            }
        };
        let origin = match params.get("origin").map(String::as_str) {
            None | Some("") | Some("start") => LogOrigin::Start,
            Some("end") => LogOrigin::End,
            Some(_) => return Err(ApiError::bad_request("origin must be start or end")),
        };
        let offset = match params.get("offset").filter(|o| !o.is_empty()) {
            None => 0,
            Some(o) => o
                .parse::<u64>()
                .map_err(|e| ApiError::bad_request(format!("error parsing offset: {e}")))?,
        };
        Ok(LogsQuery {
            task,
            kind,
            follow,
            plain,
            origin,
            offset,
        })
    }
}

fn log_error(e: LogError) -> ApiError {
    let status = match &e {
        LogError::NotFound { .. } => StatusCode::NOT_FOUND,
        LogError::InvalidKind(_) | LogError::InvalidOrigin(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, e.to_string())
}

/// `GET /v1/client/fs/logs/:alloc?task=&type=&follow=&plain=&origin=&offset=`.
pub(crate) async fn logs(
    State(s): State<ClientState>,
    Path(alloc_id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let q = LogsQuery::parse(&params)?;
    let dir = local_alloc_dir(&s, &alloc_id)?;
    // Every task of the allocation has its directory from the start.
    if !dir.path().join(&q.task).is_dir() {
        return Err(ApiError::bad_request(format!(
            "unknown task name {:?}",
            q.task
        )));
    }
    let log_dir = dir.log_dir();
    let start = {
        let (log_dir, task, kind, origin, offset, follow) = (
            log_dir.clone(),
            q.task.clone(),
            q.kind,
            q.origin,
            q.offset,
            q.follow,
        );
        blocking_fs(
            move || match seek_logs(&log_dir, &task, kind, origin, offset) {
                Ok(cursor) => Ok(cursor),
                // A follower waits for the task's first output, as Nomad's does.
                Err(LogError::NotFound { .. }) if follow => Ok(LogCursor::default()),
                Err(e) => Err(log_error(e)),
            },
        )
        .await?
    };

    let (chunk_tx, chunk_rx) = mpsc::channel::<LogChunk>(4);
    let (tx, body) = channel_body();
    let encoding = if q.plain {
        Encoding::Plain
    } else {
        Encoding::Frames
    };
    if q.follow {
        let producer = follow_logs(
            log_dir,
            q.task,
            q.kind,
            start,
            chunk_tx,
            std::future::pending(),
        );
        tokio::spawn(pump(producer, chunk_rx, tx, encoding, true));
    } else {
        let producer = read_to_end(log_dir, q.task, q.kind, start, chunk_tx);
        tokio::spawn(pump(producer, chunk_rx, tx, encoding, false));
    }
    let content_type = match encoding {
        Encoding::Plain => "text/plain; charset=utf-8",
        Encoding::Frames => "application/json",
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Plain,
    /// One JSON `StreamFrame` per chunk, each followed by a newline (Go's json.Encoder).
    Frames,
}

/// Sends the stream from `cursor` to its current end.
async fn read_to_end(
    log_dir: PathBuf,
    task: String,
    kind: LogKind,
    mut cursor: LogCursor,
    tx: mpsc::Sender<LogChunk>,
) -> Result<(), LogError> {
    loop {
        let (dir, name) = (log_dir.clone(), task.clone());
        let (chunk, at) = tokio::task::spawn_blocking(move || {
            read_log_chunk(&dir, &name, kind, &mut cursor, LOG_CHUNK).map(|c| (c, cursor))
        })
        .await
        .map_err(|e| LogError::Io {
            op: "read logs in",
            path: log_dir.clone(),
            source: io::Error::other(e),
        })??;
        cursor = at;
        let Some(chunk) = chunk else {
            return Ok(());
        };
        if tx.send(chunk).await.is_err() {
            return Ok(());
        }
    }
}

/// Drives `producer` and turns its chunks into body pieces until it ends (and its chunks are
/// sent) or the client goes away. A producer error aborts the body.
async fn pump(
    producer: impl Future<Output = Result<(), LogError>>,
    mut chunks: mpsc::Receiver<LogChunk>,
    out: mpsc::Sender<Piece>,
    encoding: Encoding,
    heartbeat: bool,
) {
    tokio::pin!(producer);
    let mut producing = true;
    loop {
        let piece = tokio::select! {
            result = &mut producer, if producing => {
                producing = false;
                match result {
                    Ok(()) => continue,
                    Err(e) => Err(io::Error::other(e.to_string())),
                }
            }
            chunk = chunks.recv() => match chunk {
                None => return,
                Some(chunk) => Ok(match encoding {
                    Encoding::Plain => Bytes::from(chunk.data),
                    Encoding::Frames => Bytes::from(chunk.frame_json() + "\n"),
                }),
            },
            () = tokio::time::sleep(HEARTBEAT_INTERVAL), if heartbeat && encoding == Encoding::Frames => {
                Ok(Bytes::from_static(b"{}\n"))
            }
            () = out.closed() => return,
        };
        let failed = piece.is_err();
        if out.send(piece).await.is_err() || failed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn logs_query_defaults_to_start_without_follow() {
        let q = LogsQuery::parse(&params(&[("task", "web"), ("type", "stderr")])).unwrap();
        assert_eq!(
            q,
            LogsQuery {
                task: "web".into(),
                kind: LogKind::Stderr,
                follow: false,
                plain: false,
                origin: LogOrigin::Start,
                offset: 0
            }
        );
    }

    #[test]
    fn logs_query_errors_are_nomads() {
        let msg = |p: &[(&str, &str)]| LogsQuery::parse(&params(p)).unwrap_err().message;
        assert_eq!(msg(&[("type", "stdout")]), "must provide task name");
        assert_eq!(
            msg(&[("task", "t")]),
            "must provide log type (stdout/stderr)"
        );
        assert_eq!(
            msg(&[("task", "t"), ("type", "stdout"), ("origin", "middle")]),
            "origin must be start or end"
        );
        assert!(
            msg(&[("task", "t"), ("type", "stdout"), ("offset", "-1")])
                .starts_with("error parsing offset")
        );
        assert!(
            msg(&[("task", "t"), ("type", "stdout"), ("follow", "maybe")])
                .starts_with("failed to parse follow field")
        );
    }
}

#[cfg(test)]
mod api_tests {
    use std::io::Write;
    use std::time::Duration;

    use axum::http::{Method, StatusCode};
    use drover_client::allocdir::AllocDir;
    use http_body_util::BodyExt;

    use crate::test_support::api_with_client;

    fn write_log(dir: &AllocDir, name: &str, data: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.log_dir().join(name))
            .unwrap();
        f.write_all(data.as_bytes()).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn logs_come_plain_or_as_frames() {
        let (api, data_dir) = api_with_client("node-1").await;
        let dir = AllocDir::new(&data_dir, "a1").unwrap();
        dir.build(&["web".to_string()]).unwrap();
        write_log(&dir, "web.stdout.0", "hello ");
        write_log(&dir, "web.stdout.1", "world\n");

        let r = api
            .get("/v1/client/fs/logs/a1?task=web&type=stdout&plain=true")
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(r.text(), "hello world\n");

        let r = api
            .get("/v1/client/fs/logs/a1?task=web&type=stdout&plain=true&origin=end&offset=6")
            .await;
        assert_eq!(r.text(), "world\n");

        let r = api.get("/v1/client/fs/logs/a1?task=web&type=stdout").await;
        assert_eq!(r.status, StatusCode::OK);
        let frames: Vec<serde_json::Value> = r
            .text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            frames,
            vec![
                serde_json::json!({"Offset": 6, "Data": "aGVsbG8g", "File": "alloc/logs/web.stdout.0"}),
                serde_json::json!({"Offset": 6, "Data": "d29ybGQK", "File": "alloc/logs/web.stdout.1"}),
            ]
        );

        let r = api.get("/v1/client/fs/logs/a1?task=web&type=stderr").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
        assert_eq!(
            r.text(),
            "log entry for task \"web\" and log type \"stderr\" not found"
        );
        let r = api.get("/v1/client/fs/logs/a1?type=stdout").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "must provide task name")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn follow_streams_new_output() {
        let (api, data_dir) = api_with_client("node-1").await;
        let dir = AllocDir::new(&data_dir, "a1").unwrap();
        dir.build(&["web".to_string()]).unwrap();
        write_log(&dir, "web.stdout.0", "one\n");

        let response = api
            .raw(
                Method::GET,
                "/v1/client/fs/logs/a1?task=web&type=stdout&plain=true&follow=true",
                None,
            )
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let mut received = Vec::new();
        let mut wait_for = async |received: &mut Vec<u8>, want: &[u8]| {
            while !received.ends_with(want) {
                let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
                    .await
                    .expect("data in time")
                    .expect("stream open")
                    .expect("no error");
                if let Ok(data) = frame.into_data() {
                    received.extend_from_slice(&data);
                }
            }
        };
        wait_for(&mut received, b"one\n").await;
        write_log(&dir, "web.stdout.0", "two\n");
        wait_for(&mut received, b"two\n").await;
        assert_eq!(received, b"one\ntwo\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn framed_follow_sends_heartbeats_while_idle() {
        let (api, data_dir) = api_with_client("node-1").await;
        let dir = AllocDir::new(&data_dir, "a1").unwrap();
        dir.build(&["web".to_string()]).unwrap();
        let response = api
            .raw(
                Method::GET,
                "/v1/client/fs/logs/a1?task=web&type=stderr&follow=true",
                None,
            )
            .await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "a follower waits for the first output"
        );
        let mut body = response.into_body();
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("heartbeat in time")
            .expect("stream open")
            .expect("no error");
        assert_eq!(frame.into_data().unwrap().as_ref(), b"{}\n");
    }
}

#[cfg(test)]
mod disconnect_tests {
    use std::time::{Duration, Instant};

    use drover_client::allocdir::AllocDir;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::test_support::api_with_client;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_ends_when_its_client_disconnects() {
        let (api, data_dir) = api_with_client("node-1").await;
        let dir = AllocDir::new(&data_dir, "a1").unwrap();
        dir.build(&["web".to_string()]).unwrap();
        std::fs::write(dir.log_dir().join("web.stdout.0"), "one\n").unwrap();

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(crate::serve(
            listener,
            api.router.clone(),
            None,
            async move {
                let _ = stop_rx.await;
            },
        ));
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        conn.write_all(
            b"GET /v1/client/fs/logs/a1?task=web&type=stdout&plain=true&follow=true HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .await
        .unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !seen.windows(4).any(|w| w == b"one\n") {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "stream ended early");
            seen.extend_from_slice(&buf[..n]);
        }
        drop(conn);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        stop_tx.send(()).unwrap();
        serving.await.unwrap().unwrap();
        // The connection (and with it the body, whose drop stops the follower) is gone:
        // shutdown has nothing to wait for. A live stream would hold it for the whole grace.
        assert!(
            started.elapsed() < crate::SHUTDOWN_GRACE / 2,
            "the followed stream outlived its client"
        );
    }
}
