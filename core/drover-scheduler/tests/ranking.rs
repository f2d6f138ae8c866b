//! Affinities, the spread block and the candidate limit, as tables of (cluster, job, expected
//! outcome) driven through the harness.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_scheduler::State;
use drover_scheduler::harness::{Harness, NodeBuilder, mock_job, register_eval};
use drover_structs::{Affinity, Allocation, Job, Node, Resources, Spread, SpreadTarget};

fn affinity(l: &str, op: &str, r: &str, weight: i64) -> Affinity {
    Affinity {
        l_target: l.into(),
        operand: op.into(),
        r_target: r.into(),
        weight,
    }
}

fn spread(attribute: &str, weight: i64, targets: &[(&str, i64)]) -> Spread {
    Spread {
        attribute: attribute.into(),
        weight,
        spread_target: (!targets.is_empty()).then(|| {
            targets
                .iter()
                .map(|(v, p)| SpreadTarget {
                    value: v.to_string(),
                    percent: *p,
                })
                .collect()
        }),
    }
}

fn rack_node(rack: &str) -> Node {
    NodeBuilder::new()
        .meta("rack", rack)
        .attr("os.features", "sse4,avx2")
        .attr("driver.docker.version", "20.10.7")
        .build()
}

fn small_job(count: i64) -> Job {
    let mut job = mock_job();
    job.task_groups[0].count = count;
    job.task_groups[0].tasks[0].resources = Resources {
        cpu: 100,
        memory_mb: 64,
        ..Default::default()
    };
    job
}

