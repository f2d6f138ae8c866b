//! The `mock_driver` task driver: Nomad's mock driver, for testing clients and schedulers
//! without real workloads. A mock task is a timer, not a process: it "runs" for `run_for`,
//! writes `stdout_string`/`stderr_string` (optionally repeated) into the host's log FIFOs, and
//! exits with the configured `exit_code`, `exit_signal` and `exit_err_msg`. Start errors, slow
//! starts, slow stops (`kill_after`), signal errors and plugin exits can be simulated too. All
//! tasks of a driver share one timer thread, so thousands of mock tasks are cheap.
//!
//! Must not depend on: tokio, or any Drover crate other than drover-abi.

mod driver;
mod duration;
mod plugin_config;
mod scheduler;
mod task;
mod task_config;
mod time;

pub use driver::MockDriver;
pub use duration::{DurationError, parse_go_duration};
