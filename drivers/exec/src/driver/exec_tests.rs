//! `exec_task_streaming` of the exec driver: the command runs inside the task.

use drover_abi::{ExecInput, TerminalSize};
use serde_json::json;

use super::*;
use crate::shared::testutil::{TaskDirs, run_exec};

/// A running task that wrote a marker into its root and sleeps.
fn running_task(dirs: &TaskDirs, name: &str) -> (ExecDriver, TaskConfig) {
    let driver = ExecDriver::new();
    let script = "echo inside > /local/marker; exec sleep 120";
    let mut config = dirs.config(name, json!({"command": "/bin/sh", "args": ["-c", script]}));
    let local = dirs.task_dir.join("local").display().to_string();
    std::sync::Arc::make_mut(&mut config.env).insert("NOMAD_TASK_DIR".into(), local);
    driver.start_task(&config).unwrap();
    let marker = dirs.task_dir.join("local/marker");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !marker.exists() {
        assert!(std::time::Instant::now() < deadline, "the task never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    (driver, config)
}

#[test]
fn exec_runs_inside_the_tasks_namespaces_root_user_and_cgroup() {
    let dirs = TaskDirs::new("exec-into");
    let (driver, config) = running_task(&dirs, "into");
    let script = "cat /local/marker; hostname; echo pid=$$; tr '\\0' ' ' < /proc/1/cmdline; echo; \
                  id -u; pwd; echo task-dir=$NOMAD_TASK_DIR; cat /proc/self/cgroup";
    let run = run_exec(&driver, &config.id, &["sh", "-c", script], false, vec![]);
    let exit = run.result.unwrap();
    assert_eq!(exit.exit_code, 0, "{}{}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines[0], "inside", "{}", run.stdout);
    assert_eq!(lines[1], "into", "the task's hostname: {}", run.stdout);
    let pid: u32 = lines[2].strip_prefix("pid=").unwrap().parse().unwrap();
    assert!(
        pid > 1 && pid < 100,
        "a pid of the task's namespace: {}",
        run.stdout
    );
    assert_eq!(
        lines[3].trim(),
        "sleep 120",
        "the task is PID 1: {}",
        run.stdout
    );
    assert_eq!(lines[4], "65534", "nobody, as the task: {}", run.stdout);
    assert_eq!(lines[5], "/");
    // The environment carries Nomad's in-task paths, as the task's does.
    assert_eq!(lines[6], "task-dir=/local", "{}", run.stdout);
    let task_pid = driver.task(&config.id).unwrap().watch.pid();
    let task_cgroup = std::fs::read_to_string(format!("/proc/{task_pid}/cgroup")).unwrap();
    assert_eq!(
        lines[7..].join("\n"),
        task_cgroup.trim_end(),
        "{}",
        run.stdout
    );
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn a_shell_on_a_tty_inside_the_task_exits_with_its_code() {
    let dirs = TaskDirs::new("exec-into-tty");
    let (driver, config) = running_task(&dirs, "tty");
    let run = run_exec(
        &driver,
        &config.id,
        &["/bin/sh"],
        true,
        vec![
            ExecInput::Resize(TerminalSize {
                height: 40,
                width: 120,
            }),
            ExecInput::Stdin(b"echo hello-$((1+2)); stty size\nexit 3\n".to_vec()),
        ],
    );
    assert_eq!(run.result.unwrap().exit_code, 3, "{}", run.stdout);
    assert!(run.stdout.contains("hello-3"), "{:?}", run.stdout);
    assert!(run.stdout.contains("40 120"), "{:?}", run.stdout);
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn a_missing_command_is_reported_and_an_exited_task_refuses_exec() {
    let dirs = TaskDirs::new("exec-into-missing");
    let (driver, config) = running_task(&dirs, "missing");
    let run = run_exec(&driver, &config.id, &["no-such-program"], false, vec![]);
    let e = run.result.unwrap_err().to_string();
    assert!(
        e.contains("executing the command") && e.contains("ENOENT"),
        "{e}"
    );
    driver.stop_task(&config.id, Duration::ZERO, "").unwrap();
    let run = run_exec(&driver, &config.id, &["sh"], false, vec![]);
    assert!(
        run.result.unwrap_err().to_string().contains("not running"),
        "an exited task"
    );
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn a_one_shot_exec_runs_inside_the_task_and_times_out() {
    let dirs = TaskDirs::new("exec-into-once");
    let (driver, config) = running_task(&dirs, "once");
    let command = ["sh", "-c", "cat /local/marker; echo e >&2; exit 5"].map(String::from);
    let out = driver
        .exec_task(&config.id, &command, Duration::from_secs(10))
        .unwrap();
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice(), out.exit_code),
        (&b"inside\n"[..], &b"e\n"[..], 5)
    );
    let slow = ["sleep", "30"].map(String::from);
    let started = std::time::Instant::now();
    let e = driver
        .exec_task(&config.id, &slow, Duration::from_millis(300))
        .unwrap_err();
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn the_exec_driver_says_it_can_exec() {
    assert!(ExecDriver::new().capabilities().exec);
}
