//! `SidecarDriver`: the skeleton driver with what this build adds, to show the parts of the
//! protocol a cdylib does not reach: exec (`exec_task`, and `exec_task_streaming`, which the SDK
//! serves as Nomad's streaming exec). Everything else is the skeleton's, unchanged, including the task event it
//! emits on start (which the sidecar streams as Nomad's `TaskEvents`).

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use drover_plugin_sdk::{
    Capabilities, Driver, DriverError, ExecOptions, ExecOutput, ExecStream, ExitResult,
    Fingerprint, PluginInfo, TaskConfig, TaskHandle, TaskResourceUsage, TaskStatus,
};
use skeleton_driver::SkeletonDriver;

/// How often an exec checks whether its command ended.
const EXEC_POLL: Duration = Duration::from_millis(10);

pub struct SidecarDriver {
    inner: SkeletonDriver,
    /// The config of every task this driver manages, to exec in its directory and environment.
    tasks: Mutex<HashMap<String, TaskConfig>>,
}

impl SidecarDriver {
    pub fn named(name: &str) -> SidecarDriver {
        SidecarDriver {
            inner: SkeletonDriver::named(name),
            tasks: Mutex::default(),
        }
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, TaskConfig>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<Vec<u8>>> {
    pipe.map(|mut pipe| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            // A read error only ends the capture; what arrived is still reported.
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    })
}

fn collect(reader: Option<JoinHandle<Vec<u8>>>) -> Vec<u8> {
    reader.and_then(|r| r.join().ok()).unwrap_or_default()
}

/// Runs `command` as the task runs: a host process in its directory with its environment.
fn exec_in(
    config: &TaskConfig,
    command: &[String],
    timeout: Duration,
) -> Result<ExecOutput, DriverError> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| DriverError::InvalidConfig("exec needs a command".into()))?;
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(config.env.iter())
        .current_dir(&config.task_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| DriverError::Other(format!("starting {program}: {e}")))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now().checked_add(timeout);
    let status = loop {
        if let Some(status) = child.try_wait().map_err(DriverError::other)? {
            break status;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(DriverError::Other(format!(
                "exec of {program} timed out after {timeout:?}"
            )));
        }
        std::thread::sleep(EXEC_POLL);
    };
    Ok(ExecOutput {
        stdout: collect(stdout),
        stderr: collect(stderr),
        // A command ended by a signal reports 128 + the signal, as a shell does.
        exit_code: status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
    })
}

impl Driver for SidecarDriver {
    fn plugin_info(&self) -> PluginInfo {
        self.inner.plugin_info()
    }

    fn set_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        self.inner.set_config(config)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            exec: true,
            ..self.inner.capabilities()
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        self.inner.fingerprint()
    }

    fn validate_task_config(&self, config: &serde_json::Value) -> Result<(), DriverError> {
        self.inner.validate_task_config(config)
    }

    /// Starts the task (the skeleton reports its pid as a task event, which the sidecar
    /// streams to the agent).
    fn start_task(&self, config: &TaskConfig) -> Result<TaskHandle, DriverError> {
        let handle = self.inner.start_task(config)?;
        self.tasks().insert(config.id.clone(), config.clone());
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
        self.inner.destroy_task(task_id, force)?;
        self.tasks().remove(task_id);
        Ok(())
    }

    fn inspect_task(&self, task_id: &str) -> Result<TaskStatus, DriverError> {
        self.inner.inspect_task(task_id)
    }

    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        self.inner.recover_task(handle)?;
        self.tasks()
            .insert(handle.config.id.clone(), handle.config.clone());
        Ok(())
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
        let config = self
            .tasks()
            .get(task_id)
            .cloned()
            .ok_or_else(|| DriverError::TaskNotFound(task_id.to_string()))?;
        exec_in(&config, command, timeout)
    }

    /// Interactive exec over pipes (see `exec_stream`).
    fn exec_task_streaming(
        &self,
        task_id: &str,
        options: &ExecOptions,
        stream: &dyn ExecStream,
    ) -> Result<ExitResult, DriverError> {
        let config = self
            .tasks()
            .get(task_id)
            .cloned()
            .ok_or_else(|| DriverError::TaskNotFound(task_id.to_string()))?;
        crate::exec_stream::exec_streaming_in(&config, options, stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn config(dir: &std::path::Path) -> TaskConfig {
        TaskConfig {
            id: "a/t/1".into(),
            name: "t".into(),
            alloc_id: "a".into(),
            job_name: "j".into(),
            group_name: "g".into(),
            env: std::sync::Arc::new([("GREETING".to_string(), "hi".to_string())].into()),
            driver_config: serde_json::json!({}),
            resources: Default::default(),
            user: String::new(),
            alloc_dir: dir.to_path_buf(),
            task_dir: dir.to_path_buf(),
            stdout_path: PathBuf::new(),
            stderr_path: PathBuf::new(),
            ..Default::default()
        }
    }

    #[test]
    fn exec_runs_in_the_tasks_directory_and_environment_and_reports_both_streams() {
        let dir = std::env::temp_dir();
        let sh = |script: &str| vec!["/bin/sh".to_string(), "-c".into(), script.into()];
        let out = exec_in(
            &config(&dir),
            &sh("echo $GREETING; pwd; echo oops >&2; exit 3"),
            Duration::from_secs(10),
        )
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines();
        assert_eq!(lines.next(), Some("hi"));
        assert_eq!(
            std::fs::canonicalize(lines.next().unwrap()).unwrap(),
            std::fs::canonicalize(&dir).unwrap()
        );
        assert_eq!(out.stderr, b"oops\n");
        assert_eq!(out.exit_code, 3);
    }

    #[test]
    fn exec_past_its_timeout_is_killed_and_an_error() {
        let e = exec_in(
            &config(&std::env::temp_dir()),
            &["/bin/sleep".to_string(), "30".into()],
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(e.to_string().contains("timed out"), "{e}");
    }

    #[test]
    fn exec_in_an_unknown_task_is_task_not_found() {
        let d = SidecarDriver::named("x");
        assert_eq!(
            d.exec_task("nope", &["/bin/true".to_string()], Duration::from_secs(1)),
            Err(DriverError::TaskNotFound("nope".into()))
        );
        assert!(d.capabilities().exec);
    }
}
