//! CSI on the servers: the log entries that change volumes and plugins, the endpoints
//! (register, create, deregister, delete, claim, unpublish/detach, plugin GC) and the calls the
//! servers make to the client agents that run CSI plugins.
//!
//! Controller work (validating, creating, deleting, attaching and detaching volumes) and a
//! node's unmount run in plugin tasks on client agents. The server reaches them through
//! [`CsiClientRpc`], which the agent implements (as Nomad's servers call `ClientCSI.*` on the
//! client running a healthy controller). Until one is set, those paths fail with a clear
//! "not supported" error; everything that needs no plugin call (registering a volume whose
//! plugin needs no controller, claims, deregistration) works without it.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use drover_state::{CsiStateError, StateStore};
use drover_structs::*;
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::fsm::{FsmError, LogEntry};
use crate::rpc::{Reply, Request};
use crate::server::{Inner, Server};

mod external;
mod snapshot;

pub use external::{ControllerListVolumesRequest, ExternalVolumesRequest};
pub use snapshot::{
    ControllerCreateSnapshotRequest, ControllerDeleteSnapshotRequest,
    ControllerListSnapshotsRequest, CsiSnapshotReply, CsiSnapshotRequest,
};

/// How often the leader deletes plugins that have nothing left (Nomad's
/// `csi_plugin_gc_interval` default).
pub const CSI_PLUGIN_GC_INTERVAL: Duration = Duration::from_secs(5 * 60);

// ---------------------------------------------------------------------------------------------
// Log entries

/// The CSI log entries (carried in `LogEntry::Csi`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CsiEntry {
    /// Nomad's `CSIVolumeRegisterRequest`: all or none.
    VolumeRegister { volumes: Vec<CsiVolume> },
    /// Nomad's `CSIVolumeDeregisterRequest`: all or none; in-use volumes only with `force`
    /// and only once every holder ended.
    VolumeDeregister {
        namespace: String,
        ids: Vec<String>,
        force: bool,
    },
    /// A claim, or a step of a claim's release.
    VolumeClaim {
        namespace: String,
        volume_id: String,
        claim: CsiVolumeClaim,
    },
    /// The plugin GC: deletes the plugin if it still has nothing left.
    PluginDelete { id: String },
}

/// Applies a CSI entry. A refused one changes nothing and answers why.
pub fn apply_entry(state: &StateStore, index: u64, entry: CsiEntry) -> Result<(), FsmError> {
    let refused = |e: CsiStateError| FsmError::Rejected(e.to_string());
    match entry {
        CsiEntry::VolumeRegister { volumes } => state.upsert_csi_volumes(index, volumes),
        CsiEntry::VolumeDeregister {
            namespace,
            ids,
            force,
        } => state.delete_csi_volumes(index, &namespace, &ids, force),
        CsiEntry::VolumeClaim {
            namespace,
            volume_id,
            claim,
        } => state.csi_volume_claim(index, &namespace, &volume_id, claim),
        CsiEntry::PluginDelete { id } => state.delete_csi_plugin(index, &id),
    }
    .map_err(refused)
}

// ---------------------------------------------------------------------------------------------
// Calls to the client agents running plugins

/// What a [`CsiClientRpc`] call returns.
pub type CsiRpcFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// Asks a controller to check that a volume exists and supports the capabilities.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerValidateVolumeRequest {
    pub plugin_id: String,
    /// The client node running the controller to ask.
    pub controller_node_id: String,
    /// The storage provider's volume id.
    pub external_id: String,
    pub capabilities: Vec<CsiVolumeCapability>,
    pub secrets: BTreeMap<String, String>,
    pub parameters: BTreeMap<String, String>,
    pub context: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerCreateVolumeRequest {
    pub plugin_id: String,
    pub controller_node_id: String,
    pub name: String,
    pub capabilities: Vec<CsiVolumeCapability>,
    pub mount_options: Option<CsiMountOptions>,
    pub parameters: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
    pub capacity_min: i64,
    pub capacity_max: i64,
    pub snapshot_id: String,
    pub clone_id: String,
    pub requested_topologies: Option<CsiTopologyRequest>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerCreateVolumeResponse {
    pub external_volume_id: String,
    pub capacity_bytes: i64,
    pub volume_context: BTreeMap<String, String>,
    pub topologies: Vec<CsiTopology>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerDeleteVolumeRequest {
    pub plugin_id: String,
    pub controller_node_id: String,
    pub external_id: String,
    pub secrets: BTreeMap<String, String>,
}

/// Asks a controller to attach a volume to a node (CSI `ControllerPublishVolume`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerPublishVolumeRequest {
    pub plugin_id: String,
    pub controller_node_id: String,
    pub external_id: String,
    /// The storage provider's id of the node to attach to.
    pub client_csi_node_id: String,
    pub attachment_mode: CsiAttachmentMode,
    pub access_mode: CsiAccessMode,
    pub mount_options: Option<CsiMountOptions>,
    pub read_only: bool,
    pub secrets: BTreeMap<String, String>,
    pub volume_context: BTreeMap<String, String>,
}

/// Asks a controller to detach a volume from a node (CSI `ControllerUnpublishVolume`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerUnpublishVolumeRequest {
    pub plugin_id: String,
    pub controller_node_id: String,
    pub external_id: String,
    pub client_csi_node_id: String,
    pub secrets: BTreeMap<String, String>,
}

/// Asks the client agent of `node_id` to unmount (unpublish, unstage) a volume an allocation
/// used there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeDetachVolumeRequest {
    pub plugin_id: String,
    pub node_id: String,
    pub alloc_id: String,
    pub volume_id: String,
    pub external_id: String,
    pub attachment_mode: CsiAttachmentMode,
    pub access_mode: CsiAccessMode,
    pub read_only: bool,
}

