//! Nomad's ExecTaskStreaming served over the contract's `exec_task_streaming`: the caller's
//! stdin, stdin close and terminal sizes reach the driver as they arrive, its output goes out
//! in pieces, then both streams' close markers and the exit, as Nomad's plugins end an exec
//! stream. A caller that cancels the call is gone for the driver, which ends the command; a
//! caller that only ends its request stream keeps the command running.
//!
//! A driver without `exec_task_streaming` (it answers `NotSupported`) gets the command through
//! `exec_task`: it runs to its end without stdin, and its output goes out whole.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use drover_abi::{
    CallerGone, Driver, DriverError, ExecInput, ExecOptions, ExecRecv, ExecStream,
    ExecStreamOutput, TerminalSize,
};
use drover_plugin_proto::drivers as pb;
use tokio::sync::mpsc::Sender;
use tonic::{Status, Streaming};

use super::convert;

/// Answers buffered for a slow caller before the driver's sends wait.
const OUTPUT_BUFFER: usize = 64;

type Answer = Result<pb::ExecTaskStreamingResponse, Status>;

/// The driver's view of the call.
struct CallStream {
    input: Mutex<std::sync::mpsc::Receiver<ExecInput>>,
    output: Sender<Answer>,
}

impl ExecStream for CallStream {
    fn recv(&self, timeout: Duration) -> ExecRecv {
        let input = self
            .input
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match input.recv_timeout(timeout) {
            Ok(message) => ExecRecv::Input(message),
            Err(RecvTimeoutError::Timeout) => ExecRecv::Timeout,
            Err(RecvTimeoutError::Disconnected) => ExecRecv::Gone,
        }
    }

    fn send(&self, output: ExecStreamOutput) -> Result<(), CallerGone> {
        let io = |data| Some(pb::ExecTaskStreamingIoOperation { data, close: false });
        let message = match output {
            ExecStreamOutput::Stdout(data) => pb::ExecTaskStreamingResponse {
                stdout: io(data),
                ..Default::default()
            },
            ExecStreamOutput::Stderr(data) => pb::ExecTaskStreamingResponse {
                stderr: io(data),
                ..Default::default()
            },
        };
        self.output
            .blocking_send(Ok(message))
            .map_err(|_| CallerGone)
    }
}

/// The inputs one request carries; a heartbeat carries none.
fn inputs_of(request: pb::ExecTaskStreamingRequest) -> Vec<ExecInput> {
    let mut inputs = Vec::new();
    if let Some(stdin) = request.stdin {
        if !stdin.data.is_empty() {
            inputs.push(ExecInput::Stdin(stdin.data));
        }
        if stdin.close {
            inputs.push(ExecInput::CloseStdin);
        }
    }
    if let Some(size) = request.tty_size {
        let clamp = |v: i32| u16::try_from(v.max(0)).unwrap_or(u16::MAX);
        inputs.push(ExecInput::Resize(TerminalSize {
            height: clamp(size.height),
            width: clamp(size.width),
        }));
    }
    inputs
}

/// The messages that end a stream after the command exited.
fn ending(exit: &drover_abi::ExitResult) -> [pb::ExecTaskStreamingResponse; 3] {
    let closed = || {
        Some(pb::ExecTaskStreamingIoOperation {
            data: Vec::new(),
            close: true,
        })
    };
    [
        pb::ExecTaskStreamingResponse {
            stdout: closed(),
            ..Default::default()
        },
        pb::ExecTaskStreamingResponse {
            stderr: closed(),
            ..Default::default()
        },
        pb::ExecTaskStreamingResponse {
            exited: true,
            result: Some(convert::exit_result(exit)),
            ..Default::default()
        },
    ]
}

/// Serves one ExecTaskStreaming call whose setup was read; returns the answer stream's
/// receiving end.
pub fn serve(
    driver: Arc<dyn Driver>,
    setup: pb::exec_task_streaming_request::Setup,
    mut inbound: Streaming<pb::ExecTaskStreamingRequest>,
    exec_without_limit: Duration,
) -> tokio::sync::mpsc::Receiver<Answer> {
    let (input_tx, input_rx) = std::sync::mpsc::channel();
    let (output_tx, output_rx) = tokio::sync::mpsc::channel(OUTPUT_BUFFER);
    let answers = output_tx.clone();
    tokio::spawn(async move {
        loop {
            match inbound.message().await {
                Ok(Some(request)) => {
                    for input in inputs_of(request) {
                        // The driver returned; what is left to read does not matter.
                        let _ = input_tx.send(input);
                    }
                }
                // The caller sends nothing more but still listens: keep the input open until
                // it stops listening or the exec ends.
                Ok(None) => {
                    answers.closed().await;
                    return;
                }
                // Cancelled: dropping the input tells the driver the caller is gone.
                Err(_) => return,
            }
        }
    });
    let stream = CallStream {
        input: Mutex::new(input_rx),
        output: output_tx.clone(),
    };
    tokio::task::spawn_blocking(move || {
        let options = ExecOptions {
            command: setup.command.clone(),
            tty: setup.tty,
        };
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            driver.exec_task_streaming(&setup.task_id, &options, &stream)
        }));
        drop(stream);
        let messages: Vec<Answer> = match ran {
            Ok(Ok(exit)) => ending(&exit).into_iter().map(Ok).collect(),
            Ok(Err(DriverError::NotSupported(_))) => {
                match driver.exec_task(&setup.task_id, &setup.command, exec_without_limit) {
                    Ok(out) => convert::exec_stream_messages(&out)
                        .into_iter()
                        .map(Ok)
                        .collect(),
                    Err(e) => vec![Err(convert::status(e))],
                }
            }
            Ok(Err(e)) => vec![Err(convert::status(e))],
            Err(_) => vec![Err(Status::internal(
                "the driver panicked in exec_task_streaming",
            ))],
        };
        for message in messages {
            if output_tx.blocking_send(message).is_err() {
                return;
            }
        }
    });
    output_rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_become_stdin_close_and_resize_and_heartbeats_nothing() {
        let request = pb::ExecTaskStreamingRequest {
            stdin: Some(pb::ExecTaskStreamingIoOperation {
                data: b"ls\n".to_vec(),
                close: true,
            }),
            tty_size: Some(pb::exec_task_streaming_request::TerminalSize {
                height: 24,
                width: 80,
            }),
            ..Default::default()
        };
        assert_eq!(
            inputs_of(request),
            vec![
                ExecInput::Stdin(b"ls\n".to_vec()),
                ExecInput::CloseStdin,
                ExecInput::Resize(TerminalSize {
                    height: 24,
                    width: 80
                }),
            ]
        );
        assert!(inputs_of(pb::ExecTaskStreamingRequest::default()).is_empty());
    }

    #[test]
    fn a_stream_ends_with_both_closes_then_the_exit() {
        let exit = drover_abi::ExitResult {
            exit_code: 3,
            ..Default::default()
        };
        let [out, err, exited] = ending(&exit);
        assert!(out.stdout.is_some_and(|o| o.close));
        assert!(err.stderr.is_some_and(|o| o.close));
        assert!(exited.exited);
        assert_eq!(exited.result.map(|r| r.exit_code), Some(3));
    }
}
