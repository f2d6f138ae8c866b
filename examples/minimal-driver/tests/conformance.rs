//! The kit against the driver itself, and against its cdylib loaded as the agent loads it.

mod common;

use std::path::Path;
use std::sync::Arc;

use drover_driver_testkit::{Kit, build_cdylib};
use drover_plugin_host::dylib::load_dylib;

#[test]
fn the_shell_driver_passes_the_conformance_kit() {
    Kit::new(
        "shell",
        || Arc::new(minimal_driver::ShellDriver::default()),
        common::shell_configs(),
    )
    .assert_conforms();
}

#[test]
fn the_shell_cdylib_passes_the_conformance_kit_through_the_agents_loader() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let library = match build_cdylib(&root, "minimal-driver", false) {
        Ok(path) => path,
        Err(e) => panic!("building the cdylib: {e}"),
    };
    Kit::new(
        "shell (cdylib)",
        move || match load_dylib(&library) {
            Ok(plugin) => plugin.driver,
            Err(e) => panic!("loading {}: {e}", library.display()),
        },
        common::shell_configs(),
    )
    .assert_conforms();
}