/// The calls servers make to the client agents running CSI plugins (Nomad's `ClientCSI`
/// RPCs). The agent implements it; errors are the plugin's or the transport's text.
pub trait CsiClientRpc: Send + Sync + 'static {
    fn controller_validate_volume(
        &self,
        req: ControllerValidateVolumeRequest,
    ) -> CsiRpcFuture<'_, ()>;
    fn controller_create_volume(
        &self,
        req: ControllerCreateVolumeRequest,
    ) -> CsiRpcFuture<'_, ControllerCreateVolumeResponse>;
    fn controller_delete_volume(&self, req: ControllerDeleteVolumeRequest) -> CsiRpcFuture<'_, ()>;
    /// Answers the publish context the node plugin needs to mount the volume.
    fn controller_publish_volume(
        &self,
        req: ControllerPublishVolumeRequest,
    ) -> CsiRpcFuture<'_, BTreeMap<String, String>>;
    fn controller_unpublish_volume(
        &self,
        req: ControllerUnpublishVolumeRequest,
    ) -> CsiRpcFuture<'_, ()>;
    fn node_detach_volume(&self, req: NodeDetachVolumeRequest) -> CsiRpcFuture<'_, ()>;
    /// Answers the snapshot as the plugin describes it. By default: not supported.
    fn controller_create_snapshot(
        &self,
        req: ControllerCreateSnapshotRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshot> {
        snapshot::unsupported("create a snapshot", &req.plugin_id)
    }
    fn controller_delete_snapshot(
        &self,
        req: ControllerDeleteSnapshotRequest,
    ) -> CsiRpcFuture<'_, ()> {
        snapshot::unsupported("delete a snapshot", &req.plugin_id)
    }
    fn controller_list_snapshots(
        &self,
        req: ControllerListSnapshotsRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshotList> {
        snapshot::unsupported("list snapshots", &req.plugin_id)
    }
    /// One page of the storage provider's volumes. By default: not supported.
    fn controller_list_volumes(
        &self,
        req: ControllerListVolumesRequest,
    ) -> CsiRpcFuture<'_, CsiVolumeExternalList> {
        snapshot::unsupported("list volumes", &req.plugin_id)
    }
}

/// The server's CSI parts that are not in the state: the client RPC once the agent sets one.
#[derive(Default)]
pub(crate) struct CsiServerState {
    rpc: RwLock<Option<Arc<dyn CsiClientRpc>>>,
    /// One release at a time per volume (the client's unpublish and the volume watcher may
    /// both release the same claim), by (namespace, volume id).
    releasing: Mutex<HashMap<(String, String), ReleaseLock>>,
}

/// Held while one claim release of a volume runs.
type ReleaseLock = Arc<tokio::sync::Mutex<()>>;

impl CsiServerState {
    fn release_lock(&self, namespace: &str, id: &str) -> ReleaseLock {
        let mut locks = self.releasing.lock().unwrap_or_else(|e| e.into_inner());
        // Forget the locks nobody holds, so the map stays as small as the releases running.
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks
            .entry((namespace.to_string(), id.to_string()))
            .or_default()
            .clone()
    }

    fn rpc(&self) -> Option<Arc<dyn CsiClientRpc>> {
        self.rpc.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn no_controller_rpc(plugin_id: &str, what: &str) -> ServerError {
    ServerError::BadRequest(format!(
        "not supported: no controller RPC: CSI plugin {plugin_id:?} needs its controller to {what}, \
         and this server has no way to call client agents' CSI plugins yet"
    ))
}

// ---------------------------------------------------------------------------------------------
// The endpoint protocol

/// CSI endpoint calls (carried in `Request::Csi`); all run on the leader.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CsiRequest {
    Register {
        namespace: String,
        volumes: Vec<CsiVolume>,
    },
    Create {
        namespace: String,
        volumes: Vec<CsiVolume>,
    },
    Deregister {
        namespace: String,
        volume_id: String,
        force: bool,
    },
    Delete {
        namespace: String,
        volume_id: String,
        secrets: BTreeMap<String, String>,
    },
    Claim {
        request: CsiVolumeClaimRequest,
    },
    Unpublish {
        namespace: String,
        volume_id: String,
        claim: CsiVolumeClaim,
    },
    PluginGc,
}

/// What CSI endpoints answer (carried in `Reply::Csi`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CsiReply {
    Index(u64),
    /// Created volumes (secrets removed) and the write's index.
    Volumes {
        volumes: Vec<CsiVolume>,
        index: u64,
    },
    Claim(Box<CsiVolumeClaimResponse>),
    /// Ids of the plugins the GC deleted.
    Deleted(Vec<String>),
}

fn unexpected(reply: Reply) -> ServerError {
    ServerError::Internal(format!("unexpected CSI endpoint reply: {reply:?}"))
}

impl Server {
    /// Lets the server call the client agents that run CSI plugins (set by the agent).
    pub fn set_csi_client_rpc(&self, rpc: Arc<dyn CsiClientRpc>) {
        *self
            .inner
            .csi
            .rpc
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(rpc);
    }

    async fn route_csi(&self, request: CsiRequest) -> Result<CsiReply, ServerError> {
        match self.route(Request::Csi(request)).await? {
            Reply::Csi(reply) => Ok(reply),
            other => Err(unexpected(other)),
        }
    }

    /// Registers (or re-registers) volumes in `namespace` (the volumes' own namespace when
    /// they name one). A volume whose plugin needs a controller is validated by it first.
    pub async fn register_csi_volumes(
        &self,
        namespace: &str,
        volumes: Vec<CsiVolume>,
    ) -> Result<u64, ServerError> {
        match self
            .route_csi(CsiRequest::Register {
                namespace: namespace.into(),
                volumes,
            })
            .await?
        {
            CsiReply::Index(i) => Ok(i),
            other => Err(unexpected(Reply::Csi(other))),
        }
    }

    /// Creates volumes through their plugin's controller, then registers them. Answers the
    /// volumes as registered (without secrets).
    pub async fn create_csi_volumes(
        &self,
        namespace: &str,
        volumes: Vec<CsiVolume>,
    ) -> Result<(Vec<CsiVolume>, u64), ServerError> {
        match self
            .route_csi(CsiRequest::Create {
                namespace: namespace.into(),
                volumes,
            })
            .await?
        {
            CsiReply::Volumes { volumes, index } => Ok((volumes, index)),
            other => Err(unexpected(Reply::Csi(other))),
        }
    }

    /// Deregisters a volume; one in use only with `force` and once its holders ended.
    pub async fn deregister_csi_volume(
        &self,
        namespace: &str,
        volume_id: &str,
        force: bool,
    ) -> Result<u64, ServerError> {
        match self
            .route_csi(CsiRequest::Deregister {
                namespace: namespace.into(),
                volume_id: volume_id.into(),
                force,
            })
            .await?
        {
            CsiReply::Index(i) => Ok(i),
            other => Err(unexpected(Reply::Csi(other))),
        }
    }

    /// Deletes a volume through its plugin's controller, then deregisters it. `secrets` add to
    /// (and override) the volume's own.
    pub async fn delete_csi_volume(
        &self,
        namespace: &str,
        volume_id: &str,
        secrets: BTreeMap<String, String>,
    ) -> Result<u64, ServerError> {
        match self
            .route_csi(CsiRequest::Delete {
                namespace: namespace.into(),
                volume_id: volume_id.into(),
                secrets,
            })
            .await?
        {
            CsiReply::Index(i) => Ok(i),
            other => Err(unexpected(Reply::Csi(other))),
        }
    }

