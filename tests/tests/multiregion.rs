//! Multiregion deployments across two federated regions (two dev agents, each its own region
//! with its own server, client and Raft cluster): with `max_parallel = 1` the first region
//! deploys while the second waits `pending` with nothing placed; the second starts only once
//! the first is done (`blocked`), and when it is done too both end `successful`. An operator's
//! pause of the first region keeps the second pending until the operator resumes. With
//! `on_failure = "fail_all"`, a failure in the second region fails the first region's
//! deployment as well. `job plan` plans each region's copy; `job stop -global` stops both; a
//! version that no longer lists a region stops the job there.

use std::time::Duration;

use drover_tests::{Agent, TempDir, output_text, write_job};
use serde_json::Value;

fn agent_in_region(dir: &TempDir, region: &str) -> Agent {
    let (http, rpc) = (drover_tests::free_port(), drover_tests::free_port());
    Agent::start_dev_in_region(dir.path(), region, http, rpc)
}

/// The job, version `tag`; in region west the task exits 1 when `west_fails`; allocations
/// are healthy after `min_healthy`.
fn job(dir: &TempDir, tag: &str, west_fails: bool, min_healthy: &str) -> String {
    let west = if west_fails { "yes" } else { "no" };
    write_job(
        dir,
        &format!("mr-{tag}.nomad"),
        &format!(
            r#"
job "mr" {{
  datacenters = ["dc1"]
  meta {{
    tag = "{tag}"
  }}
  multiregion {{
    strategy {{
      max_parallel = 1
      on_failure   = "fail_all"
    }}
    region "east" {{
      count = 1
      meta {{
        fail = "no"
      }}
    }}
    region "west" {{
      count = 1
      meta {{
        fail = "{west}"
      }}
    }}
  }}
  update {{
    max_parallel     = 1
    min_healthy_time = "{min_healthy}"
    healthy_deadline = "30s"
  }}
  group "g" {{
    count = 0
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "test \"$NOMAD_META_fail\" = no || exit 1; exec sleep 3600.83"]
      }}
      resources {{
        cpu    = 20
        memory = 16
      }}
    }}
  }}
}}
"#
        ),
    )
}

fn latest(agent: &Agent) -> Value {
    agent.get("/v1/job/mr/deployment").unwrap_or(Value::Null)
}

fn status(agent: &Agent) -> String {
    latest(agent)["Status"].as_str().unwrap_or("").to_string()
}

fn live_allocs(agent: &Agent) -> usize {
    agent
        .get("/v1/job/mr/allocations")
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|a| a["DesiredStatus"] == "run" && a["ClientStatus"] == "running")
        .count()
}

fn wait_status(agent: &Agent, want: &str, version: u64) {
    agent.eventually(
        &format!("deployment of version {version} {want}"),
        Duration::from_secs(40),
        || {
            let d = latest(agent);
            d["JobVersion"].as_u64() == Some(version) && d["Status"] == want
        },
    );
}

