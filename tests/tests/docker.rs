//! End-to-end scenarios of the docker driver: a real dev agent running jobs on the machine's
//! Docker daemon, from an image built locally from busybox (no registry is reachable). Each
//! test skips, with a message, when no daemon answers.
//!
//! Also: a running container's resource usage through the client API
//! (`/v1/client/allocation/:id/stats`) and `alloc status -stats`.

use drover_tests::{allocs, write_job};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use drover_tests::{Agent, TempDir, output_text};
use serde_json::Value;

// Builds the test image; plain std and the docker CLI, shared with the driver's own tests.
#[path = "../../drivers/docker/src/testing.rs"]
#[allow(dead_code)]
mod docker_image;

use docker_image::TEST_IMAGE;

const WAIT: Duration = Duration::from_secs(90);
const ALLOC_LABEL: &str = "com.hashicorp.nomad.alloc_id";

macro_rules! require_docker {
    () => {
        match docker_image::docker_tests_enabled() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => panic!("{e}"),
        }
    };
}

/// Containers (running or not) of an allocation, by the label the driver puts on them.
fn containers_of(alloc_id: &str) -> Vec<String> {
    let filter = format!("label={ALLOC_LABEL}={alloc_id}");
    let out = Command::new("docker")
        .args(["ps", "-a", "-q", "--no-trunc", "--filter", &filter])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn remove_containers_of(alloc_id: &str) {
    for id in containers_of(alloc_id) {
        let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    }
}

/// Where the allocation's port is published: the node's address Nomad binds ports to.
#[derive(Debug, Clone)]
struct HostAddr {
    ip: String,
    port: u16,
}

fn http_get(addr: &HostAddr) -> Option<String> {
    let mut s = TcpStream::connect((addr.ip.as_str(), addr.port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.contains("200 OK").then_some(body)
}

/// The host address and port the allocation got for `label`.
fn host_addr(agent: &Agent, alloc_id: &str, label: &str) -> HostAddr {
    let alloc = agent
        .get(&format!("/v1/allocation/{alloc_id}"))
        .expect("read allocation");
    let port = alloc["AllocatedResources"]["Shared"]["Ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["Label"] == label)
        .cloned()
        .unwrap_or_else(|| panic!("no port {label:?} in {alloc}"));
    HostAddr {
        ip: port["HostIP"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("127.0.0.1")
            .to_string(),
        port: port["Value"]
            .as_u64()
            .and_then(|v| u16::try_from(v).ok())
            .expect("port value"),
    }
}

const WEB_JOB: &str = r#"
job "web" {
  datacenters = ["dc1"]
  group "g" {
    network {
      port "http" {
        to = 8080
      }
    }
    task "server" {
      driver = "docker"
      kill_timeout = "1s"
      config {
        image   = "IMAGE"
        command = "/bin/sh"
        args    = ["-c", "echo hello-from-${NOMAD_TASK_NAME} > /tmp/index.html; echo serving on $NOMAD_PORT_http; exec httpd -f -p $NOMAD_PORT_http -h /tmp"]
        ports   = ["http"]
      }
      resources {
        cpu    = 100
        memory = 32
      }
    }
  }
}
"#;

fn run_web_job(agent: &Agent, dir: &TempDir) -> (String, HostAddr) {
    let job = write_job(dir, "web.nomad", &WEB_JOB.replace("IMAGE", TEST_IMAGE));
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(
        out.status.success(),
        "job run failed: {}",
        output_text(&out)
    );
    agent.eventually("the web alloc to run", WAIT, || {
        allocs(agent, "web")
            .iter()
            .any(|a| a["ClientStatus"] == "running")
    });
    let alloc_id = allocs(agent, "web")[0]["ID"].as_str().unwrap().to_string();
    let addr = host_addr(agent, &alloc_id, "http");
    (alloc_id, addr)
}

fn wait_served(agent: &Agent, addr: &HostAddr) -> String {
    let mut body = None;
    agent.eventually(&format!("the container to serve on {addr:?}"), WAIT, || {
        body = http_get(addr);
        body.is_some()
    });
    body.unwrap_or_default()
}

#[test]
fn docker_job_serves_on_its_port_logs_and_leaves_no_container_after_stop() {
    require_docker!();
    let dir = TempDir::new("docker-web");
    let agent = Agent::start_dev(dir.path(), &[]);
    let nodes = agent.get("/v1/nodes").unwrap();
    let node_id = nodes[0]["ID"].as_str().unwrap().to_string();
    let node = agent.get(&format!("/v1/node/{node_id}")).unwrap();
    assert_eq!(
        node["Drivers"]["docker"]["Healthy"], true,
        "docker driver not healthy: {}",
        node["Drivers"]["docker"]
    );
    assert_eq!(node["Attributes"]["driver.docker"], "1");

    let (alloc_id, addr) = run_web_job(&agent, &dir);
    let cleanup = scopeguard(alloc_id.clone());
    assert_eq!(containers_of(&alloc_id).len(), 1);
    let body = wait_served(&agent, &addr);
    assert!(body.contains("hello-from-server"), "{body}");

    let mut logs = String::new();
    agent.eventually("the container's output in alloc logs", WAIT, || {
        logs = output_text(&agent.cli(&["alloc", "logs", &alloc_id, "server"]));
        logs.contains("serving on 8080")
    });

    let out = agent.cli(&["job", "stop", "web"]);
    assert!(
        out.status.success(),
        "job stop failed: {}",
        output_text(&out)
    );
    agent.eventually("the alloc to stop", WAIT, || {
        allocs(&agent, "web")
            .iter()
            .all(|a| a["ClientStatus"] == "complete")
    });
    agent.eventually("no container left behind", WAIT, || {
        containers_of(&alloc_id).is_empty()
    });
    assert!(http_get(&addr).is_none(), "still served after stop");
    drop(cleanup);
}

#[test]
fn docker_task_keeps_running_across_an_agent_restart_and_is_still_managed() {
    require_docker!();
    let dir = TempDir::new("docker-restart");
    let mut agent = Agent::start_dev(dir.path(), &[]);
    let (alloc_id, addr) = run_web_job(&agent, &dir);
    let cleanup = scopeguard(alloc_id.clone());
    wait_served(&agent, &addr);
    let before = containers_of(&alloc_id);
    assert_eq!(before.len(), 1);

    let (http_port, rpc_port) = (agent.http_port, agent.rpc_port);
    agent.kill9();
    assert!(
        http_get(&addr).is_some(),
        "the container went down with the agent"
    );
    let agent = Agent::start_on_ports(dir.path(), http_port, rpc_port, &[]);
    agent.eventually("the alloc to be running again", WAIT, || {
        allocs(&agent, "web")
            .iter()
            .any(|a| a["ID"] == alloc_id.as_str() && a["ClientStatus"] == "running")
    });
    assert_eq!(
        containers_of(&alloc_id),
        before,
        "the same container, not a new one"
    );
    wait_served(&agent, &addr);

    let out = agent.cli(&["job", "stop", "web"]);
    assert!(
        out.status.success(),
        "job stop failed: {}",
        output_text(&out)
    );
    agent.eventually("no container left behind", WAIT, || {
        containers_of(&alloc_id).is_empty()
    });
    drop(cleanup);
}

#[test]
fn a_container_over_its_memory_is_reported_oom_killed() {
    require_docker!();
    let dir = TempDir::new("docker-oom");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(
        &dir,
        "oom.nomad",
        &r#"
job "oom" {
  datacenters = ["dc1"]
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "hog" {
      driver = "docker"
      config {
        image   = "IMAGE"
        command = "/bin/sh"
        args    = ["-c", "x=$(head -c 50000000 /dev/zero | tr '\\0' a); sleep 1"]
      }
      resources {
        cpu    = 100
        memory = 10
      }
    }
  }
}
"#
        .replace("IMAGE", TEST_IMAGE),
    );
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(
        out.status.success(),
        "job run failed: {}",
        output_text(&out)
    );
    agent.eventually("the alloc to fail", WAIT, || {
        allocs(&agent, "oom")
            .iter()
            .any(|a| a["ClientStatus"] == "failed")
    });
    let alloc = &allocs(&agent, "oom")[0];
    let alloc_id = alloc["ID"].as_str().unwrap().to_string();
    let cleanup = scopeguard(alloc_id.clone());
    let full = agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    let events = full["TaskStates"]["hog"]["Events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let terminated = events
        .iter()
        .find(|e| e["Type"] == "Terminated")
        .unwrap_or_else(|| panic!("no Terminated event: {events:?}"));
    assert_eq!(terminated["Details"]["oom_killed"], "true", "{terminated}");
    assert_eq!(terminated["ExitCode"], 137, "{terminated}");
    drop(cleanup);
}

#[test]
fn a_running_containers_memory_shows_in_the_allocation_stats_and_alloc_status() {
    require_docker!();
    let dir = TempDir::new("docker-stats");
    let agent = Agent::start_dev(dir.path(), &[]);
    let (alloc_id, addr) = run_web_job(&agent, &dir);
    let cleanup = scopeguard(alloc_id.clone());
    wait_served(&agent, &addr);

    let mut usage = Value::Null;
    agent.eventually("non-zero memory in the allocation's stats", WAIT, || {
        usage = agent
            .get(&format!("/v1/client/allocation/{alloc_id}/stats"))
            .unwrap_or_default();
        usage["Tasks"]["server"]["ResourceUsage"]["MemoryStats"]["RSS"]
            .as_u64()
            .is_some_and(|rss| rss > 0)
    });
    let total = &usage["ResourceUsage"]["MemoryStats"];
    assert!(total["RSS"].as_u64().unwrap_or(0) > 0, "{usage}");
    assert_eq!(total["Measured"][0], "RSS", "{usage}");
    let cpu = &usage["Tasks"]["server"]["ResourceUsage"]["CpuStats"];
    assert!(cpu["Percent"].as_f64().is_some_and(|p| p >= 0.0), "{usage}");
    assert_eq!(cpu["Measured"][0], "Percent", "{usage}");
    assert!(usage["Timestamp"].as_i64().unwrap_or(0) > 0, "{usage}");
    let r = agent.get(&format!("/v1/client/allocation/{}/stats", "0".repeat(36)));
    assert!(
        r.as_ref().is_err_and(|e| e.contains("404")),
        "an unknown allocation: {r:?}"
    );

    let out = agent.cli(&["alloc", "status", "-stats", &alloc_id]);
    let text = output_text(&out);
    assert!(out.status.success(), "alloc status -stats failed: {text}");
    assert!(text.contains("/32 MiB"), "used/reserved memory: {text}");
    assert!(
        text.contains("Memory Stats\nRSS\n") && text.contains("CPU Stats\nPercent\n"),
        "{text}"
    );

    let out = agent.cli(&["job", "stop", "web"]);
    assert!(
        out.status.success(),
        "job stop failed: {}",
        output_text(&out)
    );
    agent.eventually("no container left behind", WAIT, || {
        containers_of(&alloc_id).is_empty()
    });
    drop(cleanup);
}

/// Removes an allocation's containers when the test ends, passed or failed, so a failing test
/// leaves nothing running.
struct ContainerCleanup(String);

impl Drop for ContainerCleanup {
    fn drop(&mut self) {
        remove_containers_of(&self.0);
    }
}

fn scopeguard(alloc_id: String) -> ContainerCleanup {
    ContainerCleanup(alloc_id)
}
