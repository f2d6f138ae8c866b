//! Native services: every registered service name with its tags, and a service's
//! registrations (address, allocation, client).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;
use serde_json::Value;

use super::{alloc_link, job_href, node_link, split_job_ref};
use crate::api::{ApiError, encode};
use crate::fmt::{items, list, n, s};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

pub async fn list_page(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, render_list).await
}

pub async fn detail(
    State(ui): State<Ui>,
    Path(service_ref): Path<String>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, |cx| render_detail(cx, service_ref)).await
}

fn tags(v: &Value) -> String {
    list(v, "Tags")
        .iter()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

async fn render_list(cx: Arc<Ctx>) -> Result<Page, ApiError> {
    let namespaces = cx.watch("/v1/services?namespace=*").await?;
    let body = live_section(
        "services",
        html! {
            table.list #services-table {
                thead { tr { th { "Service" } th { "Namespace" } th.wide { "Tags" } } }
                tbody {
                    @for ns in items(&namespaces) {
                        @for svc in list(ns, "Services") {
                            tr {
                                td { a href={"/ui/services/" (encode(s(svc, "ServiceName"))) "@" (encode(s(ns, "Namespace")))} { (s(svc, "ServiceName")) } }
                                td { (s(ns, "Namespace")) }
                                td { (tags(svc)) }
                            }
                        }
                    }
                }
            }
            @if items(&namespaces).is_empty() { p.empty { "No services registered." } }
        },
    );
    Ok(Page {
        title: "Services".into(),
        section: Section::Services,
        body,
    })
}

async fn render_detail(cx: Arc<Ctx>, service_ref: String) -> Result<Page, ApiError> {
    let (name, ns) = split_job_ref(&service_ref);
    let regs = cx
        .watch(format!(
            "/v1/service/{}?namespace={}",
            encode(&name),
            encode(&ns)
        ))
        .await?;
    let body = live_section(
        "service",
        html! {
            table.list #registrations {
                thead { tr { th { "Address" } th { "Job" } th { "Allocation" } th { "Client" } th { "Tags" } } }
                tbody {
                    @for r in items(&regs) {
                        tr {
                            td { code { (s(r, "Address")) ":" (n(r, "Port")) } }
                            td { a href=(job_href(s(r, "JobID"), s(r, "Namespace"))) { (s(r, "JobID")) } }
                            td { (alloc_link(s(r, "AllocID"))) }
                            td { (node_link(s(r, "NodeID"), "")) }
                            td { (tags(r)) }
                        }
                    }
                }
            }
            @if items(&regs).is_empty() { p.empty { "No running allocation registers this service." } }
        },
    );
    Ok(Page {
        title: format!("Service {name}"),
        section: Section::Services,
        body,
    })
}
