//! `Driver::exec_task_streaming` across the in-process ABI, through `DriverFfi::call` (no
//! layout change): the plugin runs the driver's exec on a thread of its own as a numbered
//! session, and the host drives it with four calls (start, input, output, close), all JSON.
//! A plugin built before these names answers `NotSupported` to the first one.
//!
//! The host pumps the caller's input into the session from one thread and polls the session's
//! output (each poll waits up to [`OUTPUT_POLL`] in the plugin) from the calling thread, until
//! the exit arrives. A caller that is gone closes the session: the driver then sees
//! [`ExecRecv::Gone`] and ends the command.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use drover_abi::{
    CallerGone, Driver, DriverError, ExecInput, ExecOptions, ExecRecv, ExecStream,
    ExecStreamOutput, ExitResult,
};
use serde::{Deserialize, Serialize};

use crate::wire::{WireError, duration_to_nanos, extension, nanos_to_duration};

/// How long one output call waits in the plugin for something to report.
pub const OUTPUT_POLL: Duration = Duration::from_millis(250);
/// How long the host's input pump waits for the caller before it checks the session ended.
const INPUT_POLL: Duration = Duration::from_millis(100);
/// Output pieces handed over by one output call at most (the rest waits for the next).
const MAX_OUTPUTS_PER_CALL: usize = 256;

/// Arguments of `exec_streaming_start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecStartArgs {
    pub task_id: String,
    pub options: ExecOptions,
}

/// Answer of `exec_streaming_start`, and the arguments naming a session afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecSessionId {
    pub session: u64,
}

/// Arguments of `exec_streaming_input`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecInputArgs {
    pub session: u64,
    pub inputs: Vec<ExecInput>,
}

/// Arguments of `exec_streaming_output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutputArgs {
    pub session: u64,
    pub max_wait_nanos: u64,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecEnd {
    Exited(ExitResult),
    Failed(WireError),
}

/// Answer of `exec_streaming_output`: output in order, then (once) the end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutputReply {
    pub outputs: Vec<ExecStreamOutput>,
    pub end: Option<ExecEnd>,
}

// ---- plugin side ----

enum Event {
    Output(ExecStreamOutput),
    End(Result<ExitResult, DriverError>),
}

/// The driver's view of a session: input from the host's calls, output to its polls.
struct SessionStream {
    input: Mutex<Receiver<ExecInput>>,
    events: Sender<Event>,
}

impl ExecStream for SessionStream {
    fn recv(&self, timeout: Duration) -> ExecRecv {
        let input = self.input.lock().unwrap_or_else(PoisonError::into_inner);
        match input.recv_timeout(timeout) {
            Ok(message) => ExecRecv::Input(message),
            Err(RecvTimeoutError::Timeout) => ExecRecv::Timeout,
            Err(RecvTimeoutError::Disconnected) => ExecRecv::Gone,
        }
    }

    fn send(&self, output: ExecStreamOutput) -> Result<(), CallerGone> {
        self.events
            .send(Event::Output(output))
            .map_err(|_| CallerGone)
    }
}

/// The host's handles of one running session.
struct Session {
    input: Sender<ExecInput>,
    /// Taken by the output call that waits on it, so that input calls never wait behind one.
    events: Arc<Mutex<Receiver<Event>>>,
}

/// A plugin's running exec sessions.
#[derive(Default)]
pub(crate) struct ExecSessions {
    next: AtomicU64,
    sessions: Mutex<HashMap<u64, Session>>,
}

