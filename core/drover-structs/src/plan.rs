//! Plans: what a scheduler wants changed, and what the plan applier committed of it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::alloc::Allocation;
use crate::job::Job;

/// A scheduler's proposal for one evaluation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub eval_id: String,
    pub priority: i64,
    /// The job version the placements run; `None` when the job was deregistered.
    pub job: Option<Arc<Job>>,
    /// Allocations to stop, by node. Each carries the new desired status and description.
    pub node_update: BTreeMap<String, Vec<Allocation>>,
    /// New or updated allocations, by node.
    pub node_allocation: BTreeMap<String, Vec<Allocation>>,
    /// Allocations to evict so that a placement fits, by node (Nomad's `NodePreemptions`).
    /// Each carries desired status `evict`, `PreemptedByAllocation` and the description
    /// "Preempted by alloc ID <id>"; the applier checks fit without them and commits them
    /// with the placements.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_preemptions: BTreeMap<String, Vec<Allocation>>,
    /// The state index the scheduler planned against.
    pub snapshot_index: u64,
    /// All or nothing: if any node no longer fits, commit nothing.
    pub all_at_once: bool,
    /// A deployment the scheduler created (Nomad's plan `Deployment`), stored before the
    /// placements that join it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<crate::deployment::Deployment>,
    /// Deployment status changes (cancelled, successful).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployment_updates: Vec<crate::deployment::DeploymentStatusUpdate>,
    /// What the scheduler decided per task group, filled only for an evaluation that asks
    /// for it (`AnnotatePlan`: a `job plan` dry run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<PlanAnnotations>,
}

/// Nomad's `PlanAnnotations`: the scheduler's decisions for a dry run, shown by `job plan`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanAnnotations {
    #[serde(rename = "DesiredTGUpdates")]
    pub desired_tg_updates: BTreeMap<String, DesiredUpdates>,
    /// Allocations the plan would preempt (Nomad's `PreemptedAllocs`, allocation stubs).
    #[serde(rename = "PreemptedAllocs")]
    pub preempted_allocs: Option<Vec<serde_json::Value>>,
}

/// Nomad's `DesiredUpdates`: how many allocations of one task group the plan would touch, and how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredUpdates {
    #[serde(rename = "Ignore")]
    pub ignore: u64,
    #[serde(rename = "Place")]
    pub place: u64,
    #[serde(rename = "Migrate")]
    pub migrate: u64,
    #[serde(rename = "Stop")]
    pub stop: u64,
    #[serde(rename = "InPlaceUpdate")]
    pub in_place_update: u64,
    #[serde(rename = "DestructiveUpdate")]
    pub destructive_update: u64,
    #[serde(rename = "Canary")]
    pub canary: u64,
    #[serde(rename = "Preemptions")]
    pub preemptions: u64,
}

impl Plan {
    pub fn is_no_op(&self) -> bool {
        self.node_update.is_empty()
            && self.node_allocation.is_empty()
            && self.node_preemptions.is_empty()
            && self.deployment.is_none()
            && self.deployment_updates.is_empty()
    }

    pub fn append_stop(&mut self, alloc: &Allocation, desc: &str, client_status: Option<&str>) {
        let mut a = alloc.clone();
        a.job = None;
        a.desired_status = crate::alloc::ALLOC_DESIRED_STOP.to_string();
        a.desired_description = desc.to_string();
        if let Some(cs) = client_status {
            a.client_status = cs.to_string();
        }
        self.node_update
            .entry(a.node_id.clone())
            .or_default()
            .push(a);
    }

    /// Records that `alloc` is evicted to make room for the allocation `preempted_by`
    /// (Nomad's `AppendPreemptedAlloc`).
    pub fn append_preempted(&mut self, alloc: &Allocation, preempted_by: &str) {
        let mut a = alloc.clone();
        a.job = None;
        a.desired_status = crate::alloc::ALLOC_DESIRED_EVICT.to_string();
        a.desired_description = format!("Preempted by alloc ID {preempted_by}");
        a.preempted_by_allocation = preempted_by.to_string();
        self.node_preemptions
            .entry(a.node_id.clone())
            .or_default()
            .push(a);
    }

    pub fn append_alloc(&mut self, alloc: Allocation) {
        self.node_allocation
            .entry(alloc.node_id.clone())
            .or_default()
            .push(alloc);
    }
}

/// What the plan applier did with a plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanResult {
    pub node_update: BTreeMap<String, Vec<Allocation>>,
    pub node_allocation: BTreeMap<String, Vec<Allocation>>,
    /// The preemptions committed, by node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_preemptions: BTreeMap<String, Vec<Allocation>>,
    /// Non-zero when part of the plan was refused: the scheduler must refresh its state to at
    /// least this index and retry what was left out.
    pub refresh_index: u64,
    /// Raft index at which the committed part was applied.
    pub alloc_index: u64,
}

impl PlanResult {
    /// Whether everything the plan asked for was committed.
    pub fn full_commit(&self, plan: &Plan) -> (bool, usize, usize) {
        let expected: usize = plan.node_allocation.values().map(Vec::len).sum::<usize>()
            + plan.node_update.values().map(Vec::len).sum::<usize>();
        let actual: usize = self.node_allocation.values().map(Vec::len).sum::<usize>()
            + self.node_update.values().map(Vec::len).sum::<usize>();
        (expected == actual, expected, actual)
    }
}
