//! The Node service: bind mounts of volume directories on staging and target paths.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use drover_csi::proto::{self, node_server};
use drover_csi::{NodeCapabilities, VolumeCapability};
use tonic::{Request, Response, Status};

use crate::mounts;
use crate::plugin::{Plugin, internal, mount_capability, required, required_path};
use crate::store::{PublishRecord, StageRecord, Store};

pub struct Node(pub Arc<Plugin>);

pub const CAPABILITIES: NodeCapabilities = NodeCapabilities {
    stage_unstage_volume: true,
    get_volume_stats: true,
    expand_volume: false,
    volume_condition: false,
    single_node_multi_writer: false,
    volume_mount_group: false,
};

fn volume_must_exist(store: &Store, volume_id: &str) -> Result<(), Status> {
    if store.state.volumes.contains_key(volume_id) {
        Ok(())
    } else {
        Err(Status::not_found(format!(
            "volume {volume_id} does not exist"
        )))
    }
}

fn is_mounted(path: &Path) -> Result<bool, Status> {
    mounts::is_mount_point(path)
        .map_err(|e| internal(format!("reading the mounts of {}", path.display()), e))
}

fn bind(source: &Path, target: &Path, readonly: bool) -> Result<(), Status> {
    mounts::bind(source, target, readonly).map_err(|e| {
        internal(
            format!("bind-mounting {} on {}", source.display(), target.display()),
            e,
        )
    })
}

fn unmount(target: &Path) -> Result<(), Status> {
    mounts::unmount(target).map_err(|e| internal(format!("unmounting {}", target.display()), e))
}

fn create_dir(path: &Path) -> Result<(), Status> {
    std::fs::create_dir_all(path).map_err(|e| internal(format!("creating {}", path.display()), e))
}

