//! Writes to the tables. Each write is one FSM-applied entry with its Raft index; readers see
//! either all of it or none of it, because a write builds on a private copy of the tables and
//! swaps it in under the lock.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use drover_structs::time::{format_rfc3339_nanos, now_nanos};
use drover_structs::usage::NodeAllocUsage;
use drover_structs::*;
use tokio::sync::watch;

use crate::StateError;
use crate::tables::{AllocKey, NsKey, NsRef, StateSnapshot, Table, Tables, with_entry};

pub struct StateStore {
    tables: RwLock<Tables>,
    /// Carries the latest applied index; blocking queries wait on it.
    changes: watch::Sender<u64>,
}

impl Default for StateStore {
    fn default() -> Self {
        Self::new()
    }
}

fn key(ns: &str, id: &str) -> NsKey {
    (ns.to_string(), id.to_string())
}

impl StateStore {
    pub fn new() -> Self {
        StateStore {
            tables: RwLock::new(Tables::default()),
            changes: watch::channel(0).0,
        }
    }

    /// A consistent view of every table. O(1): the maps are persistent.
    pub fn snapshot(&self) -> StateSnapshot {
        // A poisoned lock means a writer panicked mid-way, leaving what it had written. It
        // runs on the Raft thread, whose driver stops on the panic: nothing writes after it,
        // and the next start rebuilds the state from the snapshot and the log.
        let t = self.tables.read().unwrap_or_else(|e| e.into_inner());
        StateSnapshot { t: t.clone() }
    }

    pub fn latest_index(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Waits until some table in `tables` has an index above `min_index`, or `timeout` passes.
    /// Returns the snapshot to answer from.
    pub async fn wait_for(
        &self,
        tables: &[Table],
        min_index: u64,
        timeout: Duration,
    ) -> StateSnapshot {
        let mut rx = self.changes.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let snap = self.snapshot();
            if min_index == 0 || snap.max_index(tables) > min_index {
                return snap;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return self.snapshot(),
            }
        }
    }