/// Allocations per rack.
fn per_rack(h: &Harness, allocs: &[Arc<Allocation>]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for a in allocs {
        let node = h.state.node(&a.node_id).unwrap();
        *m.entry(node.meta["rack"].clone()).or_insert(0) += 1;
    }
    m
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn affinities_pull_and_push_placements() {
    struct Case {
        name: &'static str,
        racks: Vec<&'static str>,
        job_affinities: Vec<Affinity>,
        group_affinities: Vec<Affinity>,
        task_affinities: Vec<Affinity>,
        count: i64,
        want: Vec<(&'static str, usize)>,
        /// The node-affinity score on nodes of rack r1, when one is recorded.
        r1_score: Option<f64>,
    }
    let cases = vec![
        Case {
            name: "positive weight draws a single placement to the matching rack",
            racks: vec!["r2", "r1", "r2", "r2"],
            job_affinities: vec![affinity("${meta.rack}", "=", "r1", 100)],
            group_affinities: vec![],
            task_affinities: vec![],
            count: 1,
            want: vec![("r1", 1)],
            r1_score: Some(1.0),
        },
        Case {
            name: "negative weight keeps placements off the matching rack",
            racks: vec!["r1", "r1", "r1", "r2"],
            job_affinities: vec![affinity("${meta.rack}", "=", "r1", -100)],
            group_affinities: vec![],
            task_affinities: vec![],
            count: 1,
            want: vec![("r2", 1)],
            r1_score: Some(-1.0),
        },
        Case {
            name: "scores are normalised by the sum of the weights' magnitudes",
            racks: vec!["r2", "r2", "r1", "r2"],
            job_affinities: vec![affinity("${meta.rack}", "=", "r1", 50)],
            group_affinities: vec![affinity("${attr.kernel.name}", "=", "linux", 25)],
            task_affinities: vec![affinity("${meta.rack}", "!=", "r1", -25)],
            count: 1,
            want: vec![("r1", 1)],
            // r1 matches the first two: (50 + 25) / 100.
            r1_score: Some(0.75),
        },
        Case {
            name: "operators work as in constraints",
            racks: vec!["r2", "r1", "r3"],
            job_affinities: vec![
                affinity("${meta.rack}", "regexp", "^r[12]$", 20),
                affinity("${attr.os.features}", "set_contains_any", "avx2,neon", 20),
                affinity("${attr.driver.docker.version}", "version", ">= 20.10", 20),
                affinity("${meta.rack}", "set_contains", "r1", 40),
            ],
            group_affinities: vec![],
            task_affinities: vec![],
            count: 1,
            want: vec![("r1", 1)],
            r1_score: Some(1.0),
        },
        Case {
            name: "several placements still follow the affinity, anti-affinity spreading them",
            racks: vec!["r1", "r2", "r1", "r2", "r1", "r2"],
            job_affinities: vec![affinity("${meta.rack}", "=", "r1", 100)],
            group_affinities: vec![],
            task_affinities: vec![],
            count: 3,
            want: vec![("r1", 3)],
            r1_score: Some(1.0),
        },
    ];
    for c in cases {
        let mut h = Harness::new();
        for r in &c.racks {
            h.upsert_node(rack_node(r));
        }
        let mut job = small_job(c.count);
        job.affinities = Some(c.job_affinities.clone());
        job.task_groups[0].affinities =
            (!c.group_affinities.is_empty()).then(|| c.group_affinities.clone());
        job.task_groups[0].tasks[0].affinities =
            (!c.task_affinities.is_empty()).then(|| c.task_affinities.clone());
        let job = h.upsert_job(job);
        h.process(&register_eval(&job)).unwrap();
        let live = h.live_allocs(&job);
        assert_eq!(per_rack(&h, &live), counts(&c.want), "{}", c.name);
        // Every feasible node is scored with affinities (the limit is at least 100).
        let m = live[0].metrics.as_ref().unwrap();
        assert_eq!(m.nodes_evaluated as usize, c.racks.len(), "{}", c.name);
        let r1 = m
            .score_meta_data
            .iter()
            .flatten()
            .find(|s| h.state.node(&s.node_id).unwrap().meta["rack"] == "r1");
        if let Some(want) = c.r1_score {
            let got = r1.and_then(|s| s.scores.get("node-affinity").copied());
            assert_eq!(got, Some(want), "{}: node-affinity", c.name);
        }
    }
}

#[test]
fn the_reserved_resources_example_scores_all_four_nodes() {
    // Issue 5's example: 1100/1100, 2000/2000 reserving 800/800, 2000/2000 reserving 500/500
    // and 900/900; a 1000/1000 task with an affinity nothing matches.
    let mut h = Harness::new();
    let n1 = h.upsert_node(NodeBuilder::new().resources(1100, 1100).build());
    let n2 = h.upsert_node(
        NodeBuilder::new()
            .resources(2000, 2000)
            .reserved(800, 800)
            .build(),
    );
    let n3 = h.upsert_node(
        NodeBuilder::new()
            .resources(2000, 2000)
            .reserved(500, 500)
            .build(),
    );
    let n4 = h.upsert_node(NodeBuilder::new().resources(900, 900).build());
    let mut job = mock_job();
    job.task_groups[0].count = 1;
    job.task_groups[0].tasks[0].resources = Resources {
        cpu: 1000,
        memory_mb: 1000,
        ..Default::default()
    };
    job.affinities = Some(vec![affinity("${meta.nothing}", "=", "x", 50)]);
    let job = h.upsert_job(job);
    h.process(&register_eval(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live[0].node_id, n1.id);
    let m = live[0].metrics.as_ref().unwrap();
    assert_eq!(m.nodes_evaluated, 4);
    assert_eq!(m.nodes_exhausted, 1);
    assert_eq!(m.class_exhausted.as_ref().unwrap().len(), 1);
    assert_eq!(m.dimension_exhausted.as_ref().unwrap()["cpu"], 1);
    let meta = m.score_meta_data.as_ref().unwrap();
    let got: Vec<(&str, f64)> = meta
        .iter()
        .map(|s| {
            (
                s.node_id.as_str(),
                (s.scores["binpack"] * 10_000.0).round() / 10_000.0,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (n1.id.as_str(), 0.9741),
            (n2.id.as_str(), 0.9480),
            (n3.id.as_str(), 0.8717)
        ]
    );
    assert!(meta.iter().all(|s| s.node_id != n4.id));
    for s in meta {
        // As in Nomad: an affinity that matches nothing records no node-affinity score.
        let names: Vec<&str> = s.scores.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            ["binpack", "job-anti-affinity", "node-reschedule-penalty"]
        );
        assert_eq!(s.norm_score, s.scores["binpack"]);
    }
}

#[test]
fn spreads_follow_their_targets() {
    struct Case {
        name: &'static str,
        racks: Vec<&'static str>,
        spreads: Vec<Spread>,
        count: i64,
        want: Vec<(&'static str, usize)>,
    }
    let cases = vec![
        Case {
            name: "70/30 over two racks",
            racks: vec!["r1", "r1", "r2", "r2"],
            spreads: vec![spread("${meta.rack}", 100, &[("r1", 70), ("r2", 30)])],
            count: 10,
            want: vec![("r1", 7), ("r2", 3)],
        },
        Case {
            name: "no targets: an even spread over the values",
            racks: vec!["r1", "r2", "r3", "r1", "r2", "r3"],
            spreads: vec![spread("${meta.rack}", 50, &[])],
            count: 9,
            want: vec![("r1", 3), ("r2", 3), ("r3", 3)],
        },
        Case {
            name: "targets under 100% leave the rest to the other values together",
            racks: vec!["r1", "r2", "r3", "r1", "r2", "r3"],
            spreads: vec![spread("${meta.rack}", 100, &[("r1", 50)])],
            count: 10,
            want: vec![("r1", 5), ("r2", 3), ("r3", 2)],
        },
        Case {
            name: "a zero target keeps placements elsewhere",
            racks: vec!["r1", "r2", "r1", "r2"],
            spreads: vec![spread("${meta.rack}", 100, &[("r1", 100), ("r2", 0)])],
            count: 4,
            want: vec![("r1", 4)],
        },
    ];
    for c in cases {
        let mut h = Harness::new();
        for r in &c.racks {
            h.upsert_node(rack_node(r));
        }
        let mut job = small_job(c.count);
        job.task_groups[0].spreads = Some(c.spreads.clone());
        let job = h.upsert_job(job);
        h.process(&register_eval(&job)).unwrap();
        let live = h.live_allocs(&job);
        let got = per_rack(&h, &live);
        let want = counts(&c.want);
        if c.name.starts_with("targets under") {
            // r2 and r3 share the implicit 50%: 5 between them, either way round.
            assert_eq!(got["r1"], 5, "{}", c.name);
            assert_eq!(got["r2"] + got["r3"], 5, "{}", c.name);
            assert!(got["r2"].abs_diff(got["r3"]) <= 1, "{}: {got:?}", c.name);
        } else {
            assert_eq!(got, want, "{}", c.name);
        }
        let scored = live.iter().any(|a| {
            a.metrics
                .as_ref()
                .and_then(|m| m.score_meta_data.as_ref())
                .is_some_and(|s| s.iter().any(|n| n.scores.contains_key("allocation-spread")))
        });
        assert!(scored, "{}: allocation-spread in ScoreMetaData", c.name);
    }
}

#[test]
fn spreads_count_existing_allocations_and_the_job_level_block() {
    let mut h = Harness::new();
    for r in ["r1", "r2", "r1", "r2"] {
        h.upsert_node(rack_node(r));
    }
    let mut job = small_job(4);
    job.spreads = Some(vec![spread("${meta.rack}", 100, &[("r1", 50), ("r2", 50)])]);
    let job = h.upsert_job(job);
    h.process(&register_eval(&job)).unwrap();
    assert_eq!(
        per_rack(&h, &h.live_allocs(&job)),
        counts(&[("r1", 2), ("r2", 2)])
    );
    // Scaling up keeps the shares with the allocations already there counted.
    let mut bigger = (*job).clone();
    bigger.task_groups[0].count = 8;
    let bigger = h.upsert_job(bigger);
    h.process(&register_eval(&bigger)).unwrap();
    assert_eq!(
        per_rack(&h, &h.live_allocs(&bigger)),
        counts(&[("r1", 4), ("r2", 4)])
    );
}

#[test]
fn the_candidate_limit_grows_with_affinities_and_spreads() {
    struct Case {
        name: &'static str,
        count: i64,
        with_affinity: bool,
        with_spread: bool,
        /// Nodes evaluated for the first placement.
        evaluated: i64,
    }
    let cases = [
        Case {
            name: "services score log2(200) = 8 nodes",
            count: 1,
            with_affinity: false,
            with_spread: false,
            evaluated: 8,
        },
        Case {
            name: "an affinity scores 100 nodes",
            count: 1,
            with_affinity: true,
            with_spread: false,
            evaluated: 100,
        },
        Case {
            name: "a spread scores 100 nodes",
            count: 1,
            with_affinity: false,
            with_spread: true,
            evaluated: 100,
        },
        Case {
            name: "a group larger than 100 scores its count",
            count: 150,
            with_affinity: true,
            with_spread: false,
            evaluated: 150,
        },
    ];
    for c in cases {
        let mut h = Harness::new();
        for i in 0..200 {
            h.upsert_node(rack_node(&format!("r{}", i % 4)));
        }
        let mut job = small_job(c.count);
        if c.with_affinity {
            job.affinities = Some(vec![affinity("${meta.nothing}", "=", "x", 10)]);
        }
        if c.with_spread {
            job.task_groups[0].spreads = Some(vec![spread("${meta.rack}", 50, &[])]);
        }
        let job = h.upsert_job(job);
        h.process(&register_eval(&job)).unwrap();
        let first = h
            .live_allocs(&job)
            .into_iter()
            .find(|a| a.name.ends_with("[0]"))
            .unwrap();
        let m = first.metrics.as_ref().unwrap();
        assert_eq!(m.nodes_evaluated, c.evaluated, "{}", c.name);
    }
}
