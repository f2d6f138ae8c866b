//! End-to-end scenarios of the foundation, as a new user would try them: a real `drover agent
//! --dev` process, the real CLI, real raw_exec/exec processes and the mock driver.

use drover_tests::{allocs, run_batch_script, write_job};
use std::time::Duration;

use drover_tests::{Agent, TempDir, output_text};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

fn count_status(allocs: &[Value], status: &str) -> usize {
    allocs
        .iter()
        .filter(|a| a["ClientStatus"] == status)
        .count()
}

#[test]
fn batch_raw_exec_job_completes_and_its_line_shows_in_alloc_logs() {
    let dir = TempDir::new("batch");
    let agent = Agent::start_dev(dir.path(), &[]);
    let out = run_batch_script(
        &agent,
        &dir,
        "echo",
        "raw_exec",
        "echo hello-from-${NOMAD_TASK_NAME} index=$NOMAD_ALLOC_INDEX",
    );
    assert_eq!(out.trim(), "hello-from-say index=0");
    assert_eq!(count_status(&allocs(&agent, "echo"), "complete"), 1);
    let job: Value = agent.get("/v1/job/echo").unwrap();
    assert_eq!(job["Status"], "dead");
}

#[test]
fn service_exec_job_runs_three_isolated_allocs_and_stops_them_all() {
    let dir = TempDir::new("exec");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(
        &dir,
        "sleep.nomad",
        r#"
job "sleep" {
  datacenters = ["dc1"]
  group "g" {
    count = 3
    task "sleep" {
      driver = "exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sleep"
        args = ["3600"]
      }
      resources {
        cpu = 20
        memory = 16
      }
    }
  }
}
"#,
    );
    let out = agent.cli(&["job", "run", &job]);
    assert!(
        out.status.success(),
        "job run failed: {}",
        output_text(&out)
    );
    agent.eventually("3 running allocs", WAIT, || {
        count_status(&allocs(&agent, "sleep"), "running") == 3
    });
    // Each sleep is PID 1 of its own PID namespace: find the sleeps and compare namespaces.
    let agent_ns = std::fs::read_link(format!("/proc/{}/ns/pid", agent.child.id())).unwrap();
    let mut task_namespaces = std::collections::BTreeSet::new();
    agent.eventually("3 sleep processes", WAIT, || {
        task_namespaces.clear();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let pid = entry.file_name().to_string_lossy().to_string();
            if !pid.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            if cmdline != b"/bin/sleep\x003600\x00" {
                continue;
            }
            // Only this agent's tasks: their parent is the agent.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().nth(1))
                .unwrap_or("");
            if ppid != agent.child.id().to_string() {
                continue;
            }
            if let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/pid")) {
                task_namespaces.insert(ns);
            }
        }
        task_namespaces.len() == 3
    });
    assert!(
        !task_namespaces.contains(&agent_ns),
        "tasks share the agent's PID namespace"
    );

    let out = agent.cli(&["job", "stop", "sleep"]);
    assert!(
        out.status.success(),
        "job stop failed: {}",
        output_text(&out)
    );
    agent.eventually("all allocs to stop", WAIT, || {
        let a = allocs(&agent, "sleep");
        a.len() == 3 && a.iter().all(|a| a["ClientStatus"] == "complete")
    });
    let job: Value = agent.get("/v1/job/sleep").unwrap();
    assert_eq!(job["Status"], "dead");
    let status = agent.cli(&["job", "status", "sleep"]);
    assert!(
        output_text(&status).contains("dead"),
        "{}",
        output_text(&status)
    );
}

#[test]
fn sigkill_and_restart_on_the_same_data_dir_keeps_jobs_versions_and_allocs() {
    let dir = TempDir::new("restart");
    let mut agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(
        &dir,
        "mock.nomad",
        r#"
job "keep" {
  datacenters = ["dc1"]
  group "g" {
    count = 2
    task "t" {
      driver = "mock_driver"
      config { run_for = "10m" }
      resources {
        cpu = 10
        memory = 10
      }
    }
  }
}
"#,
    );
    assert!(agent.cli(&["job", "run", "-detach", &job]).status.success());
    agent.eventually("2 running allocs", WAIT, || {
        count_status(&allocs(&agent, "keep"), "running") == 2
    });
    // A second version of the job.
    let v2 = std::fs::read_to_string(&job)
        .unwrap()
        .replace("count = 2", "count = 3");
    std::fs::write(&job, v2).unwrap();
    assert!(agent.cli(&["job", "run", "-detach", &job]).status.success());
    agent.eventually("3 running allocs", WAIT, || {
        count_status(&allocs(&agent, "keep"), "running") == 3
    });
    let before_job = agent.get("/v1/job/keep").unwrap();
    let before_allocs: Vec<String> = allocs(&agent, "keep")
        .iter()
        .map(|a| a["ID"].as_str().unwrap().to_string())
        .collect();
    let before_evals = agent.get("/v1/job/keep/evaluations").unwrap();
    assert_eq!(before_job["Version"], 1);

    agent.kill9();
    let agent = Agent::start_on_ports(dir.path(), agent.http_port, agent.rpc_port, &[]);
    let after_job = agent.get("/v1/job/keep").unwrap();
    assert_eq!(after_job["Version"], 1);
    assert_eq!(after_job["TaskGroups"][0]["Count"], 3);
    let versions = agent.get("/v1/job/keep/versions").unwrap();
    assert_eq!(
        versions["Versions"].as_array().map(Vec::len),
        Some(2),
        "{versions}"
    );
    let mut after_allocs: Vec<String> = allocs(&agent, "keep")
        .iter()
        .map(|a| a["ID"].as_str().unwrap().to_string())
        .collect();
    let mut expected = before_allocs.clone();
    expected.sort();
    after_allocs.sort();
    assert_eq!(after_allocs, expected);
    // Every evaluation is still there (the deployment watcher may have added some since: the
    // job's deployment goes on, and a new leader evaluates each active deployment once).
    let after_evals = agent.get("/v1/job/keep/evaluations").unwrap();
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["ID"].as_str().map(str::to_string))
            .collect()
    };
    let after_ids = ids(&after_evals);
    for id in ids(&before_evals) {
        assert!(
            after_ids.contains(&id),
            "evaluation {id} survives the restart"
        );
    }
}

