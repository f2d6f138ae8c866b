//! A storage provider's own list of its volumes (Nomad's `CSIVolumeExternalStub`, answered by
//! `GET /v1/volumes/external`): what a controller's `ListVolumes` reports, whether or not
//! Nomad knows the volume.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeExternalStub {
    #[serde(rename = "ExternalID")]
    pub external_id: String,
    #[serde(rename = "CapacityBytes")]
    pub capacity_bytes: i64,
    #[serde(rename = "VolumeContext")]
    pub volume_context: BTreeMap<String, String>,
    #[serde(rename = "CloneID")]
    pub clone_id: String,
    #[serde(rename = "SnapshotID")]
    pub snapshot_id: String,
    /// The storage provider's ids of the nodes the volume is attached to.
    #[serde(rename = "PublishedExternalNodeIDs")]
    pub published_external_node_ids: Vec<String>,
    #[serde(rename = "IsAbnormal")]
    pub is_abnormal: bool,
    #[serde(rename = "Status")]
    pub status: String,
}

/// One page of a plugin's volumes; an empty `next_token` is the last page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeExternalList {
    #[serde(rename = "Volumes")]
    pub volumes: Vec<CsiVolumeExternalStub>,
    #[serde(rename = "NextToken")]
    pub next_token: String,
}
