//! The checks, one function each. A check returns `Err` with what it expected and what it got;
//! every task it starts is force-destroyed when it returns, pass or fail.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_abi::{
    DRIVER_API_VERSION, Driver, DriverError, ExitResult, HealthState, TaskHandle, TaskState,
};

use crate::Kit;
use crate::host::TaskDirs;

/// Long enough for a loaded machine; checks return as soon as the awaited event happens.
const LONG: Duration = Duration::from_secs(20);

type Check = fn(&Kit) -> Result<(), String>;

/// Every check, by name, in the order `Kit::run` runs them.
pub const CHECKS: &[(&str, Check)] = &[
    ("plugin_info_and_fingerprint", plugin_info_and_fingerprint),
    ("start_output_and_wait", start_output_and_wait),
    ("exit_code_is_reported", exit_code_is_reported),
    ("wait_times_out_while_running", wait_times_out_while_running),
    ("stop_sends_the_given_signal", stop_sends_the_given_signal),
    ("stop_kills_after_the_timeout", stop_kills_after_the_timeout),
    (
        "destroy_refuses_running_unless_forced",
        destroy_refuses_running_unless_forced,
    ),
    ("recover_after_restart", recover_after_restart),
    ("stats", stats),
    ("exec", exec),
    ("signal", signal),
    (
        "bad_config_is_rejected_naming_the_field",
        bad_config_is_rejected_naming_the_field,
    ),
    ("unknown_task_is_not_found", unknown_task_is_not_found),
    ("exit_notification", exit_notification),
];

fn dirs(tag: &str) -> Result<TaskDirs, String> {
    TaskDirs::new(tag).map_err(|e| format!("creating the task directory: {e}"))
}

/// A started task, force-destroyed on drop by every driver instance that may hold it.
struct Started {
    drivers: Vec<Arc<dyn Driver>>,
    handle: TaskHandle,
}

impl Started {
    fn id(&self) -> &str {
        &self.handle.config.id
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        for d in self.drivers.iter().rev() {
            let _ = d.destroy_task(&self.handle.config.id, true);
        }
    }
}

fn start(
    driver: &Arc<dyn Driver>,
    dirs: &TaskDirs,
    name: &str,
    config: serde_json::Value,
) -> Result<Started, String> {
    let handle = driver
        .start_task(&dirs.config(name, config))
        .map_err(|e| format!("start_task({name}) failed: {e}"))?;
    Ok(Started {
        drivers: vec![Arc::clone(driver)],
        handle,
    })
}

fn wait_exit(driver: &Arc<dyn Driver>, id: &str) -> Result<ExitResult, String> {
    driver
        .wait_task(id, LONG)
        .map_err(|e| format!("wait_task failed: {e}"))?
        .ok_or_else(|| format!("task did not exit within {LONG:?}"))
}

fn ended_by(exit: &ExitResult, signal: i32) -> bool {
    exit.signal == signal || exit.exit_code == 128 + signal
}

fn plugin_info_and_fingerprint(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let info = d.plugin_info();
    if info.name.trim().is_empty() {
        return Err("plugin_info().name is empty".into());
    }
    let major = |v: &str| v.split('.').next().unwrap_or_default().to_string();
    if major(&info.api_version) != major(DRIVER_API_VERSION) {
        return Err(format!(
            "api_version {} does not match the contract's {DRIVER_API_VERSION}",
            info.api_version
        ));
    }
    let fp = d.fingerprint();
    if fp.health != HealthState::Healthy {
        return Err(format!(
            "fingerprint is {:?} ({}), expected Healthy once configured",
            fp.health, fp.health_description
        ));
    }
    if let Some((config, field)) = &kit.configs.bad_plugin_config {
        match d.set_config(config) {
            Err(DriverError::InvalidConfig(m)) if m.contains(field.as_str()) => {}
            other => {
                return Err(format!(
                    "set_config({config}) gave {other:?}, expected InvalidConfig naming {field:?}"
                ));
            }
        }
    }
    Ok(())
}

