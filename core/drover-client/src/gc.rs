//! Garbage collection of allocations that ended on this node, on request (Nomad's
//! `/v1/client/gc` and `/v1/client/allocation/:id/gc`) and every `gc_interval` while the node
//! tracks more than `gc_max_allocs` allocations or its data dir's filesystem is fuller than
//! `gc_disk_usage_threshold`/`gc_inode_usage_threshold` percent (Nomad's client GC, oldest
//! ended first): the allocation's directory goes (after what is mounted inside it is detached,
//! so nothing reaches into a host directory), with its records in the client state.
//! Allocations that still run are never collected.

use std::path::Path;
use std::time::Duration;

use crate::allocdir::{AllocDir, AllocDirError};
use crate::client::Client;
use crate::state_db::StateDbError;

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// Nomad's text for an allocation the client does not have.
    #[error("Unknown allocation \"{0}\"")]
    Unknown(String),
    #[error("allocation {0} is still running: only allocations that ended can be collected")]
    Running(String),
    #[error("collecting allocation {id}: {source}")]
    Dir {
        id: String,
        #[source]
        source: AllocDirError,
    },
    #[error("collecting allocation {id}: {source}")]
    State {
        id: String,
        #[source]
        source: StateDbError,
    },
}

impl Client {
    /// Collects allocation `alloc_id` if it ended. Blocks on the filesystem and the client
    /// state: call it from a thread that may block.
    pub fn collect_alloc(&self, alloc_id: &str) -> Result<(), GcError> {
        let dir = AllocDir::new(&self.config.data_dir, alloc_id)
            .map_err(|_| GcError::Unknown(alloc_id.to_string()))?;
        {
            let mut runners = self
                .shared
                .runners
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match runners.get(alloc_id) {
                Some(r) if !r.is_done() => return Err(GcError::Running(alloc_id.to_string())),
                Some(_) => {
                    runners.remove(alloc_id);
                }
                None => {
                    let recorded = self.db.get_alloc(alloc_id).ok().flatten().is_some();
                    if !recorded && !dir.path().exists() {
                        return Err(GcError::Unknown(alloc_id.to_string()));
                    }
                }
            }
        }
        tracing::info!(alloc = %alloc_id, "garbage collecting allocation");
        dir.destroy().map_err(|source| GcError::Dir {
            id: alloc_id.to_string(),
            source,
        })?;
        self.db
            .delete_alloc(alloc_id)
            .map_err(|source| GcError::State {
                id: alloc_id.to_string(),
                source,
            })
    }

    /// The allocations of this node that ended, the earliest ended first (by the newest
    /// `FinishedAt` of their tasks, as last reported; unknown times count as oldest).
    fn ended_oldest_first(&self) -> Vec<String> {
        let runners = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut ended: Vec<String> = runners
            .iter()
            .filter(|(_, r)| r.is_done())
            .map(|(id, _)| id.clone())
            .collect();
        for (id, _) in self.db.all_allocs().unwrap_or_default() {
            if !runners.contains_key(&id) && !ended.contains(&id) {
                ended.push(id);
            }
        }
        drop(runners);
        let finished = |id: &str| -> i64 {
            let Ok(Some(bytes)) = self.db.get_alloc_status(id) else {
                return 0;
            };
            let Ok(update) = serde_json::from_slice::<drover_structs::AllocClientUpdate>(&bytes)
            else {
                return 0;
            };
            update
                .task_states
                .iter()
                .flatten()
                .filter_map(|(_, t)| t.finished_at.as_deref())
                .filter_map(drover_structs::time::parse_rfc3339_nanos)
                .max()
                .unwrap_or(0)
        };
        let mut keyed: Vec<(i64, String)> =
            ended.into_iter().map(|id| (finished(&id), id)).collect();
        keyed.sort();
        keyed.into_iter().map(|(_, id)| id).collect()
    }

