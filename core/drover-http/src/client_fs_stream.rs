//! `/v1/client/fs/readat/:alloc` (a file's bytes from an offset, at most a limit) and
//! `/v1/client/fs/stream/:alloc` (a file from an offset as Nomad's StreamFrame JSON, following
//! what is appended, with Nomad's "file truncated" and "file deleted" events), answered by the
//! node that runs the allocation (`client_api` brings the call there).

use std::io::{self, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use drover_client::logs::{LogOrigin, StreamFrame, base64_encode};
use tokio::fs::File;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use crate::client_api::ClientState;
use crate::client_fs::{alloc_dir_error, blocking_fs, local_alloc_dir};
use crate::error::ApiError;
use crate::logs::parse_bool_field;
use crate::query::Params;
use crate::stream::{Piece, channel_body};

/// Largest piece of a file read and framed at once (Nomad's `streamFrameSize`).
const FRAME_SIZE: usize = 64 * 1024;
/// How often a follower at the end of the file looks at it again (the poll interval of the
/// file watcher Nomad uses, hpcloud/tail's polling watcher).
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// While following in JSON with nothing new, an empty frame (`{}`) goes out this often, as
/// Nomad's stream framer sends heartbeats; it also reveals a client that went away.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// Nomad's file events.
const DELETE_EVENT: &str = "file deleted";
const TRUNCATE_EVENT: &str = "file truncated";

/// Go's `strconv.ParseInt(s, 10, 64)` with its error text.
fn parse_go_int(s: &str) -> Result<i64, String> {
    s.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!("strconv.ParseInt: parsing {s:?}: {why}")
    })
}

/// An offset into a file, refused when negative (a file has no bytes before its start).
fn parse_offset(raw: &str) -> Result<u64, ApiError> {
    let n = parse_go_int(raw)
        .map_err(|e| ApiError::bad_request(format!("error parsing offset: {e}")))?;
    u64::try_from(n)
        .map_err(|_| ApiError::bad_request(format!("error parsing offset: {n} is negative")))
}

fn required_path(params: &Params) -> Result<String, ApiError> {
    params
        .get("path")
        .filter(|p| !p.is_empty())
        .cloned()
        .ok_or_else(|| ApiError::bad_request("must provide a file name"))
}

/// The query of a readat request, checked as Nomad checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReadAtQuery {
    path: String,
    offset: u64,
    /// At most this many bytes; Nomad reads to the end for a limit of 0 or less.
    limit: Option<u64>,
}

impl ReadAtQuery {
    fn parse(params: &Params) -> Result<Self, ApiError> {
        let path = required_path(params)?;
        // Nomad requires the offset: an empty one fails to parse.
        let offset = parse_offset(params.get("offset").map_or("", String::as_str))?;
        let limit = match params.get("limit").filter(|l| !l.is_empty()) {
            None => None,
            Some(l) => {
                let n = parse_go_int(l)
                    .map_err(|e| ApiError::bad_request(format!("error parsing limit: {e}")))?;
                u64::try_from(n).ok().filter(|n| *n > 0)
            }
        };
        Ok(ReadAtQuery {
            path,
            offset,
            limit,
        })
    }
}

/// The query of a stream request, checked as Nomad checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StreamQuery {
    path: String,
    offset: u64,
    origin: LogOrigin,
    /// Nomad follows unless told otherwise.
    follow: bool,
    /// Raw bytes instead of frames (what Nomad's client endpoint does for cat and readat).
    plain: bool,
}

impl StreamQuery {
    fn parse(params: &Params) -> Result<Self, ApiError> {
        let path = required_path(params)?;
        let follow = match params.get("follow").filter(|f| !f.is_empty()) {
            None => true,
            Some(_) => parse_bool_field(params, "follow")?,
        };
        let plain = parse_bool_field(params, "plain")?;
        let offset = match params.get("offset").filter(|o| !o.is_empty()) {
            None => 0,
            Some(o) => parse_offset(o)?,
        };
        let origin = match params.get("origin").map(String::as_str) {
            None | Some("") | Some("start") => LogOrigin::Start,
            Some("end") => LogOrigin::End,
            Some(_) => return Err(ApiError::bad_request("origin must be start or end")),
        };
        Ok(StreamQuery {
            path,
            offset,
            origin,
            follow,
            plain,
        })
    }
}

