//! Service health checks as the client runs them: a `check` block read from the opaque
//! service JSON (canonicalised: durations in nanoseconds, names defaulted) into Nomad's
//! `ServiceCheck`, and what one run of a check found in Nomad's `CheckQueryResult` shape (what
//! `/v1/client/allocation/:id/checks` answers).
//!
//! Drover runs every check type itself (`http`, `tcp`, `grpc`, `script`), whatever the
//! service's provider: Nomad's own provider runs only `http` and `tcp`, Consul the rest.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::TaskGroup;

/// `CheckQueryResult.Status`: Nomad's ternary status, plus `warning` for a script check that
/// exits 1 (Consul's meaning of that exit code).
pub const CHECK_SUCCESS: &str = "success";
pub const CHECK_FAILURE: &str = "failure";
pub const CHECK_PENDING: &str = "pending";
pub const CHECK_WARNING: &str = "warning";

/// `CheckQueryResult.Mode`: a readiness check (`on_update = "ignore"`) never holds a
/// deployment back; a healthiness check does until it passes.
pub const CHECK_MODE_HEALTHINESS: &str = "healthiness";
pub const CHECK_MODE_READINESS: &str = "readiness";

fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Nomad's `CheckRestart`: restart the task after `limit` consecutive unhealthy results,
/// not counting those within `grace` of its start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct CheckRestart {
    #[serde(rename = "Limit", deserialize_with = "null_default")]
    pub limit: i64,
    /// Nanoseconds.
    #[serde(rename = "Grace", deserialize_with = "null_default")]
    pub grace: i64,
    #[serde(rename = "IgnoreWarnings", deserialize_with = "null_default")]
    pub ignore_warnings: bool,
}

/// Nomad's `ServiceCheck`, the fields the client acts on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ServiceCheck {
    #[serde(rename = "Name", deserialize_with = "null_default")]
    pub name: String,
    #[serde(rename = "Type", deserialize_with = "null_default")]
    pub check_type: String,
    #[serde(rename = "Command", deserialize_with = "null_default")]
    pub command: String,
    #[serde(rename = "Args", deserialize_with = "null_default")]
    pub args: Vec<String>,
    #[serde(rename = "Path", deserialize_with = "null_default")]
    pub path: String,
    #[serde(rename = "Protocol", deserialize_with = "null_default")]
    pub protocol: String,
    #[serde(rename = "PortLabel", deserialize_with = "null_default")]
    pub port_label: String,
    #[serde(rename = "AddressMode", deserialize_with = "null_default")]
    pub address_mode: String,
    /// Nanoseconds.
    #[serde(rename = "Interval", deserialize_with = "null_default")]
    pub interval: i64,
    /// Nanoseconds.
    #[serde(rename = "Timeout", deserialize_with = "null_default")]
    pub timeout: i64,
    #[serde(rename = "InitialStatus", deserialize_with = "null_default")]
    pub initial_status: String,
    #[serde(rename = "TLSSkipVerify", deserialize_with = "null_default")]
    pub tls_skip_verify: bool,
    #[serde(rename = "Method", deserialize_with = "null_default")]
    pub method: String,
    #[serde(rename = "Header", deserialize_with = "null_default")]
    pub header: BTreeMap<String, Vec<String>>,
    #[serde(rename = "Body", deserialize_with = "null_default")]
    pub body: String,
    #[serde(rename = "GRPCService", deserialize_with = "null_default")]
    pub grpc_service: String,
    #[serde(rename = "TaskName", deserialize_with = "null_default")]
    pub task_name: String,
    #[serde(rename = "SuccessBeforePassing", deserialize_with = "null_default")]
    pub success_before_passing: i64,
    #[serde(rename = "FailuresBeforeCritical", deserialize_with = "null_default")]
    pub failures_before_critical: i64,
    #[serde(rename = "OnUpdate", deserialize_with = "null_default")]
    pub on_update: String,
    #[serde(rename = "CheckRestart")]
    pub check_restart: Option<CheckRestart>,
}

impl ServiceCheck {
    /// Nomad's `GetCheckMode`.
    pub fn mode(&self) -> &'static str {
        if self.on_update == "ignore" {
            CHECK_MODE_READINESS
        } else {
            CHECK_MODE_HEALTHINESS
        }
    }

    /// Nomad's `TriggersRestarts`: a `check_restart` with a limit.
    pub fn restart_policy(&self) -> Option<&CheckRestart> {
        self.check_restart.as_ref().filter(|r| r.limit > 0)
    }
}

