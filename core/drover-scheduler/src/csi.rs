//! CSI volume feasibility (Nomad's `CSIVolumeChecker`): a group asking for `csi` volumes fits
//! only on nodes running a healthy node plugin of each volume's plugin, below that plugin's
//! `MaxVolumes`, in the volume's topology, and only while each volume has a claim left for the
//! asked access (a single-writer volume written by another job's allocation refuses writers).
//!
//! Unlike constraints, these verdicts are not memoised per computed class: claims come and go
//! without any node changing (Nomad runs this check among its "available" checks). What does
//! not depend on the node (the volume lookup, its schedulability and free claims) is worked out
//! once per placement.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_structs::{CsiVolume, Node, TaskGroup, VOLUME_TYPE_CSI};

use crate::State;
use crate::util::FxMap;

/// Nomad's `FilterConstraintCSIPluginTemplate`.
fn plugin_missing(plugin: &str, node: &str) -> String {
    format!("CSI plugin {plugin} is missing from client {node}")
}

/// Nomad's `FilterConstraintCSIPluginUnhealthyTemplate`.
fn plugin_unhealthy(plugin: &str, node: &str) -> String {
    format!("CSI plugin {plugin} is unhealthy on client {node}")
}

/// Nomad's `FilterConstraintCSIPluginMaxVolumesTemplate`.
fn plugin_max_volumes(plugin: &str, node: &str) -> String {
    format!("CSI plugin {plugin} has the maximum number of volumes on client {node}")
}

/// Nomad's `FilterConstraintsCSIPluginTopology`.
const TOPOLOGY_MISMATCH: &str = "did not meet topology requirement";

/// Nomad's `FilterConstraintCSIVolumeNotFoundTemplate`.
fn volume_missing(id: &str) -> String {
    format!("missing CSI Volume {id}")
}

/// Nomad's `FilterConstraintCSIVolumeNoReadTemplate`.
fn volume_no_read(id: &str) -> String {
    format!("CSI volume {id} is unschedulable or has exhausted its available reader claims")
}

/// Nomad's `FilterConstraintCSIVolumeNoWriteTemplate`.
fn volume_no_write(id: &str) -> String {
    format!("CSI volume {id} is unschedulable or is read-only")
}

/// Nomad's `FilterConstraintCSIVolumeInUseTemplate`.
fn volume_in_use(id: &str) -> String {
    format!("CSI volume {id} has exhausted its available writer claims")
}

/// Nomad's `FilterConstraintCSIVolumeGCdAllocationTemplate`.
fn volume_held_by_gone_alloc(id: &str, alloc: &str) -> String {
    format!(
        "CSI volume {id} has exhausted its available writer claims and is claimed by a garbage \
         collected allocation {alloc}; waiting for claim to be released"
    )
}

/// A group `volume` block of type `csi`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CsiVolumeAsk {
    pub source: String,
    pub read_only: bool,
    /// The allocation's index is appended to the source: `source[N]`.
    pub per_alloc: bool,
}

impl CsiVolumeAsk {
    /// The volume id this ask names for the allocation called `alloc_name`.
    pub(crate) fn volume_id(&self, alloc_name: &str) -> String {
        if self.per_alloc {
            format!("{}{}", self.source, alloc_suffix(alloc_name))
        } else {
            self.source.clone()
        }
    }
}

/// Nomad's `AllocSuffix`: the `[N]` that ends an allocation's name, or nothing.
pub(crate) fn alloc_suffix(alloc_name: &str) -> &str {
    match alloc_name.rfind('[') {
        Some(i) if alloc_name.ends_with(']') => &alloc_name[i..],
        _ => "",
    }
}

/// The group's `csi` volume blocks, in alias order.
pub(crate) fn csi_asks(tg: &TaskGroup) -> Vec<CsiVolumeAsk> {
    let Some(volumes) = tg.volumes.as_ref().and_then(|v| v.as_object()) else {
        return Vec::new();
    };
    let mut aliases: Vec<&String> = volumes.keys().collect();
    aliases.sort();
    aliases
        .into_iter()
        .filter_map(|alias| {
            let v = volumes.get(alias)?;
            if v.get("Type").and_then(|t| t.as_str()) != Some(VOLUME_TYPE_CSI) {
                return None;
            }
            let flag = |key: &str| v.get(key).and_then(|b| b.as_bool()).unwrap_or(false);
            Some(CsiVolumeAsk {
                source: v.get("Source")?.as_str()?.to_string(),
                read_only: flag("ReadOnly"),
                per_alloc: flag("PerAlloc"),
            })
        })
        .collect()
}

/// One ask of one placement, resolved against the state.
#[derive(Debug)]
struct ResolvedAsk {
    volume_id: String,
    volume: Option<Arc<CsiVolume>>,
    /// Whether the volume has a claim left for this ask (independent of the node).
    claimable: Result<(), String>,
}

