use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::overwrite_snapshot_payload;
use crate::test_support::{RecordingSm, TempDir};
use crate::{NoTransport, RaftConfig, RaftError, RaftNode};

fn single_config(dir: &TempDir, snapshot_threshold: u64) -> RaftConfig {
    let mut cfg = RaftConfig::new(1, dir.path(), vec![1]);
    cfg.snapshot_threshold = snapshot_threshold;
    cfg
}

fn start(cfg: RaftConfig, sm: RecordingSm) -> RaftNode {
    RaftNode::start(cfg, sm, Arc::new(NoTransport)).unwrap()
}

async fn propose_n(node: &RaftNode, range: std::ops::Range<u32>) -> Vec<u64> {
    let mut indexes = Vec::new();
    for i in range {
        indexes.push(
            node.propose(format!("entry-{i}").into_bytes())
                .await
                .unwrap(),
        );
    }
    indexes
}

#[tokio::test]
async fn fresh_single_voter_leads_within_a_tick() {
    let dir = TempDir::new("single-fresh");
    let started = Instant::now();
    let node = start(single_config(&dir, 0), RecordingSm::default());
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    let elapsed = started.elapsed();
    eprintln!("fresh single voter led after {elapsed:?}");
    // An election timeout is at least 10 ticks of 100 ms: leading well before that means it
    // campaigned at start. (Margin for a loaded machine's fsyncs.)
    assert!(elapsed < Duration::from_millis(500), "{elapsed:?}");
    let status = node.status();
    assert!(status.is_leader);
    assert_eq!(status.leader_id, Some(1));
    assert_eq!(status.voters, vec![1]);
    assert!(dir.path().join("raft").join("raft.redb").exists());
    node.shutdown();
}

#[tokio::test]
async fn leadership_signal_turns_on_after_the_barrier_and_off_at_shutdown() {
    let dir = TempDir::new("single-watch");
    let node = start(single_config(&dir, 0), RecordingSm::default());
    let mut leadership = node.leadership();
    let state = *leadership.wait_for(|s| s.is_leader).await.unwrap();
    assert_eq!(state.leader_id, Some(1));
    assert!(
        node.status().applied_index >= 1,
        "the leader's no-op is applied first"
    );
    node.shutdown();
    let after = *node.leadership().borrow();
    assert!(!after.is_leader);
    assert_eq!(after.leader_id, None);
    assert_eq!(node.status().stopped.as_deref(), Some("shut down"));
}

