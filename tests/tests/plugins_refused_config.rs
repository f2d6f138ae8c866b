//! An agent that refuses to start over a plugin config: the error says why once, and no
//! sidecar it started is left running (nor its reattach file) without an agent.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_tests::{TempDir, drover_bin, find_process, workspace_root};

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
        .join(DRIVER)
}

#[test]
fn a_refused_sidecar_config_is_said_once_and_leaves_no_plugin_or_reattach_file() {
    let dir = TempDir::new("sidecar-refused");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("create plugin_dir");
    let plugin = plugins.join(DRIVER);
    std::fs::copy(build_sidecar(), &plugin).expect("copy the plugin");
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        format!("plugin \"{DRIVER}\" {{\n  config {{\n    max_txt = 3\n  }}\n}}\n"),
    )
    .expect("write the agent config");
    let data = dir.path().join("data");
    let mut child = Command::new(drover_bin())
        .arg("agent")
        .arg("--dev")
        .arg("--data-dir")
        .arg(&data)
        .args(["--http-port", &drover_tests::free_port().to_string()])
        .args(["--rpc-port", &drover_tests::free_port().to_string()])
        .arg("--plugin-dir")
        .arg(&plugins)
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the agent");
    let started = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the agent did not refuse to start within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("the agent's output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let plugin_argv = plugin.to_string_lossy().into_owned();
    let left_running = find_process(&[&plugin_argv]);
    if let Some(pid) = left_running {
        // SAFETY: ending the plugin process this test's agent started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(!out.status.success(), "{text}");
    let reason = "No argument or block type is named \"max_txt\"";
    assert_eq!(text.matches(reason).count(), 1, "{text}");
    assert!(
        text.contains(&format!("plugin \"{DRIVER}\" config")),
        "{text}"
    );
    assert_eq!(
        left_running, None,
        "the sidecar outlived the agent:\n{text}"
    );
    let reattach = data.join("plugins").join(format!("{DRIVER}.reattach.json"));
    assert!(!reattach.exists(), "{} is left", reattach.display());
}
