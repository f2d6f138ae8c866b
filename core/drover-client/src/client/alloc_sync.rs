//! The node's allocations: following what the servers want (starting, stopping, reporting
//! again) and sending what the runners report back in batches.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use drover_structs::time::now_nanos;
use drover_structs::*;
use tokio::sync::{mpsc, watch};

use super::{AllocRecord, Client, ServerConn};
use crate::alloc_runner::{self, RunnerEnv};
use crate::state_db::ClientStateDb;

/// Watches the node's allocations and starts, stops or forgets runners to match.
pub(super) async fn watch_allocs<S: ServerConn>(
    client: Client,
    server: Arc<S>,
    env: RunnerEnv,
    mut known: HashMap<String, u64>,
    mut shutdown: watch::Receiver<bool>,
) {
    let node_id = env.node.id.clone();
    let mut index = 0u64;
    loop {
        let res = tokio::select! {
            r = server.node_allocs(&node_id, index, Duration::from_secs(300)) => r,
            _ = shutdown.changed() => return,
        };
        let (allocs, new_index) = match res {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "fetching allocations");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        index = new_index;
        let mut to_save = Vec::new();
        for alloc in allocs {
            let seen = known.get(&alloc.id).copied();
            let mut runners = client
                .shared
                .runners
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let runner = runners.get(&alloc.id);
            let action = decide(seen, &alloc, runner.is_some());
            if action != AllocAction::Ignore {
                known.insert(alloc.id.clone(), alloc.alloc_modify_index);
            }
            match action {
                AllocAction::Ignore => continue,
                AllocAction::Noted => {}
                AllocAction::Stop => {
                    if let Some(r) = runner {
                        r.stop();
                    }
                }
                AllocAction::Report => report_again(&env, &alloc.id),
                AllocAction::Start => {
                    to_save.push(alloc.clone());
                    // The node as it is now: dynamic node meta set since the client
                    // started reaches new allocations' `${meta.*}`.
                    let env = RunnerEnv {
                        node: client.node(),
                        ..env.clone()
                    };
                    match alloc_runner::start(
                        env.clone(),
                        alloc.clone(),
                        BTreeMap::new(),
                        BTreeMap::new(),
                    ) {
                        Ok(h) => {
                            runners.insert(alloc.id.clone(), h);
                        }
                        Err(e) => {
                            tracing::warn!(alloc = %alloc.id, error = %e, "starting allocation");
                            let _ = env.updates.send(AllocClientUpdate {
                                id: alloc.id.clone(),
                                client_status: ALLOC_CLIENT_FAILED.into(),
                                client_description: e,
                                task_states: None,
                                modify_time: now_nanos(),
                                deployment_status: None,
                                network_status: None,
                            });
                        }
                    }
                }
            }
        }
        if !to_save.is_empty() {
            let db = env.db.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let recs: Vec<(String, Vec<u8>)> = to_save
                    .iter()
                    .map(|a| {
                        let rec = AllocRecord {
                            alloc: (**a).clone(),
                            task_states: BTreeMap::new(),
                        };
                        (a.id.clone(), serde_json::to_vec(&rec).unwrap_or_default())
                    })
                    .collect();
                let refs: Vec<(&str, &[u8])> = recs
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_slice()))
                    .collect();
                if let Err(e) = db.put_allocs(&refs) {
                    tracing::warn!(error = %e, "saving allocations");
                }
            })
            .await;
        }
    }
}

/// What the client does with an allocation the servers sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AllocAction {
    /// Not newer than what was applied: nothing changes.
    Ignore,
    /// Newer, but nothing to do beyond remembering it.
    Noted,
    /// Stop its runner: the servers want it stopped.
    Stop,
    /// Report its status again: the servers lost track of it (`unknown` while this node was
    /// disconnected) and reconcile it once they hear it runs.
    Report,
    /// Start a runner for it.
    Start,
}

/// The client's rule for an allocation update: `applied` is the allocation index already
/// applied (if any), `running` whether a runner exists for it.
fn decide(applied: Option<u64>, alloc: &Allocation, running: bool) -> AllocAction {
    // An answer older than what was applied (a lagging server) changes nothing, and above
    // all never stops a running workload (Nomad #18267).
    if applied.is_some_and(|applied| alloc.alloc_modify_index <= applied) {
        return AllocAction::Ignore;
    }
    match (running, alloc.server_terminal()) {
        (true, true) => AllocAction::Stop,
        (true, false) if alloc.client_status == ALLOC_CLIENT_UNKNOWN => AllocAction::Report,
        (true, false) => AllocAction::Noted,
        // Known but not running: it ended here (and the client restarted since, or it was
        // stopped by stop_after_client_disconnect); never started again.
        (false, _) if alloc.terminal() || applied.is_some() => AllocAction::Noted,
        (false, _) => AllocAction::Start,
    }
}

