//! Running a task as a named user: the lookup happens before fork/clone, the switch after.

use std::ffi::CString;

use nix::unistd::{Gid, User, getgrouplist};
use thiserror::Error;

/// Credentials resolved ahead of time, so the child only makes raw, async-signal-safe calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
}

#[derive(Debug, Error)]
pub enum UserError {
    #[error("user \"{0}\" not found")]
    NotFound(String),
    #[error("looking up user \"{user}\": {source}")]
    Lookup { user: String, source: nix::Error },
}

/// Resolves `name`; an empty name means "run as the agent's user" and gives `None`.
pub fn resolve_user(name: &str) -> Result<Option<RunAs>, UserError> {
    if name.is_empty() {
        return Ok(None);
    }
    let lookup_err = |source| UserError::Lookup {
        user: name.to_string(),
        source,
    };
    let user = User::from_name(name)
        .map_err(lookup_err)?
        .ok_or_else(|| UserError::NotFound(name.to_string()))?;
    let cname = CString::new(name).map_err(|_| UserError::NotFound(name.to_string()))?;
    let groups = getgrouplist(&cname, user.gid)
        .map_err(lookup_err)?
        .into_iter()
        .map(Gid::as_raw)
        .collect();
    Ok(Some(RunAs {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups,
    }))
}

/// The kernel's set-id calls taking 32-bit ids: on 32-bit x86 and ARM the plain numbers are the
/// old 16-bit ones.
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
mod id_syscalls {
    pub const SETGROUPS: libc::c_long = libc::SYS_setgroups32;
    pub const SETRESGID: libc::c_long = libc::SYS_setresgid32;
    pub const SETRESUID: libc::c_long = libc::SYS_setresuid32;
}
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
mod id_syscalls {
    pub const SETGROUPS: libc::c_long = libc::SYS_setgroups;
    pub const SETRESGID: libc::c_long = libc::SYS_setresgid;
    pub const SETRESUID: libc::c_long = libc::SYS_setresuid;
}

/// Drops to `run_as`: supplementary groups, then group, then user (the order that keeps the
/// privilege needed for each step). Returns the errno of the failing call.
///
/// Async-signal-safe: only raw syscalls, no allocation, so it may run between fork/clone and exec.
/// The syscalls are made directly, not through libc's setuid/setgid/setgroups: those apply the
/// change to every thread of the process by signalling them and waiting, and in a child cloned
/// from a multi-threaded agent (the exec driver's) they would wait for threads that exist only
/// in the parent, forever.
pub fn switch_user(run_as: &RunAs) -> Result<(), i32> {
    // Ids are passed with their bits unchanged; the kernel reads them as unsigned.
    let (uid, gid) = (run_as.uid as libc::c_long, run_as.gid as libc::c_long);
    // SAFETY: the pointer and length describe the live `groups` vector, which setgroups only
    // reads; setresgid and setresuid take plain integers (real, effective and saved ids).
    let failed = unsafe {
        libc::syscall(
            id_syscalls::SETGROUPS,
            run_as.groups.len(),
            run_as.groups.as_ptr(),
        ) != 0
            || libc::syscall(id_syscalls::SETRESGID, gid, gid, gid) != 0
            || libc::syscall(id_syscalls::SETRESUID, uid, uid, uid) != 0
    };
    if failed {
        return Err(nix::errno::Errno::last_raw());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_user_means_agent_user() {
        assert_eq!(resolve_user("").unwrap(), None);
    }

    #[test]
    fn root_resolves_to_uid_zero() {
        let root = resolve_user("root").unwrap().unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
    }

    #[test]
    fn unknown_user_is_named_in_the_error() {
        let err = resolve_user("no-such-user-drover").unwrap_err();
        assert_eq!(err.to_string(), "user \"no-such-user-drover\" not found");
    }
}
