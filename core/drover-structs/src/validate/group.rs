//! Nomad 1.1's `TaskGroup.Validate`: the group's own rules, its policies, volumes, networks,
//! services and scaling policy, then every task nested under it.

use std::collections::BTreeMap;

use serde_json::Value;

use super::json::{bool_of, int_of, list, set, str_of};
use super::placement::{check_affinities, check_constraints, check_spreads};
use super::policies::{
    validate_ephemeral_disk, validate_migrate, validate_reschedule, validate_restart,
    validate_update,
};
use super::services::{TaskServices, validate_group_script_checks, validate_group_services};
use super::task::validate_task;
use crate::job::*;
use crate::multierror::MultiError;

const MAX_PORT: i64 = 65535;

pub(crate) fn validate_group(j: &Job, tg: &TaskGroup) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    let system = j.job_type == JOB_TYPE_SYSTEM;
    if tg.name.is_empty() {
        m.push("Missing task group name");
    } else if tg.name.contains('\0') {
        m.push("Task group name contains null character");
    }
    if tg.count < 0 {
        m.push("Task group count can't be negative");
    }
    if tg.tasks.is_empty() {
        m.push("Missing tasks for task group");
    }
    check_constraints(&mut m, tg.constraints.as_ref());
    check_affinities(&mut m, tg.affinities.as_ref(), system);
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
    check_spreads(&mut m, tg.spreads.as_ref(), system);
    crate::disconnect::validate_group_disconnect(&mut m, j, tg);
    if system {
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
        Some(d) => {
            if let Some(e) = validate_ephemeral_disk(d) {
                m.push(e);
            }
        }
        None => m.push(format!(
            "Task Group {} should have an ephemeral disk object",
            tg.name
        )),
    }
    if let Some(u) = &tg.update {
        if !matches!(j.job_type.as_str(), JOB_TYPE_SERVICE | JOB_TYPE_SYSTEM) {
            m.push(format!(
                "Job type {} does not allow update block",
                super::gofmt::quote(&j.job_type)
            ));
        }
        if let Err(e) = validate_update(u) {
            m.push(e.to_string());
        }
    }
    if let Some(mig) = &tg.migrate {
        if j.job_type == JOB_TYPE_SERVICE {
            if let Err(e) = validate_migrate(mig) {
                m.push(e.to_string());
            }
        } else {
            m.push(format!(
                "Job type {} does not allow migrate block",
                super::gofmt::quote(&j.job_type)
            ));
        }
    }

    let mut tasks: BTreeMap<&str, usize> = BTreeMap::new();
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

    let canaries = tg.update.as_ref().map(|u| u.canary).unwrap_or(0);
    let volumes = tg.volumes.as_ref().and_then(Value::as_object);
    // Nomad walks a Go map here (random order); sorted names keep the output stable.
    let mut names: Vec<&String> = volumes.map(|v| v.keys().collect()).unwrap_or_default();
    names.sort();
    for name in names {
        let Some(req) = volumes.and_then(|v| v.get(name)).filter(|v| !v.is_null()) else {
            continue;
        };
        if let Err(e) = validate_volume_request(req, canaries) {
            m.push(format!(
                "Task group volume validation for {name} failed: {e}"
            ));
        }
    }
    if let Err(e) = validate_networks(tg) {
        m.push(format!("Task group network validation failed: {e}"));
    }
    let task_services: Vec<TaskServices<'_>> = tg
        .tasks
        .iter()
        .map(|t| TaskServices {
            name: &t.name,
            services: t.services.as_ref(),
        })
        .collect();
    if let Err(e) = validate_group_services(tg.services.as_ref(), &task_services) {
        m.push(format!("Task group service validation failed: {e}"));
    }
    if let Err(e) = validate_group_script_checks(&tg.name, tg.services.as_ref()) {
        m.push(format!("Task group service check validation failed: {e}"));
    }
    if let Err(e) = validate_connect_network(tg) {
        m.push(e);
    }
    if let Err(e) = validate_scaling(j, tg) {
        m.push(format!("Task group scaling policy validation failed: {e}"));
    }
    for task in &tg.tasks {
        for (i, mount) in super::json::items(task.volume_mounts.as_ref())
            .iter()
            .enumerate()
        {
            let volume = str_of(mount, "Volume");
            if volume.is_empty() {
                m.push(format!(
                    "Task {} has a volume mount ({i}) referencing an empty volume",
                    task.name
                ));
            } else if !volumes.is_some_and(|v| v.contains_key(volume)) {
                m.push(format!(
                    "Task {} has a volume mount ({i}) referencing undefined volume {volume}",
                    task.name
                ));
            }
        }
        if let Err(e) = validate_task(task, tg, &j.job_type) {
            m.push(format!("Task {} validation failed: {e}", task.name));
        }
    }
    m.into_result()
}

