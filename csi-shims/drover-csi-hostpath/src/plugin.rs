//! What the services share: the configuration, the store behind a lock (calls on the same
//! volume must not interleave), and the request checks every RPC makes.

use std::path::{Path, PathBuf};

use drover_csi::proto;
use drover_csi::{AttachmentMode, StringMap, VolumeCapability};
use tokio::sync::Mutex;
use tonic::Status;

use crate::TOPOLOGY_KEY;
use crate::store::{Store, StoreError};

/// How the plugin runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// This node's id, as `NodeGetInfo` reports it and `ControllerPublishVolume` expects it.
    pub node_id: String,
    /// Where volumes and `state.json` live.
    pub state_dir: PathBuf,
    /// How many volumes may be published to the node; 0: no limit.
    pub max_volumes_per_node: i64,
    /// The pool volumes are carved from, in bytes.
    pub capacity_bytes: i64,
}

/// The size of a volume created without a capacity range.
pub const DEFAULT_VOLUME_BYTES: i64 = 1 << 30;

pub struct Plugin {
    pub config: Config,
    pub store: Mutex<Store>,
}

impl Plugin {
    pub fn open(config: Config) -> Result<Plugin, StoreError> {
        let store = Store::open(&config.state_dir)?;
        Ok(Plugin {
            config,
            store: Mutex::new(store),
        })
    }

    /// The topology of this node, which is that of every volume.
    pub fn topology(&self) -> proto::Topology {
        proto::Topology {
            segments: StringMap::from([(TOPOLOGY_KEY.to_string(), self.config.node_id.clone())]),
        }
    }
}

/// INVALID_ARGUMENT unless the REQUIRED string `value` is set.
pub fn required(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    Ok(())
}

/// A REQUIRED path: set and absolute.
pub fn required_path<'a>(field: &str, value: &'a str) -> Result<&'a Path, Status> {
    required(field, value)?;
    let path = Path::new(value);
    if !path.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "{field} {value:?} is not an absolute path"
        )));
    }
    Ok(path)
}

/// A REQUIRED capability that this plugin can serve: a file system (block devices are
/// refused with INVALID_ARGUMENT, the spec's "unsupported field").
pub fn mount_capability(
    field: &str,
    cap: Option<&proto::VolumeCapability>,
) -> Result<VolumeCapability, Status> {
    let cap = cap.ok_or_else(|| Status::invalid_argument(format!("{field} is required")))?;
    let cap = parse_capability(cap)?;
    if cap.attachment_mode == AttachmentMode::BlockDevice {
        return Err(Status::invalid_argument(
            "block devices are not supported: volumes are directories",
        ));
    }
    Ok(cap)
}

/// A capability whose REQUIRED fields are set.
pub fn parse_capability(cap: &proto::VolumeCapability) -> Result<VolumeCapability, Status> {
    VolumeCapability::try_from(cap).map_err(|e| Status::invalid_argument(e.to_string()))
}

/// An INTERNAL status for a failed local operation, with what was being done.
pub fn internal(what: impl std::fmt::Display, err: impl std::fmt::Display) -> Status {
    Status::internal(format!("{what}: {err}"))
}
