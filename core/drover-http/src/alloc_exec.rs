//! `GET /v1/client/allocation/:alloc_id/exec?task=&command=[...]&tty=`: Nomad's `alloc exec`,
//! a websocket (command/agent/alloc_endpoint.go `allocExec`, `execStreamImpl`). The caller
//! sends `ExecStreamingInput` frames (`{"stdin":{"data":base64,"close":bool}}`,
//! `{"tty_size":{"height":h,"width":w}}`, `{}` as a heartbeat); the agent sends
//! `ExecStreamingOutput` frames (`{"stdout":{"data":...}}`, `{"stderr":...}`, the streams'
//! `close` markers, and last `{"exited":true,"result":{"exit_code":N}}`), then a normal close.
//! An error ends the socket with a close frame carrying Nomad's text (code 1011 for what
//! Nomad answers 500, 1008 otherwise).
//!
//! Served by the node that runs the allocation; other agents pass the upgrade through (see
//! `client_api`). The driver call blocks, so it runs on a blocking thread with the socket
//! bridged to it by channels.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use drover_client::alloc_exec::{
    CallerGone, ExecError, ExecInput, ExecOptions, ExecRecv, ExecStream, ExecStreamOutput,
    ExitResult, TerminalSize,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::NodeClient;
use crate::client_api::ClientState;
use crate::client_fs::local_client;
use crate::error::ApiError;
use crate::query::Params;

/// Output pieces buffered between the driver and a slow socket before the driver waits.
const OUTPUT_BUFFER: usize = 64;
/// Websocket close codes (RFC 6455): normal, policy violation, internal error.
const CLOSE_NORMAL: u16 = 1000;
const CLOSE_POLICY_VIOLATION: u16 = 1008;
const CLOSE_INTERNAL_ERROR: u16 = 1011;
/// A close frame's reason is at most 123 bytes.
const MAX_CLOSE_REASON: usize = 123;

/// What to run, from the query.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ExecRequest {
    task: String,
    options: ExecOptions,
    handshake: bool,
}

fn parse_bool(params: &Params, name: &str) -> Result<bool, ApiError> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(false),
        Some(v) => parse_go_bool(v).ok_or_else(|| {
            ApiError::bad_request(format!(
                "{name} value is not a boolean: strconv.ParseBool: parsing {v:?}: invalid syntax"
            ))
        }),
    }
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn exec_request(params: &Params) -> Result<ExecRequest, ApiError> {
    let command_text = params.get("command").map(String::as_str).unwrap_or("");
    let command: Vec<String> = serde_json::from_str(command_text)
        .map_err(|e| ApiError::bad_request(format!("failed to marshal command into json: {e}")))?;
    Ok(ExecRequest {
        task: params.get("task").cloned().unwrap_or_default(),
        options: ExecOptions {
            command,
            tty: parse_bool(params, "tty")?,
        },
        handshake: parse_bool(params, "ws_handshake")?,
    })
}

/// `GET /v1/client/allocation/:alloc_id/exec`, upgraded to a websocket.
pub(crate) async fn exec(
    State(s): State<ClientState>,
    Path(alloc_id): Path<String>,
    Query(params): Query<Params>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let request = exec_request(&params)?;
    let client = Arc::clone(local_client(&s)?);
    Ok(upgrade.on_upgrade(move |socket| session(socket, client, alloc_id, request)))
}

/// The driver's side of the socket.
struct SocketStream {
    input: Mutex<std::sync::mpsc::Receiver<ExecInput>>,
    output: tokio::sync::mpsc::Sender<ExecStreamOutput>,
}

impl ExecStream for SocketStream {
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
        self.output.blocking_send(output).map_err(|_| CallerGone)
    }
}

/// Nomad's `ExecStreamingIOOperation`.
#[derive(Debug, Default, Deserialize)]
struct IoOperation {
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    close: bool,
}

/// Nomad's `TerminalSize` as it travels (Go ints).
#[derive(Debug, Default, Deserialize)]
struct TtySize {
    #[serde(default)]
    height: i64,
    #[serde(default)]
    width: i64,
}

/// Nomad's `ExecStreamingInput`.
#[derive(Debug, Default, Deserialize)]
struct InputFrame {
    #[serde(default)]
    stdin: Option<IoOperation>,
    #[serde(default)]
    tty_size: Option<TtySize>,
}

/// The handshake some callers send first (`ws_handshake=true`).
#[derive(Debug, Default, Deserialize)]
struct Handshake {
    #[serde(default)]
    version: i64,
}

fn clamp(v: i64) -> u16 {
    u16::try_from(v.max(0)).unwrap_or(u16::MAX)
}

