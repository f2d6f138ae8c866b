//! A connection to a running plugin: the gRPC channel over its unix socket, the clients of its
//! services, and what the agent asks once per connection (health, PluginInfo, the config
//! schemas), as Nomad's plugin loader does, and its task events subscription.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_plugin_proto::base::{
    ConfigSchemaRequest, PluginInfoRequest, PluginInfoResponse, PluginType,
    base_plugin_client::BasePluginClient,
};
use drover_plugin_proto::drivers::{TaskConfigSchemaRequest, driver_client::DriverClient};
use drover_plugin_proto::goplugin::{
    Empty, grpc_controller_client::GrpcControllerClient, grpc_stdio_client::GrpcStdioClient,
};
use drover_plugin_proto::handshake::Handshake;
use drover_plugin_proto::hcl::ConfigSchema;
use drover_plugin_proto::health::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tonic::transport::{Channel, Endpoint, Uri};

use super::process::PluginProcess;

/// How long the agent waits to connect and for each set-up call.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct Conn {
    pub base: BasePluginClient<Channel>,
    pub driver: DriverClient<Channel>,
    pub controller: GrpcControllerClient<Channel>,
    pub info: PluginInfoResponse,
    pub plugin_schema: Arc<ConfigSchema>,
    pub task_schema: Arc<ConfigSchema>,
    pub process: Arc<PluginProcess>,
    pub handshake: Handshake,
    /// The TaskEvents call started with the connection, until the driver takes it to follow.
    pub events: Arc<Mutex<Option<super::events::PendingEvents>>>,
}

async fn channel(h: &Handshake) -> Result<Channel, String> {
    let endpoint = Endpoint::from_static("http://plugin").connect_timeout(SETUP_TIMEOUT);
    let connected = match h.network.as_str() {
        "unix" => {
            let path = std::path::PathBuf::from(&h.address);
            endpoint
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                }))
                .await
        }
        _ => {
            Endpoint::from_shared(format!("http://{}", h.address))
                .map_err(|e| e.to_string())?
                .connect_timeout(SETUP_TIMEOUT)
                .connect()
                .await
        }
    };
    connected.map_err(|e| format!("connecting to {} {}: {e}", h.network, h.address))
}

async fn within<T>(
    what: &str,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, String> {
    match tokio::time::timeout(SETUP_TIMEOUT, call).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => Err(format!("{what}: {}", s.message())),
        Err(_) => Err(format!("{what}: no answer within {SETUP_TIMEOUT:?}")),
    }
}

/// Connects to the plugin that printed `handshake` and checks that it is a healthy driver
/// plugin speaking Nomad's driver API v0.1.0.
pub async fn open(handshake: Handshake, process: Arc<PluginProcess>) -> Result<Conn, String> {
    let channel = channel(&handshake).await?;
    let mut health = HealthClient::new(channel.clone());
    let checked = within(
        "health check",
        health.check(HealthCheckRequest {
            service: drover_plugin_proto::HEALTH_SERVICE.to_string(),
        }),
    )
    .await?;
    if checked.status != ServingStatus::Serving as i32 {
        return Err(format!(
            "health check: the plugin is not serving (status {})",
            checked.status
        ));
    }
    let mut base = BasePluginClient::new(channel.clone());
    let info = within("PluginInfo", base.plugin_info(PluginInfoRequest {})).await?;
    if info.r#type != PluginType::Driver as i32 {
        return Err(format!(
            "it is a {} plugin, not a task driver",
            PluginType::try_from(info.r#type)
                .map(|t| t.as_str_name())
                .unwrap_or("unknown")
        ));
    }
    if !info
        .plugin_api_versions
        .iter()
        .any(|v| v == drover_plugin_proto::DRIVER_API_VERSION)
    {
        return Err(format!(
            "it speaks driver API versions {:?}; the agent speaks {}",
            info.plugin_api_versions,
            drover_plugin_proto::DRIVER_API_VERSION
        ));
    }
    if info.name.trim().is_empty() {
        return Err("PluginInfo: the plugin has no name".into());
    }
    let schema = within("ConfigSchema", base.config_schema(ConfigSchemaRequest {})).await?;
    let plugin_schema = ConfigSchema::compile(schema.spec.as_ref())
        .map_err(|e| format!("its plugin config schema: {e}"))?;
    let mut driver = DriverClient::new(channel.clone());
    let schema = within(
        "TaskConfigSchema",
        driver.task_config_schema(TaskConfigSchemaRequest {}),
    )
    .await?;
    let task_schema = ConfigSchema::compile(schema.spec.as_ref())
        .map_err(|e| format!("its task config schema: {e}"))?;
    // Subscribed before any call can start a task, so that no event of a task is missed.
    let events = super::events::open(&driver, &info.name);
    mirror_stdio(channel.clone(), info.name.clone());
    Ok(Conn {
        base,
        driver,
        controller: GrpcControllerClient::new(channel),
        info,
        plugin_schema: Arc::new(plugin_schema),
        task_schema: Arc::new(task_schema),
        process,
        handshake,
        events: Arc::new(Mutex::new(Some(events))),
    })
}

/// go-plugin's clients read the plugin's stdio stream (a Go plugin blocks once its mirrored
/// stdout fills up if nobody does); what arrives goes to the agent's log.
fn mirror_stdio(channel: Channel, plugin: String) {
    tokio::spawn(async move {
        let Ok(response) = GrpcStdioClient::new(channel).stream_stdio(()).await else {
            return;
        };
        let mut stream = response.into_inner();
        while let Ok(Some(data)) = stream.message().await {
            let text = String::from_utf8_lossy(&data.data);
            for line in text.lines().filter(|l| !l.is_empty()) {
                tracing::info!(plugin = %plugin, "{line}");
            }
        }
    });
}

impl Conn {
    /// Asks the plugin to exit (go-plugin's controller); false when it did not answer.
    pub async fn shutdown(&self) -> bool {
        let mut controller = self.controller.clone();
        matches!(
            tokio::time::timeout(Duration::from_secs(2), controller.shutdown(Empty {})).await,
            Ok(Ok(_))
        )
    }
}
