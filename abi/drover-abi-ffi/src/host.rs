//! The host side: opens a plugin library, checks its root module, and adapts the driver it
//! hands out to `drover_abi::Driver`.
//!
//! Libraries are opened with `lib_header_from_path` and never through
//! `RootModule::load_from_file`, which caches one module per type and would hand the first
//! plugin's module back for every later file. Libraries are never unloaded (abi_stable's rule).

use std::path::{Path, PathBuf};
use std::time::Duration;

use abi_stable::library::{LibraryError, lib_header_from_path};
use abi_stable::prefix_type::PrefixRefTrait;
use abi_stable::std_types::{RResult, RStr, RString};
use drover_abi::{
    Capabilities, Driver, DriverError, DriverTaskEvent, ExecOptions, ExecOutput, ExecStream,
    ExitResult, Fingerprint, FsIsolation, HealthState, PluginInfo, TaskConfig, TaskHandle,
    TaskResourceUsage, TaskStatus,
};
use serde::de::DeserializeOwned;

use crate::history;
use crate::interface::{DriverFfiBox, DriverPluginRef, HostLogger};
use crate::wire::{TaskEventsArgs, decode_error, duration_to_nanos, extension};

/// Why a library could not be used as a driver plugin. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: not a Drover driver plugin: {detail}")]
    NoRootModule { path: PathBuf, detail: String },
    #[error("{path}: its root module is not a Drover driver plugin of ABI {expected}: {detail}")]
    WrongRootModule {
        path: PathBuf,
        expected: &'static str,
        detail: String,
    },
    #[error("{path}: creating the driver failed: {source}")]
    NewDriver { path: PathBuf, source: DriverError },
}

/// abi_stable's layout reports run to hundreds of lines; the first few say what differs.
fn shorten(detail: &str) -> String {
    const MAX_LINES: usize = 12;
    let lines: Vec<&str> = detail.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() <= MAX_LINES {
        lines.join("\n")
    } else {
        format!(
            "{}\n... ({} more lines)",
            lines[..MAX_LINES].join("\n"),
            lines.len() - MAX_LINES
        )
    }
}

/// Why opening `path` gave no root module, in our words: abi_stable's own text names the mangled
/// symbol and reads "Could load symbol" for a symbol it could not load.
fn not_a_plugin(e: &LibraryError) -> String {
    match e {
        LibraryError::OpenError { err, .. } => format!("cannot open it as a shared library: {err}"),
        LibraryError::GetSymbolError { .. } => "it exports no Drover root module (a driver plugin \
             exports one with `drover_plugin_sdk::export_driver!`)"
            .to_string(),
        other => shorten(other.to_string().trim()),
    }
}

/// A loaded plugin library: its root module, from which drivers are made.
pub struct PluginLibrary {
    path: PathBuf,
    abi_version: String,
    module: DriverPluginRef,
}

/// Opens `path` and checks that it exports a driver plugin root module of a compatible ABI. When
/// the plugin accepts one (ABI 1.1 and later), `logger` receives its log lines.
pub fn load_library(path: &Path, logger: Option<HostLogger>) -> Result<PluginLibrary, LoadError> {
    let header = lib_header_from_path(path).map_err(|e| LoadError::NoRootModule {
        path: path.to_path_buf(),
        detail: not_a_plugin(&e),
    })?;
    let abi_version = header.version_strings().version.to_string();
    let module = match header.init_root_module::<DriverPluginRef>() {
        Ok(module) => Ok(module),
        // An older plugin: its root module has fewer fields than ours (see `history`).
        Err(current) => match header.init_root_module::<history::v1_0::DriverPluginRef>() {
            Ok(v1_0) => Ok(DriverPluginRef::from_prefix_ref(
                // SAFETY: the library's module passed the layout check as a 1.0 `DriverPlugin`,
                // whose fields are exactly the prefix of the current `DriverPlugin`; accessors of
                // the fields after it consult the library's own field table (None when absent).
                unsafe { v1_0.to_prefix_ref().cast() },
            )),
            Err(_) => Err(current),
        },
    }
    .map_err(|e| match e {
        LibraryError::AbiInstability(_) | LibraryError::IncompatibleVersionNumber { .. } => {
            LoadError::WrongRootModule {
                path: path.to_path_buf(),
                expected: crate::ABI_VERSION,
                detail: shorten(&e.to_string()),
            }
        }
        other => LoadError::NoRootModule {
            path: path.to_path_buf(),
            detail: shorten(&other.to_string()),
        },
    })?;
    if let (Some(set_logger), Some(logger)) = (module.set_host_logger(), logger) {
        set_logger(logger);
    }
    Ok(PluginLibrary {
        path: path.to_path_buf(),
        abi_version,
        module,
    })
}

