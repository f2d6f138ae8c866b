//! Nomad's BasePlugin service for a driver: who the plugin is, its config schema, and the
//! agent's `plugin "NAME" { config {} }` block.

use std::sync::Arc;

use drover_plugin_proto::base::{
    ConfigSchemaRequest, ConfigSchemaResponse, PluginInfoRequest, PluginInfoResponse, PluginType,
    SetConfigRequest, SetConfigResponse, base_plugin_server::BasePlugin,
};
use drover_plugin_proto::hcl::{self, ConfigSchema};
use drover_plugin_proto::hclspec::Spec;
use tonic::{Request, Response, Status};

use super::convert;
use drover_plugin_sdk::Driver;

pub struct Base {
    driver: Arc<dyn Driver>,
    spec: Spec,
    schema: ConfigSchema,
}

impl Base {
    pub fn new(driver: Arc<dyn Driver>, spec: Spec, schema: ConfigSchema) -> Base {
        Base {
            driver,
            spec,
            schema,
        }
    }
}

#[tonic::async_trait]
impl BasePlugin for Base {
    async fn plugin_info(
        &self,
        _: Request<PluginInfoRequest>,
    ) -> Result<Response<PluginInfoResponse>, Status> {
        let info = self.driver.plugin_info();
        Ok(Response::new(PluginInfoResponse {
            r#type: PluginType::Driver as i32,
            plugin_api_versions: vec![drover_plugin_proto::DRIVER_API_VERSION.to_string()],
            plugin_version: info.plugin_version,
            name: info.name,
        }))
    }

    async fn config_schema(
        &self,
        _: Request<ConfigSchemaRequest>,
    ) -> Result<Response<ConfigSchemaResponse>, Status> {
        Ok(Response::new(ConfigSchemaResponse {
            spec: Some(self.spec.clone()),
        }))
    }

    async fn set_config(
        &self,
        request: Request<SetConfigRequest>,
    ) -> Result<Response<SetConfigResponse>, Status> {
        let request = request.into_inner();
        let api = &request.plugin_api_version;
        if !api.is_empty() && api != drover_plugin_proto::DRIVER_API_VERSION {
            return Err(Status::invalid_argument(format!(
                "plugin API version {api:?} is not supported (this plugin speaks {})",
                drover_plugin_proto::DRIVER_API_VERSION
            )));
        }
        let mut config = hcl::decode(&request.msgpack_config)
            .map_err(|e| Status::invalid_argument(format!("decoding the plugin config: {e}")))?;
        // Nomad always sends its encoding of the schema's value; an agent that sent nothing
        // still means "no settings", which the defaults below fill in like Nomad would.
        if request.msgpack_config.is_empty() {
            let bytes = self
                .schema
                .encode(&serde_json::json!({}))
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            config = hcl::decode(&bytes).map_err(|e| Status::internal(e.to_string()))?;
        }
        let driver = Arc::clone(&self.driver);
        tokio::task::spawn_blocking(move || driver.set_config(&config))
            .await
            .map_err(|e| Status::internal(format!("set_config panicked: {e}")))?
            .map_err(convert::status)?;
        Ok(Response::new(SetConfigResponse {}))
    }
}