#[tonic::async_trait]
impl node_server::Node for Node {
    async fn node_stage_volume(
        &self,
        request: Request<proto::NodeStageVolumeRequest>,
    ) -> Result<Response<proto::NodeStageVolumeResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        let staging = required_path("staging_target_path", &req.staging_target_path)?;
        let capability = mount_capability("volume_capability", req.volume_capability.as_ref())?;
        let mut store = self.0.store.lock().await;
        volume_must_exist(&store, &req.volume_id)?;
        if let Some(staged) = store.state.stages.get(staging) {
            if staged.volume_id != req.volume_id || staged.capability != capability {
                return Err(Status::already_exists(format!(
                    "{} already stages volume {} with another capability",
                    staging.display(),
                    staged.volume_id
                )));
            }
            if is_mounted(staging)? {
                return Ok(Response::new(proto::NodeStageVolumeResponse {}));
            }
            // Recorded but not mounted (the node rebooted): mount it again below.
        } else if is_mounted(staging)? {
            return Err(Status::already_exists(format!(
                "something else is mounted on {}",
                staging.display()
            )));
        }
        // The CO creates the staging directory; creating it anyway costs nothing.
        create_dir(staging)?;
        bind(&store.volume_dir(&req.volume_id), staging, false)?;
        let mut next = store.state.clone();
        next.stages.insert(
            staging.to_path_buf(),
            StageRecord {
                volume_id: req.volume_id.clone(),
                capability,
            },
        );
        if let Err(e) = store.commit(next) {
            let _ = mounts::unmount(staging);
            return Err(internal("saving the stage", e));
        }
        Ok(Response::new(proto::NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        request: Request<proto::NodeUnstageVolumeRequest>,
    ) -> Result<Response<proto::NodeUnstageVolumeResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        let staging = required_path("staging_target_path", &req.staging_target_path)?;
        let mut store = self.0.store.lock().await;
        volume_must_exist(&store, &req.volume_id)?;
        match store.state.stages.get(staging) {
            // Another volume's stage is not this call's to undo; this volume is not staged
            // there, which the spec answers with OK.
            Some(staged) if staged.volume_id != req.volume_id => {}
            _ => {
                if is_mounted(staging)? {
                    unmount(staging)?;
                }
                if store.state.stages.contains_key(staging) {
                    let mut next = store.state.clone();
                    next.stages.remove(staging);
                    store
                        .commit(next)
                        .map_err(|e| internal("saving the unstage", e))?;
                }
            }
        }
        Ok(Response::new(proto::NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<proto::NodePublishVolumeRequest>,
    ) -> Result<Response<proto::NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        let target = required_path("target_path", &req.target_path)?;
        let capability = mount_capability("volume_capability", req.volume_capability.as_ref())?;
        let staging = if req.staging_target_path.is_empty() {
            None
        } else {
            Some(required_path("staging_target_path", &req.staging_target_path)?.to_path_buf())
        };
        let readonly = req.readonly || capability.access_mode.is_read_only();
        let mut store = self.0.store.lock().await;
        volume_must_exist(&store, &req.volume_id)?;

        // From the staging path when the CO staged (as it must, since the plugin advertises
        // STAGE_UNSTAGE_VOLUME); straight from the volume directory otherwise, which lets a
        // CO that skips staging still use the plugin.
        let source = match &staging {
            Some(path) => {
                let staged = store
                    .state
                    .stages
                    .get(path)
                    .is_some_and(|s| s.volume_id == req.volume_id);
                if !staged || !is_mounted(path)? {
                    return Err(Status::failed_precondition(format!(
                        "volume {} is not staged at {}",
                        req.volume_id,
                        path.display()
                    )));
                }
                path.clone()
            }
            None => store.volume_dir(&req.volume_id),
        };
        let wanted = PublishRecord {
            volume_id: req.volume_id.clone(),
            capability: capability.clone(),
            readonly,
            staging_target_path: staging,
        };
        if let Some(published) = store.state.publishes.get(target) {
            if *published != wanted {
                return Err(Status::already_exists(format!(
                    "{} already publishes volume {} with other arguments",
                    target.display(),
                    published.volume_id
                )));
            }
            if is_mounted(target)? {
                return Ok(Response::new(proto::NodePublishVolumeResponse {}));
            }
        } else {
            check_single_node_publish(&store, &req.volume_id, target, &capability)?;
            if is_mounted(target)? {
                return Err(Status::already_exists(format!(
                    "something else is mounted on {}",
                    target.display()
                )));
            }
        }
        create_dir(target)?;
        bind(&source, target, readonly)?;
        let mut next = store.state.clone();
        next.publishes.insert(target.to_path_buf(), wanted);
        if let Err(e) = store.commit(next) {
            let _ = mounts::unmount(target);
            return Err(internal("saving the publish", e));
        }
        Ok(Response::new(proto::NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<proto::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<proto::NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        let target = required_path("target_path", &req.target_path)?;
        let mut store = self.0.store.lock().await;
        volume_must_exist(&store, &req.volume_id)?;
        if let Some(published) = store.state.publishes.get(target)
            && published.volume_id != req.volume_id
        {
            // Another volume's target: this volume is not published there.
            return Ok(Response::new(proto::NodeUnpublishVolumeResponse {}));
        }
        if is_mounted(target)? {
            unmount(target)?;
        }
        // The plugin made the target, so it removes it; only ever an empty directory, so
        // that a failed unmount can never cost the volume's data.
        match std::fs::remove_dir(target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(internal(format!("removing {}", target.display()), e)),
        }
        if store.state.publishes.contains_key(target) {
            let mut next = store.state.clone();
            next.publishes.remove(target);
            store
                .commit(next)
                .map_err(|e| internal("saving the unpublish", e))?;
        }
        Ok(Response::new(proto::NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<proto::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<proto::NodeGetVolumeStatsResponse>, Status> {
        use proto::volume_usage::Unit;
        let req = request.into_inner();
        required("volume_id", &req.volume_id)?;
        required("volume_path", &req.volume_path)?;
        let path = Path::new(&req.volume_path);
        {
            let store = self.0.store.lock().await;
            volume_must_exist(&store, &req.volume_id)?;
            // The spec's NOT_FOUND: the volume is not at volume_path. Stats of whatever file
            // system holds some other path would be another volume's (or the node's) numbers.
            if !volume_is_at(&store, &req.volume_id, path)? {
                return Err(Status::not_found(format!(
                    "volume {} is not staged or published at {}",
                    req.volume_id,
                    path.display()
                )));
            }
        }
        let stats = match nix::sys::statvfs::statvfs(path) {
            Ok(stats) => stats,
            Err(nix::errno::Errno::ENOENT) => {
                return Err(Status::not_found(format!(
                    "volume {} is not at {}",
                    req.volume_id,
                    path.display()
                )));
            }
            Err(e) => return Err(internal(format!("statvfs {}", path.display()), e)),
        };
        // The directory shares its file system: these are the file system's numbers.
        let block = i128::from(stats.fragment_size());
        let bytes = |blocks: u64| clamp(i128::from(blocks) * block);
        let usage = vec![
            proto::VolumeUsage {
                available: bytes(stats.blocks_available()),
                total: bytes(stats.blocks()),
                used: bytes(stats.blocks().saturating_sub(stats.blocks_free())),
                unit: Unit::Bytes as i32,
            },
            proto::VolumeUsage {
                available: clamp(i128::from(stats.files_available())),
                total: clamp(i128::from(stats.files())),
                used: clamp(i128::from(stats.files().saturating_sub(stats.files_free()))),
                unit: Unit::Inodes as i32,
            },
        ];
        Ok(Response::new(proto::NodeGetVolumeStatsResponse {
            usage,
            volume_condition: None,
        }))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<proto::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<proto::NodeGetCapabilitiesResponse>, Status> {
        Ok(Response::new((&CAPABILITIES).into()))
    }

    async fn node_get_info(
        &self,
        _: Request<proto::NodeGetInfoRequest>,
    ) -> Result<Response<proto::NodeGetInfoResponse>, Status> {
        Ok(Response::new(proto::NodeGetInfoResponse {
            node_id: self.0.config.node_id.clone(),
            max_volumes_per_node: self.0.config.max_volumes_per_node,
            accessible_topology: Some(self.0.topology()),
        }))
    }
}

/// Whether `volume_id` is at `path`: staged or published there (by this plugin's records) and
/// still mounted there (by the kernel's word). A relative path names no place the plugin
/// mounted anything (the CO's paths are absolute), so the volume is not there.
fn volume_is_at(store: &Store, volume_id: &str, path: &Path) -> Result<bool, Status> {
    if !path.is_absolute() {
        return Ok(false);
    }
    let staged = store
        .state
        .stages
        .get(path)
        .is_some_and(|s| s.volume_id == volume_id);
    let published = store
        .state
        .publishes
        .get(path)
        .is_some_and(|p| p.volume_id == volume_id);
    Ok((staged || published) && is_mounted(path)?)
}

/// The spec's second-publish table: a volume that is not multi-node is published at one
/// target per node (FAILED_PRECONDITION for another).
fn check_single_node_publish(
    store: &Store,
    volume_id: &str,
    target: &Path,
    capability: &VolumeCapability,
) -> Result<(), Status> {
    let other: Option<(&PathBuf, &PublishRecord)> = store
        .state
        .publishes
        .iter()
        .find(|(path, p)| p.volume_id == volume_id && path.as_path() != target);
    match other {
        Some((path, published))
            if !(capability.access_mode.is_multi_node()
                && published.capability.access_mode.is_multi_node()) =>
        {
            Err(Status::failed_precondition(format!(
                "volume {volume_id} is already published at {} and is not multi-node",
                path.display()
            )))
        }
        _ => Ok(()),
    }
}

fn clamp(value: i128) -> i64 {
    i64::try_from(value.max(0)).unwrap_or(i64::MAX)
}
