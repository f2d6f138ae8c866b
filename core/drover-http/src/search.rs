//! `POST /v1/search` (prefix) and `POST /v1/search/fuzzy`, as Nomad answers them.
//!
//! Prefix search: identifiers starting with `Prefix` per context (`jobs`, `evals`, `allocs`,
//! `nodes`, `deployment`, `plugins`, `volumes`, `namespaces`, `scaling_policy`, or `all`),
//! at most 20 each with a truncation flag. UUID contexts round an odd-length prefix down to
//! an even length, as Nomad does (its index needs whole bytes), so `abc` finds `ab...` ids.
//!
//! Fuzzy search: names containing `Text` (any case), closest first (where in the name the text
//! starts, then the name), at most 100 per context; for `jobs` also groups, tasks, and the
//! images and commands of task configs, each with the `Scope` that locates it; for `all`
//! also prefix matches of the contexts that have only UUIDs.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::response::Response;
use drover_state::{CsiVolumeFilter, StateSnapshot, Table};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::body::decode_body;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions};
use crate::response::{QueryMeta, respond_json};

/// Nomad's `truncateLimit` for prefix search.
const PREFIX_LIMIT: usize = 20;
/// Nomad's `search.limit_results` default.
const FUZZY_LIMIT: usize = 100;
/// Nomad's `search.min_term_length` default.
const FUZZY_MIN_TERM: usize = 2;

/// The contexts of a prefix search for `all`, in Nomad's names.
const PREFIX_CONTEXTS: &[&str] = &[
    "allocs",
    "deployment",
    "evals",
    "jobs",
    "nodes",
    "namespaces",
    "plugins",
    "scaling_policy",
    "volumes",
];

const FUZZY_CONTEXTS: &[&str] = &["jobs", "allocs", "nodes", "plugins", "namespaces"];

/// Contexts whose ids are UUIDs (the odd-length rounding applies).
const UUID_CONTEXTS: &[&str] = &["allocs", "deployment", "evals", "nodes"];

const TABLES: &[Table] = &[
    Table::Jobs,
    Table::Evals,
    Table::Allocs,
    Table::Nodes,
    Table::CsiVolumes,
    Table::CsiPlugins,
];

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PrefixRequest {
    #[serde(rename = "Prefix")]
    prefix: String,
    #[serde(rename = "Context")]
    context: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FuzzyRequest {
    #[serde(rename = "Text")]
    text: String,
    #[serde(rename = "Context")]
    context: String,
}

fn contexts_of<'a>(
    context: &'a str,
    all: &'static [&'static str],
) -> Result<Vec<&'a str>, ApiError> {
    match context {
        "all" => Ok(all.to_vec()),
        c if all.contains(&c) => Ok(vec![c]),
        "" => Err(ApiError::bad_request("Context must be specified")),
        other => Err(ApiError::bad_request(format!(
            "invalid context {other:?}: one of all, {}",
            all.join(", ")
        ))),
    }
}

/// What a search may show: the request's namespace and, with ACLs, what its token reads
/// (jobs and what belongs to them: `read-job`; volumes: `csi-list-volume`; nodes:
/// `node:read`; plugins: `plugin:list`; namespaces: any access to them).
struct Scope<'a> {
    opts: &'a QueryOptions,
    acl: Option<&'a drover_server::acl::Acl>,
}

impl Scope<'_> {
    /// Whether the token has any access to namespace `name` (namespaces are listed whatever
    /// the request's own namespace).
    fn acl_sees_namespace(&self, name: &str) -> bool {
        self.acl
            .filter(|a| !a.is_management())
            .is_none_or(|a| a.allow_namespace(name))
    }

    /// Whether an object of `ctx` in namespace `ns` (`None`: not namespaced) is shown.
    fn sees(&self, ctx: &str, ns: Option<&str>) -> bool {
        use drover_server::acl::policy::{CAP_CSI_LIST_VOLUME, CAP_READ_JOB};
        if ns.is_some_and(|ns| !self.opts.in_namespace(ns)) {
            return false;
        }
        let Some(acl) = self.acl.filter(|a| !a.is_management()) else {
            return true;
        };
        let ns = ns.unwrap_or_default();
        match ctx {
            "nodes" => acl.allow_node_read(),
            "plugins" => acl.allow_plugin_list(),
            "volumes" => acl.allow_namespace_operation(ns, CAP_CSI_LIST_VOLUME),
            _ => acl.allow_namespace_operation(ns, CAP_READ_JOB),
        }
    }
}

