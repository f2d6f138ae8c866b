//! Starting a command inside a running task (`alloc exec`): in the task's cgroup, its IPC,
//! UTS, mount and PID namespaces (setns into `/proc/<pid>/ns/*`), its root (the task process's
//! `/proc/<pid>/root`, entered with chroot as nsenter does), as the task's user with the task's
//! capabilities, and with the task's environment.
//!
//! As in `isolate`, everything is prepared before the fork and the child only makes raw
//! syscalls on memory that already exists. The PID namespace is entered by the thread that
//! forks (setns of a PID namespace only changes where that thread's children are created), so
//! the command is a direct child of the agent, inside the task's namespace, with no
//! intermediate process.

use std::ffi::{CString, c_char};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use thiserror::Error;

use crate::caps::CapSet;
use crate::isolate::{limit_bounding_set, prctl, set_capabilities};
use crate::shared::exec_stream::{ChildStdio, become_session_leader};
use crate::shared::user::{RunAs, switch_user};

/// Where an exec command is searched when the task's environment has no PATH.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin";

/// The namespaces entered besides the PID one, in nsenter's order (mount last: it changes
/// what paths mean). The network one is the allocation's in bridge mode, the host's otherwise.
const NAMESPACES: [(&str, libc::c_int); 4] = [
    ("ipc", libc::CLONE_NEWIPC),
    ("net", libc::CLONE_NEWNET),
    ("uts", libc::CLONE_NEWUTS),
    ("mnt", libc::CLONE_NEWNS),
];

/// The child's setup steps; the failing one is reported to the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum EnterStep {
    JoinCgroup = 1,
    EnterNamespace,
    EnterRoot,
    RedirectStdio,
    NewSession,
    ResetSignals,
    LimitCapabilities,
    SwitchUser,
    SetCapabilities,
    Exec,
}

impl EnterStep {
    const ALL: [EnterStep; 10] = [
        EnterStep::JoinCgroup,
        EnterStep::EnterNamespace,
        EnterStep::EnterRoot,
        EnterStep::RedirectStdio,
        EnterStep::NewSession,
        EnterStep::ResetSignals,
        EnterStep::LimitCapabilities,
        EnterStep::SwitchUser,
        EnterStep::SetCapabilities,
        EnterStep::Exec,
    ];

    fn describe(self) -> &'static str {
        match self {
            EnterStep::JoinCgroup => "joining the task cgroup",
            EnterStep::EnterNamespace => "entering the task's namespaces",
            EnterStep::EnterRoot => "entering the task root",
            EnterStep::RedirectStdio => "connecting stdin/stdout/stderr",
            EnterStep::NewSession => "creating a session",
            EnterStep::ResetSignals => "resetting signal handling",
            EnterStep::LimitCapabilities => "limiting the capability bounding set",
            EnterStep::SwitchUser => "switching user",
            EnterStep::SetCapabilities => "setting the task's capabilities",
            EnterStep::Exec => "executing the command",
        }
    }
}

#[derive(Debug, Error)]
pub enum EnterError {
    #[error("exec command must name a program")]
    EmptyCommand,
    #[error("{what} contains a NUL byte")]
    NulByte { what: String },
    #[error("opening {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("creating the setup pipe: {0}")]
    Pipe(Errno),
    #[error("entering the task's PID namespace: {0}")]
    PidNamespace(Errno),
    #[error("fork: {0}")]
    Fork(Errno),
    #[error("{}: {errno}", step.describe())]
    ChildSetup { step: EnterStep, errno: Errno },
    #[error("the exec'd process ended during setup without reporting why")]
    ChildVanished,
    #[error("the thread starting the command panicked")]
    Thread,
}

/// What the caller supplies.
pub struct EnterSpec<'a> {
    /// The task's main process, on the host.
    pub pid: i32,
    pub command: &'a [String],
    pub env: &'a std::collections::BTreeMap<String, String>,
    pub cgroup_procs: &'a [PathBuf],
    pub stdio: ChildStdio,
    pub run_as: Option<RunAs>,
    pub caps: CapSet,
    pub last_cap: u32,
}

/// A command to start in a task, with everything the child needs prepared.
pub struct EnterCommand {
    /// Paths to try in turn, inside the task root (execvp's search over PATH).
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cgroup_procs: Vec<CString>,
    /// The task's PID namespace, when it is not ours.
    pid_ns: Option<OwnedFd>,
    /// The other namespaces that are not ours.
    namespaces: Vec<(OwnedFd, libc::c_int)>,
    root: OwnedFd,
    stdio: ChildStdio,
    run_as: Option<RunAs>,
    caps: CapSet,
    last_cap: u32,
}

