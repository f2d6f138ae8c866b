//! Task lifecycle on a dev agent with raw_exec: a prestart task writes a file the main task
//! reads, a prestart sidecar runs alongside the main task and is stopped after it, and a
//! poststop task runs after the main task; the task states' times prove the order.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);

const JOB: &str = r#"
job "lifecycle" {
  datacenters = ["*"]
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode = "fail"
    }
    task "init" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args = ["-c", "echo from-init > ${NOMAD_ALLOC_DIR}/data/greeting"]
      }
      resources {
        cpu = 20
        memory = 16
      }
    }
    task "proxy" {
      driver = "raw_exec"
      kill_timeout = "2s"
      lifecycle {
        hook = "prestart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args = ["-c", "touch ${NOMAD_ALLOC_DIR}/data/proxy-up; exec sleep 600"]
      }
      resources {
        cpu = 20
        memory = 16
      }
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", "cat ${NOMAD_ALLOC_DIR}/data/greeting && test -e ${NOMAD_ALLOC_DIR}/data/proxy-up && echo proxy-was-up && sleep 1"]
      }
      resources {
        cpu = 20
        memory = 16
      }
    }
    task "cleanup" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/sh"
        args = ["-c", "echo cleaned"]
      }
      resources {
        cpu = 20
        memory = 16
      }
    }
  }
}
"#;

/// RFC 3339 with nanoseconds, as the API prints it, compares in time order as text when all
/// are in UTC with the same width; compare the parsed seconds to be safe.
fn time_of(state: &Value, field: &str) -> f64 {
    let text = state[field].as_str().unwrap_or_default();
    parse_rfc3339(text).unwrap_or_else(|| panic!("{field} of {state}"))
}

fn parse_rfc3339(t: &str) -> Option<f64> {
    // YYYY-MM-DDTHH:MM:SS(.fraction)Z only (the client writes UTC).
    let (date, time) = t.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut parts = time.split(':');
    let (h, min) = (
        parts.next()?.parse::<f64>().ok()?,
        parts.next()?.parse::<f64>().ok()?,
    );
    let s = parts.next()?.parse::<f64>().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + h * 3600.0 + min * 60.0 + s)
}

fn logs(agent: &Agent, alloc: &str, task: &str) -> String {
    let out = agent.cli(&["alloc", "logs", alloc, task]);
    assert!(out.status.success(), "{}", output_text(&out));
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn prestart_sidecar_main_and_poststop_run_in_order_on_a_dev_agent() {
    let dir = TempDir::new("lifecycle");
    let agent = Agent::start_dev(dir.path(), &[]);
    let file = write_job(&dir, "lifecycle.nomad", JOB);
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the allocation to finish", WAIT, || {
        allocs(&agent, "lifecycle")
            .iter()
            .any(|a| a["ClientStatus"] == "complete" || a["ClientStatus"] == "failed")
    });
    let alloc = &allocs(&agent, "lifecycle")[0];
    let id = alloc["ID"].as_str().expect("alloc id").to_string();
    let full = agent.get(&format!("/v1/allocation/{id}")).unwrap();
    assert_eq!(
        full["ClientStatus"],
        "complete",
        "{full:#}\n{}",
        agent.log()
    );
    let states = &full["TaskStates"];

    assert_eq!(logs(&agent, &id, "main"), "from-init\nproxy-was-up\n");
    assert_eq!(logs(&agent, &id, "cleanup"), "cleaned\n");

    let (init, proxy, main, cleanup) = (
        &states["init"],
        &states["proxy"],
        &states["main"],
        &states["cleanup"],
    );
    assert!(time_of(init, "FinishedAt") <= time_of(main, "StartedAt"));
    assert!(time_of(proxy, "StartedAt") <= time_of(main, "StartedAt"));
    assert!(time_of(main, "FinishedAt") <= time_of(proxy, "FinishedAt"));
    assert!(time_of(proxy, "FinishedAt") <= time_of(cleanup, "StartedAt"));
    let proxy_events: Vec<&str> = proxy["Events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["Type"].as_str())
        .collect();
    assert!(
        proxy_events.contains(&"Main Tasks Dead") && proxy_events.contains(&"Killed"),
        "{proxy_events:?}"
    );
    for s in [init, proxy, main, cleanup] {
        assert_eq!(s["State"], "dead");
        assert_eq!(s["Failed"], false, "{s:#}");
    }
}

#[test]
fn a_failing_prestart_task_fails_the_allocation_before_main_runs() {
    let dir = TempDir::new("lifecycle-fail");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = JOB
        .replace("job \"lifecycle\"", "job \"lifecycle-fail\"")
        .replace(
            "echo from-init > ${NOMAD_ALLOC_DIR}/data/greeting",
            "echo no-way >&2; exit 7",
        );
    let file = write_job(&dir, "fail.nomad", &job);
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the allocation to fail", WAIT, || {
        allocs(&agent, "lifecycle-fail")
            .iter()
            .any(|a| a["ClientStatus"] == "failed")
    });
    let id = allocs(&agent, "lifecycle-fail")[0]["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    agent.eventually("every task to be dead", WAIT, || {
        agent
            .get(&format!("/v1/allocation/{id}"))
            .ok()
            .and_then(|a| a["TaskStates"].as_object().cloned())
            .is_some_and(|s| s.values().all(|t| t["State"] == "dead"))
    });
    let full = agent.get(&format!("/v1/allocation/{id}")).unwrap();
    let main = &full["TaskStates"]["main"];
    assert!(main["StartedAt"].is_null(), "main never started: {main:#}");
    let said: Vec<&str> = main["Events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["DisplayMessage"].as_str())
        .collect();
    assert!(said.contains(&"Task's sibling \"init\" failed"), "{said:?}");
    assert_eq!(full["TaskStates"]["init"]["Failed"], true);
}
