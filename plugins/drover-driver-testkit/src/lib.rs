//! The driver conformance kit: runs any `Arc<dyn drover_abi::Driver>` through the contract the
//! client relies on (start, output to the log FIFOs, wait, exit codes, stop with a signal and
//! with a timeout that escalates to SIGKILL, destroy, recovery by a new driver instance from a
//! saved handle, stats, exec, signals, and refusal of bad config with an error naming the field).
//!
//! It plays the host's part itself: a task directory, stdout/stderr FIFOs with readers, task
//! configs. The driver-specific part, which task `config` makes the driver print a line, exit
//! with a code or run until stopped, comes from [`TaskConfigs`]; [`TaskConfigs::command`] covers
//! drivers whose config is `command` + `args`.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use drover_driver_testkit::{Kit, TaskConfigs};
//! # fn my_driver() -> Arc<dyn drover_abi::Driver> { unimplemented!() }
//! let kit = Kit::new("my-driver", my_driver, TaskConfigs::command());
//! kit.assert_conforms();
//! ```
//!
//! # Drivers that are not command-based
//!
//! Fill in [`TaskConfigs`] yourself: each field is the task `config` that makes the driver do
//! what one check needs, and together they are everything the kit asks of a driver's config, so
//! the driver needs no test-only options. A behaviour the driver's tasks cannot have (a chosen
//! exit code, ignoring SIGTERM) is `None`: its check is skipped and listed in
//! [`Report::skipped`], not failed. The configs are built before any task directory exists, so
//! a file a config names is given by absolute path (a fixture the test made). For a driver
//! whose config is `{ "script": ... }`:
//!
//! ```
//! use drover_driver_testkit::TaskConfigs;
//! use serde_json::json;
//!
//! let script = |s: &str| json!({ "script": s });
//! let configs = TaskConfigs {
//!     print_line: Box::new(move |line| script(&format!("echo '{line}'"))),
//!     exit_with: Some(Box::new(move |code| script(&format!("exit {code}")))),
//!     run_until_stopped: script("exec sleep 1000"),
//!     ignore_sigterm: Some(script("trap '' TERM; echo ready; while :; do sleep 0.1; done")),
//!     bad_config: (json!({ "scriptz": "true" }), "scriptz".into()),
//!     bad_plugin_config: None,
//!     exec: (Vec::new(), String::new()),
//! };
//! # let _ = configs;
//! ```
//!
//! `examples/minimal-driver` runs the kit this way, against the driver and (in
//! `examples/minimal-driver-sidecar`) against its sidecar binary.
//!
//! Must not depend on: tokio, or any Drover crate other than drover-abi (so plugin authors can use
//! it without the agent).
#![deny(missing_docs)]

mod build;
mod checks;
mod host;

use std::sync::Arc;

use drover_abi::Driver;
use serde_json::{Value, json};

pub use build::build_cdylib;
pub use checks::CHECKS;
pub use host::{FifoReader, TaskDirs};

/// The task `config` blocks that make the driver under test do what each check needs.
pub struct TaskConfigs {
    /// Prints the given line on stdout, then exits 0.
    pub print_line: Box<dyn Fn(&str) -> Value + Send + Sync>,
    /// Exits with the given code (the kit asks for 3). `None`: the driver's tasks cannot choose
    /// their exit code, and `exit_code_is_reported` is skipped (listed in [`Report::skipped`]).
    pub exit_with: Option<Box<dyn Fn(i32) -> Value + Send + Sync>>,
    /// Runs until signalled; SIGINT and SIGTERM end it (default dispositions).
    pub run_until_stopped: Value,
    /// Prints the line `ready` once it ignores SIGTERM, then runs until SIGKILL. `None`: the
    /// driver's tasks cannot ignore SIGTERM, and `stop_kills_after_the_timeout` is skipped.
    pub ignore_sigterm: Option<Value>,
    /// A config the driver must refuse, and the field its error must name.
    pub bad_config: (Value, String),
    /// A plugin config the driver must refuse, and the field its error must name; `None` skips.
    pub bad_plugin_config: Option<(Value, String)>,
    /// For drivers with the exec capability: a command run inside a task, and text its stdout
    /// must contain.
    pub exec: (Vec<String>, String),
}