fn unknown_session(session: u64) -> DriverError {
    DriverError::Other(format!("exec session {session} is not running"))
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, DriverError> {
    serde_json::from_str(text)
        .map_err(|e| DriverError::Other(format!("decoding the {what} arguments: {e}")))
}

fn encode(what: &str, value: &impl Serialize) -> Result<String, DriverError> {
    serde_json::to_string(value)
        .map_err(|e| DriverError::Other(format!("encoding the {what} result: {e}")))
}

impl ExecSessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers one of the exec extension calls; `None` when `method` is not one of them.
    pub(crate) fn call<D: Driver + ?Sized + 'static>(
        &self,
        driver: &Arc<D>,
        method: &str,
        args: &str,
    ) -> Option<Result<String, DriverError>> {
        Some(match method {
            extension::EXEC_STREAMING_START => decode(method, args)
                .and_then(|a| self.start(Arc::clone(driver), a))
                .and_then(|id| encode(method, &id)),
            extension::EXEC_STREAMING_INPUT => decode(method, args)
                .and_then(|a| self.input(a))
                .and_then(|()| encode(method, &())),
            extension::EXEC_STREAMING_OUTPUT => decode(method, args)
                .and_then(|a| self.output(a))
                .and_then(|reply| encode(method, &reply)),
            extension::EXEC_STREAMING_CLOSE => decode(method, args)
                .map(|a: ExecSessionId| self.close(a.session))
                .and_then(|()| encode(method, &())),
            _ => return None,
        })
    }

    fn start<D: Driver + ?Sized + 'static>(
        &self,
        driver: Arc<D>,
        args: ExecStartArgs,
    ) -> Result<ExecSessionId, DriverError> {
        let session = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (input_tx, input_rx) = std::sync::mpsc::channel();
        let (events_tx, events_rx) = std::sync::mpsc::channel();
        let stream = SessionStream {
            input: Mutex::new(input_rx),
            events: events_tx.clone(),
        };
        std::thread::Builder::new()
            .name(format!("exec-session-{session}"))
            .spawn(move || {
                let ran = catch_unwind(AssertUnwindSafe(|| {
                    driver.exec_task_streaming(&args.task_id, &args.options, &stream)
                }));
                let end = ran.unwrap_or_else(|payload| {
                    Err(DriverError::Other(format!(
                        "plugin panicked in exec_task_streaming: {}",
                        crate::plugin::panic_message(payload.as_ref())
                    )))
                });
                // Nobody listens once the host closed the session; nothing to report then.
                let _ = events_tx.send(Event::End(end));
            })
            .map_err(|e| DriverError::Other(format!("starting the exec session: {e}")))?;
        self.lock().insert(
            session,
            Session {
                input: input_tx,
                events: Arc::new(Mutex::new(events_rx)),
            },
        );
        Ok(ExecSessionId { session })
    }

    fn input(&self, args: ExecInputArgs) -> Result<(), DriverError> {
        let sessions = self.lock();
        let session = sessions
            .get(&args.session)
            .ok_or_else(|| unknown_session(args.session))?;
        for input in args.inputs {
            session
                .input
                .send(input)
                .map_err(|_| unknown_session(args.session))?;
        }
        Ok(())
    }

    fn output(&self, args: ExecOutputArgs) -> Result<ExecOutputReply, DriverError> {
        let events = self
            .lock()
            .get(&args.session)
            .map(|s| Arc::clone(&s.events))
            .ok_or_else(|| unknown_session(args.session))?;
        let events = events.lock().unwrap_or_else(PoisonError::into_inner);
        let mut reply = ExecOutputReply::default();
        let first = match events.recv_timeout(nanos_to_duration(args.max_wait_nanos)) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => return Ok(reply),
            // The thread always sends the end before it lets go of its sender.
            Err(RecvTimeoutError::Disconnected) => return Err(unknown_session(args.session)),
        };
        let mut next = Some(first);
        while let Some(event) = next.take() {
            match event {
                Event::Output(o) => reply.outputs.push(o),
                Event::End(end) => {
                    reply.end = Some(match end {
                        Ok(exit) => ExecEnd::Exited(exit),
                        Err(e) => ExecEnd::Failed(WireError::from(&e)),
                    });
                    break;
                }
            }
            if reply.outputs.len() < MAX_OUTPUTS_PER_CALL {
                next = events.try_recv().ok();
            }
        }
        drop(events);
        if reply.end.is_some() {
            self.lock().remove(&args.session);
        }
        Ok(reply)
    }

    /// Forgets the session: the driver sees the caller gone. Closing an ended session is fine.
    fn close(&self, session: u64) {
        self.lock().remove(&session);
    }
}

// ---- host side ----

/// What the host needs of a plugin driver: its extension calls.
pub(crate) trait ExtensionCall: Sync {
    fn call_extension(&self, method: &str, args_json: &str) -> Result<String, DriverError>;
    fn plugin_name(&self) -> &str;
}

fn json(value: &impl Serialize) -> Result<String, DriverError> {
    serde_json::to_string(value)
        .map_err(|e| DriverError::Other(format!("encoding for the plugin: {e}")))
}

