//! The generic scheduler for service and batch jobs (Nomad's `GenericScheduler`): reconcile,
//! place, submit the plan, retry on a refreshed state when the applier refused part of it, and
//! record the outcome on the evaluation (with a blocked evaluation for what did not fit).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use drover_structs::{
    ALLOC_CLIENT_LOST, ALLOC_CLIENT_PENDING, ALLOC_CLIENT_RUNNING, ALLOC_DESIRED_RUN, AllocMetric,
    AllocatedResources, AllocatedSharedResources, Allocation, EVAL_STATUS_BLOCKED,
    EVAL_STATUS_COMPLETE, EVAL_STATUS_FAILED, Evaluation, JOB_TYPE_BATCH, Job, Node, Plan,
    TRIGGER_MAX_PLANS, TRIGGER_QUEUED_ALLOCS, TaskGroup, generate_id, time::now_nanos,
};

use crate::context::EvalContext;
use crate::feasible::{ready_nodes_in_dcs, schedulable, tainted};
use crate::reconcile::{
    ALLOC_IN_PLACE, ALLOC_LOST, ALLOC_UPDATING, Placement, ReconcileResults, Reconciler,
    UpdateDecision,
};
use crate::reschedule::{next_tracker, policy};
use crate::stack::{SelectOptions, Selected, Stack, StackKind};
use crate::util::{Rng, tasks_updated};
use crate::{Planner, SchedulerConfig, SchedulerError, State};

/// Attempts without progress before giving up (Nomad's `maxServiceScheduleAttempts`).
const MAX_ATTEMPTS: usize = 5;
/// Attempts in all, progress or not: a planner that keeps committing a little must still end.
const HARD_ATTEMPT_CAP: usize = 50;

const BLOCKED_EVAL_MAX_PLAN_DESC: &str = "created due to placement conflicts";
const BLOCKED_EVAL_FAILED_PLACEMENTS: &str = "created to place remaining allocations";

pub(crate) fn process(
    state: &dyn State,
    planner: &mut dyn Planner,
    eval: &Evaluation,
    config: &SchedulerConfig,
) -> Result<(), SchedulerError> {
    let mut sched = GenericScheduler {
        eval,
        config,
        batch: eval.eval_type == JOB_TYPE_BATCH,
        blocked: None,
        failed_tg: BTreeMap::new(),
        queued: BTreeMap::new(),
        followups: Vec::new(),
        snapshot_index: state.index(),
        escaped: false,
        classes: BTreeMap::new(),
        deployment_id: None,
    };
    let mut refreshed: Option<Box<dyn State>> = None;
    let mut without_progress = 0;
    let mut attempts = 0;
    loop {
        let current: &dyn State = refreshed.as_deref().unwrap_or(state);
        match sched.attempt(current, planner)? {
            Attempt::Done => break,
            Attempt::Retry {
                new_state,
                progress,
            } => {
                if let Some(s) = new_state {
                    refreshed = Some(s);
                }
                attempts += 1;
                without_progress = if progress { 0 } else { without_progress + 1 };
                if without_progress >= MAX_ATTEMPTS || attempts >= HARD_ATTEMPT_CAP {
                    return sched.give_up(planner, attempts);
                }
            }
        }
    }
    sched.finish(planner)
}

enum Attempt {
    Done,
    Retry {
        new_state: Option<Box<dyn State>>,
        progress: bool,
    },
}

struct GenericScheduler<'e> {
    eval: &'e Evaluation,
    config: &'e SchedulerConfig,
    batch: bool,
    /// The blocked evaluation created for placements that did not fit.
    blocked: Option<Evaluation>,
    failed_tg: BTreeMap<String, AllocMetric>,
    queued: BTreeMap<String, i64>,
    followups: Vec<Evaluation>,
    snapshot_index: u64,
    escaped: bool,
    classes: BTreeMap<String, bool>,
    /// The active deployment new placements join (set by each pass's reconciliation).
    deployment_id: Option<String>,
}