/// A readable regular file of the allocation: its host path, size and sniffed content type.
struct Target {
    host_path: PathBuf,
    size: u64,
    content_type: String,
}

/// Resolves `rel` in the allocation's directory as Nomad's stream does: it must exist, not be a
/// directory, and not be inside a task's secrets.
async fn readable_file(s: &ClientState, alloc_id: &str, rel: &str) -> Result<Target, ApiError> {
    let dir = local_alloc_dir(s, alloc_id)?;
    let rel = rel.to_string();
    blocking_fs(move || {
        let info = dir.stat(&rel).map_err(alloc_dir_error)?;
        if info.is_dir {
            return Err(ApiError::bad_request(format!(
                "file {rel:?} is a directory"
            )));
        }
        let host_path = dir.resolve_readable(&rel).map_err(alloc_dir_error)?;
        Ok(Target {
            host_path,
            size: info.size,
            content_type: info.content_type,
        })
    })
    .await
}

async fn open_at(path: &PathBuf, offset: u64) -> Result<File, ApiError> {
    let cannot = |e: io::Error| ApiError::internal(format!("cannot read {}: {e}", path.display()));
    let mut file = File::open(path).await.map_err(cannot)?;
    file.seek(SeekFrom::Start(offset)).await.map_err(cannot)?;
    Ok(file)
}