    /// Waits until the store has applied `index`.
    pub async fn wait_for_index(&self, index: u64, timeout: Duration) -> bool {
        let mut rx = self.changes.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|i| *i >= index))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Runs one write against a copy of the tables and publishes it.
    pub(crate) fn write<R>(
        &self,
        index: u64,
        touched: &[Table],
        f: impl FnOnce(&mut Tables) -> R,
    ) -> R {
        let mut guard = self.tables.write().unwrap_or_else(|e| e.into_inner());
        // In place: a copy to build on would keep every node the write touches shared, so
        // each would be copied and the old one freed (a restart replaying a log spent a third
        // of its time so). Readers hold snapshots of their own and never see a write midway.
        let t = &mut *guard;
        let r = f(t);
        for table in touched {
            t.indexes.insert(*table, index);
        }
        t.latest_index = t.latest_index.max(index);
        drop(guard);
        self.changes.send_replace(index);
        r
    }

    /// Replaces every table (snapshot restore).
    pub(crate) fn replace(&self, t: Tables) {
        let index = t.latest_index;
        *self.tables.write().unwrap_or_else(|e| e.into_inner()) = t;
        self.changes.send_replace(index);
    }

    /// Registers a job or a new version of it. The version increases when the spec or the stop
    /// flag changed; `JobModifyIndex` moves with it.
    pub fn upsert_job(&self, index: u64, job: Job) {
        self.upsert_job_with_source(index, job, None)
    }

    /// As [`StateStore::upsert_job`], keeping `submission` (the job file it came from) as the
    /// source of the version the job gets.
    pub fn upsert_job_with_source(
        &self,
        index: u64,
        mut job: Job,
        submission: Option<JobSubmission>,
    ) {
        self.write(
            index,
            &[
                Table::Jobs,
                Table::JobVersions,
                Table::JobSummary,
                Table::PeriodicLaunch,
            ],
            |t| {
                let k = key(&job.namespace, &job.id);
                job.registered_over(t.jobs.get(&k).map(|j| &**j), index);
                crate::periodic::record_launch(t, &job, index);
                crate::csi::job_written(t, &job, index);
                ensure_summary(t, &job, index);
                if let Some(mut submission) = submission {
                    submission.namespace = job.namespace.clone();
                    submission.job_id = job.id.clone();
                    submission.version = job.version;
                    submission.job_modify_index = job.job_modify_index;
                    t.job_submissions
                        .insert((k.clone(), job.version), Arc::new(submission));
                }
                let job = Arc::new(job);
                t.job_versions.insert((k.clone(), job.version), job.clone());
                t.jobs.insert(k.clone(), job);
                refresh_job_status(t, &k, index);
            },
        )
    }

    /// Removes a job, its versions and summary (`?purge=true`). Its evaluations and
    /// allocations stay until garbage collection, as in Nomad.
    pub fn delete_job(&self, index: u64, namespace: &str, id: &str) -> Result<(), StateError> {
        self.write(
            index,
            &[
                Table::Jobs,
                Table::JobVersions,
                Table::JobSummary,
                Table::PeriodicLaunch,
            ],
            |t| {
                let k = key(namespace, id);
                crate::csi::job_deleted(t, namespace, id, index);
                if t.jobs.remove(&k).is_none() {
                    return Err(StateError::JobNotFound {
                        namespace: namespace.into(),
                        id: id.into(),
                    });
                }
                let versions: Vec<_> = t
                    .job_versions
                    .range((k.clone(), 0)..=(k.clone(), u64::MAX))
                    .map(|(vk, _)| vk.clone())
                    .collect();
                for vk in versions {
                    t.job_versions.remove(&vk);
                    t.job_submissions.remove(&vk);
                }
                t.job_summaries.remove(&k);
                t.periodic_launches.remove(&k);
                t.scaling_events.remove(&k);
                Ok(())
            },
        )
    }

    pub fn upsert_evals(&self, index: u64, evals: Vec<Evaluation>) {
        self.write(
            index,
            &[Table::Evals, Table::JobSummary, Table::Jobs],
            |t| {
                upsert_evals_in(t, index, evals);
            },
        )
    }

    /// Deletes evaluations (eval GC).
    pub fn delete_evals(&self, index: u64, ids: &[String]) {
        self.write(index, &[Table::Evals], |t| {
            for id in ids {
                if let Some(e) = t.evals.remove(id) {
                    let k = key(&e.namespace, &e.job_id);
                    if let Some(set) = t.evals_by_job.get_mut(&k) {
                        set.remove(id);
                    }
                }
            }
        })
    }

    /// Garbage collection (Nomad's eval reap): removes evaluations and allocations. Only
    /// allocations their client ended are removed; a live one named here stays, whatever
    /// the caller decided from an older view (its usage and CSI bookkeeping are then still
    /// right, since ended allocations hold none).
    pub fn reap(&self, index: u64, eval_ids: &[String], alloc_ids: &[String]) {
        self.write(index, &[Table::Evals, Table::Allocs], |t| {
            for id in eval_ids {
                if let Some(e) = t.evals.remove(id) {
                    let k = key(&e.namespace, &e.job_id);
                    if let Some(set) = t.evals_by_job.get_mut(&k) {
                        set.remove(id);
                        if set.is_empty() {
                            t.evals_by_job.remove(&k);
                        }
                    }
                }
            }
            for id in alloc_ids {
                let Some((k, a)) = t.allocs.get_key_value(id.as_str()) else {
                    continue;
                };
                if !a.client_terminal() {
                    continue;
                }
                let (k, a) = (k.clone(), a.clone());
                t.allocs.remove(&k);
                if let Some(set) = t.allocs_by_node.get_mut(&a.node_id) {
                    set.remove(&k);
                    if set.is_empty() {
                        t.allocs_by_node.remove(&a.node_id);
                    }
                }
                let jk = key(&a.namespace, &a.job_id);
                if let Some(set) = t.allocs_by_job.get_mut(&jk) {
                    set.remove(&k);
                    if set.is_empty() {
                        t.allocs_by_job.remove(&jk);
                    }
                }
            }
        })
    }

    /// Applies a committed plan: allocations stopped and placed, with the job version the
    /// placements run, and the evaluation updates that came with it.
    pub fn upsert_plan_results(
        &self,
        index: u64,
        job: Option<Arc<Job>>,
        stopped: Vec<Allocation>,
        placed: Vec<Allocation>,
        evals: Vec<Evaluation>,
    ) {
        let at = now_nanos();
        self.upsert_plan_results_with(index, job, stopped, placed, evals, Default::default(), at)
    }

    /// As `upsert_plan_results`, with the deployment the plan created or changed and its
    /// status updates, written before the allocations (which count into it), and the time the
    /// entry carries (`at`, Unix ns) as the allocations' modify time, so that every server
    /// stores the same allocations.
    #[allow(clippy::too_many_arguments)]
    pub fn upsert_plan_results_with(
        &self,
        index: u64,
        job: Option<Arc<Job>>,
        stopped: Vec<Allocation>,
        placed: Vec<Allocation>,
        evals: Vec<Evaluation>,
        deployments: PlanDeploymentChanges,
        at: i64,
    ) {
        let mut touched = vec![Table::Allocs, Table::JobSummary, Table::Jobs, Table::Evals];
        if !deployments.is_empty() {
            touched.extend([Table::Deployments, Table::JobVersions]);
        }
        self.write(index, &touched, |t| {
            let mut usage = UsagePending::default();
            let now = at;
            if let Some(d) = deployments.deployment {
                crate::deployments::upsert_in(t, index, d);
            }
            for u in &deployments.updates {
                crate::deployments::update_status_in(t, index, u);
            }
            let mut jobs_touched = BTreeSet::new();
            for stop in stopped {
                let Some(existing) = t.allocs.get(stop.id.as_str()).cloned() else {
                    continue;
                };
                let mut a = (*existing).clone();
                a.desired_status = stop.desired_status;
                a.desired_description = stop.desired_description;
                if !stop.client_status.is_empty() && stop.client_status != a.client_status {
                    // Nomad's `SetStop`: the lost transition is kept with its time.
                    if stop.client_status == drover_structs::ALLOC_CLIENT_LOST {
                        a.append_client_state(&stop.client_status, now);
                    }
                    a.client_status = stop.client_status;
                }
                if !stop.followup_eval_id.is_empty() {
                    a.followup_eval_id = stop.followup_eval_id;
                }
                if !stop.preempted_by_allocation.is_empty() {
                    a.preempted_by_allocation = stop.preempted_by_allocation;
                }
                a.modify_index = index;
                a.alloc_modify_index = index;
                a.modify_time = now;
                touch_job(&mut jobs_touched, &a);
                put_alloc(t, &mut usage, a);
            }
            for mut a in placed {
                // One lookup among the allocations gives both the stored version and the
                // shared key the indexes hold.
                let (id, existing) = stored_alloc(t, &a.id);
                match &existing {
                    Some(existing) => {
                        // In-place update: the server's fields change, the client's stay,
                        // unless the scheduler marks the allocation lost or unknown (its
                        // node missed its heartbeat), as Nomad's upsertAllocsImpl does.
                        a.create_index = existing.create_index;
                        a.create_time = existing.create_time;
                        if a.client_status != drover_structs::ALLOC_CLIENT_LOST
                            && a.client_status != drover_structs::ALLOC_CLIENT_UNKNOWN
                        {
                            a.client_status = existing.client_status.clone();
                            a.client_description = existing.client_description.clone();
                        }
                        a.task_states = existing.task_states.clone();
                    }
                    None => {
                        a.create_index = index;
                        if a.create_time == 0 {
                            a.create_time = now;
                        }
                    }
                }
                if a.job.is_none() {
                    a.job = job.clone();
                }
                a.modify_index = index;
                a.alloc_modify_index = index;
                a.modify_time = now;
                index_alloc(t, &id, &a);
                touch_job(&mut jobs_touched, &a);
                insert_alloc(t, &mut usage, id, existing, a);
            }
            upsert_evals_in(t, index, evals);
            usage.flush(t);
            for k in jobs_touched {
                recompute_summary(t, &k, index);
                refresh_job_status(t, &k, index);
            }
        })
    }

    /// Applies what clients report about their allocations.
    pub fn update_allocs_from_client(&self, index: u64, updates: Vec<AllocClientUpdate>) {
        self.write(
            index,
            &[Table::Allocs, Table::JobSummary, Table::Jobs],
            |t| {
                let mut usage = UsagePending::default();
                let mut jobs_touched = BTreeSet::new();
                for u in updates {
                    let Some(existing) = t.allocs.get(u.id.as_str()).cloned() else {
                        continue;
                    };
                    let mut a = (*existing).clone();
                    a.client_status = u.client_status;
                    a.client_description = u.client_description;
                    if u.task_states.is_some() {
                        a.task_states = u.task_states;
                    }
                    if u.network_status.is_some() {
                        a.network_status = u.network_status.map(Box::new);
                    }
                    if let Some(status) = u.deployment_status {
                        // The canary mark is the scheduler's, kept whatever the client says.
                        let canary = a.deployment_status.as_ref().is_some_and(|s| s.canary);
                        a.deployment_status =
                            Some(Box::new(drover_structs::AllocDeploymentStatus {
                                canary,
                                ..status
                            }));
                    }
                    a.modify_index = index;
                    // The time the entry carries (the leader stamps it): the same on every
                    // server. An update without one keeps the stored time.
                    if u.modify_time > 0 {
                        a.modify_time = u.modify_time;
                    }
                    touch_job(&mut jobs_touched, &a);
                    put_alloc(t, &mut usage, a);
                }
                usage.flush(t);
                for k in jobs_touched {
                    recompute_summary(t, &k, index);
                    refresh_job_status(t, &k, index);
                }
            },
        )
    }

    /// An operator's allocation health for a deployment (`/v1/deployment/allocation-health`):
    /// the allocations' `DeploymentStatus` is set as a client would report it, and counts
    /// into their deployment the same way.
    pub fn set_alloc_deployment_health(
        &self,
        index: u64,
        healthy: &[String],
        unhealthy: &[String],
        timestamp: &str,
    ) {
        self.write(index, &[Table::Allocs, Table::Deployments], |t| {
            let mut usage = UsagePending::default();
            let marked = healthy
                .iter()
                .map(|id| (id, true))
                .chain(unhealthy.iter().map(|id| (id, false)));
            for (id, is_healthy) in marked {
                let Some(existing) = t.allocs.get(id.as_str()).cloned() else {
                    continue;
                };
                let mut a = (*existing).clone();
                let canary = a.deployment_status.as_ref().is_some_and(|s| s.canary);
                a.deployment_status = Some(Box::new(drover_structs::AllocDeploymentStatus {
                    healthy: Some(is_healthy),
                    timestamp: timestamp.to_string(),
                    canary,
                    modify_index: index,
                }));
                a.modify_index = index;
                put_alloc(t, &mut usage, a);
            }
            usage.flush(t);
        })
    }

    /// Records a scaling event of a job's group (newest first, Nomad's last 20 kept).
    pub fn add_scaling_event(
        &self,
        index: u64,
        namespace: &str,
        job_id: &str,
        group: &str,
        mut event: drover_structs::ScalingEvent,
    ) {
        self.write(index, &[Table::ScalingEvents], |t| {
            let k = key(namespace, job_id);
            let mut events = t
                .scaling_events
                .get(&k)
                .map(|e| (**e).clone())
                .unwrap_or_default();
            event.create_index = index;
            let list = events.entry(group.to_string()).or_default();
            list.insert(0, event);
            list.truncate(drover_structs::TRACKED_SCALING_EVENTS);
            t.scaling_events.insert(k, Arc::new(events));
        })
    }

    /// Marks allocations for stopping on behalf of an operator (`alloc stop`) or the server.
    pub fn update_allocs_desired(&self, index: u64, ids: &[String], desired: &str, desc: &str) {
        self.write(index, &[Table::Allocs, Table::Jobs], |t| {
            let mut usage = UsagePending::default();
            let mut jobs = BTreeSet::new();
            for id in ids {
                if let Some(existing) = t.allocs.get(id.as_str()).cloned() {
                    let mut a = (*existing).clone();
                    a.desired_status = desired.to_string();
                    a.desired_description = desc.to_string();
                    a.modify_index = index;
                    a.alloc_modify_index = index;
                    jobs.insert(key(&a.namespace, &a.job_id));
                    put_alloc(t, &mut usage, a);
                }
            }
            usage.flush(t);
            for k in jobs {
                refresh_job_status(t, &k, index);
            }
        })
    }

    /// Registers a node or updates its fingerprint. Operator-set fields (eligibility, drain)
    /// survive re-registration.
    pub fn upsert_node(&self, index: u64, mut node: Node) {
        self.write(index, &[Table::Nodes], |t| {
            match t.nodes.get(&node.id) {
                Some(existing) => {
                    node.create_index = existing.create_index;
                    node.drain = existing.drain;
                    node.drain_strategy = existing.drain_strategy.clone();
                    if !existing.scheduling_eligibility.is_empty() {
                        node.scheduling_eligibility = existing.scheduling_eligibility.clone();
                    }
                    // Events the client brings with its node (storage mounts and unmounts)
                    // are added once; the node keeps Nomad's last 10.
                    let mut events = existing.events.clone().unwrap_or_default();
                    for e in node.events.take().unwrap_or_default() {
                        let known = events.iter().any(|x| {
                            x.timestamp == e.timestamp
                                && x.message == e.message
                                && x.details == e.details
                        });
                        if !known {
                            events.push(NodeEvent {
                                create_index: index,
                                ..e
                            });
                        }
                    }
                    if events.len() > 10 {
                        let excess = events.len() - 10;
                        events.drain(..excess);
                    }
                    node.events = Some(events);
                }
                None => {
                    node.create_index = index;
                    node.events = Some(vec![NodeEvent {
                        message: "Node registered".into(),
                        subsystem: "Cluster".into(),
                        // The registration's time as the leader set it (the entry carries it),
                        // so every server records the same event.
                        timestamp: format_rfc3339_nanos(if node.status_updated_at > 0 {
                            node.status_updated_at * 1_000_000_000
                        } else {
                            now_nanos() / 1_000_000_000 * 1_000_000_000
                        }),
                        create_index: 0,
                        details: None,
                    }]);
                }
            }
            if node.scheduling_eligibility.is_empty() {
                node.scheduling_eligibility = NODE_ELIGIBLE.to_string();
            }
            node.modify_index = index;
            node.compute_class();
            crate::csi::node_written(t, &node, index);
            t.nodes.insert(node.id.clone(), Arc::new(node));
        })
    }

    /// Sets a node's status (heartbeats, missed heartbeats), with a node event when it changes.
    pub fn update_node_status(
        &self,
        index: u64,
        node_id: &str,
        status: &str,
        updated_at: i64,
    ) -> Result<(), StateError> {
        self.write(index, &[Table::Nodes], |t| {
            let Some(existing) = t.nodes.get(node_id).cloned() else {
                return Err(StateError::NodeNotFound(node_id.into()));
            };
            let mut n = (*existing).clone();
            if n.status != status {
                let message = match status {
                    NODE_STATUS_DOWN => "Node heartbeat missed",
                    NODE_STATUS_READY => "Node status changed to ready",
                    _ => "Node status changed",
                };
                n.events.get_or_insert_with(Vec::new).push(NodeEvent {
                    message: message.into(),
                    subsystem: "Cluster".into(),
                    timestamp: format_rfc3339_nanos(updated_at * 1_000_000_000),
                    create_index: index,
                    details: None,
                });
                n.status = status.to_string();
            }
            n.status_updated_at = updated_at;
            n.modify_index = index;
            t.nodes.insert(n.id.clone(), Arc::new(n));
            Ok(())
        })
    }

    /// Starts (`Some` strategy: the node becomes ineligible) or ends a node's drain. Ending
    /// it makes the node eligible again only with `mark_eligible` (Nomad leaves a drained node
    /// ineligible). `event` is the node event recorded with the change.
    pub fn update_node_drain(
        &self,
        index: u64,
        node_id: &str,
        strategy: Option<serde_json::Value>,
        mark_eligible: bool,
        event: &str,
        at: i64,
    ) -> Result<(), StateError> {
        self.write(index, &[Table::Nodes], |t| {
            let Some(existing) = t.nodes.get(node_id).cloned() else {
                return Err(StateError::NodeNotFound(node_id.into()));
            };
            let mut n = (*existing).clone();
            n.drain = strategy.is_some();
            if strategy.is_some() {
                n.scheduling_eligibility = drover_structs::NODE_INELIGIBLE.to_string();
            } else if mark_eligible {
                n.scheduling_eligibility = NODE_ELIGIBLE.to_string();
            }
            n.drain_strategy = strategy;
            let mut events = n.events.take().unwrap_or_default();
            events.push(NodeEvent {
                message: event.to_string(),
                subsystem: "Drain".into(),
                timestamp: format_rfc3339_nanos(at / 1_000_000_000 * 1_000_000_000),
                create_index: index,
                details: None,
            });
            if events.len() > 10 {
                let excess = events.len() - 10;
                events.drain(..excess);
            }
            n.events = Some(events);
            n.modify_index = index;
            n.compute_class();
            t.nodes.insert(n.id.clone(), Arc::new(n));
            Ok(())
        })
    }

    /// Marks failed allocations to be rescheduled now, past their reschedule policy (Nomad's
    /// desired transition `ForceReschedule`, `job eval -force-reschedule`), with the evaluation.
    pub fn mark_allocs_force_reschedule(&self, index: u64, ids: &[String], evals: Vec<Evaluation>) {
        self.set_desired_transition(index, ids, evals, |t| t.force_reschedule = Some(true))
    }

    /// Marks allocations for migration off their draining node (Nomad's desired transition
    /// `Migrate`); the scheduler then replaces them elsewhere. Evaluations come with it.
    pub fn mark_allocs_for_migration(&self, index: u64, ids: &[String], evals: Vec<Evaluation>) {
        self.set_desired_transition(index, ids, evals, |t| t.migrate = Some(true))
    }

    fn set_desired_transition(
        &self,
        index: u64,
        ids: &[String],
        evals: Vec<Evaluation>,
        mark: impl Fn(&mut drover_structs::DesiredTransition),
    ) {
        self.write(
            index,
            &[Table::Allocs, Table::Evals, Table::JobSummary, Table::Jobs],
            |t| {
                let mut usage = UsagePending::default();
                for id in ids {
                    let (key, Some(old)) = stored_alloc(t, id) else {
                        continue;
                    };
                    let mut a = (*old).clone();
                    mark(&mut a.desired_transition);
                    a.modify_index = index;
                    insert_alloc(t, &mut usage, key, Some(old), a);
                }
                usage.flush(t);
                upsert_evals_in(t, index, evals);
            },
        )
    }

    /// Removes nodes (Nomad's node purge, `DeleteNode`) with the evaluations that replace
    /// their allocations; the allocations stay until the scheduler marks them lost. The
    /// nodes' CSI plugin instances go with them. An unknown node refuses the whole write.
    pub fn delete_nodes(
        &self,
        index: u64,
        ids: &[String],
        evals: Vec<Evaluation>,
    ) -> Result<(), StateError> {
        if let Some(missing) = {
            let snap = self.snapshot();
            ids.iter().find(|id| snap.node(id).is_none()).cloned()
        } {
            return Err(StateError::NodeNotFound(missing));
        }
        self.write(
            index,
            &[Table::Nodes, Table::Evals, Table::CsiPlugins],
            |t| {
                for id in ids {
                    let Some(node) = t.nodes.remove(id) else {
                        continue;
                    };
                    // Written without plugins, the node's instances leave their plugins.
                    let mut gone = (*node).clone();
                    gone.csi_controller_plugins = None;
                    gone.csi_node_plugins = None;
                    crate::csi::node_written(t, &gone, index);
                }
                upsert_evals_in(t, index, evals);
                Ok(())
            },
        )
    }

    pub fn update_node_eligibility(
        &self,
        index: u64,
        node_id: &str,
        eligibility: &str,
    ) -> Result<(), StateError> {
        self.write(index, &[Table::Nodes], |t| {
            let Some(existing) = t.nodes.get(node_id).cloned() else {
                return Err(StateError::NodeNotFound(node_id.into()));
            };
            let mut n = (*existing).clone();
            n.scheduling_eligibility = eligibility.to_string();
            n.modify_index = index;
            n.compute_class();
            t.nodes.insert(n.id.clone(), Arc::new(n));
            Ok(())
        })
    }
}

