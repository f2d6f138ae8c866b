//! A Nomad external driver plugin written in Go, on HashiCorp's own go-plugin library
//! (tests/go-plugin: built by its build.sh from Debian's Go packages, with the protocol's Go code
//! generated from abi/drover-plugin-proto/proto), placed in an agent's `plugin_dir`: it is
//! fingerprinted with its attribute once its `plugin "gofork"` block enables it (the config
//! reaches it msgpack-encoded, decoded with go-msgpack as Nomad's plugins do), its batch job's
//! line shows in `drover alloc logs` and its task event in the agent's log, and its service task survives the plugin crashing (the
//! restarted plugin recovers it from its handle) until `job stop` ends the task's process.
//!
//! The Go toolchain is required: without it these tests fail (.ci/run installs it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use drover_tests::{
    Agent, PluginReaper, TempDir, allocs, is_alive, output_text, run_batch_script, workspace_root,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
const DRIVER: &str = "gofork";

/// Builds the Go plugin into `<dir>/plugins/gofork` with tests/go-plugin/build.sh.
fn plugin_dir(dir: &TempDir) -> PathBuf {
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let script = workspace_root().join("tests/go-plugin/build.sh");
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .arg(plugins.join(DRIVER))
        .output()
        .expect("run tests/go-plugin/build.sh");
    assert!(
        out.status.success(),
        "building the Go plugin failed (the Go toolchain and Debian's golang-*-dev packages are \
         required; see .ci/run):\n{}",
        output_text(&out)
    );
    eprintln!("built the Go plugin in {:?}", started.elapsed());
    plugins
}

/// An agent config with the plugin dir and the `plugin "gofork"` block (`enabled` or not).
fn agent_config(dir: &TempDir, plugins: &Path, enabled: bool) -> PathBuf {
    let path = dir.path().join("agent.hcl");
    let text = format!(
        "plugin_dir = \"{}\"\n\nplugin \"{DRIVER}\" {{\n  config {{\n    enabled = {enabled}\n  }}\n}}\n",
        plugins.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn start_agent(dir: &TempDir, enabled: bool) -> Agent {
    let plugins = plugin_dir(dir);
    let config = agent_config(dir, &plugins, enabled);
    Agent::start_dev(dir.path(), &["--config", config.to_str().unwrap()])
}

fn is_plugin(pid: i32) -> bool {
    drover_tests::runs_program(pid, DRIVER)
}

/// The agent's node, as GET /v1/node/:id shows it.
fn node(agent: &Agent) -> Option<Value> {
    let id = agent.get("/v1/nodes").ok()?[0]["ID"].as_str()?.to_string();
    agent.get(&format!("/v1/node/{id}")).ok()
}

fn driver_healthy(node: &Value) -> bool {
    node["Drivers"][DRIVER]["Detected"] == true && node["Drivers"][DRIVER]["Healthy"] == true
}

#[test]
fn a_go_plugin_is_fingerprinted_and_its_batch_jobs_line_shows_in_alloc_logs() {
    let dir = TempDir::new("go-plugin-logs");
    let _reaper = PluginReaper {
        dir: dir.path().to_path_buf(),
        program: DRIVER,
    };
    let agent = start_agent(&dir, true);
    let mut seen = None;
    agent.eventually("the node to fingerprint the Go plugin", WAIT, || {
        seen = node(&agent).filter(driver_healthy);
        seen.is_some()
    });
    let seen = seen.expect("eventually returned only once the node was seen");
    assert_eq!(seen["Attributes"]["driver.gofork"], "1", "{seen}");
    assert_eq!(
        seen["Attributes"]["driver.gofork.version"], "0.1.0",
        "{seen}"
    );

    let out = run_batch_script(
        &agent,
        &dir,
        "hello",
        "gofork",
        "echo hello from the go plugin in $NOMAD_TASK_NAME",
    );
    assert_eq!(out.trim(), "hello from the go plugin in say");
    // The plugin's TaskEvents stream sends nothing (on grpc-go: no response headers either)
    // before its first event; the agent follows it all the same.
    agent.eventually("the plugin's task event in the agent log", WAIT, || {
        agent.log().contains("driver event: gofork started pid")
    });
}

#[test]
fn a_go_plugin_left_disabled_by_its_plugin_block_is_not_detected() {
    let dir = TempDir::new("go-plugin-disabled");
    let _reaper = PluginReaper {
        dir: dir.path().to_path_buf(),
        program: DRIVER,
    };
    let agent = start_agent(&dir, false);
    // The plugin answers its fingerprint "undetected, disabled" when `enabled` decoded false.
    let mut seen = None;
    agent.eventually("the node to list the Go plugin's driver", WAIT, || {
        seen = node(&agent).filter(|n| n["Drivers"][DRIVER].is_object());
        seen.is_some()
    });
    let seen = seen.expect("eventually returned only once the node was seen");
    assert_eq!(seen["Drivers"][DRIVER]["Detected"], false, "{seen}");
    assert!(
        seen["Attributes"]["driver.gofork"].is_null(),
        "a disabled driver got the node attribute: {seen}"
    );
}

/// The pid of the plugin process, from the reattach config the agent keeps in its data dir.
fn plugin_pid(dir: &TempDir) -> Option<i32> {
    let path = dir
        .path()
        .join("data/plugins")
        .join(format!("{DRIVER}.reattach.json"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["pid"].as_i64().and_then(|p| i32::try_from(p).ok())
}

#[test]
fn a_go_plugin_service_task_survives_a_plugin_crash_and_job_stop_ends_its_process() {
    let dir = TempDir::new("go-plugin-stop");
    let _reaper = PluginReaper {
        dir: dir.path().to_path_buf(),
        program: DRIVER,
    };
    let agent = start_agent(&dir, true);
    agent.eventually("the node to fingerprint the Go plugin", WAIT, || {
        node(&agent).is_some_and(|n| driver_healthy(&n))
    });
    // A sleep whose length names this test run, to find exactly its process.
    let seconds = (3_000_000 + std::process::id()).to_string();
    let pid = drover_tests::run_long_sleep(&agent, &dir, DRIVER, &seconds);

    // The plugin crashes: the agent starts it again and it recovers the task from the
    // msgpack driver state of the handle its StartTask returned.
    let plugin = plugin_pid(&dir).expect("the agent saved the plugin's reattach config");
    drover_tests::signal(plugin, libc::SIGKILL);
    agent.eventually("a restarted plugin", WAIT, || {
        plugin_pid(&dir).is_some_and(|p| p != plugin && is_plugin(p))
    });
    agent.eventually("the restarted plugin to recover the task", WAIT, || {
        agent.log().contains("recovered task")
    });
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
    agent.eventually("the task's process to end", WAIT, || !is_alive(pid));
    agent.eventually("the alloc to stop", WAIT, || {
        allocs(&agent, "long")
            .iter()
            .all(|a| a["ClientStatus"] == "complete")
    });
}
