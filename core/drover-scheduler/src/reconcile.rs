//! The reconciler (Nomad's `allocReconciler`, without deployments and canaries): compares a
//! job's existing allocations with its spec, group by group, and decides what to stop, what to
//! place, what to update in place or destructively, and which failed allocations to reschedule
//! now or later.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use drover_structs::{
    ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST, ALLOC_CLIENT_RUNNING, ALLOC_CLIENT_UNKNOWN,
    ALLOC_DESIRED_EVICT, ALLOC_DESIRED_RUN, ALLOC_DESIRED_STOP, Allocation, EVAL_STATUS_PENDING,
    Evaluation, Job, NODE_STATUS_DISCONNECTED, NODE_STATUS_DOWN, Node,
    TRIGGER_MAX_DISCONNECT_TIMEOUT, TRIGGER_RETRY_FAILED_ALLOC, TaskGroup, generate_id,
};

use crate::reschedule::{next_reschedule_time, next_reschedule_time_by_time, policy};
use crate::util::alloc_name;

mod deployment;
mod disconnect;
mod names;

pub(crate) use names::NameIndex;

pub(crate) const ALLOC_NOT_NEEDED: &str = "alloc not needed due to job update";
pub(crate) const ALLOC_MIGRATING: &str = "alloc is being migrated";
pub(crate) const ALLOC_UPDATING: &str = "alloc is being updated due to job update";
pub(crate) const ALLOC_LOST: &str = "alloc is lost since its node is down";
pub(crate) const ALLOC_IN_PLACE: &str = "alloc updating in-place";
pub(crate) const ALLOC_RESCHEDULED: &str = "alloc was rescheduled because it failed";
pub(crate) const RESCHEDULING_FOLLOWUP_EVAL_DESC: &str = "created for delayed rescheduling";
pub(crate) const ALLOC_UNKNOWN: &str = "alloc is unknown since its node is disconnected";
pub(crate) const ALLOC_RECONNECTED: &str = "alloc not needed due to disconnected client reconnect";
pub(crate) const DISCONNECT_TIMEOUT_FOLLOWUP_EVAL_DESC: &str =
    "created for delayed disconnect timeout";

/// Failed allocations due within this long are rescheduled now rather than later.
const RESCHEDULE_WINDOW: i64 = 1_000_000_000;
/// Delayed reschedules due within this long of each other share one follow-up evaluation.
const BATCHED_FAILED_ALLOC_WINDOW: i64 = 5_000_000_000;

/// An allocation to place.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    pub name: String,
    pub task_group: String,
    /// The allocation this one replaces.
    pub previous: Option<Arc<Allocation>>,
    /// Replacing a failed allocation: the replacement carries the reschedule history.
    pub reschedule: bool,
    /// A destructive update: `previous` is stopped only if the replacement finds a node.
    pub destructive: bool,
    /// A canary of the deployment: placed beside the allocations it may replace.
    pub canary: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Stop {
    pub alloc: Arc<Allocation>,
    pub description: &'static str,
    pub client_status: Option<&'static str>,
    /// The delayed evaluation that replaces it (`stop_after_client_disconnect`).
    pub followup: Option<String>,
}

/// What to do with an existing allocation when the job changed.
pub(crate) enum UpdateDecision {
    /// Nothing: same job version, or terminal.
    Ignore,
    /// Replace it.
    Destructive,
    /// Keep it, with this new version of the allocation.
    InPlace(Box<Allocation>),
}

#[derive(Default)]
pub(crate) struct ReconcileResults {
    pub place: Vec<Placement>,
    pub destructive: Vec<Placement>,
    pub stop: Vec<Stop>,
    pub inplace: Vec<Allocation>,
    /// Allocations updated only to point at their follow-up evaluation.
    pub attribute_updates: Vec<Allocation>,
    pub followup_evals: Vec<Evaluation>,
    /// Allocations of disconnected nodes, now `unknown` (Nomad's `disconnectUpdates`).
    pub disconnect_updates: Vec<Allocation>,
    /// Allocations that reconnected and keep running (Nomad's `reconnectUpdates`).
    pub reconnect_updates: Vec<Allocation>,
    /// A deployment this pass created (it goes into the plan whole).
    pub deployment: Option<drover_structs::Deployment>,
    pub deployment_updates: Vec<drover_structs::DeploymentStatusUpdate>,
    /// The deployment new placements and in-place updates join, if one is active.
    pub deployment_id: Option<String>,
}

type AllocSet = Vec<Arc<Allocation>>;

pub(crate) struct Reconciler<'a> {
    pub job: Option<&'a Arc<Job>>,
    pub batch: bool,
    pub eval: &'a Evaluation,
    /// Unix nanoseconds.
    pub now: i64,
    /// Nodes whose allocations must move: down or draining (`Some`), or gone (`None`).
    pub tainted: &'a HashMap<String, Option<Arc<Node>>>,
    /// The job's latest deployment (Nomad's `LatestDeploymentByJobID`); `None` for batch jobs.
    pub deployment: Option<&'a Arc<drover_structs::Deployment>>,
}