/// Nomad's `VolumeRequest.Validate`: an unknown type is a single error, the rest a list.
fn validate_volume_request(v: &Value, canaries: i64) -> Result<(), String> {
    let kind = str_of(v, "Type");
    if kind != "host" && kind != "csi" {
        return Err(format!("volume has unrecognized type {kind}"));
    }
    let mut m = MultiError::new();
    let access = str_of(v, "AccessMode");
    let attachment = str_of(v, "AttachmentMode");
    if kind == "host" && !attachment.is_empty() {
        m.push("host volumes cannot have an attachment mode");
    }
    if kind == "host" && !access.is_empty() {
        m.push("host volumes cannot have an access mode");
    }
    if matches!(access, "single-node-reader-only" | "multi-node-reader-only")
        && !bool_of(v, "ReadOnly")
    {
        m.push(format!("{access} volumes must be read-only"));
    }
    if attachment == "block-device" && set(v, "MountOptions").is_some() {
        m.push("block devices cannot have mount options");
    }
    if bool_of(v, "PerAlloc") && canaries > 0 {
        m.push("volume cannot be per_alloc when canaries are in use");
    }
    if str_of(v, "Source").is_empty() {
        m.push("volume has an empty source");
    }
    m.into_result().map_err(|e| e.to_string())
}

/// Nomad's `TaskGroup.validateNetworks`: unique port labels, static ports unique per host
/// network and in range, `to` mappings in range; task networks checked against the group's.
fn validate_networks(tg: &TaskGroup) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    let mut labels: BTreeMap<&str, &str> = BTreeMap::new();
    let mut static_ports: BTreeMap<String, BTreeMap<i64, String>> = BTreeMap::new();
    let mut claim_static =
        |m: &mut MultiError, host_network: &str, label: &str, value: i64, owner: String| {
            let host = if host_network.is_empty() {
                "default"
            } else {
                host_network
            };
            let ports = static_ports.entry(host.to_string()).or_default();
            if let Some(other) = ports.get(&value) {
                m.push(format!("Static port {value} already reserved by {other}"));
            } else if value > MAX_PORT {
                m.push(format!(
                    "Port {label} ({value}) cannot be greater than {MAX_PORT}"
                ));
            } else {
                ports.insert(value, owner);
            }
        };
    for net in tg.networks.iter().flatten() {
        for port in net.all_ports() {
            if let Some(other) = labels.get(port.label.as_str()) {
                m.push(format!(
                    "Port label {} already in use by {other}",
                    port.label
                ));
            } else {
                labels.insert(&port.label, "taskgroup network");
            }
            if port.value != 0 {
                claim_static(
                    &mut m,
                    &port.host_network,
                    &port.label,
                    port.value,
                    format!("taskgroup network:{}", port.label),
                );
            }
            if port.to < -1 {
                m.push(format!(
                    "Port {} cannot be mapped to negative value {}",
                    super::gofmt::quote(&port.label),
                    port.to
                ));
            } else if port.to > MAX_PORT {
                m.push(format!(
                    "Port {} cannot be mapped to a port ({}) greater than {MAX_PORT}",
                    super::gofmt::quote(&port.label),
                    port.to
                ));
            }
        }
    }
    for task in &tg.tasks {
        for net in task.resources.networks.iter().flatten() {
            for port in net.all_ports() {
                if let Some(other) = labels.get(port.label.as_str()) {
                    m.push(format!(
                        "Port label {} already in use by {other}",
                        port.label
                    ));
                }
                if port.value != 0 {
                    claim_static(
                        &mut m,
                        &port.host_network,
                        &port.label,
                        port.value,
                        format!("{}:{}", task.name, port.label),
                    );
                }
            }
        }
    }
    m.into_result()
}

/// Nomad's `TaskGroup.validateScalingPolicy` with `ScalingPolicy.Validate`'s problems prefixed.
fn validate_scaling(j: &Job, tg: &TaskGroup) -> Result<(), MultiError> {
    let Some(p) = tg.scaling.as_ref().filter(|s| !s.is_null()) else {
        return Ok(());
    };
    let mut m = MultiError::new();
    let mut policy = Vec::new();
    match str_of(p, "Type") {
        "" => policy.push("missing scaling policy type".to_string()),
        "horizontal" => {
            if let Some(Value::Object(target)) = set(p, "Target")
                && !target.is_empty()
            {
                for (key, what) in [
                    ("Namespace", "namespace"),
                    ("Job", "job"),
                    ("Group", "group"),
                ] {
                    if target
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .is_empty()
                    {
                        policy.push(format!("missing target {what}"));
                    }
                }
            }
        }
        other => policy.push(format!("scaling policy type \"{other}\" is not valid")),
    }
    let (min, max) = (int_of(p, "Min"), int_of(p, "Max"));
    if max < 0 {
        policy.push("maximum count must be specified and non-negative".into());
    } else if max < min {
        policy.push("maximum count must not be less than minimum count".into());
    }
    if min < 0 {
        policy.push("minimum count must be specified and non-negative".into());
    }
    for e in policy {
        m.push(format!("Scaling policy invalid: {e}"));
    }
    if max < tg.count {
        m.push(
            "Scaling policy invalid: task group count must not be greater than maximum count in scaling policy",
        );
    }
    let multiregion = j
        .multiregion
        .as_ref()
        .is_some_and(|mr| !list(mr, "Regions").is_empty());
    if tg.count < min && !(multiregion && tg.count == 0 && j.region == "global") {
        m.push(
            "Scaling policy invalid: task group count must not be less than minimum count in scaling policy",
        );
    }
    m.into_result()
}