/// What a plan changes of deployments (Nomad's `Deployment` and `DeploymentUpdates` of a
/// plan result).
#[derive(Debug, Clone, Default)]
pub struct PlanDeploymentChanges {
    pub deployment: Option<drover_structs::Deployment>,
    pub updates: Vec<drover_structs::DeploymentStatusUpdate>,
}

impl PlanDeploymentChanges {
    pub fn is_empty(&self) -> bool {
        self.deployment.is_none() && self.updates.is_empty()
    }
}

/// Marks a job version stable (or not), in the versions table and, when it is the current
/// version, in the jobs table.
pub(crate) fn set_job_stability_in(
    t: &mut Tables,
    index: u64,
    namespace: &str,
    job_id: &str,
    version: u64,
    stable: bool,
) {
    let k = key(namespace, job_id);
    let Some(v) = t.job_versions.get(&(k.clone(), version)).cloned() else {
        return;
    };
    if v.stable == stable {
        return;
    }
    let mut j = (*v).clone();
    j.stable = stable;
    j.modify_index = index;
    let j = Arc::new(j);
    t.job_versions.insert((k.clone(), version), j.clone());
    if t.jobs.get(&k).is_some_and(|cur| cur.version == version) {
        t.jobs.insert(k, j);
    }
}

/// Node usage changes of one write, applied to the table once per node at the end.
#[derive(Default)]
struct UsagePending {
    nodes: HashMap<String, NodeAllocUsage>,
    /// Deployment count changes of the write's allocations, stored once per deployment.
    deployments: crate::deployments::DeploymentsPending,
}

