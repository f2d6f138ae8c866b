//! `/v1/acl/...`: the bootstrap, policies and tokens, in Nomad's shapes (policy and token
//! list stubs, a token answered with its secret on create, update and bootstrap; policy
//! writes answer an empty body with `X-Nomad-Index`).

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use drover_state::Table;
use drover_structs::{AclPolicy, AclToken};
use serde::Deserialize;

use crate::AppState;
use crate::body::decode_body;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking};
use crate::response::{QueryMeta, respond_json, written};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct BootstrapBody {
    #[serde(rename = "BootstrapSecret")]
    bootstrap_secret: String,
}

/// `PUT|POST /v1/acl/bootstrap`.
pub(crate) async fn bootstrap(
    State(s): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let b: BootstrapBody = decode_body(&body, "request")?;
    let token = s
        .server
        .acl_bootstrap(Some(b.bootstrap_secret).filter(|x| !x.is_empty()))
        .await?;
    let index = token.modify_index;
    respond_json(&token, Some(QueryMeta::new(&s, index)), false)
}

/// `GET /v1/acl/policies`.
pub(crate) async fn policies(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, list) = blocking(&s, &[Table::AclPolicies], &opts, |snap| {
        let stubs: Vec<_> = snap
            .acl_policies(&opts.prefix)
            .iter()
            .map(|p| p.stub())
            .collect();
        (snap.table_index(Table::AclPolicies), stubs)
    })
    .await;
    respond_json(&list, Some(meta), opts.pretty)
}

/// `GET /v1/acl/policy/:name`.
pub(crate) async fn policy(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, p) = blocking(&s, &[Table::AclPolicies], &opts, |snap| {
        (snap.table_index(Table::AclPolicies), snap.acl_policy(&name))
    })
    .await;
    let p = p.ok_or_else(|| ApiError::not_found("ACL policy not found").with_meta(meta))?;
    respond_json(&p, Some(meta), opts.pretty)
}

/// `PUT|POST /v1/acl/policy/:name`.
pub(crate) async fn policy_write(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut p: AclPolicy = decode_body(&body, "policy")?;
    if p.name.is_empty() {
        p.name.clone_from(&name);
    }
    if p.name != name {
        return Err(ApiError::bad_request(
            "ACL policy name does not match request path",
        ));
    }
    written(&s, s.server.upsert_acl_policies(vec![p]).await?)
}

/// `DELETE /v1/acl/policy/:name`.
pub(crate) async fn policy_delete(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    written(&s, s.server.delete_acl_policy(&name).await?)
}

/// `GET /v1/acl/tokens`.
pub(crate) async fn tokens(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, list) = blocking(&s, &[Table::AclTokens], &opts, |snap| {
        let stubs: Vec<_> = snap
            .acl_tokens(&opts.prefix)
            .iter()
            .map(|t| t.stub())
            .collect();
        (snap.table_index(Table::AclTokens), stubs)
    })
    .await;
    respond_json(&list, Some(meta), opts.pretty)
}

/// `GET /v1/acl/token/:accessor` (and `self`: the request's own token).
pub(crate) async fn token(
    State(s): State<AppState>,
    Path(accessor): Path<String>,
    Query(params): Query<Params>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    if accessor == "self" {
        let secret = headers
            .get("X-Nomad-Token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| params.get("token").cloned());
        let token = s.server.token_of_secret(secret.as_deref())?;
        let meta = QueryMeta::new(&s, token.modify_index);
        return respond_json(&*token, Some(meta), opts.pretty);
    }
    let (meta, t) = blocking(&s, &[Table::AclTokens], &opts, |snap| {
        (
            snap.table_index(Table::AclTokens),
            snap.acl_token(&accessor),
        )
    })
    .await;
    let t = t.ok_or_else(|| ApiError::not_found("ACL token not found").with_meta(meta))?;
    respond_json(&*t, Some(meta), opts.pretty)
}

/// `PUT|POST /v1/acl/token`: creates a token.
pub(crate) async fn token_create(
    State(s): State<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut t: AclToken = decode_body(&body, "token")?;
    if !t.accessor_id.is_empty() {
        return Err(ApiError::bad_request(
            "Accessor ID must be empty to create a token",
        ));
    }
    t.secret_id.clear();
    let stored = s.server.upsert_acl_token(t).await?;
    let meta = QueryMeta::new(&s, stored.modify_index);
    respond_json(&stored, Some(meta), false)
}

/// `PUT|POST /v1/acl/token/:accessor`: updates a token.
pub(crate) async fn token_update(
    State(s): State<AppState>,
    Path(accessor): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut t: AclToken = decode_body(&body, "token")?;
    if t.accessor_id.is_empty() {
        t.accessor_id.clone_from(&accessor);
    }
    if t.accessor_id != accessor {
        return Err(ApiError::bad_request(
            "Token accessor ID does not match request path",
        ));
    }
    let stored = s.server.upsert_acl_token(t).await?;
    let meta = QueryMeta::new(&s, stored.modify_index);
    respond_json(&stored, Some(meta), false)
}

/// `DELETE /v1/acl/token/:accessor`.
pub(crate) async fn token_delete(
    State(s): State<AppState>,
    Path(accessor): Path<String>,
) -> Result<Response, ApiError> {
    written(&s, s.server.delete_acl_token(&accessor).await?)
}
