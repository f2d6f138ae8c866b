//! Namespaces (Nomad's `Namespace`): the name every job, allocation, evaluation, deployment
//! and volume is filed under, with a description, metadata and the capabilities that limit
//! what its jobs may use (task drivers). `default` always exists.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::multierror::MultiError;

/// The namespace that always exists.
pub const DEFAULT_NAMESPACE_DESCRIPTION: &str = "Default shared namespace";
/// Nomad's limit on a namespace description.
const MAX_DESCRIPTION_LEN: usize = 256;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Namespace {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    /// Quotas are an Enterprise feature Drover has no counterpart of yet: a namespace that
    /// names one is refused, as Nomad's open-source servers refuse it.
    #[serde(rename = "Quota")]
    pub quota: String,
    #[serde(rename = "Capabilities")]
    pub capabilities: Option<NamespaceCapabilities>,
    #[serde(rename = "NodePoolConfiguration")]
    pub node_pool_configuration: Option<serde_json::Value>,
    #[serde(rename = "Meta")]
    pub meta: Option<BTreeMap<String, String>>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamespaceCapabilities {
    /// The task drivers jobs of the namespace may use; empty: any not disabled.
    #[serde(rename = "EnabledTaskDrivers")]
    pub enabled_task_drivers: Option<Vec<String>>,
    #[serde(rename = "DisabledTaskDrivers")]
    pub disabled_task_drivers: Option<Vec<String>>,
    #[serde(rename = "EnabledNetworkModes")]
    pub enabled_network_modes: Option<Vec<String>>,
    #[serde(rename = "DisabledNetworkModes")]
    pub disabled_network_modes: Option<Vec<String>>,
}

impl Namespace {
    /// The `default` namespace as it is before anyone writes it.
    pub fn default_namespace() -> Namespace {
        Namespace {
            name: crate::DEFAULT_NAMESPACE.into(),
            description: DEFAULT_NAMESPACE_DESCRIPTION.into(),
            create_index: 1,
            modify_index: 1,
            ..Default::default()
        }
    }

    /// Nomad's `Namespace.Validate`, in its words.
    pub fn validate(&self) -> Result<(), MultiError> {
        let mut m = MultiError::new();
        let valid_name = !self.name.is_empty()
            && self.name.len() <= 128
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !valid_name {
            m.push(format!(
                "invalid name {:?}. Must match regex ^[a-zA-Z0-9-]{{1,128}}$",
                self.name
            ));
        }
        if self.description.len() > MAX_DESCRIPTION_LEN {
            m.push(format!("description longer than {MAX_DESCRIPTION_LEN}"));
        }
        m.into_result()
    }

    /// The drivers of `used` the namespace does not allow, sorted: those outside a non-empty
    /// enabled list, and those in the disabled list.
    pub fn refused_drivers<'a>(&self, used: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let Some(c) = &self.capabilities else {
            return Vec::new();
        };
        let enabled = c.enabled_task_drivers.as_deref().unwrap_or_default();
        let disabled = c.disabled_task_drivers.as_deref().unwrap_or_default();
        let mut out: Vec<String> = used
            .into_iter()
            .filter(|d| {
                (!enabled.is_empty() && !enabled.iter().any(|e| e == d))
                    || disabled.iter().any(|x| x == d)
            })
            .map(str::to_string)
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_descriptions_are_validated_in_nomads_words() {
        let ok = Namespace {
            name: "dev-1".into(),
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
        let bad = Namespace {
            name: "dev/1".into(),
            description: "x".repeat(300),
            ..Default::default()
        };
        let text = bad.validate().unwrap_err().to_string();
        assert!(
            text.contains("invalid name \"dev/1\". Must match regex ^[a-zA-Z0-9-]{1,128}$"),
            "{text}"
        );
        assert!(text.contains("description longer than 256"), "{text}");
    }

    #[test]
    fn drivers_outside_the_enabled_list_or_in_the_disabled_list_are_refused() {
        let mut ns = Namespace::default();
        assert!(ns.refused_drivers(["raw_exec"]).is_empty());
        ns.capabilities = Some(NamespaceCapabilities {
            enabled_task_drivers: Some(vec!["docker".into(), "exec".into()]),
            disabled_task_drivers: Some(vec!["exec".into()]),
            ..Default::default()
        });
        assert_eq!(
            ns.refused_drivers(["raw_exec", "docker", "exec", "raw_exec"]),
            ["exec", "raw_exec"]
        );
    }
}
