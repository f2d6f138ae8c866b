//! `drover alloc exec [-i] [-t] [-e CHAR] [-task T] [-job] ALLOC CMD [ARGS...]`: Nomad's
//! command/alloc_exec.go. Runs a command in a task through the agent's
//! `/v1/client/allocation/:id/exec` websocket (any agent: the call reaches the node that runs
//! the allocation), passes stdin, terminal sizes (SIGWINCH) and output, and exits with the
//! command's exit code. With `-t` on a real terminal, the terminal is in raw mode while the
//! session lasts (restored on exit); `-t` with piped stdin still gives the command a remote
//! terminal, fed from the pipe. As in Nomad, `~.` at the start of a line closes the session.
//!
//! The websocket is blocking (tungstenite over a `TcpStream`): one loop reads frames with a
//! short read timeout and writes what a stdin thread hands it.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::WebSocket;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Error as WsError, Message};

use super::alloc::find_alloc;
use super::alloc_fs::random_job_alloc;
use super::api::{Client, Connection, escape_segment};
use super::logs::pick_task;
use super::{ConnArgs, Exit, ui};

/// How long one read of the socket waits before the loop looks at stdin and resizes.
const READ_SLICE: Duration = Duration::from_millis(20);
/// Nomad's client sends a heartbeat frame this often.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// Stdin is read in pieces of at most this size (Nomad's 2048).
const STDIN_CHUNK: usize = 2048;

#[derive(Debug, clap::Args)]
pub struct AllocExecArgs {
    /// Sets the task to exec the command in
    #[arg(long = "task", value_name = "TASK")]
    pub task: Option<String>,
    /// Use a random allocation of the job named instead of an allocation ID
    #[arg(long)]
    pub job: bool,
    /// Pass stdin to the command (default true; -i=false to disable)
    #[arg(short = 'i', value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub stdin: Option<bool>,
    /// Allocate a pseudo-tty (default: whether stdin and stdout are terminals)
    #[arg(short = 't', value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool)]
    pub tty: Option<bool>,
    /// Escape character for sessions with a tty ('none' disables it)
    #[arg(short = 'e', value_name = "CHAR", default_value = "~")]
    pub escape: String,
    /// Allocation ID (or unique prefix); the job ID with -job
    pub alloc: Option<String>,
    /// The command to run, and its arguments
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// `drover exec`: Nomad's alias of `alloc exec`.
#[derive(Debug, clap::Args)]
pub struct ExecCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub args: AllocExecArgs,
}

pub fn run_alias(cli: ExecCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    run(&client, cli.args)
}

/// Go's `strconv.ParseBool`, as Nomad's flags read booleans.
fn parse_go_bool(v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("parse error: invalid boolean {v:?}")),
    }
}

fn is_terminal(fd: libc::c_int) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

