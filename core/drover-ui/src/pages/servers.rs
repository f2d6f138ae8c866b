//! Servers: the members this agent knows of, and the Raft configuration with the leader.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

use super::or_refused;
use crate::api::ApiError;
use crate::fmt::{b, badge, items, list, n, s};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

pub async fn page(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, render).await
}

async fn render(cx: Arc<Ctx>) -> Result<Page, ApiError> {
    // Neither endpoint blocks: the page's script refreshes it on a timer.
    let (members, raft) = tokio::join!(
        cx.get("/v1/agent/members"),
        cx.get("/v1/operator/raft/configuration"),
    );
    let body = live_section(
        "servers",
        html! {
            section {
                h2 { "Members" }
                (or_refused(&members, |m| html! {
                    table.list #servers-table {
                        thead { tr { th { "Name" } th { "Address" } th { "Status" } th { "Region" } th { "Datacenter" } th { "Version" } } }
                        tbody {
                            @for m in items(&m["Members"]) {
                                tr {
                                    td { (s(m, "Name")) }
                                    td { code { (s(m, "Addr")) ":" (n(m, "Port")) } }
                                    td { (badge(s(m, "Status"))) }
                                    td { (s(&m["Tags"], "region")) }
                                    td { (s(&m["Tags"], "dc")) }
                                    td { (s(&m["Tags"], "build")) }
                                }
                            }
                        }
                    }
                }))
            }
            section {
                h2 { "Raft peers" }
                (or_refused(&raft, |r| html! {
                    table.list #raft-table {
                        thead { tr { th { "Node" } th { "ID" } th { "Address" } th { "Leader" } th { "Voter" } } }
                        tbody {
                            @for p in list(r, "Servers") {
                                tr {
                                    td { (s(p, "Node")) }
                                    td { code { (s(p, "ID")) } }
                                    td { code { (s(p, "Address")) } }
                                    td { @if b(p, "Leader") { (badge("leader")) } }
                                    td { (b(p, "Voter")) }
                                }
                            }
                        }
                    }
                }))
            }
        },
    );
    Ok(Page {
        title: "Servers".into(),
        section: Section::Servers,
        body,
    })
}
