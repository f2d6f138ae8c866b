//! `/v1/vars` and `/v1/var/:path`: Nomad Variables. Lists answer metadata only; reads the
//! items; writes take `?cas=N` (0: only if none is stored) and answer the stored variable, or
//! 409 with what is stored; deletes answer 204. With ACLs, each variable needs the `variables`
//! capability of its own namespace and path (list, read, write, destroy): lists leave out
//! what the token may not list, the rest answer 403. Locks are not supported yet.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_server::acl::Permissions;
use drover_server::acl::policy::{
    VARIABLES_CAP_DESTROY, VARIABLES_CAP_LIST, VARIABLES_CAP_READ, VARIABLES_CAP_WRITE,
};
use drover_server::variables::VariableOutcome;
use drover_state::Table;
use drover_structs::{Variable, VariableMetadata, VariableWrite};
use serde_json::Value;

use crate::AppState;
use crate::body::parse_json;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking};
use crate::response::{QueryMeta, json_body, respond_json};

type Perms = Option<axum::Extension<Permissions>>;

fn allowed(perms: &Perms, ns: &str, path: &str, capability: &str) -> bool {
    perms
        .as_ref()
        .and_then(|axum::Extension(p)| p.acl())
        .is_none_or(|acl| acl.allow_variable_operation(ns, path, capability))
}

fn denied() -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "Permission denied")
}

/// Paths arrive as the client wrote them: Nomad's clients trim `/` and spaces.
fn clean_path(raw: &str) -> Result<String, ApiError> {
    let path = raw.trim_matches(|c: char| c == '/' || c.is_whitespace());
    if path.is_empty() {
        return Err(ApiError::bad_request("missing variable path"));
    }
    Ok(path.to_string())
}

fn refuse_locks(params: &Params) -> Result<(), ApiError> {
    for op in ["lock-acquire", "lock-renew", "lock-release"] {
        if params.contains_key(op) {
            return Err(ApiError::bad_request(format!(
                "variable locks ({op}) are not supported yet"
            )));
        }
    }
    Ok(())
}

/// `GET /v1/vars[?prefix=&namespace=]`.
pub(crate) async fn list(
    State(s): State<AppState>,
    perms: Perms,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, list) = blocking(&s, &[Table::Variables], &opts, |snap| {
        let list: Vec<VariableMetadata> = snap
            .variables(opts.namespace.as_deref(), &opts.prefix)
            .iter()
            .filter(|v| allowed(&perms, &v.namespace, &v.path, VARIABLES_CAP_LIST))
            .map(|v| v.metadata())
            .collect();
        (snap.table_index(Table::Variables), list)
    })
    .await;
    respond_json(&list, Some(meta), opts.pretty)
}

/// `GET /v1/var/:path`.
pub(crate) async fn get_one(
    State(s): State<AppState>,
    perms: Perms,
    Path(raw): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let path = clean_path(&raw)?;
    let ns = opts.write_namespace().to_string();
    if !allowed(&perms, &ns, &path, VARIABLES_CAP_READ) {
        return Err(denied());
    }
    let (meta, found) = blocking(&s, &[Table::Variables], &opts, |snap| {
        match snap.variable(&ns, &path) {
            Some(v) => (v.modify_index, Some(v)),
            None => (snap.table_index(Table::Variables), None),
        }
    })
    .await;
    let v = found.ok_or_else(|| ApiError::not_found("variable not found").with_meta(meta))?;
    respond_json(&*v, Some(meta), opts.pretty)
}

/// The `cas` query parameter.
fn cas_of(params: &Params) -> Result<Option<u64>, ApiError> {
    params
        .get("cas")
        .map(|c| {
            c.parse::<u64>()
                .map_err(|e| ApiError::bad_request(format!("can not parse cas: {e}")))
        })
        .transpose()
}

