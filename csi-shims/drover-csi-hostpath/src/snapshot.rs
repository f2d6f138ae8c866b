//! Snapshots and clones: a snapshot is a copy of a volume's directory under
//! `<state-dir>/snapshots/<id>`, taken at once (ready to use when CreateSnapshot answers); a
//! volume created from a snapshot or from another volume starts as a copy of its directory.
//! Copies keep file modes, symbolic links and (when the plugin may) owners; sockets and other
//! special files are left out.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use drover_csi::proto;
use drover_csi::{StringMap, VolumeContentSource};
use serde::{Deserialize, Serialize};
use tonic::{Response, Status};

use crate::plugin::{Plugin, internal, required};
use crate::store::{State, Store};

/// A snapshot as the plugin keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub id: String,
    /// The CO's name: CreateSnapshot's idempotency key.
    pub name: String,
    pub source_volume_id: String,
    /// The source volume's capacity when the snapshot was taken.
    pub size_bytes: i64,
    pub created_seconds: i64,
    pub created_nanos: i32,
    #[serde(default)]
    pub parameters: StringMap,
}

impl SnapshotRecord {
    pub fn to_proto(&self) -> proto::Snapshot {
        proto::Snapshot {
            size_bytes: self.size_bytes,
            snapshot_id: self.id.clone(),
            source_volume_id: self.source_volume_id.clone(),
            creation_time: Some(prost_types::Timestamp {
                seconds: self.created_seconds,
                nanos: self.created_nanos,
            }),
            ready_to_use: true,
            group_snapshot_id: String::new(),
        }
    }
}

/// What a new volume starts from, found: its content source and the directory to copy.
pub struct Source {
    pub content: VolumeContentSource,
    pub dir: PathBuf,
    pub size_bytes: i64,
}

/// The content source a CreateVolume names, which must exist (NOT_FOUND otherwise, as the
/// spec asks). `None` when the request names none.
pub fn find_source(
    store: &Store,
    source: Option<&proto::VolumeContentSource>,
) -> Result<Option<Source>, Status> {
    use proto::volume_content_source::Type;
    let Some(source) = source else {
        return Ok(None);
    };
    match &source.r#type {
        Some(Type::Snapshot(s)) => {
            required("volume_content_source.snapshot.snapshot_id", &s.snapshot_id)?;
            let snap = store.state.snapshots.get(&s.snapshot_id).ok_or_else(|| {
                Status::not_found(format!("snapshot {} does not exist", s.snapshot_id))
            })?;
            Ok(Some(Source {
                content: VolumeContentSource::Snapshot(snap.id.clone()),
                dir: store.snapshot_dir(&snap.id),
                size_bytes: snap.size_bytes,
            }))
        }
        Some(Type::Volume(v)) => {
            required("volume_content_source.volume.volume_id", &v.volume_id)?;
            let vol = store.state.volumes.get(&v.volume_id).ok_or_else(|| {
                Status::not_found(format!("source volume {} does not exist", v.volume_id))
            })?;
            Ok(Some(Source {
                content: VolumeContentSource::Volume(vol.id.clone()),
                dir: store.volume_dir(&vol.id),
                size_bytes: vol.capacity_bytes,
            }))
        }
        None => Err(Status::invalid_argument(
            "volume_content_source: a snapshot or a volume is required",
        )),
    }
}

/// The content source of a volume as the spec's message.
pub fn content_source_proto(source: &VolumeContentSource) -> proto::VolumeContentSource {
    use proto::volume_content_source::{SnapshotSource, Type, VolumeSource};
    let kind = match source {
        VolumeContentSource::Snapshot(id) => Type::Snapshot(SnapshotSource {
            snapshot_id: id.clone(),
        }),
        VolumeContentSource::Volume(id) => Type::Volume(VolumeSource {
            volume_id: id.clone(),
        }),
    };
    proto::VolumeContentSource { r#type: Some(kind) }
}

fn now() -> (i64, i32) {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    (
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        i32::try_from(since.subsec_nanos()).unwrap_or(0),
    )
}

pub async fn create(
    plugin: &Plugin,
    req: proto::CreateSnapshotRequest,
) -> Result<Response<proto::CreateSnapshotResponse>, Status> {
    required("name", &req.name)?;
    required("source_volume_id", &req.source_volume_id)?;
    let mut store = plugin.store.lock().await;
    if let Some(existing) = store.state.snapshot_by_name(&req.name) {
        // Idempotency: the same name of the same volume is the same snapshot.
        if existing.source_volume_id == req.source_volume_id {
            return Ok(Response::new(proto::CreateSnapshotResponse {
                snapshot: Some(existing.to_proto()),
            }));
        }
        return Err(Status::already_exists(format!(
            "snapshot {:?} exists ({}) of another volume, {}",
            req.name, existing.id, existing.source_volume_id
        )));
    }
    let Some(volume) = store.state.volumes.get(&req.source_volume_id) else {
        return Err(Status::not_found(format!(
            "volume {} does not exist",
            req.source_volume_id
        )));
    };
    let (created_seconds, created_nanos) = now();
    let record = SnapshotRecord {
        id: uuid::Uuid::new_v4().to_string(),
        name: req.name.clone(),
        source_volume_id: volume.id.clone(),
        size_bytes: volume.capacity_bytes,
        created_seconds,
        created_nanos,
        parameters: req.parameters.clone(),
    };
    let from = store.volume_dir(&volume.id);
    let to = store.snapshot_dir(&record.id);
    copy_new_dir(&from, &to)?;
    let mut next = store.state.clone();
    next.snapshots.insert(record.id.clone(), record.clone());
    if let Err(e) = store.commit(next) {
        let _ = std::fs::remove_dir_all(&to);
        return Err(internal("saving the new snapshot", e));
    }
    tracing::info!(snapshot = %record.id, volume = %record.source_volume_id, name = %record.name, "created snapshot");
    Ok(Response::new(proto::CreateSnapshotResponse {
        snapshot: Some(record.to_proto()),
    }))
}

pub async fn delete(
    plugin: &Plugin,
    req: proto::DeleteSnapshotRequest,
) -> Result<Response<proto::DeleteSnapshotResponse>, Status> {
    required("snapshot_id", &req.snapshot_id)?;
    let mut store = plugin.store.lock().await;
    if !store.state.snapshots.contains_key(&req.snapshot_id) {
        // Gone already: deleting is idempotent.
        return Ok(Response::new(proto::DeleteSnapshotResponse {}));
    }
    let dir = store.snapshot_dir(&req.snapshot_id);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(internal(format!("removing {}", dir.display()), e)),
    }
    let mut next = store.state.clone();
    next.snapshots.remove(&req.snapshot_id);
    store
        .commit(next)
        .map_err(|e| internal("saving the deletion", e))?;
    tracing::info!(snapshot = %req.snapshot_id, "deleted snapshot");
    Ok(Response::new(proto::DeleteSnapshotResponse {}))
}

