//! `GET /v1/event/stream?topic=Job:web&topic=Node&index=N&namespace=NS`: this server's event
//! broker as Nomad streams it, newline-delimited JSON, a `{"Index": N, "Events": [...]}` line
//! per Raft index that has events the request selects, and `{}` every 10 s while nothing
//! happens. Without `topic` every topic is streamed; `namespace` defaults to `default`, `*`
//! selects all (events of objects without a namespace, nodes, always pass). With ACLs, a
//! token sees the events of the namespaces where it may `read-job`, node events with `node`
//! read, and the rest (ACL, operator topics) only as management.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_server::events::{BatchJson, Event};

use crate::AppState;
use crate::error::ApiError;

/// Time between the empty frames that keep an idle stream alive (Nomad's).
const HEARTBEAT: Duration = Duration::from_secs(10);

/// How often a stream with ACLs on looks at its token again: a token deleted or expired
/// ends the stream, a policy changed applies to what follows (Nomad closes such streams).
const TOKEN_RECHECK: Duration = Duration::from_secs(1);

/// The topics Nomad streams. Drover does not emit all of them yet (no ACL roles, node pools,
/// drains or operator events); asking for those is valid and simply selects nothing.
const TOPICS: &[&str] = &[
    "*",
    "ACLToken",
    "ACLPolicy",
    "ACLRole",
    "Allocation",
    "CSIPlugin",
    "CSIVolume",
    "Deployment",
    "Evaluation",
    "Job",
    "Node",
    "NodeDrain",
    "NodePool",
    "Operator",
    "Service",
];

/// What a request selects.
#[derive(Debug, PartialEq)]
struct Filter {
    /// Topic -> keys (`*`: any). Empty: every topic.
    topics: BTreeMap<String, Vec<String>>,
    namespace: String,
    index: u64,
    /// The token's permissions with ACLs on.
    acl: Option<drover_server::acl::Acl>,
}

impl Filter {
    fn parse(query: Option<&str>) -> Result<Filter, ApiError> {
        let mut filter = Filter {
            topics: BTreeMap::new(),
            namespace: "default".into(),
            index: 0,
            acl: None,
        };
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v)
                .ok_or_else(|| ApiError::bad_request(format!("invalid encoding in {k:?}")))?;
            match k {
                "topic" => {
                    let (topic, key) = v.split_once(':').unwrap_or((&v, "*"));
                    if !TOPICS.contains(&topic) {
                        return Err(ApiError::bad_request(format!(
                            "Invalid topic {topic:?}: one of {}",
                            TOPICS.join(", ")
                        )));
                    }
                    let key = if key.is_empty() { "*" } else { key };
                    filter
                        .topics
                        .entry(topic.to_string())
                        .or_default()
                        .push(key.to_string());
                }
                "index" => {
                    filter.index = v.parse().map_err(|_| {
                        ApiError::bad_request(format!("Unable to parse index: {v:?}"))
                    })?;
                }
                "namespace" if !v.is_empty() => filter.namespace = v,
                _ => {}
            }
        }
        Ok(filter)
    }

    fn selects(&self, e: &Event) -> bool {
        let ns = e.namespace();
        if !ns.is_empty() && self.namespace != "*" && ns != self.namespace {
            return false;
        }
        if let Some(acl) = self.acl.as_ref().filter(|a| !a.is_management()) {
            let allowed = match e.topic() {
                "Node" | "NodeDrain" | "NodePool" => acl.allow_node_read(),
                "CSIPlugin" => acl.allow_plugin_read(),
                "CSIVolume" => acl
                    .allow_namespace_operation(ns, drover_server::acl::policy::CAP_CSI_READ_VOLUME),
                _ if !ns.is_empty() => {
                    acl.allow_namespace_operation(ns, drover_server::acl::policy::CAP_READ_JOB)
                }
                _ => false,
            };
            if !allowed {
                return false;
            }
        }
        if self.topics.is_empty() {
            return true;
        }
        [e.topic(), "*"].iter().any(|topic| {
            self.topics
                .get(*topic)
                .is_some_and(|keys| keys.iter().any(|k| e.matches_key(k)))
        })
    }
}

