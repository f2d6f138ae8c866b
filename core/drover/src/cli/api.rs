//! The CLI's only way to the cluster: blocking HTTP calls to the agent's Nomad-compatible /v1
//! API. Every request carries the namespace, region and token given on the command line.

use std::fmt;
use std::io::Read;
use std::time::Duration;

use serde::de::DeserializeOwned;
use ureq::http::Response;

/// Largest JSON body read into memory; job and allocation lists stay far below it.
const MAX_JSON_BODY: u64 = 512 * 1024 * 1024;

/// Where and as whom to talk to the agent.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// Base address, e.g. `http://127.0.0.1:4646`.
    pub address: String,
    pub namespace: Option<String>,
    pub region: Option<String>,
    pub token: Option<String>,
    /// How to speak HTTPS when the address is `https://`.
    pub tls: super::api_tls::HttpsOptions,
}

/// What a query learned besides its body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryMeta {
    /// `X-Nomad-Index`: the raft index the answer reflects (0 when absent).
    pub index: u64,
}

/// Why an API call failed.
#[derive(Debug)]
pub enum ApiError {
    /// The address is not something this build can speak to.
    BadAddress { address: String, reason: String },
    /// No HTTP answer at all: refused connection, unknown host, timeout.
    Unreachable { address: String, reason: String },
    /// The agent answered with a non-2xx status; `body` is its error text.
    Status { code: u16, body: String },
    /// The answer could not be read or decoded.
    Body { path: String, reason: String },
    /// The HTTPS settings could not be used (an unreadable CA file, a key without its
    /// certificate).
    Tls { reason: String },
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::BadAddress { address, reason } => {
                write!(f, "invalid agent address {address:?}: {reason}")
            }
            ApiError::Tls { reason } => write!(f, "TLS: {reason}"),
            ApiError::Unreachable { address, reason } => write!(
                f,
                "cannot reach the Drover agent at {address} ({reason}); is the agent running? \
                 Set --address or DROVER_ADDR to point elsewhere"
            ),
            // The Go api package's wording, which scripts around Nomad grep for.
            ApiError::Status { code, body } => {
                write!(f, "Unexpected response code: {code} ({})", body.trim_end())
            }
            ApiError::Body { path, reason } => write!(f, "invalid response from {path}: {reason}"),
        }
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::Status { code: 404, .. })
    }
}

/// Turns what the user typed into a base URL: `127.0.0.1:4646` gets `http://`, a trailing `/`
/// goes; `http://` and `https://` are spoken.
pub fn normalize_address(raw: &str) -> Result<String, ApiError> {
    let bad = |reason: &str| ApiError::BadAddress {
        address: raw.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(bad("empty address"));
    }
    let (scheme, rest) = match trimmed.split_once("://") {
        Some((s @ ("http" | "https"), rest)) => (s, rest),
        Some(_) => return Err(bad("only http:// and https:// addresses are supported")),
        None => ("http", trimmed),
    };
    let host = rest.trim_end_matches('/');
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    Ok(format!("{scheme}://{host}"))
}

/// Percent-encodes one path segment (job IDs may hold `/`, spaces and the like), as Go's
/// `url.PathEscape` does for the characters that matter.
pub fn escape_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A blocking client for one agent.
pub struct Client {
    conn: Connection,
    agent: ureq::Agent,
    /// Sent with every request (CSI secrets travel in `X-Nomad-CSI-Secrets`).
    headers: Vec<(String, String)>,
}

