//! `drover node drain` over real agents: a dev agent whose node runs four allocations of a
//! group with `migrate { max_parallel = 1, min_healthy_time = "1s" }` is drained while a
//! second (client-only) node is up; the allocations move to it one at a time (each replacement
//! starts only after the previous one ran for the healthy time), the drain completes, and the
//! drained node stays ineligible until `node eligibility -enable`.

use std::time::{Duration, Instant};

use drover_tests::clients::ClientProc;
use drover_tests::{Agent, TempDir, output_text, write_job};
use serde_json::Value;

const JOB: &str = r#"
job "drainme" {
  datacenters = ["dc1"]
  group "g" {
    count = 4
    migrate {
      max_parallel     = 1
      min_healthy_time = "1s"
    }
    ephemeral_disk {
      size = 10
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "10m" }
      logs {
        max_files     = 1
        max_file_size = 5
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
"#;

/// Runs the CLI, killed if it has not finished within `limit` (the drain monitor waits for
/// the drain to end, which a bug could keep from happening).
fn cli_within(agent: &Agent, args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = std::process::Command::new(drover_tests::drover_bin())
        .args(args)
        .env("DROVER_ADDR", agent.addr())
        .env_remove("NOMAD_ADDR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run drover CLI");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait for the CLI").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("CLI output");
            panic!(
                "`drover {}` did not finish within {limit:?}: {}\nagent log:\n{}",
                args.join(" "),
                output_text(&out),
                agent.log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().expect("CLI output")
}

fn live_allocs(agent: &Agent) -> Vec<Value> {
    agent
        .get("/v1/job/drainme/allocations")
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["DesiredStatus"] == "run")
        .collect()
}

#[test]
fn draining_a_node_moves_its_allocations_one_healthy_replacement_at_a_time() {
    let dir = TempDir::new("node-drain");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(&dir, "drainme.nomad", JOB);
    let out = agent.cli(&["job", "run", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    let first: Vec<Value> = live_allocs(&agent);
    assert_eq!(first.len(), 4);
    let n1 = first[0]["NodeID"].as_str().expect("node id").to_string();
    assert!(first.iter().all(|a| a["NodeID"] == n1.as_str()));

    let servers = vec![format!("127.0.0.1:{}", agent.rpc_port)];
    let c2 = ClientProc::start(dir.path(), "c2", &servers, "");
    let n2 = c2.node_id();

    let started = Instant::now();
    let out = cli_within(
        &agent,
        &["node", "drain", "-enable", "-yes", "-deadline", "2m", &n1],
        Duration::from_secs(90),
    );
    let text = output_text(&out);
    assert!(out.status.success(), "node drain: {text}");
    assert_eq!(
        text.matches("marked for migration").count(),
        4,
        "each allocation marked once: {text}"
    );
    assert!(
        text.contains(&format!("Drain complete for node {n1}")),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(110),
        "drain took {:?}",
        started.elapsed()
    );

    let moved = live_allocs(&agent);
    assert_eq!(moved.len(), 4, "{moved:?}");
    assert!(
        moved.iter().all(|a| a["NodeID"] == n2.as_str()),
        "{moved:#?}"
    );
    // One at a time: each replacement was created at least the healthy time after the one
    // before it.
    let mut created: Vec<i64> = moved
        .iter()
        .map(|a| a["CreateTime"].as_i64().expect("create time"))
        .collect();
    created.sort();
    for w in created.windows(2) {
        assert!(
            w[1] - w[0] >= 900_000_000,
            "replacements {:?} apart: {created:?}",
            Duration::from_nanos((w[1] - w[0]) as u64)
        );
    }

    let node: Value = agent.get(&format!("/v1/node/{n1}")).unwrap();
    assert!(node["DrainStrategy"].is_null(), "{}", node["DrainStrategy"]);
    assert_eq!(node["SchedulingEligibility"], "ineligible");
    let out = agent.cli(&["node", "eligibility", "-enable", &n1]);
    assert!(out.status.success(), "{}", output_text(&out));
    let node: Value = agent.get(&format!("/v1/node/{n1}")).unwrap();
    assert_eq!(node["SchedulingEligibility"], "eligible");
}

#[test]
fn drain_without_enable_or_disable_is_refused() {
    let dir = TempDir::new("node-drain-flags");
    let agent = Agent::start_dev(dir.path(), &[]);
    let out = agent.cli(&["node", "drain", "-self"]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("'-enable' or '-disable'"),
        "{}",
        output_text(&out)
    );
}
