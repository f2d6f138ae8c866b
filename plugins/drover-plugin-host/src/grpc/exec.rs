//! Exec over the plugin protocol. [`ExecSession`] is an interactive exec over Nomad's
//! bidirectional ExecTaskStreaming (stdin and terminal size in, output pieces and the exit
//! out); for a plugin that does not stream, it runs the command once with ExecTask instead and
//! hands its whole output over. [`collect`] turns a session into the contract's `ExecOutput`.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use drover_abi::{DriverError, ExecOutput, ExitResult};
use drover_plugin_proto::drivers::{self as pb, driver_client::DriverClient};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::convert;

/// What an exec reports, in the order it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The command ended; nothing follows.
    Exited(ExitResult),
}

/// One command running in a task through the plugin. Dropping it ends the call (the plugin
/// sees it cancelled).
pub struct ExecSession {
    /// `None` once stdin is closed.
    input: Option<UnboundedSender<pb::ExecTaskStreamingRequest>>,
    events: Receiver<Result<ExecEvent, DriverError>>,
    call: tokio::task::AbortHandle,
}

impl Drop for ExecSession {
    fn drop(&mut self) {
        self.call.abort();
    }
}

/// The input side of a session, for a thread of its own (see [`ExecSession::input`]).
#[derive(Clone)]
pub struct ExecInputs(UnboundedSender<pb::ExecTaskStreamingRequest>);

impl ExecInputs {
    fn send(&self, request: pb::ExecTaskStreamingRequest) -> Result<(), DriverError> {
        self.0
            .send(request)
            .map_err(|_| DriverError::Other("the exec session no longer takes input".into()))
    }

    pub fn write_stdin(&self, data: &[u8]) -> Result<(), DriverError> {
        self.send(stdin_request(data, false))
    }

    /// Tells the command its stdin ended (the call itself stays open).
    pub fn close_stdin(&self) -> Result<(), DriverError> {
        self.send(stdin_request(&[], true))
    }

    pub fn resize(&self, height: i32, width: i32) -> Result<(), DriverError> {
        self.send(resize_request(height, width))
    }
}

fn stdin_request(data: &[u8], close: bool) -> pb::ExecTaskStreamingRequest {
    pb::ExecTaskStreamingRequest {
        stdin: Some(pb::ExecTaskStreamingIoOperation {
            data: data.to_vec(),
            close,
        }),
        ..Default::default()
    }
}

fn resize_request(height: i32, width: i32) -> pb::ExecTaskStreamingRequest {
    pb::ExecTaskStreamingRequest {
        tty_size: Some(pb::exec_task_streaming_request::TerminalSize { height, width }),
        ..Default::default()
    }
}

/// Whether a plugin's answer means it does not implement the exec RPC it was asked (tonic's
/// Unimplemented, or the texts Nomad's Go plugins answer with).
pub fn unsupported(s: &Status) -> bool {
    if s.code() == Code::Unimplemented {
        return true;
    }
    let message = s.message().to_ascii_lowercase();
    ["not supported", "does not support", "not implemented"]
        .iter()
        .any(|m| message.contains(m))
}

impl ExecSession {
    /// Starts `command` in task `task_id` on the plugin runtime. With `fallback`, a plugin that
    /// does not implement ExecTaskStreaming runs it with ExecTask (no stdin then).
    pub(crate) fn start(
        driver: DriverClient<Channel>,
        task_id: &str,
        command: &[String],
        tty: bool,
        fallback: bool,
    ) -> Result<ExecSession, DriverError> {
        let runtime = super::runtime::runtime().map_err(DriverError::Other)?;
        let (input, input_rx) = unbounded_channel();
        let (events_tx, events) = std::sync::mpsc::channel();
        let setup = pb::exec_task_streaming_request::Setup {
            task_id: task_id.to_string(),
            command: command.to_vec(),
            tty,
        };
        let first = pb::ExecTaskStreamingRequest {
            setup: Some(setup),
            ..Default::default()
        };
        let outbound = tokio_stream::once(first).chain(
            tokio_stream::wrappers::UnboundedReceiverStream::new(input_rx),
        );
        let task_id = task_id.to_string();
        let command = command.to_vec();
        let call = runtime.spawn(async move {
            let mut client = driver.clone();
            let failure = match client.exec_task_streaming(outbound).await {
                Ok(response) => match relay(response.into_inner(), &events_tx).await {
                    Ok(()) => return,
                    Err(s) => s,
                },
                Err(s) => s,
            };
            if fallback && unsupported(&failure) {
                exec_once(driver, task_id, command, &events_tx).await;
            } else {
                let _ = events_tx.send(Err(exec_error("exec_task_streaming", &task_id, failure)));
            }
        });
        Ok(ExecSession {
            input: Some(input),
            events,
            call: call.abort_handle(),
        })
    }

