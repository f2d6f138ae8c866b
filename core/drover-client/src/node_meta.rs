//! Dynamic node metadata (Nomad 1.5's `node meta apply`, `/v1/client/metadata`): keys set or
//! unset through the API on top of the client configuration's `meta`, kept in the client
//! state so they survive restarts, and pushed to the servers with the node.
//!
//! The node's `Meta` is the static meta with the dynamic changes applied: a dynamic value
//! sets its key, a dynamic `null` removes it (a static key included); the dynamic map keeps
//! its `null`s so that an unset key stays unset after a restart.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::state_db::{ClientStateDb, StateDbError};

/// Key of the dynamic metadata (JSON) in the client state's metadata table.
const STATE_KEY: &str = "dynamic_node_meta";

/// Changes by key: `Some` sets, `None` unsets.
pub type MetaChanges = BTreeMap<String, Option<String>>;

/// Nomad's `NodeMetaResponse`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeMetaView {
    /// Static and dynamic merged: what the node registers and the scheduler sees.
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    #[serde(rename = "Dynamic")]
    pub dynamic: MetaChanges,
    /// The client configuration's `meta`.
    #[serde(rename = "Static")]
    pub static_meta: BTreeMap<String, String>,
}

/// Why an apply was refused (Nomad's texts); nothing changed then.
#[derive(Debug, thiserror::Error)]
pub enum NodeMetaError {
    #[error("missing required Meta object")]
    Missing,
    #[error("metadata keys must not be empty")]
    EmptyKey,
    #[error("{0:?} is invalid; metadata keys must be valid dotted hcl identifiers")]
    InvalidKey(String),
    #[error("failed to apply dynamic node metadata: {0}")]
    State(#[from] StateDbError),
    #[error("stored dynamic node metadata is unreadable: {0}")]
    Corrupt(serde_json::Error),
    #[error("dynamic node metadata is not supported by this client")]
    NotSupported,
}

impl NodeMetaError {
    /// Whether the caller's input was wrong (a 400), not the client.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            NodeMetaError::Missing | NodeMetaError::EmptyKey | NodeMetaError::InvalidKey(_)
        )
    }
}

/// Nomad's `NodeMetaApplyRequest.Validate`: keys are dotted HCL identifiers, because their
/// use is `${meta.key}` in job files.
pub fn validate(changes: &MetaChanges) -> Result<(), NodeMetaError> {
    if changes.is_empty() {
        return Err(NodeMetaError::Missing);
    }
    for key in changes.keys() {
        if key.is_empty() {
            return Err(NodeMetaError::EmptyKey);
        }
        if !key.split('.').all(is_hcl_identifier) {
            return Err(NodeMetaError::InvalidKey(key.clone()));
        }
    }
    Ok(())
}

/// HCL's identifier: a letter or `_`, then letters, digits, `_` and `-`.
fn is_hcl_identifier(part: &str) -> bool {
    let mut chars = part.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// The static meta with the dynamic changes applied.
pub fn merged(
    static_meta: &BTreeMap<String, String>,
    dynamic: &MetaChanges,
) -> BTreeMap<String, String> {
    let mut meta = static_meta.clone();
    for (k, v) in dynamic {
        match v {
            Some(v) => meta.insert(k.clone(), v.clone()),
            None => meta.remove(k),
        };
    }
    meta
}

/// The dynamic metadata stored so far (empty if none).
pub(crate) fn load(db: &ClientStateDb) -> Result<MetaChanges, NodeMetaError> {
    match db.get_meta(STATE_KEY)? {
        None => Ok(MetaChanges::new()),
        Some(bytes) => serde_json::from_slice(&bytes).map_err(NodeMetaError::Corrupt),
    }
}

pub(crate) fn store(db: &ClientStateDb, dynamic: &MetaChanges) -> Result<(), NodeMetaError> {
    // A map of strings and nulls always serializes.
    let bytes = serde_json::to_vec(dynamic).unwrap_or_default();
    Ok(db.put_meta(STATE_KEY, &bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(pairs: &[(&str, Option<&str>)]) -> MetaChanges {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    #[test]
    fn keys_must_be_dotted_hcl_identifiers_as_nomad_checks() {
        assert!(
            validate(&changes(&[
                ("rack", Some("r1")),
                ("connect.log_level", None)
            ]))
            .is_ok()
        );
        assert!(validate(&changes(&[("_x.a-b", Some(""))])).is_ok());
        assert_eq!(
            validate(&MetaChanges::new()).unwrap_err().to_string(),
            "missing required Meta object"
        );
        assert_eq!(
            validate(&changes(&[("", Some("x"))]))
                .unwrap_err()
                .to_string(),
            "metadata keys must not be empty"
        );
        for bad in ["1rack", "a..b", "a b", "a.", "x=y"] {
            assert_eq!(
                validate(&changes(&[(bad, Some("x"))]))
                    .unwrap_err()
                    .to_string(),
                format!("{bad:?} is invalid; metadata keys must be valid dotted hcl identifiers")
            );
        }
    }

    #[test]
    fn a_dynamic_null_removes_even_a_static_key_and_a_value_overrides_it() {
        let static_meta: BTreeMap<String, String> = [
            ("rack".to_string(), "r1".to_string()),
            ("zone".into(), "a".into()),
        ]
        .into();
        let dynamic = changes(&[("rack", None), ("zone", Some("b")), ("new", Some("1"))]);
        let meta = merged(&static_meta, &dynamic);
        assert_eq!(
            meta,
            [
                ("new".to_string(), "1".to_string()),
                ("zone".into(), "b".into())
            ]
            .into()
        );
    }
}
