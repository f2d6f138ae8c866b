//! Workspace-level test support: start real `drover` agents as processes on free loopback
//! ports, drive them through the CLI and the HTTP API, and clean up after.
//!
//! Must not depend on: any Drover crate's internals. These tests see Drover as a user does.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Path of the `drover` binary built by this workspace (`DROVER_BIN` overrides).
pub fn drover_bin() -> PathBuf {
    if let Ok(p) = std::env::var("DROVER_BIN") {
        return PathBuf::from(p);
    }
    let root = workspace_root();
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let bin = target.join("debug").join("drover");
    assert!(
        bin.exists(),
        "{} is missing: build it first with `cargo build -p drover` (cargo test --workspace does)",
        bin.display()
    );
    bin
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits inside the workspace root")
        .to_path_buf()
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// A temporary directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "drover-test-{name}-{}-{}",
            std::process::id(),
            uuid_like()
        ));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// A running `drover agent --dev` process.
pub struct Agent {
    pub child: Child,
    pub http_port: u16,
    pub rpc_port: u16,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
}

impl Agent {
    /// Starts a dev agent on free ports with its data in `data_dir`, and waits until it has a
    /// leader and a ready node.
    pub fn start_dev(data_dir: &Path, extra: &[&str]) -> Agent {
        Self::start_on_ports(data_dir, free_port(), free_port(), extra)
    }

    pub fn start_on_ports(data_dir: &Path, http_port: u16, rpc_port: u16, extra: &[&str]) -> Agent {
        let log_path = data_dir.join(format!("agent-{http_port}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("open agent log");
        let mut cmd = Command::new(drover_bin());
        cmd.arg("agent")
            .arg("--dev")
            .arg("--data-dir")
            .arg(data_dir.join("data"))
            .arg("--http-port")
            .arg(http_port.to_string())
            .arg("--rpc-port")
            .arg(rpc_port.to_string())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log fd"))
            .stderr(log);
        let child = cmd.spawn().expect("spawn drover agent");
        let agent = Agent {
            child,
            http_port,
            rpc_port,
            data_dir: data_dir.to_path_buf(),
            log_path,
        };
        agent.wait_ready(Duration::from_secs(60));
        agent
    }

    pub fn addr(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits for a leader and at least one ready node.
    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self.get("/v1/status/leader").ok();
            let nodes = self.get("/v1/nodes").ok();
            let ready = nodes
                .as_ref()
                .and_then(Value::as_array)
                .is_some_and(|n| n.iter().any(|n| n["Status"] == "ready"));
            if leader
                .as_ref()
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
                && ready
            {
                return;
            }
            if Instant::now() > deadline {
                panic!("agent not ready within {timeout:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// GET a JSON document from the agent's API.
    pub fn get(&self, path: &str) -> Result<Value, String> {
        let url = format!("{}{}", self.addr(), path);
        let mut resp = ureq::get(&url)
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("{status}: {body}"));
        }
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
    }

    /// GET returning status, body and the `X-Nomad-Index` header (0 when absent).
    pub fn get_with_index(&self, path: &str) -> (u16, String, u64) {
        let url = format!("{}{}", self.addr(), path);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        match agent.get(&url).call() {
            Ok(mut r) => {
                let index = r
                    .headers()
                    .get("X-Nomad-Index")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let status = r.status().as_u16();
                (
                    status,
                    r.body_mut().read_to_string().unwrap_or_default(),
                    index,
                )
            }
            Err(e) => (0, e.to_string(), 0),
        }
    }

    /// Sends a request with a raw body; returns status and body text.
    pub fn send(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let url = format!("{}{}", self.addr(), path);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let req = match method {
            "PUT" => agent.put(&url).send(body),
            "POST" => agent.post(&url).send(body),
            "DELETE" => agent.delete(&url).call(),
            _ => agent.get(&url).call(),
        };
        match req {
            Ok(mut r) => {
                let status = r.status().as_u16();
                (status, r.body_mut().read_to_string().unwrap_or_default())
            }
            Err(e) => (0, e.to_string()),
        }
    }

    /// Runs the CLI against this agent.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(drover_bin())
            .args(args)
            .env("DROVER_ADDR", self.addr())
            .env_remove("NOMAD_ADDR")
            .output()
            .expect("run drover CLI")
    }

    /// Polls `cond` until it holds or `timeout` passes (then panics with `what` and the log).
    pub fn eventually(&self, what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !cond() {
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; agent log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn terminate(&mut self) {
        unsafe {
            // SAFETY: sending a signal to our own child process id.
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill9();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

/// Text of a command's stdout and stderr together, for assertions and messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
