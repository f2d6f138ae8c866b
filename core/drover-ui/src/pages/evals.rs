//! Evaluations across the cluster, newest first, with their placement failures.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::job::evaluations_table;
use crate::api::ApiError;
use crate::fmt::{items, n};
use crate::page::{Ctx, Page, Section, Ui, live_section, respond};

/// Evaluations shown (the newest).
const SHOWN: usize = 200;

pub async fn page(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    respond(&ui, &headers, &q, render).await
}

async fn render(cx: Arc<Ctx>) -> Result<Page, ApiError> {
    let evals = cx.watch("/v1/evaluations?namespace=*").await?;
    let mut list: Vec<Value> = items(&evals).to_vec();
    list.sort_by_key(|e| std::cmp::Reverse(n(e, "CreateIndex")));
    list.truncate(SHOWN);
    Ok(Page {
        title: "Evaluations".into(),
        section: Section::Evaluations,
        body: live_section("evaluations", evaluations_table(&Value::Array(list))),
    })
}
