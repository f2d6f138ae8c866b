use std::sync::Arc;
use std::time::Duration;

use raft::eraftpb::{ConfChangeSingle, ConfChangeType, ConfChangeV2};

use crate::test_support::{MemNetwork, RecordingSm, TempDir, eventually, fast_config};
use crate::{PeerBook, PeerInfo, RaftError, RaftNode};

const WAIT: Duration = Duration::from_secs(10);

struct Cluster {
    _dir: TempDir,
    net: Arc<MemNetwork>,
    nodes: Vec<(RaftNode, RecordingSm)>,
}

impl Cluster {
    fn new(name: &str) -> Cluster {
        Cluster {
            _dir: TempDir::new(name),
            net: Arc::new(MemNetwork::default()),
            nodes: Vec::new(),
        }
    }

    fn start(&mut self, id: u64, voters: Vec<u64>, snapshot_threshold: u64) {
        self.start_with(id, voters, snapshot_threshold, |_| {});
    }

    fn start_with(
        &mut self,
        id: u64,
        voters: Vec<u64>,
        snapshot_threshold: u64,
        tune: impl FnOnce(&mut crate::RaftConfig),
    ) {
        let mut cfg = fast_config(id, &self.dir(id), voters.clone());
        cfg.snapshot_threshold = snapshot_threshold;
        tune(&mut cfg);
        cfg.initial_peers = book(&voters);
        let sm = RecordingSm::default();
        let node = RaftNode::start(cfg, sm.clone(), self.net.clone()).unwrap();
        self.net.register(&node);
        self.nodes.push((node, sm));
    }

    fn dir(&self, id: u64) -> std::path::PathBuf {
        self._dir.path().join(format!("n{id}"))
    }

    /// Shuts a node down and forgets it.
    fn stop(&mut self, id: u64) {
        self.node(id).shutdown();
        self.nodes.retain(|(n, _)| n.id() != id);
    }

    fn node(&self, id: u64) -> &RaftNode {
        &self.nodes.iter().find(|(n, _)| n.id() == id).unwrap().0
    }

    fn sm(&self, id: u64) -> &RecordingSm {
        &self.nodes.iter().find(|(n, _)| n.id() == id).unwrap().1
    }

    /// Waits until exactly one of `ids` leads and all of them agree on it.
    async fn leader_among(&self, ids: &[u64]) -> u64 {
        let mut leader = 0;
        eventually("one agreed leader", WAIT, || {
            let statuses: Vec<_> = ids.iter().map(|id| self.node(*id).status()).collect();
            let leaders: Vec<_> = statuses.iter().filter(|s| s.is_leader).collect();
            if leaders.len() != 1 {
                return false;
            }
            leader = leaders[0].id;
            statuses.iter().all(|s| s.leader_id == Some(leader))
        })
        .await;
        leader
    }

    fn shutdown(&self) {
        for (node, _) in &self.nodes {
            node.shutdown();
        }
    }
}

fn peer(id: u64) -> PeerInfo {
    PeerInfo::new(format!("10.0.0.{id}:4647"), format!("server-{id}"))
}

fn book(ids: &[u64]) -> PeerBook {
    ids.iter().map(|id| (*id, peer(*id))).collect()
}

