use std::time::Instant;

use serde_json::json;

use super::*;
use crate::shared::testutil::TaskDirs;
use crate::shared::watch::UNKNOWN_EXIT_STATUS;

const LONG: Duration = Duration::from_secs(20);

fn enabled_driver() -> RawExecDriver {
    let driver = RawExecDriver::new();
    driver.set_config(&json!({"enabled": true})).unwrap();
    driver
}

fn sh(script: &str) -> serde_json::Value {
    json!({"command": "/bin/sh", "args": ["-c", script]})
}

/// Pids of live (non-zombie) processes in process group `pgid`.
fn live_group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|text| {
                    let after = &text[text.rfind(')')? + 1..];
                    let fields: Vec<&str> = after.split_whitespace().collect();
                    Some(fields[0] != "Z" && fields[2].parse::<i32>().ok()? == pgid)
                })
                .unwrap_or(false)
        })
        .collect()
}

fn pid_of(handle: &TaskHandle) -> i32 {
    serde_json::from_value::<ProcessState>(handle.state.clone())
        .unwrap()
        .pid
}

#[test]
fn fingerprint_is_undetected_until_enabled() {
    let driver = RawExecDriver::new();
    let fp = driver.fingerprint();
    assert_eq!(fp.health, HealthState::Undetected);
    assert!(fp.attributes.is_empty());

    driver.set_config(&json!({"enabled": true})).unwrap();
    let fp = driver.fingerprint();
    assert_eq!(fp.health, HealthState::Healthy);
    assert_eq!(fp.attributes.get("driver.raw_exec"), Some(&"1".to_string()));
}

#[test]
fn start_is_refused_while_disabled() {
    let dirs = TaskDirs::new("raw-disabled");
    let driver = RawExecDriver::new();
    let err = driver
        .start_task(&dirs.config("t", sh("true")))
        .unwrap_err();
    assert!(
        matches!(&err, DriverError::StartFailed { message, recoverable: false } if message.contains("disabled")),
        "{err}"
    );
}

#[test]
fn validate_names_the_bad_field() {
    let driver = RawExecDriver::new();
    assert_eq!(
        driver.validate_task_config(&json!({"args": []})),
        Err(DriverError::InvalidConfig(
            "missing required field \"command\"".into()
        ))
    );
    assert_eq!(
        driver.validate_task_config(&json!({"command": "x", "args": [1]})),
        Err(DriverError::InvalidConfig(
            "field \"args\" must be a list of strings".into()
        ))
    );
    assert_eq!(driver.validate_task_config(&sh("true")), Ok(()));
}

