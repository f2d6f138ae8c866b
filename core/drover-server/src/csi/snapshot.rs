//! CSI volume snapshots (Nomad's `CSIVolume.CreateSnapshot`, `DeleteSnapshot` and
//! `ListSnapshots`): each goes to a healthy controller of the plugin through
//! [`CsiClientRpc`](super::CsiClientRpc). The servers keep no snapshot and write nothing to the log; secrets are
//! passed to the plugin and never answered.

use std::collections::BTreeMap;

use drover_structs::{
    CsiPlugin, CsiSnapshot, CsiSnapshotList, CsiVolume, DEFAULT_NAMESPACE, MultiError,
};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::rpc::{Reply, Request};
use crate::server::Server;

/// Asks a controller to snapshot a volume (CSI `CreateSnapshot`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerCreateSnapshotRequest {
    pub plugin_id: String,
    /// The client node running the controller to ask.
    pub controller_node_id: String,
    /// The storage provider's id of the volume.
    pub external_source_volume_id: String,
    /// The idempotency key: the same name again gives the same snapshot.
    pub name: String,
    pub secrets: BTreeMap<String, String>,
    pub parameters: BTreeMap<String, String>,
}

/// Asks a controller to delete a snapshot (CSI `DeleteSnapshot`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerDeleteSnapshotRequest {
    pub plugin_id: String,
    pub controller_node_id: String,
    pub snapshot_id: String,
    pub secrets: BTreeMap<String, String>,
}

/// Asks a controller for one page of its snapshots (CSI `ListSnapshots`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerListSnapshotsRequest {
    pub plugin_id: String,
    pub controller_node_id: String,
    /// 0: as many as the plugin gives.
    pub max_entries: i32,
    pub starting_token: String,
    pub secrets: BTreeMap<String, String>,
}

/// The snapshot endpoint calls (carried in `Request::CsiSnapshot`); all run on the leader,
/// as Nomad forwards them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CsiSnapshotRequest {
    Create {
        namespace: String,
        snapshots: Vec<CsiSnapshot>,
    },
    Delete {
        snapshots: Vec<CsiSnapshot>,
    },
    List {
        plugin_id: String,
        per_page: i32,
        next_token: String,
        secrets: BTreeMap<String, String>,
    },
}

/// What the snapshot endpoints answer (carried in `Reply::CsiSnapshot`), with the state
/// index the answer was made at.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CsiSnapshotReply {
    Created {
        snapshots: Vec<CsiSnapshot>,
        index: u64,
    },
    Deleted {
        index: u64,
    },
    Listed {
        list: CsiSnapshotList,
        index: u64,
    },
}

fn unexpected(reply: Reply) -> ServerError {
    ServerError::Internal(format!("unexpected CSI snapshot endpoint reply: {reply:?}"))
}

/// Refusals (the request's fault) answer 400; a failed plugin call answers 500.
fn multi_error(errors: MultiError, plugin_failed: bool) -> ServerError {
    if plugin_failed {
        ServerError::Internal(errors.to_string())
    } else {
        ServerError::BadRequest(errors.to_string())
    }
}

fn supports_snapshots(plugin: &CsiPlugin) -> bool {
    plugin
        .controller_info()
        .is_some_and(|c| c.supports_create_delete_snapshot)
}

fn supports_listing(plugin: &CsiPlugin) -> bool {
    plugin
        .controller_info()
        .is_some_and(|c| c.supports_list_snapshots)
}

/// Refuses a volume to create from a snapshot or a clone source when its plugin does not
/// advertise it (CREATE_DELETE_SNAPSHOT, CLONE_VOLUME), as Kubernetes' provisioner does,
/// rather than let the plugin fail the call its own way.
pub(super) fn check_content_source(plugin: &CsiPlugin, vol: &CsiVolume) -> Result<(), ServerError> {
    let caps = plugin.controller_info();
    if !vol.snapshot_id.is_empty() && !caps.is_some_and(|c| c.supports_create_delete_snapshot) {
        return Err(ServerError::BadRequest(format!(
            "plugin {:?} does not support snapshots: cannot create volume {:?} from snapshot {:?}",
            plugin.id, vol.id, vol.snapshot_id
        )));
    }
    if !vol.clone_id.is_empty() && !caps.is_some_and(|c| c.supports_clone) {
        return Err(ServerError::BadRequest(format!(
            "plugin {:?} does not support cloning: cannot create volume {:?} from volume {:?}",
            plugin.id, vol.id, vol.clone_id
        )));
    }
    Ok(())
}

