//! Interactive exec (`exec_task_streaming`) the simple way: a host process with pipes, stdin
//! written as it arrives, both outputs sent as they come, the exit at the end. A caller that
//! goes away gets the command killed. No terminal: this example has no pty, so with `tty` the
//! command still runs on pipes (its stderr stays apart).

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use drover_plugin_sdk::{
    DriverError, ExecInput, ExecOptions, ExecRecv, ExecStream, ExecStreamOutput, ExitResult,
    TaskConfig,
};

/// How long the input pump waits for the caller before checking whether the command ended.
const INPUT_POLL: Duration = Duration::from_millis(100);

fn pump_output(
    mut pipe: impl Read,
    stream: &dyn ExecStream,
    wrap: fn(Vec<u8>) -> ExecStreamOutput,
    gone: &AtomicBool,
) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = pipe.read(&mut buf) {
        if n == 0 {
            return;
        }
        if stream.send(wrap(buf[..n].to_vec())).is_err() {
            gone.store(true, Ordering::Relaxed);
            return;
        }
    }
}

fn pump_input(
    mut stdin: Option<ChildStdin>,
    stream: &dyn ExecStream,
    ended: &AtomicBool,
    gone: &AtomicBool,
) {
    while !ended.load(Ordering::Relaxed) && !gone.load(Ordering::Relaxed) {
        match stream.recv(INPUT_POLL) {
            ExecRecv::Input(ExecInput::Stdin(data)) => {
                // A command that stopped reading drops the rest.
                if let Some(pipe) = stdin.as_mut()
                    && pipe.write_all(&data).and_then(|()| pipe.flush()).is_err()
                {
                    stdin = None;
                }
            }
            ExecRecv::Input(ExecInput::CloseStdin) => stdin = None,
            ExecRecv::Input(ExecInput::Resize(_)) | ExecRecv::Timeout => {}
            ExecRecv::Gone => {
                gone.store(true, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// Runs `options.command` as the task runs (its directory and environment), relayed to
/// `stream` until it exits.
pub fn exec_streaming_in(
    config: &TaskConfig,
    options: &ExecOptions,
    stream: &dyn ExecStream,
) -> Result<ExitResult, DriverError> {
    let (program, args) = options
        .command
        .split_first()
        .ok_or_else(|| DriverError::InvalidConfig("exec needs a command".into()))?;
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(config.env.iter())
        .current_dir(&config.task_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| DriverError::Other(format!("starting {program}: {e}")))?;
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let ended = AtomicBool::new(false);
    let gone = AtomicBool::new(false);
    let status = std::thread::scope(|scope| {
        scope.spawn(|| pump_input(stdin, stream, &ended, &gone));
        if let Some(out) = stdout {
            scope.spawn(|| pump_output(out, stream, ExecStreamOutput::Stdout, &gone));
        }
        if let Some(err) = stderr {
            scope.spawn(|| pump_output(err, stream, ExecStreamOutput::Stderr, &gone));
        }
        let status = loop {
            if gone.load(Ordering::Relaxed) {
                let _ = child.kill();
            }
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => break Err(DriverError::other(e)),
            }
        };
        ended.store(true, Ordering::Relaxed);
        status
    })?;
    if gone.load(Ordering::Relaxed) {
        return Err(DriverError::Other("the exec caller went away".into()));
    }
    Ok(ExitResult {
        // A command ended by a signal reports 128 + the signal, as a shell does.
        exit_code: status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        ..Default::default()
    })
}
