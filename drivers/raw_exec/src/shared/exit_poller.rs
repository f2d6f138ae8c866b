//! One thread for every task process this agent watches, whatever their number: it polls each
//! process's pidfd (readable once the process exited) and hands the exit to its watch. This is
//! what keeps the agent's thread count independent of its task count (a thread per task cost a
//! stack and a heap arena each).
//!
//! Watches are added from any thread; an eventfd wakes the poller to take them in.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock, PoisonError};

use nix::errno::Errno;

/// What the poller calls once the process behind a pidfd exited (on the poller's thread: it
/// must not block for long).
pub type OnExit = Box<dyn FnOnce() + Send>;

struct Poller {
    /// Watches added since the poller last looked.
    added: Mutex<Vec<(OwnedFd, OnExit)>>,
    /// Written once per addition; the poller reads it to wake up.
    wake: OwnedFd,
}

static POLLER: OnceLock<Result<Poller, Errno>> = OnceLock::new();

const POLLER_STACK: usize = 128 * 1024;

fn poller() -> Result<&'static Poller, Errno> {
    POLLER
        .get_or_init(|| {
            // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
            let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            let raw = Errno::result(raw)?;
            // SAFETY: `raw` is a descriptor we just opened and own.
            let wake = unsafe { OwnedFd::from_raw_fd(raw) };
            let poller = Poller {
                added: Mutex::new(Vec::new()),
                wake,
            };
            std::thread::Builder::new()
                .name("drover-exits".into())
                .stack_size(POLLER_STACK)
                .spawn(run)
                .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EAGAIN)))?;
            Ok(poller)
        })
        .as_ref()
        .map_err(|e| *e)
}

/// Opens a pidfd for `pid` (a child or any other process this agent may watch).
pub fn pidfd_open(pid: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        return Err(Errno::last());
    }
    // SAFETY: `raw` is a descriptor we just opened and own; it fits an i32 as every fd does.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) })
}

/// Calls `on_exit` once the process behind `pidfd` exited.
pub fn watch(pidfd: OwnedFd, on_exit: OnExit) -> Result<(), Errno> {
    let poller = poller()?;
    poller
        .added
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((pidfd, on_exit));
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
    let rc = unsafe {
        libc::write(
            poller.wake.as_raw_fd(),
            (&one as *const u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
    // EAGAIN: the counter is already far from zero, so the poller is awake anyway.
    match Errno::result(rc) {
        Ok(_) | Err(Errno::EAGAIN) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The poller's loop: waits on the eventfd and every pidfd, finishes what exited.
fn run() {
    // The poller is set before any watch is added, and this thread starts inside its
    // initialisation: wait until it is visible.
    let poller = loop {
        match POLLER.get() {
            Some(Ok(p)) => break p,
            _ => std::thread::yield_now(),
        }
    };
    let mut watched: Vec<(OwnedFd, OnExit)> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        watched.append(&mut poller.added.lock().unwrap_or_else(PoisonError::into_inner));
        fds.clear();
        fds.push(libc::pollfd {
            fd: poller.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend(watched.iter().map(|(fd, _)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if rc < 0 {
            // EINTR; any other error (ENOMEM) is retried the same way.
            continue;
        }
        if fds[0].revents != 0 {
            let mut counter: u64 = 0;
            // SAFETY: reads 8 bytes into a valid u64 from our non-blocking eventfd.
            unsafe {
                libc::read(
                    poller.wake.as_raw_fd(),
                    (&mut counter as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
        // From the back, so that removing one keeps the indexes before it.
        for i in (1..fds.len()).rev() {
            if fds[i].revents != 0 {
                let (pidfd, on_exit) = watched.swap_remove(i - 1);
                // A panicking callback must not take every other task's exit with it.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(on_exit)).is_err() {
                    eprintln!("drover-exits: an exit callback panicked");
                }
                drop(pidfd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn every_exit_is_delivered_by_one_thread_whatever_the_number_of_processes() {
        let (tx, rx) = mpsc::channel();
        let mut children = Vec::new();
        for i in 0..20 {
            let child = std::process::Command::new("/bin/sh")
                .args(["-c", &format!("sleep 0.{i:02}")])
                .spawn()
                .unwrap();
            let pid = child.id() as i32;
            let tx = tx.clone();
            watch(
                pidfd_open(pid).unwrap(),
                Box::new(move || {
                    let _ = tx.send((pid, std::thread::current().name().map(String::from)));
                }),
            )
            .unwrap();
            children.push(child);
        }
        let mut seen = Vec::new();
        for _ in 0..20 {
            seen.push(rx.recv_timeout(Duration::from_secs(10)).expect("an exit"));
        }
        assert!(
            seen.iter()
                .all(|(_, thread)| thread.as_deref() == Some("drover-exits")),
            "{seen:?}"
        );
        let mut pids: Vec<i32> = seen.iter().map(|(p, _)| *p).collect();
        pids.sort_unstable();
        pids.dedup();
        assert_eq!(pids.len(), 20);
        for mut c in children {
            let _ = c.wait();
        }
    }
}
