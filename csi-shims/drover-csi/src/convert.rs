//! Between the model and the wire types. Public as trait impls so that a plugin written in
//! Rust (such as drover-csi-hostpath) checks requests with the same rules the client uses.

use crate::model::*;
use crate::proto;
use proto::volume_capability::{AccessType, access_mode::Mode};

impl From<AccessMode> for Mode {
    fn from(mode: AccessMode) -> Self {
        match mode {
            AccessMode::SingleNodeReaderOnly => Mode::SingleNodeReaderOnly,
            AccessMode::SingleNodeWriter => Mode::SingleNodeWriter,
            AccessMode::MultiNodeReaderOnly => Mode::MultiNodeReaderOnly,
            AccessMode::MultiNodeSingleWriter => Mode::MultiNodeSingleWriter,
            AccessMode::MultiNodeMultiWriter => Mode::MultiNodeMultiWriter,
        }
    }
}

impl From<&VolumeCapability> for proto::VolumeCapability {
    fn from(cap: &VolumeCapability) -> Self {
        let access_type = match cap.attachment_mode {
            AttachmentMode::BlockDevice => AccessType::Block(Default::default()),
            AttachmentMode::FileSystem => {
                AccessType::Mount(proto::volume_capability::MountVolume {
                    fs_type: cap.mount_options.fs_type.clone(),
                    mount_flags: cap.mount_options.mount_flags.clone(),
                    volume_mount_group: String::new(),
                })
            }
        };
        proto::VolumeCapability {
            access_mode: Some(proto::volume_capability::AccessMode {
                mode: Mode::from(cap.access_mode) as i32,
            }),
            access_type: Some(access_type),
        }
    }
}

/// Why a wire capability is not one Drover can express; the text is fit for an
/// INVALID_ARGUMENT status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    #[error("volume capability: access_mode is required")]
    MissingAccessMode,
    #[error("volume capability: access mode {0} is not supported")]
    UnsupportedAccessMode(String),
    #[error("volume capability: access_type (block or mount) is required")]
    MissingAccessType,
}

impl TryFrom<&proto::VolumeCapability> for VolumeCapability {
    type Error = CapabilityError;

    fn try_from(cap: &proto::VolumeCapability) -> Result<Self, Self::Error> {
        let raw_mode = cap
            .access_mode
            .ok_or(CapabilityError::MissingAccessMode)?
            .mode;
        let access_mode = match Mode::try_from(raw_mode) {
            Ok(Mode::SingleNodeReaderOnly) => AccessMode::SingleNodeReaderOnly,
            Ok(Mode::SingleNodeWriter) => AccessMode::SingleNodeWriter,
            Ok(Mode::MultiNodeReaderOnly) => AccessMode::MultiNodeReaderOnly,
            Ok(Mode::MultiNodeSingleWriter) => AccessMode::MultiNodeSingleWriter,
            Ok(Mode::MultiNodeMultiWriter) => AccessMode::MultiNodeMultiWriter,
            Ok(Mode::Unknown) => return Err(CapabilityError::MissingAccessMode),
            Ok(other) => {
                return Err(CapabilityError::UnsupportedAccessMode(
                    other.as_str_name().to_string(),
                ));
            }
            Err(_) => {
                return Err(CapabilityError::UnsupportedAccessMode(raw_mode.to_string()));
            }
        };
        let (attachment_mode, mount_options) = match &cap.access_type {
            Some(AccessType::Block(_)) => (AttachmentMode::BlockDevice, MountOptions::default()),
            Some(AccessType::Mount(m)) => (
                AttachmentMode::FileSystem,
                MountOptions {
                    fs_type: m.fs_type.clone(),
                    mount_flags: m.mount_flags.clone(),
                },
            ),
            None => return Err(CapabilityError::MissingAccessType),
        };
        Ok(VolumeCapability {
            access_mode,
            attachment_mode,
            mount_options,
        })
    }
}

impl From<&CapacityRange> for proto::CapacityRange {
    fn from(c: &CapacityRange) -> Self {
        proto::CapacityRange {
            required_bytes: c.required_bytes,
            limit_bytes: c.limit_bytes,
        }
    }
}

impl From<&proto::CapacityRange> for CapacityRange {
    fn from(c: &proto::CapacityRange) -> Self {
        CapacityRange {
            required_bytes: c.required_bytes,
            limit_bytes: c.limit_bytes,
        }
    }
}

impl From<&Topology> for proto::Topology {
    fn from(t: &Topology) -> Self {
        proto::Topology {
            segments: t.segments.clone(),
        }
    }
}

