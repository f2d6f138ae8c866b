//! The `shell` driver of `minimal-driver` as a go-plugin sidecar: the same code, plus the
//! schemas the agent decodes its config blocks with.

use drover_plugin_sidecar::{self as sidecar, Schemas, spec::*};

fn main() -> std::process::ExitCode {
    sidecar::run(
        minimal_driver::ShellDriver::default(),
        Schemas {
            plugin_config: object([]),
            task_config: object([("script", attr("script", "string", true))]),
        },
    )
}
