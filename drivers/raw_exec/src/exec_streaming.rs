//! `exec_task_streaming`: an interactive command in a task's context (its environment,
//! directory and user) on the host, with a new terminal when asked, for `alloc exec`.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use drover_abi::{DriverError, ExecOptions, ExecStream, ExitResult, TaskConfig};

use crate::lookup::resolve_command;
use crate::shared::exec_stream::{ChildStdio, become_session_leader, exec_stdio, relay};
use crate::shared::user::{resolve_user, switch_user};
use crate::shared::watch::ProcessWatch;

/// Runs `options.command` as the task would run and relays it to `stream` until it exits.
pub fn exec_streaming(
    config: &TaskConfig,
    options: &ExecOptions,
    stream: &dyn ExecStream,
) -> Result<ExitResult, DriverError> {
    let (program, args) = options.command.split_first().ok_or_else(|| {
        DriverError::InvalidConfig("exec command must name a program".to_string())
    })?;
    let run_as = resolve_user(&config.user).map_err(DriverError::other)?;
    let env_path = config.env.get("PATH").map(String::as_str);
    let program =
        resolve_command(&config.task_dir, program, env_path).map_err(DriverError::other)?;
    let (io, child) = exec_stdio(options.tty)
        .map_err(|e| DriverError::Other(format!("setting up the exec's stdio: {e}")))?;
    let ChildStdio {
        stdin,
        stdout,
        stderr,
        tty,
    } = child;
    let mut command = Command::new(&program);
    command
        .args(args)
        .env_clear()
        .envs(config.env.iter())
        .current_dir(&config.task_dir)
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    let netns = crate::shared::netns::open(config).map_err(DriverError::other)?;
    let netns_fd = crate::spawn::netns_fd(&netns);
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe syscalls
    // (setns, setsid, ioctl, setgroups, setgid, setuid) on data prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            crate::spawn::enter_netns(netns_fd)?;
            become_session_leader(tty).map_err(|()| io::Error::last_os_error())?;
            if let Some(run_as) = &run_as {
                switch_user(run_as).map_err(io::Error::from_raw_os_error)?;
            }
            Ok(())
        });
    }
    let child = command
        .spawn()
        .map_err(|e| DriverError::Other(format!("starting {}: {e}", program.display())))?;
    // The command's ends of its stdio went with `command`; ours are in `io`.
    drop(command);
    let pid = i32::try_from(child.id()).map_err(DriverError::other)?;
    drop(child);
    let watch = ProcessWatch::child(pid, None).map_err(|e| {
        // SAFETY: plain syscalls on the child we just spawned and have not reaped.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        DriverError::other(e)
    })?;
    relay(io, &watch, stream)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use drover_abi::{ChannelExecStream, Driver, ExecInput, TerminalSize};
    use serde_json::json;

    use crate::RawExecDriver;
    use crate::shared::testutil::{TaskDirs, run_exec};

    fn running_task(dirs: &TaskDirs) -> (RawExecDriver, String) {
        let driver = RawExecDriver::new();
        driver.set_config(&json!({"enabled": true})).unwrap();
        let config = dirs.config("web", json!({"command": "sleep", "args": ["60"]}));
        driver.start_task(&config).unwrap();
        (driver, config.id)
    }

    fn stdin(text: &str) -> ExecInput {
        ExecInput::Stdin(text.as_bytes().to_vec())
    }

    #[test]
    fn a_command_without_a_tty_gets_the_tasks_env_and_dir_and_separate_outputs() {
        let dirs = TaskDirs::new("raw-exec-pipes");
        let (driver, id) = running_task(&dirs);
        let script = "read line; echo got-$line in $(pwd) $DROVER_TEST; echo oops >&2; exit 4";
        let run = run_exec(
            &driver,
            &id,
            &["/bin/sh", "-c", script],
            false,
            vec![stdin("x\n")],
        );
        assert_eq!(run.result.unwrap().exit_code, 4);
        let dir = dirs.task_dir.canonicalize().unwrap();
        assert_eq!(run.stdout, format!("got-x in {} yes\n", dir.display()));
        assert_eq!(run.stderr, "oops\n");
        driver.destroy_task(&id, true).unwrap();
    }

    #[test]
    fn closing_stdin_ends_the_commands_input() {
        let dirs = TaskDirs::new("raw-exec-eof");
        let (driver, id) = running_task(&dirs);
        let run = run_exec(
            &driver,
            &id,
            &["cat"],
            false,
            vec![stdin("abc"), ExecInput::CloseStdin],
        );
        assert_eq!(run.result.unwrap().exit_code, 0);
        assert_eq!(run.stdout, "abc");
        // On a terminal, the end of file is the terminal's ^D.
        let run = run_exec(
            &driver,
            &id,
            &["cat"],
            true,
            vec![stdin("abc\n"), ExecInput::CloseStdin],
        );
        assert_eq!(run.result.unwrap().exit_code, 0);
        assert!(run.stdout.contains("abc"), "{:?}", run.stdout);
        driver.destroy_task(&id, true).unwrap();
    }

    #[test]
    fn a_shell_on_a_tty_runs_what_it_reads_and_exits_with_its_code() {
        let dirs = TaskDirs::new("raw-exec-tty");
        let (driver, id) = running_task(&dirs);
        let run = run_exec(
            &driver,
            &id,
            &["/bin/sh"],
            true,
            vec![
                ExecInput::Resize(TerminalSize {
                    height: 30,
                    width: 100,
                }),
                stdin("echo hello-$((1+2)); stty size; test -t 0 && echo on-a-tty\nexit 3\n"),
            ],
        );
        assert_eq!(run.result.unwrap().exit_code, 3);
        assert!(run.stdout.contains("hello-3"), "{:?}", run.stdout);
        assert!(run.stdout.contains("30 100"), "{:?}", run.stdout);
        assert!(run.stdout.contains("on-a-tty"), "{:?}", run.stdout);
        assert!(
            run.stderr.is_empty(),
            "a terminal merges stderr: {:?}",
            run.stderr
        );
        driver.destroy_task(&id, true).unwrap();
    }

    #[test]
    fn a_caller_that_leaves_gets_its_command_killed() {
        let dirs = TaskDirs::new("raw-exec-gone");
        let (driver, id) = running_task(&dirs);
        let (stream, caller) = ChannelExecStream::new();
        let options = drover_abi::ExecOptions {
            command: vec!["sleep".into(), "300".into()],
            tty: true,
        };
        let started = Instant::now();
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                drop(caller);
            });
            let e = driver
                .exec_task_streaming(&id, &options, &stream)
                .unwrap_err();
            assert!(e.to_string().contains("went away"), "{e}");
        });
        assert!(started.elapsed() < Duration::from_secs(10));
        driver.destroy_task(&id, true).unwrap();
    }

    #[test]
    fn exec_into_an_unknown_task_or_without_a_command_is_refused() {
        let dirs = TaskDirs::new("raw-exec-refused");
        let (driver, id) = running_task(&dirs);
        let run = run_exec(&driver, "nope", &["sh"], false, vec![]);
        assert!(matches!(
            run.result,
            Err(drover_abi::DriverError::TaskNotFound(_))
        ));
        let run = run_exec(&driver, &id, &[], false, vec![]);
        assert!(matches!(
            run.result,
            Err(drover_abi::DriverError::InvalidConfig(_))
        ));
        driver.destroy_task(&id, true).unwrap();
    }
}
