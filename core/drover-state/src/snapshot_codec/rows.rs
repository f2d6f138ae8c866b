//! Version 2 of the snapshot encoding: the state as a stream of rows, written straight from
//! the tables and decoded as it is read, so neither side ever holds the whole encoding (the
//! state of a million allocations is gigabytes). Allocations, most of a large state, are
//! parsed on every core while the rows after them are still being read.
//!
//! Layout: [`HEADER`], then rows, each its kind (1 byte), its body's length (4 bytes, little
//! endian) and its body. Bodies are JSON, except an allocation's, which opens with the version
//! of its job (8 bytes, little endian; all ones for none) before the allocation's JSON as the
//! store holds it: without the fields derived from its job, which restore links again. Rows
//! come table by table, the job versions before the jobs and allocations that link to them.
//! The last row ([`kind::END`]) holds how many rows came before it, so a payload cut short is
//! refused rather than restored as a smaller state.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};

use drover_structs::{Allocation, AllocationHeldWithoutJob};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::builder::{DecodedAlloc, JobVersions, LinkedAlloc, TablesBuilder};
use super::{SnapshotError, read_up_to};
use crate::tables::{StateSnapshot, Tables};

/// What a version 2 payload opens with: the version as version 1 documents carried it, so
/// either is recognised from its first bytes.
pub(super) const HEADER: &[u8] = b"{\"version\":2}\n";

/// The kind of a row: which table it belongs to.
mod kind {
    pub const META: u8 = 1;
    pub const JOB_VERSION: u8 = 2;
    pub const JOB: u8 = 3;
    pub const SUMMARY: u8 = 4;
    pub const EVAL: u8 = 5;
    pub const ALLOC: u8 = 6;
    pub const NODE: u8 = 7;
    pub const PERIODIC_LAUNCH: u8 = 8;
    pub const CSI_VOLUME: u8 = 9;
    pub const CSI_PLUGIN: u8 = 10;
    pub const DEPLOYMENT: u8 = 11;
    pub const SCALING_EVENTS: u8 = 12;
    pub const NAMESPACE: u8 = 13;
    pub const ACL_POLICY: u8 = 14;
    pub const ACL_TOKEN: u8 = 15;
    pub const VARIABLE: u8 = 16;
    pub const JOB_SUBMISSION: u8 = 17;
    pub const INTENTION: u8 = 18;
    pub const END: u8 = 255;
}

/// An allocation's job version field when it has no job.
const NO_JOB_VERSION: u64 = u64::MAX;

/// The tables' single values, in one row.
#[derive(Serialize, Deserialize)]
struct Meta {
    latest_index: u64,
    indexes: Vec<(String, u64)>,
    acl_bootstrap_index: u64,
    scheduler_config: Option<drover_structs::SchedulerConfiguration>,
    mesh_ca: Option<drover_structs::mesh::MeshCa>,
}

/// The job versions a snapshot holds, by namespace, id and version.
type StoredJobs<'t> = HashSet<(&'t str, &'t str, u64)>;

/// Writes rows into the payload, each body serialised into one reused buffer.
struct RowWriter<'a> {
    out: &'a mut dyn Write,
    body: Vec<u8>,
    rows: u64,
}

impl RowWriter<'_> {
    fn json<T: Serialize + ?Sized>(&mut self, kind: u8, value: &T) -> std::io::Result<()> {
        self.body.clear();
        serde_json::to_writer(&mut self.body, value).map_err(std::io::Error::other)?;
        self.frame(kind)
    }

    fn all<'v, T: Serialize + 'v>(
        &mut self,
        kind: u8,
        values: impl Iterator<Item = &'v T>,
    ) -> std::io::Result<()> {
        values.into_iter().try_for_each(|v| self.json(kind, v))
    }

    /// An allocation without its job when the snapshot holds that job version (restore links
    /// it again); else written out with what it derives from its job, as version 1 did.
    fn alloc(&mut self, a: &Allocation, stored_jobs: &StoredJobs) -> std::io::Result<()> {
        let version = a.job.as_ref().map_or(NO_JOB_VERSION, |j| j.version);
        self.body.clear();
        self.body.extend_from_slice(&version.to_le_bytes());
        let linked = a.job.as_ref().is_some_and(|j| {
            stored_jobs.contains(&(a.namespace.as_str(), a.job_id.as_str(), j.version))
        });
        let written = if linked {
            serde_json::to_writer(&mut self.body, &AllocationHeldWithoutJob(a))
        } else {
            let mut full = a.clone();
            full.restore_derivable_fields();
            serde_json::to_writer(&mut self.body, &AllocationHeldWithoutJob(&full))
        };
        written.map_err(std::io::Error::other)?;
        self.frame(kind::ALLOC)
    }

    fn frame(&mut self, kind: u8) -> std::io::Result<()> {
        let len = u32::try_from(self.body.len())
            .map_err(|_| std::io::Error::other("a snapshot row is over 4 GiB"))?;
        self.out.write_all(&[kind])?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(&self.body)?;
        self.rows += 1;
        Ok(())
    }
}

