//! Bridge networking: a group with `network { mode = "bridge" }` gets a network namespace of
//! its own on the `nomad` bridge (the CNI reference plugins), its tasks run in it, its port is
//! forwarded from the node's address to the port inside, its check reaches it through that
//! forward, and everything goes when the allocation stops; an exec task joins its own
//! allocation's namespace the same way, and a docker task joins the namespace its driver holds
//! in a pause container, with a raw_exec task of the same group beside it. The agent runs inside a network
//! namespace the test made, so no traffic leaves it.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, private_net, write_job};
use serde_json::Value;

// Builds the docker test image; plain std and the docker CLI, shared with the driver's tests.
#[path = "../../drivers/docker/src/testing.rs"]
#[allow(dead_code)]
mod docker_image;

const WAIT: Duration = Duration::from_secs(60);

/// Answers /env with the environment variables it was asked about, `ok` elsewhere, on port
/// 8080 of every address of its namespace.
const SERVER: &str = r#"
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = "ok"
        if self.path == "/env":
            names = ["NOMAD_PORT_http", "NOMAD_HOST_PORT_http", "NOMAD_ALLOC_IP_http"]
            body = " ".join(n + "=" + os.environ.get(n, "") for n in names)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())
    def log_message(self, *args):
        pass
http.server.HTTPServer(("0.0.0.0", 8080), H).serve_forever()
"#;