/// The host's `exec_task_streaming` over a plugin's session calls.
pub(crate) fn exec_task_streaming(
    plugin: &dyn ExtensionCall,
    task_id: &str,
    options: &ExecOptions,
    stream: &dyn ExecStream,
) -> Result<ExitResult, DriverError> {
    let start = json(&ExecStartArgs {
        task_id: task_id.to_string(),
        options: options.clone(),
    })?;
    let id: ExecSessionId = match plugin.call_extension(extension::EXEC_STREAMING_START, &start) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            DriverError::Other(format!(
                "plugin {}: malformed exec_streaming_start result: {e}",
                plugin.plugin_name()
            ))
        })?,
        Err(DriverError::NotSupported(_)) => {
            return Err(DriverError::NotSupported("exec_task_streaming".into()));
        }
        Err(e) => return Err(e),
    };
    let close = || {
        if let Ok(args) = json(&id) {
            let _ = plugin.call_extension(extension::EXEC_STREAMING_CLOSE, &args);
        }
    };
    let gone = AtomicBool::new(false);
    let close = || {
        gone.store(true, Ordering::Relaxed);
        close();
    };
    let ended = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| pump_input(plugin, id.session, stream, &ended, &close));
        let result = poll_output(plugin, id.session, stream, &close).map_err(|e| {
            if gone.load(Ordering::Relaxed) {
                DriverError::Other("the exec caller is gone".into())
            } else {
                e
            }
        });
        ended.store(true, Ordering::Relaxed);
        result
    })
}

/// Passes the caller's input on until the session ends or the caller leaves.
fn pump_input(
    plugin: &dyn ExtensionCall,
    session: u64,
    stream: &dyn ExecStream,
    ended: &AtomicBool,
    close: &dyn Fn(),
) {
    while !ended.load(Ordering::Relaxed) {
        match stream.recv(INPUT_POLL) {
            ExecRecv::Input(input) => {
                let Ok(args) = json(&ExecInputArgs {
                    session,
                    inputs: vec![input],
                }) else {
                    return;
                };
                // Fails only once the session ended; the output side reports how.
                if plugin
                    .call_extension(extension::EXEC_STREAMING_INPUT, &args)
                    .is_err()
                {
                    return;
                }
            }
            ExecRecv::Timeout => {}
            ExecRecv::Gone => {
                close();
                return;
            }
        }
    }
}

