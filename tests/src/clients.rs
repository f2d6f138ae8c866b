//! Client-only agents (`drover agent --client --servers ...`) for cluster scenarios: started on
//! loopback (or inside a network namespace), killed and restarted on the same data dir.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::{Agent, drover_bin, free_port};

/// Agent config enabling raw_exec (off by default outside `--dev`, as in Nomad).
pub const RAW_EXEC_ENABLED: &str =
    "plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n";

/// One client-only agent process, restartable on the same data dir and ports.
pub struct ClientProc {
    /// The running process; `None` while stopped.
    pub agent: Option<Agent>,
    pub name: String,
    pub http_port: u16,
    pub dir: PathBuf,
    /// The address its HTTP API is reached at (loopback, or its namespace's address).
    pub host: String,
    /// Runs the agent inside this network namespace (`ip netns exec NAME ...`) when set.
    netns: Option<String>,
    args: Vec<String>,
}

impl ClientProc {
    /// Starts client `name` under `parent`, talking to `servers` (RPC addresses), with the
    /// agent `config` (HCL) when not empty; returns once its node is registered and ready
    /// (seen through its own API, which forwards to a server).
    pub fn start(parent: &Path, name: &str, servers: &[String], config: &str) -> ClientProc {
        let mut c = ClientProc::prepare(parent, name, servers, config, "127.0.0.1", None);
        c.spawn();
        c.wait_ready(Duration::from_secs(60));
        c
    }

    /// As [`ClientProc::start`] without waiting for the node (an agent whose API needs a
    /// token the caller checks readiness with).
    pub fn start_unwaited(
        parent: &Path,
        name: &str,
        servers: &[String],
        config: &str,
    ) -> ClientProc {
        let mut c = ClientProc::prepare(parent, name, servers, config, "127.0.0.1", None);
        c.spawn();
        c
    }

    /// As [`ClientProc::start`], inside network namespace `netns` where the agent binds
    /// `host`; the servers must be reachable from there.
    pub fn start_in_netns(
        parent: &Path,
        name: &str,
        servers: &[String],
        config: &str,
        netns: &str,
        host: &str,
    ) -> ClientProc {
        let mut c = ClientProc::prepare(parent, name, servers, config, host, Some(netns));
        c.spawn();
        c.wait_ready(Duration::from_secs(60));
        c
    }

    fn prepare(
        parent: &Path,
        name: &str,
        servers: &[String],
        config: &str,
        host: &str,
        netns: Option<&str>,
    ) -> ClientProc {
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).expect("client dir");
        let http_port = free_port();
        let mut args: Vec<String> = [
            "agent",
            "--client",
            "--bind",
            host,
            "--node",
            name,
            "--log-level",
            "debug",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend([
            "--servers".to_string(),
            servers.join(","),
            "--data-dir".to_string(),
            dir.join("data").display().to_string(),
            "--http-port".to_string(),
            http_port.to_string(),
        ]);
        if !config.is_empty() {
            let path = dir.join("client.hcl");
            std::fs::write(&path, config).expect("write client config");
            args.extend(["--config".to_string(), path.display().to_string()]);
        }
        ClientProc {
            agent: None,
            name: name.to_string(),
            http_port,
            dir,
            host: host.to_string(),
            netns: netns.map(str::to_string),
            args,
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("agent.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open client log");
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(drover_bin());
                c
            }
            None => Command::new(drover_bin()),
        };
        let child = cmd
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log fd"))
            .stderr(log)
            .spawn()
            .expect("spawn drover client");
        self.agent = Some(Agent {
            child,
            host: self.host.clone(),
            http_port: self.http_port,
            rpc_port: 0,
            data_dir: self.dir.clone(),
            log_path: self.log_path(),
        });
    }

    /// The running agent. Panics when it is stopped (a test bug).
    pub fn agent(&self) -> &Agent {
        self.agent.as_ref().expect("client agent is running")
    }

    pub fn addr(&self) -> String {
        format!("http://{}:{}", self.host, self.http_port)
    }

    /// GET through this agent's API (its own endpoints, or forwarded to a server).
    pub fn get(&self, path: &str) -> Result<serde_json::Value, String> {
        crate::http_call("GET", &format!("{}{path}", self.addr()), None).and_then(
            |(status, body)| {
                if status != 200 {
                    return Err(format!("{status}: {body}"));
                }
                serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
            },
        )
    }

    /// This agent's node id, from its self report.
    pub fn node_id(&self) -> String {
        self.get("/v1/agent/self")
            .ok()
            .and_then(|v| v["stats"]["client"]["node_id"].as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// Waits until its node is registered and ready.
    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let node_id = self.node_id();
            if !node_id.is_empty()
                && self
                    .get(&format!("/v1/node/{node_id}"))
                    .is_ok_and(|n| n["Status"] == "ready")
            {
                return;
            }
            if std::time::Instant::now() > deadline {
                panic!(
                    "client {} not ready within {timeout:?}; log:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
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

    /// SIGKILL: the agent dies at once, leaving its tasks running.
    pub fn kill9(&mut self) {
        if let Some(mut a) = self.agent.take() {
            a.kill9();
        }
    }

    /// Starts the agent again on the same data dir and ports.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }
}

/// A Go duration as Nomad prints it ("1m2.5s", "350ms", "4.2µs"); `None` when unreadable.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    if rest == "0" || rest == "0s" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}
