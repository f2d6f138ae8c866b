//! Three servers in one process, on loopback RPC: formation, forwarding, check-and-set,
//! snapshots and membership.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_structs::Job;
use serde_json::json;

use crate::{Server, ServerConfig, ServerError};

const WAIT: Duration = Duration::from_secs(20);

fn job(id: &str, marker: u64) -> Job {
    drover_structs::decode::decode_api_job(json!({
        "ID": id,
        "Datacenters": ["dc1"],
        "Meta": {"marker": marker.to_string()},
        "TaskGroups": [{
            "Name": "web",
            "Count": 1,
            "Tasks": [{
                "Name": "server",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["600"]},
                "Resources": {"CPU": 100, "MemoryMB": 64}
            }]
        }]
    }))
    .expect("a valid job")
}

fn config(
    dir: &std::path::Path,
    n: usize,
    addr: &str,
    join: &[String],
    expect: u32,
) -> ServerConfig {
    let mut c = ServerConfig::new(dir.join(format!("s{n}")));
    c.rpc_addr = addr.to_string();
    c.name = format!("s{n}.global");
    c.bootstrap_expect = expect;
    c.join = join.to_vec();
    c.raft_tick = Duration::from_millis(20);
    c.num_schedulers = 1;
    c
}

fn net(listener: tokio::net::TcpListener, addr: &str) -> Arc<dyn drover_net::PeerNet> {
    Arc::new(drover_rpc::GrpcNet::new(
        listener,
        addr,
        Arc::new(drover_rpc::Faults::none()),
        None,
    ))
}

async fn listener() -> (tokio::net::TcpListener, String) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

/// Starts three servers that only know the first one's address, all at once.
async fn start_three(dir: &std::path::Path) -> Vec<Server> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(listener().await);
    }
    let seed = vec![listeners[0].1.clone()];
    let mut starting = Vec::new();
    for (n, (l, addr)) in listeners.into_iter().enumerate() {
        let join = if n == 0 { Vec::new() } else { seed.clone() };
        let cfg = config(dir, n, &addr, &join, 3);
        starting.push(tokio::spawn(Server::start_with_net(cfg, net(l, &addr))));
    }
    let mut servers = Vec::new();
    for s in starting {
        servers.push(s.await.unwrap().expect("server starts"));
    }
    servers
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn leader_index(servers: &[Server]) -> usize {
    let mut leader = 0;
    eventually("one leader that everyone knows", || {
        let leaders: Vec<usize> = (0..servers.len())
            .filter(|i| servers[*i].is_leader())
            .collect();
        if leaders.len() != 1 {
            return false;
        }
        leader = leaders[0];
        let addr = servers[leader].own_peer().address;
        servers
            .iter()
            .all(|s| s.leader_address().as_deref() == Some(addr.as_str()))
    })
    .await;
    leader
}

