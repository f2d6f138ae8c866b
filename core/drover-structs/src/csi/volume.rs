//! CSI volumes: what an operator registers (or creates through a controller plugin), the claims
//! allocations hold on them, and the rules for taking and releasing those claims (Nomad's
//! `CSIVolume.Claim`, `claimRead`, `claimWrite`, `claimRelease`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::modes::{CsiAccessMode, CsiAttachmentMode, CsiClaimMode, CsiClaimState};
use super::plugin::CsiPlugin;
use crate::alloc::{AllocListStub, Allocation};

/// A topology segment set (`{"rack": "r1", "zone": "us-east-1a"}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiTopology {
    #[serde(rename = "Segments")]
    pub segments: BTreeMap<String, String>,
}

/// The topologies asked for when a volume is created.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiTopologyRequest {
    #[serde(rename = "Required")]
    pub required: Vec<CsiTopology>,
    #[serde(rename = "Preferred")]
    pub preferred: Vec<CsiTopology>,
}

/// One access and attachment mode pair a volume may be claimed with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeCapability {
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: CsiAttachmentMode,
    #[serde(rename = "AccessMode")]
    pub access_mode: CsiAccessMode,
}

/// How a file-system volume is mounted. The flags may carry credentials: the API never
/// returns mount options of a stored volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiMountOptions {
    #[serde(rename = "FSType")]
    pub fs_type: String,
    #[serde(rename = "MountFlags")]
    pub mount_flags: Vec<String>,
}

/// An allocation's hold on a volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeClaim {
    #[serde(rename = "AllocationID")]
    pub allocation_id: String,
    /// Nomad's id of the node the allocation runs on.
    #[serde(rename = "NodeID")]
    pub node_id: String,
    /// The storage provider's id of that node (its node plugin's `NodeInfo.ID`).
    #[serde(rename = "ExternalNodeID")]
    pub external_node_id: String,
    #[serde(rename = "Mode")]
    pub mode: CsiClaimMode,
    #[serde(rename = "AccessMode")]
    pub access_mode: CsiAccessMode,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: CsiAttachmentMode,
    #[serde(rename = "State")]
    pub state: CsiClaimState,
}