impl From<&proto::Topology> for Topology {
    fn from(t: &proto::Topology) -> Self {
        Topology {
            segments: t.segments.clone(),
        }
    }
}

impl From<&TopologyRequirement> for proto::TopologyRequirement {
    fn from(t: &TopologyRequirement) -> Self {
        proto::TopologyRequirement {
            requisite: t.requisite.iter().map(Into::into).collect(),
            preferred: t.preferred.iter().map(Into::into).collect(),
        }
    }
}

impl From<&proto::TopologyRequirement> for TopologyRequirement {
    fn from(t: &proto::TopologyRequirement) -> Self {
        TopologyRequirement {
            requisite: t.requisite.iter().map(Into::into).collect(),
            preferred: t.preferred.iter().map(Into::into).collect(),
        }
    }
}

impl From<&VolumeContentSource> for proto::VolumeContentSource {
    fn from(s: &VolumeContentSource) -> Self {
        use proto::volume_content_source::{SnapshotSource, Type, VolumeSource};
        let source = match s {
            VolumeContentSource::Snapshot(id) => Type::Snapshot(SnapshotSource {
                snapshot_id: id.clone(),
            }),
            VolumeContentSource::Volume(id) => Type::Volume(VolumeSource {
                volume_id: id.clone(),
            }),
        };
        proto::VolumeContentSource {
            r#type: Some(source),
        }
    }
}

/// `None` for a source message without a type (the spec requires one; tolerate it).
pub(crate) fn content_source(s: &proto::VolumeContentSource) -> Option<VolumeContentSource> {
    use proto::volume_content_source::Type;
    match s.r#type.as_ref()? {
        Type::Snapshot(snap) => Some(VolumeContentSource::Snapshot(snap.snapshot_id.clone())),
        Type::Volume(vol) => Some(VolumeContentSource::Volume(vol.volume_id.clone())),
    }
}

impl TryFrom<&proto::VolumeContentSource> for VolumeContentSource {
    type Error = &'static str;
    fn try_from(s: &proto::VolumeContentSource) -> Result<Self, Self::Error> {
        content_source(s).ok_or("volume content source: a snapshot or a volume is required")
    }
}

impl From<&proto::Volume> for Volume {
    fn from(v: &proto::Volume) -> Self {
        Volume {
            external_id: v.volume_id.clone(),
            capacity_bytes: v.capacity_bytes,
            context: v.volume_context.clone(),
            content_source: v.content_source.as_ref().and_then(content_source),
            accessible_topology: v.accessible_topology.iter().map(Into::into).collect(),
        }
    }
}

impl From<&proto::Snapshot> for Snapshot {
    fn from(s: &proto::Snapshot) -> Self {
        let create_time_nanos = s.creation_time.as_ref().map_or(0, |t| {
            t.seconds
                .saturating_mul(1_000_000_000)
                .saturating_add(i64::from(t.nanos))
        });
        Snapshot {
            id: s.snapshot_id.clone(),
            source_volume_id: s.source_volume_id.clone(),
            size_bytes: s.size_bytes,
            create_time_nanos,
            ready: s.ready_to_use,
        }
    }
}

impl From<&proto::GetPluginCapabilitiesResponse> for PluginCapabilities {
    fn from(resp: &proto::GetPluginCapabilitiesResponse) -> Self {
        use proto::plugin_capability::{Type, service, volume_expansion};
        let mut caps = PluginCapabilities::default();
        for cap in &resp.capabilities {
            match &cap.r#type {
                Some(Type::Service(s)) => match service::Type::try_from(s.r#type) {
                    Ok(service::Type::ControllerService) => caps.controller_service = true,
                    Ok(service::Type::VolumeAccessibilityConstraints) => {
                        caps.volume_accessibility_constraints = true
                    }
                    Ok(service::Type::GroupControllerService) => {
                        caps.group_controller_service = true
                    }
                    // Unknown values come from newer plugins: ignore them, as Nomad does.
                    Ok(service::Type::Unknown) | Err(_) => {}
                },
                Some(Type::VolumeExpansion(e)) => {
                    match volume_expansion::Type::try_from(e.r#type) {
                        Ok(volume_expansion::Type::Online) => caps.online_expansion = true,
                        Ok(volume_expansion::Type::Offline) => caps.offline_expansion = true,
                        Ok(volume_expansion::Type::Unknown) | Err(_) => {}
                    }
                }
                None => {}
            }
        }
        caps
    }
}

