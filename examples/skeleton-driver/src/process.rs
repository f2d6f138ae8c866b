//! One task process: spawning it with the task's environment and log FIFOs, watching it until it
//! exits, signalling it, and adopting it again after an agent restart.
//!
//! A simplification against the built-in raw_exec driver: a child is reaped as soon as it exits
//! and is never signalled after that, so a signal cannot reach a later process that reused the
//! pid, but whatever the task left running in its process group is not killed either.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use drover_plugin_sdk::{ExitResult, TaskConfig, TaskResourceUsage};

use crate::config::TaskCommand;

/// How long a process may take to die after SIGKILL before `stop` gives up.
const KILL_GRACE: Duration = Duration::from_secs(15);

/// The error of a recovered task, whose exit status only its former parent could see.
pub const UNKNOWN_EXIT: &str = "exit status unknown: task was recovered after an agent restart";

pub fn unix_nanos_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Opens a log FIFO the host reads. Non-blocking so that a missing reader fails at once instead
/// of hanging; then blocking again, as programs expect of their stdout.
fn open_fifo_writer(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))?;
    // SAFETY: fcntl on a descriptor we own, with integer arguments only.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(file)
}

/// The program to run: a bare name is looked up in the task's PATH (as a shell would), a
/// relative path is taken from the task directory.
fn resolve(config: &TaskConfig, command: &str) -> PathBuf {
    if command.contains('/') {
        return config.task_dir.join(command);
    }
    let path = config
        .env
        .get("PATH")
        .map(String::as_str)
        .unwrap_or("/usr/bin:/bin");
    path.split(':')
        .map(|dir| Path::new(dir).join(command))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(command))
}

#[derive(Default)]
struct State {
    exit: Option<ExitResult>,
    completed_at: i64,
}

pub struct Process {
    pid: i32,
    start_ticks: u64,
    state: Mutex<State>,
    exited: Condvar,
}

