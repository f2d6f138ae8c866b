//! ACL enforcement for the `/v1` API of a server agent: every request's token (Nomad's
//! `X-Nomad-Token`, `Authorization: Bearer`, or `?token=`) is resolved by the server, and the
//! request is let through only with the permission Nomad checks for its endpoint: a namespace
//! capability in the request's namespace (the job's own for registrations, the allocation's
//! for allocation and client calls), or a `node`, `agent`, `operator` or `plugin` level.
//! What this table does not name needs a management token: a new endpoint is closed until
//! its rule is written here. The resolved permissions ride on the request (an extension) so
//! list endpoints can leave out the namespaces the token may not see.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use drover_server::acl::policy as cap;
use drover_server::acl::{PERMISSION_DENIED, Permissions};

use crate::AppState;
use crate::error::ApiError;

/// What an endpoint needs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Need {
    /// Anyone, token or not (bootstrap, health, leader, regions).
    Nothing,
    /// A token that resolves (its own self).
    Token,
    Management,
    /// A capability in the namespace the query names (`*`: in some namespace; the handler
    /// filters).
    Namespace(&'static str),
    /// A capability in the namespace of the job in the body (registration, plan).
    JobBody(&'static str),
    /// A capability in the namespace of every volume in the body (register, create).
    VolumeBody(&'static str),
    /// A capability in the namespace of the allocation the path names.
    Alloc(&'static str),
    /// A capability in the namespace of the evaluation the path names.
    Eval(&'static str),
    /// A capability in the namespace of the deployment the path names (its last segment).
    Deployment(&'static str),
    /// Any capability in the namespace the path names (reading a namespace).
    NamespaceNamed,
    NodeRead,
    NodeWrite,
    AgentRead,
    AgentWrite,
    OperatorRead,
    OperatorWrite,
    PluginList,
    PluginRead,
}

fn need(method: &Method, path: &str) -> Need {
    use Need::*;
    let read = method == Method::GET || method == Method::HEAD;
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match seg.as_slice() {
        ["v1", "acl", "bootstrap"] => Nothing,
        ["v1", "acl", "token", "self"] => Token,
        ["v1", "acl", ..] => Management,
        ["v1", "agent", "health"] | ["v1", "status", ..] | ["v1", "regions"] => Nothing,
        ["v1", "metrics"] => Nothing,
        // Any token (or none): the stream leaves out what the token may not read.
        ["v1", "event", "stream"] => Token,
        // Any token: the results leave out what the token may not read.
        ["v1", "search", ..] => Token,
        ["v1", "agent", "join"] | ["v1", "agent", "force-leave"] => AgentWrite,
        ["v1", "agent", "members"] => NodeRead,
        ["v1", "agent", "pprof", ..] => AgentWrite,
        ["v1", "agent", ..] => AgentRead,
        ["v1", "jobs"] if read => Namespace(cap::CAP_LIST_JOBS),
        ["v1", "jobs"] => JobBody(cap::CAP_SUBMIT_JOB),
        ["v1", "jobs", "parse"] => Namespace(cap::CAP_PARSE_JOB),
        ["v1", "validate", "job"] => JobBody(cap::CAP_READ_JOB),
        ["v1", "job", rest @ ..] => job_need(method, rest),
        ["v1", "allocations"] => Namespace(cap::CAP_READ_JOB),
        // Nomad's service endpoints: read-job to read, submit-job to delete.
        ["v1", "services"] => Namespace(cap::CAP_READ_JOB),
        ["v1", "connect", "intentions", ..] if read => Namespace(cap::CAP_READ_JOB),
        ["v1", "connect", "intentions", ..] => Namespace(cap::CAP_SUBMIT_JOB),
        ["v1", "service", _] if read => Namespace(cap::CAP_READ_JOB),
        ["v1", "service", _, _] => Namespace(cap::CAP_SUBMIT_JOB),
        ["v1", "allocation", _, "stop"] => Alloc(cap::CAP_ALLOC_LIFECYCLE),
        ["v1", "allocation", ..] => Alloc(cap::CAP_READ_JOB),
        ["v1", "evaluations"] => Namespace(cap::CAP_READ_JOB),
        ["v1", "evaluation", ..] => Eval(cap::CAP_READ_JOB),
        ["v1", "deployments"] => Namespace(cap::CAP_READ_JOB),
        ["v1", "deployment", "allocations", _] => Deployment(cap::CAP_READ_JOB),
        ["v1", "deployment", _] if read => Deployment(cap::CAP_READ_JOB),
        ["v1", "deployment", _, _] => Deployment(cap::CAP_SUBMIT_JOB),
        ["v1", "scaling", "policies"] => Namespace(cap::CAP_LIST_SCALING_POLICIES),
        ["v1", "scaling", "policy", _] => Namespace(cap::CAP_READ_SCALING_POLICY),
        ["v1", "nodes"] => NodeRead,
        ["v1", "node", ..] if read => NodeRead,
        ["v1", "node", ..] => NodeWrite,
        // Per variable, by its namespace and path: the handlers check (lists filter).
        ["v1", "vars"] | ["v1", "var", ..] => Token,
        ["v1", "namespaces"] => Nothing,
        ["v1", "namespace", _] if read => NamespaceNamed,
        ["v1", "operator", "snapshot"] => Management,
        ["v1", "operator", ..] if read => OperatorRead,
        ["v1", "operator", ..] => OperatorWrite,
        ["v1", "volumes"] => Namespace(cap::CAP_CSI_LIST_VOLUME),
        ["v1", "volume", "csi", _, "snapshot"]
        | ["v1", "volumes", "snapshot"]
        | ["v1", "volumes", "external"] => Namespace(cap::CAP_CSI_LIST_VOLUME),
        ["v1", "volume", ..] if read => Namespace(cap::CAP_CSI_READ_VOLUME),
        // Registration and creation: the volumes' own namespaces, as Nomad checks them.
        ["v1", "volume", "csi", _] | ["v1", "volume", "csi", _, "create"]
            if method != Method::DELETE =>
        {
            VolumeBody(cap::CAP_CSI_WRITE_VOLUME)
        }
        ["v1", "volume", ..] => Namespace(cap::CAP_CSI_WRITE_VOLUME),
        ["v1", "plugins"] => PluginList,
        ["v1", "plugin", ..] => PluginRead,
        ["v1", "client", "fs", "logs", _] => Alloc(cap::CAP_READ_LOGS),
        ["v1", "client", "fs", _, _] => Alloc(cap::CAP_READ_FS),
        ["v1", "client", "allocation", _, "exec"] => Alloc(cap::CAP_ALLOC_EXEC),
        ["v1", "client", "allocation", _, "stats" | "checks"] => Alloc(cap::CAP_READ_JOB),
        ["v1", "client", "allocation", _, _] => Alloc(cap::CAP_ALLOC_LIFECYCLE),
        ["v1", "client", "stats"] | ["v1", "client", "metadata"] if read => NodeRead,
        ["v1", "client", "gc"] | ["v1", "client", "metadata"] => NodeWrite,
        _ => Management,
    }
}

fn job_need(method: &Method, rest: &[&str]) -> Need {
    use Need::*;
    let read = method == Method::GET || method == Method::HEAD;
    let last = rest.last().copied().unwrap_or_default();
    if read {
        return match last {
            "scale" => Namespace(cap::CAP_READ_JOB_SCALING),
            _ => Namespace(cap::CAP_READ_JOB),
        };
    }
    if method == Method::DELETE {
        return Namespace(cap::CAP_SUBMIT_JOB);
    }
    match last {
        "plan" => JobBody(cap::CAP_SUBMIT_JOB),
        "dispatch" => Namespace(cap::CAP_DISPATCH_JOB),
        "scale" => Namespace(cap::CAP_SCALE_JOB),
        "revert" | "stable" | "evaluate" | "force" => Namespace(cap::CAP_SUBMIT_JOB),
        // `PUT /v1/job/:id`: a registration.
        _ => JobBody(cap::CAP_SUBMIT_JOB),
    }
}

/// The request's secret: `X-Nomad-Token`, then `Authorization: Bearer`, then `?token=`.
pub(crate) fn secret_of(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    if let Some(v) = headers.get("X-Nomad-Token").and_then(|v| v.to_str().ok()) {
        return Some(v.trim().to_string());
    }
    if let Some(v) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(v.trim().to_string());
    }
    query_param(query, "token")
}

fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query?).ok()?;
    pairs.into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// The namespace the query names (`default` when none).
fn query_namespace(query: Option<&str>) -> String {
    query_param(query, "namespace")
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| drover_structs::DEFAULT_NAMESPACE.to_string())
}

fn denied() -> Response {
    ApiError::new(StatusCode::FORBIDDEN, PERMISSION_DENIED).into_response()
}

/// The list endpoints whose handlers filter `namespace=*` by the token's permissions.
const FILTERED_LISTS: &[&str] = &[
    "/v1/jobs",
    "/v1/services",
    "/v1/allocations",
    "/v1/evaluations",
    "/v1/deployments",
];

/// Bodies read to find a job's namespace are at most this big (the API's own limit).
const MAX_BODY: usize = crate::MAX_BODY_BYTES;

pub(crate) async fn layer(State(s): State<AppState>, mut request: Request, next: Next) -> Response {
    if !s.server.acl_enabled() {
        request.extensions_mut().insert(Permissions::Unrestricted);
        return next.run(request).await;
    }
    let query = request.uri().query().map(str::to_string);
    let required = need(request.method(), request.uri().path());
    let secret = secret_of(request.headers(), query.as_deref());
    let perms = match s.server.resolve_token(secret.as_deref()) {
        Ok(p) => p,
        // Without ACLs every call resolves; with them, a bad token fails every call but
        // the ones anyone may make.
        Err(e) => {
            if required == Need::Nothing {
                Permissions::Acl(std::sync::Arc::new(drover_server::acl::Acl::default()))
            } else {
                return ApiError::from(e).into_response();
            }
        }
    };
    let (mut parts, body) = request.into_parts();
    let mut body = body;
    if let Permissions::Acl(acl) = &perms {
        let ns = query_namespace(query.as_deref());
        let allowed = match &required {
            Need::Nothing | Need::Token => true,
            Need::Management => acl.is_management(),
            // Lists that leave out what the token may not see take `*` from any token that
            // sees something; other endpoints answer `*` for management only.
            Need::Namespace(c) if ns == "*" => {
                if FILTERED_LISTS.contains(&parts.uri.path()) {
                    acl.allow_namespace_operation("*", c)
                } else {
                    acl.is_management()
                }
            }
            Need::Namespace(c) => acl.allow_namespace_operation(&ns, c),
            Need::JobBody(c) | Need::VolumeBody(c) => {
                let bytes = match to_bytes(body, MAX_BODY).await {
                    Ok(b) => b,
                    Err(e) => {
                        return ApiError::bad_request(format!("reading the body: {e}"))
                            .into_response();
                    }
                };
                let doc = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
                body = Body::from(bytes);
                body_namespaces(doc.as_ref(), &required, &ns)
                    .iter()
                    .all(|n| acl.allow_namespace_operation(n, c))
            }
            Need::Alloc(c) | Need::Eval(c) | Need::Deployment(c) => {
                let snap = s.server.snapshot();
                let object_ns = match &required {
                    Need::Alloc(_) => alloc_id_in(parts.uri.path())
                        .and_then(|id| snap.alloc(id))
                        .map(|a| a.namespace.clone()),
                    Need::Eval(_) => segment(parts.uri.path(), 2)
                        .and_then(|id| snap.eval(id))
                        .map(|e| e.namespace.clone()),
                    _ => parts
                        .uri
                        .path()
                        .rsplit('/')
                        .next()
                        .and_then(|id| snap.deployment(id))
                        .map(|d| d.namespace.clone()),
                };
                match object_ns {
                    Some(ns) => acl.allow_namespace_operation(&ns, c),
                    // An object this server does not know: only management may learn so.
                    None => acl.is_management(),
                }
            }
            Need::NamespaceNamed => {
                let name = parts.uri.path().rsplit('/').next().unwrap_or_default();
                acl.allow_namespace(name)
            }
            Need::NodeRead => acl.allow_node_read(),
            Need::NodeWrite => acl.allow_node_write(),
            Need::AgentRead => acl.allow_agent_read(),
            Need::AgentWrite => acl.allow_agent_write(),
            Need::OperatorRead => acl.allow_operator_read(),
            Need::OperatorWrite => acl.allow_operator_write(),
            Need::PluginList => acl.allow_plugin_list(),
            Need::PluginRead => acl.allow_plugin_read(),
        };
        if !allowed {
            return denied();
        }
    }
    parts.extensions.insert(perms);
    next.run(Request::from_parts(parts, body)).await
}

/// The namespaces a job or volume body writes to: the job's, or each volume's, where they
/// name one; the request's namespace otherwise.
fn body_namespaces(doc: Option<&serde_json::Value>, need: &Need, request_ns: &str) -> Vec<String> {
    let named = |v: &serde_json::Value| {
        v.get("Namespace")
            .and_then(|n| n.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or(request_ns)
            .to_string()
    };
    let found: Vec<String> = match (need, doc) {
        (Need::JobBody(_), Some(d)) => d.get("Job").map(named).into_iter().collect(),
        (Need::VolumeBody(_), Some(d)) => d
            .get("Volumes")
            .and_then(|v| v.as_array())
            .map(|vols| vols.iter().map(named).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    if found.is_empty() {
        vec![request_ns.to_string()]
    } else {
        found
    }
}

/// The path's segment `i` after `/v1/` (0: the resource).
fn segment(path: &str, i: usize) -> Option<&str> {
    path.trim_start_matches('/').split('/').nth(i)
}

/// The allocation id in an allocation or client path.
fn alloc_id_in(path: &str) -> Option<&str> {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match seg.as_slice() {
        ["v1", "allocation", id, ..] => Some(id),
        ["v1", "client", "fs", _, id] => Some(id),
        ["v1", "client", "allocation", id, _] => Some(id),
        _ => None,
    }
}

/// Whether the request's token may see namespace `ns` with `capability` (list endpoints
/// leave out what it may not).
pub(crate) fn may(perms: Option<&Permissions>, ns: &str, capability: &str) -> bool {
    perms.is_none_or(|p| p.namespace_op(ns, capability))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_need_what_nomad_checks() {
        assert_eq!(
            need(&Method::GET, "/v1/jobs"),
            Need::Namespace(cap::CAP_LIST_JOBS)
        );
        assert_eq!(
            need(&Method::PUT, "/v1/jobs"),
            Need::JobBody(cap::CAP_SUBMIT_JOB)
        );
        assert_eq!(
            need(&Method::POST, "/v1/job/web/dispatch"),
            Need::Namespace(cap::CAP_DISPATCH_JOB)
        );
        assert_eq!(
            need(&Method::GET, "/v1/client/fs/logs/a1"),
            Need::Alloc(cap::CAP_READ_LOGS)
        );
        assert_eq!(need(&Method::PUT, "/v1/node/n1/drain"), Need::NodeWrite);
        assert_eq!(need(&Method::POST, "/v1/acl/bootstrap"), Need::Nothing);
        assert_eq!(need(&Method::GET, "/v1/acl/policies"), Need::Management);
        assert_eq!(
            need(&Method::GET, "/v1/something/new"),
            Need::Management,
            "closed by default"
        );
    }

    #[test]
    fn the_secret_comes_from_the_header_then_bearer_then_query() {
        let mut h = HeaderMap::new();
        assert_eq!(secret_of(&h, Some("token=q")), Some("q".into()));
        h.insert("Authorization", "Bearer b".parse().unwrap());
        assert_eq!(secret_of(&h, Some("token=q")), Some("b".into()));
        h.insert("X-Nomad-Token", "x".parse().unwrap());
        assert_eq!(secret_of(&h, None), Some("x".into()));
    }
}
