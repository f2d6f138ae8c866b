//! Scaling events (Nomad's `ScalingEvent`): what each `job scale` of a task group did, kept
//! per group, newest first, at most [`TRACKED_SCALING_EVENTS`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Nomad's `JobTrackedScalingEvents`.
pub const TRACKED_SCALING_EVENTS: usize = 20;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScalingEvent {
    /// Unix nanoseconds.
    #[serde(rename = "Time")]
    pub time: i64,
    /// The count asked for; `None` for an event without a count change.
    #[serde(rename = "Count")]
    pub count: Option<i64>,
    #[serde(rename = "PreviousCount")]
    pub previous_count: i64,
    #[serde(rename = "Message")]
    pub message: String,
    #[serde(rename = "Error")]
    pub error: bool,
    #[serde(rename = "Meta")]
    pub meta: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(rename = "EvalID")]
    pub eval_id: Option<String>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
}

/// A job's scaling events by group (Nomad's `JobScalingEvents.ScalingEvents`).
pub type ScalingEvents = BTreeMap<String, Vec<ScalingEvent>>;
