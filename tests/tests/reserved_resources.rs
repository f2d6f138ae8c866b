//! Reserved resources are subtracted once, with real client agents: four clients configured with
//! `cpu_total_compute`, `memory_total_mb` and a `reserved` block register nodes whose
//! available capacity the scheduler scores exactly as Nomad does (issue 5's example).

use drover_tests::{ServerCluster, TempDir, free_port};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// A client-only agent; killed when dropped so a failing assertion leaves no process behind.
struct ClientAgent(Child);

impl Drop for ClientAgent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_client(dir: &TempDir, name: &str, servers: &str, config: &str) -> ClientAgent {
    let cdir = dir.path().join(name);
    std::fs::create_dir_all(&cdir).unwrap();
    let config_path = cdir.join("client.hcl");
    std::fs::write(&config_path, config).unwrap();
    let log = std::fs::File::create(cdir.join("agent.log")).unwrap();
    let child = Command::new(drover_tests::drover_bin())
        .args(["agent", "--client", "--bind", "127.0.0.1", "--node", name])
        .arg("--data-dir")
        .arg(cdir.join("data"))
        .args(["--http-port", &free_port().to_string()])
        .args(["--servers", servers])
        .arg("--config")
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    ClientAgent(child)
}

fn client_config(total: u64, reserved: u64) -> String {
    format!(
        "client {{\n  cpu_total_compute = {total}\n  memory_total_mb = {total}\n  reserved {{\n    cpu = {reserved}\n    memory = {reserved}\n  }}\n}}\n"
    )
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[test]
fn reserved_resources_are_subtracted_once_and_scores_match_nomads() {
    let dir = TempDir::new("reserved");
    let cluster = ServerCluster::start(dir.path(), 1, "");
    let servers = cluster.servers[0].rpc_addr();
    let shapes = [
        ("n1100", 1100, 0),
        ("n2000r800", 2000, 800),
        ("n2000r500", 2000, 500),
        ("n900", 900, 0),
    ];
    let _clients: Vec<ClientAgent> = shapes
        .iter()
        .map(|(name, total, reserved)| {
            start_client(&dir, name, &servers, &client_config(*total, *reserved))
        })
        .collect();

    let deadline = Instant::now() + WAIT;
    let nodes = loop {
        let nodes = cluster.get(0, "/v1/nodes").unwrap_or_default();
        let nodes = nodes.as_array().cloned().unwrap_or_default();
        if nodes.iter().filter(|n| n["Status"] == "ready").count() == 4 {
            break nodes;
        }
        assert!(
            Instant::now() < deadline,
            "four ready nodes\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let name_of = |id: &str| -> String {
        nodes
            .iter()
            .find(|n| n["ID"] == id)
            .map(|n| n["Name"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };

    // The reserved block reaches the node as Nomad reports it.
    let n800 = nodes.iter().find(|n| n["Name"] == "n2000r800").unwrap();
    let node = cluster
        .get(0, &format!("/v1/node/{}", n800["ID"].as_str().unwrap()))
        .unwrap();
    assert_eq!(node["NodeResources"]["Cpu"]["CpuShares"], 2000, "{node}");
    assert_eq!(node["NodeResources"]["Memory"]["MemoryMB"], 2000, "{node}");
    assert_eq!(node["ReservedResources"]["Cpu"]["CpuShares"], 800, "{node}");
    assert_eq!(
        node["ReservedResources"]["Memory"]["MemoryMB"], 800,
        "{node}"
    );

    // An affinity that matches no node lifts the candidate limit, so all four are looked at.
    let job = json!({"Job": {
        "ID": "reserved", "Datacenters": ["dc1"], "Type": "service",
        "Affinities": [{"LTarget": "${node.unique.name}", "RTarget": "nowhere",
                        "Operand": "=", "Weight": 50}],
        "TaskGroups": [{"Name": "g", "Count": 1,
            "EphemeralDisk": {"SizeMB": 150},
            "Tasks": [{"Name": "t", "Driver": "mock_driver",
                "Config": {"run_for": "600s"},
                "Resources": {"CPU": 1000, "MemoryMB": 1000}}]}]
    }});
    let (status, body) = cluster.send(0, "PUT", "/v1/jobs", Some(&job.to_string()));
    assert_eq!(status, 200, "{body}");

    let deadline = Instant::now() + WAIT;
    let alloc = loop {
        let allocs = cluster
            .get(0, "/v1/job/reserved/allocations")
            .unwrap_or_default();
        if let Some(a) = allocs.as_array().and_then(|a| a.first()).cloned() {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "an allocation\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let id = alloc["ID"].as_str().unwrap();
    let alloc = cluster.get(0, &format!("/v1/allocation/{id}")).unwrap();
    assert_eq!(
        name_of(alloc["NodeID"].as_str().unwrap()),
        "n1100",
        "placed on the tightest fit: {alloc}"
    );

    let metrics = &alloc["Metrics"];
    assert_eq!(metrics["NodesEvaluated"], 4, "{metrics}");
    assert_eq!(
        metrics["NodesExhausted"], 1,
        "the 900/900 node cannot fit: {metrics}"
    );
    let scores: Vec<(String, f64)> = metrics["ScoreMetaData"]
        .as_array()
        .expect("ScoreMetaData")
        .iter()
        .map(|s: &Value| {
            (
                name_of(s["NodeID"].as_str().unwrap()),
                round4(s["Scores"]["binpack"].as_f64().expect("binpack score")),
            )
        })
        .collect();
    let score_of = |name: &str| scores.iter().find(|(n, _)| n == name).map(|(_, s)| *s);
    assert_eq!(score_of("n1100"), Some(0.9741), "{scores:?}");
    assert_eq!(score_of("n2000r800"), Some(0.9480), "{scores:?}");
    assert_eq!(score_of("n2000r500"), Some(0.8717), "{scores:?}");
    assert_eq!(score_of("n900"), None, "infeasible nodes are not scored");
}
