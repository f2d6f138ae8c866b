//! Bind mounts, and whether a path is a mount point (from `/proc/self/mountinfo`, the
//! kernel's word, so that the plugin's records never have the last say).

use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};

/// Bind-mounts `source` on `target`, read-only if asked (a bind mount only becomes read-only
/// through a remount).
pub fn bind(source: &Path, target: &Path, readonly: bool) -> io::Result<()> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )?;
    if readonly {
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        if let Err(e) = mount(None::<&str>, target, None::<&str>, flags, None::<&str>) {
            // Never leave a writable mount where a read-only one was asked for.
            let _ = umount2(target, MntFlags::MNT_DETACH);
            return Err(e.into());
        }
    }
    Ok(())
}

/// Unmounts `target`; detaches it lazily if it is busy (a task still in it), so that the
/// mount disappears from the namespace either way.
pub fn unmount(target: &Path) -> io::Result<()> {
    match umount2(target, MntFlags::empty()) {
        Err(nix::errno::Errno::EBUSY) => Ok(umount2(target, MntFlags::MNT_DETACH)?),
        other => Ok(other?),
    }
}

/// Whether `path` is a mount point. A path that does not exist is not one.
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    let path = match std::fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(mount_points(&table).any(|p| p == path))
}

/// The mount points (fifth field) of a mountinfo table.
pub fn mount_points(mountinfo: &str) -> impl Iterator<Item = PathBuf> + '_ {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape(field)))
}

/// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let value = d.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_read_with_escapes_undone() {
        let table = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
                     43 27 254:0 /tmp/a /tmp/with\\040space rw - ext4 /dev/vda rw\n";
        let points: Vec<PathBuf> = mount_points(table).collect();
        assert_eq!(
            points,
            vec![PathBuf::from("/proc"), PathBuf::from("/tmp/with space")]
        );
    }

    #[test]
    fn a_missing_path_is_not_a_mount_point_and_root_is() {
        assert!(!is_mount_point(Path::new("/no/such/path/here")).unwrap());
        assert!(is_mount_point(Path::new("/")).unwrap());
    }
}
