//! The driver-specific `state` stored in a task handle so a restarted agent can find the process.

use serde::{Deserialize, Serialize};

/// Version of the `state` layout below; bumped when it changes incompatibly.
pub const TASK_STATE_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessState {
    /// Host pid of the task's main process; also its process group id.
    pub pid: i32,
    /// `/proc/<pid>/stat` start time, to tell the task from a later process reusing the pid.
    pub start_ticks: u64,
    /// Unix nanoseconds when the task started.
    pub started_at: i64,
    /// Cgroup directories of the task (exec only), removed when the task is destroyed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<std::path::PathBuf>,
}