fn start_output_and_wait(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let mut dirs = dirs("output")?;
    let line = "hello from the conformance kit";
    let task = start(&d, &dirs, "print", (kit.configs.print_line)(line))?;
    if !dirs.stdout.wait_for(line, LONG) {
        return Err(format!(
            "stdout FIFO never got {line:?}; got {:?}",
            dirs.stdout.text()
        ));
    }
    let exit = wait_exit(&d, task.id())?;
    if !exit.successful() {
        return Err(format!("expected a successful exit, got {exit:?}"));
    }
    let again = d.wait_task(task.id(), Duration::ZERO);
    if again != Ok(Some(exit.clone())) {
        return Err(format!(
            "a second wait_task gave {again:?}, expected the same {exit:?}"
        ));
    }
    let status = d
        .inspect_task(task.id())
        .map_err(|e| format!("inspect_task: {e}"))?;
    if status.state != TaskState::Exited || status.exit_result.as_ref() != Some(&exit) {
        return Err(format!("inspect_task after exit gave {status:?}"));
    }
    if task.handle.config.id != status.id {
        return Err(format!("inspect_task id {} is not the task's", status.id));
    }
    d.destroy_task(task.id(), false)
        .map_err(|e| format!("destroy_task of an exited task: {e}"))?;
    match d.inspect_task(task.id()) {
        Err(DriverError::TaskNotFound(_)) => Ok(()),
        other => Err(format!(
            "inspect_task after destroy gave {other:?}, expected TaskNotFound"
        )),
    }
}

/// `notify_exit` is optional; a driver that accepts it must call back once the task ended,
/// and at once for a task that already has.
fn exit_notification(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let dirs = dirs("notify")?;
    let task = start(&d, &dirs, "notify", kit.configs.run_until_stopped.clone())?;
    let (tx, rx) = std::sync::mpsc::channel();
    let early = tx.clone();
    if !d.notify_exit(
        task.id(),
        Box::new(move || {
            let _ = early.send(());
        }),
    ) {
        return Ok(()); // The driver waits with wait_task only: nothing to check.
    }
    if rx.try_recv().is_ok() {
        return Err("notify_exit called back while the task ran".into());
    }
    d.stop_task(task.id(), Duration::from_secs(5), "SIGTERM")
        .map_err(|e| format!("stop_task: {e}"))?;
    rx.recv_timeout(LONG)
        .map_err(|_| "notify_exit never called back after the task ended".to_string())?;
    if d.wait_task(task.id(), Duration::ZERO)
        .ok()
        .flatten()
        .is_none()
    {
        return Err("wait_task had no exit after notify_exit called back".into());
    }
    if !d.notify_exit(
        task.id(),
        Box::new(move || {
            let _ = tx.send(());
        }),
    ) {
        return Err("notify_exit refused an ended task it had accepted while running".into());
    }
    rx.recv_timeout(Duration::from_secs(1))
        .map_err(|_| "notify_exit did not call back at once for an ended task".to_string())
}

fn exit_code_is_reported(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let dirs = dirs("exit")?;
    let exit_with = kit
        .configs
        .exit_with
        .as_ref()
        .ok_or("no exit_with config")?;
    let task = start(&d, &dirs, "exit", exit_with(3))?;
    let exit = wait_exit(&d, task.id())?;
    if exit.exit_code != 3 || exit.signal != 0 || exit.successful() {
        return Err(format!("expected exit code 3, got {exit:?}"));
    }
    Ok(())
}