/// The inputs one frame carries; a heartbeat carries none.
fn inputs_of(frame: &[u8]) -> Result<Vec<ExecInput>, String> {
    let frame: InputFrame =
        serde_json::from_slice(frame).map_err(|e| format!("invalid exec input frame: {e}"))?;
    let mut inputs = Vec::new();
    if let Some(stdin) = frame.stdin {
        if let Some(data) = stdin.data.filter(|d| !d.is_empty()) {
            let bytes = BASE64
                .decode(data.as_bytes())
                .map_err(|e| format!("invalid stdin data: {e}"))?;
            inputs.push(ExecInput::Stdin(bytes));
        }
        if stdin.close {
            inputs.push(ExecInput::CloseStdin);
        }
    }
    if let Some(size) = frame.tty_size {
        inputs.push(ExecInput::Resize(TerminalSize {
            height: clamp(size.height),
            width: clamp(size.width),
        }));
    }
    Ok(inputs)
}

fn output_frame(output: &ExecStreamOutput) -> Value {
    match output {
        ExecStreamOutput::Stdout(data) => json!({"stdout": {"data": BASE64.encode(data)}}),
        ExecStreamOutput::Stderr(data) => json!({"stderr": {"data": BASE64.encode(data)}}),
    }
}

/// The frames that end a session that ran: both streams closed, then the exit.
fn exit_frames(exit: &ExitResult) -> [Value; 3] {
    [
        json!({"stdout": {"close": true}}),
        json!({"stderr": {"close": true}}),
        json!({"exited": true, "result": {"exit_code": exit.exit_code}}),
    ]
}

fn text(value: &Value) -> Message {
    Message::Text(value.to_string().into())
}

/// A close frame with `reason` cut to what a frame can carry.
fn close(code: u16, reason: &str) -> Message {
    let mut end = reason.len().min(MAX_CLOSE_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Message::Close(Some(CloseFrame {
        code,
        reason: reason[..end].to_string().into(),
    }))
}

fn close_for(e: &ExecError) -> Message {
    let code = if e.status() == 500 {
        CLOSE_INTERNAL_ERROR
    } else {
        CLOSE_POLICY_VIOLATION
    };
    close(code, &e.to_string())
}

/// Reads the handshake when the caller announced one; the error text when it is wrong.
async fn read_handshake(socket: &mut WebSocket) -> Result<(), String> {
    let frame = match socket.recv().await {
        Some(Ok(Message::Text(t))) => t.as_bytes().to_vec(),
        Some(Ok(Message::Binary(b))) => b.to_vec(),
        _ => return Err("the connection closed before the handshake".into()),
    };
    let handshake: Handshake =
        serde_json::from_slice(&frame).map_err(|e| format!("invalid handshake: {e}"))?;
    if handshake.version != 1 {
        return Err(format!("unexpected handshake value: {}", handshake.version));
    }
    Ok(())
}

async fn session(
    mut socket: WebSocket,
    client: Arc<dyn NodeClient>,
    alloc_id: String,
    request: ExecRequest,
) {
    if request.handshake
        && let Err(e) = read_handshake(&mut socket).await
    {
        let _ = socket.send(close(CLOSE_POLICY_VIOLATION, &e)).await;
        return;
    }
    let (input_tx, input_rx) = std::sync::mpsc::channel();
    let (output_tx, mut output_rx) = tokio::sync::mpsc::channel(OUTPUT_BUFFER);
    let stream = SocketStream {
        input: Mutex::new(input_rx),
        output: output_tx,
    };
    let ExecRequest { task, options, .. } = request;
    // A session lasts as long as its caller wants: on a thread of its own, not on the
    // runtime's bounded blocking pool.
    let (exec_tx, exec) = tokio::sync::oneshot::channel();
    let started = std::thread::Builder::new()
        .name("drover-exec".into())
        .spawn(move || {
            let _ = exec_tx.send(client.exec(&alloc_id, &task, &options, &stream));
        });
    if let Err(e) = started {
        let _ = socket
            .send(close(
                CLOSE_INTERNAL_ERROR,
                &format!("starting the session: {e}"),
            ))
            .await;
        return;
    }
    // `None` once the caller is gone: the driver then sees it and ends the command.
    let mut input = Some(input_tx);
    let mut writable = true;
    let mut peer_closed = false;
    let mut failure = None;
    loop {
        tokio::select! {
            incoming = socket.recv(), if input.is_some() => match incoming {
                Some(Ok(Message::Text(t))) => forward(&mut input, t.as_bytes(), &mut failure),
                Some(Ok(Message::Binary(b))) => forward(&mut input, &b, &mut failure),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    input = None;
                    peer_closed = true;
                }
            },
            output = output_rx.recv() => match output {
                Some(output) => {
                    if writable && socket.send(text(&output_frame(&output))).await.is_err() {
                        writable = false;
                        input = None;
                    }
                }
                // The driver's stream is gone: the exec returned.
                None => break,
            },
        }
    }
    let ending = match exec.await {
        Ok(Ok(exit)) => {
            let mut frames: Vec<Message> = exit_frames(&exit).iter().map(text).collect();
            frames.push(close(CLOSE_NORMAL, ""));
            frames
        }
        Ok(Err(e)) => vec![close_for(&e)],
        Err(_) => vec![close(
            CLOSE_INTERNAL_ERROR,
            "the exec handler failed: it panicked",
        )],
    };
    let ending = match failure {
        Some(reason) => vec![close(CLOSE_INTERNAL_ERROR, &reason)],
        None => ending,
    };
    for frame in ending {
        if !writable || socket.send(frame).await.is_err() {
            writable = false;
            break;
        }
    }
    if writable && !peer_closed {
        await_peer_close(&mut socket).await;
    }
}