fn token_acl(
    perms: &Option<axum::Extension<drover_server::acl::Permissions>>,
) -> Option<&drover_server::acl::Acl> {
    perms.as_ref().and_then(|axum::Extension(p)| p.acl())
}

/// `POST /v1/search`.
pub(crate) async fn prefix(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    perms: Option<axum::Extension<drover_server::acl::Permissions>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let scope = Scope {
        opts: &opts,
        acl: token_acl(&perms),
    };
    let req: PrefixRequest = decode_body(&body, "search request")?;
    let contexts = contexts_of(&req.context, PREFIX_CONTEXTS)?;
    let snap = s.server.snapshot();
    let mut matches = serde_json::Map::new();
    let mut truncations = serde_json::Map::new();
    for ctx in contexts {
        let prefix = if UUID_CONTEXTS.contains(&ctx) && req.prefix.len() % 2 == 1 {
            &req.prefix[..req.prefix.len() - 1]
        } else {
            req.prefix.as_str()
        };
        let mut ids = prefix_ids(&snap, &scope, ctx, prefix);
        let truncated = ids.len() > PREFIX_LIMIT;
        ids.truncate(PREFIX_LIMIT);
        matches.insert(
            ctx.to_string(),
            if ids.is_empty() {
                Value::Null
            } else {
                json!(ids)
            },
        );
        truncations.insert(ctx.to_string(), json!(truncated));
    }
    respond(&s, &snap, &opts, matches, truncations)
}

fn respond(
    s: &AppState,
    snap: &StateSnapshot,
    opts: &QueryOptions,
    matches: serde_json::Map<String, Value>,
    truncations: serde_json::Map<String, Value>,
) -> Result<Response, ApiError> {
    let meta = QueryMeta::new(s, snap.max_index(TABLES));
    let body = json!({
        "Matches": matches,
        "Truncations": truncations,
        "Index": meta.index,
        "KnownLeader": meta.known_leader,
        "LastContact": 0,
    });
    respond_json(&body, Some(meta), opts.pretty)
}

/// Every id of `ctx` starting with `prefix`, sorted.
fn prefix_ids(snap: &StateSnapshot, scope: &Scope<'_>, ctx: &str, prefix: &str) -> Vec<String> {
    let mut ids: Vec<String> = match ctx {
        "jobs" => snap
            .jobs(None)
            .into_iter()
            .filter(|j| scope.sees("jobs", Some(&j.namespace)) && j.id.starts_with(prefix))
            .map(|j| j.id.clone())
            .collect(),
        "evals" => snap
            .evals_by_prefix(prefix)
            .into_iter()
            .filter(|e| scope.sees("evals", Some(&e.namespace)))
            .map(|e| e.id.clone())
            .collect(),
        "allocs" => snap
            .allocs_by_prefix(prefix)
            .into_iter()
            .filter(|a| scope.sees("allocs", Some(&a.namespace)))
            .map(|a| a.id.clone())
            .collect(),
        "nodes" if scope.sees("nodes", None) => snap
            .nodes_by_prefix(prefix)
            .into_iter()
            .map(|n| n.id.clone())
            .collect(),
        "plugins" if scope.sees("plugins", None) => snap
            .csi_plugins()
            .into_iter()
            .filter(|p| p.id.starts_with(prefix))
            .map(|p| p.id.clone())
            .collect(),
        "volumes" => snap
            .csi_volumes(&CsiVolumeFilter {
                namespace: scope.opts.namespace.as_deref(),
                prefix,
                plugin_id: None,
                node_id: None,
            })
            .into_iter()
            .filter(|v| scope.sees("volumes", Some(&v.namespace)))
            .map(|v| v.id)
            .collect(),
        "namespaces" => snap
            .namespaces(prefix)
            .iter()
            .filter(|n| scope.acl_sees_namespace(&n.name))
            .map(|n| n.name.clone())
            .collect(),
        "deployment" => snap
            .deployments(None, prefix)
            .iter()
            .filter(|d| scope.sees("deployment", Some(&d.namespace)))
            .map(|d| d.id.clone())
            .collect(),
        // Scaling policies are searched by nobody yet.
        _ => Vec::new(),
    };
    ids.sort();
    ids.dedup();
    ids
}

