//! A list of mount-namespace operations prepared in the parent and carried out by the cloned
//! child. Every path and option is a C string made before the clone, so running the list only
//! makes raw syscalls (async-signal-safe, no allocation), as the child of a multi-threaded
//! parent must.

use std::ffi::{CStr, CString, c_char};
use std::os::fd::{AsRawFd, OwnedFd};

/// mount_setattr(2)'s argument (linux/mount.h), defined here as libc does not export it for
/// every target.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// move_mount(2)'s flag: the source is the detached tree `from_fd` refers to (linux/mount.h).
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// One operation, run with the child's credentials (root, every capability).
#[derive(Debug)]
pub enum MountOp {
    /// mount(2) as given.
    Mount {
        source: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
    },
    /// Makes `target` and every mount below it read-only (mount_setattr with AT_RECURSIVE);
    /// kernels before 5.12 get a remount of `target` alone, keeping `keep_flags`.
    ReadOnly {
        target: CString,
        keep_flags: libc::c_ulong,
    },
    MakeDir {
        path: CString,
        mode: libc::mode_t,
    },
    MakeCharDevice {
        path: CString,
        mode: libc::mode_t,
        major: u32,
        minor: u32,
    },
    Symlink {
        target: CString,
        link: CString,
    },
    /// Attaches a detached mount tree (open_tree(2) with OPEN_TREE_CLONE, made by the parent in
    /// the host's namespace) at `target` with move_mount(2). Unlike a bind made in the child
    /// after its mounts went private, the tree keeps the host mount's peer group, which is what
    /// lets mounts propagate between the host and the task.
    Attach {
        tree: OwnedFd,
        target: CString,
    },
}

/// An operation and whether it may fail because its target does not exist (masking a /proc
/// file an older kernel lacks, for example).
#[derive(Debug)]
pub struct PlannedOp {
    pub op: MountOp,
    pub optional: bool,
    /// What the operation does, for the error message when it fails.
    pub description: String,
}

/// The operations, in order.
#[derive(Debug, Default)]
pub struct MountPlan {
    pub ops: Vec<PlannedOp>,
}

fn opt_ptr(value: &Option<CString>) -> *const c_char {
    value.as_deref().map_or(std::ptr::null(), CStr::as_ptr)
}

impl MountPlan {
    pub fn push(&mut self, op: MountOp, description: String) {
        self.ops.push(PlannedOp {
            op,
            optional: false,
            description,
        });
    }

    pub fn push_optional(&mut self, op: MountOp, description: String) {
        self.ops.push(PlannedOp {
            op,
            optional: true,
            description,
        });
    }

    pub fn description(&self, index: usize) -> &str {
        self.ops
            .get(index)
            .map_or("preparing the task root", |op| op.description.as_str())
    }

    /// Runs every operation; on failure returns the index of the failing one (errno is left
    /// set). Async-signal-safe.
    ///
    /// # Safety
    /// Changes the calling process's mounts and umask: only for the freshly cloned child, in
    /// its own mount namespace, before exec.
    pub unsafe fn run(&self) -> Result<(), usize> {
        // Device nodes and directories get exactly the modes asked for.
        // SAFETY: umask has no preconditions.
        let old_umask = unsafe { libc::umask(0) };
        for (index, planned) in self.ops.iter().enumerate() {
            // SAFETY: every pointer comes from a C string owned by the plan, alive for the call.
            let ok = unsafe { run_op(&planned.op) };
            let skipped =
                planned.optional && nix::errno::Errno::last() == nix::errno::Errno::ENOENT;
            if !ok && !skipped {
                return Err(index);
            }
        }
        // SAFETY: as above.
        unsafe { libc::umask(old_umask) };
        Ok(())
    }
}

/// Runs one operation; false on failure with errno set.
unsafe fn run_op(op: &MountOp) -> bool {
    // SAFETY (whole function): raw syscalls on NUL-terminated strings owned by `op`.
    unsafe {
        match op {
            MountOp::Mount {
                source,
                target,
                fstype,
                flags,
                data,
            } => {
                libc::mount(
                    opt_ptr(source),
                    target.as_ptr(),
                    opt_ptr(fstype),
                    *flags,
                    opt_ptr(data).cast(),
                ) == 0
            }
            MountOp::ReadOnly { target, keep_flags } => {
                let attr = MountAttr {
                    attr_set: MOUNT_ATTR_RDONLY,
                    attr_clr: 0,
                    propagation: 0,
                    userns_fd: 0,
                };
                let done = libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    target.as_ptr(),
                    libc::AT_RECURSIVE as libc::c_uint,
                    &attr as *const MountAttr,
                    std::mem::size_of::<MountAttr>(),
                ) == 0;
                done || (nix::errno::Errno::last() == nix::errno::Errno::ENOSYS
                    && libc::mount(
                        std::ptr::null(),
                        target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep_flags,
                        std::ptr::null(),
                    ) == 0)
            }
            MountOp::MakeDir { path, mode } => {
                libc::mkdir(path.as_ptr(), *mode) == 0
                    || nix::errno::Errno::last() == nix::errno::Errno::EEXIST
            }
            MountOp::MakeCharDevice {
                path,
                mode,
                major,
                minor,
            } => {
                libc::mknod(
                    path.as_ptr(),
                    libc::S_IFCHR | *mode,
                    libc::makedev(*major, *minor),
                ) == 0
            }
            MountOp::Symlink { target, link } => libc::symlink(target.as_ptr(), link.as_ptr()) == 0,
            MountOp::Attach { tree, target } => {
                libc::syscall(
                    libc::SYS_move_mount,
                    tree.as_raw_fd(),
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    target.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                ) == 0
            }
        }
    }
}
