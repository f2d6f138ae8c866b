//! Clients: the list, and a client's attributes, drivers with their health, allocations,
//! events, and drain and eligibility toggles.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;
use serde_json::{Value, json};

use super::action;
use super::job::allocations_table;
use crate::api::{ApiError, encode};
use crate::fmt::{self, b, badge, entries, items, n_at, s, short};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

/// The drain a client's "Drain" button starts: one hour, system jobs too (Nomad's default).
const DRAIN_DEADLINE_NS: i64 = 3600 * 1_000_000_000;

pub async fn list_page(cx: Arc<Ctx>) -> Result<Page, ApiError> {
    // No allocation counts here: they would need the whole allocation list, a million
    // entries on a large cluster (the topology page pays that price, on demand).
    let nodes = cx.watch("/v1/nodes").await?;
    let body = live_section(
        "clients",
        html! {
            table.list #clients-table {
                thead { tr { th { "ID" } th { "Name" } th { "Datacenter" } th { "Class" } th { "Address" } th { "Status" } th { "Eligibility" } th { "Drain" } th { "Version" } th { "Drivers" } } }
                tbody {
                    @for node in items(&nodes) {
                        tr {
                            td { a href={"/ui/clients/" (encode(s(node, "ID")))} { code { (short(s(node, "ID"))) } } }
                            td { (s(node, "Name")) }
                            td { (s(node, "Datacenter")) }
                            td { (s(node, "NodeClass")) }
                            td { (s(node, "Address")) }
                            td { (badge(s(node, "Status"))) }
                            td { (badge(s(node, "SchedulingEligibility"))) }
                            td { @if b(node, "Drain") { (badge("draining")) } @else { "no" } }
                            td { (s(node, "Version")) }
                            td {
                                @for (name, d) in entries(node, "Drivers") {
                                    @if b(d, "Detected") {
                                        span class={"chip " (if b(d, "Healthy") { "good" } else { "bad" })} title=(s(d, "HealthDescription")) { (name) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if items(&nodes).is_empty() { p.empty { "No clients." } }
        },
    );
    Ok(Page {
        title: "Clients".into(),
        section: Section::Clients,
        body,
    })
}

pub async fn list(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, list_page).await
}

pub async fn detail(
    State(ui): State<Ui>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, |cx| render_detail(cx, id)).await
}

async fn render_detail(cx: Arc<Ctx>, id: String) -> Result<Page, ApiError> {
    let base = format!("/v1/node/{}", encode(&id));
    let (node, allocs) = tokio::join!(
        cx.watch(base.clone()),
        cx.watch_as::<Vec<super::AllocRow>>(format!("{base}/allocations"))
    );
    let node = node?;
    let allocs = allocs.unwrap_or_default();
    let draining = b(&node, "Drain") || !node["DrainStrategy"].is_null();
    let eligible = s(&node, "SchedulingEligibility") == "eligible";
    let node_id = s(&node, "ID").to_string();
    let mut attributes: Vec<(&str, &Value)> = entries(&node, "Attributes");
    attributes.sort_by_key(|(k, _)| *k);
    let body = live_section(
        "client",
        html! {
            section.facts {
                dl {
                    dt { "ID" } dd { code { (node_id) } }
                    dt { "Name" } dd { (s(&node, "Name")) }
                    dt { "Status" } dd #client-status { (badge(s(&node, "Status"))) }
                    dt { "Eligibility" } dd #client-eligibility { (badge(s(&node, "SchedulingEligibility"))) }
                    dt { "Drain" } dd #client-drain { @if draining { (badge("draining")) } @else { "no" } }
                    dt { "Datacenter" } dd { (s(&node, "Datacenter")) }
                    dt { "Class" } dd { (s(&node, "NodeClass")) }
                    dt { "Address" } dd { (s(&node, "HTTPAddr")) }
                    dt { "Resources" } dd {
                        (n_at(&node, &["NodeResources", "Cpu", "CpuShares"])) " MHz · "
                        (n_at(&node, &["NodeResources", "Memory", "MemoryMB"])) " MB memory · "
                        (n_at(&node, &["NodeResources", "Disk", "DiskMB"])) " MB disk"
                    }
                }
                div.actions {
                    @if draining {
                        (action("Stop drain", "POST", &format!("{base}/drain"), Some(&json!({"DrainSpec": null, "MarkEligible": false, "NodeID": node_id})), false))
                    } @else {
                        (action("Drain", "POST", &format!("{base}/drain"), Some(&json!({"DrainSpec": {"Deadline": DRAIN_DEADLINE_NS, "IgnoreSystemJobs": false}, "NodeID": node_id})), true))
                    }
                    @if eligible {
                        (action("Mark ineligible", "POST", &format!("{base}/eligibility"), Some(&json!({"Eligibility": "ineligible", "NodeID": node_id})), false))
                    } @else {
                        (action("Mark eligible", "POST", &format!("{base}/eligibility"), Some(&json!({"Eligibility": "eligible", "NodeID": node_id})), false))
                    }
                }
            }
            section {
                h2 { "Drivers" }
                table.list #drivers {
                    thead { tr { th { "Driver" } th { "Detected" } th { "Health" } th.wide { "Description" } } }
                    tbody {
                        @for (name, d) in entries(&node, "Drivers") {
                            tr {
                                td { (name) }
                                td { (b(d, "Detected")) }
                                td { (badge(if b(d, "Healthy") { "healthy" } else { "unhealthy" })) }
                                td { (s(d, "HealthDescription")) }
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Allocations " span.count { (allocs.len()) } }
                (allocations_table(&allocs, false))
            }
            section {
                h2 { "Events" }
                table.list #client-events {
                    thead { tr { th { "Time" } th { "Subsystem" } th.wide { "Message" } } }
                    tbody {
                        @for e in fmt::list(&node, "Events").iter().rev() {
                            tr { td { (s(e, "Timestamp")) } td { (s(e, "Subsystem")) } td { (s(e, "Message")) } }
                        }
                    }
                }
            }
            section {
                details #attributes {
                    summary { "Attributes (" (attributes.len()) ")" }
                    table.list.kv {
                        tbody {
                            @for (k, v) in &attributes {
                                tr { td { code { (k) } } td { (v.as_str().unwrap_or_default()) } }
                            }
                        }
                    }
                }
                @if !entries(&node, "Meta").is_empty() {
                    details #meta {
                        summary { "Meta" }
                        table.list.kv {
                            tbody {
                                @for (k, v) in entries(&node, "Meta") {
                                    tr { td { code { (k) } } td { (v.as_str().unwrap_or_default()) } }
                                }
                            }
                        }
                    }
                }
            }
        },
    );
    Ok(Page {
        title: format!("Client {}", s(&node, "Name")),
        section: Section::Clients,
        body: html! { (body) p.note { a href="/ui/clients" { "All clients" } } },
    })
}
