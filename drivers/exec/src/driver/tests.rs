use std::path::PathBuf;
use std::time::Instant;

use drover_abi::TaskResources;
use serde_json::json;

use super::*;
use crate::caps::{CapSet, kernel_last_cap};
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
fn task_sees_exactly_its_env_and_runs_at_its_root() {
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

    // The task directory is the task's root, and the task starts there.
    let (out, _) = run(&driver, &dirs, &dirs.config("cwd", sh("pwd -P")));
    assert_eq!(out, "/\n");
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

/// Adds what the client's alloc dir has besides `local/`: the shared `alloc/` and the task's
/// `secrets/`, `tmp/` and `private/`.
fn full_layout(dirs: &TaskDirs) {
    for dir in ["alloc/data", "alloc/logs", "alloc/tmp"] {
        std::fs::create_dir_all(dirs.root.join(dir)).unwrap();
    }
    for dir in ["secrets", "tmp", "private"] {
        std::fs::create_dir_all(dirs.task_dir.join(dir)).unwrap();
    }
}

/// The top-level names Nomad's default chroot_env gives on this host (sources that exist).
fn chroot_env_top_names() -> std::collections::BTreeSet<String> {
    crate::plugin_config::DEFAULT_CHROOT_ENV
        .iter()
        .filter(|(host, _)| std::path::Path::new(host).exists())
        .map(|(_, task)| {
            task.trim_start_matches('/')
                .split('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The `Cap*:` lines of /proc/self/status, as printed by the task, keyed by set name.
fn cap_sets(status: &str) -> std::collections::BTreeMap<String, u64> {
    status
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            let name = name.strip_prefix("Cap")?;
            Some((
                name.to_string(),
                u64::from_str_radix(value.trim(), 16).ok()?,
            ))
        })
        .collect()
}

#[test]
fn task_root_holds_only_chroot_env_and_the_task_dirs() {
    let dirs = TaskDirs::new("exec-root");
    full_layout(&dirs);
    let driver = ExecDriver::new();
    let (out, exit) = run(
        &driver,
        &dirs,
        &dirs.config("ls", json!({"command": "ls", "args": ["-A", "/"]})),
    );
    assert!(exit.successful(), "{exit:?}");
    let seen: std::collections::BTreeSet<String> = out.lines().map(str::to_string).collect();
    let mut expected = chroot_env_top_names();
    for name in [
        "alloc", "dev", "proc", "sys", "local", "secrets", "tmp", "private",
    ] {
        expected.insert(name.to_string());
    }
    assert_eq!(seen, expected);
    // Nothing else of the host: not its /root, /home, nor the test's own directory.
    for host_only in ["root", "home", "var", "work"] {
        assert!(
            !seen.contains(host_only),
            "{host_only} leaked into the task root"
        );
    }
    // The mount points left on the host are empty: nothing was copied.
    assert_eq!(
        std::fs::read_dir(dirs.task_dir.join("usr"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn task_dev_has_the_usual_devices_and_nothing_of_the_host() {
    let dirs = TaskDirs::new("exec-dev");
    let driver = ExecDriver::new();
    let (out, _) = run(
        &driver,
        &dirs,
        &dirs.config(
            "dev",
            sh("ls -A /dev | tr '\\n' ' '; head -c 4 /dev/zero | wc -c"),
        ),
    );
    assert_eq!(
        out,
        "fd full mqueue null ptmx pts random shm stderr stdin stdout tty urandom zero 4\n"
    );
}

#[test]
fn task_runs_as_nobody_by_default() {
    let dirs = TaskDirs::new("exec-nobody");
    let driver = ExecDriver::new();
    let (out, exit) = run(&driver, &dirs, &dirs.config("id", sh("id -u; id -g")));
    assert!(exit.successful(), "{exit:?}");
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    assert_eq!(out, format!("{}\n{}\n", nobody.uid, nobody.gid));
    assert_eq!(nobody.uid.as_raw(), 65534);
}

#[test]
fn default_capabilities_are_nomads_without_net_raw() {
    let dirs = TaskDirs::new("exec-caps");
    let driver = ExecDriver::new();
    let expected =
        crate::plugin_config::nomad_default_caps(CapSet::supported(kernel_last_cap())).bits();
    assert_eq!(expected, 0xa804_05fb);
    for user in ["", "root"] {
        let mut config = dirs.config(
            "caps",
            json!({"command": "cat", "args": ["/proc/self/status"]}),
        );
        config.user = user.to_string();
        let (out, exit) = run(&driver, &dirs, &config);
        assert!(exit.successful(), "{exit:?}");
        let sets = cap_sets(&out);
        for set in ["Eff", "Prm", "Bnd"] {
            assert_eq!(sets[set], expected, "Cap{set} of user {user:?}:\n{out}");
            assert_eq!(
                sets[set] & (1 << crate::caps::CAP_NET_RAW),
                0,
                "CAP_NET_RAW in Cap{set}"
            );
        }
    }
}

#[test]
fn cap_add_and_cap_drop_shape_the_set_within_allow_caps() {
    let dirs = TaskDirs::new("exec-capadd");
    let driver = ExecDriver::new();
    let status = |extra: serde_json::Value| {
        let mut cfg = json!({"command": "cat", "args": ["/proc/self/status"]});
        cfg.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        cfg
    };
    let (out, _) = run(
        &driver,
        &dirs,
        &dirs.config(
            "drop",
            status(json!({"cap_drop": ["all"], "cap_add": ["CAP_KILL"]})),
        ),
    );
    let sets = cap_sets(&out);
    assert_eq!(
        (sets["Eff"], sets["Bnd"], sets["Amb"]),
        (1 << 5, 1 << 5, 1 << 5)
    );

    let err = driver
        .start_task(&dirs.config("raw", status(json!({"cap_add": ["net_raw"]}))))
        .unwrap_err();
    assert_eq!(
        err,
        DriverError::StartFailed {
            message: "driver does not allow the following capabilities: net_raw".into(),
            recoverable: false
        }
    );

    driver
        .set_config(&json!({"allow_caps": ["chown", "net_raw"]}))
        .unwrap();
    let (out, _) = run(
        &driver,
        &dirs,
        &dirs.config("allowed", status(json!({"cap_add": ["net_raw"]}))),
    );
    assert_eq!(cap_sets(&out)["Eff"], 1 | (1 << 13));
}

#[test]
fn chroot_env_is_read_only_even_for_root_and_alloc_is_shared() {
    let dirs = TaskDirs::new("exec-ro");
    full_layout(&dirs);
    let driver = ExecDriver::new();
    let mut config = dirs.config(
        "ro",
        sh("touch /usr/drover-ro-test 2>&1; echo shared > /alloc/data/from-task; echo local > /local/x; echo $NOMAD_ALLOC_DIR $NOMAD_TASK_DIR $NOMAD_SECRETS_DIR $TMPDIR"),
    );
    config.user = "root".into();
    let host = |p: &str| dirs.root.join(p).display().to_string();
    let env = std::sync::Arc::make_mut(&mut config.env);
    env.insert("NOMAD_ALLOC_DIR".into(), host("alloc"));
    env.insert("NOMAD_TASK_DIR".into(), host("task/local"));
    env.insert("NOMAD_SECRETS_DIR".into(), host("task/secrets"));
    env.insert("TMPDIR".into(), host("task/tmp"));
    let (out, _) = run(&driver, &dirs, &config);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("Read-only file system"), "{out}");
    assert_eq!(lines[1], "/alloc /local /secrets /tmp");
    assert!(!std::path::Path::new("/usr/drover-ro-test").exists());
    assert_eq!(
        std::fs::read_to_string(dirs.root.join("alloc/data/from-task")).unwrap(),
        "shared\n"
    );
    assert_eq!(
        std::fs::read_to_string(dirs.task_dir.join("local/x")).unwrap(),
        "local\n"
    );
}

#[test]
fn interpolated_host_paths_in_command_and_args_become_task_paths() {
    let dirs = TaskDirs::new("exec-interp");
    let script = dirs.task_dir.join("local/run.sh");
    std::fs::write(&script, "#!/bin/sh\necho \"$0 $1\"\n").unwrap();
    let driver = ExecDriver::new();
    let local = dirs.task_dir.join("local").display().to_string();
    let config = dirs.config(
        "interp",
        json!({"command": format!("{local}/run.sh"), "args": [format!("{local}/data")]}),
    );
    let (out, exit) = run(&driver, &dirs, &config);
    assert!(exit.successful(), "{exit:?}");
    assert_eq!(out, "/local/run.sh /local/data\n");
}

/// The namespace a task is in, read by the task from /proc/self/ns.
fn task_namespace(
    driver: &ExecDriver,
    dirs: &TaskDirs,
    kind: &str,
    extra: serde_json::Value,
) -> String {
    let mut cfg = json!({"command": "readlink", "args": [format!("/proc/self/ns/{kind}")]});
    cfg.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (out, _) = run(driver, dirs, &dirs.config("ns", cfg));
    out.trim().to_string()
}

fn host_namespace(kind: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .unwrap()
        .display()
        .to_string()
}

#[test]
fn pid_and_ipc_namespaces_are_private_unless_host_is_asked() {
    let dirs = TaskDirs::new("exec-ns");
    let driver = ExecDriver::new();
    for kind in ["pid", "ipc", "mnt", "uts"] {
        assert_ne!(
            task_namespace(&driver, &dirs, kind, json!({})),
            host_namespace(kind),
            "{kind}"
        );
    }
    let host = json!({"pid_mode": "host", "ipc_mode": "host"});
    for kind in ["pid", "ipc"] {
        assert_eq!(
            task_namespace(&driver, &dirs, kind, host.clone()),
            host_namespace(kind),
            "{kind}"
        );
    }
    // The plugin's defaults apply when the task does not say.
    driver
        .set_config(&json!({"default_pid_mode": "host"}))
        .unwrap();
    assert_eq!(
        task_namespace(&driver, &dirs, "pid", json!({})),
        host_namespace("pid")
    );
    assert_ne!(
        task_namespace(&driver, &dirs, "ipc", json!({})),
        host_namespace("ipc")
    );
}

#[test]
fn host_processes_are_invisible() {
    let dirs = TaskDirs::new("exec-hostpids");
    let driver = ExecDriver::new();
    let me = std::process::id();
    let (out, _) = run(
        &driver,
        &dirs,
        &dirs.config(
            "pids",
            sh(&format!(
                "test -e /proc/{me} && echo seen || echo hidden; echo /proc/[0-9]*"
            )),
        ),
    );
    assert_eq!(out, "hidden\n/proc/1\n");
}

#[test]
fn no_pivot_root_enters_the_root_with_chroot() {
    let dirs = TaskDirs::new("exec-nopivot");
    let driver = ExecDriver::new();
    driver.set_config(&json!({"no_pivot_root": true})).unwrap();
    let (out, exit) = run(
        &driver,
        &dirs,
        &dirs.config("chroot", sh("ls -d /local /usr /proc/1 && id -u")),
    );
    assert!(exit.successful(), "{exit:?} {out}");
    assert_eq!(out, "/local\n/proc/1\n/usr\n65534\n");
}

#[test]
fn a_custom_chroot_env_replaces_the_default() {
    let dirs = TaskDirs::new("exec-chrootenv");
    let driver = ExecDriver::new();
    // /usr and the loader's directories, no /bin: /bin/sh is gone, /usr/bin/sh is there.
    let mut env = serde_json::Map::new();
    let mut expected = vec!["dev", "local", "proc", "sys", "usr"];
    env.insert("/usr".into(), json!("/usr"));
    for loader_dir in ["lib", "lib64"] {
        if std::path::Path::new("/").join(loader_dir).exists() {
            env.insert(format!("/{loader_dir}"), json!(format!("/{loader_dir}")));
            expected.push(loader_dir);
        }
    }
    expected.sort();
    driver.set_config(&json!({ "chroot_env": env })).unwrap();
    let config = json!({"command": "/usr/bin/sh", "args": ["-c", "ls -A /; test -e /bin/sh || echo no-bin"]});
    let (out, _) = run(&driver, &dirs, &dirs.config("usr-only", config));
    assert_eq!(out, format!("{}\nno-bin\n", expected.join("\n")));
}

#[test]
fn unknown_user_fails_start_naming_it() {
    let dirs = TaskDirs::new("exec-nouser");
    let driver = ExecDriver::new();
    let mut config = dirs.config("u", json!({"command": "true"}));
    config.user = "no-such-user-drover".into();
    assert_eq!(
        driver.start_task(&config).unwrap_err(),
        DriverError::StartFailed {
            message: "user \"no-such-user-drover\" not found".into(),
            recoverable: false
        }
    );
}

#[test]
fn the_exec_driver_passes_the_conformance_kit() {
    use drover_driver_testkit::{Kit, TaskConfigs};
    let mut configs = TaskConfigs::command();
    // A task is PID 1 of its namespace, and PID 1 gets no signal it has no handler for (see
    // handled_stop_signal_reaches_the_pid_one_task). The kit stops its long-running task right
    // after the start, maybe before a shell could install a trap, so that task shares the host's
    // PID namespace and dies of INT and TERM as a plain process does.
    configs.run_until_stopped = json!({"command": "sleep", "args": ["1000"], "pid_mode": "host"});
    configs.bad_plugin_config = Some((
        json!({"allow_caps": ["chown", "bogus"]}),
        "allow_caps".into(),
    ));
    configs.bad_config = (
        json!({"command": "/bin/true", "cap_add": ["bogus"]}),
        "cap_add".into(),
    );
    Kit::new("exec", || Arc::new(ExecDriver::new()), configs).assert_conforms();
}

fn agent_mount(task_path: &str, host: &std::path::Path, readonly: bool) -> drover_abi::MountConfig {
    drover_abi::MountConfig {
        task_path: task_path.into(),
        host_path: host.display().to_string(),
        readonly,
        propagation_mode: drover_abi::MountPropagation::Private,
    }
}

#[test]
fn agent_mounts_appear_at_their_task_path_and_read_only_holds() {
    let dirs = TaskDirs::new("exec-mounts");
    let volume = dirs.root.join("volume");
    let writable = dirs.root.join("writable");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::create_dir_all(&writable).unwrap();
    std::fs::write(volume.join("f"), "from-host\n").unwrap();
    let driver = ExecDriver::new();
    let mut config = dirs.config(
        "mounts",
        sh(
            "cat /data/f; if echo x > /data/new 2>/dev/null; then echo rw; else echo ro; fi; \
            echo out > /local/csi/out",
        ),
    );
    config.user = "root".into();
    config.mounts = vec![
        agent_mount("/data", &volume, true),
        agent_mount("/local/csi", &writable, false),
    ];
    let (out, exit) = run(&driver, &dirs, &config);
    assert!(exit.successful(), "{exit:?} {out}");
    assert_eq!(out, "from-host\nro\n");
    assert!(!volume.join("new").exists());
    assert_eq!(
        std::fs::read_to_string(writable.join("out")).unwrap(),
        "out\n"
    );
    // Nothing of it is left mounted on the host.
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&*dirs.task_dir.to_string_lossy())
    );
}

#[test]
fn a_bidirectional_mount_carries_a_mount_made_in_the_task_to_the_host() {
    let dirs = TaskDirs::new("exec-bidi");
    let plugin_root = dirs.root.join("plugin-root");
    std::fs::create_dir_all(plugin_root.join("inner")).unwrap();
    let driver = ExecDriver::new();
    driver
        .set_config(&json!({"allow_caps": ["sys_admin"]}))
        .unwrap();
    let mut config = dirs.config(
        "bidi",
        json!({
            "command": "/bin/sh",
            "args": ["-c", "mount -t tmpfs tmpfs /local/csi/inner && echo from-task > /local/csi/inner/f"],
            "cap_drop": ["all"],
            "cap_add": ["sys_admin"],
        }),
    );
    config.user = "root".into();
    let mut mount = agent_mount("/local/csi", &plugin_root, false);
    mount.propagation_mode = drover_abi::MountPropagation::Bidirectional;
    config.mounts = vec![mount];
    let errors = dirs.stderr_reader();
    let (out, exit) = run(&driver, &dirs, &config);
    let inner = plugin_root.join("inner");
    let seen = std::fs::read_to_string(inner.join("f"));
    // Undo the host side before asserting, so a failure leaves no mount behind.
    let _ = nix::mount::umount2(&inner, nix::mount::MntFlags::MNT_DETACH);
    let _ = nix::mount::umount2(&plugin_root, nix::mount::MntFlags::MNT_DETACH);
    assert!(
        exit.successful(),
        "{exit:?} {out} {}",
        errors.read_until_writers_close()
    );
    assert_eq!(seen.unwrap(), "from-task\n");
}
