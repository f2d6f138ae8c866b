//! `alloc exec` in the deployed shape: three servers and a client-only agent. The websocket
//! reaches the allocation through a server (which passes the upgrade over the client's
//! tunnel) and through the client agent itself.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use drover_tests::clients::{ClientProc, RAW_EXEC_ENABLED};
use drover_tests::{ServerCluster, TempDir, drover_bin, http_call, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

const JOB: &str = r#"
job "shell" {
  datacenters = ["dc1"]
  group "g" {
    task "sh" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 0.5; done"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#;

/// Runs `drover alloc exec <args>` against `addr` with `stdin` piped; killed after a minute.
fn exec_cli(addr: &str, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(drover_bin())
        .arg("alloc")
        .arg("exec")
        .args(args)
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
        .write_all(stdin.as_bytes())
        .expect("write the script");
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

fn running_alloc(addr: &str) -> Option<Value> {
    let (status, body) =
        http_call("GET", &format!("{addr}/v1/job/shell/allocations"), None).ok()?;
    if status != 200 {
        return None;
    }
    let allocs: Vec<Value> = serde_json::from_str(&body).ok()?;
    allocs.into_iter().find(|a| a["ClientStatus"] == "running")
}

#[test]
fn alloc_exec_reaches_a_client_only_agent_through_a_server_and_through_the_client() {
    let dir = TempDir::new("cluster-exec");
    let cluster = ServerCluster::start(dir.path(), 3, "");
    let servers: Vec<String> = cluster.servers.iter().map(|s| s.rpc_addr()).collect();
    // The client knows only the first server: the others reach it through that one.
    let client = ClientProc::start(dir.path(), "c1", &servers[..1], RAW_EXEC_ENABLED);

    let job = write_job(&dir, "shell.nomad", JOB);
    let s2 = cluster.servers[2].http_addr();
    let out = Command::new(drover_bin())
        .args(["job", "run", "-detach", &job])
        .env("DROVER_ADDR", &s2)
        .env_remove("NOMAD_ADDR")
        .output()
        .expect("job run");
    assert!(out.status.success(), "job run: {}", output_text(&out));
    let deadline = Instant::now() + WAIT;
    let alloc = loop {
        if let Some(a) = running_alloc(&s2) {
            break a;
        }
        assert!(Instant::now() < deadline, "the allocation never ran");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(alloc["NodeID"].as_str(), Some(client.node_id().as_str()));
    let id = alloc["ID"].as_str().expect("alloc id").to_string();

    let script = "echo hello-$((1+2))\nexit 3\n";
    for entry in [s2.clone(), cluster.servers[0].http_addr(), client.addr()] {
        let out = exec_cli(&entry, &["-i", "-t", &id, "/bin/sh"], script);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("hello-3"),
            "exec through {entry}: {}",
            output_text(&out)
        );
        assert_eq!(
            out.status.code(),
            Some(3),
            "exec through {entry}: {}",
            output_text(&out)
        );
    }
    // Errors of the far client come back through the tunnel as Nomad's texts.
    let out = exec_cli(
        &s2,
        &["-t=false", "-task", "sh", &id, "/no/such/program"],
        "",
    );
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("failed to exec into task:"),
        "{}",
        output_text(&out)
    );
    drop(client);
}
