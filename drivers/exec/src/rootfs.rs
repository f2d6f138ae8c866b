//! The task's root filesystem, as Nomad's exec driver gives it: the task directory becomes `/`,
//! with the host directories of `chroot_env` read-only inside it, the allocation's shared
//! directory at `/alloc`, and fresh `/dev`, `/proc` and `/sys`. Nomad copies `chroot_env` into
//! every task directory; here it is bind-mounted inside the task's own mount namespace, so
//! starting a task copies nothing and nothing of it is visible on the host (where only empty
//! mount points appear in the task directory).
//!
//! This module works out the mounts and creates the mount points, in the parent; the child
//! carries out the resulting [`MountPlan`] and then enters the root (see `isolate`).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use drover_abi::{MountConfig, MountPropagation};
use thiserror::Error;

use crate::mounts::{MountOp, MountPlan};

/// open_tree(2)'s flags (linux/mount.h): a detached copy rather than the mount itself.
const OPEN_TREE_CLONE: libc::c_uint = 1;

/// Where the allocation's shared directory appears in the task (Nomad's `/alloc`).
pub const ALLOC_IN_TASK: &str = "/alloc";

/// Nomad's fallback search path for a bare command inside the task root.
const TASK_SEARCH_PATH: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/bin"];

/// The character devices of a task's `/dev`: (name, major, minor), Docker's and runc's set.
const DEVICES: [(&str, u32, u32); 6] = [
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

/// /proc entries remounted read-only, and masked, as runc does for Nomad.
const PROC_READ_ONLY: [&str; 4] = ["sys", "sysrq-trigger", "irq", "bus"];
const PROC_MASKED: &str = "kcore";

#[derive(Debug, Error)]
pub enum RootError {
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{} is a symbolic link; a mount point of the task root must not be one", .0.display())]
    Symlink(PathBuf),
    #[error("{} exists but is not a {wanted}, so {} cannot be mounted on it", path.display(), host.display())]
    WrongKind {
        path: PathBuf,
        wanted: &'static str,
        host: PathBuf,
    },
    #[error("chroot_env: {} lies inside {}, where {} does not exist", dest.display(), under.display(), missing.display())]
    NoMountPoint {
        dest: PathBuf,
        under: PathBuf,
        missing: PathBuf,
    },
    #[error("path {} contains a NUL byte", .0.display())]
    NulByte(PathBuf),
    #[error("binary \"{0}\" could not be found")]
    NotFound(String),
    #[error("mount {task_path}: {reason}")]
    BadMount { task_path: String, reason: String },
    #[error("mount {}: {action}: {source}", path.display())]
    Propagation {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> RootError {
    let path = path.to_path_buf();
    move |source| RootError::Io {
        action,
        path,
        source,
    }
}

fn c_path(path: &Path) -> Result<CString, RootError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| RootError::NulByte(path.to_path_buf()))
}

fn c_str(text: &str) -> CString {
    // Only called with the literals of this module, which hold no NUL.
    CString::new(text).unwrap_or_default()
}

/// `path` as seen from inside the root: absolute, `.` dropped, `..` resolved without ever going
/// above `/` (as the kernel resolves it inside the task). This is what keeps host-side lookups
/// of task paths inside the task's view.
pub fn clean_task_path(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Whether `path` is exactly a mount point in this (the host's) mount table, and whether that
/// mount is shared.
fn mount_point_state(path: &Path) -> Result<Option<bool>, RootError> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(io_err("reading", Path::new("/proc/self/mountinfo")))?;
    let wanted = path.as_os_str().as_bytes();
    for line in table.lines() {
        let mut fields = line.split(' ');
        let Some(mount_point) = fields.nth(4) else {
            continue;
        };
        // mountinfo escapes spaces and the like as octal; paths with them never match, and
        // then the path is bound onto itself again, which only stacks an identical layer.
        if mount_point.as_bytes() == wanted {
            let shared = fields
                .take_while(|f| *f != "-")
                .any(|f| f.starts_with("shared:"));
            return Ok(Some(shared));
        }
    }
    Ok(None)
}

/// "rshared on the host source side": a propagating mount must come from a shared mount, or
/// its copy in the task joins no peer group. A source that is not a mount point of its own is
/// bound onto itself first; that mount stays for the owner of the path to remove.
fn make_shared_source(source: &Path) -> Result<(), RootError> {
    let source = std::fs::canonicalize(source).map_err(io_err("resolving", source))?;
    let failed = |action: &'static str| {
        let path = source.clone();
        move |errno: nix::Error| RootError::Propagation {
            action,
            path,
            source: io::Error::from(errno),
        }
    };
    match mount_point_state(&source)? {
        Some(true) => return Ok(()),
        Some(false) => {}
        None => nix::mount::mount(
            Some(&source),
            &source,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(failed("binding the host path onto itself"))?,
    }
    nix::mount::mount(
        None::<&str>,
        &source,
        None::<&str>,
        nix::mount::MsFlags::MS_SHARED | nix::mount::MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(failed("making the host path shared"))
}

/// A detached copy of the mount tree at `source`, in the host's namespace, for the child to
/// attach (see [`MountOp::Attach`]).
fn open_tree_clone(source: &Path) -> Result<std::os::fd::OwnedFd, RootError> {
    use std::os::fd::FromRawFd;
    let path = c_path(source)?;
    // SAFETY: a raw syscall on a NUL-terminated path; the returned descriptor is owned here.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(RootError::Propagation {
            action: "cloning the host mount (open_tree)",
            path: source.to_path_buf(),
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: open_tree returned a fresh descriptor nobody else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// A host directory or file shown inside the task root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub source: PathBuf,
    /// Absolute path inside the task root.
    pub dest: PathBuf,
    pub read_only: bool,
    pub is_dir: bool,
    /// The source's nosuid/nodev/noexec, kept when a read-only remount must replace its flags.
    keep_flags: libc::c_ulong,
    /// Private for the root's own binds; an agent mount may ask for more.
    propagation: MountPropagation,
}

/// The root of one task: the task directory, and the binds laid over it.
#[derive(Debug, Clone)]
pub struct TaskRoot {
    root: PathBuf,
    /// Shallowest destination first, so a nested bind lands on top of its parent.
    binds: Vec<Bind>,
}

fn mount_flags_of(path: &Path) -> libc::c_ulong {
    let Ok(stat) = nix::sys::statvfs::statvfs(path) else {
        return 0;
    };
    use nix::sys::statvfs::FsFlags;
    let flags = stat.flags();
    let mut keep = 0;
    for (fs_flag, mount_flag) in [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
    ] {
        if flags.contains(fs_flag) {
            keep |= mount_flag;
        }
    }
    keep
}

impl TaskRoot {
    /// Works out the binds for a task whose directory is `task_dir` in the allocation
    /// `alloc_dir`, and creates their mount points in the task directory. Host paths of
    /// `chroot_env` that do not exist are skipped, as in Nomad.
    ///
    /// `mounts` are the agent's (`TaskConfig::mounts`): each host path must exist; its mount
    /// point is created in the task directory.
    pub fn prepare(
        task_dir: &Path,
        alloc_dir: &Path,
        chroot_env: &BTreeMap<String, String>,
        mounts: &[MountConfig],
    ) -> Result<TaskRoot, RootError> {
        let mut binds = Vec::new();
        for m in mounts {
            let bad = |reason: String| RootError::BadMount {
                task_path: m.task_path.clone(),
                reason,
            };
            if !m.task_path.starts_with('/') || !m.host_path.starts_with('/') {
                return Err(bad("both paths must be absolute".into()));
            }
            let source = PathBuf::from(&m.host_path);
            let meta = std::fs::metadata(&source)
                .map_err(|e| bad(format!("host path {}: {e}", m.host_path)))?;
            let dest = clean_task_path(Path::new(&m.task_path));
            if dest == Path::new("/") {
                return Err(bad("cannot replace the task root".into()));
            }
            binds.push(Bind {
                keep_flags: mount_flags_of(&source),
                source,
                dest,
                read_only: m.readonly,
                is_dir: meta.is_dir(),
                propagation: m.propagation_mode,
            });
        }
        for (host, dest) in chroot_env {
            let source = PathBuf::from(host);
            match std::fs::metadata(&source) {
                Ok(meta) => binds.push(Bind {
                    keep_flags: mount_flags_of(&source),
                    source,
                    dest: clean_task_path(Path::new(dest)),
                    read_only: true,
                    is_dir: meta.is_dir(),
                    propagation: MountPropagation::Private,
                }),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("reading", &source)(e)),
            }
        }
        let shared = alloc_dir.join("alloc");
        if shared.is_dir() {
            binds.push(Bind {
                source: shared,
                dest: PathBuf::from(ALLOC_IN_TASK),
                read_only: false,
                is_dir: true,
                keep_flags: 0,
                propagation: MountPropagation::Private,
            });
        }
        binds.sort_by(|a, b| {
            let depth = |p: &Path| p.components().count();
            depth(&a.dest)
                .cmp(&depth(&b.dest))
                .then_with(|| a.dest.cmp(&b.dest))
        });
        let task_root = TaskRoot {
            root: task_dir.to_path_buf(),
            binds,
        };
        task_root.make_mount_points()?;
        Ok(task_root)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    #[cfg(test)]
    pub fn binds(&self) -> &[Bind] {
        &self.binds
    }

    /// The bind a task path falls under, deepest first.
    fn covering_bind(&self, task_path: &Path) -> Option<&Bind> {
        self.binds
            .iter()
            .rev()
            .find(|b| task_path.starts_with(&b.dest))
    }

    /// Where a task path lives on the host, given the binds.
    pub fn host_path(&self, task_path: &Path) -> PathBuf {
        let task_path = clean_task_path(task_path);
        match self.covering_bind(&task_path) {
            Some(bind) => match task_path.strip_prefix(&bind.dest) {
                Ok(rest) if !rest.as_os_str().is_empty() => bind.source.join(rest),
                _ => bind.source.clone(),
            },
            None => self.within_root(&task_path),
        }
    }

    fn within_root(&self, task_path: &Path) -> PathBuf {
        let relative = task_path.strip_prefix("/").unwrap_or(task_path);
        self.root.join(relative)
    }

    fn make_mount_points(&self) -> Result<(), RootError> {
        for (index, bind) in self.binds.iter().enumerate() {
            // A bind nested in an earlier one needs its mount point in that one's source,
            // which belongs to the host and is never written to.
            let parent = self.binds[..index]
                .iter()
                .rev()
                .find(|b| bind.dest.starts_with(&b.dest));
            match parent {
                Some(parent) => {
                    let rest = bind.dest.strip_prefix(&parent.dest).unwrap_or(&bind.dest);
                    let inside = parent.source.join(rest);
                    let fits = std::fs::metadata(&inside)
                        .map(|m| m.is_dir() == bind.is_dir)
                        .unwrap_or(false);
                    if !fits {
                        return Err(RootError::NoMountPoint {
                            dest: bind.dest.clone(),
                            under: parent.dest.clone(),
                            missing: inside,
                        });
                    }
                }
                None => self.make_mount_point(&bind.dest, bind.is_dir, &bind.source)?,
            }
        }
        for dir in ["/dev", "/proc", "/sys"] {
            self.make_mount_point(Path::new(dir), true, Path::new(dir))?;
        }
        Ok(())
    }

    /// Creates `dest` (and its parents) under the task directory, refusing symbolic links: a
    /// task may have left one in its directory to aim a later mount at the host.
    fn make_mount_point(&self, dest: &Path, is_dir: bool, source: &Path) -> Result<(), RootError> {
        let parts: Vec<_> = dest
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        let mut path = self.root.clone();
        for (i, part) in parts.iter().enumerate() {
            path.push(part);
            let last = i + 1 == parts.len();
            let want_dir = !last || is_dir;
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(RootError::Symlink(path));
                }
                Ok(meta) if meta.is_dir() != want_dir => {
                    return Err(RootError::WrongKind {
                        path,
                        wanted: if want_dir { "directory" } else { "file" },
                        host: source.to_path_buf(),
                    });
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let made = if want_dir {
                        std::fs::DirBuilder::new().mode(0o755).create(&path)
                    } else {
                        std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .mode(0o644)
                            .open(&path)
                            .map(drop)
                    };
                    match made {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(io_err("creating mount point", &path)(e)),
                    }
                }
                Err(e) => return Err(io_err("reading", &path)(e)),
            }
        }
        Ok(())
    }

    /// The mounts that build the root, in order, for the child to carry out.
    pub fn mount_plan(&self) -> Result<MountPlan, RootError> {
        let mut plan = MountPlan::default();
        let root = c_path(&self.root)?;
        plan.push(
            MountOp::Mount {
                source: Some(root.clone()),
                target: root,
                fstype: None,
                flags: libc::MS_BIND | libc::MS_REC,
                data: None,
            },
            format!("bind-mounting the task directory {}", self.root.display()),
        );
        for bind in &self.binds {
            let target_path = self.within_root(&bind.dest);
            let target = c_path(&target_path)?;
            let description = format!(
                "mounting {} at {} in the task",
                bind.source.display(),
                bind.dest.display()
            );
            match bind.propagation {
                MountPropagation::Private => plan.push(
                    MountOp::Mount {
                        source: Some(c_path(&bind.source)?),
                        target: target.clone(),
                        fstype: None,
                        flags: libc::MS_BIND | libc::MS_REC,
                        data: None,
                    },
                    description,
                ),
                propagation => {
                    make_shared_source(&bind.source)?;
                    let tree = open_tree_clone(&bind.source)?;
                    plan.push(
                        MountOp::Attach {
                            tree,
                            target: target.clone(),
                        },
                        description,
                    );
                    if propagation == MountPropagation::HostToTask {
                        plan.push(
                            MountOp::Mount {
                                source: None,
                                target: target.clone(),
                                fstype: None,
                                flags: libc::MS_REC | libc::MS_SLAVE,
                                data: None,
                            },
                            format!("making {} receive host mounts only", bind.dest.display()),
                        );
                    }
                }
            }
            if bind.read_only {
                plan.push(
                    MountOp::ReadOnly {
                        target,
                        keep_flags: bind.keep_flags,
                    },
                    format!("making {} read-only in the task", bind.dest.display()),
                );
            }
        }
        self.plan_dev(&mut plan)?;
        self.plan_proc(&mut plan)?;
        self.plan_sys(&mut plan)?;
        Ok(plan)
    }

    fn task_c_path(&self, task_path: &str) -> Result<CString, RootError> {
        c_path(&self.within_root(Path::new(task_path)))
    }

    fn plan_dev(&self, plan: &mut MountPlan) -> Result<(), RootError> {
        let mount =
            |source: &str, target: CString, fstype: &str, flags, data: &str| MountOp::Mount {
                source: Some(c_str(source)),
                target,
                fstype: Some(c_str(fstype)),
                flags,
                data: (!data.is_empty()).then(|| c_str(data)),
            };
        plan.push(
            mount(
                "tmpfs",
                self.task_c_path("/dev")?,
                "tmpfs",
                libc::MS_NOSUID | libc::MS_STRICTATIME,
                "mode=755,size=65536k",
            ),
            "mounting a tmpfs at /dev".into(),
        );
        for (name, major, minor) in DEVICES {
            plan.push(
                MountOp::MakeCharDevice {
                    path: self.task_c_path(&format!("/dev/{name}"))?,
                    mode: 0o666,
                    major,
                    minor,
                },
                format!("creating /dev/{name}"),
            );
        }
        for dir in ["pts", "shm", "mqueue"] {
            plan.push(
                MountOp::MakeDir {
                    path: self.task_c_path(&format!("/dev/{dir}"))?,
                    mode: 0o755,
                },
                format!("creating /dev/{dir}"),
            );
        }
        let no_exec = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        plan.push(
            mount(
                "devpts",
                self.task_c_path("/dev/pts")?,
                "devpts",
                libc::MS_NOSUID | libc::MS_NOEXEC,
                "newinstance,ptmxmode=0666,mode=0620",
            ),
            "mounting /dev/pts".into(),
        );
        plan.push(
            mount(
                "shm",
                self.task_c_path("/dev/shm")?,
                "tmpfs",
                no_exec,
                "mode=1777,size=65536k",
            ),
            "mounting /dev/shm".into(),
        );
        plan.push(
            mount(
                "mqueue",
                self.task_c_path("/dev/mqueue")?,
                "mqueue",
                no_exec,
                "",
            ),
            "mounting /dev/mqueue".into(),
        );
        for (link, target) in [
            ("ptmx", "pts/ptmx"),
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            plan.push(
                MountOp::Symlink {
                    target: c_str(target),
                    link: self.task_c_path(&format!("/dev/{link}"))?,
                },
                format!("linking /dev/{link}"),
            );
        }
        Ok(())
    }

    fn plan_proc(&self, plan: &mut MountPlan) -> Result<(), RootError> {
        let no_exec = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        plan.push(
            MountOp::Mount {
                source: Some(c_str("proc")),
                target: self.task_c_path("/proc")?,
                fstype: Some(c_str("proc")),
                flags: no_exec,
                data: None,
            },
            "mounting /proc".into(),
        );
        plan.push_optional(
            MountOp::Mount {
                source: Some(self.task_c_path("/dev/null")?),
                target: self.task_c_path(&format!("/proc/{PROC_MASKED}"))?,
                fstype: None,
                flags: libc::MS_BIND,
                data: None,
            },
            format!("masking /proc/{PROC_MASKED}"),
        );
        for entry in PROC_READ_ONLY {
            let target = self.task_c_path(&format!("/proc/{entry}"))?;
            plan.push_optional(
                MountOp::Mount {
                    source: Some(target.clone()),
                    target: target.clone(),
                    fstype: None,
                    flags: libc::MS_BIND | libc::MS_REC,
                    data: None,
                },
                format!("binding /proc/{entry}"),
            );
            plan.push_optional(
                MountOp::ReadOnly {
                    target,
                    keep_flags: no_exec,
                },
                format!("making /proc/{entry} read-only"),
            );
        }
        Ok(())
    }

    fn plan_sys(&self, plan: &mut MountPlan) -> Result<(), RootError> {
        let no_exec = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        plan.push(
            MountOp::Mount {
                source: Some(c_str("sysfs")),
                target: self.task_c_path("/sys")?,
                fstype: Some(c_str("sysfs")),
                flags: no_exec | libc::MS_RDONLY,
                data: None,
            },
            "mounting /sys read-only".into(),
        );
        plan.push_optional(
            MountOp::Mount {
                source: Some(c_str("tmpfs")),
                target: self.task_c_path("/sys/firmware")?,
                fstype: Some(c_str("tmpfs")),
                flags: no_exec | libc::MS_RDONLY,
                data: Some(c_str("size=0")),
            },
            "masking /sys/firmware".into(),
        );
        Ok(())
    }

    /// Finds the program for `command` as Nomad's exec driver does: in `/local`, at the task
    /// root (which covers absolute paths such as `/bin/sh`), then, for a bare name, along the
    /// task's `PATH` and `/usr/local/bin:/usr/bin:/bin`. Returns the path inside the task. A
    /// file the task directory holds without the exec bit (an artifact, a template) is made
    /// executable, as Nomad does; host files are never modified.
    pub fn find_command(
        &self,
        command: &str,
        task_path_env: Option<&str>,
    ) -> Result<PathBuf, RootError> {
        let relative = command.trim_start_matches('/');
        let mut candidates = vec![
            clean_task_path(&Path::new("/local").join(relative)),
            clean_task_path(Path::new(relative)),
        ];
        if !command.contains('/') {
            let search = task_path_env
                .unwrap_or_default()
                .split(':')
                .filter(|dir| dir.starts_with('/'))
                .chain(TASK_SEARCH_PATH);
            candidates.extend(search.map(|dir| clean_task_path(&Path::new(dir).join(command))));
        }
        for candidate in candidates {
            let host = self.host_path(&candidate);
            let Ok(meta) = std::fs::metadata(&host) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let in_task_dir = self.covering_bind(&candidate).is_none();
            if meta.permissions().mode() & 0o111 != 0 {
                return Ok(candidate);
            }
            if in_task_dir {
                make_executable(&host)?;
                return Ok(candidate);
            }
        }
        Err(RootError::NotFound(command.to_string()))
    }
}

/// Adds r-x for everyone to a regular file of the task directory. A symbolic link is left
/// alone: it may point anywhere on the host.
fn make_executable(path: &Path) -> Result<(), RootError> {
    let meta = std::fs::symlink_metadata(path).map_err(io_err("reading", path))?;
    if !meta.file_type().is_file() {
        return Ok(());
    }
    let mut perms = meta.permissions();
    perms.set_mode(perms.mode() | 0o555);
    std::fs::set_permissions(path, perms).map_err(io_err("making executable", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("drover-rootfs-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("alloc/alloc")).unwrap();
            std::fs::create_dir_all(dir.join("alloc/web/local")).unwrap();
            std::fs::create_dir_all(dir.join("host/usr/bin")).unwrap();
            std::fs::create_dir_all(dir.join("host/usr/local")).unwrap();
            std::fs::write(dir.join("host/usr/bin/tool"), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(
                dir.join("host/usr/bin/tool"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
            std::fs::write(dir.join("host/hosts"), "127.0.0.1 localhost\n").unwrap();
            Scratch(dir)
        }

        fn path(&self, p: &str) -> PathBuf {
            self.0.join(p)
        }

        fn env(&self, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(h, t)| (self.path(h).display().to_string(), t.to_string()))
                .collect()
        }

        fn root(&self, pairs: &[(&str, &str)]) -> Result<TaskRoot, RootError> {
            TaskRoot::prepare(
                &self.path("alloc/web"),
                &self.path("alloc"),
                &self.env(pairs),
                &[],
            )
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn task_paths_never_climb_above_the_root() {
        assert_eq!(
            clean_task_path(Path::new("../../etc/./x")),
            PathBuf::from("/etc/x")
        );
        assert_eq!(
            clean_task_path(Path::new("/a/b/../../..")),
            PathBuf::from("/")
        );
    }

    #[test]
    fn mount_points_are_made_and_missing_sources_skipped() {
        let s = Scratch::new("points");
        let root = s
            .root(&[
                ("host/usr", "/usr"),
                ("host/hosts", "/etc/hosts"),
                ("host/nope", "/nope"),
            ])
            .unwrap();
        let dests: Vec<_> = root.binds().iter().map(|b| b.dest.clone()).collect();
        assert_eq!(
            dests,
            vec![
                PathBuf::from("/alloc"),
                PathBuf::from("/usr"),
                PathBuf::from("/etc/hosts")
            ]
        );
        let task = s.path("alloc/web");
        assert!(task.join("usr").is_dir());
        assert!(task.join("etc/hosts").is_file());
        assert!(task.join("alloc").is_dir());
        for dir in ["dev", "proc", "sys"] {
            assert!(task.join(dir).is_dir(), "{dir}");
        }
        assert!(!task.join("nope").exists());
        // Empty on the host: nothing is copied.
        assert_eq!(std::fs::read_dir(task.join("usr")).unwrap().count(), 0);
        // Preparing again (a restart) is fine.
        s.root(&[("host/usr", "/usr"), ("host/hosts", "/etc/hosts")])
            .unwrap();
    }

    #[test]
    fn a_symlink_in_the_task_dir_is_never_a_mount_point() {
        let s = Scratch::new("symlink");
        std::os::unix::fs::symlink("/", s.path("alloc/web/usr")).unwrap();
        let err = s.root(&[("host/usr", "/usr")]).unwrap_err();
        assert!(matches!(err, RootError::Symlink(_)), "{err}");
    }

    #[test]
    fn a_nested_bind_needs_its_mount_point_in_the_outer_source() {
        let s = Scratch::new("nested");
        let ok = s.root(&[("host/usr", "/usr"), ("host/usr/bin", "/usr/local")]);
        assert!(ok.is_ok(), "{ok:?}");
        let err = s
            .root(&[("host/usr", "/usr"), ("host/usr/bin", "/usr/missing")])
            .unwrap_err();
        assert!(matches!(err, RootError::NoMountPoint { .. }), "{err}");
    }

    #[test]
    fn host_paths_follow_the_deepest_bind() {
        let s = Scratch::new("hostpath");
        let root = s
            .root(&[("host/usr", "/usr"), ("host/usr/bin", "/usr/local")])
            .unwrap();
        assert_eq!(
            root.host_path(Path::new("/usr/bin/tool")),
            s.path("host/usr/bin/tool")
        );
        assert_eq!(
            root.host_path(Path::new("/usr/local/tool")),
            s.path("host/usr/bin/tool")
        );
        assert_eq!(
            root.host_path(Path::new("/alloc/data")),
            s.path("alloc/alloc/data")
        );
        assert_eq!(
            root.host_path(Path::new("/local/x")),
            s.path("alloc/web/local/x")
        );
        assert_eq!(root.host_path(Path::new("/../../x")), s.path("alloc/web/x"));
    }

    #[test]
    fn commands_are_found_as_nomad_finds_them() {
        let s = Scratch::new("lookup");
        let root = s.root(&[("host/usr", "/usr")]).unwrap();
        // On the search path, inside a bind.
        assert_eq!(
            root.find_command("tool", None).unwrap(),
            PathBuf::from("/usr/bin/tool")
        );
        // Absolute, through the bind.
        assert_eq!(
            root.find_command("/usr/bin/tool", None).unwrap(),
            PathBuf::from("/usr/bin/tool")
        );
        // local/ wins, and a task file gets its exec bit.
        let script = s.path("alloc/web/local/tool");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            root.find_command("tool", None).unwrap(),
            PathBuf::from("/local/tool")
        );
        assert_eq!(
            std::fs::metadata(&script).unwrap().permissions().mode() & 0o555,
            0o555
        );
        // The task's PATH is searched inside the task, never on the host.
        assert!(matches!(
            root.find_command("sh", Some("/opt/nothing")),
            Err(RootError::NotFound(_))
        ));
        assert_eq!(
            root.find_command("missing-tool", None)
                .unwrap_err()
                .to_string(),
            "binary \"missing-tool\" could not be found"
        );
    }

    #[test]
    fn plan_binds_the_root_first_and_makes_chroot_env_read_only() {
        let s = Scratch::new("plan");
        let root = s.root(&[("host/usr", "/usr")]).unwrap();
        let plan = root.mount_plan().unwrap();
        let first = &plan.ops[0].op;
        let root_c = c_path(&s.path("alloc/web")).unwrap();
        assert!(matches!(first, MountOp::Mount { target, .. } if *target == root_c));
        let usr_target = c_path(&s.path("alloc/web/usr")).unwrap();
        let read_only = plan
            .ops
            .iter()
            .any(|p| matches!(&p.op, MountOp::ReadOnly { target, .. } if *target == usr_target));
        assert!(read_only);
        let alloc_target = c_path(&s.path("alloc/web/alloc")).unwrap();
        let alloc_read_only = plan
            .ops
            .iter()
            .any(|p| matches!(&p.op, MountOp::ReadOnly { target, .. } if *target == alloc_target));
        assert!(!alloc_read_only, "/alloc stays writable");
    }
}
