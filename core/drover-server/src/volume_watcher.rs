//! The leader's CSI volume watcher (Nomad's `volumewatcher`) and claim GC: it frees the claims
//! of allocations that ended, so their volumes can be claimed again.
//!
//! It blocks on the volumes table (and on allocations and nodes, whose changes end claims
//! without touching a volume). Each pass looks for volumes with past claims, or with holders
//! whose allocation ended or is gone, and walks each such claim through its release with the
//! same steps as the unpublish endpoint: unpublishing, node detached (the client unmounted it,
//! or its node is down or gone), controller detached (when the plugin attaches volumes), ready
//! to free. Each step is a log entry, so a new leader resumes where the old one stopped. A
//! volume whose release failed is retried with exponential backoff.
//!
//! A claim of an allocation the servers stopped but that still runs on a live node is left to
//! its client: the client unmounts the volume when the allocation ends and releases the claim
//! itself; the watcher takes over once the client reports the allocation ended.
//!
//! The watcher runs only on the leader: it starts when leadership is established and stops when
//! it is lost. Every [`CSI_VOLUME_CLAIM_GC_INTERVAL`] it also records past claims for holders
//! that ended (Nomad's `csiVolumeClaimGC`), which bumps those volumes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use drover_state::{CsiVolumeFilter, StateSnapshot, Table};
use drover_structs::{CsiClaimState, CsiVolume, CsiVolumeClaim, Job, NODE_STATUS_DOWN};
use tokio::time::Instant;

use crate::ServerError;
use crate::csi::CsiEntry;
use crate::fsm::LogEntry;
use crate::leader_task::LeaderTask;
use crate::server::{Inner, Server};

/// How often the leader records past claims for ended holders (Nomad's
/// `csi_volume_claim_gc_interval` default).
pub const CSI_VOLUME_CLAIM_GC_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// The first retry of a failed release comes after this long, doubling up to [`RETRY_MAX`].
const RETRY_BASE: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// The shortest time between two passes: a burst of writes is handled in one pass.
const PASS_INTERVAL: Duration = Duration::from_millis(100);
/// A pass runs at least this often even when nothing changes.
const IDLE_WAIT: Duration = Duration::from_secs(60);
/// The tables whose changes may end or advance a claim.
const WATCHED: [Table; 3] = [Table::CsiVolumes, Table::Allocs, Table::Nodes];

/// The watcher's task, started and stopped with leadership.
#[derive(Default)]
pub(crate) struct VolumeWatcher {
    task: LeaderTask,
}

impl VolumeWatcher {
    /// Starts (or restarts) watching from the current state. On the leader.
    pub(crate) fn start(&self, inner: Arc<Inner>) {
        self.task.start(run(inner));
    }

    /// Stops watching (leadership lost, or shutdown). A release step being proposed may still
    /// commit; the claim's state then tells the next leader where to resume.
    pub(crate) fn stop(&self) {
        self.task.stop();
    }

    #[cfg(test)]
    pub(crate) fn is_running(&self) -> bool {
        self.task.is_running()
    }
}

/// When a volume whose release failed is tried again.
struct Retry {
    failures: u32,
    at: Instant,
}

impl Retry {
    fn after(failures: u32) -> Retry {
        let factor = 1u32 << failures.saturating_sub(1).min(16);
        Retry {
            failures,
            at: Instant::now() + RETRY_BASE.saturating_mul(factor).min(RETRY_MAX),
        }
    }
}

type VolumeKey = (String, String);

async fn run(inner: Arc<Inner>) {
    let server = Server {
        inner: inner.clone(),
    };
    let mut retries: HashMap<VolumeKey, Retry> = HashMap::new();
    let mut seen = 0;
    let mut wait = Duration::ZERO;
    let mut next_gc = Instant::now() + CSI_VOLUME_CLAIM_GC_INTERVAL;
    loop {
        let snap = inner.state.wait_for(&WATCHED, seen, wait).await;
        seen = snap.max_index(&WATCHED).max(1);
        if Instant::now() >= next_gc {
            next_gc = Instant::now() + CSI_VOLUME_CLAIM_GC_INTERVAL;
            if let Err(e) = gc_volume_claims(&server).await {
                tracing::warn!(error = %e, "CSI volume claim GC");
            }
        }
        let now = Instant::now();
        let work = reapable_volumes(&snap);
        retries.retain(|k, _| work.iter().any(|(key, _)| key == k));
        for (key, claims) in work {
            if retries.get(&key).is_some_and(|r| r.at > now) {
                continue;
            }
            match reap_volume(&server, &key, claims).await {
                Ok(()) => {
                    retries.remove(&key);
                }
                Err(e) => {
                    let failures = retries.get(&key).map_or(0, |r| r.failures) + 1;
                    tracing::warn!(
                        namespace = %key.0, volume = %key.1, error = %e, failures,
                        "releasing CSI volume claims failed; will retry"
                    );
                    retries.insert(key, Retry::after(failures));
                }
            }
        }
        let now = Instant::now();
        wait = retries
            .values()
            .map(|r| r.at.saturating_duration_since(now))
            .min()
            .unwrap_or(IDLE_WAIT)
            .min(next_gc.saturating_duration_since(now))
            .max(PASS_INTERVAL);
        tokio::time::sleep(PASS_INTERVAL).await;
    }
}

