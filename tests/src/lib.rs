//! Workspace-level test support: start real `drover` agents as processes on free loopback
//! ports, drive them through the CLI and the HTTP API, and clean up after.
//!
//! Must not depend on: any Drover crate's internals. These tests see Drover as a user does.

pub mod browser;
pub mod clients;
pub mod csi;
pub mod netns;
pub mod private_net;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `cargo test` builds no binary of another package: builds `package` (a no-op when fresh) and
/// returns the path of its output `file` in the target dir.
pub fn build_workspace_binary(package: &str, file: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "-p", package])
        .current_dir(workspace_root())
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p {package} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("debug")
        .join(file)
}

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

/// A loopback port nobody listens on right now, and never one this process handed out
/// before: the kernel may give the same ephemeral port to two binds in a row once the first
/// is closed, and a cluster's servers took the same RPC port that way.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = l.local_addr().expect("local addr").port();
        let mut seen = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if seen.insert(port) {
            return port;
        }
    }
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
        kill_processes_working_under(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills every task a test's agents started under `dir`: processes working under it, and
/// those whose `NOMAD_ALLOC_ID` is one of the allocations with a directory there (an exec
/// task lives in its own mount namespace, where its paths say nothing). Tasks outlive their
/// agent, as in Nomad, so a test that ends without stopping its jobs would otherwise leave them
/// running for the rest of the suite and after. Agents run in the test's own directory.
pub fn kill_processes_working_under(dir: &Path) {
    let allocs = alloc_ids_under(dir, 4);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let own = std::process::id();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        if pid as u32 == own {
            continue;
        }
        let works_under =
            std::fs::read_link(entry.path().join("cwd")).is_ok_and(|p| p.starts_with(dir));
        let runs_an_alloc = !allocs.is_empty()
            && std::fs::read(entry.path().join("environ")).is_ok_and(|env| {
                env.split(|b| *b == 0).any(|var| {
                    var.strip_prefix(b"NOMAD_ALLOC_ID=".as_slice())
                        .and_then(|id| std::str::from_utf8(id).ok())
                        .is_some_and(|id| allocs.iter().any(|a| a == id))
                })
            });
        if works_under || runs_an_alloc {
            // SAFETY: sending a signal to a process id read from /proc; at worst it is gone.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// The names of the directories in every `client/alloc` directory under `dir`, at most
/// `depth` levels down.
fn alloc_ids_under(dir: &Path, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() || path.is_symlink() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "alloc")
            && path
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "client")
        {
            out.extend(
                std::fs::read_dir(&path)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|e| e.file_name().to_str().map(String::from)),
            );
        } else if depth > 0 {
            out.extend(alloc_ids_under(&path, depth - 1));
        }
    }
    out
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
    /// The address its HTTP API listens on.
    pub host: String,
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
        Self::start_with_env(data_dir, http_port, rpc_port, extra, &[])
    }

    /// A dev agent of its own region `region`, its data in `parent/region`, on the given
    /// ports (a restart on the same ports keeps its addresses).
    pub fn start_dev_in_region(
        parent: &Path,
        region: &str,
        http_port: u16,
        rpc_port: u16,
    ) -> Agent {
        let dir = parent.join(region);
        std::fs::create_dir_all(&dir).expect("agent dir");
        let config = dir.join("region.hcl");
        std::fs::write(&config, format!("region = \"{region}\"\n")).expect("config");
        let config = config.to_str().expect("utf-8 path").to_string();
        Self::start_on_ports(&dir, http_port, rpc_port, &["--config", &config])
    }

    /// As `start_dev`, with `env` added to the agent process's environment.
    pub fn start_dev_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Agent {
        Self::start_with_env(data_dir, free_port(), free_port(), extra, env)
    }

    fn start_with_env(
        data_dir: &Path,
        http_port: u16,
        rpc_port: u16,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Agent {
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
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log fd"))
            .stderr(log);
        let child = cmd.spawn().expect("spawn drover agent");
        let agent = Agent {
            child,
            host: "127.0.0.1".into(),
            http_port,
            rpc_port,
            data_dir: data_dir.to_path_buf(),
            log_path,
        };
        agent.wait_ready(Duration::from_secs(60));
        agent
    }

    pub fn addr(&self) -> String {
        format!("http://{}:{}", self.host, self.http_port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Waits for a leader and at least one ready node.
    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self.get("/v1/status/leader").ok();
            let nodes = self.get("/v1/nodes");
            // With ACLs on, the node list needs a token the test has yet to make: a leader
            // is all that can be checked.
            let acl_on = nodes.as_ref().is_err_and(|e| e.starts_with("403"));
            let ready = acl_on
                || nodes
                    .as_ref()
                    .ok()
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

/// Environment variable the servers read their fault file from (see drover-rpc's `Faults`).
pub const FAULTS_ENV: &str = "DROVER_TEST_FAULTS";

/// One `drover agent --server` process of a [`ServerCluster`], restartable on the same data
/// dir and ports.
pub struct ServerProc {
    /// The running process; `None` while stopped.
    pub agent: Option<Agent>,
    pub http_port: u16,
    pub rpc_port: u16,
    /// The address it binds and is reached at.
    pub host: String,
    pub dir: PathBuf,
    /// Addresses listed here are cut off from this server (read every 100 ms).
    pub faults_file: PathBuf,
    /// Set when the server's HTTP API speaks HTTPS: what callers trust and present.
    pub https: Option<HttpsIdentity>,
    args: Vec<String>,
}

impl ServerProc {
    pub fn rpc_addr(&self) -> String {
        format!("{}:{}", self.host, self.rpc_port)
    }

    pub fn http_addr(&self) -> String {
        let scheme = if self.https.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}:{}", self.host, self.http_port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("agent.log")
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open server log");
        let child = Command::new(drover_bin())
            .args(&self.args)
            .env(FAULTS_ENV, &self.faults_file)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log fd"))
            .stderr(log)
            .spawn()
            .expect("spawn drover server");
        self.agent = Some(Agent {
            child,
            host: self.host.clone(),
            http_port: self.http_port,
            rpc_port: self.rpc_port,
            data_dir: self.dir.clone(),
            log_path: self.log_path(),
        });
    }

    pub fn is_running(&self) -> bool {
        self.agent.is_some()
    }
}

/// Servers started together as one cluster (`--bootstrap-expect N`, each joining the first),
/// without clients, on loopback ports.
pub struct ServerCluster {
    pub servers: Vec<ServerProc>,
    pub dir: PathBuf,
}

impl ServerCluster {
    /// Starts `n` servers; `config` (agent HCL) is given to each when not empty. Returns once
    /// every server knows the same leader.
    pub fn start(dir: &Path, n: usize, config: &str) -> ServerCluster {
        Self::start_on(dir, n, config, "127.0.0.1")
    }

    /// As [`ServerCluster::start`], every server bound to `host` (an address of this host's,
    /// such as the host end of a test network namespace's link).
    pub fn start_on(dir: &Path, n: usize, config: &str, host: &str) -> ServerCluster {
        Self::start_with(dir, n, config, host, None)
    }

    /// As [`ServerCluster::start`] for servers whose `config` turns HTTPS on: the harness and
    /// the CLI call them with `identity`.
    pub fn start_https(
        dir: &Path,
        n: usize,
        config: &str,
        identity: HttpsIdentity,
    ) -> ServerCluster {
        Self::start_with(dir, n, config, "127.0.0.1", Some(identity))
    }

    fn start_with(
        dir: &Path,
        n: usize,
        config: &str,
        host: &str,
        https: Option<HttpsIdentity>,
    ) -> ServerCluster {
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let seed = format!("{host}:{}", ports[0].1);
        let mut servers = Vec::new();
        for (i, (http_port, rpc_port)) in ports.into_iter().enumerate() {
            let sdir = dir.join(format!("s{i}"));
            std::fs::create_dir_all(&sdir).expect("server dir");
            let mut args: Vec<String> = [
                "agent",
                "--server",
                "--bind",
                host,
                "--node",
                &format!("s{i}"),
                "--bootstrap-expect",
                &n.to_string(),
                "--join",
                &seed,
                "--log-level",
                "debug",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend([
                "--data-dir".to_string(),
                sdir.join("data").display().to_string(),
                "--http-port".to_string(),
                http_port.to_string(),
                "--rpc-port".to_string(),
                rpc_port.to_string(),
            ]);
            if !config.is_empty() {
                let path = sdir.join("agent.hcl");
                std::fs::write(&path, config).expect("write agent config");
                args.extend(["--config".to_string(), path.display().to_string()]);
            }
            servers.push(ServerProc {
                agent: None,
                http_port,
                rpc_port,
                host: host.to_string(),
                faults_file: sdir.join("faults"),
                dir: sdir,
                https: https.clone(),
                args,
            });
        }
        for s in &mut servers {
            s.spawn();
        }
        let cluster = ServerCluster {
            servers,
            dir: dir.to_path_buf(),
        };
        cluster.wait_agreed_leader(Duration::from_secs(60));
        cluster
    }

    /// GET a JSON document from server `i`.
    pub fn get(&self, i: usize, path: &str) -> Result<Value, String> {
        http_call_as(
            self.servers[i].https.as_ref(),
            "GET",
            &format!("{}{path}", self.servers[i].http_addr()),
            None,
        )
        .and_then(|(status, body)| {
            if status == 200 {
                serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
            } else {
                Err(format!("{status}: {body}"))
            }
        })
    }

    /// Sends a request to server `i`; returns status and body (status 0: no answer).
    pub fn send(&self, i: usize, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        match http_call_as(
            self.servers[i].https.as_ref(),
            method,
            &format!("{}{path}", self.servers[i].http_addr()),
            body,
        ) {
            Ok(r) => r,
            Err(e) => (0, e),
        }
    }

    /// Index of the server whose RPC address `addr` is.
    pub fn index_of(&self, addr: &str) -> Option<usize> {
        self.servers.iter().position(|s| s.rpc_addr() == addr)
    }

    /// The leader every running server names, if they agree on one.
    pub fn agreed_leader(&self) -> Option<usize> {
        let mut leader = None;
        for (i, s) in self.servers.iter().enumerate() {
            if !s.is_running() {
                continue;
            }
            let named = self.get(i, "/v1/status/leader").ok()?;
            let idx = self.index_of(named.as_str()?)?;
            if leader.is_some_and(|l| l != idx) {
                return None;
            }
            leader = Some(idx);
        }
        leader.filter(|l| self.servers[*l].is_running())
    }

    /// Waits until every running server names the same, running leader.
    pub fn wait_agreed_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.agreed_leader() {
                return l;
            }
            if Instant::now() > deadline {
                panic!("no agreed leader within {timeout:?}\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// SIGKILLs server `i`.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut a) = self.servers[i].agent.take() {
            a.kill9();
        }
    }

    /// Stops server `i` with SIGTERM (SIGKILL after 10 s).
    pub fn stop(&mut self, i: usize) {
        if let Some(mut a) = self.servers[i].agent.take() {
            a.terminate();
        }
    }

    /// Starts server `i` again with the same data dir, ports and flags.
    pub fn restart(&mut self, i: usize) {
        assert!(!self.servers[i].is_running(), "server {i} is running");
        self.servers[i].spawn();
    }

    /// Cuts server `i` off from every other server, both ways.
    pub fn isolate(&self, i: usize) {
        let others: Vec<String> = (0..self.servers.len())
            .filter(|j| *j != i)
            .map(|j| self.servers[j].rpc_addr())
            .collect();
        std::fs::write(&self.servers[i].faults_file, others.join("\n")).expect("faults file");
        for (j, s) in self.servers.iter().enumerate() {
            if j != i {
                std::fs::write(&s.faults_file, self.servers[i].rpc_addr()).expect("faults file");
            }
        }
        // The servers re-read their fault files every 100 ms.
        std::thread::sleep(Duration::from_millis(300));
    }

    /// Removes every fault.
    pub fn heal(&self) {
        for s in &self.servers {
            let _ = std::fs::remove_file(&s.faults_file);
        }
        std::thread::sleep(Duration::from_millis(300));
    }

    /// The state digest server `i` reports about itself (`?stale`), with its index.
    pub fn digest(&self, i: usize) -> Option<(String, u64)> {
        let d = self.get(i, "/v1/operator/raft/state-digest?stale").ok()?;
        Some((d["Digest"].as_str()?.to_string(), d["Index"].as_u64()?))
    }

    /// Waits until every running server reports the same digest; returns it.
    pub fn wait_equal_digests(&self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let digests: Vec<Option<(String, u64)>> = (0..self.servers.len())
                .filter(|i| self.servers[*i].is_running())
                .map(|i| self.digest(i))
                .collect();
            if let Some(Some(first)) = digests.first()
                && digests.iter().all(|d| d.as_ref() == Some(first))
            {
                return first.0.clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "digests still differ after {timeout:?}: {digests:?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The tail of every server's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.servers.iter().enumerate() {
            let log = std::fs::read_to_string(s.log_path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().filter(|l| !l.contains("DEBUG")).collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            out.push_str(&format!(
                "--- server {i} ({}) ---\n{}\n",
                s.rpc_addr(),
                tail.join("\n")
            ));
        }
        out
    }

    /// Runs the CLI against server `i`.
    pub fn cli(&self, i: usize, args: &[&str]) -> Output {
        let mut cmd = Command::new(drover_bin());
        cmd.args(args)
            .env("DROVER_ADDR", self.servers[i].http_addr())
            .env_remove("NOMAD_ADDR");
        if let Some(id) = &self.servers[i].https {
            cmd.env("NOMAD_CACERT", &id.ca_file)
                .env("NOMAD_CLIENT_CERT", &id.cert_file)
                .env("NOMAD_CLIENT_KEY", &id.key_file);
        }
        cmd.output().expect("run drover CLI")
    }
}

impl Drop for ServerCluster {
    fn drop(&mut self) {
        for i in 0..self.servers.len() {
            self.kill9(i);
        }
    }
}

/// What an HTTPS caller trusts (the CA) and presents (a certificate and its key), as files.
#[derive(Debug, Clone)]
pub struct HttpsIdentity {
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl HttpsIdentity {
    fn tls_config(&self) -> ureq::tls::TlsConfig {
        use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};
        let read = |p: &PathBuf| std::fs::read(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        let ca = Certificate::from_pem(&read(&self.ca_file)).expect("CA certificate");
        let cert = Certificate::from_pem(&read(&self.cert_file)).expect("client certificate");
        let key = PrivateKey::from_pem(&read(&self.key_file)).expect("client key");
        TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&[ca]))
            .client_cert(Some(ClientCert::new_with_certs(&[cert], key)))
            .build()
    }
}

/// One HTTP request with a 15 s overall timeout; status 0 never comes back (errors are `Err`).
pub fn http_call(method: &str, url: &str, body: Option<&str>) -> Result<(u16, String), String> {
    http_call_as(None, method, url, body)
}

/// As [`http_call`], over HTTPS with `identity` when given.
pub fn http_call_as(
    identity: Option<&HttpsIdentity>,
    method: &str,
    url: &str,
    body: Option<&str>,
) -> Result<(u16, String), String> {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(15)));
    if let Some(id) = identity {
        config = config.tls_config(id.tls_config());
    }
    let agent: ureq::Agent = config.build().into();
    let response = match (method, body) {
        ("PUT", Some(b)) => agent.put(url).send(b),
        ("POST", Some(b)) => agent.post(url).send(b),
        ("DELETE", _) => agent.delete(url).call(),
        _ => agent.get(url).call(),
    };
    match response {
        Ok(mut r) => {
            let status = r.status().as_u16();
            Ok((status, r.body_mut().read_to_string().unwrap_or_default()))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Writes a job file into `dir` and returns its path as a string, for the CLI.
pub fn write_job(dir: &TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write job file");
    p.display().to_string()
}

/// A job's allocations as the API lists them (empty when the request fails).
pub fn allocs(agent: &Agent, job: &str) -> Vec<Value> {
    agent
        .get(&format!("/v1/job/{job}/allocations"))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// Pid of the live process whose command line is exactly `argv`.
pub fn find_process(argv: &[&str]) -> Option<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        (cmdline == wanted && is_alive(pid)).then_some(pid)
    })
}

/// Running and not a zombie.
pub fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next().map(|st| st != "Z"))
        })
        .unwrap_or(false)
}

