//! `GrpcDriver`: the driver contract over a plugin's Driver and BasePlugin services. Blocking
//! calls run on the plugin runtime (see `runtime`); while the plugin restarts, calls wait
//! for it to come back (a bounded time) instead of failing at once.

use std::future::Future;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_abi::{
    Capabilities, DRIVER_API_VERSION, Driver, DriverError, DriverTaskEvent, ExecOptions,
    ExecOutput, ExecStream, ExitResult, Fingerprint, FsIsolation, HealthState, PluginInfo,
    TaskConfig, TaskHandle, TaskResourceUsage, TaskStatus,
};
use drover_plugin_proto::drivers as pb;
use drover_plugin_proto::hcl::ConfigError;
use tonic::Status;

use super::conn::Conn;
use super::events::PluginTaskEvent;
use super::exec::{self, ExecSession};
use super::{Shared, convert, lock, supervisor};

/// How long a call waits for a restarting plugin before it fails.
const RECONNECT_WAIT: Duration = Duration::from_secs(20);
/// Calls that answer at once get this long before the plugin counts as hung.
const QUICK_CALL: Duration = Duration::from_secs(30);

/// A driver plugin served by a separate process.
pub struct GrpcDriver {
    shared: Arc<Shared>,
    /// The plugin's task events since this object was made, for `Driver::task_events`.
    /// Subscribed at once so that no event of a task started before the first call is lost.
    task_events: Mutex<Receiver<PluginTaskEvent>>,
}

fn invalid(e: ConfigError) -> DriverError {
    DriverError::InvalidConfig(e.to_string())
}

impl GrpcDriver {
    pub(crate) fn new(shared: Arc<Shared>) -> GrpcDriver {
        let task_events = Mutex::new(shared.events.subscribe());
        GrpcDriver {
            shared,
            task_events,
        }
    }

    /// The pid of the plugin process serving calls now.
    pub fn pid(&self) -> Option<i32> {
        self.shared.now().map(|c| c.process.pid)
    }

    /// Kills the plugin process, as a crash would (for tests of the supervisor).
    pub fn kill_plugin(&self) {
        if let Some(conn) = self.shared.now() {
            conn.process.kill();
        }
    }

    /// Every task event the plugin reports from now on (and after it restarts), until the
    /// receiver is dropped; apart from those `Driver::task_events` hands out.
    pub fn subscribe_task_events(&self) -> std::sync::mpsc::Receiver<PluginTaskEvent> {
        self.shared.events.subscribe()
    }

    /// Runs `command` in task `task_id` interactively (Nomad's ExecTaskStreaming: stdin and
    /// terminal size in, output as it comes). A plugin that does not stream runs it with
    /// ExecTask instead, its output arriving whole at the end, without stdin.
    pub fn exec_streaming(
        &self,
        task_id: &str,
        command: &[String],
        tty: bool,
    ) -> Result<ExecSession, DriverError> {
        let (conn, _) = self.shared.current(RECONNECT_WAIT)?;
        ExecSession::start(conn.driver, task_id, command, tty, true)
    }

    /// The live connection, for tests that speak the protocol directly.
    #[cfg(test)]
    pub(crate) fn conn(&self) -> Option<Conn> {
        self.shared.now()
    }

    /// Runs one call against the live connection. A transport failure on an `idempotent` call
    /// is retried once on the restarted plugin.
    fn call<T, F, Fut>(
        &self,
        method: &'static str,
        task_id: &str,
        idempotent: bool,
        timeout: Option<Duration>,
        f: F,
    ) -> Result<T, DriverError>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = Result<T, Status>> + Send + 'static,
        T: Send + 'static,
    {
        let mut attempts = if idempotent { 2 } else { 1 };
        loop {
            attempts -= 1;
            let (conn, generation) = self.shared.current(RECONNECT_WAIT)?;
            let process = Arc::clone(&conn.process);
            let future = f(conn);
            let result = super::block(async move {
                match timeout {
                    Some(t) => tokio::time::timeout(t, future).await.unwrap_or_else(|_| {
                        Err(Status::deadline_exceeded(format!("no answer within {t:?}")))
                    }),
                    None => future.await,
                }
            })
            .map_err(|e| DriverError::Other(e.to_string()))?;
            match result {
                Ok(v) => return Ok(v),
                Err(s) if convert::is_transport_error(&s) => {
                    if !process.is_alive() {
                        self.shared
                            .lost(Some(generation), "its process ended".to_string());
                    }
                    if attempts == 0 {
                        return Err(convert::driver_error(method, task_id, s));
                    }
                }
                Err(s) => return Err(convert::driver_error(method, task_id, s)),
            }
        }
    }

