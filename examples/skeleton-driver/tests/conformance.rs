//! The skeleton driver, called directly, passes the conformance kit. (drover-plugin-host runs the
//! same kit against the built cdylib, through the loader.)

use std::sync::Arc;

use drover_driver_testkit::{Kit, TaskConfigs};
use serde_json::json;
use skeleton_driver::SkeletonDriver;

#[test]
fn skeleton_passes_the_conformance_kit() {
    let mut configs = TaskConfigs::command();
    configs.bad_plugin_config = Some((json!({"verbose": true}), "verbose".into()));
    Kit::new("skeleton", || Arc::new(SkeletonDriver::new()), configs).assert_conforms();
}