#[test]
fn job_with_a_driver_no_node_has_fails_placement_and_status_says_why() {
    let dir = TempDir::new("nodriver");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(
        &dir,
        "nodriver.nomad",
        r#"
job "nodriver" {
  datacenters = ["dc1"]
  group "g" {
    task "t" {
      driver = "no-such-driver"
      config {}
    }
  }
}
"#,
    );
    let out = agent.cli(&["job", "run", &job]);
    let text = output_text(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "placement failure exits 2: {text}"
    );
    assert!(text.contains("missing drivers"), "{text}");
    let status = agent.cli(&["job", "status", "nodriver"]);
    let text = output_text(&status);
    assert!(text.contains("Placement Failure"), "{text}");
    assert!(
        text.contains("Constraint \"missing drivers\": 1 nodes excluded by filter"),
        "{text}"
    );
}

#[test]
fn bad_input_is_refused_with_the_place_named_and_nothing_registered() {
    let dir = TempDir::new("badinput");
    let agent = Agent::start_dev(dir.path(), &[]);

    let syntax = write_job(
        &dir,
        "syntax.nomad",
        "job \"x\" {\n  group \"g\" {\n    count = \n  }\n}\n",
    );
    let out = agent.cli(&["job", "run", &syntax]);
    assert_ne!(out.status.code(), Some(0));
    let text = output_text(&out);
    assert!(
        text.contains("syntax.nomad:"),
        "syntax error names the file: {text}"
    );

    let invalid = write_job(
        &dir,
        "invalid.nomad",
        r#"
job "invalid" {
  datacenters = ["dc1"]
  group "api" {
    count = -1
  }
}
"#,
    );
    let out = agent.cli(&["job", "run", &invalid]);
    assert_ne!(out.status.code(), Some(0));
    let text = output_text(&out);
    assert!(
        text.contains("Task group api validation failed: 2 errors occurred:"),
        "{text}"
    );
    assert!(
        text.contains("Task group count can't be negative"),
        "{text}"
    );
    assert!(text.contains("Missing tasks for task group"), "{text}");

    let (status, body) = agent.send(
        "PUT",
        "/v1/jobs",
        r#"{"Job": {"ID": "typed", "Datacenters": ["dc1"], "TaskGroups": [{"Name": "g", "Count": "three"}]}}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("TaskGroups[0].Count"), "{body}");
    let (status, body) = agent.send("PUT", "/v1/jobs", "{not json");
    assert_eq!(status, 400, "{body}");

    let jobs = agent.get("/v1/jobs").unwrap();
    assert_eq!(
        jobs.as_array().map(Vec::len),
        Some(0),
        "nothing registered: {jobs}"
    );
}

#[test]
fn a_hundred_mock_allocations_run() {
    let dir = TempDir::new("mock100");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = drover_tests::workspace_root().join("examples/jobs/mock-100.nomad");
    let out = agent.cli(&["job", "run", "-detach", job.to_str().unwrap()]);
    assert!(out.status.success(), "{}", output_text(&out));
    let deadline = std::time::Instant::now() + WAIT;
    while count_status(&allocs(&agent, "mock100"), "running") != 100 {
        if std::time::Instant::now() > deadline {
            // The job's status says why (a placement failure names the exhausted dimension).
            let status = agent.cli(&["job", "status", "mock100"]);
            panic!(
                "timed out waiting for 100 running mock allocs:\n{}\nagent log:\n{}",
                output_text(&status),
                agent.log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let summary = agent.get("/v1/job/mock100/summary").unwrap();
    assert_eq!(summary["Summary"]["g"]["Running"], 100);
}

#[test]
fn system_job_places_one_allocation_on_the_node() {
    let dir = TempDir::new("system");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(
        &dir,
        "system.nomad",
        r#"
job "everywhere" {
  datacenters = ["dc1"]
  type = "system"
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "10m" }
      resources {
        cpu = 10
        memory = 10
      }
    }
  }
}
"#,
    );
    let out = agent.cli(&["job", "run", &job]);
    assert!(
        out.status.success(),
        "job run failed: {}",
        output_text(&out)
    );
    agent.eventually("the system alloc to run", WAIT, || {
        count_status(&allocs(&agent, "everywhere"), "running") == 1
    });
    let job: Value = agent.get("/v1/job/everywhere").unwrap();
    assert_eq!(job["Status"], "running");
}
