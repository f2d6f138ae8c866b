//! The jobs list: namespace, status and type filters, a search box, paging, and each job's
//! allocations as a bar.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::Value;

use super::job_href;
use crate::api::{ApiError, encode};
use crate::fmt::{bar, entries, items, n, s};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

/// Jobs per page.
const PER_PAGE: usize = 25;

pub async fn list(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q.clone(), |cx| render(cx, q)).await
}

/// The summary of a job's groups added up, in bar order.
pub fn summary_parts(summary: &Value) -> Vec<(&'static str, i64, &'static str)> {
    let mut totals = [0i64; 7];
    const KEYS: [&str; 7] = [
        "Queued", "Starting", "Running", "Complete", "Failed", "Lost", "Unknown",
    ];
    for (_, group) in entries(summary, "Summary") {
        for (i, key) in KEYS.iter().enumerate() {
            totals[i] += n(group, key);
        }
    }
    vec![
        ("queued", totals[0], "muted"),
        ("starting", totals[1], "warn"),
        ("running", totals[2], "good"),
        ("complete", totals[3], "done"),
        ("failed", totals[4], "bad"),
        ("lost", totals[5], "bad2"),
        ("unknown", totals[6], "muted"),
    ]
}

async fn render(cx: Arc<Ctx>, q: BTreeMap<String, String>) -> Result<Page, ApiError> {
    let namespace = q.get("namespace").map(String::as_str).unwrap_or("*");
    let search = q
        .get("search")
        .map(|s| s.trim().to_lowercase())
        .unwrap_or_default();
    let status = q.get("status").map(String::as_str).unwrap_or("");
    let job_type = q.get("type").map(String::as_str).unwrap_or("");
    let page: usize = q
        .get("page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
        .max(1);
    let (jobs, namespaces) = tokio::join!(
        cx.watch(format!("/v1/jobs?namespace={}", encode(namespace))),
        cx.get("/v1/namespaces"),
    );
    let jobs = jobs?;
    let matching: Vec<&Value> = items(&jobs)
        .iter()
        .filter(|j| status.is_empty() || s(j, "Status") == status)
        .filter(|j| job_type.is_empty() || s(j, "Type") == job_type)
        .filter(|j| {
            search.is_empty()
                || s(j, "ID").to_lowercase().contains(&search)
                || s(j, "Name").to_lowercase().contains(&search)
        })
        .collect();
    let pages = matching.len().div_ceil(PER_PAGE).max(1);
    let page = page.min(pages);
    let shown = matching.iter().skip((page - 1) * PER_PAGE).take(PER_PAGE);
    let namespace_names: Vec<String> = namespaces
        .ok()
        .map(|v| {
            items(&v)
                .iter()
                .map(|ns| s(ns, "Name").to_string())
                .collect()
        })
        .unwrap_or_default();
    let link_to_page = |p: usize| {
        let mut q = q.clone();
        q.remove("live");
        q.insert("page".into(), p.to_string());
        format!(
            "/ui/jobs?{}",
            serde_urlencoded::to_string(&q).unwrap_or_default()
        )
    };
    let select = |name: &str, current: &str, options: &[(&str, &str)]| -> Markup {
        html! {
            select name=(name) {
                @for (value, label) in options {
                    option value=(value) selected[*value == current] { (label) }
                }
            }
        }
    };
    let mut ns_options: Vec<(&str, &str)> = vec![("*", "All namespaces")];
    ns_options.extend(namespace_names.iter().map(|n| (n.as_str(), n.as_str())));
    let body = html! {
        form.filters method="get" action="/ui/jobs" {
            input type="search" name="search" placeholder="Search jobs" value=(q.get("search").map(String::as_str).unwrap_or(""));
            (select("namespace", namespace, &ns_options))
            (select("status", status, &[("", "Any status"), ("pending", "pending"), ("running", "running"), ("dead", "dead")]))
            (select("type", job_type, &[("", "Any type"), ("service", "service"), ("batch", "batch"), ("system", "system"), ("sysbatch", "sysbatch")]))
            button type="submit" { "Filter" }
        }
        (live_section("jobs", html! {
            table.list #jobs-table {
                thead { tr { th { "Name" } th { "Namespace" } th { "Type" } th { "Priority" } th { "Status" } th { "Groups" } th.wide { "Allocations" } } }
                tbody {
                    @for j in shown.clone() {
                        tr {
                            td { a href=(job_href(s(j, "ID"), s(j, "Namespace"))) { (s(j, "ID")) } }
                            td { (s(j, "Namespace")) }
                            td { (s(j, "Type")) }
                            td { (n(j, "Priority")) }
                            td { (crate::fmt::badge(s(j, "Status"))) }
                            td { (entries(&j["JobSummary"], "Summary").len()) }
                            td { (bar(&summary_parts(&j["JobSummary"]))) }
                        }
                    }
                }
            }
            @if matching.is_empty() {
                p.empty { @if items(&jobs).is_empty() { "No jobs yet." } @else { "No job matches." } }
            }
            nav.pager {
                @if page > 1 { a href=(link_to_page(page - 1)) { "← Previous" } }
                span { "Page " (page) " of " (pages) " · " (matching.len()) " jobs" }
                @if page < pages { a href=(link_to_page(page + 1)) { "Next →" } }
            }
        }))
    };
    Ok(Page {
        title: "Jobs".into(),
        section: Section::Jobs,
        body,
    })
}
