//! The task's `csi_plugin` block: what kind of CSI plugin a task is and where its socket lives.

use serde::{Deserialize, Serialize};

/// Nomad's default mount point of the plugin socket directory inside the task.
pub const DEFAULT_MOUNT_DIR: &str = "/csi";
/// The socket file name inside the mount dir.
pub const SOCKET_NAME: &str = "csi.sock";

/// The `csi_plugin` block of a task, in Nomad's JSON shape (`CSIPluginConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiPluginConfig {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Type")]
    pub plugin_type: String,
    #[serde(rename = "MountDir")]
    pub mount_dir: String,
    #[serde(rename = "StagePublishBaseDir")]
    pub stage_publish_base_dir: String,
    /// Nanoseconds.
    #[serde(rename = "HealthTimeout")]
    pub health_timeout: i64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CsiConfigError {
    #[error("csi_plugin: missing id")]
    MissingId,
    #[error("csi_plugin: type {0:?} is not one of monolith, controller, node")]
    BadType(String),
}

impl CsiPluginConfig {
    /// Checks the block as Nomad's task validation does and fills the default mount dir.
    pub fn validated(mut self) -> Result<Self, CsiConfigError> {
        if self.id.is_empty() {
            return Err(CsiConfigError::MissingId);
        }
        if !matches!(
            self.plugin_type.as_str(),
            "monolith" | "controller" | "node"
        ) {
            return Err(CsiConfigError::BadType(self.plugin_type));
        }
        if self.mount_dir.is_empty() {
            self.mount_dir = DEFAULT_MOUNT_DIR.into();
        }
        Ok(self)
    }

    /// Path of the plugin's socket as the task sees it (`CSI_ENDPOINT`).
    pub fn socket_path_in_task(&self) -> String {
        format!("{}/{}", self.mount_dir.trim_end_matches('/'), SOCKET_NAME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_fills_mount_dir_and_refuses_bad_types() {
        let c = CsiPluginConfig {
            id: "ebs".into(),
            plugin_type: "node".into(),
            ..Default::default()
        }
        .validated()
        .unwrap();
        assert_eq!(c.socket_path_in_task(), "/csi/csi.sock");
        let e = CsiPluginConfig {
            id: "x".into(),
            plugin_type: "bogus".into(),
            ..Default::default()
        }
        .validated()
        .unwrap_err();
        assert_eq!(e, CsiConfigError::BadType("bogus".into()));
    }
}
