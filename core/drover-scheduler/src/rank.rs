//! Node scores (Nomad's rank iterators): bin-packing or spread fitness, job anti-affinity,
//! the reschedule penalty and node affinities, averaged into one normalized score; and the
//! top-scoring candidates kept for `ScoreMetaData`.

use std::collections::BTreeMap;

use drover_structs::{ComparableResources, Node, NodeScoreMeta};

use crate::Algorithm;

/// The largest raw fitness score; raw scores are divided by it to land in [0, 1].
const BINPACK_MAX_FIT_SCORE: f64 = 18.0;
/// How many candidates `ScoreMetaData` keeps (Nomad's `MaxRetainedNodeScores`).
const MAX_RETAINED_NODE_SCORES: usize = 5;

pub(crate) const SCORE_BINPACK: &str = "binpack";
pub(crate) const SCORE_JOB_ANTI_AFFINITY: &str = "job-anti-affinity";
pub(crate) const SCORE_RESCHEDULE_PENALTY: &str = "node-reschedule-penalty";
pub(crate) const SCORE_NODE_AFFINITY: &str = "node-affinity";

/// The fitness of placing onto `node` so that it uses `util` in total, normalized to [0, 1]
/// (Nomad's `ScoreFitBinPack` / `ScoreFitSpread` divided by 18).
pub(crate) fn fit_score(node: &Node, util: &ComparableResources, algorithm: Algorithm) -> f64 {
    let available = node.available();
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

/// The candidates with the highest normalized scores, best first.
#[derive(Default)]
pub(crate) struct TopScores {
    items: Vec<NodeScoreMeta>,
}

impl TopScores {
    pub(crate) fn push(&mut self, node_id: &str, scores: BTreeMap<String, f64>, norm: f64) {
        self.items.push(NodeScoreMeta {
            node_id: node_id.to_string(),
            scores,
            norm_score: norm,
        });
        if self.items.len() > 4 * MAX_RETAINED_NODE_SCORES {
            self.trim();
        }
    }

    fn trim(&mut self) {
        self.items
            .sort_by(|a, b| b.norm_score.total_cmp(&a.norm_score));
        self.items.truncate(MAX_RETAINED_NODE_SCORES);
    }

    pub(crate) fn finish(mut self) -> Option<Vec<NodeScoreMeta>> {
        self.trim();
        (!self.items.is_empty()).then_some(self.items)
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
        assert_eq!(round4(fit_score(&node(1100, 1100, 0, 0), &ask, b)), 0.9741);
        assert_eq!(
            round4(fit_score(&node(2000, 2000, 800, 800), &ask, b)),
            0.9480
        );
        assert_eq!(
            round4(fit_score(&node(2000, 2000, 500, 500), &ask, b)),
            0.8717
        );
    }

    #[test]
    fn spread_is_the_mirror_of_binpack() {
        let ask = util(1000, 1000);
        let n = node(2000, 2000, 500, 500);
        let bp = fit_score(&n, &ask, Algorithm::Binpack);
        let sp = fit_score(&n, &ask, Algorithm::Spread);
        assert!((bp + sp - 1.0).abs() < 1e-9);
        let empty = fit_score(&n, &util(0, 0), Algorithm::Spread);
        assert_eq!(empty, 1.0);
    }

    #[test]
    fn scores_are_clamped() {
        let n = node(1000, 1000, 0, 0);
        assert_eq!(fit_score(&n, &util(0, 0), Algorithm::Binpack), 0.0);
        assert_eq!(fit_score(&n, &util(1000, 1000), Algorithm::Binpack), 1.0);
        assert_eq!(
            fit_score(&Node::default(), &util(0, 0), Algorithm::Binpack),
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
        for i in 0..30 {
            t.push(&format!("n{i}"), BTreeMap::new(), i as f64 / 10.0);
        }
        let top = t.finish().unwrap();
        let ids: Vec<&str> = top.iter().map(|m| m.node_id.as_str()).collect();
        assert_eq!(ids, ["n29", "n28", "n27", "n26", "n25"]);
        assert!(TopScores::default().finish().is_none());
    }
}
