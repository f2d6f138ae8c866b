//! Node drains (Nomad's `node drain` and its leader-side drainer).
//!
//! `Server::drain_node` stores the node's `DrainStrategy` (the node turns ineligible) or clears
//! it. While this server leads, the drainer watches draining nodes and moves their allocations
//! off through the scheduler: it marks them for migration (desired transition `Migrate`) with
//! an evaluation of their job, and the reconciler places each replacement on another node and
//! stops the original. Per task group at most `migrate.max_parallel` allocations are in flight:
//! marked ones not yet stopped, plus the group's allocations elsewhere that are not healthy yet
//! (running for `migrate.min_healthy_time`, judged from their task states). Batch allocations
//! are left to finish until the deadline, as Nomad does. At the deadline (`-1`: at once)
//! everything left is marked. When only system allocations remain they are stopped (unless
//! `IgnoreSystemJobs`), and then the drain is complete: the strategy is cleared and the node
//! stays ineligible.
//!
//! [`plan`] is pure logic over a snapshot; each step it asks for is a log entry, so a new
//! leader resumes where the last stopped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use drover_state::{StateSnapshot, Table};
use drover_structs::time::{format_rfc3339_nanos, now_nanos, parse_rfc3339_nanos};
use drover_structs::{ALLOC_DESIRED_RUN, ALLOC_DESIRED_STOP, Allocation, Evaluation, Job, Node};
use serde_json::{Value, json};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::leader_task::LeaderTask;
use crate::server::{Inner, Server};

/// Nomad's description of an allocation the drainer stops.
const ALLOC_DRAINED: &str = "alloc is being migrated";
/// A pass runs at least this often, so health (time running) is noticed without a write.
const PASS_WAIT: Duration = Duration::from_millis(500);

/// Nomad's `DrainSpec`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainSpec {
    /// Nanoseconds; negative: force at once; 0: no deadline.
    pub deadline: i64,
    pub ignore_system_jobs: bool,
}

/// The node's `DrainStrategy` JSON for `spec`, started at `now` (Unix ns).
pub fn strategy_json(spec: DrainSpec, now: i64) -> Value {
    let force = if spec.deadline > 0 {
        format_rfc3339_nanos(now.saturating_add(spec.deadline))
    } else {
        "0001-01-01T00:00:00Z".to_string()
    };
    json!({
        "DrainSpec": {"Deadline": spec.deadline, "IgnoreSystemJobs": spec.ignore_system_jobs},
        "ForceDeadline": force,
        "StartedAt": format_rfc3339_nanos(now),
    })
}

/// What a stored strategy asks.
struct Strategy {
    ignore_system: bool,
    /// The deadline passed (or the drain is forced).
    forced: bool,
}

impl Strategy {
    fn of(node: &Node, now: i64) -> Option<Strategy> {
        let s = node.drain_strategy.as_ref().filter(|s| !s.is_null())?;
        let deadline = s["DrainSpec"]["Deadline"].as_i64().unwrap_or(0);
        let force_at = s["ForceDeadline"]
            .as_str()
            .and_then(parse_rfc3339_nanos)
            .filter(|t| *t > 0);
        Some(Strategy {
            ignore_system: s["DrainSpec"]["IgnoreSystemJobs"]
                .as_bool()
                .unwrap_or(false),
            forced: deadline < 0 || force_at.is_some_and(|t| now >= t),
        })
    }
}

/// What one pass asks for.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct DrainWork {
    /// Allocations to mark for migration, with their jobs.
    pub migrate: Vec<(Arc<Allocation>, Arc<Job>)>,
    /// System allocations to stop on nodes whose other allocations are gone.
    pub stop_system: Vec<String>,
    /// Nodes whose drain is done.
    pub complete: Vec<String>,
}

fn live(a: &Allocation) -> bool {
    a.desired_status == ALLOC_DESIRED_RUN && !a.client_terminal()
}

fn is_system(job: &Job) -> bool {
    matches!(
        job.job_type.as_str(),
        drover_structs::JOB_TYPE_SYSTEM | drover_structs::JOB_TYPE_SYSBATCH
    )
}

