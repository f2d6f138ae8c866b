//! In-process driver plugins end to end: the skeleton example built as a cdylib, placed in a dev
//! agent's `--plugin-dir`, runs a job whose line shows in `drover alloc logs`, and a running
//! skeleton task survives an agent restart still managed (`job stop` ends its process). The
//! task event the skeleton emits on start shows among the task's events (type "Driver").

use drover_tests::{allocs, assert_start_event_shown, find_process, is_alive};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use drover_tests::{Agent, TempDir, output_text, run_batch_script, workspace_root};

const WAIT: Duration = Duration::from_secs(60);

/// `cargo test` never builds a cdylib, so build the plugin here (a no-op when it is fresh).
fn build_skeleton() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "-p", "skeleton-driver"])
        .current_dir(workspace_root())
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p skeleton-driver failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("debug").join("libskeleton_driver.so")
}

fn plugin_dir(dir: &TempDir) -> PathBuf {
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(build_skeleton(), plugins.join("skeleton.so")).expect("copy the plugin");
    plugins
}

fn node_has_skeleton(agent: &Agent) -> bool {
    let Some(id) = agent
        .get("/v1/nodes")
        .ok()
        .and_then(|n| n[0]["ID"].as_str().map(str::to_string))
    else {
        return false;
    };
    agent
        .get(&format!("/v1/node/{id}"))
        .map(|n| n["Attributes"]["driver.skeleton"] == "1")
        .unwrap_or(false)
}

#[test]
fn skeleton_cdylib_job_runs_and_its_line_shows_in_alloc_logs() {
    let dir = TempDir::new("plugin-logs");
    let plugins = plugin_dir(&dir);
    let agent = Agent::start_dev(dir.path(), &["--plugin-dir", plugins.to_str().unwrap()]);
    agent.eventually("the node to fingerprint the skeleton driver", WAIT, || {
        node_has_skeleton(&agent)
    });
    let out = run_batch_script(
        &agent,
        &dir,
        "hello",
        "skeleton",
        "echo hello from the skeleton plugin in $NOMAD_TASK_NAME",
    );
    assert_eq!(out.trim(), "hello from the skeleton plugin in say");
}

#[test]
fn a_running_skeleton_task_survives_an_agent_restart_and_job_stop_ends_it() {
    let dir = TempDir::new("plugin-restart");
    let plugins = plugin_dir(&dir);
    let args = ["--plugin-dir", plugins.to_str().unwrap()];
    let mut agent = Agent::start_dev(dir.path(), &args);
    // A sleep whose length names this test run, to find exactly its process.
    let seconds = (1_000_000 + std::process::id()).to_string();
    let pid = drover_tests::run_long_sleep(&agent, &dir, "skeleton", &seconds);
    let argv = ["/usr/bin/sleep", seconds.as_str()];
    let alt = ["/bin/sleep", seconds.as_str()];
    let find = || find_process(&argv).or_else(|| find_process(&alt));
    let alloc_id = allocs(&agent, "long")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    assert_start_event_shown(&agent, &alloc_id, pid);

    agent.terminate();
    assert!(is_alive(pid), "the task died with the agent");
    let agent = Agent::start_on_ports(dir.path(), agent.http_port, agent.rpc_port, &args);
    agent.eventually("the node to fingerprint the skeleton driver", WAIT, || {
        node_has_skeleton(&agent)
    });
    // Give the client time to restore its allocs; the task must neither die nor be replaced.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        is_alive(pid),
        "the task died after the restart:\n{}",
        agent.log()
    );
    assert_eq!(find(), Some(pid), "a second copy of the task was started");
    let after = allocs(&agent, "long");
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0]["ID"], alloc_id.as_str());
    assert_eq!(after[0]["ClientStatus"], "running", "{:?}", after[0]);

    let out = agent.cli(&["job", "stop", "long"]);
    assert!(
        out.status.success(),
        "job stop failed: {}",
        output_text(&out)
    );
    agent.eventually("the recovered task's process to end", WAIT, || {
        !is_alive(pid)
    });
    agent.eventually("the alloc to stop", WAIT, || {
        allocs(&agent, "long")
            .iter()
            .all(|a| a["ClientStatus"] == "complete")
    });
}
