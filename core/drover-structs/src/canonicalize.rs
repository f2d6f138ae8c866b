//! Nomad's registration defaults, applied to a job in the API's JSON shape (where "unset" is still
//! visible as a missing key or `null`), before it is decoded into [`crate::Job`].
//!
//! Mirrors Nomad's `api.Job.Canonicalize` and `ApiJobToStructJob`: defaults per job type for
//! restart, reschedule, update and migrate; ephemeral disk, log and resource defaults; `count`
//! from `scaling.min`.

use serde_json::{Map, Value, json};

const SEC: i64 = 1_000_000_000;
const MIN: i64 = 60 * SEC;
const HOUR: i64 = 60 * MIN;

fn is_unset(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

fn set_default(obj: &mut Map<String, Value>, key: &str, default: Value) {
    if is_unset(obj.get(key)) {
        obj.insert(key.to_string(), default);
    }
}

/// Fills every unset field of `user` from `defaults` (both objects); user values win.
fn merge_onto(defaults: Value, user: Option<&Value>) -> Value {
    let mut out = defaults;
    if let (Some(Value::Object(u)), Value::Object(o)) = (user, &mut out) {
        for (k, v) in u {
            if !v.is_null() {
                o.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn restart_default(job_type: &str) -> Value {
    match job_type {
        "batch" | "sysbatch" => {
            json!({"Attempts": 3, "Interval": 24 * HOUR, "Delay": 15 * SEC, "Mode": "fail"})
        }
        _ => json!({"Attempts": 2, "Interval": 30 * MIN, "Delay": 15 * SEC, "Mode": "fail"}),
    }
}

fn reschedule_default(job_type: &str) -> Option<Value> {
    match job_type {
        "service" => Some(json!({"Attempts": 0, "Interval": 0, "Delay": 30 * SEC,
            "DelayFunction": "exponential", "MaxDelay": HOUR, "Unlimited": true})),
        "batch" => Some(
            json!({"Attempts": 1, "Interval": 24 * HOUR, "Delay": 5 * SEC,
            "DelayFunction": "constant", "MaxDelay": 0, "Unlimited": false}),
        ),
        "system" => Some(json!({"Attempts": 0, "Interval": 0, "Delay": 0,
            "DelayFunction": "", "MaxDelay": 0, "Unlimited": false})),
        _ => None,
    }
}

fn update_default() -> Value {
    json!({"Stagger": 30 * SEC, "MaxParallel": 1, "HealthCheck": "checks",
        "MinHealthyTime": 10 * SEC, "HealthyDeadline": 5 * MIN, "ProgressDeadline": 10 * MIN,
        "AutoRevert": false, "AutoPromote": false, "Canary": 0})
}

fn migrate_default() -> Value {
    json!({"MaxParallel": 1, "HealthCheck": "checks", "MinHealthyTime": 10 * SEC,
        "HealthyDeadline": 5 * MIN})
}

/// Applies Nomad's defaults to a job object in API JSON shape. Never fails: shapes it does not
/// understand are left for decoding and validation to report.
pub fn canonicalize_job(job: &mut Value) {
    let Some(obj) = job.as_object_mut() else {
        return;
    };
    set_default(obj, "ID", json!(""));
    let id = obj.get("ID").cloned().unwrap_or(json!(""));
    set_default(obj, "Name", id);
    set_default(obj, "Region", json!(crate::DEFAULT_REGION));
    set_default(obj, "Namespace", json!(crate::DEFAULT_NAMESPACE));
    set_default(obj, "Type", json!("service"));
    set_default(obj, "Priority", json!(50));
    let job_type = obj
        .get("Type")
        .and_then(Value::as_str)
        .unwrap_or("service")
        .to_string();

    // The API's job-level update is complete (defaults for service jobs); the stored job keeps
    // only Stagger and MaxParallel of it, as Nomad's ApiJobToStructJob does.
    let api_update = if is_unset(obj.get("Update")) {
        (job_type == "service").then(update_default)
    } else {
        Some(merge_onto(update_default(), obj.get("Update")))
    };
    let job_level_user_update = obj.get("Update").filter(|v| !v.is_null()).cloned();
    let stored_update = match &api_update {
        Some(u) => json!({"Stagger": u["Stagger"], "MaxParallel": u["MaxParallel"],
            "HealthCheck": "", "MinHealthyTime": 0, "HealthyDeadline": 0, "ProgressDeadline": 0,
            "AutoRevert": false, "AutoPromote": false, "Canary": 0}),
        None => json!({"Stagger": 0, "MaxParallel": 0, "HealthCheck": "", "MinHealthyTime": 0,
            "HealthyDeadline": 0, "ProgressDeadline": 0, "AutoRevert": false,
            "AutoPromote": false, "Canary": 0}),
    };
    obj.insert("Update".into(), stored_update);

    let job_reschedule = obj.remove("Reschedule").filter(|v| !v.is_null());
    let job_migrate = obj.remove("Migrate").filter(|v| !v.is_null());

    if let Some(Value::Array(groups)) = obj.get_mut("TaskGroups") {
        for g in groups.iter_mut() {
            if let Some(go) = g.as_object_mut() {
                canonicalize_group(
                    go,
                    &job_type,
                    api_update.as_ref(),
                    job_level_user_update.as_ref(),
                    job_reschedule.as_ref(),
                    job_migrate.as_ref(),
                );
            }
        }
    }
}

fn canonicalize_group(
    g: &mut Map<String, Value>,
    job_type: &str,
    job_update: Option<&Value>,
    job_user_update: Option<&Value>,
    job_reschedule: Option<&Value>,
    job_migrate: Option<&Value>,
) {
    if is_unset(g.get("Count")) {
        let min = g
            .get("Scaling")
            .and_then(|s| s.get("Min"))
            .filter(|v| !v.is_null())
            .cloned();
        g.insert("Count".into(), min.unwrap_or(json!(1)));
    }
    let disk = merge_onto(
        json!({"Sticky": false, "SizeMB": 300, "Migrate": false}),
        g.get("EphemeralDisk"),
    );
    g.insert("EphemeralDisk".into(), disk);

    // Update: the job's strategy merged with the group's, for job types that have one.
    let group_update = g.get("Update").filter(|v| !v.is_null()).cloned();
    let update = match (job_update, &group_update) {
        (Some(ju), Some(gu)) => Some(merge_onto(ju.clone(), Some(gu))),
        (Some(ju), None) if job_user_update.is_some() || job_type == "service" => Some(ju.clone()),
        (None, Some(gu)) => Some(merge_onto(update_default(), Some(gu))),
        _ => None,
    };
    g.insert("Update".into(), update.unwrap_or(Value::Null));

    let migrate = if job_type == "service" {
        let base = merge_onto(migrate_default(), job_migrate);
        Some(merge_onto(base, g.get("Migrate")))
    } else {
        None
    };
    g.insert("Migrate".into(), migrate.unwrap_or(Value::Null));

    let reschedule = reschedule_default(job_type).map(|d| {
        let with_job = merge_onto(d, job_reschedule);
        merge_onto(with_job, g.get("ReschedulePolicy"))
    });
    g.insert("ReschedulePolicy".into(), reschedule.unwrap_or(Value::Null));

    let restart = merge_onto(restart_default(job_type), g.get("RestartPolicy"));
    g.insert("RestartPolicy".into(), restart.clone());
    set_default(g, "Consul", json!({"Namespace": ""}));

    if let Some(Value::Array(tasks)) = g.get_mut("Tasks") {
        for t in tasks.iter_mut() {
            if let Some(to) = t.as_object_mut() {
                canonicalize_task(to, &restart);
            }
        }
    }
}

fn canonicalize_task(t: &mut Map<String, Value>, group_restart: &Value) {
    let restart = merge_onto(group_restart.clone(), t.get("RestartPolicy"));
    t.insert("RestartPolicy".into(), restart);
    set_default(t, "KillTimeout", json!(5 * SEC));
    let logs = merge_onto(
        json!({"MaxFiles": 10, "MaxFileSizeMB": 10}),
        t.get("LogConfig"),
    );
    t.insert("LogConfig".into(), logs);
    let mut res = match t.remove("Resources") {
        Some(Value::Object(r)) => r,
        _ => Map::new(),
    };
    let cores_set = !is_unset(res.get("Cores"));
    set_default(&mut res, "Cores", json!(0));
    if cores_set {
        res.insert("CPU".into(), json!(0));
    } else {
        set_default(&mut res, "CPU", json!(100));
    }
    set_default(&mut res, "MemoryMB", json!(300));
    set_default(&mut res, "MemoryMaxMB", json!(0));
    set_default(&mut res, "DiskMB", json!(0));
    set_default(&mut res, "IOPS", json!(0));
    t.insert("Resources".into(), Value::Object(res));
    set_default(t, "ShutdownDelay", json!(0));
    set_default(t, "KillSignal", json!(""));
    set_default(t, "Kind", json!(""));
    set_default(t, "User", json!(""));
    set_default(t, "Leader", json!(false));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_job_gets_nomad_defaults() {
        let mut j = json!({"ID": "web", "TaskGroups": [{"Name": "g",
            "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]});
        canonicalize_job(&mut j);
        assert_eq!(j["Name"], "web");
        assert_eq!(j["Priority"], 50);
        assert_eq!(j["Type"], "service");
        assert_eq!(j["Update"]["Stagger"], 30 * SEC);
        assert_eq!(j["Update"]["HealthCheck"], "");
        let g = &j["TaskGroups"][0];
        assert_eq!(g["Count"], 1);
        assert_eq!(g["Update"]["HealthCheck"], "checks");
        assert_eq!(g["Migrate"]["MaxParallel"], 1);
        assert_eq!(g["RestartPolicy"]["Attempts"], 2);
        assert_eq!(g["ReschedulePolicy"]["DelayFunction"], "exponential");
        assert_eq!(g["EphemeralDisk"]["SizeMB"], 300);
        let t = &g["Tasks"][0];
        assert_eq!(t["Resources"]["CPU"], 100);
        assert_eq!(t["Resources"]["MemoryMB"], 300);
        assert_eq!(t["LogConfig"]["MaxFiles"], 10);
        assert_eq!(t["KillTimeout"], 5 * SEC);
    }

    #[test]
    fn batch_job_defaults_differ_and_user_values_win() {
        let mut j = json!({"ID": "b", "Type": "batch", "TaskGroups": [{"Name": "g",
            "RestartPolicy": {"Attempts": 0},
            "Scaling": {"Min": 2},
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Resources": {"CPU": 20}}]}]});
        canonicalize_job(&mut j);
        let g = &j["TaskGroups"][0];
        assert_eq!(g["Count"], 2);
        assert!(g["Update"].is_null());
        assert!(g["Migrate"].is_null());
        assert_eq!(g["RestartPolicy"]["Attempts"], 0);
        assert_eq!(g["RestartPolicy"]["Interval"], 24 * HOUR);
        assert_eq!(g["ReschedulePolicy"]["Attempts"], 1);
        assert_eq!(g["Tasks"][0]["Resources"]["CPU"], 20);
        assert_eq!(g["Tasks"][0]["RestartPolicy"]["Attempts"], 0);
        assert_eq!(j["Update"]["MaxParallel"], 0);
    }
}