/// One fuzzy match: the name that matched, where, and what locates it.
#[derive(Debug, Clone, PartialEq)]
struct FuzzyMatch {
    id: String,
    scope: Option<Vec<String>>,
    /// Where the text starts in the name: closer to the start ranks first.
    at: usize,
}

/// `Some(position)` when `name` contains `text` (lower-cased already), any case.
fn fuzzy_at(name: &str, text: &str) -> Option<usize> {
    name.to_lowercase().find(text)
}

/// Sorts (closest first, then by name) and caps one context's matches; whether some were cut.
fn finish(mut found: Vec<FuzzyMatch>) -> (Vec<FuzzyMatch>, bool) {
    found.sort_by(|a, b| (a.at, &a.id, &a.scope).cmp(&(b.at, &b.id, &b.scope)));
    found.dedup();
    let truncated = found.len() > FUZZY_LIMIT;
    found.truncate(FUZZY_LIMIT);
    (found, truncated)
}

fn fuzzy_json(found: &[FuzzyMatch]) -> Value {
    Value::Array(
        found
            .iter()
            .map(|m| match &m.scope {
                Some(scope) => json!({"ID": m.id, "Scope": scope}),
                None => json!({"ID": m.id}),
            })
            .collect(),
    )
}

/// `POST /v1/search/fuzzy`.
pub(crate) async fn fuzzy(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    perms: Option<axum::Extension<drover_server::acl::Permissions>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let scope = Scope {
        opts: &opts,
        acl: token_acl(&perms),
    };
    let req: FuzzyRequest = decode_body(&body, "search request")?;
    let contexts = contexts_of(&req.context, FUZZY_CONTEXTS)?;
    let length = req.text.chars().count();
    if length < FUZZY_MIN_TERM {
        return Err(ApiError::bad_request(format!(
            "fuzzy search query must be at least {FUZZY_MIN_TERM} characters, got {length}"
        )));
    }
    let text = req.text.to_lowercase();
    let snap = s.server.snapshot();
    let mut by_context: BTreeMap<String, Vec<FuzzyMatch>> = BTreeMap::new();
    for ctx in &contexts {
        for (kind, m) in fuzzy_in(&snap, &scope, ctx, &text) {
            by_context.entry(kind.to_string()).or_default().push(m);
        }
    }
    let mut matches = serde_json::Map::new();
    let mut truncations = serde_json::Map::new();
    for (kind, found) in by_context {
        let (found, truncated) = finish(found);
        matches.insert(kind.clone(), fuzzy_json(&found));
        truncations.insert(kind, json!(truncated));
    }
    for ctx in &contexts {
        truncations.entry(ctx.to_string()).or_insert(json!(false));
    }
    if req.context == "all" {
        // The contexts with only UUIDs are prefix-searched beside the fuzzy ones.
        for ctx in ["deployment", "evals", "volumes"] {
            let mut ids = prefix_ids(&snap, &scope, ctx, &req.text);
            let truncated = ids.len() > FUZZY_LIMIT;
            ids.truncate(FUZZY_LIMIT);
            let items: Vec<Value> = ids.iter().map(|id| json!({"ID": id})).collect();
            matches.insert(ctx.to_string(), Value::Array(items));
            truncations.insert(ctx.to_string(), json!(truncated));
        }
    }
    respond(&s, &snap, &opts, matches, truncations)
}

