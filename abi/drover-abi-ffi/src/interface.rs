//! The types both sides agree on: the root module and the driver trait object.
//!
//! ABI history (the package version of this crate is the ABI version; abi_stable refuses a
//! library built against another major version):
//! - 1.0.0: `DriverPlugin { new_driver }` and `DriverFfi` with the driver methods and `call`.
//! - 1.1.0: `DriverPlugin::set_host_logger`, optional: a host loading a 1.0 plugin finds it absent.
//!
//! Driver methods added through `DriverFfi::call` (no layout change; names in
//! `wire::extension`): `task_events` (a plugin built before it answers `NotSupported`), and
//! `exec_task_streaming` as the `exec_streaming_*` session calls (see `exec`).
//!
//! A frozen copy of 1.0.0 lives in `tests/fixtures/drover-abi-ffi-v1`; the evolution test builds a
//! plugin against it and loads it with this version's host. Never edit a field or method that
//! exists; add new module functions after the last one (they are optional to the host) and new
//! driver methods as names understood by `DriverFfi::call`.

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, RResult, RStr, RString};
use abi_stable::{StableAbi, declare_root_module_statics, package_version_strings, sabi_trait};

/// The ABI version this crate implements (its package version).
pub const ABI_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Levels of a log line a plugin sends to the host.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

/// The host's log function, handed to a plugin at load time.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct HostLogger {
    /// `(level, source, message)`; `source` names the plugin.
    pub log: extern "C" fn(LogLevel, RStr<'_>, RStr<'_>),
}

/// One driver, as a plugin exposes it. Every structured argument and result is the JSON of the
/// `drover_abi` type of the same name; errors are the JSON of [`crate::WireError`].
/// Implementations must not unwind: the shims in [`crate::plugin`] catch panics.
#[sabi_trait]
pub trait DriverFfi: Send + Sync {
    /// JSON `PluginInfo`.
    fn plugin_info(&self) -> RResult<RString, RString>;
    /// `config_json`: the plugin's config block as JSON.
    fn set_config(&self, config_json: RStr<'_>) -> RResult<(), RString>;
    /// JSON `Capabilities`.
    fn capabilities(&self) -> RResult<RString, RString>;
    /// JSON `Fingerprint`.
    fn fingerprint(&self) -> RResult<RString, RString>;
    fn validate_task_config(&self, config_json: RStr<'_>) -> RResult<(), RString>;
    /// `task_config_json`: JSON `TaskConfig`; returns JSON `TaskHandle`.
    fn start_task(&self, task_config_json: RStr<'_>) -> RResult<RString, RString>;
    /// Returns JSON `Option<ExitResult>`.
    fn wait_task(&self, task_id: RStr<'_>, timeout_nanos: u64) -> RResult<RString, RString>;
    fn stop_task(
        &self,
        task_id: RStr<'_>,
        timeout_nanos: u64,
        signal: RStr<'_>,
    ) -> RResult<(), RString>;
    fn destroy_task(&self, task_id: RStr<'_>, force: bool) -> RResult<(), RString>;
    /// Returns JSON `TaskStatus`.
    fn inspect_task(&self, task_id: RStr<'_>) -> RResult<RString, RString>;
    /// `handle_json`: JSON `TaskHandle`.
    fn recover_task(&self, handle_json: RStr<'_>) -> RResult<(), RString>;
    fn signal_task(&self, task_id: RStr<'_>, signal: RStr<'_>) -> RResult<(), RString>;
    /// Returns JSON `TaskResourceUsage`.
    fn task_stats(&self, task_id: RStr<'_>) -> RResult<RString, RString>;
    /// `command_json`: JSON list of strings; returns JSON `ExecOutput`.
    fn exec_task(
        &self,
        task_id: RStr<'_>,
        command_json: RStr<'_>,
        timeout_nanos: u64,
    ) -> RResult<RString, RString>;
    /// Methods added to the contract after ABI 1.0, by name, with JSON arguments and result. A
    /// plugin that does not know `method` returns a `NotSupported` error.
    #[sabi(last_prefix_field)]
    fn call(&self, method: RStr<'_>, args_json: RStr<'_>) -> RResult<RString, RString>;
}

/// The driver object a plugin hands out: owned, type-erased, `Send + Sync`.
pub type DriverFfiBox = DriverFfi_TO<'static, RBox<()>>;

/// The root module every driver plugin library exports (through the export macro).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = DriverPluginRef)))]
#[sabi(missing_field(option))]
pub struct DriverPlugin {
    /// Builds a new instance of the plugin's driver; an error is a JSON `WireError`.
    #[sabi(last_prefix_field)]
    pub new_driver: extern "C" fn() -> RResult<DriverFfiBox, RString>,
    /// Since 1.1: gives the plugin the host's log function. Absent in 1.0 plugins.
    pub set_host_logger: extern "C" fn(HostLogger),
}

impl RootModule for DriverPluginRef {
    declare_root_module_statics! {DriverPluginRef}
    const BASE_NAME: &'static str = "drover_driver_plugin";
    const NAME: &'static str = "drover_driver_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}
