//! Node scores (Nomad's rank iterators): bin-packing or spread fitness, job anti-affinity,
//! the reschedule penalty, node affinities, the spread block and preemption, averaged into one
//! normalized score; and the top-scoring candidates kept for `ScoreMetaData`.

use std::sync::Arc;

use drover_structs::{ComparableResources, Node, NodeScoreMeta, ScorerName, VecMap};

use crate::Algorithm;

/// The largest raw fitness score; raw scores are divided by it to land in [0, 1].
const BINPACK_MAX_FIT_SCORE: f64 = 18.0;
/// How many candidates `ScoreMetaData` keeps (Nomad's `MaxRetainedNodeScores`).
const MAX_RETAINED_NODE_SCORES: usize = 5;

pub(crate) use drover_structs::{
    SCORE_BINPACK, SCORE_JOB_ANTI_AFFINITY, SCORE_NODE_AFFINITY, SCORE_PREEMPTION,
    SCORE_RESCHEDULE_PENALTY, SCORE_SPREAD,
};

/// The fitness of placing onto `node` so that it uses `util` in total, normalized to [0, 1]
/// (Nomad's `ScoreFitBinPack` / `ScoreFitSpread` divided by 18).
pub(crate) fn fit_score(
    available: &ComparableResources,
    util: &ComparableResources,
    algorithm: Algorithm,
) -> f64 {
    let free = |used: i64, total: i64| {
        if total <= 0 {
            0.0
        } else {
            1.0 - used as f64 / total as f64
        }
    };
    let free_cpu = free(util.cpu_shares, available.cpu_shares);
    let free_mem = free(util.memory_mb, available.memory_mb);
    let total = 10f64.powf(free_cpu) + 10f64.powf(free_mem);
    let raw = match algorithm {
        // 2 at full use, 20 when empty: invert so that fuller scores higher.
        Algorithm::Binpack => 20.0 - total,
        Algorithm::Spread => total - 2.0,
    };
    raw.clamp(0.0, BINPACK_MAX_FIT_SCORE) / BINPACK_MAX_FIT_SCORE
}

/// The penalty for co-locating with `collisions` allocations of the same job and group:
/// `-(collisions + 1) / count`, or `None` when there are none.
pub(crate) fn anti_affinity(collisions: usize, desired_count: i64) -> Option<f64> {
    (collisions > 0).then(|| -((collisions + 1) as f64) / desired_count.max(1) as f64)
}

/// One candidate's scores. A scorer's entry is `None` when Nomad records nothing for it on this
/// node (no spread to score, an affinity nothing matched, no preemption).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct NodeScores {
    pub binpack: f64,
    pub anti_affinity: Option<f64>,
    pub penalty: Option<f64>,
    pub affinity: Option<f64>,
    pub spread: Option<f64>,
    pub preemption: Option<f64>,
    /// The mean of the scores that count (Nomad's `normalized-score`).
    pub norm: f64,
}

impl NodeScores {
    fn named(&self) -> VecMap<ScorerName, f64> {
        let optional = [
            (SCORE_JOB_ANTI_AFFINITY, self.anti_affinity),
            (SCORE_RESCHEDULE_PENALTY, self.penalty),
            (SCORE_NODE_AFFINITY, self.affinity),
            (SCORE_SPREAD, self.spread),
            (SCORE_PREEMPTION, self.preemption),
        ];
        // Sized exactly: every placement keeps five of these maps.
        let present = optional.iter().filter(|(_, v)| v.is_some()).count();
        let mut m = VecMap::with_capacity(1 + present);
        m.insert(ScorerName::from_static(SCORE_BINPACK), self.binpack);
        for (name, score) in optional {
            if let Some(v) = score {
                m.insert(ScorerName::from_static(name), v);
            }
        }
        m
    }
}

/// The penalty for preempting allocations of these priorities (Nomad's `netPriority` fed to
/// its logistic `preemptionScore`): close to 1 for a few low-priority victims, falling towards
/// 0 as their priorities and number grow.
pub(crate) fn preemption_score(priorities: impl Iterator<Item = i64>) -> f64 {
    let (mut sum, mut max) = (0i64, 0i64);
    for p in priorities {
        sum += p;
        max = max.max(p);
    }
    let net = if max == 0 {
        0.0
    } else {
        max as f64 + sum as f64 / max as f64
    };
    // A net priority of 2048 scores 0.5.
    const RATE: f64 = 0.0048;
    const ORIGIN: f64 = 2048.0;
    1.0 / (1.0 + (RATE * (net - ORIGIN)).exp())
}

/// The candidates with the highest normalized scores, best first, by position in the list of
/// nodes visited.
pub(crate) struct TopScores {
    items: Vec<(usize, NodeScores)>,
}

impl Default for TopScores {
    fn default() -> Self {
        TopScores {
            items: Vec::with_capacity(4 * MAX_RETAINED_NODE_SCORES + 1),
        }
    }
}

impl TopScores {
    pub(crate) fn push(&mut self, pos: usize, scores: NodeScores) {
        self.items.push((pos, scores));
        if self.items.len() > 4 * MAX_RETAINED_NODE_SCORES {
            self.trim();
        }
    }

