//! What the node reports about a plugin instance (Nomad's csimanager fingerprint): its vendor
//! and version from `GetPluginInfo`, its identity capabilities, and the controller or node
//! service's capabilities and node info, as `CsiInfo`.

use drover_csi::{CsiClient, CsiError, NodeCapabilities};
use drover_structs::csi::{CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiPluginType, CsiTopology};
use drover_structs::time::{format_rfc3339_nanos, now_nanos};

/// The fingerprint of one instance: what goes into the node's maps, and what the volume hook
/// needs from the node service.
#[derive(Debug, Clone)]
pub struct PluginFingerprint {
    pub controller: Option<CsiInfo>,
    pub node: Option<CsiInfo>,
    pub node_capabilities: NodeCapabilities,
    pub external_node_id: String,
}

/// Asks the plugin everything the node reports about it.
pub async fn fingerprint(
    client: &CsiClient,
    plugin_id: &str,
    alloc_id: &str,
    kind: CsiPluginType,
) -> Result<PluginFingerprint, CsiError> {
    let info = client.plugin_info().await?;
    let caps = client.plugin_capabilities().await?;
    let base = CsiInfo {
        plugin_id: plugin_id.to_string(),
        alloc_id: alloc_id.to_string(),
        healthy: true,
        health_description: "healthy".into(),
        update_time: format_rfc3339_nanos(now_nanos()),
        provider: info.name.clone(),
        provider_version: info.vendor_version.clone(),
        requires_controller_plugin: caps.controller_service,
        requires_topologies: caps.volume_accessibility_constraints,
        controller_info: None,
        node_info: None,
    };
    let mut out = PluginFingerprint {
        controller: None,
        node: None,
        node_capabilities: NodeCapabilities::default(),
        external_node_id: String::new(),
    };
    if kind.runs_controller() {
        let c = client.controller_get_capabilities().await?;
        out.controller = Some(CsiInfo {
            controller_info: Some(CsiControllerInfo {
                supports_create_delete: c.create_delete_volume,
                supports_attach_detach: c.publish_unpublish_volume,
                supports_list_volumes: c.list_volumes,
                supports_get_capacity: c.get_capacity,
                supports_create_delete_snapshot: c.create_delete_snapshot,
                supports_list_snapshots: c.list_snapshots,
                supports_clone: c.clone_volume,
                supports_read_only_attach: c.publish_readonly,
                supports_expand: c.expand_volume,
                supports_list_volumes_attached_nodes: c.list_volumes_published_nodes,
                supports_condition: c.volume_condition,
                supports_get: c.get_volume,
            }),
            ..base.clone()
        });
    }
    if kind.runs_node() {
        let n = client.node_get_capabilities().await?;
        let node = client.node_get_info().await?;
        out.node_capabilities = n;
        out.external_node_id.clone_from(&node.node_id);
        out.node = Some(CsiInfo {
            node_info: Some(CsiNodeInfo {
                id: node.node_id,
                max_volumes: node.max_volumes,
                accessible_topology: node.accessible_topology.map(|t| CsiTopology {
                    segments: t.segments,
                }),
                requires_node_stage_volume: n.stage_unstage_volume,
                supports_stats: n.get_volume_stats,
                supports_expand: n.expand_volume,
                supports_condition: n.volume_condition,
            }),
            ..base
        });
    }
    Ok(out)
}

/// The same report with the instance marked unhealthy (a failed probe).
pub fn unhealthy(info: &CsiInfo, why: &str) -> CsiInfo {
    CsiInfo {
        healthy: false,
        health_description: why.to_string(),
        update_time: format_rfc3339_nanos(now_nanos()),
        ..info.clone()
    }
}
