//! The filesystem browser of an allocation: directories listed, files shown (their first
//! [`SHOWN_BYTES`]), through `/v1/client/fs/{stat,ls,readat}`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;
use serde_json::Value;

use crate::api::{ApiError, encode};
use crate::fmt::{b, bytes, items, n, s, short};
use crate::page::{Ctx, Page, Section, Ui, respond};

/// How much of a file the browser shows.
const SHOWN_BYTES: i64 = 64 * 1024;

pub async fn page(
    State(ui): State<Ui>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let path = q.get("path").cloned().unwrap_or_else(|| "/".into());
    respond(&ui, &headers, &q, |cx| render(cx, id, path)).await
}

/// `/a/b/c` as links to `/`, `/a`, `/a/b` and `/a/b/c`.
fn crumbs(path: &str) -> Vec<(String, String)> {
    let mut out = vec![("/".to_string(), "/".to_string())];
    let mut acc = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        acc.push('/');
        acc.push_str(part);
        out.push((acc.clone(), part.to_string()));
    }
    out
}

async fn render(cx: Arc<Ctx>, id: String, path: String) -> Result<Page, ApiError> {
    let id_q = encode(&id);
    let path_q = encode(&path);
    let stat = cx
        .get(&format!("/v1/client/fs/stat/{id_q}?path={path_q}"))
        .await?;
    let href = |p: &str| format!("/ui/allocations/{id_q}/fs?path={}", encode(p));
    let join = |name: &str| {
        if path.ends_with('/') {
            format!("{path}{name}")
        } else {
            format!("{path}/{name}")
        }
    };
    let content = if b(&stat, "IsDir") {
        let mut entries: Vec<Value> = items(
            &cx.get(format!("/v1/client/fs/ls/{id_q}?path={path_q}"))
                .await?,
        )
        .to_vec();
        // Directories first, then by name, as a file manager lists them.
        entries.sort_by(|a, z| {
            b(z, "IsDir")
                .cmp(&b(a, "IsDir"))
                .then_with(|| s(a, "Name").cmp(s(z, "Name")))
        });
        html! {
            table.list #fs-listing {
                thead { tr { th { "Name" } th { "Size" } th { "Mode" } th { "Modified" } } }
                tbody {
                    @for e in &entries {
                        tr {
                            td { a href=(href(&join(s(e, "Name")))) { (s(e, "Name")) @if b(e, "IsDir") { "/" } } }
                            td { @if !b(e, "IsDir") { (bytes(n(e, "Size"))) } }
                            td { code { (s(e, "FileMode")) } }
                            td { (s(e, "ModTime")) }
                        }
                    }
                }
            }
            @if entries.is_empty() { p.empty { "Empty directory." } }
        }
    } else {
        let size = n(&stat, "Size");
        let text = cx
            .get(&format!(
                "/v1/client/fs/readat/{id_q}?path={path_q}&offset=0&limit={SHOWN_BYTES}"
            ))
            .await?;
        let text = match &text {
            Value::String(t) => t.clone(),
            other => other.to_string(),
        };
        html! {
            p.note { (bytes(size)) @if size > SHOWN_BYTES { " · the first " (bytes(SHOWN_BYTES)) " shown" } }
            pre.code #fs-file { (text) }
        }
    };
    let body = html! {
        nav.crumbs {
            a href={"/ui/allocations/" (id_q)} { "Allocation " (short(&id)) }
            @for (p, label) in crumbs(&path) { " / " a href=(href(&p)) { (label) } }
        }
        (content)
    };
    Ok(Page {
        title: format!("Files of {}", short(&id)),
        section: Section::Jobs,
        body,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn crumbs_lead_from_the_root() {
        let c = super::crumbs("/alloc/logs");
        let paths: Vec<_> = c.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["/", "/alloc", "/alloc/logs"]);
    }
}
