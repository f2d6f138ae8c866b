//! The CSI client: one gRPC channel to a plugin's unix socket, typed calls over the Identity,
//! Controller and Node services, each with a per-attempt timeout and retries of UNAVAILABLE
//! and DEADLINE_EXCEEDED with exponential backoff (every CSI RPC is idempotent, so a retry
//! is always safe).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint, Uri};

use crate::error::{Code, CsiError};
use crate::model::*;
use crate::proto;
use crate::proto::controller_client::ControllerClient;
use crate::proto::identity_client::IdentityClient;
use crate::proto::node_client::NodeClient;

/// How long `connect` waits for the socket to accept.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Timeouts and retries of every call of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallOptions {
    /// Limit of one attempt; an attempt past it fails with DEADLINE_EXCEEDED.
    pub timeout: Duration,
    /// Tries in all, the first included (0 counts as 1).
    pub max_attempts: u32,
    /// Wait before the first retry; doubled after each retry, up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for CallOptions {
    /// Nomad's volume manager: 2 minutes per attempt, 3 attempts, backoff from 100 ms.
    fn default() -> Self {
        CallOptions {
            timeout: Duration::from_secs(120),
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// A connection to one CSI plugin. Cheap to clone (clones share the channel, which
/// reconnects by itself when the plugin restarts).
#[derive(Debug, Clone)]
pub struct CsiClient {
    channel: Channel,
    socket_path: PathBuf,
    options: CallOptions,
}

impl CsiClient {
    /// Connects to the plugin listening on `socket_path` (a path, or `unix://` + path).
    pub async fn connect(socket_path: impl AsRef<Path>) -> Result<Self, CsiError> {
        Self::connect_with(socket_path, CallOptions::default()).await
    }

    /// [`CsiClient::connect`] with other call options.
    pub async fn connect_with(
        socket_path: impl AsRef<Path>,
        options: CallOptions,
    ) -> Result<Self, CsiError> {
        let socket_path = strip_unix_scheme(socket_path.as_ref());
        let dial = socket_path.clone();
        // The URI is never resolved: the connector dials the socket. It only sets :authority.
        let channel = Endpoint::from_static("http://csi-plugin")
            .connect_timeout(CONNECT_TIMEOUT)
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let dial = dial.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(dial).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .map_err(|e| CsiError::Connect {
                path: socket_path.clone(),
                message: error_chain(&e),
            })?;
        Ok(CsiClient {
            channel,
            socket_path,
            options,
        })
    }

    /// The same connection with other call options.
    pub fn with_options(&self, options: CallOptions) -> Self {
        CsiClient {
            options,
            ..self.clone()
        }
    }

    pub fn options(&self) -> CallOptions {
        self.options
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    // ------------------------------------------------------------ identity

    /// `Probe`: whether the plugin is ready (a plugin that does not say is ready).
    pub async fn probe(&self) -> Result<bool, CsiError> {
        let resp = self
            .call("Probe", proto::ProbeRequest {}, |ch, r| async move {
                IdentityClient::new(ch).probe(r).await
            })
            .await?;
        Ok(resp.ready.unwrap_or(true))
    }

    /// `GetPluginInfo`: name and vendor version (the name is REQUIRED: an empty one is an
    /// error).
    pub async fn plugin_info(&self) -> Result<PluginInfo, CsiError> {
        const RPC: &str = "GetPluginInfo";
        let resp = self
            .call(RPC, proto::GetPluginInfoRequest {}, |ch, r| async move {
                IdentityClient::new(ch).get_plugin_info(r).await
            })
            .await?;
        if resp.name.is_empty() {
            return Err(invalid_response(RPC, "empty plugin name"));
        }
        Ok(PluginInfo {
            name: resp.name,
            vendor_version: resp.vendor_version,
            manifest: resp.manifest,
        })
    }

    /// `GetPluginCapabilities`.
    pub async fn plugin_capabilities(&self) -> Result<PluginCapabilities, CsiError> {
        let resp = self
            .call(
                "GetPluginCapabilities",
                proto::GetPluginCapabilitiesRequest {},
                |ch, r| async move { IdentityClient::new(ch).get_plugin_capabilities(r).await },
            )
            .await?;
        Ok(PluginCapabilities::from(&resp))
    }

    // ------------------------------------------------------------ controller

    /// `ControllerGetCapabilities`.
    pub async fn controller_get_capabilities(&self) -> Result<ControllerCapabilities, CsiError> {
        let resp = self
            .call(
                "ControllerGetCapabilities",
                proto::ControllerGetCapabilitiesRequest {},
                |ch, r| async move {
                    ControllerClient::new(ch)
                        .controller_get_capabilities(r)
                        .await
                },
            )
            .await?;
        Ok(ControllerCapabilities::from(&resp))
    }

    /// `ValidateVolumeCapabilities`: `Ok` only when the plugin confirms every capability
    /// asked for (compared by access and attachment mode, as the spec asks the CO to do).
    pub async fn controller_validate_capabilities(
        &self,
        req: &ValidateVolumeRequest,
    ) -> Result<(), CsiError> {
        const RPC: &str = "ValidateVolumeCapabilities";
        let request = proto::ValidateVolumeCapabilitiesRequest {
            volume_id: req.external_id.clone(),
            volume_context: req.context.clone(),
            volume_capabilities: req.capabilities.iter().map(Into::into).collect(),
            parameters: req.parameters.clone(),
            secrets: req.secrets.0.clone(),
        };
        let resp = self
            .call(RPC, request, |ch, r| async move {
                ControllerClient::new(ch)
                    .validate_volume_capabilities(r)
                    .await
            })
            .await?;
        let Some(confirmed) = resp.confirmed else {
            let message = if resp.message.is_empty() {
                "the plugin gave no reason".to_string()
            } else {
                resp.message
            };
            return Err(CsiError::NotConfirmed { rpc: RPC, message });
        };
        let got: Vec<VolumeCapability> = confirmed
            .volume_capabilities
            .iter()
            .filter_map(|c| VolumeCapability::try_from(c).ok())
            .collect();
        for want in &req.capabilities {
            let found = got.iter().any(|c| {
                c.access_mode == want.access_mode && c.attachment_mode == want.attachment_mode
            });
            if !found {
                return Err(CsiError::NotConfirmed {
                    rpc: RPC,
                    message: format!(
                        "{} / {} is missing from the confirmed capabilities",
                        want.access_mode, want.attachment_mode
                    ),
                });
            }
        }
        Ok(())
    }

    /// `ControllerPublishVolume`: makes the volume available on a node; returns the publish
    /// context to pass to the node's stage and publish calls.
    pub async fn controller_publish_volume(
        &self,
        req: &ControllerPublishRequest,
    ) -> Result<StringMap, CsiError> {
        let request = proto::ControllerPublishVolumeRequest {
            volume_id: req.external_id.clone(),
            node_id: req.node_id.clone(),
            volume_capability: Some((&req.capability).into()),
            readonly: req.readonly,
            secrets: req.secrets.0.clone(),
            volume_context: req.context.clone(),
        };
        let resp = self
            .call("ControllerPublishVolume", request, |ch, r| async move {
                ControllerClient::new(ch).controller_publish_volume(r).await
            })
            .await?;
        Ok(resp.publish_context)
    }

    /// `ControllerUnpublishVolume`; an empty `node_id` unpublishes from every node.
    pub async fn controller_unpublish_volume(
        &self,
        external_id: &str,
        node_id: &str,
        secrets: &Secrets,
    ) -> Result<(), CsiError> {
        let request = proto::ControllerUnpublishVolumeRequest {
            volume_id: external_id.to_string(),
            node_id: node_id.to_string(),
            secrets: secrets.0.clone(),
        };
        self.call("ControllerUnpublishVolume", request, |ch, r| async move {
            ControllerClient::new(ch)
                .controller_unpublish_volume(r)
                .await
        })
        .await?;
        Ok(())
    }

    /// `CreateVolume`; the same name twice gives the same volume.
    pub async fn create_volume(&self, req: &CreateVolumeRequest) -> Result<Volume, CsiError> {
        const RPC: &str = "CreateVolume";
        let request = proto::CreateVolumeRequest {
            name: req.name.clone(),
            capacity_range: req.capacity.as_ref().map(Into::into),
            volume_capabilities: req.capabilities.iter().map(Into::into).collect(),
            parameters: req.parameters.clone(),
            secrets: req.secrets.0.clone(),
            volume_content_source: req.content_source.as_ref().map(Into::into),
            accessibility_requirements: req.accessibility.as_ref().map(Into::into),
            mutable_parameters: Default::default(),
        };
        let resp = self
            .call(RPC, request, |ch, r| async move {
                ControllerClient::new(ch).create_volume(r).await
            })
            .await?;
        let volume = resp
            .volume
            .as_ref()
            .ok_or_else(|| invalid_response(RPC, "no volume"))?;
        if volume.volume_id.is_empty() {
            return Err(invalid_response(RPC, "a volume without an id"));
        }
        Ok(Volume::from(volume))
    }

    /// `DeleteVolume`; deleting a volume that is gone succeeds.
    pub async fn delete_volume(
        &self,
        external_id: &str,
        secrets: &Secrets,
    ) -> Result<(), CsiError> {
        let request = proto::DeleteVolumeRequest {
            volume_id: external_id.to_string(),
            secrets: secrets.0.clone(),
        };
        self.call("DeleteVolume", request, |ch, r| async move {
            ControllerClient::new(ch).delete_volume(r).await
        })
        .await?;
        Ok(())
    }

    /// `ListVolumes`, one page: at most `max_entries` (0: no limit) from `starting_token`
    /// (empty: the start).
    pub async fn list_volumes(
        &self,
        max_entries: i32,
        starting_token: &str,
    ) -> Result<VolumePage, CsiError> {
        let request = proto::ListVolumesRequest {
            max_entries,
            starting_token: starting_token.to_string(),
        };
        let resp = self
            .call("ListVolumes", request, |ch, r| async move {
                ControllerClient::new(ch).list_volumes(r).await
            })
            .await?;
        let entries = resp
            .entries
            .iter()
            .filter_map(|e| {
                // An entry without a volume says nothing; skip it rather than fail the page.
                let volume = Volume::from(e.volume.as_ref()?);
                let status = e.status.clone().unwrap_or_default();
                Some(VolumeEntry {
                    volume,
                    published_node_ids: status.published_node_ids,
                    condition: status.volume_condition.map(|c| VolumeCondition {
                        abnormal: c.abnormal,
                        message: c.message,
                    }),
                })
            })
            .collect();
        Ok(VolumePage {
            entries,
            next_token: resp.next_token,
        })
    }

    /// `GetCapacity`.
    pub async fn get_capacity(&self, req: &CapacityRequest) -> Result<Capacity, CsiError> {
        let request = proto::GetCapacityRequest {
            volume_capabilities: req.capabilities.iter().map(Into::into).collect(),
            parameters: req.parameters.clone(),
            accessible_topology: req.accessible_topology.as_ref().map(Into::into),
        };
        let resp = self
            .call("GetCapacity", request, |ch, r| async move {
                ControllerClient::new(ch).get_capacity(r).await
            })
            .await?;
        Ok(Capacity {
            available: resp.available_capacity,
            maximum_volume_size: resp.maximum_volume_size,
            minimum_volume_size: resp.minimum_volume_size,
        })
    }

    /// `ControllerExpandVolume`.
    pub async fn controller_expand_volume(
        &self,
        req: &ControllerExpandRequest,
    ) -> Result<ControllerExpandResult, CsiError> {
        let request = proto::ControllerExpandVolumeRequest {
            volume_id: req.external_id.clone(),
            capacity_range: Some((&req.capacity).into()),
            secrets: req.secrets.0.clone(),
            volume_capability: req.capability.as_ref().map(Into::into),
        };
        let resp = self
            .call("ControllerExpandVolume", request, |ch, r| async move {
                ControllerClient::new(ch).controller_expand_volume(r).await
            })
            .await?;
        Ok(ControllerExpandResult {
            capacity_bytes: resp.capacity_bytes,
            node_expansion_required: resp.node_expansion_required,
        })
    }

    /// `CreateSnapshot` of `source_volume_id`; `name` is the idempotency key.
    pub async fn create_snapshot(
        &self,
        source_volume_id: &str,
        name: &str,
        parameters: &StringMap,
        secrets: &Secrets,
    ) -> Result<Snapshot, CsiError> {
        const RPC: &str = "CreateSnapshot";
        let request = proto::CreateSnapshotRequest {
            source_volume_id: source_volume_id.to_string(),
            name: name.to_string(),
            secrets: secrets.0.clone(),
            parameters: parameters.clone(),
        };
        let resp = self
            .call(RPC, request, |ch, r| async move {
                ControllerClient::new(ch).create_snapshot(r).await
            })
            .await?;
        let snapshot = resp
            .snapshot
            .as_ref()
            .ok_or_else(|| invalid_response(RPC, "no snapshot"))?;
        Ok(Snapshot::from(snapshot))
    }

    /// `DeleteSnapshot`.
    pub async fn delete_snapshot(
        &self,
        snapshot_id: &str,
        secrets: &Secrets,
    ) -> Result<(), CsiError> {
        let request = proto::DeleteSnapshotRequest {
            snapshot_id: snapshot_id.to_string(),
            secrets: secrets.0.clone(),
        };
        self.call("DeleteSnapshot", request, |ch, r| async move {
            ControllerClient::new(ch).delete_snapshot(r).await
        })
        .await?;
        Ok(())
    }

    /// `ListSnapshots`, one page (see [`CsiClient::list_volumes`]).
    pub async fn list_snapshots(
        &self,
        max_entries: i32,
        starting_token: &str,
    ) -> Result<SnapshotPage, CsiError> {
        self.list_snapshots_with(&ListSnapshotsRequest {
            max_entries,
            starting_token: starting_token.to_string(),
            ..Default::default()
        })
        .await
    }

    /// `ListSnapshots` with every argument: filters and the secrets the plugin may need.
    pub async fn list_snapshots_with(
        &self,
        req: &ListSnapshotsRequest,
    ) -> Result<SnapshotPage, CsiError> {
        let request = proto::ListSnapshotsRequest {
            max_entries: req.max_entries,
            starting_token: req.starting_token.clone(),
            source_volume_id: req.source_volume_id.clone(),
            snapshot_id: req.snapshot_id.clone(),
            secrets: req.secrets.0.clone(),
        };
        let resp = self
            .call("ListSnapshots", request, |ch, r| async move {
                ControllerClient::new(ch).list_snapshots(r).await
            })
            .await?;
        Ok(SnapshotPage {
            entries: resp
                .entries
                .iter()
                .filter_map(|e| e.snapshot.as_ref().map(Snapshot::from))
                .collect(),
            next_token: resp.next_token,
        })
    }

    // ------------------------------------------------------------ node

    /// `NodeGetCapabilities`.
    pub async fn node_get_capabilities(&self) -> Result<NodeCapabilities, CsiError> {
        let resp = self
            .call(
                "NodeGetCapabilities",
                proto::NodeGetCapabilitiesRequest {},
                |ch, r| async move { NodeClient::new(ch).node_get_capabilities(r).await },
            )
            .await?;
        Ok(NodeCapabilities::from(&resp))
    }

    /// `NodeGetInfo` (the node id is REQUIRED: an empty one is an error).
    pub async fn node_get_info(&self) -> Result<NodeInfo, CsiError> {
        const RPC: &str = "NodeGetInfo";
        let resp = self
            .call(RPC, proto::NodeGetInfoRequest {}, |ch, r| async move {
                NodeClient::new(ch).node_get_info(r).await
            })
            .await?;
        if resp.node_id.is_empty() {
            return Err(invalid_response(RPC, "empty node id"));
        }
        Ok(NodeInfo {
            node_id: resp.node_id,
            max_volumes: resp.max_volumes_per_node,
            accessible_topology: resp.accessible_topology.as_ref().map(Into::into),
        })
    }

    /// `NodeStageVolume`.
    pub async fn node_stage_volume(&self, req: &NodeStageRequest) -> Result<(), CsiError> {
        const RPC: &str = "NodeStageVolume";
        let request = proto::NodeStageVolumeRequest {
            volume_id: req.external_id.clone(),
            publish_context: req.publish_context.clone(),
            staging_target_path: path_string(RPC, &req.staging_target_path)?,
            volume_capability: Some((&req.capability).into()),
            secrets: req.secrets.0.clone(),
            volume_context: req.context.clone(),
        };
        self.call(RPC, request, |ch, r| async move {
            NodeClient::new(ch).node_stage_volume(r).await
        })
        .await?;
        Ok(())
    }

    /// `NodeUnstageVolume`.
    pub async fn node_unstage_volume(
        &self,
        external_id: &str,
        staging_target_path: &Path,
    ) -> Result<(), CsiError> {
        const RPC: &str = "NodeUnstageVolume";
        let request = proto::NodeUnstageVolumeRequest {
            volume_id: external_id.to_string(),
            staging_target_path: path_string(RPC, staging_target_path)?,
        };
        self.call(RPC, request, |ch, r| async move {
            NodeClient::new(ch).node_unstage_volume(r).await
        })
        .await?;
        Ok(())
    }

    /// `NodePublishVolume`.
    pub async fn node_publish_volume(&self, req: &NodePublishRequest) -> Result<(), CsiError> {
        const RPC: &str = "NodePublishVolume";
        let staging_target_path = match &req.staging_target_path {
            Some(p) => path_string(RPC, p)?,
            None => String::new(),
        };
        let request = proto::NodePublishVolumeRequest {
            volume_id: req.external_id.clone(),
            publish_context: req.publish_context.clone(),
            staging_target_path,
            target_path: path_string(RPC, &req.target_path)?,
            volume_capability: Some((&req.capability).into()),
            readonly: req.readonly,
            secrets: req.secrets.0.clone(),
            volume_context: req.context.clone(),
        };
        self.call(RPC, request, |ch, r| async move {
            NodeClient::new(ch).node_publish_volume(r).await
        })
        .await?;
        Ok(())
    }

    /// `NodeUnpublishVolume`.
    pub async fn node_unpublish_volume(
        &self,
        external_id: &str,
        target_path: &Path,
    ) -> Result<(), CsiError> {
        const RPC: &str = "NodeUnpublishVolume";
        let request = proto::NodeUnpublishVolumeRequest {
            volume_id: external_id.to_string(),
            target_path: path_string(RPC, target_path)?,
        };
        self.call(RPC, request, |ch, r| async move {
            NodeClient::new(ch).node_unpublish_volume(r).await
        })
        .await?;
        Ok(())
    }

    /// `NodeExpandVolume`; returns the new capacity in bytes (0: not reported).
    pub async fn node_expand_volume(&self, req: &NodeExpandRequest) -> Result<i64, CsiError> {
        const RPC: &str = "NodeExpandVolume";
        let staging_target_path = match &req.staging_target_path {
            Some(p) => path_string(RPC, p)?,
            None => String::new(),
        };
        let request = proto::NodeExpandVolumeRequest {
            volume_id: req.external_id.clone(),
            volume_path: path_string(RPC, &req.volume_path)?,
            capacity_range: req.capacity.as_ref().map(Into::into),
            staging_target_path,
            volume_capability: req.capability.as_ref().map(Into::into),
            secrets: Default::default(),
        };
        let resp = self
            .call(RPC, request, |ch, r| async move {
                NodeClient::new(ch).node_expand_volume(r).await
            })
            .await?;
        Ok(resp.capacity_bytes)
    }

    // ------------------------------------------------------------ plumbing

    /// Sends `request` through `send` until it succeeds, fails with a code that is not
    /// worth retrying, or the attempts run out.
    async fn call<Req, Resp, F, Fut>(
        &self,
        rpc: &'static str,
        request: Req,
        send: F,
    ) -> Result<Resp, CsiError>
    where
        Req: Clone,
        F: Fn(Channel, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let max_attempts = self.options.max_attempts.max(1);
        let mut backoff = self.options.initial_backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            // No grpc-timeout header: tonic would then end the call itself with CANCELLED.
            // Dropping the call at the deadline resets the stream, which the plugin sees.
            let req = tonic::Request::new(request.clone());
            let answered =
                tokio::time::timeout(self.options.timeout, send(self.channel.clone(), req)).await;
            let status = match answered {
                Ok(Ok(resp)) => return Ok(resp.into_inner()),
                Ok(Err(status)) => status,
                Err(_elapsed) => tonic::Status::deadline_exceeded(format!(
                    "no answer within {:?}",
                    self.options.timeout
                )),
            };
            let retryable = matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded);
            if !retryable || attempt >= max_attempts {
                return Err(CsiError::Rpc {
                    rpc,
                    code: status.code(),
                    message: status_text(&status),
                    attempts: attempt,
                });
            }
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(self.options.max_backoff);
        }
    }
}

fn strip_unix_scheme(path: &Path) -> PathBuf {
    match path.to_str().and_then(|s| s.strip_prefix("unix://")) {
        Some(rest) => PathBuf::from(rest),
        None => path.to_path_buf(),
    }
}

fn path_string(rpc: &'static str, path: &Path) -> Result<String, CsiError> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| CsiError::InvalidRequest {
            rpc,
            reason: format!("path {} is not UTF-8", path.display()),
        })
}

fn invalid_response(rpc: &'static str, reason: &str) -> CsiError {
    CsiError::InvalidResponse {
        rpc,
        reason: reason.to_string(),
    }
}

/// A status's message, with its transport cause when the message alone says little
/// ("transport error").
fn status_text(status: &tonic::Status) -> String {
    use std::error::Error;
    match status.source() {
        Some(source) => format!("{}: {}", status.message(), error_chain(source)),
        None => status.message().to_string(),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests;