pub fn run(client: &Client, args: AllocExecArgs) -> anyhow::Result<Exit> {
    let stdin = args.stdin.unwrap_or(true);
    let tty = args
        .tty
        .unwrap_or_else(|| is_terminal(libc::STDIN_FILENO) && is_terminal(libc::STDOUT_FILENO));
    let Some(target) = args.alloc.filter(|a| !a.is_empty()) else {
        ui::err(if args.job {
            "A job ID is required"
        } else {
            "An allocation ID is required"
        });
        return Ok(1);
    };
    if !args.job && target.chars().count() == 1 {
        ui::err("Alloc ID must contain at least two characters");
        return Ok(1);
    }
    if args.command.is_empty() {
        ui::err("A command is required");
        return Ok(1);
    }
    if tty && !stdin {
        ui::err("-i must be enabled if running with tty");
        return Ok(1);
    }
    let escape = match args.escape.as_str() {
        "none" => None,
        e if e.len() == 1 => e.bytes().next(),
        _ => {
            ui::err("-e requires 'none' or a single character");
            return Ok(1);
        }
    };
    let alloc_id = if args.job {
        match random_job_alloc(client, &target) {
            Ok(id) => id,
            Err(e) => {
                ui::err(&format!("Error fetching allocations: {e}"));
                return Ok(1);
            }
        }
    } else {
        target
    };
    let alloc = match find_alloc(client, &alloc_id, false) {
        Ok(alloc) => alloc,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let task = match pick_task(&alloc, args.task.as_deref()) {
        Ok(task) => task,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let session = Session {
        alloc_id: alloc.id.clone(),
        namespace: alloc.namespace.clone(),
        task,
        command: args.command,
        tty,
        stdin,
        escape: escape.filter(|_| tty),
    };
    match session.run(client.connection()) {
        Ok(code) => Ok(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            ui::err(&format!("failed to exec into task: {e}"));
            Ok(1)
        }
    }
}

/// One exec session's parameters.
struct Session {
    alloc_id: String,
    namespace: String,
    task: String,
    command: Vec<String>,
    tty: bool,
    stdin: bool,
    escape: Option<u8>,
}

/// What the stdin thread hands the loop.
enum Input {
    Data(Vec<u8>),
    /// End of stdin.
    Closed,
    /// The escape sequence `~.`: end the session.
    Disconnect,
}

/// Query values are percent-encoded as path segments are.
fn query(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", escape_segment(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// `http://host[:port]` as (host:port for the socket, ws://host:port for the request).
fn endpoint(address: &str) -> Result<(String, String), String> {
    let rest = address.strip_prefix("http://").ok_or_else(|| {
        format!("cannot exec through {address}: alloc exec over https is not supported yet")
    })?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok() && !port.is_empty());
    let socket = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok((socket, format!("ws://{authority}")))
}

impl Session {
    fn url(&self, conn: &Connection, base: &str) -> Result<String, String> {
        let command = serde_json::to_string(&self.command).map_err(|e| e.to_string())?;
        let tty = self.tty.to_string();
        let namespace = conn
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        let mut pairs = vec![
            ("task", self.task.as_str()),
            ("command", command.as_str()),
            ("tty", tty.as_str()),
            ("namespace", namespace.as_str()),
        ];
        if let Some(region) = &conn.region {
            pairs.push(("region", region.as_str()));
        }
        Ok(format!(
            "{base}/v1/client/allocation/{}/exec?{}",
            escape_segment(&self.alloc_id),
            query(&pairs)
        ))
    }

    fn connect(&self, conn: &Connection) -> Result<WebSocket<TcpStream>, String> {
        let (socket_addr, base) = endpoint(&conn.address)?;
        let mut request = self
            .url(conn, &base)?
            .into_client_request()
            .map_err(|e| format!("building the exec request: {e}"))?;
        if let Some(token) = &conn.token {
            let value = token
                .parse()
                .map_err(|_| "the token cannot be sent as a header".to_string())?;
            request.headers_mut().insert("X-Nomad-Token", value);
        }
        let stream = TcpStream::connect(&socket_addr).map_err(|e| {
            format!(
                "cannot reach the Drover agent at {} ({e}); is the agent running?",
                conn.address
            )
        })?;
        let (socket, _) = tungstenite::client(request, stream).map_err(|e| match e {
            tungstenite::HandshakeError::Failure(WsError::Http(response)) => {
                let body = response
                    .body()
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                format!(
                    "Unexpected response code: {} ({})",
                    response.status().as_u16(),
                    body.trim_end()
                )
            }
            other => format!("websocket handshake failed: {other}"),
        })?;
        socket
            .get_ref()
            .set_read_timeout(Some(READ_SLICE))
            .map_err(|e| e.to_string())?;
        Ok(socket)
    }

    /// Runs the session; the command's exit code, or why there is none.
    fn run(&self, conn: &Connection) -> Result<i32, String> {
        let mut socket = self.connect(conn)?;
        let raw = (self.tty && is_terminal(libc::STDIN_FILENO))
            .then(|| RawTerminal::enter(libc::STDIN_FILENO))
            .transpose()
            .map_err(|e| format!("setting the terminal to raw mode: {e}"))?;
        let resizes = self.tty && is_terminal(libc::STDOUT_FILENO);
        if resizes {
            watch_window_size();
        }
        let (input_tx, input) = std::sync::mpsc::channel();
        if self.stdin {
            let escape = self.escape;
            std::thread::spawn(move || read_stdin(input_tx, escape));
        } else {
            let _ = input_tx.send(Input::Closed);
        }
        let result = relay(&mut socket, &input, resizes);
        drop(raw);
        if matches!(result, Err(Ended::Disconnected)) {
            ui::err("\nConnection closed");
        }
        let _ = socket.close(None);
        result.map_err(|e| e.to_string())
    }
}

/// Why a session ended without an exit code.
#[derive(Debug)]
enum Ended {
    Disconnected,
    Failed(String),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Disconnected => f.write_str("context canceled"),
            Ended::Failed(e) => f.write_str(e),
        }
    }
}