/// Hands the session's output to the caller until its end.
fn poll_output(
    plugin: &dyn ExtensionCall,
    session: u64,
    stream: &dyn ExecStream,
    close: &dyn Fn(),
) -> Result<ExitResult, DriverError> {
    let args = json(&ExecOutputArgs {
        session,
        max_wait_nanos: duration_to_nanos(OUTPUT_POLL),
    })?;
    let mut caller_gone = false;
    loop {
        let text = plugin.call_extension(extension::EXEC_STREAMING_OUTPUT, &args)?;
        let reply: ExecOutputReply = serde_json::from_str(&text).map_err(|e| {
            DriverError::Other(format!(
                "plugin {}: malformed exec_streaming_output result: {e}",
                plugin.plugin_name()
            ))
        })?;
        for output in reply.outputs {
            if !caller_gone && stream.send(output).is_err() {
                // The driver ends the command once the session is closed; its end follows.
                caller_gone = true;
                close();
            }
        }
        match reply.end {
            Some(ExecEnd::Exited(exit)) => return Ok(exit),
            Some(ExecEnd::Failed(e)) => return Err(e.into()),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use drover_abi::{
        Capabilities, ChannelExecStream, Fingerprint, FsIsolation, HealthState, PluginInfo,
        TaskConfig, TaskHandle, TaskStatus, TerminalSize,
    };

    use super::*;
    use crate::host::FfiDriver;
    use crate::plugin::DriverShim;

    /// Echoes stdin upper-cased on stdout and resizes on stderr; exits 7 when stdin closes.
    /// Records whether it saw its caller leave.
    #[derive(Default)]
    struct Echo {
        saw_gone: Arc<AtomicBool>,
        streams: bool,
    }

    impl Driver for Echo {
        fn plugin_info(&self) -> PluginInfo {
            PluginInfo {
                name: "echo".into(),
                plugin_version: "0".into(),
                api_version: drover_abi::DRIVER_API_VERSION.into(),
            }
        }
        fn set_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
            Ok(())
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                send_signals: false,
                exec: true,
                fs_isolation: FsIsolation::None,
                network_isolation: false,
                group_network: false,
                mount_configs: false,
            }
        }
        fn fingerprint(&self) -> Fingerprint {
            Fingerprint {
                health: HealthState::Healthy,
                health_description: String::new(),
                attributes: Default::default(),
            }
        }
        fn validate_task_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
            Ok(())
        }
        fn start_task(&self, _: &TaskConfig) -> Result<TaskHandle, DriverError> {
            Err(DriverError::NotSupported("start_task".into()))
        }
        fn wait_task(&self, id: &str, _: Duration) -> Result<Option<ExitResult>, DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn stop_task(&self, id: &str, _: Duration, _: &str) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn destroy_task(&self, id: &str, _: bool) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn recover_task(&self, _: &TaskHandle) -> Result<(), DriverError> {
            Ok(())
        }
        fn exec_task_streaming(
            &self,
            task_id: &str,
            options: &ExecOptions,
            stream: &dyn ExecStream,
        ) -> Result<ExitResult, DriverError> {
            if !self.streams {
                return Err(DriverError::NotSupported("exec_task_streaming".into()));
            }
            if task_id != "t1" {
                return Err(DriverError::TaskNotFound(task_id.into()));
            }
            if options.command.first().map(String::as_str) == Some("panic") {
                panic!("exec exploded");
            }
            loop {
                match stream.recv(Duration::from_secs(5)) {
                    ExecRecv::Input(ExecInput::Stdin(data)) => {
                        let _ = stream.send(ExecStreamOutput::Stdout(data.to_ascii_uppercase()));
                    }
                    ExecRecv::Input(ExecInput::Resize(size)) => {
                        let text = format!("{}x{}", size.width, size.height);
                        let _ = stream.send(ExecStreamOutput::Stderr(text.into_bytes()));
                    }
                    ExecRecv::Input(ExecInput::CloseStdin) => {
                        return Ok(ExitResult {
                            exit_code: 7,
                            ..Default::default()
                        });
                    }
                    ExecRecv::Timeout => {}
                    ExecRecv::Gone => {
                        self.saw_gone.store(true, Ordering::Relaxed);
                        return Err(DriverError::Other("killed".into()));
                    }
                }
            }
        }
    }

    fn host(driver: Echo) -> FfiDriver {
        FfiDriver::new(DriverShim::new(driver).into_ffi_box()).unwrap()
    }

    fn options(command: &str) -> ExecOptions {
        ExecOptions {
            command: vec![command.to_string()],
            tty: true,
        }
    }

    #[test]
    fn an_exec_crosses_the_abi_with_its_input_output_and_exit() {
        let d = host(Echo {
            streams: true,
            ..Default::default()
        });
        let (stream, caller) = ChannelExecStream::new();
        for input in [
            ExecInput::Stdin(b"hello".to_vec()),
            ExecInput::Resize(TerminalSize {
                height: 24,
                width: 80,
            }),
            ExecInput::CloseStdin,
        ] {
            caller.input.send(input).unwrap();
        }
        let exit = d
            .exec_task_streaming("t1", &options("sh"), &stream)
            .unwrap();
        assert_eq!(exit.exit_code, 7);
        let got: Vec<ExecStreamOutput> = caller.output.try_iter().collect();
        assert_eq!(
            got,
            vec![
                ExecStreamOutput::Stdout(b"HELLO".to_vec()),
                ExecStreamOutput::Stderr(b"80x24".to_vec()),
            ]
        );
    }

    #[test]
    fn a_caller_that_leaves_ends_the_drivers_exec() {
        let saw_gone = Arc::new(AtomicBool::new(false));
        let d = host(Echo {
            streams: true,
            saw_gone: Arc::clone(&saw_gone),
        });
        let (stream, caller) = ChannelExecStream::new();
        drop(caller.input);
        let e = d
            .exec_task_streaming("t1", &options("sh"), &stream)
            .unwrap_err();
        assert!(matches!(e, DriverError::Other(_)), "{e:?}");
        // The plugin's session thread sees the close shortly after.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !saw_gone.load(Ordering::Relaxed) {
            assert!(
                std::time::Instant::now() < deadline,
                "the driver never saw Gone"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn errors_and_panics_of_the_drivers_exec_come_back_as_errors() {
        let d = host(Echo {
            streams: true,
            ..Default::default()
        });
        let (stream, _caller) = ChannelExecStream::new();
        assert_eq!(
            d.exec_task_streaming("nope", &options("sh"), &stream),
            Err(DriverError::TaskNotFound("nope".into()))
        );
        match d.exec_task_streaming("t1", &options("panic"), &stream) {
            Err(DriverError::Other(m)) => assert!(m.contains("exec exploded"), "{m}"),
            other => panic!("expected the panic as an error, got {other:?}"),
        }
    }

    #[test]
    fn a_driver_without_streaming_exec_is_not_supported_across_the_abi() {
        let d = host(Echo::default());
        let (stream, _caller) = ChannelExecStream::new();
        assert_eq!(
            d.exec_task_streaming("t1", &options("sh"), &stream),
            Err(DriverError::NotSupported("exec_task_streaming".into()))
        );
    }
}