/// The fuzzy matches of one requested context, each under the kind it is listed as (`jobs`
/// also yields `groups`, `tasks`, `images`, `commands` and `classes`).
fn fuzzy_in(
    snap: &StateSnapshot,
    scope: &Scope<'_>,
    ctx: &str,
    text: &str,
) -> Vec<(&'static str, FuzzyMatch)> {
    let mut out = Vec::new();
    let mut push = |kind: &'static str, name: &str, scope: Option<Vec<String>>| {
        if let Some(at) = fuzzy_at(name, text) {
            out.push((
                kind,
                FuzzyMatch {
                    id: name.to_string(),
                    scope,
                    at,
                },
            ));
        }
    };
    match ctx {
        "jobs" => {
            for job in snap.jobs(None) {
                if !scope.sees("jobs", Some(&job.namespace)) {
                    continue;
                }
                let ns = job.namespace.clone();
                push("jobs", &job.id, Some(vec![ns.clone()]));
                for tg in &job.task_groups {
                    push("groups", &tg.name, Some(vec![ns.clone(), job.id.clone()]));
                    for task in &tg.tasks {
                        let group_scope = vec![ns.clone(), job.id.clone(), tg.name.clone()];
                        push("tasks", &task.name, Some(group_scope.clone()));
                        let mut task_scope = group_scope;
                        task_scope.push(task.name.clone());
                        let config = task.config.as_ref();
                        for (key, kind) in [
                            ("image", "images"),
                            ("command", "commands"),
                            ("class", "classes"),
                        ] {
                            if let Some(v) = config.and_then(|c| c.get(key)).and_then(Value::as_str)
                            {
                                push(kind, v, Some(task_scope.clone()));
                            }
                        }
                    }
                }
            }
        }
        "allocs" => {
            for a in snap.allocs() {
                if scope.sees("allocs", Some(&a.namespace)) {
                    push(
                        "allocs",
                        &a.name,
                        Some(vec![a.namespace.clone(), a.id.clone()]),
                    );
                }
            }
        }
        "nodes" if scope.sees("nodes", None) => {
            for n in snap.nodes() {
                push("nodes", &n.name, Some(vec![n.id.clone()]));
            }
        }
        "plugins" if scope.sees("plugins", None) => {
            for p in snap.csi_plugins() {
                push("plugins", &p.id, None);
            }
        }
        "namespaces" => {
            for n in snap.namespaces("") {
                if !scope.acl_sees_namespace(&n.name) {
                    continue;
                }
                push("namespaces", &n.name, None);
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_all_or_one_known_name() {
        assert_eq!(
            contexts_of("all", PREFIX_CONTEXTS).unwrap().len(),
            PREFIX_CONTEXTS.len()
        );
        assert_eq!(contexts_of("jobs", PREFIX_CONTEXTS).unwrap(), vec!["jobs"]);
        assert!(contexts_of("job", PREFIX_CONTEXTS).is_err());
        assert!(contexts_of("", PREFIX_CONTEXTS).is_err());
        assert!(contexts_of("evals", FUZZY_CONTEXTS).is_err());
    }

    #[test]
    fn fuzzy_matches_any_case_and_ranks_the_earliest_match_first() {
        assert_eq!(fuzzy_at("example-python", "py"), Some(8));
        assert_eq!(fuzzy_at("PyApp", "py"), Some(0));
        assert_eq!(fuzzy_at("web", "py"), None);
        let m = |id: &str, at| FuzzyMatch {
            id: id.into(),
            scope: None,
            at,
        };
        let (sorted, truncated) = finish(vec![m("spy", 1), m("python", 0), m("happy", 3)]);
        let names: Vec<&str> = sorted.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(names, vec!["python", "spy", "happy"]);
        assert!(!truncated);
        let many: Vec<FuzzyMatch> = (0..FUZZY_LIMIT + 1)
            .map(|i| m(&format!("py{i:03}"), 0))
            .collect();
        let (cut, truncated) = finish(many);
        assert_eq!(cut.len(), FUZZY_LIMIT);
        assert!(truncated);
    }
}
