//! Encoding of the whole state for Raft snapshots: versioned JSON, so added fields are tolerated
//! and an unknown version is refused with a clear error. Allocations are stored without their
//! job; restore links each to the job version it ran.

use std::cell::Cell;
use std::io::Write;
use std::sync::Arc;

use drover_structs::{
    Allocation, Evaluation, Job, JobSummary, Node, PeriodicLaunch, SchedulerConfiguration,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::store::StateStore;
use crate::tables::{StateSnapshot, Table, Tables};

pub const SNAPSHOT_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "state snapshot version {0} is not supported (this server reads version {SNAPSHOT_VERSION})"
    )]
    UnknownVersion(u32),
    #[error("state snapshot is malformed: {0}")]
    Malformed(String),
}

/// A snapshot as read back; [`EncodedRef`] writes the same fields in the same order.
#[derive(Deserialize)]
struct Encoded<'a> {
    // `version` is checked before the rest is read.
    latest_index: u64,
    indexes: Vec<(String, u64)>,
    job_versions: Vec<Job>,
    jobs: Vec<(String, String, u64)>,
    summaries: Vec<JobSummary>,
    evals: Vec<Evaluation>,
    /// Found, not yet decoded: they are decoded on every core at once ([`decode_allocs`]).
    #[serde(borrow)]
    allocs: Vec<&'a RawValue>,
    nodes: Vec<Node>,
    #[serde(default)]
    scheduler_config: Option<SchedulerConfiguration>,
    #[serde(default)]
    periodic_launches: Vec<PeriodicLaunch>,
    #[serde(default)]
    csi_volumes: Vec<drover_structs::CsiVolume>,
    #[serde(default)]
    csi_plugins: Vec<drover_structs::CsiPlugin>,
    #[serde(default)]
    deployments: Vec<drover_structs::Deployment>,
    #[serde(default)]
    scaling_events: Vec<(String, String, drover_structs::ScalingEvents)>,
    #[serde(default)]
    namespaces: Vec<drover_structs::Namespace>,
    #[serde(default)]
    acl_policies: Vec<drover_structs::AclPolicy>,
    #[serde(default)]
    acl_tokens: Vec<drover_structs::AclToken>,
    #[serde(default)]
    acl_bootstrap_index: u64,
    #[serde(default)]
    variables: Vec<drover_structs::Variable>,
    #[serde(default)]
    job_submissions: Vec<drover_structs::JobSubmission>,
    #[serde(default)]
    mesh_ca: Option<drover_structs::mesh::MeshCa>,
    #[serde(default)]
    intentions: Vec<drover_structs::mesh::Intention>,
}

#[derive(Serialize)]
struct EncodedAlloc {
    alloc: Allocation,
    job_version: Option<u64>,
}

/// An [`EncodedAlloc`] as read back: decoded straight into its shared box, so a million of
/// them waiting for their table are a list of pointers, not of whole allocations.
#[derive(Deserialize)]
struct DecodedAlloc {
    alloc: Arc<Allocation>,
    job_version: Option<u64>,
}

impl EncodedAlloc {
    /// Stored without its job: restore links the shared job version again. What the store
    /// derives from the job is written out in full first.
    fn of(a: &Allocation) -> EncodedAlloc {
        let mut alloc = a.clone();
        alloc.restore_derivable_fields();
        let job_version = alloc.job.take().map(|j| j.version);
        EncodedAlloc { alloc, job_version }
    }
}

/// The rows of a table written one by one as a JSON list, straight from the table: a
/// million allocations copied at once for encoding would double the server's memory.
struct Rows<I>(Cell<Option<I>>);

fn rows<I: IntoIterator>(rows: I) -> Rows<I::IntoIter> {
    Rows(Cell::new(Some(rows.into_iter())))
}