impl GenericScheduler<'_> {
    /// One pass of Nomad's `process`: plan against `state` and submit.
    fn attempt(
        &mut self,
        state: &dyn State,
        planner: &mut dyn Planner,
    ) -> Result<Attempt, SchedulerError> {
        let eval = self.eval;
        let job = state.job(&eval.namespace, &eval.job_id);
        self.snapshot_index = state.index();
        self.queued.clear();
        self.failed_tg.clear();
        self.followups.clear();

        let plan = Plan {
            eval_id: eval.id.clone(),
            priority: eval.priority,
            job: job.clone(),
            snapshot_index: state.index(),
            all_at_once: job.as_ref().is_some_and(|j| j.all_at_once),
            ..Default::default()
        };
        let rng = Rng::seeded(&eval.id, state.index());
        let mut ctx = EvalContext::new(state, plan, &eval.namespace, &eval.job_id, rng);
        if let Some(j) = &job {
            ctx.eligibility.set_job(j);
        }
        let new_ids = self.compute_job_allocs(&mut ctx, job.as_ref())?;
        self.escaped = ctx.eligibility.has_escaped();
        self.classes = ctx.eligibility.classes();

        // Delayed reschedules replace the blocked evaluation: the follow-up retries them.
        let delay_instead = !self.followups.is_empty() && eval.wait_until == 0;
        if !self.failed_tg.is_empty() && self.blocked.is_none() && !delay_instead {
            self.create_blocked_eval(planner, false)?;
        }

        let plan = ctx.into_plan();
        // A dry run submits even an empty plan: its annotations are the answer.
        if plan.is_no_op() && !eval.annotate_plan {
            return Ok(Attempt::Done);
        }
        // Nomad creates the follow-ups only when this evaluation was not itself delayed, which
        // leaves the allocations pointing at evaluations that never exist; create them always.
        for mut e in std::mem::take(&mut self.followups) {
            e.previous_eval = eval.id.clone();
            planner.create_eval(e)?;
        }
        let expected = count_allocs(&plan.node_update) + count_allocs(&plan.node_allocation);
        let (result, new_state) = planner.submit_plan(plan)?;

        for alloc in result.node_allocation.values().flatten() {
            if new_ids.contains(&alloc.id)
                && let Some(q) = self.queued.get_mut(&alloc.task_group)
            {
                *q -= 1;
            }
        }
        let committed = count_allocs(&result.node_update) + count_allocs(&result.node_allocation);
        let progress = committed > 0;
        if new_state.is_some() {
            return Ok(Attempt::Retry {
                new_state,
                progress,
            });
        }
        if result.refresh_index != 0 || committed < expected {
            return Err(SchedulerError::Planner(format!(
                "plan for evaluation {} was partly committed ({committed} of {expected}) but no refreshed state came back",
                eval.id
            )));
        }
        Ok(Attempt::Done)
    }

    /// Reconciles the job's allocations and fills the plan. Returns the ids of new placements.
    fn compute_job_allocs(
        &mut self,
        ctx: &mut EvalContext<'_>,
        job: Option<&Arc<Job>>,
    ) -> Result<HashSet<String>, SchedulerError> {
        let state = ctx.state;
        let eval = self.eval;
        let allocs = state.allocs_by_job(&eval.namespace, &eval.job_id);
        let tainted_nodes = tainted_nodes(ctx, &allocs);
        mark_lost_stops(ctx, &tainted_nodes, &allocs);

        let now = now_nanos();
        let kind = if self.batch {
            StackKind::Batch
        } else {
            StackKind::Service
        };
        let config = self.config;
        let deployment = if self.batch {
            None
        } else {
            state.latest_deployment(&eval.namespace, &eval.job_id)
        };
        let results = {
            let reconciler = Reconciler {
                job,
                batch: self.batch,
                eval,
                now,
                tainted: &tainted_nodes,
                deployment: deployment.as_ref(),
            };
            // In-place checks look at one node each; one stack serves them all.
            let mut inplace_stack = Stack::new(kind);
            let mut update = |existing: &Allocation, _: &Arc<Job>, tg: &TaskGroup| match job
                .and_then(|j| j.lookup_task_group(&tg.name).map(|tg| (j, tg)))
            {
                Some((j, tg)) => {
                    in_place_decision(ctx, &mut inplace_stack, config, &eval.id, existing, j, tg)
                }
                None => UpdateDecision::Destructive,
            };
            reconciler.compute(&allocs, &mut update)
        };

        if eval.annotate_plan {
            ctx.plan.annotations = Some(drover_structs::PlanAnnotations {
                desired_tg_updates: desired_updates(&results, &allocs, job),
                preempted_allocs: None,
            });
        }
        self.followups = results.followup_evals;
        for a in results.attribute_updates {
            ctx.append_alloc(a);
        }
        for s in &results.stop {
            ctx.append_stop(
                &s.alloc,
                s.description,
                s.client_status,
                s.followup.as_deref(),
            );
        }
        for a in results
            .disconnect_updates
            .into_iter()
            .chain(results.reconnect_updates)
        {
            ctx.append_alloc(a);
        }
        self.deployment_id = results.deployment_id.clone();
        ctx.plan.deployment = results.deployment;
        ctx.plan.deployment_updates = results.deployment_updates;
        for mut a in results.inplace {
            // In-place updates join the deployment. Nomad clears their health for the client
            // to judge again, which for tasks an in-place update does not restart comes out
            // healthy at once; Drover's clients do not re-judge, so a healthy allocation
            // brings its health along (and counts as healthy in the new deployment).
            if let Some(id) = &self.deployment_id
                && a.deployment_id != *id
            {
                a.deployment_id = id.clone();
                if !a.deployment_status.as_ref().is_some_and(|s| s.is_healthy()) {
                    a.deployment_status = None;
                }
            }
            ctx.append_alloc(a);
        }
        let mut new_ids = HashSet::new();
        for tg in job.iter().flat_map(|j| &j.task_groups) {
            self.queued.insert(tg.name.clone(), 0);
        }
        let Some(job) = job.filter(|j| !j.stop) else {
            return Ok(new_ids);
        };
        if results.place.is_empty() && results.destructive.is_empty() {
            return Ok(new_ids);
        }
        for p in results.destructive.iter().chain(&results.place) {
            *self.queued.entry(p.task_group.clone()).or_insert(0) += 1;
        }
        let mut stack = Stack::new(kind);
        self.compute_placements(
            ctx,
            &mut stack,
            job,
            &results.destructive,
            &results.place,
            now,
            &mut new_ids,
        );
        Ok(new_ids)
    }

    #[allow(clippy::too_many_arguments)]
    fn compute_placements<'j>(
        &mut self,
        ctx: &mut EvalContext<'_>,
        stack: &mut Stack<'j>,
        job: &'j Arc<Job>,
        destructive: &[Placement],
        place: &[Placement],
        now: i64,
        new_ids: &mut HashSet<String>,
    ) {
        let (mut nodes, by_dc) = ready_nodes_in_dcs(ctx.state, &job.datacenters);
        ctx.rng.shuffle(&mut nodes);
        stack.set_nodes(ctx, nodes);
        let preemption = self.config.preemption_enabled(&job.job_type);

        for p in destructive.iter().chain(place) {
            let Some(tg) = job.lookup_task_group(&p.task_group) else {
                continue;
            };
            if let Some(m) = self.failed_tg.get_mut(&tg.name) {
                m.coalesced_failures += 1;
                continue;
            }
            let prev = p.previous.as_deref();
            let preferred = match prev {
                Some(prev) if tg.ephemeral_disk.as_ref().is_some_and(|d| d.sticky) => {
                    ctx.node(&prev.node_id).filter(|n| schedulable(n))
                }
                _ => None,
            };
            if p.destructive
                && let Some(prev) = prev
            {
                ctx.append_stop(prev, ALLOC_UPDATING, None, None);
            }
            let mut options = SelectOptions {
                penalty_nodes: penalty_nodes(prev),
                preferred,
                preempt: false,
                alloc_name: p.name.clone(),
            };
            let (mut selected, mut metric) = stack.select(ctx, job, tg, &options, self.config);
            // Nomad's selectNextOption: with preemption enabled, a placement that fits nowhere
            // is tried again allowed to evict lower-priority allocations.
            if selected.is_none() && preemption {
                options.preempt = true;
                (selected, metric) = stack.select(ctx, job, tg, &options, self.config);
            }
            metric.nodes_available = Some(by_dc.clone());
            match selected {
                Some(mut sel) => {
                    let preempted = std::mem::take(&mut sel.preempted);
                    let alloc = self.new_alloc(job, tg, p, sel, metric, now);
                    new_ids.insert(alloc.id.clone());
                    append_with_preemptions(ctx, alloc, &preempted);
                }
                None => {
                    self.failed_tg.insert(tg.name.clone(), metric);
                    if p.destructive
                        && let Some(prev) = prev
                    {
                        ctx.pop_update(prev);
                    }
                }
            }
        }
    }

    fn new_alloc(
        &self,
        job: &Arc<Job>,
        tg: &TaskGroup,
        p: &Placement,
        sel: Selected,
        metric: AllocMetric,
        now: i64,
    ) -> Allocation {
        let mut alloc = new_allocation(&self.eval.id, job, tg, &p.name, sel, metric, now);
        if let Some(id) = &self.deployment_id {
            alloc.deployment_id = id.clone();
        }
        if p.canary {
            alloc.deployment_status = Some(Box::new(drover_structs::AllocDeploymentStatus {
                canary: true,
                ..Default::default()
            }));
        }
        if let Some(prev) = &p.previous {
            alloc.previous_allocation = prev.id.clone();
            if p.reschedule {
                alloc.reschedule_tracker =
                    Some(Box::new(next_tracker(prev, policy(prev, Some(job)), now)));
            }
        }
        alloc
    }

    fn create_blocked_eval(
        &mut self,
        planner: &mut dyn Planner,
        plan_failure: bool,
    ) -> Result<(), SchedulerError> {
        let eval = self.eval;
        let now = now_nanos();
        let mut blocked = Evaluation {
            id: generate_id(),
            namespace: eval.namespace.clone(),
            priority: eval.priority,
            eval_type: eval.eval_type.clone(),
            triggered_by: TRIGGER_QUEUED_ALLOCS.to_string(),
            job_id: eval.job_id.clone(),
            job_modify_index: eval.job_modify_index,
            status: EVAL_STATUS_BLOCKED.to_string(),
            status_description: BLOCKED_EVAL_FAILED_PLACEMENTS.to_string(),
            previous_eval: eval.id.clone(),
            failed_tg_allocs: (!self.failed_tg.is_empty()).then(|| self.failed_tg.clone()),
            class_eligibility: (!self.escaped).then(|| self.classes.clone()),
            escaped_computed_class: self.escaped,
            create_time: now,
            modify_time: now,
            ..Default::default()
        };
        if plan_failure {
            blocked.triggered_by = TRIGGER_MAX_PLANS.to_string();
            blocked.status_description = BLOCKED_EVAL_MAX_PLAN_DESC.to_string();
        }
        planner.create_eval(blocked.clone())?;
        self.blocked = Some(blocked);
        Ok(())
    }

    fn status_update(&self, status: &str, description: String) -> Evaluation {
        let mut e = self.eval.clone();
        e.status = status.to_string();
        e.status_description = description;
        e.failed_tg_allocs = (!self.failed_tg.is_empty()).then(|| self.failed_tg.clone());
        e.queued_allocations = Some(self.queued.clone());
        e.snapshot_index = self.snapshot_index;
        e.modify_time = now_nanos();
        if let Some(b) = &self.blocked {
            e.blocked_eval = b.id.clone();
        }
        // Nomad's scheduler names the deployment it worked on; `job run` follows it.
        if let Some(d) = &self.deployment_id {
            e.deployment_id = d.clone();
        }
        e
    }

    fn finish(&self, planner: &mut dyn Planner) -> Result<(), SchedulerError> {
        planner.update_eval(self.status_update(EVAL_STATUS_COMPLETE, String::new()))
    }

    /// No progress after the allowed attempts: a blocked evaluation retries later, this one
    /// is marked failed.
    fn give_up(
        &mut self,
        planner: &mut dyn Planner,
        attempts: usize,
    ) -> Result<(), SchedulerError> {
        if self.blocked.is_none() {
            self.create_blocked_eval(planner, true)?;
        }
        let desc = format!("maximum attempts reached ({attempts})");
        planner.update_eval(self.status_update(EVAL_STATUS_FAILED, desc))?;
        Err(SchedulerError::MaxPlanAttempts(
            self.eval.id.clone(),
            attempts,
        ))
    }
}