impl Server {
    async fn route_csi_snapshot(
        &self,
        request: CsiSnapshotRequest,
    ) -> Result<CsiSnapshotReply, ServerError> {
        match self.route(Request::CsiSnapshot(request)).await? {
            Reply::CsiSnapshot(reply) => Ok(reply),
            other => Err(unexpected(other)),
        }
    }

    /// Snapshots volumes of `namespace` through their plugins' controllers (each snapshot
    /// names its volume by `SourceVolumeID`; `PluginID` defaults to the volume's). The
    /// volume's secrets are passed, overridden by the snapshot's. Answers the snapshots as
    /// the plugins describe them, without secrets, and the state index.
    pub async fn create_csi_snapshots(
        &self,
        namespace: &str,
        snapshots: Vec<CsiSnapshot>,
    ) -> Result<(Vec<CsiSnapshot>, u64), ServerError> {
        let request = CsiSnapshotRequest::Create {
            namespace: namespace.to_string(),
            snapshots,
        };
        match self.route_csi_snapshot(request).await? {
            CsiSnapshotReply::Created { snapshots, index } => Ok((snapshots, index)),
            other => Err(unexpected(Reply::CsiSnapshot(other))),
        }
    }

    /// Deletes snapshots (each named by `ID` and `PluginID`) through their plugins.
    pub async fn delete_csi_snapshots(
        &self,
        snapshots: Vec<CsiSnapshot>,
    ) -> Result<u64, ServerError> {
        match self
            .route_csi_snapshot(CsiSnapshotRequest::Delete { snapshots })
            .await?
        {
            CsiSnapshotReply::Deleted { index } => Ok(index),
            other => Err(unexpected(Reply::CsiSnapshot(other))),
        }
    }

    /// One page of a plugin's snapshots: at most `per_page` (0: the plugin's choice) from
    /// `next_token`.
    pub async fn list_csi_snapshots(
        &self,
        plugin_id: &str,
        per_page: i32,
        next_token: &str,
        secrets: BTreeMap<String, String>,
    ) -> Result<(CsiSnapshotList, u64), ServerError> {
        let request = CsiSnapshotRequest::List {
            plugin_id: plugin_id.to_string(),
            per_page,
            next_token: next_token.to_string(),
            secrets,
        };
        match self.route_csi_snapshot(request).await? {
            CsiSnapshotReply::Listed { list, index } => Ok((list, index)),
            other => Err(unexpected(Reply::CsiSnapshot(other))),
        }
    }

    /// Runs a snapshot request here, on the leader.
    pub(crate) async fn execute_csi_snapshot(
        &self,
        request: CsiSnapshotRequest,
    ) -> Result<Reply, ServerError> {
        let reply = match request {
            CsiSnapshotRequest::Create {
                namespace,
                snapshots,
            } => {
                let snapshots = self.create_snapshots_here(&namespace, snapshots).await?;
                CsiSnapshotReply::Created {
                    snapshots,
                    index: self.snapshot().latest_index(),
                }
            }
            CsiSnapshotRequest::Delete { snapshots } => {
                self.delete_snapshots_here(snapshots).await?;
                CsiSnapshotReply::Deleted {
                    index: self.snapshot().latest_index(),
                }
            }
            CsiSnapshotRequest::List {
                plugin_id,
                per_page,
                next_token,
                secrets,
            } => CsiSnapshotReply::Listed {
                list: self
                    .list_snapshots_here(&plugin_id, per_page, next_token, secrets)
                    .await?,
                index: self.snapshot().latest_index(),
            },
        };
        Ok(Reply::CsiSnapshot(reply))
    }

