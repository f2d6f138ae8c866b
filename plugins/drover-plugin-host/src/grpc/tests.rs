//! The gRPC adapter against a real plugin process: the skeleton example built as its sidecar
//! binary (examples/skeleton-sidecar).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use drover_abi::{Driver, DriverError, TaskState};
use drover_driver_testkit::{Kit, TaskConfigs, TaskDirs};
use serde_json::json;

use super::*;
use crate::{DriverCatalog, DriverSource};

/// The skeleton sidecar binary, built once per test process (`cargo test` builds no binaries
/// of other packages).
fn sidecar() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args(["build", "-p", "skeleton-sidecar"])
            .current_dir(&root)
            .output()
            .expect("run cargo build");
        assert!(
            out.status.success(),
            "cargo build -p skeleton-sidecar failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"))
            .join("debug/skeleton-sidecar")
    })
}

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("drover-grpc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ephemeral() -> Arc<dyn Driver> {
    load(sidecar(), &GrpcOptions::default())
        .expect("load the skeleton sidecar")
        .driver
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn alive(pid: i32) -> bool {
    process::start_ticks(pid).is_some()
}

/// Stops a plugin the test left running (SIGTERM: it removes its socket on the way out).
fn terminate(pid: i32) {
    // SAFETY: kill has no memory-safety preconditions; the pid is a plugin this test started.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    eventually("the plugin to exit", || !alive(pid));
}

#[test]
fn the_skeleton_sidecar_passes_the_conformance_kit_through_the_grpc_adapter() {
    let mut configs = TaskConfigs::command();
    configs.bad_plugin_config = Some((json!({"verbose": true}), "verbose".into()));
    // Each instance is a new plugin process, as after an agent restart.
    Kit::new("skeleton-sidecar (gRPC)", ephemeral, configs).assert_conforms();
}

#[test]
fn a_loaded_sidecar_reports_its_name_and_file_name_and_is_shut_down_with_its_driver() {
    let plugin = load(sidecar(), &GrpcOptions::default()).unwrap();
    assert_eq!(plugin.driver.plugin_info().name, "skeleton-sidecar");
    assert_eq!(plugin.config_name, "skeleton-sidecar");
    let fp = plugin.driver.fingerprint();
    assert_eq!(fp.attributes["driver.skeleton-sidecar"], "1");
    let pid = plugin.driver.pid().unwrap();
    assert!(alive(pid));
    drop(plugin);
    eventually("the plugin to exit after its driver was dropped", || {
        !alive(pid)
    });
}

#[test]
fn a_plugin_that_dies_is_restarted_and_its_tasks_recovered() {
    let plugin = load(sidecar(), &GrpcOptions::default()).unwrap();
    let driver = Arc::clone(&plugin.driver);
    let dirs = TaskDirs::new("grpc-restart").unwrap();
    let config = dirs.config("long", json!({"command": "sleep", "args": ["1000"]}));
    driver.start_task(&config).unwrap();
    let first = driver.pid().unwrap();
    driver.kill_plugin();
    eventually("a new plugin process", || {
        driver.pid().is_some_and(|p| p != first)
    });
    // The new process took the task back: it is running, and stopping it works.
    let status = driver.inspect_task(&config.id).unwrap();
    assert_eq!(status.state, TaskState::Running, "{status:?}");
    driver
        .stop_task(&config.id, Duration::from_secs(5), "SIGTERM")
        .unwrap();
    let exit = driver
        .wait_task(&config.id, Duration::from_secs(10))
        .unwrap()
        .expect("the recovered task exits after stop");
    assert!(
        exit.err.is_some() || exit.signal == 15 || exit.exit_code == 143,
        "{exit:?}"
    );
    driver.destroy_task(&config.id, false).unwrap();
}

#[test]
fn with_a_state_dir_the_plugin_outlives_its_driver_and_a_new_agent_reattaches() {
    let state = temp("reattach");
    let options = GrpcOptions {
        state_dir: Some(state.clone()),
        ..Default::default()
    };
    let first = load(sidecar(), &options).unwrap();
    let pid = first.driver.pid().unwrap();
    let dirs = TaskDirs::new("grpc-reattach").unwrap();
    let config = dirs.config("long", json!({"command": "sleep", "args": ["1000"]}));
    let handle = first.driver.start_task(&config).unwrap();
    let saved: serde_json::Value = serde_json::to_value(&handle).unwrap();
    assert!(reattach::file(&state, "skeleton-sidecar").exists());
    drop(first);
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(pid), "the plugin must outlive the agent");

    // "The agent restarts": a new load finds the saved config and the same process.
    let second = load(sidecar(), &options).unwrap();
    assert_eq!(second.driver.pid(), Some(pid), "reattached, not restarted");
    let handle = serde_json::from_value(saved).unwrap();
    second.driver.recover_task(&handle).unwrap();
    assert_eq!(
        second.driver.inspect_task(&config.id).unwrap().state,
        TaskState::Running
    );
    second
        .driver
        .stop_task(&config.id, Duration::from_secs(5), "")
        .unwrap();
    second.driver.destroy_task(&config.id, false).unwrap();
    drop(second);
    terminate(pid);

    // A reattach config naming a dead process starts a fresh plugin.
    let third = load(sidecar(), &options).unwrap();
    let new_pid = third.driver.pid().unwrap();
    assert_ne!(new_pid, pid);
    drop(third);
    terminate(new_pid);
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn the_catalog_loads_sidecars_configures_them_by_file_name_and_lets_them_replace_builtins() {
    let dir = temp("catalog");
    std::fs::copy(sidecar(), dir.join("my-sidecar")).unwrap();
    let mut cat = DriverCatalog::new();
    // A built-in that has the plugin's name is replaced by it.
    cat.register(Arc::new(skeleton_driver::SkeletonDriver::named(
        "skeleton-sidecar",
    )));
    cat.load_plugin_dir(&dir).unwrap();
    assert!(matches!(
        cat.source("skeleton-sidecar"),
        Some(DriverSource::Grpc { path }) if path.ends_with("my-sidecar")
    ));
    cat.configure(&BTreeMap::from([("my-sidecar".to_string(), json!({}))]))
        .unwrap();
    let e = cat
        .configure(&BTreeMap::from([(
            "my-sidecar".to_string(),
            json!({"verbose": true}),
        )]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("plugin \"my-sidecar\"") && e.contains("verbose"),
        "{e}"
    );
    let driver = cat.get("skeleton-sidecar").unwrap();
    assert!(matches!(
        driver.validate_task_config(&json!({"command": 1, "args": "x"})),
        Err(DriverError::InvalidConfig(m)) if m.contains("\"args\"")
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Events of an exec session until its exit: (stdout, stderr, exit).
fn run_to_exit(session: &ExecSession) -> (String, String, drover_abi::ExitResult) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    loop {
        assert!(Instant::now() < deadline, "the exec never exited");
        match session.next(Duration::from_millis(200)).unwrap() {
            Some(ExecEvent::Stdout(d)) => stdout.extend(d),
            Some(ExecEvent::Stderr(d)) => stderr.extend(d),
            Some(ExecEvent::Exited(exit)) => {
                let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
                return (text(stdout), text(stderr), exit);
            }
            None => {}
        }
    }
}

#[test]
fn exec_streaming_through_the_sidecar_delivers_both_streams_and_the_exit() {
    let plugin = load(sidecar(), &GrpcOptions::default()).unwrap();
    let driver = Arc::clone(&plugin.driver);
    assert!(driver.capabilities().exec);
    let dirs = TaskDirs::new("grpc-exec").unwrap();
    let config = dirs.config("long", json!({"command": "sleep", "args": ["1000"]}));
    driver.start_task(&config).unwrap();

    let script = "echo out in $NOMAD_TASK_NAME; echo err >&2; exit 4";
    let command = ["/bin/sh".to_string(), "-c".into(), script.into()];
    let mut session = driver.exec_streaming(&config.id, &command, false).unwrap();
    // `sh -c` reads no stdin: what is sent is taken and dropped, never an error.
    session.write_stdin(b"ignored\n").unwrap();
    session.resize(24, 80).unwrap();
    session.close_stdin().unwrap();
    let (stdout, stderr, exit) = run_to_exit(&session);
    assert_eq!(stdout, "out in long\n");
    assert_eq!(stderr, "err\n");
    assert_eq!(exit.exit_code, 4);
    assert!(
        session.next(Duration::from_millis(100)).is_err(),
        "the session is over"
    );

    // An exec in a task the plugin does not know fails through the stream.
    let unknown = driver
        .exec_streaming("nope", &command, false)
        .unwrap()
        .next(Duration::from_secs(10));
    assert_eq!(unknown, Err(DriverError::TaskNotFound("nope".into())));

    // The contract's exec_task (ExecTask) sees the same command the same way.
    let out = driver
        .exec_task(&config.id, &command, Duration::from_secs(10))
        .unwrap();
    assert_eq!((out.stdout, out.exit_code), (b"out in long\n".to_vec(), 4));
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn the_contracts_streaming_exec_crosses_the_sidecar_with_stdin_and_sees_the_caller_leave() {
    let plugin = load(sidecar(), &GrpcOptions::default()).unwrap();
    let driver = Arc::clone(&plugin.driver);
    let dirs = TaskDirs::new("grpc-exec-stream").unwrap();
    let config = dirs.config("long", json!({"command": "sleep", "args": ["1000"]}));
    driver.start_task(&config).unwrap();
    let options = |script: &str| drover_abi::ExecOptions {
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        tty: false,
    };

    let (stream, caller) = drover_abi::ChannelExecStream::new();
    caller
        .input
        .send(drover_abi::ExecInput::Stdin(b"piped".to_vec()))
        .unwrap();
    caller
        .input
        .send(drover_abi::ExecInput::CloseStdin)
        .unwrap();
    let exit = driver
        .exec_task_streaming(&config.id, &options("cat; echo err >&2; exit 4"), &stream)
        .unwrap();
    assert_eq!(exit.exit_code, 4);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for piece in caller.output.try_iter() {
        match piece {
            drover_abi::ExecStreamOutput::Stdout(d) => out.extend(d),
            drover_abi::ExecStreamOutput::Stderr(d) => err.extend(d),
        }
    }
    assert_eq!(
        (out.as_slice(), err.as_slice()),
        (&b"piped"[..], &b"err\n"[..])
    );

    // The caller leaves while the command waits for stdin: the call ends, and so does it.
    let (stream, caller) = drover_abi::ChannelExecStream::new();
    let started = Instant::now();
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(caller);
        });
        let e = driver
            .exec_task_streaming(&config.id, &options("cat"), &stream)
            .unwrap_err();
        assert!(e.to_string().contains("went away"), "{e}");
    });
    assert!(started.elapsed() < Duration::from_secs(10));

    let (stream, _caller) = drover_abi::ChannelExecStream::new();
    assert_eq!(
        driver.exec_task_streaming("nope", &options("true"), &stream),
        Err(DriverError::TaskNotFound("nope".into()))
    );
    driver.destroy_task(&config.id, true).unwrap();
}

#[test]
fn task_events_of_the_sidecar_reach_subscribers_also_after_it_restarted() {
    let plugin = load(sidecar(), &GrpcOptions::default()).unwrap();
    let driver = Arc::clone(&plugin.driver);
    let events = driver.subscribe_task_events();
    let dirs = TaskDirs::new("grpc-events").unwrap();
    let started = |name: &str| {
        let config = dirs.config(name, json!({"command": "sleep", "args": ["1000"]}));
        driver.start_task(&config).unwrap();
        config
    };
    let config = started("first");
    let event = events
        .recv_timeout(Duration::from_secs(10))
        .expect("a task event");
    assert_eq!(
        (
            event.task_id.as_str(),
            event.alloc_id.as_str(),
            event.task_name.as_str()
        ),
        (config.id.as_str(), "kit-alloc", "first")
    );
    assert!(
        event.message.starts_with("started as host process "),
        "{event:?}"
    );
    assert!(!event.annotations["pid"].is_empty(), "{event:?}");
    assert!(event.timestamp > 0);

    // A restarted plugin is subscribed to again before any call reaches it.
    let first_pid = driver.pid().unwrap();
    driver.kill_plugin();
    eventually("a new plugin process", || {
        driver.pid().is_some_and(|p| p != first_pid)
    });
    let second = started("second");
    let event = events
        .recv_timeout(Duration::from_secs(10))
        .expect("a task event from the restarted plugin");
    assert_eq!(event.task_id, second.id);

    // The contract's task_events hands out the same events, from both plugin processes, once.
    let mut through_contract = Vec::new();
    while through_contract.len() < 2 {
        let batch = driver.task_events(Duration::from_secs(10)).unwrap();
        assert!(!batch.is_empty(), "no task events through the contract");
        through_contract.extend(batch);
    }
    let ids: Vec<&str> = through_contract
        .iter()
        .map(|e| e.task_id.as_str())
        .collect();
    assert_eq!(ids, [config.id.as_str(), second.id.as_str()]);
    assert!(
        through_contract[0]
            .message
            .starts_with("started as host process ")
    );
    assert_eq!(driver.task_events(Duration::from_millis(50)).unwrap(), []);
    for c in [config, second] {
        driver.destroy_task(&c.id, true).unwrap();
    }
}

#[test]
fn create_network_is_answered_not_supported_and_no_network_isolation_is_offered() {
    use drover_plugin_proto::drivers as pb;
    let plugin = load(sidecar(), &GrpcOptions::default()).unwrap();
    assert!(!plugin.driver.capabilities().network_isolation);
    let conn = plugin.driver.conn().expect("a live connection");
    let mut d = conn.driver.clone();
    let (caps, created, destroyed) = runtime::block(async move {
        let caps = d.capabilities(pb::CapabilitiesRequest {}).await;
        let created = d
            .create_network(pb::CreateNetworkRequest {
                alloc_id: "a1".into(),
                hostname: "h".into(),
            })
            .await;
        let destroyed = d
            .destroy_network(pb::DestroyNetworkRequest {
                alloc_id: "a1".into(),
                isolation_spec: None,
            })
            .await;
        (caps, created, destroyed)
    })
    .unwrap();
    let caps = caps.unwrap().into_inner().capabilities.unwrap();
    assert!(!caps.must_create_network);
    for (what, answer) in [
        ("CreateNetwork", created.map(drop)),
        ("DestroyNetwork", destroyed.map(drop)),
    ] {
        let status = answer.expect_err(what);
        assert_eq!(status.code(), tonic::Code::Unimplemented, "{what}");
        assert_eq!(
            status.message(),
            format!("{what} RPC not supported by driver")
        );
        assert_eq!(
            convert::driver_error("create_network", "", status),
            DriverError::NotSupported("create_network".into())
        );
    }
}
