//! The kit against the driver itself. `shell` is not configured with `command` and `args`, so
//! its `TaskConfigs` say which `script` does what each check needs.

use std::sync::Arc;

use drover_driver_testkit::{Kit, TaskConfigs};
use serde_json::json;

/// The task configs of the `shell` driver: `{ "script": ... }`.
pub fn shell_configs() -> TaskConfigs {
    let script = |s: &str| json!({ "script": s });
    TaskConfigs {
        print_line: Box::new(move |line| script(&format!("echo '{}'", line.replace('\'', "")))),
        exit_with: Box::new(move |code| script(&format!("exit {code}"))),
        run_until_stopped: script("exec sleep 1000"),
        ignore_sigterm: script("trap '' TERM; echo ready; while :; do sleep 0.1; done"),
        bad_config: (json!({ "scriptz": "true" }), "scriptz".into()),
        bad_plugin_config: Some((json!({ "colour": "red" }), "colour".into())),
        exec: (Vec::new(), String::new()),
    }
}

#[test]
fn the_shell_driver_passes_the_conformance_kit() {
    Kit::new(
        "shell",
        || Arc::new(minimal_driver::ShellDriver::default()),
        shell_configs(),
    )
    .assert_conforms();
}