/// `%XX` and `+` as a query string encodes them.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `GET /v1/event/stream`.
pub(crate) async fn stream(
    State(s): State<AppState>,
    perms: Option<axum::Extension<drover_server::acl::Permissions>>,
    headers: axum::http::HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let acl = perms.and_then(|axum::Extension(p)| p.acl().cloned());
    let token = acl
        .as_ref()
        .map(|_| crate::authorize::secret_of(&headers, query.as_deref()));
    match start(&s, query.as_deref(), acl, token) {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// The token's permissions as they are now; `None` once it is gone or expired.
fn recheck(s: &AppState, secret: Option<&str>) -> Option<drover_server::acl::Acl> {
    match s.server.resolve_token(secret) {
        Ok(p) => p.acl().cloned(),
        Err(_) => None,
    }
}

fn start(
    s: &AppState,
    query: Option<&str>,
    acl: Option<drover_server::acl::Acl>,
    // With ACLs on: the secret the request came with (`Some(None)`: anonymous).
    token: Option<Option<String>>,
) -> Result<Response, ApiError> {
    let mut filter = Filter::parse(query)?;
    filter.acl = acl;
    let state = s.clone();
    let broker = s.server.events();
    if !broker.enabled() {
        return Err(ApiError::bad_request(
            "Event broker is disabled on this server (enable_event_broker = false or event_buffer_size = 0)",
        ));
    }
    let mut sub = broker.subscribe(filter.index);
    let (tx, body) = crate::stream::channel_body();
    tokio::spawn(async move {
        let mut idle = Duration::ZERO;
        loop {
            let mut out = String::new();
            let wait = if token.is_some() {
                TOKEN_RECHECK
            } else {
                HEARTBEAT
            };
            let next = tokio::time::timeout(wait, sub.next()).await;
            if let Some(secret) = &token {
                match recheck(&state, secret.as_deref()) {
                    Some(acl) => filter.acl = Some(acl),
                    None => {
                        tracing::debug!("event stream ended: its token is gone or expired");
                        return;
                    }
                }
            }
            match next {
                Err(_) => {
                    idle += wait;
                    if idle < HEARTBEAT {
                        continue;
                    }
                    idle = Duration::ZERO;
                    out.push_str("{}\n");
                }
                Ok(batches) => {
                    idle = Duration::ZERO;
                    for batch in &batches {
                        let events: Vec<&Event> =
                            batch.events.iter().filter(|e| filter.selects(e)).collect();
                        if events.is_empty() {
                            continue;
                        }
                        let line = BatchJson {
                            index: batch.index,
                            events,
                        };
                        match serde_json::to_string(&line) {
                            Ok(text) => {
                                out.push_str(&text);
                                out.push('\n');
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "an event could not be encoded")
                            }
                        }
                    }
                    if out.is_empty() {
                        continue;
                    }
                }
            }
            if tx.send(Ok(out.into())).await.is_err() {
                // The caller went away.
                return;
            }
        }
    });
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use drover_server::events::Payload;
    use drover_structs::{Allocation, Node};

    use super::*;

    fn alloc_event(job: &str, ns: &str) -> Event {
        Event {
            index: 1,
            event_type: "PlanResult",
            payload: Payload::Allocation(Arc::new(Allocation {
                id: "a1".into(),
                job_id: job.into(),
                namespace: ns.into(),
                ..Default::default()
            })),
        }
    }

    fn node_event() -> Event {
        Event {
            index: 1,
            event_type: "NodeRegistration",
            payload: Payload::Node(Arc::new(Node {
                id: "n1".into(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn topics_repeat_and_keys_default_to_any() {
        let f = Filter::parse(Some("topic=Job%3Aweb&topic=Node&index=12&namespace=*")).unwrap();
        assert_eq!(f.index, 12);
        assert_eq!(f.namespace, "*");
        assert_eq!(f.topics["Job"], vec!["web".to_string()]);
        assert_eq!(f.topics["Node"], vec!["*".to_string()]);
    }

    #[test]
    fn an_unknown_topic_or_a_bad_index_is_a_bad_request() {
        assert!(Filter::parse(Some("topic=Jobs")).is_err());
        assert!(Filter::parse(Some("index=x")).is_err());
    }

    #[test]
    fn selection_follows_topic_key_and_namespace() {
        let everything = Filter::parse(None).unwrap();
        assert!(everything.selects(&alloc_event("web", "default")));
        assert!(!everything.selects(&alloc_event("web", "prod")));
        assert!(everything.selects(&node_event()));

        let allocs_of_web = Filter::parse(Some("topic=Allocation:web")).unwrap();
        assert!(allocs_of_web.selects(&alloc_event("web", "default")));
        assert!(!allocs_of_web.selects(&alloc_event("api", "default")));
        assert!(!allocs_of_web.selects(&node_event()));

        let any_ns = Filter::parse(Some("topic=*&namespace=*")).unwrap();
        assert!(any_ns.selects(&alloc_event("web", "prod")));
    }

    #[test]
    fn a_token_sees_the_events_of_what_it_may_read() {
        use drover_server::acl::policy::parse_policy;
        let policy = parse_policy("namespace \"dev\" {\n  policy = \"read\"\n}\n").unwrap();
        let mut f = Filter::parse(Some("namespace=*")).unwrap();
        f.acl = Some(drover_server::acl::Acl::from_policies(&[policy]));
        assert!(f.selects(&alloc_event("web", "dev")));
        assert!(!f.selects(&alloc_event("web", "default")));
        assert!(!f.selects(&node_event()), "no node rule");
        f.acl = Some(drover_server::acl::Acl::management());
        assert!(f.selects(&alloc_event("web", "default")) && f.selects(&node_event()));
    }
}
