//! Cluster-wide operator settings: Nomad's scheduler configuration (`SchedulerConfiguration`),
//! as `/v1/operator/scheduler/configuration` reads and writes it.

use serde::{Deserialize, Serialize};

/// Prefer the fullest node that fits (Nomad's default).
pub const SCHEDULER_ALGORITHM_BINPACK: &str = "binpack";
/// Prefer the emptiest node.
pub const SCHEDULER_ALGORITHM_SPREAD: &str = "spread";

/// Which schedulers may preempt lower-priority allocations (Nomad's `PreemptionConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreemptionConfig {
    #[serde(rename = "SystemSchedulerEnabled")]
    pub system_scheduler_enabled: bool,
    #[serde(rename = "SysBatchSchedulerEnabled")]
    pub sysbatch_scheduler_enabled: bool,
    #[serde(rename = "BatchSchedulerEnabled")]
    pub batch_scheduler_enabled: bool,
    #[serde(rename = "ServiceSchedulerEnabled")]
    pub service_scheduler_enabled: bool,
}

/// Nomad's `SchedulerConfiguration`. `Default` is Go's zero value (what a request body that
/// omits fields means); [`SchedulerConfiguration::nomad_default`] is what a cluster starts with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedulerConfiguration {
    #[serde(rename = "SchedulerAlgorithm")]
    pub scheduler_algorithm: String,
    #[serde(rename = "PreemptionConfig")]
    pub preemption_config: PreemptionConfig,
    #[serde(rename = "MemoryOversubscriptionEnabled")]
    pub memory_oversubscription_enabled: bool,
    #[serde(rename = "RejectJobRegistration")]
    pub reject_job_registration: bool,
    #[serde(rename = "PauseEvalBroker")]
    pub pause_eval_broker: bool,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl SchedulerConfiguration {
    /// The configuration of a cluster nobody configured (Nomad's `DefaultSchedulerConfig`):
    /// binpack, preemption for system jobs only.
    pub fn nomad_default() -> Self {
        SchedulerConfiguration {
            scheduler_algorithm: SCHEDULER_ALGORITHM_BINPACK.into(),
            preemption_config: PreemptionConfig {
                system_scheduler_enabled: true,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Nomad's `Canonicalize`: an empty algorithm means binpack.
    pub fn canonicalize(&mut self) {
        if self.scheduler_algorithm.is_empty() {
            self.scheduler_algorithm = SCHEDULER_ALGORITHM_BINPACK.into();
        }
    }

    /// Nomad's `Validate`, with its text.
    pub fn validate(&self) -> Result<(), String> {
        match self.scheduler_algorithm.as_str() {
            "" | SCHEDULER_ALGORITHM_BINPACK | SCHEDULER_ALGORITHM_SPREAD => Ok(()),
            other => Err(format!("invalid scheduler algorithm: {other}")),
        }
    }

    /// The algorithm in force (an empty one is binpack).
    pub fn effective_algorithm(&self) -> &str {
        if self.scheduler_algorithm.is_empty() {
            SCHEDULER_ALGORITHM_BINPACK
        } else {
            &self.scheduler_algorithm
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_is_nomads() {
        let json = serde_json::to_value(SchedulerConfiguration::nomad_default()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "SchedulerAlgorithm": "binpack",
                "PreemptionConfig": {
                    "SystemSchedulerEnabled": true,
                    "SysBatchSchedulerEnabled": false,
                    "BatchSchedulerEnabled": false,
                    "ServiceSchedulerEnabled": false
                },
                "MemoryOversubscriptionEnabled": false,
                "RejectJobRegistration": false,
                "PauseEvalBroker": false,
                "CreateIndex": 0,
                "ModifyIndex": 0
            })
        );
    }

    #[test]
    fn omitted_fields_are_go_zero_values() {
        let c: SchedulerConfiguration =
            serde_json::from_str(r#"{"SchedulerAlgorithm":"spread"}"#).unwrap();
        assert!(!c.preemption_config.system_scheduler_enabled);
        assert_eq!(c.effective_algorithm(), "spread");
    }

    #[test]
    fn empty_algorithm_is_binpack_and_unknown_ones_are_refused() {
        let mut c = SchedulerConfiguration::default();
        assert!(c.validate().is_ok());
        assert_eq!(c.effective_algorithm(), "binpack");
        c.canonicalize();
        assert_eq!(c.scheduler_algorithm, "binpack");
        c.scheduler_algorithm = "roundrobin".into();
        assert_eq!(
            c.validate().unwrap_err(),
            "invalid scheduler algorithm: roundrobin"
        );
    }
}
