//! CSI with a plugin nobody here wrote: the Kubernetes CSI hostpath driver
//! (kubernetes-csi/csi-driver-host-path v1.16.1, `../shared/bin/hostpathplugin`) through the whole
//! volume lifecycle, on real agent processes:
//!
//! - its plugin job (raw_exec, `--endpoint ${CSI_ENDPOINT}` as Nomad's own demo job passes it)
//!   becomes healthy with the provider and version its GetPluginInfo answers;
//! - `volume create` runs its CreateVolume; a writer (exec) and then a reader (raw_exec) use the
//!   volume; with `--enable-attach` every claim goes through ControllerPublish/Unpublish;
//! - a second single-node-writer waits with Nomad's placement text until the first stops;
//! - a claiming agent killed with SIGKILL while the volume is published comes back with one claim
//!   and no extra mount; stopping releases the claim and leaves no mount under the test's dirs;
//! - `volume delete` runs DeleteVolume, and the plugin goes when its jobs stop.
//!
//! Layouts: a monolith plugin job on a dev agent, with and without attach; split controller and
//! node plugin jobs on a dev agent; and a server with two client-only agents, the controller on
//! one and the node plugin and every claiming task on the other, so controller calls reach the
//! plugin through the servers.
//!
//! The hostpath driver keeps its volumes in its process's memory (its state file is read only
//! at start), so split controller and node jobs must reach one process: the controller job runs
//! the driver and the node job runs `csi_socket_relay` (this package's binary), which serves the
//! node plugin's socket by relaying it to the controller's. Drover sees two plugin allocations of
//! the two types, each with its own socket.
//!
//! Skips with a message when `../shared/bin/hostpathplugin` is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use drover_tests::clients::{ClientProc, RAW_EXEC_ENABLED};
use drover_tests::{
    Agent, ServerCluster, TempDir, drover_bin, http_call, output_text, workspace_root, write_job,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);
/// The plugin id the jobs register (short: the socket path must fit a unix socket address).
const PLUGIN: &str = "hostpath";
/// What the driver's GetPluginInfo answers.
const PROVIDER: &str = "hostpath.csi.k8s.io";
const PROVIDER_VERSION: &str = "v1.16.1";
const VOLUME: &str = "data";
/// A unix socket address holds 108 bytes with its terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// The driver's binary, or `None` (with a message) when `../shared/bin` does not have it.
fn hostpathplugin() -> Option<PathBuf> {
    let bin = workspace_root()
        .parent()
        .map(|p| p.join("shared/bin/hostpathplugin"))?;
    if bin.is_file() {
        Some(bin)
    } else {
        eprintln!(
            "skipping: {} is missing (the Kubernetes CSI hostpath driver; see ../shared/bin/README.md)",
            bin.display()
        );
        None
    }
}

/// Where the test talks to Drover (one agent's HTTP API) and the logs shown on failure.
#[derive(Clone)]
struct Api {
    addr: String,
    logs: Vec<PathBuf>,
}

impl Api {
    fn get(&self, path: &str) -> Result<Value, String> {
        let (status, body) = http_call("GET", &format!("{}{path}", self.addr), None)?;
        if status != 200 {
            return Err(format!("{status}: {body}"));
        }
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(drover_bin())
            .args(args)
            .env("DROVER_ADDR", &self.addr)
            .env_remove("NOMAD_ADDR")
            .output()
            .expect("run the drover CLI")
    }

    /// The last lines of every agent's log, without debug lines.
    fn logs(&self) -> String {
        let mut out = String::new();
        for path in &self.logs {
            let log = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().filter(|l| !l.contains("DEBUG")).collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            out.push_str(&format!(
                "--- {} ---\n{}\n",
                path.display(),
                tail.join("\n")
            ));
        }
        out
    }

