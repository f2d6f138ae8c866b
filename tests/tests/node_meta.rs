//! Dynamic node metadata end to end (`drover node meta apply|read`, `/v1/client/metadata`):
//! applied keys reach the node the servers schedule on (a job constrained on the new value
//! places, and runs with it in `${meta.*}`), an unset static key leaves the merged meta, bad
//! keys are refused with Nomad's message, and the changes survive an agent restart.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

fn node_meta(agent: &Agent) -> Value {
    let nodes = agent.get("/v1/nodes").expect("node list");
    let id = nodes[0]["ID"].as_str().expect("node id").to_string();
    agent.get(&format!("/v1/node/{id}")).expect("node")["Meta"].clone()
}

fn start(dir: &TempDir) -> Agent {
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        "client {\n  meta {\n    zone = \"a\"\n    rack = \"r1\"\n  }\n}\n",
    )
    .expect("write the agent config");
    Agent::start_dev(dir.path(), &["--config", config.to_str().expect("utf-8")])
}

#[test]
fn applied_node_meta_reaches_scheduling_and_survives_a_restart() {
    let dir = TempDir::new("node-meta");
    let mut agent = start(&dir);
    agent.eventually("the node to register", WAIT, || {
        node_meta(&agent)["rack"] == "r1"
    });

    let out = agent.cli(&[
        "node", "meta", "apply", "-unset", "zone", "rack=r2", "team=web",
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the servers to see the new meta", WAIT, || {
        let meta = node_meta(&agent);
        meta["rack"] == "r2" && meta["team"] == "web" && meta.get("zone").is_none()
    });

    let out = agent.cli(&["node", "meta", "read"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let sections: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(sections.len(), 3, "{text}");
    assert!(sections[0].starts_with("All Meta\n"), "{text}");
    assert!(
        sections[0].contains("rack = r2") && !sections[0].contains("zone"),
        "{text}"
    );
    assert!(sections[1].contains("zone = <unset>"), "{text}");
    assert!(
        sections[2].contains("zone = a") && sections[2].contains("rack = r1"),
        "{text}"
    );

    let out = agent.cli(&["node", "meta", "apply", "9lives=x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        output_text(&out)
            .contains("\"9lives\" is invalid; metadata keys must be valid dotted hcl identifiers"),
        "{}",
        output_text(&out)
    );
    let out = agent.cli(&["node", "meta", "apply"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(output_text(&out).contains("Must specify -unset or at least 1 key=value pair"));

    // A job that needs the new value places on the node and sees it.
    let job = write_job(
        &dir,
        "rack.nomad",
        r#"
job "rack" {
  datacenters = ["dc1"]
  type = "batch"
  constraint {
    attribute = "${meta.rack}"
    value     = "r2"
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo rack=${meta.rack} team=$TEAM"]
      }
      env {
        TEAM = "${meta.team}"
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#,
    );
    let out = agent.cli(&["job", "run", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the constrained job to complete", WAIT, || {
        allocs(&agent, "rack")
            .iter()
            .any(|a| a["ClientStatus"] == "complete")
    });
    let alloc = allocs(&agent, "rack")[0]["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    let out = agent.cli(&["alloc", "logs", &alloc, "t"]);
    assert_eq!(output_text(&out).trim(), "rack=r2 team=web");

    // The dynamic meta is in the client state: a new agent process keeps it.
    agent.terminate();
    let agent = start(&dir);
    agent.eventually("the restarted node to keep its dynamic meta", WAIT, || {
        let meta = node_meta(&agent);
        meta["rack"] == "r2" && meta["team"] == "web" && meta.get("zone").is_none()
    });
}
