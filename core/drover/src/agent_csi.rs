//! The server's calls to CSI plugins (`drover_server::csi::CsiClientRpc`, Nomad's `ClientCSI`
//! RPCs), answered by the client of this agent: a controller call goes to the controller
//! plugin running on this node; a node detach unmounts here. `agent_csi_routes` brings calls
//! for plugins on other nodes to the agent of that node.

use std::collections::BTreeMap;

use drover_client::Client;
use drover_client::csi::{PluginInstance, volumes};
use drover_csi::{
    CapacityRange, ControllerPublishRequest, CreateVolumeRequest, ListSnapshotsRequest, Secrets,
    Topology, TopologyRequirement, ValidateVolumeRequest, VolumeContentSource,
};
use drover_server::csi::{
    ControllerCreateSnapshotRequest, ControllerCreateVolumeRequest, ControllerCreateVolumeResponse,
    ControllerDeleteSnapshotRequest, ControllerDeleteVolumeRequest, ControllerListSnapshotsRequest,
    ControllerListVolumesRequest, ControllerPublishVolumeRequest, ControllerUnpublishVolumeRequest,
    ControllerValidateVolumeRequest, CsiClientRpc, CsiRpcFuture, NodeDetachVolumeRequest,
};
use drover_structs::csi::{
    CsiSnapshot, CsiSnapshotList, CsiTopology, CsiVolumeCapability, CsiVolumeExternalList,
    CsiVolumeExternalStub,
};

/// [`CsiClientRpc`] through the client of this agent.
pub struct LocalCsiRpc(pub Client);

impl LocalCsiRpc {
    /// The plugin instance that must serve a call meant for `node_id`.
    fn plugin_on(&self, plugin_id: &str, node_id: &str) -> Result<PluginInstance, String> {
        let here = self.0.node_id();
        if !node_id.is_empty() && node_id != here {
            return Err(format!(
                "CSI plugin {plugin_id:?} was asked for on node {node_id}, but this is node {here}"
            ));
        }
        self.0
            .csi()
            .controller_plugin(plugin_id)
            .ok_or_else(|| format!("CSI plugin {plugin_id:?} is not running on node {here}"))
    }
}

fn capabilities(caps: &[CsiVolumeCapability]) -> Result<Vec<drover_csi::VolumeCapability>, String> {
    caps.iter()
        .map(|c| volumes::capability(c.access_mode, c.attachment_mode, None))
        .collect()
}

fn topology(t: &CsiTopology) -> Topology {
    Topology {
        segments: t.segments.clone(),
    }
}

async fn create(
    rpc: &LocalCsiRpc,
    req: ControllerCreateVolumeRequest,
) -> Result<ControllerCreateVolumeResponse, String> {
    let plugin = rpc.plugin_on(&req.plugin_id, &req.controller_node_id)?;
    let mut caps = capabilities(&req.capabilities)?;
    if let Some(m) = &req.mount_options {
        for c in &mut caps {
            c.mount_options = drover_csi::MountOptions {
                fs_type: m.fs_type.clone(),
                mount_flags: m.mount_flags.clone(),
            };
        }
    }
    let capacity = (req.capacity_min > 0 || req.capacity_max > 0).then_some(CapacityRange {
        required_bytes: req.capacity_min,
        limit_bytes: req.capacity_max,
    });
    let content_source = if !req.snapshot_id.is_empty() {
        Some(VolumeContentSource::Snapshot(req.snapshot_id.clone()))
    } else if !req.clone_id.is_empty() {
        Some(VolumeContentSource::Volume(req.clone_id.clone()))
    } else {
        None
    };
    let accessibility = req
        .requested_topologies
        .as_ref()
        .map(|t| TopologyRequirement {
            requisite: t.required.iter().map(topology).collect(),
            preferred: t.preferred.iter().map(topology).collect(),
        });
    let volume = plugin
        .client
        .create_volume(&CreateVolumeRequest {
            name: req.name.clone(),
            capacity,
            capabilities: caps,
            parameters: req.parameters.clone(),
            secrets: Secrets(req.secrets.clone()),
            content_source,
            accessibility,
        })
        .await
        .map_err(|e| e.to_string())?;
    Ok(ControllerCreateVolumeResponse {
        external_volume_id: volume.external_id,
        capacity_bytes: volume.capacity_bytes,
        volume_context: volume.context,
        topologies: volume
            .accessible_topology
            .into_iter()
            .map(|t| CsiTopology {
                segments: t.segments,
            })
            .collect(),
    })
}

/// A plugin's snapshot in Nomad's terms: its creation time in seconds, as Nomad keeps it.
/// A `ListVolumes` entry as Nomad's `CSIVolumeExternalStub`.
fn external_stub_of(e: drover_csi::VolumeEntry) -> CsiVolumeExternalStub {
    let (snapshot_id, clone_id) = match e.volume.content_source {
        Some(VolumeContentSource::Snapshot(id)) => (id, String::new()),
        Some(VolumeContentSource::Volume(id)) => (String::new(), id),
        None => (String::new(), String::new()),
    };
    let (is_abnormal, status) = e
        .condition
        .map(|c| (c.abnormal, c.message))
        .unwrap_or_default();
    CsiVolumeExternalStub {
        external_id: e.volume.external_id,
        capacity_bytes: e.volume.capacity_bytes,
        volume_context: e.volume.context.into_iter().collect(),
        clone_id,
        snapshot_id,
        published_external_node_ids: e.published_node_ids,
        is_abnormal,
        status,
    }
}