/// Writes every table into `out` as it goes: memory stays flat whatever the state's size.
pub(super) fn encode_to(s: &StateSnapshot, out: &mut dyn Write) -> std::io::Result<()> {
    let t = &s.t;
    out.write_all(HEADER)?;
    let mut w = RowWriter {
        out,
        body: Vec::new(),
        rows: 0,
    };
    w.json(
        kind::META,
        &Meta {
            latest_index: t.latest_index,
            indexes: t
                .indexes
                .iter()
                .map(|(k, v)| (k.name().to_string(), *v))
                .collect(),
            acl_bootstrap_index: t.acl_bootstrap_index,
            scheduler_config: t.scheduler_config.as_deref().cloned(),
            mesh_ca: t.mesh_ca.as_deref().cloned(),
        },
    )?;
    w.all(kind::JOB_VERSION, t.job_versions.values().map(|j| &**j))?;
    for ((ns, id), j) in &t.jobs {
        w.json(kind::JOB, &(ns, id, j.version))?;
    }
    w.all(kind::SUMMARY, t.job_summaries.values().map(|s| &**s))?;
    w.all(kind::EVAL, t.evals.values().map(|e| &**e))?;
    let stored_jobs: StoredJobs = t
        .job_versions
        .keys()
        .map(|((ns, id), v)| (ns.as_str(), id.as_str(), *v))
        .collect();
    for a in t.allocs.values() {
        w.alloc(a, &stored_jobs)?;
    }
    w.all(kind::NODE, t.nodes.values().map(|n| &**n))?;
    w.all(
        kind::PERIODIC_LAUNCH,
        t.periodic_launches.values().map(|l| &**l),
    )?;
    w.all(kind::CSI_VOLUME, t.csi_volumes.values().map(|v| &**v))?;
    w.all(kind::CSI_PLUGIN, t.csi_plugins.values().map(|p| &**p))?;
    w.all(kind::DEPLOYMENT, t.deployments.values().map(|d| &**d))?;
    for ((ns, id), events) in &t.scaling_events {
        w.json(kind::SCALING_EVENTS, &(ns, id, &**events))?;
    }
    w.all(kind::NAMESPACE, t.namespaces.values().map(|n| &**n))?;
    w.all(kind::ACL_POLICY, t.acl_policies.values().map(|p| &**p))?;
    w.all(kind::ACL_TOKEN, t.acl_tokens.values().map(|p| &**p))?;
    w.all(kind::VARIABLE, t.variables.values().map(|v| &**v))?;
    w.all(
        kind::JOB_SUBMISSION,
        t.job_submissions.values().map(|s| &**s),
    )?;
    w.all(kind::INTENTION, t.intentions.values().map(|i| &**i))?;
    let rows = w.rows;
    w.body.clear();
    w.body.extend_from_slice(&rows.to_le_bytes());
    w.frame(kind::END)
}

/// Allocation rows handed to a decoding thread together (about this many bytes).
const BATCH_BYTES: usize = 256 * 1024;

/// Consecutive allocation rows, their bodies end to end, and the job versions to link them to.
struct AllocBatch {
    /// Position of the first among all allocations, to name a bad one.
    first: usize,
    bytes: Vec<u8>,
    ends: Vec<usize>,
    job_versions: JobVersions,
}

impl AllocBatch {
    fn new(first: usize, job_versions: JobVersions) -> AllocBatch {
        AllocBatch {
            first,
            bytes: Vec::with_capacity(BATCH_BYTES + 16 * 1024),
            ends: Vec::new(),
            job_versions,
        }
    }