/// The CSI check of one placement: the group's volumes looked up once, checked per node.
#[derive(Debug)]
pub(crate) struct CsiPlacementCheck {
    asks: Vec<ResolvedAsk>,
}

impl CsiPlacementCheck {
    /// Resolves the asks for the allocation `alloc_name` of job `namespace/job_id`.
    pub(crate) fn new(
        state: &dyn State,
        namespace: &str,
        job_id: &str,
        asks: &[CsiVolumeAsk],
        alloc_name: &str,
    ) -> CsiPlacementCheck {
        let asks = asks
            .iter()
            .map(|ask| {
                let volume_id = ask.volume_id(alloc_name);
                let volume = state.csi_volume(namespace, &volume_id);
                let claimable = match &volume {
                    Some(v) => claimable(state, namespace, job_id, v, ask.read_only),
                    None => Err(volume_missing(&volume_id)),
                };
                ResolvedAsk {
                    volume_id,
                    volume,
                    claimable,
                }
            })
            .collect();
        CsiPlacementCheck { asks }
    }

    /// The first reason the node cannot take the placement's volumes, in Nomad's order: the
    /// volume exists, the node's plugin is there, healthy, below its maximum and in the
    /// volume's topology, then the volume has a claim left. `counts` answers how many volumes
    /// of each plugin the node uses (asked only when a plugin has a maximum).
    pub(crate) fn check(
        &self,
        node: &Node,
        counts: &mut dyn FnMut() -> Arc<BTreeMap<String, u64>>,
    ) -> Result<(), String> {
        for ask in &self.asks {
            let Some(vol) = &ask.volume else {
                return Err(volume_missing(&ask.volume_id));
            };
            let plugin_id = vol.plugin_id.as_str();
            let Some(plugin) = node
                .csi_node_plugins
                .as_ref()
                .and_then(|plugins| plugins.get(plugin_id))
            else {
                return Err(plugin_missing(plugin_id, &node.id));
            };
            if !plugin.healthy {
                return Err(plugin_unhealthy(plugin_id, &node.id));
            }
            let info = plugin.node_info.as_ref();
            // A node plugin reporting no maximum (0) takes any number of volumes.
            let max = info.map(|i| i.max_volumes).unwrap_or(0);
            if max > 0 {
                let used = counts().get(plugin_id).copied().unwrap_or(0);
                if used >= max as u64 {
                    return Err(plugin_max_volumes(plugin_id, &node.id));
                }
            }
            if !vol.topologies.is_empty() {
                let accessible = info.and_then(|i| i.accessible_topology.as_ref());
                let matched = accessible
                    .is_some_and(|t| vol.topologies.iter().any(|v| v.segments == t.segments));
                if !matched {
                    return Err(TOPOLOGY_MISMATCH.to_string());
                }
            }
            ask.claimable.clone()?;
        }
        Ok(())
    }
}

