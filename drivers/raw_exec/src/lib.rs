//! The `raw_exec` task driver: runs a task's `command` with `args` directly on the host, with no
//! isolation, as Nomad's raw_exec does. The agent process itself spawns each task (no helper
//! process) in its own process group, with exactly the task's environment, in the task directory, with
//! stdout/stderr connected to the host's log FIFOs. Off unless the agent config enables it.
//!
//! `TaskConfig::mounts` is ignored: without a mount namespace nothing can be remapped. The
//! client serves a raw_exec task's `volume_mount` itself, binding the volume on the host at
//! `<task_dir>/<destination>`, and gives a raw_exec CSI plugin the host paths.
//!
//! Must not depend on: tokio, or any Drover crate other than drover-abi.
//!
//! The `shared` module is also compiled into the exec driver (through `#[path]`), since drivers
//! may not depend on each other.

mod driver;
mod exec_in_task;
mod exec_streaming;
mod lookup;
mod plugin_config;
mod shared;
mod spawn;

pub use driver::RawExecDriver;
