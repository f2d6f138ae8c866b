//! `exec_task_streaming`: an interactive command in a task's container (Docker's exec create,
//! start attached with stdin, and resize; Nomad's docker driver `ExecTaskStreaming`).
//!
//! The attached connection lives on the driver's runtime; the calling thread relays between
//! it and the caller's stream over channels, since the stream's calls block.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use drover_abi::{
    DriverError, ExecInput, ExecOptions, ExecRecv, ExecStream, ExecStreamOutput, ExitResult,
};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::daemon::message_of;
use crate::runtime::{self, AbortOnDrop};

/// How long the input pump waits for the caller before checking whether the exec ended.
const INPUT_POLL: Duration = Duration::from_millis(100);
/// The daemon may report an exec as running shortly after its output ended.
const EXIT_CODE_WAIT: Duration = Duration::from_secs(3);
/// The terminal's end-of-file character, sent when the caller closes stdin with a tty.
const EOF_CHAR: u8 = 0x04;

/// What the runtime side reports to the calling thread.
enum Event {
    Output(ExecStreamOutput),
    End(Result<ExitResult, String>),
}

/// What the calling thread asks of the runtime side.
enum Control {
    Input(ExecInput),
    /// The caller is gone: drop the attached connection.
    Gone,
}

/// Runs `options.command` in `container_id` and relays it to `stream` until it exits.
pub fn exec_streaming(
    docker: Docker,
    container_id: String,
    options: &ExecOptions,
    stream: &dyn ExecStream,
) -> Result<ExitResult, DriverError> {
    let (events_tx, events) = std::sync::mpsc::channel();
    let (control_tx, control) = unbounded_channel();
    let session = run_exec(docker, container_id, options.clone(), control, events_tx);
    let _task =
        AbortOnDrop(runtime::spawn(session).map_err(|e| DriverError::Other(e.to_string()))?);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| pump_input(stream, &control_tx, &done));
        let result = relay_output(stream, &events, &control_tx);
        done.store(true, Ordering::Relaxed);
        result
    })
}

fn pump_input(stream: &dyn ExecStream, control: &UnboundedSender<Control>, done: &AtomicBool) {
    while !done.load(Ordering::Relaxed) {
        match stream.recv(INPUT_POLL) {
            ExecRecv::Input(input) => {
                if control.send(Control::Input(input)).is_err() {
                    return;
                }
            }
            ExecRecv::Timeout => {}
            ExecRecv::Gone => {
                let _ = control.send(Control::Gone);
                return;
            }
        }
    }
}

fn relay_output(
    stream: &dyn ExecStream,
    events: &Receiver<Event>,
    control: &UnboundedSender<Control>,
) -> Result<ExitResult, DriverError> {
    let mut gone = false;
    loop {
        match events.recv() {
            Ok(Event::Output(output)) => {
                if !gone && stream.send(output).is_err() {
                    gone = true;
                    let _ = control.send(Control::Gone);
                }
            }
            Ok(Event::End(result)) => {
                if gone {
                    return Err(DriverError::Other(
                        "the exec caller went away; the session was closed".into(),
                    ));
                }
                return result.map_err(DriverError::Other);
            }
            Err(_) => {
                return Err(DriverError::Other(
                    "the docker driver's exec session ended without an answer".into(),
                ));
            }
        }
    }
}

async fn run_exec(
    docker: Docker,
    container_id: String,
    options: ExecOptions,
    control: UnboundedReceiver<Control>,
    events: Sender<Event>,
) {
    let end = attached(&docker, &container_id, options, control, &events).await;
    // Nobody listens once the caller's thread returned; nothing to do then.
    let _ = events.send(Event::End(end));
}

async fn attached(
    docker: &Docker,
    container_id: &str,
    options: ExecOptions,
    mut control: UnboundedReceiver<Control>,
    events: &Sender<Event>,
) -> Result<ExitResult, String> {
    let tty = options.tty;
    let created = docker
        .create_exec(
            container_id,
            CreateExecOptions::<String> {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(tty),
                cmd: Some(options.command),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("failed to create exec: {}", message_of(&e)))?;
    let started = docker
        .start_exec(
            &created.id,
            Some(StartExecOptions {
                detach: false,
                tty,
                output_capacity: None,
            }),
        )
        .await
        .map_err(|e| format!("failed to start exec: {}", message_of(&e)))?;
    let StartExecResults::Attached {
        mut output,
        mut input,
    } = started
    else {
        return Err("the daemon did not attach the exec".to_string());
    };
    let mut stdin_open = true;
    loop {
        tokio::select! {
            piece = output.next() => match piece {
                Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                    let _ = events.send(Event::Output(ExecStreamOutput::Stdout(message.to_vec())));
                }
                Some(Ok(LogOutput::StdErr { message })) => {
                    let _ = events.send(Event::Output(ExecStreamOutput::Stderr(message.to_vec())));
                }
                Some(Ok(LogOutput::StdIn { .. })) => {}
                Some(Err(e)) => return Err(format!("reading exec output: {}", message_of(&e))),
                None => break,
            },
            message = control.recv() => match message {
                Some(Control::Input(ExecInput::Stdin(data))) if stdin_open => {
                    if input.write_all(&data).await.is_err() || input.flush().await.is_err() {
                        stdin_open = false;
                    }
                }
                Some(Control::Input(ExecInput::Stdin(_))) => {}
                Some(Control::Input(ExecInput::CloseStdin)) => {
                    if stdin_open && tty {
                        let _ = input.write_all(&[EOF_CHAR]).await;
                        let _ = input.flush().await;
                    } else if stdin_open {
                        let _ = input.shutdown().await;
                        stdin_open = false;
                    }
                }
                Some(Control::Input(ExecInput::Resize(size))) => {
                    let resize = ResizeExecOptions {
                        height: size.height,
                        width: size.width,
                    };
                    // Fails while the exec is starting or after it ended; harmless.
                    let _ = docker.resize_exec(&created.id, resize).await;
                }
                // Dropping the attached connection closes the exec's stdin (and its
                // terminal, which hangs a shell up).
                Some(Control::Gone) | None => {
                    return Err("the exec caller went away".to_string());
                }
            },
        }
    }
    drop(input);
    let deadline = Instant::now() + EXIT_CODE_WAIT;
    loop {
        let inspected = docker
            .inspect_exec(&created.id)
            .await
            .map_err(|e| format!("failed to inspect exec: {}", message_of(&e)))?;
        if !inspected.running.unwrap_or(false) {
            let code = inspected.exit_code.unwrap_or(-1);
            return Ok(ExitResult {
                exit_code: i32::try_from(code).unwrap_or(-1),
                ..Default::default()
            });
        }
        if Instant::now() > deadline {
            return Err("failed to retrieve the exec's exit code".to_string());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
