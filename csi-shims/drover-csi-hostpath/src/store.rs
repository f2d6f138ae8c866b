//! The plugin's memory: volumes (name, capacity, attachments, source), snapshots, and what the
//! node side staged and published, kept in `<state-dir>/state.json` (versioned JSON, written
//! atomically) so that a restarted plugin answers as the one before it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use drover_csi::{StringMap, VolumeCapability, VolumeContentSource};
use serde::{Deserialize, Serialize};

const STATE_FILE: &str = "state.json";
const VOLUMES_DIR: &str = "volumes";
const SNAPSHOTS_DIR: &str = "snapshots";
const VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {}: {source}", path.display())]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: version {found} is not known (this plugin writes {VERSION})", path.display())]
    Version { path: PathBuf, found: u32 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeRecord {
    pub id: String,
    /// The CO's name: CreateVolume's idempotency key.
    pub name: String,
    pub capacity_bytes: i64,
    #[serde(default)]
    pub parameters: StringMap,
    /// Controller attachments, by node id.
    #[serde(default)]
    pub attachments: BTreeMap<String, Attachment>,
    /// The snapshot or volume it was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_source: Option<VolumeContentSource>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    pub capability: VolumeCapability,
    pub readonly: bool,
}

/// A volume bind-mounted on a staging path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    pub volume_id: String,
    pub capability: VolumeCapability,
}

/// A volume bind-mounted on a target path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishRecord {
    pub volume_id: String,
    pub capability: VolumeCapability,
    /// As mounted: asked for, or implied by a reader-only access mode.
    pub readonly: bool,
    pub staging_target_path: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    #[serde(default)]
    pub volumes: BTreeMap<String, VolumeRecord>,
    /// By staging path.
    #[serde(default)]
    pub stages: BTreeMap<PathBuf, StageRecord>,
    /// By target path.
    #[serde(default)]
    pub publishes: BTreeMap<PathBuf, PublishRecord>,
    /// By snapshot id.
    #[serde(default)]
    pub snapshots: BTreeMap<String, crate::snapshot::SnapshotRecord>,
}

impl State {
    pub fn volume_by_name(&self, name: &str) -> Option<&VolumeRecord> {
        self.volumes.values().find(|v| v.name == name)
    }

    pub fn allocated_bytes(&self) -> i64 {
        self.volumes.values().map(|v| v.capacity_bytes).sum()
    }
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    #[serde(flatten)]
    state: State,
}

pub struct Store {
    state_file: PathBuf,
    volumes_dir: PathBuf,
    pub state: State,
}

impl Store {
    /// Opens (or starts) the state under `state_dir`.
    pub fn open(state_dir: &Path) -> Result<Store, StoreError> {
        let volumes_dir = state_dir.join(VOLUMES_DIR);
        std::fs::create_dir_all(&volumes_dir).map_err(|source| StoreError::Io {
            what: "creating",
            path: volumes_dir.clone(),
            source,
        })?;
        let state_file = state_dir.join(STATE_FILE);
        let state = match std::fs::read(&state_file) {
            Ok(bytes) => {
                let on_disk: OnDisk =
                    serde_json::from_slice(&bytes).map_err(|source| StoreError::Decode {
                        path: state_file.clone(),
                        source,
                    })?;
                if on_disk.version != VERSION {
                    return Err(StoreError::Version {
                        path: state_file,
                        found: on_disk.version,
                    });
                }
                on_disk.state
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(source) => {
                return Err(StoreError::Io {
                    what: "reading",
                    path: state_file,
                    source,
                });
            }
        };
        Ok(Store {
            state_file,
            volumes_dir,
            state,
        })
    }

    /// Where the volume's data lives.
    pub fn volume_dir(&self, id: &str) -> PathBuf {
        self.volumes_dir.join(id)
    }

    /// Where the snapshot's copy of its volume lives.
    pub fn snapshot_dir(&self, id: &str) -> PathBuf {
        self.volumes_dir.with_file_name(SNAPSHOTS_DIR).join(id)
    }

    /// Replaces the state with `next` once it is on disk; on failure the state is unchanged.
    pub fn commit(&mut self, next: State) -> Result<(), StoreError> {
        self.write(&next)?;
        self.state = next;
        Ok(())
    }

    fn write(&self, state: &State) -> Result<(), StoreError> {
        let io = |what: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { what, path, source }
        };
        let bytes = serde_json::to_vec_pretty(&OnDisk {
            version: VERSION,
            state: state.clone(),
        })
        .map_err(|e| StoreError::Io {
            what: "encoding",
            path: self.state_file.clone(),
            source: std::io::Error::other(e),
        })?;
        let tmp = self.state_file.with_extension("json.tmp");
        let mut file = std::fs::File::create(&tmp).map_err(io("creating", &tmp))?;
        file.write_all(&bytes).map_err(io("writing", &tmp))?;
        file.sync_all().map_err(io("syncing", &tmp))?;
        std::fs::rename(&tmp, &self.state_file).map_err(io("renaming", &tmp))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_csi::AccessMode;

    fn volume(id: &str, name: &str) -> VolumeRecord {
        VolumeRecord {
            id: id.into(),
            name: name.into(),
            capacity_bytes: 10,
            parameters: StringMap::new(),
            attachments: BTreeMap::from([(
                "n1".to_string(),
                Attachment {
                    capability: VolumeCapability::file_system(AccessMode::SingleNodeWriter),
                    readonly: false,
                },
            )]),
            content_source: None,
        }
    }

    #[test]
    fn committed_state_is_there_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        assert!(dir.path().join("volumes").is_dir());
        let mut next = store.state.clone();
        next.volumes.insert("v1".into(), volume("v1", "db"));
        store.commit(next.clone()).unwrap();
        let reopened = Store::open(dir.path()).unwrap();
        assert_eq!(reopened.state, next);
        assert_eq!(reopened.state.volume_by_name("db").unwrap().id, "v1");
        assert_eq!(reopened.state.allocated_bytes(), 10);
    }

    #[test]
    fn an_unknown_version_or_garbage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STATE_FILE), br#"{"version": 99}"#).unwrap();
        assert!(matches!(
            Store::open(dir.path()),
            Err(StoreError::Version { found: 99, .. })
        ));
        std::fs::write(dir.path().join(STATE_FILE), b"{not json").unwrap();
        assert!(matches!(
            Store::open(dir.path()),
            Err(StoreError::Decode { .. })
        ));
    }
}