#[tokio::test]
async fn proposals_are_applied_in_order_and_answered_with_their_index() {
    let dir = TempDir::new("single-order");
    let sm = RecordingSm::default();
    let node = start(single_config(&dir, 0), sm.clone());
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    let indexes = propose_n(&node, 0..100).await;
    assert!(indexes.windows(2).all(|w| w[0] < w[1]), "{indexes:?}");
    let applied = sm.entries();
    assert_eq!(applied.len(), 100);
    for (i, (index, data)) in applied.iter().enumerate() {
        assert_eq!(*index, indexes[i]);
        assert_eq!(data, format!("entry-{i}").as_bytes());
    }
    let status = node.status();
    assert_eq!(status.applied_index, *indexes.last().unwrap());
    assert_eq!(status.commit_index, status.applied_index);
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_proposals_share_few_storage_commits() {
    let dir = TempDir::new("single-group-commit");
    let sm = RecordingSm::default();
    let node = start(single_config(&dir, 0), sm.clone());
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    let commits_before = node.status().storage.commits;

    let started = Instant::now();
    let tasks: Vec<_> = (0..10_000u32)
        .map(|i| {
            let node = node.clone();
            tokio::spawn(async move { node.propose(i.to_le_bytes().to_vec()).await })
        })
        .collect();
    let mut indexes = Vec::with_capacity(tasks.len());
    for task in tasks {
        indexes.push(task.await.unwrap().unwrap());
    }
    let elapsed = started.elapsed();

    let commits = node.status().storage.commits - commits_before;
    eprintln!("10,000 proposals applied in {elapsed:?} with {commits} redb commits");
    indexes.sort_unstable();
    indexes.dedup();
    assert_eq!(indexes.len(), 10_000, "every proposal got its own index");
    assert_eq!(sm.len(), 10_000);
    assert!(commits < 1_000, "{commits} commits for 10,000 entries");
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sustained_proposers_waiting_on_each_answer_still_share_commits() {
    let dir = TempDir::new("single-sustained");
    let sm = RecordingSm::default();
    let node = start(single_config(&dir, 0), sm.clone());
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    let commits_before = node.status().storage.commits;

    // 100 clients, each proposing its next entry only once the previous one is applied.
    let started = Instant::now();
    let clients: Vec<_> = (0..100u32)
        .map(|client| {
            let node = node.clone();
            tokio::spawn(async move {
                for i in 0..100u32 {
                    node.propose(format!("{client}/{i}").into_bytes())
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    let elapsed = started.elapsed();

    let commits = node.status().storage.commits - commits_before;
    eprintln!("100 clients x 100 sequential proposals: {elapsed:?}, {commits} redb commits");
    assert_eq!(sm.len(), 10_000);
    assert!(commits < 2_000, "{commits} commits for 10,000 entries");
    node.shutdown();
}

#[tokio::test]
async fn restart_replays_the_log_into_a_fresh_state_machine() {
    let dir = TempDir::new("single-restart-log");
    let first = RecordingSm::default();
    let node = start(single_config(&dir, 0), first.clone());
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    propose_n(&node, 0..50).await;
    node.shutdown();

    let second = RecordingSm::default();
    let node = start(single_config(&dir, 0), second.clone());
    // Replayed before start() returned, not later.
    assert_eq!(second.entries(), first.entries());
    // Only the bootstrap snapshot (index 1, the empty state) was restored; the rest replayed.
    assert_eq!(*second.restored_at.lock().unwrap(), vec![1]);
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    assert!(node.status().term >= 2, "a new term, not a re-bootstrap");
    let next = node.propose(b"after restart".to_vec()).await.unwrap();
    assert!(next > first.entries().last().unwrap().0);
    node.shutdown();
}

#[tokio::test]
async fn restart_restores_the_snapshot_then_replays_the_compacted_log_tail() {
    let dir = TempDir::new("single-restart-snap");
    let first = RecordingSm::default();
    let node = start(single_config(&dir, 20), first.clone());
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    propose_n(&node, 0..75).await;
    let status = node.status();
    assert!(status.snapshot_index >= 60, "{status:?}");
    assert_eq!(
        status.first_log_index,
        status.snapshot_index + 1,
        "log compacted"
    );
    assert!(
        status.last_log_index > status.snapshot_index,
        "a tail to replay"
    );
    node.shutdown();

    let second = RecordingSm::default();
    let node = start(single_config(&dir, 20), second.clone());
    assert_eq!(
        *second.restored_at.lock().unwrap(),
        vec![status.snapshot_index]
    );
    assert_eq!(second.entries(), first.entries());
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    propose_n(&node, 75..80).await;
    node.shutdown();

    // And once more, now that the newest snapshot was taken by the restarted node.
    let third = RecordingSm::default();
    let node = start(single_config(&dir, 20), third.clone());
    assert_eq!(third.entries(), second.entries());
    assert_eq!(third.len(), 80);
    node.shutdown();
}

#[tokio::test]
async fn an_unreadable_snapshot_payload_fails_start_with_a_restore_error() {
    for (payload, expected) in [
        (b"TSM1{not json".as_slice(), "corrupt snapshot"),
        (b"TSM9[]".as_slice(), "unknown snapshot format"),
    ] {
        let dir = TempDir::new("single-bad-snap");
        let node = start(single_config(&dir, 10), RecordingSm::default());
        node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
        propose_n(&node, 0..15).await;
        let snapshot_index = node.status().snapshot_index;
        assert!(snapshot_index > 0);
        node.shutdown();

        overwrite_snapshot_payload(&single_config(&dir, 10).db_path(), payload);
        let err = RaftNode::start(
            single_config(&dir, 10),
            RecordingSm::default(),
            Arc::new(NoTransport),
        )
        .unwrap_err();
        match err {
            RaftError::SnapshotRestore { index, reason } => {
                assert_eq!(index, snapshot_index);
                assert!(reason.contains(expected), "{reason}");
            }
            other => panic!("expected a restore error, got {other}"),
        }
    }
}

#[tokio::test]
async fn invalid_proposals_are_refused_before_reaching_raft() {
    let dir = TempDir::new("single-refuse");
    let mut cfg = single_config(&dir, 0);
    cfg.max_entry_bytes = 16;
    let node = start(cfg, RecordingSm::default());
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    assert!(matches!(
        node.propose(Vec::new()).await,
        Err(RaftError::EmptyEntry)
    ));
    assert!(matches!(
        node.propose(vec![0; 17]).await,
        Err(RaftError::EntryTooLarge { size: 17, max: 16 })
    ));
    assert!(node.propose(vec![0; 16]).await.is_ok());
    node.shutdown();
    assert!(matches!(
        node.propose(b"late".to_vec()).await,
        Err(RaftError::ShuttingDown)
    ));
}

#[tokio::test]
async fn a_second_node_on_the_same_data_dir_is_refused_while_the_first_runs() {
    let dir = TempDir::new("single-locked");
    let node = start(single_config(&dir, 0), RecordingSm::default());
    let second = RaftNode::start(
        single_config(&dir, 0),
        RecordingSm::default(),
        Arc::new(NoTransport),
    );
    assert!(
        matches!(second, Err(RaftError::Storage { .. })),
        "{second:?}"
    );
    node.shutdown();
    // shutdown() released the file: it opens again at once.
    start(single_config(&dir, 0), RecordingSm::default()).shutdown();
}

#[test]
fn invalid_configs_are_refused() {
    let dir = TempDir::new("single-config");
    let mut cfg = single_config(&dir, 0);
    cfg.id = 0;
    let err = RaftNode::start(cfg, RecordingSm::default(), Arc::new(NoTransport)).unwrap_err();
    assert!(matches!(err, RaftError::InvalidConfig(_)), "{err}");
    let mut cfg = single_config(&dir, 0);
    cfg.election_tick = cfg.heartbeat_tick;
    let err = RaftNode::start(cfg, RecordingSm::default(), Arc::new(NoTransport)).unwrap_err();
    assert!(matches!(err, RaftError::InvalidConfig(_)), "{err}");
}

/// A `RecordingSm` whose threshold snapshots encode off the Raft thread, each waiting for the
/// test to let it finish.
struct DeferredSm {
    inner: RecordingSm,
    release: Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
}

impl crate::StateMachine for DeferredSm {
    fn apply(&mut self, index: u64, data: &[u8]) -> Vec<u8> {
        self.inner.apply(index, data)
    }
    fn snapshot(&self) -> Vec<u8> {
        self.inner.snapshot()
    }
    fn snapshot_deferred(&self) -> Option<crate::DeferredSnapshot> {
        // What `snapshot` gives now: half written at once, the rest once the test releases it.
        let data = self.inner.snapshot();
        let release = self.release.clone();
        Some(Box::new(move |out| {
            let (first, rest) = data.split_at(data.len() / 2);
            out.write_all(first)?;
            let _ = release.lock().unwrap().recv();
            out.write_all(rest)
        }))
    }
    fn restore(&mut self, index: u64, data: &mut dyn std::io::Read) -> Result<(), String> {
        self.inner.restore(index, data)
    }
}

/// A node snapshotting every 10 entries through [`DeferredSm`], 12 entries in: its first
/// threshold snapshot is half written and waits for the returned sender.
async fn deferred_node_past_its_threshold(
    dir: &TempDir,
) -> (RaftNode, RecordingSm, std::sync::mpsc::Sender<()>) {
    let recorded = RecordingSm::default();
    let (release, released) = std::sync::mpsc::channel();
    let sm = DeferredSm {
        inner: recorded.clone(),
        release: Arc::new(std::sync::Mutex::new(released)),
    };
    let node = RaftNode::start(single_config(dir, 10), sm, Arc::new(NoTransport)).unwrap();
    node.wait_for_leader(Duration::from_secs(2)).await.unwrap();
    propose_n(&node, 0..12).await;
    (node, recorded, release)
}

#[tokio::test]
async fn a_threshold_snapshot_encodes_off_the_raft_thread_while_entries_keep_committing() {
    let dir = TempDir::new("single-deferred-snap");
    let (node, recorded, release) = deferred_node_past_its_threshold(&dir).await;
    // The snapshot taken at the threshold is held in its encoder; the log goes on regardless.
    let more = propose_n(&node, 12..40).await;
    assert_eq!(recorded.len(), 40);
    assert!(node.status().snapshot_index <= 1, "{:?}", node.status());
    release.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let taken_at = loop {
        let status = node.status();
        if status.snapshot_index > 1 {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the encoded snapshot was never stored"
        );
        // Any command wakes the driver; a read is one that changes nothing.
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        taken_at.snapshot_index >= 10 && taken_at.snapshot_index < *more.last().unwrap(),
        "stored at the index it was taken at, not a later one: {taken_at:?}"
    );
    assert_eq!(
        taken_at.first_log_index,
        taken_at.snapshot_index + 1,
        "log compacted"
    );
    // Later snapshots are released at once.
    for _ in 0..8 {
        let _ = release.send(());
    }
    node.shutdown();

    let again = RecordingSm::default();
    let node = start(single_config(&dir, 0), again.clone());
    assert_eq!(
        again.entries(),
        recorded.entries(),
        "snapshot plus tail give the same state"
    );
    node.shutdown();
}

#[tokio::test]
async fn stopping_abandons_a_snapshot_being_written_and_the_data_dir_opens_again() {
    let dir = TempDir::new("single-abandoned-snap");
    let (node, recorded, release) = deferred_node_past_its_threshold(&dir).await;
    // The encoder has written half and waits; let go while the node stops, its next write
    // fails and it ends, so the stop does not leave it holding the database.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let _ = release.send(());
    });
    node.shutdown();
    releaser.join().unwrap();

    let again = RecordingSm::default();
    let node = start(single_config(&dir, 0), again.clone());
    assert_eq!(again.entries(), recorded.entries());
    assert!(
        node.status().snapshot_index <= 1,
        "the abandoned snapshot was not installed: {:?}",
        node.status()
    );
    node.shutdown();
}