/// A new allocation `name` of the group on the selected node, with its resources and the
/// placement's metrics. The legacy resource fields and `TaskLifecycles` Nomad still fills are
/// derived from those and the job when the allocation is written out.
pub(crate) fn new_allocation(
    eval_id: &str,
    job: &Arc<Job>,
    tg: &TaskGroup,
    name: &str,
    sel: Selected,
    metric: AllocMetric,
    now: i64,
) -> Allocation {
    let allocated = AllocatedResources {
        tasks: sel.tasks,
        task_lifecycles: BTreeMap::new(),
        shared: AllocatedSharedResources {
            networks: sel.shared_networks,
            disk_mb: tg.ephemeral_disk.as_ref().map(|d| d.size_mb).unwrap_or(0),
            ports: sel.shared_ports,
        },
    };
    let mut alloc = Allocation {
        id: generate_id(),
        namespace: job.namespace.clone(),
        eval_id: eval_id.to_string(),
        name: name.to_string(),
        node_id: sel.node.id.clone(),
        node_name: sel.node.name.clone(),
        job_id: job.id.clone(),
        job: Some(job.clone()),
        task_group: tg.name.clone(),
        metrics: Some(metric),
        desired_status: ALLOC_DESIRED_RUN.to_string(),
        client_status: ALLOC_CLIENT_PENDING.to_string(),
        create_time: now,
        modify_time: now,
        ..Default::default()
    };
    alloc.set_allocated_resources(allocated);
    alloc
}

