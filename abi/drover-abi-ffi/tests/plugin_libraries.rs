//! Real plugin libraries through the host loader: a plugin built against the previous ABI (the
//! frozen 1.0.0 snapshot in fixtures/) loads and works in this host; a panicking plugin's
//! panics come back as errors; libraries with a wrong or missing root module are refused with
//! the file named.
//!
//! The fixtures are separate cargo workspaces, built here with `cargo build` into this
//! workspace's target directory (shared, so abi_stable is compiled once).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use drover_abi::{Driver, DriverError, HealthState, TaskConfig, TaskState};
use drover_abi_ffi::host::{FfiDriver, LoadError, load_library};
use drover_abi_ffi::{HostLogger, LogLevel, RStr};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// Builds the fixture workspace `name` once per test process; returns `target/debug`.
fn build(name: &str, once: &'static OnceLock<PathBuf>) -> &'static Path {
    once.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .arg("build")
            .arg("--manifest-path")
            .arg(fixtures().join(name).join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", target_dir())
            .output()
            .expect("run cargo");
        assert!(
            out.status.success(),
            "building fixture {name} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target_dir().join("debug")
    })
}

fn v1_library() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    build("plugin_v1", &BUILT).join("libplugin_v1.so")
}

fn current_fixture(lib: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    build("current", &BUILT).join(lib)
}

fn task(id: &str, driver_config: serde_json::Value) -> TaskConfig {
    TaskConfig {
        id: id.into(),
        name: "t".into(),
        alloc_id: "a".into(),
        job_name: "j".into(),
        group_name: "g".into(),
        env: Default::default(),
        driver_config,
        resources: Default::default(),
        user: String::new(),
        alloc_dir: "/tmp".into(),
        task_dir: "/tmp".into(),
        stdout_path: "/dev/null".into(),
        stderr_path: "/dev/null".into(),
        ..Default::default()
    }
}

extern "C" fn ignore_logs(_: LogLevel, _: RStr<'_>, _: RStr<'_>) {}

#[test]
fn a_plugin_built_against_abi_1_0_loads_and_runs_in_this_host() {
    let lib = load_library(&v1_library(), Some(HostLogger { log: ignore_logs })).unwrap();
    assert_eq!(lib.abi_version(), "1.0.0");
    assert_ne!(lib.abi_version(), drover_abi_ffi::ABI_VERSION);
    // The 1.1 field is absent, and the host copes.
    assert!(!lib.accepts_host_logger());
    let d: FfiDriver = lib.new_driver().unwrap();

    assert_eq!(d.plugin_info().name, "v1-memory");
    assert_eq!(d.fingerprint().health, HealthState::Healthy);
    // Task events came after 1.0: the plugin's `call` answers them not supported, at once.
    assert_eq!(
        d.task_events(Duration::from_secs(5)),
        Err(DriverError::NotSupported("task_events".into()))
    );
    // So did the streaming exec: not supported either, without starting anything.
    let (stream, _caller) = drover_abi::ChannelExecStream::new();
    let options = drover_abi::ExecOptions {
        command: vec!["/bin/sh".into()],
        tty: true,
    };
    assert_eq!(
        d.exec_task_streaming("t1", &options, &stream),
        Err(DriverError::NotSupported("exec_task_streaming".into()))
    );
    d.set_config(&serde_json::json!({})).unwrap();
    assert_eq!(
        d.set_config(&serde_json::json!({"color": "red"})),
        Err(DriverError::InvalidConfig("unknown field \"color\"".into()))
    );

    d.start_task(&task("a/done/1", serde_json::json!({"exit_code": 4})))
        .unwrap();
    let exit = d
        .wait_task("a/done/1", Duration::from_secs(1))
        .unwrap()
        .unwrap();
    assert_eq!(exit.exit_code, 4);

    let handle = d
        .start_task(&task("a/long/1", serde_json::json!({})))
        .unwrap();
    assert_eq!(d.wait_task("a/long/1", Duration::ZERO).unwrap(), None);
    assert_eq!(
        d.inspect_task("a/long/1").unwrap().state,
        TaskState::Running
    );
    // Recovery by a second instance from the same library.
    let again = lib.new_driver().unwrap();
    again.recover_task(&handle).unwrap();
    again
        .stop_task("a/long/1", Duration::from_secs(1), "SIGTERM")
        .unwrap();
    assert_eq!(
        again
            .wait_task("a/long/1", Duration::ZERO)
            .unwrap()
            .unwrap()
            .signal,
        15
    );
    again.destroy_task("a/long/1", false).unwrap();
    assert_eq!(
        again.inspect_task("a/long/1"),
        Err(DriverError::TaskNotFound("a/long/1".into()))
    );
    // Defaults and extension methods a 1.0 plugin never heard of.
    assert!(matches!(
        d.exec_task("a/done/1", &["true".into()], Duration::from_secs(1)),
        Err(DriverError::NotSupported(_))
    ));
    assert_eq!(
        d.call_extension("task_events", "{}"),
        Err(DriverError::NotSupported("task_events".into()))
    );
    assert!(
        matches!(
            d.validate_task_config(&serde_json::json!({"exit_code": "x"})),
            Err(DriverError::InvalidConfig(m)) if m.contains("exit_code")
        ),
        "errors keep their kind and field across versions"
    );
}

