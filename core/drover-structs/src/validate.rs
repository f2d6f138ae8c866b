//! Nomad's job validation: every problem at once, nested by group and task, worded as Nomad words
//! it (nomad/structs/structs.go `Job.Validate`, `TaskGroup.Validate`, `Task.Validate`).

use std::collections::BTreeMap;

use crate::job::*;
use crate::multierror::MultiError;

const SEC: i64 = 1_000_000_000;

fn go_duration(nanos: i64) -> String {
    crate::alloc::format_go_duration_secs(nanos as f64 / 1e9)
}

/// Validates a canonicalised job.
pub fn validate_job(j: &Job) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if j.region.is_empty() {
        m.push("Missing job region");
    }
    if j.id.is_empty() {
        m.push("Missing job ID");
    } else if j.id.contains(' ') {
        m.push("Job ID contains a space");
    } else if j.id.contains('\0') {
        m.push("Job ID contains a null character");
    }
    if j.name.is_empty() {
        m.push("Missing job name");
    } else if j.name.contains('\0') {
        m.push("Job Name contains a null character");
    }
    if j.namespace.is_empty() {
        m.push("Job must be in a namespace");
    }
    match j.job_type.as_str() {
        JOB_TYPE_SERVICE | JOB_TYPE_BATCH | JOB_TYPE_SYSTEM | JOB_TYPE_SYSBATCH => {}
        other => m.push(format!("Invalid job type: {other:?}")),
    }
    if !(1..=100).contains(&j.priority) {
        m.push("Job priority must be between [1, 100]");
    }
    if j.datacenters.is_empty() && j.multiregion.is_none() {
        m.push("Missing job datacenters");
    } else if j.datacenters.iter().any(String::is_empty) {
        m.push("Job datacenter must be non-empty string");
    }
    if j.task_groups.is_empty() {
        m.push("Missing job task groups");
    }
    for (idx, c) in j.constraints.iter().flatten().enumerate() {
        if let Err(e) = validate_constraint(c) {
            m.push(format!("Constraint {} validation failed: {e}", idx + 1));
        }
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (idx, tg) in j.task_groups.iter().enumerate() {
        if tg.name.is_empty() {
            m.push(format!("Job task group {} missing name", idx + 1));
        } else if let Some(prev) = seen.get(tg.name.as_str()) {
            m.push(format!(
                "Job task group {} redefines '{}' from group {}",
                idx + 1,
                tg.name,
                prev + 1
            ));
        } else {
            seen.insert(&tg.name, idx);
        }
        if tg.shutdown_delay.is_some_and(|d| d < 0) {
            m.push("ShutdownDelay must be a positive value");
        }
        if j.job_type == JOB_TYPE_SYSTEM && tg.count > 1 {
            m.push(format!(
                "Job task group {} has count {}. Count cannot exceed 1 with system scheduler",
                tg.name, tg.count
            ));
        }
    }
    for tg in &j.task_groups {
        if let Err(e) = validate_group(j, tg) {
            m.push(format!("Task group {} validation failed: {e}", tg.name));
        }
    }
    m.into_result()
}

fn validate_group(j: &Job, tg: &TaskGroup) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if tg.name.is_empty() {
        m.push("Missing task group name");
    }
    if tg.count < 0 {
        m.push("Task group count can't be negative");
    }
    if tg.tasks.is_empty() {
        m.push("Missing tasks for task group");
    }
    for (idx, c) in tg.constraints.iter().flatten().enumerate() {
        if let Err(e) = validate_constraint(c) {
            m.push(format!("Constraint {} validation failed: {e}", idx + 1));
        }
    }
    match &tg.restart_policy {
        Some(rp) => {
            if let Err(e) = validate_restart(rp) {
                m.push(e.to_string());
            }
        }
        None => m.push(format!(
            "Task Group {} should have a restart policy",
            tg.name
        )),
    }
    if j.job_type == JOB_TYPE_SYSTEM {
        if tg.reschedule_policy.is_some() {
            m.push("System jobs should not have a reschedule policy");
        }
    } else if j.job_type != JOB_TYPE_SYSBATCH {
        match &tg.reschedule_policy {
            Some(rp) => {
                if let Err(e) = validate_reschedule(rp) {
                    m.push(e.to_string());
                }
            }
            None => m.push(format!(
                "Task Group {} should have a reschedule policy",
                tg.name
            )),
        }
    }
    match &tg.ephemeral_disk {
        Some(d) if d.size_mb < 10 => {
            m.push(format!("minimum DiskMB value is 10; got {}", d.size_mb))
        }
        Some(_) => {}
        None => m.push(format!(
            "Task Group {} should have an ephemeral disk object",
            tg.name
        )),
    }
    if tg.update.is_some() && !matches!(j.job_type.as_str(), JOB_TYPE_SERVICE | JOB_TYPE_SYSTEM) {
        m.push(format!(
            "Job type {:?} does not allow update block",
            j.job_type
        ));
    }
    if tg.networks.as_ref().is_some_and(|n| n.len() > 1) {
        m.push("Only one network resource is currently supported");
    }

    let mut tasks: BTreeMap<&str, usize> = BTreeMap::new();
    let mut static_ports: BTreeMap<i64, String> = BTreeMap::new();
    for net in tg.networks.iter().flatten() {
        for p in net.reserved_ports.iter().flatten() {
            if let Some(other) = static_ports.get(&p.value) {
                m.push(format!(
                    "Static port {} already reserved by {other}",
                    p.value
                ));
            } else if p.value > 65535 || p.value < 0 {
                m.push(format!(
                    "Port {} ({}) cannot be greater than 65535",
                    p.label, p.value
                ));
            } else {
                static_ports.insert(p.value, p.label.clone());
            }
        }
        for p in net.dynamic_ports.iter().flatten() {
            if p.value > 65535 || p.to > 65535 {
                m.push(format!(
                    "Port {} ({}) cannot be greater than 65535",
                    p.label, p.value
                ));
            }
        }
    }
    let mut leaders = 0;
    for (idx, task) in tg.tasks.iter().enumerate() {
        if task.name.is_empty() {
            m.push(format!("Task {} missing name", idx + 1));
        } else if let Some(prev) = tasks.get(task.name.as_str()) {
            m.push(format!(
                "Task {} redefines '{}' from task {}",
                idx + 1,
                task.name,
                prev + 1
            ));
        } else {
            tasks.insert(&task.name, idx);
        }
        if task.leader {
            leaders += 1;
        }
    }
    if leaders > 1 {
        m.push("Only one task may be marked as leader");
    }
    for task in &tg.tasks {
        if let Err(e) = validate_task(task, tg) {
            m.push(format!("Task {} validation failed: {e}", task.name));
        }
    }
    m.into_result()
}