/// Nomad's `DesiredTGUpdates` for a dry run: per task group of the job, what the reconciler
/// decided. A placement that replaces an allocation of a draining or lost node is a
/// migration; live allocations of the job nothing touches are ignored.
fn desired_updates(
    results: &ReconcileResults,
    allocs: &[Arc<Allocation>],
    job: Option<&Arc<Job>>,
) -> BTreeMap<String, drover_structs::DesiredUpdates> {
    let mut out: BTreeMap<String, drover_structs::DesiredUpdates> = BTreeMap::new();
    for tg in job.iter().flat_map(|j| &j.task_groups) {
        out.insert(tg.name.clone(), Default::default());
    }
    let mut touched: HashSet<&str> = HashSet::new();
    for p in &results.place {
        let u = out.entry(p.task_group.clone()).or_default();
        if p.canary {
            u.canary += 1;
        } else if p.previous.is_some() && !p.reschedule {
            u.migrate += 1;
        } else {
            u.place += 1;
        }
        if let Some(prev) = &p.previous {
            touched.insert(&prev.id);
        }
    }
    for p in &results.destructive {
        out.entry(p.task_group.clone())
            .or_default()
            .destructive_update += 1;
        if let Some(prev) = &p.previous {
            touched.insert(&prev.id);
        }
    }
    for s in &results.stop {
        if touched.insert(&s.alloc.id) {
            out.entry(s.alloc.task_group.clone()).or_default().stop += 1;
        }
    }
    for a in &results.inplace {
        out.entry(a.task_group.clone()).or_default().in_place_update += 1;
        touched.insert(&a.id);
    }
    for a in allocs {
        if !a.terminal() && !touched.contains(a.id.as_str()) {
            out.entry(a.task_group.clone()).or_default().ignore += 1;
        }
    }
    out
}