    fn remember(&self, handle: &TaskHandle) {
        lock(&self.shared.handles).insert(handle.config.id.clone(), handle.clone());
    }

    fn forget(&self, task_id: &str) {
        lock(&self.shared.handles).remove(task_id);
    }
}

impl Drop for GrpcDriver {
    /// Stops supervising. A plugin with a state dir keeps running for the next agent to
    /// reattach to (as at agent exit); one without is shut down with its driver object.
    fn drop(&mut self) {
        self.shared.stop();
        if self.shared.options.state_dir.is_some() {
            return;
        }
        self.end_process();
    }
}

impl GrpcDriver {
    /// Shuts the plugin process down and forgets its reattach config, for an agent that refuses
    /// to start after starting it: nothing is left for a next agent that may never come.
    pub fn shut_down_plugin(&self) {
        self.shared.stop();
        self.end_process();
        if let Some(dir) = &self.shared.options.state_dir {
            super::reattach::remove(dir, &self.shared.config_name);
        }
    }

    /// Asks the live plugin process to shut down (go-plugin's Shutdown), kills it after 5 s.
    fn end_process(&self) {
        if let Some(conn) = self.shared.now() {
            let process = Arc::clone(&conn.process);
            let socket = conn.handshake.clone();
            let asked = super::block(async move { conn.shutdown().await }).unwrap_or(false);
            let deadline = Instant::now() + Duration::from_secs(5);
            while asked && process.is_alive() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if process.is_alive() {
                process.kill();
                supervisor::remove_socket(&socket);
            }
        }
    }
}