impl Client {
    pub fn new(mut conn: Connection) -> Result<Client, ApiError> {
        conn.address = normalize_address(&conn.address)?;
        let mut config = ureq::Agent::config_builder()
            // Non-2xx answers carry Nomad's error text in the body; read it ourselves.
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)));
        if conn.address.starts_with("https://") {
            config = config.tls_config(conn.tls.tls_config()?);
        }
        let config = config.build();
        Ok(Client {
            conn,
            agent: config.into(),
            headers: Vec::new(),
        })
    }

    /// Where and as whom this client talks to the agent (for connections of its own: the
    /// websocket of `alloc exec`).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The namespace requests go to when the command names none.
    pub fn namespace(&self) -> Option<&str> {
        self.conn.namespace.as_deref()
    }

    /// A client for the same agent that works in `namespace` (a job file's own namespace).
    pub fn in_namespace(&self, namespace: &str) -> Client {
        let mut conn = self.conn.clone();
        conn.namespace = Some(namespace.to_string());
        Client {
            conn,
            agent: self.agent.clone(),
            headers: self.headers.clone(),
        }
    }

    /// A client for the same agent whose requests go to `region` (a job file's own region).
    pub fn in_region(&self, region: &str) -> Client {
        let mut conn = self.conn.clone();
        conn.region = Some(region.to_string());
        Client {
            conn,
            agent: self.agent.clone(),
            headers: self.headers.clone(),
        }
    }

    /// A client for the same agent that sends header `name` with every request.
    pub fn with_header(&self, name: &str, value: &str) -> Client {
        let mut headers = self.headers.clone();
        headers.push((name.to_string(), value.to_string()));
        Client {
            conn: self.conn.clone(),
            agent: self.agent.clone(),
            headers,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.conn.address)
    }

    /// Adds the connection's namespace, region and token, then the call's own query.
    fn prepare<B>(
        &self,
        mut req: ureq::RequestBuilder<B>,
        query: &[(&str, &str)],
    ) -> ureq::RequestBuilder<B> {
        if let Some(ns) = &self.conn.namespace {
            req = req.query("namespace", ns);
        }
        if let Some(region) = &self.conn.region {
            req = req.query("region", region);
        }
        if let Some(token) = &self.conn.token {
            req = req.header("X-Nomad-Token", token);
        }
        for (name, value) in &self.headers {
            req = req.header(name.as_str(), value.as_str());
        }
        for (k, v) in query {
            req = req.query(*k, *v);
        }
        req
    }

    fn unreachable(&self, e: ureq::Error) -> ApiError {
        if let Some(tls) = super::api_tls::handshake_failure(&e) {
            return ApiError::Tls {
                reason: format!("talking to {}: {tls}", self.conn.address),
            };
        }
        let reason = match e {
            ureq::Error::Io(io) => io.to_string(),
            other => other.to_string(),
        };
        ApiError::Unreachable {
            address: self.conn.address.clone(),
            reason,
        }
    }

    /// GET returning decoded JSON and the query's index.
    pub fn get_json<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<(T, QueryMeta), ApiError> {
        let req = self.prepare(self.agent.get(self.url(path)), query);
        let resp = req.call().map_err(|e| self.unreachable(e))?;
        let meta = QueryMeta {
            index: resp
                .headers()
                .get("X-Nomad-Index")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        };
        Ok((decode_json(path, resp)?, meta))
    }

    /// GET returning the JSON as sent, `null`s included.
    pub fn get_value(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<serde_json::Value, ApiError> {
        let req = self.prepare(self.agent.get(self.url(path)), query);
        let resp = req.call().map_err(|e| self.unreachable(e))?;
        read_json(path, resp)
    }

    /// PUT of a JSON body returning decoded JSON.
    pub fn put_json<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
        body: &serde_json::Value,
    ) -> Result<T, ApiError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ApiError::Body {
            path: path.to_string(),
            reason: format!("encoding request: {e}"),
        })?;
        let req = self
            .prepare(self.agent.put(self.url(path)), query)
            .header("Content-Type", "application/json");
        let resp = req.send(&bytes[..]).map_err(|e| self.unreachable(e))?;
        decode_json(path, resp)
    }

    /// DELETE returning decoded JSON.
    pub fn delete_json<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, ApiError> {
        let req = self.prepare(self.agent.delete(self.url(path)), query);
        let resp = req.call().map_err(|e| self.unreachable(e))?;
        decode_json(path, resp)
    }

    /// GET whose body is read as it arrives (log streaming).
    pub fn get_stream(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<Box<dyn Read + Send>, ApiError> {
        let req = self.prepare(self.agent.get(self.url(path)), query);
        let resp = req.call().map_err(|e| self.unreachable(e))?;
        let resp = check_status(resp)?;
        Ok(Box::new(resp.into_body().into_reader()))
    }
}

/// Passes 2xx responses through; turns others into [`ApiError::Status`] with their body text.
fn check_status(resp: Response<ureq::Body>) -> Result<Response<ureq::Body>, ApiError> {
    let code = resp.status().as_u16();
    if (200..300).contains(&code) {
        return Ok(resp);
    }
    let mut body = resp.into_body();
    let text = body
        .with_config()
        .limit(64 * 1024)
        .lossy_utf8(true)
        .read_to_string()
        .unwrap_or_default();
    Err(ApiError::Status { code, body: text })
}

fn decode_json<T: DeserializeOwned>(path: &str, resp: Response<ureq::Body>) -> Result<T, ApiError> {
    let value = read_json(path, resp)?;
    drover_structs::decode::decode(value, path).map_err(|e| ApiError::Body {
        path: path.to_string(),
        reason: format!("{}: {}", e.path, e.message),
    })
}

/// The body as JSON, `null`s kept (where they mean something, as in dynamic node meta).
fn read_json(path: &str, resp: Response<ureq::Body>) -> Result<serde_json::Value, ApiError> {
    let resp = check_status(resp)?;
    let body_err = |reason: String| ApiError::Body {
        path: path.to_string(),
        reason,
    };
    let bytes = resp
        .into_body()
        .with_config()
        .limit(MAX_JSON_BODY)
        .read_to_vec()
        .map_err(|e| body_err(e.to_string()))?;
    // Some endpoints (`/v1/system/gc`) answer 200 with no body at all.
    let value: serde_json::Value = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).map_err(|e| body_err(e.to_string()))?
    };
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_get_http_scheme_and_lose_trailing_slash() {
        assert_eq!(
            normalize_address("127.0.0.1:4646").unwrap(),
            "http://127.0.0.1:4646"
        );
        assert_eq!(normalize_address("http://h:1/").unwrap(), "http://h:1");
        assert_eq!(normalize_address("https://h:1/").unwrap(), "https://h:1");
        assert!(normalize_address("https://").is_err());
        assert!(normalize_address("").is_err());
        assert!(normalize_address("ftp://h").is_err());
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(escape_segment("web"), "web");
        assert_eq!(
            escape_segment("batch/dispatch-1 x"),
            "batch%2Fdispatch-1%20x"
        );
    }

    #[test]
    fn unreachable_agent_error_names_the_address() {
        let client = Client::new(Connection {
            // Port 1 on loopback: nothing listens there.
            address: "127.0.0.1:1".into(),
            ..Default::default()
        })
        .unwrap();
        let err = client
            .get_json::<serde_json::Value>("/v1/jobs", &[])
            .unwrap_err();
        assert!(matches!(err, ApiError::Unreachable { .. }), "{err}");
        assert!(err.to_string().contains("http://127.0.0.1:1"), "{err}");
    }

    #[test]
    fn status_error_uses_go_api_wording() {
        let err = ApiError::Status {
            code: 404,
            body: "job not found\n".into(),
        };
        assert_eq!(
            err.to_string(),
            "Unexpected response code: 404 (job not found)"
        );
        assert!(err.is_not_found());
    }
}
