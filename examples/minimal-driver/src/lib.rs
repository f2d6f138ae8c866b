//! `shell`: a complete task driver in one file. A task's config is `{ script = "..." }`, which
//! runs as `/bin/sh -c script` in the task directory with the task's environment. Its tasks are
//! plain child processes, so the SDK's `HostProcesses` answers the task methods. Built as a
//! cdylib (`export_driver!` below) and, from the same code, as the sidecar
//! `minimal-driver-sidecar`.

use std::process::Command;
use std::time::Duration;

use drover_plugin_sdk::process::HostProcesses;
use drover_plugin_sdk::*;
use serde_json::Value;

/// The driver: its tasks.
#[derive(Default)]
pub struct ShellDriver {
    tasks: HostProcesses,
}

/// A config with a key other than `allowed` is refused, naming the key.
fn refuse_unknown(config: &Value, allowed: &[&str]) -> Result<(), DriverError> {
    let unknown = config
        .as_object()
        .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())));
    match unknown {
        Some(field) => Err(DriverError::InvalidConfig(format!(
            "unknown field {field:?}"
        ))),
        None => Ok(()),
    }
}

/// The task's `script`.
fn script(config: &Value) -> Result<&str, DriverError> {
    refuse_unknown(config, &["script"])?;
    config["script"]
        .as_str()
        .ok_or_else(|| DriverError::InvalidConfig("\"script\" is required".into()))
}

impl Driver for ShellDriver {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: "shell".into(),
            plugin_version: env!("CARGO_PKG_VERSION").into(),
            api_version: DRIVER_API_VERSION.into(),
        }
    }
    fn set_config(&self, config: &Value) -> Result<(), DriverError> {
        refuse_unknown(config, &[])
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: false,
            exec: false,
            fs_isolation: FsIsolation::None,
            network_isolation: false,
            group_network: false,
            mount_configs: false,
        }
    }
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            health: HealthState::Healthy,
            health_description: "Healthy".into(),
            attributes: [("driver.shell".to_string(), "1".to_string())].into(),
        }
    }
    fn validate_task_config(&self, config: &Value) -> Result<(), DriverError> {
        script(config).map(drop)
    }
    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let mut sh = Command::new("/bin/sh");
        sh.arg("-c").arg(script(&config.driver_config)?);
        let handle = self.tasks.start("shell", config, sh)?;
        let pid = self.tasks.pid(&config.id)?;
        events::emit(events::TaskEvent::for_task(
            config,
            format!("started as host process {pid}"),
        ));
        Ok(handle)
    }
    fn wait_task(&self, id: &str, timeout: Duration) -> Result<Option<ExitResult>, DriverError> {
        self.tasks.wait(id, timeout)
    }
    fn stop_task(&self, id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        self.tasks.stop(id, timeout, signal)
    }
    fn destroy_task(&self, id: &str, force: bool) -> Result<(), DriverError> {
        self.tasks.destroy(id, force)
    }
    fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
        self.tasks.inspect(id)
    }
    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        self.tasks.recover(handle)
    }
}

drover_plugin_sdk::export_driver!(ShellDriver::default);