/// A volume. `ReadAllocs`/`WriteAllocs` map allocation ids to nothing in storage and to the
/// allocation's stub when read through the API; the plugin health fields are filled from the
/// volume's plugin when read (see [`CsiVolume::apply_plugin_health`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolume {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
    /// The storage provider's id; the volume's own id when empty.
    #[serde(rename = "ExternalID")]
    pub external_id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Topologies")]
    pub topologies: Vec<CsiTopology>,
    /// The mode of the current claims (set by the first, cleared with the last).
    #[serde(rename = "AccessMode")]
    pub access_mode: CsiAccessMode,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: CsiAttachmentMode,
    #[serde(rename = "MountOptions")]
    pub mount_options: Option<CsiMountOptions>,
    /// Credentials for the plugin. Kept in the state, never returned by the API.
    #[serde(rename = "Secrets")]
    pub secrets: Option<BTreeMap<String, String>>,
    #[serde(rename = "Parameters")]
    pub parameters: BTreeMap<String, String>,
    #[serde(rename = "Context")]
    pub context: BTreeMap<String, String>,
    /// Bytes, as the controller reported at creation.
    #[serde(rename = "Capacity")]
    pub capacity: i64,
    #[serde(rename = "RequestedCapacityMin")]
    pub requested_capacity_min: i64,
    #[serde(rename = "RequestedCapacityMax")]
    pub requested_capacity_max: i64,
    #[serde(rename = "RequestedCapabilities")]
    pub requested_capabilities: Vec<CsiVolumeCapability>,
    #[serde(rename = "CloneID")]
    pub clone_id: String,
    #[serde(rename = "SnapshotID")]
    pub snapshot_id: String,
    #[serde(rename = "RequestedTopologies")]
    pub requested_topologies: Option<CsiTopologyRequest>,

    #[serde(rename = "ReadAllocs")]
    pub read_allocs: BTreeMap<String, Option<AllocListStub>>,
    #[serde(rename = "WriteAllocs")]
    pub write_allocs: BTreeMap<String, Option<AllocListStub>>,
    #[serde(rename = "ReadClaims")]
    pub read_claims: BTreeMap<String, CsiVolumeClaim>,
    #[serde(rename = "WriteClaims")]
    pub write_claims: BTreeMap<String, CsiVolumeClaim>,
    /// Claims of allocations that ended, on their way to being freed.
    #[serde(rename = "PastClaims")]
    pub past_claims: BTreeMap<String, CsiVolumeClaim>,
    /// Every allocation holding the volume, read and write, as the API lists them. Only
    /// filled when read through the API.
    #[serde(rename = "Allocations", skip_serializing_if = "Option::is_none")]
    pub allocations: Option<Vec<AllocListStub>>,

    /// The plugin has healthy nodes, and a healthy controller if it needs one.
    #[serde(rename = "Schedulable")]
    pub schedulable: bool,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "ProviderVersion")]
    pub provider_version: String,
    #[serde(rename = "ControllerRequired")]
    pub controller_required: bool,
    #[serde(rename = "ControllersHealthy")]
    pub controllers_healthy: i64,
    #[serde(rename = "ControllersExpected")]
    pub controllers_expected: i64,
    #[serde(rename = "NodesHealthy")]
    pub nodes_healthy: i64,
    #[serde(rename = "NodesExpected")]
    pub nodes_expected: i64,
    /// When a node last reported it could take no more of this plugin's volumes (RFC 3339).
    #[serde(
        rename = "ResourceExhausted",
        serialize_with = "super::serialize_go_time"
    )]
    pub resource_exhausted: String,

    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// The list view of `GET /v1/volumes?type=csi`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "ExternalID")]
    pub external_id: String,
    #[serde(rename = "Topologies")]
    pub topologies: Vec<CsiTopology>,
    #[serde(rename = "AccessMode")]
    pub access_mode: CsiAccessMode,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: CsiAttachmentMode,
    #[serde(rename = "CurrentReaders")]
    pub current_readers: i64,
    #[serde(rename = "CurrentWriters")]
    pub current_writers: i64,
    #[serde(rename = "Schedulable")]
    pub schedulable: bool,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "ControllersHealthy")]
    pub controllers_healthy: i64,
    #[serde(rename = "ControllersExpected")]
    pub controllers_expected: i64,
    #[serde(rename = "NodesHealthy")]
    pub nodes_healthy: i64,
    #[serde(rename = "NodesExpected")]
    pub nodes_expected: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// Why a claim was refused (Nomad's texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsiClaimError {
    #[error("cannot change attachment mode of claimed volume")]
    AttachmentModeChange,
    #[error("allocation missing: {0}")]
    AllocationMissing(String),
    #[error("unschedulable")]
    Unschedulable,
    #[error("volume max claim reached")]
    MaxClaimReached,
}

/// A claim request (Nomad's `CSIVolumeClaimRequest`): a client claiming a volume for one of its
/// allocations, or a checkpoint of a claim's release.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeClaimRequest {
    #[serde(rename = "VolumeID")]
    pub volume_id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "AllocationID")]
    pub allocation_id: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "ExternalNodeID")]
    pub external_node_id: String,
    #[serde(rename = "Claim")]
    pub claim: CsiClaimMode,
    #[serde(rename = "AccessMode")]
    pub access_mode: CsiAccessMode,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: CsiAttachmentMode,
    #[serde(rename = "State")]
    pub state: CsiClaimState,
}

impl CsiVolumeClaimRequest {
    pub fn to_claim(&self) -> CsiVolumeClaim {
        CsiVolumeClaim {
            allocation_id: self.allocation_id.clone(),
            node_id: self.node_id.clone(),
            external_node_id: self.external_node_id.clone(),
            mode: self.claim,
            access_mode: self.access_mode,
            attachment_mode: self.attachment_mode,
            state: self.state,
        }
    }
}

