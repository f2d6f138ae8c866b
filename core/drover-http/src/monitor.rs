//! `GET /v1/agent/monitor?log_level=&log_json=&plain=`: the agent's own log lines as they
//! are written, as Nomad streams them: JSON stream frames (`{"Data": base64}`), or the raw
//! lines with `plain=true`; hclog's text lines (`2026-11-29T16:24:20.123Z [INFO]  target: msg:
//! k=v`), or hclog's JSON with `log_json=true`.
//!
//! The agent's tracing layer hands every event to [`log_feed`] (the process has one
//! subscriber, so one feed): nothing is formatted unless a monitor listens, and only events
//! at or above the most verbose level a monitor asked for. A monitor may ask for more than
//! the agent writes to its own log (Nomad's `-log-level debug` against an `info` agent).
//! Streaming another node's or server's log (`node_id`, `server_id`) is not supported.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast;

use crate::error::ApiError;

/// One log event, formatted both ways.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub level: tracing::Level,
    /// hclog's text line, newline included.
    pub text: String,
    /// hclog's JSON line, newline included.
    pub json: String,
}

/// Where the agent's log events go to reach monitors.
pub struct LogFeed {
    tx: broadcast::Sender<Arc<LogRecord>>,
    /// The most verbose level a monitor asked for (see [`level_rank`]); 0: nobody listens.
    wanted: AtomicU8,
    watchers: Mutex<BTreeMap<u64, u8>>,
    next_id: AtomicU64,
}

/// Lines a slow monitor may lag behind before it misses some (and is told so).
const FEED_BUFFER: usize = 4096;

/// The process's log feed.
pub fn log_feed() -> &'static LogFeed {
    static FEED: OnceLock<LogFeed> = OnceLock::new();
    FEED.get_or_init(|| LogFeed {
        tx: broadcast::channel(FEED_BUFFER).0,
        wanted: AtomicU8::new(0),
        watchers: Mutex::new(BTreeMap::new()),
        next_id: AtomicU64::new(1),
    })
}

/// 1 (error) to 5 (trace).
pub fn level_rank(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 1,
        tracing::Level::WARN => 2,
        tracing::Level::INFO => 3,
        tracing::Level::DEBUG => 4,
        tracing::Level::TRACE => 5,
    }
}

impl LogFeed {
    /// Whether some monitor wants events of `level` (cheap: the layer asks before formatting).
    pub fn wants(&self, level: tracing::Level) -> bool {
        level_rank(level) <= self.wanted.load(Ordering::Relaxed)
    }

    pub fn publish(&self, record: LogRecord) {
        // No receiver: nobody listens any more; nothing to do.
        let _ = self.tx.send(Arc::new(record));
    }

    fn watch(&self, level: tracing::Level) -> Watch {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let rx = self.tx.subscribe();
        let mut w = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        w.insert(id, level_rank(level));
        self.wanted
            .store(w.values().copied().max().unwrap_or(0), Ordering::Relaxed);
        Watch { id, rx }
    }

    fn unwatch(&self, id: u64) {
        let mut w = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        w.remove(&id);
        self.wanted
            .store(w.values().copied().max().unwrap_or(0), Ordering::Relaxed);
    }
}

struct Watch {
    id: u64,
    rx: broadcast::Receiver<Arc<LogRecord>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        log_feed().unwatch(self.id);
    }
}

/// Nomad's (hclog's) level names, any case.
fn parse_level(text: &str) -> Option<tracing::Level> {
    match text.to_ascii_lowercase().as_str() {
        "" | "info" => Some(tracing::Level::INFO),
        "trace" => Some(tracing::Level::TRACE),
        "debug" => Some(tracing::Level::DEBUG),
        "warn" => Some(tracing::Level::WARN),
        "error" => Some(tracing::Level::ERROR),
        _ => None,
    }
}

fn bool_param(params: &BTreeMap<String, String>, name: &str) -> Result<bool, ApiError> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(false),
        Some(v) => crate::query::parse_go_bool(v)
            .ok_or_else(|| ApiError::bad_request(format!("Unknown option for {name}: {v:?}"))),
    }
}

/// Time between empty frames that keep an idle stream alive (Nomad's frames heartbeat).
const HEARTBEAT: Duration = Duration::from_secs(10);