impl Reconciler<'_> {
    pub(crate) fn compute(
        &self,
        allocs: &[Arc<Allocation>],
        update: &mut dyn FnMut(&Allocation, &Arc<Job>, &TaskGroup) -> UpdateDecision,
    ) -> ReconcileResults {
        let mut r = ReconcileResults::default();
        let mut matrix: BTreeMap<String, AllocSet> = BTreeMap::new();
        for a in allocs {
            matrix
                .entry(a.task_group.clone())
                .or_default()
                .push(a.clone());
        }
        let mut track = deployment::DeploymentTrack::new(
            self.deployment,
            self.job.map(|j| &**j),
            self.now,
            self.eval.priority,
        );
        let job = match self.job {
            Some(j) if !j.stop => j,
            _ => {
                for (_, set) in matrix {
                    self.stop_all(set, &mut r);
                }
                r.deployment_updates = track.updates;
                return r;
            }
        };
        for tg in &job.task_groups {
            matrix.entry(tg.name.clone()).or_default();
        }
        let mut complete = true;
        for (group, mut set) in matrix {
            sort_by_name(&mut set);
            complete &= self.compute_group(job, &group, set, &mut r, update, &mut track);
        }
        track.finish(complete);
        r.deployment_id = track.active_id().map(str::to_string);
        if track.created {
            r.deployment = track.current.take();
        }
        r.deployment_updates = track.updates;
        r
    }

    /// Stops every live allocation of the set: the job is stopped or the group is gone.
    fn stop_all(&self, set: AllocSet, r: &mut ReconcileResults) {
        let live: AllocSet = set.into_iter().filter(|a| !a.terminal()).collect();
        let t = self.filter_by_tainted(live);
        for a in t
            .untainted
            .into_iter()
            .chain(t.migrate)
            .chain(t.disconnecting)
            .chain(t.reconnecting)
        {
            r.stop.push(Stop {
                alloc: a,
                description: ALLOC_NOT_NEEDED,
                client_status: None,
                followup: None,
            });
        }
        for a in t.lost.into_iter().chain(t.expiring) {
            r.stop.push(Stop {
                alloc: a,
                description: ALLOC_LOST,
                client_status: Some(ALLOC_CLIENT_LOST),
                followup: None,
            });
        }
    }

    /// Reconciles one group; returns whether its part of the deployment is complete.
    fn compute_group(
        &self,
        job: &Arc<Job>,
        group: &str,
        all: AllocSet,
        r: &mut ReconcileResults,
        update: &mut dyn FnMut(&Allocation, &Arc<Job>, &TaskGroup) -> UpdateDecision,
        track: &mut deployment::DeploymentTrack,
    ) -> bool {
        let Some(tg) = job.lookup_task_group(group) else {
            self.stop_all(all, r);
            return true;
        };
        let all = self.filter_old_terminal(job, all);
        // Nomad's cancelUnneededCanaries: unpromoted canaries of an older or failed
        // deployment go; the current deployment's are kept apart while they wait.
        let doomed = track.canaries_to_stop();
        let (cancelled, all): (AllocSet, AllocSet) = all
            .into_iter()
            .partition(|a| doomed.contains(&a.id) && !a.terminal());
        for a in cancelled {
            r.stop.push(Stop {
                alloc: a,
                description: ALLOC_NOT_NEEDED,
                client_status: None,
                followup: None,
            });
        }
        let canary_ids: HashSet<String> = track.current_canaries().into_iter().collect();
        let (state, existing_state) = track.group_state(tg);
        let mut state = state;
        let canarying = state.desired_canaries != 0 && !state.promoted;
        let Tainted {
            untainted,
            mut migrate,
            mut lost,
            mut disconnecting,
            reconnecting,
            expiring,
        } = self.filter_by_tainted(all.clone());
        let Reschedulable {
            mut untainted,
            now: mut reschedule_now,
            later,
            lost_due,
            lost_held,
        } = self.filter_by_rescheduleable(job, untainted);

        // Reconnecting allocations and their replacements first: which one survives is decided
        // only when the client is back (Nomad's reconcileReconnecting).
        if !reconnecting.is_empty() {
            let (reconnect, stopped) = self.reconcile_reconnecting(job, tg, &reconnecting, &all, r);
            untainted.retain(|a| !stopped.contains(&a.id));
            migrate.retain(|a| !stopped.contains(&a.id));
            lost.retain(|a| !stopped.contains(&a.id));
            disconnecting.retain(|a| !stopped.contains(&a.id));
            reschedule_now.retain(|a| !stopped.contains(&a.id));
            for a in reconnect {
                if a.client_status == ALLOC_CLIENT_RUNNING {
                    let mut back = (*a).clone();
                    back.append_client_state(ALLOC_CLIENT_RUNNING, self.now);
                    r.reconnect_updates.push(back);
                }
                untainted.push(a);
            }
        }

        // Unknown allocations past `lost_after` are lost, unless the group keeps them.
        if tg.disconnect_replace() {
            lost.extend(expiring);
        } else {
            untainted.extend(expiring);
        }

        // Running allocations of disconnected nodes become unknown, with an evaluation at their
        // `lost_after` deadline; a replacement is placed now or later as `replace` says.
        let mut disconnect_ids = HashSet::new();
        if !disconnecting.is_empty() {
            let lost_after = tg.disconnect_lost_after();
            let timeouts: Vec<(Arc<Allocation>, i64)> = if lost_after != 0 {
                disconnecting
                    .iter()
                    .map(|a| (a.clone(), a.disconnect_timeout(Some(job), self.now)))
                    .collect()
            } else {
                Vec::new()
            };
            let timeout_ids = self.later_evals(
                job,
                timeouts,
                TRIGGER_MAX_DISCONNECT_TIMEOUT,
                DISCONNECT_TIMEOUT_FOLLOWUP_EVAL_DESC,
                r,
            );
            let mut reschedule_later = Vec::new();
            let mut updated = Vec::new();
            for a in disconnecting {
                let mut u = (*a).clone();
                u.client_status = ALLOC_CLIENT_UNKNOWN.into();
                u.append_client_state(ALLOC_CLIENT_UNKNOWN, self.now);
                u.client_description = ALLOC_UNKNOWN.into();
                u.followup_eval_id = timeout_ids.get(&a.id).cloned().unwrap_or_default();
                let u = Arc::new(u);
                disconnect_ids.insert(u.id.clone());
                let (at, eligible) = if lost_after != 0 {
                    self.reschedule_on_disconnect(&a, job)
                } else {
                    (0, false)
                };
                if eligible && at.saturating_sub(self.now) <= RESCHEDULE_WINDOW {
                    reschedule_now.push(u.clone());
                } else {
                    if eligible {
                        reschedule_later.push((u.clone(), at));
                    }
                    untainted.push(u.clone());
                }
                updated.push(u);
            }
            let later_ids = self.later_evals(
                job,
                reschedule_later,
                TRIGGER_RETRY_FAILED_ALLOC,
                RESCHEDULING_FOLLOWUP_EVAL_DESC,
                r,
            );
            for u in updated {
                let mut u = (*u).clone();
                if let Some(id) = later_ids.get(&u.id) {
                    u.followup_eval_id = id.clone();
                }
                r.disconnect_updates.push(u);
            }
        }

        // `stop_after_client_disconnect`: the replacement of a lost allocation waits until the
        // client has surely stopped it, and so does every placement of the group.
        let lost_later: Vec<(Arc<Allocation>, i64)> = lost
            .iter()
            .filter_map(|a| {
                a.wait_client_stop(Some(job), self.now)
                    .filter(|t| *t > self.now)
                    .map(|t| (a.clone(), t))
            })
            .collect();
        let delay_group = !lost_later.is_empty() || !lost_held.is_empty();
        let lost_followups = self.later_evals(
            job,
            lost_later,
            TRIGGER_RETRY_FAILED_ALLOC,
            RESCHEDULING_FOLLOWUP_EVAL_DESC,
            r,
        );
        let reschedule_later = later.len();
        self.handle_delayed_reschedules(job, later, r);

        let mut names = NameIndex::new(
            &job.id,
            group,
            tg.count,
            untainted
                .iter()
                .chain(&migrate)
                .chain(&reschedule_now)
                .chain(&lost)
                .chain(&lost_due)
                .chain(&lost_held),
        );
        let canaries: AllocSet = untainted
            .iter()
            .filter(|a| canary_ids.contains(&a.id) && !a.terminal())
            .cloned()
            .collect();
        // Waiting canaries are not counted against the group's count; once promoted, the old
        // allocations with the canaries' names are the ones to go (Nomad's computeStop).
        let counted: AllocSet = if canarying {
            untainted
                .iter()
                .filter(|a| !canary_ids.contains(&a.id))
                .cloned()
                .collect()
        } else {
            untainted.clone()
        };
        let mut stopped = HashSet::new();
        if !canarying && !canaries.is_empty() {
            let mut remove = counted.len() as i64 + migrate.len() as i64 - tg.count;
            let canary_names: HashSet<&str> = canaries.iter().map(|a| a.name.as_str()).collect();
            for a in counted.iter().filter(|a| !canary_ids.contains(&a.id)) {
                if remove <= 0 {
                    break;
                }
                if !a.terminal() && canary_names.contains(a.name.as_str()) {
                    r.stop.push(Stop {
                        alloc: a.clone(),
                        description: ALLOC_NOT_NEEDED,
                        client_status: None,
                        followup: None,
                    });
                    stopped.insert(a.id.clone());
                    remove -= 1;
                }
            }
        }
        let counted: AllocSet = counted
            .into_iter()
            .filter(|a| !stopped.contains(&a.id))
            .collect();
        stopped.extend(compute_stop(
            tg,
            &mut names,
            &counted,
            &migrate,
            &lost,
            &lost_followups,
            r,
        ));
        untainted.retain(|a| !stopped.contains(&a.id));
        migrate.retain(|a| !stopped.contains(&a.id));

        let mut destructive: AllocSet = Vec::new();
        let inplace_before = r.inplace.len();
        if canarying {
            untainted.retain(|a| !canary_ids.contains(&a.id));
        }
        for a in &untainted {
            // Allocations of a disconnected node wait for it before any update.
            if a.client_status == ALLOC_CLIENT_UNKNOWN {
                continue;
            }
            match update(a, job, tg) {
                UpdateDecision::Ignore => {}
                UpdateDecision::Destructive => destructive.push(a.clone()),
                UpdateDecision::InPlace(new) => r.inplace.push(*new),
            }
        }
        let inplace = r.inplace.len() - inplace_before;

        // Canaries first (Nomad's computeCanaries): a destructive update of a group with
        // `canary = N` places N canaries beside the old allocations, named after the
        // allocations they would replace, and waits for their promotion.
        let wanted_canaries = deployment::strategy(tg).map_or(0, |u| u.canary.max(0));
        let requires_canaries =
            !destructive.is_empty() && (canaries.len() as i64) < wanted_canaries && !state.promoted;
        if requires_canaries {
            state.desired_canaries = wanted_canaries;
            if track.place_ready() {
                let taken: HashSet<&str> = canaries.iter().map(|a| a.name.as_str()).collect();
                let missing = (wanted_canaries as usize).saturating_sub(canaries.len());
                for a in destructive
                    .iter()
                    .filter(|a| !taken.contains(a.name.as_str()))
                    .take(missing)
                {
                    r.place.push(Placement {
                        name: a.name.clone(),
                        task_group: tg.name.clone(),
                        previous: None,
                        reschedule: false,
                        destructive: false,
                        canary: true,
                    });
                }
            }
        }
        let canarying = state.desired_canaries != 0 && !state.promoted;

        // Nomad's deployment gates: new placements wait while the deployment is paused or
        // failed (lost and failed allocations are still replaced) or canaries wait for their
        // promotion, and destructive updates go `max_parallel` at a time, less what the
        // deployment has not seen healthy yet.
        let place_ready = track.place_ready() && !canarying;
        let mut budget = track.under_provisioned_by(
            tg,
            &untainted,
            destructive.len() + migrate.len(),
            canarying,
        );
        let mut placements = 0;
        let mut rescheduled = HashSet::new();
        if !delay_group {
            let present = untainted.len();
            let place = compute_placements(
                tg,
                &mut names,
                present,
                &migrate,
                &reschedule_now,
                &lost,
                &lost_due,
            );
            placements = place.len();
            let failed_deployment = track.failed.then(|| track.active_id()).flatten();
            for p in place {
                let replaces = p.previous.as_ref();
                let allowed = place_ready
                    || replaces.is_some_and(|prev| {
                        if p.reschedule {
                            failed_deployment != Some(prev.deployment_id.as_str())
                        } else {
                            lost.iter().chain(&lost_due).any(|l| l.id == prev.id)
                        }
                    });
                if !allowed {
                    continue;
                }
                if p.reschedule
                    && let Some(prev) = replaces
                {
                    rescheduled.insert(prev.id.clone());
                }
                r.place.push(p);
            }
            if place_ready {
                budget -= placements.min(budget);
            }
        }
        let rescheduling = reschedule_now.len();
        for a in reschedule_now {
            // A disconnected allocation stays (unknown) beside its replacement.
            if disconnect_ids.contains(&a.id) || !rescheduled.contains(&a.id) {
                continue;
            }
            r.stop.push(Stop {
                alloc: a,
                description: ALLOC_RESCHEDULED,
                client_status: None,
                followup: None,
            });
        }
        let updating = if place_ready {
            destructive.len().min(budget)
        } else {
            0
        };
        let destructive_total = destructive.len();
        for a in destructive.into_iter().take(updating) {
            r.destructive.push(Placement {
                name: a.name.clone(),
                task_group: tg.name.clone(),
                previous: Some(a),
                reschedule: false,
                destructive: true,
                canary: false,
            });
        }
        let migrating = migrate.len();
        for a in migrate {
            r.stop.push(Stop {
                alloc: a.clone(),
                description: ALLOC_MIGRATING,
                client_status: None,
                followup: None,
            });
            r.place.push(Placement {
                name: a.name.clone(),
                task_group: tg.name.clone(),
                previous: Some(a),
                reschedule: false,
                destructive: false,
                canary: false,
            });
        }
        let updating_spec = destructive_total != 0 || !r.inplace.is_empty();
        track.attach(job, tg, state, existing_state, &all, updating_spec);
        let remaining = destructive_total
            + inplace
            + placements
            + migrating
            + rescheduling
            + reschedule_later
            + usize::from(requires_canaries);
        track.group_complete(&tg.name, remaining)
    }

    /// Batch jobs ignore terminal allocations of older job versions.
    fn filter_old_terminal(&self, job: &Job, all: AllocSet) -> AllocSet {
        if !self.batch {
            return all;
        }
        all.into_iter()
            .filter(|a| !(a.terminal() && a.job_version() < job.version))
            .collect()
    }

    /// Nomad's `filterByTainted`: splits allocations by what their node's state asks of them.
    fn filter_by_tainted(&self, all: AllocSet) -> Tainted {
        let current = self.job.map(|j| &**j);
        let mut t = Tainted::default();
        for a in all {
            let reconnect = matches!(
                a.client_status.as_str(),
                ALLOC_CLIENT_UNKNOWN | ALLOC_CLIENT_RUNNING | ALLOC_CLIENT_FAILED
            ) && a.needs_to_reconnect();
            if reconnect
                && a.desired_status == ALLOC_DESIRED_RUN
                && a.client_status == ALLOC_CLIENT_FAILED
            {
                t.reconnecting.push(a);
                continue;
            }
            if a.terminal() && !reconnect {
                t.untainted.push(a);
                continue;
            }
            if a.disconnect_expired(current, self.now) {
                t.expiring.push(a);
                continue;
            }
            let node = self.tainted.get(&a.node_id);
            if let Some(Some(n)) = node
                && n.status == NODE_STATUS_DISCONNECTED
            {
                let lost_after = a
                    .job
                    .as_deref()
                    .or(current)
                    .and_then(|j| j.lookup_task_group(&a.task_group))
                    .map(|tg| tg.disconnect_lost_after())
                    .unwrap_or(0);
                if a.client_status == ALLOC_CLIENT_UNKNOWN {
                    t.untainted.push(a);
                } else if !a.replace_on_disconnect(current)
                    || (lost_after != 0 && a.client_status == ALLOC_CLIENT_RUNNING)
                {
                    t.disconnecting.push(a);
                } else {
                    t.lost.push(a);
                }
                continue;
            }
            if a.desired_transition.migrate == Some(true) {
                t.migrate.push(a);
                continue;
            }
            if reconnect
                && a.client_status == ALLOC_CLIENT_FAILED
                && a.desired_status == ALLOC_DESIRED_STOP
            {
                continue;
            }
            match node {
                None => {
                    if reconnect {
                        t.reconnecting.push(a);
                    } else {
                        t.untainted.push(a);
                    }
                }
                Some(None) => t.lost.push(a),
                Some(Some(n)) if n.status == NODE_STATUS_DOWN => {
                    if !a.replace_on_disconnect(current) && a.client_status == ALLOC_CLIENT_UNKNOWN
                    {
                        t.untainted.push(a);
                    } else if !a.replace_on_disconnect(current)
                        && a.client_status == ALLOC_CLIENT_RUNNING
                    {
                        t.disconnecting.push(a);
                    } else {
                        t.lost.push(a);
                    }
                }
                // Draining (or any other taint): migrations are marked on the allocation.
                Some(Some(_)) => {
                    if reconnect {
                        t.reconnecting.push(a);
                    } else {
                        t.untainted.push(a);
                    }
                }
            }
        }
        t
    }

    /// Separates failed allocations to reschedule now or later from those that count as
    /// present; drops those that should be ignored (stopped, or completed services). Lost
    /// allocations whose replacement waits for `stop_after_client_disconnect` are held (their
    /// evaluation has not come) or due (it has).
    fn filter_by_rescheduleable(&self, job: &Job, set: AllocSet) -> Reschedulable {
        let mut out = Reschedulable::default();
        for a in set {
            // Already replaced.
            if !a.next_allocation.is_empty() && a.terminal() {
                continue;
            }
            if a.client_status == ALLOC_CLIENT_LOST
                && a.server_terminal()
                && !a.followup_eval_id.is_empty()
                && let Some(at) = a.wait_client_stop(Some(job), self.now)
            {
                if a.followup_eval_id == self.eval.id
                    || at.saturating_sub(self.now) <= RESCHEDULE_WINDOW
                {
                    out.lost_due.push(a);
                } else {
                    out.lost_held.push(a);
                }
                continue;
            }
            match should_filter(&a, self.batch) {
                Filter::Untainted => {
                    out.untainted.push(a);
                    continue;
                }
                Filter::Ignore => continue,
                Filter::Consider => {}
            }
            let (eligible_now, eligible_later, at) = self.reschedulable(&a, job);
            if eligible_now {
                out.now.push(a);
            } else {
                if eligible_later {
                    out.later.push((a.clone(), at));
                }
                out.untainted.push(a);
            }
        }
        out
    }

    /// Nomad's `updateByReschedulable`.
    fn reschedulable(&self, a: &Allocation, job: &Job) -> (bool, bool, i64) {
        let forced = a.desired_transition.force_reschedule == Some(true);
        let p = policy(a, Some(job));
        // An unknown allocation whose delayed replacement is due counts from its disconnect.
        let (at, eligible) = match p {
            Some(p)
                if a.client_status == ALLOC_CLIENT_UNKNOWN
                    && a.followup_eval_id == self.eval.id =>
            {
                next_reschedule_time_by_time(a, p, a.last_unknown())
            }
            _ => next_reschedule_time(a, p),
        };
        if eligible
            && (a.followup_eval_id == self.eval.id
                || at.saturating_sub(self.now) <= RESCHEDULE_WINDOW)
        {
            return (true, false, at);
        }
        let later = eligible && a.followup_eval_id.is_empty();
        (forced, later, at)
    }

    /// One follow-up evaluation per window of reschedule times; the allocations point at theirs.
    fn handle_delayed_reschedules(
        &self,
        job: &Job,
        later: Vec<(Arc<Allocation>, i64)>,
        r: &mut ReconcileResults,
    ) {
        let allocs: HashMap<String, Arc<Allocation>> = later
            .iter()
            .map(|(a, _)| (a.id.clone(), a.clone()))
            .collect();
        let ids = self.later_evals(
            job,
            later,
            TRIGGER_RETRY_FAILED_ALLOC,
            RESCHEDULING_FOLLOWUP_EVAL_DESC,
            r,
        );
        let mut ids: Vec<(String, String)> = ids.into_iter().collect();
        ids.sort();
        for (alloc_id, eval_id) in ids {
            if let Some(a) = allocs.get(&alloc_id) {
                let mut updated = (**a).clone();
                updated.followup_eval_id = eval_id;
                r.attribute_updates.push(updated);
            }
        }
    }

    fn followup_eval(
        &self,
        job: &Job,
        wait_until: i64,
        trigger: &str,
        description: &str,
    ) -> Evaluation {
        Evaluation {
            id: generate_id(),
            namespace: job.namespace.clone(),
            priority: self.eval.priority,
            eval_type: job.job_type.clone(),
            triggered_by: trigger.to_string(),
            job_id: job.id.clone(),
            job_modify_index: job.modify_index,
            status: EVAL_STATUS_PENDING.to_string(),
            status_description: description.to_string(),
            wait_until,
            create_time: self.now,
            modify_time: self.now,
            ..Default::default()
        }
    }
}