fn c_string(value: &[u8], what: impl FnOnce() -> String) -> Result<CString, EnterError> {
    CString::new(value).map_err(|_| EnterError::NulByte { what: what() })
}

fn open(path: &Path, flags: libc::c_int) -> Result<OwnedFd, EnterError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map(OwnedFd::from)
        .map_err(|source| EnterError::Open {
            path: path.to_path_buf(),
            source,
        })
}

/// The namespace `name` of `pid`, unless it is the one this process is in already.
fn foreign_namespace(pid: i32, name: &str) -> Result<Option<OwnedFd>, EnterError> {
    let theirs = PathBuf::from(format!("/proc/{pid}/ns/{name}"));
    let ours = PathBuf::from(format!("/proc/self/ns/{name}"));
    let same = match (std::fs::metadata(&theirs), std::fs::metadata(&ours)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        (Err(source), _) => {
            return Err(EnterError::Open {
                path: theirs,
                source,
            });
        }
        (Ok(_), Err(_)) => false,
    };
    if same {
        return Ok(None);
    }
    open(&theirs, libc::O_CLOEXEC).map(Some)
}

/// The paths execvp would try for `program` under `path_var`.
fn candidates(program: &str, path_var: &str) -> Vec<String> {
    if program.contains('/') {
        return vec![program.to_string()];
    }
    path_var
        .split(':')
        .map(|dir| if dir.is_empty() { "." } else { dir })
        .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
        .collect()
}

