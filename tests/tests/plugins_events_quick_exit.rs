//! The same task events from both ways of shipping a driver: the event the skeleton emits in
//! `start_task` is recorded also for a task that exits at once, for the cdylib (`skeleton`) as
//! for the sidecar (`skeleton-sidecar`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, driver_event, run_batch_script, workspace_root};

const WAIT: Duration = Duration::from_secs(60);

/// Builds `package` (`cargo test` builds no cdylib, nor other packages' binaries) and returns
/// `file` in the target dir.
fn build(package: &str, file: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "-p", package])
        .current_dir(workspace_root())
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p {package} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("debug")
        .join(file)
}

fn node_has(agent: &Agent, driver: &str) -> bool {
    agent
        .get("/v1/nodes")
        .ok()
        .and_then(|n| n[0]["ID"].as_str().map(str::to_string))
        .and_then(|id| agent.get(&format!("/v1/node/{id}")).ok())
        .is_some_and(|n| n["Attributes"][format!("driver.{driver}")] == "1")
}

#[test]
fn a_start_event_of_a_task_that_exits_at_once_is_recorded_for_cdylib_and_sidecar() {
    let dir = TempDir::new("plugin-quick-events");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("create plugin_dir");
    std::fs::copy(
        build("skeleton-driver", "libskeleton_driver.so"),
        plugins.join("skeleton.so"),
    )
    .expect("copy the cdylib");
    std::fs::copy(
        build("skeleton-sidecar", "skeleton-sidecar"),
        plugins.join("skeleton-sidecar"),
    )
    .expect("copy the sidecar");
    let _reaper = drover_tests::PluginReaper {
        dir: dir.path().to_path_buf(),
        program: "skeleton-sidecar",
    };
    let agent = Agent::start_dev(dir.path(), &["--plugin-dir", plugins.to_str().unwrap()]);
    agent.eventually("both skeleton drivers", WAIT, || {
        node_has(&agent, "skeleton") && node_has(&agent, "skeleton-sidecar")
    });
    for (job, driver) in [
        ("quick-cdylib", "skeleton"),
        ("quick-sidecar", "skeleton-sidecar"),
    ] {
        let out = run_batch_script(&agent, &dir, job, driver, "echo done");
        assert_eq!(out.trim(), "done", "{driver}");
        let alloc = allocs(&agent, job)
            .first()
            .and_then(|a| a["ID"].as_str().map(str::to_string))
            .expect("the job's allocation");
        let event = driver_event(&agent, &alloc, "say");
        let message = event
            .as_ref()
            .and_then(|e| e["DriverMessage"].as_str())
            .unwrap_or_default();
        assert!(
            message.starts_with("started as host process"),
            "{driver}: no start event among the task's events: {:?}",
            agent
                .get(&format!("/v1/allocation/{alloc}"))
                .ok()
                .map(|a| a["TaskStates"].clone())
        );
    }
}