    /// Claims a volume for an allocation (or records a release step), attaching it through
    /// the controller when the plugin needs that.
    pub async fn claim_csi_volume(
        &self,
        request: CsiVolumeClaimRequest,
    ) -> Result<CsiVolumeClaimResponse, ServerError> {
        match self.route_csi(CsiRequest::Claim { request }).await? {
            CsiReply::Claim(r) => Ok(*r),
            other => Err(unexpected(Reply::Csi(other))),
        }
    }

    /// Releases a claim (Nomad's `CSIVolume.Unpublish`): the node unmounts, the controller
    /// detaches, the claim is freed, each step recorded. A claim without an allocation
    /// releases every ended allocation's claim on the claim's node.
    pub async fn unpublish_csi_volume(
        &self,
        namespace: &str,
        volume_id: &str,
        claim: CsiVolumeClaim,
    ) -> Result<u64, ServerError> {
        match self
            .route_csi(CsiRequest::Unpublish {
                namespace: namespace.into(),
                volume_id: volume_id.into(),
                claim,
            })
            .await?
        {
            CsiReply::Index(i) => Ok(i),
            other => Err(unexpected(Reply::Csi(other))),
        }
    }

    /// `volume detach VOL NODE`: releases the claims of ended allocations on that node.
    pub async fn detach_csi_volume(
        &self,
        namespace: &str,
        volume_id: &str,
        node_id: &str,
    ) -> Result<u64, ServerError> {
        let claim = CsiVolumeClaim {
            node_id: node_id.to_string(),
            mode: CsiClaimMode::Release,
            ..Default::default()
        };
        self.unpublish_csi_volume(namespace, volume_id, claim).await
    }

    /// Deletes every plugin with nothing left; answers their ids. The leader runs this every
    /// [`CSI_PLUGIN_GC_INTERVAL`].
    pub async fn gc_csi_plugins(&self) -> Result<Vec<String>, ServerError> {
        match self.route_csi(CsiRequest::PluginGc).await? {
            CsiReply::Deleted(ids) => Ok(ids),
            other => Err(unexpected(Reply::Csi(other))),
        }
    }

    /// Runs a CSI request here, on the leader.
    pub(crate) async fn execute_csi(&self, request: CsiRequest) -> Result<Reply, ServerError> {
        let reply = match request {
            CsiRequest::Register { namespace, volumes } => {
                crate::namespaces::check_volumes(&self.snapshot(), &namespace, &volumes)?;
                CsiReply::Index(self.register_csi_volumes_here(&namespace, volumes).await?)
            }
            CsiRequest::Create { namespace, volumes } => {
                crate::namespaces::check_volumes(&self.snapshot(), &namespace, &volumes)?;
                let (volumes, index) = self.create_csi_volumes_here(&namespace, volumes).await?;
                CsiReply::Volumes { volumes, index }
            }
            CsiRequest::Deregister {
                namespace,
                volume_id,
                force,
            } => CsiReply::Index(
                self.deregister_csi_volume_here(&namespace, &volume_id, force)
                    .await?,
            ),
            CsiRequest::Delete {
                namespace,
                volume_id,
                secrets,
            } => CsiReply::Index(
                self.delete_csi_volume_here(&namespace, &volume_id, secrets)
                    .await?,
            ),
            CsiRequest::Claim { request } => {
                CsiReply::Claim(Box::new(self.claim_csi_volume_here(request).await?))
            }
            CsiRequest::Unpublish {
                namespace,
                volume_id,
                claim,
            } => CsiReply::Index(
                self.unpublish_csi_volume_here(&namespace, &volume_id, claim)
                    .await?,
            ),
            CsiRequest::PluginGc => CsiReply::Deleted(gc_plugins(&self.inner).await?),
        };
        Ok(Reply::Csi(reply))
    }

    async fn apply_csi(&self, entry: CsiEntry) -> Result<u64, ServerError> {
        // Volumes that appear or get a claim freed may let blocked placements through.
        let freed: Vec<(String, String)> = match &entry {
            CsiEntry::VolumeRegister { volumes } => volumes
                .iter()
                .map(|v| (v.namespace.clone(), v.id.clone()))
                .collect(),
            CsiEntry::VolumeClaim {
                namespace,
                volume_id,
                claim,
            } if claim.state == CsiClaimState::ReadyToFree => {
                vec![(namespace.clone(), volume_id.clone())]
            }
            _ => Vec::new(),
        };
        let index = self.inner.apply_checked(LogEntry::Csi(entry)).await?;
        for (namespace, id) in freed {
            self.inner.unblock_evals_for_csi_volume(&namespace, &id);
        }
        Ok(index)
    }

    /// The plugin a volume names, which must exist; one needing a controller must have a
    /// healthy one (Nomad's `pluginValidateVolume`).
    fn plugin_for(&self, vol: &CsiVolume) -> Result<Arc<CsiPlugin>, ServerError> {
        let plugin = self.snapshot().csi_plugin(&vol.plugin_id).ok_or_else(|| {
            ServerError::BadRequest(format!(
                "no CSI plugin named: {} could be found",
                vol.plugin_id
            ))
        })?;
        if plugin.controller_required && plugin.controllers_healthy < 1 {
            return Err(ServerError::BadRequest(format!(
                "no healthy controllers for CSI plugin: {}",
                vol.plugin_id
            )));
        }
        Ok(plugin)
    }

    /// The volume as a request brings it: namespace filled, server fields cleared, valid.
    fn prepare_volume(namespace: &str, vol: &mut CsiVolume) -> Result<(), ServerError> {
        if vol.namespace.is_empty() {
            vol.namespace = if namespace.is_empty() {
                DEFAULT_NAMESPACE.to_string()
            } else {
                namespace.to_string()
            };
        }
        vol.reset_server_fields();
        vol.validate().map_err(ServerError::BadRequest)
    }

    /// Refuses what the state would refuse, before any plugin is asked.
    fn check_registrable(&self, vol: &CsiVolume) -> Result<(), ServerError> {
        if let Some(old) = self.snapshot().csi_volume(&vol.namespace, &vol.id)
            && (old.in_use()
                || old.external_id != vol.external_id
                || old.plugin_id != vol.plugin_id)
        {
            return Err(ServerError::Conflict(
                CsiStateError::VolumeExists(vol.id.clone()).to_string(),
            ));
        }
        Ok(())
    }