fn sh(script: &str) -> Value {
    json!({"command": "/bin/sh", "args": ["-c", script]})
}

impl TaskConfigs {
    /// For drivers configured with `command` and `args` (raw_exec, exec, skeleton...), using
    /// /bin/sh scripts.
    pub fn command() -> Self {
        TaskConfigs {
            print_line: Box::new(|line| sh(&format!("echo '{}'", line.replace('\'', "")))),
            exit_with: Some(Box::new(|code| sh(&format!("exit {code}")))),
            run_until_stopped: json!({"command": "sleep", "args": ["1000"]}),
            ignore_sigterm: Some(sh("trap '' TERM; echo ready; while :; do sleep 0.1; done")),
            bad_config: (
                json!({"command": "/bin/true", "argz": []}),
                "argz".to_string(),
            ),
            bad_plugin_config: None,
            exec: (
                vec!["/bin/echo".to_string(), "exec-ok".to_string()],
                "exec-ok".to_string(),
            ),
        }
    }
}

/// Makes a new, configured driver instance; called again to play an agent restart.
pub type DriverFactory = Box<dyn Fn() -> Arc<dyn Driver> + Send + Sync>;

/// One driver under test.
pub struct Kit {
    /// What the report and failure messages call the driver.
    pub name: String,
    /// Makes each driver instance the kit uses (a new one plays an agent restart).
    pub new_driver: DriverFactory,
    /// The task `config` blocks that make the driver do what each check needs.
    pub configs: TaskConfigs,
}

/// What a run found: the checks that passed and the failures with their reasons.
#[derive(Debug, Default)]
pub struct Report {
    /// The names of the checks that passed.
    pub passed: Vec<&'static str>,
    /// The checks that failed, each with what went wrong.
    pub failed: Vec<(&'static str, String)>,
    /// The checks not run because the driver said they do not apply (a `None` in its
    /// [`TaskConfigs`]), each with why.
    pub skipped: Vec<(&'static str, &'static str)>,
}

/// Why check `name` does not apply to the driver `configs` describe, if it does not.
fn not_applicable(configs: &TaskConfigs, name: &str) -> Option<&'static str> {
    match name {
        "exit_code_is_reported" if configs.exit_with.is_none() => {
            Some("its tasks cannot choose their exit code (TaskConfigs::exit_with is None)")
        }
        "stop_kills_after_the_timeout" if configs.ignore_sigterm.is_none() => {
            Some("its tasks cannot ignore SIGTERM (TaskConfigs::ignore_sigterm is None)")
        }
        _ => None,
    }
}

impl Kit {
    /// A kit for the driver `name`, whose instances `new_driver` makes (already configured:
    /// call `set_config` in it if your driver needs a config), with the task configs `configs`.
    pub fn new(
        name: impl Into<String>,
        new_driver: impl Fn() -> Arc<dyn Driver> + Send + Sync + 'static,
        configs: TaskConfigs,
    ) -> Kit {
        Kit {
            name: name.into(),
            new_driver: Box::new(new_driver),
            configs,
        }
    }

    /// Runs one check by name (see [`CHECKS`]); a check that does not apply to the driver is
    /// an error saying so.
    pub fn run_check(&self, name: &str) -> Result<(), String> {
        let (_, check) = CHECKS
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| format!("no check named {name:?}"))?;
        if let Some(why) = not_applicable(&self.configs, name) {
            return Err(format!("{name} does not apply to {}: {why}", self.name));
        }
        check(self)
    }

    /// Runs every check that applies, one after the other.
    pub fn run(&self) -> Report {
        let mut report = Report::default();
        for (name, check) in CHECKS {
            if let Some(why) = not_applicable(&self.configs, name) {
                report.skipped.push((name, why));
                continue;
            }
            match check(self) {
                Ok(()) => report.passed.push(name),
                Err(why) => report.failed.push((name, why)),
            }
        }
        report
    }

    /// Runs every check that applies and panics listing each failure.
    pub fn assert_conforms(&self) {
        let report = self.run();
        assert!(
            report.failed.is_empty(),
            "driver {} fails {} of {} checks:\n{}",
            self.name,
            report.failed.len(),
            CHECKS.len(),
            report
                .failed
                .iter()
                .map(|(n, why)| format!("  {n}: {why}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