/// What `filter_by_tainted` splits a group's allocations into.
#[derive(Default)]
struct Tainted {
    untainted: AllocSet,
    /// Drained: stop and place elsewhere.
    migrate: AllocSet,
    /// On a down or gone node (or pending on a disconnected one): stop as lost, replace.
    lost: AllocSet,
    /// Running on a disconnected node, not yet `unknown`.
    disconnecting: AllocSet,
    /// Were `unknown`, their node is back.
    reconnecting: AllocSet,
    /// `unknown` past their `lost_after`.
    expiring: AllocSet,
}

/// What `filter_by_rescheduleable` splits the untainted allocations into.
#[derive(Default)]
struct Reschedulable {
    untainted: AllocSet,
    now: AllocSet,
    later: Vec<(Arc<Allocation>, i64)>,
    /// Lost allocations whose delayed replacement is due now.
    lost_due: AllocSet,
    /// Lost allocations whose delayed replacement is not due yet: they keep their name.
    lost_held: AllocSet,
}

/// Nomad's `LastStartOfTask`: the last restart, or the start; 0 when the task never started.
fn latest_start(a: &Allocation, task: &str) -> i64 {
    let Some(s) = a.task_states.as_ref().and_then(|m| m.get(task)) else {
        return 0;
    };
    let when = if s.restarts > 0 {
        s.last_restart.as_deref()
    } else {
        s.started_at.as_deref()
    };
    when.and_then(drover_structs::time::parse_rfc3339_nanos)
        .unwrap_or(0)
}

