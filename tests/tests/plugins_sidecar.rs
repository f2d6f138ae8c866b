//! Out-of-process driver plugins end to end: the skeleton example built as its go-plugin sidecar
//! (examples/skeleton-sidecar), placed in a dev agent's `--plugin-dir`, runs a job whose line
//! shows in `drover alloc logs`; a running task survives an agent restart still managed (the
//! agent reattaches to the running plugin), and survives the plugin being killed (the agent
//! restarts it and it recovers the task); `job stop` then ends the task's process. The running
//! task's usage comes through the plugin's TaskStats to `/v1/client/allocation/:id/stats`, and
//! the task event it streams on start shows among the task's events (type "Driver").

use drover_tests::{allocs, assert_start_event_shown, find_process, is_alive};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use drover_tests::{Agent, PluginReaper, TempDir, output_text, run_batch_script, workspace_root};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
const DRIVER: &str = "skeleton-sidecar";

/// `cargo test` builds no binary of another package: build the sidecar (a no-op when fresh).
fn build_sidecar() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "-p", "skeleton-sidecar"])
        .current_dir(workspace_root())
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p skeleton-sidecar failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("debug")
        .join("skeleton-sidecar")
}

fn plugin_dir(dir: &TempDir) -> PathBuf {
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(build_sidecar(), plugins.join(DRIVER)).expect("copy the plugin");
    plugins
}

/// Where the agent keeps the plugin's reattach config (`<data_dir>/plugins`).
fn reattach_file(dir: &TempDir) -> PathBuf {
    dir.path()
        .join("data/plugins")
        .join(format!("{DRIVER}.reattach.json"))
}

/// The pid of the plugin process, from its reattach config.
fn plugin_pid(dir: &TempDir) -> Option<i32> {
    let text = std::fs::read_to_string(reattach_file(dir)).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["pid"].as_i64().and_then(|p| i32::try_from(p).ok())
}

fn node_has_driver(agent: &Agent) -> bool {
    let Some(id) = agent
        .get("/v1/nodes")
        .ok()
        .and_then(|n| n[0]["ID"].as_str().map(str::to_string))
    else {
        return false;
    };
    agent
        .get(&format!("/v1/node/{id}"))
        .map(|n| n["Attributes"][format!("driver.{DRIVER}")] == "1")
        .unwrap_or(false)
}

fn plugin_args(plugins: &Path) -> [&str; 2] {
    ["--plugin-dir", plugins.to_str().unwrap()]
}

#[test]
fn sidecar_job_runs_and_its_line_shows_in_alloc_logs() {
    let dir = TempDir::new("sidecar-logs");
    let plugins = plugin_dir(&dir);
    let _reaper = PluginReaper {
        dir: dir.path().to_path_buf(),
        program: DRIVER,
    };
    let agent = Agent::start_dev(dir.path(), &plugin_args(&plugins));
    agent.eventually("the node to fingerprint the sidecar driver", WAIT, || {
        node_has_driver(&agent)
    });
    let out = run_batch_script(
        &agent,
        &dir,
        "hello",
        "skeleton-sidecar",
        "echo hello from the sidecar plugin in $NOMAD_TASK_NAME",
    );
    assert_eq!(out.trim(), "hello from the sidecar plugin in say");
}

#[test]
fn a_sidecar_task_survives_an_agent_restart_and_a_plugin_crash_and_job_stop_ends_it() {
    let dir = TempDir::new("sidecar-restart");
    let plugins = plugin_dir(&dir);
    let args = plugin_args(&plugins);
    let _reaper = PluginReaper {
        dir: dir.path().to_path_buf(),
        program: DRIVER,
    };
    let mut agent = Agent::start_dev(dir.path(), &args);
    // A sleep whose length names this test run, to find exactly its process.
    let seconds = (2_000_000 + std::process::id()).to_string();
    let pid = drover_tests::run_long_sleep(&agent, &dir, "skeleton-sidecar", &seconds);
    let argv = ["/usr/bin/sleep", seconds.as_str()];
    let alt = ["/bin/sleep", seconds.as_str()];
    let find = || find_process(&argv).or_else(|| find_process(&alt));
    let plugin = plugin_pid(&dir).expect("the agent saved the plugin's reattach config");
    let alloc_id = allocs(&agent, "long")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let usage = agent
        .get(&format!("/v1/client/allocation/{alloc_id}/stats"))
        .expect("the allocation's stats");
    assert!(
        usage["Tasks"]["sleep"]["ResourceUsage"]["MemoryStats"]["RSS"]
            .as_u64()
            .is_some_and(|rss| rss > 0),
        "the sleep's memory, through the plugin's TaskStats: {usage}"
    );
    assert_start_event_shown(&agent, &alloc_id, pid);

    // The agent restarts: the plugin and its task keep running, and the new agent reattaches.
    agent.terminate();
    assert!(
        is_alive(pid),
        "the task died with the agent:\n{}",
        agent.log()
    );
    assert!(
        is_alive(plugin),
        "the plugin died with the agent:\n{}",
        agent.log()
    );
    let agent = Agent::start_on_ports(dir.path(), agent.http_port, agent.rpc_port, &args);
    agent.eventually("the node to fingerprint the sidecar driver", WAIT, || {
        node_has_driver(&agent)
    });
    // Give the client time to restore its allocs; the task must neither die nor be replaced.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        is_alive(pid),
        "the task died after the restart:\n{}",
        agent.log()
    );
    assert_eq!(find(), Some(pid), "a second copy of the task was started");
    assert_eq!(
        plugin_pid(&dir),
        Some(plugin),
        "the agent started a new plugin instead of reattaching:\n{}",
        agent.log()
    );
    let after = allocs(&agent, "long");
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0]["ID"], alloc_id.as_str());
    assert_eq!(after[0]["ClientStatus"], "running", "{:?}", after[0]);

    // The plugin crashes: the agent starts it again, and the new process recovers the task.
    drover_tests::signal(plugin, libc::SIGKILL);
    let mut restarted = None;
    agent.eventually("a restarted plugin", WAIT, || {
        restarted = plugin_pid(&dir).filter(|p| *p != plugin && is_alive(*p));
        restarted.is_some()
    });
    std::thread::sleep(Duration::from_secs(1));
    assert!(is_alive(pid), "the task died with the plugin");
    assert_eq!(
        allocs(&agent, "long")[0]["ClientStatus"],
        "running",
        "{}",
        agent.log()
    );

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