/// Runs a job "long" of one `sleep <seconds>` task on `driver` through the CLI, waits until its
/// allocation runs and its process exists, and returns that process's pid. `seconds` should
/// name the test run so exactly its process is found.
pub fn run_long_sleep(agent: &Agent, dir: &TempDir, driver: &str, seconds: &str) -> i32 {
    let wait = Duration::from_secs(60);
    let job = write_job(
        dir,
        "long.nomad",
        &format!(
            r#"
job "long" {{
  datacenters = ["dc1"]
  group "g" {{
    task "sleep" {{
      driver = "{driver}"
      config {{
        command = "sleep"
        args = ["{seconds}"]
      }}
      resources {{
        cpu = 20
        memory = 16
      }}
    }}
  }}
}}
"#
        ),
    );
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(
        out.status.success(),
        "job run failed: {}",
        output_text(&out)
    );
    agent.eventually("the alloc to run", wait, || {
        allocs(agent, "long")
            .iter()
            .any(|a| a["ClientStatus"] == "running")
    });
    let argv = ["/usr/bin/sleep", seconds];
    let alt = ["/bin/sleep", seconds];
    let mut pid = None;
    agent.eventually("the sleep process", wait, || {
        pid = find_process(&argv).or_else(|| find_process(&alt));
        pid.is_some()
    });
    pid.expect("eventually returned only once the process was found")
}