fn validate_task(t: &Task, tg: &TaskGroup) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if t.name.is_empty() {
        m.push("Missing task name");
    }
    if t.name.contains('/') || t.name.contains('\\') {
        m.push("Task name cannot include slashes");
    }
    if t.driver.is_empty() {
        m.push("Missing task driver");
    }
    if t.kill_timeout < 0 {
        m.push("KillTimeout must be a positive value");
    }
    if t.shutdown_delay < 0 {
        m.push("ShutdownDelay must be a positive value");
    }
    let r = &t.resources;
    if r.cpu < 1 && r.cores == 0 {
        m.push(format!("minimum CPU value is 1; got {}", r.cpu));
    }
    if r.memory_mb < 10 {
        m.push(format!("minimum MemoryMB value is 10; got {}", r.memory_mb));
    }
    if r.cores > 0 && r.cpu > 0 {
        m.push("Task can only ask for 'cpu' or 'cores' resource, not both.");
    }
    if r.memory_max_mb != 0 && r.memory_max_mb < r.memory_mb {
        m.push(format!(
            "MemoryMaxMB value ({}) should be larger than MemoryMB value ({})",
            r.memory_max_mb, r.memory_mb
        ));
    }
    match &t.log_config {
        None => m.push("Missing Log Config"),
        Some(lc) => {
            if lc.max_files < 1 {
                m.push(format!(
                    "minimum number of files is 1; got {}",
                    lc.max_files
                ));
            }
            if lc.max_file_size_mb < 1 {
                m.push(format!(
                    "minimum file size is 1MB; got {}",
                    lc.max_file_size_mb
                ));
            }
            if let Some(d) = &tg.ephemeral_disk {
                let need = lc.max_files * lc.max_file_size_mb;
                if d.size_mb <= need {
                    m.push(format!(
                        "log storage ({need} MB) must be less than requested disk capacity ({} MB)",
                        d.size_mb
                    ));
                }
            }
        }
    }
    for (idx, c) in t.constraints.iter().flatten().enumerate() {
        if let Err(e) = validate_constraint(c) {
            m.push(format!("Constraint {} validation failed: {e}", idx + 1));
        }
        if c.operand == "distinct_hosts" || c.operand == "distinct_property" {
            m.push(format!(
                "Constraint {} has disallowed Operand at task level: {}",
                idx + 1,
                c.operand
            ));
        }
    }
    if let Some(rp) = &t.restart_policy
        && let Err(e) = validate_restart(rp)
    {
        m.push(e.to_string());
    }
    m.into_result()
}

