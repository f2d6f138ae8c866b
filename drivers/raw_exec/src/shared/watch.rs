//! Watching one task process until it exits, and signalling its process group safely.
//!
//! Every watched process is polled through its pidfd by the one `exit_poller` thread. For a
//! process this agent started, the exit is then read with `waitid(WNOWAIT)`: the status without
//! reaping, so the exited leader stays a zombie and its pid (which is also the task's process
//! group id) cannot be reused until `reap` at destroy time. That makes every `kill(-pgid)` this
//! module sends hit the task's group and nothing else. (On a kernel without pidfds, before 5.3,
//! a thread per child blocks in `waitid` instead.)
//!
//! A process recovered after an agent restart is not our child: its pidfd reports its exit,
//! whose status cannot be learned.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use drover_abi::ExitResult;
use nix::errno::Errno;
use thiserror::Error;

use super::time::unix_nanos_now;
use super::{exit_poller, procfs};

/// The error reported for a recovered task, whose exit status only its former parent could see.
pub const UNKNOWN_EXIT_STATUS: &str =
    "exit status unknown: task was recovered after an agent restart";

/// How long a task may take to die after SIGKILL before `stop` gives up (Nomad waits as long).
pub const KILL_GRACE: Duration = Duration::from_secs(15);

/// Bash's convention, which Nomad mirrors: a task killed by signal N exits with 128 + N.
const SIGNAL_EXIT_BASE: i32 = 128;

const WATCHER_STACK: usize = 64 * 1024;

/// Adjusts the exit result once, before any waiter sees it (the exec driver adds OOM facts).
pub type ExitHook = Box<dyn FnOnce(&mut ExitResult) + Send>;

#[derive(Debug, Error)]
pub enum WatchError {
    #[error("starting the watcher thread for pid {pid}: {source}")]
    Thread { pid: i32, source: std::io::Error },
    #[error("process {pid} no longer exists")]
    Gone { pid: i32 },
    #[error("pid {pid} now belongs to another process (start time {found}, expected {expected})")]
    PidReused { pid: i32, expected: u64, found: u64 },
    #[error("opening a pidfd for process {pid}: {source}")]
    Pidfd { pid: i32, source: Errno },
    #[error("sending signal {signal} to task process {pid}: {source}")]
    Signal {
        pid: i32,
        signal: i32,
        source: Errno,
    },
    #[error("task process {pid} did not exit {grace:?} after SIGKILL")]
    Unkillable { pid: i32, grace: Duration },
}

enum Origin {
    /// Our child: exit status via waitid, reaped on `reap`.
    Child,
    /// Adopted after a restart: exit seen through the pidfd, status unknown.
    Recovered { pidfd: OwnedFd },
}

#[derive(Default)]
struct WatchState {
    exit: Option<ExitResult>,
    completed_at: i64,
    reaped: bool,
    /// Called once the exit is known (`on_exit`).
    waiters: Vec<Box<dyn FnOnce() + Send>>,
}

/// One task process, from start until it is reaped.
pub struct ProcessWatch {
    pid: i32,
    origin: Origin,
    state: Mutex<WatchState>,
    exited: Condvar,
}

fn send_signal(target: i32, signal: i32) -> Result<(), Errno> {
    // SAFETY: kill has no memory-safety preconditions.
    Errno::result(unsafe { libc::kill(target, signal) }).map(drop)
}

