//! Interactive exec (Nomad's `ExecTaskStreaming`): a command started inside a running task,
//! with stdin, terminal size changes and output streamed while it runs, and its exit at the end.
//!
//! The contract stays blocking: the driver gets an [`ExecStream`] and calls it from threads of
//! its own. `recv` hands over what the caller sends (Nomad's `ExecTaskStreamingRequestMsg`),
//! `send` passes output on (Nomad's `ExecTaskStreamingResponseMsg` with stdout or stderr); the
//! driver's return value is the exit (the message with `exited`). Hosts of every kind (the
//! client's websocket, the cdylib ABI, the gRPC sidecar protocol) implement the stream over
//! their own transport.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A terminal's size in characters (Nomad's `TerminalSize`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    /// Rows.
    pub height: u16,
    /// Columns.
    pub width: u16,
}

/// What to run (Nomad's `ExecOptions` without its streams).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOptions {
    /// Program and arguments; resolved as the task resolves its own command.
    pub command: Vec<String>,
    /// Run the command on a new pseudo-terminal (stdout and stderr are then one stream).
    pub tty: bool,
}

/// One message from the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecInput {
    /// Bytes for the command's stdin.
    Stdin(Vec<u8>),
    /// The caller sends no more stdin: the command reads end of file (on a terminal: the
    /// terminal's end-of-file character).
    CloseStdin,
    /// The caller's terminal changed size (meaningful with `tty`).
    Resize(TerminalSize),
}

/// One piece of the command's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecStreamOutput {
    /// Bytes the command wrote to its stdout.
    Stdout(Vec<u8>),
    /// Bytes the command wrote to its stderr.
    Stderr(Vec<u8>),
}

/// What [`ExecStream::recv`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecRecv {
    /// Something from the caller.
    Input(ExecInput),
    /// Nothing came in time; ask again.
    Timeout,
    /// The caller is gone: the driver ends the command and returns.
    Gone,
}

/// The caller went away: output can no longer be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the exec caller is gone")]
pub struct CallerGone;

/// The caller's side of an interactive exec, as the driver sees it. Both methods may be
/// called from different threads at once.
pub trait ExecStream: Send + Sync {
    /// The caller's next message, waiting up to `timeout`. Once it returned [`ExecRecv::Gone`]
    /// it keeps returning it.
    fn recv(&self, timeout: Duration) -> ExecRecv;

    /// Passes output to the caller. `Err` means the caller is gone: the driver ends the command.
    fn send(&self, output: ExecStreamOutput) -> Result<(), CallerGone>;
}

/// An [`ExecStream`] over std channels, for hosts that bridge their own transport with
/// threads. The caller is gone once its input sender is dropped or its output receiver is.
pub struct ChannelExecStream {
    input: Mutex<Receiver<ExecInput>>,
    output: Sender<ExecStreamOutput>,
}

/// The caller's ends of a [`ChannelExecStream`].
pub struct ChannelExecCaller {
    /// Sends what the command's stdin and terminal get.
    pub input: Sender<ExecInput>,
    /// Receives the command's output.
    pub output: Receiver<ExecStreamOutput>,
}

impl ChannelExecStream {
    /// A stream and the caller's ends of it.
    pub fn new() -> (ChannelExecStream, ChannelExecCaller) {
        let (input_tx, input_rx) = std::sync::mpsc::channel();
        let (output_tx, output_rx) = std::sync::mpsc::channel();
        (
            ChannelExecStream {
                input: Mutex::new(input_rx),
                output: output_tx,
            },
            ChannelExecCaller {
                input: input_tx,
                output: output_rx,
            },
        )
    }
}

impl ExecStream for ChannelExecStream {
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
        self.output.send(output).map_err(|_| CallerGone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_stream_delivers_both_ways_and_sees_the_caller_leave() {
        let (stream, caller) = ChannelExecStream::new();
        caller.input.send(ExecInput::Stdin(b"hi".to_vec())).unwrap();
        assert_eq!(
            stream.recv(Duration::ZERO),
            ExecRecv::Input(ExecInput::Stdin(b"hi".to_vec()))
        );
        assert_eq!(stream.recv(Duration::from_millis(1)), ExecRecv::Timeout);
        stream
            .send(ExecStreamOutput::Stdout(b"out".to_vec()))
            .unwrap();
        assert_eq!(
            caller.output.recv().unwrap(),
            ExecStreamOutput::Stdout(b"out".to_vec())
        );
        let ChannelExecCaller { input, output } = caller;
        drop(input);
        assert_eq!(stream.recv(Duration::from_secs(5)), ExecRecv::Gone);
        drop(output);
        assert_eq!(
            stream.send(ExecStreamOutput::Stderr(Vec::new())),
            Err(CallerGone)
        );
    }

    #[test]
    fn exec_messages_round_trip_as_json() {
        for input in [
            ExecInput::Stdin(vec![0, 255]),
            ExecInput::CloseStdin,
            ExecInput::Resize(TerminalSize {
                height: 24,
                width: 80,
            }),
        ] {
            let text = serde_json::to_string(&input).unwrap();
            assert_eq!(serde_json::from_str::<ExecInput>(&text).unwrap(), input);
        }
        let out = ExecStreamOutput::Stderr(b"e".to_vec());
        let text = serde_json::to_string(&out).unwrap();
        assert_eq!(
            serde_json::from_str::<ExecStreamOutput>(&text).unwrap(),
            out
        );
    }
}
