//! The plugin SDK: what a plugin author needs to write ONE task driver and ship it.
//!
//! Write a type that implements [`Driver`] (the same trait Drover's built-in drivers implement),
//! then choose how to ship it:
//! - **cdylib** (in-process): `crate-type = ["cdylib"]` and one line,
//!   `drover_plugin_sdk::export_driver!(MyDriver::new);`. The agent loads the library from its
//!   `plugin_dir`. Panics in the driver are caught at the boundary and reported as errors.
//! - **sidecar** (out-of-process, Nomad's go-plugin gRPC protocol): a binary that depends on
//!   the separate crate `drover-plugin-sidecar` and whose `main` calls
//!   `drover_plugin_sidecar::run(MyDriver::new(), schemas)`. The agent (Drover's, or Nomad's:
//!   the protocol is Nomad's) starts it from `plugin_dir`.
//!
//! A driver reports events about its tasks (beyond what the contract returns) with
//! [`events::emit`]; the agent shows them as the task's "Driver" events. A cdylib hands them
//! over through the contract's `Driver::task_events` (`export_driver!` wraps the driver in an
//! [`events::EmittingDriver`]); sidecars stream them as Nomad's `TaskEvents`.
//!
//! Test the driver with the conformance kit in `drover-driver-testkit`. The guide is
//! docs/writing-a-driver-plugin.md.
//!
//! Must not depend on: any Drover core crate (only drover-abi and drover-abi-ffi), tokio,
//! tonic. The async stack is drover-plugin-sidecar's alone, so a cdylib built in one workspace
//! with its sidecar cannot get it by feature unification.
#![deny(missing_docs)]

pub use drover_abi;
pub use drover_abi::{
    CallerGone, Capabilities, ChannelExecStream, DRIVER_API_VERSION, Driver, DriverError,
    DriverTaskEvent, ExecInput, ExecOptions, ExecOutput, ExecRecv, ExecStream, ExecStreamOutput,
    ExitResult, Fingerprint, FsIsolation, HealthState, PluginInfo, TaskConfig, TaskHandle,
    TaskResourceUsage, TaskResources, TaskState, TaskStatus, TerminalSize, signal_number,
};

pub mod events;
pub mod log;

/// Exports the cdylib's driver plugin root module. `$make` builds the driver: a function or
/// closure taking nothing, for example `MyDriver::new` or `|| MyDriver::with_defaults()`. The
/// host calls it once per driver instance it needs (once at agent start).
///
/// ```ignore
/// drover_plugin_sdk::export_driver!(SkeletonDriver::new);
/// ```
#[macro_export]
macro_rules! export_driver {
    ($make:expr) => {
        $crate::__private::drover_abi_ffi::export_driver_plugin!(|| {
            $crate::log::set_source(env!("CARGO_PKG_NAME"));
            // What the driver emits reaches the agent through `task_events`.
            $crate::events::EmittingDriver::new(($make)())
        });
    };
}

/// What the export macro expands to refers to these; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use drover_abi_ffi;
}