/// The job file of job `name` of type `kind`: one task on the mock driver that runs for
/// `run_for` (a Go duration), with small resources.
pub fn mock_job(name: &str, kind: &str, run_for: &str) -> String {
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "{kind}"
  group "g" {{
    task "t" {{
      driver = "mock_driver"
      config {{ run_for = "{run_for}" }}
      resources {{
        cpu    = 10
        memory = 10
      }}
    }}
  }}
}}
"#
    )
}

/// Runs a batch job `name` of one task "say" on `driver` running `/bin/sh -c <script>` through
/// the CLI, waits until its allocation completes and returns the task's stdout as
/// `drover alloc logs` prints it.
pub fn run_batch_script(
    agent: &Agent,
    dir: &TempDir,
    name: &str,
    driver: &str,
    script: &str,
) -> String {
    let job = write_job(
        dir,
        &format!("{name}.nomad"),
        &format!(
            r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "batch"
  group "g" {{
    task "say" {{
      driver = "{driver}"
      config {{
        command = "/bin/sh"
        args = ["-c", {script}]
      }}
      resources {{
        cpu = 20
        memory = 32
      }}
    }}
  }}
}}
"#,
            script = serde_json::Value::from(script)
        ),
    );
    let out = agent.cli(&["job", "run", &job]);
    assert!(
        out.status.success(),
        "job run failed: {}\n{}",
        output_text(&out),
        agent.log()
    );
    agent.eventually(
        "the batch alloc to complete",
        Duration::from_secs(60),
        || {
            allocs(agent, name)
                .iter()
                .any(|a| a["ClientStatus"] == "complete")
        },
    );
    let alloc_id = allocs(agent, name)[0]["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    let logs = agent.cli(&["alloc", "logs", &alloc_id, "say"]);
    assert!(
        logs.status.success(),
        "alloc logs failed: {}",
        output_text(&logs)
    );
    String::from_utf8_lossy(&logs.stdout).to_string()
}

