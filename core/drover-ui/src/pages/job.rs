//! A job: its groups' summaries as bars, deployments with their progress, allocations,
//! evaluations with their placement failures, versions with diffs, and its definition.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::Value;

use super::jobs::summary_parts;
use super::{AllocRow, action, alloc_link, node_link, split_job_ref};
use crate::api::{ApiError, encode};
use crate::fmt::{ago_ns, badge, bar, entries, items, list, n, s, short, time_ns};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

pub async fn page(
    State(ui): State<Ui>,
    Path(job_ref): Path<String>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, |cx| render(cx, job_ref)).await
}

async fn render(cx: Arc<Ctx>, job_ref: String) -> Result<Page, ApiError> {
    let (id, ns) = split_job_ref(&job_ref);
    let base = format!("/v1/job/{}", encode(&id));
    let nsq = format!("namespace={}", encode(&ns));
    let (job, allocs, evals, deployments, summary, versions, services) = tokio::join!(
        cx.watch(format!("{base}?{nsq}")),
        cx.watch_as::<Vec<AllocRow>>(format!("{base}/allocations?{nsq}")),
        cx.watch(format!("{base}/evaluations?{nsq}")),
        cx.watch(format!("{base}/deployments?{nsq}")),
        cx.get(format!("{base}/summary?{nsq}")),
        cx.get(format!("{base}/versions?diffs=true&{nsq}")),
        cx.watch(format!("{base}/services?{nsq}")),
    );
    let job = job?;
    let allocs = allocs?;
    // The file this version was registered from, when the client sent it (`job run` does).
    let source = cx
        .get(format!(
            "{base}/submission?version={}&{nsq}",
            n(&job, "Version")
        ))
        .await
        .ok();
    let evals = evals.unwrap_or_default();
    let deployments = deployments.unwrap_or_default();
    let summary = summary.unwrap_or_default();
    let versions = versions.unwrap_or_default();
    let services = services.unwrap_or_default();
    let stop_path = format!("{base}?{nsq}");
    let body = live_section(
        "job",
        html! {
            section.facts {
                dl {
                    dt { "Type" } dd { (s(&job, "Type")) }
                    dt { "Status" } dd #job-status { (badge(s(&job, "Status"))) }
                    dt { "Namespace" } dd { (s(&job, "Namespace")) }
                    dt { "Priority" } dd { (n(&job, "Priority")) }
                    dt { "Version" } dd { (n(&job, "Version")) }
                    dt { "Datacenters" } dd { (list(&job, "Datacenters").iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")) }
                    dt { "Submitted" } dd { (time_ns(n(&job, "SubmitTime"))) }
                }
                div.actions {
                    @if !crate::fmt::b(&job, "Stop") {
                        (action("Stop job", "DELETE", &stop_path, None, true))
                    }
                }
            }
            section {
                h2 { "Task groups" }
                table.list #groups {
                    thead { tr { th { "Group" } th { "Count" } th.wide { "Allocations" } th { "Queued" } th { "Starting" } th { "Running" } th { "Complete" } th { "Failed" } th { "Lost" } } }
                    tbody {
                        @for tg in list(&job, "TaskGroups") {
                            @let name = s(tg, "Name");
                            @let g = &summary["Summary"][name];
                            tr {
                                td { (name) }
                                td { (n(tg, "Count")) }
                                td { (bar(&summary_parts(&serde_json::json!({"Summary": {name: g}})))) }
                                td { (n(g, "Queued")) } td { (n(g, "Starting")) } td { (n(g, "Running")) }
                                td { (n(g, "Complete")) } td { (n(g, "Failed")) } td { (n(g, "Lost")) }
                            }
                        }
                    }
                }
            }
            @if !items(&deployments).is_empty() {
                section {
                    h2 { "Deployments" }
                    (deployments_table(&deployments))
                }
            }
            @if !items(&services).is_empty() {
                section {
                    h2 { "Services" }
                    table.list #services {
                        thead { tr { th { "Service" } th { "Address" } th { "Tags" } th { "Allocation" } th { "Client" } } }
                        tbody {
                            @for r in items(&services) {
                                tr {
                                    td { (s(r, "ServiceName")) }
                                    td { code { (s(r, "Address")) ":" (n(r, "Port")) } }
                                    td { (list(r, "Tags").iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")) }
                                    td { (alloc_link(s(r, "AllocID"))) }
                                    td { (node_link(s(r, "NodeID"), "")) }
                                }
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Allocations " span.count { (allocs.len()) } }
                (allocations_table(&allocs, true))
            }
            section {
                h2 { "Evaluations" }
                (evaluations_table(&evals))
            }
            section {
                h2 { "Versions" }
                (versions_list(&versions))
            }
            section {
                @if let Some(src) = &source {
                    details #source {
                        summary { "Definition (" (if s(src, "Format") == "json" { "JSON, as submitted" } else { "HCL" }) ")" }
                        pre.code #source-text { (s(src, "Source")) }
                        @if !entries(src, "VariableFlags").is_empty() {
                            p.note { "Variables: "
                                (entries(src, "VariableFlags").iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(", ")) }
                        }
                    }
                }
                details #definition {
                    summary { "Definition (API JSON)" }
                    pre.code { (serde_json::to_string_pretty(&job).unwrap_or_default()) }
                }
            }
        },
    );
    Ok(Page {
        title: format!("Job {id}"),
        section: Section::Jobs,
        body,
    })
}

fn deployments_table(deployments: &Value) -> Markup {
    html! {
        table.list #deployments {
            thead { tr { th { "ID" } th { "Version" } th { "Status" } th { "Description" } th.wide { "Progress" } } }
            tbody {
                @for d in items(deployments) {
                    tr {
                        td { code title=(s(d, "ID")) { (short(s(d, "ID"))) } }
                        td { (n(d, "JobVersion")) }
                        td { (badge(s(d, "Status"))) }
                        td { (s(d, "StatusDescription")) }
                        td {
                            @for (group, st) in entries(d, "TaskGroups") {
                                @let desired = n(st, "DesiredTotal");
                                @let healthy = n(st, "HealthyAllocs");
                                @let unhealthy = n(st, "UnhealthyAllocs");
                                @let placed = n(st, "PlacedAllocs");
                                div.progress {
                                    span.group { (group) }
                                    (bar(&[
                                        ("healthy", healthy, "good"),
                                        ("unhealthy", unhealthy, "bad"),
                                        ("placed", (placed - healthy - unhealthy).max(0), "warn"),
                                        ("remaining", (desired - placed).max(0), "muted"),
                                    ]))
                                    span.numbers { (healthy) " healthy / " (desired) " desired" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Allocations as a table (`with_node`: a node column, left out on a node's own page).
pub fn allocations_table(allocs: &[AllocRow], with_node: bool) -> Markup {
    html! {
        table.list.allocs {
            thead { tr {
                th { "ID" } th { "Name" } th { "Group" }
                @if with_node { th { "Client" } }
                th { "Version" } th { "Desired" } th { "Status" } th { "Modified" }
            } }
            tbody {
                @for a in allocs {
                    tr data-alloc=(a.id) {
                        td { (alloc_link(&a.id)) }
                        td { (a.name) }
                        td { (a.task_group) }
                        @if with_node { td { (node_link(&a.node_id, &a.node_name)) } }
                        td { (a.job_version) }
                        td { (a.desired_status) }
                        td { (badge(&a.client_status)) }
                        td title=(time_ns(a.modify_time)) { (ago_ns(a.modify_time)) }
                    }
                }
            }
        }
        @if allocs.is_empty() { p.empty { "No allocations." } }
    }
}

/// Evaluations as a table, with the placement failures of those that had some.
pub fn evaluations_table(evals: &Value) -> Markup {
    html! {
        table.list #evaluations {
            thead { tr { th { "ID" } th { "Job" } th { "Triggered by" } th { "Status" } th { "Created" } th.wide { "Placement failures" } } }
            tbody {
                @for e in items(evals) {
                    tr {
                        td { code title=(s(e, "ID")) { (short(s(e, "ID"))) } }
                        td { (super::job_link(e, "JobID")) }
                        td { (s(e, "TriggeredBy")) }
                        td { (badge(s(e, "Status"))) @if !s(e, "StatusDescription").is_empty() { " " small { (s(e, "StatusDescription")) } } }
                        td title=(time_ns(n(e, "CreateTime"))) { (ago_ns(n(e, "CreateTime"))) }
                        td { (placement_failures(e)) }
                    }
                }
            }
        }
        @if items(evals).is_empty() { p.empty { "No evaluations." } }
    }
}

fn placement_failures(eval: &Value) -> Markup {
    html! {
        @for (group, m) in entries(eval, "FailedTGAllocs") {
            div.failure {
                strong { (group) } ": "
                (n(m, "NodesEvaluated")) " nodes evaluated, "
                (n(m, "NodesExhausted")) " exhausted"
                @if n(m, "CoalescedFailures") > 0 { ", " (n(m, "CoalescedFailures")) " more failed to place" }
                ul {
                    @for (what, count) in entries(m, "DimensionExhausted") { li { "Resources exhausted: " (what) " (" (count) ")" } }
                    @for (what, count) in entries(m, "ConstraintFiltered") { li { "Constraint " code { (what) } " filtered " (count) } }
                    @for (what, count) in entries(m, "ClassFiltered") { li { "Class " (what) " filtered " (count) } }
                }
            }
        }
    }
}

fn versions_list(versions: &Value) -> Markup {
    let diffs = list(versions, "Diffs");
    html! {
        ol.versions #versions {
            @for (i, v) in list(versions, "Versions").iter().enumerate() {
                li {
                    div.version-head {
                        strong { "Version " (n(v, "Version")) }
                        " · " (time_ns(n(v, "SubmitTime")))
                        @if crate::fmt::b(v, "Stable") { " · " (badge("stable")) }
                    }
                    // Diffs[i] is version i against the one before it.
                    @if let Some(d) = diffs.get(i) { (diff(d)) }
                }
            }
        }
    }
}

/// A job diff (Nomad's `JobDiff`): changed fields, objects, groups and tasks, nested.
fn diff(d: &Value) -> Markup {
    html! {
        @if s(d, "Type") != "None" && !s(d, "Type").is_empty() {
            ul.diff {
                @for f in list(d, "Fields") { (field_diff(f)) }
                @for o in list(d, "Objects") { li { (diff_head(o)) (diff(o)) } }
                @for g in list(d, "TaskGroups") { li { "Group " (diff_head(g)) (diff(g)) } }
                @for t in list(d, "Tasks") { li { "Task " (diff_head(t)) (diff(t)) } }
            }
        }
    }
}

fn diff_head(d: &Value) -> Markup {
    let class = match s(d, "Type") {
        "Added" => "added",
        "Deleted" => "deleted",
        "Edited" => "edited",
        _ => "same",
    };
    html! { span class={"diff-name " (class)} { (s(d, "Name")) } " " }
}

fn field_diff(f: &Value) -> Markup {
    let kind = s(f, "Type");
    html! {
        @if kind != "None" {
            li class={"field " (kind.to_lowercase())} {
                code { (s(f, "Name")) } ": "
                @match kind {
                    "Added" => { ins { (s(f, "New")) } }
                    "Deleted" => { del { (s(f, "Old")) } }
                    _ => { del { (s(f, "Old")) } " → " ins { (s(f, "New")) } }
                }
            }
        }
    }
}
