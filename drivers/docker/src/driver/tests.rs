//! The driver against the machine's Docker daemon, with an image built locally from busybox.
//! Each test skips (passing, with a message) when no daemon answers.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_abi::{Driver, DriverError, HealthState, TaskConfig, TaskResources, TaskState};
use serde_json::{Value, json};

use super::DockerDriver;
use crate::container_spec::LABEL_ALLOC_ID;
use crate::testing::{TEST_IMAGE, docker_tests_enabled};

const WAIT: Duration = Duration::from_secs(60);
static COUNTER: AtomicU32 = AtomicU32::new(0);

macro_rules! require_docker {
    () => {
        match docker_tests_enabled() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => panic!("{e}"),
        }
    };
}

/// Bytes arriving on one FIFO, read the way the host does (the FIFO held open read-write, so
/// it never reads end-of-file while tasks come and go).
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<u8>>>);

impl Collector {
    fn start(path: &Path) -> Collector {
        let c = Collector::default();
        let mut fifo = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let sink = c.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = fifo.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.0.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        c
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).to_string()
    }

    fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let t = self.text();
            if t.contains(needle) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "{needle:?} never arrived; got {t:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only reads it.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

/// An allocation directory with one task, its FIFOs and the host's readers.
struct Fixture {
    root: PathBuf,
    alloc_id: String,
    task_dir: PathBuf,
    stdout: Collector,
    stderr: Collector,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let alloc_id = format!(
            "{tag}-{}-{n}-{}",
            std::process::id(),
            crate::time::unix_nanos_now() % 1_000_000
        );
        let root = std::env::temp_dir().join(format!("drover-docker-{alloc_id}"));
        let task_dir = root.join("task");
        for d in ["alloc", "task/local", "task/secrets", "logs"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let stdout_path = root.join("logs/.task.stdout.fifo");
        let stderr_path = root.join("logs/.task.stderr.fifo");
        mkfifo(&stdout_path);
        mkfifo(&stderr_path);
        Fixture {
            stdout: Collector::start(&stdout_path),
            stderr: Collector::start(&stderr_path),
            root,
            alloc_id,
            task_dir,
            stdout_path,
            stderr_path,
        }
    }

    fn config(&self, driver_config: Value) -> TaskConfig {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let env = BTreeMap::from([
            (
                "NOMAD_ALLOC_DIR".to_string(),
                self.root.join("alloc").display().to_string(),
            ),
            (
                "NOMAD_TASK_DIR".to_string(),
                self.task_dir.join("local").display().to_string(),
            ),
            (
                "NOMAD_SECRETS_DIR".to_string(),
                self.task_dir.join("secrets").display().to_string(),
            ),
            ("NOMAD_ALLOC_ID".to_string(), self.alloc_id.clone()),
            ("GREETING".to_string(), "hello".to_string()),
        ]);
        TaskConfig {
            id: format!("{}/task/{n}", self.alloc_id),
            name: "task".to_string(),
            alloc_id: self.alloc_id.clone(),
            job_name: "job".to_string(),
            group_name: "group".to_string(),
            env: std::sync::Arc::new(env),
            driver_config,
            resources: TaskResources {
                cpu_mhz: 100,
                cores: 0,
                memory_mb: 64,
                memory_max_mb: 0,
            },
            user: String::new(),
            alloc_dir: self.root.clone(),
            task_dir: self.task_dir.clone(),
            stdout_path: self.stdout_path.clone(),
            stderr_path: self.stderr_path.clone(),
            ..Default::default()
        }
    }

