//! The kit against the built sidecar binary, through the agent's gRPC adapter.

use std::path::PathBuf;

use drover_driver_testkit::{Kit, TaskConfigs};
use drover_plugin_host::grpc::{GrpcOptions, load};
use serde_json::json;

#[test]
fn the_shell_sidecar_passes_the_conformance_kit() {
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_minimal-driver-sidecar"));
    let script = |s: &str| json!({ "script": s });
    let configs = TaskConfigs {
        print_line: Box::new(move |line| script(&format!("echo '{}'", line.replace('\'', "")))),
        exit_with: Some(Box::new(move |code| script(&format!("exit {code}")))),
        run_until_stopped: script("exec sleep 1000"),
        ignore_sigterm: Some(script(
            "trap '' TERM; echo ready; while :; do sleep 0.1; done",
        )),
        // The agent refuses these from the schemas, naming the argument, before the driver.
        bad_config: (json!({ "scriptz": "true" }), "scriptz".into()),
        bad_plugin_config: Some((json!({ "colour": "red" }), "colour".into())),
        exec: (Vec::new(), String::new()),
    };
    Kit::new(
        "shell (sidecar)",
        move || match load(&binary, &GrpcOptions::default()) {
            Ok(plugin) => plugin.driver,
            Err(e) => panic!("starting the sidecar: {e}"),
        },
        configs,
    )
    .assert_conforms();
}
