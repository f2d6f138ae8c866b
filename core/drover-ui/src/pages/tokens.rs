//! The ACL token of this browser: entered here, kept in a cookie (the pages read with it, the
//! action buttons send it), and shown as the API resolves it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

use crate::api::ApiError;
use crate::fmt::{list, s};
use crate::page::{Ctx, Page, Section, Ui, respond};

pub async fn page(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, render).await
}

async fn render(cx: Arc<Ctx>) -> Result<Page, ApiError> {
    let current = if cx.has_token() {
        Some(cx.get("/v1/acl/token/self").await)
    } else {
        None
    };
    let body = html! {
        section.token-form {
            p { "The token is kept in this browser only (a cookie for this site). Pages read the API with it and actions send it." }
            form #token-form {
                label for="token-secret" { "Secret ID" }
                input #token-secret type="password" autocomplete="off" placeholder="00000000-0000-0000-0000-000000000000";
                button type="submit" { "Set token" }
                button #token-clear type="button" { "Clear token" }
            }
        }
        section #token-current {
            @match &current {
                None => { p { "No token set: the API answers as anonymous." } }
                Some(Ok(t)) => {
                    h2 { "Token in use" }
                    dl {
                        dt { "Name" } dd #token-name { (s(t, "Name")) }
                        dt { "Accessor" } dd { code { (s(t, "AccessorID")) } }
                        dt { "Type" } dd #token-type { (s(t, "Type")) }
                        dt { "Policies" } dd { (list(t, "Policies").iter().filter_map(|p| p.as_str()).collect::<Vec<_>>().join(", ")) }
                    }
                }
                Some(Err(e)) => {
                    p.refused #token-error { "The API refused the token: " (e.status) " " (e.message.trim()) }
                }
            }
        }
    };
    Ok(Page {
        title: "ACL token".into(),
        section: Section::Tokens,
        body,
    })
}
