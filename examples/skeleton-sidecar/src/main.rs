//! `skeleton-sidecar`: the `skeleton` example driver (examples/skeleton-driver, the same code)
//! shipped as a go-plugin sidecar binary instead of a cdylib. The agent starts it from its
//! `plugin_dir` and talks to it over Nomad's external plugin protocol; jobs use it with
//! `driver = "skeleton-sidecar"`.
//!
//! What this file adds to the driver is what the protocol needs: the hclspecs of the plugin
//! config (no settings) and of a task's `config` block (`command`, `args`). `driver.rs` adds
//! exec (one-shot, and interactive in `exec_stream.rs`), which only a sidecar can carry to the
//! agent.
//!
//! Must not depend on: any Drover crate other than drover-plugin-sdk and the skeleton driver.

mod driver;
mod exec_stream;

use std::process::ExitCode;

use drover_plugin_sidecar::{self as sidecar, Schemas, spec::*};

use crate::driver::SidecarDriver;

/// The driver name jobs use for this build.
const NAME: &str = "skeleton-sidecar";

fn schemas() -> Schemas {
    Schemas {
        plugin_config: object([]),
        task_config: object([
            ("command", attr("command", "string", true)),
            ("args", attr("args", "list(string)", false)),
        ]),
    }
}

fn main() -> ExitCode {
    sidecar::run(SidecarDriver::named(NAME), schemas())
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_plugin_sidecar::ConfigSchema;
    use serde_json::json;

    #[test]
    fn the_task_schema_takes_command_and_args_and_refuses_typos() {
        let schema = ConfigSchema::compile(Some(&schemas().task_config)).unwrap();
        schema
            .encode(&json!({"command": "echo", "args": ["hi"]}))
            .unwrap();
        let e = schema
            .encode(&json!({"command": "echo", "arg": []}))
            .unwrap_err();
        assert!(e.to_string().contains("\"arg\""), "{e}");
        let plugin = ConfigSchema::compile(Some(&schemas().plugin_config)).unwrap();
        assert!(plugin.encode(&json!({"verbose": true})).is_err());
    }
}