/// Sends the last status this client reported for an allocation again, as new.
fn report_again(env: &RunnerEnv, alloc_id: &str) {
    let last = env
        .db
        .get_alloc_status(alloc_id)
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice::<AllocClientUpdate>(&b).ok());
    match last {
        Some(mut update) => {
            tracing::info!(alloc = %alloc_id, "the servers lost track of the allocation: reporting its status again");
            update.modify_time = now_nanos();
            let _ = env.updates.send(update);
        }
        None => tracing::warn!(alloc = %alloc_id, "no status of the allocation to report again"),
    }
}

/// Collects allocation status reports, coalesces them per allocation, saves them to the client
/// state (one transaction per batch) and sends them to the servers (one request per batch).
pub(super) async fn sync_updates<S: ServerConn>(
    server: Arc<S>,
    db: ClientStateDb,
    mut rx: mpsc::UnboundedReceiver<AllocClientUpdate>,
    interval: Duration,
) {
    let mut pending: BTreeMap<String, AllocClientUpdate> = BTreeMap::new();
    loop {
        if pending.is_empty() {
            match rx.recv().await {
                Some(u) => {
                    pending.insert(u.id.clone(), u);
                }
                None => return,
            }
        }
        tokio::time::sleep(interval).await;
        while let Ok(u) = rx.try_recv() {
            pending.insert(u.id.clone(), u);
        }
        let batch: Vec<AllocClientUpdate> = std::mem::take(&mut pending).into_values().collect();
        persist_task_states(&db, &batch).await;
        if let Err(e) = server.update_allocs(batch.clone()).await {
            tracing::warn!(error = %e, "sending allocation updates; will retry");
            for u in batch {
                pending.entry(u.id.clone()).or_insert(u);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

async fn persist_task_states(db: &ClientStateDb, batch: &[AllocClientUpdate]) {
    let db = db.clone();
    let encoded: Vec<(String, Vec<u8>)> = batch
        .iter()
        .map(|u| (u.id.clone(), serde_json::to_vec(u).unwrap_or_default()))
        .collect();
    let _ = tokio::task::spawn_blocking(move || {
        let refs: Vec<(&str, &[u8])> = encoded
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect();
        if let Err(e) = db.put_alloc_statuses(&refs) {
            tracing::warn!(error = %e, "saving allocation status");
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(index: u64, desired: &str, client_status: &str) -> Allocation {
        Allocation {
            id: "a1".into(),
            alloc_modify_index: index,
            desired_status: desired.into(),
            client_status: client_status.into(),
            ..Allocation::default()
        }
    }

    #[test]
    fn an_update_older_than_the_applied_one_never_stops_a_running_allocation() {
        let stale_stop = alloc(5, ALLOC_DESIRED_STOP, ALLOC_CLIENT_RUNNING);
        assert_eq!(decide(Some(10), &stale_stop, true), AllocAction::Ignore);
        assert_eq!(decide(Some(5), &stale_stop, true), AllocAction::Ignore);
        // The same stop, newer than what was applied, stops it.
        let stop = alloc(11, ALLOC_DESIRED_STOP, ALLOC_CLIENT_RUNNING);
        assert_eq!(decide(Some(10), &stop, true), AllocAction::Stop);
    }

    #[test]
    fn a_new_allocation_starts_and_a_known_one_without_a_runner_never_restarts() {
        let run = alloc(3, ALLOC_DESIRED_RUN, ALLOC_CLIENT_PENDING);
        assert_eq!(decide(None, &run, false), AllocAction::Start);
        assert_eq!(decide(Some(2), &run, false), AllocAction::Noted);
        assert_eq!(decide(Some(2), &run, true), AllocAction::Noted);
        let done = alloc(3, ALLOC_DESIRED_RUN, ALLOC_CLIENT_COMPLETE);
        assert_eq!(decide(None, &done, false), AllocAction::Noted);
    }

    #[test]
    fn an_allocation_the_servers_hold_unknown_is_reported_again_while_it_runs() {
        let unknown = alloc(8, ALLOC_DESIRED_RUN, ALLOC_CLIENT_UNKNOWN);
        assert_eq!(decide(Some(7), &unknown, true), AllocAction::Report);
        // Not running here any more: nothing to report.
        assert_eq!(decide(Some(7), &unknown, false), AllocAction::Noted);
        // An old answer is still ignored.
        assert_eq!(decide(Some(9), &unknown, true), AllocAction::Ignore);
    }
}