fn wait_times_out_while_running(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let dirs = dirs("running")?;
    let task = start(&d, &dirs, "long", kit.configs.run_until_stopped.clone())?;
    let started = Instant::now();
    match d.wait_task(task.id(), Duration::from_millis(200)) {
        Ok(None) => {}
        other => {
            return Err(format!(
                "wait_task on a running task gave {other:?}, expected Ok(None)"
            ));
        }
    }
    if started.elapsed() < Duration::from_millis(150) {
        return Err(format!(
            "wait_task returned after {:?}, before its timeout",
            started.elapsed()
        ));
    }
    let status = d
        .inspect_task(task.id())
        .map_err(|e| format!("inspect_task: {e}"))?;
    if status.state != TaskState::Running || status.exit_result.is_some() {
        return Err(format!("inspect_task of a running task gave {status:?}"));
    }
    Ok(())
}

fn stop_sends_the_given_signal(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let dirs = dirs("stop")?;
    let task = start(&d, &dirs, "long", kit.configs.run_until_stopped.clone())?;
    d.stop_task(task.id(), Duration::from_secs(10), "SIGINT")
        .map_err(|e| format!("stop_task: {e}"))?;
    let exit = d
        .wait_task(task.id(), Duration::ZERO)
        .map_err(|e| format!("wait_task: {e}"))?
        .ok_or("the task still runs after stop_task returned")?;
    if !ended_by(&exit, libc::SIGINT) {
        return Err(format!(
            "expected an exit by SIGINT (the stop signal), got {exit:?}"
        ));
    }
    Ok(())
}

fn stop_kills_after_the_timeout(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let mut dirs = dirs("stop-kill")?;
    let stubborn = kit
        .configs
        .ignore_sigterm
        .clone()
        .ok_or("no ignore_sigterm config")?;
    let task = start(&d, &dirs, "stubborn", stubborn)?;
    if !dirs.stdout.wait_for("ready", LONG) {
        return Err(format!(
            "the task never printed \"ready\"; got {:?}",
            dirs.stdout.text()
        ));
    }
    let timeout = Duration::from_millis(500);
    let started = Instant::now();
    d.stop_task(task.id(), timeout, "SIGTERM")
        .map_err(|e| format!("stop_task: {e}"))?;
    let took = started.elapsed();
    if took < timeout {
        return Err(format!(
            "stop_task returned after {took:?}, before its {timeout:?} timeout, though the task ignores SIGTERM"
        ));
    }
    let exit = wait_exit(&d, task.id())?;
    if !ended_by(&exit, libc::SIGKILL) {
        return Err(format!(
            "expected an exit by SIGKILL after the timeout, got {exit:?}"
        ));
    }
    Ok(())
}

fn destroy_refuses_running_unless_forced(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let dirs = dirs("destroy")?;
    let task = start(&d, &dirs, "long", kit.configs.run_until_stopped.clone())?;
    match d.destroy_task(task.id(), false) {
        Err(DriverError::TaskRunning(_)) => {}
        other => {
            return Err(format!(
                "destroy_task(force=false) of a running task gave {other:?}, expected TaskRunning"
            ));
        }
    }
    d.destroy_task(task.id(), true)
        .map_err(|e| format!("destroy_task(force=true): {e}"))?;
    match d.inspect_task(task.id()) {
        Err(DriverError::TaskNotFound(_)) => Ok(()),
        other => Err(format!(
            "inspect_task after a forced destroy gave {other:?}, expected TaskNotFound"
        )),
    }
}

