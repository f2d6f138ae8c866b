//! Interactive exec plumbing shared by the raw_exec and exec drivers: the command's stdio (a
//! new pseudo-terminal with `tty`, else three pipes) and the relay between it and the caller's
//! [`ExecStream`] until the command exits. How the command is started (on the host, or inside
//! a task's namespaces) is each driver's business.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drover_abi::{
    DriverError, ExecInput, ExecRecv, ExecStream, ExecStreamOutput, ExitResult, TerminalSize,
};

use super::watch::ProcessWatch;

/// How long the input pump waits for the caller before checking whether the command ended.
const INPUT_POLL: Duration = Duration::from_millis(100);
/// How long an output reader waits in poll(2) before checking whether to stop.
const OUTPUT_POLL_MS: libc::c_int = 100;
/// Output still arriving this long after the command exited (from something it left behind
/// holding its stdout) is no longer waited for.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
/// Largest piece of output read at once.
const CHUNK: usize = 4096;
/// The terminal's end-of-file character (^D) sent when the caller closes stdin with a tty.
const EOF_CHAR: u8 = 0x04;

/// The parent's ends of the command's stdio.
pub enum ExecIo {
    /// The terminal's master side: input and output (stdout and stderr merged, as on a
    /// terminal).
    Tty { master: OwnedFd },
    Pipes {
        stdin: OwnedFd,
        stdout: OwnedFd,
        stderr: OwnedFd,
    },
}

/// The command's ends of its stdio, to become its fds 0, 1 and 2.
pub struct ChildStdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Whether fd 0 is a terminal the command should take as its controlling terminal.
    pub tty: bool,
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills two fds on success, which we then own.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors were just created and belong to nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A new pseudo-terminal: (master, slave), both close-on-exec.
pub fn open_pty() -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: posix_openpt returns a new descriptor or -1.
    let master =
        cvt(unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
    // SAFETY: the descriptor was just opened and belongs to nobody else.
    let master = unsafe { OwnedFd::from_raw_fd(master) };
    // SAFETY: plain calls on the master descriptor we own.
    unsafe {
        cvt(libc::grantpt(master.as_raw_fd()))?;
        cvt(libc::unlockpt(master.as_raw_fd()))?;
    }
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: ptsname_r writes a NUL-terminated name of at most `name.len()` bytes.
    let rc = unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // SAFETY: `name` holds the NUL-terminated path ptsname_r wrote.
    let slave = cvt(unsafe {
        libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: the descriptor was just opened and belongs to nobody else.
    Ok((master, unsafe { OwnedFd::from_raw_fd(slave) }))
}

/// Sets the terminal's size (TIOCSWINSZ); the command gets SIGWINCH.
pub fn set_size(fd: &impl AsFd, size: TerminalSize) -> io::Result<()> {
    let winsize = libc::winsize {
        ws_row: size.height,
        ws_col: size.width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from a live struct.
    cvt(unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), libc::TIOCSWINSZ, &winsize) }).map(drop)
}

/// The command's stdio for an exec: a pty with `tty`, else pipes.
pub fn exec_stdio(tty: bool) -> io::Result<(ExecIo, ChildStdio)> {
    if tty {
        let (master, slave) = open_pty()?;
        let child = ChildStdio {
            stdin: slave.try_clone()?,
            stdout: slave.try_clone()?,
            stderr: slave,
            tty: true,
        };
        return Ok((ExecIo::Tty { master }, child));
    }
    let (stdin_read, stdin_write) = pipe()?;
    let (stdout_read, stdout_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    Ok((
        ExecIo::Pipes {
            stdin: stdin_write,
            stdout: stdout_read,
            stderr: stderr_read,
        },
        ChildStdio {
            stdin: stdin_read,
            stdout: stdout_write,
            stderr: stderr_write,
            tty: false,
        },
    ))
}

/// In the child, between fork and exec, after fds 0-2 are in place: a session of its own and,
/// with a tty, fd 0 as its controlling terminal. Async-signal-safe; errno says why on failure.
pub fn become_session_leader(tty: bool) -> Result<(), ()> {
    // SAFETY: raw syscalls without memory arguments.
    unsafe {
        if libc::setsid() < 0 {
            return Err(());
        }
        if tty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return Err(());
        }
    }
    Ok(())
}

fn write_all(fd: &OwnedFd, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        // SAFETY: writes from a live buffer of the given length.
        let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        data = &data[n.unsigned_abs()..];
    }
    Ok(())
}

/// What the relay's threads share.
struct Relay<'a> {
    watch: &'a ProcessWatch,
    stream: &'a dyn ExecStream,
    /// Set once the command exited (and its leftovers were killed).
    exited: AtomicBool,
    /// Set when the caller went away.
    gone: AtomicBool,
    /// When the command exited; readers stop [`DRAIN_AFTER_EXIT`] later at the latest.
    exited_at: std::sync::Mutex<Option<Instant>>,
}