/// Running, every task of it running for at least `min_healthy` (Nomad's `task_states`
/// health check).
fn healthy(a: &Allocation, now: i64, min_healthy: i64) -> bool {
    if a.client_status != drover_structs::ALLOC_CLIENT_RUNNING {
        return false;
    }
    let Some(states) = a.task_states.as_ref().filter(|s| !s.is_empty()) else {
        return false;
    };
    states.values().all(|t| {
        t.state == "running"
            && t.started_at
                .as_deref()
                .and_then(parse_rfc3339_nanos)
                .is_some_and(|at| now.saturating_sub(at) >= min_healthy)
    })
}

/// The work every draining node needs now.
pub(crate) fn plan(snap: &StateSnapshot, now: i64) -> DrainWork {
    let mut work = DrainWork::default();
    for node in snap.nodes() {
        let Some(strategy) = Strategy::of(&node, now) else {
            continue;
        };
        let mut remaining = 0usize;
        let mut system = Vec::new();
        // (namespace, job, group) -> this node's live allocations of it.
        let mut groups: BTreeMap<(String, String, String), Vec<Arc<Allocation>>> = BTreeMap::new();
        for a in snap
            .allocs_by_node(&node.id)
            .into_iter()
            .filter(|a| live(a))
        {
            let Some(job) = a.job.clone() else { continue };
            if is_system(&job) {
                system.push(a.id.clone());
                continue;
            }
            remaining += 1;
            groups
                .entry((a.namespace.clone(), a.job_id.clone(), a.task_group.clone()))
                .or_default()
                .push(a);
        }
        for ((ns, job_id, group), on_node) in groups {
            let job = snap
                .job(&ns, &job_id)
                .or_else(|| on_node[0].job.clone())
                .expect("an allocation with a job was kept above");
            let unmarked: Vec<&Arc<Allocation>> = on_node
                .iter()
                .filter(|a| a.desired_transition.migrate != Some(true))
                .collect();
            if strategy.forced {
                work.migrate
                    .extend(unmarked.into_iter().map(|a| (a.clone(), job.clone())));
                continue;
            }
            if job.is_batch_like() {
                // Batch work may finish where it is until the deadline.
                continue;
            }
            let migrate = job
                .lookup_task_group(&group)
                .and_then(|tg| tg.migrate.clone())
                .unwrap_or_default();
            let max_parallel = migrate.max_parallel.max(1) as usize;
            let marked = on_node.len() - unmarked.len();
            let unhealthy_elsewhere = snap
                .allocs_by_job(&ns, &job_id)
                .iter()
                .filter(|a| a.task_group == group && a.node_id != node.id && live(a))
                .filter(|a| !healthy(a, now, migrate.min_healthy_time))
                .count();
            let allowed = max_parallel.saturating_sub(marked + unhealthy_elsewhere);
            work.migrate.extend(
                unmarked
                    .into_iter()
                    .take(allowed)
                    .map(|a| (a.clone(), job.clone())),
            );
        }
        if remaining == 0 {
            if strategy.ignore_system || system.is_empty() {
                work.complete.push(node.id.clone());
            } else {
                work.stop_system.extend(system);
            }
        }
    }
    work
}

/// Carries out one pass's work.
async fn apply(inner: &Inner, work: DrainWork) -> Result<(), ServerError> {
    if !work.migrate.is_empty() {
        let mut evals: BTreeMap<(String, String), Evaluation> = BTreeMap::new();
        for (a, job) in &work.migrate {
            evals
                .entry((job.namespace.clone(), job.id.clone()))
                .or_insert_with(|| {
                    let mut e = Evaluation::for_job(job, "node-drain");
                    e.node_id = a.node_id.clone();
                    e
                });
        }
        let ids: Vec<String> = work.migrate.iter().map(|(a, _)| a.id.clone()).collect();
        tracing::info!(
            allocs = ids.len(),
            "drain: allocations marked for migration"
        );
        let evals: Vec<Evaluation> = evals.into_values().collect();
        inner
            .apply(LogEntry::AllocMigrate {
                ids,
                evals: evals.clone(),
            })
            .await?;
        // Committed: now the schedulers may take them.
        inner.broker.enqueue_all(evals);
    }
    if !work.stop_system.is_empty() {
        inner
            .apply(LogEntry::AllocDesiredUpdate {
                ids: work.stop_system,
                desired_status: ALLOC_DESIRED_STOP.into(),
                desired_description: ALLOC_DRAINED.into(),
                evals: Vec::new(),
            })
            .await?;
    }
    for node_id in work.complete {
        tracing::info!(node = %node_id, "drain complete");
        inner
            .apply(LogEntry::NodeDrain {
                node_id,
                strategy: None,
                mark_eligible: false,
                event: "Node drain complete".into(),
                at: now_nanos(),
            })
            .await?;
    }
    Ok(())
}