    async fn create_snapshots_here(
        &self,
        namespace: &str,
        snapshots: Vec<CsiSnapshot>,
    ) -> Result<Vec<CsiSnapshot>, ServerError> {
        if snapshots.is_empty() {
            return Err(ServerError::BadRequest(
                "missing snapshot definition".into(),
            ));
        }
        let namespace = if namespace.is_empty() {
            DEFAULT_NAMESPACE
        } else {
            namespace
        };
        let state = self.snapshot();
        let mut errors = MultiError::new();
        let mut plugin_failed = false;
        let mut created = Vec::new();
        for snap in snapshots {
            let Some(vol) = state.csi_volume(namespace, &snap.source_volume_id) else {
                errors.push(format!("no such volume {:?}", snap.source_volume_id));
                continue;
            };
            let plugin_id = if snap.plugin_id.is_empty() {
                vol.plugin_id.clone()
            } else {
                snap.plugin_id.clone()
            };
            let Some(plugin) = state.csi_plugin(&plugin_id) else {
                errors.push(format!("no such plugin {plugin_id:?}"));
                continue;
            };
            if !supports_snapshots(&plugin) {
                errors.push(format!("plugin {plugin_id:?} does not support snapshot"));
                continue;
            }
            let mut secrets = vol.secrets.clone().unwrap_or_default();
            secrets.extend(snap.secrets.clone().unwrap_or_default());
            let req = ControllerCreateSnapshotRequest {
                plugin_id: plugin_id.clone(),
                controller_node_id: String::new(),
                external_source_volume_id: vol.remote_id().to_string(),
                name: snap.name.clone(),
                secrets,
                parameters: snap.parameters.clone().unwrap_or_default(),
            };
            let answer = self
                .on_a_controller(&plugin, "create the snapshot", |rpc, node| {
                    let mut req = req.clone();
                    req.controller_node_id = node;
                    async move { rpc.controller_create_snapshot(req).await }
                })
                .await;
            match answer {
                Ok(made) => created.push(CsiSnapshot {
                    source_volume_id: vol.id.clone(),
                    plugin_id,
                    ..made.sanitized()
                }),
                Err(e) => {
                    plugin_failed |= matches!(e, ServerError::Internal(_));
                    errors.push(format!("could not create snapshot: {e}"));
                }
            }
        }
        match errors.into_result() {
            Ok(()) => Ok(created),
            Err(errors) => Err(multi_error(errors, plugin_failed)),
        }
    }

    async fn delete_snapshots_here(&self, snapshots: Vec<CsiSnapshot>) -> Result<(), ServerError> {
        if snapshots.is_empty() {
            return Err(ServerError::BadRequest(
                "missing snapshot definition".into(),
            ));
        }
        let state = self.snapshot();
        let mut errors = MultiError::new();
        let mut plugin_failed = false;
        for snap in snapshots {
            if snap.id.is_empty() {
                errors.push("missing snapshot ID");
                continue;
            }
            let Some(plugin) = state.csi_plugin(&snap.plugin_id) else {
                errors.push("no such plugin");
                continue;
            };
            if !supports_snapshots(&plugin) {
                errors.push("plugin does not support snapshot");
                continue;
            }
            let req = ControllerDeleteSnapshotRequest {
                plugin_id: plugin.id.clone(),
                controller_node_id: String::new(),
                snapshot_id: snap.id.clone(),
                secrets: snap.secrets.clone().unwrap_or_default(),
            };
            let answer = self
                .on_a_controller(&plugin, "delete the snapshot", |rpc, node| {
                    let mut req = req.clone();
                    req.controller_node_id = node;
                    async move { rpc.controller_delete_snapshot(req).await }
                })
                .await;
            if let Err(e) = answer {
                plugin_failed |= matches!(e, ServerError::Internal(_));
                errors.push(format!("could not delete {:?}: {e}", snap.id));
            }
        }
        errors
            .into_result()
            .map_err(|errors| multi_error(errors, plugin_failed))
    }

    async fn list_snapshots_here(
        &self,
        plugin_id: &str,
        per_page: i32,
        next_token: String,
        secrets: BTreeMap<String, String>,
    ) -> Result<CsiSnapshotList, ServerError> {
        if per_page < 0 {
            return Err(ServerError::BadRequest(
                "per_page must not be negative".into(),
            ));
        }
        let Some(plugin) = self.snapshot().csi_plugin(plugin_id) else {
            return Err(ServerError::BadRequest("no such plugin".into()));
        };
        if !supports_listing(&plugin) {
            return Err(ServerError::BadRequest(
                "plugin does not support listing snapshots".into(),
            ));
        }
        let req = ControllerListSnapshotsRequest {
            plugin_id: plugin.id.clone(),
            controller_node_id: String::new(),
            max_entries: per_page,
            starting_token: next_token,
            secrets,
        };
        let mut list = self
            .on_a_controller(&plugin, "list snapshots", |rpc, node| {
                let mut req = req.clone();
                req.controller_node_id = node;
                async move { rpc.controller_list_snapshots(req).await }
            })
            .await?;
        // The plugin should have kept to the page size; make sure (as Nomad does).
        if let Ok(limit) = usize::try_from(per_page)
            && limit > 0
        {
            list.snapshots.truncate(limit);
        }
        for snap in &mut list.snapshots {
            snap.plugin_id.clone_from(&plugin.id);
            snap.secrets = None;
        }
        Ok(list)
    }
}

/// The default of the snapshot calls of a [`CsiClientRpc`](super::CsiClientRpc) that cannot make them.
pub(crate) fn unsupported<T>(what: &str, plugin_id: &str) -> super::CsiRpcFuture<'static, T> {
    let message =
        format!("not supported: this agent cannot ask CSI plugin {plugin_id:?} to {what}");
    Box::pin(async move { Err(message) })
}

#[cfg(test)]
mod tests;
