//! `exec_task`: running a one-off command in a task's context (its environment, directory and
//! user), for script checks and `alloc exec`.

use std::io::Read;
use std::process::{ChildStderr, ChildStdout, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use drover_abi::{DriverError, ExecOutput, TaskConfig};

use crate::lookup::resolve_command;
use crate::shared::user::resolve_user;
use crate::shared::watch::ProcessWatch;
use crate::spawn::{SpawnSpec, spawn};

fn drain<R: Read + Send + 'static>(mut pipe: R) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        // A read error just ends the capture; what arrived so far is still reported.
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

fn collect(reader: Option<JoinHandle<Vec<u8>>>) -> Vec<u8> {
    reader.and_then(|r| r.join().ok()).unwrap_or_default()
}

/// Runs `command` (program and arguments) as the task would run, capturing its output. After
/// `timeout` the command's process group is killed and an error returned.
pub fn exec_in_task(
    config: &TaskConfig,
    command: &[String],
    timeout: Duration,
) -> Result<ExecOutput, DriverError> {
    let (program, args) = command.split_first().ok_or_else(|| {
        DriverError::InvalidConfig("exec command must name a program".to_string())
    })?;
    let run_as = resolve_user(&config.user).map_err(DriverError::other)?;
    let env_path = config.env.get("PATH").map(String::as_str);
    let program =
        resolve_command(&config.task_dir, program, env_path).map_err(DriverError::other)?;
    let netns = crate::shared::netns::open(config).map_err(DriverError::other)?;
    let mut child = spawn(SpawnSpec {
        program: &program,
        args,
        env: &config.env,
        cwd: &config.task_dir,
        run_as,
        stdout: Stdio::piped(),
        stderr: Stdio::piped(),
        netns_fd: crate::spawn::netns_fd(&netns),
    })
    .map_err(|e| DriverError::Other(format!("starting {}: {e}", program.display())))?;
    let stdout = child.stdout.take().map(drain::<ChildStdout>);
    let stderr = child.stderr.take().map(drain::<ChildStderr>);
    let pid = i32::try_from(child.id()).map_err(DriverError::other)?;
    drop(child);
    let watch = ProcessWatch::child(pid, None).map_err(DriverError::other)?;
    let finished = watch.wait(timeout);
    // Kill whatever is left in the command's group (everything, on timeout) so the output pipes
    // close and the readers finish.
    let stopped = watch.stop(Duration::ZERO, libc::SIGKILL);
    watch.reap();
    let exit = stopped.map_err(DriverError::other)?;
    let (stdout, stderr) = (collect(stdout), collect(stderr));
    if finished.is_none() {
        return Err(DriverError::Other(format!(
            "exec of {} timed out after {timeout:?}",
            program.display()
        )));
    }
    Ok(ExecOutput {
        stdout,
        stderr,
        exit_code: exit.exit_code,
    })
}
