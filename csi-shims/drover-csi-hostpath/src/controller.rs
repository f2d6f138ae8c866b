//! The Controller service: volumes as directories, attachments as records.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use drover_csi::proto::{self, controller_server};
use drover_csi::{AttachmentMode, CapacityRange, ControllerCapabilities, StringMap};
use tonic::{Request, Response, Status};

use crate::plugin::{
    DEFAULT_VOLUME_BYTES, Plugin, internal, mount_capability, parse_capability, required,
};
use crate::snapshot;
use crate::store::{Attachment, VolumeRecord};

pub struct Controller(pub Arc<Plugin>);

pub const CAPABILITIES: ControllerCapabilities = ControllerCapabilities {
    create_delete_volume: true,
    publish_unpublish_volume: true,
    list_volumes: true,
    get_capacity: true,
    create_delete_snapshot: true,
    list_snapshots: true,
    clone_volume: true,
    publish_readonly: true,
    expand_volume: true,
    list_volumes_published_nodes: true,
    volume_condition: false,
    get_volume: true,
    single_node_multi_writer: false,
    modify_volume: false,
};

/// Where a volume's directory is, in ControllerPublishVolume's publish context (as a block
/// plugin would give the device path).
pub const SOURCE_PATH_KEY: &str = "source_path";

impl Controller {
    fn volume(&self, record: &VolumeRecord) -> proto::Volume {
        proto::Volume {
            capacity_bytes: record.capacity_bytes,
            volume_id: record.id.clone(),
            volume_context: StringMap::new(),
            content_source: record
                .content_source
                .as_ref()
                .map(snapshot::content_source_proto),
            accessible_topology: vec![self.0.topology()],
        }
    }
}

/// INVALID_ARGUMENT for a range the spec forbids: negative bounds, or a floor above the
/// ceiling. `None` (or both 0) leaves the size to the plugin.
fn capacity_range(range: Option<&proto::CapacityRange>) -> Result<Option<CapacityRange>, Status> {
    let Some(range) = range.map(CapacityRange::from) else {
        return Ok(None);
    };
    if range.required_bytes < 0 || range.limit_bytes < 0 {
        return Err(Status::invalid_argument(
            "capacity_range: bytes must not be negative",
        ));
    }
    if range.limit_bytes > 0 && range.required_bytes > range.limit_bytes {
        return Err(Status::invalid_argument(format!(
            "capacity_range: required_bytes {} is above limit_bytes {}",
            range.required_bytes, range.limit_bytes
        )));
    }
    if range.required_bytes == 0 && range.limit_bytes == 0 {
        return Ok(None);
    }
    Ok(Some(range))
}

/// The size a new volume gets: what is required, else the default within the limit.
fn size_for(range: Option<CapacityRange>) -> i64 {
    match range {
        Some(r) if r.required_bytes > 0 => r.required_bytes,
        Some(r) if r.limit_bytes > 0 => r.limit_bytes.min(DEFAULT_VOLUME_BYTES),
        _ => DEFAULT_VOLUME_BYTES,
    }
}

fn fits(capacity: i64, range: Option<CapacityRange>) -> bool {
    range.is_none_or(|r| {
        capacity >= r.required_bytes && (r.limit_bytes == 0 || capacity <= r.limit_bytes)
    })
}