    /// Decodes every allocation and links it to its job.
    fn decode(&self) -> Result<Vec<LinkedAlloc>, SnapshotError> {
        let mut start = 0;
        let mut decoded = Vec::with_capacity(self.ends.len());
        for (i, &end) in self.ends.iter().enumerate() {
            let body = &self.bytes[start..end];
            start = end;
            let bad = |why: String| {
                SnapshotError::Malformed(format!("allocation {}: {why}", self.first + i))
            };
            let (version, json) = body
                .split_first_chunk::<8>()
                .ok_or_else(|| bad("shorter than its job version".into()))?;
            // Checked whole once: parsing a `str` does not check every string in it again.
            let json = std::str::from_utf8(json).map_err(|e| bad(e.to_string()))?;
            let alloc: Allocation = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
            let version = u64::from_le_bytes(*version);
            let alloc = DecodedAlloc {
                alloc: Arc::new(alloc),
                job_version: (version != NO_JOB_VERSION).then_some(version),
            };
            decoded.push(alloc.link(&self.job_versions));
        }
        Ok(decoded)
    }
}

type Decoded = Result<Vec<LinkedAlloc>, SnapshotError>;

/// Decodes the rows after [`HEADER`]: this thread reads them and builds the tables while
/// threads of their own parse the allocations.
pub(super) fn decode(r: &mut dyn Read) -> Result<Tables, SnapshotError> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let (work, batches) = std::sync::mpsc::sync_channel::<AllocBatch>(workers * 2);
    let batches = Mutex::new(batches);
    let (results, decoded) = std::sync::mpsc::channel::<Decoded>();
    std::thread::scope(|scope| {
        let mut started = 0;
        for _ in 0..workers {
            let results = results.clone();
            let batches = &batches;
            let worker = std::thread::Builder::new()
                .name("drover-snap-decode".into())
                .spawn_scoped(scope, move || {
                    loop {
                        // Poisoned only by a panicking worker; the receiver is still sound.
                        let next = batches.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok(batch) = next else { break };
                        if results.send(batch.decode()).is_err() {
                            break;
                        }
                    }
                });
            started += usize::from(worker.is_ok());
        }
        drop(results);
        let mut b = TablesBuilder::default();
        // Without a thread to decode them, batches are decoded here as they fill.
        let work = (started > 0).then_some(work);
        let read = read_rows(r, &mut b, work.as_ref(), &decoded);
        // The workers finish what is queued and stop; their last results are linked here.
        drop(work);
        let mut linked = read;
        for result in decoded {
            if linked.is_ok() {
                linked = result.map(|allocs| allocs.into_iter().for_each(|a| b.linked_alloc(a)));
            }
        }
        linked.map(|()| b.finish())
    })
}

/// Reads every row up to [`kind::END`] into `b`, handing allocations to `work` and adding the
/// decoded ones as they come back.
fn read_rows(
    r: &mut dyn Read,
    b: &mut TablesBuilder,
    work: Option<&SyncSender<AllocBatch>>,
    decoded: &Receiver<Decoded>,
) -> Result<(), SnapshotError> {
    let mut body = Vec::new();
    let mut rows: u64 = 0;
    let mut allocs = 0usize;
    // Made at the first allocation: every job version is read by then.
    let mut batch: Option<AllocBatch> = None;
    let add_decoded = |b: &mut TablesBuilder| -> Result<(), SnapshotError> {
        loop {
            match decoded.try_recv() {
                Ok(result) => result?.into_iter().for_each(|a| b.linked_alloc(a)),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return Ok(()),
            }
        }
    };
    let dispatch = |b: &mut TablesBuilder, batch: AllocBatch| -> Result<(), SnapshotError> {
        match work {
            Some(work) => work
                .send(batch)
                .map_err(|_| SnapshotError::Malformed("allocation decoders stopped".into())),
            None => {
                batch.decode()?.into_iter().for_each(|a| b.linked_alloc(a));
                Ok(())
            }
        }
    };
    loop {
        let Some((kind, len)) = read_head(r)? else {
            return Err(SnapshotError::Malformed(format!(
                "cut short after {rows} rows (no end row)"
            )));
        };
        if kind == kind::ALLOC {
            let full = batch.get_or_insert_with(|| AllocBatch::new(0, b.job_versions()));
            // Straight into the batch: allocations are most of the payload.
            read_body(r, len, &mut full.bytes)?;
            full.ends.push(full.bytes.len());
            allocs += 1;
            if full.bytes.len() >= BATCH_BYTES {
                let next = AllocBatch::new(allocs, full.job_versions.clone());
                let full = std::mem::replace(full, next);
                dispatch(b, full)?;
                add_decoded(b)?;
            }
        } else if kind == kind::END {
            body.clear();
            read_body(r, len, &mut body)?;
            let counted = body
                .as_slice()
                .try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| SnapshotError::Malformed("end row is not a row count".into()))?;
            if counted != rows {
                return Err(SnapshotError::Malformed(format!(
                    "{rows} rows read, the end row counts {counted}"
                )));
            }
            if let Some(last) = batch.filter(|last| !last.ends.is_empty()) {
                dispatch(b, last)?;
            }
            return add_decoded(b);
        } else {
            body.clear();
            read_body(r, len, &mut body)?;
            table_row(kind, &body, b)
                .map_err(|why| SnapshotError::Malformed(format!("row {rows}: {why}")))?;
        }
        rows += 1;
    }
}

