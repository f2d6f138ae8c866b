//! An allocation: its state, each task's state, events and resources used against asked,
//! its service checks' latest results, restart/stop/signal buttons, and a live tail of a
//! task's stdout or stderr.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::{Value, json};

use super::{action, job_href, node_link};
use crate::api::{ApiError, encode};
use crate::fmt::{ago_ns, b, badge, bytes, entries, list, meter, n, n_at, s, time_ns};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

/// The signals the signal button offers.
const SIGNALS: &[&str] = &[
    "SIGHUP", "SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGKILL",
];

pub async fn page(
    State(ui): State<Ui>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, |cx| render(cx, id)).await
}

/// The tasks of the allocation's group, in the job's order.
pub fn task_names(alloc: &Value) -> Vec<String> {
    let group = s(alloc, "TaskGroup");
    list(&alloc["Job"], "TaskGroups")
        .iter()
        .find(|tg| s(tg, "Name") == group)
        .map(|tg| {
            list(tg, "Tasks")
                .iter()
                .map(|t| s(t, "Name").to_string())
                .collect()
        })
        .unwrap_or_else(|| {
            entries(alloc, "TaskStates")
                .into_iter()
                .map(|(k, _)| k.to_string())
                .collect()
        })
}

async fn render(cx: Arc<Ctx>, id: String) -> Result<Page, ApiError> {
    let path = format!("/v1/allocation/{}", encode(&id));
    let alloc = cx.watch(path.as_str()).await?;
    let running = s(&alloc, "ClientStatus") == "running";
    // Usage exists only while the client runs the allocation.
    let stats = if running {
        cx.get(format!("/v1/client/allocation/{}/stats", encode(&id)))
            .await
            .ok()
    } else {
        None
    };
    // Check results, too, live on the client only while it runs the allocation.
    let checks = if running {
        cx.get(format!("/v1/client/allocation/{}/checks", encode(&id)))
            .await
            .ok()
    } else {
        None
    };
    let tasks = task_names(&alloc);
    let id = s(&alloc, "ID").to_string();
    let client_base = format!("/v1/client/allocation/{}", encode(&id));
    let summary = html! {
        section.facts {
            dl {
                dt { "Job" } dd { a href=(job_href(s(&alloc, "JobID"), s(&alloc, "Namespace"))) { (s(&alloc, "JobID")) } }
                dt { "Group" } dd { (s(&alloc, "TaskGroup")) }
                dt { "Client" } dd { (node_link(s(&alloc, "NodeID"), s(&alloc, "NodeName"))) }
                dt { "Status" } dd #alloc-status { (badge(s(&alloc, "ClientStatus"))) " " small { (s(&alloc, "ClientDescription")) } }
                dt { "Desired" } dd { (s(&alloc, "DesiredStatus")) " " small { (s(&alloc, "DesiredDescription")) } }
                dt { "Version" } dd { (n(&alloc, "JobVersion")) }
                dt { "Created" } dd title=(time_ns(n(&alloc, "CreateTime"))) { (ago_ns(n(&alloc, "CreateTime"))) }
                @if let Some(h) = alloc.get("DeploymentStatus").and_then(|d| d.get("Healthy")).and_then(Value::as_bool) {
                    dt { "Deployment health" } dd { (badge(if h { "healthy" } else { "unhealthy" })) }
                }
            }
            div.actions {
                @if running {
                    (action("Restart", "PUT", &format!("{client_base}/restart"), Some(&json!({})), false))
                    (action("Stop", "POST", &format!("/v1/allocation/{}/stop", encode(&id)), None, true))
                    span.signal {
                        select #signal-name aria-label="signal" {
                            @for sig in SIGNALS { option value=(sig) { (sig) } }
                        }
                        button.action type="button" data-method="POST" data-path=(format!("{client_base}/signal"))
                            data-body-from="signal" { "Signal" }
                    }
                }
                a.button href={"/ui/allocations/" (encode(&id)) "/fs"} { "Files" }
            }
        }
    };
    let task_sections = html! {
        @for task in &tasks {
            @let state = &alloc["TaskStates"][task.as_str()];
            section.task data-task=(task) {
                h2 { "Task " (task) " " (badge(if s(state, "State").is_empty() { "pending" } else { s(state, "State") }))
                    @if b(state, "Failed") { " " (badge("failed")) } }
                p.note {
                    (n(state, "Restarts")) " restarts"
                    @if !s(state, "StartedAt").is_empty() && !s(state, "StartedAt").starts_with("0001") { " · started " (s(state, "StartedAt")) }
                    @if !s(state, "FinishedAt").is_empty() && !s(state, "FinishedAt").starts_with("0001") { " · finished " (s(state, "FinishedAt")) }
                }
                (resources(&alloc, task, stats.as_ref()))
                table.list.events {
                    thead { tr { th { "Time" } th { "Type" } th.wide { "Description" } } }
                    tbody {
                        @for e in list(state, "Events").iter().rev() {
                            tr {
                                td { (time_ns(n(e, "Time"))) }
                                td { (s(e, "Type")) }
                                td { @if s(e, "DisplayMessage").is_empty() { (s(e, "Message")) } @else { (s(e, "DisplayMessage")) } }
                            }
                        }
                    }
                }
            }
        }
    };
    let body = html! {
        (live_section("alloc-summary", summary))
        @if let Some(checks) = checks.as_ref().and_then(Value::as_object).filter(|c| !c.is_empty()) {
            section.checks {
                h2 { "Service checks" }
                table.list {
                    thead { tr { th { "Check" } th { "Service" } th { "Task" } th { "Status" } th { "Mode" } th.wide { "Output" } } }
                    tbody {
                        @for c in checks.values() {
                            tr {
                                td { (s(c, "Check")) }
                                td { (s(c, "Service")) }
                                td { @if s(c, "Task").is_empty() { "(group)" } @else { (s(c, "Task")) } }
                                td { (badge(s(c, "Status"))) @if n(c, "StatusCode") > 0 { " " small { (n(c, "StatusCode")) } } }
                                td { (s(c, "Mode")) }
                                td { code { (s(c, "Output")) } }
                            }
                        }
                    }
                }
            }
        }
        (live_section("alloc-tasks", task_sections))
        section.logs #logs data-alloc=(id) {
            h2 { "Logs" }
            div.log-controls {
                select #log-task aria-label="task" {
                    @for task in &tasks { option value=(task) { (task) } }
                }
                button type="button" data-log-type="stdout" class="active" { "stdout" }
                button type="button" data-log-type="stderr" { "stderr" }
                label { input #log-follow type="checkbox" checked; " Follow" }
            }
            pre #log-output aria-live="polite" {}
        }
    };
    Ok(Page {
        title: format!("Allocation {}", crate::fmt::short(&id)),
        section: Section::Jobs,
        body,
    })
}