#[test]
fn a_multiregion_rollout_goes_region_by_region_waits_for_operators_and_fails_all() {
    let dir = TempDir::new("multiregion");
    let east = agent_in_region(&dir, "east");
    let west = agent_in_region(&dir, "west");
    let out = east.cli(&["server", "join", &format!("127.0.0.1:{}", west.rpc_port)]);
    assert!(out.status.success(), "{}", output_text(&out));
    east.eventually("west known", Duration::from_secs(10), || {
        east.get("/v1/regions").ok() == Some(serde_json::json!(["east", "west"]))
    });

    // Version 0: registered in both regions from east; east deploys, west waits.
    let out = east.cli(&["job", "run", &job(&dir, "a", false, "1s")]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Job registration successful"),
        "a multiregion job is not monitored: {text}"
    );
    let west_job = west
        .get("/v1/job/mr")
        .expect("the job is registered in west");
    assert_eq!(west_job["Region"], "west");
    assert_eq!(west_job["Meta"]["fail"], "no");
    assert_eq!(west_job["TaskGroups"][0]["Count"], 1);
    west.eventually("west's deployment pending", Duration::from_secs(10), || {
        status(&west) == "pending"
    });
    assert_eq!(
        latest(&west)["StatusDescription"],
        "Deployment is pending, waiting for peer region"
    );
    assert_eq!(latest(&west)["IsMultiregion"], true);
    assert_eq!(status(&east), "running");
    assert_eq!(live_allocs(&west), 0, "nothing placed in a pending region");
    // East finishes first and waits for its peer; then west runs, and both succeed.
    wait_status(&west, "running", 0);
    assert!(
        matches!(status(&east).as_str(), "blocked" | "successful"),
        "{}",
        latest(&east)
    );
    wait_status(&west, "successful", 0);
    wait_status(&east, "successful", 0);
    assert_eq!((live_allocs(&east), live_allocs(&west)), (1, 1));
    let out = east.cli(&["job", "status", "mr"]);
    let text = output_text(&out);
    assert!(
        text.contains("Multiregion Deployment\nRegion  ID"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("west ") && l.ends_with("successful")),
        "{text}"
    );

    // A plan asks every region about its own copy.
    let v1 = job(&dir, "b", false, "6s");
    let out = east.cli(&["job", "plan", &v1]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for region in ["east", "west"] {
        assert!(
            text.contains(&format!(
                "Region: \"{region}\"\n+/- Job: \"mr\"\n+/- Meta[tag]: \"a\" => \"b\""
            )),
            "{text}"
        );
    }
    assert!(!text.contains("Job Modify Index"), "{text}");

    // Version 1: the operator pauses east; west stays pending until east is resumed.
    let out = east.cli(&["job", "run", &v1]);
    assert!(out.status.success(), "{}", output_text(&out));
    west.eventually("west's v1 pending", Duration::from_secs(10), || {
        latest(&west)["JobVersion"] == 1 && status(&west) == "pending"
    });
    // East's takes 6 s to be healthy: paused well before it could finish.
    east.eventually("east's v1 running", Duration::from_secs(10), || {
        latest(&east)["JobVersion"] == 1 && status(&east) == "running"
    });
    let east_d = latest(&east);
    let id = east_d["ID"].as_str().expect("id").to_string();
    let out = east.cli(&["deployment", "pause", &id]);
    assert!(out.status.success(), "{}", output_text(&out));
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        status(&east),
        "paused",
        "nothing resumes an operator's pause"
    );
    assert_eq!(status(&west), "pending", "{}", latest(&west));
    let out = east.cli(&["deployment", "resume", "-detach", &id]);
    assert!(out.status.success(), "{}", output_text(&out));
    wait_status(&west, "successful", 1);
    wait_status(&east, "successful", 1);

    // Version 2 fails in west: fail_all fails east's deployment too.
    let out = east.cli(&["job", "run", &job(&dir, "c", true, "1s")]);
    assert!(out.status.success(), "{}", output_text(&out));
    wait_status(&west, "failed", 2);
    wait_status(&east, "failed", 2);
    assert_eq!(
        latest(&east)["StatusDescription"],
        "Failed because of an error in peer region"
    );

    // Stopping with -global stops the job in both regions.
    let out = east.cli(&["job", "stop", "-global", "mr"]);
    assert!(out.status.success(), "{}", output_text(&out));
    for agent in [&east, &west] {
        assert_eq!(agent.get("/v1/job/mr").expect("job")["Stop"], true);
    }

    // A version that drops a region stops the job there.
    let out = east.cli(&["job", "run", &job(&dir, "d", false, "1s")]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(west.get("/v1/job/mr").expect("job")["Stop"], false);
    let only_east = job(&dir, "e", false, "1s");
    let text = std::fs::read_to_string(&only_east).expect("job file");
    let start = text.find("    region \"west\"").expect("west block");
    let end = start + text[start..].find("\n    }\n").expect("end of west") + 7;
    std::fs::write(&only_east, format!("{}{}", &text[..start], &text[end..])).expect("write");
    let out = east.cli(&["job", "run", &only_east]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(
        west.get("/v1/job/mr").expect("job")["Stop"],
        true,
        "dropped"
    );
    assert_eq!(east.get("/v1/job/mr").expect("job")["Stop"], false);
}
