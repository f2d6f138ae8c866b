//! The `connect_proxy` driver: what Connect sidecar tasks run on, built in and always on. It
//! runs the agent's own binary as Drover's proxy (`drover connect proxy -config
//! <secrets>/mesh-proxy.json`) with raw_exec's process supervision, whatever the task's config
//! says (it takes none), so a node runs mesh sidecars without raw_exec being enabled for every
//! job, and a job cannot make it run anything else.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use drover_abi::{
    Capabilities, Driver, DriverError, DriverTaskEvent, ExecOptions, ExecOutput, ExecStream,
    ExitResult, Fingerprint, HealthState, PluginInfo, TaskConfig, TaskHandle, TaskResourceUsage,
    TaskStatus,
};
use drover_driver_raw_exec::RawExecDriver;

pub const DRIVER_NAME: &str = "connect_proxy";

pub struct ConnectProxyDriver {
    inner: RawExecDriver,
    binary: PathBuf,
}

impl ConnectProxyDriver {
    /// `None` when the agent cannot name its own program (then no node offers the driver).
    pub fn new() -> Option<Arc<ConnectProxyDriver>> {
        let binary = std::env::current_exe().ok()?;
        let inner = RawExecDriver::new();
        inner
            .set_config(&serde_json::json!({"enabled": true}))
            .ok()?;
        Some(Arc::new(ConnectProxyDriver { inner, binary }))
    }
}

impl Driver for ConnectProxyDriver {
    fn plugin_info(&self) -> PluginInfo {
        PluginInfo {
            name: DRIVER_NAME.into(),
            ..self.inner.plugin_info()
        }
    }

    fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        match config.as_object() {
            Some(o) if !o.is_empty() => Err(DriverError::InvalidConfig(format!(
                "the {DRIVER_NAME} driver takes no plugin config"
            ))),
            _ => Ok(()),
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            health: HealthState::Healthy,
            health_description: "Healthy".into(),
            attributes: [(format!("driver.{DRIVER_NAME}"), "1".to_string())].into(),
        }
    }

    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        match config.as_object() {
            Some(o) if !o.is_empty() => Err(DriverError::InvalidConfig(format!(
                "the {DRIVER_NAME} driver takes no config (it always runs Drover's proxy)"
            ))),
            _ => Ok(()),
        }
    }

    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let mut config = config.clone();
        let secrets = config
            .env
            .get("NOMAD_SECRETS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| config.task_dir.join("secrets"));
        config.driver_config = serde_json::json!({
            "command": self.binary,
            "args": [
                "connect", "proxy", "-config",
                drover_mesh::proxy::config_path(&secrets),
            ],
        });
        let mut handle = self.inner.start_task(&config)?;
        handle.driver = DRIVER_NAME.into();
        Ok(handle)
    }

    fn wait_task(
        &self,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Option<ExitResult>, DriverError> {
        self.inner.wait_task(task_id, timeout)
    }

    fn stop_task(&self, task_id: &str, timeout: Duration, signal: &str) -> Result<(), DriverError> {
        self.inner.stop_task(task_id, timeout, signal)
    }

    fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        self.inner.destroy_task(task_id, force)
    }

    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError> {
        self.inner.inspect_task(task_id)
    }

    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        self.inner.recover_task(handle)
    }

    fn signal_task(&self, task_id: &str, signal: &str) -> Result<(), DriverError> {
        self.inner.signal_task(task_id, signal)
    }

    fn task_stats(&self, task_id: &str) -> Result<TaskResourceUsage, DriverError> {
        self.inner.task_stats(task_id)
    }

    fn exec_task(
        &self,
        task_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, DriverError> {
        self.inner.exec_task(task_id, command, timeout)
    }

    fn notify_exit(&self, task_id: &str, notify: Box<dyn FnOnce() + Send>) -> bool {
        self.inner.notify_exit(task_id, notify)
    }

    fn exec_task_streaming(
        &self,
        task_id: &str,
        options: &ExecOptions,
        stream: &dyn ExecStream,
    ) -> Result<ExitResult, DriverError> {
        self.inner.exec_task_streaming(task_id, options, stream)
    }

    fn task_events(&self, max_wait: Duration) -> Result<Vec<DriverTaskEvent>, DriverError> {
        self.inner.task_events(max_wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_always_on_and_takes_no_config() {
        let d = ConnectProxyDriver::new().expect("the driver");
        assert_eq!(d.plugin_info().name, DRIVER_NAME);
        assert_eq!(d.fingerprint().health, HealthState::Healthy);
        assert!(d.validate_task_config(&serde_json::json!({})).is_ok());
        let e = d
            .validate_task_config(&serde_json::json!({"command": "/bin/sh"}))
            .unwrap_err();
        assert!(e.to_string().contains("takes no config"), "{e}");
        assert!(d.capabilities().group_network);
    }
}
