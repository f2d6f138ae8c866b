//! Nomad's job validation: every problem at once, nested by group and task, worded as Nomad 1.1
//! words it (nomad/structs/structs.go `Job.Validate`, `TaskGroup.Validate`, `Task.Validate`
//! and the `Validate` methods of the blocks they hold). Blocks the model keeps as opaque JSON
//! (services, volumes, templates...) are read from that JSON in Nomad's server shape, which
//! [`crate::canonicalize`] produces.

pub(crate) mod gofmt;
mod group;
mod json;
mod placement;
mod policies;
mod services;
mod task;

use std::collections::BTreeMap;

pub use placement::{validate_affinity, validate_constraint, validate_spread};

use crate::job::*;
use crate::multierror::MultiError;

/// Validates a canonicalised job.
pub fn validate_job(j: &Job) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    let multiregion = j
        .multiregion
        .as_ref()
        .is_some_and(|mr| !json::list(mr, "Regions").is_empty());
    if j.region.is_empty() && j.multiregion.as_ref().is_none_or(|v| v.is_null()) {
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
        // sysbatch arrived in Nomad 1.2; Drover accepts it.
        "_core" | JOB_TYPE_SERVICE | JOB_TYPE_BATCH | JOB_TYPE_SYSTEM | JOB_TYPE_SYSBATCH => {}
        "" => m.push("Missing job type"),
        other => m.push(format!("Invalid job type: {}", gofmt::quote(other))),
    }
    if !(1..=100).contains(&j.priority) {
        m.push("Job priority must be between [1, 100]");
    }
    if j.datacenters.is_empty() && !multiregion {
        m.push("Missing job datacenters");
    } else {
        for dc in &j.datacenters {
            if dc.is_empty() {
                m.push("Job datacenter must be non-empty string");
            }
        }
    }
    if j.task_groups.is_empty() {
        m.push("Missing job task groups");
    }
    placement::check_constraints(&mut m, j.constraints.as_ref());
    let system = j.job_type == JOB_TYPE_SYSTEM;
    placement::check_affinities(&mut m, j.affinities.as_ref(), system);
    placement::check_spreads(&mut m, j.spreads.as_ref(), system);

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
        if let Some(d) = tg.stop_after_client_disconnect.filter(|d| *d != 0) {
            if d > 0 && !matches!(j.job_type.as_str(), JOB_TYPE_BATCH | JOB_TYPE_SERVICE) {
                m.push("stop_after_client_disconnect can only be set in batch and service jobs");
            } else if d < 0 {
                m.push("stop_after_client_disconnect must be a positive value");
            }
        }
        if system && tg.count > 1 {
            m.push(format!(
                "Job task group {} has count {}. Count cannot exceed 1 with system scheduler",
                tg.name, tg.count
            ));
        }
    }
    for tg in &j.task_groups {
        if let Err(e) = group::validate_group(j, tg) {
            m.push(format!("Task group {} validation failed: {e}", tg.name));
        }
    }
    // Periodic and parameterized jobs are batch jobs (sysbatch too since Nomad 1.2).
    let batch_like = j.is_batch_like();
    if let Some(p) = j.periodic.as_ref().filter(|p| !p.is_null())
        && json::bool_of(p, "Enabled")
    {
        if !batch_like {
            m.push("Periodic can only be used with \"batch\" scheduler");
        }
        if let Err(e) = policies::validate_periodic(p) {
            m.push(e.to_string());
        }
    }
    if let Some(p) = j.parameterized_job.as_ref().filter(|p| !p.is_null())
        && !j.dispatched
    {
        if !batch_like {
            m.push("Parameterized job can only be used with \"batch\" scheduler");
        }
        if let Err(e) = policies::validate_parameterized(p) {
            m.push(e.to_string());
        }
    }
    if let Some(spec) = j.multiregion_spec() {
        spec.validate(j, &mut m);
    }
    m.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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
    fn registration_fills_in_any_datacenter_but_an_empty_list_is_still_refused() {
        let j = job(json!({"ID": "a", "TaskGroups": [{"Name": "g",
            "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]}));
        assert_eq!(j.datacenters, vec!["*".to_string()]);
        validate_job(&j).unwrap();
        let emptied = Job {
            datacenters: Vec::new(),
            ..j
        };
        let e = validate_job(&emptied).unwrap_err().to_string();
        assert!(e.contains("Missing job datacenters"), "{e}");
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

    #[test]
    fn group_without_tasks_and_a_bare_connect_service_gives_two_nested_errors() {
        let j = job(
            json!({"ID": "a", "Datacenters": ["dc1"], "TaskGroups": [{"Name": "api",
            "Tasks": [], "Services": [{"Name": "api", "Connect": {"Native": false}}]}]}),
        );
        let e = validate_job(&j).unwrap_err();
        assert_eq!(
            e.to_string(),
            "1 error occurred:\n\t* Task group api validation failed: 2 errors occurred:\n\t* Missing tasks for task group\n\t* Task group service validation failed: 1 error occurred:\n\t* Service[0] api validation failed: 1 error occurred:\n\t* Consul Connect must be native or use a sidecar service\n\n\n\n\n\n\n\n"
        );
    }

    #[test]
    fn scaling_min_and_max_bound_the_count() {
        let base = |count: Value| {
            job(
                json!({"ID": "a", "Datacenters": ["dc1"], "TaskGroups": [{"Name": "g",
                "Count": count, "Scaling": {"Min": 2, "Max": 4},
                "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]}),
            )
        };
        assert!(validate_job(&base(Value::Null)).is_ok());
        assert_eq!(base(Value::Null).task_groups[0].count, 2);
        let e = validate_job(&base(json!(5))).unwrap_err().to_string();
        assert!(
            e.contains("* Task group scaling policy validation failed: 1 error occurred:\n\t* Scaling policy invalid: task group count must not be greater than maximum count in scaling policy"),
            "{e}"
        );
        let e = validate_job(&base(json!(1))).unwrap_err().to_string();
        assert!(
            e.contains("Scaling policy invalid: task group count must not be less than minimum count in scaling policy"),
            "{e}"
        );
    }

    #[test]
    fn scaling_without_max_is_refused() {
        let j = job(
            json!({"ID": "a", "Datacenters": ["dc1"], "TaskGroups": [{"Name": "g",
            "Scaling": {"Min": 1}, "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]}),
        );
        let e = validate_job(&j).unwrap_err().to_string();
        assert!(
            e.contains("Scaling policy invalid: maximum count must be specified and non-negative"),
            "{e}"
        );
    }

    #[test]
    fn job_level_rules_read_as_nomads() {
        let j = job(
            json!({"ID": "a", "Type": "system", "Datacenters": ["dc1", ""],
            "Affinities": [{"LTarget": "a", "RTarget": "b", "Operand": "="}],
            "Periodic": {"Spec": "*/5 * * * *"},
            "ParameterizedJob": {"Payload": "bogus"},
            "TaskGroups": [{"Name": "g", "Count": 2, "StopAfterClientDisconnect": 5,
                "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]}),
        );
        let e = validate_job(&j).unwrap_err();
        assert_eq!(
            e.errors,
            [
                "Job datacenter must be non-empty string",
                "System jobs may not have an affinity stanza",
                "stop_after_client_disconnect can only be set in batch and service jobs",
                "Job task group g has count 2. Count cannot exceed 1 with system scheduler",
                "Periodic can only be used with \"batch\" scheduler",
                "Parameterized job can only be used with \"batch\" scheduler",
                "1 error occurred:\n\t* Unknown payload requirement: \"bogus\"\n\n",
            ]
        );
    }

    #[test]
    fn update_and_migrate_are_refused_for_batch_groups() {
        let j = job(json!({"ID": "a", "Type": "batch", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Update": {"MaxParallel": 1}, "Migrate": {"MaxParallel": 1},
                "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]}));
        let e = validate_job(&j).unwrap_err().to_string();
        assert!(
            e.contains("* Job type \"batch\" does not allow update block"),
            "{e}"
        );
        assert!(
            e.contains("* Job type \"batch\" does not allow migrate block"),
            "{e}"
        );
    }

    #[test]
    fn volume_mounts_must_name_group_volumes() {
        let j = job(
            json!({"ID": "a", "Datacenters": ["dc1"], "TaskGroups": [{"Name": "g",
            "Volumes": {"data": {"Name": "data", "Type": "host", "Source": "data"}},
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "VolumeMounts": [
                {"Volume": "data", "Destination": "/d"}, {"Volume": "logs"}, {"Volume": ""}]}]}]}),
        );
        let e = validate_job(&j).unwrap_err().to_string();
        assert!(
            e.contains("* Task t has a volume mount (1) referencing undefined volume logs"),
            "{e}"
        );
        assert!(
            e.contains("* Task t has a volume mount (2) referencing an empty volume"),
            "{e}"
        );
    }

    #[test]
    fn task_services_must_use_defined_port_labels() {
        let j = job(
            json!({"ID": "a", "Datacenters": ["dc1"], "TaskGroups": [{"Name": "g",
            "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Services": [
                {"Name": "web", "PortLabel": "http"}, {"Name": "admin", "PortLabel": "admin"}]}]}]}),
        );
        let e = validate_job(&j).unwrap_err().to_string();
        assert!(
            e.contains("port label \"admin\" referenced by services admin does not exist"),
            "{e}"
        );
        assert!(!e.contains("\"http\""), "{e}");
    }
}