/// One check of an allocation's group, with the service it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCheck {
    pub service: String,
    /// The service's `port` (a label or a number) and `address`, which the check inherits.
    pub service_port_label: String,
    pub service_address: String,
    /// The task the check is about: the task of a task service, the check's `task` for a
    /// group service (empty: the check belongs to the whole allocation).
    pub task: String,
    /// Whether the service is a task's (checked only while that task runs).
    pub task_service: bool,
    pub check: ServiceCheck,
}

/// Every check of `group`'s services, group services first, each in its declared order. A
/// check that does not read as a `ServiceCheck` is left out (job validation refuses it).
pub fn group_checks(group: &TaskGroup) -> Vec<GroupCheck> {
    let mut out = Vec::new();
    let mut add = |services: Option<&Value>, task: Option<&str>| {
        for s in services.and_then(Value::as_array).into_iter().flatten() {
            let text = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let checks = s.get("Checks").and_then(Value::as_array);
            for c in checks.into_iter().flatten() {
                let Ok(check) = serde_json::from_value::<ServiceCheck>(c.clone()) else {
                    continue;
                };
                out.push(GroupCheck {
                    service: text("Name"),
                    service_port_label: text("PortLabel"),
                    service_address: text("Address"),
                    task: task.map_or_else(|| check.task_name.clone(), str::to_string),
                    task_service: task.is_some(),
                    check,
                });
            }
        }
    };
    add(group.services.as_ref(), None);
    for t in &group.tasks {
        add(t.services.as_ref(), Some(&t.name));
    }
    out
}

/// What one run of a check found (Nomad's `CheckQueryResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckQueryResult {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Mode")]
    pub mode: String,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "StatusCode", skip_serializing_if = "is_zero")]
    pub status_code: i64,
    #[serde(rename = "Output")]
    pub output: String,
    /// Unix seconds.
    #[serde(rename = "Timestamp")]
    pub timestamp: i64,
    /// The allocation's name (`job.group[index]`), as Nomad fills it.
    #[serde(rename = "Group")]
    pub group: String,
    #[serde(rename = "Task", skip_serializing_if = "String::is_empty")]
    pub task: String,
    #[serde(rename = "Service")]
    pub service: String,
    #[serde(rename = "Check")]
    pub check: String,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Task;
    use serde_json::json;

    #[test]
    fn checks_of_group_and_task_services_read_with_their_owner() {
        let group = TaskGroup {
            name: "g".into(),
            services: Some(json!([{"Name": "api", "PortLabel": "http", "Checks": [
                {"Name": "alive", "Type": "http", "Path": "/health", "Interval": 1_000_000_000,
                 "Timeout": 2_000_000_000, "TaskName": "web", "Args": null, "Header": null,
                 "CheckRestart": {"Limit": 3, "Grace": 5_000_000_000i64, "IgnoreWarnings": false}}
            ]}])),
            tasks: vec![Task {
                name: "web".into(),
                services: Some(json!([{"Name": "metrics", "PortLabel": "9100", "Checks": [
                    {"Name": "m", "Type": "tcp", "Interval": 1, "Timeout": 1, "OnUpdate": "ignore",
                     "CheckRestart": null}
                ]}])),
                ..Default::default()
            }],
            ..Default::default()
        };
        let checks = group_checks(&group);
        assert_eq!(checks.len(), 2);
        assert_eq!(
            (checks[0].service.as_str(), checks[0].task.as_str()),
            ("api", "web")
        );
        assert!(!checks[0].task_service);
        assert_eq!(checks[0].check.restart_policy().map(|r| r.limit), Some(3));
        assert_eq!(checks[0].check.mode(), CHECK_MODE_HEALTHINESS);
        assert_eq!(checks[1].service_port_label, "9100");
        assert!(checks[1].task_service && checks[1].task == "web");
        assert_eq!(checks[1].check.mode(), CHECK_MODE_READINESS);
        assert!(checks[1].check.restart_policy().is_none());
    }

    #[test]
    fn a_result_serializes_in_nomads_shape() {
        let r = CheckQueryResult {
            id: "abc".into(),
            mode: CHECK_MODE_HEALTHINESS.into(),
            status: CHECK_SUCCESS.into(),
            output: "nomad: http ok".into(),
            timestamp: 1,
            group: "web.g[0]".into(),
            service: "api".into(),
            check: "alive".into(),
            ..Default::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        assert!(
            v.get("StatusCode").is_none() && v.get("Task").is_none(),
            "{v}"
        );
        assert_eq!(v["Status"], "success");
    }
}