/// A row's kind and its body's length; `None` at the end of the payload.
fn read_head(r: &mut dyn Read) -> Result<Option<(u8, usize)>, SnapshotError> {
    let mut head = [0u8; 5];
    match read_up_to(r, &mut head)? {
        0 => Ok(None),
        5 => {
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            Ok(Some((head[0], len)))
        }
        _ => Err(SnapshotError::Malformed("cut short inside a row".into())),
    }
}

/// Appends a body of `len` bytes to `out`.
fn read_body(r: &mut dyn Read, len: usize, out: &mut Vec<u8>) -> Result<(), SnapshotError> {
    // Grown as bytes arrive: a corrupt length does not allocate gigabytes up front.
    let read = r
        .take(len as u64)
        .read_to_end(out)
        .map_err(SnapshotError::Read)?;
    if read != len {
        return Err(SnapshotError::Malformed("cut short inside a row".into()));
    }
    Ok(())
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

/// Every row but allocations and the end.
fn table_row(kind: u8, body: &[u8], b: &mut TablesBuilder) -> Result<(), String> {
    match kind {
        kind::META => {
            let m: Meta = parse(body)?;
            b.latest_index(m.latest_index);
            for (name, idx) in m.indexes {
                b.table_index(&name, idx);
            }
            b.acl_bootstrap_index(m.acl_bootstrap_index);
            b.scheduler_config(m.scheduler_config);
            b.mesh_ca(m.mesh_ca);
        }
        kind::JOB_VERSION => b.job_version(parse(body)?),
        kind::JOB => {
            let (ns, id, version) = parse(body)?;
            b.job(ns, id, version).map_err(|e| e.to_string())?;
        }
        kind::SUMMARY => b.summary(parse(body)?),
        kind::EVAL => b.eval(parse(body)?),
        kind::NODE => b.node(parse(body)?),
        kind::PERIODIC_LAUNCH => b.periodic_launch(parse(body)?),
        kind::CSI_VOLUME => b.csi_volume(parse(body)?),
        kind::CSI_PLUGIN => b.csi_plugin(parse(body)?),
        kind::DEPLOYMENT => b.deployment(parse(body)?),
        kind::SCALING_EVENTS => {
            let (ns, id, events) = parse(body)?;
            b.scaling_events(ns, id, events);
        }
        kind::NAMESPACE => b.namespace(parse(body)?),
        kind::ACL_POLICY => b.acl_policy(parse(body)?),
        kind::ACL_TOKEN => b.acl_token(parse(body)?),
        kind::VARIABLE => b.variable(parse(body)?),
        kind::JOB_SUBMISSION => b.job_submission(parse(body)?),
        kind::INTENTION => b.intention(parse(body)?),
        other => {
            // A table this server does not know: restoring without it would lose its rows.
            return Err(format!(
                "unknown row kind {other} (written by a newer server?)"
            ));
        }
    }
    Ok(())
}
