//! The service mesh's replicated objects: the cluster's mesh CA (one, made by the leader
//! when first needed; its key never leaves the servers but inside the state) and intentions
//! (Consul's API shape: which service may call which), plus what a client is given for its
//! workloads: a leaf certificate for an identity, and the view of the mesh a proxy needs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The mesh CA. Never serialized to API answers (it holds the CA's key).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshCa {
    pub trust_domain: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub create_index: u64,
}

pub const INTENTION_ALLOW: &str = "allow";
pub const INTENTION_DENY: &str = "deny";

/// An intention, keyed by namespace, source and destination.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Intention {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "SourceName")]
    pub source_name: String,
    #[serde(rename = "DestinationName")]
    pub destination_name: String,
    /// `allow` or `deny`.
    #[serde(rename = "Action")]
    pub action: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl Intention {
    /// What makes an intention valid: an action Consul knows and both names set (a service
    /// name or `*`).
    pub fn validate(&self) -> Result<(), String> {
        if !matches!(self.action.as_str(), INTENTION_ALLOW | INTENTION_DENY) {
            return Err(format!(
                "Action must be \"allow\" or \"deny\", not {:?}",
                self.action
            ));
        }
        for (what, name) in [
            ("SourceName", &self.source_name),
            ("DestinationName", &self.destination_name),
        ] {
            if name.is_empty() {
                return Err(format!("{what} must be set (a service name or \"*\")"));
            }
            if name != "*" && !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(format!("{what} {name:?} is not a service name or \"*\""));
            }
        }
        Ok(())
    }
}

/// A leaf certificate for a workload identity, with the CA to trust.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshLeaf {
    pub trust_domain: String,
    pub namespace: String,
    pub service: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
    /// Unix seconds when the certificate expires.
    pub expires: i64,
}

/// What proxies of a namespace need to know of the mesh: the intentions, and where each
/// service's proxies listen (`address:port` of its `<service>-sidecar-proxy` registrations).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshView {
    pub intentions: Vec<Intention>,
    pub endpoints: BTreeMap<String, Vec<String>>,
    pub index: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intentions_need_an_action_and_names() {
        let ok = Intention {
            source_name: "api".into(),
            destination_name: "*".into(),
            action: INTENTION_DENY.into(),
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
        let mut bad = ok.clone();
        bad.action = "maybe".into();
        assert!(bad.validate().unwrap_err().contains("Action"));
        let mut bad = ok.clone();
        bad.source_name = String::new();
        assert!(bad.validate().unwrap_err().contains("SourceName"));
        let mut bad = ok;
        bad.destination_name = "a b".into();
        assert!(bad.validate().unwrap_err().contains("DestinationName"));
    }
}
