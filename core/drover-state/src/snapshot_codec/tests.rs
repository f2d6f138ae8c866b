//! The snapshot encodings against the state store: what goes in comes back, whatever the
//! version, and what is damaged is refused without touching the state.

use super::*;
use crate::store::StateStore;
use drover_structs::*;

fn job(id: &str) -> Job {
    crate::store::tests::job(id, 1)
}

/// An allocation of job `a`'s group `g`, meant to run.
fn alloc_of_a(id: &str, node: &str, client_status: &str) -> Allocation {
    Allocation {
        id: id.into(),
        namespace: "default".into(),
        job_id: "a".into(),
        node_id: node.into(),
        task_group: "g".into(),
        client_status: client_status.into(),
        desired_status: ALLOC_DESIRED_RUN.into(),
        ..Default::default()
    }
}

/// `s` encoded and restored into a fresh store, checked equal by digest.
fn restored_copy(s: &StateStore) -> StateSnapshot {
    let snap = s.snapshot();
    let restored = StateStore::new();
    restored.restore(&snap.encode()).unwrap();
    let r = restored.snapshot();
    assert_eq!(r.digest(), snap.digest());
    r
}

#[test]
fn snapshot_round_trip_keeps_every_table_and_links_jobs() {
    let s = StateStore::new();
    s.upsert_job(5, job("a"));
    let mut j2 = job("a");
    j2.task_groups[0].count = 3;
    let source = JobSubmission {
        source: "job \"a\" {}".into(),
        format: "hcl2".into(),
        ..Default::default()
    };
    s.upsert_job_with_source(6, j2, Some(source));
    let alloc = alloc_of_a("al1", "n1", ALLOC_CLIENT_PENDING);
    let jv = s.snapshot().job("default", "a");
    s.upsert_plan_results(7, jv, vec![], vec![alloc], vec![]);
    s.upsert_node(
        8,
        Node {
            id: "n1".into(),
            status: NODE_STATUS_READY.into(),
            ..Default::default()
        },
    );
    let r = restored_copy(&s);
    assert_eq!(r.job("default", "a").unwrap().version, 1);
    assert_eq!(r.job_versions("default", "a").len(), 2);
    let kept = r.job_submission("default", "a", 1).unwrap();
    assert_eq!(
        (kept.source.as_str(), kept.version, kept.job_id.as_str()),
        ("job \"a\" {}", 1, "a")
    );
    assert!(r.job_submission("default", "a", 0).is_none());
    let a = r.alloc("al1").unwrap();
    assert_eq!(a.job.as_ref().unwrap().version, 1);
    assert_eq!(r.allocs_by_node("n1").len(), 1);
    assert_eq!(r.latest_index(), 8);
}

#[test]
fn floats_read_back_bit_for_bit() {
    // Placement scores are ratios: serde_json's default float parsing misses the last bit
    // of some of them, and a restored server then disagrees with the one it came from.
    let scores: Vec<f64> = (1..20_000u32)
        .map(|i| 1.0 - f64::from(i % 977) / f64::from(i % 1013 + 1013))
        .collect();
    let text = serde_json::to_string(&scores).unwrap();
    let back: Vec<f64> = serde_json::from_str(&text).unwrap();
    let differ = scores
        .iter()
        .zip(&back)
        .filter(|(a, b)| a.to_bits() != b.to_bits());
    assert_eq!(differ.count(), 0);
}