/// The task's event of type "Driver" (a driver's task event), from the allocation's API.
pub fn driver_event(agent: &Agent, alloc_id: &str, task: &str) -> Option<Value> {
    let alloc = agent.get(&format!("/v1/allocation/{alloc_id}")).ok()?;
    alloc["TaskStates"][task]["Events"]
        .as_array()?
        .iter()
        .find(|e| e["Type"] == "Driver")
        .cloned()
}

/// The skeleton drivers (cdylib and sidecar) report each task's pid as a task event when it starts: it shows in the
/// allocation's task events (Nomad's shape) and in `drover alloc status`.
pub fn assert_start_event_shown(agent: &Agent, alloc_id: &str, pid: i32) {
    agent.eventually("the driver's task event", Duration::from_secs(60), || {
        driver_event(agent, alloc_id, "sleep").is_some()
    });
    let event = driver_event(agent, alloc_id, "sleep").unwrap();
    let message = format!("started as host process {pid}");
    assert_eq!(event["DriverMessage"], message.as_str(), "{event}");
    assert_eq!(event["DisplayMessage"], message.as_str(), "{event}");
    assert_eq!(event["Details"]["pid"], pid.to_string().as_str(), "{event}");
    let status = agent.cli(&["alloc", "status", alloc_id]);
    let text = output_text(&status);
    assert!(status.status.success(), "alloc status failed: {text}");
    assert!(
        text.lines()
            .any(|l| l.contains("Driver") && l.contains(&message)),
        "no Driver event in alloc status:\n{text}"
    );
}