fn recover_after_restart(kit: &Kit) -> Result<(), String> {
    let before = (kit.new_driver)();
    let dirs = dirs("recover")?;
    let mut task = start(
        &before,
        &dirs,
        "long",
        kit.configs.run_until_stopped.clone(),
    )?;
    // The handle travels through JSON, as the client stores it.
    let saved = serde_json::to_string(&task.handle).map_err(|e| e.to_string())?;
    let handle: TaskHandle = serde_json::from_str(&saved).map_err(|e| e.to_string())?;
    let after = (kit.new_driver)();
    task.drivers.push(Arc::clone(&after));
    after
        .recover_task(&handle)
        .map_err(|e| format!("recover_task on a new driver instance: {e}"))?;
    after
        .recover_task(&handle)
        .map_err(|e| format!("a second recover_task of the same task: {e}"))?;
    let status = after
        .inspect_task(task.id())
        .map_err(|e| format!("inspect_task after recovery: {e}"))?;
    if status.state != TaskState::Running {
        return Err(format!("a recovered running task shows {status:?}"));
    }
    after
        .stop_task(task.id(), Duration::from_secs(10), "")
        .map_err(|e| format!("stop_task of a recovered task: {e}"))?;
    after
        .wait_task(task.id(), LONG)
        .map_err(|e| format!("wait_task of a recovered task: {e}"))?
        .ok_or("the recovered task still runs after stop_task")?;
    // The old instance must see it gone too: the process really ended.
    if before.wait_task(task.id(), LONG).ok().flatten().is_none() {
        return Err("the process kept running after the recovered instance stopped it".into());
    }
    after
        .destroy_task(task.id(), false)
        .map_err(|e| format!("destroy_task of a recovered, stopped task: {e}"))
}

fn stats(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let dirs = dirs("stats")?;
    let task = start(&d, &dirs, "long", kit.configs.run_until_stopped.clone())?;
    match d.task_stats(task.id()) {
        Ok(usage) if usage.timestamp > 0 => Ok(()),
        Ok(usage) => Err(format!("task_stats has no timestamp: {usage:?}")),
        Err(DriverError::NotSupported(_)) => Ok(()),
        Err(e) => Err(format!("task_stats of a running task: {e}")),
    }
}

