//! The system scheduler for `system` and `sysbatch` jobs (Nomad's `SystemScheduler`): one
//! allocation of each group on every ready node of the job's datacenters that satisfies the
//! job. A node that joins gets its allocation when its node-update evaluation runs; allocations
//! on down or gone nodes are lost, those marked for migration off a draining node are stopped,
//! and so are those on nodes that no longer satisfy the job. A sysbatch allocation that ended
//! (successfully or not) is not placed again on its node until the job changes.
//!
//! A group's `count` only says whether it runs (0: nowhere, otherwise once per node); Nomad's
//! validation refuses system groups with a count above 1.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use drover_structs::{
    ALLOC_CLIENT_LOST, AllocMetric, Allocation, EVAL_STATUS_BLOCKED, EVAL_STATUS_COMPLETE,
    EVAL_STATUS_FAILED, EVAL_STATUS_PENDING, Evaluation, JOB_TYPE_SYSBATCH, Job, NODE_STATUS_DOWN,
    Node, Plan, TRIGGER_QUEUED_ALLOCS, TaskGroup, VecMap, generate_id, time::now_nanos,
};

use crate::context::EvalContext;
use crate::feasible::{ready_nodes_in_dcs, schedulable};
use crate::generic::{
    append_with_preemptions, count_allocs, in_place_decision, mark_lost_stops, new_allocation,
    tainted_nodes,
};
use crate::reconcile::{
    ALLOC_LOST, ALLOC_NOT_NEEDED, ALLOC_UPDATING, UpdateDecision, ran_successfully,
};
use crate::stack::{SelectOptions, Stack, StackKind};
use crate::util::{Rng, alloc_name};
use crate::{Planner, SchedulerConfig, SchedulerError, State};

/// Attempts without progress before giving up (Nomad's `maxSystemScheduleAttempts`).
const MAX_SYSTEM_ATTEMPTS: usize = 5;
/// The same for sysbatch jobs (Nomad's `maxSysBatchScheduleAttempts`).
const MAX_SYSBATCH_ATTEMPTS: usize = 2;
/// Attempts in all, progress or not.
const HARD_ATTEMPT_CAP: usize = 50;

pub(crate) const ALLOC_NODE_TAINTED: &str = "system alloc not needed as node is tainted";
pub(crate) const ALLOC_NODE_INFEASIBLE: &str =
    "system alloc not needed as node no longer satisfies the job";
const TRIGGER_ROLLING_UPDATE: &str = "rolling-update";
const BLOCKED_EVAL_FAILED_PLACEMENTS: &str = "created to place remaining allocations";
const BLOCKED_EVAL_MAX_PLAN_DESC: &str = "created due to placement conflicts";

pub(crate) fn process(
    state: &dyn State,
    planner: &mut dyn Planner,
    eval: &Evaluation,
    config: &SchedulerConfig,
) -> Result<(), SchedulerError> {
    let sysbatch = eval.eval_type == JOB_TYPE_SYSBATCH;
    let mut sched = SystemScheduler {
        eval,
        config,
        sysbatch,
        failed_tg: BTreeMap::new(),
        queued: BTreeMap::new(),
        blocked: None,
        next_eval: None,
        snapshot_index: state.index(),
    };
    let max = if sysbatch {
        MAX_SYSBATCH_ATTEMPTS
    } else {
        MAX_SYSTEM_ATTEMPTS
    };
    let mut refreshed: Option<Box<dyn State>> = None;
    let (mut without_progress, mut attempts) = (0, 0);
    loop {
        let current: &dyn State = refreshed.as_deref().unwrap_or(state);
        match sched.attempt(current, planner)? {
            None => break,
            Some((new_state, progress)) => {
                if let Some(s) = new_state {
                    refreshed = Some(s);
                }
                attempts += 1;
                without_progress = if progress { 0 } else { without_progress + 1 };
                if without_progress >= max || attempts >= HARD_ATTEMPT_CAP {
                    return sched.give_up(planner, attempts);
                }
            }
        }
    }
    planner.update_eval(sched.status_update(EVAL_STATUS_COMPLETE, String::new()))
}

/// One allocation to place on a node.
struct SysPlacement<'j> {
    name: String,
    tg: &'j TaskGroup,
    node_id: String,
    /// The allocation it replaces on that node.
    previous: Option<Arc<Allocation>>,
}