/// Volumes with claims ready to be released, with those claims (Nomad's denormalized past
/// claims, minus those a live client still has to let go of).
fn reapable_volumes(snap: &StateSnapshot) -> Vec<(VolumeKey, Vec<CsiVolumeClaim>)> {
    let mut out = Vec::new();
    for stored in snap.csi_volumes(&CsiVolumeFilter::default()) {
        let holder_ended = stored
            .read_allocs
            .keys()
            .chain(stored.write_allocs.keys())
            .any(|id| snap.alloc(id).is_none_or(|a| a.terminal()));
        if stored.past_claims.is_empty() && !holder_ended {
            continue;
        }
        let Some(vol) = snap.csi_volume_full(&stored.namespace, &stored.id) else {
            continue;
        };
        let claims: Vec<CsiVolumeClaim> = vol
            .past_claims
            .values()
            .filter(|c| ready_to_release(snap, c))
            .cloned()
            .collect();
        if !claims.is_empty() {
            out.push(((vol.namespace.clone(), vol.id.clone()), claims));
        }
    }
    out
}

/// Whether the watcher may drive the claim's release now: the node's part is done already,
/// or nobody else will do it (the allocation is gone, its client reported it ended, or its
/// node is down or gone).
fn ready_to_release(snap: &StateSnapshot, claim: &CsiVolumeClaim) -> bool {
    if matches!(
        claim.state,
        CsiClaimState::NodeDetached | CsiClaimState::ControllerDetached
    ) {
        return true;
    }
    let node_lost = snap
        .node(&claim.node_id)
        .is_none_or(|n| n.status == NODE_STATUS_DOWN);
    match snap.alloc(&claim.allocation_id) {
        None => true,
        Some(a) => a.client_terminal() || node_lost,
    }
}

/// Releases the claims of one volume, each from the state it reached; the first error after
/// trying them all.
async fn reap_volume(
    server: &Server,
    key: &VolumeKey,
    claims: Vec<CsiVolumeClaim>,
) -> Result<(), ServerError> {
    let mut first_error = None;
    for claim in claims {
        let Some(vol) = server.snapshot().csi_volume_full(&key.0, &key.1) else {
            return Ok(());
        };
        tracing::debug!(volume = %vol.id, alloc = %claim.allocation_id, state = claim.state.as_str(), "releasing CSI volume claim");
        if let Err(e) = server.release_claim(&vol, claim).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Records past claims for every holder that ended but has none yet (Nomad's claim GC, a
/// claim without an allocation): the volumes change, and the watcher releases them.
/// Answers the volumes it bumped.
pub(crate) async fn gc_volume_claims(server: &Server) -> Result<Vec<VolumeKey>, ServerError> {
    let snap = server.snapshot();
    let stale: Vec<VolumeKey> = snap
        .csi_volumes(&CsiVolumeFilter::default())
        .iter()
        .filter(|v| {
            v.read_allocs.keys().chain(v.write_allocs.keys()).any(|id| {
                !v.past_claims.contains_key(id) && snap.alloc(id).is_none_or(|a| a.terminal())
            })
        })
        .map(|v| (v.namespace.clone(), v.id.clone()))
        .collect();
    bump_volumes(server, &stale).await?;
    Ok(stale)
}

/// Has the state record past claims for the ended holders of each volume.
async fn bump_volumes(server: &Server, keys: &[VolumeKey]) -> Result<(), ServerError> {
    for (namespace, id) in keys {
        let entry = CsiEntry::VolumeClaim {
            namespace: namespace.clone(),
            volume_id: id.clone(),
            claim: CsiVolumeClaim::default(),
        };
        match server.inner.apply_checked(LogEntry::Csi(entry)).await {
            Ok(_) => {}
            // Deregistered in the meantime.
            Err(ServerError::Conflict(why)) => {
                tracing::debug!(volume = %id, reason = %why, "CSI claim GC skipped a volume")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether one of the job's groups asks for the CSI volume `volume_id` (of the job's
/// namespace): by its source, or as `source[N]` for a `per_alloc` block.
pub(crate) fn job_uses_csi_volume(job: &Job, volume_id: &str) -> bool {
    job.task_groups.iter().any(|tg| {
        let Some(volumes) = tg.volumes.as_ref().and_then(|v| v.as_object()) else {
            return false;
        };
        volumes.values().any(|v| {
            if v.get("Type").and_then(|t| t.as_str()) != Some(drover_structs::VOLUME_TYPE_CSI) {
                return false;
            }
            let Some(source) = v.get("Source").and_then(|s| s.as_str()) else {
                return false;
            };
            let per_alloc = v.get("PerAlloc").and_then(|p| p.as_bool()) == Some(true);
            if per_alloc {
                volume_id
                    .strip_prefix(source)
                    .and_then(|rest| rest.strip_prefix('['))
                    .and_then(|rest| rest.strip_suffix(']'))
                    .is_some_and(|n| n.parse::<u64>().is_ok())
            } else {
                volume_id == source
            }
        })
    })
}

/// The registered volumes the job asks for.
fn job_volumes(snap: &StateSnapshot, job: &Job) -> Vec<VolumeKey> {
    snap.csi_volumes(&CsiVolumeFilter {
        namespace: Some(&job.namespace),
        ..Default::default()
    })
    .into_iter()
    .filter(|v| job_uses_csi_volume(job, &v.id))
    .map(|v: CsiVolume| (v.namespace, v.id))
    .collect()
}

/// A job was stopped or purged: its volumes record past claims for its allocations that ended
/// (Nomad's claim reaping at deregistration), so their release starts at once.
pub(crate) async fn reap_job_claims(server: &Server, job: &Job) {
    let keys = job_volumes(&server.snapshot(), job);
    if let Err(e) = bump_volumes(server, &keys).await {
        tracing::warn!(job = %job.id, error = %e, "reaping the CSI claims of a deregistered job");
    }
}

#[cfg(test)]
mod tests;
