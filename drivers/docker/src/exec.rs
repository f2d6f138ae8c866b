//! `exec_task`: a one-off command inside a task's running container, with its output.

use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use drover_abi::ExecOutput;
use futures_util::StreamExt;

use crate::daemon::message_of;

/// The daemon may report an exec as running shortly after its output ended.
const EXIT_CODE_WAIT: Duration = Duration::from_secs(3);

/// Runs `command` in the container and collects what it writes. Errors are plain messages.
pub async fn exec_in_container(
    docker: &Docker,
    container_id: &str,
    command: Vec<String>,
) -> Result<ExecOutput, String> {
    let created = docker
        .create_exec(
            container_id,
            CreateExecOptions::<String> {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(command),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("failed to create exec: {}", message_of(&e)))?;
    let started = docker
        .start_exec(&created.id, Some(StartExecOptions::default()))
        .await
        .map_err(|e| format!("failed to start exec: {}", message_of(&e)))?;
    let mut out = ExecOutput::default();
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(item) = output.next().await {
            match item.map_err(|e| format!("reading exec output: {}", message_of(&e)))? {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    out.stdout.extend_from_slice(&message)
                }
                LogOutput::StdErr { message } => out.stderr.extend_from_slice(&message),
                LogOutput::StdIn { .. } => {}
            }
        }
    }
    let deadline = Instant::now() + EXIT_CODE_WAIT;
    loop {
        let inspected = docker
            .inspect_exec(&created.id)
            .await
            .map_err(|e| format!("failed to inspect exec: {}", message_of(&e)))?;
        if !inspected.running.unwrap_or(false) {
            out.exit_code = i32::try_from(inspected.exit_code.unwrap_or(-1)).unwrap_or(-1);
            return Ok(out);
        }
        if Instant::now() > deadline {
            return Err("failed to retrieve the exec's exit code".to_string());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
