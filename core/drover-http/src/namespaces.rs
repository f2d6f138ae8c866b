//! `/v1/namespaces` and `/v1/namespace[/:name]`: listing, reading, writing and deleting
//! namespaces, in Nomad's shapes (full namespaces in the list; writes answer an empty body
//! with `X-Nomad-Index`).

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use drover_state::Table;
use drover_structs::Namespace;

use crate::AppState;
use crate::body::decode_body;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking};
use crate::response::{respond_json, written};

/// `GET /v1/namespaces[?prefix=]`: with ACLs, the namespaces the token has any capability
/// in (as Nomad's `AllowNamespace`).
pub(crate) async fn list(
    State(s): State<AppState>,
    perms: Option<axum::Extension<drover_server::acl::Permissions>>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let acl = perms.and_then(|axum::Extension(p)| p.acl().cloned());
    let (meta, list) = blocking(&s, &[Table::Namespaces], &opts, |snap| {
        let mut list = snap.namespaces(&opts.prefix);
        if let Some(acl) = &acl {
            list.retain(|n| acl.allow_namespace(&n.name));
        }
        (snap.table_index(Table::Namespaces), list)
    })
    .await;
    respond_json(&list, Some(meta), opts.pretty)
}

/// `GET /v1/namespace/:name`.
pub(crate) async fn get_one(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, ns) = blocking(&s, &[Table::Namespaces], &opts, |snap| {
        (snap.table_index(Table::Namespaces), snap.namespace(&name))
    })
    .await;
    let ns = ns.ok_or_else(|| ApiError::not_found("Namespace not found").with_meta(meta))?;
    respond_json(&ns, Some(meta), opts.pretty)
}

/// `PUT|POST /v1/namespace/:name`: creates or updates it.
pub(crate) async fn upsert_named(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let ns: Namespace = decode_body(&body, "namespace")?;
    if ns.name != name {
        return Err(ApiError::bad_request(
            "Namespace name does not match request path",
        ));
    }
    written(&s, s.server.upsert_namespaces(vec![ns]).await?)
}

/// `PUT|POST /v1/namespace`: creates or updates the body's namespace.
pub(crate) async fn upsert(State(s): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("Request body is empty"));
    }
    let ns: Namespace = decode_body(&body, "namespace")?;
    written(&s, s.server.upsert_namespaces(vec![ns]).await?)
}

/// `DELETE /v1/namespace/:name`.
pub(crate) async fn delete(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    written(&s, s.server.delete_namespace(&name).await?)
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};
    use serde_json::json;

    use crate::test_support::{TestApi, web_job};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn namespaces_are_written_listed_guarded_and_deleted_as_in_nomad() {
        let api = TestApi::start().await;
        let list = api.get("/v1/namespaces").await.json();
        assert_eq!(list[0]["Name"], "default");
        assert_eq!(list[0]["Description"], "Default shared namespace");

        let mut job = web_job("web");
        job["Namespace"] = json!("dev");
        let r = api.put("/v1/jobs", &json!({ "Job": job })).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.text(), "job \"web\" is in nonexistent namespace \"dev\"");

        let r = api
            .put(
                "/v1/namespace/dev",
                &json!({"Name": "dev", "Description": "the dev team", "Meta": {"team": "a"}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert!(r.index() > 0);
        assert_eq!(r.text(), "");
        let dev = api.get("/v1/namespace/dev").await.json();
        assert_eq!(dev["Description"], "the dev team");
        assert_eq!(dev["Meta"]["team"], "a");
        let found = api
            .put(
                "/v1/search",
                &json!({"Prefix": "de", "Context": "namespaces"}),
            )
            .await
            .json();
        assert_eq!(
            found["Matches"]["namespaces"],
            json!(["default", "dev"]),
            "{found}"
        );
        let r = api.put("/v1/namespace/dev", &json!({"Name": "qa"})).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "Namespace name does not match request path"
            )
        );
        let r = api.put("/v1/namespace", &json!({"Name": "a_b"})).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text()
                .contains("invalid name \"a_b\". Must match regex ^[a-zA-Z0-9-]{1,128}$"),
            "{}",
            r.text()
        );
        assert_eq!(
            api.get("/v1/namespaces?prefix=de")
                .await
                .json()
                .as_array()
                .map(Vec::len),
            Some(2)
        );

        let r = api.put("/v1/jobs", &json!({ "Job": job })).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let r = api.call(Method::DELETE, "/v1/namespace/dev", None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        // Nomad's multi-error, as its endpoint collects the reasons.
        assert_eq!(
            r.text(),
            "1 error occurred:\n\t* namespace \"dev\" has non-terminal jobs in regions: [global]\n\n"
        );
        let r = api
            .call(Method::DELETE, "/v1/namespace/default", None)
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "can not delete default namespace")
        );
        let r = api
            .call(Method::DELETE, "/v1/job/web?namespace=dev&purge=true", None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let r = api.call(Method::DELETE, "/v1/namespace/dev", None).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(
            api.get("/v1/namespace/dev").await.status,
            StatusCode::NOT_FOUND
        );
    }
}
