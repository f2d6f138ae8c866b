//! CSI concepts as Drover names them (Nomad's names where Nomad has one), free of protobuf
//! types: what the client takes and returns. Conversions to and from the wire types live in
//! `convert`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Opaque string maps of the protocol (parameters, contexts, topology segments).
pub type StringMap = BTreeMap<String, String>;

/// How a volume may be used across nodes; Nomad's `access_mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AccessMode {
    #[serde(rename = "single-node-reader-only")]
    SingleNodeReaderOnly,
    #[serde(rename = "single-node-writer")]
    SingleNodeWriter,
    #[serde(rename = "multi-node-reader-only")]
    MultiNodeReaderOnly,
    #[serde(rename = "multi-node-single-writer")]
    MultiNodeSingleWriter,
    #[serde(rename = "multi-node-multi-writer")]
    MultiNodeMultiWriter,
}

impl AccessMode {
    pub const ALL: [AccessMode; 5] = [
        AccessMode::SingleNodeReaderOnly,
        AccessMode::SingleNodeWriter,
        AccessMode::MultiNodeReaderOnly,
        AccessMode::MultiNodeSingleWriter,
        AccessMode::MultiNodeMultiWriter,
    ];

    /// Nomad's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::SingleNodeReaderOnly => "single-node-reader-only",
            AccessMode::SingleNodeWriter => "single-node-writer",
            AccessMode::MultiNodeReaderOnly => "multi-node-reader-only",
            AccessMode::MultiNodeSingleWriter => "multi-node-single-writer",
            AccessMode::MultiNodeMultiWriter => "multi-node-multi-writer",
        }
    }

    /// Whether the volume may be published on several nodes at once.
    pub fn is_multi_node(self) -> bool {
        matches!(
            self,
            AccessMode::MultiNodeReaderOnly
                | AccessMode::MultiNodeSingleWriter
                | AccessMode::MultiNodeMultiWriter
        )
    }

    /// Whether the mode only ever reads.
    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            AccessMode::SingleNodeReaderOnly | AccessMode::MultiNodeReaderOnly
        )
    }
}

impl fmt::Display for AccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of the known modes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownName {
    pub kind: &'static str,
    pub value: String,
}

impl FromStr for AccessMode {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AccessMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownName {
                kind: "access mode",
                value: s.to_string(),
            })
    }
}

/// How a volume appears in the task; Nomad's `attachment_mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum AttachmentMode {
    #[serde(rename = "file-system")]
    FileSystem,
    #[serde(rename = "block-device")]
    BlockDevice,
}

impl AttachmentMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AttachmentMode::FileSystem => "file-system",
            AttachmentMode::BlockDevice => "block-device",
        }
    }
}

impl fmt::Display for AttachmentMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttachmentMode {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "file-system" => Ok(AttachmentMode::FileSystem),
            "block-device" => Ok(AttachmentMode::BlockDevice),
            _ => Err(UnknownName {
                kind: "attachment mode",
                value: s.to_string(),
            }),
        }
    }
}

/// File system and flags for a file-system attachment (Nomad's `mount_options`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct MountOptions {
    /// Empty: the plugin's choice.
    pub fs_type: String,
    pub mount_flags: Vec<String>,
}

/// How the CO means to use a volume (CSI `VolumeCapability`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VolumeCapability {
    pub access_mode: AccessMode,
    pub attachment_mode: AttachmentMode,
    /// Only meaningful for [`AttachmentMode::FileSystem`].
    #[serde(default)]
    pub mount_options: MountOptions,
}

impl VolumeCapability {
    /// A file-system capability with default mount options.
    pub fn file_system(access_mode: AccessMode) -> Self {
        VolumeCapability {
            access_mode,
            attachment_mode: AttachmentMode::FileSystem,
            mount_options: MountOptions::default(),
        }
    }
}

/// Bytes; 0 means "not set" on either side, as in CSI.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CapacityRange {
    pub required_bytes: i64,
    pub limit_bytes: i64,
}

/// Topological segments (for example `{"zone": "z1"}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Topology {
    pub segments: StringMap,
}

