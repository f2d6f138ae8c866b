//! End-to-end: the environment a raw_exec task gets, as Nomad gives it. The task inherits the
//! agent's own environment (PATH included) minus the client's env denylist, under Nomad's
//! variables and the task's `env` block; `client.options["env.denylist"]` replaces the default
//! list. What the task printed is read back through `drover alloc logs`.

use std::collections::BTreeMap;
use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};

const WAIT: Duration = Duration::from_secs(60);

/// A batch job `name` whose raw_exec task "env" overrides one agent variable in its `env`
/// block and prints its whole environment.
fn print_env_job(name: &str) -> String {
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "batch"
  group "g" {{
    task "env" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", "env"]
      }}
      env {{
        DROVER_TEST_OVERRIDDEN = "from-the-task"
        DROVER_TEST_EXTENDED = "/opt/task/bin:${{env["PATH"]}}"
      }}
      resources {{
        cpu = 20
        memory = 32
      }}
    }}
  }}
}}
"#
    )
}

/// Runs `print_env_job(name)` on `agent` and returns the task's environment as it printed it.
fn task_env(agent: &Agent, dir: &TempDir, name: &str) -> BTreeMap<String, String> {
    let job = write_job(dir, &format!("{name}.nomad"), &print_env_job(name));
    let out = agent.cli(&["job", "run", &job]);
    assert!(
        out.status.success(),
        "job run failed: {}\n{}",
        output_text(&out),
        agent.log()
    );
    agent.eventually("the batch alloc to complete", WAIT, || {
        allocs(agent, name)
            .iter()
            .any(|a| a["ClientStatus"] == "complete")
    });
    let alloc = &allocs(agent, name)[0];
    let alloc_id = alloc["ID"].as_str().expect("the alloc has an ID");
    let logs = agent.cli(&["alloc", "logs", alloc_id, "env"]);
    assert!(
        logs.status.success(),
        "alloc logs failed: {}",
        output_text(&logs)
    );
    String::from_utf8_lossy(&logs.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The agent's PATH: the test's own, behind a directory only this test names.
fn agent_path() -> String {
    let inherited = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    format!("/opt/drover-e2e/bin:{inherited}")
}

#[test]
fn raw_exec_tasks_get_the_agents_path_but_not_the_default_denylists_variables() {
    let dir = TempDir::new("taskenv-default");
    let path = agent_path();
    let agent = Agent::start_dev_with_env(
        dir.path(),
        &[],
        &[
            ("PATH", &path),
            ("VAULT_TOKEN", "s.agent-only"),
            ("AWS_SECRET_ACCESS_KEY", "agent-only"),
            ("DROVER_TEST_INHERITED", "from-the-agent"),
            ("DROVER_TEST_OVERRIDDEN", "from-the-agent"),
            ("NOMAD_TASK_NAME", "from-the-agent"),
        ],
    );
    let env = task_env(&agent, &dir, "printenv");
    assert_eq!(env.get("PATH"), Some(&path), "task env: {env:#?}");
    assert!(!env.contains_key("VAULT_TOKEN"), "task env: {env:#?}");
    assert!(
        !env.contains_key("AWS_SECRET_ACCESS_KEY"),
        "task env: {env:#?}"
    );
    assert_eq!(env["DROVER_TEST_INHERITED"], "from-the-agent");
    // Nomad's variables and the task's env block win over the agent's.
    assert_eq!(env["NOMAD_TASK_NAME"], "env");
    assert_eq!(env["DROVER_TEST_OVERRIDDEN"], "from-the-task");
    assert_eq!(env["DROVER_TEST_EXTENDED"], format!("/opt/task/bin:{path}"));
}

#[test]
fn a_configured_env_denylist_replaces_the_default_one() {
    let dir = TempDir::new("taskenv-denylist");
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        "client {\n  options {\n    \"env.denylist\" = \"DROVER_TEST_SECRET\"\n  }\n}\n",
    )
    .expect("write agent config");
    let path = agent_path();
    let agent = Agent::start_dev_with_env(
        dir.path(),
        &["--config", config.to_str().expect("the temp dir is UTF-8")],
        &[
            ("PATH", &path),
            ("DROVER_TEST_SECRET", "agent-only"),
            ("VAULT_TOKEN", "s.no-longer-denied"),
        ],
    );
    let env = task_env(&agent, &dir, "printenv");
    assert_eq!(env.get("PATH"), Some(&path), "task env: {env:#?}");
    assert!(
        !env.contains_key("DROVER_TEST_SECRET"),
        "task env: {env:#?}"
    );
    assert_eq!(
        env.get("VAULT_TOKEN").map(String::as_str),
        Some("s.no-longer-denied")
    );
    // The option it acts on is not reported as ignored.
    assert!(
        !agent.log().contains("env.denylist"),
        "agent log:\n{}",
        agent.log()
    );
}