fn exec(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let dirs = dirs("exec")?;
    let task = start(&d, &dirs, "long", kit.configs.run_until_stopped.clone())?;
    let (command, expect) = &kit.configs.exec;
    let result = d.exec_task(task.id(), command, Duration::from_secs(10));
    if !d.capabilities().exec {
        return match result {
            Err(DriverError::NotSupported(_)) => Ok(()),
            other => Err(format!(
                "exec_task without the exec capability gave {other:?}, expected NotSupported"
            )),
        };
    }
    let out = result.map_err(|e| format!("exec_task: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.exit_code != 0 || !stdout.contains(expect.as_str()) {
        return Err(format!(
            "exec_task {command:?} gave exit {} and stdout {stdout:?}, expected 0 and {expect:?}",
            out.exit_code
        ));
    }
    Ok(())
}

fn signal(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let dirs = dirs("signal")?;
    let task = start(&d, &dirs, "long", kit.configs.run_until_stopped.clone())?;
    let result = d.signal_task(task.id(), "SIGINT");
    if !d.capabilities().send_signals {
        return match result {
            Err(DriverError::NotSupported(_)) => Ok(()),
            other => Err(format!(
                "signal_task without the send_signals capability gave {other:?}, expected NotSupported"
            )),
        };
    }
    result.map_err(|e| format!("signal_task: {e}"))?;
    let exit = wait_exit(&d, task.id())?;
    if !ended_by(&exit, libc::SIGINT) {
        return Err(format!(
            "expected an exit by SIGINT after signal_task, got {exit:?}"
        ));
    }
    Ok(())
}

fn bad_config_is_rejected_naming_the_field(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let (config, field) = &kit.configs.bad_config;
    match d.validate_task_config(config) {
        Err(DriverError::InvalidConfig(m)) if m.contains(field.as_str()) => {}
        other => {
            return Err(format!(
                "validate_task_config({config}) gave {other:?}, expected InvalidConfig naming {field:?}"
            ));
        }
    }
    let dirs = dirs("bad")?;
    let task_config = dirs.config("bad", config.clone());
    match d.start_task(&task_config) {
        Err(DriverError::InvalidConfig(_)) | Err(DriverError::StartFailed { .. }) => {}
        Ok(_) => {
            let _ = d.destroy_task(&task_config.id, true);
            return Err("start_task accepted a config that validate_task_config refused".into());
        }
        Err(e) => {
            return Err(format!(
                "start_task with a bad config gave {e:?}, expected InvalidConfig or StartFailed"
            ));
        }
    }
    match d.inspect_task(&task_config.id) {
        Err(DriverError::TaskNotFound(_)) => Ok(()),
        other => Err(format!(
            "a refused task is still known: inspect_task gave {other:?}"
        )),
    }
}

fn unknown_task_is_not_found(kit: &Kit) -> Result<(), String> {
    let d = (kit.new_driver)();
    let id = "kit-alloc/no-such-task/0";
    let results = [
        ("wait_task", d.wait_task(id, Duration::ZERO).map(drop)),
        ("stop_task", d.stop_task(id, Duration::ZERO, "")),
        ("destroy_task", d.destroy_task(id, true)),
        ("inspect_task", d.inspect_task(id).map(drop)),
    ];
    for (method, result) in results {
        if !matches!(result, Err(DriverError::TaskNotFound(_))) {
            return Err(format!(
                "{method} of an unknown task gave {result:?}, expected TaskNotFound"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskConfigs;
    use drover_driver_raw_exec::RawExecDriver;
    use serde_json::json;

    fn raw_exec() -> Arc<dyn Driver> {
        let d = RawExecDriver::new();
        d.set_config(&json!({"enabled": true}))
            .expect("enable raw_exec");
        Arc::new(d)
    }

    fn raw_exec_kit() -> Kit {
        let mut configs = TaskConfigs::command();
        configs.bad_plugin_config = Some((json!({"enabld": true}), "enabld".into()));
        Kit::new("raw_exec", raw_exec, configs)
    }

    #[test]
    fn the_builtin_raw_exec_driver_passes_every_check() {
        raw_exec_kit().assert_conforms();
    }

    #[test]
    fn a_driver_that_breaks_the_contract_fails_the_kit_with_reasons() {
        // raw_exec left disabled: it refuses to start anything, so most checks must fail.
        let kit = Kit::new(
            "disabled raw_exec",
            || Arc::new(RawExecDriver::new()),
            TaskConfigs::command(),
        );
        let report = kit.run();
        let failed: Vec<&str> = report.failed.iter().map(|(n, _)| *n).collect();
        assert!(
            failed.contains(&"plugin_info_and_fingerprint"),
            "{report:?}"
        );
        assert!(failed.contains(&"start_output_and_wait"), "{report:?}");
        assert!(failed.contains(&"recover_after_restart"), "{report:?}");
        let (_, why) = &report.failed[0];
        assert!(
            why.contains("Undetected") || why.contains("disabled"),
            "{why}"
        );
        // Checks that need no running task still pass.
        assert!(
            report.passed.contains(&"unknown_task_is_not_found"),
            "{report:?}"
        );
    }

    #[test]
    fn a_wrong_field_name_expectation_is_caught() {
        let mut configs = TaskConfigs::command();
        configs.bad_config.1 = "some_other_field".into();
        let kit = Kit::new("raw_exec", raw_exec, configs);
        let why = kit
            .run_check("bad_config_is_rejected_naming_the_field")
            .unwrap_err();
        assert!(why.contains("some_other_field"), "{why}");
    }

    #[test]
    fn behaviours_a_driver_cannot_have_skip_their_checks_instead_of_failing_them() {
        let mut configs = TaskConfigs::command();
        configs.exit_with = None;
        configs.ignore_sigterm = None;
        let kit = Kit::new("raw_exec without two behaviours", raw_exec, configs);
        let report = kit.run();
        assert!(report.failed.is_empty(), "{report:?}");
        let skipped: Vec<&str> = report.skipped.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            skipped,
            ["exit_code_is_reported", "stop_kills_after_the_timeout"]
        );
        assert!(!report.passed.contains(&"exit_code_is_reported"));
        let why = kit.run_check("exit_code_is_reported").unwrap_err();
        assert!(why.contains("does not apply"), "{why}");
        kit.assert_conforms();
    }
}