impl ProcessWatch {
    /// Watches `pid`, a child this process just started in its own process group.
    pub fn child(pid: i32, on_exit: Option<ExitHook>) -> Result<Arc<Self>, WatchError> {
        let watch = Arc::new(ProcessWatch {
            pid,
            origin: Origin::Child,
            state: Mutex::new(WatchState::default()),
            exited: Condvar::new(),
        });
        let watcher = Arc::clone(&watch);
        let finish = move || watcher.wait_for_child(on_exit);
        match exit_poller::pidfd_open(pid) {
            Ok(pidfd) => exit_poller::watch(pidfd, Box::new(finish))
                .map_err(|source| WatchError::Pidfd { pid, source })?,
            // No pidfds (Linux before 5.3): a thread of its own blocks in waitid.
            Err(Errno::ENOSYS) => {
                std::thread::Builder::new()
                    .name(format!("drover-wait-{pid}"))
                    .stack_size(WATCHER_STACK)
                    .spawn(finish)
                    .map_err(|source| WatchError::Thread { pid, source })?;
            }
            Err(source) => return Err(WatchError::Pidfd { pid, source }),
        }
        Ok(watch)
    }

    /// Adopts `pid` after an agent restart, provided it is still the process that started at
    /// `start_ticks` (and not a later process that reused the pid).
    pub fn recovered(pid: i32, start_ticks: u64) -> Result<Arc<Self>, WatchError> {
        let check_identity = || -> Result<(), WatchError> {
            let stat = procfs::read_stat(pid).map_err(|_| WatchError::Gone { pid })?;
            if stat.start_ticks != start_ticks {
                return Err(WatchError::PidReused {
                    pid,
                    expected: start_ticks,
                    found: stat.start_ticks,
                });
            }
            Ok(())
        };
        check_identity()?;
        let pidfd =
            exit_poller::pidfd_open(pid).map_err(|source| WatchError::Pidfd { pid, source })?;
        // The pidfd pins one process; checking again after opening it closes the race with a
        // pid reused between the first check and the open.
        check_identity()?;
        let polled = pidfd.try_clone().map_err(|e| WatchError::Pidfd {
            pid,
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
        })?;
        let watch = Arc::new(ProcessWatch {
            pid,
            origin: Origin::Recovered { pidfd },
            state: Mutex::new(WatchState::default()),
            exited: Condvar::new(),
        });
        let watcher = Arc::clone(&watch);
        exit_poller::watch(
            polled,
            Box::new(move || {
                watcher.finish(ExitResult {
                    err: Some(UNKNOWN_EXIT_STATUS.to_string()),
                    ..ExitResult::default()
                })
            }),
        )
        .map_err(|source| WatchError::Pidfd { pid, source })?;
        Ok(watch)
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn lock(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&self, result: ExitResult) {
        let waiters = {
            let mut state = self.lock();
            state.exit = Some(result);
            state.completed_at = unix_nanos_now();
            self.exited.notify_all();
            std::mem::take(&mut state.waiters)
        };
        // Outside the lock: a waiter may look at the watch.
        for notify in waiters {
            notify();
        }
    }

    /// Calls `notify` once the process has exited: at once if it has, else when its exit is
    /// seen (on the exit poller's thread).
    pub fn on_exit(&self, notify: Box<dyn FnOnce() + Send>) {
        let mut state = self.lock();
        if state.exit.is_none() {
            state.waiters.push(notify);
            return;
        }
        drop(state);
        notify();
    }

    fn wait_for_child(&self, on_exit: Option<ExitHook>) {
        // SAFETY: an all-zero siginfo_t is a valid value for waitid to fill in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let outcome = loop {
            // SAFETY: `info` is a valid, writable siginfo_t.
            let rc = unsafe {
                libc::waitid(
                    libc::P_PID,
                    self.pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOWAIT,
                )
            };
            match Errno::result(rc) {
                Err(Errno::EINTR) => continue,
                other => break other,
            }
        };
        let mut result = match outcome {
            Ok(_) => {
                // SAFETY: waitid succeeded for a child that exited, so si_status is set.
                let status = unsafe { info.si_status() };
                if info.si_code == libc::CLD_EXITED {
                    ExitResult {
                        exit_code: status,
                        ..ExitResult::default()
                    }
                } else {
                    ExitResult {
                        exit_code: SIGNAL_EXIT_BASE + status,
                        signal: status,
                        ..ExitResult::default()
                    }
                }
            }
            Err(e) => ExitResult {
                exit_code: -1,
                err: Some(format!("waiting for task process {}: {e}", self.pid)),
                ..ExitResult::default()
            },
        };
        if let Some(hook) = on_exit {
            hook(&mut result);
        }
        self.finish(result);
    }

