//! The scheduler: pure placement logic. Given a consistent view of cluster state and an
//! evaluation, it produces a plan (allocations to place, to stop and to preempt) and submits it
//! through a [`Planner`]; it never writes state itself. Service and batch jobs go through the
//! generic scheduler (reconcile, then rank a few candidate nodes per placement), system and
//! sysbatch jobs through the system scheduler (one allocation per feasible node).
//!
//! Must not depend on: any IO, tokio, the state store's implementation, Raft or the server. It sees
//! state only through the [`State`] trait, so tests drive it with an in-memory harness and servers
//! with snapshots of their store.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_structs::{
    Allocation, CsiVolume, EVAL_STATUS_FAILED, Evaluation, JOB_TYPE_BATCH, JOB_TYPE_SERVICE,
    JOB_TYPE_SYSBATCH, JOB_TYPE_SYSTEM, Job, Node, Plan, PlanResult,
};

pub mod annotate;
pub mod fit;
pub mod harness;

mod constraints;
mod context;
mod csi;
mod feasible;
mod generic;
mod host_volumes;
mod network;
mod preempt;
mod rank;
mod reconcile;
mod reschedule;
mod spread;
mod stack;
mod system;
mod util;
mod version;

/// How the scheduler scores nodes that fit: Nomad's `scheduler_algorithm`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Algorithm {
    /// Prefer the fullest node that fits (Nomad's default, `ScoreFitBinPack`).
    #[default]
    Binpack,
    /// Prefer the emptiest node (`ScoreFitSpread`).
    Spread,
}

/// Cluster-wide scheduler settings (Nomad's `SchedulerConfiguration` plus the client's dynamic
/// port range, which Nomad takes from each node's config and Drover keeps cluster-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    pub algorithm: Algorithm,
    /// Lowest port handed out for dynamic ports.
    pub min_dynamic_port: u16,
    /// Highest port handed out for dynamic ports.
    pub max_dynamic_port: u16,
    /// Nomad's `PreemptionConfig.SystemSchedulerEnabled` (default true).
    pub preemption_system: bool,
    /// Nomad's `PreemptionConfig.SysBatchSchedulerEnabled` (default false).
    pub preemption_sysbatch: bool,
    /// Nomad's `PreemptionConfig.BatchSchedulerEnabled` (default false).
    pub preemption_batch: bool,
    /// Nomad's `PreemptionConfig.ServiceSchedulerEnabled` (default false).
    pub preemption_service: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            algorithm: Algorithm::Binpack,
            min_dynamic_port: 20000,
            max_dynamic_port: 32000,
            preemption_system: true,
            preemption_sysbatch: false,
            preemption_batch: false,
            preemption_service: false,
        }
    }
}

impl SchedulerConfig {
    /// This configuration with the operator's settings applied (Nomad's stored
    /// `SchedulerConfiguration`: the algorithm and the preemption switches); the dynamic port
    /// range stays.
    pub fn with_operator_config(self, op: &drover_structs::SchedulerConfiguration) -> Self {
        let p = &op.preemption_config;
        SchedulerConfig {
            algorithm: if op.effective_algorithm() == drover_structs::SCHEDULER_ALGORITHM_SPREAD {
                Algorithm::Spread
            } else {
                Algorithm::Binpack
            },
            preemption_system: p.system_scheduler_enabled,
            preemption_sysbatch: p.sysbatch_scheduler_enabled,
            preemption_batch: p.batch_scheduler_enabled,
            preemption_service: p.service_scheduler_enabled,
            ..self
        }
    }

    /// Whether placements of jobs of this type may preempt lower-priority allocations.
    pub fn preemption_enabled(&self, job_type: &str) -> bool {
        match job_type {
            JOB_TYPE_SYSTEM => self.preemption_system,
            JOB_TYPE_SYSBATCH => self.preemption_sysbatch,
            JOB_TYPE_BATCH => self.preemption_batch,
            JOB_TYPE_SERVICE => self.preemption_service,
            _ => false,
        }
    }
}

/// Processes one evaluation: reconciles the job's allocations with its spec, places what is
/// missing, submits the plan through `planner` and records the evaluation's outcome with
/// `planner.update_eval` (plus blocked or follow-up evaluations through `planner.create_eval`).
///
/// Service and batch jobs go to the generic scheduler, system and sysbatch jobs to the system
/// scheduler (one allocation per feasible node). Other types fail the evaluation with
/// `SchedulerError::UnsupportedJobType`.
pub fn process_eval(
    state: &dyn State,
    planner: &mut dyn Planner,
    eval: &Evaluation,
    config: &SchedulerConfig,
) -> Result<(), SchedulerError> {
    match eval.eval_type.as_str() {
        JOB_TYPE_SERVICE | JOB_TYPE_BATCH => generic::process(state, planner, eval, config),
        JOB_TYPE_SYSTEM | JOB_TYPE_SYSBATCH => system::process(state, planner, eval, config),
        other => {
            let mut failed = eval.clone();
            failed.status = EVAL_STATUS_FAILED.to_string();
            failed.status_description = format!(
                "job type {other:?} cannot be scheduled: service, batch, system and sysbatch are"
            );
            failed.snapshot_index = state.index();
            failed.modify_time = drover_structs::time::now_nanos();
            planner.update_eval(failed)?;
            Err(SchedulerError::UnsupportedJobType(other.to_string()))
        }
    }
}

