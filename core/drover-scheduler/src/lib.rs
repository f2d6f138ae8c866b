//! The scheduler: pure placement logic. Given a consistent view of cluster state and an
//! evaluation, it produces a plan (allocations to place and to stop) and submits it through a
//! [`Planner`]; it never writes state itself.
//!
//! Must not depend on: any IO, tokio, the state store's implementation, Raft or the server. It sees
//! state only through the [`State`] trait, so tests drive it with an in-memory harness and servers
//! with snapshots of their store.

use std::sync::Arc;

use drover_structs::{Allocation, Evaluation, Job, Node, Plan, PlanResult};

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
}

/// The scheduler's way out: plans, evaluation updates and follow-up evaluations go through it.
pub trait Planner {
    /// Submits a plan. The applier re-checks it against the newest state and commits what still
    /// fits. When the result has a non-zero `refresh_index`, the returned state (at or after that
    /// index) replaces the scheduler's view and the remainder should be retried.
    fn submit_plan(&mut self, plan: Plan)
    -> Result<(PlanResult, Option<Box<dyn State>>), SchedulerError>;
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
