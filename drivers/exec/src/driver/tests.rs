use std::path::PathBuf;
use std::time::Instant;

use drover_abi::TaskResources;
use serde_json::json;

use super::*;
use crate::shared::testutil::TaskDirs;
use crate::shared::watch::UNKNOWN_EXIT_STATUS;

const LONG: Duration = Duration::from_secs(20);
const MIB: u64 = 1024 * 1024;

fn sh(script: &str) -> serde_json::Value {
    json!({"command": "/bin/sh", "args": ["-c", script]})
}

fn state_of(handle: &TaskHandle) -> ProcessState {
    serde_json::from_value(handle.state.clone()).unwrap()
}

/// Runs `config` to completion and returns its stdout and exit result.
fn run(driver: &ExecDriver, dirs: &TaskDirs, config: &TaskConfig) -> (String, ExitResult) {
    let out = dirs.stdout_reader();
    driver.start_task(config).unwrap();
    let text = out.read_until_writers_close();
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    driver.destroy_task(&config.id, false).unwrap();
    (text, exit)
}

#[test]
fn fingerprint_is_healthy_as_root_with_namespaces_and_cgroups() {
    let fp = ExecDriver::new().fingerprint();
    assert_eq!(fp.health, HealthState::Healthy, "{}", fp.health_description);
    assert_eq!(fp.attributes.get("driver.exec"), Some(&"1".to_string()));
}

#[test]
fn validate_names_the_bad_field() {
    let driver = ExecDriver::new();
    assert_eq!(
        driver.validate_task_config(&json!({})),
        Err(DriverError::InvalidConfig(
            "missing required field \"command\"".into()
        ))
    );
    assert_eq!(
        driver.validate_task_config(&json!({"command": "x", "args": "y"})),
        Err(DriverError::InvalidConfig(
            "field \"args\" must be a list of strings".into()
        ))
    );
}

#[test]
fn task_is_pid_one_of_its_namespace() {
    let dirs = TaskDirs::new("exec-pid1");
    let driver = ExecDriver::new();
    let (out, exit) = run(&driver, &dirs, &dirs.config("pid1", sh("echo $$")));
    assert_eq!(out, "1\n");
    assert!(exit.successful(), "{exit:?}");
}

#[test]
fn proc_inside_lists_only_the_task() {
    let dirs = TaskDirs::new("exec-proc");
    let driver = ExecDriver::new();
    // The glob is expanded by the shell itself, so no other process exists while it runs.
    let (out, _) = run(
        &driver,
        &dirs,
        &dirs.config("proc", sh("echo /proc/[0-9]*")),
    );
    assert_eq!(out, "/proc/1\n");
    // The fresh /proc stayed inside the task's mount namespace.
    assert!(PathBuf::from(format!("/proc/{}", std::process::id())).exists());
}

#[test]
fn hostname_is_the_task_name() {
    let dirs = TaskDirs::new("exec-uts");
    let driver = ExecDriver::new();
    let config = dirs.config(
        "web-frontend",
        json!({"command": "cat", "args": ["/proc/sys/kernel/hostname"]}),
    );
    let (out, _) = run(&driver, &dirs, &config);
    assert_eq!(out, "web-frontend\n");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_ne!(host, "web-frontend\n", "the host's hostname is untouched");
}

#[test]
fn task_sees_exactly_its_env_and_runs_in_its_task_dir() {
    let dirs = TaskDirs::new("exec-env");
    let driver = ExecDriver::new();
    let (out, _) = run(
        &driver,
        &dirs,
        &dirs.config("env", json!({"command": "env"})),
    );
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["DROVER_TEST=yes", "PATH=/usr/bin:/bin"]);

    let (out, _) = run(&driver, &dirs, &dirs.config("cwd", sh("pwd -P")));
    assert_eq!(
        out.trim_end(),
        dirs.task_dir.canonicalize().unwrap().to_str().unwrap()
    );
}

