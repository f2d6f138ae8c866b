//! `/v1/services` and `/v1/service/:name`: the native service registrations of running
//! allocations (Nomad's `provider = "nomad"` endpoints), with blocking queries on the
//! allocations they follow.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use drover_state::Table;
use serde_json::json;

use crate::AppState;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking};
use crate::response::respond_json;

/// `GET /v1/services`: per namespace, each service name with the union of its tags.
pub(crate) async fn list(
    State(s): State<AppState>,
    perms: Option<axum::Extension<drover_server::acl::Permissions>>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let perms = perms.map(|axum::Extension(p)| p);
    let (meta, regs) = blocking(&s, &[Table::Allocs], &opts, |snap| {
        (
            snap.table_index(Table::Allocs),
            snap.service_registrations(opts.namespace.as_deref()),
        )
    })
    .await;
    let mut by_ns: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for r in regs {
        // With `namespace=*`, only the namespaces the token may read.
        if !crate::authorize::may(
            perms.as_ref(),
            &r.namespace,
            drover_server::acl::policy::CAP_READ_JOB,
        ) {
            continue;
        }
        by_ns
            .entry(r.namespace)
            .or_default()
            .entry(r.service_name)
            .or_default()
            .extend(r.tags);
    }
    let body: Vec<_> = by_ns
        .into_iter()
        .map(|(ns, services)| {
            json!({
                "Namespace": ns,
                "Services": services
                    .into_iter()
                    .map(|(name, tags)| json!({"ServiceName": name, "Tags": tags}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    respond_json(&body, Some(meta), opts.pretty)
}

/// `GET /v1/service/:name`: its registrations, in the query's namespace.
pub(crate) async fn get_one(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let ns = opts.write_namespace().to_string();
    let (meta, regs) = blocking(&s, &[Table::Allocs], &opts, |snap| {
        let regs: Vec<_> = snap
            .service_registrations(Some(&ns))
            .into_iter()
            .filter(|r| r.service_name == name)
            .collect();
        (snap.table_index(Table::Allocs), regs)
    })
    .await;
    respond_json(&regs, Some(meta), opts.pretty)
}

/// `DELETE /v1/service/:name/:id`: registrations follow their allocations here, so there is
/// nothing to delete by hand (it would come back at the next read).
pub(crate) async fn delete_one(Path((name, id)): Path<(String, String)>) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        format!(
            "deleting service registration {id:?} of {name:?} is not supported: Drover registers services from their running allocations; stop the allocation to remove it"
        ),
    )
}
