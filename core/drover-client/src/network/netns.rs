//! Named network namespaces, as `ip netns add` makes them: a fresh namespace kept alive by a
//! bind mount of it on a file under `/var/run/netns`, so it outlives the thread that made it
//! and any task in it, and tasks (and CNI plugins) enter it by that path.

use std::io;
use std::path::{Path, PathBuf};

/// Where named namespaces live (iproute2's `NETNS_RUN_DIR`).
pub const NETNS_DIR: &str = "/var/run/netns";

/// The path of the namespace named `name`.
pub fn path_of(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Makes a new network namespace bound at `path`. The namespace is made on a short-lived
/// thread of its own: `unshare(CLONE_NEWNET)` moves only the calling thread, which must not be
/// one the runtime goes on using.
pub fn create(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::File::create(path)?;
    let target = path.to_path_buf();
    let made = std::thread::spawn(move || -> io::Result<()> {
        // SAFETY: unshare only changes this thread's network namespace; the thread ends here.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        bind("/proc/thread-self/ns/net", &target)
    })
    .join()
    .map_err(|_| io::Error::other("the namespace thread panicked"))?;
    if let Err(e) = made {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(())
}

/// Binds an existing namespace (`source`, such as a process's `/proc/<pid>/ns/net`) at
/// `path`, so it is entered and removed like one [`create`] made.
pub fn adopt(source: &Path, path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::File::create(path)?;
    let source = source
        .to_str()
        .ok_or_else(|| io::Error::other("namespace path is not UTF-8"))?;
    if let Err(e) = bind(source, path) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(())
}

fn bind(source: &str, target: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &[u8]| std::ffi::CString::new(s).map_err(|_| io::Error::other("path has a NUL"));
    let source = c(source.as_bytes())?;
    let target = c(target.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated strings that live across the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a namespace is bound at `path` (the file exists and is a mount of a namespace).
pub fn exists(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    // A bound namespace is an nsfs inode; the empty placeholder file is not.
    use std::os::unix::fs::MetadataExt;
    meta.dev() != std::fs::metadata(NETNS_DIR).map(|m| m.dev()).unwrap_or(0)
}

/// Unbinds and removes the namespace at `path`; it goes once nothing runs in it. Nothing there
/// is not an error.
pub fn remove(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("path has a NUL"))?;
    // SAFETY: a valid NUL-terminated string; MNT_DETACH never blocks on users.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        // EINVAL: not a mount point (a placeholder left by a failed create).
        if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) {
            return Err(e);
        }
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_namespace_is_made_bound_and_removed() {
        if !is_root() {
            eprintln!("skipped: network namespaces need root");
            return;
        }
        let path = path_of(&format!("drover-test-{}", std::process::id()));
        create(&path).unwrap();
        assert!(exists(&path));
        // It is a namespace other than this process's.
        let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        use std::os::fd::AsRawFd;
        let fd_link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
        assert_ne!(ours, fd_link);
        drop(file);
        remove(&path).unwrap();
        assert!(!path.exists());
        remove(&path).unwrap();
    }

    #[test]
    fn an_existing_namespace_is_adopted_under_a_name_and_released() {
        if !is_root() {
            eprintln!("skipped: network namespaces need root");
            return;
        }
        let made = path_of(&format!("drover-test-src-{}", std::process::id()));
        let adopted = path_of(&format!("drover-test-adopted-{}", std::process::id()));
        create(&made).unwrap();
        adopt(&made, &adopted).unwrap();
        assert!(exists(&adopted));
        let inode = |p: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(p).unwrap().ino()
        };
        assert_eq!(inode(&made), inode(&adopted), "the same namespace");
        remove(&adopted).unwrap();
        remove(&made).unwrap();
        assert!(!adopted.exists() && !made.exists());
    }
}