/// Where a new volume must (`requisite`) or should (`preferred`) be accessible from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyRequirement {
    pub requisite: Vec<Topology>,
    pub preferred: Vec<Topology>,
}

/// What a new volume is filled from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VolumeContentSource {
    Snapshot(String),
    Volume(String),
}

/// Secrets passed to the plugin. Debug output shows the keys only: secrets must not be
/// logged (the spec's `csi_secret` fields).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secrets(pub StringMap);

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets")
            .field("keys", &self.0.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What the plugin says about itself (`GetPluginInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    pub name: String,
    pub vendor_version: String,
    pub manifest: StringMap,
}

/// The identity service's capabilities (`GetPluginCapabilities`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginCapabilities {
    pub controller_service: bool,
    /// Volumes are not equally reachable from every node: use topologies.
    pub volume_accessibility_constraints: bool,
    pub group_controller_service: bool,
    pub online_expansion: bool,
    pub offline_expansion: bool,
}

/// The controller service's capabilities (`ControllerGetCapabilities`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerCapabilities {
    pub create_delete_volume: bool,
    pub publish_unpublish_volume: bool,
    pub list_volumes: bool,
    pub get_capacity: bool,
    pub create_delete_snapshot: bool,
    pub list_snapshots: bool,
    pub clone_volume: bool,
    pub publish_readonly: bool,
    pub expand_volume: bool,
    pub list_volumes_published_nodes: bool,
    pub volume_condition: bool,
    pub get_volume: bool,
    pub single_node_multi_writer: bool,
    pub modify_volume: bool,
}

/// The node service's capabilities (`NodeGetCapabilities`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapabilities {
    pub stage_unstage_volume: bool,
    pub get_volume_stats: bool,
    pub expand_volume: bool,
    pub volume_condition: bool,
    pub single_node_multi_writer: bool,
    pub volume_mount_group: bool,
}

/// The node as the plugin knows it (`NodeGetInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The id to pass to `ControllerPublishVolume` for this node.
    pub node_id: String,
    /// 0: no limit given.
    pub max_volumes: i64,
    pub accessible_topology: Option<Topology>,
}

/// A volume as the plugin describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Volume {
    /// The plugin's id of the volume (Nomad's `ExternalID`).
    pub external_id: String,
    /// 0: unknown.
    pub capacity_bytes: i64,
    pub context: StringMap,
    pub content_source: Option<VolumeContentSource>,
    pub accessible_topology: Vec<Topology>,
}

/// The condition a plugin reports for a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeCondition {
    pub abnormal: bool,
    pub message: String,
}

/// One entry of `ListVolumes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeEntry {
    pub volume: Volume,
    /// Nodes the volume is controller-published to (when the plugin reports them).
    pub published_node_ids: Vec<String>,
    pub condition: Option<VolumeCondition>,
}

/// A page of `ListVolumes`; an empty `next_token` means the last page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumePage {
    pub entries: Vec<VolumeEntry>,
    pub next_token: String,
}

/// `CreateVolume`'s arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateVolumeRequest {
    /// The CO's name of the volume: the idempotency key.
    pub name: String,
    pub capacity: Option<CapacityRange>,
    pub capabilities: Vec<VolumeCapability>,
    pub parameters: StringMap,
    pub secrets: Secrets,
    pub content_source: Option<VolumeContentSource>,
    pub accessibility: Option<TopologyRequirement>,
}

/// `ValidateVolumeCapabilities`' arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidateVolumeRequest {
    pub external_id: String,
    pub capabilities: Vec<VolumeCapability>,
    pub parameters: StringMap,
    pub context: StringMap,
    pub secrets: Secrets,
}

/// `ControllerPublishVolume`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerPublishRequest {
    pub external_id: String,
    /// The node id the node plugin reported (`NodeGetInfo`).
    pub node_id: String,
    pub capability: VolumeCapability,
    pub readonly: bool,
    pub secrets: Secrets,
    pub context: StringMap,
}