/// What a successful claim answers: the controller's publish context (empty when the plugin
/// attaches nothing) and the volume as it stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeClaimResponse {
    #[serde(rename = "PublishContext")]
    pub publish_context: BTreeMap<String, String>,
    #[serde(rename = "Volume")]
    pub volume: Option<CsiVolume>,
    #[serde(rename = "Index")]
    pub index: u64,
}

impl CsiVolume {
    /// The id the storage provider knows the volume by.
    pub fn remote_id(&self) -> &str {
        if self.external_id.is_empty() {
            &self.id
        } else {
            &self.external_id
        }
    }

    /// Nomad's `CSIVolume.Validate` (its text: `validation: missing volume id, ...`).
    pub fn validate(&self) -> Result<(), String> {
        for (what, id) in [("volume id", &self.id), ("plugin id", &self.plugin_id)] {
            if let Some(why) = super::unsafe_csi_id(id) {
                return Err(format!("validation: {what} {id:?} {why}"));
            }
        }
        let mut errs = Vec::new();
        if self.id.is_empty() {
            errs.push("missing volume id");
        }
        if self.plugin_id.is_empty() {
            errs.push("missing plugin id");
        }
        if self.namespace.is_empty() {
            errs.push("missing namespace");
        }
        if !self.snapshot_id.is_empty() && !self.clone_id.is_empty() {
            errs.push("only one of snapshot_id and clone_id is allowed");
        }
        if self.requested_capabilities.is_empty() {
            errs.push("must include at least one capability block");
        }
        for cap in &self.requested_capabilities {
            if cap.access_mode == CsiAccessMode::Unknown {
                errs.push("capability must include access_mode");
            }
            if cap.attachment_mode == CsiAttachmentMode::Unknown {
                errs.push("capability must include attachment_mode");
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            errs.dedup();
            Err(format!("validation: {}", errs.join(", ")))
        }
    }

    /// Clears what only the servers set (claims, plugin health, indexes), for a volume that
    /// arrives in a register or create request.
    pub fn reset_server_fields(&mut self) {
        self.read_allocs.clear();
        self.write_allocs.clear();
        self.read_claims.clear();
        self.write_claims.clear();
        self.past_claims.clear();
        self.allocations = None;
        self.schedulable = false;
        self.provider.clear();
        self.provider_version.clear();
        self.controller_required = false;
        self.controllers_healthy = 0;
        self.controllers_expected = 0;
        self.nodes_healthy = 0;
        self.nodes_expected = 0;
        self.resource_exhausted.clear();
        self.create_index = 0;
        self.modify_index = 0;
    }

    /// Whether any allocation holds a claim that is not freed yet.
    pub fn in_use(&self) -> bool {
        !self.read_allocs.is_empty() || !self.write_allocs.is_empty()
    }

    fn resource_exhausted(&self) -> bool {
        super::go_time_is_set(&self.resource_exhausted)
    }

    pub fn read_schedulable(&self) -> bool {
        self.schedulable && !self.resource_exhausted()
    }

    /// Schedulable for writes, from the plugin's health and the volume's (or, before its first
    /// claim, its requested) access modes.
    pub fn write_schedulable(&self) -> bool {
        if !self.schedulable || self.resource_exhausted() {
            return false;
        }
        match self.access_mode {
            CsiAccessMode::Unknown => self
                .requested_capabilities
                .iter()
                .any(|c| c.access_mode.is_writable()),
            mode => mode.is_writable(),
        }
    }

    /// Whether another writer fits: single-writer modes allow one, multi-writer any number.
    pub fn write_free_claims(&self) -> bool {
        match self.access_mode {
            CsiAccessMode::SingleNodeWriter | CsiAccessMode::MultiNodeSingleWriter => {
                self.write_claims.is_empty()
            }
            CsiAccessMode::MultiNodeMultiWriter => true,
            CsiAccessMode::Unknown => {
                if self.requested_capabilities.is_empty() {
                    return true;
                }
                for cap in &self.requested_capabilities {
                    match cap.access_mode {
                        CsiAccessMode::SingleNodeWriter | CsiAccessMode::MultiNodeSingleWriter => {
                            return self.write_claims.is_empty();
                        }
                        CsiAccessMode::MultiNodeMultiWriter => return true,
                        _ => {}
                    }
                }
                false
            }
            CsiAccessMode::SingleNodeReader | CsiAccessMode::MultiNodeReader => false,
        }
    }

    /// Applies a claim (Nomad's `CSIVolume.Claim`): a taken read or write claim for `alloc`,
    /// or a step of a release. A claim the allocation already holds is accepted again as is.
    /// `writer_job` names the (namespace, job) of an allocation holding a write claim: a
    /// single-writer volume still takes a writer of the same job (a replacement during an
    /// update), as in Nomad.
    pub fn claim(
        &mut self,
        claim: CsiVolumeClaim,
        alloc: Option<&Allocation>,
        writer_job: &dyn Fn(&str) -> Option<(String, String)>,
    ) -> Result<(), CsiClaimError> {
        // Volumes registered without capabilities get their current modes as the only ones.
        if self.requested_capabilities.is_empty()
            && self.access_mode != CsiAccessMode::Unknown
            && self.attachment_mode != CsiAttachmentMode::Unknown
        {
            self.requested_capabilities = vec![CsiVolumeCapability {
                access_mode: self.access_mode,
                attachment_mode: self.attachment_mode,
            }];
        }
        if self.attachment_mode != CsiAttachmentMode::Unknown
            && claim.attachment_mode != CsiAttachmentMode::Unknown
            && self.attachment_mode != claim.attachment_mode
        {
            return Err(CsiClaimError::AttachmentModeChange);
        }
        if claim.state == CsiClaimState::Taken {
            match claim.mode {
                CsiClaimMode::Read => return self.claim_read(claim, alloc),
                CsiClaimMode::Write => return self.claim_write(claim, alloc, writer_job),
                CsiClaimMode::Release => {}
            }
        }
        self.claim_release(claim);
        Ok(())
    }

    fn claim_read(
        &mut self,
        claim: CsiVolumeClaim,
        alloc: Option<&Allocation>,
    ) -> Result<(), CsiClaimError> {
        if self.read_allocs.contains_key(&claim.allocation_id) {
            return Ok(());
        }
        if alloc.is_none() {
            return Err(CsiClaimError::AllocationMissing(claim.allocation_id));
        }
        if !self.read_schedulable() {
            return Err(CsiClaimError::Unschedulable);
        }
        let id = claim.allocation_id.clone();
        self.hold_claim(id, claim, false);
        Ok(())
    }

    fn claim_write(
        &mut self,
        claim: CsiVolumeClaim,
        alloc: Option<&Allocation>,
        writer_job: &dyn Fn(&str) -> Option<(String, String)>,
    ) -> Result<(), CsiClaimError> {
        if self.write_allocs.contains_key(&claim.allocation_id) {
            return Ok(());
        }
        let Some(alloc) = alloc else {
            return Err(CsiClaimError::AllocationMissing(claim.allocation_id));
        };
        if !self.write_schedulable() {
            return Err(CsiClaimError::Unschedulable);
        }
        if !self.write_free_claims() {
            let other_job = self.write_allocs.keys().any(|id| {
                writer_job(id).is_some_and(|(ns, job)| ns != alloc.namespace || job != alloc.job_id)
            });
            if other_job {
                return Err(CsiClaimError::MaxClaimReached);
            }
        }
        let id = alloc.id.clone();
        self.hold_claim(id, claim, true);
        Ok(())
    }

    /// Records `claim` as the allocation's only live claim, a writer's or a reader's: it leaves
    /// the other list and the past claims.
    fn hold_claim(&mut self, id: String, claim: CsiVolumeClaim, write: bool) {
        self.set_modes_from_claim(&claim);
        self.past_claims.remove(&id);
        let (allocs, claims, other_allocs, other_claims) = if write {
            (
                &mut self.write_allocs,
                &mut self.write_claims,
                &mut self.read_allocs,
                &mut self.read_claims,
            )
        } else {
            (
                &mut self.read_allocs,
                &mut self.read_claims,
                &mut self.write_allocs,
                &mut self.write_claims,
            )
        };
        allocs.insert(id.clone(), None);
        other_allocs.remove(&id);
        other_claims.remove(&id);
        claims.insert(id, claim);
    }

    /// The volume takes the modes of its first claim (for status output and the write checks).
    fn set_modes_from_claim(&mut self, claim: &CsiVolumeClaim) {
        if self.attachment_mode == CsiAttachmentMode::Unknown {
            self.attachment_mode = claim.attachment_mode;
        }
        if self.access_mode == CsiAccessMode::Unknown {
            self.access_mode = claim.access_mode;
        }
    }

    /// A release step: the claim moves to the past claims, and once it is ready to free, the
    /// allocation lets go of the volume entirely.
    fn claim_release(&mut self, claim: CsiVolumeClaim) {
        let id = claim.allocation_id.clone();
        if claim.state == CsiClaimState::ReadyToFree {
            self.read_allocs.remove(&id);
            self.write_allocs.remove(&id);
            self.read_claims.remove(&id);
            self.write_claims.remove(&id);
            self.past_claims.remove(&id);
            if self.read_claims.is_empty()
                && self.write_claims.is_empty()
                && self.past_claims.is_empty()
            {
                self.access_mode = CsiAccessMode::Unknown;
                self.attachment_mode = CsiAttachmentMode::Unknown;
            }
        } else {
            self.past_claims.insert(id, claim);
        }
    }

    /// Nomad's claim denormalisation: an allocation that holds a claim but ended (or is gone,
    /// `ended` answers true for both) gets a past claim in the unpublishing state, so its
    /// release can start. Claims taken before claims carried modes get the volume's modes.
    pub fn add_past_claims_for_ended_allocs(&mut self, ended: &dyn Fn(&str) -> bool) {
        let holders: Vec<(String, CsiClaimMode)> = self
            .read_allocs
            .keys()
            .map(|id| (id.clone(), CsiClaimMode::Read))
            .chain(
                self.write_allocs
                    .keys()
                    .map(|id| (id.clone(), CsiClaimMode::Write)),
            )
            .collect();
        for (id, mode) in holders {
            if !ended(&id) || self.past_claims.contains_key(&id) {
                continue;
            }
            let current = self
                .read_claims
                .get(&id)
                .or_else(|| self.write_claims.get(&id))
                .cloned()
                .unwrap_or_default();
            self.past_claims.insert(
                id.clone(),
                CsiVolumeClaim {
                    allocation_id: id,
                    node_id: current.node_id,
                    external_node_id: current.external_node_id,
                    mode,
                    access_mode: current.access_mode,
                    attachment_mode: current.attachment_mode,
                    state: CsiClaimState::Unpublishing,
                },
            );
        }
        let (access, attachment) = (self.access_mode, self.attachment_mode);
        for claim in self
            .read_claims
            .values_mut()
            .chain(self.write_claims.values_mut())
        {
            if claim.access_mode == CsiAccessMode::Unknown
                || claim.attachment_mode == CsiAttachmentMode::Unknown
            {
                claim.access_mode = access;
                claim.attachment_mode = attachment;
            }
        }
    }

    /// Copies the plugin's health onto the volume (Nomad's `CSIVolumeDenormalizePlugins`): no
    /// plugin means nothing healthy and not schedulable.
    pub fn apply_plugin_health(&mut self, plugin: Option<&CsiPlugin>) {
        let Some(p) = plugin else {
            self.controllers_healthy = 0;
            self.nodes_healthy = 0;
            self.schedulable = false;
            return;
        };
        self.provider.clone_from(&p.provider);
        self.provider_version.clone_from(&p.version);
        self.controller_required = p.controller_required;
        self.controllers_healthy = p.controllers_healthy;
        self.nodes_healthy = p.nodes_healthy;
        self.controllers_expected = p.controllers_expected;
        self.nodes_expected = p.nodes_expected;
        self.schedulable =
            self.nodes_healthy > 0 && (!self.controller_required || self.controllers_healthy > 0);
    }

    /// Fills the allocation stubs of the claim maps and the `Allocations` list from `stub_of`
    /// (write holders first, as Nomad lists them).
    pub fn fill_allocations(&mut self, stub_of: &dyn Fn(&str) -> Option<AllocListStub>) {
        let mut all = Vec::new();
        for (id, slot) in self.write_allocs.iter_mut() {
            *slot = stub_of(id);
            all.extend(slot.clone());
        }
        for (id, slot) in self.read_allocs.iter_mut() {
            *slot = stub_of(id);
            all.extend(slot.clone());
        }
        self.allocations = Some(all);
    }

    /// A copy fit for the API: secrets and mount options (whose flags may hold credentials)
    /// removed, as Nomad's HTTP layer does.
    pub fn sanitized(&self) -> CsiVolume {
        let mut v = self.clone();
        v.secrets = None;
        v.mount_options = None;
        v
    }

    pub fn stub(&self) -> CsiVolumeListStub {
        CsiVolumeListStub {
            id: self.id.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            external_id: self.external_id.clone(),
            topologies: self.topologies.clone(),
            access_mode: self.access_mode,
            attachment_mode: self.attachment_mode,
            current_readers: self.read_allocs.len() as i64,
            current_writers: self.write_allocs.len() as i64,
            schedulable: self.schedulable,
            plugin_id: self.plugin_id.clone(),
            provider: self.provider.clone(),
            controllers_healthy: self.controllers_healthy,
            controllers_expected: self.controllers_expected,
            nodes_healthy: self.nodes_healthy,
            nodes_expected: self.nodes_expected,
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(mode: CsiAccessMode) -> CsiVolume {
        CsiVolume {
            id: "db".into(),
            namespace: "default".into(),
            plugin_id: "hostpath".into(),
            schedulable: true,
            requested_capabilities: vec![CsiVolumeCapability {
                access_mode: mode,
                attachment_mode: CsiAttachmentMode::FileSystem,
            }],
            ..Default::default()
        }
    }

    fn alloc(id: &str, job: &str) -> Allocation {
        Allocation {
            id: id.into(),
            namespace: "default".into(),
            job_id: job.into(),
            node_id: "n1".into(),
            ..Default::default()
        }
    }

    fn taken(alloc: &str, mode: CsiClaimMode, access: CsiAccessMode) -> CsiVolumeClaim {
        CsiVolumeClaim {
            allocation_id: alloc.into(),
            node_id: "n1".into(),
            mode,
            access_mode: access,
            attachment_mode: CsiAttachmentMode::FileSystem,
            state: CsiClaimState::Taken,
            ..Default::default()
        }
    }

    /// Every writer in these tests belongs to the job named by its allocation id's prefix.
    fn job_of(id: &str) -> Option<(String, String)> {
        Some(("default".into(), id.split('-').next().unwrap_or("").into()))
    }

    #[test]
    fn volume_and_plugin_ids_that_are_not_plain_names_are_refused() {
        let mut v = volume(CsiAccessMode::SingleNodeWriter);
        v.id = "../../../var/lib".into();
        let e = v.validate().unwrap_err();
        assert!(e.contains("volume id \"../../../var/lib\""), "{e}");
        let mut v = volume(CsiAccessMode::SingleNodeWriter);
        v.plugin_id = "x/../../y".into();
        assert!(v.validate().unwrap_err().contains("plugin id"));
        let mut v = volume(CsiAccessMode::SingleNodeWriter);
        v.id = "mysql[0]".into();
        v.validate().unwrap();
    }

    #[test]
    fn single_node_writer_takes_one_writer_and_readers() {
        let mode = CsiAccessMode::SingleNodeWriter;
        let mut v = volume(mode);
        let a = alloc("web-1", "web");
        v.claim(taken("web-1", CsiClaimMode::Write, mode), Some(&a), &job_of)
            .unwrap();
        assert_eq!(v.access_mode, mode);
        assert_eq!(v.attachment_mode, CsiAttachmentMode::FileSystem);
        // The same allocation claiming again is accepted and changes nothing.
        let before = v.clone();
        v.claim(taken("web-1", CsiClaimMode::Write, mode), Some(&a), &job_of)
            .unwrap();
        assert_eq!(v, before);
        // A writer of another job is refused.
        let b = alloc("db-1", "db");
        let err = v
            .claim(taken("db-1", CsiClaimMode::Write, mode), Some(&b), &job_of)
            .unwrap_err();
        assert_eq!(err.to_string(), "volume max claim reached");
        // Readers fit.
        v.claim(taken("db-1", CsiClaimMode::Read, mode), Some(&b), &job_of)
            .unwrap();
        assert_eq!((v.read_allocs.len(), v.write_allocs.len()), (1, 1));
        assert!(v.in_use());
    }

    #[test]
    fn single_writer_volume_takes_a_second_writer_of_the_same_job() {
        let mode = CsiAccessMode::MultiNodeSingleWriter;
        let mut v = volume(mode);
        v.claim(
            taken("web-1", CsiClaimMode::Write, mode),
            Some(&alloc("web-1", "web")),
            &job_of,
        )
        .unwrap();
        v.claim(
            taken("web-2", CsiClaimMode::Write, mode),
            Some(&alloc("web-2", "web")),
            &job_of,
        )
        .unwrap();
        assert_eq!(v.write_claims.len(), 2);
    }

    #[test]
    fn multi_node_single_writer_takes_many_readers_one_writer() {
        let mode = CsiAccessMode::MultiNodeSingleWriter;
        let mut v = volume(mode);
        for i in 0..3 {
            let id = format!("r{i}-x");
            v.claim(
                taken(&id, CsiClaimMode::Read, mode),
                Some(&alloc(&id, "r")),
                &job_of,
            )
            .unwrap();
        }
        v.claim(
            taken("w1-x", CsiClaimMode::Write, mode),
            Some(&alloc("w1-x", "w1")),
            &job_of,
        )
        .unwrap();
        let err = v
            .claim(
                taken("w2-x", CsiClaimMode::Write, mode),
                Some(&alloc("w2-x", "w2")),
                &job_of,
            )
            .unwrap_err();
        assert_eq!(err, CsiClaimError::MaxClaimReached);
        assert_eq!((v.read_allocs.len(), v.write_allocs.len()), (3, 1));
    }

    #[test]
    fn read_only_volume_refuses_writers_and_unschedulable_refuses_all() {
        let mode = CsiAccessMode::MultiNodeReader;
        let mut v = volume(mode);
        let a = alloc("a-1", "a");
        assert_eq!(
            v.claim(taken("a-1", CsiClaimMode::Write, mode), Some(&a), &job_of),
            Err(CsiClaimError::Unschedulable)
        );
        v.schedulable = false;
        assert_eq!(
            v.claim(taken("a-1", CsiClaimMode::Read, mode), Some(&a), &job_of),
            Err(CsiClaimError::Unschedulable)
        );
        v.schedulable = true;
        assert_eq!(
            v.claim(taken("a-1", CsiClaimMode::Read, mode), None, &job_of),
            Err(CsiClaimError::AllocationMissing("a-1".into()))
        );
    }

    #[test]
    fn attachment_mode_of_a_claimed_volume_cannot_change() {
        let mode = CsiAccessMode::MultiNodeMultiWriter;
        let mut v = volume(mode);
        v.claim(
            taken("a-1", CsiClaimMode::Write, mode),
            Some(&alloc("a-1", "a")),
            &job_of,
        )
        .unwrap();
        let mut block = taken("b-1", CsiClaimMode::Write, mode);
        block.attachment_mode = CsiAttachmentMode::BlockDevice;
        assert_eq!(
            v.claim(block, Some(&alloc("b-1", "b")), &job_of),
            Err(CsiClaimError::AttachmentModeChange)
        );
    }

    #[test]
    fn release_keeps_the_allocation_until_ready_to_free() {
        let mode = CsiAccessMode::SingleNodeWriter;
        let mut v = volume(mode);
        v.claim(
            taken("a-1", CsiClaimMode::Write, mode),
            Some(&alloc("a-1", "a")),
            &job_of,
        )
        .unwrap();
        for state in [
            CsiClaimState::Unpublishing,
            CsiClaimState::NodeDetached,
            CsiClaimState::ControllerDetached,
        ] {
            let mut c = taken("a-1", CsiClaimMode::Write, mode);
            c.state = state;
            v.claim(c, None, &job_of).unwrap();
            assert_eq!(v.past_claims["a-1"].state, state);
            assert!(
                v.write_allocs.contains_key("a-1"),
                "still held at {state:?}"
            );
            assert!(v.in_use());
        }
        let mut c = taken("a-1", CsiClaimMode::Write, mode);
        c.state = CsiClaimState::ReadyToFree;
        v.claim(c, None, &job_of).unwrap();
        assert!(!v.in_use());
        assert!(v.past_claims.is_empty() && v.write_claims.is_empty());
        // The last claim gone, the volume forgets its modes.
        assert_eq!(v.access_mode, CsiAccessMode::Unknown);
        assert_eq!(v.attachment_mode, CsiAttachmentMode::Unknown);
    }

    #[test]
    fn ended_allocations_get_unpublishing_past_claims() {
        let mode = CsiAccessMode::MultiNodeMultiWriter;
        let mut v = volume(mode);
        for id in ["a-1", "b-1"] {
            v.claim(
                taken(id, CsiClaimMode::Write, mode),
                Some(&alloc(id, "a")),
                &job_of,
            )
            .unwrap();
        }
        v.add_past_claims_for_ended_allocs(&|id| id == "b-1");
        assert_eq!(v.past_claims.len(), 1);
        let past = &v.past_claims["b-1"];
        assert_eq!(past.state, CsiClaimState::Unpublishing);
        assert_eq!(
            (past.mode, past.node_id.as_str()),
            (CsiClaimMode::Write, "n1")
        );
    }

    #[test]
    fn plugin_health_decides_schedulable() {
        let mut v = volume(CsiAccessMode::SingleNodeWriter);
        v.apply_plugin_health(None);
        assert!(!v.schedulable);
        let mut p = CsiPlugin::new("hostpath", 1);
        p.nodes_healthy = 1;
        v.apply_plugin_health(Some(&p));
        assert!(v.schedulable);
        p.controller_required = true;
        v.apply_plugin_health(Some(&p));
        assert!(!v.schedulable, "a required controller must be healthy");
        p.controllers_healthy = 1;
        v.apply_plugin_health(Some(&p));
        assert!(v.schedulable);
        assert!(v.controller_required);
    }

    #[test]
    fn validation_lists_every_problem_in_nomads_words() {
        let v = CsiVolume::default();
        assert_eq!(
            v.validate().unwrap_err(),
            "validation: missing volume id, missing plugin id, missing namespace, \
             must include at least one capability block"
        );
        assert!(volume(CsiAccessMode::SingleNodeWriter).validate().is_ok());
    }

    #[test]
    fn sanitized_volume_has_no_secrets_or_mount_flags() {
        let mut v = volume(CsiAccessMode::SingleNodeWriter);
        v.secrets = Some(BTreeMap::from([("pw".to_string(), "hunter2".to_string())]));
        v.mount_options = Some(CsiMountOptions {
            fs_type: "ext4".into(),
            mount_flags: vec!["password=hunter2".into()],
        });
        let json = serde_json::to_string(&v.sanitized()).unwrap();
        assert!(!json.contains("hunter2"), "{json}");
        assert!(json.contains("\"Secrets\":null"), "{json}");
        assert!(json.contains("\"ResourceExhausted\":\"0001-01-01T00:00:00Z\""));
        // Stored volumes keep them.
        let stored = serde_json::to_string(&v).unwrap();
        assert!(stored.contains("hunter2"));
    }
}