/// Whether the volume can take another claim of this kind: readers need a read-schedulable
/// volume; writers a write-schedulable one with a free writer claim, unless every writer
/// holding it belongs to this same job (an update replacing its own allocation, as Nomad
/// allows). A writer whose allocation is gone blocks until the volume watcher frees it.
fn claimable(
    state: &dyn State,
    namespace: &str,
    job_id: &str,
    vol: &CsiVolume,
    read_only: bool,
) -> Result<(), String> {
    if read_only {
        if !vol.read_schedulable() {
            return Err(volume_no_read(&vol.id));
        }
        return Ok(());
    }
    if !vol.write_schedulable() {
        return Err(volume_no_write(&vol.id));
    }
    if vol.write_free_claims() {
        return Ok(());
    }
    for holder in vol.write_allocs.keys() {
        match state.alloc(holder) {
            None => return Err(volume_held_by_gone_alloc(&vol.id, holder)),
            Some(a) if a.namespace != namespace || a.job_id != job_id => {
                return Err(volume_in_use(&vol.id));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The CSI part of a group's state in a stack: its asks, the check of the placement being
/// made, and the nodes' per-plugin volume counts (stable for an evaluation: volumes are
/// claimed by clients, not by plans).
#[derive(Debug, Default)]
pub(crate) struct GroupCsi {
    pub asks: Vec<CsiVolumeAsk>,
    /// Set for the duration of one placement.
    pub current: Option<CsiPlacementCheck>,
    counts: FxMap<String, Arc<BTreeMap<String, u64>>>,
}

impl GroupCsi {
    pub(crate) fn new(tg: &TaskGroup) -> GroupCsi {
        GroupCsi {
            asks: csi_asks(tg),
            ..Default::default()
        }
    }

    /// Prepares the check for the allocation `alloc_name` (none when the group asks for no
    /// CSI volume, or when only constraints are to be checked).
    pub(crate) fn begin(
        &mut self,
        state: &dyn State,
        namespace: &str,
        job_id: &str,
        alloc_name: Option<&str>,
    ) {
        self.current = match alloc_name {
            Some(name) if !self.asks.is_empty() => Some(CsiPlacementCheck::new(
                state, namespace, job_id, &self.asks, name,
            )),
            _ => None,
        };
    }

    /// The placement's CSI verdict on the node.
    pub(crate) fn check(&mut self, state: &dyn State, node: &Node) -> Result<(), String> {
        let Some(check) = &self.current else {
            return Ok(());
        };
        let counts = &mut self.counts;
        check.check(node, &mut || {
            counts
                .entry(node.id.clone())
                .or_insert_with(|| Arc::new(state.csi_volumes_per_plugin_on_node(&node.id)))
                .clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{
        CsiAccessMode, CsiAttachmentMode, CsiInfo, CsiNodeInfo, CsiTopology, CsiVolumeCapability,
    };
    use serde_json::json;

    #[test]
    fn asks_come_from_csi_volume_blocks_in_alias_order() {
        let tg = TaskGroup {
            volumes: Some(json!({
                "b": {"Type": "csi", "Source": "db", "ReadOnly": true},
                "a": {"Type": "csi", "Source": "data", "PerAlloc": true},
                "h": {"Type": "host", "Source": "scratch"},
            })),
            ..Default::default()
        };
        let asks = csi_asks(&tg);
        assert_eq!(
            asks,
            vec![
                CsiVolumeAsk {
                    source: "data".into(),
                    read_only: false,
                    per_alloc: true
                },
                CsiVolumeAsk {
                    source: "db".into(),
                    read_only: true,
                    per_alloc: false
                },
            ]
        );
        assert_eq!(asks[0].volume_id("web.cache[3]"), "data[3]");
        assert_eq!(asks[1].volume_id("web.cache[3]"), "db");
        assert_eq!(alloc_suffix("no-index"), "");
    }

    fn node_with_plugin(healthy: bool, max: i64, topology: Option<&str>) -> Node {
        let info = CsiInfo {
            plugin_id: "p".into(),
            healthy,
            node_info: Some(CsiNodeInfo {
                id: "ext-n1".into(),
                max_volumes: max,
                accessible_topology: topology.map(|zone| CsiTopology {
                    segments: BTreeMap::from([("zone".to_string(), zone.to_string())]),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        Node {
            id: "n1".into(),
            csi_node_plugins: Some(BTreeMap::from([("p".to_string(), info)])),
            ..Default::default()
        }
    }

    fn check_with(vol: CsiVolume) -> CsiPlacementCheck {
        CsiPlacementCheck {
            asks: vec![ResolvedAsk {
                volume_id: vol.id.clone(),
                volume: Some(Arc::new(vol)),
                claimable: Ok(()),
            }],
        }
    }

    fn volume() -> CsiVolume {
        CsiVolume {
            id: "v".into(),
            namespace: "default".into(),
            plugin_id: "p".into(),
            schedulable: true,
            requested_capabilities: vec![CsiVolumeCapability {
                access_mode: CsiAccessMode::SingleNodeWriter,
                attachment_mode: CsiAttachmentMode::FileSystem,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn node_checks_follow_nomads_order_and_texts() {
        let check = check_with(volume());
        let none = |_: &str| Arc::new(BTreeMap::new());
        assert_eq!(
            check.check(&Node::default(), &mut || none("")),
            Err("CSI plugin p is missing from client ".to_string())
        );
        assert_eq!(
            check.check(&node_with_plugin(false, 0, None), &mut || none("")),
            Err("CSI plugin p is unhealthy on client n1".to_string())
        );
        assert_eq!(
            check.check(&node_with_plugin(true, 0, None), &mut || none("")),
            Ok(())
        );
        let two = || Arc::new(BTreeMap::from([("p".to_string(), 2u64)]));
        assert_eq!(
            check.check(&node_with_plugin(true, 2, None), &mut || two()),
            Err("CSI plugin p has the maximum number of volumes on client n1".to_string())
        );
        assert_eq!(
            check.check(&node_with_plugin(true, 3, None), &mut || two()),
            Ok(())
        );
    }

    #[test]
    fn volume_topology_must_match_the_node_plugin() {
        let mut vol = volume();
        vol.topologies = vec![CsiTopology {
            segments: BTreeMap::from([("zone".to_string(), "a".to_string())]),
        }];
        let check = check_with(vol);
        let mut none = || Arc::new(BTreeMap::new());
        assert_eq!(
            check.check(&node_with_plugin(true, 0, Some("b")), &mut none),
            Err("did not meet topology requirement".to_string())
        );
        assert_eq!(
            check.check(&node_with_plugin(true, 0, None), &mut none),
            Err("did not meet topology requirement".to_string())
        );
        assert_eq!(
            check.check(&node_with_plugin(true, 0, Some("a")), &mut none),
            Ok(())
        );
    }
}
