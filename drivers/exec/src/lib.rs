//! The `exec` task driver: runs a task's `command` with `args` isolated in new PID, mount, IPC
//! and UTS namespaces, with memory and CPU limits from a per-task cgroup (v1 or v2, detected at
//! runtime), as Nomad's exec driver does. The agent clones the task process itself, with no
//! intermediate process, so the command is PID 1 of its namespace and sees only its own
//! processes in `/proc`. Needs root.
//!
//! Must not depend on: tokio, or any Drover crate other than drover-abi.
//!
//! Process supervision (config parsing, exit watching, FIFO wiring, /proc reading) is the raw_exec
//! driver's `shared` module, compiled in here by path because drivers may not depend on each
//! other.

mod cgroup;
mod driver;
mod isolate;
mod plugin_config;
#[path = "../../raw_exec/src/shared/mod.rs"]
mod shared;

pub use driver::ExecDriver;
