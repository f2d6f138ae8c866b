//! The agent surface over real server processes: a server waiting to be joined
//! (`bootstrap_expect = 0`) answers HTTP at once, and joins with `/v1/agent/join` from either
//! side; `/v1/agent/members` lists every server with its tags; `force-leave` removes one.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_tests::{Agent, ServerCluster, TempDir, drover_bin, free_port};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// A server with `--bootstrap-expect 0` and nothing to join: it waits to be joined.
fn waiting_server(dir: &Path, name: &str) -> Agent {
    let (http_port, rpc_port) = (free_port(), free_port());
    std::fs::create_dir_all(dir).expect("server dir");
    let log_path = dir.join("agent.log");
    let log = std::fs::File::create(&log_path).expect("open log");
    let child = Command::new(drover_bin())
        .args(["agent", "--server", "--bind", "127.0.0.1", "--node", name])
        .args(["--bootstrap-expect", "0", "--log-level", "debug"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--http-port", &http_port.to_string()])
        .args(["--rpc-port", &rpc_port.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone log fd"))
        .stderr(log)
        .spawn()
        .expect("spawn drover server");
    Agent {
        child,
        host: "127.0.0.1".into(),
        http_port,
        rpc_port,
        data_dir: dir.to_path_buf(),
        log_path,
    }
}

fn until(what: &str, agent: &Agent, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out: {what}\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn leader_of(agent: &Agent) -> String {
    agent
        .get("/v1/status/leader")
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn members(agent: &Agent) -> Vec<Value> {
    agent
        .get("/v1/agent/members")
        .ok()
        .and_then(|m| m["Members"].as_array().cloned())
        .unwrap_or_default()
}

#[test]
fn a_server_waiting_to_be_joined_answers_http_and_joins_from_either_side() {
    let dir = TempDir::new("agent-join");
    let cluster = ServerCluster::start(dir.path(), 1, "");
    let first = cluster.servers[0].agent.as_ref().expect("running");
    let first_rpc = cluster.servers[0].rpc_addr();

    // Before any join: HTTP answers at once, as Nomad's server without a leader does.
    let second = waiting_server(&dir.path().join("w1"), "w1");
    until("the waiting server answers HTTP", &second, || {
        second.send("GET", "/v1/agent/health", "").0 != 0
    });
    let (status, body) = second.send("GET", "/v1/agent/health", "");
    assert_eq!(status, 500, "{body}");
    let health: Value = serde_json::from_str(&body).expect("health json");
    assert_eq!(health["server"]["message"], "No cluster leader");
    assert_eq!(
        second.send("GET", "/v1/jobs", ""),
        (500, "No cluster leader".to_string())
    );
    assert_eq!(leader_of(&second), "");
    let me = second.get("/v1/agent/self").expect("agent self");
    assert_eq!(me["member"]["Name"], "w1.global");
    assert_eq!(me["stats"]["nomad"]["leader"], "false");

    // Joined from its own side: `server join` against the new server.
    let out = second.cli(&["server", "join", &first_rpc]);
    let text = drover_tests::output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Joined 1 servers successfully"), "{text}");
    until("the joined server knows the leader", &second, || {
        leader_of(&second) == first_rpc
    });
    assert_eq!(second.send("GET", "/v1/jobs", "").0, 200);

    // Joined from the cluster's side.
    let third = waiting_server(&dir.path().join("w2"), "w2");
    let third_rpc = format!("127.0.0.1:{}", third.rpc_port);
    until("the third server answers HTTP", &third, || {
        third.send("GET", "/v1/agent/health", "").0 == 500
    });
    let (status, body) = first.send("PUT", &format!("/v1/agent/join?address={third_rpc}"), "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"num_joined\":1"), "{body}");
    until("the third server knows the leader", &third, || {
        leader_of(&third) == first_rpc
    });

    // Every server of the region, with its own tags.
    until("three members alive", first, || {
        let m = members(first);
        m.len() == 3 && m.iter().all(|m| m["Status"] == "alive")
    });
    // Every server names the same three Raft peers and the one region.
    for (i, agent) in [first, &second, &third].into_iter().enumerate() {
        until("three peers", agent, || {
            agent
                .get("/v1/status/peers")
                .ok()
                .and_then(|p| p.as_array().map(Vec::len))
                == Some(3)
        });
        let peers = agent.get("/v1/status/peers").expect("peers");
        let mut peers: Vec<&str> = peers
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        peers.sort_unstable();
        assert!(
            peers.contains(&first_rpc.as_str()) && peers.contains(&third_rpc.as_str()),
            "server {i}: {peers:?}"
        );
        assert_eq!(
            agent.get("/v1/regions").expect("regions"),
            serde_json::json!(["global"])
        );
    }
    let list = members(first);
    let names: Vec<&str> = list.iter().filter_map(|m| m["Name"].as_str()).collect();
    assert_eq!(names, vec!["s0.global", "w1.global", "w2.global"]);
    for m in &list {
        assert_eq!(m["Tags"]["role"], "nomad");
        assert_eq!(m["Tags"]["region"], "global");
        assert_eq!(m["Tags"]["dc"], "dc1");
        assert!(
            !m["Tags"]["build"].as_str().unwrap_or_default().is_empty(),
            "{m}"
        );
        assert_eq!(m["Tags"]["port"], m["Port"].to_string());
    }
    let out = first.cli(&["server", "members", "-detailed"]);
    let text = drover_tests::output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("role=nomad"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains(" alive ")).count(),
        3,
        "{text}"
    );
    let w2 = list.iter().find(|m| m["Name"] == "w2.global").expect("w2");
    assert_eq!(w2["Tags"]["expect"], "0");
    assert_eq!(w2["Port"].as_u64(), Some(u64::from(third.rpc_port)));

    // A server that went away is `failed` until force-leave removes it.
    let mut third = third;
    third.kill9();
    until("the stopped server shows failed", first, || {
        members(first)
            .iter()
            .any(|m| m["Name"] == "w2.global" && m["Status"] == "failed")
    });
    let out = first.cli(&["server", "force-leave", "w2"]);
    assert!(out.status.success(), "{}", drover_tests::output_text(&out));
    until("two members left", first, || members(first).len() == 2);
    let (status, body) = first.send("PUT", "/v1/agent/force-leave?node=nope", "");
    assert_eq!(
        (status, body.as_str()),
        (404, "agent: No node found with name 'nope'")
    );
}

#[test]
fn a_client_agent_answers_its_server_list_itself_and_refuses_join() {
    let dir = TempDir::new("agent-client-servers");
    let cluster = ServerCluster::start(dir.path(), 1, "");
    let rpc = cluster.servers[0].rpc_addr();
    let client =
        drover_tests::clients::ClientProc::start(dir.path(), "c1", std::slice::from_ref(&rpc), "");
    client.wait_ready(WAIT);
    let agent = client.agent();

    assert_eq!(
        agent.get("/v1/agent/servers").expect("servers"),
        serde_json::json!([rpc])
    );
    let (status, body) = agent.send(
        "PUT",
        &format!("/v1/agent/servers?address={rpc}&address=127.0.0.1"),
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        agent.get("/v1/agent/servers").expect("servers"),
        serde_json::json!([rpc, "127.0.0.1:4647"])
    );
    assert_eq!(agent.send("PUT", "/v1/agent/servers", "").0, 400);
    // The client keeps working on the new list.
    let node_id = client.node_id();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        agent.get(&format!("/v1/node/{node_id}")).expect("node")["Status"],
        "ready"
    );

    // Only a server agent joins or force-leaves; members come from the servers.
    assert_eq!(
        agent.send("PUT", "/v1/agent/join?address=127.0.0.1:1", ""),
        (501, "Invalid method".to_string())
    );
    assert_eq!(
        agent.send("PUT", "/v1/agent/force-leave?node=s0", "").0,
        501
    );
    let (status, body) = agent.send("GET", "/v1/agent/health", "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"client\""), "{body}");
    assert_eq!(members(agent).len(), 1);

    // Its metrics are its own, not a server's.
    let metrics = agent.get("/v1/metrics").expect("metrics");
    let names: Vec<&str> = metrics["Gauges"]
        .as_array()
        .map(|g| g.iter().filter_map(|g| g["Name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        names.contains(&"nomad.client.allocations.running"),
        "{metrics}"
    );
    assert!(!names.contains(&"nomad.raft.appliedIndex"), "{metrics}");
    let (status, text) = agent.send("GET", "/v1/metrics?format=prometheus", "");
    assert_eq!(status, 200);
    assert!(text.contains("nomad_client_allocations_running{"), "{text}");
}

/// Reads from a streaming GET until `want` shows up in the body (or the time is up).
fn stream_until(addr: &str, path: &str, want: &str, mut during: impl FnMut()) -> String {
    use std::io::{Read, Write};
    let host = addr.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(host).expect("connect");
    conn.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    write!(conn, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").expect("request");
    let deadline = Instant::now() + WAIT;
    let mut seen = String::new();
    let mut buf = [0u8; 8192];
    while !seen.contains(want) {
        assert!(
            Instant::now() < deadline,
            "{want:?} not streamed; got:\n{seen}"
        );
        during();
        match conn.read(&mut buf) {
            Ok(0) => panic!("the stream ended; got:\n{seen}"),
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => {}
        }
    }
    seen
}

#[test]
fn monitor_streams_the_agents_own_log_and_metrics_have_prometheus_text() {
    let dir = TempDir::new("agent-monitor");
    let agent = Agent::start_dev(dir.path(), &[]);
    // A debug monitor against an info agent sees the debug lines the agent does not write.
    let mut n = 0;
    let seen = stream_until(
        &agent.addr(),
        "/v1/agent/monitor?log_level=debug&plain=true",
        "[DEBUG]",
        || {
            n += 1;
            let body = format!(
                "{{\"Job\": {{\"ID\": \"m{n}\", \"Datacenters\": [\"dc1\"], \"TaskGroups\": [{{\"Name\": \"g\", \"Tasks\": [{{\"Name\": \"t\", \"Driver\": \"mock_driver\", \"Config\": {{\"run_for\": \"1s\"}}}}]}}]}}}}"
            );
            let _ = agent.send("PUT", "/v1/jobs", &body);
        },
    );
    assert!(
        seen.to_ascii_lowercase()
            .contains("content-type: text/plain"),
        "{seen}"
    );
    assert!(
        !agent.log().contains("[DEBUG]"),
        "the agent's own log stays at info"
    );

    // With `log_json=true`, each line is one of hclog's JSON records.
    let seen = stream_until(
        &agent.addr(),
        "/v1/agent/monitor?log_level=debug&log_json=true&plain=true",
        "\"@level\":\"debug\"",
        || {
            n += 1;
            let _ = agent.send("GET", &format!("/v1/job/m{n}"), "");
            let body = format!(
                "{{\"Job\": {{\"ID\": \"j{n}\", \"Datacenters\": [\"dc1\"], \"TaskGroups\": [{{\"Name\": \"g\", \"Tasks\": [{{\"Name\": \"t\", \"Driver\": \"mock_driver\", \"Config\": {{\"run_for\": \"1s\"}}}}]}}]}}}}"
            );
            let _ = agent.send("PUT", "/v1/jobs", &body);
        },
    );
    let record = seen
        .lines()
        .find(|l| l.contains("\"@level\":\"debug\""))
        .and_then(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON debug record in:\n{seen}"));
    for key in ["@level", "@message", "@timestamp"] {
        assert!(record.get(key).is_some(), "{key} missing: {record}");
    }

    // `drover monitor` prints the same lines.
    let mut child = Command::new(drover_bin())
        .args(["monitor", "-log-level", "debug"])
        .env("DROVER_ADDR", agent.addr())
        .env_remove("NOMAD_ADDR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn drover monitor");
    let stdout = child.stdout.take().expect("piped stdout");
    let (line_tx, line_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line_tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + WAIT;
    let first = loop {
        assert!(Instant::now() < deadline, "drover monitor printed nothing");
        n += 1;
        let _ = agent.send("DELETE", &format!("/v1/job/m{}", n - 1), "");
        if let Ok(line) = line_rx.recv_timeout(Duration::from_millis(500)) {
            break line;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(first.contains("Z ["), "an hclog line: {first}");

    // A dev agent's self report has its client's stats, as Nomad's.
    let me = agent.get("/v1/agent/self").expect("agent self");
    let client = &me["stats"]["client"];
    assert!(
        client["last_heartbeat"]
            .as_str()
            .is_some_and(|s| s.ends_with('s')),
        "{client}"
    );
    assert!(
        client["node_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{client}"
    );

    let (status, text) = agent.send("GET", "/v1/metrics?format=prometheus", "");
    assert_eq!(status, 200, "{text}");
    for family in [
        "nomad_raft_appliedIndex",
        "nomad_nomad_broker_total_ready",
        "nomad_nomad_plan_queue_depth",
        "nomad_client_allocations_running",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} gauge\n")),
            "{family}:\n{text}"
        );
    }
    // Every sample line is `name{labels} value` with a number.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let value = line.rsplit_once(' ').map(|(_, v)| v).unwrap_or_default();
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
}

/// A Nomad response sample from `../shared`; `None` (the test skips) when that folder is not
/// beside the checkout.
fn sample(name: &str) -> Option<Value> {
    let dir = drover_tests::workspace_root().join("../shared/reference/nomad-api-samples");
    if !dir.is_dir() {
        eprintln!("skipping: {} is missing", dir.display());
        return None;
    }
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(serde_json::from_str(&text).expect("sample json"))
}

/// Same JSON kind (string, number, object...), recursively for the keys both objects have.
fn same_kinds(ours: &Value, nomads: &Value, at: &str, mismatches: &mut Vec<String>) {
    let kind = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if nomads.is_null() || ours.is_null() {
        return;
    }
    if kind(ours) != kind(nomads) {
        mismatches.push(format!(
            "{at}: {} here, {} in Nomad",
            kind(ours),
            kind(nomads)
        ));
        return;
    }
    if let (Value::Object(a), Value::Object(b)) = (ours, nomads) {
        for (k, v) in a {
            if let Some(w) = b.get(k) {
                same_kinds(v, w, &format!("{at}.{k}"), mismatches);
            }
        }
    }
}

#[test]
fn agent_self_and_members_have_the_fields_of_nomads_samples() {
    let (Some(nomad), Some(nomad_members)) =
        (sample("agent_self.json"), sample("agent_members.json"))
    else {
        return;
    };
    let dir = TempDir::new("agent-self-shape");
    let cluster = ServerCluster::start(dir.path(), 1, "");
    let agent = cluster.servers[0].agent.as_ref().expect("running");
    let me = agent.get("/v1/agent/self").expect("agent self");
    let mut mismatches = Vec::new();
    same_kinds(&me, &nomad, "self", &mut mismatches);
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    // Every field of Nomad's member and its tags, and the stats Drover has the same thing for.
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        k.sort();
        k
    };
    assert_eq!(keys(&me["member"]), keys(&nomad["member"]));
    assert_eq!(keys(&me["member"]["Tags"]), keys(&nomad["member"]["Tags"]));
    assert_eq!(keys(&me["stats"]["nomad"]), keys(&nomad["stats"]["nomad"]));
    for k in [
        "state",
        "term",
        "commit_index",
        "applied_index",
        "last_log_index",
        "last_snapshot_index",
        "num_peers",
        "last_contact",
        "latest_configuration",
    ] {
        assert!(
            me["stats"]["raft"][k].is_string(),
            "raft.{k}: {}",
            me["stats"]["raft"]
        );
    }
    for k in [
        "Addresses",
        "AdvertiseAddrs",
        "Ports",
        "Version",
        "LogLevel",
        "NodeName",
        "BindAddr",
    ] {
        assert!(!me["config"][k].is_null(), "config.{k}");
    }
    let config = me["stats"]["raft"]["latest_configuration"]
        .as_str()
        .unwrap_or_default();
    assert!(config.starts_with("[{Suffrage:Voter ID:"), "{config}");

    let members = agent.get("/v1/agent/members").expect("members");
    let nomad = nomad_members;
    assert_eq!(keys(&members), keys(&nomad));
    assert_eq!(keys(&members["Members"][0]), keys(&nomad["Members"][0]));
    assert_eq!(
        keys(&members["Members"][0]["Tags"]),
        keys(&nomad["Members"][0]["Tags"])
    );
    let mut mismatches = Vec::new();
    same_kinds(&members, &nomad, "members", &mut mismatches);
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[test]
fn a_server_still_waiting_for_its_peers_answers_no_cluster_leader() {
    let dir = TempDir::new("agent-expect3");
    let (http_port, rpc_port) = (free_port(), free_port());
    let sdir = dir.path().join("s");
    std::fs::create_dir_all(&sdir).expect("server dir");
    let log_path = sdir.join("agent.log");
    let log = std::fs::File::create(&log_path).expect("open log");
    let child = Command::new(drover_bin())
        .args([
            "agent",
            "--server",
            "--bind",
            "127.0.0.1",
            "--node",
            "lonely",
        ])
        .args(["--bootstrap-expect", "3"])
        .arg("--data-dir")
        .arg(sdir.join("data"))
        .args(["--http-port", &http_port.to_string()])
        .args(["--rpc-port", &rpc_port.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone log fd"))
        .stderr(log)
        .spawn()
        .expect("spawn drover server");
    let agent = Agent {
        child,
        host: "127.0.0.1".into(),
        http_port,
        rpc_port,
        data_dir: sdir.clone(),
        log_path,
    };
    until("the server answers HTTP", &agent, || {
        agent.send("GET", "/v1/status/leader", "").0 == 200
    });
    assert_eq!(leader_of(&agent), "");
    assert_eq!(
        agent.send("GET", "/v1/nodes", ""),
        (500, "No cluster leader".to_string())
    );
    assert_eq!(agent.send("GET", "/v1/agent/health", "").0, 500);
    assert_eq!(members(&agent).len(), 1);
}
