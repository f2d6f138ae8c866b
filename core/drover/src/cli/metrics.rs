//! Why the scheduler could not place an allocation, in Nomad's words: `formatAllocMetrics` and
//! the per-task-group headers that `job run`, `job status` and `eval status` print around it.

use std::collections::BTreeMap;

use drover_structs::AllocMetric;

use super::format::{format_g3, format_list, quote};

/// Nomad's `formatAllocMetrics`: one `* ...` line per reason, each behind `prefix`, and with
/// `scores` the per-node score table (`alloc status -verbose`). No trailing newline.
pub fn format_alloc_metrics(m: &AllocMetric, scores: bool, prefix: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    if m.nodes_evaluated == 0 {
        lines.push(format!("{prefix}* No nodes were eligible for evaluation"));
    }
    for (dc, available) in m.nodes_available.iter().flatten() {
        if *available == 0 {
            lines.push(format!(
                "{prefix}* No nodes are available in datacenter {}",
                quote(dc)
            ));
        }
    }
    for (class, n) in m.class_filtered.iter().flatten() {
        lines.push(format!(
            "{prefix}* Class {}: {n} nodes excluded by filter",
            quote(class)
        ));
    }
    for (constraint, n) in m.constraint_filtered.iter().flatten() {
        lines.push(format!(
            "{prefix}* Constraint {}: {n} nodes excluded by filter",
            quote(constraint)
        ));
    }
    if m.nodes_exhausted > 0 {
        lines.push(format!(
            "{prefix}* Resources exhausted on {} nodes",
            m.nodes_exhausted
        ));
    }
    for (class, n) in m.class_exhausted.iter().flatten() {
        lines.push(format!(
            "{prefix}* Class {} exhausted on {n} nodes",
            quote(class)
        ));
    }
    for (dim, n) in m.dimension_exhausted.iter().flatten() {
        lines.push(format!(
            "{prefix}* Dimension {} exhausted on {n} nodes",
            quote(dim)
        ));
    }
    for dim in m.quota_exhausted.iter().flatten() {
        lines.push(format!("{prefix}* Quota limit hit {}", quote(dim)));
    }
    let mut out = lines.join("\n");
    if scores {
        let table = score_table(m);
        if !table.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&table);
        }
    }
    out
}

/// The `Node|binpack|...|final score` table from `ScoreMetaData`, or the legacy `Scores` map.
fn score_table(m: &AllocMetric) -> String {
    let metas = m.score_meta_data.as_deref().unwrap_or_default();
    if !metas.is_empty() {
        let mut names: Vec<&str> = metas
            .iter()
            .flat_map(|meta| meta.scores.keys().map(|k| k.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut rows = vec![format!("Node|{}|final score", names.join("|"))];
        for meta in metas {
            let mut row = format!("{}|", meta.node_id);
            for name in &names {
                let v = meta.scores.get(*name).copied().unwrap_or(0.0);
                row.push_str(&format!("{}|", format_g3(v)));
            }
            row.push_str(&format_g3(meta.norm_score));
            rows.push(row);
        }
        return format_list(&rows);
    }
    m.scores
        .iter()
        .flatten()
        .map(|(name, score)| format!("* Score {} = {score:.6}", quote(name)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `Task Group "g" (failed to place 3 allocations):` — the header Nomad puts above each
/// group's metrics in monitors and `eval status`.
pub fn failed_group_header(group: &str, m: &AllocMetric) -> String {
    let noun = if m.coalesced_failures > 0 {
        "allocations"
    } else {
        "allocation"
    };
    format!(
        "Task Group {} (failed to place {} {noun}):",
        quote(group),
        m.coalesced_failures + 1
    )
}

/// The lines a monitor prints for an evaluation's `FailedTGAllocs`: each group's header, then
/// its metric lines indented by two spaces. Groups come in name order.
pub fn failed_placement_lines(failed: &BTreeMap<String, AllocMetric>) -> Vec<String> {
    let mut lines = Vec::new();
    for (group, m) in failed {
        lines.push(failed_group_header(group, m));
        let text = format_alloc_metrics(m, false, "  ");
        lines.extend(text.lines().map(str::to_string));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{NodeScoreMeta, VecMap};

    fn missing_driver_metric() -> AllocMetric {
        let mut m = AllocMetric {
            nodes_evaluated: 1,
            nodes_available: Some(VecMap::from([("dc1".to_string(), 1)])),
            ..Default::default()
        };
        m.filter_node("", Some("missing drivers"));
        m
    }

    #[test]
    fn constraint_filter_renders_nomad_line() {
        assert_eq!(
            format_alloc_metrics(&missing_driver_metric(), false, "  "),
            "  * Constraint \"missing drivers\": 1 nodes excluded by filter"
        );
    }

    #[test]
    fn exhausted_node_renders_resources_and_dimension_lines() {
        let mut m = AllocMetric {
            nodes_evaluated: 1,
            ..Default::default()
        };
        m.exhausted_node("", "memory");
        assert_eq!(
            format_alloc_metrics(&m, false, "  "),
            "  * Resources exhausted on 1 nodes\n  * Dimension \"memory\" exhausted on 1 nodes"
        );
    }

    #[test]
    fn no_evaluated_nodes_and_empty_datacenter_are_explained() {
        let m = AllocMetric {
            nodes_available: Some(VecMap::from([("dc2".to_string(), 0)])),
            ..Default::default()
        };
        assert_eq!(
            format_alloc_metrics(&m, false, ""),
            "* No nodes were eligible for evaluation\n* No nodes are available in datacenter \"dc2\""
        );
    }

    #[test]
    fn failed_placement_lines_have_group_header_and_indented_reasons() {
        let mut m = missing_driver_metric();
        m.coalesced_failures = 2;
        let failed = BTreeMap::from([("cache".to_string(), m)]);
        assert_eq!(
            failed_placement_lines(&failed),
            vec![
                "Task Group \"cache\" (failed to place 3 allocations):".to_string(),
                "  * Constraint \"missing drivers\": 1 nodes excluded by filter".to_string(),
            ]
        );
        let single = failed_group_header("g", &AllocMetric::default());
        assert_eq!(single, "Task Group \"g\" (failed to place 1 allocation):");
    }

    #[test]
    fn verbose_metrics_include_score_table() {
        let m = AllocMetric {
            nodes_evaluated: 1,
            score_meta_data: Some(vec![NodeScoreMeta {
                node_id: "0d816e8c-19bd-2066-474e-6f7e52291a4c".into(),
                scores: VecMap::from([
                    ("binpack".into(), 0.07663658455308327),
                    ("job-anti-affinity".into(), -0.28),
                ]),
                norm_score: -0.1016817077234583,
            }]),
            ..Default::default()
        };
        assert_eq!(
            format_alloc_metrics(&m, true, "  "),
            "Node                                  binpack  job-anti-affinity  final score\n\
             0d816e8c-19bd-2066-474e-6f7e52291a4c  0.0766   -0.28              -0.102"
        );
    }
}