/// Nomad's `groupConnectValidate`: a group with a Connect sidecar or an exposed check has
/// exactly one network, in bridge mode (the proxy's listeners live in its namespace).
fn validate_connect_network(tg: &TaskGroup) -> Result<(), String> {
    let services = super::json::items(tg.services.as_ref());
    let sidecar = services.iter().any(|s| {
        s.get("Connect")
            .and_then(|c| c.get("SidecarService"))
            .is_some_and(|v| !v.is_null())
    });
    if !sidecar {
        return Ok(());
    }
    let networks = tg.networks.as_deref().unwrap_or(&[]);
    if networks.len() != 1 {
        return Err(format!(
            "Consul Connect sidecar requires exactly one network, found {} in group {:?}",
            networks.len(),
            tg.name
        ));
    }
    let mode = networks[0].mode.as_str();
    if mode != "bridge" {
        return Err(format!(
            "Consul Connect sidecar requires bridge network, found {mode:?} in group {:?}",
            tg.name
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(r: Result<(), MultiError>) -> Vec<String> {
        r.err().map(|e| e.errors).unwrap_or_default()
    }

    fn group(v: Value) -> TaskGroup {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn scaling_bounds_the_count() {
        let j = Job::default();
        let tg = group(json!({"Name": "g", "Count": 12,
            "Scaling": {"Type": "horizontal", "Min": 2, "Max": 10}}));
        assert_eq!(
            errors(validate_scaling(&j, &tg)),
            [
                "Scaling policy invalid: task group count must not be greater than maximum count in scaling policy"
            ]
        );
        let tg = group(json!({"Name": "g", "Count": 1,
            "Scaling": {"Type": "horizontal", "Min": 5, "Max": 3}}));
        assert_eq!(
            errors(validate_scaling(&j, &tg)),
            [
                "Scaling policy invalid: maximum count must not be less than minimum count",
                "Scaling policy invalid: task group count must not be less than minimum count in scaling policy"
            ]
        );
        let tg = group(json!({"Name": "g", "Count": 0,
            "Scaling": {"Type": "vertical", "Min": -1, "Max": -1,
                "Target": {"Namespace": "default"}}}));
        assert_eq!(
            errors(validate_scaling(&j, &tg)),
            [
                "Scaling policy invalid: scaling policy type \"vertical\" is not valid",
                "Scaling policy invalid: maximum count must be specified and non-negative",
                "Scaling policy invalid: minimum count must be specified and non-negative",
                "Scaling policy invalid: task group count must not be greater than maximum count in scaling policy"
            ]
        );
    }

    #[test]
    fn port_labels_and_static_ports_are_unique() {
        let tg = group(json!({"Name": "g",
            "Networks": [{"ReservedPorts": [
                {"Label": "http", "Value": 8080},
                {"Label": "admin", "Value": 8080},
                {"Label": "big", "Value": 70000, "To": -5},
            ], "DynamicPorts": [{"Label": "http", "To": 70000}]}],
            "Tasks": [{"Name": "t", "Resources": {"Networks": [
                {"ReservedPorts": [{"Label": "http", "Value": 8080}]}]}}]}));
        assert_eq!(
            errors(validate_networks(&tg)),
            [
                "Static port 8080 already reserved by taskgroup network:http",
                "Port big (70000) cannot be greater than 65535",
                "Port \"big\" cannot be mapped to negative value -5",
                "Port label http already in use by taskgroup network",
                "Port \"http\" cannot be mapped to a port (70000) greater than 65535",
                "Port label http already in use by taskgroup network",
                "Static port 8080 already reserved by taskgroup network:http",
            ]
        );
    }

    #[test]
    fn volume_requests_follow_nomad_rules() {
        assert_eq!(
            validate_volume_request(&json!({"Type": "nfs"}), 0).unwrap_err(),
            "volume has unrecognized type nfs"
        );
        assert_eq!(
            validate_volume_request(
                &json!({"Type": "host", "AccessMode": "single-node-reader-only",
                    "AttachmentMode": "file-system", "PerAlloc": true}),
                1
            )
            .unwrap_err(),
            "5 errors occurred:\n\t* host volumes cannot have an attachment mode\n\t* host volumes cannot have an access mode\n\t* single-node-reader-only volumes must be read-only\n\t* volume cannot be per_alloc when canaries are in use\n\t* volume has an empty source\n\n"
        );
        assert!(
            validate_volume_request(
                &json!({"Type": "csi", "Source": "db",
            "AttachmentMode": "block-device", "AccessMode": "single-node-writer"}),
                0
            )
            .is_ok()
        );
    }
}