/// What a diff decided about one existing allocation.
enum Verdict {
    Keep,
    Stop(&'static str),
    Lost,
    Update,
}

struct SystemScheduler<'e> {
    eval: &'e Evaluation,
    config: &'e SchedulerConfig,
    sysbatch: bool,
    failed_tg: BTreeMap<String, AllocMetric>,
    queued: BTreeMap<String, i64>,
    blocked: Option<Evaluation>,
    next_eval: Option<Evaluation>,
    snapshot_index: u64,
}

/// The job's allocations, split: live ones by node, and the latest ended one per (node, name).
struct Existing {
    live: BTreeMap<String, Vec<Arc<Allocation>>>,
    ended: HashMap<(String, String), Arc<Allocation>>,
}

impl Existing {
    fn new(allocs: &[Arc<Allocation>]) -> Existing {
        let mut live: BTreeMap<String, Vec<Arc<Allocation>>> = BTreeMap::new();
        let mut ended: HashMap<(String, String), Arc<Allocation>> = HashMap::new();
        for a in allocs {
            if !a.terminal() {
                live.entry(a.node_id.clone()).or_default().push(a.clone());
                continue;
            }
            let key = (a.node_id.clone(), a.name.clone());
            let newer = ended.get(&key).is_none_or(|b| {
                (a.create_index, a.modify_index) > (b.create_index, b.modify_index)
            });
            if newer {
                ended.insert(key, a.clone());
            }
        }
        Existing { live, ended }
    }
}

fn job_modify_index(a: &Allocation) -> Option<u64> {
    a.job.as_ref().map(|j| j.job_modify_index)
}

