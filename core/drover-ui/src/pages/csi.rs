//! CSI volumes and plugins: lists with their health, and each one's details and
//! allocations.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::Value;

use super::job::allocations_table;
use super::{node_link, split_job_ref};
use crate::api::{ApiError, encode};
use crate::fmt::{b, badge, entries, items, list, n, s};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

pub async fn volumes(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, render_volumes).await
}

pub async fn volume(
    State(ui): State<Ui>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, |cx| render_volume(cx, id)).await
}

pub async fn plugins(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, render_plugins).await
}

pub async fn plugin(
    State(ui): State<Ui>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, |cx| render_plugin(cx, id)).await
}

fn health(v: &Value, healthy: &str, expected: &str) -> Markup {
    html! { (n(v, healthy)) " / " (n(v, expected)) }
}

fn volume_href(v: &Value) -> String {
    format!(
        "/ui/csi/volumes/{}@{}",
        encode(s(v, "ID")),
        encode(s(v, "Namespace"))
    )
}

async fn render_volumes(cx: Arc<Ctx>) -> Result<Page, ApiError> {
    let vols = cx.watch("/v1/volumes?type=csi&namespace=*").await?;
    let body = live_section(
        "volumes",
        html! {
            table.list #volumes-table {
                thead { tr { th { "ID" } th { "Name" } th { "Namespace" } th { "Plugin" } th { "Schedulable" } th { "Controllers" } th { "Nodes" } th { "Access mode" } } }
                tbody {
                    @for v in items(&vols) {
                        tr {
                            td { a href=(volume_href(v)) { (s(v, "ID")) } }
                            td { (s(v, "Name")) }
                            td { (s(v, "Namespace")) }
                            td { a href={"/ui/csi/plugins/" (encode(s(v, "PluginID")))} { (s(v, "PluginID")) } }
                            td { (badge(if b(v, "Schedulable") { "true" } else { "false" })) }
                            td { (health(v, "ControllersHealthy", "ControllersExpected")) }
                            td { (health(v, "NodesHealthy", "NodesExpected")) }
                            td { (s(v, "AccessMode")) }
                        }
                    }
                }
            }
            @if items(&vols).is_empty() { p.empty { "No CSI volumes." } }
        },
    );
    Ok(Page {
        title: "CSI volumes".into(),
        section: Section::Volumes,
        body,
    })
}

async fn render_volume(cx: Arc<Ctx>, volume_ref: String) -> Result<Page, ApiError> {
    let (id, ns) = split_job_ref(&volume_ref);
    let vol = cx
        .watch(&format!(
            "/v1/volume/csi/{}?namespace={}",
            encode(&id),
            encode(&ns)
        ))
        .await?;
    let allocs = super::alloc_rows(list(&vol, "Allocations"));
    let body = live_section(
        "volume",
        html! {
            section.facts {
                dl {
                    dt { "ID" } dd { (s(&vol, "ID")) }
                    dt { "Name" } dd { (s(&vol, "Name")) }
                    dt { "External ID" } dd { code { (s(&vol, "ExternalID")) } }
                    dt { "Namespace" } dd { (s(&vol, "Namespace")) }
                    dt { "Plugin" } dd { a href={"/ui/csi/plugins/" (encode(s(&vol, "PluginID")))} { (s(&vol, "PluginID")) } " (" (s(&vol, "Provider")) ")" }
                    dt { "Schedulable" } dd { (badge(if b(&vol, "Schedulable") { "true" } else { "false" })) }
                    dt { "Controllers healthy" } dd { (health(&vol, "ControllersHealthy", "ControllersExpected")) }
                    dt { "Nodes healthy" } dd { (health(&vol, "NodesHealthy", "NodesExpected")) }
                    dt { "Capacity" } dd { (crate::fmt::bytes(n(&vol, "Capacity"))) }
                    // The full volume carries its claims as maps (the list stub has counts).
                    dt { "Readers / writers" } dd { (entries(&vol, "ReadAllocs").len()) " / " (entries(&vol, "WriteAllocs").len()) }
                }
            }
            section {
                h2 { "Allocations" }
                (allocations_table(&allocs, true))
            }
        },
    );
    Ok(Page {
        title: format!("CSI volume {id}"),
        section: Section::Volumes,
        body,
    })
}

async fn render_plugins(cx: Arc<Ctx>) -> Result<Page, ApiError> {
    let plugins = cx.watch("/v1/plugins?type=csi").await?;
    let body = live_section(
        "plugins",
        html! {
            table.list #plugins-table {
                thead { tr { th { "ID" } th { "Provider" } th { "Controllers" } th { "Nodes" } } }
                tbody {
                    @for p in items(&plugins) {
                        tr {
                            td { a href={"/ui/csi/plugins/" (encode(s(p, "ID")))} { (s(p, "ID")) } }
                            td { (s(p, "Provider")) }
                            td { (health(p, "ControllersHealthy", "ControllersExpected")) }
                            td { (health(p, "NodesHealthy", "NodesExpected")) }
                        }
                    }
                }
            }
            @if items(&plugins).is_empty() { p.empty { "No CSI plugins." } }
        },
    );
    Ok(Page {
        title: "CSI plugins".into(),
        section: Section::Plugins,
        body,
    })
}

fn instances(title: &str, map: Vec<(&str, &Value)>) -> Markup {
    html! {
        h2 { (title) }
        table.list {
            thead { tr { th { "Client" } th { "Healthy" } th.wide { "Description" } } }
            tbody {
                @for (node, info) in map {
                    tr {
                        td { (node_link(node, "")) }
                        td { (badge(if b(info, "Healthy") { "healthy" } else { "unhealthy" })) }
                        td { (s(info, "HealthDescription")) }
                    }
                }
            }
        }
    }
}

async fn render_plugin(cx: Arc<Ctx>, id: String) -> Result<Page, ApiError> {
    let plugin = cx.watch(&format!("/v1/plugin/csi/{}", encode(&id))).await?;
    let allocs = super::alloc_rows(list(&plugin, "Allocations"));
    let body = live_section(
        "plugin",
        html! {
            section.facts {
                dl {
                    dt { "ID" } dd { (s(&plugin, "ID")) }
                    dt { "Provider" } dd { (s(&plugin, "Provider")) " " (s(&plugin, "Version")) }
                    dt { "Controllers healthy" } dd { (health(&plugin, "ControllersHealthy", "ControllersExpected")) }
                    dt { "Nodes healthy" } dd { (health(&plugin, "NodesHealthy", "NodesExpected")) }
                }
            }
            section { (instances("Controllers", entries(&plugin, "Controllers"))) }
            section { (instances("Nodes", entries(&plugin, "Nodes"))) }
            section { h2 { "Allocations" } (allocations_table(&allocs, true)) }
        },
    );
    Ok(Page {
        title: format!("CSI plugin {id}"),
        section: Section::Plugins,
        body,
    })
}