    /// A handle that sends stdin and terminal sizes, usable from another thread while this one
    /// waits for events; `None` once stdin was closed through [`ExecSession::close_stdin`].
    pub fn input(&self) -> Option<ExecInputs> {
        self.input.clone().map(ExecInputs)
    }

    fn send(&self, request: pb::ExecTaskStreamingRequest) -> Result<(), DriverError> {
        let ended = || DriverError::Other("the exec session no longer takes input".into());
        self.input
            .as_ref()
            .ok_or_else(ended)?
            .send(request)
            .map_err(|_| ended())
    }

    /// Sends bytes to the command's stdin.
    pub fn write_stdin(&self, data: &[u8]) -> Result<(), DriverError> {
        self.send(pb::ExecTaskStreamingRequest {
            stdin: Some(pb::ExecTaskStreamingIoOperation {
                data: data.to_vec(),
                close: false,
            }),
            ..Default::default()
        })
    }

    /// Closes the command's stdin (it reads end of file).
    pub fn close_stdin(&mut self) -> Result<(), DriverError> {
        let sent = self.send(pb::ExecTaskStreamingRequest {
            stdin: Some(pb::ExecTaskStreamingIoOperation {
                data: Vec::new(),
                close: true,
            }),
            ..Default::default()
        });
        self.input = None;
        sent
    }

    /// Tells the command's terminal its new size (with `tty`).
    pub fn resize(&self, height: i32, width: i32) -> Result<(), DriverError> {
        self.send(pb::ExecTaskStreamingRequest {
            tty_size: Some(pb::exec_task_streaming_request::TerminalSize { height, width }),
            ..Default::default()
        })
    }

    /// The next event, waiting up to `timeout`: `Ok(None)` when none came in time. After
    /// [`ExecEvent::Exited`] (or an error) the session is over and this returns an error.
    pub fn next(&self, timeout: Duration) -> Result<Option<ExecEvent>, DriverError> {
        match self.events.recv_timeout(timeout) {
            Ok(event) => event.map(Some),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                Err(DriverError::Other("the exec session has ended".into()))
            }
        }
    }
}

/// Passes the plugin's answers on until the exit. Fails with the stream's status (or a
/// made-up Unknown when it ended without an exit); a status before any answer may be the
/// plugin saying it does not stream.
async fn relay(
    mut stream: tonic::Streaming<pb::ExecTaskStreamingResponse>,
    events: &Sender<Result<ExecEvent, DriverError>>,
) -> Result<(), Status> {
    while let Some(message) = stream.message().await? {
        for event in events_of(message) {
            let exited = matches!(event, ExecEvent::Exited(_));
            if events.send(Ok(event)).is_err() || exited {
                // Nobody listens any more, or it is over: dropping the stream ends the call.
                return Ok(());
            }
        }
    }
    Err(Status::unknown(
        "the plugin ended the exec stream without the command's exit",
    ))
}

/// The events one ExecTaskStreaming answer carries (close markers carry nothing to report).
fn events_of(m: pb::ExecTaskStreamingResponse) -> Vec<ExecEvent> {
    let mut events = Vec::new();
    if let Some(out) = m.stdout.filter(|o| !o.data.is_empty()) {
        events.push(ExecEvent::Stdout(out.data));
    }
    if let Some(err) = m.stderr.filter(|o| !o.data.is_empty()) {
        events.push(ExecEvent::Stderr(err.data));
    }
    if m.exited {
        events.push(ExecEvent::Exited(convert::exit_result(
            m.result.as_ref(),
            "",
        )));
    }
    events
}