impl PluginLibrary {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ABI version the plugin was built against (the version of drover-abi-ffi it used).
    pub fn abi_version(&self) -> &str {
        &self.abi_version
    }

    /// Whether the plugin has the 1.1 log hook (older plugins print to stderr).
    pub fn accepts_host_logger(&self) -> bool {
        self.module.set_host_logger().is_some()
    }

    /// A new instance of the plugin's driver. Each call builds a fresh one, as a restarted agent
    /// would get.
    pub fn new_driver(&self) -> Result<FfiDriver, LoadError> {
        let new_driver = self.module.new_driver();
        let err = |source| LoadError::NewDriver {
            path: self.path.clone(),
            source,
        };
        let object = new_driver()
            .into_result()
            .map_err(|e: RString| err(decode_error(e.as_str())))?;
        FfiDriver::new(object).map_err(err)
    }
}

/// A plugin's driver seen as a `drover_abi::Driver`: each method encodes its arguments, calls
/// across the boundary, and decodes the answer.
pub struct FfiDriver {
    object: DriverFfiBox,
    info: PluginInfo,
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, DriverError> {
    serde_json::to_string(value)
        .map_err(|e| DriverError::Other(format!("encoding for the plugin: {e}")))
}

impl FfiDriver {
    /// Wraps a driver object and asks it for its `PluginInfo` once (the name is needed for
    /// every message and never changes).
    pub fn new(object: DriverFfiBox) -> Result<Self, DriverError> {
        let info = decode_result::<PluginInfo>("?", "plugin_info", object.plugin_info())?;
        Ok(FfiDriver { object, info })
    }

    fn decode<T: DeserializeOwned>(
        &self,
        method: &str,
        result: RResult<RString, RString>,
    ) -> Result<T, DriverError> {
        decode_result(&self.info.name, method, result)
    }

    /// Calls a method added to the contract after ABI 1.0, by name. Plugins built before it
    /// answer `NotSupported`.
    pub fn call_extension(&self, method: &str, args_json: &str) -> Result<String, DriverError> {
        self.object
            .call(RStr::from_str(method), RStr::from_str(args_json))
            .into_result()
            .map(String::from)
            .map_err(|e: RString| decode_error(e.as_str()))
    }
}

impl crate::exec::ExtensionCall for FfiDriver {
    fn call_extension(&self, method: &str, args_json: &str) -> Result<String, DriverError> {
        FfiDriver::call_extension(self, method, args_json)
    }
    fn plugin_name(&self) -> &str {
        &self.info.name
    }
}

fn decode_result<T: DeserializeOwned>(
    plugin: &str,
    method: &str,
    result: RResult<RString, RString>,
) -> Result<T, DriverError> {
    match result.into_result() {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            DriverError::Other(format!("plugin {plugin}: malformed {method} result: {e}"))
        }),
        Err(e) => Err(decode_error(e.as_str())),
    }
}

fn unit(result: RResult<(), RString>) -> Result<(), DriverError> {
    result
        .into_result()
        .map_err(|e: RString| decode_error(e.as_str()))
}

impl Driver for FfiDriver {
    fn plugin_info(&self) -> PluginInfo {
        self.info.clone()
    }

    fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        unit(self.object.set_config(RStr::from_str(&json(config)?)))
    }

    /// A plugin that cannot answer is taken to offer nothing beyond start/wait/stop.
    fn capabilities(&self) -> Capabilities {
        self.decode("capabilities", self.object.capabilities())
            .unwrap_or(Capabilities {
                send_signals: false,
                exec: false,
                fs_isolation: FsIsolation::None,
                network_isolation: false,
                group_network: false,
                mount_configs: false,
            })
    }

    /// A plugin that cannot answer is unhealthy, with the reason as the description.
    fn fingerprint(&self) -> Fingerprint {
        self.decode("fingerprint", self.object.fingerprint())
            .unwrap_or_else(|e: DriverError| Fingerprint {
                health: HealthState::Unhealthy,
                health_description: e.to_string(),
                attributes: Default::default(),
            })
    }

    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        unit(
            self.object
                .validate_task_config(RStr::from_str(&json(config)?)),
        )
    }

    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let result = self.object.start_task(RStr::from_str(&json(config)?));
        self.decode("start_task", result)
    }

    fn wait_task(
        &self,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Option<ExitResult>, DriverError> {
        let result = self
            .object
            .wait_task(RStr::from_str(task_id), duration_to_nanos(timeout));
        self.decode("wait_task", result)
    }

    fn stop_task(&self, task_id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        unit(self.object.stop_task(
            RStr::from_str(task_id),
            duration_to_nanos(timeout),
            RStr::from_str(signal),
        ))
    }

    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        unit(self.object.destroy_task(RStr::from_str(task_id), force))
    }

    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError> {
        let result = self.object.inspect_task(RStr::from_str(task_id));
        self.decode("inspect_task", result)
    }

    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        unit(self.object.recover_task(RStr::from_str(&json(handle)?)))
    }

    fn signal_task(&self, task_id: &str, signal: &str) -> Result<(), DriverError> {
        unit(
            self.object
                .signal_task(RStr::from_str(task_id), RStr::from_str(signal)),
        )
    }

    fn task_stats(&self, task_id: &str) -> Result<TaskResourceUsage, DriverError> {
        let result = self.object.task_stats(RStr::from_str(task_id));
        self.decode("task_stats", result)
    }

    fn exec_task(
        &self,
        task_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        let result = self.object.exec_task(
            RStr::from_str(task_id),
            RStr::from_str(&json(command)?),
            duration_to_nanos(timeout),
        );
        self.decode("exec_task", result)
    }

    /// Through the `exec_streaming_*` session calls (see `crate::exec`): plugins built before
    /// them answer `NotSupported`.
    fn exec_task_streaming(
        &self,
        task_id: &str,
        options: &ExecOptions,
        stream: &dyn ExecStream,
    ) -> Result<ExitResult, DriverError> {
        crate::exec::exec_task_streaming(self, task_id, options, stream)
    }

    /// Through `DriverFfi::call`: plugins built before it answer `NotSupported`.
    fn task_events(&self, max_wait: Duration) -> Result<Vec<DriverTaskEvent>, DriverError> {
        let args = json(&TaskEventsArgs {
            max_wait_nanos: duration_to_nanos(max_wait),
        })?;
        let text = self.call_extension(extension::TASK_EVENTS, &args)?;
        serde_json::from_str(&text).map_err(|e| {
            DriverError::Other(format!(
                "plugin {}: malformed task_events result: {e}",
                self.info.name
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::DriverShim;
    use drover_abi::{DRIVER_API_VERSION, TaskState};
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// Panics in `start_task` and `fingerprint`, answers the rest from a one-task table.
    #[derive(Default)]
    struct Flaky {
        config: Mutex<Option<serde_json::Value>>,
    }

    impl Driver for Flaky {
        fn plugin_info(&self) -> PluginInfo {
            PluginInfo {
                name: "flaky".into(),
                plugin_version: "0.0.1".into(),
                api_version: DRIVER_API_VERSION.into(),
            }
        }
        fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
            if config.get("bogus").is_some() {
                return Err(DriverError::InvalidConfig("unknown field \"bogus\"".into()));
            }
            *self.config.lock().unwrap() = Some(config.clone());
            Ok(())
        }
        fn capabilities(&self) -> Capabilities {
            panic!("capabilities exploded")
        }
        fn fingerprint(&self) -> Fingerprint {
            panic!("fingerprint exploded")
        }
        fn validate_task_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
            Ok(())
        }
        fn start_task(&self, _: &TaskConfig) -> Result<TaskHandle, DriverError> {
            let v: Vec<u8> = Vec::new();
            // An index out of bounds, as a real bug would be.
            let _ = v[3];
            unreachable!()
        }
        fn wait_task(&self, id: &str, _: Duration) -> Result<Option<ExitResult>, DriverError> {
            if id == "done" {
                Ok(Some(ExitResult {
                    exit_code: 3,
                    ..Default::default()
                }))
            } else {
                Err(DriverError::TaskNotFound(id.into()))
            }
        }
        fn stop_task(&self, id: &str, _: Duration, _: &str) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn destroy_task(&self, id: &str, _: bool) -> Result<(), DriverError> {
            Err(DriverError::TaskRunning(id.into()))
        }
        fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
            Ok(TaskStatus {
                id: id.into(),
                name: "t".into(),
                state: TaskState::Running,
                started_at: 1,
                completed_at: 0,
                exit_result: None,
            })
        }
        fn recover_task(&self, _: &TaskHandle) -> Result<(), DriverError> {
            Ok(())
        }
    }

    fn adapter() -> FfiDriver {
        FfiDriver::new(DriverShim::new(Flaky::default()).into_ffi_box()).unwrap()
    }

    #[test]
    fn a_panic_in_a_plugin_method_comes_back_as_an_error() {
        let d = adapter();
        let config = TaskConfig {
            id: "a/t/1".into(),
            name: "t".into(),
            alloc_id: "a".into(),
            job_name: "j".into(),
            group_name: "g".into(),
            env: Default::default(),
            driver_config: serde_json::json!({}),
            resources: Default::default(),
            user: String::new(),
            alloc_dir: "/tmp".into(),
            task_dir: "/tmp".into(),
            stdout_path: "/dev/null".into(),
            stderr_path: "/dev/null".into(),
            ..Default::default()
        };
        match d.start_task(&config) {
            Err(DriverError::Other(m)) => {
                assert!(m.contains("panicked in start_task"), "{m}");
                assert!(m.contains("index out of bounds"), "{m}");
            }
            other => panic!("expected a panic error, got {other:?}"),
        }
        // Methods without a Result degrade instead of failing.
        let fp = d.fingerprint();
        assert_eq!(fp.health, HealthState::Unhealthy);
        assert!(fp.health_description.contains("fingerprint exploded"));
        assert!(!d.capabilities().exec);
        // The driver still answers afterwards.
        assert!(d.inspect_task("x").is_ok());
    }

    #[test]
    fn results_and_each_error_kind_cross_unchanged() {
        let d = adapter();
        assert_eq!(d.plugin_info().name, "flaky");
        d.set_config(&serde_json::json!({"a": 1})).unwrap();
        assert_eq!(
            d.set_config(&serde_json::json!({"bogus": 1})),
            Err(DriverError::InvalidConfig("unknown field \"bogus\"".into()))
        );
        assert_eq!(
            d.wait_task("done", Duration::MAX)
                .unwrap()
                .unwrap()
                .exit_code,
            3
        );
        assert_eq!(
            d.wait_task("x", Duration::ZERO),
            Err(DriverError::TaskNotFound("x".into()))
        );
        assert_eq!(
            d.destroy_task("x", false),
            Err(DriverError::TaskRunning("x".into()))
        );
        assert_eq!(d.inspect_task("x").unwrap().state, TaskState::Running);
        // Defaults of the trait cross as NotSupported.
        assert!(matches!(
            d.exec_task("x", &["true".into()], Duration::from_secs(1)),
            Err(DriverError::NotSupported(_))
        ));
    }

    #[test]
    fn unknown_extension_methods_are_not_supported() {
        let d = adapter();
        assert_eq!(
            d.call_extension("from_the_future", "{}"),
            Err(DriverError::NotSupported("from_the_future".into()))
        );
    }

    #[test]
    fn task_events_of_a_driver_without_them_are_not_supported() {
        assert_eq!(
            adapter().task_events(Duration::ZERO),
            Err(DriverError::NotSupported("task_events".into()))
        );
    }

    /// Answers `task_events` from a queue, waiting as asked when it is empty.
    struct Eventful {
        queue: Mutex<Vec<DriverTaskEvent>>,
        waited: std::sync::Arc<Mutex<Vec<Duration>>>,
    }

    impl Driver for Eventful {
        fn plugin_info(&self) -> PluginInfo {
            Flaky::default().plugin_info()
        }
        fn set_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
            Ok(())
        }
        fn capabilities(&self) -> Capabilities {
            panic!("not used")
        }
        fn fingerprint(&self) -> Fingerprint {
            panic!("not used")
        }
        fn validate_task_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
            Ok(())
        }
        fn start_task(&self, _: &TaskConfig) -> Result<TaskHandle, DriverError> {
            Err(DriverError::NotSupported("start_task".into()))
        }
        fn wait_task(&self, id: &str, _: Duration) -> Result<Option<ExitResult>, DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn stop_task(&self, id: &str, _: Duration, _: &str) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn destroy_task(&self, id: &str, _: bool) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn recover_task(&self, _: &TaskHandle) -> Result<(), DriverError> {
            Ok(())
        }
        fn task_events(&self, max_wait: Duration) -> Result<Vec<DriverTaskEvent>, DriverError> {
            self.waited.lock().unwrap().push(max_wait);
            let mut queue = self.queue.lock().unwrap();
            if queue.first().is_some_and(|e| e.message == "panic") {
                panic!("events exploded");
            }
            Ok(std::mem::take(&mut *queue))
        }
    }

    #[test]
    fn task_events_cross_the_boundary_with_their_wait_and_every_field() {
        let event = DriverTaskEvent {
            task_id: "a/t/1".into(),
            alloc_id: "a".into(),
            task_name: "t".into(),
            timestamp: 42,
            message: "image pulled".into(),
            annotations: BTreeMap::from([("image".to_string(), "busybox".to_string())]),
        };
        let waited = std::sync::Arc::default();
        let driver = Eventful {
            queue: Mutex::new(vec![event.clone()]),
            waited: std::sync::Arc::clone(&waited),
        };
        let shim = DriverShim::new(driver).into_ffi_box();
        let d = FfiDriver::new(shim).unwrap();
        assert_eq!(d.task_events(Duration::from_millis(1500)), Ok(vec![event]));
        assert_eq!(d.task_events(Duration::ZERO), Ok(vec![]));
        assert_eq!(
            *waited.lock().unwrap(),
            [Duration::from_millis(1500), Duration::ZERO]
        );
    }

    #[test]
    fn a_panic_in_task_events_comes_back_as_an_error() {
        let driver = Eventful {
            queue: Mutex::new(vec![DriverTaskEvent {
                message: "panic".into(),
                ..Default::default()
            }]),
            waited: Default::default(),
        };
        let d = FfiDriver::new(DriverShim::new(driver).into_ffi_box()).unwrap();
        match d.task_events(Duration::ZERO) {
            Err(DriverError::Other(m)) => assert!(m.contains("events exploded"), "{m}"),
            other => panic!("expected the panic as an error, got {other:?}"),
        }
    }

    #[test]
    fn a_file_that_is_not_a_library_is_refused_naming_it() {
        let path = std::env::temp_dir().join(format!("drover-notalib-{}.so", std::process::id()));
        std::fs::write(&path, b"not an ELF file").unwrap();
        let e = load_library(&path, None).err().expect("must be refused");
        let text = e.to_string();
        let _ = std::fs::remove_file(&path);
        assert!(matches!(e, LoadError::NoRootModule { .. }), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
    }

    #[test]
    fn long_layout_reports_are_cut() {
        let long: String = (0..40).map(|i| format!("line {i}\n")).collect();
        let short = shorten(&long);
        assert!(short.contains("line 11") && !short.contains("line 12"));
        assert!(short.ends_with("(28 more lines)"));
    }
}
