//! The services every go-plugin server offers besides the plugin's own: health, controller,
//! broker and stdio.

use std::pin::Pin;

use drover_plugin_proto::goplugin::{
    ConnInfo, Empty, StdioData, grpc_broker_server::GrpcBroker,
    grpc_controller_server::GrpcController, grpc_stdio_server::GrpcStdio,
};
use drover_plugin_proto::health::{
    HealthCheckRequest, HealthCheckResponse, health_check_response::ServingStatus,
    health_server::Health as HealthService,
};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// A stream that yields nothing and stays open until the client goes away.
pub fn idle_stream<T: Send + 'static>() -> BoxStream<T> {
    Box::pin(tokio_stream::pending())
}

/// Answers SERVING for the whole server ("") and for go-plugin's "plugin" service.
pub struct Health;

fn serving(service: &str) -> Result<HealthCheckResponse, Status> {
    if service.is_empty() || service == drover_plugin_proto::HEALTH_SERVICE {
        Ok(HealthCheckResponse {
            status: ServingStatus::Serving as i32,
        })
    } else {
        Err(Status::not_found(format!("unknown service {service:?}")))
    }
}

#[tonic::async_trait]
impl HealthService for Health {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        serving(&request.get_ref().service).map(Response::new)
    }

    type WatchStream = BoxStream<HealthCheckResponse>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let first = serving(&request.get_ref().service)?;
        let stream =
            tokio_stream::StreamExt::chain(tokio_stream::once(Ok(first)), tokio_stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }
}

/// go-plugin's controller: Shutdown stops the server, and with it the process.
pub struct Controller {
    pub stop: tokio::sync::watch::Sender<bool>,
}

#[tonic::async_trait]
impl GrpcController for Controller {
    async fn shutdown(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        drover_plugin_sdk::log::info("the agent asked the plugin to shut down");
        let _ = self.stop.send(true);
        Ok(Response::new(Empty {}))
    }
}

/// go-plugin's broker. Nomad's driver protocol opens no extra connections, so the stream the
/// client starts is accepted and left idle.
pub struct Broker;

#[tonic::async_trait]
impl GrpcBroker for Broker {
    type StartStreamStream = BoxStream<ConnInfo>;

    async fn start_stream(
        &self,
        _: Request<Streaming<ConnInfo>>,
    ) -> Result<Response<Self::StartStreamStream>, Status> {
        Ok(Response::new(idle_stream()))
    }
}

/// go-plugin's stdio mirror. A sidecar's output already goes to its stderr, which the agent
/// reads, so the stream stays empty.
pub struct Stdio;

#[tonic::async_trait]
impl GrpcStdio for Stdio {
    type StreamStdioStream = BoxStream<StdioData>;

    async fn stream_stdio(
        &self,
        _: Request<()>,
    ) -> Result<Response<Self::StreamStdioStream>, Status> {
        Ok(Response::new(idle_stream()))
    }
}