/// Sends `signal` to `pid`.
pub fn signal(pid: i32, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions; tests signal processes they started.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Whether `pid` is alive and runs a program whose command line names `program`.
pub fn runs_program(pid: i32, program: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains(program))
        .unwrap_or(false)
        && is_alive(pid)
}

/// Plugins outlive the agent by design: this kills a test's go-plugin processes (those the
/// agent's reattach files under `<dir>/data/plugins` name, running `program`) when the test
/// ends, pass or fail. Declare it before the agent, so that it runs after the agent stopped.
pub struct PluginReaper {
    pub dir: PathBuf,
    pub program: &'static str,
}

impl Drop for PluginReaper {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.dir.join("data/plugins")) else {
            return;
        };
        for entry in entries.flatten() {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            if let Some(pid) = v["pid"].as_i64().and_then(|p| i32::try_from(p).ok())
                && runs_program(pid, self.program)
            {
                // SIGTERM lets a plugin clean up (go-plugin ignores SIGINT); SIGKILL if it
                // does not go.
                signal(pid, libc::SIGTERM);
                for _ in 0..50 {
                    if !runs_program(pid, self.program) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if runs_program(pid, self.program) {
                    signal(pid, libc::SIGKILL);
                }
            }
            // A Go plugin removes its socket only when asked to exit through go-plugin's
            // controller, never on a signal.
            if let Some(socket) = v["address"].as_str().filter(|a| a.contains("plugin")) {
                let _ = std::fs::remove_file(socket);
            }
        }
    }
}

/// A response of Nomad 1.1.2 from `../shared/reference/nomad-api-samples/NAME`, parsed.
pub fn nomad_sample(name: &str) -> Value {
    let path = workspace_root()
        .join("../shared/reference/nomad-api-samples")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The keys of a JSON object (none for anything else), to compare shapes with Nomad's.
pub fn json_keys(v: &Value) -> std::collections::BTreeSet<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}
