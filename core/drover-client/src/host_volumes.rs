//! A task's host volume mounts (Nomad's task `volume_hook` for `host` volumes): each
//! `volume_mount` naming a group `volume` of type `host` becomes a driver mount of the node's
//! `host_volume` path at the mount's destination, read-only when the host volume, the group's
//! request or the mount says so.
//!
//! Only drivers that honour `TaskConfig::mounts` can give a task its host volume; for any
//! other (raw_exec, which cannot remap paths) the task is refused, as Nomad refuses it, rather
//! than started without the volume it asked for.

use drover_abi::{MountConfig, MountPropagation};
use drover_structs::{Node, Task, TaskGroup};
use serde::Deserialize;

/// Nomad's `VolumeTypeHost`.
const VOLUME_TYPE_HOST: &str = "host";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostVolumeError {
    /// The group asks for a source the node does not declare (its agent config changed since
    /// the placement).
    #[error("host volume validation error: missing {0}")]
    Missing(String),
    #[error("No group volume declaration found named: {0}")]
    NoGroupVolume(String),
    #[error("task driver {driver:?} for {task:?} does not support host volumes")]
    DriverUnsupported { driver: String, task: String },
    #[error("volume {name:?}: {reason}")]
    Invalid { name: String, reason: String },
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct VolumeRequestJson {
    #[serde(rename = "Type")]
    kind: String,
    #[serde(rename = "Source")]
    source: String,
    #[serde(rename = "ReadOnly")]
    read_only: bool,
    #[serde(rename = "PerAlloc")]
    per_alloc: bool,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct VolumeMountJson {
    #[serde(rename = "Volume")]
    volume: String,
    #[serde(rename = "Destination")]
    destination: String,
    #[serde(rename = "ReadOnly")]
    read_only: bool,
    #[serde(rename = "PropagationMode")]
    propagation_mode: MountPropagation,
}

/// The source a request names for the allocation `alloc_name` (`source[N]` for `per_alloc`).
fn source_for(req: &VolumeRequestJson, alloc_name: &str) -> String {
    if !req.per_alloc {
        return req.source.clone();
    }
    let suffix = match alloc_name.rfind('[') {
        Some(i) if alloc_name.ends_with(']') => &alloc_name[i..],
        _ => "",
    };
    format!("{}{suffix}", req.source)
}

/// The driver mounts of the task's host volumes. `mount_configs` is whether the task's driver
/// honours mounts; a task mounting a host volume through a driver that does not is refused.
pub fn task_mounts(
    task: &Task,
    group: &TaskGroup,
    alloc_name: &str,
    node: &Node,
    mount_configs: bool,
) -> Result<Vec<MountConfig>, HostVolumeError> {
    let volumes = group.volumes.as_ref().and_then(|v| v.as_object());
    let mut host = std::collections::BTreeMap::new();
    for (name, raw) in volumes.into_iter().flatten() {
        let req: VolumeRequestJson =
            serde_json::from_value(raw.clone()).map_err(|e| HostVolumeError::Invalid {
                name: name.clone(),
                reason: e.to_string(),
            })?;
        if req.kind != VOLUME_TYPE_HOST {
            continue;
        }
        // Every host volume of the group is checked, mounted or not: a node whose agent lost
        // one since the placement must not run the group (as Nomad checks).
        let source = source_for(&req, alloc_name);
        let Some(hv) = node.host_volume(&source) else {
            return Err(HostVolumeError::Missing(source));
        };
        host.insert(name.as_str(), (req, hv));
    }
    let mut mounts = Vec::new();
    for raw in task
        .volume_mounts
        .as_ref()
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
    {
        let vm: VolumeMountJson =
            serde_json::from_value(raw.clone()).map_err(|e| HostVolumeError::Invalid {
                name: raw
                    .get("Volume")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string(),
                reason: e.to_string(),
            })?;
        if !volumes.is_some_and(|v| v.contains_key(&vm.volume)) {
            return Err(HostVolumeError::NoGroupVolume(vm.volume));
        }
        // CSI volumes are mounted by the CSI hook.
        let Some((req, hv)) = host.get(vm.volume.as_str()) else {
            continue;
        };
        mounts.push(MountConfig {
            task_path: vm.destination,
            host_path: hv.path.clone(),
            readonly: hv.read_only || req.read_only || vm.read_only,
            propagation_mode: vm.propagation_mode,
        });
    }
    if !mounts.is_empty() && !mount_configs {
        return Err(HostVolumeError::DriverUnsupported {
            driver: task.driver.clone(),
            task: task.name.clone(),
        });
    }
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::ClientHostVolumeConfig;
    use serde_json::json;

    fn node(volumes: &[(&str, bool)]) -> Node {
        let map = volumes
            .iter()
            .map(|(name, read_only)| {
                let hv = ClientHostVolumeConfig {
                    name: name.to_string(),
                    path: format!("/srv/{name}"),
                    read_only: *read_only,
                };
                (name.to_string(), hv)
            })
            .collect();
        Node {
            host_volumes: Some(map),
            ..Default::default()
        }
    }

    fn group(volumes: serde_json::Value) -> TaskGroup {
        TaskGroup {
            volumes: Some(volumes),
            ..Default::default()
        }
    }

    fn task(mounts: serde_json::Value) -> Task {
        Task {
            name: "t".into(),
            driver: "exec".into(),
            volume_mounts: Some(mounts),
            ..Default::default()
        }
    }

    #[test]
    fn a_mount_of_a_host_volume_binds_its_path_at_the_destination() {
        let g = group(json!({"v": {"Type": "host", "Source": "data"}}));
        let t =
            task(json!([{"Volume": "v", "Destination": "/data", "PropagationMode": "private"}]));
        let mounts = task_mounts(&t, &g, "j.g[0]", &node(&[("data", false)]), true).unwrap();
        assert_eq!(
            mounts,
            vec![MountConfig {
                task_path: "/data".into(),
                host_path: "/srv/data".into(),
                readonly: false,
                propagation_mode: MountPropagation::Private,
            }]
        );
    }

    #[test]
    fn the_mount_is_read_only_when_the_host_volume_request_or_mount_says_so() {
        let t = |ro: bool| task(json!([{"Volume": "v", "Destination": "/d", "ReadOnly": ro}]));
        let writable = group(json!({"v": {"Type": "host", "Source": "data"}}));
        let read_only = group(json!({"v": {"Type": "host", "Source": "data", "ReadOnly": true}}));
        let ro = |t: &Task, g: &TaskGroup, n: &Node| {
            task_mounts(t, g, "a", n, true).unwrap()[0].readonly
        };
        assert!(!ro(&t(false), &writable, &node(&[("data", false)])));
        assert!(ro(&t(true), &writable, &node(&[("data", false)])));
        assert!(ro(&t(false), &read_only, &node(&[("data", false)])));
        assert!(ro(&t(false), &writable, &node(&[("data", true)])));
    }

    #[test]
    fn a_driver_without_mount_support_is_refused_with_nomads_text() {
        let g = group(json!({"v": {"Type": "host", "Source": "data"}}));
        let mut t = task(json!([{"Volume": "v", "Destination": "/d"}]));
        t.driver = "raw_exec".into();
        assert_eq!(
            task_mounts(&t, &g, "a", &node(&[("data", false)]), false)
                .unwrap_err()
                .to_string(),
            "task driver \"raw_exec\" for \"t\" does not support host volumes"
        );
        // A task that mounts nothing runs on such a driver.
        let none = task(json!([]));
        assert_eq!(
            task_mounts(&none, &g, "a", &node(&[("data", false)]), false),
            Ok(vec![])
        );
    }

    #[test]
    fn a_host_volume_the_node_lost_fails_the_task_and_per_alloc_takes_the_index() {
        let g = group(json!({"v": {"Type": "host", "Source": "data", "PerAlloc": true}}));
        let t = task(json!([{"Volume": "v", "Destination": "/d"}]));
        let n = node(&[("data[1]", false)]);
        assert_eq!(
            task_mounts(&t, &g, "j.g[1]", &n, true).unwrap()[0].host_path,
            "/srv/data[1]"
        );
        assert_eq!(
            task_mounts(&t, &g, "j.g[0]", &n, true)
                .unwrap_err()
                .to_string(),
            "host volume validation error: missing data[0]"
        );
    }

    #[test]
    fn csi_volume_mounts_are_left_to_the_csi_hook() {
        let g = group(json!({"c": {"Type": "csi", "Source": "db"}}));
        let t = task(json!([{"Volume": "c", "Destination": "/db"}]));
        assert_eq!(
            task_mounts(&t, &g, "a", &Node::default(), false),
            Ok(vec![])
        );
    }
}