fn send(socket: &mut WebSocket<TcpStream>, frame: Value) -> Result<(), Ended> {
    socket
        .send(Message::text(frame.to_string()))
        .map_err(|e| Ended::Failed(format!("failed to send input: {e}")))
}

/// Nomad's `ExecStreamingOutput`.
#[derive(Debug, Default, Deserialize)]
struct OutputFrame {
    #[serde(default)]
    stdout: Option<IoOperation>,
    #[serde(default)]
    stderr: Option<IoOperation>,
    #[serde(default)]
    exited: bool,
    #[serde(default)]
    result: Option<ExitFrame>,
}

#[derive(Debug, Default, Deserialize)]
struct IoOperation {
    #[serde(default)]
    data: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ExitFrame {
    #[serde(default)]
    exit_code: i32,
}

/// What one output frame asks of the terminal.
#[derive(Debug, PartialEq, Eq)]
enum Shown {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(i32),
    Nothing,
}

fn shown(frame: &[u8]) -> Result<Shown, String> {
    let frame: OutputFrame =
        serde_json::from_slice(frame).map_err(|e| format!("invalid exec output: {e}"))?;
    let decode = |io: IoOperation| -> Result<Vec<u8>, String> {
        io.data
            .map(|d| BASE64.decode(d.as_bytes()))
            .transpose()
            .map(Option::unwrap_or_default)
            .map_err(|e| format!("invalid exec output data: {e}"))
    };
    if let Some(io) = frame.stdout {
        return decode(io).map(Shown::Stdout);
    }
    if let Some(io) = frame.stderr {
        return decode(io).map(Shown::Stderr);
    }
    match frame.result {
        Some(result) if frame.exited => Ok(Shown::Exit(result.exit_code)),
        _ => Ok(Shown::Nothing),
    }
}

fn write_out(mut out: impl Write, data: &[u8]) {
    // A closed stdout (piped into `head`) must not end the session.
    let _ = out.write_all(data);
    let _ = out.flush();
}

/// The session's loop: input out, output in, until the exit frame.
fn relay(
    socket: &mut WebSocket<TcpStream>,
    input: &Receiver<Input>,
    resizes: bool,
) -> Result<i32, Ended> {
    let mut stdin_open = true;
    let mut last_sent = Instant::now();
    if resizes {
        WINDOW_CHANGED.store(true, Ordering::Relaxed);
    }
    loop {
        while stdin_open {
            match input.try_recv() {
                Ok(Input::Data(data)) => {
                    send(socket, json!({"stdin": {"data": BASE64.encode(&data)}}))?;
                    last_sent = Instant::now();
                }
                Ok(Input::Closed) | Err(TryRecvError::Disconnected) => {
                    send(socket, json!({"stdin": {"close": true}}))?;
                    stdin_open = false;
                }
                Ok(Input::Disconnect) => return Err(Ended::Disconnected),
                Err(TryRecvError::Empty) => break,
            }
        }
        if resizes
            && WINDOW_CHANGED.swap(false, Ordering::Relaxed)
            && let Some((height, width)) = window_size(libc::STDOUT_FILENO)
        {
            send(
                socket,
                json!({"tty_size": {"height": height, "width": width}}),
            )?;
            last_sent = Instant::now();
        }
        if last_sent.elapsed() >= HEARTBEAT {
            send(socket, json!({}))?;
            last_sent = Instant::now();
        }
        let frame = match socket.read() {
            Ok(Message::Text(text)) => text.as_bytes().to_vec(),
            Ok(Message::Binary(data)) => data.to_vec(),
            Ok(Message::Close(frame)) => {
                return Err(Ended::Failed(match frame {
                    Some(f) if !f.reason.is_empty() => f.reason.to_string(),
                    Some(f) if f.code != CloseCode::Normal => {
                        format!("websocket closed with code {}", u16::from(f.code))
                    }
                    _ => "websocket closed before receiving exit code".to_string(),
                }));
            }
            Ok(_) => continue,
            Err(WsError::Io(e))
                // A socket read with a timeout is not restarted after SIGWINCH's handler.
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => return Err(Ended::Failed(e.to_string())),
        };
        match shown(&frame).map_err(Ended::Failed)? {
            Shown::Stdout(data) => write_out(std::io::stdout().lock(), &data),
            Shown::Stderr(data) => write_out(std::io::stderr().lock(), &data),
            Shown::Exit(code) => return Ok(code),
            Shown::Nothing => {}
        }
    }
}

/// Nomad's escape handling (helper/escapingio): the escape character at the start of a line
/// is held back; followed by `.` it ends the session, doubled it sends one, followed by
/// anything else it sends both.
struct Escaper {
    escape: u8,
    at_line_start: bool,
    held: bool,
}

impl Escaper {
    fn new(escape: u8) -> Escaper {
        Escaper {
            escape,
            at_line_start: true,
            held: false,
        }
    }

