//! Starting a task process with clone(2) in new PID, mount, IPC and UTS namespaces, so the
//! task's command is PID 1 of its own namespace, with no intermediate process.
//!
//! Everything the child needs is prepared before the clone: after clone in a multi-threaded
//! parent only async-signal-safe calls are allowed (another thread may hold the allocator's
//! lock), so the child only makes raw syscalls on memory that already exists. A failing step
//! reports which step and errno through a close-on-exec pipe; a clean exec closes the pipe
//! without a word, which is how the parent knows the task runs.

use std::ffi::{CString, c_char};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sched::CloneFlags;
use thiserror::Error;

use crate::shared::user::{RunAs, switch_user};

/// The child's stack. It runs only the short setup below before exec replaces it.
const CHILD_STACK_SIZE: usize = 256 * 1024;

/// Linux's HOST_NAME_MAX.
const MAX_HOSTNAME_LEN: usize = 64;

/// The setup steps of the child, in order; the failing one is reported to the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Step {
    JoinCgroup = 1,
    PrivateMounts,
    MountProc,
    SetHostname,
    NewSession,
    ChangeDir,
    RedirectStdio,
    ResetSignals,
    SwitchUser,
    Exec,
}

impl Step {
    fn from_code(code: u32) -> Option<Step> {
        const ALL: [Step; 10] = [
            Step::JoinCgroup,
            Step::PrivateMounts,
            Step::MountProc,
            Step::SetHostname,
            Step::NewSession,
            Step::ChangeDir,
            Step::RedirectStdio,
            Step::ResetSignals,
            Step::SwitchUser,
            Step::Exec,
        ];
        ALL.into_iter().find(|s| *s as u32 == code)
    }

    fn describe(self) -> &'static str {
        match self {
            Step::JoinCgroup => "joining the task cgroup",
            Step::PrivateMounts => "making mounts private",
            Step::MountProc => "mounting /proc",
            Step::SetHostname => "setting the hostname",
            Step::NewSession => "creating a session",
            Step::ChangeDir => "entering the task directory",
            Step::RedirectStdio => "connecting stdin/stdout/stderr",
            Step::ResetSignals => "resetting signal handling",
            Step::SwitchUser => "switching user",
            Step::Exec => "executing the command",
        }
    }
}

#[derive(Debug, Error)]
pub enum IsolateError {
    #[error("{what} contains a NUL byte")]
    NulByte { what: String },
    #[error("creating the setup pipe: {0}")]
    Pipe(Errno),
    #[error("clone with new namespaces: {0}")]
    Clone(Errno),
    #[error("{}: {errno}", step.describe())]
    ChildSetup { step: Step, errno: Errno },
    #[error("task process ended during setup without reporting why")]
    ChildVanished,
}

/// A task command with everything the child needs, already converted to C strings.
pub struct IsolatedCommand {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    task_dir: CString,
    hostname: Vec<u8>,
    cgroup_procs: Vec<CString>,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    run_as: Option<RunAs>,
}

fn c_string(value: &[u8], what: impl FnOnce() -> String) -> Result<CString, IsolateError> {
    CString::new(value).map_err(|_| IsolateError::NulByte { what: what() })
}

fn c_path(path: &std::path::Path) -> Result<CString, IsolateError> {
    use std::os::unix::ffi::OsStrExt;
    c_string(path.as_os_str().as_bytes(), || {
        format!("path {}", path.display())
    })
}

/// What the caller supplies to build an `IsolatedCommand`.
pub struct CommandSpec<'a> {
    pub program: &'a std::path::Path,
    pub args: &'a [String],
    pub env: &'a std::collections::BTreeMap<String, String>,
    pub task_dir: &'a std::path::Path,
    pub hostname: &'a str,
    pub cgroup_procs: &'a [std::path::PathBuf],
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub run_as: Option<RunAs>,
}