    fn eventually(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn run_job(&self, dir: &TempDir, name: &str, text: &str) {
        let file = write_job(dir, &format!("{name}.nomad"), text);
        let out = self.cli(&["job", "run", "-detach", &file]);
        assert!(
            out.status.success(),
            "job run {name}: {}",
            output_text(&out)
        );
    }

    fn stop_job(&self, name: &str) {
        let out = self.cli(&["job", "stop", "-detach", name]);
        assert!(
            out.status.success(),
            "job stop {name}: {}",
            output_text(&out)
        );
    }

    fn allocs(&self, job: &str) -> Vec<Value> {
        self.get(&format!("/v1/job/{job}/allocations"))
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    fn alloc_with_status(&self, job: &str, status: &str) -> Option<Value> {
        self.allocs(job)
            .into_iter()
            .find(|a| a["ClientStatus"] == status)
    }

    /// Waits for the job's allocation to run and answers its id.
    fn running_alloc(&self, job: &str) -> String {
        let mut id = String::new();
        self.eventually(&format!("job {job} to run"), || {
            id = self
                .alloc_with_status(job, "running")
                .and_then(|a| a["ID"].as_str().map(str::to_string))
                .unwrap_or_default();
            !id.is_empty()
        });
        id
    }

    /// Waits for the batch job to end and answers its allocation, which must have completed.
    fn completed_alloc(&self, job: &str) -> Value {
        self.eventually(&format!("job {job} to finish"), || {
            self.alloc_with_status(job, "complete").is_some()
                || self.alloc_with_status(job, "failed").is_some()
        });
        self.alloc_with_status(job, "complete")
            .unwrap_or_else(|| panic!("job {job} failed: {:#?}\n{}", self.allocs(job), self.logs()))
    }

    fn task_log(&self, alloc_id: &str, task: &str, stderr: bool) -> String {
        let mut args = vec!["alloc", "logs"];
        if stderr {
            args.push("-stderr");
        }
        args.extend([alloc_id, task]);
        let out = self.cli(&args);
        assert!(out.status.success(), "alloc logs: {}", output_text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn volume(&self) -> Value {
        self.get(&format!("/v1/volume/csi/{VOLUME}"))
            .unwrap_or(Value::Null)
    }

    fn node(&self, node_id: &str) -> Value {
        self.get(&format!("/v1/node/{node_id}"))
            .unwrap_or(Value::Null)
    }
}

fn claims(v: &Value, which: &str) -> usize {
    v[which].as_object().map_or(0, |m| m.len())
}

fn no_claims(v: &Value) -> bool {
    [
        "ReadAllocs",
        "WriteAllocs",
        "ReadClaims",
        "WriteClaims",
        "PastClaims",
    ]
    .iter()
    .all(|w| claims(v, w) == 0)
}

/// Mount points at or below `root` in this (the host's) mount table, sorted.
fn mounts_under(root: &Path) -> Vec<String> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let root = root.to_string_lossy().into_owned();
    let mut found: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|p| p.starts_with(&root))
        .collect();
    found.sort();
    found
}

/// The driver's gRPC calls as it logs them at `--v=5`: (method, whether it succeeded).
fn driver_calls(log: &str) -> Vec<(String, bool)> {
    log.lines()
        .filter_map(|l| l.split_once("gRPCCall: ").map(|(_, json)| json))
        .filter_map(|json| serde_json::from_str::<Value>(json).ok())
        .filter_map(|call| {
            let method = call["Method"].as_str()?.rsplit('/').next()?.to_string();
            Some((method, call["Error"].as_str().is_some_and(str::is_empty)))
        })
        .collect()
}

fn count_calls(calls: &[(String, bool)], method: &str) -> (usize, usize) {
    let of = calls.iter().filter(|(m, _)| m == method);
    let ok = of.clone().filter(|(_, ok)| *ok).count();
    (ok, of.count() - ok)
}

/// Kills what the test's agents left running below `root` (tasks outlive their agent by
/// design) and lazily unmounts what is still mounted there, when the test ends, pass or fail.
/// Declared so that it drops after the agents and before the directory.
struct Reaper {
    root: PathBuf,
}

impl Reaper {
    /// Processes whose command line, working directory or root lies below the test's directory.
    fn leftover_processes(&self) -> Vec<i32> {
        let root = self.root.to_string_lossy().into_owned();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| *pid != std::process::id() as i32)
            .filter(|pid| !is_agent(*pid))
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains(&root))
                    .unwrap_or(false);
                let link_below = |what: &str| {
                    std::fs::read_link(format!("/proc/{pid}/{what}"))
                        .is_ok_and(|p| p.starts_with(&self.root))
                };
                cmdline || link_below("cwd") || link_below("root")
            })
            .collect()
    }
}

