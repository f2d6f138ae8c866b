//! Helpers shared by the tests: temp dirs, a recording state machine, an in-memory network.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use raft::eraftpb::{Message, MessageType};

use crate::{RaftConfig, RaftNode, StateMachine, Transport};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "drover-raft-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SNAPSHOT_MAGIC: &[u8] = b"TSM1";

/// (index, data) of every applied entry, in order.
type AppliedLog = Vec<(u64, Vec<u8>)>;

/// Records every applied entry; the tests inspect it through the shared handles.
#[derive(Clone, Default)]
pub struct RecordingSm {
    pub applied: Arc<Mutex<AppliedLog>>,
    pub restored_at: Arc<Mutex<Vec<u64>>>,
}

impl RecordingSm {
    pub fn entries(&self) -> AppliedLog {
        self.applied.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.applied.lock().unwrap().len()
    }
}

impl StateMachine for RecordingSm {
    fn apply(&mut self, index: u64, data: &[u8]) -> Vec<u8> {
        self.applied.lock().unwrap().push((index, data.to_vec()));
        format!("applied {index}").into_bytes()
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut out = SNAPSHOT_MAGIC.to_vec();
        out.extend(serde_json::to_vec(&*self.applied.lock().unwrap()).unwrap());
        out
    }

    fn restore(&mut self, index: u64, data: &mut dyn std::io::Read) -> Result<(), String> {
        let mut whole = Vec::new();
        data.read_to_end(&mut whole)
            .map_err(|e| format!("reading the snapshot: {e}"))?;
        let body = whole
            .strip_prefix(SNAPSHOT_MAGIC)
            .ok_or_else(|| "unknown snapshot format".to_string())?;
        let entries: AppliedLog =
            serde_json::from_slice(body).map_err(|e| format!("corrupt snapshot: {e}"))?;
        *self.applied.lock().unwrap() = entries;
        self.restored_at.lock().unwrap().push(index);
        Ok(())
    }
}

/// Fast timings so multi-node tests elect within a few hundred ms.
pub fn fast_config(id: u64, dir: &Path, voters: Vec<u64>) -> RaftConfig {
    let mut cfg = RaftConfig::new(id, dir, voters);
    cfg.tick_interval = Duration::from_millis(10);
    cfg.election_tick = 10;
    cfg.heartbeat_tick = 2;
    cfg
}

/// Delivers messages between nodes of one process; nodes can be cut off and healed.
#[derive(Default)]
pub struct MemNetwork {
    nodes: RwLock<HashMap<u64, RaftNode>>,
    isolated: Mutex<HashSet<u64>>,
}

impl MemNetwork {
    pub fn register(&self, node: &RaftNode) {
        self.nodes.write().unwrap().insert(node.id(), node.clone());
    }

    pub fn isolate(&self, id: u64) {
        self.isolated.lock().unwrap().insert(id);
    }

    pub fn heal(&self, id: u64) {
        self.isolated.lock().unwrap().remove(&id);
    }
}

impl Transport for MemNetwork {
    fn send(&self, msgs: Vec<Message>) {
        let nodes = self.nodes.read().unwrap();
        let isolated = self.isolated.lock().unwrap().clone();
        for msg in msgs {
            let (from, to) = (msg.from, msg.to);
            let delivered = !isolated.contains(&from) && !isolated.contains(&to);
            let target = nodes.get(&to).filter(|_| delivered);
            match (msg.get_msg_type(), target, nodes.get(&from)) {
                (MessageType::MsgSnapshot, Some(target), Some(sender)) => {
                    // As a real transport: the payload beside the message, off the sender's
                    // driver thread.
                    let (target, sender) = (target.clone(), sender.clone());
                    std::thread::spawn(move || {
                        let delivered = deliver_snapshot(&sender, &target, msg);
                        if let Err(e) = &delivered {
                            tracing::debug!(from, to, error = %e, "snapshot not delivered");
                        }
                        sender.report_snapshot(to, delivered.is_ok());
                    });
                }
                (MessageType::MsgSnapshot, None, Some(sender)) => {
                    sender.report_unreachable(to);
                    sender.report_snapshot(to, false);
                }
                (_, Some(target), _) => target.step(msg),
                (_, None, Some(sender)) => sender.report_unreachable(to),
                (_, None, None) => {}
            }
        }
    }
}

/// Sends the payload of snapshot `msg` from `sender` to `target` piece by piece, then the
/// message; returns once the target handled it.
pub fn deliver_snapshot(
    sender: &RaftNode,
    target: &RaftNode,
    msg: Message,
) -> Result<(), crate::RaftError> {
    let mut incoming = target.incoming_snapshot()?;
    for piece in sender.outgoing_snapshot(&msg)? {
        incoming.write(&piece?)?;
    }
    incoming.finish(msg)?.wait()
}

/// Polls `cond` every few ms until it holds; panics with `what` after `timeout`.
pub async fn eventually(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
