use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use drover_abi::{FsIsolation, TaskResources};
use serde_json::json;

use super::*;
use crate::task::PLUGIN_SHUTDOWN;

const LONG: Duration = Duration::from_secs(20);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A temp dir with stdout/stderr FIFOs, whose read ends are held open as the host holds them.
struct Fifos {
    root: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
    _host: Vec<File>,
}

fn open_reader(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .unwrap()
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Reads until every writer closed the FIFO; call once a writer is connected.
fn read_to_end(mut reader: File) -> String {
    // SAFETY: F_SETFL on a descriptor we own.
    unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_SETFL, 0) };
    let mut out = String::new();
    reader.read_to_string(&mut out).unwrap();
    out
}

impl Fifos {
    fn new() -> Self {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("drover-mock-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let (stdout, stderr) = (root.join("stdout.fifo"), root.join("stderr.fifo"));
        mkfifo(&stdout);
        mkfifo(&stderr);
        let _host = vec![open_reader(&stdout), open_reader(&stderr)];
        Fifos {
            root,
            stdout,
            stderr,
            _host,
        }
    }

    fn config(&self, name: &str, driver_config: serde_json::Value) -> TaskConfig {
        TaskConfig {
            id: format!("alloc/{name}/{}", COUNTER.fetch_add(1, Ordering::Relaxed)),
            name: name.to_string(),
            alloc_id: "alloc".to_string(),
            job_name: "job".to_string(),
            group_name: "group".to_string(),
            env: Default::default(),
            driver_config,
            resources: TaskResources::default(),
            user: String::new(),
            alloc_dir: self.root.clone(),
            task_dir: self.root.clone(),
            stdout_path: self.stdout.clone(),
            stderr_path: self.stderr.clone(),
            ..Default::default()
        }
    }
}

impl Drop for Fifos {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn fingerprint_is_healthy_with_its_attribute() {
    let fp = MockDriver::new().fingerprint();
    assert_eq!(fp.health, HealthState::Healthy);
    assert_eq!(
        fp.attributes.get("driver.mock_driver"),
        Some(&"1".to_string())
    );
}

#[test]
fn periodic_shutdown_makes_the_driver_undetected() {
    let driver = MockDriver::new();
    driver
        .set_config(&json!({"shutdown_periodic_after": true, "shutdown_periodic_duration": "50ms"}))
        .unwrap();
    assert_eq!(driver.fingerprint().health, HealthState::Healthy);
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(driver.fingerprint().health, HealthState::Undetected);
}

#[test]
fn fs_isolation_claim_follows_the_plugin_config() {
    let driver = MockDriver::new();
    assert_eq!(driver.capabilities().fs_isolation, FsIsolation::None);
    driver
        .set_config(&json!({"fs_isolation": "image"}))
        .unwrap();
    assert_eq!(driver.capabilities().fs_isolation, FsIsolation::Image);
}

#[test]
fn validate_names_the_bad_field() {
    assert_eq!(
        MockDriver::new().validate_task_config(&json!({"run_for": "forever"})),
        Err(DriverError::InvalidConfig(
            "field \"run_for\": invalid duration \"forever\"".into()
        ))
    );
}

#[test]
fn task_runs_for_its_duration_and_exits_as_configured() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config(
        "run",
        json!({"run_for": "150ms", "exit_code": 3, "exit_signal": 2, "exit_err_msg": "boom"}),
    );
    let started = Instant::now();
    driver.start_task(&config).unwrap();
    assert_eq!(
        driver
            .wait_task(&config.id, Duration::from_millis(20))
            .unwrap(),
        None
    );
    assert_eq!(
        driver.inspect_task(&config.id).unwrap().state,
        TaskState::Running
    );
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(
        exit,
        ExitResult {
            exit_code: 3,
            signal: 2,
            oom_killed: false,
            err: Some("boom".into())
        }
    );
    assert_eq!(
        driver.wait_task(&config.id, Duration::ZERO).unwrap(),
        Some(exit)
    );
    let status = driver.inspect_task(&config.id).unwrap();
    assert_eq!(status.state, TaskState::Exited);
    assert!(status.completed_at >= status.started_at);
    driver.destroy_task(&config.id, false).unwrap();
    assert_eq!(
        driver.inspect_task(&config.id),
        Err(DriverError::TaskNotFound(config.id.clone()))
    );
}

#[test]
fn repeated_stdout_reaches_the_fifo_before_the_task_exits() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let out = open_reader(&fifos.stdout);
    let err = open_reader(&fifos.stderr);
    let config = fifos.config(
        "out",
        json!({
            "stdout_string": "hi\n",
            "stdout_repeat": 2,
            "stdout_repeat_duration": "30ms",
            "stderr_string": "warn\n",
        }),
    );
    let started = Instant::now();
    driver.start_task(&config).unwrap();
    assert_eq!(read_to_end(out), "hi\nhi\nhi\n");
    assert_eq!(read_to_end(err), "warn\n");
    // run_for is 0, but the task lives until its output is written.
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(60));
    assert!(exit.successful());
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn start_error_fails_the_start_with_its_recoverability() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let err = driver
        .start_task(&fifos.config(
            "e",
            json!({"start_error": "no luck", "start_error_recoverable": true}),
        ))
        .unwrap_err();
    assert_eq!(
        err,
        DriverError::StartFailed {
            message: "no luck".into(),
            recoverable: true
        }
    );
}