enum Filter {
    /// Counts as present.
    Untainted,
    /// Neither present nor to be replaced by rescheduling.
    Ignore,
    /// Failed (or running): check the reschedule policy.
    Consider,
}

/// Nomad's `shouldFilter`. Batch: finished successfully counts as present, stopped otherwise
/// is ignored. Services: stopped, completed or lost allocations are ignored (and so replaced).
fn should_filter(a: &Allocation, batch: bool) -> Filter {
    let stopped = a.desired_status == ALLOC_DESIRED_STOP || a.desired_status == ALLOC_DESIRED_EVICT;
    if batch {
        if stopped {
            return if ran_successfully(a) {
                Filter::Untainted
            } else {
                Filter::Ignore
            };
        }
        return if a.client_status == ALLOC_CLIENT_FAILED {
            Filter::Consider
        } else {
            Filter::Untainted
        };
    }
    if stopped {
        return Filter::Ignore;
    }
    match a.client_status.as_str() {
        drover_structs::ALLOC_CLIENT_COMPLETE | ALLOC_CLIENT_LOST => Filter::Ignore,
        _ => Filter::Consider,
    }
}

pub(crate) fn ran_successfully(a: &Allocation) -> bool {
    if a.client_status == drover_structs::ALLOC_CLIENT_COMPLETE {
        return true;
    }
    match &a.task_states {
        Some(states) if !states.is_empty() => states
            .values()
            .all(|s| s.state == drover_structs::TASK_STATE_DEAD && !s.failed),
        _ => false,
    }
}