async fn propose_n(node: &RaftNode, range: std::ops::Range<u32>) {
    for i in range {
        node.propose(format!("e{i}").into_bytes()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_one_leader_and_replicate_entries() {
    let mut cluster = Cluster::new("cluster-replicate");
    for id in 1..=3 {
        cluster.start(id, vec![1, 2, 3], 0);
    }
    let leader = cluster.leader_among(&[1, 2, 3]).await;
    propose_n(cluster.node(leader), 0..50).await;

    let follower = (1..=3).find(|id| *id != leader).unwrap();
    match cluster.node(follower).propose(b"x".to_vec()).await {
        Err(RaftError::NotLeader { leader_hint }) => assert_eq!(leader_hint, Some(leader)),
        other => panic!("expected NotLeader, got {other:?}"),
    }

    let expected = cluster.sm(leader).entries();
    assert_eq!(expected.len(), 50);
    eventually("followers applied the same entries", WAIT, || {
        (1..=3).all(|id| cluster.sm(id).entries() == expected)
    })
    .await;
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_follower_catches_up_from_entries_the_leader_released_from_memory() {
    let mut cluster = Cluster::new("cluster-released");
    // No snapshots, and no applied payload kept in memory: the leader serves node 3 from redb.
    let no_tail = |cfg: &mut crate::RaftConfig| cfg.log_memory_bytes = 0;
    cluster.start_with(1, vec![1, 2, 3], 0, no_tail);
    cluster.start_with(2, vec![1, 2, 3], 0, no_tail);
    let leader = cluster.leader_among(&[1, 2]).await;
    propose_n(cluster.node(leader), 0..30).await;
    eventually("the leader released applied payloads", WAIT, || {
        cluster.node(leader).status().storage.log_bytes_in_memory == 0
    })
    .await;

    cluster.start_with(3, vec![1, 2, 3], 0, no_tail);
    let expected = cluster.sm(leader).entries();
    assert_eq!(expected.len(), 30);
    eventually("node 3 caught up", WAIT, || {
        cluster.sm(3).entries() == expected
    })
    .await;
    assert!(
        cluster.sm(3).restored_at.lock().unwrap().is_empty(),
        "node 3 got there through log entries, not a snapshot"
    );
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_follower_catches_up_from_the_leaders_snapshot() {
    let mut cluster = Cluster::new("cluster-snapshot");
    cluster.start(1, vec![1, 2, 3], 10);
    cluster.start(2, vec![1, 2, 3], 10);
    let leader = cluster.leader_among(&[1, 2]).await;
    propose_n(cluster.node(leader), 0..35).await;
    assert!(
        cluster.node(leader).status().first_log_index > 1,
        "leader compacted its log"
    );

    cluster.start(3, vec![1, 2, 3], 10);
    let expected = cluster.sm(leader).entries();
    eventually("node 3 caught up", WAIT, || {
        cluster.sm(3).entries() == expected
    })
    .await;
    assert!(
        !cluster.sm(3).restored_at.lock().unwrap().is_empty(),
        "node 3 got there through a snapshot"
    );
    // And keeps following with ordinary appends afterwards.
    propose_n(cluster.node(leader), 35..40).await;
    let expected = cluster.sm(leader).entries();
    eventually("node 3 follows", WAIT, || {
        cluster.sm(3).entries() == expected
    })
    .await;
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_fails_its_pending_proposal_and_the_rest_elect_a_new_one() {
    let mut cluster = Cluster::new("cluster-partition");
    for id in 1..=3 {
        cluster.start(id, vec![1, 2, 3], 0);
    }
    let old = cluster.leader_among(&[1, 2, 3]).await;
    propose_n(cluster.node(old), 0..5).await;

    cluster.net.isolate(old);
    // Cannot commit without a quorum; check_quorum makes it step down, which must answer
    // the proposal rather than leave it hanging.
    let outcome = tokio::time::timeout(WAIT, cluster.node(old).propose(b"lost".to_vec()))
        .await
        .expect("the proposal was answered");
    assert!(
        matches!(outcome, Err(RaftError::LeadershipLost { .. })),
        "{outcome:?}"
    );

    let rest: Vec<u64> = (1..=3).filter(|id| *id != old).collect();
    let new = cluster.leader_among(&rest).await;
    propose_n(cluster.node(new), 5..10).await;

    cluster.net.heal(old);
    let expected = cluster.sm(new).entries();
    eventually("the old leader rejoined as a follower", WAIT, || {
        cluster.node(old).status().leader_id == Some(new) && cluster.sm(old).entries() == expected
    })
    .await;
    assert!(
        expected.iter().all(|(_, data)| data != b"lost"),
        "the uncommitted entry was overwritten"
    );
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_added_by_conf_change_receives_the_log() {
    let mut cluster = Cluster::new("cluster-add");
    for id in 1..=3 {
        cluster.start(id, vec![1, 2, 3], 0);
    }
    let leader = cluster.leader_among(&[1, 2, 3]).await;
    propose_n(cluster.node(leader), 0..10).await;

    // Node 4 starts empty and waits to be added.
    cluster.start(4, Vec::new(), 0);
    let mut add = ConfChangeSingle::default();
    add.set_change_type(ConfChangeType::AddNode);
    add.node_id = 4;
    let mut change = ConfChangeV2::default();
    change.mut_changes().push(add);
    cluster
        .node(leader)
        .propose_conf_change(change)
        .await
        .unwrap();
    assert_eq!(cluster.node(leader).status().voters, vec![1, 2, 3, 4]);

    propose_n(cluster.node(leader), 10..15).await;
    let expected = cluster.sm(leader).entries();
    eventually("node 4 applied the log", WAIT, || {
        cluster.sm(4).entries() == expected && cluster.node(4).status().voters == [1, 2, 3, 4]
    })
    .await;
    // It could only get there through a snapshot holding the new configuration: the first
    // configuration is in the bootstrap snapshot, not in the log.
    assert!(!cluster.sm(4).restored_at.lock().unwrap().is_empty());
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_learns_the_addresses_of_bootstrap_and_added_voters() {
    let mut cluster = Cluster::new("cluster-book");
    for id in 1..=3 {
        cluster.start(id, vec![1, 2, 3], 5);
    }
    let leader = cluster.leader_among(&[1, 2, 3]).await;
    propose_n(cluster.node(leader), 0..10).await;
    cluster.start(4, Vec::new(), 5);
    cluster
        .node(leader)
        .add_voter(4, peer(4))
        .await
        .expect("voter added");
    let want = book(&[1, 2, 3, 4]);
    eventually("all four know all four addresses", WAIT, || {
        (1..=4).all(|id| cluster.node(id).status().peers == want)
    })
    .await;

    cluster.node(leader).remove_member(4).await.unwrap();
    let want = book(&[1, 2, 3]);
    eventually("the removed server is gone from every book", WAIT, || {
        (1..=3).all(|id| {
            let s = cluster.node(id).status();
            s.peers == want && s.voters == [1, 2, 3]
        })
    })
    .await;
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposer_gets_the_state_machines_response() {
    let mut cluster = Cluster::new("cluster-response");
    for id in 1..=3 {
        cluster.start(id, vec![1, 2, 3], 0);
    }
    let leader = cluster.leader_among(&[1, 2, 3]).await;
    let applied = cluster
        .node(leader)
        .propose_for_response(b"x".to_vec())
        .await
        .unwrap();
    assert_eq!(
        applied.response,
        format!("applied {}", applied.index).into_bytes()
    );
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_index_on_a_follower_waits_for_every_acknowledged_write() {
    let mut cluster = Cluster::new("cluster-read-index");
    for id in 1..=3 {
        cluster.start(id, vec![1, 2, 3], 0);
    }
    let leader = cluster.leader_among(&[1, 2, 3]).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    for round in 0..20u32 {
        let index = cluster
            .node(leader)
            .propose(format!("w{round}").into_bytes())
            .await
            .unwrap();
        let read = cluster
            .node(follower)
            .read_index(WAIT)
            .await
            .expect("read index confirmed");
        assert!(read >= index, "read index {read} < acknowledged {index}");
        assert!(
            cluster.node(follower).status().applied_index >= index,
            "the follower applied the write before answering"
        );
        assert!(
            cluster
                .sm(follower)
                .entries()
                .iter()
                .any(|(i, _)| *i == index)
        );
    }
    let contact = cluster.node(follower).last_leader_contact().unwrap();
    assert!(contact < Duration::from_secs(1), "{contact:?}");
    assert_eq!(
        cluster.node(leader).last_leader_contact(),
        Some(Duration::ZERO)
    );

    // Cut off, the follower cannot confirm anything and says so within the timeout.
    cluster.net.isolate(follower);
    let err = cluster
        .node(follower)
        .read_index(Duration::from_millis(600))
        .await
        .unwrap_err();
    assert!(matches!(err, RaftError::NoLeader { .. }), "{err}");
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_to_the_server_it_is_transferred_to() {
    let mut cluster = Cluster::new("cluster-transfer");
    for id in 1..=3 {
        cluster.start(id, vec![1, 2, 3], 0);
    }
    let old = cluster.leader_among(&[1, 2, 3]).await;
    propose_n(cluster.node(old), 0..5).await;
    let target = (1..=3).find(|id| *id != old).unwrap();
    cluster.node(old).transfer_leadership(target);
    eventually("the target leads", WAIT, || {
        cluster.node(target).status().is_leader
    })
    .await;
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_json_brings_back_a_cluster_that_lost_its_quorum() {
    let mut cluster = Cluster::new("cluster-recover");
    for id in 1..=3 {
        cluster.start(id, vec![1, 2, 3], 0);
    }
    let leader = cluster.leader_among(&[1, 2, 3]).await;
    propose_n(cluster.node(leader), 0..20).await;
    let expected = cluster.sm(leader).entries();
    eventually("all applied", WAIT, || {
        (1..=3).all(|id| cluster.sm(id).entries() == expected)
    })
    .await;
    // Two of three servers are lost for good: the survivor cannot elect itself.
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    for id in 1..=3 {
        cluster.stop(id);
    }

    let recovery = cluster.dir(survivor).join("raft").join(crate::PEERS_JSON);
    std::fs::write(
        &recovery,
        format!(r#"[{{"id": "{survivor}", "address": "10.9.9.9:4647", "non_voter": false}}]"#),
    )
    .unwrap();
    cluster.start(survivor, Vec::new(), 0);
    eventually("the survivor leads alone", WAIT, || {
        let s = cluster.node(survivor).status();
        s.is_leader && s.voters == [survivor]
    })
    .await;
    assert!(!recovery.exists(), "peers.json is removed once applied");
    let status = cluster.node(survivor).status();
    assert_eq!(status.peers[&survivor].address, "10.9.9.9:4647");
    assert_eq!(
        status.peers[&survivor].name,
        format!("server-{survivor}"),
        "names known before are kept"
    );
    let data: Vec<_> = cluster
        .sm(survivor)
        .entries()
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    let want: Vec<_> = expected.into_iter().map(|(_, d)| d).collect();
    assert_eq!(data, want, "state survives the recovery");
    cluster
        .node(survivor)
        .propose(b"after recovery".to_vec())
        .await
        .expect("writes accepted again");
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_peers_json_fails_start_and_changes_nothing() {
    let mut cluster = Cluster::new("cluster-recover-bad");
    cluster.start(1, vec![1], 0);
    cluster.leader_among(&[1]).await;
    propose_n(cluster.node(1), 0..3).await;
    cluster.stop(1);
    let recovery = cluster.dir(1).join("raft").join(crate::PEERS_JSON);
    std::fs::write(&recovery, r#"[{"id": "web-1", "address": "x:1"}]"#).unwrap();
    let cfg = fast_config(1, &cluster.dir(1), Vec::new());
    let err = RaftNode::start(cfg, RecordingSm::default(), cluster.net.clone()).unwrap_err();
    assert!(matches!(err, RaftError::Recovery(_)), "{err}");
    assert!(recovery.exists());
    std::fs::remove_file(&recovery).unwrap();
    cluster.start(1, Vec::new(), 0);
    cluster.leader_among(&[1]).await;
    assert_eq!(cluster.sm(1).len(), 3);
    cluster.shutdown();
}

/// The `MsgSnapshot` leader `from` would send `to` for its newest snapshot (every entry was
/// proposed in the leader's term, so that is the snapshot's term too).
fn snapshot_message(from: &RaftNode, to: u64, voters: &[u64]) -> raft::eraftpb::Message {
    let status = from.status();
    let mut msg = raft::eraftpb::Message::default();
    msg.set_msg_type(raft::eraftpb::MessageType::MsgSnapshot);
    (msg.from, msg.to, msg.term) = (from.id(), to, status.term);
    let snapshot = msg.mut_snapshot();
    let meta = snapshot.mut_metadata();
    (meta.index, meta.term) = (status.snapshot_index, status.term);
    meta.mut_conf_state().voters = voters.to_vec();
    snapshot.data = crate::peers::wrap_snapshot_reference(&book(voters)).into();
    msg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_cut_short_or_stepped_without_its_payload_changes_nothing() {
    let mut cluster = Cluster::new("cluster-snapshot-cut");
    cluster.start(1, vec![1, 2, 3], 10);
    cluster.start(2, vec![1, 2, 3], 10);
    let leader = cluster.leader_among(&[1, 2]).await;
    propose_n(cluster.node(leader), 0..35).await;
    cluster.net.isolate(3);
    cluster.start(3, vec![1, 2, 3], 10);
    let msg = snapshot_message(cluster.node(leader), 3, &[1, 2, 3]);
    let payload: Vec<Vec<u8>> = cluster
        .node(leader)
        .outgoing_snapshot(&msg)
        .expect("the leader's newest snapshot")
        .map(Result::unwrap)
        .collect();
    assert!(payload.len() > 2, "sent in many pieces");

    // Half the pieces, then the stream breaks; meanwhile a second sender is refused.
    let mut incoming = cluster.node(3).incoming_snapshot().unwrap();
    for piece in &payload[..payload.len() / 2] {
        incoming.write(piece).unwrap();
    }
    let second = cluster.node(3).incoming_snapshot();
    assert!(
        matches!(&second, Err(RaftError::SnapshotTransfer(why)) if why.contains("another snapshot")),
        "{:?}",
        second.err()
    );
    drop(incoming);
    // The message alone, as a transport that lost the payload would deliver it.
    cluster.node(3).step(msg.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(cluster.sm(3).restored_at.lock().unwrap().is_empty());
    assert!(cluster.sm(3).entries().is_empty());

    // A snapshot replaced on the leader is no longer offered under its old name.
    propose_n(cluster.node(leader), 35..50).await;
    let replaced = cluster.node(leader).outgoing_snapshot(&msg);
    assert!(
        matches!(&replaced, Err(RaftError::SnapshotTransfer(why)) if why.contains("no longer stored")),
        "{:?}",
        replaced.err()
    );

    // Reachable again, node 3 gets the newest snapshot whole and the log after it.
    cluster.net.heal(3);
    let expected = cluster.sm(leader).entries();
    eventually("node 3 caught up", WAIT, || {
        cluster.sm(3).entries() == expected
    })
    .await;
    assert_eq!(cluster.sm(3).restored_at.lock().unwrap().len(), 1);
    cluster.shutdown();
}
