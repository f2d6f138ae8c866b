//! The volumes a storage provider knows (Nomad's `CSIVolume.ListExternal`): one page of a
//! plugin's `ListVolumes`, asked of a healthy controller through
//! [`CsiClientRpc`](super::CsiClientRpc). Nothing is written to the log.

use drover_structs::{CsiPlugin, CsiVolumeExternalList};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::rpc::{Reply, Request};
use crate::server::Server;

/// Asks a controller for one page of its volumes (CSI `ListVolumes`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControllerListVolumesRequest {
    pub plugin_id: String,
    /// The client node running the controller to ask.
    pub controller_node_id: String,
    /// 0: as many as the plugin gives.
    pub max_entries: i32,
    pub starting_token: String,
}

/// `GET /v1/volumes/external` (carried in `Request::CsiExternal`); runs on the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExternalVolumesRequest {
    pub plugin_id: String,
    pub per_page: i32,
    pub next_token: String,
}

fn supports_listing(plugin: &CsiPlugin) -> bool {
    plugin
        .controller_info()
        .is_some_and(|c| c.supports_list_volumes)
}

impl Server {
    /// One page of the volumes plugin `plugin_id`'s storage provider knows: at most
    /// `per_page` (0: the plugin's choice) from `next_token`. Answers the state index too.
    pub async fn list_external_csi_volumes(
        &self,
        plugin_id: &str,
        per_page: i32,
        next_token: &str,
    ) -> Result<(CsiVolumeExternalList, u64), ServerError> {
        let request = ExternalVolumesRequest {
            plugin_id: plugin_id.to_string(),
            per_page,
            next_token: next_token.to_string(),
        };
        match self.route(Request::CsiExternal(request)).await? {
            Reply::CsiExternal { list, index } => Ok((list, index)),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    /// On the leader.
    pub(crate) async fn execute_csi_external(
        &self,
        request: ExternalVolumesRequest,
    ) -> Result<Reply, ServerError> {
        let ExternalVolumesRequest {
            plugin_id,
            per_page,
            next_token,
        } = request;
        if per_page < 0 {
            return Err(ServerError::BadRequest(
                "per_page must not be negative".into(),
            ));
        }
        let Some(plugin) = self.snapshot().csi_plugin(&plugin_id) else {
            return Err(ServerError::BadRequest(format!(
                "no CSI plugin named: {plugin_id} could be found"
            )));
        };
        if !supports_listing(&plugin) {
            return Err(ServerError::BadRequest(format!(
                "CSI plugin {plugin_id} does not support listing volumes"
            )));
        }
        let req = ControllerListVolumesRequest {
            plugin_id: plugin.id.clone(),
            controller_node_id: String::new(),
            max_entries: per_page,
            starting_token: next_token,
        };
        let mut list = self
            .on_a_controller(&plugin, "list volumes", |rpc, node| {
                let mut req = req.clone();
                req.controller_node_id = node;
                async move { rpc.controller_list_volumes(req).await }
            })
            .await?;
        // The plugin should have kept to the page size; make sure (as Nomad does).
        if let Ok(limit) = usize::try_from(per_page)
            && limit > 0
        {
            list.volumes.truncate(limit);
        }
        Ok(Reply::CsiExternal {
            list,
            index: self.snapshot().latest_index(),
        })
    }
}