#[test]
fn stdout_and_stderr_reach_their_fifos() {
    let dirs = TaskDirs::new("raw-output");
    let driver = enabled_driver();
    let out = dirs.stdout_reader();
    let err = dirs.stderr_reader();
    let config = dirs.config("echo", sh("echo hi; echo oops >&2"));
    driver.start_task(&config).unwrap();
    assert_eq!(out.read_until_writers_close(), "hi\n");
    assert_eq!(err.read_until_writers_close(), "oops\n");
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    assert!(exit.successful(), "{exit:?}");
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn exit_code_is_reported_repeatedly_until_destroy() {
    let dirs = TaskDirs::new("raw-exit");
    let driver = enabled_driver();
    let config = dirs.config("exit", sh("exit 3"));
    driver.start_task(&config).unwrap();
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    assert_eq!((exit.exit_code, exit.signal), (3, 0));
    assert_eq!(
        driver.wait_task(&config.id, Duration::ZERO).unwrap(),
        Some(exit.clone())
    );
    let status = driver.inspect_task(&config.id).unwrap();
    assert_eq!(status.state, TaskState::Exited);
    assert_eq!(status.exit_result, Some(exit));
    assert!(status.completed_at >= status.started_at);
    driver.destroy_task(&config.id, false).unwrap();
    assert_eq!(
        driver.wait_task(&config.id, Duration::ZERO),
        Err(DriverError::TaskNotFound(config.id.clone()))
    );
}

#[test]
fn task_sees_exactly_its_env() {
    let dirs = TaskDirs::new("raw-env");
    let driver = enabled_driver();
    let out = dirs.stdout_reader();
    let config = dirs.config("env", json!({"command": "/usr/bin/env"}));
    driver.start_task(&config).unwrap();
    let mut lines: Vec<String> = out
        .read_until_writers_close()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(lines, vec!["DROVER_TEST=yes", "PATH=/usr/bin:/bin"]);
    driver.wait_task(&config.id, LONG).unwrap().unwrap();
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn task_runs_in_its_task_dir_and_own_process_group() {
    let dirs = TaskDirs::new("raw-cwd");
    let driver = enabled_driver();
    let out = dirs.stdout_reader();
    // Field 5 of /proc/self/stat is the process group id; $$ is the shell's pid.
    let config = dirs.config("cwd", sh("pwd -P; echo $$; cut -d' ' -f5 /proc/$$/stat"));
    driver.start_task(&config).unwrap();
    let text = out.read_until_writers_close();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        dirs.task_dir.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(lines[1], lines[2], "the task leads its own process group");
    driver.wait_task(&config.id, LONG).unwrap().unwrap();
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn wait_times_out_on_a_running_task_then_stop_terminates_it() {
    let dirs = TaskDirs::new("raw-stop");
    let driver = enabled_driver();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    driver.start_task(&config).unwrap();
    assert_eq!(
        driver
            .wait_task(&config.id, Duration::from_millis(100))
            .unwrap(),
        None
    );
    assert_eq!(
        driver.inspect_task(&config.id).unwrap().state,
        TaskState::Running
    );
    driver
        .stop_task(&config.id, Duration::from_secs(10), "")
        .unwrap();
    let exit = driver
        .wait_task(&config.id, Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(exit.signal, libc::SIGTERM);
    assert_eq!(exit.exit_code, 128 + libc::SIGTERM);
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn stop_uses_the_given_kill_signal() {
    let dirs = TaskDirs::new("raw-stop-int");
    let driver = enabled_driver();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    driver.start_task(&config).unwrap();
    driver
        .stop_task(&config.id, Duration::from_secs(10), "SIGINT")
        .unwrap();
    let exit = driver
        .wait_task(&config.id, Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(exit.signal, libc::SIGINT);
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn stop_escalates_to_sigkill_when_term_is_ignored() {
    let dirs = TaskDirs::new("raw-escalate");
    let driver = enabled_driver();
    let mut out = dirs.stdout_reader();
    let config = dirs.config(
        "stubborn",
        sh("trap '' TERM; echo ready; while true; do sleep 0.1; done"),
    );
    driver.start_task(&config).unwrap();
    assert_eq!(out.read_line(), "ready");
    let started = Instant::now();
    driver
        .stop_task(&config.id, Duration::from_millis(500), "SIGTERM")
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(500));
    let exit = driver
        .wait_task(&config.id, Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(exit.signal, libc::SIGKILL);
    assert_eq!(exit.exit_code, 128 + libc::SIGKILL);
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn stop_reaches_the_whole_process_group() {
    let dirs = TaskDirs::new("raw-group");
    let driver = enabled_driver();
    let mut out = dirs.stdout_reader();
    let config = dirs.config("group", sh("sleep 30 & sleep 30 & echo ready; wait"));
    let handle = driver.start_task(&config).unwrap();
    assert_eq!(out.read_line(), "ready");
    let pgid = pid_of(&handle);
    assert_eq!(live_group_members(pgid).len(), 3);
    driver
        .stop_task(&config.id, Duration::from_secs(5), "SIGTERM")
        .unwrap();
    // SIGKILL'ed stragglers may need a moment to leave /proc.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !live_group_members(pgid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(live_group_members(pgid), Vec::<i32>::new());
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn destroy_refuses_a_running_task_unless_forced() {
    let dirs = TaskDirs::new("raw-destroy");
    let driver = enabled_driver();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    let handle = driver.start_task(&config).unwrap();
    assert_eq!(
        driver.destroy_task(&config.id, false),
        Err(DriverError::TaskRunning(config.id.clone()))
    );
    driver.destroy_task(&config.id, true).unwrap();
    assert!(live_group_members(pid_of(&handle)).is_empty());
    assert_eq!(
        driver.inspect_task(&config.id),
        Err(DriverError::TaskNotFound(config.id.clone()))
    );
}

#[test]
fn duplicate_task_id_is_refused() {
    let dirs = TaskDirs::new("raw-dup");
    let driver = enabled_driver();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    driver.start_task(&config).unwrap();
    assert!(matches!(
        driver.start_task(&config),
        Err(DriverError::Other(msg)) if msg.contains("already started")
    ));
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn missing_binary_fails_start_without_retry() {
    let dirs = TaskDirs::new("raw-missing");
    let driver = enabled_driver();
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
fn signal_task_reaches_the_main_process() {
    let dirs = TaskDirs::new("raw-signal");
    let driver = enabled_driver();
    let mut out = dirs.stdout_reader();
    let config = dirs.config(
        "sig",
        sh("trap 'echo got-usr1; exit 0' USR1; echo ready; while true; do sleep 0.1; done"),
    );
    driver.start_task(&config).unwrap();
    assert_eq!(out.read_line(), "ready");
    driver.signal_task(&config.id, "SIGUSR1").unwrap();
    assert_eq!(out.read_line(), "got-usr1");
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    assert_eq!(exit.exit_code, 0);
    assert!(matches!(
        driver.signal_task(&config.id, "SIGUSR1"),
        Err(DriverError::Other(_))
    ));
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn unknown_signal_name_is_rejected() {
    let dirs = TaskDirs::new("raw-badsig");
    let driver = enabled_driver();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    driver.start_task(&config).unwrap();
    assert!(matches!(
        driver.signal_task(&config.id, "SIGNOPE"),
        Err(DriverError::InvalidConfig(_))
    ));
    assert!(matches!(
        driver.stop_task(&config.id, Duration::from_secs(1), "SIGNOPE"),
        Err(DriverError::InvalidConfig(_))
    ));
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn task_runs_as_the_requested_user() {
    let dirs = TaskDirs::new("raw-user");
    let driver = enabled_driver();
    let out = dirs.stdout_reader();
    let mut config = dirs.config("user", json!({"command": "/usr/bin/id", "args": ["-u"]}));
    config.user = "nobody".to_string();
    driver.start_task(&config).unwrap();
    assert_eq!(out.read_until_writers_close(), "65534\n");
    driver.wait_task(&config.id, LONG).unwrap().unwrap();
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn stats_report_memory_of_a_running_task() {
    let dirs = TaskDirs::new("raw-stats");
    let driver = enabled_driver();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    driver.start_task(&config).unwrap();
    // Right after exec the kernel's batched RSS counters may still read 0; poll briefly.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut usage = driver.task_stats(&config.id).unwrap();
    while usage.memory_rss_bytes == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        usage = driver.task_stats(&config.id).unwrap();
    }
    assert!(usage.memory_rss_bytes > 0, "{usage:?}");
    assert!(usage.timestamp > 0);
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn exec_runs_in_the_task_context_and_reports_the_exit_code() {
    let dirs = TaskDirs::new("raw-exec");
    let driver = enabled_driver();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    driver.start_task(&config).unwrap();
    let command: Vec<String> = [
        "sh",
        "-c",
        "echo $DROVER_TEST; pwd -P; echo bad >&2; exit 4",
    ]
    .map(String::from)
    .to_vec();
    let output = driver.exec_task(&config.id, &command, LONG).unwrap();
    let expected = format!("yes\n{}\n", dirs.task_dir.canonicalize().unwrap().display());
    assert_eq!(String::from_utf8(output.stdout).unwrap(), expected);
    assert_eq!(output.stderr, b"bad\n");
    assert_eq!(output.exit_code, 4);
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn exec_that_outlives_its_timeout_is_killed() {
    let dirs = TaskDirs::new("raw-exec-timeout");
    let driver = enabled_driver();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    driver.start_task(&config).unwrap();
    let started = Instant::now();
    let command = ["sleep", "30"].map(String::from).to_vec();
    let err = driver
        .exec_task(&config.id, &command, Duration::from_millis(200))
        .unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn recovered_task_can_be_stopped_by_a_new_driver() {
    let dirs = TaskDirs::new("raw-recover");
    let first = enabled_driver();
    let config = dirs.config("sleep", json!({"command": "sleep", "args": ["30"]}));
    let handle = first.start_task(&config).unwrap();

    let second = enabled_driver();
    second.recover_task(&handle).unwrap();
    // Recovering twice is harmless.
    second.recover_task(&handle).unwrap();
    assert_eq!(
        second.inspect_task(&config.id).unwrap().state,
        TaskState::Running
    );
    second
        .stop_task(&config.id, Duration::from_secs(5), "SIGTERM")
        .unwrap();
    let exit = second
        .wait_task(&config.id, Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(exit.err.as_deref(), Some(UNKNOWN_EXIT_STATUS));
    second.destroy_task(&config.id, false).unwrap();

    // The first driver, the real parent, still sees the true status.
    let exit = first.wait_task(&config.id, LONG).unwrap().unwrap();
    assert_eq!(exit.signal, libc::SIGTERM);
    first.destroy_task(&config.id, false).unwrap();
}

#[test]
fn recovered_non_child_reports_unknown_exit_status() {
    // `sh` starts a background sleep and exits, so the sleep is not our child.
    let output = std::process::Command::new("/bin/sh")
        .args(["-c", "sleep 0.5 </dev/null >/dev/null 2>&1 & echo $!"])
        .output()
        .unwrap();
    let pid: i32 = String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let dirs = TaskDirs::new("raw-orphan");
    let state = ProcessState {
        pid,
        start_ticks: procfs::read_stat(pid).unwrap().start_ticks,
        started_at: unix_nanos_now(),
        cgroups: Vec::new(),
    };
    let handle = TaskHandle {
        version: TASK_STATE_VERSION,
        driver: DRIVER_NAME.into(),
        config: dirs.config("orphan", json!({"command": "sleep"})),
        state: serde_json::to_value(&state).unwrap(),
    };
    let driver = enabled_driver();
    driver.recover_task(&handle).unwrap();
    let exit = driver.wait_task(&handle.config.id, LONG).unwrap().unwrap();
    assert_eq!(exit.err.as_deref(), Some(UNKNOWN_EXIT_STATUS));
    assert!(!exit.successful());
    driver.destroy_task(&handle.config.id, false).unwrap();
}

#[test]
fn recovering_a_reused_pid_fails() {
    let dirs = TaskDirs::new("raw-reused");
    let me = std::process::id() as i32;
    let state = ProcessState {
        pid: me,
        start_ticks: procfs::read_stat(me).unwrap().start_ticks + 1,
        started_at: 0,
        cgroups: Vec::new(),
    };
    let handle = TaskHandle {
        version: TASK_STATE_VERSION,
        driver: DRIVER_NAME.into(),
        config: dirs.config("reused", json!({"command": "sleep"})),
        state: serde_json::to_value(&state).unwrap(),
    };
    let err = enabled_driver().recover_task(&handle).unwrap_err();
    assert!(err.to_string().contains("another process"), "{err}");
}