impl UsagePending {
    /// Accounts for `old` (the stored version, if any) being replaced by `new`.
    fn track(&mut self, t: &Tables, old: Option<&Allocation>, new: &Allocation) {
        let old_live = old.filter(|o| !o.terminal());
        if old_live.is_none() && new.terminal() {
            return;
        }
        let node = &new.node_id;
        let apply = |u: &mut NodeAllocUsage| {
            if let Some(o) = old_live {
                u.remove(o);
            }
            u.add(new);
        };
        // Most writes touch a node already pending: its id is copied only the first time.
        match self.nodes.get_mut(node) {
            Some(u) => apply(u),
            None => {
                let mut u = t
                    .node_usage
                    .get(node)
                    .map(|u| (**u).clone())
                    .unwrap_or_default();
                apply(&mut u);
                self.nodes.insert(node.clone(), u);
            }
        }
    }

    fn flush(self, t: &mut Tables) {
        for (node, u) in self.nodes {
            t.node_usage.insert(node, Arc::new(u));
        }
        self.deployments.flush(t);
    }
}

/// Stores a new version of an allocation, keeping its node's usage in step.
fn put_alloc(t: &mut Tables, usage: &mut UsagePending, a: Allocation) {
    let (id, old) = stored_alloc(t, &a.id);
    insert_alloc(t, usage, id, old, a);
}

