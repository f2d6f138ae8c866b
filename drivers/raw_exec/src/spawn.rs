//! Starting a task process directly from the agent: no helper process, own process group, exactly the
//! task's environment and working directory.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::shared::user::{RunAs, switch_user};

/// What to run and where its standard streams go.
pub struct SpawnSpec<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub cwd: &'a Path,
    pub run_as: Option<RunAs>,
    pub stdout: Stdio,
    pub stderr: Stdio,
    /// The network namespace to enter (an open descriptor, `-1`: the agent's).
    pub netns_fd: std::os::fd::RawFd,
}

/// Starts the process and returns once it has exec'ed (std reports exec failures through its
/// own close-on-exec pipe). The caller owns reaping: dropping the returned `Child` neither waits
/// nor kills.
///
/// The task leads a process group of its own (as Nomad's executor does, `Setpgid`), so a stop
/// signals the whole group and a ^C on the agent's terminal, which goes to the terminal's
/// foreground group, does not reach it. A task that needs nothing else is started with
/// `posix_spawn`, which shares the agent's memory until the exec (`CLONE_VM | CLONE_VFORK`):
/// a `fork` copies the page tables of everything the agent has resident first, and tore them
/// down again at the exec, which made 1,000 starts cost seconds and each start slower the
/// more tasks the agent ran (BENCHMARKS.md, issue 18). Entering a network namespace or
/// switching users runs code between fork and exec, so those tasks are still forked.
pub fn spawn(spec: SpawnSpec<'_>) -> io::Result<Child> {
    let mut command = Command::new(spec.program);
    command
        .args(spec.args)
        .env_clear()
        .envs(spec.env)
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(spec.stdout)
        .stderr(spec.stderr)
        .process_group(0);
    let run_as = spec.run_as;
    let netns_fd = spec.netns_fd;
    if run_as.is_none() && netns_fd < 0 {
        return command.spawn();
    }
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe syscalls
    // (setns, setgroups, setgid, setuid) on data prepared before the fork; it does not
    // allocate.
    unsafe {
        command.pre_exec(move || {
            // Before the user switch: entering a namespace needs the agent's privileges.
            enter_netns(netns_fd)?;
            if let Some(run_as) = &run_as {
                switch_user(run_as).map_err(io::Error::from_raw_os_error)?;
            }
            Ok(())
        });
    }
    command.spawn()
}

/// The descriptor the child enters (`-1`: none).
pub fn netns_fd(ns: &Option<std::fs::File>) -> std::os::fd::RawFd {
    ns.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd)
}

/// Between fork and exec: enters the namespace `fd` names, if any. Async-signal-safe (one
/// syscall).
pub(crate) fn enter_netns(fd: std::os::fd::RawFd) -> io::Result<()> {
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: setns on a descriptor the parent holds open across the fork.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::testutil::TaskDirs;

    #[test]
    fn child_leads_its_own_process_group() {
        let dirs = TaskDirs::new("spawn-session");
        let env = BTreeMap::new();
        let args = vec!["-c".to_string(), "sleep 5".to_string()];
        let mut child = spawn(SpawnSpec {
            program: Path::new("/bin/sh"),
            args: &args,
            env: &env,
            cwd: &dirs.task_dir,
            run_as: None,
            stdout: Stdio::null(),
            stderr: Stdio::null(),
            netns_fd: -1,
        })
        .unwrap();
        let pid = child.id() as i32;
        let pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid))).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(pgid.as_raw(), pid);
    }
}
