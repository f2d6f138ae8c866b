//! One module per page (or family of pages). Each has an axum handler that hands a render
//! function to [`crate::page::respond`], and the render function reads the API through the
//! request's [`crate::page::Ctx`].

pub mod alloc;
pub mod alloc_fs;
pub mod clients;
pub mod csi;
pub mod evals;
pub mod job;
pub mod jobs;
pub mod overview;
pub mod servers;
pub mod services;
pub mod tokens;
pub mod topology;

use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use crate::api::{ApiError, encode};
use crate::fmt::s;

/// An allocation as the tables show it: the few fields they need, read straight from the API's
/// JSON (Nomad's `AllocListStub` names, which a full allocation carries too) rather than built
/// into a whole `Value` first, which costs most of a 2,000-allocation page's time.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocRow {
    #[serde(rename = "ID", deserialize_with = "null_default")]
    pub id: String,
    #[serde(deserialize_with = "null_default")]
    pub name: String,
    #[serde(deserialize_with = "null_default")]
    pub namespace: String,
    #[serde(rename = "JobID", deserialize_with = "null_default")]
    pub job_id: String,
    #[serde(deserialize_with = "null_default")]
    pub task_group: String,
    #[serde(rename = "NodeID", deserialize_with = "null_default")]
    pub node_id: String,
    #[serde(deserialize_with = "null_default")]
    pub node_name: String,
    #[serde(deserialize_with = "null_default")]
    pub job_version: i64,
    #[serde(deserialize_with = "null_default")]
    pub desired_status: String,
    #[serde(deserialize_with = "null_default")]
    pub client_status: String,
    #[serde(deserialize_with = "null_default")]
    pub modify_time: i64,
}

/// A JSON `null` read as the type's default (Go's encoder writes nil slices and maps so).
pub fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    use serde::Deserialize;
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

/// Allocation rows of a list inside a document already read (a volume's or plugin's).
pub fn alloc_rows(list: &[Value]) -> Vec<AllocRow> {
    list.iter()
        .filter_map(|a| AllocRow::deserialize(a).ok())
        .collect()
}

/// The UI path of a job (`/ui/jobs/<id>@<namespace>`, Nomad's UI form).
pub fn job_href(id: &str, namespace: &str) -> String {
    let ns = if namespace.is_empty() {
        "default"
    } else {
        namespace
    };
    format!("/ui/jobs/{}@{}", encode(id), encode(ns))
}

/// The job ID and namespace of a `/ui/jobs/...` path segment (namespace `default` without
/// `@`).
pub fn split_job_ref(r: &str) -> (String, String) {
    match r.rsplit_once('@') {
        Some((id, ns)) if !id.is_empty() && !ns.is_empty() => (id.to_string(), ns.to_string()),
        _ => (r.to_string(), "default".to_string()),
    }
}

pub fn alloc_link(id: &str) -> Markup {
    html! { a href={"/ui/allocations/" (encode(id))} title=(id) { code { (crate::fmt::short(id)) } } }
}

pub fn node_link(id: &str, name: &str) -> Markup {
    let shown = if name.is_empty() {
        crate::fmt::short(id)
    } else {
        name
    };
    html! { a href={"/ui/clients/" (encode(id))} title=(id) { (shown) } }
}

pub fn job_link(v: &Value, id_key: &str) -> Markup {
    let id = s(v, id_key);
    html! { a href=(job_href(id, s(v, "Namespace"))) { (id) } }
}

/// A part of a page that needs a permission the token may not have: its data, or a note in
/// its place saying what the API refused (the rest of the page still shows).
pub fn or_refused(r: &Result<Value, ApiError>, body: impl FnOnce(&Value) -> Markup) -> Markup {
    match r {
        Ok(v) => body(v),
        Err(e) => html! { p.refused { "Not shown: " (e.status) " " (e.message.trim()) } },
    }
}

/// An action button: its script calls `method path` on the API with the token and `body`
/// (JSON), then refreshes the page's live parts. `confirm` asks for a second click.
pub fn action(
    label: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    confirm: bool,
) -> Markup {
    html! {
        button.action type="button" data-method=(method) data-path=(path)
            data-body=[body.map(Value::to_string)] data-confirm=[confirm.then_some("1")] {
            (label)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_rows_read_nulls_as_empty_and_ignore_other_fields() {
        let rows: Vec<AllocRow> = serde_json::from_str(
            r#"[{"ID": "a1", "NodeName": null, "JobVersion": 3, "Job": {"huge": [1, 2]}}]"#,
        )
        .unwrap();
        assert_eq!(rows[0].id, "a1");
        assert_eq!(rows[0].node_name, "");
        assert_eq!(rows[0].job_version, 3);
    }

    #[test]
    fn job_references_carry_the_namespace() {
        assert_eq!(job_href("web api", "prod"), "/ui/jobs/web%20api@prod");
        assert_eq!(
            split_job_ref("web@prod"),
            ("web".to_string(), "prod".to_string())
        );
        assert_eq!(split_job_ref("a@b@c"), ("a@b".to_string(), "c".to_string()));
        assert_eq!(
            split_job_ref("web"),
            ("web".to_string(), "default".to_string())
        );
    }
}