impl From<&PluginCapabilities> for proto::GetPluginCapabilitiesResponse {
    fn from(caps: &PluginCapabilities) -> Self {
        use proto::plugin_capability::{Service, Type, VolumeExpansion, service, volume_expansion};
        let service = |t: service::Type| proto::PluginCapability {
            r#type: Some(Type::Service(Service { r#type: t as i32 })),
        };
        let expansion = |t: volume_expansion::Type| proto::PluginCapability {
            r#type: Some(Type::VolumeExpansion(VolumeExpansion { r#type: t as i32 })),
        };
        let mut out = Vec::new();
        if caps.controller_service {
            out.push(service(service::Type::ControllerService));
        }
        if caps.volume_accessibility_constraints {
            out.push(service(service::Type::VolumeAccessibilityConstraints));
        }
        if caps.group_controller_service {
            out.push(service(service::Type::GroupControllerService));
        }
        if caps.online_expansion {
            out.push(expansion(volume_expansion::Type::Online));
        }
        if caps.offline_expansion {
            out.push(expansion(volume_expansion::Type::Offline));
        }
        proto::GetPluginCapabilitiesResponse { capabilities: out }
    }
}

/// The controller capability flags paired with their wire values, for both directions.
fn controller_flags(
    caps: &mut ControllerCapabilities,
) -> [(proto::controller_service_capability::rpc::Type, &mut bool); 14] {
    use proto::controller_service_capability::rpc::Type;
    [
        (Type::CreateDeleteVolume, &mut caps.create_delete_volume),
        (
            Type::PublishUnpublishVolume,
            &mut caps.publish_unpublish_volume,
        ),
        (Type::ListVolumes, &mut caps.list_volumes),
        (Type::GetCapacity, &mut caps.get_capacity),
        (Type::CreateDeleteSnapshot, &mut caps.create_delete_snapshot),
        (Type::ListSnapshots, &mut caps.list_snapshots),
        (Type::CloneVolume, &mut caps.clone_volume),
        (Type::PublishReadonly, &mut caps.publish_readonly),
        (Type::ExpandVolume, &mut caps.expand_volume),
        (
            Type::ListVolumesPublishedNodes,
            &mut caps.list_volumes_published_nodes,
        ),
        (Type::VolumeCondition, &mut caps.volume_condition),
        (Type::GetVolume, &mut caps.get_volume),
        (
            Type::SingleNodeMultiWriter,
            &mut caps.single_node_multi_writer,
        ),
        (Type::ModifyVolume, &mut caps.modify_volume),
    ]
}

impl From<&proto::ControllerGetCapabilitiesResponse> for ControllerCapabilities {
    fn from(resp: &proto::ControllerGetCapabilitiesResponse) -> Self {
        use proto::controller_service_capability::Type;
        let mut caps = ControllerCapabilities::default();
        for cap in &resp.capabilities {
            let Some(Type::Rpc(rpc)) = &cap.r#type else {
                continue;
            };
            for (wire, flag) in controller_flags(&mut caps) {
                if wire as i32 == rpc.r#type {
                    *flag = true;
                }
            }
        }
        caps
    }
}

impl From<&ControllerCapabilities> for proto::ControllerGetCapabilitiesResponse {
    fn from(caps: &ControllerCapabilities) -> Self {
        use proto::controller_service_capability::{Rpc, Type};
        let mut caps = *caps;
        let capabilities = controller_flags(&mut caps)
            .into_iter()
            .filter(|(_, on)| **on)
            .map(|(wire, _)| proto::ControllerServiceCapability {
                r#type: Some(Type::Rpc(Rpc {
                    r#type: wire as i32,
                })),
            })
            .collect();
        proto::ControllerGetCapabilitiesResponse { capabilities }
    }
}

fn node_flags(
    caps: &mut NodeCapabilities,
) -> [(proto::node_service_capability::rpc::Type, &mut bool); 6] {
    use proto::node_service_capability::rpc::Type;
    [
        (Type::StageUnstageVolume, &mut caps.stage_unstage_volume),
        (Type::GetVolumeStats, &mut caps.get_volume_stats),
        (Type::ExpandVolume, &mut caps.expand_volume),
        (Type::VolumeCondition, &mut caps.volume_condition),
        (
            Type::SingleNodeMultiWriter,
            &mut caps.single_node_multi_writer,
        ),
        (Type::VolumeMountGroup, &mut caps.volume_mount_group),
    ]
}

