//! Periodic jobs: the typed view of a job's `Periodic` block, the launch record the servers keep
//! per periodic job (Nomad's `PeriodicLaunch`), and the ids of the children it launches.

use serde::{Deserialize, Serialize};

use crate::job::Job;

/// Children of a periodic job are named `<parent>/periodic-<unix seconds>`.
pub const PERIODIC_LAUNCH_SUFFIX: &str = "/periodic-";
/// `TriggeredBy` of the evaluation of a periodic launch.
pub const TRIGGER_PERIODIC_JOB: &str = "periodic-job";
/// The only periodic specification type Nomad knows besides its internal test one.
pub const PERIODIC_SPEC_CRON: &str = "cron";

/// Nomad's `PeriodicConfig`, read from a job's `Periodic` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PeriodicConfig {
    #[serde(rename = "Enabled")]
    pub enabled: bool,
    #[serde(rename = "Spec")]
    pub spec: String,
    /// `crons = [...]`: several expressions, the earliest next time wins.
    #[serde(rename = "Specs", deserialize_with = "null_as_empty")]
    pub specs: Vec<String>,
    #[serde(rename = "SpecType")]
    pub spec_type: String,
    #[serde(rename = "ProhibitOverlap")]
    pub prohibit_overlap: bool,
    /// IANA zone name; empty means UTC.
    #[serde(rename = "TimeZone")]
    pub time_zone: String,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

impl PeriodicConfig {
    /// Every cron expression of the block (`cron` or `crons`).
    pub fn cron_specs(&self) -> Vec<&str> {
        if self.spec.is_empty() {
            self.specs.iter().map(String::as_str).collect()
        } else {
            vec![self.spec.as_str()]
        }
    }

    /// The zone launch times are computed in (Nomad's `GetLocation`).
    pub fn zone_name(&self) -> &str {
        if self.time_zone.is_empty() {
            "UTC"
        } else {
            &self.time_zone
        }
    }
}

/// When a periodic job last launched (Nomad's `PeriodicLaunch`). Until its first launch it holds
/// the time the job was registered, so a leader taking over knows whether a launch was missed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PeriodicLaunch {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    /// Unix nanoseconds.
    #[serde(rename = "Launch")]
    pub launch: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl Job {
    /// The job's `Periodic` block, if it has one that reads as one.
    pub fn periodic_config(&self) -> Option<PeriodicConfig> {
        let value = self.periodic.as_ref().filter(|p| !p.is_null())?;
        serde_json::from_value(value.clone()).ok()
    }

    /// Nomad's `IsPeriodicActive`: periodic, enabled, not stopped, not parameterized. Only
    /// these are launched by the dispatcher.
    pub fn is_periodic_active(&self) -> bool {
        !self.stop && !self.is_parameterized() && self.periodic_config().is_some_and(|p| p.enabled)
    }
}

/// The id of the child `parent` launches at `unix_secs`.
pub fn periodic_child_id(parent: &str, unix_secs: i64) -> String {
    format!("{parent}{PERIODIC_LAUNCH_SUFFIX}{unix_secs}")
}

/// The launch time (unix seconds) a periodic child's id carries (Nomad's `LaunchTime`).
pub fn launch_time_from_child_id(child_id: &str) -> Option<i64> {
    let at = child_id.rfind(PERIODIC_LAUNCH_SUFFIX)?;
    child_id[at + PERIODIC_LAUNCH_SUFFIX.len()..].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_ids_carry_their_launch_time() {
        let id = periodic_child_id("backup/nightly", 1_700_000_000);
        assert_eq!(id, "backup/nightly/periodic-1700000000");
        assert_eq!(launch_time_from_child_id(&id), Some(1_700_000_000));
        assert_eq!(launch_time_from_child_id("web"), None);
        assert_eq!(launch_time_from_child_id("x/periodic-abc"), None);
    }

    #[test]
    fn periodic_block_reads_cron_or_crons() {
        let job = Job {
            periodic: Some(serde_json::json!({
                "Enabled": true, "Spec": "", "Specs": ["*/5 * * * *", "0 1 * * *"],
                "SpecType": "cron", "ProhibitOverlap": true, "TimeZone": ""
            })),
            ..Default::default()
        };
        let p = job.periodic_config().unwrap();
        assert_eq!(p.cron_specs(), ["*/5 * * * *", "0 1 * * *"]);
        assert_eq!(p.zone_name(), "UTC");
        assert!(job.is_periodic_active());
        let stopped = Job {
            stop: true,
            ..job.clone()
        };
        assert!(!stopped.is_periodic_active());
        let null_specs = Job {
            periodic: Some(serde_json::json!({"Enabled": false, "Spec": "@daily", "Specs": null})),
            ..Default::default()
        };
        assert_eq!(
            null_specs.periodic_config().unwrap().cron_specs(),
            ["@daily"]
        );
        assert!(!null_specs.is_periodic_active());
    }
}
