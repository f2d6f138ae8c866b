//! `drover alloc exec` end to end: a dev agent runs a long task, and the CLI execs a shell in
//! it through the agent's websocket, with stdin piped, as a script would. raw_exec runs the
//! shell on the host, exec inside the task's namespaces and root, docker in its container, a
//! sidecar plugin over Nomad's ExecTaskStreaming.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use drover_tests::{Agent, TempDir, allocs, drover_bin, output_text, run_long_sleep, write_job};

/// What the shell is fed: `$((1+2))` shows the remote shell evaluated it.
pub const SCRIPT: &str = "echo hello-$((1+2))\nexit 3\n";

/// Runs `drover alloc exec <args>` against `addr` with `stdin` piped in; gives up after a
/// minute (killing the CLI) so a hang fails the test instead of stalling it.
pub fn exec_cli(addr: &str, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(drover_bin())
        .arg("alloc")
        .arg("exec")
        .args(args)
        .env("DROVER_ADDR", addr)
        .env_remove("NOMAD_ADDR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn drover alloc exec");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes())
        .expect("write the script");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("poll the CLI").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("the CLI's output")
}

/// The job's one allocation.
fn alloc_id(agent: &Agent, job: &str) -> String {
    allocs(agent, job)[0]["ID"]
        .as_str()
        .expect("an allocation id")
        .to_string()
}

fn assert_shell_ran(out: &Output, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("hello-3"),
        "{what}: no hello-3 in the output: {}",
        output_text(out)
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{what}: exit code: {}",
        output_text(out)
    );
}

