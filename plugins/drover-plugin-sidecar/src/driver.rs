//! Nomad's Driver service over a `drover_abi::Driver`. Every driver call runs on tokio's
//! blocking pool: the contract is synchronous and calls may block for long (stop, wait).

use std::sync::Arc;
use std::time::Duration;

use drover_abi::Driver;
use drover_plugin_proto::drivers::{self as pb, driver_server::Driver as DriverRpc};
use drover_plugin_proto::hclspec::Spec;
use tonic::{Request, Response, Status, Streaming};

use super::convert;
use super::services::BoxStream;

/// How long one blocking wait lasts before the service checks that its caller is still there.
const WAIT_SLICE: Duration = Duration::from_secs(2);
/// How often a Fingerprint stream polls the driver for a change to send.
const FINGERPRINT_PERIOD: Duration = Duration::from_secs(10);
/// The limit given to the contract's `exec_task` when Nomad's call has none (ExecTask with a
/// zero timeout, every ExecTaskStreaming): the contract always takes one.
const EXEC_WITHOUT_LIMIT: Duration = Duration::from_secs(24 * 3600);
/// Task events buffered per TaskEvents stream for a slow reader; more are dropped.
const EVENT_BUFFER: usize = 256;

pub struct DriverService {
    driver: Arc<dyn Driver>,
    task_spec: Spec,
    name: String,
}

impl DriverService {
    pub fn new(driver: Arc<dyn Driver>, task_spec: Spec) -> DriverService {
        let name = driver.plugin_info().name;
        DriverService {
            driver,
            task_spec,
            name,
        }
    }

    /// Runs `f` with the driver on a blocking thread; a panic in the driver becomes Internal.
    async fn call<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&dyn Driver) -> T + Send + 'static,
    ) -> Result<T, Status> {
        let driver = Arc::clone(&self.driver);
        tokio::task::spawn_blocking(move || f(driver.as_ref()))
            .await
            .map_err(|e| Status::internal(format!("the driver panicked in {what}: {e}")))
    }
}

fn ok<T>(value: T) -> Result<Response<T>, Status> {
    Ok(Response::new(value))
}

#[tonic::async_trait]
impl DriverRpc for DriverService {
    async fn task_config_schema(
        &self,
        _: Request<pb::TaskConfigSchemaRequest>,
    ) -> Result<Response<pb::TaskConfigSchemaResponse>, Status> {
        ok(pb::TaskConfigSchemaResponse {
            spec: Some(self.task_spec.clone()),
        })
    }

    async fn capabilities(
        &self,
        _: Request<pb::CapabilitiesRequest>,
    ) -> Result<Response<pb::CapabilitiesResponse>, Status> {
        let caps = self.call("capabilities", |d| d.capabilities()).await?;
        ok(pb::CapabilitiesResponse {
            capabilities: Some(convert::capabilities(&caps)),
        })
    }

    type FingerprintStream = BoxStream<pb::FingerprintResponse>;

