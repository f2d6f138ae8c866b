//! The task configs of the `shell` driver for the conformance kit.

use drover_driver_testkit::TaskConfigs;
use serde_json::json;

/// `shell` is not configured with `command` and `args`, so its `TaskConfigs` say which
/// `{ "script": ... }` does what each check needs.
pub fn shell_configs() -> TaskConfigs {
    let script = |s: &str| json!({ "script": s });
    TaskConfigs {
        print_line: Box::new(move |line| script(&format!("echo '{}'", line.replace('\'', "")))),
        exit_with: Some(Box::new(move |code| script(&format!("exit {code}")))),
        run_until_stopped: script("exec sleep 1000"),
        ignore_sigterm: Some(script(
            "trap '' TERM; echo ready; while :; do sleep 0.1; done",
        )),
        bad_config: (json!({ "scriptz": "true" }), "scriptz".into()),
        bad_plugin_config: Some((json!({ "colour": "red" }), "colour".into())),
        exec: (Vec::new(), String::new()),
    }
}
