//! The cluster at a glance: servers and leader, clients, jobs, allocations by status (from the
//! jobs' summaries), and a
//! chart of running allocations the page's script extends while it stays open.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;
use serde_json::Value;

use super::jobs::summary_parts;
use super::or_refused;
use crate::api::ApiError;
use crate::fmt::{b, bar, items, s};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

pub async fn page(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, render).await
}

async fn render(cx: Arc<Ctx>) -> Result<Page, ApiError> {
    // Allocation counts come from the jobs' summaries, not from the allocation list: the list
    // is a million entries on a large cluster, the summaries one per job.
    let (leader, members, nodes, jobs) = tokio::join!(
        cx.get("/v1/status/leader"),
        cx.get("/v1/agent/members"),
        cx.watch("/v1/nodes"),
        cx.watch("/v1/jobs?namespace=*"),
    );
    let leader = leader
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut alloc_counts: BTreeMap<&str, i64> = BTreeMap::new();
    if let Ok(jobs) = &jobs {
        for j in items(jobs) {
            for (status, count, _) in summary_parts(&j["JobSummary"]) {
                *alloc_counts.entry(status).or_default() += count;
            }
        }
    }
    let running = alloc_counts.get("running").copied().unwrap_or(0);
    let body = live_section(
        "overview",
        html! {
            div.cards {
                section.card {
                    h2 { "Servers" }
                    (or_refused(&members, |m| {
                        let servers: Vec<&Value> = items(&m["Members"]).iter().collect();
                        let alive = servers.iter().filter(|m| s(m, "Status") == "alive").count();
                        html! {
                            p.big { (alive) " / " (servers.len()) }
                            p { "alive · leader " code #leader { @if leader.is_empty() { "none" } @else { (leader) } } }
                        }
                    }))
                }
                section.card {
                    h2 { "Clients" }
                    (or_refused(&nodes, |nodes| {
                        let list = items(nodes);
                        let ready = list.iter().filter(|n| s(n, "Status") == "ready").count();
                        let draining = list.iter().filter(|n| b(n, "Drain")).count();
                        let ineligible = list.iter().filter(|n| s(n, "SchedulingEligibility") == "ineligible").count();
                        html! {
                            p.big #clients-ready { (ready) " / " (list.len()) }
                            p { "ready · " (draining) " draining · " (ineligible) " ineligible" }
                        }
                    }))
                }
                section.card {
                    h2 { "Jobs" }
                    (or_refused(&jobs, |jobs| {
                        let list = items(jobs);
                        let count = |st: &str| list.iter().filter(|j| s(j, "Status") == st).count();
                        html! {
                            p.big #jobs-count { (list.len()) }
                            p { (count("running")) " running · " (count("pending")) " pending · " (count("dead")) " dead" }
                        }
                    }))
                }
                section.card.wide {
                    h2 { "Allocations" }
                    (or_refused(&jobs, |_| {
                        let parts: Vec<(&str, i64, &str)> = summary_parts(&Value::Null)
                            .into_iter()
                            .map(|(st, _, class)| (st, alloc_counts.get(st).copied().unwrap_or(0), class))
                            .collect();
                        html! {
                            (bar(&parts))
                            ul.legend {
                                @for (st, count, class) in &parts {
                                    li { span class={"dot " (class)} {} (st) " " strong data-status=(st) { (count) } }
                                }
                            }
                        }
                    }))
                }
                section.card.wide {
                    h2 { "Running allocations over time" }
                    svg #running-chart data-running=(running) viewBox="0 0 600 120" preserveAspectRatio="none"
                        role="img" aria-label="running allocations over time" {}
                    p.note { span #running-max { (running) " now" } " · sampled at each update while this page is open" }
                }
            }
        },
    );
    Ok(Page {
        title: "Cluster overview".into(),
        section: Section::Overview,
        body,
    })
}
