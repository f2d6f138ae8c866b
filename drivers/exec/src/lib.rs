//! The `exec` task driver, as Nomad's: runs a task's `command` with `args` as `nobody` (or the
//! task's `user`) in its task directory made its root filesystem, with the host directories of
//! `chroot_env` bind-mounted read-only in it, in new mount, UTS, PID and IPC namespaces (PID and
//! IPC may be shared with the host by `pid_mode`/`ipc_mode`), with Nomad's capability set
//! (Docker's default without NET_RAW, narrowed by `allow_caps`, `cap_add`, `cap_drop`), and with
//! memory and CPU limits from a per-task cgroup (v1 or v2, detected at runtime). The agent
//! clones the task process itself, with no intermediate process, so the command is PID 1 of its
//! namespace and sees only its own processes in `/proc`. Needs root. `alloc exec` runs a command
//! inside a running task's namespaces, root, cgroup, user and capabilities (see `enter`).
//!
//! Must not depend on: tokio, or any Drover crate other than drover-abi.
//!
//! Process supervision (config parsing, exit watching, FIFO wiring, /proc reading) is the raw_exec
//! driver's `shared` module, compiled in here by path because drivers may not depend on each
//! other.

mod caps;
mod cgroup;
mod driver;
mod enter;
mod isolate;
mod mounts;
mod plugin_config;
mod rewrite;
mod rootfs;
#[path = "../../raw_exec/src/shared/mod.rs"]
mod shared;
mod task_config;

pub use driver::ExecDriver;
