//! `skeleton`: an example task driver shipped as a cdylib plugin (and, unchanged, as the sidecar
//! binary `skeleton-sidecar` in examples/skeleton-sidecar). It runs a task's `command` with
//! `args` as a plain host process (no isolation), connects its stdout and stderr to the host's
//! log FIFOs, and finds it again by pid after an agent restart.
//!
//! Start here when writing a driver: `driver.rs` is the whole contract, `config.rs` the task
//! config, `process.rs` the process handling. The guide is docs/writing-a-driver-plugin.md.
//!
//! Must not depend on: any Drover crate other than drover-plugin-sdk.

mod config;
mod driver;
mod process;

pub use driver::{DRIVER_NAME, SkeletonDriver};

drover_plugin_sdk::export_driver!(SkeletonDriver::new);
