//! Starting a task process with clone(2) in new mount and UTS namespaces (and PID and IPC ones
//! unless the task shares the host's), so the task's command is PID 1 of its own namespace,
//! with no intermediate process. The child builds the task root (see `rootfs`), enters it with
//! pivot_root(2), narrows its capabilities to the task's set, switches user and execs.
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

use crate::caps::CapSet;
use crate::mounts::MountPlan;
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
    BuildRoot,
    EnterRoot,
    SetHostname,
    NewSession,
    ChangeDir,
    RedirectStdio,
    ResetSignals,
    LimitCapabilities,
    SwitchUser,
    SetCapabilities,
    Exec,
    JoinNetwork,
}

impl Step {
    fn from_code(code: u32) -> Option<Step> {
        const ALL: [Step; 14] = [
            Step::JoinCgroup,
            Step::PrivateMounts,
            Step::BuildRoot,
            Step::EnterRoot,
            Step::SetHostname,
            Step::NewSession,
            Step::ChangeDir,
            Step::RedirectStdio,
            Step::ResetSignals,
            Step::LimitCapabilities,
            Step::SwitchUser,
            Step::SetCapabilities,
            Step::Exec,
            Step::JoinNetwork,
        ];
        ALL.into_iter().find(|s| *s as u32 == code)
    }

    fn describe(self) -> &'static str {
        match self {
            Step::JoinCgroup => "joining the task cgroup",
            Step::PrivateMounts => "making mounts private",
            Step::BuildRoot => "building the task root",
            Step::EnterRoot => "entering the task root",
            Step::SetHostname => "setting the hostname",
            Step::NewSession => "creating a session",
            Step::ChangeDir => "entering the task directory",
            Step::RedirectStdio => "connecting stdin/stdout/stderr",
            Step::ResetSignals => "resetting signal handling",
            Step::LimitCapabilities => "limiting the capability bounding set",
            Step::SwitchUser => "switching user",
            Step::SetCapabilities => "setting the task's capabilities",
            Step::Exec => "executing the command",
            Step::JoinNetwork => "joining the allocation's network namespace",
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
    #[error("{}{}: {errno}", step.describe(), detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    ChildSetup {
        step: Step,
        errno: Errno,
        /// Which operation of the step failed, when the step has several.
        detail: Option<String>,
    },
    #[error("task process ended during setup without reporting why")]
    ChildVanished,
}

/// A task command with everything the child needs, already converted to C strings.
pub struct IsolatedCommand {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    root: CString,
    mounts: MountPlan,
    no_pivot_root: bool,
    hostname: Vec<u8>,
    cgroup_procs: Vec<CString>,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    run_as: Option<RunAs>,
    caps: CapSet,
    last_cap: u32,
    flags: CloneFlags,
    netns: Option<OwnedFd>,
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
    /// The program's path inside the task root.
    pub program: &'a std::path::Path,
    pub args: &'a [String],
    pub env: &'a std::collections::BTreeMap<String, String>,
    /// The host directory that becomes the task's `/` once `mounts` ran.
    pub root: &'a std::path::Path,
    pub mounts: MountPlan,
    /// Enter the root with MS_MOVE + chroot instead of pivot_root (ramdisk roots).
    pub no_pivot_root: bool,
    pub hostname: &'a str,
    pub cgroup_procs: &'a [std::path::PathBuf],
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub run_as: Option<RunAs>,
    /// The task's capabilities: bounding, permitted, effective, inheritable and ambient sets.
    pub caps: CapSet,
    /// The kernel's highest capability number; everything above the set up to it is dropped.
    pub last_cap: u32,
    pub new_pid_namespace: bool,
    pub new_ipc_namespace: bool,
    /// The allocation's network namespace to join (bridge mode); `None`: the agent's.
    pub netns: Option<OwnedFd>,
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
        let mut flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS;
        if spec.new_pid_namespace {
            flags |= CloneFlags::CLONE_NEWPID;
        }
        if spec.new_ipc_namespace {
            flags |= CloneFlags::CLONE_NEWIPC;
        }
        Ok(IsolatedCommand {
            program,
            argv,
            envp,
            root: c_path(spec.root)?,
            mounts: spec.mounts,
            no_pivot_root: spec.no_pivot_root,
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
            caps: spec.caps,
            last_cap: spec.last_cap,
            flags,
            netns: spec.netns,
        })
    }

    /// What failed, for an error the child reported.
    fn detail(&self, step: Step, index: u32) -> Option<String> {
        (step == Step::BuildRoot).then(|| self.mounts.description(index as usize).to_string())
    }
}

fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The child's report: step, errno and the index of the failing operation, as u32s.
const REPORT_LEN: usize = 12;

/// Reports `step` and the current errno to the parent, then exits. Async-signal-safe.
fn fail(report_fd: RawFd, step: Step) -> ! {
    fail_at(report_fd, step, 0)
}

/// Like `fail`, naming which operation of the step failed.
fn fail_at(report_fd: RawFd, step: Step, index: u32) -> ! {
    let errno = Errno::last_raw() as u32;
    let mut message = [0u8; REPORT_LEN];
    message[..4].copy_from_slice(&(step as u32).to_ne_bytes());
    message[4..8].copy_from_slice(&errno.to_ne_bytes());
    message[8..].copy_from_slice(&index.to_ne_bytes());
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
        // The network first: entering it needs the agent's capabilities, all still held.
        if let Some(ns) = &cmd.netns
            && libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0
        {
            fail(report_fd, Step::JoinNetwork);
        }
        // Join the task cgroup first so that everything the task does is accounted.
        for procs in &cmd.cgroup_procs {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            // "0" means the writing process itself, whatever its pid in its own namespace.
            if fd < 0 || libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                fail(report_fd, Step::JoinCgroup);
            }
            libc::close(fd);
        }
        // Without this, the mounts below could propagate back to the host's namespace.
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
        if let Err(index) = cmd.mounts.run() {
            fail_at(report_fd, Step::BuildRoot, index as u32);
        }
        if enter_root(&cmd.root, cmd.no_pivot_root).is_err() {
            fail(report_fd, Step::EnterRoot);
        }
        if libc::sethostname(cmd.hostname.as_ptr().cast(), cmd.hostname.len()) != 0 {
            fail(report_fd, Step::SetHostname);
        }
        if libc::setsid() < 0 {
            fail(report_fd, Step::NewSession);
        }
        // The task directory is `/` now, and Nomad starts exec tasks there.
        if libc::chdir(c"/".as_ptr()) != 0 {
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
        if limit_bounding_set(cmd.caps, cmd.last_cap).is_err() {
            fail(report_fd, Step::LimitCapabilities);
        }
        // Keep the permitted set through setuid to a non-root user; exec clears the flag.
        if prctl(libc::PR_SET_KEEPCAPS, 1, 0) != 0 {
            fail(report_fd, Step::LimitCapabilities);
        }
        if let Some(run_as) = &cmd.run_as
            && let Err(errno) = switch_user(run_as)
        {
            Errno::set_raw(errno);
            fail(report_fd, Step::SwitchUser);
        }
        if set_capabilities(cmd.caps).is_err() {
            fail(report_fd, Step::SetCapabilities);
        }
        libc::execve(cmd.program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        fail(report_fd, Step::Exec)
    }
}

/// Makes `root` the process's `/`. With pivot_root the host's tree is detached from the
/// namespace altogether, so no chroot escape can reach it; the MS_MOVE + chroot fallback is for
/// roots on a ramdisk, where pivot_root fails. Async-signal-safe; errno tells why on failure.
unsafe fn enter_root(root: &CString, no_pivot_root: bool) -> Result<(), ()> {
    // SAFETY (whole function): raw syscalls on a C string owned by the caller.
    unsafe {
        if libc::chdir(root.as_ptr()) != 0 {
            return Err(());
        }
        if no_pivot_root {
            if libc::mount(
                root.as_ptr(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_MOVE,
                std::ptr::null(),
            ) != 0
                || libc::chroot(c".".as_ptr()) != 0
            {
                return Err(());
            }
        } else {
            // pivot_root(".", ".") stacks the old root on the new one; detaching "." then
            // drops the old root (see pivot_root(2)).
            if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
                || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0
            {
                return Err(());
            }
        }
        if libc::chdir(c"/".as_ptr()) != 0 {
            return Err(());
        }
    }
    Ok(())
}

/// prctl(2) with two arguments, passing the unused ones as zero `unsigned long`s: the kernel
/// rejects some options (PR_CAP_AMBIENT) whose unused arguments are not zero, and a variadic
/// `int` would leave the upper half of the register undefined. Async-signal-safe.
pub(crate) fn prctl(option: libc::c_int, arg2: libc::c_ulong, arg3: libc::c_ulong) -> libc::c_int {
    let zero: libc::c_ulong = 0;
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(option, arg2, arg3, zero, zero) }
}

