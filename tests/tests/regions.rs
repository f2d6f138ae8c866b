//! Regions: two dev agents, each its own region with its own Raft cluster, federated with
//! `server join`. Both list both regions, `server members` shows the other region's server,
//! and a request with `-region` (`?region=`) is answered by the other region's server: a job
//! registered there lives only there. A region nobody knows gets Nomad's "No path to region".
//! A restarted server still knows the other regions.

use std::time::Duration;

use drover_tests::{Agent, TempDir, output_text, write_job};

fn agent_in_region(dir: &TempDir, region: &str) -> Agent {
    let (http, rpc) = (drover_tests::free_port(), drover_tests::free_port());
    Agent::start_dev_in_region(dir.path(), region, http, rpc)
}

#[test]
fn two_federated_regions_forward_requests_by_region_and_keep_their_own_state() {
    let dir = TempDir::new("regions");
    let east = agent_in_region(&dir, "east");
    let west = agent_in_region(&dir, "west");
    assert_eq!(
        east.get("/v1/regions").expect("regions"),
        serde_json::json!(["east"])
    );

    let rpc = format!("127.0.0.1:{}", west.rpc_port);
    let out = east.cli(&["server", "join", &rpc]);
    assert!(out.status.success(), "{}", output_text(&out));
    for agent in [&east, &west] {
        agent.eventually("both regions known", Duration::from_secs(10), || {
            agent.get("/v1/regions").ok() == Some(serde_json::json!(["east", "west"]))
        });
    }
    let out = east.cli(&["server", "members"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(".west") && l.contains("alive") && l.contains("west")),
        "{text}"
    );

    let job = write_job(
        &dir,
        "web.nomad",
        r#"
job "web" {
  datacenters = ["dc1"]
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600.81"]
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
    let out = east.cli(&["job", "run", "-detach", "-region", "west", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(west.get("/v1/job/web").is_ok(), "the job is in west");
    assert!(east.get("/v1/job/web").is_err(), "and not in east");
    let remote = east.get("/v1/job/web?region=west").expect("forwarded read");
    assert_eq!(remote["Region"], "west");
    let out = east.cli(&["job", "status", "-region", "west", "web"]);
    assert!(out.status.success(), "{}", output_text(&out));

    let (status, body) = east.send("GET", "/v1/jobs?region=north", "");
    assert_eq!((status, body.trim()), (400, "No path to region"));
    let out = east.cli(&["job", "status", "-region", "north"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        output_text(&out).contains("No path to region"),
        "{}",
        output_text(&out)
    );

    // A restarted server remembers the other regions by itself (west is down meanwhile).
    let (http, rpc) = (east.http_port, east.rpc_port);
    let mut west = west;
    west.terminate();
    let mut east = east;
    east.terminate();
    let east = Agent::start_dev_in_region(dir.path(), "east", http, rpc);
    assert_eq!(
        east.get("/v1/regions").expect("regions"),
        serde_json::json!(["east", "west"])
    );
}