/// Nomad's `Constraint.Validate`.
pub fn validate_constraint(c: &Constraint) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if c.operand.is_empty() {
        m.push("Missing constraint operand");
    }
    let mut require_ltarget = true;
    match c.operand.as_str() {
        "distinct_hosts" => require_ltarget = false,
        "set_contains_all" | "set_contains_any" | "set_contains" => {
            if c.r_target.is_empty() {
                m.push("Set contains constraint requires an RTarget");
            }
        }
        "regexp" => {
            if let Err(e) = regex::Regex::new(&c.r_target) {
                m.push(format!("Regular expression failed to compile: {e}"));
            }
        }
        "version" | "semver" => {
            if c.r_target.trim().is_empty() {
                m.push("Version constraint is invalid: empty constraint");
            }
        }
        "distinct_property" => {
            if !c.r_target.is_empty() {
                match c.r_target.parse::<i64>() {
                    Err(e) => m.push(format!(
                        "Failed to convert RTarget {:?} to int: {e}",
                        c.r_target
                    )),
                    Ok(v) if v < 1 => m.push(format!(
                        "Distinct Property must have an allowed count of 1 or greater: {v} < 1"
                    )),
                    Ok(_) => {}
                }
            }
        }
        "is_set" | "is_not_set" => {
            if !c.r_target.is_empty() {
                m.push(format!(
                    "Operator {:?} does not support an RTarget",
                    c.operand
                ));
            }
        }
        "=" | "==" | "is" | "!=" | "not" | "<" | "<=" | ">" | ">=" => {
            if c.r_target.is_empty() {
                m.push(format!("Operator {:?} requires an RTarget", c.operand));
            }
        }
        "" => {}
        other => m.push(format!("Unknown constraint type {other:?}")),
    }
    if require_ltarget && c.l_target.is_empty() {
        m.push("No LTarget provided but is required by constraint");
    }
    m.into_result()
}

fn validate_restart(r: &RestartPolicy) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    match r.mode.as_str() {
        RESTART_MODE_DELAY | RESTART_MODE_FAIL => {}
        other => m.push(format!("Unsupported restart mode: {other:?}")),
    }
    if r.attempts == 0 && r.mode != RESTART_MODE_FAIL {
        m.push(format!(
            "Restart policy {:?} with {} attempts is ambiguous",
            r.mode, r.attempts
        ));
    }
    if r.interval < 5 * SEC {
        m.push(format!(
            "Interval can not be less than 5s (got {})",
            go_duration(r.interval)
        ));
    }
    if r.attempts.saturating_mul(r.delay) > r.interval {
        m.push(format!(
            "Nomad can't restart the TaskGroup {} times in an interval of {} with a delay of {}",
            r.attempts,
            go_duration(r.interval),
            go_duration(r.delay)
        ));
    }
    m.into_result()
}

fn validate_reschedule(r: &ReschedulePolicy) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if r.attempts < 0 {
        m.push(format!("Attempts must be >= 0 (got {})", r.attempts));
    }
    if !r.unlimited && r.attempts > 0 && r.interval <= 0 {
        m.push("Interval must be a non zero value if Attempts > 0");
    }
    let known = matches!(
        r.delay_function.as_str(),
        "constant" | "exponential" | "fibonacci"
    );
    let needed = r.attempts > 0 || r.unlimited;
    if !known && (needed || !r.delay_function.is_empty()) {
        m.push(format!(
            "Invalid delay function {:?}, must be one of [constant exponential fibonacci]",
            r.delay_function
        ));
    }
    if (r.attempts > 0 || r.unlimited) && r.delay < 5 * SEC {
        m.push(format!(
            "Delay cannot be less than 5s (got {})",
            go_duration(r.delay)
        ));
    }
    m.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(v: serde_json::Value) -> Job {
        crate::decode::decode_api_job(v).unwrap()
    }

    #[test]
    fn valid_job_passes() {
        let j = job(
            json!({"ID": "a", "Datacenters": ["dc1"], "TaskGroups": [{"Name": "g",
            "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]}),
        );
        validate_job(&j).unwrap();
    }

    #[test]
    fn group_errors_are_nested_under_the_group_like_nomad() {
        let j = job(
            json!({"ID": "a", "Datacenters": ["dc1"], "TaskGroups": [{"Name": "api",
            "Count": -1, "Tasks": []}]}),
        );
        let e = validate_job(&j).unwrap_err().to_string();
        assert!(
            e.contains("* Task group api validation failed: 2 errors occurred:\n\t* Task group count can't be negative\n\t* Missing tasks for task group"),
            "{e}"
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let j = job(
            json!({"ID": "a b", "Priority": 500, "TaskGroups": [{"Name": "g",
            "Tasks": [{"Name": "t", "Resources": {"MemoryMB": 1}}]}]}),
        );
        let e = validate_job(&j).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("Job ID contains a space"));
        assert!(text.contains("Job priority must be between [1, 100]"));
        assert!(text.contains("Missing job datacenters"));
        assert!(text.contains("Missing task driver"));
        assert!(text.contains("minimum MemoryMB value is 10; got 1"));
    }

    #[test]
    fn constraint_operands_are_checked() {
        let c = Constraint {
            l_target: "${attr.kernel.name}".into(),
            r_target: String::new(),
            operand: "=".into(),
        };
        assert!(
            validate_constraint(&c)
                .unwrap_err()
                .to_string()
                .contains("requires an RTarget")
        );
        let c = Constraint {
            operand: "bogus".into(),
            ..c
        };
        assert!(
            validate_constraint(&c)
                .unwrap_err()
                .to_string()
                .contains("Unknown constraint type")
        );
    }
}