#[test]
fn many_allocations_decode_in_parallel_in_order_and_a_bad_one_is_named() {
    let s = StateStore::new();
    s.upsert_job(5, job("a"));
    // Several batches for the decoding threads.
    let count = 4101 + 5;
    let allocs = (0..count)
        .map(|i| {
            alloc_of_a(
                &format!("al{i:05}"),
                &format!("n{}", i % 7),
                ALLOC_CLIENT_RUNNING,
            )
        })
        .collect();
    let jv = s.snapshot().job("default", "a");
    s.upsert_plan_results(6, jv, vec![], allocs, vec![]);
    let r = restored_copy(&s);
    assert_eq!(r.alloc_count(), count);
    assert_eq!(
        r.allocs_by_node("n3").len(),
        count / 7 + usize::from(count % 7 > 3)
    );
    let last = r.alloc(&format!("al{:05}", count - 1)).unwrap();
    assert_eq!(last.job.as_ref().unwrap().version, 0);

    // One allocation of thousands made unreadable: refused, naming which, state kept. (The
    // same length, so the row's frame still holds.)
    let good = s.snapshot().encode();
    let at = find(&good, br#""ID":"al04100""#).expect("the allocation to spoil");
    let mut bad = good.clone();
    bad[at..at + 14].copy_from_slice(br#""ID":123456789"#);
    let restored = StateStore::new();
    restored.restore(&good).unwrap();
    let err = restored.restore(&bad).unwrap_err();
    assert!(err.to_string().contains("allocation 4100"), "{err}");
    assert_eq!(restored.snapshot().alloc_count(), count);
}

#[test]
fn placed_allocations_are_stored_without_legacy_resources_and_written_out_the_same() {
    use drover_structs::{
        AllocatedCpuResources, AllocatedResources, AllocatedTaskResources, legacy_resources,
    };
    let s = StateStore::new();
    s.upsert_job(5, job("a"));
    let ar = AllocatedResources {
        tasks: drover_structs::VecMap::from([(
            "t".to_string(),
            AllocatedTaskResources {
                cpu: AllocatedCpuResources {
                    cpu_shares: 100,
                    ..Default::default()
                },
                ..Default::default()
            },
        )]),
        ..Default::default()
    };
    let legacy = legacy_resources(&ar);
    let placed = Allocation {
        id: "al1".into(),
        namespace: "default".into(),
        job_id: "a".into(),
        node_id: "n1".into(),
        task_group: "g".into(),
        resources: Some(Box::new(legacy.total)),
        shared_resources: Some(Box::new(legacy.shared)),
        task_resources: Some(legacy.tasks),
        allocated_resources: Some(ar),
        ..Default::default()
    };
    let jv = s.snapshot().job("default", "a");
    s.upsert_plan_results(7, jv, vec![], vec![placed.clone()], vec![]);
    let stored = s.snapshot().alloc("al1").unwrap();
    assert_eq!(
        stored.resources, None,
        "kept in memory only as AllocatedResources"
    );
    // The linked job is not the allocation's own data: compare without it.
    let json = |a: &Allocation| {
        let mut v = serde_json::to_value(a).unwrap();
        v["Job"] = serde_json::Value::Null;
        v
    };
    assert_eq!(
        json(&stored)["TaskResources"],
        json(&placed)["TaskResources"]
    );
    assert_eq!(json(&stored)["Resources"]["CPU"], 100);

    // Snapshots are written allocation by allocation and read back the same.
    let back = restored_copy(&s).alloc("al1").unwrap();
    assert_eq!(back.resources, None);
    assert_eq!(json(&back), json(&stored));
}

#[test]
fn unknown_snapshot_version_is_refused_and_changes_nothing() {
    let s = StateStore::new();
    s.upsert_job(3, job("keep"));
    let err = s.restore(br#"{"version": 99}"#).unwrap_err();
    assert!(err.to_string().contains("version 99"));
    assert!(s.snapshot().job("default", "keep").is_some());
    assert!(s.restore(b"not json").is_err());
    assert!(s.snapshot().job("default", "keep").is_some());
    // As servers write it, the version is read off the front.
    let err = s
        .restore(br#"{"version":3,"latest_index":[]}"#)
        .unwrap_err();
    assert!(matches!(err, SnapshotError::UnknownVersion(3)), "{err}");
    let err = s.restore(br#"{"version":2,"x":1}"#).unwrap_err();
    assert!(err.to_string().contains("header"), "{err}");
    assert!(s.snapshot().job("default", "keep").is_some());
}

#[test]
fn the_version_is_read_off_the_front_only_when_it_opens_the_document() {
    assert_eq!(leading_version(br#"{"version":1,"x":2}"#), Some(1));
    assert_eq!(leading_version(br#"{"version":12}"#), Some(12));
    assert_eq!(leading_version(br#"{"version":1.5}"#), None);
    assert_eq!(leading_version(br#"{"version":"1"}"#), None);
    assert_eq!(leading_version(br#"{"latest_index":1,"version":1}"#), None);
    let store = StateStore::new();
    store.upsert_job(3, job("a"));
    assert_eq!(
        leading_version(&store.snapshot().encode()),
        Some(SNAPSHOT_VERSION)
    );
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A state with a job, its allocations on two nodes and a node: enough for every row kind
/// that matters to a restore.
fn small_state() -> StateStore {
    let s = StateStore::new();
    s.upsert_job(5, job("a"));
    let allocs = (0..3)
        .map(|i| {
            alloc_of_a(
                &format!("al{i}"),
                &format!("n{}", i % 2),
                ALLOC_CLIENT_RUNNING,
            )
        })
        .collect();
    let jv = s.snapshot().job("default", "a");
    s.upsert_plan_results(6, jv, vec![], allocs, vec![]);
    s.upsert_node(
        7,
        Node {
            id: "n1".into(),
            status: NODE_STATUS_READY.into(),
            ..Default::default()
        },
    );
    s
}

/// Hands out at most three bytes per read: every row's frame is split across reads.
struct Trickle<'a>(&'a [u8]);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(3).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn a_snapshot_decodes_the_same_however_it_is_split_into_reads() {
    let s = small_state();
    let restored = StateStore::new();
    restored
        .restore_from(&mut Trickle(&s.snapshot().encode()))
        .unwrap();
    assert_eq!(restored.snapshot().digest(), s.snapshot().digest());
    assert_eq!(restored.snapshot().allocs_by_node("n0").len(), 2);
}

#[test]
fn a_snapshot_cut_short_anywhere_is_refused_and_changes_nothing() {
    let s = small_state();
    let data = s.snapshot().encode();
    let kept = StateStore::new();
    kept.upsert_job(3, job("keep"));
    for cut in [rows::HEADER.len() + 1, data.len() / 2, data.len() - 1] {
        let err = kept.restore(&data[..cut]).unwrap_err();
        assert!(err.to_string().contains("cut short"), "cut at {cut}: {err}");
        assert!(kept.snapshot().job("default", "keep").is_some());
    }
    // Whole rows dropped before the end row: its count disagrees.
    let end_row = data.len() - 13;
    let mut missing = data[..rows::HEADER.len()].to_vec();
    missing.extend_from_slice(&data[end_row..]);
    let err = kept.restore(&missing).unwrap_err();
    assert!(err.to_string().contains("end row counts"), "{err}");
}

#[test]
fn a_row_of_an_unknown_kind_is_refused() {
    let s = small_state();
    let mut data = s.snapshot().encode();
    // The first row (the tables' single values) made a kind no server knows.
    data[rows::HEADER.len()] = 99;
    let err = StateStore::new().restore(&data).unwrap_err();
    assert!(err.to_string().contains("unknown row kind 99"), "{err}");
}

#[test]
fn allocations_are_stored_without_their_job_when_the_snapshot_holds_it() {
    let s = small_state();
    let data = s.snapshot().encode();
    assert!(
        find(&data, br#""Job":"#).is_none(),
        "no allocation carries its job"
    );
    assert!(
        find(&data, br#""TaskResources""#).is_none(),
        "nor derived fields"
    );
}

/// Written by servers before version 2: one JSON document.
const VERSION_1: &str = r#"{"version":1,"latest_index":8,"indexes":[["jobs",5],["allocs",6]],
"job_versions":[{"ID":"a","Name":"a","Namespace":"default","Type":"service","Priority":50,
"Version":0,"TaskGroups":[{"Name":"g","Count":1}]}],"jobs":[["default","a",0]],"summaries":[],
"evals":[],"allocs":[{"alloc":{"ID":"al1","Namespace":"default","JobID":"a","NodeID":"n1",
"TaskGroup":"g","ClientStatus":"running","DesiredStatus":"run"},"job_version":0}],
"nodes":[{"ID":"n1","Status":"ready"}]}"#;

#[test]
fn version_1_snapshots_still_restore() {
    let s = StateStore::new();
    s.restore(VERSION_1.as_bytes()).unwrap();
    let r = s.snapshot();
    assert_eq!(r.latest_index(), 8);
    let a = r.alloc("al1").unwrap();
    assert_eq!(a.job.as_ref().unwrap().id, "a");
    assert_eq!(r.allocs_by_node("n1").len(), 1);
    assert!(r.node("n1").is_some());
    // And read through a stream too.
    let streamed = StateStore::new();
    streamed
        .restore_from(&mut Trickle(VERSION_1.as_bytes()))
        .unwrap();
    assert_eq!(streamed.snapshot().digest(), r.digest());
}
