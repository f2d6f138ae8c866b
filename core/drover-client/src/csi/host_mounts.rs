//! Bind mounts the client makes on the host: a published volume (or a plugin's directory) laid
//! over a path in a task directory, so that tasks of isolating drivers (whose root is the task
//! directory, bound recursively) and of raw_exec see it. Every helper is idempotent, as hooks
//! run again after an agent restart.

use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

#[derive(Debug, thiserror::Error)]
pub enum HostMountError {
    #[error("creating mount point {}: {source}", path.display())]
    MountPoint { path: PathBuf, source: io::Error },
    #[error("bind mounting {} at {}: {source}", source_path.display(), target.display())]
    Bind {
        source_path: PathBuf,
        target: PathBuf,
        source: nix::Error,
    },
    #[error("unmounting {}: {source}", path.display())]
    Unmount { path: PathBuf, source: nix::Error },
    #[error("reading the mount table: {0}")]
    MountTable(io::Error),
}

/// Whether something is mounted exactly at `path`.
pub fn is_mount_point(path: &Path) -> Result<bool, HostMountError> {
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = crate::mountinfo::read_self().map_err(HostMountError::MountTable)?;
    Ok(mounts.iter().any(|m| m.mount_point == canonical))
}

/// Binds `source` at `target` (a directory, created when missing), read-only if asked. Does
/// nothing when `target` is already a mount point.
pub fn bind_dir(source: &Path, target: &Path, read_only: bool) -> Result<(), HostMountError> {
    std::fs::create_dir_all(target).map_err(|source| HostMountError::MountPoint {
        path: target.to_path_buf(),
        source,
    })?;
    if is_mount_point(target)? {
        return Ok(());
    }
    let bind_err = |e: nix::Error| HostMountError::Bind {
        source_path: source.to_path_buf(),
        target: target.to_path_buf(),
        source: e,
    };
    nix::mount::mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(bind_err)?;
    if read_only {
        // A bind takes the source's flags; read-only needs a remount of the bind itself.
        let remounted = nix::mount::mount(
            None::<&str>,
            target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        );
        if let Err(e) = remounted {
            let _ = nix::mount::umount2(target, MntFlags::MNT_DETACH);
            return Err(bind_err(e));
        }
    }
    Ok(())
}

/// Makes `path` (a directory) a shared mount point on the host, binding it onto itself when it
/// is not one yet, so that a driver's "bidirectional" bind of it joins its peer group and mounts
/// made inside the task reach the host (Docker refuses `rshared` binds of unshared sources).
/// Idempotent.
pub fn make_shared_mount_point(path: &Path) -> Result<(), HostMountError> {
    let bind_err = |e: nix::Error| HostMountError::Bind {
        source_path: path.to_path_buf(),
        target: path.to_path_buf(),
        source: e,
    };
    if !is_mount_point(path)? {
        nix::mount::mount(
            Some(path),
            path,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(bind_err)?;
    }
    nix::mount::mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_SHARED | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(bind_err)
}

/// Whether anything is mounted strictly below `path`.
pub fn has_mounts_below(path: &Path) -> Result<bool, HostMountError> {
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = crate::mountinfo::read_self().map_err(HostMountError::MountTable)?;
    Ok(mounts
        .iter()
        .any(|m| m.mount_point != canonical && m.mount_point.starts_with(&canonical)))
}

/// Unmounts whatever is mounted at `target` (every stacked layer). A path that is not a mount
/// point, or does not exist, is not an error.
pub fn unmount(target: &Path) -> Result<(), HostMountError> {
    for _ in 0..16 {
        if !target.exists() || !is_mount_point(target)? {
            return Ok(());
        }
        match nix::mount::umount2(target, MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => {}
            Err(source) => {
                return Err(HostMountError::Unmount {
                    path: target.to_path_buf(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// `dest` (an absolute path as the task sees it) inside the task directory on the host.
/// `..` components are dropped so a mount never lands outside the task directory.
pub fn path_in_task_dir(task_dir: &Path, dest: &str) -> PathBuf {
    let mut out = task_dir.to_path_buf();
    for part in Path::new(dest).components() {
        if let std::path::Component::Normal(p) = part {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_paths_stay_inside_the_task_directory() {
        let dir = Path::new("/data/alloc/a/web");
        assert_eq!(path_in_task_dir(dir, "/csi"), dir.join("csi"));
        assert_eq!(path_in_task_dir(dir, "/local/csi/"), dir.join("local/csi"));
        assert_eq!(path_in_task_dir(dir, "../../etc"), dir.join("etc"));
    }

    #[test]
    fn a_directory_becomes_a_shared_mount_point_once() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root to mount");
            return;
        }
        let dir = std::env::temp_dir().join(format!("drover-hm-shared-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        make_shared_mount_point(&dir).unwrap();
        make_shared_mount_point(&dir).unwrap();
        let canonical = dir.canonicalize().unwrap();
        let layers: Vec<_> = crate::mountinfo::read_self()
            .unwrap()
            .into_iter()
            .filter(|m| m.mount_point == canonical)
            .collect();
        assert_eq!(layers.len(), 1, "bound onto itself once");
        let line = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .find(|l| l.split(' ').nth(4) == Some(&*canonical.to_string_lossy()))
            .unwrap()
            .to_string();
        assert!(line.contains("shared:"), "{line}");
        assert!(!has_mounts_below(&dir).unwrap());
        bind_dir(&dir.join("sub"), &dir.join("sub"), false).unwrap();
        assert!(has_mounts_below(&dir).unwrap());
        unmount(&dir.join("sub")).unwrap();
        unmount(&dir).unwrap();
        assert!(!is_mount_point(&dir).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unmounting_a_plain_directory_is_a_no_op() {
        let dir = std::env::temp_dir().join(format!("drover-hm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        unmount(&dir).unwrap();
        unmount(&dir.join("missing")).unwrap();
        assert!(!is_mount_point(&dir).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