/// Stores `a` under `id`, replacing `old` (what `stored_alloc` found).
fn insert_alloc(
    t: &mut Tables,
    usage: &mut UsagePending,
    id: AllocKey,
    old: Option<Arc<Allocation>>,
    mut a: Allocation,
) {
    // Serialization derives them again; a million stored allocations would hold 1.5 GB of them.
    a.drop_derivable_legacy_resources();
    usage.track(t, old.as_deref(), &a);
    // Every caller stamps `ModifyIndex` with the write's index before storing.
    let index = a.modify_index;
    usage
        .deployments
        .alloc_written(t, index, old.as_deref(), &mut a);
    let a = Arc::new(a);
    t.allocs.insert(id, a.clone());
    crate::csi::alloc_written(t, old.as_deref(), &a);
}

/// Adds an allocation to the by-node and by-job indexes (writes, and restores).
pub(crate) fn index_alloc(t: &mut Tables, id: &AllocKey, a: &Allocation) {
    with_entry(
        &mut t.allocs_by_node,
        a.node_id.as_str(),
        || a.node_id.clone(),
        |ids| {
            ids.insert(id.clone());
        },
    );
    with_entry(
        &mut t.allocs_by_job,
        &NsRef(&a.namespace, &a.job_id),
        || key(&a.namespace, &a.job_id),
        |ids| {
            ids.insert(id.clone());
        },
    );
}

/// Notes the allocation's job for the summaries refreshed after the write; a plan touches one
/// job or a few, so the set is searched rather than handed a new key per allocation.
fn touch_job(jobs: &mut BTreeSet<NsKey>, a: &Allocation) {
    if !jobs
        .iter()
        .any(|(ns, id)| *ns == a.namespace && *id == a.job_id)
    {
        jobs.insert(key(&a.namespace, &a.job_id));
    }
}

/// The tables' shared copy of an allocation id (the one already stored, else a new one) and
/// the stored allocation.
fn stored_alloc(t: &Tables, id: &str) -> (AllocKey, Option<Arc<Allocation>>) {
    match t.allocs.get_key_value(id) {
        Some((k, a)) => (k.clone(), Some(a.clone())),
        None => (AllocKey::from(id), None),
    }
}