/// Adds a placement and the preemptions it needs to the plan.
pub(crate) fn append_with_preemptions(
    ctx: &mut EvalContext<'_>,
    mut alloc: Allocation,
    preempted: &[Arc<Allocation>],
) {
    if !preempted.is_empty() {
        for victim in preempted {
            ctx.append_preemption(victim, &alloc.id);
        }
        alloc.preempted_allocations = Some(preempted.iter().map(|a| a.id.clone()).collect());
    }
    ctx.append_placement(alloc);
}

pub(crate) fn count_allocs(m: &BTreeMap<String, Vec<Allocation>>) -> usize {
    m.values().map(Vec::len).sum()
}

/// Nodes of the job's allocations that are down, draining or gone (`None`).
pub(crate) fn tainted_nodes(
    ctx: &mut EvalContext<'_>,
    allocs: &[Arc<Allocation>],
) -> HashMap<String, Option<Arc<Node>>> {
    let mut out = HashMap::new();
    let mut seen = HashSet::new();
    for a in allocs {
        if !seen.insert(a.node_id.clone()) {
            continue;
        }
        let node = ctx.node(&a.node_id);
        // Disconnected nodes too: their allocations become unknown (Nomad's taintedNodes).
        let disconnected = node
            .as_ref()
            .is_some_and(|n| n.status == drover_structs::NODE_STATUS_DISCONNECTED);
        if tainted(node.as_deref()) || disconnected {
            out.insert(a.node_id.clone(), node);
        }
    }
    out
}

