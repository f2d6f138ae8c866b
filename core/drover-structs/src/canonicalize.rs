//! Nomad's registration defaults, applied to a job in the API's JSON shape (where "unset" is still
//! visible as a missing key or `null`), before it is decoded into [`crate::Job`].
//!
//! Mirrors what Nomad 1.1 does between receiving a job and storing it: the API's
//! `Job.Canonicalize` (defaults per job type for restart, reschedule, update and migrate;
//! ephemeral disk, log and resource defaults; `count` from `scaling.min`), the conversion to the
//! server's structs (`ApiJobToStructJob`) and the server's own `Job.Canonicalize`. The result
//! reads as `GET /v1/job/:id` returns the job.

mod blocks;
mod services;

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

/// Go's "empty and nil are the same" rule: an empty list or map becomes `null`.
fn empty_to_null(obj: &mut Map<String, Value>, key: &str) {
    let empty = match obj.get(key) {
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        _ => false,
    };
    if empty {
        obj.insert(key.to_string(), Value::Null);
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

fn reschedule_default(job_type: &str) -> Value {
    match job_type {
        "service" => json!({"Attempts": 0, "Interval": 0, "Delay": 30 * SEC,
            "DelayFunction": "exponential", "MaxDelay": HOUR, "Unlimited": true}),
        "batch" => json!({"Attempts": 1, "Interval": 24 * HOUR, "Delay": 5 * SEC,
            "DelayFunction": "constant", "MaxDelay": 0, "Unlimited": false}),
        _ => json!({"Attempts": 0, "Interval": 0, "Delay": 0,
            "DelayFunction": "", "MaxDelay": 0, "Unlimited": false}),
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

/// What the groups inherit from the job.
struct JobContext<'a> {
    job_type: &'a str,
    id: &'a str,
    name: &'a str,
    namespace: &'a str,
    /// The job's update strategy with defaults, when the groups get one.
    update: Option<Value>,
    /// Whether the user gave a job-level update block.
    user_update: bool,
    reschedule: Option<Value>,
    migrate: Option<Value>,
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
    if obj.get("Namespace").and_then(Value::as_str) == Some("") {
        obj.insert("Namespace".into(), json!(crate::DEFAULT_NAMESPACE));
    }
    set_default(obj, "Type", json!("service"));
    set_default(obj, "Priority", json!(crate::job::JOB_DEFAULT_PRIORITY));
    // Nomad 1.5+ (`Job.Canonicalize`): a job that names no datacenter may run in any.
    let no_dcs = match obj.get("Datacenters") {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    if no_dcs {
        obj.insert(
            "Datacenters".into(),
            json!([crate::DEFAULT_DATACENTERS_GLOB]),
        );
    }
    empty_to_null(obj, "Meta");
    let text = |obj: &Map<String, Value>, key: &str| {
        obj.get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (job_type, id, name, namespace) = (
        text(obj, "Type"),
        text(obj, "ID"),
        text(obj, "Name"),
        text(obj, "Namespace"),
    );

    // The API's job-level update is complete (defaults for service jobs); the stored job keeps
    // only Stagger and MaxParallel of it, as Nomad's ApiJobToStructJob does.
    let user_update = !is_unset(obj.get("Update"));
    let api_update = if user_update {
        Some(merge_onto(update_default(), obj.get("Update")))
    } else {
        (job_type == "service").then(update_default)
    };
    let stored_update = match &api_update {
        Some(u) => json!({"Stagger": u["Stagger"], "MaxParallel": u["MaxParallel"],
            "HealthCheck": "", "MinHealthyTime": 0, "HealthyDeadline": 0, "ProgressDeadline": 0,
            "AutoRevert": false, "AutoPromote": false, "Canary": 0}),
        None => json!({"Stagger": 0, "MaxParallel": 0, "HealthCheck": "", "MinHealthyTime": 0,
            "HealthyDeadline": 0, "ProgressDeadline": 0, "AutoRevert": false,
            "AutoPromote": false, "Canary": 0}),
    };
    obj.insert("Update".into(), stored_update);

    let ctx = JobContext {
        job_type: &job_type,
        id: &id,
        name: &name,
        namespace: &namespace,
        update: api_update,
        user_update,
        reschedule: obj.remove("Reschedule").filter(|v| !v.is_null()),
        migrate: obj.remove("Migrate").filter(|v| !v.is_null()),
    };
    blocks::periodic(obj.get_mut("Periodic"));
    blocks::parameterized(obj.get_mut("ParameterizedJob"));
    blocks::multiregion(obj.get_mut("Multiregion"));
    blocks::affinities(obj.get_mut("Affinities"));
    blocks::spreads(obj.get_mut("Spreads"));

    if let Some(Value::Array(groups)) = obj.get_mut("TaskGroups") {
        for g in groups.iter_mut() {
            if let Some(go) = g.as_object_mut() {
                canonicalize_group(go, &ctx);
            }
        }
    }
}

fn canonicalize_group(g: &mut Map<String, Value>, ctx: &JobContext<'_>) {
    let job_type = ctx.job_type;
    if is_unset(g.get("Count")) {
        let min = g
            .get("Scaling")
            .and_then(|s| s.get("Min"))
            .filter(|v| !v.is_null())
            .cloned();
        g.insert("Count".into(), min.unwrap_or(json!(1)));
    }
    let count = g.get("Count").cloned().unwrap_or(json!(1));
    let group_name = g
        .get("Name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    blocks::scaling(
        g.get_mut("Scaling"),
        &count,
        ctx.namespace,
        ctx.id,
        &group_name,
    );
    let disk = merge_onto(
        json!({"Sticky": false, "SizeMB": 300, "Migrate": false}),
        g.get("EphemeralDisk"),
    );
    g.insert("EphemeralDisk".into(), disk);
    empty_to_null(g, "Meta");

    // Update: the job's strategy merged with the group's, for job types that have one.
    let group_update = g.get("Update").filter(|v| !v.is_null()).cloned();
    let update = match (&ctx.update, &group_update) {
        (Some(ju), Some(gu)) => Some(merge_onto(ju.clone(), Some(gu))),
        (Some(ju), None) if ctx.user_update || job_type == "service" => Some(ju.clone()),
        (None, Some(gu)) => Some(merge_onto(update_default(), Some(gu))),
        _ => None,
    };
    g.insert("Update".into(), update.unwrap_or(Value::Null));

    // Migrate: the job's merged with the group's; defaults only for service jobs, where it
    // applies (other job types keep what the user wrote, for validation to refuse).
    let user_migrate = match (&ctx.migrate, g.get("Migrate").filter(|v| !v.is_null())) {
        (Some(jm), gm) => Some(merge_onto(jm.clone(), gm)),
        (None, Some(gm)) => Some(gm.clone()),
        (None, None) => None,
    };
    let migrate = if job_type == "service" {
        Some(merge_onto(migrate_default(), user_migrate.as_ref()))
    } else {
        user_migrate
    };
    g.insert("Migrate".into(), migrate.unwrap_or(Value::Null));

    // Reschedule: system (and sysbatch) groups get none unless the user wrote one.
    let user_reschedule = match (
        &ctx.reschedule,
        g.get("ReschedulePolicy").filter(|v| !v.is_null()),
    ) {
        (Some(jr), gr) => Some(merge_onto(jr.clone(), gr)),
        (None, Some(gr)) => Some(gr.clone()),
        (None, None) => None,
    };
    let reschedule = match user_reschedule {
        Some(r) => Some(merge_onto(reschedule_default(job_type), Some(&r))),
        None if !matches!(job_type, "system" | "sysbatch") => Some(reschedule_default(job_type)),
        None => None,
    };
    g.insert("ReschedulePolicy".into(), reschedule.unwrap_or(Value::Null));

    // api `DisconnectStrategy.Canonicalize`: replace defaults to true, reconcile to best_score.
    if let Some(Value::Object(d)) = g.get_mut("Disconnect") {
        set_default(d, "Replace", json!(true));
        set_default(
            d,
            "Reconcile",
            json!(crate::disconnect::RECONCILE_BEST_SCORE),
        );
    }

    let restart = merge_onto(restart_default(job_type), g.get("RestartPolicy"));
    g.insert("RestartPolicy".into(), restart.clone());
    set_default(g, "Consul", json!({"Namespace": ""}));
    blocks::affinities(g.get_mut("Affinities"));
    blocks::spreads(g.get_mut("Spreads"));
    blocks::networks(g.get_mut("Networks"));
    services::canonicalize_services(
        g.get_mut("Services"),
        &services::Owner {
            job: ctx.name,
            group: &group_name,
            task: None,
        },
    );

    services::assign_connect_native_tasks(g);
    services::inject_connect_sidecars(g);

    if let Some(Value::Array(tasks)) = g.get_mut("Tasks") {
        for t in tasks.iter_mut() {
            if let Some(to) = t.as_object_mut() {
                canonicalize_task(to, &restart, ctx, &group_name);
            }
        }
    }
}

/// api `Resources.Canonicalize`: `cpu` defaults to 100 MHz unless `cores` is asked for.
fn canonicalize_resources(res: &mut Map<String, Value>) {
    if is_unset(res.get("Cores")) {
        res.insert("Cores".into(), json!(0));
        set_default(res, "CPU", json!(100));
    }
    set_default(res, "CPU", json!(0));
    set_default(res, "MemoryMB", json!(300));
    set_default(res, "MemoryMaxMB", json!(0));
    // Nomad's ApiResourcesToStructs does not carry a task's `disk` over: the group's
    // ephemeral disk is what counts.
    res.insert("DiskMB".into(), json!(0));
    set_default(res, "IOPS", json!(0));
    empty_to_null(res, "Networks");
    empty_to_null(res, "Devices");
    blocks::networks(res.get_mut("Networks"));
    blocks::devices(res.get_mut("Devices"));
}

fn canonicalize_task(
    t: &mut Map<String, Value>,
    group_restart: &Value,
    ctx: &JobContext<'_>,
    group: &str,
) {
    let restart = merge_onto(group_restart.clone(), t.get("RestartPolicy"));
    t.insert("RestartPolicy".into(), restart);
    // The server's Task.Canonicalize treats a zero kill timeout as unset.
    if t.get("KillTimeout").and_then(Value::as_i64).unwrap_or(0) == 0 {
        t.insert("KillTimeout".into(), json!(5 * SEC));
    }
    let logs = merge_onto(
        json!({"MaxFiles": 10, "MaxFileSizeMB": 10}),
        t.get("LogConfig"),
    );
    t.insert("LogConfig".into(), logs);
    let mut res = match t.remove("Resources") {
        Some(Value::Object(r)) => r,
        _ => Map::new(),
    };
    canonicalize_resources(&mut res);
    t.insert("Resources".into(), Value::Object(res));
    set_default(t, "ShutdownDelay", json!(0));
    set_default(t, "KillSignal", json!(""));
    set_default(t, "Kind", json!(""));
    set_default(t, "User", json!(""));
    set_default(t, "Leader", json!(false));
    for key in ["Meta", "Env", "Config"] {
        empty_to_null(t, key);
    }
    // A lifecycle block without a hook is no lifecycle at all (api TaskLifecycle.Empty).
    if t.get("Lifecycle").is_some_and(|l| {
        l.get("Hook")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    }) {
        t.insert("Lifecycle".into(), Value::Null);
    }
    blocks::affinities(t.get_mut("Affinities"));
    blocks::templates(t.get_mut("Templates"));
    blocks::artifacts(t.get_mut("Artifacts"));
    blocks::vault(t.get_mut("Vault"));
    blocks::volume_mounts(t.get_mut("VolumeMounts"));
    let task_name = t
        .get("Name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    services::canonicalize_services(
        t.get_mut("Services"),
        &services::Owner {
            job: ctx.name,
            group,
            task: Some(&task_name),
        },
    );
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
    fn a_job_without_datacenters_may_run_in_any() {
        for dcs in [None, Some(json!(null)), Some(json!([]))] {
            let mut j = json!({"ID": "web", "TaskGroups": []});
            if let Some(d) = dcs {
                j["Datacenters"] = d;
            }
            canonicalize_job(&mut j);
            assert_eq!(j["Datacenters"], json!(["*"]));
        }
        let mut named = json!({"ID": "web", "Datacenters": ["dc-*", "east"]});
        canonicalize_job(&mut named);
        assert_eq!(named["Datacenters"], json!(["dc-*", "east"]));
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

    #[test]
    fn system_groups_get_no_reschedule_policy() {
        let mut j = json!({"ID": "s", "Type": "system", "TaskGroups": [{"Name": "g",
            "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]});
        canonicalize_job(&mut j);
        assert!(j["TaskGroups"][0]["ReschedulePolicy"].is_null());
        assert!(j["TaskGroups"][0]["Migrate"].is_null());
        let job: crate::Job = crate::decode::decode(j, "Job").unwrap();
        crate::validate::validate_job(&crate::Job {
            datacenters: vec!["dc1".into()],
            ..job
        })
        .unwrap();
    }

    #[test]
    fn disconnect_block_defaults_to_replace_and_best_score() {
        let mut j = json!({"ID": "s", "Type": "service", "TaskGroups": [{"Name": "g",
            "Disconnect": {"LostAfter": 60_000_000_000_i64},
            "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]});
        canonicalize_job(&mut j);
        assert_eq!(
            j["TaskGroups"][0]["Disconnect"],
            json!({"LostAfter": 60_000_000_000_i64, "Replace": true, "Reconcile": "best_score"})
        );
        let job: crate::Job = crate::decode::decode(j, "Job").unwrap();
        let d = job.task_groups[0].disconnect.as_ref().unwrap();
        assert_eq!((d.lost_after, d.replace), (60_000_000_000, Some(true)));
    }

    #[test]
    fn migrate_blocks_of_batch_jobs_are_kept_for_validation() {
        let mut j = json!({"ID": "b", "Type": "batch", "Migrate": {"MaxParallel": 2},
            "TaskGroups": [{"Name": "g", "Tasks": []}]});
        canonicalize_job(&mut j);
        assert_eq!(j["TaskGroups"][0]["Migrate"], json!({"MaxParallel": 2}));
    }

    #[test]
    fn cores_leave_cpu_unset_but_keep_a_given_cpu() {
        let mut j = json!({"ID": "c", "TaskGroups": [{"Name": "g", "Tasks": [
            {"Name": "a", "Resources": {"Cores": 2}},
            {"Name": "b", "Resources": {"Cores": 2, "CPU": 500}}]}]});
        canonicalize_job(&mut j);
        let tasks = &j["TaskGroups"][0]["Tasks"];
        assert_eq!(tasks[0]["Resources"]["CPU"], 0);
        assert_eq!(tasks[1]["Resources"]["CPU"], 500);
    }

    #[test]
    fn zero_kill_timeout_and_empty_maps_are_canonical() {
        let mut j = json!({"ID": "k", "Meta": {}, "TaskGroups": [{"Name": "g", "Meta": {},
            "Tasks": [{"Name": "t", "KillTimeout": 0, "Env": {}, "Config": {},
                "Lifecycle": {"Hook": "", "Sidecar": true}}]}]});
        canonicalize_job(&mut j);
        let t = &j["TaskGroups"][0]["Tasks"][0];
        assert_eq!(t["KillTimeout"], 5 * SEC);
        assert!(t["Env"].is_null() && t["Config"].is_null() && t["Lifecycle"].is_null());
        assert!(j["Meta"].is_null() && j["TaskGroups"][0]["Meta"].is_null());
    }

    #[test]
    fn group_and_task_blocks_take_the_servers_shape() {
        let mut j = json!({"ID": "web", "Name": "web", "Affinities": [{"LTarget": "a", "RTarget": "b", "Operand": "="}],
            "TaskGroups": [{"Name": "g", "Scaling": {"Max": 5},
                "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
                "Services": [{"PortLabel": "http"}],
                "Tasks": [{"Name": "t", "Services": [{"Id": "", "Checks": [{"Name": ""}]}]}]}]});
        canonicalize_job(&mut j);
        assert_eq!(j["Affinities"][0]["Weight"], 50);
        let g = &j["TaskGroups"][0];
        assert_eq!(g["Scaling"]["Min"], 1);
        assert_eq!(g["Scaling"]["Target"]["Group"], "g");
        assert_eq!(g["Networks"][0]["MBits"], 0);
        assert_eq!(
            g["Networks"][0]["DynamicPorts"][0]["HostNetwork"],
            "default"
        );
        assert_eq!(g["Services"][0]["Name"], "web-g");
        let s = &g["Tasks"][0]["Services"][0];
        assert_eq!(s["Name"], "web-g-t");
        assert!(s.get("Id").is_none());
        assert_eq!(s["Checks"][0]["Name"], "service: \"web-g-t\" check");
    }
}