#[test]
fn alloc_exec_runs_an_interactive_shell_in_a_raw_exec_task_and_exits_with_its_code() {
    let dir = TempDir::new("exec-raw");
    let agent = Agent::start_dev(dir.path(), &[]);
    run_long_sleep(&agent, &dir, "raw_exec", "3600.701");
    let id = alloc_id(&agent, "long");
    let out = exec_cli(&agent.addr(), &["-i", "-t", &id, "/bin/sh"], SCRIPT);
    assert_shell_ran(&out, "raw_exec with a tty");
    // Without a tty: stdout and stderr stay apart, and the task's environment is there.
    let out = exec_cli(
        &agent.addr(),
        &[
            "-t=false",
            "-task",
            "sleep",
            &id[..8],
            "/bin/sh",
            "-c",
            "echo task=$NOMAD_TASK_NAME; echo oops >&2; exit 4",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(4), "{}", output_text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "task=sleep\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
}

#[test]
fn alloc_exec_runs_a_shell_inside_an_exec_task() {
    let dir = TempDir::new("exec-exec");
    let agent = Agent::start_dev(dir.path(), &[]);
    run_long_sleep(&agent, &dir, "exec", "3600.702");
    let id = alloc_id(&agent, "long");
    let out = exec_cli(&agent.addr(), &["-i", "-t", &id, "/bin/sh"], SCRIPT);
    assert_shell_ran(&out, "exec with a tty");
    // Inside the task: PID 1 is the task's command, and the user is the task's (nobody).
    let out = exec_cli(
        &agent.addr(),
        &[
            "-t=false",
            &id,
            "/bin/sh",
            "-c",
            "tr '\\0' ' ' < /proc/1/cmdline; echo; id -un",
        ],
        "",
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("sleep 3600.702"), "{stdout}");
    assert!(stdout.ends_with("nobody\n"), "{stdout}");
}

#[test]
fn alloc_exec_refuses_what_cannot_run_with_nomads_messages() {
    let dir = TempDir::new("exec-refused");
    let agent = Agent::start_dev(dir.path(), &[]);
    run_long_sleep(&agent, &dir, "raw_exec", "3600.703");
    let id = alloc_id(&agent, "long");
    let out = exec_cli(&agent.addr(), &["-task", "nope", &id, "sh"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        output_text(&out).contains("Could not find task named: nope"),
        "{}",
        output_text(&out)
    );
    let out = exec_cli(&agent.addr(), &[&id], "");
    assert!(
        output_text(&out).contains("A command is required"),
        "{}",
        output_text(&out)
    );
    let out = exec_cli(&agent.addr(), &["-i=false", "-t", &id, "sh"], "");
    assert!(
        output_text(&out).contains("-i must be enabled if running with tty"),
        "{}",
        output_text(&out)
    );
    // A program that does not exist: the driver's error comes back through the socket.
    let out = exec_cli(&agent.addr(), &["-t=false", &id, "/no/such/program"], "");
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("failed to exec into task:"),
        "{}",
        output_text(&out)
    );
    // A finished task cannot be exec'd into.
    let batch = write_job(
        &dir,
        "done.nomad",
        r#"
job "done" {
  datacenters = ["dc1"]
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
"#,
    );
    let run = agent.cli(&["job", "run", &batch]);
    assert!(run.status.success(), "{}", output_text(&run));
    agent.eventually(
        "the batch alloc to complete",
        Duration::from_secs(60),
        || {
            allocs(&agent, "done")
                .iter()
                .any(|a| a["ClientStatus"] == "complete")
        },
    );
    let done = alloc_id(&agent, "done");
    let out = exec_cli(&agent.addr(), &["-t=false", &done, "sh"], "");
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("task \"t\" is not running."),
        "{}",
        output_text(&out)
    );
}

// Builds the docker test image; plain std and the docker CLI, shared with the driver's tests.
#[path = "../../drivers/docker/src/testing.rs"]
#[allow(dead_code)]
mod docker_image;

#[test]
fn alloc_exec_runs_a_shell_in_a_docker_task() {
    match docker_image::docker_tests_enabled() {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => panic!("{e}"),
    }
    let dir = TempDir::new("exec-docker");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(
        &dir,
        "box.nomad",
        &format!(
            r#"
job "box" {{
  datacenters = ["dc1"]
  group "g" {{
    task "box" {{
      driver = "docker"
      kill_timeout = "1s"
      config {{
        image   = "{}"
        command = "/bin/sleep"
        args    = ["3600"]
      }}
      resources {{
        cpu    = 50
        memory = 32
      }}
    }}
  }}
}}
"#,
            docker_image::TEST_IMAGE
        ),
    );
    let run = agent.cli(&["job", "run", "-detach", &job]);
    assert!(run.status.success(), "{}", output_text(&run));
    agent.eventually("the container to run", Duration::from_secs(90), || {
        allocs(&agent, "box")
            .iter()
            .any(|a| a["ClientStatus"] == "running")
    });
    let id = alloc_id(&agent, "box");
    let out = exec_cli(&agent.addr(), &["-i", "-t", &id, "/bin/sh"], SCRIPT);
    assert_shell_ran(&out, "docker with a tty");
    let stop = agent.cli(&["job", "stop", "-purge", "box"]);
    assert!(stop.status.success(), "{}", output_text(&stop));
}

/// `cargo test` builds no binary of another package: build the sidecar (a no-op when fresh).
fn build_sidecar() -> std::path::PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "-p", "skeleton-sidecar"])
        .current_dir(drover_tests::workspace_root())
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p skeleton-sidecar failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| drover_tests::workspace_root().join("target"))
        .join("debug")
        .join("skeleton-sidecar")
}

