//! Garbage collection of allocations that ended on this node, on request (Nomad's
//! `/v1/client/gc` and `/v1/client/allocation/:id/gc`): the allocation's directory goes (after
//! what is mounted inside it is detached, so nothing reaches into a host directory), with its
//! records in the client state. Allocations that still run are never collected.

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