/// The drainer, started and stopped with leadership.
#[derive(Default)]
pub(crate) struct NodeDrainer {
    task: LeaderTask,
}

impl NodeDrainer {
    pub(crate) fn start(&self, inner: Arc<Inner>) {
        self.task.start(async move {
            let watched = [Table::Nodes, Table::Allocs];
            let mut seen = 0;
            loop {
                let snap = inner.state.wait_for(&watched, seen, PASS_WAIT).await;
                seen = snap.max_index(&watched).max(1);
                let work = plan(&snap, now_nanos());
                if work != DrainWork::default()
                    && let Err(e) = apply(&inner, work).await
                {
                    tracing::warn!(error = %e, "drain pass failed");
                }
                // A burst of writes is handled in one pass.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    pub(crate) fn stop(&self) {
        self.task.stop();
    }
}

impl Server {
    /// Starts (`spec` given) or stops draining `node_id`; stopping with `mark_eligible` makes
    /// it eligible again. Returns the write's index.
    pub async fn drain_node(
        &self,
        node_id: &str,
        spec: Option<DrainSpec>,
        mark_eligible: bool,
    ) -> Result<u64, ServerError> {
        match self
            .route(crate::rpc::Request::DrainNode {
                node_id: node_id.into(),
                deadline: spec.map(|s| s.deadline),
                ignore_system_jobs: spec.is_some_and(|s| s.ignore_system_jobs),
                mark_eligible,
            })
            .await?
        {
            crate::rpc::Reply::Index(index) => Ok(index),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    pub(crate) async fn drain_node_here(
        &self,
        node_id: &str,
        spec: Option<DrainSpec>,
        mark_eligible: bool,
    ) -> Result<u64, ServerError> {
        let Some(node) = self.snapshot().node(node_id) else {
            return Err(ServerError::NotFound(format!("node {node_id} not found")));
        };
        let (strategy, event) = match spec {
            Some(spec) => (
                Some(strategy_json(spec, now_nanos())),
                "Node drain strategy set",
            ),
            None if node.drain_strategy.is_some() => (None, "Node drain disabled"),
            None => (None, "Node drain strategy cleared"),
        };
        let index = self
            .inner
            .apply(LogEntry::NodeDrain {
                node_id: node_id.into(),
                strategy,
                mark_eligible,
                event: event.into(),
                at: now_nanos(),
            })
            .await?;
        if spec.is_none() && mark_eligible {
            self.inner.unblock_evals();
            self.evaluate_system_jobs_for(node_id).await?;
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_state::StateStore;
    use drover_structs::{ALLOC_CLIENT_RUNNING, MigrateStrategy, TaskGroup, TaskState};

    const SEC: i64 = 1_000_000_000;

    fn job(kind: &str, max_parallel: i64) -> Job {
        Job {
            id: "web".into(),
            name: "web".into(),
            namespace: "default".into(),
            job_type: kind.into(),
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count: 4,
                migrate: Some(MigrateStrategy {
                    max_parallel,
                    min_healthy_time: 10 * SEC,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn node(id: &str, strategy: Option<Value>) -> Node {
        Node {
            id: id.into(),
            drain_strategy: strategy,
            ..Default::default()
        }
    }

    fn alloc(id: &str, node: &str, i: usize, started: i64) -> Allocation {
        let mut states = BTreeMap::new();
        states.insert(
            "t".to_string(),
            TaskState {
                state: "running".into(),
                started_at: Some(format_rfc3339_nanos(started)),
                ..Default::default()
            },
        );
        Allocation {
            id: id.into(),
            namespace: "default".into(),
            job_id: "web".into(),
            task_group: "g".into(),
            name: format!("web.g[{i}]"),
            node_id: node.into(),
            desired_status: ALLOC_DESIRED_RUN.into(),
            client_status: ALLOC_CLIENT_RUNNING.into(),
            task_states: Some(states),
            ..Default::default()
        }
    }

    fn state(job: Job, allocs: Vec<Allocation>, now: i64, deadline: i64) -> StateStore {
        let s = StateStore::new();
        s.upsert_node(1, node("n1", None));
        s.upsert_node(1, node("n2", None));
        let spec = DrainSpec {
            deadline,
            ignore_system_jobs: false,
        };
        s.update_node_drain(2, "n1", Some(strategy_json(spec, now)), false, "set", now)
            .unwrap();
        s.upsert_job(3, job.clone());
        s.upsert_plan_results(4, Some(Arc::new(job)), vec![], allocs, vec![]);
        s
    }

    fn ids(work: &DrainWork) -> Vec<&str> {
        work.migrate.iter().map(|(a, _)| a.id.as_str()).collect()
    }

    #[test]
    fn a_draining_node_moves_max_parallel_allocations_at_a_time() {
        let now = now_nanos();
        let allocs = (0..4).map(|i| alloc(&format!("a{i}"), "n1", i, now - 60 * SEC));
        let s = state(job("service", 1), allocs.collect(), now, 0);
        let work = plan(&s.snapshot(), now);
        assert_eq!(ids(&work), vec!["a0"]);
        assert!(work.complete.is_empty());
        // Marked and not yet replaced: nothing more until it is.
        s.mark_allocs_for_migration(5, &["a0".to_string()], vec![]);
        assert!(plan(&s.snapshot(), now).migrate.is_empty());
    }

    #[test]
    fn an_unhealthy_replacement_elsewhere_holds_back_the_next_migration() {
        let now = now_nanos();
        let mut allocs: Vec<Allocation> = (1..4)
            .map(|i| alloc(&format!("a{i}"), "n1", i, now - 60 * SEC))
            .collect();
        // The replacement of a0 started 2 s ago; min_healthy_time is 10 s.
        allocs.push(alloc("r0", "n2", 0, now - 2 * SEC));
        let s = state(job("service", 1), allocs, now, 0);
        assert!(plan(&s.snapshot(), now).migrate.is_empty());
        // Ten seconds later it is healthy: the next one goes.
        assert_eq!(ids(&plan(&s.snapshot(), now + 9 * SEC)), vec!["a1"]);
    }

    #[test]
    fn max_parallel_two_moves_two_and_a_passed_deadline_moves_everything() {
        let now = now_nanos();
        let allocs: Vec<Allocation> = (0..4)
            .map(|i| alloc(&format!("a{i}"), "n1", i, now - 60 * SEC))
            .collect();
        let s = state(job("service", 2), allocs.clone(), now, 0);
        assert_eq!(plan(&s.snapshot(), now).migrate.len(), 2);
        let s = state(job("service", 1), allocs, now, 5 * SEC);
        assert_eq!(plan(&s.snapshot(), now + 6 * SEC).migrate.len(), 4);
    }

    #[test]
    fn batch_allocations_wait_for_the_deadline() {
        let now = now_nanos();
        let allocs = vec![alloc("b0", "n1", 0, now - 60 * SEC)];
        let s = state(job("batch", 1), allocs.clone(), now, 0);
        assert!(plan(&s.snapshot(), now).migrate.is_empty());
        let s = state(job("batch", 1), allocs, now, -1);
        assert_eq!(ids(&plan(&s.snapshot(), now)), vec!["b0"]);
    }

    #[test]
    fn a_node_with_nothing_left_completes_after_its_system_allocations_stop() {
        let now = now_nanos();
        let mut sys = alloc("s0", "n1", 0, now - 60 * SEC);
        sys.job_id = "sys".into();
        let mut sys_job = job("system", 1);
        sys_job.id = "sys".into();
        let s = state(sys_job, vec![sys], now, 0);
        let work = plan(&s.snapshot(), now);
        assert_eq!(work.stop_system, vec!["s0".to_string()]);
        assert!(work.complete.is_empty());
        s.update_allocs_desired(6, &["s0".to_string()], ALLOC_DESIRED_STOP, ALLOC_DRAINED);
        let work = plan(&s.snapshot(), now);
        assert_eq!(work.complete, vec!["n1".to_string()]);
    }
}
