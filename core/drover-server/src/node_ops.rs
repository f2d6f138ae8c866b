//! Operator calls on one node that create evaluations: purge (`PUT /v1/node/:id/purge`,
//! Nomad's `Node.Deregister`) and evaluate (`PUT /v1/node/:id/evaluate`, `Node.Evaluate`).
//! Both evaluate every job with an allocation on the node and every system job, as Nomad's
//! `createNodeEvals` does; a purge also removes the node in the same entry, so its
//! allocations are found lost by the scheduler and replaced.

use std::collections::BTreeSet;

use drover_state::StateSnapshot;
use drover_structs::{Evaluation, JOB_TYPE_SYSBATCH, JOB_TYPE_SYSTEM, Node, TRIGGER_NODE_UPDATE};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::server::Server;

/// What purge and evaluate answer (Nomad's `NodePurgeResponse` / `NodeEvalResponse` fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvalResult {
    pub eval_ids: Vec<String>,
    /// The index of the entry that wrote the evaluations (0 when none were needed).
    pub eval_create_index: u64,
    /// The node's `ModifyIndex` when the call was made.
    pub node_modify_index: u64,
}

/// One evaluation per job with an allocation on `node_id` and per running system or sysbatch
/// job, each once.
pub(crate) fn node_evals(
    snap: &StateSnapshot,
    node_id: &str,
    node_modify_index: u64,
) -> Vec<Evaluation> {
    let mut jobs: BTreeSet<(String, String)> = snap
        .allocs_by_node(node_id)
        .iter()
        .map(|a| (a.namespace.clone(), a.job_id.clone()))
        .collect();
    jobs.extend(
        running_system_jobs(snap)
            .iter()
            .map(|j| (j.namespace.clone(), j.id.clone())),
    );
    jobs.iter()
        .filter_map(|(ns, id)| snap.job(ns, id))
        .map(|job| {
            let mut e = Evaluation::for_job(&job, TRIGGER_NODE_UPDATE);
            e.node_id = node_id.to_string();
            e.node_modify_index = node_modify_index;
            e
        })
        .collect()
}

/// Nomad's `shouldCreateNodeEval` for a node that stays ready: a field the feasibility
/// checks read changed. Drivers count by detection and health only (their update times move
/// on every fingerprint).
pub(crate) fn feasibility_changed(old: &Node, new: &Node) -> bool {
    let drivers = |n: &Node| -> Vec<(String, bool, bool)> {
        n.drivers
            .iter()
            .map(|(name, d)| (name.clone(), d.detected, d.healthy))
            .collect()
    };
    old.datacenter != new.datacenter
        || old.name != new.name
        || old.node_class != new.node_class
        || old.attributes != new.attributes
        || old.meta != new.meta
        || old.host_volumes != new.host_volumes
        || drivers(old) != drivers(new)
}

/// The system and sysbatch jobs that place on every node they fit: running, neither periodic
/// nor parameterized parents.
pub(crate) fn running_system_jobs(
    snap: &StateSnapshot,
) -> Vec<std::sync::Arc<drover_structs::Job>> {
    snap.jobs(None)
        .into_iter()
        .filter(|j| {
            !j.stop
                && (j.job_type == JOB_TYPE_SYSTEM || j.job_type == JOB_TYPE_SYSBATCH)
                && !j.is_periodic()
                && !j.is_parameterized()
        })
        .collect()
}

impl Server {
    fn known_node_index(&self, node_id: &str) -> Result<u64, ServerError> {
        if node_id.is_empty() {
            return Err(ServerError::BadRequest("missing node ID".into()));
        }
        self.snapshot()
            .node(node_id)
            .map(|n| n.modify_index)
            .ok_or_else(|| ServerError::NotFound("node not found".into()))
    }