pub(crate) fn upsert_evals_in(t: &mut Tables, index: u64, evals: Vec<Evaluation>) {
    let mut jobs = BTreeSet::new();
    for mut e in evals {
        match t.evals.get(&e.id) {
            Some(existing) => {
                e.create_index = existing.create_index;
                e.create_time = existing.create_time;
            }
            None => e.create_index = index,
        }
        e.modify_index = index;
        let k = key(&e.namespace, &e.job_id);
        t.evals_by_job
            .entry(k.clone())
            .or_default()
            .insert(e.id.clone());
        if let Some(queued) = &e.queued_allocations
            && let Some(s) = t.job_summaries.get(&k).cloned()
        {
            let mut s = (*s).clone();
            for (tg, q) in queued {
                if let Some(g) = s.summary.get_mut(tg) {
                    g.queued = *q;
                }
            }
            s.modify_index = index;
            t.job_summaries.insert(k.clone(), Arc::new(s));
        }
        jobs.insert(k);
        t.evals.insert(e.id.clone(), Arc::new(e));
    }
    for k in jobs {
        refresh_job_status(t, &k, index);
    }
}

fn ensure_summary(t: &mut Tables, job: &Job, index: u64) {
    let k = key(&job.namespace, &job.id);
    let mut s = t
        .job_summaries
        .get(&k)
        .map(|s| (**s).clone())
        .unwrap_or_else(|| JobSummary {
            job_id: job.id.clone(),
            namespace: job.namespace.clone(),
            create_index: index,
            ..Default::default()
        });
    for tg in &job.task_groups {
        s.summary.entry(tg.name.clone()).or_default();
    }
    s.modify_index = index;
    t.job_summaries.insert(k, Arc::new(s));
}

/// Recounts a job's allocations per group and client status.
fn recompute_summary(t: &mut Tables, k: &NsKey, index: u64) {
    let Some(existing) = t.job_summaries.get(k).cloned() else {
        return;
    };
    let mut s = (*existing).clone();
    for g in s.summary.values_mut() {
        let queued = g.queued;
        *g = TaskGroupSummary {
            queued,
            ..Default::default()
        };
    }
    if let Some(ids) = t.allocs_by_job.get(k) {
        for id in ids {
            let Some(a) = t.allocs.get(id) else { continue };
            let g = match s.summary.get_mut(&a.task_group) {
                Some(g) => g,
                None => s.summary.entry(a.task_group.clone()).or_default(),
            };
            match a.client_status.as_str() {
                ALLOC_CLIENT_PENDING => g.starting += 1,
                ALLOC_CLIENT_RUNNING => g.running += 1,
                ALLOC_CLIENT_COMPLETE => g.complete += 1,
                ALLOC_CLIENT_FAILED => g.failed += 1,
                ALLOC_CLIENT_LOST => g.lost += 1,
                _ => {}
            }
        }
    }
    if s != *existing {
        s.modify_index = index;
        t.job_summaries.insert(k.clone(), Arc::new(s));
    }
}

/// Nomad's `getJobStatus`: running while any allocation is not terminal, pending while an
/// evaluation is outstanding, dead once it had allocations or evaluations and all ended.
fn refresh_job_status(t: &mut Tables, k: &NsKey, index: u64) {
    let Some(job) = t.jobs.get(k).cloned() else {
        return;
    };
    let status = job_status(t, k, &job);
    if job.status != status {
        let mut j = (*job).clone();
        j.status = status.to_string();
        j.modify_index = index;
        let j = Arc::new(j);
        t.job_versions.insert((k.clone(), j.version), j.clone());
        t.jobs.insert(k.clone(), j);
        t.indexes.insert(Table::Jobs, index);
    }
}

