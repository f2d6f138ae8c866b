//! The `spread` block (Nomad's `SpreadIterator`): a score that pulls a group's allocations
//! towards the target share of each value of a node attribute, or towards an even spread over
//! the values in use when no targets are given.

use drover_structs::{Node, Spread};

use crate::constraints::resolve_target;
use crate::context::EvalContext;
use crate::util::FxMap;

/// Values that no target names share the remainder of the percentages.
const IMPLICIT_TARGET: &str = "*";

struct SpreadBlock {
    attribute: String,
    weight: f64,
    /// The context's count of the group's allocations per value of `attribute`.
    property: usize,
    /// Desired allocations per target value, with the remainder under `*`; empty for an even
    /// spread.
    desired: FxMap<String, f64>,
}

/// The spread blocks that apply to one task group (the job's and the group's).
pub(crate) struct SpreadScorer {
    blocks: Vec<SpreadBlock>,
    sum_weights: f64,
    /// The lowest boost given so far, handed to values whose desired count is zero (Nomad
    /// starts it at -1 and keeps it for the evaluation).
    lowest_boost: f64,
}

impl SpreadScorer {
    /// `None` when no spread applies to the group.
    pub(crate) fn new(
        ctx: &mut EvalContext<'_>,
        spreads: &[&Spread],
        group: &str,
        count: i64,
    ) -> Option<SpreadScorer> {
        if spreads.is_empty() {
            return None;
        }
        let total = count.max(0) as f64;
        let mut blocks = Vec::with_capacity(spreads.len());
        let mut sum_weights = 0.0;
        for s in spreads {
            let mut desired = FxMap::default();
            let mut sum = 0.0;
            for t in s.spread_target.iter().flatten() {
                let want = t.percent as f64 / 100.0 * total;
                *desired.entry(t.value.clone()).or_insert(0.0) += want;
                sum += want;
            }
            if sum > 0.0 && sum < total {
                desired.insert(IMPLICIT_TARGET.to_string(), total - sum);
            }
            sum_weights += s.weight as f64;
            blocks.push(SpreadBlock {
                attribute: s.attribute.clone(),
                weight: s.weight as f64,
                property: ctx.property(&s.attribute, Some(group)),
                desired,
            });
        }
        Some(SpreadScorer {
            blocks,
            sum_weights,
            lowest_boost: -1.0,
        })
    }

    /// The node's spread score: the sum over blocks, 0 when nothing applies.
    pub(crate) fn score(&mut self, ctx: &EvalContext<'_>, node: &Node) -> f64 {
        let mut total = 0.0;
        for b in &self.blocks {
            let counts = &ctx.property_count(b.property).counts;
            let Some(value) = resolve_target(&b.attribute, node) else {
                // A node without the attribute gets the largest penalty.
                total -= 1.0;
                continue;
            };
            if b.desired.is_empty() {
                total += even_spread_boost(counts, value);
                continue;
            }
            // Values without a target of their own count together under the implicit one.
            let (desired, used) = match b.desired.get(value) {
                Some(d) if value != IMPLICIT_TARGET => {
                    (*d, counts.get(value).copied().unwrap_or(0))
                }
                _ => match b.desired.get(IMPLICIT_TARGET) {
                    Some(d) => {
                        let used: u64 = counts
                            .iter()
                            .filter(|(v, _)| !b.desired.contains_key(v.as_str()))
                            .map(|(_, n)| *n)
                            .sum();
                        (*d, used)
                    }
                    None => {
                        total -= 1.0;
                        continue;
                    }
                },
            };
            if desired == 0.0 {
                total += self.lowest_boost;
                continue;
            }
            let weight = if self.sum_weights > 0.0 {
                b.weight / self.sum_weights
            } else {
                0.0
            };
            // This placement counts too.
            let used = used as f64 + 1.0;
            let boost = (desired - used) / desired * weight;
            total += boost;
            if boost < self.lowest_boost {
                self.lowest_boost = boost;
            }
        }
        total
    }
}

/// Nomad's `evenSpreadScoreBoost`: values below the least used one are boosted, the least used
/// one is preferred while others are above it, and a perfectly even spread penalises every
/// value alike. Values no allocation uses are left out of the minimum (Nomad keeps cleared
/// values at zero in its map, which makes its minimum depend on map order).
fn even_spread_boost(counts: &FxMap<String, u64>, value: &str) -> f64 {
    let used = counts.values().copied().filter(|n| *n > 0);
    let (Some(min), Some(max)) = (used.clone().min(), used.max()) else {
        // Nothing placed yet.
        return 0.0;
    };
    let current = counts.get(value).copied().unwrap_or(0);
    if current != min {
        return (min as f64 - current as f64) / min as f64;
    }
    if min == max {
        return -1.0;
    }
    (max - min) as f64 / min as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> FxMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn even_spread_prefers_unused_values_and_penalises_an_even_spread() {
        let c = counts(&[("dc1", 2), ("dc2", 1)]);
        assert_eq!(even_spread_boost(&c, "dc3"), 1.0, "unused value");
        assert_eq!(even_spread_boost(&c, "dc1"), -1.0, "above the minimum");
        assert_eq!(
            even_spread_boost(&c, "dc2"),
            1.0,
            "the least used, others above it"
        );
        let even = counts(&[("dc1", 2), ("dc2", 2)]);
        assert_eq!(even_spread_boost(&even, "dc1"), -1.0);
        assert_eq!(even_spread_boost(&counts(&[]), "dc1"), 0.0);
        let cleared = counts(&[("dc1", 0), ("dc2", 3)]);
        assert_eq!(even_spread_boost(&cleared, "dc1"), 1.0);
    }
}