/// A consistent, read-only view of cluster state at one Raft index.
pub trait State: Send + Sync {
    /// The Raft index this view reflects.
    fn index(&self) -> u64;
    fn job(&self, namespace: &str, id: &str) -> Option<Arc<Job>>;
    /// Every registered node, whatever its status.
    fn nodes(&self) -> Vec<Arc<Node>>;
    fn node(&self, id: &str) -> Option<Arc<Node>>;
    /// All allocations of a job (every version, terminal ones included).
    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>>;
    /// All allocations on a node (terminal ones included).
    fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>>;
    /// What the node's non-terminal allocations hold together, when the state keeps that up
    /// to date per node. The scheduler then reads a node's allocations only to preempt some;
    /// without it (`None`, the default) it sums `allocs_by_node` for every node it looks at,
    /// which grows with the allocations per node.
    fn node_usage(&self, node_id: &str) -> Option<Arc<NodeAllocUsage>> {
        let _ = node_id;
        None
    }
    /// One allocation by id (terminal ones included); the CSI check looks up the holders of
    /// a volume's write claims.
    fn alloc(&self, id: &str) -> Option<Arc<Allocation>>;
    /// A CSI volume with its plugin's health copied onto it (`Schedulable` and the plugin
    /// counts, as Nomad's `CSIVolumeByID` answers). A state without CSI knows no volumes.
    fn csi_volume(&self, namespace: &str, id: &str) -> Option<Arc<CsiVolume>> {
        let _ = (namespace, id);
        None
    }
    /// How many CSI volumes of each plugin the node's allocations use (Nomad's
    /// `CSIVolumesByNodeID`, counted by plugin id), checked against the node plugin's
    /// `MaxVolumes`.
    fn csi_volumes_per_plugin_on_node(&self, node_id: &str) -> BTreeMap<String, u64> {
        let _ = node_id;
        BTreeMap::new()
    }
    /// The job's newest deployment (Nomad's `LatestDeploymentByJobID`). A state without
    /// deployments knows none, and jobs then update without them.
    fn latest_deployment(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Option<Arc<drover_structs::Deployment>> {
        let _ = (namespace, job_id);
        None
    }
}

pub use drover_structs::usage::NodeAllocUsage;

/// The scheduler's way out: plans, evaluation updates and follow-up evaluations go through it.
pub trait Planner {
    /// Submits a plan. The applier re-checks it against the newest state and commits what still
    /// fits. When the result has a non-zero `refresh_index`, the returned state (at or after that
    /// index) replaces the scheduler's view and the remainder should be retried.
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Box<dyn State>>), SchedulerError>;
    /// Records the evaluation's outcome (status, description, failed placements, queued counts).
    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError>;
    /// Creates a follow-up evaluation (for example a blocked evaluation for placements that did not fit).
    fn create_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError>;
}

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("job type {0:?} is not supported by this scheduler")]
    UnsupportedJobType(String),
    #[error("planner: {0}")]
    Planner(String),
    #[error("plan for evaluation {0} was refused {1} times in a row")]
    MaxPlanAttempts(String, usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_config_sets_algorithm_and_preemption_and_keeps_ports() {
        let base = SchedulerConfig {
            min_dynamic_port: 30000,
            ..Default::default()
        };
        assert_eq!(
            base.with_operator_config(&drover_structs::SchedulerConfiguration::nomad_default()),
            base
        );
        let mut op = drover_structs::SchedulerConfiguration {
            scheduler_algorithm: "spread".into(),
            ..Default::default()
        };
        op.preemption_config.service_scheduler_enabled = true;
        let c = base.with_operator_config(&op);
        assert_eq!(c.algorithm, Algorithm::Spread);
        assert!(c.preemption_enabled(JOB_TYPE_SERVICE));
        assert!(!c.preemption_enabled(JOB_TYPE_SYSTEM));
        assert_eq!(c.min_dynamic_port, 30000);
        // An empty algorithm is binpack.
        op.scheduler_algorithm.clear();
        assert_eq!(base.with_operator_config(&op).algorithm, Algorithm::Binpack);
    }
}