#[test]
fn stderr_and_exit_code_are_reported() {
    let dirs = TaskDirs::new("exec-exit");
    let driver = ExecDriver::new();
    let err = dirs.stderr_reader();
    let config = dirs.config("exit", sh("echo oops >&2; exit 9"));
    driver.start_task(&config).unwrap();
    assert_eq!(err.read_until_writers_close(), "oops\n");
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    assert_eq!(
        (exit.exit_code, exit.signal, exit.oom_killed),
        (9, 0, false)
    );
    assert_eq!(
        driver.wait_task(&config.id, Duration::ZERO).unwrap(),
        Some(exit)
    );
    assert_eq!(
        driver.inspect_task(&config.id).unwrap().state,
        TaskState::Exited
    );
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn memory_limit_is_written_to_the_task_cgroup_and_removed_on_destroy() {
    let dirs = TaskDirs::new("exec-memory");
    let driver = ExecDriver::new();
    let mut config = dirs.config("mem", json!({"command": "sleep", "args": ["30"]}));
    config.resources = TaskResources {
        cpu_mhz: 250,
        cores: 0,
        memory_mb: 48,
        memory_max_mb: 0,
    };
    let handle = driver.start_task(&config).unwrap();
    let state = state_of(&handle);
    let cgroup = TaskCgroup::from_dirs(state.cgroups.clone());
    let limit = std::fs::read_to_string(cgroup.memory_limit_file().unwrap()).unwrap();
    assert_eq!(limit.trim(), (48 * MIB).to_string());
    for procs in cgroup.procs_files() {
        let members = std::fs::read_to_string(&procs).unwrap();
        assert!(
            members.lines().any(|p| p == state.pid.to_string()),
            "{} lacks {}",
            procs.display(),
            state.pid
        );
    }
    driver.destroy_task(&config.id, true).unwrap();
    assert!(state.cgroups.iter().all(|d| !d.exists()));
}

#[test]
fn memory_max_is_the_hard_limit_when_oversubscribed() {
    let dirs = TaskDirs::new("exec-memmax");
    let driver = ExecDriver::new();
    let mut config = dirs.config("memmax", json!({"command": "sleep", "args": ["30"]}));
    config.resources.memory_mb = 32;
    config.resources.memory_max_mb = 96;
    let handle = driver.start_task(&config).unwrap();
    let cgroup = TaskCgroup::from_dirs(state_of(&handle).cgroups);
    let limit = std::fs::read_to_string(cgroup.memory_limit_file().unwrap()).unwrap();
    assert_eq!(limit.trim(), (96 * MIB).to_string());
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn exceeding_the_memory_limit_is_reported_as_oom_kill() {
    let dirs = TaskDirs::new("exec-oom");
    let driver = ExecDriver::new();
    // dd allocates one 256 MiB block and fills it, far beyond the 16 MiB limit.
    let mut config = dirs.config(
        "oom",
        json!({"command": "dd", "args": ["if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"]}),
    );
    config.resources.memory_mb = 16;
    driver.start_task(&config).unwrap();
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    assert!(exit.oom_killed, "{exit:?}");
    assert_eq!(exit.signal, libc::SIGKILL);
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn handled_stop_signal_reaches_the_pid_one_task() {
    let dirs = TaskDirs::new("exec-trap");
    let driver = ExecDriver::new();
    let mut out = dirs.stdout_reader();
    let config = dirs.config(
        "trap",
        sh("trap 'exit 5' TERM; echo ready; while true; do sleep 0.1; done"),
    );
    driver.start_task(&config).unwrap();
    assert_eq!(out.read_line(), "ready");
    driver
        .stop_task(&config.id, Duration::from_secs(10), "SIGTERM")
        .unwrap();
    let exit = driver
        .wait_task(&config.id, Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!((exit.exit_code, exit.signal), (5, 0));
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn stop_escalates_to_sigkill_when_the_task_ignores_term() {
    let dirs = TaskDirs::new("exec-escalate");
    let driver = ExecDriver::new();
    let mut out = dirs.stdout_reader();
    let config = dirs.config(
        "stubborn",
        sh("trap '' TERM; echo ready; while true; do sleep 0.1; done"),
    );
    driver.start_task(&config).unwrap();
    assert_eq!(out.read_line(), "ready");
    let started = Instant::now();
    driver
        .stop_task(&config.id, Duration::from_millis(400), "SIGTERM")
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    let exit = driver
        .wait_task(&config.id, Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(exit.signal, libc::SIGKILL);
    assert_eq!(exit.exit_code, 128 + libc::SIGKILL);
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn signal_task_reaches_a_handler_in_the_task() {
    let dirs = TaskDirs::new("exec-signal");
    let driver = ExecDriver::new();
    let mut out = dirs.stdout_reader();
    let config = dirs.config(
        "sig",
        sh("trap 'echo got-hup; exit 0' HUP; echo ready; while true; do sleep 0.1; done"),
    );
    driver.start_task(&config).unwrap();
    assert_eq!(out.read_line(), "ready");
    driver.signal_task(&config.id, "HUP").unwrap();
    assert_eq!(out.read_line(), "got-hup");
    assert_eq!(
        driver
            .wait_task(&config.id, LONG)
            .unwrap()
            .unwrap()
            .exit_code,
        0
    );
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn destroy_refuses_a_running_task_unless_forced() {
    let dirs = TaskDirs::new("exec-destroy");
    let driver = ExecDriver::new();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    let handle = driver.start_task(&config).unwrap();
    assert_eq!(
        driver.destroy_task(&config.id, false),
        Err(DriverError::TaskRunning(config.id.clone()))
    );
    driver.destroy_task(&config.id, true).unwrap();
    let pid = state_of(&handle).pid;
    assert!(!PathBuf::from(format!("/proc/{pid}")).exists());
    assert_eq!(
        driver.wait_task(&config.id, Duration::ZERO),
        Err(DriverError::TaskNotFound(config.id.clone()))
    );
}

#[test]
fn failed_exec_is_reported_and_leaves_no_cgroup() {
    let dirs = TaskDirs::new("exec-noexec");
    let driver = ExecDriver::new();
    // A host file without the exec bit: found, but execve refuses it.
    let config = dirs.config("noexec", json!({"command": "/etc/hostname"}));
    let err = driver.start_task(&config).unwrap_err();
    match &err {
        DriverError::StartFailed {
            message,
            recoverable: false,
        } => assert!(message.contains("executing the command"), "{message}"),
        other => panic!("unexpected {other:?}"),
    }
    let layout = cgroup::detect(None).unwrap();
    let (Layout::V1 { memory_parent, .. }
    | Layout::V2 {
        parent: memory_parent,
        ..
    }) = layout;
    assert!(!memory_parent.join(cgroup::cgroup_name(&config.id)).exists());
}

#[test]
fn missing_binary_fails_start_without_retry() {
    let dirs = TaskDirs::new("exec-missing");
    let driver = ExecDriver::new();
    let err = driver
        .start_task(&dirs.config("x", json!({"command": "no-such-binary-drover"})))
        .unwrap_err();
    assert_eq!(
        err,
        DriverError::StartFailed {
            message: "binary \"no-such-binary-drover\" could not be found".into(),
            recoverable: false
        }
    );
}

#[test]
fn stats_cover_the_running_task() {
    let dirs = TaskDirs::new("exec-stats");
    let driver = ExecDriver::new();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    driver.start_task(&config).unwrap();
    // Right after clone the task may still be setting up (its /proc entries changing under
    // exec) and the kernel's batched RSS counters may read 0: poll briefly.
    let deadline = Instant::now() + Duration::from_secs(5);
    let usage = loop {
        match driver.task_stats(&config.id) {
            Ok(u) if u.memory_rss_bytes > 0 => break u,
            other if Instant::now() > deadline => panic!("no stats within 5s: {other:?}"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    assert!(usage.memory_rss_bytes > 0, "{usage:?}");
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn recovered_task_is_stopped_and_cleaned_up_by_a_new_driver() {
    let dirs = TaskDirs::new("exec-recover");
    let first = ExecDriver::new();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    let handle = first.start_task(&config).unwrap();

    let second = ExecDriver::new();
    second.recover_task(&handle).unwrap();
    assert_eq!(
        second.inspect_task(&config.id).unwrap().state,
        TaskState::Running
    );
    // sleep, as PID 1, ignores SIGTERM: the stop ends with SIGKILL.
    second
        .stop_task(&config.id, Duration::from_millis(200), "SIGTERM")
        .unwrap();
    let exit = second
        .wait_task(&config.id, Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(exit.err.as_deref(), Some(UNKNOWN_EXIT_STATUS));

    // The real parent reaps; then the recovering driver removes the cgroup.
    assert_eq!(
        first.wait_task(&config.id, LONG).unwrap().unwrap().signal,
        libc::SIGKILL
    );
    first.tasks().remove(&config.id).unwrap().watch.reap();
    second.destroy_task(&config.id, false).unwrap();
    assert!(state_of(&handle).cgroups.iter().all(|d| !d.exists()));
}

#[test]
fn task_runs_as_the_requested_user() {
    let dirs = TaskDirs::new("exec-user");
    let driver = ExecDriver::new();
    let mut config = dirs.config("user", json!({"command": "id", "args": ["-u"]}));
    config.user = "nobody".to_string();
    let (out, exit) = run(&driver, &dirs, &config);
    assert_eq!(out, "65534\n");
    assert!(exit.successful(), "{exit:?}");
}