/// `GetCapacity`'s filters; all optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapacityRequest {
    pub capabilities: Vec<VolumeCapability>,
    pub parameters: StringMap,
    pub accessible_topology: Option<Topology>,
}

/// `GetCapacity`'s answer, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    pub available: i64,
    pub maximum_volume_size: Option<i64>,
    pub minimum_volume_size: Option<i64>,
}

/// `ControllerExpandVolume`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerExpandRequest {
    pub external_id: String,
    pub capacity: CapacityRange,
    pub capability: Option<VolumeCapability>,
    pub secrets: Secrets,
}

/// `ControllerExpandVolume`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerExpandResult {
    pub capacity_bytes: i64,
    /// The CO must then call `NodeExpandVolume` where the volume is in use.
    pub node_expansion_required: bool,
}

/// A snapshot as the plugin describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub id: String,
    pub source_volume_id: String,
    pub size_bytes: i64,
    /// Nanoseconds since the Unix epoch; 0 when the plugin gave none.
    pub create_time_nanos: i64,
    pub ready: bool,
}

/// `ListSnapshots`' arguments: one page of at most `max_entries` (0: no limit) from
/// `starting_token` (empty: the start), filtered by snapshot or source volume when set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListSnapshotsRequest {
    pub max_entries: i32,
    pub starting_token: String,
    pub source_volume_id: String,
    pub snapshot_id: String,
    pub secrets: Secrets,
}

/// A page of `ListSnapshots`; an empty `next_token` means the last page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotPage {
    pub entries: Vec<Snapshot>,
    pub next_token: String,
}

/// `NodeStageVolume`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStageRequest {
    pub external_id: String,
    /// What `ControllerPublishVolume` returned, if the plugin has a controller.
    pub publish_context: StringMap,
    /// The per-volume staging directory, in the plugin's mount namespace.
    pub staging_target_path: PathBuf,
    pub capability: VolumeCapability,
    pub secrets: Secrets,
    pub context: StringMap,
}

/// `NodePublishVolume`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePublishRequest {
    pub external_id: String,
    pub publish_context: StringMap,
    /// Required when the plugin stages volumes (`NodeCapabilities::stage_unstage_volume`).
    pub staging_target_path: Option<PathBuf>,
    /// Where the volume appears; the plugin creates it.
    pub target_path: PathBuf,
    pub capability: VolumeCapability,
    pub readonly: bool,
    pub secrets: Secrets,
    pub context: StringMap,
}

/// `NodeExpandVolume`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeExpandRequest {
    pub external_id: String,
    /// Where the volume is published (or staged).
    pub volume_path: PathBuf,
    pub staging_target_path: Option<PathBuf>,
    pub capacity: Option<CapacityRange>,
    pub capability: Option<VolumeCapability>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_and_attachment_modes_use_nomads_names_both_ways() {
        for mode in AccessMode::ALL {
            assert_eq!(mode.as_str().parse::<AccessMode>(), Ok(mode));
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
        }
        assert_eq!(
            "block-device".parse::<AttachmentMode>(),
            Ok(AttachmentMode::BlockDevice)
        );
        assert_eq!(
            serde_json::to_string(&AttachmentMode::FileSystem).unwrap(),
            "\"file-system\""
        );
        assert!("single-node".parse::<AccessMode>().is_err());
        assert!("file".parse::<AttachmentMode>().is_err());
    }

    #[test]
    fn secrets_debug_shows_keys_not_values() {
        let secrets = Secrets(StringMap::from([("password".into(), "hunter2".into())]));
        let shown = format!("{secrets:?}");
        assert!(shown.contains("password"));
        assert!(!shown.contains("hunter2"));
    }

    #[test]
    fn only_multi_node_modes_are_multi_node() {
        assert!(!AccessMode::SingleNodeWriter.is_multi_node());
        assert!(!AccessMode::SingleNodeReaderOnly.is_multi_node());
        assert!(AccessMode::MultiNodeReaderOnly.is_multi_node());
        assert!(AccessMode::MultiNodeReaderOnly.is_read_only());
        assert!(!AccessMode::MultiNodeMultiWriter.is_read_only());
    }
}
