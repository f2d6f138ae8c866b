//! The shape people deploy: three servers and separate client-only agents. Every client call
//! (logs, fs, exec, stats, signal, restart) works through every server and every client agent, for
//! allocations on every node: servers reach clients over the sessions the clients opened (a
//! server a client does not know relays through one it does), and client agents forward what
//! they cannot answer to a server.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use drover_tests::clients::{ClientProc, RAW_EXEC_ENABLED};
use drover_tests::{ServerCluster, TempDir, drover_bin, http_call, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

const JOB: &str = r#"
job "web" {
  datacenters = ["dc1"]
  type        = "service"

  group "web" {
    count = 2

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'echo got-usr1' USR1; echo started on $NOMAD_ALLOC_ID; while true; do sleep 0.2; done"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
"#;

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs the CLI against the agent at `addr`.
fn cli(addr: &str, args: &[&str]) -> std::process::Output {
    Command::new(drover_bin())
        .args(args)
        .env("DROVER_ADDR", addr)
        .env_remove("NOMAD_ADDR")
        .output()
        .expect("run drover CLI")
}

/// `drover alloc exec -i -t ALLOC /bin/sh` through `addr` with `script` typed on stdin.
fn exec_shell(addr: &str, alloc: &str, script: &str) -> std::process::Output {
    let mut child = Command::new(drover_bin())
        .args(["alloc", "exec", "-i", "-t", alloc, "/bin/sh"])
        .env("DROVER_ADDR", addr)
        .env_remove("NOMAD_ADDR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn drover alloc exec");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(script.as_bytes())
        .expect("type the script");
    let deadline = Instant::now() + WAIT;
    while child.try_wait().expect("poll the CLI").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("the CLI's output")
}

fn get(addr: &str, path: &str) -> Value {
    let (status, body) = http_call("GET", &format!("{addr}{path}"), None).expect("HTTP call");
    assert_eq!(status, 200, "GET {path} on {addr}: {body}");
    serde_json::from_str(&body).expect("JSON answer")
}

fn running_allocs(addr: &str) -> Vec<Value> {
    get(addr, "/v1/job/web/allocations")
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["ClientStatus"] == "running")
        .collect()
}

fn logs(addr: &str, alloc: &str) -> String {
    let out = cli(addr, &["alloc", "logs", alloc, "web"]);
    assert!(
        out.status.success(),
        "alloc logs via {addr}: {}",
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Follows a task's log through `addr`; lines arrive on the channel until the child is killed.
struct Follower {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl Follower {
    fn start(addr: &str, alloc: &str) -> Follower {
        let mut child = Command::new(drover_bin())
            .args(["alloc", "logs", "-f", alloc, "web"])
            .env("DROVER_ADDR", addr)
            .env_remove("NOMAD_ADDR")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn alloc logs -f");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Follower { child, lines }
    }

    /// Waits for a line containing `text`.
    fn expect_line(&self, text: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return,
                Ok(_) => {}
                Err(e) => panic!("no line with {text:?} in the followed log: {e}"),
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn client_calls_reach_every_allocation_through_every_server_and_client_agent() {
    let dir = TempDir::new("cluster-clients");
    let cluster = ServerCluster::start(dir.path(), 3, "");
    let servers: Vec<String> = cluster.servers.iter().map(|s| s.rpc_addr()).collect();
    let c1 = ClientProc::start(dir.path(), "c1", &servers, RAW_EXEC_ENABLED);
    // c2 knows only the first server: the other two reach it through that one.
    let c2 = ClientProc::start(dir.path(), "c2", &servers[..1], RAW_EXEC_ENABLED);

    let job = write_job(&dir, "web.nomad", JOB);
    let out = cli(
        &cluster.servers[1].http_addr(),
        &["job", "run", "-detach", &job],
    );
    assert!(out.status.success(), "job run: {}", output_text(&out));
    let s0 = cluster.servers[0].http_addr();
    wait_for("both allocations running", || {
        running_allocs(&s0).len() == 2
    });
    let allocs = running_allocs(&s0);
    let nodes: Vec<String> = allocs
        .iter()
        .map(|a| a["NodeID"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        nodes.contains(&c1.node_id()) && nodes.contains(&c2.node_id()),
        "one allocation per client: {nodes:?}"
    );

    let mut entries: Vec<String> = cluster.servers.iter().map(|s| s.http_addr()).collect();
    entries.push(c1.addr());
    entries.push(c2.addr());

    for alloc in &allocs {
        let id = alloc["ID"].as_str().expect("alloc id");
        let node = alloc["NodeID"].as_str().expect("node id");
        for entry in &entries {
            wait_for(&format!("the task's first line through {entry}"), || {
                logs(entry, id).contains(&format!("started on {id}"))
            });
            let out = cli(entry, &["alloc", "fs", id, "web"]);
            assert!(
                out.status.success() && output_text(&out).contains("local/"),
                "alloc fs through {entry}: {}",
                output_text(&out)
            );
            let stats = get(entry, &format!("/v1/client/stats?node_id={node}"));
            assert!(stats["Memory"]["Total"].as_u64() > Some(0), "{stats}");
            let out = exec_shell(entry, id, "echo answer-$((40+2)) $NOMAD_ALLOC_ID\nexit 7\n");
            let text = output_text(&out);
            assert!(
                out.status.code() == Some(7) && text.contains(&format!("answer-42 {id}")),
                "alloc exec through {entry}: {text}"
            );
            let out = cli(entry, &["alloc", "status", "-stats", id]);
            assert!(
                out.status.success() && !output_text(&out).contains("Couldn't retrieve stats"),
                "alloc status -stats through {entry}: {}",
                output_text(&out)
            );
        }
    }

    // A signal sent through one agent shows in a log followed through another.
    for (alloc, (signal_via, follow_via)) in allocs
        .iter()
        .zip([(&entries[2], &entries[4]), (&entries[3], &entries[1])])
    {
        let id = alloc["ID"].as_str().expect("alloc id");
        let follower = Follower::start(follow_via, id);
        follower.expect_line("started on");
        let out = cli(signal_via, &["alloc", "signal", "-s", "SIGUSR1", id, "web"]);
        assert!(out.status.success(), "alloc signal: {}", output_text(&out));
        follower.expect_line("got-usr1");
    }

    // A restart through a server the node never talked to restarts the task in place.
    let id = allocs[1]["ID"].as_str().expect("alloc id");
    let out = cli(&entries[2], &["alloc", "restart", id, "web"]);
    assert!(out.status.success(), "alloc restart: {}", output_text(&out));
    wait_for("the task restarted once", || {
        let a = get(&s0, &format!("/v1/allocation/{id}"));
        a["TaskStates"]["web"]["Restarts"] == 1 && a["TaskStates"]["web"]["State"] == "running"
    });

    // A node nobody can reach: a clear answer, not a hang.
    let unknown = http_call(
        "GET",
        &format!("{s0}/v1/client/stats?node_id=00000000-0000-0000-0000-000000000000"),
        None,
    )
    .expect("HTTP call");
    assert_eq!(unknown.0, 404, "{unknown:?}");
    drop((c1, c2));
}

const LONE_JOB: &str = r#"
job "lone" {
  datacenters = ["dc1"]
  type        = "service"

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["3600.301"]
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#;

/// Servers with short heartbeats, so a dead node is noticed within seconds.
const FAST_HEARTBEATS: &str =
    "server {\n  min_heartbeat_ttl = \"4s\"\n  heartbeat_grace = \"2s\"\n}\n";

#[test]
fn a_client_killed_for_good_has_its_allocation_lost_and_running_on_another_within_ttl_and_grace() {
    let dir = TempDir::new("cluster-client-dead");
    let cluster = ServerCluster::start(dir.path(), 3, FAST_HEARTBEATS);
    let servers: Vec<String> = cluster.servers.iter().map(|s| s.rpc_addr()).collect();
    let mut doomed = ClientProc::start(dir.path(), "doomed", &servers, RAW_EXEC_ENABLED);
    let job = write_job(&dir, "lone.nomad", LONE_JOB);
    let s0 = cluster.servers[0].http_addr();
    let out = cli(&s0, &["job", "run", "-detach", &job]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    let allocs_of = |addr: &str| -> Vec<Value> {
        get(addr, "/v1/job/lone/allocations")
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    wait_for("the allocation running", || {
        allocs_of(&s0)
            .iter()
            .any(|a| a["ClientStatus"] == "running")
    });
    let original = allocs_of(&s0)[0]["ID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let orphan = drover_tests::find_process(&["/bin/sleep", "3600.301"]);
    let survivor = ClientProc::start(dir.path(), "survivor", &servers, RAW_EXEC_ENABLED);

    let killed_at = Instant::now();
    doomed.kill9();
    // Its task was left running by the agent; this node is gone for good, so is the task.
    if let Some(pid) = orphan {
        drover_tests::signal(pid, 9);
    }
    wait_for("the allocation lost", || {
        get(&s0, &format!("/v1/allocation/{original}"))["ClientStatus"] == "lost"
    });
    let lost_after = killed_at.elapsed();
    wait_for("the replacement running on the other client", || {
        allocs_of(&s0).iter().any(|a| {
            a["ID"] != original.as_str()
                && a["ClientStatus"] == "running"
                && a["NodeID"].as_str() == Some(survivor.node_id().as_str())
        })
    });
    let replaced_after = killed_at.elapsed();
    eprintln!(
        "node killed: allocation lost after {lost_after:?}, replacement running after {replaced_after:?}"
    );
    // TTL (at most twice the 4 s minimum, staggered) plus the 2 s grace, plus placement.
    assert!(
        replaced_after < Duration::from_secs(8 + 2 + 5),
        "replacement took {replaced_after:?}"
    );
    let node = get(&s0, &format!("/v1/node/{}", doomed_node(&s0, &survivor)));
    assert_eq!(node["Status"], "down", "{node}");
}

/// The node that is not `survivor`'s.
fn doomed_node(addr: &str, survivor: &ClientProc) -> String {
    let own = survivor.node_id();
    get(addr, "/v1/nodes")
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["ID"].as_str().map(str::to_string))
        .find(|id| *id != own)
        .unwrap_or_default()
}