    /// Removes a node and evaluates what ran on it (on the leader).
    pub(crate) async fn purge_node_here(
        &self,
        node_id: &str,
    ) -> Result<NodeEvalResult, ServerError> {
        let node_modify_index = self.known_node_index(node_id)?;
        let evals = node_evals(&self.snapshot(), node_id, node_modify_index);
        let index = self
            .inner
            .apply(LogEntry::NodeDeregister {
                node_ids: vec![node_id.to_string()],
                evals: evals.clone(),
            })
            .await?;
        self.inner.heartbeats.remove(node_id);
        Ok(self.enqueue_node_evals(evals, index, node_modify_index))
    }

    /// Evaluates every job that has (or, for system jobs, could have) work on a node.
    pub(crate) async fn evaluate_node_here(
        &self,
        node_id: &str,
    ) -> Result<NodeEvalResult, ServerError> {
        let node_modify_index = self.known_node_index(node_id)?;
        let evals = node_evals(&self.snapshot(), node_id, node_modify_index);
        if evals.is_empty() {
            return Ok(NodeEvalResult {
                node_modify_index,
                ..NodeEvalResult::default()
            });
        }
        let index = self
            .inner
            .apply(LogEntry::EvalUpdate {
                evals: evals.clone(),
            })
            .await?;
        Ok(self.enqueue_node_evals(evals, index, node_modify_index))
    }

    fn enqueue_node_evals(
        &self,
        evals: Vec<Evaluation>,
        index: u64,
        node_modify_index: u64,
    ) -> NodeEvalResult {
        let eval_ids = evals.iter().map(|e| e.id.clone()).collect();
        for mut e in evals {
            e.create_index = index;
            e.modify_index = index;
            self.inner.enqueue_when_due(e);
        }
        NodeEvalResult {
            eval_ids,
            eval_create_index: index,
            node_modify_index,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_state::StateStore;
    use drover_structs::{Allocation, Job};

    fn job(id: &str, job_type: &str) -> Job {
        Job {
            id: id.into(),
            name: id.into(),
            namespace: "default".into(),
            job_type: job_type.into(),
            ..Default::default()
        }
    }

    #[test]
    fn only_fields_the_feasibility_checks_read_make_a_ready_node_reevaluated() {
        let mut old = Node {
            id: "n1".into(),
            ..Default::default()
        };
        old.drivers.insert("raw_exec".into(), Default::default());
        let mut new = old.clone();
        new.status_updated_at = 99;
        new.events = Some(vec![Default::default()]);
        if let Some(d) = new.drivers.get_mut("raw_exec") {
            d.update_time = "later".into();
        }
        assert!(!feasibility_changed(&old, &new));
        new.meta.insert("rack".into(), "r2".into());
        assert!(feasibility_changed(&old, &new));
        let mut unhealthy = old.clone();
        if let Some(d) = unhealthy.drivers.get_mut("raw_exec") {
            d.healthy = !d.healthy;
        }
        assert!(feasibility_changed(&old, &unhealthy));
    }

    #[test]
    fn a_node_evaluation_covers_its_jobs_once_and_every_system_job() {
        let state = StateStore::new();
        state.upsert_node(
            1,
            Node {
                id: "n1".into(),
                datacenter: "dc1".into(),
                ..Default::default()
            },
        );
        state.upsert_job(2, job("web", "service"));
        state.upsert_job(3, job("agent", JOB_TYPE_SYSTEM));
        state.upsert_job(4, job("other", "service"));
        let alloc = |id: &str| Allocation {
            id: id.into(),
            namespace: "default".into(),
            job_id: "web".into(),
            node_id: "n1".into(),
            task_group: "g".into(),
            ..Default::default()
        };
        let jv = state.snapshot().job("default", "web");
        state.upsert_plan_results(5, jv, vec![], vec![alloc("a1"), alloc("a2")], vec![]);
        let evals = node_evals(&state.snapshot(), "n1", 7);
        let mut jobs: Vec<&str> = evals.iter().map(|e| e.job_id.as_str()).collect();
        jobs.sort();
        assert_eq!(jobs, ["agent", "web"]);
        assert!(evals.iter().all(|e| e.node_id == "n1"
            && e.node_modify_index == 7
            && e.triggered_by == TRIGGER_NODE_UPDATE));
    }
}