    /// Calls `call` on each healthy controller of the plugin until one answers (Nomad picks a
    /// controller at random and retries others).
    async fn on_a_controller<T, F, Fut>(
        &self,
        plugin: &CsiPlugin,
        what: &str,
        call: F,
    ) -> Result<T, ServerError>
    where
        F: Fn(Arc<dyn CsiClientRpc>, String) -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let Some(rpc) = self.inner.csi.rpc() else {
            return Err(no_controller_rpc(&plugin.id, what));
        };
        let nodes = plugin.healthy_controller_nodes();
        if nodes.is_empty() {
            return Err(ServerError::BadRequest(format!(
                "no healthy controllers for CSI plugin: {}",
                plugin.id
            )));
        }
        let mut last = String::new();
        for node in nodes {
            match call(rpc.clone(), node.clone()).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    tracing::warn!(plugin = %plugin.id, node = %node, error = %e, "CSI controller call failed");
                    last = e;
                }
            }
        }
        Err(ServerError::Internal(format!(
            "CSI controller of plugin {:?} failed to {what}: {last}",
            plugin.id
        )))
    }

    pub(crate) async fn register_csi_volumes_here(
        &self,
        namespace: &str,
        mut volumes: Vec<CsiVolume>,
    ) -> Result<u64, ServerError> {
        if volumes.is_empty() {
            return Err(ServerError::BadRequest("missing volume definition".into()));
        }
        for vol in &mut volumes {
            Self::prepare_volume(namespace, vol)?;
            let plugin = self.plugin_for(vol)?;
            self.check_registrable(vol)?;
            vol.provider.clone_from(&plugin.provider);
            vol.provider_version.clone_from(&plugin.version);
            if vol.topologies.is_empty()
                && self
                    .snapshot()
                    .csi_volume(&vol.namespace, &vol.id)
                    .is_none()
                && let Some(req) = &vol.requested_topologies
            {
                // A registered volume exists already: its topology is what the operator says.
                vol.topologies.clone_from(&req.required);
            }
            if plugin.controller_required {
                let req = ControllerValidateVolumeRequest {
                    plugin_id: plugin.id.clone(),
                    controller_node_id: String::new(),
                    external_id: vol.remote_id().to_string(),
                    capabilities: vol.requested_capabilities.clone(),
                    secrets: vol.secrets.clone().unwrap_or_default(),
                    parameters: vol.parameters.clone(),
                    context: vol.context.clone(),
                };
                self.on_a_controller(&plugin, "validate the volume", |rpc, node| {
                    let mut req = req.clone();
                    req.controller_node_id = node;
                    async move { rpc.controller_validate_volume(req).await }
                })
                .await?;
            }
        }
        self.apply_csi(CsiEntry::VolumeRegister { volumes }).await
    }

    pub(crate) async fn create_csi_volumes_here(
        &self,
        namespace: &str,
        mut volumes: Vec<CsiVolume>,
    ) -> Result<(Vec<CsiVolume>, u64), ServerError> {
        if volumes.is_empty() {
            return Err(ServerError::BadRequest("missing volume definition".into()));
        }
        let mut plugins = Vec::new();
        for vol in &mut volumes {
            Self::prepare_volume(namespace, vol)?;
            let plugin = self.plugin_for(vol)?;
            if !plugin.controller_required {
                return Err(ServerError::BadRequest("plugin has no controller".into()));
            }
            if !plugin.supports_create_delete() {
                return Err(ServerError::BadRequest(
                    "plugin does not support creating volumes".into(),
                ));
            }
            snapshot::check_content_source(&plugin, vol)?;
            if self
                .snapshot()
                .csi_volume(&vol.namespace, &vol.id)
                .is_some()
            {
                return Err(ServerError::Conflict(
                    CsiStateError::VolumeExists(vol.id.clone()).to_string(),
                ));
            }
            plugins.push(plugin);
        }
        for (vol, plugin) in volumes.iter_mut().zip(&plugins) {
            let req = ControllerCreateVolumeRequest {
                plugin_id: plugin.id.clone(),
                controller_node_id: String::new(),
                name: vol.name.clone(),
                capabilities: vol.requested_capabilities.clone(),
                mount_options: vol.mount_options.clone(),
                parameters: vol.parameters.clone(),
                secrets: vol.secrets.clone().unwrap_or_default(),
                capacity_min: vol.requested_capacity_min,
                capacity_max: vol.requested_capacity_max,
                snapshot_id: vol.snapshot_id.clone(),
                clone_id: vol.clone_id.clone(),
                requested_topologies: vol.requested_topologies.clone(),
            };
            let created = self
                .on_a_controller(plugin, "create the volume", |rpc, node| {
                    let mut req = req.clone();
                    req.controller_node_id = node;
                    async move { rpc.controller_create_volume(req).await }
                })
                .await?;
            vol.external_id = created.external_volume_id;
            vol.capacity = created.capacity_bytes;
            vol.context = created.volume_context;
            vol.topologies = created.topologies;
            vol.provider.clone_from(&plugin.provider);
            vol.provider_version.clone_from(&plugin.version);
        }
        let index = self
            .apply_csi(CsiEntry::VolumeRegister {
                volumes: volumes.clone(),
            })
            .await?;
        let snap = self.snapshot();
        let stored = volumes
            .iter()
            .filter_map(|v| snap.csi_volume_with_health(&v.namespace, &v.id))
            .map(|v| v.sanitized())
            .collect();
        Ok((stored, index))
    }

    pub(crate) async fn deregister_csi_volume_here(
        &self,
        namespace: &str,
        volume_id: &str,
        force: bool,
    ) -> Result<u64, ServerError> {
        if volume_id.is_empty() {
            return Err(ServerError::BadRequest("missing volume IDs".into()));
        }
        let Some(vol) = self.snapshot().csi_volume(namespace, volume_id) else {
            return Err(ServerError::NotFound(format!(
                "volume not found: {volume_id}"
            )));
        };
        if vol.in_use() && !force {
            return Err(ServerError::Conflict(format!("volume in use: {volume_id}")));
        }
        self.apply_csi(CsiEntry::VolumeDeregister {
            namespace: namespace.into(),
            ids: vec![volume_id.into()],
            force,
        })
        .await
    }

    pub(crate) async fn delete_csi_volume_here(
        &self,
        namespace: &str,
        volume_id: &str,
        secrets: BTreeMap<String, String>,
    ) -> Result<u64, ServerError> {
        let snap = self.snapshot();
        let Some(vol) = snap.csi_volume_with_health(namespace, volume_id) else {
            return Err(ServerError::NotFound(format!(
                "volume not found: {volume_id}"
            )));
        };
        let plugin = snap
            .csi_plugin(&vol.plugin_id)
            .filter(|p| p.controller_required)
            .ok_or_else(|| {
                ServerError::BadRequest(format!(
                    "plugin {:?} for volume {volume_id:?} not found",
                    vol.plugin_id
                ))
            })?;
        if vol.in_use() {
            return Err(ServerError::Conflict(format!("volume in use: {volume_id}")));
        }
        let mut all_secrets = vol.secrets.clone().unwrap_or_default();
        all_secrets.extend(secrets);
        let req = ControllerDeleteVolumeRequest {
            plugin_id: plugin.id.clone(),
            controller_node_id: String::new(),
            external_id: vol.remote_id().to_string(),
            secrets: all_secrets,
        };
        self.on_a_controller(&plugin, "delete the volume", |rpc, node| {
            let mut req = req.clone();
            req.controller_node_id = node;
            async move { rpc.controller_delete_volume(req).await }
        })
        .await?;
        self.apply_csi(CsiEntry::VolumeDeregister {
            namespace: namespace.into(),
            ids: vec![volume_id.into()],
            force: false,
        })
        .await
    }

    pub(crate) async fn claim_csi_volume_here(
        &self,
        mut request: CsiVolumeClaimRequest,
    ) -> Result<CsiVolumeClaimResponse, ServerError> {
        if request.volume_id.is_empty() {
            return Err(ServerError::BadRequest("missing volume ID".into()));
        }
        if request.namespace.is_empty() {
            request.namespace = DEFAULT_NAMESPACE.into();
        }
        let new_claim =
            request.claim != CsiClaimMode::Release && request.state == CsiClaimState::Taken;
        if new_claim && request.node_id.is_empty() {
            let alloc = self
                .snapshot()
                .alloc(&request.allocation_id)
                .ok_or_else(|| {
                    ServerError::NotFound(format!("Unknown allocation: {}", request.allocation_id))
                })?;
            request.node_id = alloc.node_id.clone();
        }
        let index = self
            .apply_csi(CsiEntry::VolumeClaim {
                namespace: request.namespace.clone(),
                volume_id: request.volume_id.clone(),
                claim: request.to_claim(),
            })
            .await?;
        let publish_context = if new_claim {
            self.controller_publish(&request)
                .await
                .map_err(|e| prefix_error("controller publish: ", e))?
        } else {
            BTreeMap::new()
        };
        Ok(CsiVolumeClaimResponse {
            publish_context,
            volume: self
                .snapshot()
                .csi_volume_with_health(&request.namespace, &request.volume_id),
            index,
        })
    }

    /// Attaches a claimed volume to the allocation's node through the controller, when the
    /// plugin attaches volumes (Nomad's `controllerPublishVolume`).
    async fn controller_publish(
        &self,
        request: &CsiVolumeClaimRequest,
    ) -> Result<BTreeMap<String, String>, ServerError> {
        let snap = self.snapshot();
        let vol = snap
            .csi_volume_with_health(&request.namespace, &request.volume_id)
            .ok_or_else(|| {
                ServerError::NotFound(format!("volume not found: {}", request.volume_id))
            })?;
        let plugin = match snap.csi_plugin(&vol.plugin_id) {
            Some(p) if p.controller_required && p.supports_attach_detach() => p,
            _ => return Ok(BTreeMap::new()),
        };
        let external_node_id = if request.external_node_id.is_empty() {
            external_node_id(&snap, &vol, &request.node_id)?
        } else {
            request.external_node_id.clone()
        };
        let req = ControllerPublishVolumeRequest {
            plugin_id: plugin.id.clone(),
            controller_node_id: String::new(),
            external_id: vol.remote_id().to_string(),
            client_csi_node_id: external_node_id,
            attachment_mode: request.attachment_mode,
            access_mode: request.access_mode,
            mount_options: vol.mount_options.clone(),
            read_only: request.claim == CsiClaimMode::Read,
            secrets: vol.secrets.clone().unwrap_or_default(),
            volume_context: vol.context.clone(),
        };
        self.on_a_controller(&plugin, "attach the volume", |rpc, node| {
            let mut req = req.clone();
            req.controller_node_id = node;
            async move { rpc.controller_publish_volume(req).await }
        })
        .await
    }

    pub(crate) async fn unpublish_csi_volume_here(
        &self,
        namespace: &str,
        volume_id: &str,
        claim: CsiVolumeClaim,
    ) -> Result<u64, ServerError> {
        if volume_id.is_empty() {
            return Err(ServerError::BadRequest("missing volume ID".into()));
        }
        let snap = self.snapshot();
        let Some(vol) = snap.csi_volume_full(namespace, volume_id) else {
            return Err(ServerError::NotFound(format!(
                "volume not found: {volume_id}"
            )));
        };
        if !claim.allocation_id.is_empty() {
            return self.release_claim(&vol, claim).await;
        }
        if claim.node_id.is_empty() {
            return Err(ServerError::BadRequest("detach requires node ID".into()));
        }
        // A release of what a node holds: every ended allocation's claim there.
        let mut index = snap.latest_index();
        let claims: Vec<CsiVolumeClaim> = vol
            .past_claims
            .values()
            .filter(|c| c.node_id == claim.node_id)
            .cloned()
            .collect();
        for c in claims {
            index = self.release_claim(&vol, c).await?;
        }
        Ok(index)
    }

    /// Walks one claim through its release, recording each step: unpublishing, node detached
    /// (the node unmounted, or is down or gone), controller detached (when the plugin attaches
    /// volumes), ready to free (the allocation lets go).
    ///
    /// Releases of one volume run one at a time; a claim already freed is left alone, and one
    /// whose release went further than the caller knows resumes from where it stands.
    pub(crate) async fn release_claim(
        &self,
        vol: &CsiVolume,
        mut claim: CsiVolumeClaim,
    ) -> Result<u64, ServerError> {
        let (ns, id) = (vol.namespace.clone(), vol.id.clone());
        let lock = self.inner.csi.release_lock(&ns, &id);
        let _releasing = lock.lock().await;
        let snap = self.snapshot();
        let Some(current) = snap.csi_volume_full(&ns, &id) else {
            return Err(ServerError::NotFound(format!("volume not found: {id}")));
        };
        let alloc = claim.allocation_id.as_str();
        if !current.read_allocs.contains_key(alloc)
            && !current.write_allocs.contains_key(alloc)
            && !current.past_claims.contains_key(alloc)
        {
            return Ok(snap.latest_index());
        }
        if let Some(past) = current.past_claims.get(alloc)
            && release_rank(past.state) > release_rank(claim.state)
        {
            claim.state = past.state;
        }
        let vol = &current;
        let checkpoint = |claim: CsiVolumeClaim| {
            self.apply_csi(CsiEntry::VolumeClaim {
                namespace: ns.clone(),
                volume_id: id.clone(),
                claim,
            })
        };
        if claim.state == CsiClaimState::Taken {
            claim.state = CsiClaimState::Unpublishing;
        }
        checkpoint(claim.clone()).await?;
        if claim.state == CsiClaimState::Unpublishing {
            self.node_detach(vol, &claim).await?;
            claim.state = CsiClaimState::NodeDetached;
            checkpoint(claim.clone()).await?;
        }
        if claim.state == CsiClaimState::NodeDetached
            && self.controller_unpublish(vol, &claim).await?
        {
            claim.state = CsiClaimState::ControllerDetached;
            checkpoint(claim.clone()).await?;
        }
        claim.state = CsiClaimState::ReadyToFree;
        checkpoint(claim).await
    }

    /// Has the claim's node unmount the volume, unless the node is down or gone (then it is
    /// assumed done) or the claim was already released client-side.
    async fn node_detach(
        &self,
        vol: &CsiVolume,
        claim: &CsiVolumeClaim,
    ) -> Result<(), ServerError> {
        let node = self.snapshot().node(&claim.node_id);
        if node.is_none_or(|n| n.status == NODE_STATUS_DOWN)
            || claim.access_mode == CsiAccessMode::Unknown
        {
            return Ok(());
        }
        let Some(rpc) = self.inner.csi.rpc() else {
            return Err(ServerError::BadRequest(format!(
                "not supported: no client CSI RPC: volume {:?} must be detached from node {:?} \
                 by its client agent, and this server has no way to call it yet",
                vol.id, claim.node_id
            )));
        };
        rpc.node_detach_volume(NodeDetachVolumeRequest {
            plugin_id: vol.plugin_id.clone(),
            node_id: claim.node_id.clone(),
            alloc_id: claim.allocation_id.clone(),
            volume_id: vol.id.clone(),
            external_id: vol.remote_id().to_string(),
            attachment_mode: claim.attachment_mode,
            access_mode: claim.access_mode,
            read_only: claim.mode == CsiClaimMode::Read,
        })
        .await
        .map_err(|e| ServerError::Internal(format!("could not detach from node: {e}")))
    }

    /// Has the controller detach the volume from the claim's node when the plugin attaches
    /// volumes and no other live allocation on that node holds it. Answers whether it did.
    async fn controller_unpublish(
        &self,
        vol: &CsiVolume,
        claim: &CsiVolumeClaim,
    ) -> Result<bool, ServerError> {
        if !vol.controller_required {
            return Ok(false);
        }
        let snap = self.snapshot();
        let Some(plugin) = snap.csi_plugin(&vol.plugin_id) else {
            return Err(ServerError::BadRequest(format!(
                "no such plugin: {:?}",
                vol.plugin_id
            )));
        };
        if !plugin.supports_attach_detach() {
            return Ok(false);
        }
        let still_used_there = vol
            .read_allocs
            .keys()
            .chain(vol.write_allocs.keys())
            .filter(|id| **id != claim.allocation_id)
            .filter_map(|id| snap.alloc(id))
            .any(|a| a.node_id == claim.node_id && !a.terminal());
        if still_used_there {
            return Ok(false);
        }
        let external_node_id = if claim.external_node_id.is_empty() {
            external_node_id(&snap, vol, &claim.node_id)?
        } else {
            claim.external_node_id.clone()
        };
        let req = ControllerUnpublishVolumeRequest {
            plugin_id: plugin.id.clone(),
            controller_node_id: String::new(),
            external_id: vol.remote_id().to_string(),
            client_csi_node_id: external_node_id,
            secrets: vol.secrets.clone().unwrap_or_default(),
        };
        self.on_a_controller(&plugin, "detach the volume", |rpc, node| {
            let mut req = req.clone();
            req.controller_node_id = node;
            async move { rpc.controller_unpublish_volume(req).await }
        })
        .await
        .map_err(|e| prefix_error("could not detach from controller: ", e))?;
        Ok(true)
    }
}