#[test]
fn a_panicking_plugin_returns_errors_and_keeps_the_host_alive() {
    let lib = load_library(&current_fixture("libplugin_panicking.so"), None).unwrap();
    assert_eq!(lib.abi_version(), drover_abi_ffi::ABI_VERSION);
    assert!(lib.accepts_host_logger());
    let d = lib.new_driver().unwrap();

    match d.start_task(&task("a/t/1", serde_json::json!({}))) {
        Err(DriverError::Other(m)) => {
            assert!(m.contains("panicked in start_task"), "{m}");
            assert!(m.contains("index out of bounds"), "{m}");
        }
        other => panic!("expected the panic as an error, got {other:?}"),
    }
    let handle = drover_abi::TaskHandle {
        version: 1,
        driver: "panicking".into(),
        config: task("a/t/1", serde_json::json!({})),
        state: serde_json::json!({}),
    };
    match d.recover_task(&handle) {
        Err(DriverError::Other(m)) => {
            assert!(m.contains("recover_task blew up with a String: 42"), "{m}")
        }
        other => panic!("expected the panic as an error, got {other:?}"),
    }
    let fp = d.fingerprint();
    assert_eq!(fp.health, HealthState::Unhealthy);
    assert!(
        fp.health_description.contains("fingerprint blew up"),
        "{fp:?}"
    );
    // Still alive and answering.
    assert_eq!(
        d.inspect_task("x"),
        Err(DriverError::TaskNotFound("x".into()))
    );
}

#[test]
fn a_library_with_another_root_module_is_refused_naming_the_file() {
    let path = current_fixture("libplugin_wrong_root.so");
    let e = load_library(&path, None).err().expect("must be refused");
    let text = e.to_string();
    assert!(matches!(e, LoadError::WrongRootModule { .. }), "{text}");
    assert!(text.starts_with(&path.display().to_string()), "{text}");
    assert!(
        text.contains("not a Drover driver plugin of ABI 1.1"),
        "{text}"
    );
}

#[test]
fn a_library_without_a_root_module_is_refused_naming_the_file_in_our_words() {
    let path = current_fixture("libplugin_no_root.so");
    let e = load_library(&path, None).err().expect("must be refused");
    let text = e.to_string();
    assert!(matches!(e, LoadError::NoRootModule { .. }), "{text}");
    assert!(text.starts_with(&path.display().to_string()), "{text}");
    assert!(
        text.contains("exports no Drover root module") && text.contains("export_driver!"),
        "{text}"
    );
    // Not abi_stable's text ("Could load symbol", the mangled symbol name with its NUL), and
    // one line: the reason is said once.
    assert!(
        !text.contains("Could load") && !text.contains("_1as_0lib"),
        "{text}"
    );
    assert!(!text.contains('\0') && !text.contains('\n'), "{text}");
}