impl<I: Iterator<Item = T>, T: Serialize> Serialize for Rows<I> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeSeq};
        // A `Rows` is serialised once: `encode_to` builds it for one write.
        let rows = self
            .0
            .take()
            .ok_or_else(|| S::Error::custom("snapshot rows written twice"))?;
        let mut seq = serializer.serialize_seq(None)?;
        for row in rows {
            seq.serialize_element(&row)?;
        }
        seq.end()
    }
}

/// Writes every table for a Raft snapshot into `out` as it goes, never holding the whole
/// encoding: memory stays flat whatever the state's size. Same fields, same order as
/// [`Encoded`] reads (allocations after the job versions they link to).
pub(crate) fn encode_to(s: &StateSnapshot, out: &mut dyn Write) -> std::io::Result<()> {
    let t = &s.t;
    let enc = EncodedRef {
        version: SNAPSHOT_VERSION,
        latest_index: t.latest_index,
        indexes: rows(t.indexes.iter().map(|(k, v)| (k.name(), *v))),
        job_versions: rows(t.job_versions.values().map(|j| &**j)),
        jobs: rows(t.jobs.iter().map(|((ns, id), j)| (ns, id, j.version))),
        summaries: rows(t.job_summaries.values().map(|s| &**s)),
        evals: rows(t.evals.values().map(|e| &**e)),
        allocs: rows(t.allocs.values().map(|a| EncodedAlloc::of(a))),
        nodes: rows(t.nodes.values().map(|n| &**n)),
        scheduler_config: t.scheduler_config.as_deref(),
        periodic_launches: rows(t.periodic_launches.values().map(|l| &**l)),
        csi_volumes: rows(t.csi_volumes.values().map(|v| &**v)),
        csi_plugins: rows(t.csi_plugins.values().map(|p| &**p)),
        deployments: rows(t.deployments.values().map(|d| &**d)),
        scaling_events: rows(t.scaling_events.iter().map(|((ns, id), e)| (ns, id, &**e))),
        namespaces: rows(t.namespaces.values().map(|n| &**n)),
        acl_policies: rows(t.acl_policies.values().map(|p| &**p)),
        acl_tokens: rows(t.acl_tokens.values().map(|p| &**p)),
        acl_bootstrap_index: t.acl_bootstrap_index,
        variables: rows(t.variables.values().map(|v| &**v)),
        job_submissions: rows(t.job_submissions.values().map(|s| &**s)),
        mesh_ca: t.mesh_ca.as_deref(),
        intentions: rows(t.intentions.values().map(|i| &**i)),
    };
    serde_json::to_writer(out, &enc).map_err(std::io::Error::other)
}

/// What [`encode_to`] writes: the tables as [`Rows`], written lazily.
#[derive(Serialize)]
struct EncodedRef<'a, Ix, Jv, Jb, Su, Ev, Al, No, Pl, Cv, Cp, De, Sc, Ns, Ap, At, Va, Js, In> {
    version: u32,
    latest_index: u64,
    indexes: Ix,
    job_versions: Jv,
    jobs: Jb,
    summaries: Su,
    evals: Ev,
    allocs: Al,
    nodes: No,
    scheduler_config: Option<&'a SchedulerConfiguration>,
    periodic_launches: Pl,
    csi_volumes: Cv,
    csi_plugins: Cp,
    deployments: De,
    scaling_events: Sc,
    namespaces: Ns,
    acl_policies: Ap,
    acl_tokens: At,
    acl_bootstrap_index: u64,
    variables: Va,
    job_submissions: Js,
    mesh_ca: Option<&'a drover_structs::mesh::MeshCa>,
    intentions: In,
}

pub(crate) fn encode(s: &StateSnapshot) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail, nor can serialising plain data structs.
    let _ = encode_to(s, &mut out);
    out
}