    /// The bytes to send for `data`; `None` when the session is to end.
    fn filter(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(data.len() + 1);
        for &b in data {
            if self.held {
                self.held = false;
                if b == b'.' {
                    return None;
                }
                if b != self.escape {
                    out.push(self.escape);
                }
                out.push(b);
            } else if self.at_line_start && b == self.escape {
                self.held = true;
                continue;
            } else {
                out.push(b);
            }
            self.at_line_start = matches!(b, b'\r' | b'\n');
        }
        Some(out)
    }
}

fn read_stdin(input: Sender<Input>, escape: Option<u8>) {
    let mut escaper = escape.map(Escaper::new);
    let mut buf = vec![0u8; STDIN_CHUNK];
    let mut stdin = std::io::stdin();
    loop {
        let message = match stdin.read(&mut buf) {
            Ok(0) => Input::Closed,
            Ok(n) => match escaper.as_mut() {
                Some(e) => match e.filter(&buf[..n]) {
                    Some(data) if data.is_empty() => continue,
                    Some(data) => Input::Data(data),
                    None => Input::Disconnect,
                },
                None => Input::Data(buf[..n].to_vec()),
            },
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => Input::Closed,
        };
        let last = !matches!(message, Input::Data(_));
        if input.send(message).is_err() || last {
            return;
        }
    }
}

/// The terminal's settings before raw mode, restored when dropped.
struct RawTerminal {
    fd: libc::c_int,
    saved: libc::termios,
}

impl RawTerminal {
    fn enter(fd: libc::c_int) -> std::io::Result<RawTerminal> {
        // SAFETY: termios is plain data; tcgetattr fills it.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: reads the terminal's settings into a live struct.
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw edits the struct it is given; tcsetattr reads it.
        unsafe {
            libc::cfmakeraw(&mut raw);
            if libc::tcsetattr(fd, libc::TCSANOW, &raw) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(RawTerminal { fd, saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enter` on the same descriptor.
        unsafe {
            libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved);
        }
    }
}

/// Set by SIGWINCH (and once at the start): the loop sends the terminal's size.
static WINDOW_CHANGED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_window_change(_: libc::c_int) {
    WINDOW_CHANGED.store(true, Ordering::Relaxed);
}

fn watch_window_size() {
    // SAFETY: installs a handler that only stores to an atomic (async-signal-safe); SA_RESTART
    // keeps the stdin thread's read from failing with EINTR.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_window_change as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGWINCH, &action, std::ptr::null_mut());
    }
}

/// (rows, columns) of the terminal on `fd`.
fn window_size(fd: libc::c_int) -> Option<(u16, u16)> {
    // SAFETY: winsize is plain data; TIOCGWINSZ fills it.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize into a live struct.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) };
    (rc == 0).then_some((size.ws_row, size.ws_col))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_escape_sequence_at_a_line_start_ends_the_session_and_elsewhere_passes() {
        let mut e = Escaper::new(b'~');
        assert_eq!(e.filter(b"ls ~.\r"), Some(b"ls ~.\r".to_vec()));
        assert_eq!(e.filter(b"~~x\r"), Some(b"~x\r".to_vec()));
        assert_eq!(e.filter(b"~"), Some(Vec::new()));
        assert_eq!(e.filter(b"a"), Some(b"~a".to_vec()));
        let mut e = Escaper::new(b'~');
        assert_eq!(e.filter(b"~."), None);
    }

    #[test]
    fn output_frames_show_stdout_stderr_and_the_exit() {
        assert_eq!(
            shown(br#"{"stdout":{"data":"aGk="}}"#).unwrap(),
            Shown::Stdout(b"hi".to_vec())
        );
        assert_eq!(
            shown(br#"{"stderr":{"data":"ZQ=="}}"#).unwrap(),
            Shown::Stderr(b"e".to_vec())
        );
        assert_eq!(
            shown(br#"{"stdout":{"close":true}}"#).unwrap(),
            Shown::Stdout(Vec::new())
        );
        assert_eq!(
            shown(br#"{"exited":true,"result":{"exit_code":3}}"#).unwrap(),
            Shown::Exit(3)
        );
        // Nomad's Go plugins leave a zero exit code out.
        assert_eq!(
            shown(br#"{"exited":true,"result":{}}"#).unwrap(),
            Shown::Exit(0)
        );
        assert_eq!(shown(b"{}").unwrap(), Shown::Nothing);
    }

    #[test]
    fn the_agent_address_gives_the_socket_and_the_websocket_base() {
        assert_eq!(
            endpoint("http://127.0.0.1:4646").unwrap(),
            ("127.0.0.1:4646".into(), "ws://127.0.0.1:4646".into())
        );
        assert_eq!(
            endpoint("http://agent").unwrap(),
            ("agent:80".into(), "ws://agent".into())
        );
        assert!(endpoint("https://x").is_err());
    }

    #[test]
    fn the_exec_url_carries_task_command_tty_and_namespace() {
        let s = Session {
            alloc_id: "a1".into(),
            namespace: "default".into(),
            task: "web".into(),
            command: vec!["/bin/sh".into(), "-c".into(), "echo hi".into()],
            tty: true,
            stdin: true,
            escape: None,
        };
        let url = s.url(&Connection::default(), "ws://h:1").unwrap();
        assert_eq!(
            url,
            "ws://h:1/v1/client/allocation/a1/exec?task=web&command=%5B%22%2Fbin%2Fsh%22%2C%22-c%22%2C%22echo%20hi%22%5D&tty=true&namespace=default"
        );
    }

    #[test]
    fn go_booleans_parse_as_nomads_flags_do() {
        assert_eq!(parse_go_bool("false"), Ok(false));
        assert_eq!(parse_go_bool("1"), Ok(true));
        assert!(parse_go_bool("yes").is_err());
    }

    fn parse(args: &[&str]) -> AllocExecArgs {
        use clap::{CommandFactory, Parser};
        let known = super::super::argv::known_long_flags(&super::super::Cli::command());
        let argv = ["drover", "alloc", "exec"]
            .iter()
            .chain(args)
            .map(std::ffi::OsString::from)
            .collect();
        let cli = super::super::Cli::try_parse_from(super::super::argv::rewrite_single_dash_flags(
            argv, &known,
        ))
        .expect("parses");
        let Some(super::super::Command::Alloc(alloc)) = cli.command else {
            panic!("expected the alloc command");
        };
        let super::super::alloc::AllocCommand::Exec(exec) = alloc.command else {
            panic!("expected exec");
        };
        exec
    }

    #[test]
    fn nomads_exec_command_line_parses_and_the_command_keeps_its_own_flags() {
        let a = parse(&["-i", "-t", "-task", "web", "ab12", "/bin/sh", "-c", "ls -t"]);
        assert_eq!((a.stdin, a.tty), (Some(true), Some(true)));
        assert_eq!(a.task.as_deref(), Some("web"));
        assert_eq!(a.alloc.as_deref(), Some("ab12"));
        assert_eq!(a.command, ["/bin/sh", "-c", "ls -t"]);
        let a = parse(&["-i=false", "-t=false", "-job", "web", "ls", "-t", "-i"]);
        assert_eq!((a.stdin, a.tty, a.job), (Some(false), Some(false), true));
        assert_eq!(a.command, ["ls", "-t", "-i"]);
        // Flags after the command are the command's, even ones Drover knows.
        let a = parse(&["-task", "web", "ab12", "ls", "-verbose", "-task"]);
        assert_eq!(a.command, ["ls", "-verbose", "-task"]);
        let a = parse(&["ab12", "echo"]);
        assert_eq!((a.stdin, a.tty, a.escape.as_str()), (None, None, "~"));
    }
}
