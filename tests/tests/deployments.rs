//! Deployments end to end on a dev agent with real raw_exec tasks: a rolling update of a
//! count-4 group with `max_parallel = 1` replaces one allocation at a time (each replacement
//! waits for the previous one to be healthy for `min_healthy_time`), `job run` follows the
//! deployment to `successful`, and a broken version with `auto_revert` fails its deployment
//! and the job runs the last stable version again.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);
const SEC: i64 = 1_000_000_000;

/// The job at `version` (a tag in the task's meta, so each version is a destructive change);
/// `broken` makes its task exit at once and never restart.
fn job_file(dir: &TempDir, version: &str, broken: bool) -> String {
    let command = if broken {
        r#"args = ["-c", "exit 3"]"#
    } else {
        r#"args = ["-c", "exec sleep 3600.${NOMAD_META_version}"]"#
    };
    write_job(
        dir,
        &format!("roll-{version}.nomad"),
        &format!(
            r#"
job "roll" {{
  datacenters = ["dc1"]
  update {{
    max_parallel     = 1
    min_healthy_time = "2s"
    healthy_deadline = "30s"
    progress_deadline = "60s"
    auto_revert      = true
  }}
  group "g" {{
    count = 4
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "raw_exec"
      meta {{
        version = "{version}"
      }}
      config {{
        command = "/bin/sh"
        {command}
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

fn latest_deployment(agent: &Agent) -> Value {
    agent.get("/v1/job/roll/deployment").unwrap_or(Value::Null)
}

fn wait_deployment(agent: &Agent, version: u64, status: &str) -> Value {
    let mut last = Value::Null;
    agent.eventually(
        &format!("the deployment of version {version} to be {status}"),
        WAIT,
        || {
            last = latest_deployment(agent);
            last["JobVersion"] == version && last["Status"] == status
        },
    );
    last
}

#[test]
fn a_rolling_update_replaces_one_allocation_at_a_time_and_a_broken_version_reverts() {
    let dir = TempDir::new("deployments");
    let agent = Agent::start_dev(dir.path(), &[]);

    let out = agent.cli(&["job", "run", "-detach", &job_file(&dir, "1", false)]);
    assert!(out.status.success(), "{}", output_text(&out));
    let first = wait_deployment(&agent, 0, "successful");
    assert_eq!(
        first["StatusDescription"],
        "Deployment completed successfully"
    );
    assert_eq!(first["TaskGroups"]["g"]["HealthyAllocs"], 4, "{first}");
    let job = agent.get("/v1/job/roll").expect("job");
    assert_eq!(
        job["Stable"], true,
        "a successful deployment marks the version stable"
    );

    // The update: `job run` follows the deployment until it ends.
    let out = agent.cli(&["job", "run", &job_file(&dir, "2", false)]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Monitoring deployment"), "{text}");
    assert!(text.contains("Deployment completed successfully"), "{text}");
    let second = wait_deployment(&agent, 1, "successful");
    assert_eq!(second["TaskGroups"]["g"]["PlacedAllocs"], 4, "{second}");
    let mut created: Vec<i64> = allocs(&agent, "roll")
        .iter()
        .filter(|a| a["JobVersion"] == 1)
        .map(|a| a["CreateTime"].as_i64().unwrap_or(0))
        .collect();
    created.sort();
    assert_eq!(created.len(), 4);
    let gaps: Vec<i64> = created.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!(
        "replacement gaps (s): {:?}",
        gaps.iter()
            .map(|g| *g as f64 / SEC as f64)
            .collect::<Vec<_>>()
    );
    assert!(
        gaps.iter().all(|g| *g >= 2 * SEC - SEC / 10),
        "each replacement waits for the previous one to be healthy for 2 s: {gaps:?}"
    );

    // A broken version: its first replacement fails, the deployment fails and the job is
    // rolled back to version 1 (the newest stable), registered as version 3.
    let out = agent.cli(&["job", "run", "-detach", &job_file(&dir, "3", true)]);
    assert!(out.status.success(), "{}", output_text(&out));
    let mut failed = Value::Null;
    agent.eventually("the broken version's deployment to fail", WAIT, || {
        failed = agent
            .get("/v1/job/roll/deployments")
            .unwrap_or(Value::Null)
            .as_array()
            .and_then(|l| l.iter().find(|d| d["JobVersion"] == 2).cloned())
            .unwrap_or(Value::Null);
        failed["Status"] == "failed"
    });
    assert_eq!(
        failed["StatusDescription"],
        "Failed due to unhealthy allocations - rolling back to job version 1"
    );
    wait_deployment(&agent, 3, "successful");
    let job = agent.get("/v1/job/roll").expect("job");
    assert_eq!(job["Version"], 3);
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Meta"]["version"], "2");
    let running: Vec<Value> = allocs(&agent, "roll")
        .into_iter()
        .filter(|a| a["ClientStatus"] == "running")
        .collect();
    assert_eq!(running.len(), 4);
    assert!(
        running
            .iter()
            .all(|a| a["JobVersion"] == 3 || a["JobVersion"] == 1),
        "only the good spec runs"
    );
    let out = agent.cli(&["deployment", "list"]);
    let text = output_text(&out);
    assert!(
        text.contains("failed") && text.contains("successful"),
        "{text}"
    );
}

/// A count-2 job whose group has one canary; `auto_promote` when asked.
fn canary_job(dir: &TempDir, version: &str, auto_promote: bool) -> String {
    write_job(
        dir,
        &format!("canary-{version}.nomad"),
        &format!(
            r#"
job "canary" {{
  datacenters = ["dc1"]
  update {{
    max_parallel     = 1
    canary           = 1
    auto_promote     = {auto_promote}
    min_healthy_time = "1s"
    healthy_deadline = "30s"
  }}
  group "g" {{
    count = 2
    task "t" {{
      driver = "raw_exec"
      meta {{
        version = "{version}"
      }}
      config {{
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600.${{NOMAD_META_version}}"]
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

fn canary_deployment(agent: &Agent, version: u64) -> Value {
    agent
        .get("/v1/job/canary/deployments")
        .unwrap_or(Value::Null)
        .as_array()
        .and_then(|l| l.iter().find(|d| d["JobVersion"] == version).cloned())
        .unwrap_or(Value::Null)
}

#[test]
fn a_canary_waits_for_promotion_and_auto_promote_promotes_by_itself() {
    let dir = TempDir::new("canaries");
    let agent = Agent::start_dev(dir.path(), &[]);
    let out = agent.cli(&["job", "run", "-detach", &canary_job(&dir, "1", false)]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the first deployment to succeed", WAIT, || {
        canary_deployment(&agent, 0)["Status"] == "successful"
    });

    let out = agent.cli(&["job", "run", "-detach", &canary_job(&dir, "2", false)]);
    assert!(out.status.success(), "{}", output_text(&out));
    let mut d = Value::Null;
    agent.eventually("the canary to be healthy", WAIT, || {
        d = canary_deployment(&agent, 1);
        d["TaskGroups"]["g"]["HealthyAllocs"] == 1
    });
    assert_eq!(
        d["StatusDescription"],
        "Deployment is running but requires manual promotion"
    );
    // Unpromoted, nothing else moves: both old allocations and the canary run.
    std::thread::sleep(Duration::from_secs(3));
    let running = |version: u64| {
        allocs(&agent, "canary")
            .iter()
            .filter(|a| a["ClientStatus"] == "running" && a["JobVersion"] == version)
            .count()
    };
    assert_eq!((running(0), running(1)), (2, 1));
    assert_eq!(canary_deployment(&agent, 1)["Status"], "running");

    let id = d["ID"].as_str().expect("deployment id").to_string();
    let out = agent.cli(&["deployment", "promote", "-detach", &id]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the promoted deployment to succeed", WAIT, || {
        canary_deployment(&agent, 1)["Status"] == "successful"
    });
    agent.eventually("only the new version to run", WAIT, || {
        running(0) == 0 && running(1) == 2
    });

    // auto_promote: no operator needed.
    let out = agent.cli(&["job", "run", "-detach", &canary_job(&dir, "3", true)]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the auto-promoted deployment to succeed", WAIT, || {
        canary_deployment(&agent, 2)["Status"] == "successful"
    });
    assert_eq!(
        canary_deployment(&agent, 2)["TaskGroups"]["g"]["Promoted"],
        true
    );
    agent.eventually("only version 2 to run", WAIT, || running(2) == 2);
}
