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
//! What the agent calls, and in which order, is the contract's lifecycle: see the
//! [`drover_abi`] crate docs. A driver whose tasks are plain child processes can hand the
//! task methods to [`process::HostProcesses`]. `examples/minimal-driver` is a complete driver
//! in one file.
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
pub mod process;

/// Exports the cdylib's driver plugin root module. `$make` builds the driver: a function or
/// closure taking nothing, for example `MyDriver::new` or `|| MyDriver::with_defaults()`. The
/// host calls it once per driver instance it needs (once at agent start).
///
/// ```
/// use std::time::Duration;
/// use drover_plugin_sdk::*;
///
/// /// A driver that can run nothing: the smallest `impl Driver` (see `examples/minimal-driver`
/// /// for one that runs tasks).
/// #[derive(Default)]
/// pub struct NoDriver;
///
/// impl Driver for NoDriver {
///     fn plugin_info(&self) -> PluginInfo {
///         PluginInfo {
///             name: "none".into(),
///             plugin_version: "0.1.0".into(),
///             api_version: DRIVER_API_VERSION.into(),
///         }
///     }
///     fn set_config(&self, _: &serde_json::Value) -> Result<(), DriverError> { Ok(()) }
///     fn capabilities(&self) -> Capabilities {
///         Capabilities {
///             send_signals: false,
///             exec: false,
///             fs_isolation: FsIsolation::None,
///             network_isolation: false,
///             group_network: false,
///             mount_configs: false,
///         }
///     }
///     fn fingerprint(&self) -> Fingerprint {
///         Fingerprint {
///             health: HealthState::Undetected,
///             health_description: "runs nothing".into(),
///             attributes: Default::default(),
///         }
///     }
///     fn validate_task_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
///         Err(DriverError::InvalidConfig("this driver runs nothing".into()))
///     }
///     fn start_task(&self, c: &TaskConfig) -> Result<TaskHandle, DriverError> {
///         Err(DriverError::StartFailed { message: format!("{}: nothing to run", c.name), recoverable: false })
///     }
///     fn wait_task(&self, id: &str, _: Duration) -> Result<Option<ExitResult>, DriverError> {
///         Err(DriverError::TaskNotFound(id.into()))
///     }
///     fn stop_task(&self, id: &str, _: Duration, _: &str) -> Result<(), DriverError> {
///         Err(DriverError::TaskNotFound(id.into()))
///     }
///     fn destroy_task(&self, id: &str, _: bool) -> Result<(), DriverError> {
///         Err(DriverError::TaskNotFound(id.into()))
///     }
///     fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
///         Err(DriverError::TaskNotFound(id.into()))
///     }
///     fn recover_task(&self, h: &TaskHandle) -> Result<(), DriverError> {
///         Err(DriverError::TaskNotFound(h.config.id.clone()))
///     }
/// }
///
/// drover_plugin_sdk::export_driver!(NoDriver::default);
/// # fn main() {}
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