    fn trim(&mut self) {
        self.items.sort_by(|a, b| b.1.norm.total_cmp(&a.1.norm));
        self.items.truncate(MAX_RETAINED_NODE_SCORES);
    }

    /// The retained scores; `nodes` are the nodes visited, by position.
    pub(crate) fn finish(mut self, nodes: &[Arc<Node>]) -> Option<Vec<NodeScoreMeta>> {
        self.trim();
        // Collected into a vector of its own size: collecting in place would keep the
        // candidates' larger buffer alive in every allocation's metrics.
        let mut out: Vec<NodeScoreMeta> = Vec::with_capacity(self.items.len());
        out.extend(
            self.items
                .into_iter()
                .filter_map(|(pos, s)| nodes.get(pos).map(|n| (n, s)))
                .map(|(node, s)| NodeScoreMeta {
                    node_id: node.id.clone(),
                    scores: s.named(),
                    norm_score: s.norm,
                }),
        );
        (!out.is_empty()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cpu: i64, mem: i64, reserved_cpu: i64, reserved_mem: i64) -> Node {
        let mut n = Node::default();
        n.node_resources.cpu.cpu_shares = cpu;
        n.node_resources.memory.memory_mb = mem;
        n.reserved_resources.cpu.cpu_shares = reserved_cpu;
        n.reserved_resources.memory.memory_mb = reserved_mem;
        n
    }

    fn util(cpu: i64, mem: i64) -> ComparableResources {
        ComparableResources {
            cpu_shares: cpu,
            memory_mb: mem,
            disk_mb: 0,
        }
    }

    fn round4(x: f64) -> f64 {
        (x * 10_000.0).round() / 10_000.0
    }

    #[test]
    fn binpack_prefers_the_tightest_fit() {
        let ask = util(1000, 1000);
        let b = Algorithm::Binpack;
        assert_eq!(
            round4(fit_score(&node(1100, 1100, 0, 0).available(), &ask, b)),
            0.9741
        );
        assert_eq!(
            round4(fit_score(&node(2000, 2000, 800, 800).available(), &ask, b)),
            0.9480
        );
        assert_eq!(
            round4(fit_score(&node(2000, 2000, 500, 500).available(), &ask, b)),
            0.8717
        );
    }

    #[test]
    fn spread_is_the_mirror_of_binpack() {
        let ask = util(1000, 1000);
        let n = node(2000, 2000, 500, 500);
        let bp = fit_score(&n.available(), &ask, Algorithm::Binpack);
        let sp = fit_score(&n.available(), &ask, Algorithm::Spread);
        assert!((bp + sp - 1.0).abs() < 1e-9);
        let empty = fit_score(&n.available(), &util(0, 0), Algorithm::Spread);
        assert_eq!(empty, 1.0);
    }

    #[test]
    fn scores_are_clamped() {
        let n = node(1000, 1000, 0, 0);
        assert_eq!(
            fit_score(&n.available(), &util(0, 0), Algorithm::Binpack),
            0.0
        );
        assert_eq!(
            fit_score(&n.available(), &util(1000, 1000), Algorithm::Binpack),
            1.0
        );
        assert_eq!(
            fit_score(
                &Node::default().available(),
                &util(0, 0),
                Algorithm::Binpack
            ),
            1.0
        );
    }

    #[test]
    fn anti_affinity_counts_the_new_allocation_too() {
        assert_eq!(anti_affinity(0, 10), None);
        assert_eq!(anti_affinity(13, 50), Some(-0.28));
    }

    #[test]
    fn top_scores_keep_the_best_five_in_order() {
        let mut t = TopScores::default();
        let nodes: Vec<Arc<Node>> = (0..30)
            .map(|i| {
                Arc::new(Node {
                    id: format!("n{i}"),
                    ..Default::default()
                })
            })
            .collect();
        for i in 0..30 {
            let scores = NodeScores {
                norm: i as f64 / 10.0,
                ..Default::default()
            };
            t.push(i, scores);
        }
        let top = t.finish(&nodes).unwrap();
        let ids: Vec<&str> = top.iter().map(|m| m.node_id.as_str()).collect();
        assert_eq!(ids, ["n29", "n28", "n27", "n26", "n25"]);
        assert!(TopScores::default().finish(&nodes).is_none());
    }

    #[test]
    fn only_recorded_scorers_are_named() {
        let s = NodeScores {
            binpack: 0.5,
            anti_affinity: Some(0.0),
            spread: Some(-0.25),
            ..Default::default()
        };
        let named = s.named();
        let keys: Vec<&str> = named.keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, ["allocation-spread", "binpack", "job-anti-affinity"]);
    }

    #[test]
    fn preemption_scores_fall_with_the_victims_priorities() {
        // Nomad's curve: one victim of priority 10 nets 11 and scores close to 1.
        let one_low = preemption_score([10].into_iter());
        assert!((one_low - 1.0 / (1.0 + (0.0048f64 * (11.0 - 2048.0)).exp())).abs() < 1e-12);
        let many_high = preemption_score([90, 90, 90, 90].into_iter());
        assert!(many_high < one_low);
        assert!((preemption_score([2047].into_iter()) - 0.5).abs() < 1e-3);
    }
}
