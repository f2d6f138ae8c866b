//! The Identity service: who the plugin is and what it serves.

use drover_csi::PluginCapabilities;
use drover_csi::proto::{self, identity_server};
use tonic::{Request, Response, Status};

use crate::PLUGIN_NAME;

pub struct Identity;

/// A monolith with a controller; volumes are node-local (topology), and grow in place.
pub const CAPABILITIES: PluginCapabilities = PluginCapabilities {
    controller_service: true,
    volume_accessibility_constraints: true,
    group_controller_service: false,
    online_expansion: true,
    offline_expansion: false,
};

#[tonic::async_trait]
impl identity_server::Identity for Identity {
    async fn get_plugin_info(
        &self,
        _: Request<proto::GetPluginInfoRequest>,
    ) -> Result<Response<proto::GetPluginInfoResponse>, Status> {
        Ok(Response::new(proto::GetPluginInfoResponse {
            name: PLUGIN_NAME.to_string(),
            vendor_version: env!("CARGO_PKG_VERSION").to_string(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<proto::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<proto::GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new((&CAPABILITIES).into()))
    }

    async fn probe(
        &self,
        _: Request<proto::ProbeRequest>,
    ) -> Result<Response<proto::ProbeResponse>, Status> {
        // Ready as soon as it serves: the state was loaded before the socket opened.
        Ok(Response::new(proto::ProbeResponse { ready: Some(true) }))
    }
}