impl IsolatedCommand {
    pub fn new(spec: CommandSpec<'_>) -> Result<Self, IsolateError> {
        let program = c_path(spec.program)?;
        let mut argv = vec![program.clone()];
        for (i, arg) in spec.args.iter().enumerate() {
            argv.push(c_string(arg.as_bytes(), || format!("argument {i}"))?);
        }
        let envp = spec
            .env
            .iter()
            .map(|(k, v)| {
                c_string(format!("{k}={v}").as_bytes(), || {
                    format!("environment variable {k:?}")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut hostname = spec.hostname.as_bytes().to_vec();
        hostname.truncate(MAX_HOSTNAME_LEN);
        Ok(IsolatedCommand {
            program,
            argv,
            envp,
            task_dir: c_path(spec.task_dir)?,
            hostname,
            cgroup_procs: spec
                .cgroup_procs
                .iter()
                .map(|p| c_path(p))
                .collect::<Result<_, _>>()?,
            stdin: spec.stdin,
            stdout: spec.stdout,
            stderr: spec.stderr,
            run_as: spec.run_as,
        })
    }
}

fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Reports `step` and the current errno to the parent, then exits. Async-signal-safe.
fn fail(report_fd: RawFd, step: Step) -> ! {
    let errno = Errno::last_raw() as u32;
    let mut message = [0u8; 8];
    message[..4].copy_from_slice(&(step as u32).to_ne_bytes());
    message[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: writes 8 bytes from a live buffer, then ends the child without running any
    // destructors or atexit handlers of the parent's copy of the program.
    unsafe {
        libc::write(report_fd, message.as_ptr().cast(), message.len());
        libc::_exit(127);
    }
}

/// The child's side: set up the namespaces' view and exec. Never returns.
fn child_main(
    cmd: &IsolatedCommand,
    argv: &[*const c_char],
    envp: &[*const c_char],
    report_fd: RawFd,
) -> ! {
    // SAFETY: each call below is a raw syscall wrapper on C strings and descriptors prepared
    // before the clone; nothing allocates or takes a lock.
    unsafe {
        // Join the task cgroup first so that everything the task does is accounted.
        for procs in &cmd.cgroup_procs {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            // "0" means the writing process itself, whatever its pid in its own namespace.
            if fd < 0 || libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                fail(report_fd, Step::JoinCgroup);
            }
            libc::close(fd);
        }
        // Without this, the /proc mount below could propagate back to the host's namespace.
        let no_string = std::ptr::null::<c_char>();
        if libc::mount(
            no_string,
            c"/".as_ptr(),
            no_string,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            fail(report_fd, Step::PrivateMounts);
        }
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
        {
            fail(report_fd, Step::MountProc);
        }
        if libc::sethostname(cmd.hostname.as_ptr().cast(), cmd.hostname.len()) != 0 {
            fail(report_fd, Step::SetHostname);
        }
        if libc::setsid() < 0 {
            fail(report_fd, Step::NewSession);
        }
        if libc::chdir(cmd.task_dir.as_ptr()) != 0 {
            fail(report_fd, Step::ChangeDir);
        }
        for (fd, target) in [
            (cmd.stdin.as_raw_fd(), 0),
            (cmd.stdout.as_raw_fd(), 1),
            (cmd.stderr.as_raw_fd(), 2),
        ] {
            if libc::dup2(fd, target) < 0 {
                fail(report_fd, Step::RedirectStdio);
            }
        }
        // The agent may block signals in its threads and ignores SIGPIPE (Rust's runtime does);
        // both would survive exec, so give the task a clean slate.
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
            fail(report_fd, Step::ResetSignals);
        }
        let mut default_action: libc::sigaction = std::mem::zeroed();
        default_action.sa_sigaction = libc::SIG_DFL;
        for signal in 1..32 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::sigaction(signal, &default_action, std::ptr::null_mut());
            }
        }
        if let Some(run_as) = &cmd.run_as
            && let Err(errno) = switch_user(run_as)
        {
            Errno::set_raw(errno);
            fail(report_fd, Step::SwitchUser);
        }
        libc::execve(cmd.program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        fail(report_fd, Step::Exec)
    }
}

/// Reads the child's setup report: nothing (EOF) means exec succeeded.
fn read_report(report: &OwnedFd) -> Result<(), IsolateError> {
    let mut message = [0u8; 8];
    let mut filled = 0;
    while filled < message.len() {
        // SAFETY: reads into the unfilled tail of a live buffer.
        let n = unsafe {
            libc::read(
                report.as_raw_fd(),
                message[filled..].as_mut_ptr().cast(),
                message.len() - filled,
            )
        };
        match n {
            0 => break,
            n if n > 0 => filled += n.unsigned_abs(),
            _ if Errno::last() == Errno::EINTR => continue,
            _ => return Err(IsolateError::Pipe(Errno::last())),
        }
    }
    match filled {
        0 => Ok(()),
        8 => {
            let [s0, s1, s2, s3, e0, e1, e2, e3] = message;
            let step = u32::from_ne_bytes([s0, s1, s2, s3]);
            let errno = u32::from_ne_bytes([e0, e1, e2, e3]);
            match Step::from_code(step) {
                Some(step) => Err(IsolateError::ChildSetup {
                    step,
                    errno: Errno::from_raw(errno as i32),
                }),
                None => Err(IsolateError::ChildVanished),
            }
        }
        _ => Err(IsolateError::ChildVanished),
    }
}

/// Clones the task process into new namespaces and returns its host pid once it has exec'ed.
/// A child that failed its setup is reaped here and its failure returned.
pub fn spawn_isolated(cmd: &IsolatedCommand) -> Result<i32, IsolateError> {
    let argv = null_terminated(&cmd.argv);
    let envp = null_terminated(&cmd.envp);
    let (report_read, report_write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(IsolateError::Pipe)?;
    let report_fd = report_write.as_raw_fd();
    let mut stack = vec![0u8; CHILD_STACK_SIZE];
    let flags = CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    let child: nix::sched::CloneCb<'_> = Box::new(|| child_main(cmd, &argv, &envp, report_fd));
    // SAFETY: without CLONE_VM the child gets its own copy of this address space, so the stack
    // and everything `child_main` borrows stay valid in it; `child_main` never returns (it execs
    // or _exits) and stays well within the stack.
    let pid = unsafe { nix::sched::clone(child, &mut stack, flags, Some(libc::SIGCHLD)) }
        .map_err(IsolateError::Clone)?;
    // Only the child may hold the write end now, so EOF means it exec'ed (or died).
    drop(report_write);
    let report = read_report(&report_read);
    if report.is_err() {
        // SAFETY: reaps the child that just failed its setup; it has exited or is exiting.
        unsafe {
            libc::waitpid(pid.as_raw(), std::ptr::null_mut(), 0);
        }
    }
    report.map(|()| pid.as_raw())
}
