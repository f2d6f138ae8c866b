//! Periodic and parameterized jobs end to end, through a real dev agent and the CLI: forced
//! and scheduled launches of periodic children, overlap prohibition, dispatching
//! parameterized jobs with payloads, meta and idempotency tokens, and `job status` of the
//! parents (next launch, children summary, launched and dispatched children).

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// A batch job `id` with a `periodic` block `periodic` and one raw_exec task running `script`.
fn periodic_job(id: &str, periodic: &str, script: &str) -> String {
    format!(
        r#"
job "{id}" {{
  datacenters = ["dc1"]
  type = "batch"
  periodic {{
    {periodic}
  }}
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", "{script}"]
      }}
      resources {{
        cpu = 20
        memory = 16
      }}
    }}
  }}
}}
"#
    )
}

/// The ids of the jobs `parent` launched (ParentID = parent).
fn children(agent: &Agent, parent: &str) -> Vec<String> {
    agent
        .get(&format!("/v1/jobs?prefix={parent}/"))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|j| j["ParentID"] == parent)
        .filter_map(|j| j["ID"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn forcing_a_periodic_job_launches_a_child_that_runs_and_the_parent_stays_running() {
    let dir = TempDir::new("periodic-force");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(
        &dir,
        "report.nomad",
        &periodic_job(
            "report",
            r#"cron = "0 0 1 1 * 2099"
    prohibit_overlap = true
    time_zone = "Europe/Paris""#,
            "echo report-from-${NOMAD_JOB_ID}",
        ),
    );
    let out = agent.cli(&["job", "run", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Job registration successful"),
        "{}",
        output_text(&out)
    );

    let out = agent.cli(&["job", "periodic", "force", "rep"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let launched = children(&agent, "report");
    assert_eq!(launched.len(), 1, "{launched:?}");
    let child = &launched[0];
    assert!(child.starts_with("report/periodic-"), "{child}");
    agent.eventually("the child's allocation to complete", WAIT, || {
        allocs(&agent, child)
            .iter()
            .any(|a| a["ClientStatus"] == "complete")
    });
    let alloc_id = allocs(&agent, child)[0]["ID"].as_str().unwrap().to_string();
    let logs = agent.cli(&["alloc", "logs", &alloc_id, "t"]);
    assert_eq!(
        String::from_utf8_lossy(&logs.stdout).trim(),
        format!("report-from-{child}")
    );

    let parent: Value = agent.get("/v1/job/report").unwrap();
    assert_eq!(parent["Status"], "running");
    assert!(
        allocs(&agent, "report").is_empty(),
        "the parent runs nothing"
    );

    // Nomad's view of a periodic parent: the next launch on the job's clock (Paris, UTC+1 in
    // January), the children counted by status, and the launched children.
    agent.eventually("the child to be dead", WAIT, || {
        agent
            .get(&format!("/v1/job/{child}"))
            .is_ok_and(|j| j["Status"] == "dead")
    });
    let summary: Value = agent.get("/v1/job/report/summary").unwrap();
    assert_eq!(
        summary["Children"],
        serde_json::json!({"Pending": 0, "Running": 0, "Dead": 1})
    );
    let out = agent.cli(&["job", "status", "report"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    let next = status
        .lines()
        .find_map(|l| l.strip_prefix("Next Periodic Launch = "))
        .unwrap_or_else(|| panic!("no next launch in:\n{status}"));
    assert!(
        next.starts_with("2099-01-01T00:00:00+01:00 (") && next.ends_with(" from now)"),
        "{next}"
    );
    assert!(
        status.contains("\nChildren Job Summary\nPending  Running  Dead\n0        0        1\n"),
        "{status}"
    );
    assert!(!status.contains("\nSummary\n"), "{status}");
    assert!(
        status.contains(&format!(
            "\nPreviously Launched Jobs\nID{}Status\n{child}  dead",
            " ".repeat(child.len())
        )),
        "{status}"
    );

    let out = agent.cli(&["job", "periodic", "force", "-detach", "report"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with("Force periodic successful\nEvaluation ID: "),
        "{}",
        output_text(&out)
    );
    let out = agent.cli(&["job", "periodic", "force", "nothing-here"]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("No periodic job(s) with prefix or ID \"nothing-here\" found"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn an_every_second_schedule_launches_children_until_the_parent_stops() {
    let dir = TempDir::new("periodic-every-second");
    let agent = Agent::start_dev(dir.path(), &[]);
    // Seven fields: the first is seconds (cronexpr reads a sixth field as the year).
    let job = write_job(
        &dir,
        "tick.nomad",
        &periodic_job("tick", r#"crons = ["* * * * * * *"]"#, "echo tick"),
    );
    let out = agent.cli(&["job", "run", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("three launches", Duration::from_secs(15), || {
        children(&agent, "tick").len() >= 3
    });
    agent.eventually("a launched child to complete", WAIT, || {
        children(&agent, "tick").iter().any(|c| {
            allocs(&agent, c)
                .iter()
                .any(|a| a["ClientStatus"] == "complete")
        })
    });

    let out = agent.cli(&["job", "stop", "tick"]);
    assert!(out.status.success(), "{}", output_text(&out));
    // A launch may be in flight while the stop applies; after that, none.
    std::thread::sleep(Duration::from_millis(1500));
    let after_stop = children(&agent, "tick").len();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(children(&agent, "tick").len(), after_stop);
    let parent: Value = agent.get("/v1/job/tick").unwrap();
    assert_eq!(parent["Status"], "dead");
}

#[test]
fn prohibit_overlap_skips_launches_while_a_child_runs() {
    let dir = TempDir::new("periodic-overlap");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(
        &dir,
        "slow.nomad",
        &periodic_job(
            "slow",
            r#"cron = "* * * * * * *"
    prohibit_overlap = true"#,
            "sleep 30",
        ),
    );
    let out = agent.cli(&["job", "run", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the first child to run", WAIT, || {
        children(&agent, "slow").iter().any(|c| {
            allocs(&agent, c)
                .iter()
                .any(|a| a["ClientStatus"] == "running")
        })
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(children(&agent, "slow").len(), 1);
    let out = agent.cli(&["job", "stop", "slow"]);
    assert!(out.status.success(), "{}", output_text(&out));
    // Tasks outlive their agent: stop the running child before the agent goes.
    for c in children(&agent, "slow") {
        let out = agent.cli(&["job", "stop", &c]);
        assert!(out.status.success(), "{}", output_text(&out));
        agent.eventually("the child's task to stop", WAIT, || {
            allocs(&agent, &c)
                .iter()
                .all(|a| a["ClientStatus"] != "running")
        });
    }
}

const PARAMETERIZED: &str = r#"
job "render" {
  datacenters = ["dc1"]
  type = "batch"
  parameterized {
    payload       = "required"
    meta_required = ["frame"]
    meta_optional = ["note"]
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      dispatch_payload {
        file = "in/payload.txt"
      }
      config {
        command = "/bin/sh"
        args = ["-c", "cat ${NOMAD_TASK_DIR}/in/payload.txt; echo \" frame=${NOMAD_META_frame}\""]
      }
      resources {
        cpu = 20
        memory = 16
      }
    }
  }
}
"#;

#[test]
fn dispatching_runs_a_child_that_reads_its_payload_and_meta() {
    let dir = TempDir::new("dispatch");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(&dir, "render.nomad", PARAMETERIZED);
    let out = agent.cli(&["job", "run", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    let parent: Value = agent.get("/v1/job/render").unwrap();
    assert_eq!(parent["Status"], "running");

    let input = dir.path().join("input.txt");
    std::fs::write(&input, "hello-payload").unwrap();
    let out = agent.cli(&[
        "job",
        "dispatch",
        "-meta",
        "frame=42",
        "-id-prefix-template=scene",
        "render",
        input.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let child = text
        .lines()
        .find_map(|l| l.strip_prefix("Dispatched Job ID = "))
        .unwrap_or_else(|| panic!("no dispatched job id in: {text}"))
        .trim()
        .to_string();
    assert!(child.starts_with("render/dispatch-scene-"), "{child}");

    agent.eventually("the dispatched allocation to complete", WAIT, || {
        allocs(&agent, &child)
            .iter()
            .any(|a| a["ClientStatus"] == "complete")
    });
    let alloc_id = allocs(&agent, &child)[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let logs = agent.cli(&["alloc", "logs", &alloc_id, "t"]);
    assert!(logs.status.success(), "{}", output_text(&logs));
    assert_eq!(
        String::from_utf8_lossy(&logs.stdout).trim(),
        "hello-payload frame=42"
    );
    assert!(
        allocs(&agent, "render").is_empty(),
        "the parent runs nothing"
    );
    assert_eq!(agent.get("/v1/job/render").unwrap()["Status"], "running");

    // A token dispatches once: the same token again answers the same child, and no evaluation.
    let dispatch_with_token = |token: &str| {
        let out = agent.cli(&[
            "job",
            "dispatch",
            "-detach",
            "-meta",
            "frame=7",
            "-idempotency-token",
            token,
            "render",
            input.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", output_text(&out));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let first = dispatch_with_token("retry-1");
    let tokened = first
        .lines()
        .find_map(|l| l.strip_prefix("Dispatched Job ID = "))
        .unwrap_or_else(|| panic!("no dispatched job id in: {first}"))
        .trim()
        .to_string();
    assert!(first.contains("Evaluation ID     = "), "{first}");
    let again = dispatch_with_token("retry-1");
    assert_eq!(again, format!("Dispatched Job ID = {tokened}\n"));
    let other = dispatch_with_token("retry-2");
    assert!(!other.contains(&tokened), "{other}");
    let child_json: Value = agent.get(&format!("/v1/job/{tokened}")).unwrap();
    assert_eq!(child_json["DispatchIdempotencyToken"], "retry-1");
    let out = agent.cli(&["job", "status", "-short", &tokened]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\nIdempotency Token = retry-1\n"),
        "{}",
        output_text(&out)
    );
    let dispatched: Vec<String> = children(&agent, "render");
    assert_eq!(dispatched.len(), 3, "{dispatched:?}");

    // Nomad's view of a parameterized parent: its block, the children counted by status (all
    // three, however far each has got), and the dispatched children.
    let out = agent.cli(&["job", "status", "render"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        status.contains(
            "\nParameterized Job\nPayload           = required\nRequired Metadata = frame\nOptional Metadata = note\n"
        ),
        "{status}"
    );
    let counts = status
        .split("\nParameterized Job Summary\nPending  Running  Dead\n")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no children summary in:\n{status}"));
    let total: i64 = counts
        .split_whitespace()
        .map(|n| n.parse::<i64>().unwrap())
        .sum();
    assert_eq!(total, 3, "{counts}");
    let listed = status
        .split("\nDispatched Jobs\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no dispatched jobs in:\n{status}"));
    for id in &dispatched {
        assert!(listed.contains(id.as_str()), "{id} not in:\n{status}");
    }
    assert!(!status.contains("Next Periodic Launch"), "{status}");

    // Nomad's refusals, as the CLI prints them.
    let out = agent.cli(&[
        "job",
        "dispatch",
        "-detach",
        "render",
        input.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("Dispatch did not provide required meta keys: [frame]"),
        "{}",
        output_text(&out)
    );
    let out = agent.cli(&["job", "dispatch", "-detach", "-meta", "frame=1", "render"]);
    assert!(
        output_text(&out).contains("Payload is not provided but required by parameterized job"),
        "{}",
        output_text(&out)
    );
    let out = agent.cli(&[
        "job",
        "dispatch",
        "-detach",
        "-meta",
        "frame=1",
        "-meta",
        "color=red",
        "render",
        input.to_str().unwrap(),
    ]);
    assert!(
        output_text(&out).contains("Dispatch request included unpermitted metadata keys: [color]"),
        "{}",
        output_text(&out)
    );
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![b'x'; 16 * 1024 + 1]).unwrap();
    let out = agent.cli(&[
        "job",
        "dispatch",
        "-meta",
        "frame=1",
        "render",
        big.to_str().unwrap(),
    ]);
    assert!(
        output_text(&out).contains("Payload exceeds maximum size; 16385 > 16384"),
        "{}",
        output_text(&out)
    );
    let out = agent.cli(&["job", "dispatch", "nothing-here"]);
    assert!(
        output_text(&out)
            .contains("No parameterized job(s) with prefix or ID \"nothing-here\" found"),
        "{}",
        output_text(&out)
    );
}