impl From<&proto::NodeGetCapabilitiesResponse> for NodeCapabilities {
    fn from(resp: &proto::NodeGetCapabilitiesResponse) -> Self {
        use proto::node_service_capability::Type;
        let mut caps = NodeCapabilities::default();
        for cap in &resp.capabilities {
            let Some(Type::Rpc(rpc)) = &cap.r#type else {
                continue;
            };
            for (wire, flag) in node_flags(&mut caps) {
                if wire as i32 == rpc.r#type {
                    *flag = true;
                }
            }
        }
        caps
    }
}

impl From<&NodeCapabilities> for proto::NodeGetCapabilitiesResponse {
    fn from(caps: &NodeCapabilities) -> Self {
        use proto::node_service_capability::{Rpc, Type};
        let mut caps = *caps;
        let capabilities = node_flags(&mut caps)
            .into_iter()
            .filter(|(_, on)| **on)
            .map(|(wire, _)| proto::NodeServiceCapability {
                r#type: Some(Type::Rpc(Rpc {
                    r#type: wire as i32,
                })),
            })
            .collect();
        proto::NodeGetCapabilitiesResponse { capabilities }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_survive_the_wire_both_ways() {
        for mode in AccessMode::ALL {
            let cap = VolumeCapability {
                access_mode: mode,
                attachment_mode: AttachmentMode::FileSystem,
                mount_options: MountOptions {
                    fs_type: "ext4".into(),
                    mount_flags: vec!["noatime".into()],
                },
            };
            let wire = proto::VolumeCapability::from(&cap);
            assert_eq!(VolumeCapability::try_from(&wire), Ok(cap));
        }
        let block = VolumeCapability {
            access_mode: AccessMode::SingleNodeWriter,
            attachment_mode: AttachmentMode::BlockDevice,
            mount_options: MountOptions::default(),
        };
        let wire = proto::VolumeCapability::from(&block);
        assert!(matches!(wire.access_type, Some(AccessType::Block(_))));
        assert_eq!(VolumeCapability::try_from(&wire), Ok(block));
    }

    #[test]
    fn capability_without_mode_or_type_or_with_an_unknown_mode_is_refused() {
        let mut wire = proto::VolumeCapability::from(&VolumeCapability::file_system(
            AccessMode::SingleNodeWriter,
        ));
        wire.access_type = None;
        assert_eq!(
            VolumeCapability::try_from(&wire),
            Err(CapabilityError::MissingAccessType)
        );
        wire.access_type = Some(AccessType::Block(Default::default()));
        wire.access_mode = None;
        assert_eq!(
            VolumeCapability::try_from(&wire),
            Err(CapabilityError::MissingAccessMode)
        );
        wire.access_mode = Some(proto::volume_capability::AccessMode { mode: 0 });
        assert_eq!(
            VolumeCapability::try_from(&wire),
            Err(CapabilityError::MissingAccessMode)
        );
        wire.access_mode = Some(proto::volume_capability::AccessMode {
            mode: Mode::SingleNodeMultiWriter as i32,
        });
        assert!(matches!(
            VolumeCapability::try_from(&wire),
            Err(CapabilityError::UnsupportedAccessMode(_))
        ));
        wire.access_mode = Some(proto::volume_capability::AccessMode { mode: 99 });
        assert!(matches!(
            VolumeCapability::try_from(&wire),
            Err(CapabilityError::UnsupportedAccessMode(_))
        ));
    }

    #[test]
    fn capability_sets_round_trip_and_unknown_values_are_ignored() {
        let controller = ControllerCapabilities {
            create_delete_volume: true,
            list_volumes_published_nodes: true,
            modify_volume: true,
            ..Default::default()
        };
        let mut wire = proto::ControllerGetCapabilitiesResponse::from(&controller);
        assert_eq!(wire.capabilities.len(), 3);
        wire.capabilities.push(proto::ControllerServiceCapability {
            r#type: Some(proto::controller_service_capability::Type::Rpc(
                proto::controller_service_capability::Rpc { r#type: 999 },
            )),
        });
        assert_eq!(ControllerCapabilities::from(&wire), controller);

        let node = NodeCapabilities {
            stage_unstage_volume: true,
            volume_mount_group: true,
            ..Default::default()
        };
        let wire = proto::NodeGetCapabilitiesResponse::from(&node);
        assert_eq!(NodeCapabilities::from(&wire), node);

        let plugin = PluginCapabilities {
            controller_service: true,
            volume_accessibility_constraints: true,
            online_expansion: true,
            ..Default::default()
        };
        let wire = proto::GetPluginCapabilitiesResponse::from(&plugin);
        assert_eq!(PluginCapabilities::from(&wire), plugin);
    }
}