fn job() -> String {
    format!(
        r#"
job "bridged" {{
  datacenters = ["dc1"]
  group "web" {{
    network {{
      mode = "bridge"
      port "http" {{
        to = 8080
      }}
    }}
    service {{
      name = "bridged"
      port = "http"
      check {{
        name     = "through-the-forward"
        type     = "http"
        path     = "/"
        interval = "1s"
        timeout  = "2s"
      }}
    }}
    task "serve" {{
      driver = "raw_exec"
      config {{
        command = "/usr/bin/python3"
        args    = ["-c", {SERVER:?}]
      }}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
  }}
  group "isolated" {{
    network {{
      mode = "bridge"
      port "http" {{
        to = 8080
      }}
    }}
    task "serve" {{
      driver = "exec"
      config {{
        command = "/usr/bin/python3"
        args    = ["-c", {SERVER:?}]
      }}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
  }}
}}
"#
    )
}

fn get(url: &str) -> Result<(u16, String), String> {
    drover_tests::http_call("GET", url, None)
}

#[test]
fn a_bridge_mode_allocation_gets_its_own_namespace_forwarded_ports_and_a_passing_check() {
    if let Err(why) = private_net::enter_private_network() {
        eprintln!("skipped: no private network for the test: {why}");
        return;
    }
    let dir = TempDir::new("bridge");
    let agent = Agent::start_dev(dir.path(), &[]);
    let node = agent.get("/v1/nodes").expect("nodes")[0]["ID"]
        .as_str()
        .expect("node id")
        .to_string();
    let node = agent.get(&format!("/v1/node/{node}")).expect("node");
    let modes: Vec<&str> = node["NodeResources"]["Networks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["Mode"].as_str())
        .collect();
    assert!(
        modes.contains(&"bridge"),
        "the node offers bridge: {modes:?}"
    );

    let file = write_job(&dir, "bridged.nomad", &job());
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    let mut alloc = Value::Null;
    agent.eventually("the allocation runs", WAIT, || {
        alloc = allocs(&agent, "bridged")
            .into_iter()
            .find(|a| a["TaskGroup"] == "web" && a["ClientStatus"] == "running")
            .unwrap_or(Value::Null);
        !alloc.is_null()
    });
    let id = alloc["ID"].as_str().expect("alloc id").to_string();
    let alloc = agent.get(&format!("/v1/allocation/{id}")).expect("alloc");
    let address = alloc["NetworkStatus"]["Address"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(address.starts_with("172.26."), "{}", alloc["NetworkStatus"]);
    assert_eq!(alloc["NetworkStatus"]["InterfaceName"], "eth0");
    let port = &alloc["AllocatedResources"]["Shared"]["Ports"][0];
    let host_port = port["Value"].as_i64().expect("host port");
    assert_eq!(port["HostIP"], private_net::HOST_IP);
    assert!(
        std::path::Path::new(&format!("/var/run/netns/{id}")).exists(),
        "the allocation's namespace is bound"
    );

    // Through the node's address and the forwarded host port, and straight over the bridge.
    let forwarded = format!("http://{}:{host_port}", private_net::HOST_IP);
    agent.eventually("the task answers through the forward", WAIT, || {
        get(&format!("{forwarded}/")).is_ok_and(|(status, _)| status == 200)
    });
    let (status, env) = get(&format!("{forwarded}/env")).expect("env");
    assert_eq!(status, 200);
    assert_eq!(
        env,
        format!(
            "NOMAD_PORT_http=8080 NOMAD_HOST_PORT_http={host_port} NOMAD_ALLOC_IP_http={address}"
        )
    );
    let (status, body) = get(&format!("http://{address}:8080/")).expect("over the bridge");
    assert_eq!((status, body.as_str()), (200, "ok"));
    // Port 8080 is the namespace's, not the node's.
    assert!(get(&format!("http://{}:8080/", private_net::HOST_IP)).is_err());

    // The check reaches the task through the forward too.
    agent.eventually("the check passes", WAIT, || {
        agent
            .get(&format!("/v1/client/allocation/{id}/checks"))
            .ok()
            .and_then(|c| c.as_object().cloned())
            .is_some_and(|c| c.values().any(|r| r["Status"] == "success"))
    });
    let registrations = agent.get("/v1/service/bridged").expect("service");
    assert_eq!(registrations[0]["Address"], private_net::HOST_IP);
    assert_eq!(registrations[0]["Port"], host_port);

    // An exec task (its own mount, PID and IPC namespaces) joins its allocation's network too.
    let mut isolated = Value::Null;
    agent.eventually("the exec allocation runs", WAIT, || {
        isolated = allocs(&agent, "bridged")
            .into_iter()
            .find(|a| a["TaskGroup"] == "isolated" && a["ClientStatus"] == "running")
            .unwrap_or(Value::Null);
        !isolated.is_null()
    });
    let isolated = agent
        .get(&format!(
            "/v1/allocation/{}",
            isolated["ID"].as_str().unwrap_or("")
        ))
        .expect("alloc");
    let exec_port = isolated["AllocatedResources"]["Shared"]["Ports"][0]["Value"]
        .as_i64()
        .expect("host port");
    let exec_address = isolated["NetworkStatus"]["Address"].as_str().unwrap_or("");
    assert_ne!(exec_address, address, "each allocation has its own address");
    agent.eventually("the exec task answers through its forward", WAIT, || {
        get(&format!("http://{}:{exec_port}/", private_net::HOST_IP))
            .is_ok_and(|(status, _)| status == 200)
    });

    let out = agent.cli(&["job", "stop", "bridged"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let exec_id = isolated["ID"].as_str().unwrap_or_default().to_string();
    agent.eventually("the namespaces are removed", WAIT, || {
        !std::path::Path::new(&format!("/var/run/netns/{id}")).exists()
            && !std::path::Path::new(&format!("/var/run/netns/{exec_id}")).exists()
    });
    assert!(
        get(&format!("{forwarded}/")).is_err(),
        "the forward is gone"
    );
}

/// A docker task serving its `local/` with busybox's httpd on 8080, and a raw_exec task of
/// the same group fetching it from 127.0.0.1:8080: both in the pause container's namespace.
fn docker_job() -> String {
    let probe = r#"
import time, urllib.request
while True:
    try:
        body = urllib.request.urlopen("http://127.0.0.1:8080/index.html", timeout=2).read().decode()
        print("probe got " + body, flush=True)
    except Exception as e:
        print("probe failed: " + str(e), flush=True)
    time.sleep(1)
"#;
    format!(
        r#"
job "docked" {{
  datacenters = ["dc1"]
  group "web" {{
    network {{
      mode     = "bridge"
      hostname = "docked-web"
      port "http" {{
        to = 8080
      }}
    }}
    task "serve" {{
      driver = "docker"
      config {{
        image   = "{image}"
        command = "/bin/httpd"
        args    = ["-f", "-p", "8080", "-h", "/local"]
      }}
      template {{
        data        = "served-from-docker"
        destination = "local/index.html"
      }}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
    task "probe" {{
      driver = "raw_exec"
      config {{
        command = "/usr/bin/python3"
        args    = ["-c", {probe:?}]
      }}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
  }}
}}
"#,
        image = docker_image::TEST_IMAGE
    )
}

fn docker_out(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_docker_task_in_bridge_mode_joins_the_namespace_its_pause_container_holds() {
    match docker_image::docker_tests_enabled() {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => panic!("{e}"),
    }
    if let Err(why) = private_net::enter_private_network() {
        eprintln!("skipped: no private network for the test: {why}");
        return;
    }
    let dir = TempDir::new("bridge-docker");
    let agent = Agent::start_dev(dir.path(), &[]);
    let file = write_job(&dir, "docked.nomad", &docker_job());
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    let mut alloc = Value::Null;
    agent.eventually("the allocation runs", WAIT, || {
        alloc = allocs(&agent, "docked")
            .into_iter()
            .find(|a| a["ClientStatus"] == "running")
            .unwrap_or(Value::Null);
        !alloc.is_null()
    });
    let id = alloc["ID"].as_str().expect("alloc id").to_string();
    let pause = format!("nomad_init_{id}");
    let alloc = agent.get(&format!("/v1/allocation/{id}")).expect("alloc");
    let address = alloc["NetworkStatus"]["Address"].as_str().unwrap_or("");
    assert!(address.starts_with("172.26."), "{}", alloc["NetworkStatus"]);
    assert_eq!(
        docker_out(&[
            "inspect",
            "-f",
            "{{.HostConfig.NetworkMode}} {{.State.Running}} {{.Config.Hostname}}",
            &pause
        ]),
        "none true docked-web"
    );
    let host_port = alloc["AllocatedResources"]["Shared"]["Ports"][0]["Value"]
        .as_i64()
        .expect("host port");

    // From outside through the node's forward, and from the raw_exec task beside it.
    let forwarded = format!("http://{}:{host_port}/index.html", private_net::HOST_IP);
    agent.eventually("the docker task answers through the forward", WAIT, || {
        get(&forwarded).is_ok_and(|(status, body)| status == 200 && body == "served-from-docker")
    });
    agent.eventually("the raw_exec task reaches it on loopback", WAIT, || {
        output_text(&agent.cli(&["alloc", "logs", &id, "probe"]))
            .contains("probe got served-from-docker")
    });

    let out = agent.cli(&["job", "stop", "docked"]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually(
        "the namespace and the pause container are removed",
        WAIT,
        || {
            !std::path::Path::new(&format!("/var/run/netns/{id}")).exists()
                && docker_out(&["ps", "-a", "-q", "--filter", &format!("name={pause}")]).is_empty()
        },
    );
    assert!(get(&forwarded).is_err(), "the forward is gone");
}