#[tonic::async_trait]
impl controller_server::Controller for Controller {
    async fn create_volume(
        &self,
        request: Request<proto::CreateVolumeRequest>,
    ) -> Result<Response<proto::CreateVolumeResponse>, Status> {
        let req = request.into_inner();
        required("name", &req.name)?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument("volume_capabilities is required"));
        }
        for cap in &req.volume_capabilities {
            mount_capability("volume_capabilities", Some(cap))?;
        }
        let range = capacity_range(req.capacity_range.as_ref())?;
        if let Some(wanted) = &req.accessibility_requirements {
            let here = self.0.topology();
            if !wanted.requisite.is_empty() && !wanted.requisite.contains(&here) {
                return Err(Status::resource_exhausted(format!(
                    "volumes can only be made on node {}, which no requisite topology names",
                    self.0.config.node_id
                )));
            }
        }

        let mut store = self.0.store.lock().await;
        let source = snapshot::find_source(&store, req.volume_content_source.as_ref())?;
        let content_source = source.as_ref().map(|s| s.content.clone());
        if let Some(existing) = store.state.volume_by_name(&req.name) {
            // Idempotency: the same name again is the same volume, if it still fits.
            if fits(existing.capacity_bytes, range)
                && existing.parameters == req.parameters
                && existing.content_source == content_source
            {
                return Ok(Response::new(proto::CreateVolumeResponse {
                    volume: Some(self.volume(existing)),
                }));
            }
            return Err(Status::already_exists(format!(
                "volume {:?} exists ({}, {} bytes) with another capacity or parameters",
                req.name, existing.id, existing.capacity_bytes
            )));
        }
        let size = match &source {
            None => size_for(range),
            Some(source) => snapshot::size_from_source(
                range.map(|r| size_for(Some(r))),
                range.map_or(0, |r| r.limit_bytes),
                source,
            )?,
        };
        let pool = self.0.config.capacity_bytes;
        if size > pool {
            return Err(Status::out_of_range(format!(
                "{size} bytes is more than the whole pool ({pool} bytes)"
            )));
        }
        let available = pool - store.state.allocated_bytes();
        if size > available {
            return Err(Status::resource_exhausted(format!(
                "{size} bytes asked, {available} available"
            )));
        }

        let id = uuid::Uuid::new_v4().to_string();
        let dir = store.volume_dir(&id);
        std::fs::create_dir(&dir)
            .map_err(|e| internal(format!("creating {}", dir.display()), e))?;
        // Tasks may run as any user: the directory is theirs to write.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| internal(format!("opening up {}", dir.display()), e))?;
        if let Some(source) = &source
            && let Err(e) = snapshot::fill(source, &dir)
        {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        let record = VolumeRecord {
            id: id.clone(),
            name: req.name.clone(),
            capacity_bytes: size,
            parameters: req.parameters.clone(),
            attachments: Default::default(),
            content_source,
        };
        let mut next = store.state.clone();
        next.volumes.insert(id, record.clone());
        if let Err(e) = store.commit(next) {
            let _ = std::fs::remove_dir(&dir);
            return Err(internal("saving the new volume", e));
        }
        tracing::info!(volume = %record.id, name = %record.name, bytes = size, "created volume");
        Ok(Response::new(proto::CreateVolumeResponse {
            volume: Some(self.volume(&record)),
        }))
    }

    async fn delete_volume(
        &self,
        request: Request<proto::DeleteVolumeRequest>,
    ) -> Result<Response<proto::DeleteVolumeResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        let mut store = self.0.store.lock().await;
        let Some(volume) = store.state.volumes.get(&req.volume_id) else {
            // Gone already: deleting is idempotent.
            return Ok(Response::new(proto::DeleteVolumeResponse {}));
        };
        if !volume.attachments.is_empty() {
            let nodes: Vec<&String> = volume.attachments.keys().collect();
            return Err(Status::failed_precondition(format!(
                "volume {} is in use: published to node(s) {nodes:?}",
                req.volume_id
            )));
        }
        let mounted_at = store
            .state
            .stages
            .iter()
            .map(|(path, s)| (path, &s.volume_id))
            .chain(
                store
                    .state
                    .publishes
                    .iter()
                    .map(|(path, p)| (path, &p.volume_id)),
            )
            .find(|(_, id)| **id == req.volume_id)
            .map(|(path, _)| path.clone());
        if let Some(path) = mounted_at {
            return Err(Status::failed_precondition(format!(
                "volume {} is in use: mounted at {}",
                req.volume_id,
                path.display()
            )));
        }
        let dir = store.volume_dir(&req.volume_id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(internal(format!("removing {}", dir.display()), e)),
        }
        let mut next = store.state.clone();
        next.volumes.remove(&req.volume_id);
        store
            .commit(next)
            .map_err(|e| internal("saving the deletion", e))?;
        tracing::info!(volume = %req.volume_id, "deleted volume");
        Ok(Response::new(proto::DeleteVolumeResponse {}))
    }

    async fn controller_publish_volume(
        &self,
        request: Request<proto::ControllerPublishVolumeRequest>,
    ) -> Result<Response<proto::ControllerPublishVolumeResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        required("node_id", &req.node_id)?;
        let capability = mount_capability("volume_capability", req.volume_capability.as_ref())?;
        let mut store = self.0.store.lock().await;
        let Some(volume) = store.state.volumes.get(&req.volume_id) else {
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.volume_id
            )));
        };
        if req.node_id != self.0.config.node_id {
            return Err(Status::not_found(format!(
                "node {} does not exist: volumes of this plugin live on node {}",
                req.node_id, self.0.config.node_id
            )));
        }
        let publish_context = StringMap::from([(
            SOURCE_PATH_KEY.to_string(),
            store.volume_dir(&req.volume_id).display().to_string(),
        )]);
        if let Some(existing) = volume.attachments.get(&req.node_id) {
            if existing.capability == capability && existing.readonly == req.readonly {
                return Ok(Response::new(proto::ControllerPublishVolumeResponse {
                    publish_context,
                }));
            }
            return Err(Status::already_exists(format!(
                "volume {} is published to node {} with another capability or readonly flag",
                req.volume_id, req.node_id
            )));
        }
        let elsewhere = volume
            .attachments
            .iter()
            .find(|(node, a)| {
                **node != req.node_id
                    && !(capability.access_mode.is_multi_node()
                        && a.capability.access_mode.is_multi_node())
            })
            .map(|(node, _)| node.clone());
        if let Some(node) = elsewhere {
            return Err(Status::failed_precondition(format!(
                "volume {} is published to node {node} and is not multi-node",
                req.volume_id
            )));
        }
        let max = self.0.config.max_volumes_per_node;
        let on_node = store
            .state
            .volumes
            .values()
            .filter(|v| v.attachments.contains_key(&req.node_id))
            .count();
        if max > 0 && i64::try_from(on_node).unwrap_or(i64::MAX) >= max {
            return Err(Status::resource_exhausted(format!(
                "node {} already has its maximum of {max} volumes",
                req.node_id
            )));
        }
        let mut next = store.state.clone();
        if let Some(v) = next.volumes.get_mut(&req.volume_id) {
            v.attachments.insert(
                req.node_id.clone(),
                Attachment {
                    capability,
                    readonly: req.readonly,
                },
            );
        }
        store
            .commit(next)
            .map_err(|e| internal("saving the attachment", e))?;
        Ok(Response::new(proto::ControllerPublishVolumeResponse {
            publish_context,
        }))
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<proto::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<proto::ControllerUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        let mut store = self.0.store.lock().await;
        let mut next = store.state.clone();
        // An unknown volume or node, or no attachment: already unpublished (spec: OK).
        let Some(volume) = next.volumes.get_mut(&req.volume_id) else {
            return Ok(Response::new(proto::ControllerUnpublishVolumeResponse {}));
        };
        let before = volume.attachments.len();
        if req.node_id.is_empty() {
            volume.attachments.clear();
        } else {
            volume.attachments.remove(&req.node_id);
        }
        if volume.attachments.len() != before {
            store
                .commit(next)
                .map_err(|e| internal("saving the detachment", e))?;
        }
        Ok(Response::new(proto::ControllerUnpublishVolumeResponse {}))
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<proto::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<proto::ValidateVolumeCapabilitiesResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument("volume_capabilities is required"));
        }
        let mut caps = Vec::with_capacity(req.volume_capabilities.len());
        for cap in &req.volume_capabilities {
            caps.push(parse_capability(cap)?);
        }
        let store = self.0.store.lock().await;
        let Some(volume) = store.state.volumes.get(&req.volume_id) else {
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.volume_id
            )));
        };
        let refusal = if caps
            .iter()
            .any(|c| c.attachment_mode == AttachmentMode::BlockDevice)
        {
            Some("block devices are not supported: volumes are directories".to_string())
        } else if !req.parameters.is_empty() && req.parameters != volume.parameters {
            Some("the parameters differ from those the volume was created with".to_string())
        } else if !req.volume_context.is_empty() {
            Some("this plugin gives volumes no context; the one given is not its".to_string())
        } else {
            None
        };
        let resp = match refusal {
            Some(message) => proto::ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message,
            },
            None => proto::ValidateVolumeCapabilitiesResponse {
                confirmed: Some(proto::validate_volume_capabilities_response::Confirmed {
                    volume_context: req.volume_context,
                    volume_capabilities: req.volume_capabilities,
                    parameters: req.parameters,
                }),
                message: String::new(),
            },
        };
        Ok(Response::new(resp))
    }

    async fn list_volumes(
        &self,
        request: Request<proto::ListVolumesRequest>,
    ) -> Result<Response<proto::ListVolumesResponse>, Status> {
        let req = request.into_inner();
        let page_size = usize::try_from(req.max_entries)
            .map_err(|_| Status::invalid_argument("max_entries must not be negative"))?;
        let store = self.0.store.lock().await;
        let total = store.state.volumes.len();
        // The token is the index of the next entry in id order. Volumes created or deleted
        // between pages may shift it; the spec lets lists be inconsistent across pages.
        let start = if req.starting_token.is_empty() {
            0
        } else {
            match req.starting_token.parse::<usize>() {
                Ok(i) if i <= total => i,
                _ => {
                    return Err(Status::aborted(format!(
                        "starting_token {:?} is not valid",
                        req.starting_token
                    )));
                }
            }
        };
        let end = if page_size == 0 {
            total
        } else {
            start.saturating_add(page_size).min(total)
        };
        let entries = store
            .state
            .volumes
            .values()
            .skip(start)
            .take(end - start)
            .map(|v| proto::list_volumes_response::Entry {
                volume: Some(self.volume(v)),
                status: Some(proto::list_volumes_response::VolumeStatus {
                    published_node_ids: v.attachments.keys().cloned().collect(),
                    volume_condition: None,
                }),
            })
            .collect();
        let next_token = if end < total {
            end.to_string()
        } else {
            String::new()
        };
        Ok(Response::new(proto::ListVolumesResponse {
            entries,
            next_token,
        }))
    }

    async fn get_capacity(
        &self,
        request: Request<proto::GetCapacityRequest>,
    ) -> Result<Response<proto::GetCapacityResponse>, Status> {
        let req = request.into_inner();
        let mut servable = true;
        for cap in &req.volume_capabilities {
            servable &= parse_capability(cap)?.attachment_mode == AttachmentMode::FileSystem;
        }
        if let Some(topology) = &req.accessible_topology {
            servable &= *topology == self.0.topology();
        }
        let store = self.0.store.lock().await;
        let available = if servable {
            (self.0.config.capacity_bytes - store.state.allocated_bytes()).max(0)
        } else {
            0
        };
        Ok(Response::new(proto::GetCapacityResponse {
            available_capacity: available,
            maximum_volume_size: Some(available),
            minimum_volume_size: None,
        }))
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<proto::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<proto::ControllerGetCapabilitiesResponse>, Status> {
        Ok(Response::new((&CAPABILITIES).into()))
    }

    async fn controller_expand_volume(
        &self,
        request: Request<proto::ControllerExpandVolumeRequest>,
    ) -> Result<Response<proto::ControllerExpandVolumeResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        if req.capacity_range.is_none() {
            return Err(Status::invalid_argument("capacity_range is required"));
        }
        let Some(range) = capacity_range(req.capacity_range.as_ref())? else {
            return Err(Status::invalid_argument(
                "capacity_range: required_bytes or limit_bytes must be set",
            ));
        };
        if req.volume_capability.is_some() {
            mount_capability("volume_capability", req.volume_capability.as_ref())?;
        }
        let mut store = self.0.store.lock().await;
        let Some(volume) = store.state.volumes.get(&req.volume_id) else {
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.volume_id
            )));
        };
        let current = volume.capacity_bytes;
        let target = if range.required_bytes > 0 {
            range.required_bytes
        } else {
            range.limit_bytes
        };
        let answer = |capacity_bytes| {
            Ok(Response::new(proto::ControllerExpandVolumeResponse {
                capacity_bytes,
                // Directories need nothing done on the node.
                node_expansion_required: false,
            }))
        };
        if current >= target {
            if range.limit_bytes > 0 && current > range.limit_bytes {
                return Err(Status::out_of_range(format!(
                    "volume {} has {current} bytes, more than limit_bytes; volumes do not shrink",
                    req.volume_id
                )));
            }
            return answer(current);
        }
        let available = self.0.config.capacity_bytes - store.state.allocated_bytes();
        if target - current > available {
            return Err(Status::out_of_range(format!(
                "growing to {target} bytes needs {} more, {available} available",
                target - current
            )));
        }
        let mut next = store.state.clone();
        if let Some(v) = next.volumes.get_mut(&req.volume_id) {
            v.capacity_bytes = target;
        }
        store
            .commit(next)
            .map_err(|e| internal("saving the new capacity", e))?;
        answer(target)
    }

    async fn create_snapshot(
        &self,
        request: Request<proto::CreateSnapshotRequest>,
    ) -> Result<Response<proto::CreateSnapshotResponse>, Status> {
        snapshot::create(&self.0, request.into_inner()).await
    }

    async fn delete_snapshot(
        &self,
        request: Request<proto::DeleteSnapshotRequest>,
    ) -> Result<Response<proto::DeleteSnapshotResponse>, Status> {
        snapshot::delete(&self.0, request.into_inner()).await
    }

    async fn list_snapshots(
        &self,
        request: Request<proto::ListSnapshotsRequest>,
    ) -> Result<Response<proto::ListSnapshotsResponse>, Status> {
        snapshot::list(&self.0, request.into_inner()).await
    }

    async fn controller_get_volume(
        &self,
        request: Request<proto::ControllerGetVolumeRequest>,
    ) -> Result<Response<proto::ControllerGetVolumeResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        let store = self.0.store.lock().await;
        let Some(volume) = store.state.volumes.get(&req.volume_id) else {
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.volume_id
            )));
        };
        Ok(Response::new(proto::ControllerGetVolumeResponse {
            volume: Some(self.volume(volume)),
            status: Some(proto::controller_get_volume_response::VolumeStatus {
                published_node_ids: volume.attachments.keys().cloned().collect(),
                volume_condition: None,
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(required_bytes: i64, limit_bytes: i64) -> Option<CapacityRange> {
        Some(CapacityRange {
            required_bytes,
            limit_bytes,
        })
    }

    #[test]
    fn sizes_honour_the_range() {
        assert_eq!(size_for(None), DEFAULT_VOLUME_BYTES);
        assert_eq!(size_for(range(5, 0)), 5);
        assert_eq!(size_for(range(5, 9)), 5);
        assert_eq!(size_for(range(0, 9)), 9);
        assert_eq!(size_for(range(0, i64::MAX)), DEFAULT_VOLUME_BYTES);
        assert!(fits(5, range(5, 9)));
        assert!(fits(5, None));
        assert!(!fits(5, range(6, 0)));
        assert!(!fits(10, range(0, 9)));
    }
}