/// Lost allocations, and enough of the rest (highest indexes first) to get down to `count`.
/// Returns the ids stopped.
fn compute_stop(
    tg: &TaskGroup,
    names: &mut NameIndex,
    untainted: &AllocSet,
    migrate: &AllocSet,
    lost: &AllocSet,
    lost_followups: &HashMap<String, String>,
    r: &mut ReconcileResults,
) -> HashSet<String> {
    let mut stopped = HashSet::new();
    for a in lost {
        r.stop.push(Stop {
            alloc: a.clone(),
            description: ALLOC_LOST,
            client_status: Some(ALLOC_CLIENT_LOST),
            followup: lost_followups.get(&a.id).cloned(),
        });
        stopped.insert(a.id.clone());
    }
    // Allocations of a disconnected node are neither counted nor stopped here.
    let known: AllocSet = untainted
        .iter()
        .filter(|a| a.client_status != ALLOC_CLIENT_UNKNOWN)
        .cloned()
        .collect();
    let untainted = &known;
    let mut remove = untainted.len() as i64 + migrate.len() as i64 - tg.count;
    if remove <= 0 {
        return stopped;
    }
    let mut stop = |a: &Arc<Allocation>, stopped: &mut HashSet<String>, remove: &mut i64| {
        r.stop.push(Stop {
            alloc: a.clone(),
            description: ALLOC_NOT_NEEDED,
            client_status: None,
            followup: None,
        });
        stopped.insert(a.id.clone());
        *remove -= 1;
    };
    // Prefer the allocations that were going to move anyway.
    if !migrate.is_empty() {
        let mut migrating = NameIndex::new(&names.job, &names.group, tg.count, migrate.iter());
        let doomed = migrating.highest(remove as u64);
        for a in migrate {
            if doomed.contains(&a.name) {
                stop(a, &mut stopped, &mut remove);
                if let Some(i) = a.index() {
                    names.unset(i);
                }
                if remove == 0 {
                    return stopped;
                }
            }
        }
    }
    // As Nomad does, ended allocations are stopped too when their names are among the highest:
    // left alone, a failed one of an older version would be replaced by its update.
    let live: Vec<&Arc<Allocation>> = untainted.iter().collect();
    let doomed = names.highest(remove as u64);
    for a in live.iter().rev() {
        if doomed.contains(&a.name) && !stopped.contains(&a.id) {
            stop(a, &mut stopped, &mut remove);
            if remove == 0 {
                return stopped;
            }
        }
    }
    // Duplicate names can leave some to stop.
    for a in live.iter().rev() {
        if !stopped.contains(&a.id) {
            stop(a, &mut stopped, &mut remove);
            if remove == 0 {
                return stopped;
            }
        }
    }
    stopped
}