/// How long a caller has to answer our close frame before the connection is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Reads (and discards) what the caller still sends until its close frame or the end of the
/// connection. Why: dropping a TCP socket with unread input makes the kernel answer with a
/// reset that discards our own unsent output, so the caller would lose the exit frame (seen
/// as "Connection reset by peer" when its stdin close crossed our exit).
async fn await_peer_close(socket: &mut WebSocket) {
    let drained = async {
        while let Some(Ok(message)) = socket.recv().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_GRACE, drained).await;
}

/// Passes a frame's inputs to the driver; an unreadable frame ends the session with its error
/// (as Nomad's `forwardExecInput` does).
fn forward(
    input: &mut Option<std::sync::mpsc::Sender<ExecInput>>,
    frame: &[u8],
    failure: &mut Option<String>,
) {
    let Some(sender) = input.as_ref() else {
        return;
    };
    match inputs_of(frame) {
        Ok(inputs) => {
            for message in inputs {
                if sender.send(message).is_err() {
                    *input = None;
                    return;
                }
            }
        }
        Err(e) => {
            *failure = Some(e);
            *input = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_query_names_task_command_and_tty_as_nomads_does() {
        let r = exec_request(&params(&[
            ("task", "web"),
            ("command", r#"["/bin/sh","-c","echo hi"]"#),
            ("tty", "true"),
        ]))
        .unwrap();
        assert_eq!(r.task, "web");
        assert_eq!(r.options.command, ["/bin/sh", "-c", "echo hi"]);
        assert!(r.options.tty && !r.handshake);
        let e = exec_request(&params(&[("command", "nope")])).unwrap_err();
        assert!(
            e.message.contains("failed to marshal command into json"),
            "{e:?}"
        );
        let e = exec_request(&params(&[("command", "[]"), ("tty", "maybe")])).unwrap_err();
        assert!(e.message.starts_with("tty value is not a boolean"), "{e:?}");
    }

    #[test]
    fn input_frames_become_stdin_close_and_resize_and_heartbeats_nothing() {
        let data = BASE64.encode(b"ls\n");
        assert_eq!(
            inputs_of(format!(r#"{{"stdin":{{"data":"{data}"}}}}"#).as_bytes()).unwrap(),
            vec![ExecInput::Stdin(b"ls\n".to_vec())]
        );
        assert_eq!(
            inputs_of(br#"{"stdin":{"close":true}}"#).unwrap(),
            vec![ExecInput::CloseStdin]
        );
        assert_eq!(
            inputs_of(br#"{"tty_size":{"height":24,"width":80}}"#).unwrap(),
            vec![ExecInput::Resize(TerminalSize {
                height: 24,
                width: 80
            })]
        );
        assert_eq!(inputs_of(b"{}").unwrap(), vec![]);
        assert!(inputs_of(b"not json").is_err());
        assert!(inputs_of(br#"{"stdin":{"data":"***"}}"#).is_err());
    }

    #[test]
    fn output_and_exit_frames_are_nomads() {
        assert_eq!(
            output_frame(&ExecStreamOutput::Stdout(b"hi".to_vec())),
            json!({"stdout": {"data": "aGk="}})
        );
        assert_eq!(
            output_frame(&ExecStreamOutput::Stderr(b"e".to_vec())),
            json!({"stderr": {"data": "ZQ=="}})
        );
        let exit = ExitResult {
            exit_code: 3,
            ..Default::default()
        };
        assert_eq!(
            exit_frames(&exit)[2],
            json!({"exited": true, "result": {"exit_code": 3}})
        );
    }

    #[test]
    fn close_reasons_fit_a_frame_and_codes_follow_the_status() {
        let long = "é".repeat(100);
        let Message::Close(Some(frame)) = close(CLOSE_NORMAL, &long) else {
            panic!("a close frame");
        };
        assert!(frame.reason.len() <= MAX_CLOSE_REASON);
        let Message::Close(Some(frame)) = close_for(&ExecError::NotRunning("web".into())) else {
            panic!("a close frame");
        };
        assert_eq!(frame.code, CLOSE_POLICY_VIOLATION);
        assert_eq!(frame.reason.as_str(), "task \"web\" is not running.");
        let Message::Close(Some(frame)) = close_for(&ExecError::Driver("boom".into())) else {
            panic!("a close frame");
        };
        assert_eq!(frame.code, CLOSE_INTERNAL_ERROR);
    }
}