/// `GET /v1/agent/monitor`.
pub async fn monitor(Query(params): Query<BTreeMap<String, String>>) -> Response {
    match start(&params) {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

fn start(params: &BTreeMap<String, String>) -> Result<Response, ApiError> {
    let raw_level = params.get("log_level").map(String::as_str).unwrap_or("");
    let level = parse_level(raw_level)
        .ok_or_else(|| ApiError::bad_request(format!("Unknown log level: {raw_level}")))?;
    let json = bool_param(params, "log_json")?;
    let plain = bool_param(params, "plain")?;
    for other in ["node_id", "server_id"] {
        if params.get(other).is_some_and(|v| !v.is_empty()) {
            return Err(ApiError::not_implemented(&format!(
                "monitoring another agent's log ({other})"
            )));
        }
    }
    let mut watch = log_feed().watch(level);
    let (tx, body) = crate::stream::channel_body();
    tokio::spawn(async move {
        let rank = level_rank(level);
        loop {
            let next = tokio::time::timeout(HEARTBEAT, watch.rx.recv()).await;
            let mut out = String::new();
            match next {
                Err(_) if !plain => out.push_str("{}"),
                Err(_) => continue,
                Ok(Ok(record)) => {
                    if level_rank(record.level) <= rank {
                        out.push_str(if json { &record.json } else { &record.text });
                    }
                    // Take what else is already there: one frame for a burst.
                    while let Ok(more) = watch.rx.try_recv() {
                        if level_rank(more.level) <= rank {
                            out.push_str(if json { &more.json } else { &more.text });
                        }
                    }
                    if out.is_empty() {
                        continue;
                    }
                    if !plain {
                        out = serde_json::json!({
                            "Data": drover_client::logs::base64_encode(out.as_bytes())
                        })
                        .to_string();
                    }
                }
                Ok(Err(broadcast::error::RecvError::Lagged(n))) => {
                    let note =
                        format!("[monitor: {n} log lines dropped: this monitor read too slowly]\n");
                    out = if plain {
                        note
                    } else {
                        serde_json::json!({"Data": drover_client::logs::base64_encode(note.as_bytes())})
                            .to_string()
                    };
                }
                Ok(Err(broadcast::error::RecvError::Closed)) => return,
            }
            if tx.send(Ok(out.into())).await.is_err() {
                // The client went away.
                return;
            }
        }
    });
    let content_type = if plain {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use axum::extract::Query;
    use axum::http::StatusCode;
    use futures_core::Stream;

    use super::{LogRecord, log_feed, monitor};

    fn params(pairs: &[(&str, &str)]) -> Query<BTreeMap<String, String>> {
        Query(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    async fn next_piece(body: &mut axum::body::BodyDataStream) -> String {
        let piece = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_next(cx)),
        )
        .await
        .expect("a piece in time")
        .expect("the stream goes on")
        .expect("no error");
        String::from_utf8_lossy(&piece).into_owned()
    }

    fn record(level: tracing::Level, text: &str) -> LogRecord {
        LogRecord {
            level,
            text: format!("{text}\n"),
            json: format!("{{\"@message\":\"{text}\"}}\n"),
        }
    }

    /// The feed is the process's: tests that watch it take turns.
    static FEED_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    #[tokio::test]
    async fn a_monitor_streams_lines_at_its_level_and_stops_asking_when_gone() {
        let _turn = FEED_TESTS.lock().await;
        let response = monitor(params(&[("log_level", "warn"), ("plain", "true")])).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(log_feed().wants(tracing::Level::WARN));
        let mut body = response.into_body().into_data_stream();
        log_feed().publish(record(tracing::Level::INFO, "too chatty"));
        log_feed().publish(record(tracing::Level::WARN, "careful"));
        assert_eq!(next_piece(&mut body).await, "careful\n");
        drop(body);
        // The watcher goes with the stream once the producer notices.
        log_feed().publish(record(tracing::Level::ERROR, "bye"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while log_feed().wants(tracing::Level::ERROR) {
            assert!(std::time::Instant::now() < deadline, "the watcher stayed");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn monitor_frames_carry_json_lines_as_base64_data() {
        let _turn = FEED_TESTS.lock().await;
        let response = monitor(params(&[("log_level", "debug"), ("log_json", "true")])).await;
        let mut body = response.into_body().into_data_stream();
        log_feed().publish(record(tracing::Level::DEBUG, "hello"));
        let frame: serde_json::Value =
            serde_json::from_str(&next_piece(&mut body).await).expect("a JSON frame");
        let data = frame["Data"].as_str().expect("Data");
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64");
        assert_eq!(
            String::from_utf8_lossy(&decoded),
            "{\"@message\":\"hello\"}\n"
        );
    }

    #[tokio::test]
    async fn unknown_levels_and_other_agents_are_refused() {
        let r = monitor(params(&[("log_level", "loud")])).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let r = monitor(params(&[("node_id", "abc")])).await;
        assert_eq!(r.status(), StatusCode::NOT_IMPLEMENTED);
    }
}