/// `GET /v1/client/fs/readat/:alloc?path=&offset=&limit=`: the file's bytes from `offset`, at
/// most `limit` of them.
pub(crate) async fn readat(
    State(s): State<ClientState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let q = ReadAtQuery::parse(&params)?;
    let target = readable_file(&s, &alloc_id, &q.path).await?;
    let file = open_at(&target.host_path, q.offset).await?;
    let (tx, body) = channel_body();
    let streamer = FileStreamer {
        host_path: target.host_path,
        rel_path: q.path,
        file,
        offset: q.offset,
        remaining: q.limit,
        follow: false,
        encoding: Encoding::Plain,
        out: tx,
    };
    tokio::spawn(streamer.run());
    let content_type = if target.content_type.is_empty() {
        "application/octet-stream".to_string()
    } else {
        target.content_type
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// `GET /v1/client/fs/stream/:alloc?path=&offset=&origin=&follow=&plain=`: the file from the
/// offset as StreamFrame JSON (raw with `plain=true`), following it unless `follow=false`.
pub(crate) async fn stream(
    State(s): State<ClientState>,
    UrlPath(alloc_id): UrlPath<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let q = StreamQuery::parse(&params)?;
    let target = readable_file(&s, &alloc_id, &q.path).await?;
    let offset = match q.origin {
        LogOrigin::Start => q.offset,
        // Nomad counts back from the size and stops at the start.
        LogOrigin::End => target.size.saturating_sub(q.offset),
    };
    let file = open_at(&target.host_path, offset).await?;
    let (tx, body) = channel_body();
    let encoding = if q.plain {
        Encoding::Plain
    } else {
        Encoding::Frames
    };
    let streamer = FileStreamer {
        host_path: target.host_path,
        rel_path: q.path,
        file,
        offset,
        remaining: None,
        follow: q.follow,
        encoding,
        out: tx,
    };
    tokio::spawn(streamer.run());
    let content_type = match encoding {
        Encoding::Plain => "text/plain; charset=utf-8",
        Encoding::Frames => "application/json",
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Plain,
    /// One JSON `StreamFrame` per piece, each followed by a newline (Go's json.Encoder).
    Frames,
}

/// What a follower at the end of the file saw when it looked again.
enum Change {
    Grew,
    Truncated,
    Deleted,
}

/// The identity of a file, to tell it from another one put at its path (Go's `os.SameFile`).
fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// Sends one file to a response body: from `offset` to its end (or `remaining` bytes), and
/// when following, what is appended later, until the file goes or the client does.
struct FileStreamer {
    host_path: PathBuf,
    /// The path as the request named it, which frames carry in `File` (as Nomad's do).
    rel_path: String,
    file: File,
    offset: u64,
    remaining: Option<u64>,
    follow: bool,
    encoding: Encoding,
    out: mpsc::Sender<Piece>,
}

/// The client went away (or an error piece was sent): the stream is over.
struct Gone;

impl FileStreamer {
    async fn run(mut self) {
        // Either way the stream is over: the client left, or was told of the error.
        let _: Result<(), Gone> = self.stream().await;
    }

    async fn send(&self, piece: Piece) -> Result<(), Gone> {
        let failed = piece.is_err();
        if self.out.send(piece).await.is_err() || failed {
            return Err(Gone);
        }
        Ok(())
    }

    /// Sends `data` (ending at `self.offset`) with `event`: a frame, or the bytes when plain.
    async fn send_data(&self, data: &[u8], event: &str) -> Result<(), Gone> {
        match self.encoding {
            Encoding::Plain if data.is_empty() => Ok(()),
            Encoding::Plain => self.send(Ok(Bytes::copy_from_slice(data))).await,
            Encoding::Frames => {
                let frame = StreamFrame {
                    offset: self.offset,
                    data: base64_encode(data),
                    file: &self.rel_path,
                    file_event: event,
                };
                let piece = serde_json::to_string(&frame)
                    .map(|json| Bytes::from(json + "\n"))
                    .map_err(io::Error::other);
                self.send(piece).await
            }
        }
    }

    async fn fail(&self, e: io::Error) -> Gone {
        let what = format!("cannot read {}: {e}", self.host_path.display());
        let _ = self.send(Err(io::Error::new(e.kind(), what))).await;
        Gone
    }

    async fn stream(&mut self) -> Result<(), Gone> {
        let start = match tokio::fs::metadata(&self.host_path).await {
            Ok(m) => identity(&m),
            Err(e) => return Err(self.fail(e).await),
        };
        let mut watched = start;
        let mut buf = vec![0u8; FRAME_SIZE];
        let mut event = "";
        loop {
            let want = match self.remaining {
                Some(0) => return Ok(()),
                Some(left) => usize::try_from(left).map_or(FRAME_SIZE, |l| l.min(FRAME_SIZE)),
                None => FRAME_SIZE,
            };
            let n = match self.file.read(&mut buf[..want]).await {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.fail(e).await),
            };
            // `n` is at most FRAME_SIZE, far below u64::MAX.
            let read = n as u64;
            self.offset += read;
            self.remaining = self.remaining.map(|r| r.saturating_sub(read));
            if n > 0 || !event.is_empty() {
                self.send_data(&buf[..n], event).await?;
                event = "";
            }
            if n > 0 {
                continue;
            }
            if !self.follow {
                return Ok(());
            }
            match self.wait_for_change(watched).await? {
                Change::Grew => {}
                Change::Truncated => {
                    // Start over at the new beginning; the next frame says why.
                    match open_at(&self.host_path, 0).await {
                        Ok(file) => self.file = file,
                        Err(e) => {
                            let _ = self.send(Err(io::Error::other(e.message))).await;
                            return Err(Gone);
                        }
                    }
                    if let Ok(m) = tokio::fs::metadata(&self.host_path).await {
                        watched = identity(&m);
                    }
                    self.offset = 0;
                    event = TRUNCATE_EVENT;
                }
                Change::Deleted => {
                    self.send_data(&[], DELETE_EVENT).await?;
                    return Ok(());
                }
            }
        }
    }

    /// Polls the file until it changes, sending heartbeats while framing. A file that is gone
    /// or was replaced by another is deleted (as Nomad's watcher says); one shorter than what
    /// was read is truncated.
    async fn wait_for_change(&self, watched: (u64, u64)) -> Result<Change, Gone> {
        let mut last_sent = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(POLL_INTERVAL) => {}
                () = self.out.closed() => return Err(Gone),
            }
            match tokio::fs::metadata(&self.host_path).await {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Change::Deleted),
                Err(e) => return Err(self.fail(e).await),
                Ok(m) if identity(&m) != watched => return Ok(Change::Deleted),
                Ok(m) if m.len() < self.offset => return Ok(Change::Truncated),
                Ok(m) if m.len() > self.offset => return Ok(Change::Grew),
                Ok(_) => {}
            }
            if self.encoding == Encoding::Frames && last_sent.elapsed() >= HEARTBEAT_INTERVAL {
                self.send(Ok(Bytes::from_static(b"{}\n"))).await?;
                last_sent = Instant::now();
            }
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
    fn stream_query_follows_from_the_start_by_default() {
        let q = StreamQuery::parse(&params(&[("path", "web/local/f")])).unwrap();
        assert_eq!(
            q,
            StreamQuery {
                path: "web/local/f".into(),
                offset: 0,
                origin: LogOrigin::Start,
                follow: true,
                plain: false,
            }
        );
        let q = StreamQuery::parse(&params(&[
            ("path", "f"),
            ("follow", "false"),
            ("origin", "end"),
            ("offset", "7"),
        ]))
        .unwrap();
        assert_eq!((q.follow, q.origin, q.offset), (false, LogOrigin::End, 7));
    }

    #[test]
    fn readat_limits_of_zero_or_less_read_to_the_end() {
        let q = |limit: &str| {
            ReadAtQuery::parse(&params(&[("path", "f"), ("offset", "1"), ("limit", limit)]))
                .unwrap()
                .limit
        };
        assert_eq!(q("5"), Some(5));
        assert_eq!(q("0"), None);
        assert_eq!(q("-1"), None);
        assert_eq!(q(""), None);
    }

    #[test]
    fn query_errors_are_nomads() {
        let stream = |p: &[(&str, &str)]| StreamQuery::parse(&params(p)).unwrap_err().message;
        let readat = |p: &[(&str, &str)]| ReadAtQuery::parse(&params(p)).unwrap_err().message;
        assert_eq!(stream(&[("offset", "1")]), "must provide a file name");
        assert_eq!(
            stream(&[("path", "f"), ("origin", "middle")]),
            "origin must be start or end"
        );
        assert_eq!(
            stream(&[("path", "f"), ("offset", "x1")]),
            "error parsing offset: strconv.ParseInt: parsing \"x1\": invalid syntax"
        );
        assert_eq!(
            stream(&[("path", "f"), ("follow", "maybe")]),
            "failed to parse follow field to boolean: strconv.ParseBool: parsing \"maybe\": invalid syntax"
        );
        assert_eq!(readat(&[("offset", "1")]), "must provide a file name");
        assert_eq!(
            readat(&[("path", "f")]),
            "error parsing offset: strconv.ParseInt: parsing \"\": invalid syntax"
        );
        assert_eq!(
            readat(&[("path", "f"), ("offset", "99999999999999999999")]),
            "error parsing offset: strconv.ParseInt: parsing \"99999999999999999999\": value out of range"
        );
        assert_eq!(
            readat(&[("path", "f"), ("offset", "-3")]),
            "error parsing offset: -3 is negative"
        );
        assert_eq!(
            readat(&[("path", "f"), ("offset", "0"), ("limit", "ten")]),
            "error parsing limit: strconv.ParseInt: parsing \"ten\": invalid syntax"
        );
    }
}

#[cfg(test)]
mod api_tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::{Method, StatusCode};
    use drover_client::allocdir::{AllocDir, TaskDir};
    use http_body_util::BodyExt;
    use serde_json::{Value, json};

    use crate::test_support::{TestApi, api_with_client};

    /// An API with a client running allocation `a1` with task `web`.
    async fn api_with_alloc() -> (TestApi, TaskDir) {
        let (api, data_dir) = api_with_client("node-1").await;
        let dir = AllocDir::new(&data_dir, "a1").unwrap();
        dir.build(&["web".to_string()]).unwrap();
        let task = dir.task_dir("web").unwrap();
        (api, task)
    }

    fn frames(text: &str) -> Vec<Value> {
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Reads a streamed body line by line.
    struct Lines {
        body: Body,
        pending: Vec<u8>,
    }

    impl Lines {
        async fn next(&mut self) -> Option<Value> {
            loop {
                if let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.pending.drain(..=end).collect();
                    return Some(serde_json::from_slice(&line).unwrap());
                }
                let frame = tokio::time::timeout(Duration::from_secs(10), self.body.frame())
                    .await
                    .expect("a frame in time")?
                    .expect("no error");
                if let Ok(data) = frame.into_data() {
                    self.pending.extend_from_slice(&data);
                }
            }
        }

        /// The next frame that is not a heartbeat.
        async fn next_data(&mut self) -> Option<Value> {
            loop {
                let frame = self.next().await?;
                if frame != json!({}) {
                    return Some(frame);
                }
            }
        }
    }

    async fn follow(api: &TestApi, uri: &str) -> Lines {
        let response = api.raw(Method::GET, uri, None).await;
        assert_eq!(response.status(), StatusCode::OK);
        Lines {
            body: response.into_body(),
            pending: Vec::new(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readat_serves_the_bytes_from_the_offset_up_to_the_limit() {
        let (api, task) = api_with_alloc().await;
        std::fs::write(task.local_dir.join("f.txt"), "0123456789").unwrap();
        let read = async |query: &str| {
            let r = api
                .get(&format!(
                    "/v1/client/fs/readat/a1?path=web/local/f.txt&{query}"
                ))
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text());
            r.text()
        };
        assert_eq!(read("offset=2&limit=3").await, "234");
        assert_eq!(read("offset=2").await, "23456789");
        assert_eq!(read("offset=0&limit=-1").await, "0123456789");
        assert_eq!(read("offset=8&limit=100").await, "89");
        assert_eq!(read("offset=50").await, "");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readat_and_stream_refuse_bad_input() {
        let (api, task) = api_with_alloc().await;
        std::fs::write(task.local_dir.join("f.txt"), "data").unwrap();
        std::fs::write(task.secrets_dir.join("token"), "s3cret").unwrap();
        let check = async |uri: &str, status: StatusCode, text: &str| {
            let r = api.get(uri).await;
            assert_eq!((r.status, r.text().as_str()), (status, text), "{uri}");
        };
        for kind in ["readat", "stream"] {
            let base = format!("/v1/client/fs/{kind}/a1");
            check(
                &format!("{base}?offset=0"),
                StatusCode::BAD_REQUEST,
                "must provide a file name",
            )
            .await;
            check(
                &format!("{base}?path=web/local&offset=0"),
                StatusCode::BAD_REQUEST,
                "file \"web/local\" is a directory",
            )
            .await;
            check(
                &format!("{base}?path=web/local/f.txt&offset=-1"),
                StatusCode::BAD_REQUEST,
                "error parsing offset: -1 is negative",
            )
            .await;
            check(
                &format!("{base}?path=web/local/nope&offset=0"),
                StatusCode::NOT_FOUND,
                "path \"web/local/nope\" does not exist in the allocation directory",
            )
            .await;
            check(
                &format!("/v1/client/fs/{kind}/unknown?path=f&offset=0"),
                StatusCode::NOT_FOUND,
                "Unknown allocation \"unknown\"",
            )
            .await;
            let r = api
                .get(&format!("{base}?path=../../../../etc/passwd&offset=0"))
                .await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
            assert!(r.text().contains("escapes the allocation directory"));
            let r = api
                .get(&format!(
                    "{base}?path=web/secrets/token&offset=0&follow=false"
                ))
                .await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
            assert!(!r.text().contains("s3cret"));
        }
        check(
            "/v1/client/fs/readat/a1?path=web/local/f.txt",
            StatusCode::BAD_REQUEST,
            "error parsing offset: strconv.ParseInt: parsing \"\": invalid syntax",
        )
        .await;
        check(
            "/v1/client/fs/stream/a1?path=web/local/f.txt&origin=middle",
            StatusCode::BAD_REQUEST,
            "origin must be start or end",
        )
        .await;
        let api = TestApi::start().await;
        let r = api.get("/v1/client/fs/stream/a1?path=f").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "node is not running a Nomad Client"
            )
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stream_without_follow_sends_frames_to_the_end() {
        let (api, task) = api_with_alloc().await;
        std::fs::write(task.local_dir.join("f.txt"), "hello world\n").unwrap();
        let r = api
            .get("/v1/client/fs/stream/a1?path=web/local/f.txt&follow=false")
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/json")
        );
        assert_eq!(
            frames(&r.text()),
            vec![json!({"Offset": 12, "Data": "aGVsbG8gd29ybGQK", "File": "web/local/f.txt"})]
        );

        let r = api
            .get("/v1/client/fs/stream/a1?path=/web/local/f.txt&follow=false&origin=end&offset=6")
            .await;
        assert_eq!(
            frames(&r.text()),
            vec![json!({"Offset": 12, "Data": "d29ybGQK", "File": "/web/local/f.txt"})]
        );
        // Further back than the start is the start.
        let r = api
            .get("/v1/client/fs/stream/a1?path=web/local/f.txt&follow=false&origin=end&offset=500&plain=true")
            .await;
        assert_eq!(r.text(), "hello world\n");
        let r = api
            .get("/v1/client/fs/stream/a1?path=web/local/f.txt&follow=false&offset=6&plain=true")
            .await;
        assert_eq!(r.text(), "world\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_followed_file_streams_what_is_appended_with_heartbeats_between() {
        let (api, task) = api_with_alloc().await;
        let path = task.local_dir.join("grow.txt");
        std::fs::write(&path, "one\n").unwrap();
        let mut lines = follow(&api, "/v1/client/fs/stream/a1?path=web/local/grow.txt").await;
        assert_eq!(
            lines.next().await,
            Some(json!({"Offset": 4, "Data": "b25lCg==", "File": "web/local/grow.txt"}))
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"two\n").unwrap();
        assert_eq!(
            lines.next_data().await,
            Some(json!({"Offset": 8, "Data": "dHdvCg==", "File": "web/local/grow.txt"}))
        );
        assert_eq!(
            lines.next().await,
            Some(json!({})),
            "a heartbeat while idle"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_followed_file_reports_truncation_then_deletion() {
        let (api, task) = api_with_alloc().await;
        let path = task.local_dir.join("f.txt");
        std::fs::write(&path, "a long first line\n").unwrap();
        let mut lines = follow(&api, "/v1/client/fs/stream/a1?path=web/local/f.txt").await;
        assert_eq!(lines.next_data().await.unwrap()["Offset"], 18);

        // Truncated in place (same file) to less than was read: the new start is written
        // first, over the old one (the size stays), then the rest is cut off at once.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut &f, b"new\n").unwrap();
        f.set_len(4).unwrap();
        drop(f);
        assert_eq!(
            lines.next_data().await,
            Some(json!({
                "Offset": 4,
                "Data": "bmV3Cg==",
                "File": "web/local/f.txt",
                "FileEvent": "file truncated"
            }))
        );

        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            lines.next_data().await,
            Some(json!({"Offset": 4, "File": "web/local/f.txt", "FileEvent": "file deleted"}))
        );
        assert_eq!(
            lines.next_data().await,
            None,
            "the stream ends with the file"
        );
    }
}