/// Drops every capability outside `caps` from the bounding set, so neither the task nor
/// anything it execs can regain it. Async-signal-safe.
pub(crate) fn limit_bounding_set(caps: CapSet, last_cap: u32) -> Result<(), ()> {
    for cap in 0..=last_cap {
        if caps.contains(cap) {
            continue;
        }
        if prctl(libc::PR_CAPBSET_DROP, cap.into(), 0) != 0 {
            return Err(());
        }
    }
    Ok(())
}

/// capset(2)'s header and data (linux/capability.h, version 3: two 32-bit words per set).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Sets permitted, effective and inheritable to `caps` and raises each of them in the ambient
/// set, as Nomad's executor does: ambient capabilities survive exec as a non-root user, and a
/// root task gets exactly its bounding set. Async-signal-safe.
pub(crate) fn set_capabilities(caps: CapSet) -> Result<(), ()> {
    let bits = caps.bits();
    let words = [bits as u32, (bits >> 32) as u32];
    let data = words.map(|word| CapData {
        effective: word,
        permitted: word,
        inheritable: word,
    });
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset reads the header and two data structs, all alive for the call.
    if unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    } != 0
    {
        return Err(());
    }
    for cap in caps.numbers() {
        let raise = libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong;
        if prctl(libc::PR_CAP_AMBIENT, raise, cap.into()) != 0 {
            return Err(());
        }
    }
    Ok(())
}

/// Reads the child's setup report: nothing (EOF) means exec succeeded.
fn read_report(cmd: &IsolatedCommand, report: &OwnedFd) -> Result<(), IsolateError> {
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
            _ => return Err(IsolateError::Pipe(Errno::last())),
        }
    }
    match filled {
        0 => Ok(()),
        REPORT_LEN => {
            let [s0, s1, s2, s3, e0, e1, e2, e3, i0, i1, i2, i3] = message;
            let step = u32::from_ne_bytes([s0, s1, s2, s3]);
            let errno = u32::from_ne_bytes([e0, e1, e2, e3]);
            let index = u32::from_ne_bytes([i0, i1, i2, i3]);
            match Step::from_code(step) {
                Some(step) => Err(IsolateError::ChildSetup {
                    step,
                    errno: Errno::from_raw(errno as i32),
                    detail: cmd.detail(step, index),
                }),
                None => Err(IsolateError::ChildVanished),
            }
        }
        _ => Err(IsolateError::ChildVanished),
    }
}

/// Clones the task process into its namespaces and returns its host pid once it has exec'ed.
/// A child that failed its setup is reaped here and its failure returned.
pub fn spawn_isolated(cmd: &IsolatedCommand) -> Result<i32, IsolateError> {
    let argv = null_terminated(&cmd.argv);
    let envp = null_terminated(&cmd.envp);
    let (report_read, report_write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(IsolateError::Pipe)?;
    let report_fd = report_write.as_raw_fd();
    let mut stack = vec![0u8; CHILD_STACK_SIZE];
    let flags = cmd.flags;
    let child: nix::sched::CloneCb<'_> = Box::new(|| child_main(cmd, &argv, &envp, report_fd));
    // SAFETY: without CLONE_VM the child gets its own copy of this address space, so the stack
    // and everything `child_main` borrows stay valid in it; `child_main` never returns (it execs
    // or _exits) and stays well within the stack.
    let pid = unsafe { nix::sched::clone(child, &mut stack, flags, Some(libc::SIGCHLD)) }
        .map_err(IsolateError::Clone)?;
    // Only the child may hold the write end now, so EOF means it exec'ed (or died).
    drop(report_write);
    let report = read_report(cmd, &report_read);
    if report.is_err() {
        // SAFETY: reaps the child that just failed its setup; it has exited or is exiting.
        unsafe {
            libc::waitpid(pid.as_raw(), std::ptr::null_mut(), 0);
        }
    }
    report.map(|()| pid.as_raw())
}
