//! The built-in Connect mesh, end to end in a network namespace the test made: two bridge
//! groups, `db` and `api` (upstream `db` on local port 8080); the admission hook adds each a
//! `connect-proxy-<service>` task running Drover's proxy, certificates come from the cluster's
//! mesh CA, the api task reaches db through 127.0.0.1:8080 while the bytes between the
//! proxies are TLS, an intention `api => db` deny blocks it and deleting it restores it, and
//! an http check with `expose = true` passes through the generated expose listener.

use std::io::{Read, Write};
use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, private_net, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);

/// Answers every GET on 127.0.0.1:PORT with BODY.
const SERVER: &str = r#"
import http.server, sys
port, body = int(sys.argv[1]), sys.argv[2].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

/// What the api task runs to call its upstream (through `alloc exec`).
const CALL_DB: &str = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8080/', timeout=5).read().decode())";

fn job() -> String {
    format!(
        r#"
job "mesh" {{
  datacenters = ["dc1"]
  group "db" {{
    network {{
      mode = "bridge"
    }}
    service {{
      name = "db"
      port = "9090"
      connect {{
        sidecar_service {{}}
      }}
    }}
    task "db" {{
      driver = "raw_exec"
      config {{
        command = "/usr/bin/python3"
        args    = ["-c", {SERVER:?}, "9090", "db-answers"]
      }}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
  }}
  group "api" {{
    network {{
      mode = "bridge"
      port "health" {{
        to = -1
      }}
    }}
    service {{
      name = "api"
      port = "9001"
      connect {{
        sidecar_service {{
          proxy {{
            upstreams {{
              destination_name = "db"
              local_bind_port  = 8080
            }}
          }}
        }}
      }}
      check {{
        name     = "api-health"
        type     = "http"
        path     = "/health"
        port     = "health"
        expose   = true
        interval = "1s"
        timeout  = "2s"
      }}
    }}
    task "api" {{
      driver = "raw_exec"
      config {{
        command = "/usr/bin/python3"
        args    = ["-c", {SERVER:?}, "9001", "api-healthy"]
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

fn running_alloc(agent: &Agent, group: &str) -> Value {
    let mut found = Value::Null;
    agent.eventually(&format!("the {group} allocation runs"), WAIT, || {
        found = allocs(agent, "mesh")
            .into_iter()
            .find(|a| a["TaskGroup"] == group && a["ClientStatus"] == "running")
            .unwrap_or(Value::Null);
        !found.is_null()
    });
    agent
        .get(&format!(
            "/v1/allocation/{}",
            found["ID"].as_str().unwrap_or("")
        ))
        .expect("alloc")
}

fn host_port(alloc: &Value, label: &str) -> u16 {
    alloc["AllocatedResources"]["Shared"]["Ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["Label"] == label)
        .and_then(|p| p["Value"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or_else(|| panic!("no port {label} in {}", alloc["AllocatedResources"]))
}

/// The api task's call to its upstream, through `alloc exec` (which runs in its namespace).
fn call_db(agent: &Agent, api_alloc: &str) -> String {
    let out = agent.cli(&[
        "alloc",
        "exec",
        "-task",
        "api",
        api_alloc,
        "/usr/bin/python3",
        "-c",
        CALL_DB,
    ]);
    if out.status.success() {
        output_text(&out).trim().to_string()
    } else {
        String::new()
    }
}

/// In a private network of this thread's own, a dev agent that was given the mesh job;
/// `None` (the test skips) where no private network can be made.
fn run_mesh(name: &str) -> Option<(TempDir, Agent)> {
    if let Err(why) = private_net::enter_private_network() {
        eprintln!("skipped: no private network for the test: {why}");
        return None;
    }
    let dir = TempDir::new(name);
    let agent = Agent::start_dev(dir.path(), &[]);
    let file = write_job(&dir, "mesh.nomad", &job());
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    Some((dir, agent))
}

#[test]
fn api_reaches_db_through_the_mesh_intentions_decide_and_an_exposed_check_passes() {
    let Some((_dir, agent)) = run_mesh("mesh") else {
        return;
    };

    // The admission hook's work is in the stored job.
    let job = agent.get("/v1/job/mesh").expect("job");
    let api = job["TaskGroups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["Name"] == "api"))
        .expect("api group");
    let proxy = api["Tasks"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["Name"] == "connect-proxy-api"))
        .expect("the injected proxy task");
    assert_eq!(proxy["Kind"], "connect-proxy:api");
    assert_eq!(proxy["Lifecycle"]["Hook"], "prestart");
    let expose =
        &api["Services"][0]["Connect"]["SidecarService"]["Proxy"]["ExposeConfig"]["Path"][0];
    assert_eq!(expose["Path"], "/health", "{expose}");
    assert_eq!(expose["LocalPathPort"], 9001);
    assert_eq!(expose["ListenerPort"], "health");

    let db = running_alloc(&agent, "db");
    let api = running_alloc(&agent, "api");
    let api_id = api["ID"].as_str().expect("id").to_string();

    agent.eventually("the api task reaches db through its upstream", WAIT, || {
        call_db(&agent, &api_id) == "db-answers"
    });

    // Between the proxies it is TLS: plain text to db's proxy gets no answer from db.
    let db_proxy = format!(
        "{}:{}",
        private_net::HOST_IP,
        host_port(&db, "connect-proxy-db")
    );
    let mut plain = std::net::TcpStream::connect(&db_proxy).expect("connect to db's proxy");
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: db\r\n\r\n")
        .expect("write");
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("db-answers"),
        "plain text was served: {got:?}"
    );
    assert!(got.is_empty() || got[0] == 21, "not a TLS alert: {got:?}");

    // An intention denying api => db blocks the call; deleting it lets it through again.
    let out = agent.cli(&["intention", "create", "-deny", "api", "db"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let listed = agent.cli(&["intention", "list"]);
    assert!(
        output_text(&listed).contains("deny"),
        "{}",
        output_text(&listed)
    );
    agent.eventually("the deny takes effect", WAIT, || {
        call_db(&agent, &api_id).is_empty()
    });
    let out = agent.cli(&["intention", "delete", "api", "db"]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the call goes through again", WAIT, || {
        call_db(&agent, &api_id) == "db-answers"
    });

    // The exposed check reaches the api task through the proxy's plain-text listener.
    agent.eventually("the exposed check passes", WAIT, || {
        agent
            .get(&format!("/v1/client/allocation/{api_id}/checks"))
            .ok()
            .and_then(|c| c.as_object().cloned())
            .is_some_and(|c| {
                c.values()
                    .any(|r| r["Check"] == "api-health" && r["Status"] == "success")
            })
    });
    let health = format!(
        "http://{}:{}/health",
        private_net::HOST_IP,
        host_port(&api, "health")
    );
    let (status, body) = drover_tests::http_call("GET", &health, None).expect("expose");
    assert_eq!((status, body.as_str()), (200, "api-healthy"));
    // Only the exposed path is served there.
    let other = health.replace("/health", "/admin");
    let (status, _) = drover_tests::http_call("GET", &other, None).expect("expose");
    assert_eq!(status, 404);

    // The proxies register beside their services.
    let proxies = agent.get("/v1/service/db-sidecar-proxy").expect("service");
    assert_eq!(proxies.as_array().map(Vec::len), Some(1), "{proxies}");

    // Stopped: the proxies and namespaces go with the allocations.
    let out = agent.cli(&["job", "stop", "mesh"]);
    assert!(out.status.success(), "{}", output_text(&out));
    for alloc in [&db, &api] {
        let id = alloc["ID"].as_str().unwrap_or_default().to_string();
        agent.eventually("the namespace is removed", WAIT, || {
            !std::path::Path::new(&format!("/var/run/netns/{id}")).exists()
        });
    }
}

/// Pids of the mesh proxies whose configuration lives under `dir`.
fn proxies_under(dir: &std::path::Path) -> Vec<i32> {
    let needle = dir.to_string_lossy().to_string();
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (text.contains(" connect proxy ")
                && text.contains(&needle)
                && drover_tests::is_alive(pid))
            .then_some(pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

#[test]
fn the_mesh_keeps_serving_across_an_agent_restart_and_follows_intentions_after_it() {
    let Some((dir, mut agent)) = run_mesh("mesh-restart") else {
        return;
    };
    let db = running_alloc(&agent, "db");
    let api = running_alloc(&agent, "api");
    let api_id = api["ID"].as_str().expect("id").to_string();
    agent.eventually("the api task reaches db through its upstream", WAIT, || {
        call_db(&agent, &api_id) == "db-answers"
    });
    let proxies = proxies_under(dir.path());
    assert_eq!(proxies.len(), 2, "one proxy per group: {proxies:?}");

    // The agent goes (its tasks stay) and comes back on the same ports and data.
    let (http_port, rpc_port) = (agent.http_port, agent.rpc_port);
    agent.terminate();
    assert_eq!(
        proxies_under(dir.path()),
        proxies,
        "the proxies outlive the agent"
    );
    let agent = Agent::start_on_ports(dir.path(), http_port, rpc_port, &[]);
    agent.eventually("the allocations run again", WAIT, || {
        let running: Vec<Value> = allocs(&agent, "mesh")
            .into_iter()
            .filter(|a| a["ClientStatus"] == "running")
            .collect();
        running.len() == 2
    });
    assert_eq!(
        proxies_under(dir.path()),
        proxies,
        "the same proxy processes, taken back"
    );
    agent.eventually("the upstream works after the restart", WAIT, || {
        call_db(&agent, &api_id) == "db-answers"
    });
    // The client keeps the taken-back proxies' configuration current.
    let out = agent.cli(&["intention", "create", "-deny", "api", "db"]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the deny takes effect after the restart", WAIT, || {
        call_db(&agent, &api_id).is_empty()
    });
    let out = agent.cli(&["intention", "delete", "api", "db"]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the call goes through again", WAIT, || {
        call_db(&agent, &api_id) == "db-answers"
    });

    let out = agent.cli(&["job", "stop", "mesh"]);
    assert!(out.status.success(), "{}", output_text(&out));
    for alloc in [&db, &api] {
        let id = alloc["ID"].as_str().unwrap_or_default().to_string();
        agent.eventually("the namespace is removed", WAIT, || {
            !std::path::Path::new(&format!("/var/run/netns/{id}")).exists()
        });
    }
    agent.eventually("the proxies are gone", WAIT, || {
        proxies_under(dir.path()).is_empty()
    });
}
