//! The reconciler's handling of disconnected nodes (Nomad's reconnecting picker and the
//! `unknown`/`lost` follow-ups): when to replace an allocation of a node that went away, which
//! of original and replacement to keep when it comes back.

use drover_structs::{
    RECONCILE_KEEP_ORIGINAL, RECONCILE_KEEP_REPLACEMENT, RECONCILE_LONGEST_RUNNING,
};

use super::*;

impl Reconciler<'_> {
    /// Nomad's `RescheduleTimeOnDisconnect`: with a `disconnect` block, `replace` says whether
    /// to replace at once; with the older fields, the reschedule policy counts from now.
    pub(super) fn reschedule_on_disconnect(&self, a: &Allocation, job: &Job) -> (i64, bool) {
        let tg = a
            .job
            .as_deref()
            .unwrap_or(job)
            .lookup_task_group(&a.task_group);
        if let Some(replace) = tg
            .and_then(|tg| tg.disconnect.as_ref())
            .and_then(|d| d.replace)
        {
            return (self.now, replace);
        }
        match policy(a, Some(job)) {
            Some(p) => next_reschedule_time_by_time(a, p, self.now),
            None => (0, false),
        }
    }

    /// Nomad's `reconcileReconnecting`: for each reconnecting allocation, stop it or its
    /// replacements as the group's `disconnect.reconcile` says. Returns the allocations that
    /// reconnect and the ids stopped.
    pub(super) fn reconcile_reconnecting(
        &self,
        job: &Job,
        tg: &TaskGroup,
        reconnecting: &AllocSet,
        all: &AllocSet,
        r: &mut ReconcileResults,
    ) -> (AllocSet, HashSet<String>) {
        let mut stopped: HashSet<String> = HashSet::new();
        let mut stop = |a: &Arc<Allocation>,
                        description: &'static str,
                        client_status: Option<&'static str>,
                        stopped: &mut HashSet<String>| {
            if stopped.insert(a.id.clone()) {
                r.stop.push(Stop {
                    alloc: a.clone(),
                    description,
                    client_status,
                    followup: None,
                });
            }
        };
        // Replacements point back at what they replaced (`PreviousAllocation`).
        let mut replaced_by: HashMap<&str, Vec<&Arc<Allocation>>> = HashMap::new();
        for a in all {
            if !a.previous_allocation.is_empty() {
                replaced_by
                    .entry(a.previous_allocation.as_str())
                    .or_default()
                    .push(a);
            }
        }
        for original in reconnecting {
            if !original.server_terminal() && original.client_status == ALLOC_CLIENT_FAILED {
                stop(
                    original,
                    ALLOC_RESCHEDULED,
                    Some(ALLOC_CLIENT_FAILED),
                    &mut stopped,
                );
                continue;
            }
            let t = &original.desired_transition;
            let old_version = original
                .job
                .as_ref()
                .is_some_and(|j| j.version < job.version || j.create_index < job.create_index);
            if original.desired_status != ALLOC_DESIRED_RUN
                || t.migrate == Some(true)
                || t.reschedule == Some(true)
                || t.force_reschedule == Some(true)
                || old_version
            {
                stop(original, ALLOC_NOT_NEEDED, None, &mut stopped);
                continue;
            }
            // A replacement may itself have been replaced: follow the chain.
            let mut queue: Vec<&Arc<Allocation>> = replaced_by
                .get(original.id.as_str())
                .cloned()
                .unwrap_or_default();
            let mut seen = HashSet::new();
            while let Some(replacement) = queue.pop() {
                if !seen.insert(replacement.id.clone()) {
                    continue;
                }
                if let Some(next) = replaced_by.get(replacement.id.as_str()) {
                    queue.extend(next.iter().copied());
                }
                if replacement.server_terminal() {
                    continue;
                }
                if keep_replacement(tg, original, replacement) {
                    stop(original, ALLOC_NOT_NEEDED, None, &mut stopped);
                } else {
                    stop(replacement, ALLOC_RECONNECTED, None, &mut stopped);
                }
            }
        }
        let reconnect = reconnecting
            .iter()
            .filter(|a| !stopped.contains(&a.id))
            .cloned()
            .collect();
        (reconnect, stopped)
    }

    /// One follow-up evaluation per window of `at` times; returns each allocation's evaluation.
    pub(super) fn later_evals(
        &self,
        job: &Job,
        mut later: Vec<(Arc<Allocation>, i64)>,
        trigger: &str,
        description: &str,
        r: &mut ReconcileResults,
    ) -> HashMap<String, String> {
        let mut ids = HashMap::new();
        if later.is_empty() {
            return ids;
        }
        later.sort_by_key(|(_, at)| *at);
        let mut batch_start = later[0].1;
        let mut eval = self.followup_eval(job, batch_start, trigger, description);
        for (alloc, at) in later {
            if at.saturating_sub(batch_start) >= BATCHED_FAILED_ALLOC_WINDOW {
                r.followup_evals.push(eval);
                batch_start = at;
                eval = self.followup_eval(job, at, trigger, description);
            }
            ids.insert(alloc.id.clone(), eval.id.clone());
        }
        r.followup_evals.push(eval);
        ids
    }
}

/// Nomad's `pickReconnectingAlloc` (reconnecting picker): whether the replacement wins over
/// the original that reconnected.
fn keep_replacement(tg: &TaskGroup, original: &Allocation, replacement: &Allocation) -> bool {
    let (ov, rv) = (original.job.as_ref(), replacement.job.as_ref());
    let newer = match (ov, rv) {
        (Some(o), Some(r)) => r.version > o.version || r.create_index > o.create_index,
        _ => false,
    };
    if newer {
        return true;
    }
    match tg.disconnect_reconcile() {
        RECONCILE_KEEP_ORIGINAL => false,
        RECONCILE_KEEP_REPLACEMENT => true,
        RECONCILE_LONGEST_RUNNING => {
            let task = leader_task(tg);
            // The one that started first has run the longest.
            latest_start(original, &task) >= latest_start(replacement, &task)
        }
        _ => {
            let (o, r) = (max_norm_score(original), max_norm_score(replacement));
            let better = match (o, r) {
                (None, Some(_)) => true,
                (Some(o), Some(r)) => r > o,
                _ => false,
            };
            better
                && (replacement.client_status == ALLOC_CLIENT_RUNNING
                    || original.client_status != ALLOC_CLIENT_RUNNING)
        }
    }
}

fn max_norm_score(a: &Allocation) -> Option<f64> {
    a.metrics
        .as_ref()?
        .score_meta_data
        .as_ref()?
        .iter()
        .map(|m| m.norm_score)
        .reduce(f64::max)
}

/// The group's leader task, else its first.
fn leader_task(tg: &TaskGroup) -> String {
    tg.tasks
        .iter()
        .find(|t| t.leader)
        .or(tg.tasks.first())
        .map(|t| t.name.clone())
        .unwrap_or_default()
}
