//! `/v1/connect/intentions`: the mesh's intentions in Consul's API shape (Drover's mesh is its
//! own, its intentions API Consul's): the list of a namespace, and one intention read,
//! written or deleted by `?source=&destination=` (`/exact`).

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::Method;
use axum::response::Response;
use drover_state::Table;
use drover_structs::mesh::Intention;
use serde_json::Value;

use crate::AppState;
use crate::body::parse_json;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking};
use crate::response::respond_json;

/// `GET /v1/connect/intentions`: the namespace's intentions, by source and destination.
pub(crate) async fn list(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let ns = opts.write_namespace().to_string();
    let (meta, list) = blocking(&s, &[Table::Mesh], &opts, |snap| {
        let list: Vec<Intention> = snap
            .intentions(Some(&ns))
            .iter()
            .map(|i| (**i).clone())
            .collect();
        (snap.table_index(Table::Mesh), list)
    })
    .await;
    respond_json(&list, Some(meta), opts.pretty)
}

fn pair(params: &Params) -> Result<(String, String), ApiError> {
    let get = |k: &str| {
        params
            .get(k)
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| {
                ApiError::bad_request(format!("required query parameter {k:?} is missing"))
            })
    };
    Ok((get("source")?, get("destination")?))
}

/// `/v1/connect/intentions/exact?source=&destination=`: GET reads, PUT/POST writes (a body
/// with `Action` and an optional `Description`), DELETE deletes.
pub(crate) async fn exact(
    State(s): State<AppState>,
    method: Method,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let ns = opts.write_namespace().to_string();
    let (source, destination) = pair(&params)?;
    match method {
        Method::GET => {
            let found = s
                .server
                .snapshot()
                .intentions(Some(&ns))
                .into_iter()
                .find(|i| i.source_name == source && i.destination_name == destination);
            match found {
                Some(i) => respond_json(&*i, None, opts.pretty),
                None => Err(ApiError::not_found(format!(
                    "intention {source} => {destination} not found"
                ))),
            }
        }
        Method::DELETE => {
            s.server
                .delete_intention(&ns, &source, &destination)
                .await?;
            respond_json(&Value::Bool(true), None, opts.pretty)
        }
        _ => {
            let body = parse_json(&body)?;
            let text = |k: &str| -> Result<String, ApiError> {
                match body.get(k) {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(v)) => Ok(v.clone()),
                    Some(_) => Err(ApiError::bad_request(format!("{k} must be a string"))),
                }
            };
            let intention = Intention {
                namespace: ns,
                source_name: source,
                destination_name: destination,
                action: text("Action")?,
                description: text("Description")?,
                ..Default::default()
            };
            s.server.upsert_intention(intention).await?;
            respond_json(&Value::Bool(true), None, opts.pretty)
        }
    }
}
