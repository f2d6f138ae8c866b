//! The reconciler (Nomad's `allocReconciler`, without deployments and canaries): compares a
//! job's existing allocations with its spec, group by group, and decides what to stop, what to
//! place, what to update in place or destructively, and which failed allocations to reschedule
//! now or later.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use drover_structs::{
    ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST, ALLOC_DESIRED_EVICT, ALLOC_DESIRED_STOP, Allocation,
    EVAL_STATUS_PENDING, Evaluation, Job, NODE_STATUS_DOWN, Node, TRIGGER_RETRY_FAILED_ALLOC,
    TaskGroup, generate_id,
};

use crate::reschedule::{next_reschedule_time, policy};
use crate::util::alloc_name;

pub(crate) const ALLOC_NOT_NEEDED: &str = "alloc not needed due to job update";
pub(crate) const ALLOC_MIGRATING: &str = "alloc is being migrated";
pub(crate) const ALLOC_UPDATING: &str = "alloc is being updated due to job update";
pub(crate) const ALLOC_LOST: &str = "alloc is lost since its node is down";
pub(crate) const ALLOC_IN_PLACE: &str = "alloc updating in-place";
pub(crate) const ALLOC_RESCHEDULED: &str = "alloc was rescheduled because it failed";
pub(crate) const RESCHEDULING_FOLLOWUP_EVAL_DESC: &str = "created for delayed rescheduling";

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
}