impl Process {
    /// Starts the task's command in its own process group.
    pub fn spawn(config: &TaskConfig, command: &TaskCommand) -> io::Result<Arc<Process>> {
        let stdout = open_fifo_writer(&config.stdout_path)?;
        let stderr = open_fifo_writer(&config.stderr_path)?;
        let program = resolve(config, &command.command);
        let child = Command::new(&program)
            .args(&command.args)
            .env_clear()
            .envs(config.env.iter())
            .current_dir(&config.task_dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                io::Error::new(e.kind(), format!("starting {}: {e}", program.display()))
            })?;
        let pid = i32::try_from(child.id()).map_err(io::Error::other)?;
        let start_ticks = start_ticks(pid)?;
        let process = Arc::new(Process::new(pid, start_ticks));
        let watcher = Arc::clone(&process);
        std::thread::Builder::new()
            .name(format!("skeleton-wait-{pid}"))
            .spawn(move || watcher.wait_for_child(child))?;
        Ok(process)
    }

    /// Adopts `pid` after a restart, if it is still the process that started at `start_ticks`.
    pub fn recover(pid: i32, start_ticks_then: u64) -> io::Result<Arc<Process>> {
        let now = start_ticks(pid).map_err(|_| {
            io::Error::new(io::ErrorKind::NotFound, format!("process {pid} is gone"))
        })?;
        if now != start_ticks_then {
            return Err(io::Error::other(format!(
                "pid {pid} now belongs to another process"
            )));
        }
        // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor we just opened and own; descriptors fit an i32.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        let process = Arc::new(Process::new(pid, start_ticks_then));
        let watcher = Arc::clone(&process);
        std::thread::Builder::new()
            .name(format!("skeleton-poll-{pid}"))
            .spawn(move || watcher.poll_recovered(pidfd))?;
        Ok(process)
    }

    fn new(pid: i32, start_ticks: u64) -> Process {
        Process {
            pid,
            start_ticks,
            state: Mutex::new(State::default()),
            exited: Condvar::new(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn start_ticks(&self) -> u64 {
        self.start_ticks
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self, exit: ExitResult) {
        let mut state = self.lock();
        state.exit = Some(exit);
        state.completed_at = unix_nanos_now();
        self.exited.notify_all();
    }

    fn wait_for_child(&self, mut child: Child) {
        let exit = match child.wait() {
            Ok(status) => match status.signal() {
                Some(signal) => ExitResult {
                    exit_code: 128 + signal,
                    signal,
                    ..Default::default()
                },
                None => ExitResult {
                    exit_code: status.code().unwrap_or(-1),
                    ..Default::default()
                },
            },
            Err(e) => ExitResult {
                exit_code: -1,
                err: Some(format!("waiting for process {}: {e}", self.pid)),
                ..Default::default()
            },
        };
        self.finish(exit);
    }

    fn poll_recovered(&self, pidfd: OwnedFd) {
        let mut fds = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut fds, 1, -1) };
            if rc > 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
        self.finish(ExitResult {
            err: Some(UNKNOWN_EXIT.to_string()),
            ..Default::default()
        });
    }

    pub fn exit_result(&self) -> Option<ExitResult> {
        self.lock().exit.clone()
    }

    pub fn completed_at(&self) -> i64 {
        self.lock().completed_at
    }

    /// Blocks up to `timeout` for the exit; `None` while the process runs.
    pub fn wait(&self, timeout: Duration) -> Option<ExitResult> {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.lock();
        loop {
            if let Some(exit) = &state.exit {
                return Some(exit.clone());
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return None;
            }
            state = self
                .exited
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Sends `signal` to the process group (`group`) or the main process only, while the main
    /// process runs. Returns whether it was sent.
    pub fn signal(&self, signal: i32, group: bool) -> io::Result<bool> {
        let state = self.lock();
        if state.exit.is_some() {
            return Ok(false);
        }
        let target = if group { -self.pid } else { self.pid };
        // SAFETY: kill has no memory-safety preconditions; the lock keeps the exit from being
        // recorded (and the pid from being released by our reaper) while we send.
        if unsafe { libc::kill(target, signal) } == 0 {
            return Ok(true);
        }
        match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            e => Err(e),
        }
    }

    /// `signal`, up to `timeout` for the exit, then SIGKILL. A zero timeout kills at once.
    pub fn stop(&self, timeout: Duration, signal: i32) -> io::Result<ExitResult> {
        if !timeout.is_zero() && self.signal(signal, true)? {
            self.wait(timeout);
        }
        self.signal(libc::SIGKILL, true)?;
        self.wait(KILL_GRACE).ok_or_else(|| {
            io::Error::other(format!(
                "process {} did not exit {KILL_GRACE:?} after SIGKILL",
                self.pid
            ))
        })
    }

    /// Memory and CPU of the main process, from /proc.
    pub fn usage(&self) -> io::Result<TaskResourceUsage> {
        let fields = stat_fields(self.pid)?;
        let field = |i: usize| -> u64 { fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0) };
        // SAFETY: sysconf takes an integer.
        let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        // After the ")" of the command name: utime is the 12th field, stime the 13th, rss the 22nd.
        Ok(TaskResourceUsage {
            memory_rss_bytes: field(21) * page,
            cpu_total_ticks: (field(11) + field(12)) as f64,
            timestamp: unix_nanos_now(),
        })
    }
}

/// The fields of /proc/PID/stat after the command name (which may hold spaces).
fn stat_fields(pid: i32) -> io::Result<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .ok_or_else(|| io::Error::other(format!("unreadable /proc/{pid}/stat")))?;
    Ok(after.split_whitespace().map(str::to_string).collect())
}

/// When `pid` started, in clock ticks since boot: with the pid, it names one process for good.
pub fn start_ticks(pid: i32) -> io::Result<u64> {
    stat_fields(pid)?
        .get(19)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no start time in /proc/{pid}/stat")))
}