    /// The exit result, once the process has exited.
    pub fn exit_result(&self) -> Option<ExitResult> {
        self.lock().exit.clone()
    }

    /// Unix nanoseconds of the exit, 0 while running.
    pub fn completed_at(&self) -> i64 {
        self.lock().completed_at
    }

    /// Blocks up to `timeout` for the exit; `None` if the process still runs.
    pub fn wait(&self, timeout: Duration) -> Option<ExitResult> {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.lock();
        loop {
            if let Some(exit) = &state.exit {
                return Some(exit.clone());
            }
            let remaining = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                // A timeout too large to add to now is as good as forever.
                None => Duration::from_secs(3600),
            };
            if remaining.is_zero() {
                return None;
            }
            state = self
                .exited
                .wait_timeout(state, remaining)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Whether signals may still be aimed at the pid: a child until it is reaped (its zombie
    /// holds the pid), a recovered process only until its exit is seen.
    fn pid_is_ours(&self, state: &WatchState) -> bool {
        match self.origin {
            Origin::Child => !state.reaped,
            Origin::Recovered { .. } => state.exit.is_none(),
        }
    }

    /// Sends `signal` to the task's whole process group. Returns whether it was sent.
    pub fn signal_group(&self, signal: i32) -> Result<bool, WatchError> {
        let state = self.lock();
        if !self.pid_is_ours(&state) {
            return Ok(false);
        }
        match send_signal(-self.pid, signal) {
            Ok(()) => Ok(true),
            Err(Errno::ESRCH) => Ok(false),
            Err(source) => Err(WatchError::Signal {
                pid: self.pid,
                signal,
                source,
            }),
        }
    }

    /// Sends `signal` to the task's main process only (Nomad's `SignalTask`).
    pub fn signal_leader(&self, signal: i32) -> Result<bool, WatchError> {
        let state = self.lock();
        if state.exit.is_some() || !self.pid_is_ours(&state) {
            return Ok(false);
        }
        let sent = match &self.origin {
            Origin::Child => send_signal(self.pid, signal),
            Origin::Recovered { pidfd } => {
                // SAFETY: pidfd_send_signal with a null siginfo is the same as kill(2), aimed
                // through a descriptor that cannot name a reused pid.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        pidfd.as_raw_fd(),
                        signal,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
                Errno::result(rc).map(drop)
            }
        };
        match sent {
            Ok(()) => Ok(true),
            Err(Errno::ESRCH) => Ok(false),
            Err(source) => Err(WatchError::Signal {
                pid: self.pid,
                signal,
                source,
            }),
        }
    }

    /// Nomad's shutdown: `signal` to the group, up to `timeout` for the exit, then SIGKILL; once
    /// the main process is gone, SIGKILL whatever it left behind in its group.
    /// A zero `timeout` kills at once.
    pub fn stop(&self, timeout: Duration, signal: i32) -> Result<ExitResult, WatchError> {
        if self.exit_result().is_none() && !timeout.is_zero() {
            self.signal_group(signal)?;
            self.wait(timeout);
        }
        if self.exit_result().is_none() {
            self.signal_group(libc::SIGKILL)?;
        }
        let exit = self.wait(KILL_GRACE).ok_or(WatchError::Unkillable {
            pid: self.pid,
            grace: KILL_GRACE,
        })?;
        self.signal_group(libc::SIGKILL)?;
        Ok(exit)
    }

    /// Releases the exited child's zombie (and with it the pid). No-op for recovered processes
    /// and for a child still running.
    pub fn reap(&self) {
        let mut state = self.lock();
        if state.reaped || state.exit.is_none() || !matches!(self.origin, Origin::Child) {
            return;
        }
        loop {
            // SAFETY: waitpid with a null status pointer only reaps the exited child.
            let rc = unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
            if rc >= 0 || Errno::last() != Errno::EINTR {
                break;
            }
        }
        state.reaped = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    // The watch under test is what reaps the child, so std must not wait for it.
    #[allow(clippy::zombie_processes)]
    fn spawn_in_own_group(script: &str) -> i32 {
        let child = Command::new("/bin/sh")
            .args(["-c", script])
            .process_group(0)
            .spawn()
            .unwrap();
        child.id() as i32
    }

    #[test]
    fn exit_code_is_reported_and_repeated() {
        let watch = ProcessWatch::child(spawn_in_own_group("exit 7"), None).unwrap();
        let first = watch.wait(Duration::from_secs(10)).unwrap();
        assert_eq!(first.exit_code, 7);
        assert_eq!(first.signal, 0);
        assert_eq!(watch.wait(Duration::ZERO), Some(first));
        assert!(watch.completed_at() > 0);
        watch.reap();
    }

    #[test]
    fn running_process_times_out_with_none() {
        let watch = ProcessWatch::child(spawn_in_own_group("sleep 30"), None).unwrap();
        let started = Instant::now();
        assert_eq!(watch.wait(Duration::from_millis(200)), None);
        assert!(started.elapsed() >= Duration::from_millis(200));
        watch.stop(Duration::ZERO, libc::SIGTERM).unwrap();
        watch.reap();
    }

    #[test]
    fn stop_with_term_reports_the_signal() {
        let watch = ProcessWatch::child(spawn_in_own_group("exec sleep 30"), None).unwrap();
        let exit = watch.stop(Duration::from_secs(5), libc::SIGTERM).unwrap();
        assert_eq!(exit.signal, libc::SIGTERM);
        assert_eq!(exit.exit_code, 128 + libc::SIGTERM);
        watch.reap();
    }

    #[test]
    fn exit_hook_adjusts_the_result() {
        let hook: ExitHook = Box::new(|r: &mut ExitResult| r.oom_killed = true);
        let watch = ProcessWatch::child(spawn_in_own_group("true"), Some(hook)).unwrap();
        assert!(watch.wait(Duration::from_secs(10)).unwrap().oom_killed);
        watch.reap();
    }

    #[test]
    fn reaped_child_is_never_signalled_again() {
        let watch = ProcessWatch::child(spawn_in_own_group("true"), None).unwrap();
        watch.wait(Duration::from_secs(10)).unwrap();
        assert!(
            watch.signal_group(0).unwrap(),
            "zombie still holds the group"
        );
        watch.reap();
        assert!(!watch.signal_group(libc::SIGKILL).unwrap());
    }

    #[test]
    fn exit_waiters_are_called_once_the_exit_is_known_or_at_once_after_it() {
        let (tx, rx) = std::sync::mpsc::channel();
        let watch = ProcessWatch::child(spawn_in_own_group("sleep 0.2"), None).unwrap();
        let early = tx.clone();
        watch.on_exit(Box::new(move || early.send("early").unwrap()));
        assert!(rx.try_recv().is_err(), "called before the exit");
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("early"));
        assert!(watch.exit_result().is_some());
        watch.on_exit(Box::new(move || tx.send("late").unwrap()));
        assert_eq!(rx.try_recv(), Ok("late"), "called at once after the exit");
        watch.reap();
    }

    #[test]
    fn recovered_process_with_wrong_start_time_is_refused() {
        let pid = std::process::id() as i32;
        let real = procfs::read_stat(pid).unwrap().start_ticks;
        match ProcessWatch::recovered(pid, real + 1) {
            Err(WatchError::PidReused {
                expected, found, ..
            }) => {
                assert_eq!((expected, found), (real + 1, real));
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("a different start time must be refused"),
        }
    }
}
