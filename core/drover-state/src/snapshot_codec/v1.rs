//! Version 1 of the snapshot encoding, read only: the whole state as one JSON document, each
//! allocation written out in full (its legacy fields derived) beside the version of its job.
//! Servers wrote it until version 2; snapshots and operator archives from then still restore.

use std::sync::Arc;

use drover_structs::SchedulerConfiguration;
use drover_structs::{Allocation, Evaluation, Job, JobSummary, Node, PeriodicLaunch};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::SnapshotError;
use super::builder::{DecodedAlloc, TablesBuilder};
use crate::tables::Tables;

/// A version 1 snapshot: one JSON document.
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

/// An allocation of a version 1 snapshot: decoded straight into its shared box, so a million
/// of them waiting for their table are a list of pointers, not of whole allocations.
#[derive(Deserialize)]
struct V1Alloc {
    alloc: Arc<Allocation>,
    job_version: Option<u64>,
}

impl V1Alloc {
    fn into_decoded(self) -> DecodedAlloc {
        DecodedAlloc {
            alloc: self.alloc,
            job_version: self.job_version,
        }
    }
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
                serde_json::from_str::<V1Alloc>(r.get())
                    .map(V1Alloc::into_decoded)
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

/// Decodes a whole version 1 document (its version already checked).
pub(super) fn decode(data: &[u8]) -> Result<Tables, SnapshotError> {
    let enc: Encoded =
        serde_json::from_slice(data).map_err(|e| SnapshotError::Malformed(e.to_string()))?;
    let mut b = TablesBuilder::default();
    b.latest_index(enc.latest_index);
    for (name, idx) in enc.indexes {
        b.table_index(&name, idx);
    }
    for j in enc.job_versions {
        b.job_version(j);
    }
    for (ns, id, version) in enc.jobs {
        b.job(ns, id, version)?;
    }
    enc.summaries.into_iter().for_each(|s| b.summary(s));
    enc.evals.into_iter().for_each(|e| b.eval(e));
    for a in decode_allocs(&enc.allocs)? {
        b.alloc(a);
    }
    enc.nodes.into_iter().for_each(|n| b.node(n));
    b.scheduler_config(enc.scheduler_config);
    enc.periodic_launches
        .into_iter()
        .for_each(|l| b.periodic_launch(l));
    enc.csi_volumes.into_iter().for_each(|v| b.csi_volume(v));
    enc.csi_plugins.into_iter().for_each(|p| b.csi_plugin(p));
    enc.deployments.into_iter().for_each(|d| b.deployment(d));
    for (ns, id, events) in enc.scaling_events {
        b.scaling_events(ns, id, events);
    }
    enc.namespaces.into_iter().for_each(|n| b.namespace(n));
    enc.acl_policies.into_iter().for_each(|p| b.acl_policy(p));
    enc.acl_tokens.into_iter().for_each(|t| b.acl_token(t));
    b.acl_bootstrap_index(enc.acl_bootstrap_index);
    enc.job_submissions
        .into_iter()
        .for_each(|s| b.job_submission(s));
    enc.variables.into_iter().for_each(|v| b.variable(v));
    b.mesh_ca(enc.mesh_ca);
    enc.intentions.into_iter().for_each(|i| b.intention(i));
    Ok(b.finish())
}