/// How far a claim's release went: taken, unpublishing, node detached, controller detached,
/// ready to free.
fn release_rank(state: CsiClaimState) -> u8 {
    match state {
        CsiClaimState::Taken => 0,
        CsiClaimState::Unpublishing => 1,
        CsiClaimState::NodeDetached => 2,
        CsiClaimState::ControllerDetached => 3,
        CsiClaimState::ReadyToFree => 4,
    }
}

fn prefix_error(prefix: &str, e: ServerError) -> ServerError {
    match e {
        ServerError::BadRequest(m) => ServerError::BadRequest(format!("{prefix}{m}")),
        ServerError::NotFound(m) => ServerError::NotFound(format!("{prefix}{m}")),
        ServerError::Conflict(m) => ServerError::Conflict(format!("{prefix}{m}")),
        ServerError::Internal(m) => ServerError::Internal(format!("{prefix}{m}")),
        other => other,
    }
}

/// The storage provider's id of a Nomad node: from the volume's claims on it, else from the
/// node's node plugin (Nomad's `lookupExternalNodeID`).
fn external_node_id(
    snap: &drover_state::StateSnapshot,
    vol: &CsiVolume,
    node_id: &str,
) -> Result<String, ServerError> {
    if let Some(id) = vol
        .read_claims
        .values()
        .chain(vol.write_claims.values())
        .chain(vol.past_claims.values())
        .find(|c| c.node_id == node_id && !c.external_node_id.is_empty())
        .map(|c| c.external_node_id.clone())
    {
        return Ok(id);
    }
    let node = snap
        .node(node_id)
        .ok_or_else(|| ServerError::NotFound(format!("Unknown node: {node_id}")))?;
    node.csi_node_plugins
        .as_ref()
        .and_then(|m| m.get(&vol.plugin_id))
        .and_then(|i| i.node_info.as_ref())
        .map(|n| n.id.clone())
        .ok_or_else(|| {
            ServerError::BadRequest(format!(
                "missing external node ID: failed to find storage provider info for client {node_id:?}, \
                 node plugin {:?} is not running or has not fingerprinted on this client",
                vol.plugin_id
            ))
        })
}

