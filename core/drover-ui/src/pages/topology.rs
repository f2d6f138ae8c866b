//! Topology: each client as a box, filled by its running allocations' memory (and cpu) as a
//! share of what the client offers, each allocation a block sized by its memory.
//! Running and pending allocations count (what holds resources now).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;
use serde_json::Value;

use super::{job_href, null_default};
use crate::api::ApiError;
use crate::fmt::{items, n_at, s, short};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

pub async fn page(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, render).await
}

/// An allocation as the topology needs it, read straight from the API's JSON (the list has
/// every allocation of the cluster).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct PlacedAlloc {
    #[serde(rename = "ID", deserialize_with = "null_default")]
    id: String,
    #[serde(rename = "JobID", deserialize_with = "null_default")]
    job_id: String,
    #[serde(deserialize_with = "null_default")]
    namespace: String,
    #[serde(deserialize_with = "null_default")]
    task_group: String,
    #[serde(rename = "NodeID", deserialize_with = "null_default")]
    node_id: String,
    #[serde(deserialize_with = "null_default")]
    client_status: String,
    #[serde(deserialize_with = "null_default")]
    allocated_resources: Held,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct Held {
    #[serde(deserialize_with = "null_default")]
    tasks: BTreeMap<String, TaskHeld>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct TaskHeld {
    #[serde(deserialize_with = "null_default")]
    cpu: Value,
    #[serde(deserialize_with = "null_default")]
    memory: Value,
}

/// What an allocation holds: the sum over its tasks of cpu MHz and memory MB.
fn alloc_size(a: &PlacedAlloc) -> (i64, i64) {
    a.allocated_resources
        .tasks
        .values()
        .fold((0, 0), |(cpu, mem), t| {
            (
                cpu + n_at(&t.cpu, &["CpuShares"]),
                mem + n_at(&t.memory, &["MemoryMB"]),
            )
        })
}

fn pct(used: i64, of: i64) -> f64 {
    if of <= 0 {
        0.0
    } else {
        (used as f64 * 100.0 / of as f64).clamp(0.0, 100.0)
    }
}

async fn render(cx: Arc<Ctx>) -> Result<Page, ApiError> {
    let (nodes, allocs) = tokio::join!(
        cx.watch("/v1/nodes?resources=true"),
        cx.watch_as::<Vec<PlacedAlloc>>("/v1/allocations?resources=true&namespace=*"),
    );
    let (nodes, allocs) = (nodes?, allocs?);
    let mut by_node: BTreeMap<&str, Vec<&PlacedAlloc>> = BTreeMap::new();
    for a in &allocs {
        if a.client_status == "running" || a.client_status == "pending" {
            by_node.entry(a.node_id.as_str()).or_default().push(a);
        }
    }
    let body = live_section(
        "topology",
        html! {
            div.topology #topology {
                @for node in items(&nodes) {
                    @let id = s(node, "ID");
                    @let cpu_total = n_at(node, &["NodeResources", "Cpu", "CpuShares"]) - n_at(node, &["ReservedResources", "Cpu", "CpuShares"]);
                    @let mem_total = n_at(node, &["NodeResources", "Memory", "MemoryMB"]) - n_at(node, &["ReservedResources", "Memory", "MemoryMB"]);
                    @let placed = by_node.get(id).cloned().unwrap_or_default();
                    @let (cpu_used, mem_used) = placed.iter().map(|a| alloc_size(a)).fold((0, 0), |(c, m), (ac, am)| (c + ac, m + am));
                    section.node-box data-node=(id) {
                        h2 { a href={"/ui/clients/" (crate::api::encode(id))} { (s(node, "Name")) } " " (crate::fmt::badge(s(node, "Status"))) }
                        p.note { (placed.len()) " allocations · " (mem_used) " / " (mem_total) " MB · " (cpu_used) " / " (cpu_total) " MHz" }
                        div.node-fill title="memory" {
                            @for a in &placed {
                                @let (_, mem) = alloc_size(a);
                                a.alloc-block href={"/ui/allocations/" (a.id)}
                                    style={"width:" (format!("{:.2}", pct(mem, mem_total))) "%"}
                                    title={(a.job_id) " / " (a.task_group) " · " (short(&a.id)) " · " (mem) " MB"} {}
                            }
                        }
                        div.node-fill.cpu title="cpu" {
                            span.cpu-used style={"width:" (format!("{:.2}", pct(cpu_used, cpu_total))) "%"} {}
                        }
                        ul.node-jobs {
                            @for a in placed.iter().take(8) {
                                li { a href=(job_href(&a.job_id, &a.namespace)) { (a.job_id) } " " small { (a.task_group) } }
                            }
                            @if placed.len() > 8 { li { "… and " (placed.len() - 8) " more" } }
                        }
                    }
                }
            }
            @if items(&nodes).is_empty() { p.empty { "No clients." } }
        },
    );
    Ok(Page {
        title: "Topology".into(),
        section: Section::Topology,
        body,
    })
}