#[derive(Debug, Clone)]
pub(crate) struct Stop {
    pub alloc: Arc<Allocation>,
    pub description: &'static str,
    pub client_status: Option<&'static str>,
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
        let job = match self.job {
            Some(j) if !j.stop => j,
            _ => {
                for (_, set) in matrix {
                    self.stop_all(set, &mut r);
                }
                return r;
            }
        };
        for tg in &job.task_groups {
            matrix.entry(tg.name.clone()).or_default();
        }
        for (group, mut set) in matrix {
            sort_by_name(&mut set);
            self.compute_group(job, &group, set, &mut r, update);
        }
        r
    }

    /// Stops every live allocation of the set: the job is stopped or the group is gone.
    fn stop_all(&self, set: AllocSet, r: &mut ReconcileResults) {
        let live: AllocSet = set.into_iter().filter(|a| !a.terminal()).collect();
        let (untainted, migrate, lost) = self.filter_by_tainted(live);
        for a in untainted.into_iter().chain(migrate) {
            r.stop.push(Stop {
                alloc: a,
                description: ALLOC_NOT_NEEDED,
                client_status: None,
            });
        }
        for a in lost {
            r.stop.push(Stop {
                alloc: a,
                description: ALLOC_LOST,
                client_status: Some(ALLOC_CLIENT_LOST),
            });
        }
    }

    fn compute_group(
        &self,
        job: &Arc<Job>,
        group: &str,
        all: AllocSet,
        r: &mut ReconcileResults,
        update: &mut dyn FnMut(&Allocation, &Arc<Job>, &TaskGroup) -> UpdateDecision,
    ) {
        let Some(tg) = job.lookup_task_group(group) else {
            self.stop_all(all, r);
            return;
        };
        let all = self.filter_old_terminal(job, all);
        let (untainted, mut migrate, lost) = self.filter_by_tainted(all);
        let (mut untainted, reschedule_now, reschedule_later) =
            self.filter_by_rescheduleable(job, untainted);
        self.handle_delayed_reschedules(job, reschedule_later, r);

        let mut names = NameIndex::new(
            &job.id,
            group,
            tg.count,
            untainted.iter().chain(&migrate).chain(&reschedule_now),
        );
        let stopped = compute_stop(tg, &mut names, &untainted, &migrate, &lost, r);
        untainted.retain(|a| !stopped.contains(&a.id));
        migrate.retain(|a| !stopped.contains(&a.id));

        let mut destructive: AllocSet = Vec::new();
        for a in &untainted {
            match update(a, job, tg) {
                UpdateDecision::Ignore => {}
                UpdateDecision::Destructive => destructive.push(a.clone()),
                UpdateDecision::InPlace(new) => r.inplace.push(*new),
            }
        }

        let place =
            compute_placements(tg, &mut names, &untainted, &migrate, &reschedule_now, &lost);
        r.place.extend(place);
        for a in reschedule_now {
            r.stop.push(Stop {
                alloc: a,
                description: ALLOC_RESCHEDULED,
                client_status: None,
            });
        }
        for a in destructive {
            r.destructive.push(Placement {
                name: a.name.clone(),
                task_group: tg.name.clone(),
                previous: Some(a),
                reschedule: false,
                destructive: true,
            });
        }
        for a in migrate {
            r.stop.push(Stop {
                alloc: a.clone(),
                description: ALLOC_MIGRATING,
                client_status: None,
            });
            r.place.push(Placement {
                name: a.name.clone(),
                task_group: tg.name.clone(),
                previous: Some(a),
                reschedule: false,
                destructive: false,
            });
        }
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

    /// Splits allocations into untainted, to migrate (drained) and lost (node down or gone).
    fn filter_by_tainted(&self, all: AllocSet) -> (AllocSet, AllocSet, AllocSet) {
        let (mut untainted, mut migrate, mut lost) = (Vec::new(), Vec::new(), Vec::new());
        for a in all {
            if a.terminal() {
                untainted.push(a);
            } else if a.desired_transition.migrate == Some(true) {
                migrate.push(a);
            } else {
                match self.tainted.get(&a.node_id) {
                    None => untainted.push(a),
                    Some(None) => lost.push(a),
                    Some(Some(n)) if n.status == NODE_STATUS_DOWN => lost.push(a),
                    Some(Some(_)) => untainted.push(a),
                }
            }
        }
        (untainted, migrate, lost)
    }

    /// Separates failed allocations to reschedule now or later from those that count as
    /// present; drops those that should be ignored (stopped, or completed services).
    #[allow(clippy::type_complexity)]
    fn filter_by_rescheduleable(
        &self,
        job: &Job,
        set: AllocSet,
    ) -> (AllocSet, AllocSet, Vec<(Arc<Allocation>, i64)>) {
        let (mut untainted, mut now, mut later) = (Vec::new(), Vec::new(), Vec::new());
        for a in set {
            // Already replaced.
            if !a.next_allocation.is_empty() && a.terminal() {
                continue;
            }
            match should_filter(&a, self.batch) {
                Filter::Untainted => {
                    untainted.push(a);
                    continue;
                }
                Filter::Ignore => continue,
                Filter::Consider => {}
            }
            let (eligible_now, eligible_later, at) = self.reschedulable(&a, job);
            if eligible_now {
                now.push(a);
            } else {
                if eligible_later {
                    later.push((a.clone(), at));
                }
                untainted.push(a);
            }
        }
        (untainted, now, later)
    }

    /// Nomad's `updateByReschedulable`.
    fn reschedulable(&self, a: &Allocation, job: &Job) -> (bool, bool, i64) {
        let forced = a.desired_transition.force_reschedule == Some(true);
        let (at, eligible) = next_reschedule_time(a, policy(a, Some(job)));
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
        mut later: Vec<(Arc<Allocation>, i64)>,
        r: &mut ReconcileResults,
    ) {
        if later.is_empty() {
            return;
        }
        later.sort_by_key(|(_, at)| *at);
        let mut batch_start = later[0].1;
        let mut eval = self.followup_eval(job, batch_start);
        for (alloc, at) in later {
            if at.saturating_sub(batch_start) >= BATCHED_FAILED_ALLOC_WINDOW {
                r.followup_evals.push(eval);
                batch_start = at;
                eval = self.followup_eval(job, at);
            }
            let mut updated = (*alloc).clone();
            updated.followup_eval_id = eval.id.clone();
            r.attribute_updates.push(updated);
        }
        r.followup_evals.push(eval);
    }

    fn followup_eval(&self, job: &Job, wait_until: i64) -> Evaluation {
        Evaluation {
            id: generate_id(),
            namespace: job.namespace.clone(),
            priority: self.eval.priority,
            eval_type: job.job_type.clone(),
            triggered_by: TRIGGER_RETRY_FAILED_ALLOC.to_string(),
            job_id: job.id.clone(),
            job_modify_index: job.modify_index,
            status: EVAL_STATUS_PENDING.to_string(),
            status_description: RESCHEDULING_FOLLOWUP_EVAL_DESC.to_string(),
            wait_until,
            create_time: self.now,
            modify_time: self.now,
            ..Default::default()
        }
    }
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
    r: &mut ReconcileResults,
) -> HashSet<String> {
    let mut stopped = HashSet::new();
    for a in lost {
        r.stop.push(Stop {
            alloc: a.clone(),
            description: ALLOC_LOST,
            client_status: Some(ALLOC_CLIENT_LOST),
        });
        stopped.insert(a.id.clone());
    }
    let mut remove = untainted.len() as i64 + migrate.len() as i64 - tg.count;
    if remove <= 0 {
        return stopped;
    }
    let mut stop = |a: &Arc<Allocation>, stopped: &mut HashSet<String>, remove: &mut i64| {
        r.stop.push(Stop {
            alloc: a.clone(),
            description: ALLOC_NOT_NEEDED,
            client_status: None,
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
    untainted: &AllocSet,
    migrate: &AllocSet,
    reschedule: &AllocSet,
    lost: &AllocSet,
) -> Vec<Placement> {
    let mut place = Vec::new();
    for a in reschedule {
        place.push(Placement {
            name: a.name.clone(),
            task_group: tg.name.clone(),
            previous: Some(a.clone()),
            reschedule: true,
            destructive: false,
        });
    }
    let mut existing = (untainted.len() + migrate.len() + reschedule.len()) as i64;
    for a in lost {
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

/// Which `job.group[i]` indexes are taken (Nomad's `allocNameIndex`).
pub(crate) struct NameIndex {
    job: String,
    group: String,
    count: u64,
    used: BTreeSet<u64>,
}

impl NameIndex {
    pub(crate) fn new<'a>(
        job: &str,
        group: &str,
        count: i64,
        allocs: impl Iterator<Item = &'a Arc<Allocation>>,
    ) -> Self {
        NameIndex {
            job: job.to_string(),
            group: group.to_string(),
            count: count.max(0) as u64,
            used: allocs.filter_map(|a| a.index()).collect(),
        }
    }

    fn unset(&mut self, index: u64) {
        self.used.remove(&index);
    }

    /// Removes and returns the names of the `n` highest taken indexes.
    pub(crate) fn highest(&mut self, n: u64) -> HashSet<String> {
        let mut out = HashSet::new();
        while (out.len() as u64) < n {
            let Some(i) = self.used.pop_last() else {
                break;
            };
            out.insert(alloc_name(&self.job, &self.group, i));
        }
        out
    }

    /// Takes and returns `n` names: free indexes below `count` first, lowest first; past
    /// those, indexes from 0 again (duplicates, as Nomad does).
    pub(crate) fn next(&mut self, n: u64) -> Vec<String> {
        let mut out = Vec::new();
        for i in 0..self.count {
            if out.len() as u64 == n {
                return out;
            }
            if self.used.insert(i) {
                out.push(alloc_name(&self.job, &self.group, i));
            }
        }
        let remainder = n - out.len() as u64;
        for i in 0..remainder {
            self.used.insert(i);
            out.push(alloc_name(&self.job, &self.group, i));
        }
        out
    }
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
}