fn snapshot_of(s: drover_csi::Snapshot) -> CsiSnapshot {
    CsiSnapshot {
        id: s.id,
        external_source_volume_id: s.source_volume_id,
        size_bytes: s.size_bytes,
        create_time: s.create_time_nanos.div_euclid(1_000_000_000),
        is_ready: s.ready,
        ..Default::default()
    }
}

impl CsiClientRpc for LocalCsiRpc {
    fn controller_validate_volume(
        &self,
        req: ControllerValidateVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        Box::pin(async move {
            let plugin = self.plugin_on(&req.plugin_id, &req.controller_node_id)?;
            plugin
                .client
                .controller_validate_capabilities(&ValidateVolumeRequest {
                    external_id: req.external_id,
                    capabilities: capabilities(&req.capabilities)?,
                    parameters: req.parameters,
                    context: req.context,
                    secrets: Secrets(req.secrets),
                })
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn controller_create_volume(
        &self,
        req: ControllerCreateVolumeRequest,
    ) -> CsiRpcFuture<'_, ControllerCreateVolumeResponse> {
        Box::pin(create(self, req))
    }

    fn controller_delete_volume(&self, req: ControllerDeleteVolumeRequest) -> CsiRpcFuture<'_, ()> {
        Box::pin(async move {
            let plugin = self.plugin_on(&req.plugin_id, &req.controller_node_id)?;
            plugin
                .client
                .delete_volume(&req.external_id, &Secrets(req.secrets))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn controller_publish_volume(
        &self,
        req: ControllerPublishVolumeRequest,
    ) -> CsiRpcFuture<'_, BTreeMap<String, String>> {
        Box::pin(async move {
            let plugin = self.plugin_on(&req.plugin_id, &req.controller_node_id)?;
            let capability = volumes::capability(
                req.access_mode,
                req.attachment_mode,
                req.mount_options.as_ref(),
            )?;
            plugin
                .client
                .controller_publish_volume(&ControllerPublishRequest {
                    external_id: req.external_id,
                    node_id: req.client_csi_node_id,
                    capability,
                    readonly: req.read_only,
                    secrets: Secrets(req.secrets),
                    context: req.volume_context,
                })
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn controller_unpublish_volume(
        &self,
        req: ControllerUnpublishVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        Box::pin(async move {
            let plugin = self.plugin_on(&req.plugin_id, &req.controller_node_id)?;
            plugin
                .client
                .controller_unpublish_volume(
                    &req.external_id,
                    &req.client_csi_node_id,
                    &Secrets(req.secrets),
                )
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn controller_create_snapshot(
        &self,
        req: ControllerCreateSnapshotRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshot> {
        Box::pin(async move {
            let plugin = self.plugin_on(&req.plugin_id, &req.controller_node_id)?;
            plugin
                .client
                .create_snapshot(
                    &req.external_source_volume_id,
                    &req.name,
                    &req.parameters,
                    &Secrets(req.secrets),
                )
                .await
                .map(snapshot_of)
                .map_err(|e| e.to_string())
        })
    }

    fn controller_delete_snapshot(
        &self,
        req: ControllerDeleteSnapshotRequest,
    ) -> CsiRpcFuture<'_, ()> {
        Box::pin(async move {
            let plugin = self.plugin_on(&req.plugin_id, &req.controller_node_id)?;
            plugin
                .client
                .delete_snapshot(&req.snapshot_id, &Secrets(req.secrets))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn controller_list_snapshots(
        &self,
        req: ControllerListSnapshotsRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshotList> {
        Box::pin(async move {
            let plugin = self.plugin_on(&req.plugin_id, &req.controller_node_id)?;
            let page = plugin
                .client
                .list_snapshots_with(&ListSnapshotsRequest {
                    max_entries: req.max_entries,
                    starting_token: req.starting_token,
                    secrets: Secrets(req.secrets),
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            Ok(CsiSnapshotList {
                snapshots: page.entries.into_iter().map(snapshot_of).collect(),
                next_token: page.next_token,
            })
        })
    }

    fn controller_list_volumes(
        &self,
        req: ControllerListVolumesRequest,
    ) -> CsiRpcFuture<'_, CsiVolumeExternalList> {
        Box::pin(async move {
            let plugin = self.plugin_on(&req.plugin_id, &req.controller_node_id)?;
            let page = plugin
                .client
                .list_volumes(req.max_entries, &req.starting_token)
                .await
                .map_err(|e| e.to_string())?;
            Ok(CsiVolumeExternalList {
                volumes: page.entries.into_iter().map(external_stub_of).collect(),
                next_token: page.next_token,
            })
        })
    }

    fn node_detach_volume(&self, req: NodeDetachVolumeRequest) -> CsiRpcFuture<'_, ()> {
        Box::pin(async move {
            let here = self.0.node_id();
            if req.node_id != here {
                return Err(format!(
                    "volume {:?} is mounted on node {}, but this is node {here}",
                    req.volume_id, req.node_id
                ));
            }
            let usage = volumes::usage_dir(req.read_only, req.attachment_mode, req.access_mode);
            volumes::detach(
                &self.0.csi(),
                &req.plugin_id,
                &req.alloc_id,
                &req.volume_id,
                &req.external_id,
                usage,
            )
            .await
        })
    }
}