/// Runs the command with ExecTask (no time limit, as Nomad's zero timeout means) and reports
/// its output and exit as a session would.
async fn exec_once(
    mut driver: DriverClient<Channel>,
    task_id: String,
    command: Vec<String>,
    events: &Sender<Result<ExecEvent, DriverError>>,
) {
    let request = pb::ExecTaskRequest {
        task_id: task_id.clone(),
        command,
        timeout: Some(convert::duration(Duration::ZERO)),
    };
    let answer = match driver.exec_task(request).await {
        Ok(r) => r.into_inner(),
        Err(s) => {
            let _ = events.send(Err(exec_error("exec_task", &task_id, s)));
            return;
        }
    };
    let mut out = Vec::new();
    if !answer.stdout.is_empty() {
        out.push(ExecEvent::Stdout(answer.stdout));
    }
    if !answer.stderr.is_empty() {
        out.push(ExecEvent::Stderr(answer.stderr));
    }
    out.push(ExecEvent::Exited(convert::exit_result(
        answer.result.as_ref(),
        "",
    )));
    for event in out {
        if events.send(Ok(event)).is_err() {
            return;
        }
    }
}

/// An exec RPC's failure as a driver error; "not supported" texts become NotSupported.
pub fn exec_error(method: &str, task_id: &str, s: Status) -> DriverError {
    if unsupported(&s) {
        DriverError::NotSupported(method.to_string())
    } else {
        convert::driver_error(method, task_id, s)
    }
}

/// Gathers a session's output until the command exits, for the contract's `exec_task`. Past
/// `timeout` the session is dropped (which ends the call) and an error returned.
pub fn collect(session: ExecSession, timeout: Duration) -> Result<ExecOutput, DriverError> {
    let deadline = Instant::now() + timeout;
    let mut out = ExecOutput::default();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(DriverError::Other(format!(
                "exec timed out after {timeout:?}"
            )));
        }
        match session.next(left)? {
            Some(ExecEvent::Stdout(data)) => out.stdout.extend(data),
            Some(ExecEvent::Stderr(data)) => out.stderr.extend(data),
            Some(ExecEvent::Exited(exit)) => {
                out.exit_code = exit.exit_code;
                return Ok(out);
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_plugins_texts_and_unimplemented_mean_unsupported() {
        assert!(unsupported(&Status::unimplemented("x")));
        assert!(unsupported(&Status::unknown(
            "driver does not support exec"
        )));
        assert!(unsupported(&Status::unknown("Exec not implemented")));
        assert!(!unsupported(&Status::unknown("task not found")));
        assert_eq!(
            exec_error("exec_task", "t", Status::unknown("exec is not supported")),
            DriverError::NotSupported("exec_task".into())
        );
    }

    #[test]
    fn an_answer_yields_its_output_then_the_exit_and_close_markers_yield_nothing() {
        let io = |data: &[u8], close| {
            Some(pb::ExecTaskStreamingIoOperation {
                data: data.to_vec(),
                close,
            })
        };
        let m = pb::ExecTaskStreamingResponse {
            stdout: io(b"out", false),
            stderr: io(b"err", false),
            exited: true,
            result: Some(pb::ExitResult {
                exit_code: 2,
                ..Default::default()
            }),
        };
        assert_eq!(
            events_of(m),
            vec![
                ExecEvent::Stdout(b"out".to_vec()),
                ExecEvent::Stderr(b"err".to_vec()),
                ExecEvent::Exited(ExitResult {
                    exit_code: 2,
                    ..Default::default()
                }),
            ]
        );
        let closed = pb::ExecTaskStreamingResponse {
            stdout: io(b"", true),
            ..Default::default()
        };
        assert!(events_of(closed).is_empty());
    }
}
