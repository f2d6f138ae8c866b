//! The scheduler configuration end to end: the operator CLI changes it through a real agent,
//! and the API reports it in Nomad's shape.

use drover_tests::{Agent, TempDir, output_text};
use serde_json::Value;

fn scheduler_config(agent: &Agent) -> Value {
    agent
        .get("/v1/operator/scheduler/configuration")
        .expect("scheduler configuration")
}

#[test]
fn set_config_switches_to_spread_and_get_config_reads_it_back() {
    let dir = TempDir::new("sched-config");
    let agent = Agent::start_dev(dir.path(), &[]);

    let out = agent.cli(&["operator", "scheduler", "get-config"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Scheduler Algorithm           = binpack"),
        "{text}"
    );
    assert!(
        text.contains("Preemption System Scheduler   = true"),
        "{text}"
    );

    let out = agent.cli(&[
        "operator",
        "scheduler",
        "set-config",
        "-scheduler-algorithm=spread",
        "-preempt-service-scheduler=true",
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Scheduler configuration updated!"
    );

    let out = agent.cli(&["operator", "scheduler", "get-config"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Scheduler Algorithm           = spread"),
        "{text}"
    );
    assert!(
        text.contains("Preemption Service Scheduler  = true"),
        "{text}"
    );
    assert!(
        text.contains("Preemption System Scheduler   = true"),
        "{text}"
    );

    let body = scheduler_config(&agent);
    let config = &body["SchedulerConfig"];
    assert_eq!(config["SchedulerAlgorithm"], "spread");
    assert_eq!(config["PreemptionConfig"]["ServiceSchedulerEnabled"], true);
    assert!(config["ModifyIndex"].as_u64().unwrap() > 0);
    assert_eq!(body["Index"], config["ModifyIndex"]);
    assert_eq!(body["KnownLeader"], true);

    // A check-index that is not the current one is refused before anything is sent.
    let out = agent.cli(&[
        "operator",
        "scheduler",
        "set-config",
        "-check-index=1",
        "-scheduler-algorithm=binpack",
    ]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("Error performing check index set"),
        "{}",
        output_text(&out)
    );
    let out = agent.cli(&[
        "operator",
        "scheduler",
        "set-config",
        "-scheduler-algorithm=roundrobin",
    ]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("invalid scheduler algorithm: roundrobin"),
        "{}",
        output_text(&out)
    );
    assert_eq!(
        scheduler_config(&agent)["SchedulerConfig"]["SchedulerAlgorithm"],
        "spread"
    );
}

#[test]
fn an_empty_algorithm_is_reported_as_binpack() {
    let dir = TempDir::new("sched-config-empty");
    let agent = Agent::start_dev(dir.path(), &[]);
    let (status, body) = agent.send(
        "PUT",
        "/v1/operator/scheduler/configuration",
        r#"{"SchedulerAlgorithm": "spread"}"#,
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = agent.send(
        "PUT",
        "/v1/operator/scheduler/configuration",
        r#"{"SchedulerAlgorithm": "", "PreemptionConfig": {"BatchSchedulerEnabled": true}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let set: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(set["Updated"], true);

    let config = &scheduler_config(&agent)["SchedulerConfig"];
    assert_eq!(config["SchedulerAlgorithm"], "binpack");
    assert_eq!(config["PreemptionConfig"]["BatchSchedulerEnabled"], true);
    let out = agent.cli(&["operator", "scheduler", "get-config"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Scheduler Algorithm           = binpack"),
        "{}",
        output_text(&out)
    );
}