/// The version of an encoding that opens with it, as `encode_to` writes it: read without
/// parsing the gigabytes after it.
fn leading_version(data: &[u8]) -> Option<u32> {
    let rest = data.strip_prefix(br#"{"version":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if !matches!(rest.get(digits), Some(b',' | b'}')) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// Below this many allocations a snapshot is decoded on the calling thread alone.
const PARALLEL_DECODE_MIN: usize = 4096;

/// Decodes the allocations found in a snapshot, in order, splitting them among the machine's
/// cores: they are most of a large state, and its restart waits for them.
fn decode_allocs(raw: &[&RawValue]) -> Result<Vec<DecodedAlloc>, SnapshotError> {
    let decode_part = |first: usize, part: &[&RawValue]| {
        part.iter()
            .enumerate()
            .map(|(i, r)| {
                serde_json::from_str::<DecodedAlloc>(r.get())
                    .map_err(|e| SnapshotError::Malformed(format!("allocation {}: {e}", first + i)))
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || raw.len() < PARALLEL_DECODE_MIN {
        return decode_part(0, raw);
    }
    let per_thread = raw.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = raw
            .chunks(per_thread)
            .enumerate()
            .map(|(n, part)| scope.spawn(move || decode_part(n * per_thread, part)))
            .collect();
        let mut all = Vec::with_capacity(raw.len());
        for part in parts {
            let decoded = part
                .join()
                .map_err(|_| SnapshotError::Malformed("allocation decoder panicked".into()))?;
            all.extend(decoded?);
        }
        Ok(all)
    })
}

fn decode(data: &[u8]) -> Result<Tables, SnapshotError> {
    #[derive(Deserialize)]
    struct VersionOnly {
        version: u32,
    }
    let version = match leading_version(data) {
        Some(version) => version,
        // Not as `encode_to` writes it: read the whole document for its version.
        None => {
            serde_json::from_slice::<VersionOnly>(data)
                .map_err(|e| SnapshotError::Malformed(e.to_string()))?
                .version
        }
    };
    if version != SNAPSHOT_VERSION {
        return Err(SnapshotError::UnknownVersion(version));
    }
    let enc: Encoded =
        serde_json::from_slice(data).map_err(|e| SnapshotError::Malformed(e.to_string()))?;
    let mut t = Tables {
        latest_index: enc.latest_index,
        ..Default::default()
    };
    for (name, idx) in enc.indexes {
        if let Some(table) = Table::ALL.iter().find(|tb| tb.name() == name) {
            t.indexes.insert(*table, idx);
        }
    }
    for j in enc.job_versions {
        let k = (j.namespace.clone(), j.id.clone());
        t.job_versions.insert((k, j.version), Arc::new(j));
    }
    for (ns, id, version) in enc.jobs {
        let k = (ns, id);
        let Some(j) = t.job_versions.get(&(k.clone(), version)).cloned() else {
            return Err(SnapshotError::Malformed(format!(
                "job {}/{} version {version} missing from job versions",
                k.0, k.1
            )));
        };
        t.jobs.insert(k, j);
    }
    for s in enc.summaries {
        t.job_summaries
            .insert((s.namespace.clone(), s.job_id.clone()), Arc::new(s));
    }
    for e in enc.evals {
        t.evals_by_job
            .entry((e.namespace.clone(), e.job_id.clone()))
            .or_default()
            .insert(e.id.clone());
        t.evals.insert(e.id.clone(), Arc::new(e));
    }
    for DecodedAlloc {
        alloc: mut shared,
        job_version,
    } in decode_allocs(&enc.allocs)?
    {
        // Just decoded, so not shared: `make_mut` changes it in place.
        let alloc = Arc::make_mut(&mut shared);
        let k = (alloc.namespace.clone(), alloc.job_id.clone());
        alloc.job = job_version.and_then(|v| t.job_versions.get(&(k.clone(), v)).cloned());
        alloc.drop_derivable_legacy_resources();
        let id = crate::tables::AllocKey::from(alloc.id.as_str());
        t.allocs_by_node
            .entry(alloc.node_id.clone())
            .or_default()
            .insert(id.clone());
        t.allocs_by_job.entry(k).or_default().insert(id.clone());
        if !alloc.terminal() {
            let u = t.node_usage.entry(alloc.node_id.clone()).or_default();
            Arc::make_mut(u).add(alloc);
        }
        t.allocs.insert(id, shared);
    }
    for n in enc.nodes {
        t.nodes.insert(n.id.clone(), Arc::new(n));
    }
    t.scheduler_config = enc.scheduler_config.map(Arc::new);
    for l in enc.periodic_launches {
        t.periodic_launches
            .insert((l.namespace.clone(), l.id.clone()), Arc::new(l));
    }
    for v in enc.csi_volumes {
        let k = (v.namespace.clone(), v.id.clone());
        t.csi_volumes_by_plugin
            .entry(v.plugin_id.clone())
            .or_default()
            .insert(k.clone());
        t.csi_volumes.insert(k, Arc::new(v));
    }
    for p in enc.csi_plugins {
        t.csi_plugins.insert(p.id.clone(), Arc::new(p));
    }
    for d in enc.deployments {
        t.deployments_by_job
            .entry((d.namespace.clone(), d.job_id.clone()))
            .or_default()
            .insert(d.id.clone());
        t.deployments.insert(d.id.clone(), Arc::new(d));
    }
    for (ns, id, events) in enc.scaling_events {
        t.scaling_events.insert((ns, id), Arc::new(events));
    }
    for n in enc.namespaces {
        t.namespaces.insert(n.name.clone(), Arc::new(n));
    }
    for p in enc.acl_policies {
        t.acl_policies.insert(p.name.clone(), Arc::new(p));
    }
    for tok in enc.acl_tokens {
        t.acl_tokens_by_secret
            .insert(tok.secret_id.clone(), tok.accessor_id.clone());
        t.acl_tokens.insert(tok.accessor_id.clone(), Arc::new(tok));
    }
    t.acl_bootstrap_index = enc.acl_bootstrap_index;
    for s in enc.job_submissions {
        let k = (s.namespace.clone(), s.job_id.clone());
        t.job_submissions.insert((k, s.version), Arc::new(s));
    }
    for v in enc.variables {
        t.variables
            .insert((v.namespace.clone(), v.path.clone()), Arc::new(v));
    }
    t.mesh_ca = enc.mesh_ca.map(Arc::new);
    for i in enc.intentions {
        let k = (
            i.namespace.clone(),
            i.source_name.clone(),
            i.destination_name.clone(),
        );
        t.intentions.insert(k, Arc::new(i));
    }
    Ok(t)
}

impl StateSnapshot {
    /// Encodes every table for a Raft snapshot.
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    /// Encodes every table for a Raft snapshot into `out` as it goes (see [`encode_to`]).
    pub fn encode_to(&self, out: &mut dyn Write) -> std::io::Result<()> {
        encode_to(self, out)
    }
}

impl StateStore {
    /// Replaces the whole state with a decoded snapshot. On error nothing changes.
    pub fn restore(&self, data: &[u8]) -> Result<(), SnapshotError> {
        let t = decode(data)?;
        self.replace(t);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::*;

    fn job(id: &str) -> Job {
        Job {
            id: id.into(),
            name: id.into(),
            namespace: "default".into(),
            job_type: "service".into(),
            priority: 50,
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count: 1,
                ..Default::default()
            }],
            ..Default::default()
        }
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
        let count = PARALLEL_DECODE_MIN + 5;
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

        // One allocation of thousands made unreadable: refused, naming which, state kept.
        let text = String::from_utf8(s.snapshot().encode()).unwrap();
        let bad = text.replacen(r#""ID":"al04100""#, r#""ID":4100"#, 1);
        assert!(bad != text, "the allocation to spoil was not found");
        let restored = StateStore::new();
        restored.restore(text.as_bytes()).unwrap();
        let err = restored.restore(bad.as_bytes()).unwrap_err();
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
            resources: Some(legacy.total),
            shared_resources: Some(legacy.shared),
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
        // As `encode_to` writes it, the version is read off the front.
        let err = s
            .restore(br#"{"version":2,"latest_index":[]}"#)
            .unwrap_err();
        assert!(matches!(err, SnapshotError::UnknownVersion(2)), "{err}");
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
}