    /// Containers of this allocation, running or not.
    fn containers(&self) -> Vec<String> {
        let filter = format!("label={LABEL_ALLOC_ID}={}", self.alloc_id);
        let out = Command::new("docker")
            .args(["ps", "-a", "-q", "--filter", &filter])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for id in self.containers() {
            let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn driver_with(plugin: Value) -> DockerDriver {
    let d = DockerDriver::new();
    d.set_config(&plugin).unwrap();
    d
}

/// Image GC off: tests share the test image.
fn driver() -> DockerDriver {
    driver_with(json!({"gc": {"image": false}}))
}

fn sh(script: &str) -> Value {
    json!({"image": TEST_IMAGE, "command": "/bin/sh", "args": ["-c", script]})
}

fn wait_exit(d: &DockerDriver, id: &str) -> drover_abi::ExitResult {
    d.wait_task(id, WAIT)
        .unwrap()
        .expect("task did not exit in time")
}

#[test]
fn a_task_runs_to_its_exit_code_and_its_output_reaches_the_fifos() {
    require_docker!();
    let f = Fixture::new("exit");
    let d = driver();
    let cfg = f.config(sh(
        "echo out-$GREETING; echo err-line >&2; echo $NOMAD_TASK_DIR; exit 3",
    ));
    let h = d.start_task(&cfg).unwrap();
    assert_eq!(h.driver, "docker");
    let exit = wait_exit(&d, &cfg.id);
    assert_eq!(exit.exit_code, 3);
    assert!(!exit.oom_killed);
    assert_eq!(
        exit.err.as_deref(),
        Some("Docker container exited with non-zero exit code: 3")
    );
    let out = f.stdout.wait_for("out-hello", WAIT);
    assert!(
        out.contains("/local\n"),
        "NOMAD_TASK_DIR inside the container: {out:?}"
    );
    f.stderr.wait_for("err-line", WAIT);
    assert_eq!(d.inspect_task(&cfg.id).unwrap().state, TaskState::Exited);
    d.destroy_task(&cfg.id, false).unwrap();
}

#[test]
fn the_task_directories_are_mounted_where_nomad_puts_them() {
    require_docker!();
    let f = Fixture::new("dirs");
    std::fs::write(f.task_dir.join("local/in.txt"), "from-host").unwrap();
    let d = driver();
    let cfg = f.config(sh(
        "cat /local/in.txt; echo shared > $NOMAD_ALLOC_DIR/out.txt; ls /secrets >/dev/null",
    ));
    d.start_task(&cfg).unwrap();
    assert!(wait_exit(&d, &cfg.id).successful());
    f.stdout.wait_for("from-host", WAIT);
    assert_eq!(
        std::fs::read_to_string(f.root.join("alloc/out.txt")).unwrap(),
        "shared\n"
    );
    d.destroy_task(&cfg.id, true).unwrap();
}

#[test]
fn agent_mounts_are_visible_in_the_container_and_read_only_is_honoured() {
    require_docker!();
    let f = Fixture::new("mounts");
    let shared = f.root.join("volume");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("data.txt"), "through-the-mount").unwrap();
    let writable = f.root.join("writable");
    std::fs::create_dir_all(&writable).unwrap();
    let d = driver();
    let mut cfg = f.config(sh("cat /vol/data.txt; echo; \
         if echo x > /vol/new.txt; then echo ro-broken; else echo ro-refused; fi; \
         echo written > /rw/out.txt"));
    cfg.mounts = vec![
        drover_abi::MountConfig {
            task_path: "/vol".into(),
            host_path: shared.display().to_string(),
            readonly: true,
            ..Default::default()
        },
        drover_abi::MountConfig {
            task_path: "/rw".into(),
            host_path: writable.display().to_string(),
            ..Default::default()
        },
    ];
    d.start_task(&cfg).unwrap();
    assert!(wait_exit(&d, &cfg.id).successful());
    let out = f.stdout.wait_for("ro-", WAIT);
    assert!(out.contains("through-the-mount"), "{out:?}");
    assert!(out.contains("ro-refused"), "{out:?}");
    assert!(!shared.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(writable.join("out.txt")).unwrap(),
        "written\n"
    );
    d.destroy_task(&cfg.id, true).unwrap();
}

#[test]
fn stop_sends_the_signal_then_kills_after_the_timeout() {
    require_docker!();
    let f = Fixture::new("stop");
    let d = driver();
    // A shell that handles TERM ends by itself.
    let polite = f.config(sh(
        "trap 'echo bye; exit 0' TERM; echo ready; while true; do sleep 0.1; done",
    ));
    d.start_task(&polite).unwrap();
    f.stdout.wait_for("ready", WAIT);
    let t = Instant::now();
    d.stop_task(&polite.id, Duration::from_secs(20), "SIGTERM")
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        d.wait_task(&polite.id, Duration::ZERO)
            .unwrap()
            .unwrap()
            .successful()
    );
    f.stdout.wait_for("bye", WAIT);
    d.destroy_task(&polite.id, false).unwrap();
    // `sleep` as PID 1 ignores TERM: killed once the timeout passes.
    let stubborn = f.config(json!({"image": TEST_IMAGE, "command": "/bin/sleep", "args": ["300"]}));
    d.start_task(&stubborn).unwrap();
    let t = Instant::now();
    d.stop_task(&stubborn.id, Duration::from_secs(1), "SIGTERM")
        .unwrap();
    assert!(
        t.elapsed() >= Duration::from_secs(1),
        "killed before the timeout"
    );
    let exit = d.wait_task(&stubborn.id, Duration::ZERO).unwrap().unwrap();
    assert_eq!(exit.exit_code, 137);
    d.destroy_task(&stubborn.id, false).unwrap();
}

#[test]
fn destroy_removes_the_container_even_while_it_runs() {
    require_docker!();
    let f = Fixture::new("destroy");
    let d = driver();
    let cfg = f.config(json!({"image": TEST_IMAGE, "command": "/bin/sleep", "args": ["300"]}));
    d.start_task(&cfg).unwrap();
    assert_eq!(f.containers().len(), 1);
    assert!(matches!(
        d.destroy_task(&cfg.id, false),
        Err(DriverError::TaskRunning(_))
    ));
    d.destroy_task(&cfg.id, true).unwrap();
    assert!(
        f.containers().is_empty(),
        "left behind: {:?}",
        f.containers()
    );
    assert!(matches!(
        d.inspect_task(&cfg.id),
        Err(DriverError::TaskNotFound(_))
    ));
}

#[test]
fn a_new_driver_recovers_a_running_container_from_its_handle() {
    require_docker!();
    let f = Fixture::new("recover");
    let first = driver();
    let cfg = f.config(sh(
        "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done",
    ));
    let handle = first.start_task(&cfg).unwrap();
    f.stdout.wait_for("tick-2", WAIT);
    // The agent goes away: its driver and monitors with it; the container keeps running.
    drop(first);
    std::thread::sleep(Duration::from_millis(500));
    let before = f.stdout.text().len();
    let second = driver();
    second.recover_task(&handle).unwrap();
    second.recover_task(&handle).unwrap();
    assert_eq!(
        second.inspect_task(&cfg.id).unwrap().state,
        TaskState::Running
    );
    // Logs flow again, into the same FIFO.
    let deadline = Instant::now() + WAIT;
    while f.stdout.text().len() <= before + 20 {
        assert!(Instant::now() < deadline, "no output after recovery");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = second
        .exec_task(&cfg.id, &["echo".into(), "inside".into()], WAIT)
        .unwrap();
    assert_eq!(out.stdout, b"inside\n");
    second
        .stop_task(&cfg.id, Duration::from_secs(1), "SIGKILL")
        .unwrap();
    assert!(second.wait_task(&cfg.id, Duration::ZERO).unwrap().is_some());
    second.destroy_task(&cfg.id, false).unwrap();
    assert!(f.containers().is_empty());
}

#[test]
fn recovering_a_container_that_is_gone_fails() {
    require_docker!();
    let f = Fixture::new("gone");
    let first = driver();
    let cfg = f.config(json!({"image": TEST_IMAGE, "command": "/bin/sleep", "args": ["300"]}));
    let handle = first.start_task(&cfg).unwrap();
    drop(first);
    for id in f.containers() {
        Command::new("docker")
            .args(["rm", "-f", &id])
            .output()
            .unwrap();
    }
    let err = driver().recover_task(&handle).unwrap_err();
    assert!(
        err.to_string().contains("failed to inspect container"),
        "{err}"
    );
}

#[test]
fn a_container_over_its_memory_limit_is_reported_oom_killed() {
    require_docker!();
    let f = Fixture::new("oom");
    let d = driver();
    let mut cfg = f.config(sh("x=$(head -c 50000000 /dev/zero | tr '\\0' a); sleep 1"));
    cfg.resources.memory_mb = 10;
    d.start_task(&cfg).unwrap();
    let exit = wait_exit(&d, &cfg.id);
    assert!(exit.oom_killed, "{exit:?}");
    assert_eq!(exit.err.as_deref(), Some("OOM Killed"));
    d.destroy_task(&cfg.id, true).unwrap();
}

#[test]
fn exec_runs_in_the_container_and_returns_its_output() {
    require_docker!();
    let f = Fixture::new("exec");
    let d = driver();
    let cfg = f.config(json!({"image": TEST_IMAGE, "command": "/bin/sleep", "args": ["300"]}));
    d.start_task(&cfg).unwrap();
    let cmd: Vec<String> = ["/bin/sh", "-c", "echo hi $GREETING; echo oops >&2; exit 4"]
        .map(String::from)
        .to_vec();
    let out = d.exec_task(&cfg.id, &cmd, WAIT).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi hello\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
    assert_eq!(out.exit_code, 4);
    let slow: Vec<String> = ["/bin/sleep", "5"].map(String::from).to_vec();
    let err = d
        .exec_task(&cfg.id, &slow, Duration::from_millis(300))
        .unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    d.destroy_task(&cfg.id, true).unwrap();
}

/// Runs `command` through `exec_task_streaming` with `inputs` queued; (output, result).
fn exec_streaming(
    d: &DockerDriver,
    task_id: &str,
    command: &[&str],
    tty: bool,
    inputs: Vec<drover_abi::ExecInput>,
) -> (String, String, Result<drover_abi::ExitResult, DriverError>) {
    let (stream, caller) = drover_abi::ChannelExecStream::new();
    for input in inputs {
        caller.input.send(input).unwrap();
    }
    let options = drover_abi::ExecOptions {
        command: command.iter().map(|s| s.to_string()).collect(),
        tty,
    };
    let result = d.exec_task_streaming(task_id, &options, &stream);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for piece in caller.output.try_iter() {
        match piece {
            drover_abi::ExecStreamOutput::Stdout(b) => out.extend(b),
            drover_abi::ExecStreamOutput::Stderr(b) => err.extend(b),
        }
    }
    (
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
        result,
    )
}

#[test]
fn an_interactive_exec_in_the_container_takes_stdin_and_exits_with_its_code() {
    require_docker!();
    let f = Fixture::new("exec-stream");
    let d = driver();
    let cfg = f.config(json!({"image": TEST_IMAGE, "command": "/bin/sleep", "args": ["300"]}));
    d.start_task(&cfg).unwrap();
    let stdin = |s: &str| drover_abi::ExecInput::Stdin(s.as_bytes().to_vec());
    let (out, _, result) = exec_streaming(
        &d,
        &cfg.id,
        &["/bin/sh"],
        true,
        vec![
            drover_abi::ExecInput::Resize(drover_abi::TerminalSize {
                height: 30,
                width: 90,
            }),
            stdin("echo hello-$((1+2))\nexit 3\n"),
        ],
    );
    assert_eq!(result.unwrap().exit_code, 3, "{out}");
    assert!(out.contains("hello-3"), "{out:?}");
    let (out, err, result) = exec_streaming(
        &d,
        &cfg.id,
        &["/bin/sh", "-c", "cat; echo oops >&2"],
        false,
        vec![stdin("piped"), drover_abi::ExecInput::CloseStdin],
    );
    assert_eq!(result.unwrap().exit_code, 0);
    assert_eq!((out.as_str(), err.as_str()), ("piped", "oops\n"));
    d.destroy_task(&cfg.id, true).unwrap();
}

#[test]
fn stats_report_memory_and_cpu_of_the_container() {
    require_docker!();
    let f = Fixture::new("stats");
    let d = driver();
    let cfg = f.config(sh(
        "x=$(head -c 3000000 /dev/zero | tr '\\0' a); echo ready; sleep 300",
    ));
    d.start_task(&cfg).unwrap();
    f.stdout.wait_for("ready", WAIT);
    let usage = d.task_stats(&cfg.id).unwrap();
    // The cgroup's own figure (how much of the shell's 3 MB it counts varies by kernel).
    assert!(usage.memory_rss_bytes > 0, "{usage:?}");
    assert!(usage.cpu_total_ticks > 0.0, "{usage:?}");
    assert!(usage.timestamp > 0);
    d.destroy_task(&cfg.id, true).unwrap();
}

#[test]
fn signals_reach_the_container() {
    require_docker!();
    let f = Fixture::new("signal");
    let d = driver();
    let cfg = f.config(sh(
        "trap 'echo got-usr1' USR1; echo ready; while true; do sleep 0.1; done",
    ));
    d.start_task(&cfg).unwrap();
    f.stdout.wait_for("ready", WAIT);
    d.signal_task(&cfg.id, "SIGUSR1").unwrap();
    f.stdout.wait_for("got-usr1", WAIT);
    assert!(matches!(
        d.signal_task(&cfg.id, "SIGNOPE"),
        Err(DriverError::InvalidConfig(_))
    ));
    d.destroy_task(&cfg.id, true).unwrap();
}

fn http_get(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_group_port_is_published_on_its_host_port() {
    require_docker!();
    let f = Fixture::new("ports");
    std::fs::write(f.task_dir.join("local/index.html"), "hello-from-docker\n").unwrap();
    let d = driver();
    let host_port = free_port();
    let mut cfg = f.config(json!({
        "image": TEST_IMAGE,
        "command": "/bin/httpd",
        "args": ["-f", "-p", "${NOMAD_PORT_http}", "-h", "/local"],
        "ports": ["http"],
    }));
    // The client interpolates the config; here by hand.
    cfg.driver_config["args"][2] = json!("8080");
    std::sync::Arc::make_mut(&mut cfg.env).insert("NOMAD_PORT_http".into(), "8080".into());
    std::sync::Arc::make_mut(&mut cfg.env)
        .insert("NOMAD_HOST_PORT_http".into(), host_port.to_string());
    std::sync::Arc::make_mut(&mut cfg.env).insert("NOMAD_HOST_IP_http".into(), "127.0.0.1".into());
    d.start_task(&cfg).unwrap();
    let deadline = Instant::now() + WAIT;
    let body = loop {
        if let Some(b) = http_get(host_port).filter(|b| b.contains("200 OK")) {
            break b;
        }
        assert!(
            Instant::now() < deadline,
            "nothing served on 127.0.0.1:{host_port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(body.contains("hello-from-docker"), "{body}");
    d.stop_task(&cfg.id, Duration::from_millis(100), "SIGTERM")
        .unwrap();
    d.destroy_task(&cfg.id, false).unwrap();
}

#[test]
fn an_image_is_loaded_from_an_archive_in_the_task_dir() {
    require_docker!();
    let f = Fixture::new("load");
    let tag = format!("drover-test-load-{}:v1", f.alloc_id.to_ascii_lowercase());
    let docker = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    docker(&["tag", TEST_IMAGE, &tag]);
    let archive = f.task_dir.join("local/image.tar");
    docker(&["save", "-o", archive.to_str().unwrap(), &tag]);
    docker(&["rmi", &tag]);
    let d = driver();
    let cfg = f.config(
        json!({"image": tag, "load": "image.tar", "command": "/bin/echo", "args": ["loaded"]}),
    );
    let started = d.start_task(&cfg);
    let loaded = crate::testing::image_exists(&tag);
    let _ = Command::new("docker")
        .args(["rm", "-f"])
        .args(f.containers())
        .output();
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    started.unwrap();
    assert!(loaded);
    f.stdout.wait_for("loaded", WAIT);
}

#[test]
fn a_missing_image_or_failed_pull_fails_the_start_clearly() {
    require_docker!();
    let f = Fixture::new("pull");
    let d = driver();
    let err = d
        .start_task(&f.config(json!({"image": "drover-no-such-image:1"})))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("failed to pull image \"drover-no-such-image:1\""),
        "{err}"
    );
    // force_pull asks the registry even for a local image; none is reachable here.
    let err = d
        .start_task(&f.config(json!({"image": TEST_IMAGE, "force_pull": true})))
        .unwrap_err();
    assert!(err.to_string().contains("failed to pull image"), "{err}");
    assert!(matches!(
        err,
        DriverError::StartFailed {
            recoverable: true,
            ..
        }
    ));
    assert!(f.containers().is_empty());
}

#[test]
fn the_plugin_config_limits_privileges_and_host_volumes() {
    require_docker!();
    let f = Fixture::new("limits");
    let d = driver();
    let err = d
        .start_task(&f.config(json!({"image": TEST_IMAGE, "privileged": true})))
        .unwrap_err();
    assert_eq!(
        err,
        DriverError::StartFailed {
            message: "Docker privileged mode is disabled on this Nomad agent".into(),
            recoverable: false
        }
    );
    assert!(
        d.validate_task_config(&json!({"image": "x", "privileged": true}))
            .is_err()
    );
    assert!(
        d.validate_task_config(&json!({"image": "x", "cap_add": ["sys_admin"]}))
            .is_err()
    );
    let err = d
        .start_task(&f.config(json!({"image": TEST_IMAGE, "volumes": ["/etc:/host-etc"]})))
        .unwrap_err();
    assert!(err.to_string().contains("volumes are not enabled"), "{err}");
    // Enabled by the agent: the host's /etc is readable inside. (Privileged containers are
    // not tried: nested daemons like this machine's may not be allowed to run them.)
    let open = driver_with(json!({"gc": {"image": false}, "volumes": {"enabled": true}}));
    let cfg = f.config(json!({
        "image": TEST_IMAGE, "command": "/bin/cat", "args": ["/host-etc/hostname"],
        "volumes": ["/etc:/host-etc:ro"],
    }));
    open.start_task(&cfg).unwrap();
    assert!(wait_exit(&open, &cfg.id).successful());
    open.destroy_task(&cfg.id, false).unwrap();
}

#[test]
fn unused_images_are_removed_after_the_delay() {
    require_docker!();
    let f = Fixture::new("gc");
    let tag = format!("drover-test-gc-{}:v1", f.alloc_id.to_ascii_lowercase());
    let out = Command::new("docker")
        .args(["tag", TEST_IMAGE, &tag])
        .output()
        .unwrap();
    assert!(out.status.success());
    let d = driver_with(json!({"gc": {"image": true, "image_delay": "1s"}}));
    let cfg = f.config(json!({"image": tag, "command": "/bin/true"}));
    d.start_task(&cfg).unwrap();
    wait_exit(&d, &cfg.id);
    d.destroy_task(&cfg.id, false).unwrap();
    assert!(
        crate::testing::image_exists(&tag),
        "removed before the delay"
    );
    let deadline = Instant::now() + WAIT;
    while crate::testing::image_exists(&tag) {
        if Instant::now() > deadline {
            let _ = Command::new("docker").args(["rmi", &tag]).output();
            panic!("unused image {tag} was not removed");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        crate::testing::image_exists(TEST_IMAGE),
        "only the tag goes"
    );
}

#[test]
fn fingerprint_is_healthy_with_a_daemon_and_undetected_without() {
    require_docker!();
    let d = driver();
    let fp = d.fingerprint();
    assert_eq!(fp.health, HealthState::Healthy, "{}", fp.health_description);
    assert_eq!(fp.attributes["driver.docker"], "1");
    assert!(!fp.attributes["driver.docker.version"].is_empty());
    let nowhere = driver_with(json!({"endpoint": "unix:///nonexistent/docker.sock"}));
    let fp = nowhere.fingerprint();
    assert_eq!(fp.health, HealthState::Undetected);
    assert!(
        fp.health_description.contains("/nonexistent/docker.sock"),
        "{}",
        fp.health_description
    );
    assert!(fp.attributes.is_empty());
}

fn docker_out(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_bridge_network_is_a_pause_container_whose_namespace_the_tasks_join() {
    require_docker!();
    let f = Fixture::new("net");
    let d = driver();
    let request = drover_abi::NetworkCreateRequest {
        hostname: "web-1".into(),
    };
    let spec = d
        .create_network(&f.alloc_id, &request)
        .unwrap()
        .expect("docker makes the namespace itself");
    let pause = spec.labels[crate::network::SANDBOX_LABEL].clone();
    assert_eq!(
        docker_out(&[
            "inspect",
            "-f",
            "{{.Name}} {{.HostConfig.NetworkMode}} {{.State.Running}} {{.Config.Hostname}}",
            &pause
        ]),
        format!("/nomad_init_{} none true web-1", f.alloc_id)
    );
    let ns = std::fs::read_link(&spec.path).unwrap();
    assert_ne!(ns, std::fs::read_link("/proc/self/ns/net").unwrap());

    // Made again for the same allocation (an attempt that failed after it): the same one.
    let again = d.create_network(&f.alloc_id, &request).unwrap().unwrap();
    assert_eq!(again.labels, spec.labels);

    let mut cfg = f.config(json!({"image": TEST_IMAGE, "command": "/bin/sleep", "args": ["300"], "hostname": "ignored"}));
    cfg.network_isolation = Some(spec.clone());
    d.start_task(&cfg).unwrap();
    let task = f.containers()[0].clone();
    assert_eq!(
        docker_out(&["inspect", "-f", "{{.HostConfig.NetworkMode}}", &task]),
        format!("container:{pause}")
    );
    let task_pid = docker_out(&["inspect", "-f", "{{.State.Pid}}", &task]);
    assert_eq!(
        std::fs::read_link(format!("/proc/{task_pid}/ns/net")).unwrap(),
        ns,
        "the task runs in the pause container's namespace"
    );
    d.destroy_task(&cfg.id, true).unwrap();

    d.destroy_network(&f.alloc_id, &spec).unwrap();
    assert_eq!(
        docker_out(&["ps", "-a", "-q", "--filter", &format!("id={pause}")]),
        ""
    );
    // Gone already: not an error.
    d.destroy_network(&f.alloc_id, &spec).unwrap();
}

#[test]
fn a_container_exit_is_notified_and_at_once_once_known() {
    require_docker!();
    let f = Fixture::new("notify");
    let d = driver();
    let cfg = f.config(sh("sleep 1; exit 4"));
    d.start_task(&cfg).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let first = tx.clone();
    assert!(d.notify_exit(
        &cfg.id,
        Box::new(move || {
            let _ = first.send("exited");
        })
    ));
    assert_eq!(rx.recv_timeout(WAIT), Ok("exited"));
    assert_eq!(wait_exit(&d, &cfg.id).exit_code, 4);
    assert!(d.notify_exit(
        &cfg.id,
        Box::new(move || {
            let _ = tx.send("again");
        })
    ));
    assert_eq!(rx.try_recv(), Ok("again"));
    assert!(!d.notify_exit("no-such-task", Box::new(|| {})));
    d.destroy_task(&cfg.id, false).unwrap();
}