/// A JSON answer with a status and the write's index.
fn answer(s: &AppState, status: StatusCode, body: Vec<u8>, index: u64) -> Response {
    let mut response = if body.is_empty() {
        status.into_response()
    } else {
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    QueryMeta::new(s, index).apply(response.headers_mut());
    response
}

/// A 409 with what is stored; its items only for a token that may read them.
fn conflict(s: &AppState, perms: &Perms, current: Variable) -> Result<Response, ApiError> {
    let readable = allowed(perms, &current.namespace, &current.path, VARIABLES_CAP_READ);
    let index = current.modify_index;
    let mut body = serde_json::to_value(&current)
        .map_err(|e| ApiError::internal(format!("failed to encode response: {e}")))?;
    if !readable || current.modify_index == 0 {
        body["Items"] = Value::Null;
    }
    Ok(answer(
        s,
        StatusCode::CONFLICT,
        json_body(&body, false)?,
        index,
    ))
}

/// `PUT|POST /v1/var/:path[?cas=N]` and `DELETE /v1/var/:path[?cas=N]`.
pub(crate) async fn write(
    State(s): State<AppState>,
    perms: Perms,
    method: Method,
    Path(raw): Path<String>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    refuse_locks(&params)?;
    let opts = QueryOptions::parse(&params)?;
    let path = clean_path(&raw)?;
    let cas = cas_of(&params)?;
    let deleting = method == Method::DELETE;
    let mut variable = if deleting {
        Variable::default()
    } else {
        let value = parse_json(&body)?;
        if value.get("Lock").is_some_and(|l| !l.is_null()) {
            return Err(ApiError::bad_request(
                "variable locks (Lock) are not supported yet",
            ));
        }
        let v: Variable = drover_structs::decode::decode(value, "variable")?;
        if v.items.is_empty() {
            return Err(ApiError::bad_request(
                "variable missing required Items object",
            ));
        }
        v
    };
    // The body's namespace, when it names one, is where the variable goes (as in Nomad).
    if variable.namespace.is_empty() {
        variable.namespace = opts.write_namespace().to_string();
    }
    variable.path = path;
    let capability = if deleting {
        VARIABLES_CAP_DESTROY
    } else {
        VARIABLES_CAP_WRITE
    };
    if !allowed(&perms, &variable.namespace, &variable.path, capability) {
        return Err(denied());
    }
    let op = match (deleting, cas) {
        (false, None) => VariableWrite::Set,
        (false, Some(i)) => VariableWrite::SetIfIndex(i),
        (true, None) => VariableWrite::Delete,
        (true, Some(i)) => VariableWrite::DeleteIfIndex(i),
    };
    match s.server.write_variable(variable, op).await? {
        VariableOutcome::Written {
            stored: Some(v),
            index,
        } => Ok(answer(
            &s,
            StatusCode::OK,
            json_body(&v, opts.pretty)?,
            index,
        )),
        VariableOutcome::Written {
            stored: None,
            index,
        } => Ok(answer(&s, StatusCode::NO_CONTENT, Vec::new(), index)),
        VariableOutcome::Conflict { current } => conflict(&s, &perms, current),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::json;

    use crate::test_support::TestApi;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn variables_are_written_with_check_and_set_read_listed_and_deleted() {
        let api = TestApi::start().await;
        let body = json!({"Items": {"user": "me", "password": "pw"}});
        let r = api.put("/v1/var/app/db?cas=0", &body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let stored = r.json();
        assert_eq!(stored["Path"], "app/db");
        assert_eq!(stored["Namespace"], "default");
        assert_eq!(stored["Lock"], json!(null));
        let index = stored["ModifyIndex"].as_u64().unwrap();
        assert_eq!(r.index(), index);

        // Set-if-absent again: 409 with what is stored.
        let r = api.put("/v1/var/app/db?cas=0", &body).await;
        assert_eq!(r.status, StatusCode::CONFLICT);
        assert_eq!(r.json()["ModifyIndex"].as_u64(), Some(index));
        assert_eq!(r.json()["Items"]["user"], "me");

        let got = api.get("/v1/var/app/db").await.json();
        assert_eq!(got["Items"]["password"], "pw");
        let list = api.get("/v1/vars?prefix=app").await.json();
        assert_eq!(list.as_array().unwrap().len(), 1);
        assert!(list[0].get("Items").is_none(), "{list}");
        assert_eq!(api.get("/v1/vars?prefix=other").await.json(), json!([]));

        let r = api.get("/v1/var/nope").await;
        assert_eq!(
            (r.status, r.text()),
            (StatusCode::NOT_FOUND, "variable not found".into())
        );
        let r = api.put("/v1/var/app/empty", &json!({"Items": {}})).await;
        assert_eq!(r.text(), "variable missing required Items object");
        let r = api.put("/v1/var/bad%20path", &body).await;
        assert_eq!(
            (r.status, r.text()),
            (StatusCode::BAD_REQUEST, "invalid path \"bad path\"".into())
        );
        let r = api.put("/v1/var/app/x?lock-acquire", &body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(r.text().contains("not supported"), "{}", r.text());

        let r = api
            .delete(&format!("/v1/var/app/db?cas={}", index + 100))
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT);
        let r = api.delete(&format!("/v1/var/app/db?cas={index}")).await;
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        assert_eq!(
            api.get("/v1/var/app/db").await.status,
            StatusCode::NOT_FOUND
        );
    }
}