fn job_status(t: &Tables, k: &NsKey, job: &Job) -> &'static str {
    if job.job_type == JOB_TYPE_SYSTEM || job.is_parameterized() || job.is_periodic() {
        return if job.stop {
            JOB_STATUS_DEAD
        } else {
            JOB_STATUS_RUNNING
        };
    }
    let mut has_alloc = false;
    if let Some(ids) = t.allocs_by_job.get(k) {
        for id in ids {
            if let Some(a) = t.allocs.get(id) {
                has_alloc = true;
                if !a.terminal() {
                    return JOB_STATUS_RUNNING;
                }
            }
        }
    }
    let mut has_eval = false;
    if let Some(ids) = t.evals_by_job.get(k) {
        for id in ids {
            if let Some(e) = t.evals.get(id) {
                has_eval = true;
                if !e.terminal() {
                    return JOB_STATUS_PENDING;
                }
            }
        }
    }
    if has_alloc || has_eval || job.stop {
        JOB_STATUS_DEAD
    } else {
        JOB_STATUS_PENDING
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A service job `id` with one group `g` of `count`.
    pub(crate) fn job(id: &str, count: i64) -> Job {
        Job {
            id: id.into(),
            name: id.into(),
            namespace: "default".into(),
            job_type: "service".into(),
            priority: 50,
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn alloc(id: &str, job: &str) -> Allocation {
        Allocation {
            id: id.into(),
            namespace: "default".into(),
            job_id: job.into(),
            node_id: "n1".into(),
            task_group: "g".into(),
            name: format!("{job}.g[0]"),
            desired_status: ALLOC_DESIRED_RUN.into(),
            client_status: ALLOC_CLIENT_PENDING.into(),
            ..Default::default()
        }
    }

    #[test]
    fn any_spec_field_makes_a_new_version_and_the_same_job_again_does_not() {
        let s = StateStore::new();
        s.upsert_job(5, job("web", 1));
        s.upsert_job(6, job("web", 1));
        assert_eq!(s.snapshot().job("default", "web").unwrap().version, 0);
        let mut higher = job("web", 1);
        higher.priority = 70;
        s.upsert_job(7, higher.clone());
        let stored = s.snapshot().job("default", "web").unwrap();
        assert_eq!((stored.version, stored.job_modify_index), (1, 7));
        higher.all_at_once = true;
        s.upsert_job(8, higher);
        assert_eq!(s.snapshot().job("default", "web").unwrap().version, 2);
    }

    #[test]
    fn a_job_source_is_kept_for_the_version_it_became_and_goes_with_the_purge() {
        let s = StateStore::new();
        let source = |text: &str| {
            Some(JobSubmission {
                source: text.into(),
                format: "hcl2".into(),
                ..Default::default()
            })
        };
        s.upsert_job_with_source(5, job("web", 1), source("v0"));
        s.upsert_job_with_source(6, job("web", 3), source("v1"));
        let snap = s.snapshot();
        assert_eq!(
            snap.job_submission("default", "web", 0).unwrap().source,
            "v0"
        );
        let v1 = snap.job_submission("default", "web", 1).unwrap();
        assert_eq!((v1.source.as_str(), v1.job_modify_index), ("v1", 6));
        s.delete_job(7, "default", "web").unwrap();
        let snap = s.snapshot();
        assert!(snap.job_submission("default", "web", 0).is_none());
        assert!(snap.job_submission("default", "web", 1).is_none());
    }

    #[test]
    fn a_purged_node_is_gone_with_its_evals_written_and_an_unknown_one_changes_nothing() {
        let s = StateStore::new();
        let node = |id: &str| Node {
            id: id.into(),
            datacenter: "dc1".into(),
            ..Default::default()
        };
        s.upsert_node(1, node("n1"));
        s.upsert_node(2, node("n2"));
        s.upsert_job(3, job("a", 1));
        let jv = s.snapshot().job("default", "a");
        s.upsert_plan_results(4, jv, vec![], vec![alloc("x", "a")], vec![]);
        let refused = s.delete_nodes(5, &["n1".into(), "nope".into()], vec![]);
        assert!(matches!(refused, Err(StateError::NodeNotFound(id)) if id == "nope"));
        assert!(s.snapshot().node("n1").is_some());
        let eval = Evaluation {
            id: "e1".into(),
            namespace: "default".into(),
            job_id: "a".into(),
            ..Default::default()
        };
        s.delete_nodes(6, &["n1".into()], vec![eval]).unwrap();
        let snap = s.snapshot();
        assert!(snap.node("n1").is_none());
        assert!(snap.node("n2").is_some());
        assert_eq!(snap.eval("e1").unwrap().modify_index, 6);
        // The allocation stays for the scheduler to mark lost.
        assert!(snap.alloc("x").is_some());
        assert_eq!(snap.table_index(Table::Nodes), 6);
    }

    #[test]
    fn node_events_a_client_brings_are_added_once_and_capped_at_ten() {
        let s = StateStore::new();
        let node = |events: Option<Vec<NodeEvent>>| Node {
            id: "n1".into(),
            datacenter: "dc1".into(),
            events,
            ..Default::default()
        };
        let mount = |t: &str| NodeEvent {
            message: "Mount volume".into(),
            subsystem: "Storage".into(),
            timestamp: t.into(),
            ..Default::default()
        };
        s.upsert_node(1, node(None));
        s.upsert_node(2, node(Some(vec![mount("t1")])));
        s.upsert_node(3, node(Some(vec![mount("t1"), mount("t2")])));
        s.upsert_node(4, node(None));
        let events = s.snapshot().node("n1").unwrap().events.clone().unwrap();
        let messages: Vec<(&str, u64)> = events
            .iter()
            .map(|e| (e.message.as_str(), e.create_index))
            .collect();
        assert_eq!(
            messages,
            vec![
                ("Node registered", 0),
                ("Mount volume", 2),
                ("Mount volume", 3)
            ]
        );
        let many: Vec<NodeEvent> = (0..12).map(|i| mount(&format!("u{i:02}"))).collect();
        s.upsert_node(5, node(Some(many)));
        let events = s.snapshot().node("n1").unwrap().events.clone().unwrap();
        assert_eq!(events.len(), 10);
        assert_eq!(events[9].timestamp, "u11");
    }

    #[test]
    fn plans_mark_allocations_unknown_or_lost_but_never_running() {
        let s = StateStore::new();
        let j = Arc::new(job("a", 1));
        s.upsert_job(1, job("a", 1));
        let mut a = alloc("x", "a");
        a.client_status = drover_structs::ALLOC_CLIENT_RUNNING.into();
        s.upsert_plan_results(2, Some(j.clone()), vec![], vec![a.clone()], vec![]);
        // An in-place update carrying a stale client status keeps the client's.
        let mut stale = a.clone();
        stale.client_status = ALLOC_CLIENT_PENDING.into();
        s.upsert_plan_results(3, Some(j.clone()), vec![], vec![stale], vec![]);
        let stored = s.snapshot().alloc("x").unwrap();
        assert_eq!(stored.client_status, drover_structs::ALLOC_CLIENT_RUNNING);
        // The scheduler's unknown (node disconnected) is written, with its history.
        let mut unknown = (*stored).clone();
        unknown.client_status = drover_structs::ALLOC_CLIENT_UNKNOWN.into();
        unknown.append_client_state(drover_structs::ALLOC_CLIENT_UNKNOWN, 5);
        s.upsert_plan_results(4, Some(j.clone()), vec![], vec![unknown], vec![]);
        let stored = s.snapshot().alloc("x").unwrap();
        assert_eq!(stored.client_status, drover_structs::ALLOC_CLIENT_UNKNOWN);
        assert!(stored.needs_to_reconnect());
        // A lost stop records when the allocation was lost.
        let mut lost = (*stored).clone();
        lost.desired_status = drover_structs::ALLOC_DESIRED_STOP.into();
        lost.client_status = drover_structs::ALLOC_CLIENT_LOST.into();
        s.upsert_plan_results(5, Some(j), vec![lost], vec![], vec![]);
        let stored = s.snapshot().alloc("x").unwrap();
        assert_eq!(stored.client_status, drover_structs::ALLOC_CLIENT_LOST);
        assert!(stored.first_lost() > 0);
        assert!(!stored.needs_to_reconnect());
    }

    #[test]
    fn reaping_removes_ended_allocations_and_evaluations_but_never_a_live_allocation() {
        let s = StateStore::new();
        let j = Arc::new(job("a", 1));
        s.upsert_job(1, job("a", 1));
        let mut done = alloc("done", "a");
        done.client_status = drover_structs::ALLOC_CLIENT_COMPLETE.into();
        let mut live = alloc("live", "a");
        live.client_status = drover_structs::ALLOC_CLIENT_RUNNING.into();
        s.upsert_plan_results(2, Some(j), vec![], vec![done, live], vec![]);
        s.upsert_evals(
            3,
            vec![drover_structs::Evaluation {
                id: "e1".into(),
                namespace: "default".into(),
                job_id: "a".into(),
                ..Default::default()
            }],
        );
        s.reap(
            4,
            &["e1".to_string()],
            &["done".to_string(), "live".to_string()],
        );
        let snap = s.snapshot();
        assert!(snap.eval("e1").is_none());
        assert!(snap.evals_by_job("default", "a").is_empty());
        assert!(snap.alloc("done").is_none());
        assert!(snap.alloc("live").is_some(), "a running allocation is kept");
        let by_job: Vec<String> = snap
            .allocs_by_job("default", "a")
            .iter()
            .map(|a| a.id.clone())
            .collect();
        assert_eq!(by_job, vec!["live".to_string()]);
        assert_eq!(snap.table_index(Table::Allocs), 4);
    }

    #[test]
    fn job_version_bumps_only_when_spec_changes() {
        let s = StateStore::new();
        s.upsert_job(10, job("a", 1));
        s.upsert_job(11, job("a", 1));
        assert_eq!(s.snapshot().job("default", "a").unwrap().version, 0);
        s.upsert_job(12, job("a", 2));
        let j = s.snapshot().job("default", "a").unwrap();
        assert_eq!((j.version, j.create_index, j.job_modify_index), (1, 10, 12));
    }

    #[test]
    fn job_status_follows_allocs_and_evals() {
        let s = StateStore::new();
        s.upsert_job(1, job("a", 1));
        assert_eq!(s.snapshot().job("default", "a").unwrap().status, "pending");
        let jv = s.snapshot().job("default", "a");
        s.upsert_plan_results(2, jv, vec![], vec![alloc("x", "a")], vec![]);
        assert_eq!(s.snapshot().job("default", "a").unwrap().status, "running");
        s.update_allocs_from_client(
            3,
            vec![AllocClientUpdate {
                id: "x".into(),
                client_status: ALLOC_CLIENT_COMPLETE.into(),
                ..Default::default()
            }],
        );
        let snap = s.snapshot();
        assert_eq!(snap.job("default", "a").unwrap().status, "dead");
        assert_eq!(
            snap.job_summary("default", "a").unwrap().summary["g"].complete,
            1
        );
    }

    #[test]
    fn snapshot_is_isolated_from_later_writes() {
        let s = StateStore::new();
        s.upsert_job(1, job("a", 1));
        let before = s.snapshot();
        s.upsert_job(2, job("b", 1));
        assert!(before.job("default", "b").is_none());
        assert!(s.snapshot().job("default", "b").is_some());
        assert_eq!(before.table_index(Table::Jobs), 1);
    }

    #[test]
    fn client_updates_do_not_move_alloc_modify_index() {
        let s = StateStore::new();
        s.upsert_job(1, job("a", 1));
        let jv = s.snapshot().job("default", "a");
        s.upsert_plan_results(2, jv, vec![], vec![alloc("x", "a")], vec![]);
        s.update_allocs_from_client(
            3,
            vec![AllocClientUpdate {
                id: "x".into(),
                client_status: ALLOC_CLIENT_RUNNING.into(),
                ..Default::default()
            }],
        );
        let snap = s.snapshot();
        assert_eq!(snap.node_allocs_index("n1"), 2);
        assert_eq!(snap.alloc("x").unwrap().modify_index, 3);
    }

    #[test]
    fn node_usage_follows_placements_stops_and_client_ends() {
        let s = StateStore::new();
        s.upsert_job(1, job("a", 2));
        let mut x = alloc("x", "a");
        let mut res = AllocatedResources::default();
        res.tasks.insert(
            "t".into(),
            AllocatedTaskResources {
                cpu: AllocatedCpuResources {
                    cpu_shares: 100,
                    reserved_cores: None,
                },
                memory: AllocatedMemoryResources {
                    memory_mb: 64,
                    memory_max_mb: 0,
                },
                ..Default::default()
            },
        );
        x.allocated_resources = Some(res);
        let mut y = x.clone();
        y.id = "y".into();
        let jv = s.snapshot().job("default", "a");
        s.upsert_plan_results(2, jv, vec![], vec![x.clone(), y], vec![]);
        let u = s.snapshot().node_usage("n1").unwrap();
        assert_eq!(
            (u.used.cpu_shares, u.used.memory_mb, u.allocs),
            (200, 128, 2)
        );
        s.upsert_plan_results(
            3,
            None,
            vec![{
                let mut stop = x.clone();
                stop.desired_status = ALLOC_DESIRED_STOP.into();
                stop
            }],
            vec![],
            vec![],
        );
        let u = s.snapshot().node_usage("n1").unwrap();
        assert_eq!((u.used.cpu_shares, u.allocs), (100, 1));
        s.update_allocs_from_client(
            4,
            vec![AllocClientUpdate {
                id: "y".into(),
                client_status: ALLOC_CLIENT_COMPLETE.into(),
                ..Default::default()
            }],
        );
        let snap = s.snapshot();
        let u = snap.node_usage("n1").unwrap();
        assert_eq!((u.used.cpu_shares, u.allocs), (0, 0));
        // A restored snapshot rebuilds the same usage.
        let r = StateStore::new();
        r.restore(&snap.encode()).unwrap();
        assert_eq!(
            r.snapshot().node_usage("n1").map(|u| u.allocs).unwrap_or(0),
            0
        );
    }

    #[tokio::test]
    async fn blocking_wait_returns_on_change() {
        let s = Arc::new(StateStore::new());
        s.upsert_job(1, job("a", 1));
        let s2 = s.clone();
        let waiter =
            tokio::spawn(
                async move { s2.wait_for(&[Table::Jobs], 1, Duration::from_secs(5)).await },
            );
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.upsert_job(2, job("b", 1));
        let snap = waiter.await.unwrap();
        assert_eq!(snap.table_index(Table::Jobs), 2);
    }
}