impl EnterCommand {
    pub fn new(spec: EnterSpec<'_>) -> Result<Self, EnterError> {
        let (program, args) = spec.command.split_first().ok_or(EnterError::EmptyCommand)?;
        let path_var = spec.env.get("PATH").map_or(DEFAULT_PATH, String::as_str);
        let candidates = candidates(program, path_var)
            .iter()
            .map(|c| c_string(c.as_bytes(), || format!("command path {c:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut argv = vec![c_string(program.as_bytes(), || "the command".into())?];
        for (i, arg) in args.iter().enumerate() {
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
        let cgroup_procs = spec
            .cgroup_procs
            .iter()
            .map(|p| c_string(p.as_os_str().as_bytes(), || format!("path {}", p.display())))
            .collect::<Result<_, _>>()?;
        let mut namespaces = Vec::new();
        for (name, flag) in NAMESPACES {
            if let Some(fd) = foreign_namespace(spec.pid, name)? {
                namespaces.push((fd, flag));
            }
        }
        let root = open(
            Path::new(&format!("/proc/{}/root", spec.pid)),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )?;
        Ok(EnterCommand {
            candidates,
            argv,
            envp,
            cgroup_procs,
            pid_ns: foreign_namespace(spec.pid, "pid")?,
            namespaces,
            root,
            stdio: spec.stdio,
            run_as: spec.run_as,
            caps: spec.caps,
            last_cap: spec.last_cap,
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

/// The child's report: step and errno, as u32s.
const REPORT_LEN: usize = 8;

/// Reports `step` and the current errno (or `errno` when given) to the parent, then exits.
/// Async-signal-safe.
fn fail(report_fd: RawFd, step: EnterStep) -> ! {
    let errno = Errno::last_raw() as u32;
    let mut message = [0u8; REPORT_LEN];
    message[..4].copy_from_slice(&(step as u32).to_ne_bytes());
    message[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: writes from a live buffer, then ends the child without running destructors.
    unsafe {
        libc::write(report_fd, message.as_ptr().cast(), message.len());
        libc::_exit(127);
    }
}

/// The child's side. Never returns.
fn child_main(
    cmd: &EnterCommand,
    argv: &[*const c_char],
    envp: &[*const c_char],
    report_fd: RawFd,
) -> ! {
    // SAFETY: raw syscall wrappers on C strings and descriptors prepared before the fork;
    // nothing allocates or takes a lock.
    unsafe {
        // Host paths: before the mount namespace changes what they mean.
        for procs in &cmd.cgroup_procs {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 || libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                fail(report_fd, EnterStep::JoinCgroup);
            }
            libc::close(fd);
        }
        for (fd, flag) in &cmd.namespaces {
            if libc::setns(fd.as_raw_fd(), *flag) != 0 {
                fail(report_fd, EnterStep::EnterNamespace);
            }
        }
        if libc::fchdir(cmd.root.as_raw_fd()) != 0
            || libc::chroot(c".".as_ptr()) != 0
            || libc::chdir(c"/".as_ptr()) != 0
        {
            fail(report_fd, EnterStep::EnterRoot);
        }
        for (fd, target) in [
            (cmd.stdio.stdin.as_raw_fd(), 0),
            (cmd.stdio.stdout.as_raw_fd(), 1),
            (cmd.stdio.stderr.as_raw_fd(), 2),
        ] {
            if libc::dup2(fd, target) < 0 {
                fail(report_fd, EnterStep::RedirectStdio);
            }
        }
        if become_session_leader(cmd.stdio.tty).is_err() {
            fail(report_fd, EnterStep::NewSession);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
            fail(report_fd, EnterStep::ResetSignals);
        }
        let mut default_action: libc::sigaction = std::mem::zeroed();
        default_action.sa_sigaction = libc::SIG_DFL;
        for signal in 1..32 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::sigaction(signal, &default_action, std::ptr::null_mut());
            }
        }
        if limit_bounding_set(cmd.caps, cmd.last_cap).is_err() {
            fail(report_fd, EnterStep::LimitCapabilities);
        }
        if prctl(libc::PR_SET_KEEPCAPS, 1, 0) != 0 {
            fail(report_fd, EnterStep::LimitCapabilities);
        }
        if let Some(run_as) = &cmd.run_as
            && let Err(errno) = switch_user(run_as)
        {
            Errno::set_raw(errno);
            fail(report_fd, EnterStep::SwitchUser);
        }
        if set_capabilities(cmd.caps).is_err() {
            fail(report_fd, EnterStep::SetCapabilities);
        }
        // execvp's rule: a missing candidate moves on; the last telling error is reported.
        let mut reported = libc::ENOENT;
        for candidate in &cmd.candidates {
            libc::execve(candidate.as_ptr(), argv.as_ptr(), envp.as_ptr());
            let errno = Errno::last_raw();
            if errno != libc::ENOENT && errno != libc::ENOTDIR {
                reported = errno;
            }
        }
        Errno::set_raw(reported);
        fail(report_fd, EnterStep::Exec)
    }
}

/// Reads the child's report: nothing (EOF) means exec succeeded.
fn read_report(report: &OwnedFd) -> Result<(), EnterError> {
    let mut message = [0u8; REPORT_LEN];
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
            _ => return Err(EnterError::Pipe(Errno::last())),
        }
    }
    match filled {
        0 => Ok(()),
        REPORT_LEN => {
            let [s0, s1, s2, s3, e0, e1, e2, e3] = message;
            let step = u32::from_ne_bytes([s0, s1, s2, s3]);
            let errno = u32::from_ne_bytes([e0, e1, e2, e3]);
            match EnterStep::ALL.into_iter().find(|s| *s as u32 == step) {
                Some(step) => Err(EnterError::ChildSetup {
                    step,
                    errno: Errno::from_raw(errno as i32),
                }),
                None => Err(EnterError::ChildVanished),
            }
        }
        _ => Err(EnterError::ChildVanished),
    }
}

/// Forks from the calling thread (which entered the PID namespace) and runs the child.
fn fork_child(cmd: &EnterCommand) -> Result<i32, EnterError> {
    let argv = null_terminated(&cmd.argv);
    let envp = null_terminated(&cmd.envp);
    let (report_read, report_write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(EnterError::Pipe)?;
    if let Some(pid_ns) = &cmd.pid_ns {
        // SAFETY: setns on a descriptor we own; it only changes where this thread's children
        // are created.
        if unsafe { libc::setns(pid_ns.as_raw_fd(), libc::CLONE_NEWPID) } != 0 {
            return Err(EnterError::PidNamespace(Errno::last()));
        }
    }
    // SAFETY: the child only runs `child_main`, which makes async-signal-safe calls on memory
    // prepared before the fork and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(EnterError::Fork(Errno::last()));
    }
    if pid == 0 {
        child_main(cmd, &argv, &envp, report_write.as_raw_fd());
    }
    drop(report_write);
    let report = read_report(&report_read);
    if report.is_err() {
        // SAFETY: reaps the child that just failed its setup; it has exited or is exiting.
        unsafe {
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    report.map(|()| pid)
}

/// Starts the command in the task and returns its host pid once it has exec'ed. The caller's
/// copies of the command's stdio are closed when this returns.
pub fn spawn_in_task(cmd: EnterCommand) -> Result<i32, EnterError> {
    // A thread of its own: entering the PID namespace sticks to the thread that did it.
    let pid = std::thread::scope(|scope| {
        scope
            .spawn(|| fork_child(&cmd))
            .join()
            .map_err(|_| EnterError::Thread)
    })??;
    drop(cmd);
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_program_is_searched_in_path_and_a_path_is_taken_as_is() {
        assert_eq!(
            candidates("sh", "/usr/bin::/bin/"),
            vec!["/usr/bin/sh", "./sh", "/bin/sh"]
        );
        assert_eq!(candidates("/bin/sh", "/usr/bin"), vec!["/bin/sh"]);
        assert_eq!(candidates("./run", "/usr/bin"), vec!["./run"]);
    }
}
