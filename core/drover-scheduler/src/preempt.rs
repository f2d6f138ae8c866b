//! Preemption (Nomad's `Preemptor`): which lower-priority allocations on a node to evict so
//! that a placement fits. Only allocations of jobs at least [`PRIORITY_DELTA`] below the
//! placing job's priority qualify. Within the lowest priority first, the allocation closest in
//! size to what is still missing is taken (with a penalty for going past a group's
//! `migrate.max_parallel`), until the node can take the placement; a last pass drops choices
//! the others already cover.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_structs::{Allocation, ComparableResources};

/// A job may preempt allocations of jobs whose priority is this much lower or more.
pub(crate) const PRIORITY_DELTA: i64 = 10;
/// Added per preemption past a group's `max_parallel` (Nomad's `maxParallelPenalty`).
const MAX_PARALLEL_PENALTY: f64 = 50.0;

/// An allocation that might be preempted.
pub(crate) struct Candidate {
    pub alloc: Arc<Allocation>,
    pub resources: ComparableResources,
    /// Its group's `migrate.max_parallel` (0: none).
    pub max_parallel: i64,
    /// How many allocations of its job and group the plan already preempts.
    pub already_preempted: usize,
}

impl Candidate {
    pub(crate) fn new(alloc: &Arc<Allocation>, already_preempted: usize) -> Candidate {
        let max_parallel = alloc
            .job
            .as_ref()
            .and_then(|j| j.lookup_task_group(&alloc.task_group))
            .and_then(|tg| tg.migrate.as_ref())
            .map(|m| m.max_parallel)
            .unwrap_or(0);
        Candidate {
            alloc: alloc.clone(),
            resources: crate::fit::alloc_resources(alloc),
            max_parallel,
            already_preempted,
        }
    }

    /// The priority of the allocation's job; allocations without their job are never preempted.
    fn priority(&self) -> Option<i64> {
        self.alloc.job.as_ref().map(|j| j.priority)
    }
}

/// Whether an allocation of a job with `priority` may be preempted by a job with
/// `job_priority`.
pub(crate) fn preemptible(job_priority: i64, alloc: &Allocation) -> bool {
    alloc
        .job
        .as_ref()
        .is_some_and(|j| job_priority - j.priority >= PRIORITY_DELTA)
}

/// Nomad's `basicResourceDistance`: how far `used` is from `ask`, per dimension relative to the
/// ask, as a Euclidean length (0 is a perfect match).
fn distance(ask: &ComparableResources, used: &ComparableResources) -> f64 {
    let coord = |a: i64, u: i64| {
        if a > 0 {
            (a as f64 - u as f64) / a as f64
        } else {
            0.0
        }
    };
    let m = coord(ask.memory_mb, used.memory_mb);
    let c = coord(ask.cpu_shares, used.cpu_shares);
    let d = coord(ask.disk_mb, used.disk_mb);
    (m * m + c * c + d * d).sqrt()
}

fn score(needed: &ComparableResources, c: &Candidate) -> f64 {
    let mut penalty = 0.0;
    let n = c.already_preempted as i64;
    if c.max_parallel > 0 && n >= c.max_parallel {
        penalty = ((n + 1) - c.max_parallel) as f64 * MAX_PARALLEL_PENALTY;
    }
    distance(needed, &c.resources) + penalty
}