/// Deletes every plugin that has nothing left, one entry each.
async fn gc_plugins(inner: &Arc<Inner>) -> Result<Vec<String>, ServerError> {
    let empty: Vec<String> = inner
        .state
        .snapshot()
        .csi_plugins()
        .iter()
        .filter(|p| p.is_empty())
        .map(|p| p.id.clone())
        .collect();
    let mut deleted = Vec::new();
    for id in empty {
        match inner
            .apply_checked(LogEntry::Csi(CsiEntry::PluginDelete { id: id.clone() }))
            .await
        {
            Ok(_) => deleted.push(id),
            // It gained an instance or a job in the meantime.
            Err(ServerError::Conflict(why)) => {
                tracing::debug!(plugin = %id, reason = %why, "CSI plugin kept")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// The leader's periodic plugin GC (Nomad's `CSIPluginGC` core job).
pub(crate) async fn run_plugin_gc(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown_rx.clone();
    let mut tick = tokio::time::interval(CSI_PLUGIN_GC_INTERVAL);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if !inner.is_leader() {
            continue;
        }
        match gc_plugins(&inner).await {
            Ok(ids) if !ids.is_empty() => tracing::info!(plugins = ?ids, "CSI plugin GC"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "CSI plugin GC"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    use crate::test_server::start_leading as start;

    /// Records every call; controllers answer as a hostpath-like plugin would.
    #[derive(Default)]
    struct FakeRpc {
        calls: Mutex<Vec<String>>,
    }

    impl FakeRpc {
        fn record(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
    }

    impl CsiClientRpc for FakeRpc {
        fn controller_validate_volume(
            &self,
            req: ControllerValidateVolumeRequest,
        ) -> CsiRpcFuture<'_, ()> {
            self.record(format!(
                "validate {} on {}",
                req.external_id, req.controller_node_id
            ));
            Box::pin(async { Ok(()) })
        }
        fn controller_create_volume(
            &self,
            req: ControllerCreateVolumeRequest,
        ) -> CsiRpcFuture<'_, ControllerCreateVolumeResponse> {
            self.record(format!("create {} min {}", req.name, req.capacity_min));
            Box::pin(async move {
                Ok(ControllerCreateVolumeResponse {
                    external_volume_id: format!("ext-{}", req.name),
                    capacity_bytes: req.capacity_min,
                    volume_context: BTreeMap::from([("k".to_string(), "v".to_string())]),
                    topologies: vec![],
                })
            })
        }
        fn controller_delete_volume(
            &self,
            req: ControllerDeleteVolumeRequest,
        ) -> CsiRpcFuture<'_, ()> {
            self.record(format!("delete {}", req.external_id));
            Box::pin(async { Ok(()) })
        }
        fn controller_publish_volume(
            &self,
            req: ControllerPublishVolumeRequest,
        ) -> CsiRpcFuture<'_, BTreeMap<String, String>> {
            self.record(format!(
                "publish {} to {} ro={}",
                req.external_id, req.client_csi_node_id, req.read_only
            ));
            Box::pin(async {
                Ok(BTreeMap::from([(
                    "device".to_string(),
                    "/dev/x".to_string(),
                )]))
            })
        }
        fn controller_unpublish_volume(
            &self,
            req: ControllerUnpublishVolumeRequest,
        ) -> CsiRpcFuture<'_, ()> {
            self.record(format!(
                "unpublish {} from {}",
                req.external_id, req.client_csi_node_id
            ));
            Box::pin(async { Ok(()) })
        }
        fn node_detach_volume(&self, req: NodeDetachVolumeRequest) -> CsiRpcFuture<'_, ()> {
            self.record(format!("node detach {} on {}", req.volume_id, req.node_id));
            Box::pin(async { Ok(()) })
        }
    }

    fn info(controller: bool) -> CsiInfo {
        CsiInfo {
            plugin_id: "hostpath".into(),
            alloc_id: "plugin-alloc".into(),
            healthy: true,
            provider: "hostpath.csi.k8s.io".into(),
            provider_version: "1.9".into(),
            requires_controller_plugin: controller,
            controller_info: controller.then(|| CsiControllerInfo {
                supports_create_delete: true,
                supports_attach_detach: true,
                ..Default::default()
            }),
            node_info: (!controller).then(|| CsiNodeInfo {
                id: "storage-node-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Registers node n1 running the plugin's node instance (and its controller if asked).
    async fn register_plugin_node(server: &Server, with_controller: bool) {
        let mut nodes = BTreeMap::new();
        nodes.insert("hostpath".to_string(), info(false));
        let mut controllers = BTreeMap::new();
        if with_controller {
            controllers.insert("hostpath".to_string(), info(true));
        }
        let node = Node {
            id: "n1".into(),
            datacenter: "dc1".into(),
            name: "n1".into(),
            csi_node_plugins: Some(nodes),
            csi_controller_plugins: Some(controllers),
            ..Default::default()
        };
        server.register_node(node).await.unwrap();
    }

    fn volume(id: &str) -> CsiVolume {
        CsiVolume {
            id: id.into(),
            name: id.into(),
            plugin_id: "hostpath".into(),
            requested_capabilities: vec![CsiVolumeCapability {
                access_mode: CsiAccessMode::SingleNodeWriter,
                attachment_mode: CsiAttachmentMode::FileSystem,
            }],
            requested_capacity_min: 1 << 20,
            secrets: Some(BTreeMap::from([(
                "token".to_string(),
                "s3cr3t".to_string(),
            )])),
            ..Default::default()
        }
    }

    /// A running allocation on n1, placed through the log like the plan applier would.
    async fn place_alloc(server: &Server, id: &str) {
        let job = drover_structs::decode::decode_api_job(serde_json::json!({
            "ID": "web", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}
            }]}]
        }))
        .unwrap();
        server
            .inner
            .apply(LogEntry::JobRegister {
                job: job.clone(),
                evals: vec![],
                enforce_index: None,
                submission: None,
            })
            .await
            .unwrap();
        let alloc = Allocation {
            id: id.into(),
            namespace: "default".into(),
            job_id: "web".into(),
            node_id: "n1".into(),
            task_group: "g".into(),
            name: "web.g[0]".into(),
            desired_status: ALLOC_DESIRED_RUN.into(),
            client_status: ALLOC_CLIENT_RUNNING.into(),
            ..Default::default()
        };
        server
            .inner
            .apply(LogEntry::PlanResults {
                job: Some(("default".into(), "web".into(), 0)),
                stopped: vec![],
                placed: vec![alloc],
                evals: vec![],
                deployment: None,
                deployment_updates: Vec::new(),
                at: 0,
            })
            .await
            .unwrap();
    }

    fn write_claim(alloc: &str) -> CsiVolumeClaimRequest {
        CsiVolumeClaimRequest {
            volume_id: "db".into(),
            allocation_id: alloc.into(),
            claim: CsiClaimMode::Write,
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: CsiAttachmentMode::FileSystem,
            ..Default::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn volume_of_a_node_only_plugin_registers_without_controller_rpc() {
        let t = start().await;
        register_plugin_node(&t.server, false).await;
        let index = t
            .server
            .register_csi_volumes("default", vec![volume("db")])
            .await
            .unwrap();
        let v = t
            .server
            .snapshot()
            .csi_volume_full("default", "db")
            .unwrap();
        assert_eq!((v.create_index, v.modify_index), (index, index));
        assert_eq!(v.provider, "hostpath.csi.k8s.io");
        assert!(v.schedulable);
        assert_eq!(v.secrets.as_ref().unwrap()["token"], "s3cr3t");

        t.server
            .deregister_csi_volume("default", "db", false)
            .await
            .unwrap();
        assert!(t.server.snapshot().csi_volume("default", "db").is_none());
        let e = t
            .server
            .deregister_csi_volume("default", "db", false)
            .await
            .unwrap_err();
        assert!(
            matches!(e, ServerError::NotFound(ref m) if m == "volume not found: db"),
            "{e}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn registration_checks_the_volume_and_its_plugin() {
        let t = start().await;
        let e = t
            .server
            .register_csi_volumes("default", vec![volume("db")])
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "no CSI plugin named: hostpath could be found"
        );
        let e = t
            .server
            .register_csi_volumes("default", vec![CsiVolume::default()])
            .await
            .unwrap_err();
        assert!(
            e.to_string().starts_with("validation: missing volume id"),
            "{e}"
        );
        let e = t
            .server
            .register_csi_volumes("default", vec![])
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "missing volume definition");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn controller_paths_say_not_supported_without_client_rpc() {
        let t = start().await;
        register_plugin_node(&t.server, true).await;
        let e = t
            .server
            .register_csi_volumes("default", vec![volume("db")])
            .await
            .unwrap_err();
        assert!(matches!(e, ServerError::BadRequest(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("not supported: no controller RPC"),
            "{e}"
        );
        let e = t
            .server
            .create_csi_volumes("default", vec![volume("db")])
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("not supported: no controller RPC"),
            "{e}"
        );
        assert!(t.server.snapshot().csi_volume("default", "db").is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn controller_plugin_volume_lifecycle_goes_through_the_client_rpc() {
        let t = start().await;
        let rpc = Arc::new(FakeRpc::default());
        t.server.set_csi_client_rpc(rpc.clone());
        register_plugin_node(&t.server, true).await;

        let (created, _) = t
            .server
            .create_csi_volumes("default", vec![volume("db")])
            .await
            .unwrap();
        assert_eq!(created[0].external_id, "ext-db");
        assert_eq!(created[0].capacity, 1 << 20);
        assert_eq!(created[0].secrets, None, "replies carry no secrets");
        assert_eq!(rpc.calls(), vec!["create db min 1048576".to_string()]);

        // Registering it again validates with the controller.
        let mut again = volume("db");
        again.external_id = "ext-db".into();
        t.server
            .register_csi_volumes("default", vec![again])
            .await
            .unwrap();
        assert_eq!(rpc.calls()[1], "validate ext-db on n1");

        // A claim attaches through the controller, to the node plugin's storage id.
        place_alloc(&t.server, "a1").await;
        let resp = t.server.claim_csi_volume(write_claim("a1")).await.unwrap();
        assert_eq!(resp.publish_context["device"], "/dev/x");
        assert_eq!(rpc.calls()[2], "publish ext-db to storage-node-1 ro=false");
        let v = resp.volume.unwrap();
        assert!(v.write_claims.contains_key("a1"));
        assert_eq!(v.write_claims["a1"].node_id, "n1");

        // In use: neither delete nor plain deregister.
        let e = t
            .server
            .delete_csi_volume("default", "db", BTreeMap::new())
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "volume in use: db");

        // The client unmounted and says so; the server detaches and frees the claim.
        let claim = CsiVolumeClaim {
            state: CsiClaimState::NodeDetached,
            ..write_claim("a1").to_claim()
        };
        t.server
            .unpublish_csi_volume(
                "default",
                "db",
                CsiVolumeClaim {
                    node_id: "n1".into(),
                    ..claim
                },
            )
            .await
            .unwrap();
        assert_eq!(rpc.calls()[3], "unpublish ext-db from storage-node-1");
        let v = t.server.snapshot().csi_volume("default", "db").unwrap();
        assert!(!v.in_use() && v.past_claims.is_empty());

        t.server
            .delete_csi_volume("default", "db", BTreeMap::new())
            .await
            .unwrap();
        assert_eq!(rpc.calls()[4], "delete ext-db");
        assert!(t.server.snapshot().csi_volume("default", "db").is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn detach_releases_ended_claims_on_the_node() {
        let t = start().await;
        // The leader's volume watcher would release the ended claim on its own.
        t.server.inner.volume_watcher.stop();
        register_plugin_node(&t.server, false).await;
        t.server
            .register_csi_volumes("default", vec![volume("db")])
            .await
            .unwrap();
        place_alloc(&t.server, "a1").await;
        t.server.claim_csi_volume(write_claim("a1")).await.unwrap();
        t.server
            .update_allocs(vec![AllocClientUpdate {
                id: "a1".into(),
                client_status: ALLOC_CLIENT_COMPLETE.into(),
                ..Default::default()
            }])
            .await
            .unwrap();
        // The node is up: its client must unmount, which this server cannot ask yet.
        let e = t
            .server
            .detach_csi_volume("default", "db", "n1")
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("not supported: no client CSI RPC"),
            "{e}"
        );
        let v = t.server.snapshot().csi_volume("default", "db").unwrap();
        assert_eq!(v.past_claims["a1"].state, CsiClaimState::Unpublishing);

        let rpc = Arc::new(FakeRpc::default());
        t.server.set_csi_client_rpc(rpc.clone());
        t.server
            .detach_csi_volume("default", "db", "n1")
            .await
            .unwrap();
        assert_eq!(rpc.calls(), vec!["node detach db on n1".to_string()]);
        let v = t.server.snapshot().csi_volume("default", "db").unwrap();
        assert!(!v.in_use(), "{v:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plugin_gc_keeps_plugins_in_use() {
        let t = start().await;
        register_plugin_node(&t.server, false).await;
        assert!(t.server.gc_csi_plugins().await.unwrap().is_empty());
        assert!(t.server.snapshot().csi_plugin("hostpath").is_some());
    }

    #[test]
    fn refused_entries_answer_the_state_text() {
        let state = StateStore::new();
        let e = apply_entry(
            &state,
            1,
            CsiEntry::VolumeDeregister {
                namespace: "default".into(),
                ids: vec!["nope".into()],
                force: false,
            },
        )
        .unwrap_err();
        assert!(matches!(e, FsmError::Rejected(ref m) if m == "volume not found: nope"));
        let entry = LogEntry::Csi(CsiEntry::PluginDelete { id: "p".into() });
        let decoded = LogEntry::decode(&entry.encode()).unwrap();
        assert!(matches!(decoded, LogEntry::Csi(CsiEntry::PluginDelete { id }) if id == "p"));
    }
}