impl SystemScheduler<'_> {
    /// One pass: plan against `state` and submit. `None` when done, else the refreshed state
    /// (if any) and whether the plan made progress.
    #[allow(clippy::type_complexity)]
    fn attempt(
        &mut self,
        state: &dyn State,
        planner: &mut dyn Planner,
    ) -> Result<Option<(Option<Box<dyn State>>, bool)>, SchedulerError> {
        let eval = self.eval;
        let job = state.job(&eval.namespace, &eval.job_id);
        self.snapshot_index = state.index();
        self.queued.clear();
        self.failed_tg.clear();

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
        let outcome = self.compute(&mut ctx, job.as_ref());
        if outcome.exhausted && self.blocked.is_none() {
            let escaped = ctx.eligibility.has_escaped();
            let classes = (!escaped).then(|| ctx.eligibility.classes());
            self.create_blocked_eval(planner, escaped, classes, false)?;
        }
        let plan = ctx.into_plan();
        // A dry run submits even an empty plan: its annotations are the answer.
        if plan.is_no_op() && !self.eval.annotate_plan {
            return Ok(None);
        }
        if outcome.limit_reached
            && self.next_eval.is_none()
            && let Some(j) = &job
        {
            let next = self.rolling_eval(j);
            planner.create_eval(next.clone())?;
            self.next_eval = Some(next);
        }
        let expected = count_allocs(&plan.node_update) + count_allocs(&plan.node_allocation);
        let (result, new_state) = planner.submit_plan(plan)?;
        for alloc in result.node_allocation.values().flatten() {
            if outcome.new_ids.contains(&alloc.id)
                && let Some(q) = self.queued.get_mut(&alloc.task_group)
            {
                *q -= 1;
            }
        }
        let committed = count_allocs(&result.node_update) + count_allocs(&result.node_allocation);
        let progress = committed > 0;
        if new_state.is_some() {
            return Ok(Some((new_state, progress)));
        }
        if result.refresh_index != 0 || committed < expected {
            return Err(SchedulerError::Planner(format!(
                "plan for evaluation {} was partly committed ({committed} of {expected}) but no refreshed state came back",
                eval.id
            )));
        }
        Ok(None)
    }

    fn compute(&mut self, ctx: &mut EvalContext<'_>, job: Option<&Arc<Job>>) -> Outcome {
        let mut out = Outcome::default();
        let state = ctx.state;
        let eval = self.eval;
        let allocs = state.allocs_by_job(&eval.namespace, &eval.job_id);
        let tainted = tainted_nodes(ctx, &allocs);
        mark_lost_stops(ctx, &tainted, &allocs);
        let existing = Existing::new(&allocs);
        let is_lost = |node_id: &str| match tainted.get(node_id) {
            Some(None) => true,
            Some(Some(n)) => n.status == NODE_STATUS_DOWN,
            None => false,
        };

        let Some(job) = job.filter(|j| !j.stop) else {
            for (node_id, list) in &existing.live {
                for a in list {
                    if is_lost(node_id) {
                        ctx.append_stop(a, ALLOC_LOST, Some(ALLOC_CLIENT_LOST), None);
                    } else {
                        ctx.append_stop(a, ALLOC_NOT_NEEDED, None, None);
                    }
                }
            }
            return out;
        };
        for tg in &job.task_groups {
            self.queued.insert(tg.name.clone(), 0);
        }
        let (nodes, by_dc) = ready_nodes_in_dcs(state, &job.datacenters);
        let ready: HashMap<&str, &Arc<Node>> = nodes.iter().map(|n| (n.id.as_str(), n)).collect();
        let job_name = if job.name.is_empty() {
            &job.id
        } else {
            &job.name
        };
        let required: Vec<(&TaskGroup, String)> = job
            .task_groups
            .iter()
            .filter(|tg| tg.count > 0)
            .map(|tg| (tg, alloc_name(job_name, &tg.name, 0)))
            .collect();
        let node_ids: BTreeSet<&str> = existing
            .live
            .keys()
            .map(String::as_str)
            .chain(ready.keys().copied())
            .collect();

        let mut stack = Stack::new(StackKind::System);
        let mut stops: Vec<(Arc<Allocation>, &'static str, bool)> = Vec::new();
        let mut updates: Vec<(Arc<Allocation>, &TaskGroup)> = Vec::new();
        let mut place: Vec<SysPlacement<'_>> = Vec::new();
        // Nomad's `DesiredTGUpdates`, kept for a dry run only (it costs a map entry per
        // allocation).
        let annotate = eval.annotate_plan;
        let mut desired: BTreeMap<String, drover_structs::DesiredUpdates> = if annotate {
            job.task_groups
                .iter()
                .map(|tg| (tg.name.clone(), Default::default()))
                .collect()
        } else {
            BTreeMap::new()
        };
        let mut count = |tg: &str, f: fn(&mut drover_structs::DesiredUpdates)| {
            if annotate {
                f(desired.entry(tg.to_string()).or_default());
            }
        };
        for node_id in node_ids {
            let live = existing
                .live
                .get(node_id)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let node_ready = ready.get(node_id).copied();
            for a in live {
                let verdict = match required.iter().find(|(_, name)| *name == a.name) {
                    None => Verdict::Stop(ALLOC_NOT_NEEDED),
                    Some(_) if a.desired_transition.migrate == Some(true) => {
                        Verdict::Stop(ALLOC_NODE_TAINTED)
                    }
                    Some(_) if tainted.contains_key(node_id) => {
                        if (self.sysbatch && ran_successfully(a)) || !is_lost(node_id) {
                            Verdict::Keep
                        } else {
                            Verdict::Lost
                        }
                    }
                    Some((tg, _)) => match node_ready {
                        None => {
                            // Not ready or not eligible: left alone. Outside the job's
                            // datacenters now: stopped.
                            let in_dcs = ctx.node(node_id).is_some_and(|n| {
                                n.is_in_any_dc(&job.datacenters) && !schedulable(&n)
                            });
                            if in_dcs {
                                Verdict::Keep
                            } else {
                                Verdict::Stop(ALLOC_NOT_NEEDED)
                            }
                        }
                        Some(_) if job_modify_index(a) != Some(job.job_modify_index) => {
                            updates.push((a.clone(), tg));
                            Verdict::Update
                        }
                        Some(node) => {
                            if stack.feasible_on(ctx, job, tg, node) {
                                Verdict::Keep
                            } else {
                                Verdict::Stop(ALLOC_NODE_INFEASIBLE)
                            }
                        }
                    },
                };
                match verdict {
                    Verdict::Keep => count(&a.task_group, |u| u.ignore += 1),
                    Verdict::Update => {}
                    Verdict::Stop(desc) => stops.push((a.clone(), desc, false)),
                    Verdict::Lost => stops.push((a.clone(), ALLOC_LOST, true)),
                }
            }
            for (tg, name) in &required {
                if live.iter().any(|a| a.name == *name) {
                    continue;
                }
                let ended = existing.ended.get(&(node_id.to_string(), name.clone()));
                if self.sysbatch
                    && let Some(done) = ended
                {
                    // Ran once on this node: again only for a new version of the job.
                    if job_modify_index(done) != Some(job.job_modify_index) {
                        updates.push((done.clone(), tg));
                    }
                    continue;
                }
                if tainted.contains_key(node_id) || node_ready.is_none() {
                    continue;
                }
                place.push(SysPlacement {
                    name: name.clone(),
                    tg,
                    node_id: node_id.to_string(),
                    previous: ended.cloned(),
                });
            }
        }

        for (a, desc, lost) in &stops {
            count(&a.task_group, |u| u.stop += 1);
            let client_status = lost.then_some(ALLOC_CLIENT_LOST);
            ctx.append_stop(a, desc, client_status, None);
        }
        let mut destructive = Vec::new();
        for (a, tg) in updates {
            match in_place_decision(ctx, &mut stack, self.config, &eval.id, &a, job, tg) {
                UpdateDecision::Ignore => count(&tg.name, |u| u.ignore += 1),
                UpdateDecision::InPlace(updated) => {
                    count(&tg.name, |u| u.in_place_update += 1);
                    ctx.append_alloc(*updated)
                }
                UpdateDecision::Destructive => destructive.push((a, tg)),
            }
        }
        // A rolling update replaces `max_parallel` allocations per evaluation.
        let rolling = job.update.stagger > 0 && job.update.max_parallel > 0;
        let limit = if rolling {
            job.update.max_parallel as usize
        } else {
            usize::MAX
        };
        out.limit_reached = destructive.len() > limit;
        for p in &place {
            count(&p.tg.name, |u| u.place += 1);
        }
        for (i, (_, tg)) in destructive.iter().enumerate() {
            if i < limit {
                count(&tg.name, |u| u.destructive_update += 1);
            } else {
                count(&tg.name, |u| u.ignore += 1);
            }
        }
        if annotate {
            ctx.plan.annotations = Some(drover_structs::PlanAnnotations {
                desired_tg_updates: desired,
                preempted_allocs: None,
            });
        }
        for (a, tg) in destructive.into_iter().take(limit) {
            ctx.append_stop(&a, ALLOC_UPDATING, None, None);
            place.push(SysPlacement {
                name: a.name.clone(),
                tg,
                node_id: a.node_id.clone(),
                previous: Some(a),
            });
        }
        self.compute_placements(ctx, &mut stack, job, &ready, &by_dc, place, &mut out);
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn compute_placements<'j>(
        &mut self,
        ctx: &mut EvalContext<'_>,
        stack: &mut Stack<'j>,
        job: &'j Arc<Job>,
        ready: &HashMap<&str, &Arc<Node>>,
        by_dc: &VecMap<String, i64>,
        place: Vec<SysPlacement<'j>>,
        out: &mut Outcome,
    ) {
        let now = now_nanos();
        let mut options = SelectOptions {
            preempt: self.config.preemption_enabled(&job.job_type),
            ..Default::default()
        };
        let mut filtered: BTreeMap<String, AllocMetric> = BTreeMap::new();
        let place: Vec<(SysPlacement<'j>, &Arc<Node>)> = place
            .into_iter()
            .filter_map(|p| ready.get(p.node_id.as_str()).map(|n| (p, *n)))
            .collect();
        for (p, _) in &place {
            *self.queued.entry(p.tg.name.clone()).or_insert(0) += 1;
        }
        for (p, node) in place {
            let tg_name = p.tg.name.as_str();
            options.alloc_name.clone_from(&p.name);
            let (selected, mut metric) =
                stack.select_on(ctx, job, p.tg, node, &options, self.config);
            let Some(mut sel) = selected else {
                if metric.nodes_filtered > 0 {
                    // A node the group cannot use is not a failure, unless no node can.
                    let queued = self.queued.entry(tg_name.to_string()).or_insert(0);
                    *queued -= 1;
                    let merged = filtered.entry(tg_name.to_string()).or_default();
                    merge_filtered(merged, &metric);
                    if *queued <= 0 {
                        self.failed_tg.insert(tg_name.to_string(), merged.clone());
                    }
                    continue;
                }
                out.exhausted = true;
                match self.failed_tg.get_mut(tg_name) {
                    Some(m) => m.coalesced_failures += 1,
                    None => {
                        metric.nodes_available = Some(by_dc.clone());
                        self.failed_tg.insert(tg_name.to_string(), metric);
                    }
                }
                continue;
            };
            metric.nodes_available = Some(by_dc.clone());
            let preempted = std::mem::take(&mut sel.preempted);
            let mut alloc = new_allocation(&self.eval.id, job, p.tg, &p.name, sel, metric, now);
            if let Some(prev) = &p.previous {
                alloc.previous_allocation = prev.id.clone();
            }
            out.new_ids.insert(alloc.id.clone());
            append_with_preemptions(ctx, alloc, &preempted);
        }
    }

    fn rolling_eval(&self, job: &Job) -> Evaluation {
        let eval = self.eval;
        let now = now_nanos();
        Evaluation {
            id: generate_id(),
            namespace: eval.namespace.clone(),
            priority: eval.priority,
            eval_type: eval.eval_type.clone(),
            triggered_by: TRIGGER_ROLLING_UPDATE.to_string(),
            job_id: eval.job_id.clone(),
            job_modify_index: eval.job_modify_index,
            status: EVAL_STATUS_PENDING.to_string(),
            wait: job.update.stagger,
            previous_eval: eval.id.clone(),
            create_time: now,
            modify_time: now,
            ..Default::default()
        }
    }

    fn create_blocked_eval(
        &mut self,
        planner: &mut dyn Planner,
        escaped: bool,
        classes: Option<BTreeMap<String, bool>>,
        plan_failure: bool,
    ) -> Result<(), SchedulerError> {
        let eval = self.eval;
        let now = now_nanos();
        let blocked = Evaluation {
            id: generate_id(),
            namespace: eval.namespace.clone(),
            priority: eval.priority,
            eval_type: eval.eval_type.clone(),
            triggered_by: if plan_failure {
                drover_structs::TRIGGER_MAX_PLANS.to_string()
            } else {
                TRIGGER_QUEUED_ALLOCS.to_string()
            },
            job_id: eval.job_id.clone(),
            job_modify_index: eval.job_modify_index,
            status: EVAL_STATUS_BLOCKED.to_string(),
            status_description: if plan_failure {
                BLOCKED_EVAL_MAX_PLAN_DESC
            } else {
                BLOCKED_EVAL_FAILED_PLACEMENTS
            }
            .to_string(),
            previous_eval: eval.id.clone(),
            failed_tg_allocs: (!self.failed_tg.is_empty()).then(|| self.failed_tg.clone()),
            class_eligibility: classes,
            escaped_computed_class: escaped,
            create_time: now,
            modify_time: now,
            ..Default::default()
        };
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
        if let Some(n) = &self.next_eval {
            e.next_eval = n.id.clone();
        }
        e
    }

    fn give_up(
        &mut self,
        planner: &mut dyn Planner,
        attempts: usize,
    ) -> Result<(), SchedulerError> {
        if self.blocked.is_none() {
            self.create_blocked_eval(planner, true, None, true)?;
        }
        let desc = format!("maximum attempts reached ({attempts})");
        planner.update_eval(self.status_update(EVAL_STATUS_FAILED, desc))?;
        Err(SchedulerError::MaxPlanAttempts(
            self.eval.id.clone(),
            attempts,
        ))
    }
}

#[derive(Default)]
struct Outcome {
    new_ids: std::collections::HashSet<String>,
    /// Some placement found no room on its node.
    exhausted: bool,
    /// A rolling update left replacements for a later evaluation.
    limit_reached: bool,
}

/// Nomad's `mergeNodeFiltered`: the filtering of several one-node placements as one metric.
fn merge_filtered(acc: &mut AllocMetric, m: &AllocMetric) {
    acc.nodes_evaluated += m.nodes_evaluated;
    acc.nodes_filtered += m.nodes_filtered;
    for (target, source) in [
        (&mut acc.class_filtered, &m.class_filtered),
        (&mut acc.constraint_filtered, &m.constraint_filtered),
    ] {
        let into = target.get_or_insert_with(VecMap::new);
        for (k, v) in source.iter().flatten() {
            *into.entry(k.clone()).or_insert(0) += v;
        }
    }
    acc.allocation_time += m.allocation_time;
}