    /// One fingerprint at once, then one whenever it changes, until the caller leaves.
    async fn fingerprint(
        &self,
        _: Request<pb::FingerprintRequest>,
    ) -> Result<Response<Self::FingerprintStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let driver = Arc::clone(&self.driver);
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let d = Arc::clone(&driver);
                let Ok(fp) = tokio::task::spawn_blocking(move || d.fingerprint()).await else {
                    let _ = tx
                        .send(Err(Status::internal("the driver panicked in fingerprint")))
                        .await;
                    return;
                };
                if last.as_ref() != Some(&fp) {
                    if tx.send(Ok(convert::fingerprint(&fp))).await.is_err() {
                        return;
                    }
                    last = Some(fp);
                }
                tokio::select! {
                    _ = tokio::time::sleep(FINGERPRINT_PERIOD) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn recover_task(
        &self,
        request: Request<pb::RecoverTaskRequest>,
    ) -> Result<Response<pb::RecoverTaskResponse>, Status> {
        let request = request.into_inner();
        let wire = request
            .handle
            .ok_or_else(|| Status::invalid_argument("RecoverTask without a handle"))?;
        let handle = convert::handle_in(&wire, &self.name)?;
        self.call("recover_task", move |d| d.recover_task(&handle))
            .await?
            .map_err(convert::status)?;
        ok(pb::RecoverTaskResponse {})
    }

    async fn start_task(
        &self,
        request: Request<pb::StartTaskRequest>,
    ) -> Result<Response<pb::StartTaskResponse>, Status> {
        let wire = request
            .into_inner()
            .task
            .ok_or_else(|| Status::invalid_argument("StartTask without a task"))?;
        let config = convert::task_config(&wire)?;
        let handle = self
            .call("start_task", move |d| d.start_task(&config))
            .await?
            .map_err(convert::status)?;
        ok(pb::StartTaskResponse {
            handle: Some(convert::handle_out(&handle, wire)),
            ..Default::default()
        })
    }

    /// Blocks until the task exits, in slices so that a caller that went away frees the thread.
    async fn wait_task(
        &self,
        request: Request<pb::WaitTaskRequest>,
    ) -> Result<Response<pb::WaitTaskResponse>, Status> {
        let task_id = request.into_inner().task_id;
        loop {
            let id = task_id.clone();
            let waited = self
                .call("wait_task", move |d| d.wait_task(&id, WAIT_SLICE))
                .await?
                .map_err(convert::status)?;
            if let Some(exit) = waited {
                return ok(pb::WaitTaskResponse {
                    result: Some(convert::exit_result(&exit)),
                    err: exit.err.unwrap_or_default(),
                });
            }
        }
    }

    async fn stop_task(
        &self,
        request: Request<pb::StopTaskRequest>,
    ) -> Result<Response<pb::StopTaskResponse>, Status> {
        let r = request.into_inner();
        let timeout = convert::duration(r.timeout.as_ref());
        self.call("stop_task", move |d| {
            d.stop_task(&r.task_id, timeout, &r.signal)
        })
        .await?
        .map_err(convert::status)?;
        ok(pb::StopTaskResponse {})
    }

    async fn destroy_task(
        &self,
        request: Request<pb::DestroyTaskRequest>,
    ) -> Result<Response<pb::DestroyTaskResponse>, Status> {
        let r = request.into_inner();
        self.call("destroy_task", move |d| d.destroy_task(&r.task_id, r.force))
            .await?
            .map_err(convert::status)?;
        ok(pb::DestroyTaskResponse {})
    }

    async fn inspect_task(
        &self,
        request: Request<pb::InspectTaskRequest>,
    ) -> Result<Response<pb::InspectTaskResponse>, Status> {
        let id = request.into_inner().task_id;
        let status = self
            .call("inspect_task", move |d| d.inspect_task(&id))
            .await?
            .map_err(convert::status)?;
        ok(pb::InspectTaskResponse {
            task: Some(convert::task_status(&status)),
            driver: Some(pb::TaskDriverStatus::default()),
            network_override: None,
        })
    }

    type TaskStatsStream = BoxStream<pb::TaskStatsResponse>;

    /// A first sample at once (or the error), then one per collection interval.
    async fn task_stats(
        &self,
        request: Request<pb::TaskStatsRequest>,
    ) -> Result<Response<Self::TaskStatsStream>, Status> {
        let r = request.into_inner();
        let interval =
            convert::duration(r.collection_interval.as_ref()).max(Duration::from_millis(100));
        let id = r.task_id.clone();
        let first = self
            .call("task_stats", move |d| d.task_stats(&id))
            .await?
            .map_err(convert::status)?;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let driver = Arc::clone(&self.driver);
        tokio::spawn(async move {
            let mut sample = first;
            loop {
                let stats = convert::task_stats(&r.task_id, &sample);
                if tx
                    .send(Ok(pb::TaskStatsResponse { stats: Some(stats) }))
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = tx.closed() => return,
                }
                let (d, id) = (Arc::clone(&driver), r.task_id.clone());
                match tokio::task::spawn_blocking(move || d.task_stats(&id)).await {
                    Ok(Ok(next)) => sample = next,
                    Ok(Err(e)) => {
                        let _ = tx.send(Err(convert::status(e))).await;
                        return;
                    }
                    Err(_) => return,
                }
            }
        });
        ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    type TaskEventsStream = BoxStream<pb::DriverTaskEvent>;

    /// Every event the driver emits (`drover_plugin_sdk::events::emit`) from now on, until the caller
    /// leaves. Events a slow caller has not taken are dropped past a buffer, never waited for:
    /// `emit` must not block the driver.
    async fn task_events(
        &self,
        _: Request<pb::TaskEventsRequest>,
    ) -> Result<Response<Self::TaskEventsStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(EVENT_BUFFER);
        drover_plugin_sdk::events::listen(move |event| {
            use tokio::sync::mpsc::error::TrySendError;
            !matches!(
                tx.try_send(Ok(convert::task_event(event))),
                Err(TrySendError::Closed(_))
            )
        });
        ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn signal_task(
        &self,
        request: Request<pb::SignalTaskRequest>,
    ) -> Result<Response<pb::SignalTaskResponse>, Status> {
        let r = request.into_inner();
        self.call("signal_task", move |d| d.signal_task(&r.task_id, &r.signal))
            .await?
            .map_err(convert::status)?;
        ok(pb::SignalTaskResponse {})
    }

    async fn exec_task(
        &self,
        request: Request<pb::ExecTaskRequest>,
    ) -> Result<Response<pb::ExecTaskResponse>, Status> {
        let r = request.into_inner();
        let timeout = match convert::duration(r.timeout.as_ref()) {
            Duration::ZERO => EXEC_WITHOUT_LIMIT,
            t => t,
        };
        let out = self
            .call("exec_task", move |d| {
                d.exec_task(&r.task_id, &r.command, timeout)
            })
            .await?
            .map_err(convert::status)?;
        ok(pb::ExecTaskResponse {
            stdout: out.stdout,
            stderr: out.stderr,
            result: Some(pb::ExitResult {
                exit_code: out.exit_code,
                ..Default::default()
            }),
        })
    }

    type ExecTaskStreamingStream = BoxStream<pb::ExecTaskStreamingResponse>;

    /// Interactive, over the contract's `exec_task_streaming` (see `exec_stream`); a driver
    /// without it runs the command through `exec_task`, without stdin.
    async fn exec_task_streaming(
        &self,
        request: Request<Streaming<pb::ExecTaskStreamingRequest>>,
    ) -> Result<Response<Self::ExecTaskStreamingStream>, Status> {
        let mut inbound = request.into_inner();
        let setup = inbound
            .message()
            .await?
            .and_then(|first| first.setup)
            .ok_or_else(|| Status::invalid_argument("first message should always be setup"))?;
        let answers =
            super::exec_stream::serve(Arc::clone(&self.driver), setup, inbound, EXEC_WITHOUT_LIMIT);
        ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(
            answers,
        )))
    }

    // The contract has no network namespace creation: the answers (and code Unimplemented,
    // which the agent reads as "not supported") are those of a Nomad plugin without
    // DriverNetworkManager. Capabilities never set must_create_network, so agents do not ask.

    async fn create_network(
        &self,
        _: Request<pb::CreateNetworkRequest>,
    ) -> Result<Response<pb::CreateNetworkResponse>, Status> {
        Err(Status::unimplemented(
            "CreateNetwork RPC not supported by driver",
        ))
    }

    async fn destroy_network(
        &self,
        _: Request<pb::DestroyNetworkRequest>,
    ) -> Result<Response<pb::DestroyNetworkResponse>, Status> {
        Err(Status::unimplemented(
            "DestroyNetwork RPC not supported by driver",
        ))
    }
}