fn shutdown(servers: &[Server]) {
    for s in servers {
        s.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_bootstrap_and_followers_forward_writes() {
    let dir = tempfile::tempdir().unwrap();
    let servers = start_three(dir.path()).await;
    let leader = leader_index(&servers).await;
    let mut addrs: Vec<String> = servers.iter().map(|s| s.own_peer().address).collect();
    addrs.sort();
    for s in &servers {
        assert_eq!(s.peer_addresses(), addrs);
        assert_eq!(s.raft_configuration().0.len(), 3);
    }
    let follower = (0..3).find(|i| *i != leader).unwrap();
    let result = servers[follower]
        .register_job(job("web", 1), None)
        .await
        .expect("a follower forwards the write");
    assert!(result.index > 0 && !result.eval_id.is_empty());
    for s in &servers {
        s.read_barrier().await.unwrap();
        assert!(
            s.snapshot().job("default", "web").is_some(),
            "the read barrier makes the write visible on every server"
        );
    }
    // Validation errors come back as validation errors, whoever answers.
    let mut bad = job("bad", 1);
    bad.task_groups.clear();
    let err = servers[follower].register_job(bad, None).await.unwrap_err();
    assert!(matches!(err, ServerError::Validation(_)), "{err}");
    shutdown(&servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_of_concurrent_check_and_set_writers_wins() {
    let dir = tempfile::tempdir().unwrap();
    let servers = start_three(dir.path()).await;
    leader_index(&servers).await;
    let first = servers[0]
        .register_job(job("cas", 0), Some(0))
        .await
        .unwrap();
    let expected = first.job_modify_index;
    let mut writers = Vec::new();
    for n in 0..9u64 {
        let s = servers[(n % 3) as usize].clone();
        writers.push(tokio::spawn(async move {
            s.register_job(job("cas", n + 1), Some(expected)).await
        }));
    }
    let mut won = 0;
    for w in writers {
        match w.await.unwrap() {
            Ok(_) => won += 1,
            Err(ServerError::Conflict(msg)) => {
                assert!(msg.contains("conflicting job modify index"), "{msg}")
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(
        won, 1,
        "exactly one writer expecting index {expected} may succeed"
    );
    let err = servers[1]
        .register_job(job("cas", 99), Some(0))
        .await
        .unwrap_err();
    assert!(matches!(err, ServerError::Conflict(_)), "{err}");
    shutdown(&servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_restores_on_every_server_and_a_corrupt_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let servers = start_three(dir.path()).await;
    let leader = leader_index(&servers).await;
    let follower = (0..3).find(|i| *i != leader).unwrap();
    servers[0].register_job(job("kept", 1), None).await.unwrap();
    let archive = servers[follower].save_snapshot().await.unwrap();
    servers[0]
        .register_job(job("dropped", 1), None)
        .await
        .unwrap();

    let mut corrupt = archive.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    for bad in [corrupt, archive[..archive.len() / 2].to_vec()] {
        let err = servers[follower].restore_snapshot(bad).await.unwrap_err();
        assert!(matches!(err, ServerError::BadRequest(_)), "{err}");
    }
    servers[leader].read_barrier().await.unwrap();
    assert!(
        servers[leader]
            .snapshot()
            .job("default", "dropped")
            .is_some()
    );

    servers[follower].restore_snapshot(archive).await.unwrap();
    for s in &servers {
        s.read_barrier().await.unwrap();
        let snap = s.snapshot();
        assert!(snap.job("default", "kept").is_some());
        assert!(snap.job("default", "dropped").is_none());
    }
    // Writes go on after a restore.
    servers[follower]
        .register_job(job("after", 1), None)
        .await
        .unwrap();
    eventually("equal digests", || {
        let d: Vec<u64> = servers.iter().map(|s| s.state_digest().digest).collect();
        d.iter().all(|x| *x == d[0])
    })
    .await;
    shutdown(&servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_removed_by_address_and_a_new_one_joins_the_running_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = start_three(dir.path()).await;
    let leader = leader_index(&servers).await;
    servers[leader]
        .register_job(job("web", 1), None)
        .await
        .unwrap();

    let err = servers[0]
        .remove_peer(None, Some("10.1.1.1:4647".into()))
        .await
        .unwrap_err();
    assert!(matches!(err, ServerError::NotFound(_)), "{err}");

    // A fourth server told to expect three joins the cluster that exists.
    let (l, addr) = listener().await;
    let seed = vec![servers[0].own_peer().address];
    let fourth = Server::start_with_net(config(dir.path(), 3, &addr, &seed, 3), net(l, &addr))
        .await
        .unwrap();
    eventually("four voters everywhere", || {
        fourth.raft_status().voters.len() == 4
            && servers.iter().all(|s| s.raft_status().voters.len() == 4)
    })
    .await;
    fourth.read_barrier().await.unwrap();
    assert!(fourth.snapshot().job("default", "web").is_some());

    // Removing the leader itself hands leadership over first.
    let leader_addr = servers[leader].own_peer().address;
    fourth
        .remove_peer(None, Some(leader_addr.clone()))
        .await
        .unwrap();
    servers.push(fourth);
    let rest: Vec<Server> = servers
        .iter()
        .filter(|s| s.own_peer().address != leader_addr)
        .cloned()
        .collect();
    eventually("three voters without the old leader", || {
        rest.iter().all(|s| {
            let st = s.raft_status();
            st.voters.len() == 3 && !s.peer_addresses().contains(&leader_addr)
        })
    })
    .await;
    let new_leader = leader_index(&rest).await;
    rest[new_leader]
        .register_job(job("web", 2), None)
        .await
        .unwrap();
    shutdown(&servers);
}

#[test]
fn a_client_certificate_may_only_make_client_calls() {
    use crate::cluster::role_may_call;
    use crate::rpc::{METHOD_ENDPOINT, METHOD_FORWARD, METHOD_STATUS, Request};
    use drover_net::PeerRole;
    let heartbeat = serde_json::to_vec(&Request::Heartbeat {
        node_id: "n1".into(),
    })
    .unwrap();
    let gc = serde_json::to_vec(&Request::ForceGc).unwrap();
    assert!(role_may_call(PeerRole::Client, METHOD_ENDPOINT, &heartbeat).is_ok());
    let e = role_may_call(PeerRole::Client, METHOD_ENDPOINT, &gc).unwrap_err();
    assert!(e.starts_with("Permission denied"), "{e}");
    assert!(role_may_call(PeerRole::Client, METHOD_FORWARD, &heartbeat).is_err());
    assert!(role_may_call(PeerRole::Client, METHOD_STATUS, b"{}").is_err());
    assert!(role_may_call(PeerRole::Client, METHOD_ENDPOINT, b"not json").is_err());
    assert!(role_may_call(PeerRole::Other, METHOD_ENDPOINT, &heartbeat).is_err());
    for role in [PeerRole::Server, PeerRole::Unchecked] {
        assert!(role_may_call(role, METHOD_ENDPOINT, &gc).is_ok());
        assert!(role_may_call(role, METHOD_FORWARD, &gc).is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_server_counts_towards_no_quorum_until_it_has_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let servers = start_three(dir.path()).await;
    let leader = leader_index(&servers).await;
    // One of three down: the other two are a quorum of three, not of four.
    let down = (0..3).find(|i| *i != leader).unwrap();
    servers[down].shutdown();
    // A server that asks to join and then never answers (stuck receiving a snapshot).
    let ghost = drover_raft::PeerInfo::new("127.0.0.1:9", "ghost.global");
    for _ in 0..2 {
        servers[leader]
            .add_peer_here(99, ghost.clone())
            .await
            .expect("the join is accepted");
    }
    let status = servers[leader].raft_status();
    assert!(status.learners.contains(&99), "{status:?}");
    assert_eq!(
        status.voters.len(),
        3,
        "not a voter before it holds the log"
    );
    servers[leader]
        .register_job(job("web", 1), None)
        .await
        .expect("the two servers up still commit");
    shutdown(&servers);
}