/// CPU and memory used (when the client reports them) against what the task asked for.
fn resources(alloc: &Value, task: &str, stats: Option<&Value>) -> Markup {
    let asked = &alloc["AllocatedResources"]["Tasks"][task];
    let cpu_asked = n_at(asked, &["Cpu", "CpuShares"]);
    let mem_asked = n_at(asked, &["Memory", "MemoryMB"]) * 1024 * 1024;
    let usage = stats.map(|st| &st["Tasks"][task]["ResourceUsage"]);
    let cpu_used = usage
        .map(|u| n_at(u, &["CpuStats", "TotalTicks"]))
        .unwrap_or(0);
    let mem_used = usage
        .map(|u| {
            let rss = n_at(u, &["MemoryStats", "RSS"]);
            if rss > 0 {
                rss
            } else {
                n_at(u, &["MemoryStats", "Usage"])
            }
        })
        .unwrap_or(0);
    html! {
        div.meters {
            @if usage.is_some() {
                (meter("CPU", cpu_used, cpu_asked, &format!("{cpu_used} / {cpu_asked} MHz")))
                (meter("Memory", mem_used, mem_asked, &format!("{} / {}", bytes(mem_used), bytes(mem_asked))))
            } @else {
                p.note { "Asked: " (cpu_asked) " MHz, " (bytes(mem_asked)) " (usage shows while the task runs)" }
            }
        }
    }
}