impl Driver for GrpcDriver {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: self.shared.name.clone(),
            plugin_version: self.shared.plugin_version.clone(),
            // The adapter speaks this contract for any plugin of Nomad's driver API v0.1.0.
            api_version: DRIVER_API_VERSION.to_string(),
        }
    }

    fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        let (conn, _) = self.shared.current(RECONNECT_WAIT)?;
        conn.plugin_schema.encode(config).map_err(invalid)?;
        supervisor::apply_config(&conn, config).map_err(DriverError::InvalidConfig)?;
        *lock(&self.shared.plugin_config) = Some(config.clone());
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        let got = self.call("capabilities", "", true, Some(QUICK_CALL), |c| async move {
            let mut d = c.driver.clone();
            d.capabilities(pb::CapabilitiesRequest {}).await
        });
        match got {
            Ok(r) => convert::capabilities(r.into_inner().capabilities.as_ref()),
            Err(e) => {
                tracing::warn!(plugin = %self.shared.config_name, error = %e, "capabilities failed; assuming none");
                Capabilities {
                    send_signals: false,
                    exec: false,
                    fs_isolation: FsIsolation::None,
                    network_isolation: false,
                    group_network: false,
                    mount_configs: false,
                }
            }
        }
    }

    /// The first answer of a Fingerprint stream (plugins send one at once). While the plugin
    /// restarts, unhealthy at once: the agent fingerprints again soon.
    fn fingerprint(&self) -> Fingerprint {
        if self.shared.now().is_none() {
            return Fingerprint {
                health: HealthState::Unhealthy,
                health_description: format!(
                    "failed to fingerprint driver: {}",
                    self.shared.down_reason()
                ),
                attributes: Default::default(),
            };
        }
        let got = self.call("fingerprint", "", true, Some(QUICK_CALL), |c| async move {
            let mut d = c.driver.clone();
            let mut stream = d.fingerprint(pb::FingerprintRequest {}).await?.into_inner();
            stream
                .message()
                .await?
                .ok_or_else(|| Status::unavailable("the fingerprint stream ended"))
        });
        match got {
            Ok(fp) => {
                let mut fingerprint = convert::fingerprint(&fp);
                // Nomad's client, not the plugin, sets `driver.NAME = 1` for a detected driver
                // (Nomad's plugins report `driver.NAME` as a bool, or not at all); Drover's
                // client takes it from the driver, so the adapter adds it here.
                if fingerprint.health != HealthState::Undetected {
                    fingerprint
                        .attributes
                        .insert(format!("driver.{}", self.shared.name), "1".to_string());
                }
                fingerprint
            }
            Err(e) => Fingerprint {
                health: HealthState::Unhealthy,
                health_description: format!("failed to fingerprint driver: {e}"),
                attributes: Default::default(),
            },
        }
    }

    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        let (conn, _) = self.shared.current(RECONNECT_WAIT)?;
        conn.task_schema.encode(config).map(drop).map_err(invalid)
    }

    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let (conn, _) = self.shared.current(RECONNECT_WAIT)?;
        let encoded = conn
            .task_schema
            .encode(&config.driver_config)
            .map_err(invalid)?;
        let task = convert::task_config(config, encoded);
        let response = self.call("start_task", &config.id, false, None, move |c| {
            let request = pb::StartTaskRequest {
                task: Some(task.clone()),
            };
            async move {
                let mut d = c.driver.clone();
                d.start_task(request).await
            }
        })?;
        let response = response.into_inner();
        if response.result != pb::start_task_response::Result::Success as i32 {
            return Err(DriverError::StartFailed {
                message: response.driver_error_msg,
                recoverable: response.result == pb::start_task_response::Result::Retry as i32,
            });
        }
        let plugin_handle = response.handle.ok_or_else(|| {
            DriverError::Other("the plugin started the task but returned no handle".into())
        })?;
        let handle = TaskHandle {
            version: u32::try_from(plugin_handle.version).unwrap_or(0),
            driver: self.shared.name.clone(),
            config: config.clone(),
            state: convert::handle_state(&plugin_handle),
        };
        self.remember(&handle);
        Ok(handle)
    }

    fn wait_task(
        &self,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Option<ExitResult>, DriverError> {
        let started = Instant::now();
        if timeout.is_zero() {
            // Only an exited task answers WaitTask at once; ask which it is first.
            let status = self.inspect_task(task_id)?;
            if status.state != drover_abi::TaskState::Exited {
                return Ok(None);
            }
        }
        let id = task_id.to_string();
        // An exited task answers at once, so it needs no deadline. Dropping the call at the
        // deadline resets its stream, which ends the plugin's wait too.
        let deadline = (!timeout.is_zero()).then_some(timeout);
        let waited = self.call("wait_task", task_id, true, None, move |c| {
            let request = pb::WaitTaskRequest {
                task_id: id.clone(),
            };
            async move {
                let mut d = c.driver.clone();
                let call = d.wait_task(request);
                let answer = match deadline {
                    Some(t) => match tokio::time::timeout(t, call).await {
                        Ok(answer) => answer,
                        Err(_) => return Ok(None),
                    },
                    None => call.await,
                };
                answer.map(|r| Some(r.into_inner()))
            }
        });
        match waited {
            Ok(r) => Ok(r.map(|r| convert::exit_result(r.result.as_ref(), &r.err))),
            Err(e @ DriverError::Other(_)) if self.shared.now().is_none() => {
                // The plugin is restarting: report "still running" once the wait is used up;
                // the task is recovered with the plugin.
                tracing::debug!(task = task_id, error = %e, "waiting through a plugin restart");
                let _ = self
                    .shared
                    .current(timeout.saturating_sub(started.elapsed()));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn stop_task(&self, task_id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        let request = pb::StopTaskRequest {
            task_id: task_id.to_string(),
            timeout: Some(convert::duration(timeout)),
            signal: signal.to_string(),
        };
        self.call("stop_task", task_id, true, None, move |c| {
            let request = request.clone();
            async move {
                let mut d = c.driver.clone();
                d.stop_task(request).await
            }
        })
        .map(drop)
    }

    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        let request = pb::DestroyTaskRequest {
            task_id: task_id.to_string(),
            force,
        };
        let result = self.call("destroy_task", task_id, true, Some(QUICK_CALL), move |c| {
            let request = request.clone();
            async move {
                let mut d = c.driver.clone();
                d.destroy_task(request).await
            }
        });
        if matches!(result, Ok(_) | Err(DriverError::TaskNotFound(_))) {
            self.forget(task_id);
        }
        result.map(drop)
    }

    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError> {
        let id = task_id.to_string();
        let r = self.call("inspect_task", task_id, true, Some(QUICK_CALL), move |c| {
            let request = pb::InspectTaskRequest {
                task_id: id.clone(),
            };
            async move {
                let mut d = c.driver.clone();
                d.inspect_task(request).await
            }
        })?;
        let task = r
            .into_inner()
            .task
            .ok_or_else(|| DriverError::Other("InspectTask answered without a task".into()))?;
        Ok(convert::task_status(&task))
    }

    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        let request = pb::RecoverTaskRequest {
            task_id: handle.config.id.clone(),
            handle: Some(convert::plugin_handle(&handle.state)?),
        };
        self.call(
            "recover_task",
            &handle.config.id,
            true,
            Some(QUICK_CALL),
            move |c| {
                let request = request.clone();
                async move {
                    let mut d = c.driver.clone();
                    d.recover_task(request).await
                }
            },
        )?;
        self.remember(handle);
        Ok(())
    }

    fn signal_task(&self, task_id: &str, signal: &str) -> Result<(), DriverError> {
        let request = pb::SignalTaskRequest {
            task_id: task_id.to_string(),
            signal: signal.to_string(),
        };
        self.call("signal_task", task_id, true, Some(QUICK_CALL), move |c| {
            let request = request.clone();
            async move {
                let mut d = c.driver.clone();
                d.signal_task(request).await
            }
        })
        .map(drop)
    }

    /// The first sample of a TaskStats stream.
    fn task_stats(&self, task_id: &str) -> Result<TaskResourceUsage, DriverError> {
        let request = pb::TaskStatsRequest {
            task_id: task_id.to_string(),
            collection_interval: Some(convert::duration(Duration::from_secs(1))),
        };
        let first = self.call("task_stats", task_id, true, Some(QUICK_CALL), move |c| {
            let request = request.clone();
            async move {
                let mut d = c.driver.clone();
                let mut stream = d.task_stats(request).await?.into_inner();
                stream
                    .message()
                    .await?
                    .ok_or_else(|| Status::unknown("the stats stream ended without a sample"))
            }
        })?;
        Ok(convert::usage(first.stats.as_ref()))
    }

    /// The events the plugin streamed (also across its restarts): waits up to `max_wait` for
    /// one, then takes every one waiting. Calls take turns: one caller is expected.
    fn task_events(&self, max_wait: Duration) -> Result<Vec<DriverTaskEvent>, DriverError> {
        let events = lock(&self.task_events);
        let first = match events.recv_timeout(max_wait) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => return Ok(Vec::new()),
            // The hub lives as long as `shared`, which this object holds.
            Err(RecvTimeoutError::Disconnected) => {
                return Err(DriverError::Other(format!(
                    "plugin {}: its task events are no longer followed",
                    self.shared.name
                )));
            }
        };
        Ok(std::iter::once(first)
            .chain(events.try_iter())
            .map(DriverTaskEvent::from)
            .collect())
    }

    /// Nomad's ExecTaskStreaming, relayed to `stream` (see `exec_relay`). A plugin that does
    /// not implement it answers `NotSupported`: unlike [`GrpcDriver::exec_streaming`], no
    /// one-shot fallback, since the caller expects a command that reads its stdin.
    fn exec_task_streaming(
        &self,
        task_id: &str,
        options: &ExecOptions,
        stream: &dyn ExecStream,
    ) -> Result<ExitResult, DriverError> {
        let (conn, _) = self.shared.current(RECONNECT_WAIT)?;
        let session =
            ExecSession::start(conn.driver, task_id, &options.command, options.tty, false)?;
        super::exec_relay::relay(session, stream).map_err(|e| match e {
            DriverError::NotSupported(_) => DriverError::NotSupported("exec_task_streaming".into()),
            other => other,
        })
    }

    /// ExecTask, the contract's one-shot form; a plugin that only implements
    /// ExecTaskStreaming gets the command that way, its output gathered up to `timeout`.
    fn exec_task(
        &self,
        task_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        let request = pb::ExecTaskRequest {
            task_id: task_id.to_string(),
            command: command.to_vec(),
            timeout: Some(convert::duration(timeout)),
        };
        let answered = self.call("exec_task", task_id, false, None, move |c| {
            let request = request.clone();
            async move {
                let mut d = c.driver.clone();
                match d.exec_task(request).await {
                    // Kept apart from the other failures: the stream may still work.
                    Err(s) if exec::unsupported(&s) => Ok(None),
                    answer => answer.map(|r| Some(r.into_inner())),
                }
            }
        })?;
        match answered {
            Some(r) => Ok(ExecOutput {
                stdout: r.stdout,
                stderr: r.stderr,
                exit_code: r.result.map_or(0, |e| e.exit_code),
            }),
            None => {
                let (conn, _) = self.shared.current(RECONNECT_WAIT)?;
                let session = ExecSession::start(conn.driver, task_id, command, false, false)?;
                exec::collect(session, timeout).map_err(|e| match e {
                    DriverError::NotSupported(_) => DriverError::NotSupported("exec_task".into()),
                    other => other,
                })
            }
        }
    }
}