/// Allocations the servers already stopped on a down (or gone) node, but that the client never
/// reported as ended, are marked lost (Nomad's `updateNonTerminalAllocsToLost`).
pub(crate) fn mark_lost_stops(
    ctx: &mut EvalContext<'_>,
    tainted: &HashMap<String, Option<Arc<Node>>>,
    allocs: &[Arc<Allocation>],
) {
    for a in allocs {
        let down = match tainted.get(&a.node_id) {
            None => continue,
            Some(None) => true,
            Some(Some(n)) => n.status == drover_structs::NODE_STATUS_DOWN,
        };
        // Any status the client has not ended: pending, running, or unknown (its node was
        // disconnected before it went down).
        if down
            && a.server_terminal()
            && (a.client_status == ALLOC_CLIENT_RUNNING
                || a.client_status == ALLOC_CLIENT_PENDING
                || a.client_status == drover_structs::ALLOC_CLIENT_UNKNOWN)
        {
            ctx.append_stop(a, ALLOC_LOST, Some(ALLOC_CLIENT_LOST), None);
        }
    }
}

/// Nodes a replacement should avoid: where the previous allocation failed, and where earlier
/// reschedules of it ran.
fn penalty_nodes(prev: Option<&Allocation>) -> HashSet<String> {
    let mut out = HashSet::new();
    if let Some(prev) = prev {
        if prev.client_status == drover_structs::ALLOC_CLIENT_FAILED {
            out.insert(prev.node_id.clone());
        }
        for e in crate::reschedule::tracker_events(prev) {
            out.insert(e.prev_node_id);
        }
    }
    out
}

/// Nomad's `genericAllocUpdateFn`: an allocation of an older job version is updated in place
/// when its group did not change in a way that needs a new allocation and it still fits on its
/// node under the new version; otherwise it is replaced.
pub(crate) fn in_place_decision<'j>(
    ctx: &mut EvalContext<'_>,
    stack: &mut Stack<'j>,
    config: &SchedulerConfig,
    eval_id: &str,
    existing: &Allocation,
    job: &'j Arc<Job>,
    tg: &'j TaskGroup,
) -> UpdateDecision {
    // Allocations without their job are taken to run the current version.
    let Some(old_job) = existing.job.as_ref() else {
        return UpdateDecision::Ignore;
    };
    if old_job.job_modify_index == job.job_modify_index && old_job.version == job.version {
        return UpdateDecision::Ignore;
    }
    if tasks_updated(job, old_job, &tg.name) {
        return UpdateDecision::Destructive;
    }
    if existing.terminal() {
        return UpdateDecision::Ignore;
    }
    let Some(node) = ctx.node(&existing.node_id) else {
        return UpdateDecision::Destructive;
    };
    // Discount the allocation itself while checking that its new version fits.
    ctx.append_stop(existing, ALLOC_IN_PLACE, None, None);
    let options = SelectOptions {
        alloc_name: existing.name.clone(),
        ..Default::default()
    };
    let (selected, _) = stack.select_on(ctx, job, tg, &node, &options, config);
    ctx.pop_update(existing);
    let Some(sel) = selected else {
        return UpdateDecision::Destructive;
    };

    let old = existing.allocated_resources.as_ref();
    let mut tasks = sel.tasks;
    // Ports cannot change in place (a change to them is destructive): keep the old ones.
    for (name, tr) in tasks.iter_mut() {
        tr.networks = old
            .and_then(|o| o.tasks.get(name))
            .and_then(|t| t.networks.clone());
        tr.devices = old
            .and_then(|o| o.tasks.get(name))
            .and_then(|t| t.devices.clone());
    }
    let allocated = AllocatedResources {
        tasks,
        task_lifecycles: BTreeMap::new(),
        shared: AllocatedSharedResources {
            networks: old.and_then(|o| o.shared.networks.clone()),
            disk_mb: tg.ephemeral_disk.as_ref().map(|d| d.size_mb).unwrap_or(0),
            ports: old.and_then(|o| o.shared.ports.clone()),
        },
    };
    let mut updated = existing.clone();
    updated.eval_id = eval_id.to_string();
    updated.job = Some(job.clone());
    updated.set_allocated_resources(allocated);
    updated.modify_time = now_nanos();
    UpdateDecision::InPlace(Box::new(updated))
}
