//! Host volume feasibility (Nomad's `HostVolumeChecker`): a group asking for `host` volumes
//! fits only on nodes whose client declares a `host_volume` of each source, and a request
//! that writes cannot use a host volume declared read-only.
//!
//! The verdict depends on the node's host volumes, which its computed class does not hash,
//! and a `per_alloc` source depends on the allocation's name: so it is worked out for every
//! visited node, never memoised per class.

use std::collections::BTreeMap;

use drover_structs::{Node, TaskGroup};

use crate::csi::alloc_suffix;

/// Nomad's `FilterConstraintHostVolumes`.
pub(crate) const FILTER_HOST_VOLUMES: &str = "missing compatible host volumes";

/// Nomad's `VolumeTypeHost`.
const VOLUME_TYPE_HOST: &str = "host";

/// A group `volume` block of type `host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostVolumeAsk {
    pub source: String,
    pub read_only: bool,
    /// The allocation's index is appended to the source: `source[N]`.
    pub per_alloc: bool,
}

/// The group's `host` volume blocks, in alias order.
pub(crate) fn host_volume_asks(tg: &TaskGroup) -> Vec<HostVolumeAsk> {
    let Some(volumes) = tg.volumes.as_ref().and_then(|v| v.as_object()) else {
        return Vec::new();
    };
    let mut aliases: Vec<&String> = volumes.keys().collect();
    aliases.sort();
    aliases
        .into_iter()
        .filter_map(|alias| {
            let v = volumes.get(alias)?;
            if v.get("Type").and_then(|t| t.as_str()) != Some(VOLUME_TYPE_HOST) {
                return None;
            }
            let flag = |key: &str| v.get(key).and_then(|b| b.as_bool()).unwrap_or(false);
            Some(HostVolumeAsk {
                source: v.get("Source")?.as_str()?.to_string(),
                read_only: flag("ReadOnly"),
                per_alloc: flag("PerAlloc"),
            })
        })
        .collect()
}

/// The host volume part of a group's state in a stack: its asks, and for the placement being
/// made, whether each source (resolved for the allocation's name) is only read.
#[derive(Debug, Default)]
pub(crate) struct GroupHostVolumes {
    asks: Vec<HostVolumeAsk>,
    /// Source -> every request of it is read-only. Empty when nothing is to be checked.
    current: BTreeMap<String, bool>,
}

impl GroupHostVolumes {
    pub(crate) fn new(tg: &TaskGroup) -> GroupHostVolumes {
        GroupHostVolumes {
            asks: host_volume_asks(tg),
            current: BTreeMap::new(),
        }
    }

    /// Prepares the check for the allocation `alloc_name` (nothing is checked without one:
    /// an allocation that runs already has its volumes mounted).
    pub(crate) fn begin(&mut self, alloc_name: Option<&str>) {
        self.current.clear();
        let Some(name) = alloc_name else {
            return;
        };
        for ask in &self.asks {
            let source = if ask.per_alloc {
                format!("{}{}", ask.source, alloc_suffix(name))
            } else {
                ask.source.clone()
            };
            let only_read = self.current.entry(source).or_insert(true);
            *only_read &= ask.read_only;
        }
    }

    /// Nomad's `hasVolumes`: every source is a host volume of the node, and a read-only host
    /// volume is asked for only by read-only requests.
    pub(crate) fn check(&self, node: &Node) -> Result<(), &'static str> {
        for (source, only_read) in &self.current {
            match node.host_volume(source) {
                Some(hv) if !hv.read_only || *only_read => {}
                _ => return Err(FILTER_HOST_VOLUMES),
            }
        }
        Ok(())
    }
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

    #[test]
    fn only_host_volume_blocks_are_asks() {
        let tg = group(json!({
            "c": {"Type": "csi", "Source": "db"},
            "b": {"Type": "host", "Source": "logs", "ReadOnly": true},
            "a": {"Type": "host", "Source": "data", "PerAlloc": true},
        }));
        assert_eq!(
            host_volume_asks(&tg),
            vec![
                HostVolumeAsk {
                    source: "data".into(),
                    read_only: false,
                    per_alloc: true
                },
                HostVolumeAsk {
                    source: "logs".into(),
                    read_only: true,
                    per_alloc: false
                },
            ]
        );
    }

    #[test]
    fn a_node_without_the_source_is_refused_with_nomads_text() {
        let mut hv =
            GroupHostVolumes::new(&group(json!({"v": {"Type": "host", "Source": "data"}})));
        hv.begin(Some("j.g[0]"));
        assert_eq!(
            hv.check(&node(&[("other", false)])),
            Err("missing compatible host volumes")
        );
        assert_eq!(hv.check(&Node::default()), Err(FILTER_HOST_VOLUMES));
        assert_eq!(hv.check(&node(&[("data", false)])), Ok(()));
    }

    #[test]
    fn a_writer_is_refused_a_read_only_host_volume_and_a_reader_is_not() {
        let writer = group(json!({"v": {"Type": "host", "Source": "data"}}));
        let reader = group(json!({"v": {"Type": "host", "Source": "data", "ReadOnly": true}}));
        let read_only_node = node(&[("data", true)]);
        let mut hv = GroupHostVolumes::new(&writer);
        hv.begin(Some("j.g[0]"));
        assert_eq!(hv.check(&read_only_node), Err(FILTER_HOST_VOLUMES));
        let mut hv = GroupHostVolumes::new(&reader);
        hv.begin(Some("j.g[0]"));
        assert_eq!(hv.check(&read_only_node), Ok(()));
    }

    #[test]
    fn one_writing_request_among_readers_of_a_source_needs_a_writable_volume() {
        let tg = group(json!({
            "r": {"Type": "host", "Source": "data", "ReadOnly": true},
            "w": {"Type": "host", "Source": "data"},
        }));
        let mut hv = GroupHostVolumes::new(&tg);
        hv.begin(Some("j.g[0]"));
        assert_eq!(hv.check(&node(&[("data", true)])), Err(FILTER_HOST_VOLUMES));
        assert_eq!(hv.check(&node(&[("data", false)])), Ok(()));
    }

    #[test]
    fn a_per_alloc_source_takes_the_allocations_index() {
        let tg = group(json!({"v": {"Type": "host", "Source": "data", "PerAlloc": true}}));
        let mut hv = GroupHostVolumes::new(&tg);
        let n = node(&[("data[1]", false)]);
        hv.begin(Some("j.g[1]"));
        assert_eq!(hv.check(&n), Ok(()));
        hv.begin(Some("j.g[0]"));
        assert_eq!(hv.check(&n), Err(FILTER_HOST_VOLUMES));
        // Without a placement (a running allocation's check), nothing is asked.
        hv.begin(None);
        assert_eq!(hv.check(&Node::default()), Ok(()));
    }
}