#[test]
fn start_block_for_delays_the_start() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config(
        "slow",
        json!({"start_block_for": "100ms", "run_for": "10s"}),
    );
    let started = Instant::now();
    driver.start_task(&config).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(100));
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn stop_waits_kill_after_then_ends_the_task() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config(
        "stop",
        json!({"run_for": "30s", "kill_after": "150ms", "exit_code": 7}),
    );
    driver.start_task(&config).unwrap();
    let started = Instant::now();
    driver.stop_task(&config.id, LONG, "SIGINT").unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(150), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    let exit = driver
        .wait_task(&config.id, Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(exit.exit_code, 7);
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn stop_timeout_cuts_a_longer_kill_after_short() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config("stubborn", json!({"run_for": "30s", "kill_after": "30s"}));
    driver.start_task(&config).unwrap();
    let started = Instant::now();
    driver
        .stop_task(&config.id, Duration::from_millis(100), "")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        driver
            .wait_task(&config.id, Duration::ZERO)
            .unwrap()
            .is_some()
    );
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn stop_without_kill_after_is_immediate() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config("quick", json!({"run_for": "30s"}));
    driver.start_task(&config).unwrap();
    let started = Instant::now();
    driver.stop_task(&config.id, LONG, "").unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(
        driver
            .wait_task(&config.id, Duration::ZERO)
            .unwrap()
            .is_some()
    );
}

#[test]
fn destroy_refuses_a_running_task_unless_forced() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config("d", json!({"run_for": "30s"}));
    driver.start_task(&config).unwrap();
    assert_eq!(
        driver.destroy_task(&config.id, false),
        Err(DriverError::TaskRunning(config.id.clone()))
    );
    driver.destroy_task(&config.id, true).unwrap();
    assert_eq!(
        driver.wait_task(&config.id, Duration::ZERO),
        Err(DriverError::TaskNotFound(config.id.clone()))
    );
}

#[test]
fn duplicate_task_id_is_refused() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config("dup", json!({"run_for": "30s"}));
    driver.start_task(&config).unwrap();
    assert!(matches!(
        driver.start_task(&config),
        Err(DriverError::Other(msg)) if msg.contains("already started")
    ));
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn signal_error_is_returned_by_signal_task() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let failing = fifos.config("s1", json!({"run_for": "30s", "signal_error": "no thanks"}));
    let fine = fifos.config("s2", json!({"run_for": "30s"}));
    driver.start_task(&failing).unwrap();
    driver.start_task(&fine).unwrap();
    assert_eq!(
        driver.signal_task(&failing.id, "SIGHUP"),
        Err(DriverError::Other("no thanks".into()))
    );
    assert_eq!(driver.signal_task(&fine.id, "SIGHUP"), Ok(()));
    assert_eq!(
        driver.signal_task("nope", "SIGHUP"),
        Err(DriverError::TaskNotFound("nope".into()))
    );
    driver.destroy_task(&failing.id, true).unwrap();
    driver.destroy_task(&fine.id, true).unwrap();
}

#[test]
fn plugin_exit_after_ends_the_task_with_a_plugin_error() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config("p", json!({"run_for": "30s", "plugin_exit_after": "50ms"}));
    driver.start_task(&config).unwrap();
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    assert_eq!(exit.err.as_deref(), Some(PLUGIN_SHUTDOWN));
}