/// Nomad's `PreemptForTaskGroup`: the allocations to evict so that `ask` fits in `remaining`
/// (what the node has left with everything on it), or `None` when even evicting every
/// eligible allocation would not do.
pub(crate) fn for_resources(
    job_priority: i64,
    remaining: ComparableResources,
    candidates: Vec<Candidate>,
    ask: &ComparableResources,
) -> Option<Vec<Arc<Allocation>>> {
    let mut by_priority: BTreeMap<i64, Vec<Candidate>> = BTreeMap::new();
    for c in candidates {
        match c.priority() {
            Some(p) if job_priority - p >= PRIORITY_DELTA => {
                by_priority.entry(p).or_default().push(c)
            }
            _ => {}
        }
    }
    let mut needed = *ask;
    let mut available = remaining;
    let mut chosen: Vec<Candidate> = Vec::new();
    let mut met = false;
    'groups: for (_, mut group) in by_priority {
        while !group.is_empty() {
            let mut best = 0;
            let mut best_score = f64::MAX;
            for (i, c) in group.iter().enumerate() {
                let s = score(&needed, c);
                if s < best_score {
                    best_score = s;
                    best = i;
                }
            }
            let c = group.swap_remove(best);
            available.add(&c.resources);
            needed.subtract(&c.resources);
            chosen.push(c);
            if available.superset(ask).is_ok() {
                met = true;
                break 'groups;
            }
        }
    }
    if !met {
        return None;
    }
    // Largest distance from the ask first; stop as soon as the node fits.
    chosen.sort_by(|a, b| distance(ask, &b.resources).total_cmp(&distance(ask, &a.resources)));
    let mut available = remaining;
    let mut out = Vec::new();
    for c in chosen {
        available.add(&c.resources);
        out.push(c.alloc);
        if available.superset(ask).is_ok() {
            break;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{Job, MigrateStrategy, TaskGroup};

    fn res(cpu: i64, mem: i64) -> ComparableResources {
        ComparableResources {
            cpu_shares: cpu,
            memory_mb: mem,
            disk_mb: 0,
        }
    }

    fn cand(id: &str, priority: i64, cpu: i64, mem: i64) -> Candidate {
        let job = Arc::new(Job {
            id: format!("job-{id}"),
            priority,
            task_groups: vec![TaskGroup {
                name: "g".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let alloc = Arc::new(Allocation {
            id: id.into(),
            job_id: job.id.clone(),
            task_group: "g".into(),
            job: Some(job),
            ..Default::default()
        });
        Candidate {
            alloc,
            resources: res(cpu, mem),
            max_parallel: 0,
            already_preempted: 0,
        }
    }

    fn ids(v: Option<Vec<Arc<Allocation>>>) -> Option<Vec<String>> {
        v.map(|v| {
            let mut ids: Vec<String> = v.iter().map(|a| a.id.clone()).collect();
            ids.sort();
            ids
        })
    }

    #[test]
    fn preemption_table() {
        struct Case {
            name: &'static str,
            priority: i64,
            remaining: ComparableResources,
            candidates: Vec<Candidate>,
            ask: ComparableResources,
            want: Option<Vec<&'static str>>,
        }
        let cases = vec![
            Case {
                name: "the closest fit of the lowest priority is taken",
                priority: 100,
                remaining: res(0, 0),
                candidates: vec![
                    cand("small", 20, 200, 200),
                    cand("exact", 20, 1000, 1000),
                    cand("big", 20, 3000, 3000),
                ],
                ask: res(1000, 1000),
                want: Some(vec!["exact"]),
            },
            Case {
                name: "lower priorities go first even when a higher one fits better",
                priority: 100,
                remaining: res(0, 0),
                candidates: vec![
                    cand("p50", 50, 1000, 1000),
                    cand("p10", 10, 600, 600),
                    cand("p10b", 10, 500, 500),
                ],
                ask: res(1000, 1000),
                want: Some(vec!["p10", "p10b"]),
            },
            Case {
                name: "priorities within 10 are never preempted",
                priority: 60,
                remaining: res(0, 0),
                candidates: vec![cand("close", 51, 2000, 2000)],
                ask: res(1000, 1000),
                want: None,
            },
            Case {
                name: "not enough to free: nothing is preempted",
                priority: 100,
                remaining: res(100, 100),
                candidates: vec![cand("a", 10, 300, 300), cand("b", 10, 300, 300)],
                ask: res(1000, 1000),
                want: None,
            },
            Case {
                name: "free room counts towards the ask",
                priority: 100,
                remaining: res(700, 700),
                candidates: vec![cand("a", 10, 300, 300), cand("b", 10, 300, 300)],
                ask: res(1000, 1000),
                want: Some(vec!["a"]),
            },
        ];
        for c in cases {
            let got = ids(for_resources(c.priority, c.remaining, c.candidates, &c.ask));
            let want = c
                .want
                .map(|v| v.into_iter().map(str::to_string).collect::<Vec<_>>());
            assert_eq!(got, want, "{}", c.name);
        }
    }

    #[test]
    fn groups_past_max_parallel_are_spared() {
        let mut busy = cand("busy", 10, 1000, 1000);
        busy.max_parallel = 1;
        busy.already_preempted = 1;
        if let Some(job) = Arc::get_mut(&mut busy.alloc).and_then(|a| a.job.as_mut()) {
            Arc::make_mut(job).task_groups[0].migrate = Some(MigrateStrategy {
                max_parallel: 1,
                ..Default::default()
            });
        }
        let other = cand("other", 10, 900, 900);
        let got = ids(for_resources(
            100,
            res(100, 100),
            vec![busy, other],
            &res(1000, 1000),
        ));
        assert_eq!(got, Some(vec!["other".to_string()]));
    }
}
