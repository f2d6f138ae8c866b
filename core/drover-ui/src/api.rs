//! The agent's own `/v1` API, called in process with the browser's token.
//!
//! Why in process and not straight from the state: a page then shows exactly what the API
//! shows, and every read passes the same ACL check an API client's would (a token that may
//! not read a namespace sees the same 403 here).

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use serde_json::Value;
use tower_service::Service;

/// Largest API answer a page reads (a job with thousands of allocations stays far below).
const MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// How long a live update waits on a blocking query before the page asks again.
pub const LIVE_WAIT: Duration = Duration::from_secs(30);

/// An API answer: its JSON (or what it was read into) and its `X-Nomad-Index` (0 when the
/// endpoint has none).
#[derive(Debug, Clone)]
pub struct Answer<T = Value> {
    pub value: T,
    pub index: u64,
}

/// An answer's bytes before they are read.
struct RawAnswer {
    bytes: axum::body::Bytes,
    index: u64,
    is_json: bool,
}

/// An API call that did not answer 2xx: the status and the API's own message.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub path: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.path, self.message.trim())
    }
}

/// The API router the pages read through.
#[derive(Clone)]
pub struct Api {
    router: Router,
}

impl Api {
    pub fn new(router: Router) -> Api {
        Api { router }
    }

    /// `GET path` as the holder of `token`.
    pub async fn get(&self, path: &str, token: Option<&str>) -> Result<Answer, ApiError> {
        let raw = self.call(Method::GET, path, token, Body::empty()).await?;
        // Only JSON answers are parsed: a file read through `fs/cat` may well start with `{`.
        let value = if raw.is_json {
            serde_json::from_slice(&raw.bytes).map_err(|e| invalid_json(path, e))?
        } else {
            Value::String(String::from_utf8_lossy(&raw.bytes).into_owned())
        };
        Ok(Answer {
            value,
            index: raw.index,
        })
    }

    /// `GET path`, read straight into `T`: for long lists, where a page needs a few fields of
    /// each entry and building a whole `Value` of them would cost most of the page's time.
    pub async fn get_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        token: Option<&str>,
    ) -> Result<Answer<T>, ApiError> {
        let raw = self.call(Method::GET, path, token, Body::empty()).await?;
        let value = serde_json::from_slice(&raw.bytes).map_err(|e| invalid_json(path, e))?;
        Ok(Answer {
            value,
            index: raw.index,
        })
    }

    /// `GET path` as a blocking query: answers once the path's index passes `index`, or after
    /// [`LIVE_WAIT`] with the same data.
    pub async fn wait(&self, path: &str, index: u64, token: Option<&str>) -> Result<u64, ApiError> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let blocking = format!("{path}{sep}index={index}&wait={}s", LIVE_WAIT.as_secs());
        // Only the index matters: the body is dropped unread (the re-render reads it again).
        self.call_for_index(&blocking, token).await
    }

    async fn call_for_index(&self, path: &str, token: Option<&str>) -> Result<u64, ApiError> {
        let response = self.send(Method::GET, path, token, Body::empty()).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(ApiError {
                status: status.as_u16(),
                message: "the watched read failed".into(),
                path: path.to_string(),
            });
        }
        Ok(index_of(&response))
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Body,
    ) -> Result<axum::response::Response, ApiError> {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            request = request.header("X-Nomad-Token", token);
        }
        let request = request.body(body).map_err(|e| ApiError {
            status: 400,
            message: format!("bad request path: {e}"),
            path: path.to_string(),
        })?;
        // A Router is always ready (its poll_ready is Ready(Ok)), so calling it at once keeps
        // the tower contract; its error type is Infallible.
        match self.router.clone().call(request).await {
            Ok(r) => Ok(r),
            Err(never) => match never {},
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Body,
    ) -> Result<RawAnswer, ApiError> {
        let fail = |status: u16, message: String| ApiError {
            status,
            message,
            path: path.to_string(),
        };
        let response = self.send(method, path, token, body).await?;
        let status = response.status();
        let index = index_of(&response);
        let is_json = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let bytes = axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES)
            .await
            .map_err(|e| fail(502, format!("reading the answer: {e}")))?;
        if !status.is_success() {
            return Err(fail(
                status.as_u16(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
        Ok(RawAnswer {
            bytes,
            index,
            is_json,
        })
    }
}

fn index_of(response: &axum::response::Response) -> u64 {
    response
        .headers()
        .get("X-Nomad-Index")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn invalid_json(path: &str, e: serde_json::Error) -> ApiError {
    ApiError {
        status: 502,
        message: format!("the API answered JSON this page cannot read: {e}"),
        path: path.to_string(),
    }
}

/// `s` escaped for a URL path segment or query value (RFC 3986 unreserved kept).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    fn api() -> Api {
        Api::new(
            Router::new()
                .route(
                    "/v1/jobs",
                    get(|| async { ([("X-Nomad-Index", "7")], axum::Json(serde_json::json!([]))) }),
                )
                .route(
                    "/v1/secret",
                    get(|headers: axum::http::HeaderMap| async move {
                        use axum::http::StatusCode;
                        use axum::response::IntoResponse;
                        if headers.get("X-Nomad-Token").is_some_and(|t| t == "s3cret") {
                            (StatusCode::OK, axum::Json("ok")).into_response()
                        } else {
                            (StatusCode::FORBIDDEN, "Permission denied").into_response()
                        }
                    }),
                ),
        )
    }

    #[tokio::test]
    async fn answers_carry_the_json_and_the_index() {
        let a = api().get("/v1/jobs", None).await.unwrap();
        assert_eq!(a.value, serde_json::json!([]));
        assert_eq!(a.index, 7);
    }

    #[tokio::test]
    async fn the_token_goes_with_the_call_and_refusals_keep_the_api_message() {
        let api = api();
        let e = api.get("/v1/secret", Some("wrong")).await.unwrap_err();
        assert_eq!(e.status, 403);
        assert_eq!(e.message, "Permission denied");
        let ok = api.get("/v1/secret", Some("s3cret")).await.unwrap();
        assert_eq!(ok.value, serde_json::json!("ok"));
    }

    #[test]
    fn encoding_keeps_unreserved_and_escapes_the_rest() {
        assert_eq!(encode("web-1_a.b~"), "web-1_a.b~");
        assert_eq!(encode("a b/c@d"), "a%20b%2Fc%40d");
    }
}
