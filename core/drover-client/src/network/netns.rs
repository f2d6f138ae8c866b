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
        share_mounts_of(dir)?;
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
        share_mounts_of(dir)?;
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

/// Makes `dir` a mount point whose mounts propagate to the copies other mount namespaces
/// made of it (iproute2 does the same for `/var/run/netns`): a namespace bound here is then
/// unmounted everywhere when it is removed. Without it, a container or exec task that was
/// being set up while a namespace was bound keeps a copy of that mount, and removing the
/// file fails with EBUSY for as long as that copy lives.
fn share_mounts_of(dir: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("path has a NUL"))?;
    let make_shared = || {
        // SAFETY: a valid NUL-terminated path; a propagation change takes no source or data.
        let rc = unsafe {
            libc::mount(
                c"none".as_ptr(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_SHARED | libc::MS_REC,
                std::ptr::null(),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    match make_shared() {
        // Not a mount point yet: bind it onto itself (recursively, so that namespaces
        // already bound there stay visible), then share it.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            bind_with(&dir.to_string_lossy(), dir, libc::MS_BIND | libc::MS_REC)?;
            make_shared()
        }
        other => other,
    }
}

fn bind(source: &str, target: &Path) -> io::Result<()> {
    bind_with(source, target, libc::MS_BIND)
}

fn bind_with(source: &str, target: &Path, flags: libc::c_ulong) -> io::Result<()> {
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
            flags,
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
    // EBUSY: a mount namespace being set up right now (a container, an exec task) still
    // holds a copy of the mount; such copies go within moments.
    let mut attempts = 0;
    loop {
        match std::fs::remove_file(path) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempts < 20 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => return Ok(()),
        }
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

    /// Mount points of `/proc/self/mountinfo` equal to `dir` (resolved), with their
    /// propagation fields.
    fn mounts_at(dir: &Path) -> Vec<String> {
        let dir = dir.canonicalize().unwrap();
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.split_whitespace().nth(4) == dir.to_str())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_namespace_directory_is_one_shared_mount_point_so_removals_propagate() {
        if !is_root() {
            eprintln!("skipped: network namespaces need root");
            return;
        }
        let path = path_of(&format!("drover-test-shared-{}", std::process::id()));
        create(&path).unwrap();
        // As `ip netns add` does next: made shared again, never stacked a second time.
        share_mounts_of(Path::new(NETNS_DIR)).unwrap();
        let mounts = mounts_at(Path::new(NETNS_DIR));
        assert!(!mounts.is_empty(), "a mount point");
        assert!(
            mounts.last().is_some_and(|m| m.contains("shared:")),
            "{mounts:?}"
        );
        let before = mounts.len();
        share_mounts_of(Path::new(NETNS_DIR)).unwrap();
        assert_eq!(mounts_at(Path::new(NETNS_DIR)).len(), before);
        remove(&path).unwrap();
        assert!(!path.exists());
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