    /// How many allocations the node tracks (running and ended, not yet collected).
    fn tracked(&self) -> usize {
        let runners = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut n = runners.len();
        for (id, _) in self.db.all_allocs().unwrap_or_default() {
            if !runners.contains_key(&id) {
                n += 1;
            }
        }
        n
    }

    /// One pass of the periodic GC: collects ended allocations, oldest first, while the node
    /// is over `limits`; returns how many went. Blocks on the filesystem.
    pub fn collect_over_limits(&self, limits: &GcLimits) -> usize {
        let mut tracked = self.tracked();
        let mut collected = 0;
        for id in self.ended_oldest_first() {
            let over_count = tracked > limits.max_allocs;
            let over_disk =
                filesystem_usage(&self.config.data_dir).is_some_and(|(disk, inodes)| {
                    disk > limits.disk_usage_threshold || inodes > limits.inode_usage_threshold
                });
            if !over_count && !over_disk {
                break;
            }
            match self.collect_alloc(&id) {
                Ok(()) => {
                    collected += 1;
                    tracked = tracked.saturating_sub(1);
                }
                Err(e) => tracing::warn!(alloc = %id, error = %e, "periodic GC"),
            }
        }
        collected
    }

    /// Collects every allocation of this node that ended; returns how many went and the
    /// failures.
    pub fn collect_all(&self) -> (usize, Vec<GcError>) {
        let mut ended: Vec<String> = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, r)| r.is_done())
            .map(|(id, _)| id.clone())
            .collect();
        // Ended before the agent last started: recorded, without a runner.
        let running: Vec<String> = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for (id, _) in self.db.all_allocs().unwrap_or_default() {
            if !running.contains(&id) {
                ended.push(id);
            }
        }
        let (mut collected, mut failed) = (0, Vec::new());
        for id in ended {
            match self.collect_alloc(&id) {
                Ok(()) => collected += 1,
                Err(e) => failed.push(e),
            }
        }
        (collected, failed)
    }
}

/// Nomad's client GC settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GcLimits {
    pub interval: Duration,
    pub max_allocs: usize,
    /// Percent of the data dir's filesystem in use above which ended allocations go.
    pub disk_usage_threshold: f64,
    pub inode_usage_threshold: f64,
}

impl Default for GcLimits {
    fn default() -> Self {
        GcLimits {
            interval: Duration::from_secs(60),
            max_allocs: 50,
            disk_usage_threshold: 80.0,
            inode_usage_threshold: 70.0,
        }
    }
}

/// Percent of the space and of the inodes in use on `dir`'s filesystem.
fn filesystem_usage(dir: &Path) -> Option<(f64, f64)> {
    let stats = nix::sys::statvfs::statvfs(dir).ok()?;
    #[allow(clippy::useless_conversion)]
    let (blocks, free, files, files_free) = (
        u64::from(stats.blocks()),
        u64::from(stats.blocks_free()),
        u64::from(stats.files()),
        u64::from(stats.files_free()),
    );
    let percent = |total: u64, free: u64| {
        if total == 0 {
            0.0
        } else {
            (total.saturating_sub(free)) as f64 * 100.0 / total as f64
        }
    };
    Some((percent(blocks, free), percent(files, files_free)))
}

/// Runs the periodic GC until `shutdown` turns true.
pub(crate) async fn run_periodic(
    client: Client,
    limits: GcLimits,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(limits.interval) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        let (c, l) = (client.clone(), limits.clone());
        let collected = tokio::task::spawn_blocking(move || c.collect_over_limits(&l))
            .await
            .unwrap_or(0);
        if collected > 0 {
            tracing::info!(collected, "garbage collected ended allocations");
        }
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn filesystem_usage_is_a_percentage() {
        let (disk, inodes) = filesystem_usage(Path::new("/")).expect("statvfs of /");
        assert!((0.0..=100.0).contains(&disk), "{disk}");
        assert!((0.0..=100.0).contains(&inodes), "{inodes}");
    }
}