pub async fn list(
    plugin: &Plugin,
    req: proto::ListSnapshotsRequest,
) -> Result<Response<proto::ListSnapshotsResponse>, Status> {
    let page_size = usize::try_from(req.max_entries)
        .map_err(|_| Status::invalid_argument("max_entries must not be negative"))?;
    let store = plugin.store.lock().await;
    let matching: Vec<&SnapshotRecord> = store
        .state
        .snapshots
        .values()
        .filter(|s| req.snapshot_id.is_empty() || s.id == req.snapshot_id)
        .filter(|s| req.source_volume_id.is_empty() || s.source_volume_id == req.source_volume_id)
        .collect();
    let total = matching.len();
    // As ListVolumes: the token is the index of the next entry in id order.
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
    let entries = matching[start..end]
        .iter()
        .map(|s| proto::list_snapshots_response::Entry {
            snapshot: Some(s.to_proto()),
        })
        .collect();
    let next_token = if end < total {
        end.to_string()
    } else {
        String::new()
    };
    Ok(Response::new(proto::ListSnapshotsResponse {
        entries,
        next_token,
    }))
}

/// The size of a volume made from `source`: what the range asks, but never less than the
/// source (its data must fit); OUT_OF_RANGE when the range's limit is below the source.
pub fn size_from_source(
    asked: Option<i64>,
    limit_bytes: i64,
    source: &Source,
) -> Result<i64, Status> {
    if limit_bytes > 0 && source.size_bytes > limit_bytes {
        return Err(Status::out_of_range(format!(
            "the source has {} bytes, more than limit_bytes {limit_bytes}",
            source.size_bytes
        )));
    }
    Ok(asked.map_or(source.size_bytes, |a| a.max(source.size_bytes)))
}

/// Fills the new volume directory `to` (which exists) with a copy of the source.
pub fn fill(source: &Source, to: &Path) -> Result<(), Status> {
    copy_tree(&source.dir, to).map_err(|e| {
        internal(
            format!("copying {} to {}", source.dir.display(), to.display()),
            e,
        )
    })
}

/// Copies directory `from` to `to`, which must not exist; leaves nothing behind on failure.
fn copy_new_dir(from: &Path, to: &Path) -> Result<(), Status> {
    let copied = (|| {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::create_dir(to)?;
        let meta = std::fs::metadata(from)?;
        std::fs::set_permissions(to, meta.permissions())?;
        copy_tree(from, to)
    })();
    copied.map_err(|e| {
        let _ = std::fs::remove_dir_all(to);
        internal(format!("copying {} to {}", from.display(), to.display()), e)
    })
}

/// Copies what is in directory `from` into directory `to`.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let meta = std::fs::symlink_metadata(&src)?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if kind.is_dir() {
            std::fs::create_dir(&dst)?;
            copy_tree(&src, &dst)?;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(meta.mode()))?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst)?;
        } else {
            tracing::warn!(path = %src.display(), "not copying a special file");
            continue;
        }
        keep_owner(&dst, meta.uid(), meta.gid());
    }
    Ok(())
}

/// Gives `path` its source's owner when the plugin may (it runs as root on a real node); a
/// plugin that may not leaves the copy its own.
fn keep_owner(path: &Path, uid: u32, gid: u32) {
    if let Err(e) = std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        && e.kind() != std::io::ErrorKind::PermissionDenied
    {
        tracing::warn!(path = %path.display(), error = %e, "could not keep the owner");
    }
}

impl State {
    pub fn snapshot_by_name(&self, name: &str) -> Option<&SnapshotRecord> {
        self.snapshots.values().find(|s| s.name == name)
    }
}