/// Replacements for rescheduled and lost allocations, then new allocations up to `count`.
fn compute_placements(
    tg: &TaskGroup,
    names: &mut NameIndex,
    present: usize,
    migrate: &AllocSet,
    reschedule: &AllocSet,
    lost: &AllocSet,
    lost_due: &AllocSet,
) -> Vec<Placement> {
    let mut place = Vec::new();
    for a in reschedule {
        place.push(Placement {
            name: a.name.clone(),
            task_group: tg.name.clone(),
            previous: Some(a.clone()),
            reschedule: true,
            destructive: false,
            canary: false,
        });
    }
    let mut existing = (present + migrate.len() + reschedule.len()) as i64;
    // Lost allocations whose delayed replacement is due, then the newly lost.
    for a in lost_due.iter().chain(lost) {
        if existing >= tg.count {
            break;
        }
        existing += 1;
        place.push(Placement {
            name: a.name.clone(),
            task_group: tg.name.clone(),
            previous: Some(a.clone()),
            reschedule: false,
            destructive: false,
            canary: false,
        });
    }
    if existing < tg.count {
        for name in names.next((tg.count - existing) as u64) {
            place.push(Placement {
                name,
                task_group: tg.name.clone(),
                previous: None,
                reschedule: false,
                destructive: false,
                canary: false,
            });
        }
    }
    place
}

