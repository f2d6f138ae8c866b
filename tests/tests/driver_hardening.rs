//! End-to-end: the built-in drivers' safety defaults, as a Nomad user meets them. raw_exec is off
//! unless the agent config (or `-dev`) turns it on, and a job that needs it on a node where it is
//! off fails placement on "missing drivers" while the node shows raw_exec as disabled; an exec
//! task runs as nobody in its own root, without CAP_NET_RAW, seeing none of the host's processes.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use drover_tests::{
    Agent, TempDir, allocs, drover_bin, free_port, output_text, run_batch_script, write_job,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

const RAW_EXEC_JOB: &str = r#"
job "raw" {
  datacenters = ["dc1"]
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      resources {
        cpu = 20
        memory = 16
      }
    }
  }
}
"#;

/// A server+client agent started without `--dev`, as a production node would be.
fn start_non_dev_agent(dir: &Path) -> Agent {
    let (http_port, rpc_port) = (free_port(), free_port());
    let log_path = dir.join("agent.log");
    let log = std::fs::File::create(&log_path).expect("create agent log");
    let child = Command::new(drover_bin())
        .args(["agent", "--server", "--client", "--bind", "127.0.0.1"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--http-port", &http_port.to_string()])
        .args(["--rpc-port", &rpc_port.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone log fd"))
        .stderr(log)
        .spawn()
        .expect("spawn drover agent");
    let agent = Agent {
        child,
        host: "127.0.0.1".into(),
        http_port,
        rpc_port,
        data_dir: dir.to_path_buf(),
        log_path,
    };
    agent.wait_ready(WAIT);
    agent
}

fn node_id(agent: &Agent) -> String {
    let nodes = agent.get("/v1/nodes").expect("list nodes");
    nodes[0]["ID"].as_str().expect("node id").to_string()
}

/// Runs the raw_exec job on `agent` and checks everything a user sees of the refusal.
fn assert_raw_exec_job_is_refused_as_missing_driver(agent: &Agent, dir: &TempDir) {
    // The node reports raw_exec as Nomad's fingerprint does when it is disabled.
    let node = agent
        .get(&format!("/v1/node/{}", node_id(agent)))
        .expect("read node");
    let raw_exec = &node["Drivers"]["raw_exec"];
    assert_eq!(raw_exec["Detected"], false, "{raw_exec}");
    assert_eq!(raw_exec["Healthy"], false, "{raw_exec}");
    assert_eq!(raw_exec["HealthDescription"], "disabled", "{raw_exec}");
    assert_eq!(node["Attributes"].get("driver.raw_exec"), None);
    let status = agent.cli(&["node", "status", "-verbose", &node_id(agent)]);
    let status_text = output_text(&status);
    let driver_line = status_text
        .lines()
        .find(|l| l.starts_with("raw_exec"))
        .unwrap_or_else(|| panic!("no raw_exec line in node status:\n{status_text}"));
    assert_eq!(
        driver_line.split_whitespace().take(4).collect::<Vec<_>>(),
        ["raw_exec", "false", "false", "disabled"],
        "{status_text}"
    );

    let job = write_job(dir, "raw.nomad", RAW_EXEC_JOB);
    let run = agent.cli(&["job", "run", &job]);
    let run_text = output_text(&run);
    // Nomad's `job run` exits 2 when the evaluation could not place everything.
    assert_eq!(run.status.code(), Some(2), "{run_text}");
    assert!(
        run_text.contains(r#"Constraint "missing drivers": 1 nodes excluded by filter"#),
        "{run_text}"
    );
    let status = agent.cli(&["job", "status", "raw"]);
    let text = output_text(&status);
    assert!(text.contains("Placement Failure"), "{text}");
    assert!(
        text.contains(r#"Constraint "missing drivers": 1 nodes excluded by filter"#),
        "{text}"
    );
    assert!(allocs(agent, "raw").is_empty());
    // The evaluation's metrics say the same, under Nomad's names.
    let evals = agent.get("/v1/job/raw/evaluations").expect("evaluations");
    let failed = evals
        .as_array()
        .expect("evaluation list")
        .iter()
        .find_map(|e| e["FailedTGAllocs"].get("g").cloned())
        .expect("an evaluation with a failed group");
    assert_eq!(
        failed["ConstraintFiltered"]["missing drivers"], 1,
        "{failed}"
    );
    assert_eq!(failed["NodesFiltered"], 1, "{failed}");
}

#[test]
fn a_non_dev_agent_leaves_raw_exec_disabled_and_refuses_its_jobs() {
    let dir = TempDir::new("rawexec-off");
    let agent = start_non_dev_agent(dir.path());
    assert_raw_exec_job_is_refused_as_missing_driver(&agent, &dir);
}

#[test]
fn a_dev_agent_whose_config_disables_raw_exec_refuses_its_jobs() {
    let dir = TempDir::new("rawexec-dev-off");
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        "plugin \"raw_exec\" {\n  config {\n    enabled = false\n  }\n}\n",
    )
    .expect("write agent config");
    let agent = Agent::start_dev(dir.path(), &["--config", config.to_str().expect("utf-8")]);
    assert_raw_exec_job_is_refused_as_missing_driver(&agent, &dir);
    // While exec, on the same node, is there.
    let node = agent.get(&format!("/v1/node/{}", node_id(&agent))).unwrap();
    assert_eq!(node["Drivers"]["exec"]["Healthy"], true);
}

#[test]
fn an_exec_task_runs_as_nobody_in_its_own_root_without_net_raw() {
    let dir = TempDir::new("exec-hardened");
    let agent = Agent::start_dev(dir.path(), &[]);
    let text = run_batch_script(
        &agent,
        &dir,
        "iso",
        "exec",
        "echo root: $(ls -A /); echo uid: $(id -u); grep -E '^Cap(Eff|Bnd):' /proc/self/status; echo dirs: $NOMAD_ALLOC_DIR $NOMAD_TASK_DIR $NOMAD_SECRETS_DIR; echo pids: /proc/[0-9]*; echo arg: ${NOMAD_TASK_DIR}/data",
    );
    let line = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key:?} line in:\n{text}"))
            .trim()
            .to_string()
    };
    // The task dirs and the host directories of the default chroot_env, nothing else.
    let root_line = line("root:");
    let root: Vec<&str> = root_line.split_whitespace().collect();
    for wanted in [
        "alloc", "local", "secrets", "tmp", "usr", "etc", "bin", "proc", "dev",
    ] {
        assert!(root.contains(&wanted), "/{wanted} missing from {root:?}");
    }
    for host_only in ["root", "home", "var", "work", "opt"] {
        assert!(!root.contains(&host_only), "/{host_only} leaked: {root:?}");
    }
    assert_eq!(line("uid:"), "65534");
    for set in ["CapEff:", "CapBnd:"] {
        let mask = u64::from_str_radix(&line(set), 16).expect("hex capability mask");
        assert_eq!(mask & (1 << 13), 0, "CAP_NET_RAW in {set} {mask:x}");
        assert_eq!(mask, 0xa804_05fb, "{set}");
    }
    assert_eq!(line("dirs:"), "/alloc /local /secrets");
    // Only the shell itself: no host process is visible.
    assert_eq!(line("pids:"), "/proc/1");
    assert_eq!(line("arg:"), "/local/data");

    let node: Value = agent.get(&format!("/v1/node/{}", node_id(&agent))).unwrap();
    assert_eq!(node["Drivers"]["exec"]["Healthy"], true);
}
