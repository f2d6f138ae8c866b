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

/// Drops to `run_as`: supplementary groups, then group, then user (the order that keeps the
/// privilege needed for each step). Returns the errno of the failing call.
///
/// Async-signal-safe: only raw syscalls, no allocation, so it may run between fork/clone and exec.
pub fn switch_user(run_as: &RunAs) -> Result<(), i32> {
    // SAFETY: the pointer and length describe the live `groups` vector, which setgroups only
    // reads; setgid and setuid take plain integers.
    let failed = unsafe {
        libc::setgroups(run_as.groups.len(), run_as.groups.as_ptr()) != 0
            || libc::setgid(run_as.gid) != 0
            || libc::setuid(run_as.uid) != 0
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