fn sort_by_name(set: &mut AllocSet) {
    set.sort_by(|a, b| {
        (a.index().unwrap_or(u64::MAX), &a.id).cmp(&(b.index().unwrap_or(u64::MAX), &b.id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(name: &str) -> Arc<Allocation> {
        Arc::new(Allocation {
            id: name.into(),
            name: name.into(),
            ..Default::default()
        })
    }

    #[test]
    fn next_names_fill_the_lowest_free_indexes() {
        let taken = [alloc("j.g[0]"), alloc("j.g[2]")];
        let mut idx = NameIndex::new("j", "g", 5, taken.iter());
        assert_eq!(idx.next(3), ["j.g[1]", "j.g[3]", "j.g[4]"]);
        assert_eq!(idx.next(1), ["j.g[0]"], "past count, indexes are reused");
    }

    #[test]
    fn highest_names_come_off_the_top() {
        let taken = [alloc("j.g[0]"), alloc("j.g[1]"), alloc("j.g[7]")];
        let mut idx = NameIndex::new("j", "g", 2, taken.iter());
        let h = idx.highest(2);
        assert!(h.contains("j.g[7]") && h.contains("j.g[1]"));
        assert_eq!(idx.next(1), ["j.g[1]"]);
    }

    #[test]
    fn batch_keeps_successful_allocations_and_services_replace_completed_ones() {
        let mut done = Allocation {
            client_status: drover_structs::ALLOC_CLIENT_COMPLETE.into(),
            desired_status: drover_structs::ALLOC_DESIRED_RUN.into(),
            ..Default::default()
        };
        assert!(matches!(should_filter(&done, true), Filter::Untainted));
        assert!(matches!(should_filter(&done, false), Filter::Ignore));
        done.desired_status = ALLOC_DESIRED_STOP.into();
        assert!(matches!(should_filter(&done, true), Filter::Untainted));
        let failed = Allocation {
            client_status: ALLOC_CLIENT_FAILED.into(),
            ..Default::default()
        };
        assert!(matches!(should_filter(&failed, true), Filter::Consider));
        assert!(matches!(should_filter(&failed, false), Filter::Consider));
    }

    mod rolling {
        use super::*;
        use drover_structs::{AllocDeploymentStatus, Deployment, UpdateStrategy};

        fn job(version: u64) -> Arc<Job> {
            Arc::new(Job {
                id: "web".into(),
                namespace: "default".into(),
                version,
                create_index: 3,
                task_groups: vec![TaskGroup {
                    name: "g".into(),
                    count: 4,
                    update: Some(UpdateStrategy {
                        max_parallel: 1,
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            })
        }

        fn running(
            i: usize,
            job: &Arc<Job>,
            deployment: &str,
            healthy: Option<bool>,
        ) -> Arc<Allocation> {
            Arc::new(Allocation {
                id: format!("a{i}-v{}", job.version),
                name: format!("web.g[{i}]"),
                namespace: "default".into(),
                job_id: "web".into(),
                task_group: "g".into(),
                node_id: "n1".into(),
                job: Some(job.clone()),
                desired_status: ALLOC_DESIRED_RUN.into(),
                client_status: ALLOC_CLIENT_RUNNING.into(),
                deployment_id: deployment.into(),
                deployment_status: healthy.map(|h| {
                    Box::new(AllocDeploymentStatus {
                        healthy: Some(h),
                        ..Default::default()
                    })
                }),
                ..Default::default()
            })
        }

        fn reconcile(
            job: &Arc<Job>,
            allocs: &[Arc<Allocation>],
            deployment: Option<&Arc<Deployment>>,
        ) -> ReconcileResults {
            let eval = Evaluation::default();
            let tainted = HashMap::new();
            let r = Reconciler {
                job: Some(job),
                batch: false,
                eval: &eval,
                now: 0,
                tainted: &tainted,
                deployment,
            };
            r.compute(
                allocs,
                &mut |a: &Allocation, j: &Arc<Job>, _: &TaskGroup| {
                    if a.job_version() == j.version {
                        UpdateDecision::Ignore
                    } else {
                        UpdateDecision::Destructive
                    }
                },
            )
        }

        #[test]
        fn an_update_replaces_max_parallel_at_a_time_and_waits_for_health() {
            let (v1, v2) = (job(1), job(2));
            let old: Vec<_> = (0..4).map(|i| running(i, &v1, "", None)).collect();
            let r = reconcile(&v2, &old, None);
            assert_eq!(r.destructive.len(), 1, "max_parallel = 1");
            let d = Arc::new(r.deployment.expect("the update creates a deployment"));
            assert_eq!(d.task_groups["g"].desired_total, 4);
            assert_eq!(r.deployment_id.as_deref(), Some(d.id.as_str()));

            // The replacement runs but is not healthy yet: nothing more.
            let mut allocs = old[1..].to_vec();
            allocs.push(running(0, &v2, &d.id, None));
            let r = reconcile(&v2, &allocs, Some(&d));
            assert!(r.destructive.is_empty() && r.deployment.is_none());
            // Healthy: the next one.
            allocs.pop();
            allocs.push(running(0, &v2, &d.id, Some(true)));
            let r = reconcile(&v2, &allocs, Some(&d));
            assert_eq!(r.destructive.len(), 1);
            // Unhealthy: the rollout stops.
            allocs.pop();
            allocs.push(running(0, &v2, &d.id, Some(false)));
            let r = reconcile(&v2, &allocs, Some(&d));
            assert!(r.destructive.is_empty());
        }

        #[test]
        fn all_healthy_completes_the_deployment_and_a_newer_version_cancels_it() {
            let v2 = job(2);
            let mut d = Deployment::for_job(&v2, 50, 0);
            let mut state = drover_structs::DeploymentState::for_group(
                v2.task_groups[0].update.as_ref().unwrap(),
                4,
            );
            state.healthy_allocs = 4;
            d.task_groups.insert("g".into(), state);
            let d = Arc::new(d);
            let allocs: Vec<_> = (0..4).map(|i| running(i, &v2, &d.id, Some(true))).collect();
            let r = reconcile(&v2, &allocs, Some(&d));
            assert_eq!(r.deployment_updates.len(), 1);
            assert_eq!(r.deployment_updates[0].status, "successful");
            assert_eq!(
                r.deployment_updates[0].status_description,
                "Deployment completed successfully"
            );
            let r = reconcile(&job(3), &allocs, Some(&d));
            assert_eq!(r.deployment_updates[0].status, "cancelled");
            assert!(r.deployment.is_some(), "the new version gets its own");
        }

        #[test]
        fn a_canary_update_places_the_canary_waits_for_promotion_then_rolls_on() {
            let v1 = job(1);
            let mut v2 = (*job(2)).clone();
            if let Some(u) = v2.task_groups[0].update.as_mut() {
                u.canary = 1;
            }
            let v2 = Arc::new(v2);
            let old: Vec<_> = (0..4).map(|i| running(i, &v1, "", None)).collect();
            let r = reconcile(&v2, &old, None);
            assert!(r.destructive.is_empty() && r.stop.is_empty());
            let canaries: Vec<_> = r.place.iter().filter(|p| p.canary).collect();
            assert_eq!(canaries.len(), 1);
            assert_eq!(
                canaries[0].name, "web.g[0]",
                "named after what it would replace"
            );
            let d = r.deployment.expect("a deployment");
            assert_eq!(d.task_groups["g"].desired_canaries, 1);
            assert_eq!(
                d.status_description,
                "Deployment is running but requires manual promotion"
            );

            // The canary runs healthy, not promoted: nothing else happens.
            let mut d = d;
            let canary = Arc::new(Allocation {
                id: "canary".into(),
                deployment_status: Some(Box::new(AllocDeploymentStatus {
                    healthy: Some(true),
                    canary: true,
                    ..Default::default()
                })),
                ..(*running(0, &v2, &d.id, Some(true))).clone()
            });
            if let Some(g) = d.task_groups.get_mut("g") {
                g.placed_canaries = Some(vec!["canary".into()]);
                g.healthy_allocs = 1;
            }
            let mut allocs = old.clone();
            allocs.push(canary);
            let waiting = Arc::new(d.clone());
            let r = reconcile(&v2, &allocs, Some(&waiting));
            assert!(r.destructive.is_empty() && r.place.is_empty() && r.stop.is_empty());

            // Promoted: the old allocation with the canary's name goes, the rollout goes on.
            if let Some(g) = d.task_groups.get_mut("g") {
                g.promoted = true;
            }
            let promoted = Arc::new(d);
            let r = reconcile(&v2, &allocs, Some(&promoted));
            let stopped: Vec<&str> = r.stop.iter().map(|s| s.alloc.name.as_str()).collect();
            assert_eq!(stopped, ["web.g[0]"]);
            assert_eq!(r.destructive.len(), 1);
            assert_ne!(r.destructive[0].name, "web.g[0]");
        }

        #[test]
        fn a_paused_deployment_starts_nothing_new() {
            let (v1, v2) = (job(1), job(2));
            let mut d = Deployment::for_job(&v2, 50, 0);
            d.status = drover_structs::DEPLOYMENT_STATUS_PAUSED.into();
            d.task_groups.insert(
                "g".into(),
                drover_structs::DeploymentState::for_group(
                    v2.task_groups[0].update.as_ref().unwrap(),
                    4,
                ),
            );
            let d = Arc::new(d);
            let old: Vec<_> = (0..3).map(|i| running(i, &v1, "", None)).collect();
            let r = reconcile(&v2, &old, Some(&d));
            assert!(r.destructive.is_empty());
            assert!(r.place.is_empty(), "the missing fourth waits too");
        }
    }
}