#[test]
fn exec_echoes_the_task_and_command_like_nomad() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config("web", json!({"run_for": "30s"}));
    driver.start_task(&config).unwrap();
    let out = driver
        .exec_task(&config.id, &["ls".to_string(), "-l".to_string()], LONG)
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        r#"Exec("web", ["ls" "-l"])"#
    );
    assert_eq!(out.exit_code, 0);
    assert!(driver.task_stats(&config.id).unwrap().timestamp > 0);
    assert!(matches!(
        driver.task_stats("nope"),
        Err(DriverError::TaskNotFound(_))
    ));
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn recovered_task_runs_only_for_what_is_left() {
    let fifos = Fifos::new();
    let first = MockDriver::new();
    let config = fifos.config("r", json!({"run_for": "400ms", "exit_code": 4}));
    let handle = first.start_task(&config).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(first);

    let second = MockDriver::new();
    let recovered_at = Instant::now();
    second.recover_task(&handle).unwrap();
    second.recover_task(&handle).unwrap();
    let exit = second.wait_task(&config.id, LONG).unwrap().unwrap();
    assert_eq!(exit.exit_code, 4);
    assert!(
        recovered_at.elapsed() < Duration::from_millis(350),
        "ran {:?}, the full run_for again",
        recovered_at.elapsed()
    );
    assert_eq!(second.inspect_task(&config.id).unwrap().started_at, {
        let state: MockTaskState = serde_json::from_value(handle.state.clone()).unwrap();
        state.started_at
    });
}

#[test]
fn missing_fifo_reader_ends_the_task_with_an_error() {
    let driver = MockDriver::new();
    let root = std::env::temp_dir().join(format!(
        "drover-mock-noreader-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&root).unwrap();
    let stdout = root.join("stdout.fifo");
    mkfifo(&stdout);
    let mut config = Fifos::new().config("x", json!({"stdout_string": "hi"}));
    config.stdout_path = stdout;
    driver.start_task(&config).unwrap();
    let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
    assert!(
        exit.err
            .as_deref()
            .is_some_and(|e| e.contains("connecting task output")),
        "{exit:?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_thousand_tasks_share_one_timer_thread() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let before = thread_count();
    let configs: Vec<TaskConfig> = (0..1000)
        .map(|i| {
            fifos.config(
                &format!("t{i}"),
                json!({"run_for": "300ms", "exit_code": i % 7}),
            )
        })
        .collect();
    for config in &configs {
        driver.start_task(config).unwrap();
    }
    let running = configs
        .iter()
        .filter(|c| driver.wait_task(&c.id, Duration::ZERO).unwrap().is_none())
        .count();
    // Other tests run in parallel threads of this process; allow for them, not for 1000.
    assert!(thread_count() < before + 50, "{} threads", thread_count());
    assert!(running > 0, "tasks ended before all were started");
    for (i, config) in configs.iter().enumerate() {
        let exit = driver.wait_task(&config.id, LONG).unwrap().unwrap();
        assert_eq!(exit.exit_code, (i % 7) as i32);
        driver.destroy_task(&config.id, false).unwrap();
    }
    assert_eq!(driver.scheduler.pending(), 0);
}

#[test]
fn an_exit_is_notified_without_a_waiting_thread_and_at_once_once_ended() {
    let fifos = Fifos::new();
    let driver = MockDriver::new();
    let config = fifos.config("notify", json!({"run_for": "100ms"}));
    driver.start_task(&config).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let notify = {
        let tx = tx.clone();
        Box::new(move || {
            let _ = tx.send("ended");
        })
    };
    assert!(driver.notify_exit(&config.id, notify));
    assert!(rx.try_recv().is_err(), "notified while it still runs");
    assert_eq!(rx.recv_timeout(LONG), Ok("ended"));
    assert!(
        driver
            .wait_task(&config.id, Duration::ZERO)
            .unwrap()
            .is_some()
    );
    // Already ended: at once.
    assert!(driver.notify_exit(
        &config.id,
        Box::new(move || {
            let _ = tx.send("again");
        })
    ));
    assert_eq!(rx.try_recv(), Ok("again"));
    assert!(!driver.notify_exit("unknown", Box::new(|| {})));
}
