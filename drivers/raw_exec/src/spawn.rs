//! Starting a task process directly from the agent: no helper process, own session, exactly the
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
pub fn spawn(spec: SpawnSpec<'_>) -> io::Result<Child> {
    let mut command = Command::new(spec.program);
    command
        .args(spec.args)
        .env_clear()
        .envs(spec.env)
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(spec.stdout)
        .stderr(spec.stderr);
    let run_as = spec.run_as;
    let netns_fd = spec.netns_fd;
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe syscalls
    // (setns, setsid, setgroups, setgid, setuid) on data prepared before the fork; it does not
    // allocate.
    unsafe {
        command.pre_exec(move || {
            // Before the user switch: entering a namespace needs the agent's privileges.
            enter_netns(netns_fd)?;
            // A session of its own: the task is its own process group (so stop can signal the
            // whole group) and a ^C on the agent's terminal does not reach it.
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
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
    fn child_leads_its_own_session() {
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
        let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid))).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(sid.as_raw(), pid);
    }
}