impl Relay<'_> {
    fn caller_gone(&self) {
        self.gone.store(true, Ordering::Relaxed);
        // The leader may be gone already; leftovers of its group are killed at the end anyway.
        let _ = self.watch.signal_group(libc::SIGKILL);
    }

    fn drained_too_long(&self) -> bool {
        self.exited_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() > DRAIN_AFTER_EXIT)
    }

    /// Passes the caller's input to the command until it exits or the caller leaves.
    fn pump_input(&self, mut stdin: Option<OwnedFd>, terminal: Option<&OwnedFd>) {
        while !self.exited.load(Ordering::Relaxed) {
            match self.stream.recv(INPUT_POLL) {
                ExecRecv::Input(ExecInput::Stdin(data)) => {
                    // A command that stopped reading makes this fail; later input is dropped.
                    if let Some(fd) = &stdin
                        && write_all(fd, &data).is_err()
                    {
                        stdin = None;
                    }
                }
                ExecRecv::Input(ExecInput::CloseStdin) => match terminal {
                    // A terminal has no end of its own: its EOF character ends a read.
                    Some(master) => {
                        let _ = write_all(master, &[EOF_CHAR]);
                    }
                    None => stdin = None,
                },
                ExecRecv::Input(ExecInput::Resize(size)) => {
                    if let Some(master) = terminal {
                        let _ = set_size(master, size);
                    }
                }
                ExecRecv::Timeout => {}
                ExecRecv::Gone => {
                    self.caller_gone();
                    return;
                }
            }
        }
    }

    /// Reads one of the command's outputs until its end (EIO on a terminal whose command is
    /// gone), sending each piece to the caller.
    fn pump_output(&self, fd: &OwnedFd, wrap: fn(Vec<u8>) -> ExecStreamOutput) {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let mut poll = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: polls one live pollfd.
            let ready = unsafe { libc::poll(&mut poll, 1, OUTPUT_POLL_MS) };
            if ready < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            if ready == 0 {
                if self.drained_too_long() || self.gone.load(Ordering::Relaxed) {
                    return;
                }
                continue;
            }
            // SAFETY: reads into a live buffer of the given length.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                return;
            }
            let piece = buf[..n.unsigned_abs()].to_vec();
            if self.stream.send(wrap(piece)).is_err() {
                self.caller_gone();
                return;
            }
        }
    }

    /// Waits for the command's exit, then kills what it left in its group.
    fn wait_exit(&self) -> ExitResult {
        let exit = loop {
            if let Some(exit) = self.watch.wait(Duration::from_secs(3600)) {
                break exit;
            }
        };
        *self
            .exited_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        let _ = self.watch.signal_group(libc::SIGKILL);
        self.exited.store(true, Ordering::Relaxed);
        exit
    }
}

/// Relays between the command (watched by `watch`, started with the other ends of `io`) and
/// the caller until the command exited and its output was passed on; reaps it then. Returns
/// the exit, or an error when the caller went away first.
pub fn relay(
    io: ExecIo,
    watch: &ProcessWatch,
    stream: &dyn ExecStream,
) -> Result<ExitResult, DriverError> {
    let relay = Relay {
        watch,
        stream,
        exited: AtomicBool::new(false),
        gone: AtomicBool::new(false),
        exited_at: std::sync::Mutex::new(None),
    };
    let relay = &relay;
    let exit = match io {
        ExecIo::Tty { master } => std::thread::scope(|scope| {
            let master = &master;
            let input = master.try_clone().ok();
            scope.spawn(move || relay.pump_input(input, Some(master)));
            let out = scope.spawn(move || relay.pump_output(master, ExecStreamOutput::Stdout));
            let exit = relay.wait_exit();
            let _ = out.join();
            exit
        }),
        ExecIo::Pipes {
            stdin,
            stdout,
            stderr,
        } => std::thread::scope(|scope| {
            // The pump owns stdin: dropping it is how the command reads end of file.
            scope.spawn(move || relay.pump_input(Some(stdin), None));
            let (stdout, stderr) = (&stdout, &stderr);
            let out = scope.spawn(move || relay.pump_output(stdout, ExecStreamOutput::Stdout));
            let err = scope.spawn(move || relay.pump_output(stderr, ExecStreamOutput::Stderr));
            let exit = relay.wait_exit();
            let _ = (out.join(), err.join());
            exit
        }),
    };
    watch.reap();
    if relay.gone.load(Ordering::Relaxed) {
        return Err(DriverError::Other(
            "the exec caller went away; the command was killed".into(),
        ));
    }
    Ok(exit)
}

/// A caller that sends no stdin, keeps the output and leaves at `deadline`: the one-shot
/// `exec_task` on top of an interactive exec.
// Only the exec driver builds its `exec_task` this way (raw_exec has its own).
#[allow(dead_code)]
struct Collector {
    deadline: Instant,
    stdin_closed: AtomicBool,
    output: std::sync::Mutex<(Vec<u8>, Vec<u8>)>,
}

impl ExecStream for Collector {
    fn recv(&self, timeout: Duration) -> ExecRecv {
        if !self.stdin_closed.swap(true, Ordering::Relaxed) {
            return ExecRecv::Input(ExecInput::CloseStdin);
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return ExecRecv::Gone;
        }
        std::thread::sleep(left.min(timeout));
        ExecRecv::Timeout
    }

    fn send(&self, output: ExecStreamOutput) -> Result<(), drover_abi::CallerGone> {
        let mut buffers = self
            .output
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match output {
            ExecStreamOutput::Stdout(data) => buffers.0.extend(data),
            ExecStreamOutput::Stderr(data) => buffers.1.extend(data),
        }
        Ok(())
    }
}

/// Runs an interactive exec (`run`, given the stream) without stdin, gathering its output; past
/// `timeout` the command is killed and an error returned.
#[allow(dead_code)]
pub fn collect_exec(
    timeout: Duration,
    run: impl FnOnce(&dyn ExecStream) -> Result<ExitResult, DriverError>,
) -> Result<drover_abi::ExecOutput, DriverError> {
    let collector = Collector {
        deadline: Instant::now() + timeout,
        stdin_closed: AtomicBool::new(false),
        output: std::sync::Mutex::new((Vec::new(), Vec::new())),
    };
    let result = run(&collector);
    if Instant::now() >= collector.deadline && result.is_err() {
        return Err(DriverError::Other(format!(
            "exec timed out after {timeout:?}"
        )));
    }
    let exit = result?;
    let (stdout, stderr) = collector
        .output
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(drover_abi::ExecOutput {
        stdout,
        stderr,
        exit_code: exit.exit_code,
    })
}
