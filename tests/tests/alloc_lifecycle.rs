//! `drover alloc signal` and `drover alloc restart` against a real dev agent and a raw_exec
//! task that traps SIGUSR1.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

const JOB: &str = r#"
job "trapper" {
  datacenters = ["dc1"]
  group "g" {
    task "trap" {
      driver = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sh"
        args = ["-c", "trap 'echo got-usr1' USR1; echo ready; while true; do sleep 1; done"]
      }
      resources {
        cpu = 20
        memory = 32
      }
    }
  }
}
"#;

/// The task's stdout as `drover alloc logs` prints it.
fn logs(agent: &Agent, alloc_id: &str) -> String {
    let out = agent.cli(&["alloc", "logs", alloc_id, "trap"]);
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn task_state(agent: &Agent, alloc_id: &str) -> Value {
    agent
        .get(&format!("/v1/allocation/{alloc_id}"))
        .map(|a| a["TaskStates"]["trap"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn alloc_signal_reaches_the_task_and_alloc_restart_brings_it_back_with_one_restart() {
    let dir = TempDir::new("alloc-lifecycle");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(&dir, "trapper.nomad", JOB);
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    agent.eventually("the alloc to run", WAIT, || {
        allocs(&agent, "trapper")
            .iter()
            .any(|a| a["ClientStatus"] == "running")
    });
    let alloc_id = allocs(&agent, "trapper")[0]["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    let prefix = &alloc_id[..8];
    // The trap is set before "ready" is printed.
    agent.eventually("the task to set its trap", WAIT, || {
        logs(&agent, &alloc_id).contains("ready")
    });

    let out = agent.cli(&["alloc", "signal", "-s", "SIGUSR1", prefix]);
    assert!(out.status.success(), "alloc signal: {}", output_text(&out));
    agent.eventually("the trap's line in the logs", WAIT, || {
        logs(&agent, &alloc_id).contains("got-usr1")
    });
    let state = task_state(&agent, &alloc_id);
    let signaling = state["Events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["Type"] == "Signaling"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        signaling["DisplayMessage"], "Task being sent a signal",
        "{state:#}"
    );

    // Refusals exit non-zero with the reason.
    let out = agent.cli(&["alloc", "signal", "-s", "SIGUSR1", prefix, "nope"]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("Could not find task named: nope, found:\ntrap"),
        "{}",
        output_text(&out)
    );
    let out = agent.cli(&["alloc", "signal", "-s", "SIGFOO", prefix]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains(
            "Error signalling allocation: Unexpected response code: 400 (unknown signal \"SIGFOO\")"
        ),
        "{}",
        output_text(&out)
    );

    let out = agent.cli(&["alloc", "restart", "-task", "trap", prefix]);
    assert!(out.status.success(), "alloc restart: {}", output_text(&out));
    agent.eventually("the task to run again after one restart", WAIT, || {
        let state = task_state(&agent, &alloc_id);
        state["State"] == "running" && state["Restarts"] == 1
    });
    let status = agent.cli(&["alloc", "status", prefix]);
    let text = output_text(&status);
    assert!(status.status.success(), "{text}");
    assert!(text.contains("Total Restarts = 1"), "{text}");
    assert!(
        text.contains("Restart Signaled") && text.contains("User requested task to restart"),
        "{text}"
    );
    assert!(text.contains("Task restarting in 0s"), "{text}");

    // The new instance traps the signal too.
    agent.eventually("the new instance to set its trap", WAIT, || {
        logs(&agent, &alloc_id).matches("ready").count() == 2
    });
    let out = agent.cli(&["alloc", "signal", "-s", "USR1", prefix, "trap"]);
    assert!(out.status.success(), "alloc signal: {}", output_text(&out));
    agent.eventually("the second trap line", WAIT, || {
        logs(&agent, &alloc_id).matches("got-usr1").count() == 2
    });

    let out = agent.cli(&["job", "stop", "-detach", "trapper"]);
    assert!(out.status.success(), "job stop: {}", output_text(&out));
}