/// A `drover agent` process (the scenario's own agents, which it stops itself).
fn is_agent(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let mut args = c.split(|b| *b == 0);
        args.next().is_some_and(|a| a.ends_with(b"drover"))
            && args.next() == Some(b"agent".as_slice())
    })
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in self.leftover_processes() {
            drover_tests::signal(pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(200));
        for mount in mounts_under(&self.root).iter().rev() {
            let Ok(path) = std::ffi::CString::new(mount.as_str()) else {
                continue;
            };
            // SAFETY: umount2 reads a NUL-terminated path that outlives the call.
            unsafe {
                libc::umount2(path.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

/// How the driver is deployed.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Layout {
    /// One `type = "monolith"` plugin job.
    Monolith,
    /// A `type = "controller"` job running the driver and a `type = "node"` job relaying to it.
    Split,
}

/// The agents of a scenario.
enum Agents {
    /// One `agent --dev` (server and client).
    Dev { agent: Agent, dir: PathBuf },
    /// One server and two client-only agents: `controller` runs the controller plugin, `claimer`
    /// the node plugin and every task that claims the volume.
    Cluster(Box<ClusterAgents>),
}

struct ClusterAgents {
    claimer: ClientProc,
    controller: ClientProc,
    cluster: ServerCluster,
}

impl Agents {
    fn api(&self) -> Api {
        match self {
            Agents::Dev { agent, .. } => Api {
                addr: agent.addr(),
                logs: vec![agent.log_path.clone()],
            },
            Agents::Cluster(c) => Api {
                addr: c.cluster.servers[0].http_addr(),
                logs: vec![
                    c.cluster.servers[0].log_path(),
                    c.controller.log_path(),
                    c.claimer.log_path(),
                ],
            },
        }
    }

    /// The client data dir of the agent running the controller plugin.
    fn controller_client_dir(&self) -> PathBuf {
        match self {
            Agents::Dev { dir, .. } => dir.join("data/client"),
            Agents::Cluster(c) => c.controller.dir.join("data/client"),
        }
    }

    /// The `constraint` block pinning the controller (or monolith) plugin job.
    fn controller_constraint(&self) -> String {
        match self {
            Agents::Dev { .. } => String::new(),
            Agents::Cluster(c) => constraint(&c.controller.name),
        }
    }

    /// The `constraint` block pinning the node plugin job and every claiming job.
    fn claimer_constraint(&self) -> String {
        match self {
            Agents::Dev { .. } => String::new(),
            Agents::Cluster(c) => constraint(&c.claimer.name),
        }
    }

    /// SIGKILLs the agent whose node claims the volume and starts it again on the same data
    /// dir and ports; returns once it serves its API again.
    fn kill9_and_restart_claimer(&mut self) {
        match self {
            Agents::Dev { agent, dir } => {
                let (http, rpc) = (agent.http_port, agent.rpc_port);
                agent.kill9();
                *agent = Agent::start_on_ports(dir, http, rpc, &[]);
            }
            Agents::Cluster(c) => {
                c.claimer.restart();
                c.claimer.wait_ready(WAIT);
            }
        }
    }
}

fn constraint(node_name: &str) -> String {
    format!(
        r#"
    constraint {{
      attribute = "${{node.unique.name}}"
      value     = "{node_name}"
    }}"#
    )
}

/// One run of the lifecycle.
struct Scenario {
    layout: Layout,
    attach: bool,
    agents: Agents,
    reaper: Reaper,
    dir: TempDir,
    bin: PathBuf,
    state_dir: PathBuf,
}

impl Scenario {
    fn dev(name: &str, bin: PathBuf, layout: Layout, attach: bool) -> Scenario {
        let dir = TempDir::new(name);
        let reaper = Reaper {
            root: dir.path().to_path_buf(),
        };
        let agent = Agent::start_dev(dir.path(), &[]);
        Scenario {
            layout,
            attach,
            state_dir: dir.path().join("hostpath-state"),
            agents: Agents::Dev {
                agent,
                dir: dir.path().to_path_buf(),
            },
            reaper,
            dir,
            bin,
        }
    }

    fn cluster(name: &str, bin: PathBuf, attach: bool) -> Scenario {
        let dir = TempDir::new(name);
        let reaper = Reaper {
            root: dir.path().to_path_buf(),
        };
        let cluster = ServerCluster::start(dir.path(), 1, "");
        let servers = vec![cluster.servers[0].rpc_addr()];
        let controller = ClientProc::start(dir.path(), "ctl", &servers, RAW_EXEC_ENABLED);
        let claimer = ClientProc::start(dir.path(), "app", &servers, RAW_EXEC_ENABLED);
        Scenario {
            layout: Layout::Split,
            attach,
            state_dir: dir.path().join("hostpath-state"),
            agents: Agents::Cluster(Box::new(ClusterAgents {
                claimer,
                controller,
                cluster,
            })),
            reaper,
            dir,
            bin,
        }
    }

    fn api(&self) -> Api {
        self.agents.api()
    }

    /// The job running the driver itself (the monolith, or the controller of a split).
    fn driver_job(&self) -> &'static str {
        match self.layout {
            Layout::Monolith => "plugin-hostpath",
            Layout::Split => "plugin-hostpath-controller",
        }
    }

    fn plugin_jobs(&self) -> Vec<&'static str> {
        match self.layout {
            Layout::Monolith => vec!["plugin-hostpath"],
            Layout::Split => vec!["plugin-hostpath-controller", "plugin-hostpath-nodes"],
        }
    }

    /// The driver's job: raw_exec, the socket from `CSI_ENDPOINT` (the host path, for a driver
    /// without filesystem isolation), the node id from the node's name.
    fn driver_job_text(&self) -> String {
        let (group, kind) = match self.layout {
            Layout::Monolith => ("monolith", "monolith"),
            Layout::Split => ("controller", "controller"),
        };
        let attach = if self.attach {
            r#", "--enable-attach""#
        } else {
            ""
        };
        format!(
            r#"
job "{job}" {{
  datacenters = ["dc1"]
  group "{group}" {{{constraint}
    task "plugin" {{
      driver = "raw_exec"
      config {{
        command = "{bin}"
        args    = ["--endpoint", "${{CSI_ENDPOINT}}", "--nodeid", "${{node.unique.name}}",
                   "--drivername", "{PROVIDER}", "--statedir", "{state}", "--v=5"{attach}]
      }}
      csi_plugin {{
        id        = "{PLUGIN}"
        type      = "{kind}"
        mount_dir = "/csi"
      }}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
  }}
}}
"#,
            job = self.driver_job(),
            constraint = self.agents.controller_constraint(),
            bin = self.bin.display(),
            state = self.state_dir.display(),
        )
    }

    /// The node plugin job of a split: the relay, serving `CSI_ENDPOINT` from the controller's
    /// socket.
    fn node_job_text(&self) -> String {
        let controller_socket = self
            .agents
            .controller_client_dir()
            .join("csi/controller")
            .join(PLUGIN)
            .join("csi.sock");
        assert!(
            controller_socket.as_os_str().len() <= MAX_SOCKET_PATH,
            "{} is too long for a unix socket: shorten the test's names",
            controller_socket.display()
        );
        format!(
            r#"
job "plugin-hostpath-nodes" {{
  datacenters = ["dc1"]
  group "nodes" {{{constraint}
    task "plugin" {{
      driver = "raw_exec"
      config {{
        command = "{relay}"
        args    = ["--listen", "${{CSI_ENDPOINT}}", "--to", "{socket}"]
      }}
      csi_plugin {{
        id        = "{PLUGIN}"
        type      = "node"
        mount_dir = "/csi"
      }}
      resources {{
        cpu    = 20
        memory = 32
      }}
    }}
  }}
}}
"#,
            constraint = self.agents.claimer_constraint(),
            relay = env!("CARGO_BIN_EXE_csi_socket_relay"),
            socket = controller_socket.display(),
        )
    }

    /// A job whose task runs `script` with the volume at /data (exec), or at
    /// `<task dir>/data` (raw_exec, which cannot remap paths).
    fn volume_job(&self, name: &str, kind: &str, driver: &str, script: &str) -> String {
        format!(
            r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "{kind}"
  group "g" {{{constraint}
    volume "data" {{
      type            = "csi"
      source          = "{VOLUME}"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
      mount_options {{
        mount_flags = ["noatime"]
      }}
    }}
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "{driver}"
      config {{
        command = "/bin/sh"
        args    = ["-c", "{script}"]
      }}
      volume_mount {{
        volume      = "data"
        destination = "/data"
      }}
      resources {{
        cpu    = 20
        memory = 32
      }}
    }}
  }}
}}
"#,
            constraint = self.agents.claimer_constraint(),
        )
    }

    /// The node that claims the volume (where the node plugin runs).
    fn claimer_node_id(&self) -> String {
        let api = self.api();
        let mut node = String::new();
        api.eventually("the node plugin's node", || {
            node = api
                .get(&format!("/v1/plugin/csi/{PLUGIN}"))
                .ok()
                .and_then(|p| p["Nodes"].as_object()?.keys().next().cloned())
                .unwrap_or_default();
            !node.is_empty()
        });
        node
    }

    fn driver_alloc(&self) -> String {
        self.api().running_alloc(self.driver_job())
    }

    /// The driver's process (its command line names this scenario's state dir).
    fn driver_pid(&self) -> Option<i32> {
        let state = self.state_dir.to_string_lossy().into_owned();
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    let c = String::from_utf8_lossy(&c);
                    c.contains("hostpathplugin") && c.contains(&state)
                }) && drover_tests::is_alive(*pid)
            })
    }

    /// Restarts of the plugin jobs' tasks, summed.
    fn plugin_restarts(&self) -> u64 {
        let api = self.api();
        self.plugin_jobs()
            .iter()
            .filter_map(|job| api.alloc_with_status(job, "running"))
            .map(|a| a["TaskStates"]["plugin"]["Restarts"].as_u64().unwrap_or(0))
            .sum()
    }

    /// The request of the driver's last logged `method` call (its `--v=5` gRPC log, which
    /// reaches its file through the agent's log pipe a moment after the call).
    fn driver_request(&self, method: &str) -> Value {
        let api = self.api();
        let mut found = Value::Null;
        api.eventually(&format!("the driver's {method} call in its log"), || {
            let log = api.task_log(&self.driver_alloc(), "plugin", true);
            found = log
                .lines()
                .rev()
                .filter_map(|l| l.split_once("gRPCCall: ").map(|(_, json)| json))
                .filter_map(|json| serde_json::from_str::<Value>(json).ok())
                .find(|call| {
                    call["Method"]
                        .as_str()
                        .is_some_and(|m| m.ends_with(&format!("/{method}")))
                })
                .map(|call| call["Request"].clone())
                .unwrap_or(Value::Null);
            !found.is_null()
        });
        found
    }

    fn driver_calls(&self) -> Vec<(String, bool)> {
        let api = self.api();
        driver_calls(&api.task_log(&self.driver_alloc(), "plugin", true))
    }

    /// Runs the whole lifecycle.
    fn run(mut self) {
        let started = Instant::now();
        let mut last = started;
        let (layout, attach) = (self.layout, self.attach);
        let mut step = move |name: &str| {
            eprintln!(
                "{:?}, attach {}: {name} in {:?}",
                layout,
                attach,
                last.elapsed()
            );
            last = Instant::now();
        };
        self.plugin_becomes_healthy();
        step("plugin healthy");
        let external_id = self.volume_is_created();
        step("volume created");
        self.writer_then_reader_share_the_volume();
        step("writer and reader");
        self.second_writer_waits_for_the_first();
        step("second writer");
        self.kill9_while_published_keeps_one_claim_and_no_extra_mount();
        step("kill -9");
        if matches!(self.agents, Agents::Cluster(_)) {
            self.controller_agent_killed_while_published_comes_back();
            step("kill -9 of the controller's agent");
        }
        self.stop_releases_the_claim_and_every_mount();
        step("release");
        self.volume_and_plugin_go(&external_id);
        step("volume and plugin gone");
        eprintln!("lifecycle took {:?}", started.elapsed());
        if let Agents::Dev { agent, .. } = &mut self.agents {
            agent.terminate();
        }
    }

    fn plugin_becomes_healthy(&self) {
        let api = self.api();
        api.run_job(&self.dir, self.driver_job(), &self.driver_job_text());
        if self.layout == Layout::Split {
            api.run_job(&self.dir, "plugin-hostpath-nodes", &self.node_job_text());
        }
        api.eventually("the plugin to be healthy", || {
            api.get(&format!("/v1/plugin/csi/{PLUGIN}"))
                .is_ok_and(|p| p["ControllersHealthy"] == 1 && p["NodesHealthy"] == 1)
        });
        let plugin = api
            .get(&format!("/v1/plugin/csi/{PLUGIN}"))
            .expect("the healthy plugin");
        assert_eq!(plugin["Provider"], PROVIDER, "{plugin:#}");
        assert_eq!(plugin["Version"], PROVIDER_VERSION, "{plugin:#}");
        assert_eq!(plugin["ControllerRequired"], true, "{plugin:#}");
        assert_eq!(plugin["ControllersExpected"], 1, "{plugin:#}");
        assert_eq!(plugin["NodesExpected"], 1, "{plugin:#}");
        let controller = plugin["Controllers"]
            .as_object()
            .and_then(|m| m.values().next())
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(
            controller["ControllerInfo"]["SupportsAttachDetach"], self.attach,
            "{controller:#}"
        );
        assert_eq!(controller["ControllerInfo"]["SupportsCreateDelete"], true);
        let node = plugin["Nodes"]
            .as_object()
            .and_then(|m| m.values().next())
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(
            node["NodeInfo"]["RequiresNodeStageVolume"], true,
            "{node:#}"
        );
        assert_eq!(node["ProviderVersion"], PROVIDER_VERSION, "{node:#}");
        if let Agents::Cluster(c) = &self.agents {
            let controllers: Vec<&String> = plugin["Controllers"]
                .as_object()
                .map(|m| m.keys().collect())
                .unwrap_or_default();
            let nodes: Vec<&String> = plugin["Nodes"]
                .as_object()
                .map(|m| m.keys().collect())
                .unwrap_or_default();
            assert_eq!(controllers, vec![&c.controller.node_id()], "{plugin:#}");
            assert_eq!(nodes, vec![&c.claimer.node_id()], "{plugin:#}");
        }
        let out = api.cli(&["plugin", "status", PLUGIN]);
        let text = output_text(&out);
        assert!(out.status.success(), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("Provider") && l.ends_with(PROVIDER)),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("Version") && l.ends_with(PROVIDER_VERSION)),
            "{text}"
        );
    }

    /// `volume create`: the driver's CreateVolume makes a directory in its state dir.
    fn volume_is_created(&self) -> String {
        let api = self.api();
        let spec = write_job(
            &self.dir,
            "data.volume.hcl",
            &format!(
                r#"
id           = "{VOLUME}"
name         = "{VOLUME}"
type         = "csi"
plugin_id    = "{PLUGIN}"
capacity_min = "4MiB"
capacity_max = "8MiB"

capability {{
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}}

parameters {{
  drover-test = "passed-through"
}}

secrets {{
  drover-secret = "never-answered"
}}

mount_options {{
  mount_flags = ["nodev"]
}}
"#
            ),
        );
        let out = api.cli(&["volume", "create", &spec]);
        assert!(
            out.status.success(),
            "volume create: {}\n{}",
            output_text(&out),
            api.logs()
        );
        // The plugin got the volume's parameters and secrets; the API never answers secrets.
        let create = self.driver_request("CreateVolume");
        assert_eq!(
            create["parameters"]["drover-test"], "passed-through",
            "{create:#}"
        );
        assert_eq!(
            create["secrets"]["drover-secret"], "never-answered",
            "{create:#}"
        );
        let vol = api.volume();
        assert!(!vol.to_string().contains("never-answered"), "{vol:#}");
        let external_id = vol["ExternalID"].as_str().unwrap_or_default().to_string();
        assert!(!external_id.is_empty(), "{vol:#}");
        assert_eq!(vol["Schedulable"], true, "{vol:#}");
        assert_eq!(vol["Provider"], PROVIDER, "{vol:#}");
        assert_eq!(vol["ProviderVersion"], PROVIDER_VERSION, "{vol:#}");
        assert_eq!(vol["Capacity"], 4 * 1024 * 1024, "{vol:#}");
        assert!(
            self.state_dir.join(&external_id).is_dir(),
            "the driver made the volume's directory in its state dir"
        );
        // The storage provider's own list (ListVolumes, through a controller): it knows it.
        let external = api
            .get(&format!("/v1/volumes/external?plugin_id={PLUGIN}"))
            .expect("the plugin's external volumes");
        let listed = external["Volumes"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v["ExternalID"] == external_id.as_str()));
        assert!(listed, "{external:#}");
        // Registering the provider's volume under another id is validated by a controller
        // (ValidateVolumeCapabilities), wherever it runs.
        let spec = write_job(
            &self.dir,
            "registered.volume.hcl",
            &format!(
                r#"
id          = "registered"
name        = "registered"
type        = "csi"
plugin_id   = "{PLUGIN}"
external_id = "{external_id}"

capability {{
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}}
"#
            ),
        );
        let before = self.driver_calls();
        let out = api.cli(&["volume", "register", &spec]);
        assert!(
            out.status.success(),
            "volume register: {}",
            output_text(&out)
        );
        // The driver's log reaches its file through the agent's log pipe a moment later.
        api.eventually("the controller's validation call in its log", || {
            let calls = self.driver_calls()[before.len()..].to_vec();
            count_calls(&calls, "ValidateVolumeCapabilities") == (1, 0)
        });
        let out = api.cli(&["volume", "deregister", "registered"]);
        assert!(
            out.status.success(),
            "volume deregister: {}",
            output_text(&out)
        );
        let out = api.cli(&["volume", "status", "-verbose"]);
        let text = output_text(&out);
        assert!(
            text.contains(&format!("External volumes of plugin \"{PLUGIN}\""))
                && text.contains(&external_id),
            "{text}"
        );
        external_id
    }

    fn writer_then_reader_share_the_volume(&self) {
        let api = self.api();
        let before = self.driver_calls();
        api.run_job(
            &self.dir,
            "writer",
            &self.volume_job(
                "writer",
                "batch",
                "exec",
                "echo hello-k8s-hostpath > /data/greeting && echo wrote",
            ),
        );
        let writer = api.completed_alloc("writer");
        let writer_id = writer["ID"].as_str().unwrap_or_default();
        assert!(api.task_log(writer_id, "t", false).contains("wrote"));
        api.eventually("the writer's claim to be released", || {
            no_claims(&api.volume())
        });

        // What the driver was asked for that claim: attach and detach only with attach.
        let mut calls = Vec::new();
        api.eventually("the writer's unpublish to reach the driver", || {
            calls = self.driver_calls()[before.len()..].to_vec();
            count_calls(&calls, "NodeUnpublishVolume").0 >= 1
        });
        for method in [
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
        ] {
            let (ok, failed) = count_calls(&calls, method);
            assert!(ok >= 1 && failed == 0, "{method}: {calls:?}");
        }
        // The node calls carry the volume's secrets and the group's mount options, which
        // replace the volume's ("nodev").
        let publish = self.driver_request("NodePublishVolume");
        assert_eq!(
            publish["secrets"]["drover-secret"], "never-answered",
            "{publish:#}"
        );
        let flags = publish["volume_capability"]["AccessType"]["Mount"]["mount_flags"].to_string();
        assert!(
            flags.contains("noatime") && !flags.contains("nodev"),
            "{publish:#}"
        );
        let published = count_calls(&calls, "ControllerPublishVolume");
        if self.attach {
            api.eventually("the controller to detach the volume", || {
                calls = self.driver_calls()[before.len()..].to_vec();
                count_calls(&calls, "ControllerUnpublishVolume").0 >= 1
            });
            assert_eq!(published, (1, 0), "{calls:?}");
            let (_, failed) = count_calls(&calls, "ControllerUnpublishVolume");
            assert_eq!(failed, 0, "{calls:?}");
        } else {
            assert_eq!(published, (0, 0), "no attach without the capability");
        }

        // The reader, on raw_exec, finds the file in its task directory's bind of the volume.
        api.run_job(
            &self.dir,
            "reader",
            &self.volume_job(
                "reader",
                "batch",
                "raw_exec",
                "cat $NOMAD_TASK_DIR/../data/greeting",
            ),
        );
        let reader = api.completed_alloc("reader");
        let log = api.task_log(reader["ID"].as_str().unwrap_or_default(), "t", false);
        assert!(log.contains("hello-k8s-hostpath"), "the reader saw: {log}");
        api.eventually("the reader's claim to be released", || {
            no_claims(&api.volume())
        });
    }

    fn second_writer_waits_for_the_first(&self) {
        let api = self.api();
        api.run_job(
            &self.dir,
            "holder",
            &self.volume_job("holder", "service", "exec", "sleep 600"),
        );
        api.running_alloc("holder");
        api.run_job(
            &self.dir,
            "second",
            &self.volume_job("second", "service", "exec", "cat /data/greeting; sleep 600"),
        );
        api.eventually("the second writer's placement to fail", || {
            output_text(&api.cli(&["job", "status", "second"])).contains("Placement Failure")
        });
        let text = output_text(&api.cli(&["job", "status", "second"]));
        assert!(
            text.contains(&format!(
                "CSI volume {VOLUME} has exhausted its available writer claims"
            )),
            "Nomad's reason is missing: {text}"
        );
        assert!(api.alloc_with_status("second", "running").is_none());
        api.stop_job("holder");
        let deadline = Instant::now() + WAIT;
        while api.alloc_with_status("second", "running").is_none() {
            if Instant::now() > deadline {
                panic!(
                    "the second writer never ran\nvolume: {:#}\nsecond: {}\nholder: {}\nevals: {:#}\n{}",
                    api.volume(),
                    output_text(&api.cli(&["job", "status", "second"])),
                    output_text(&api.cli(&["job", "status", "holder"])),
                    api.get("/v1/job/second/evaluations").unwrap_or(Value::Null),
                    api.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let second = api.running_alloc("second");
        let log = api.task_log(&second, "t", false);
        assert!(log.contains("hello-k8s-hostpath"), "the second saw: {log}");
    }

    fn kill9_while_published_keeps_one_claim_and_no_extra_mount(&mut self) {
        let api = self.api();
        let node_id = self.claimer_node_id();
        let second = api.running_alloc("second");
        let before = mounts_under(self.dir.path());
        assert!(
            before.iter().any(|m| m.contains(&second)),
            "the published volume is mounted: {before:?}"
        );
        let fingerprinted =
            |api: &Api| api.node(&node_id)["CSINodePlugins"][PLUGIN]["UpdateTime"].clone();
        let first = fingerprinted(&api);
        let driver = self.driver_pid();
        assert!(driver.is_some(), "the driver runs");
        self.agents.kill9_and_restart_claimer();
        let api = self.api();
        api.eventually("the node plugin to be fingerprinted again", || {
            fingerprinted(&api) != first
        });
        // The volume hook ran again for the resumed allocation: a second successful mount.
        api.eventually(
            "the volume to be mounted again for the resumed allocation",
            || {
                api.node(&node_id)["Events"]
                    .as_array()
                    .is_some_and(|events| {
                        events
                            .iter()
                            .filter(|e| {
                                e["Message"] == "Mount volume"
                                    && e["Details"]["alloc_id"] == second.as_str()
                                    && e["Details"]["success"] == "true"
                            })
                            .count()
                            == 2
                    })
            },
        );
        assert!(api.alloc_with_status("second", "running").is_some());
        let vol = api.volume();
        assert_eq!(claims(&vol, "WriteClaims"), 1, "{vol:#}");
        assert!(vol["WriteClaims"].get(&second).is_some(), "{vol:#}");
        assert_eq!(claims(&vol, "PastClaims"), 0, "{vol:#}");
        assert_eq!(before, mounts_under(self.dir.path()), "no extra mount");
        // The plugin tasks outlived their agent: the same driver process, never restarted
        // (a task writing its log while no agent reads it must not die of SIGPIPE).
        assert_eq!(self.driver_pid(), driver, "the driver's process survived");
        assert_eq!(self.plugin_restarts(), 0);
    }

    /// The agent running the controller plugin is SIGKILLed and started again while the volume
    /// is published on the other client: its plugin is reattached and serves again.
    fn controller_agent_killed_while_published_comes_back(&mut self) {
        let api = self.agents.api();
        let driver = self.driver_pid();
        let reader = self
            .volume_job(
                "reader",
                "service",
                "raw_exec",
                "cat /data/greeting; sleep 600",
            )
            .replace(
                "attachment_mode = \"file-system\"",
                "attachment_mode = \"file-system\"\n      read_only       = true",
            );
        let Agents::Cluster(c) = &mut self.agents else {
            return;
        };
        let node_id = c.controller.node_id();
        let fingerprinted =
            |api: &Api| api.node(&node_id)["CSIControllerPlugins"][PLUGIN]["UpdateTime"].clone();
        let first = fingerprinted(&api);
        if !self.attach {
            c.controller.restart();
            c.controller.wait_ready(WAIT);
        } else {
            // While the controller's agent is down, a reader's claim (its ControllerPublish)
            // cannot be served: the allocation waits and says why, and retries once it is back.
            c.controller.kill9();
            api.run_job(&self.dir, "reader", &reader);
            api.eventually("the reader to say it waits for its volume", || {
                api.allocs("reader").iter().any(|a| {
                    a["ClientStatus"] == "pending"
                        && a["ClientDescription"].as_str().is_some_and(|d| {
                            d.starts_with(&format!("waiting for CSI volume \"{VOLUME}\": "))
                        })
                })
            });
            c.controller.restart();
            c.controller.wait_ready(WAIT);
            // Back, the controller answers the retried claim: this driver refuses a read-only
            // publish beside the writer's read-write one on the same node (CSI's ALREADY_EXISTS),
            // and the allocation says that instead.
            api.eventually("the retried claim to reach the controller", || {
                api.allocs("reader").iter().any(|a| {
                    a["ClientStatus"] == "pending"
                        && a["ClientDescription"]
                            .as_str()
                            .is_some_and(|d| d.contains("ControllerPublishVolume"))
                })
            });
            api.stop_job("reader");
            api.eventually("the waiting reader to stop", || {
                api.allocs("reader")
                    .iter()
                    .all(|a| a["ClientStatus"] == "complete")
            });
        }
        api.eventually("the controller to be fingerprinted again", || {
            fingerprinted(&api) != first
        });
        api.eventually("the plugin to be healthy again", || {
            api.get(&format!("/v1/plugin/csi/{PLUGIN}"))
                .is_ok_and(|p| p["ControllersHealthy"] == 1 && p["NodesHealthy"] == 1)
        });
        assert_eq!(claims(&api.volume(), "WriteClaims"), 1);
        assert_eq!(self.driver_pid(), driver, "the driver's process survived");
        assert_eq!(self.plugin_restarts(), 0);
    }

    fn stop_releases_the_claim_and_every_mount(&self) {
        let api = self.api();
        let before = self.driver_calls();
        api.stop_job("second");
        api.eventually("the claim to be freed", || no_claims(&api.volume()));
        api.eventually("every volume mount to be gone", || {
            mounts_under(self.dir.path()).is_empty()
        });
        let calls = self.driver_calls()[before.len()..].to_vec();
        let expected_detach = if self.attach { (1, 0) } else { (0, 0) };
        assert_eq!(
            count_calls(&calls, "ControllerUnpublishVolume"),
            expected_detach,
            "{calls:?}"
        );
        assert_eq!(count_calls(&calls, "NodeUnpublishVolume").1, 0, "{calls:?}");
        assert_eq!(count_calls(&calls, "NodeUnstageVolume").1, 0, "{calls:?}");
        let node = api.node(&self.claimer_node_id());
        let events: Vec<&Value> = node["Events"]
            .as_array()
            .map(|e| e.iter().collect())
            .unwrap_or_default();
        assert!(
            events.iter().any(|e| e["Message"] == "Unmount volume"
                && e["Subsystem"] == "Storage"
                && e["Details"]["success"] == "true"),
            "{node:#}"
        );
        assert!(
            !events
                .iter()
                .any(|e| e["Subsystem"] == "Storage" && e["Details"]["success"] == "false"),
            "a storage operation failed: {node:#}"
        );
    }

    fn volume_and_plugin_go(&self, external_id: &str) {
        let api = self.api();
        let out = api.cli(&["volume", "delete", VOLUME]);
        assert!(out.status.success(), "volume delete: {}", output_text(&out));
        assert!(api.get(&format!("/v1/volume/csi/{VOLUME}")).is_err());
        assert!(
            !self.state_dir.join(external_id).exists(),
            "DeleteVolume removed the volume's directory"
        );
        let (ok, failed) = count_calls(&self.driver_calls(), "DeleteVolume");
        assert_eq!((ok, failed), (1, 0));
        if self.layout == Layout::Split {
            // The node plugin goes first: the plugin stays, with its controller only.
            api.stop_job("plugin-hostpath-nodes");
            api.eventually("the plugin to lose its node plugin", || {
                api.get(&format!("/v1/plugin/csi/{PLUGIN}"))
                    .is_ok_and(|p| p["NodesHealthy"] == 0 && claims(&p, "Nodes") == 0)
            });
            let plugin = api
                .get(&format!("/v1/plugin/csi/{PLUGIN}"))
                .expect("the plugin with its controller");
            assert_eq!(plugin["ControllersHealthy"], 1, "{plugin:#}");
            assert_eq!(claims(&plugin, "Controllers"), 1, "{plugin:#}");
            assert_eq!(plugin["NodesExpected"], 0, "{plugin:#}");
        }
        for job in self.plugin_jobs() {
            api.stop_job(job);
        }
        api.eventually("the plugin to be gone", || {
            api.get(&format!("/v1/plugin/csi/{PLUGIN}")).is_err()
        });
        // The plugin leaves as soon as the servers stop its allocations; its tasks end a
        // moment later.
        api.eventually("every task of the test to end", || {
            self.reaper.leftover_processes().is_empty()
        });
    }
}

#[test]
fn k8s_hostpath_controller_on_another_client_without_attach_serves_claims_through_the_servers() {
    let Some(bin) = hostpathplugin() else { return };
    Scenario::cluster("k8s-cl-na", bin, false).run();
}

#[test]
fn k8s_hostpath_monolith_serves_the_whole_volume_lifecycle() {
    let Some(bin) = hostpathplugin() else { return };
    Scenario::dev("k8s-mono", bin, Layout::Monolith, false).run();
}

#[test]
fn k8s_hostpath_monolith_with_attach_publishes_through_the_controller() {
    let Some(bin) = hostpathplugin() else { return };
    Scenario::dev("k8s-att", bin, Layout::Monolith, true).run();
}

#[test]
fn k8s_hostpath_split_controller_and_node_jobs_with_attach_serve_the_lifecycle() {
    let Some(bin) = hostpathplugin() else { return };
    Scenario::dev("k8s-split", bin, Layout::Split, true).run();
}

#[test]
fn k8s_hostpath_split_jobs_without_attach_skip_the_controller_publish() {
    let Some(bin) = hostpathplugin() else { return };
    Scenario::dev("k8s-spl2", bin, Layout::Split, false).run();
}

#[test]
fn k8s_hostpath_controller_on_another_client_serves_claims_through_the_servers() {
    let Some(bin) = hostpathplugin() else { return };
    Scenario::cluster("k8s-cl", bin, true).run();
}
