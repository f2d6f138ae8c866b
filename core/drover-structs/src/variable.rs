//! Nomad Variables (`VariableDecrypted` and `VariableMetadata`): small maps of strings filed
//! under a namespace and a path, written with optional check-and-set, with Nomad's path rules
//! and size limit. Locks are not supported yet; a variable's `Lock` is always null.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Nomad's limit on the sum of a variable's key and value lengths.
pub const MAX_VARIABLE_SIZE: usize = 64 * 1024;

/// A variable with its items, as `GET /v1/var/:path` answers it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Variable {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Path")]
    pub path: String,
    /// Always null: variable locks are refused before they reach the state.
    #[serde(rename = "Lock")]
    pub lock: Option<serde_json::Value>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    /// Unix nanoseconds.
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
    #[serde(rename = "Items")]
    pub items: BTreeMap<String, String>,
}

/// A variable without its items: what lists answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VariableMetadata {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Path")]
    pub path: String,
    #[serde(rename = "Lock")]
    pub lock: Option<serde_json::Value>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

impl Variable {
    pub fn metadata(&self) -> VariableMetadata {
        VariableMetadata {
            namespace: self.namespace.clone(),
            path: self.path.clone(),
            lock: None,
            create_index: self.create_index,
            create_time: self.create_time,
            modify_index: self.modify_index,
            modify_time: self.modify_time,
        }
    }

    /// Nomad's `VariableDecrypted.Validate`, in its words.
    pub fn validate(&self) -> Result<(), String> {
        if self.namespace == "*" {
            return Err("can not target wildcard (\"*\") namespace".into());
        }
        if self.items.is_empty() {
            return Err("empty variables are invalid".into());
        }
        let size: usize = self.items.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size > MAX_VARIABLE_SIZE {
            return Err("variables are limited to 64KiB in total size".into());
        }
        validate_path(&self.path)
    }
}

/// Nomad's `validatePath`: `^[a-zA-Z0-9-_~/]{1,128}$`, and under the reserved top-level
/// `nomad` only `nomad/jobs...` and `nomad/job-templates/<name>`.
pub fn validate_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("variable requires path".into());
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '~' | '/');
    if path.len() > 128 || !path.chars().all(ok) {
        return Err(format!("invalid path {path:?}"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts[0] != "nomad" {
        return Ok(());
    }
    match parts.as_slice() {
        ["nomad"] => Err(
            "\"nomad\" is a reserved top-level directory path, but you may write variables to \
             \"nomad/jobs\", \"nomad/job-templates\", or below"
                .into(),
        ),
        ["nomad", "jobs", ..] => Ok(()),
        ["nomad", "job-templates", _] => Ok(()),
        ["nomad", "job-templates", ..] => Err(
            "\"nomad/job-templates\" is a reserved directory path, but you may write variables \
             at the level below it, for example, \"nomad/job-templates/template-name\""
                .into(),
        ),
        _ => Err(
            "only paths at \"nomad/jobs\" or \"nomad/job-templates\" and below are valid paths \
             under the top-level \"nomad\" directory"
                .into(),
        ),
    }
}

/// How a write treats what is stored (Nomad's `VarOp`s without the lock operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VariableWrite {
    /// Store whatever is there.
    Set,
    /// Store only if the stored variable's modify index is this (0: none is stored).
    SetIfIndex(u64),
    /// Delete whatever is there.
    Delete,
    /// Delete only if the stored variable's modify index is this (0: none is stored).
    DeleteIfIndex(u64),
}

impl VariableWrite {
    /// Whether the write may go ahead over `stored` (its modify index; `None` when absent).
    pub fn allowed_over(self, stored: Option<u64>) -> bool {
        match self {
            VariableWrite::Set | VariableWrite::Delete => true,
            VariableWrite::SetIfIndex(want) | VariableWrite::DeleteIfIndex(want) => {
                stored.unwrap_or(0) == want
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(path: &str) -> Variable {
        Variable {
            namespace: "default".into(),
            path: path.into(),
            items: BTreeMap::from([("k".into(), "v".into())]),
            ..Default::default()
        }
    }

    #[test]
    fn paths_follow_nomads_rules_and_its_reserved_directory() {
        for ok in [
            "a",
            "secret/creds",
            "a-b_c~d/e",
            "nomad/jobs",
            "nomad/jobs/web/g/t",
        ] {
            var(ok).validate().unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(var("a b").validate().unwrap_err(), "invalid path \"a b\"");
        assert_eq!(
            var(&"x".repeat(129)).validate().unwrap_err(),
            format!("invalid path {:?}", "x".repeat(129))
        );
        assert!(
            var("nomad")
                .validate()
                .unwrap_err()
                .contains("reserved top-level")
        );
        var("nomad/job-templates/t").validate().unwrap();
        assert!(
            var("nomad/job-templates/t/x")
                .validate()
                .unwrap_err()
                .contains("at the level below it")
        );
        assert!(
            var("nomad/other")
                .validate()
                .unwrap_err()
                .starts_with("only paths at")
        );
    }

    #[test]
    fn items_must_be_there_and_small() {
        let mut v = var("a");
        v.items.clear();
        assert_eq!(v.validate().unwrap_err(), "empty variables are invalid");
        v.items.insert("k".into(), "x".repeat(MAX_VARIABLE_SIZE));
        assert_eq!(
            v.validate().unwrap_err(),
            "variables are limited to 64KiB in total size"
        );
    }

    #[test]
    fn check_and_set_compares_the_stored_modify_index_zero_meaning_absent() {
        assert!(VariableWrite::SetIfIndex(0).allowed_over(None));
        assert!(!VariableWrite::SetIfIndex(0).allowed_over(Some(5)));
        assert!(VariableWrite::SetIfIndex(5).allowed_over(Some(5)));
        assert!(!VariableWrite::DeleteIfIndex(4).allowed_over(None));
        assert!(VariableWrite::Delete.allowed_over(None));
    }
}
