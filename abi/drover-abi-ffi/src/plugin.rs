//! The plugin side: wraps a `drover_abi::Driver` into the [`DriverFfi`] trait object, with every
//! call behind `catch_unwind` so that a panic becomes an error value instead of unwinding into
//! the host (which would abort it), and keeps the host's log function.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, PoisonError, RwLock};

use abi_stable::prefix_type::PrefixTypeTrait;
use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RErr, ROk, RResult, RStr, RString};
use drover_abi::{Driver, DriverError, TaskConfig, TaskHandle};
use serde::Serialize;

use crate::exec::ExecSessions;
use crate::interface::{DriverFfi, DriverFfi_TO, DriverFfiBox, DriverPlugin, DriverPluginRef};
use crate::interface::{HostLogger, LogLevel};
use crate::wire::{TaskEventsArgs, encode_error, extension, nanos_to_duration};

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f`, turning its error or its panic into the JSON error the host decodes.
fn guard<T>(method: &str, f: impl FnOnce() -> Result<T, DriverError>) -> RResult<T, RString> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => ROk(value),
        Ok(Err(e)) => RErr(encode_error(&e).into()),
        Err(payload) => {
            let e = DriverError::Other(format!(
                "plugin panicked in {method}: {}",
                panic_message(payload.as_ref())
            ));
            RErr(encode_error(&e).into())
        }
    }
}

fn to_json(method: &str, value: &impl Serialize) -> Result<RString, DriverError> {
    serde_json::to_string(value)
        .map(RString::from)
        .map_err(|e| DriverError::Other(format!("encoding the {method} result: {e}")))
}

fn from_json<T: serde::de::DeserializeOwned>(what: &str, text: RStr<'_>) -> Result<T, DriverError> {
    serde_json::from_str(text.as_str())
        .map_err(|e| DriverError::Other(format!("decoding {what} from the host: {e}")))
}

/// A driver behind the FFI trait. Public so that tests and benchmarks can build the trait object
/// without a library; plugins get it through the export macro.
pub struct DriverShim<D> {
    driver: Arc<D>,
    /// Interactive execs running now (`exec_task_streaming`).
    exec_sessions: ExecSessions,
}

impl<D: Driver + 'static> DriverShim<D> {
    pub fn new(driver: D) -> Self {
        DriverShim {
            driver: Arc::new(driver),
            exec_sessions: ExecSessions::default(),
        }
    }

    /// The type-erased object a plugin hands to the host.
    pub fn into_ffi_box(self) -> DriverFfiBox {
        DriverFfi_TO::from_value(self, TD_Opaque)
    }
}

impl<D: Driver + 'static> DriverFfi for DriverShim<D> {
    fn plugin_info(&self) -> RResult<RString, RString> {
        guard("plugin_info", || {
            to_json("plugin_info", &self.driver.plugin_info())
        })
    }

    fn set_config(&self, config_json: RStr<'_>) -> RResult<(), RString> {
        guard("set_config", || {
            let config: serde_json::Value = from_json("the plugin config", config_json)?;
            self.driver.set_config(&config)
        })
    }

    fn capabilities(&self) -> RResult<RString, RString> {
        guard("capabilities", || {
            to_json("capabilities", &self.driver.capabilities())
        })
    }

    fn fingerprint(&self) -> RResult<RString, RString> {
        guard("fingerprint", || {
            to_json("fingerprint", &self.driver.fingerprint())
        })
    }

    fn validate_task_config(&self, config_json: RStr<'_>) -> RResult<(), RString> {
        guard("validate_task_config", || {
            let config: serde_json::Value = from_json("the task config", config_json)?;
            self.driver.validate_task_config(&config)
        })
    }

    fn start_task(&self, task_config_json: RStr<'_>) -> RResult<RString, RString> {
        guard("start_task", || {
            let config: TaskConfig = from_json("the TaskConfig", task_config_json)?;
            to_json("start_task", &self.driver.start_task(&config)?)
        })
    }

    fn wait_task(&self, task_id: RStr<'_>, timeout_nanos: u64) -> RResult<RString, RString> {
        guard("wait_task", || {
            let exit = self
                .driver
                .wait_task(task_id.as_str(), nanos_to_duration(timeout_nanos))?;
            to_json("wait_task", &exit)
        })
    }

    fn stop_task(
        &self,
        task_id: RStr<'_>,
        timeout_nanos: u64,
        signal: RStr<'_>,
    ) -> RResult<(), RString> {
        guard("stop_task", || {
            self.driver.stop_task(
                task_id.as_str(),
                nanos_to_duration(timeout_nanos),
                signal.as_str(),
            )
        })
    }

    fn destroy_task(&self, task_id: RStr<'_>, force: bool) -> RResult<(), RString> {
        guard("destroy_task", || {
            self.driver.destroy_task(task_id.as_str(), force)
        })
    }

    fn inspect_task(&self, task_id: RStr<'_>) -> RResult<RString, RString> {
        guard("inspect_task", || {
            to_json("inspect_task", &self.driver.inspect_task(task_id.as_str())?)
        })
    }

    fn recover_task(&self, handle_json: RStr<'_>) -> RResult<(), RString> {
        guard("recover_task", || {
            let handle: TaskHandle = from_json("the TaskHandle", handle_json)?;
            self.driver.recover_task(&handle)
        })
    }

    fn signal_task(&self, task_id: RStr<'_>, signal: RStr<'_>) -> RResult<(), RString> {
        guard("signal_task", || {
            self.driver.signal_task(task_id.as_str(), signal.as_str())
        })
    }

    fn task_stats(&self, task_id: RStr<'_>) -> RResult<RString, RString> {
        guard("task_stats", || {
            to_json("task_stats", &self.driver.task_stats(task_id.as_str())?)
        })
    }

    fn exec_task(
        &self,
        task_id: RStr<'_>,
        command_json: RStr<'_>,
        timeout_nanos: u64,
    ) -> RResult<RString, RString> {
        guard("exec_task", || {
            let command: Vec<String> = from_json("the exec command", command_json)?;
            let out = self.driver.exec_task(
                task_id.as_str(),
                &command,
                nanos_to_duration(timeout_nanos),
            )?;
            to_json("exec_task", &out)
        })
    }

    /// The methods added to the contract since ABI 1.0, matched by name.
    fn call(&self, method: RStr<'_>, args_json: RStr<'_>) -> RResult<RString, RString> {
        match method.as_str() {
            extension::TASK_EVENTS => guard(extension::TASK_EVENTS, || {
                let args: TaskEventsArgs = from_json("the task_events arguments", args_json)?;
                let events = self
                    .driver
                    .task_events(nanos_to_duration(args.max_wait_nanos))?;
                to_json(extension::TASK_EVENTS, &events)
            }),
            other => guard(other, || {
                match self
                    .exec_sessions
                    .call(&self.driver, other, args_json.as_str())
                {
                    Some(answer) => answer.map(RString::from),
                    None => Err(DriverError::NotSupported(other.to_string())),
                }
            }),
        }
    }
}

/// Builds the plugin's driver for the host, catching a panic in the constructor.
pub fn new_driver_box<D: Driver + 'static>(
    make: impl FnOnce() -> D,
) -> RResult<DriverFfiBox, RString> {
    guard("the driver constructor", || {
        Ok(DriverShim::new(make()).into_ffi_box())
    })
}

/// The root module the export macro exports, around the plugin's `new_driver` function.
pub fn root_module(
    new_driver: extern "C" fn() -> RResult<DriverFfiBox, RString>,
) -> DriverPluginRef {
    DriverPlugin {
        new_driver,
        set_host_logger,
    }
    .leak_into_prefix()
}

static HOST_LOGGER: RwLock<Option<HostLogger>> = RwLock::new(None);

/// Stored by the host right after loading (ABI 1.1 and later).
pub extern "C" fn set_host_logger(logger: HostLogger) {
    *HOST_LOGGER.write().unwrap_or_else(PoisonError::into_inner) = Some(logger);
}

/// Sends one log line to the host's log, or (except debug lines) to stderr when the host gave no
/// log function (an older host, or a test without one). `source` names the plugin.
pub fn log(level: LogLevel, source: &str, message: &str) {
    let logger = *HOST_LOGGER.read().unwrap_or_else(PoisonError::into_inner);
    match logger {
        Some(logger) => (logger.log)(level, RStr::from_str(source), RStr::from_str(message)),
        // Without a host there is nobody to filter by level: keep stderr for what matters.
        None if level == LogLevel::Debug => {}
        None => eprintln!("[{level:?}] {source}: {message}"),
    }
}