#[test]
fn alloc_exec_reaches_a_sidecar_plugins_task_over_execstreaming() {
    let dir = TempDir::new("exec-sidecar");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    std::fs::copy(build_sidecar(), plugins.join("skeleton-sidecar")).expect("copy the plugin");
    let _reaper = drover_tests::PluginReaper {
        dir: dir.path().to_path_buf(),
        program: "skeleton-sidecar",
    };
    let plugin_dir = plugins.display().to_string();
    let agent = Agent::start_dev(dir.path(), &["--plugin-dir", &plugin_dir]);
    let seconds = (3_000_000 + std::process::id()).to_string();
    run_long_sleep(&agent, &dir, "skeleton-sidecar", &seconds);
    let id = alloc_id(&agent, "long");
    // The skeleton execs over pipes (it has no terminal), so the shell reads the script as a
    // file; stdin still goes all the way through the plugin protocol.
    let out = exec_cli(&agent.addr(), &["-i", "-t=false", &id, "/bin/sh"], SCRIPT);
    assert_shell_ran(&out, "skeleton-sidecar");
    let stop = agent.cli(&["job", "stop", "long"]);
    assert!(stop.status.success(), "{}", output_text(&stop));
}

/// A pseudo-terminal for the CLI to run on: (master, slave), sized `rows` x `cols`.
fn open_pty(rows: u16, cols: u16) -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on descriptors this function opens and then owns.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let slave = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(slave >= 0, "open the pty's slave");
        let master = std::fs::File::from_raw_fd(master);
        set_window(&master, rows, cols);
        (master, std::fs::File::from_raw_fd(slave))
    }
}

fn set_window(fd: &std::fs::File, rows: u16, cols: u16) {
    use std::os::fd::AsRawFd;
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one live winsize.
    assert_eq!(
        unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &size) },
        0
    );
}

/// Whether the terminal on `fd` is in canonical mode with echo (not raw).
fn is_cooked(fd: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: termios is plain data that tcgetattr fills.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: reads the terminal's settings into a live struct.
    assert_eq!(unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) }, 0);
    t.c_lflag & libc::ICANON != 0 && t.c_lflag & libc::ECHO != 0
}

#[test]
fn alloc_exec_on_a_real_terminal_is_raw_follows_resizes_and_restores_the_terminal() {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::sync::{Arc, Mutex};

    let dir = TempDir::new("exec-terminal");
    let agent = Agent::start_dev(dir.path(), &[]);
    run_long_sleep(&agent, &dir, "raw_exec", "3600.704");
    let id = alloc_id(&agent, "long");
    let (mut master, slave) = open_pty(24, 80);
    let mut cli = Command::new(drover_bin());
    cli.args(["alloc", "exec", &id, "/bin/sh"])
        .env("DROVER_ADDR", agent.addr())
        .env_remove("NOMAD_ADDR")
        .stdin(slave.try_clone().expect("dup the slave"))
        .stdout(slave.try_clone().expect("dup the slave"))
        .stderr(slave.try_clone().expect("dup the slave"));
    // SAFETY: async-signal-safe calls between fork and exec: the CLI gets the terminal as its
    // controlling terminal, as in a shell, so resizes reach it as SIGWINCH.
    unsafe {
        cli.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cli.spawn().expect("spawn the CLI on a terminal");
    let screen = Arc::new(Mutex::new(String::new()));
    let mut reader = master.try_clone().expect("dup the master");
    let seen = Arc::clone(&screen);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                return;
            }
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            seen.lock().expect("screen").push_str(&text);
        }
    });
    let wait_for = |text: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !screen.lock().expect("screen").contains(text) {
            assert!(
                Instant::now() < deadline,
                "{text:?} never showed; screen: {:?}",
                screen.lock().expect("screen")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    master.write_all(b"echo size-$(stty size)\r").expect("type");
    wait_for("size-24 80");
    // The session holds the local terminal raw: nothing is echoed or edited locally.
    assert!(!is_cooked(&slave), "the terminal is raw during the session");
    set_window(&master, 40, 132);
    std::thread::sleep(Duration::from_millis(300));
    master.write_all(b"echo size-$(stty size)\r").expect("type");
    wait_for("size-40 132");
    master.write_all(b"exit 5\r").expect("type");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll the CLI") {
            break status;
        }
        assert!(Instant::now() < deadline, "the CLI never exited");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(5));
    assert!(
        is_cooked(&slave),
        "the terminal is restored after the session"
    );
}
