//! Three Raft nodes in one process talking over real RPC on loopback.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_raft::eraftpb::Message;
use drover_raft::{IncomingSnapshot, PeerInfo, RaftConfig, RaftNode, StateMachine};

use crate::{
    CallFuture, Faults, Handler, HandlerError, PeerRole, RaftTransport, RpcClient, RpcError, serve,
};

const WAIT: Duration = Duration::from_secs(15);

#[derive(Clone, Default)]
struct ListSm(Arc<Mutex<Vec<Vec<u8>>>>);

impl StateMachine for ListSm {
    fn apply(&mut self, _index: u64, data: &[u8]) -> Vec<u8> {
        self.0.lock().unwrap().push(data.to_vec());
        Vec::new()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.lock().unwrap().join(&b'\n')
    }
    fn restore(&mut self, _index: u64, data: &mut dyn std::io::Read) -> Result<(), String> {
        let mut whole = Vec::new();
        data.read_to_end(&mut whole).map_err(|e| e.to_string())?;
        let data = whole;
        *self.0.lock().unwrap() = if data.is_empty() {
            Vec::new()
        } else {
            data.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect()
        };
        Ok(())
    }
}

/// Steps raft messages into the node; answers `echo` calls, refuses everything else.
struct NodeHandler(Arc<Mutex<Option<RaftNode>>>);

impl Handler for NodeHandler {
    fn raft(&self, _from_addr: String, messages: Vec<Message>) {
        if let Some(node) = self.0.lock().unwrap().as_ref() {
            for m in messages {
                node.step(m);
            }
        }
    }
    fn incoming_snapshot(&self, _from_addr: &str, _from: u64) -> Result<IncomingSnapshot, String> {
        let node = self.0.lock().unwrap().clone();
        node.ok_or("not started")?
            .incoming_snapshot()
            .map_err(|e| e.to_string())
    }
    fn call(&self, _from: String, role: PeerRole, method: String, body: Vec<u8>) -> CallFuture {
        if method == "role" {
            let answer = format!("{role:?}").into_bytes();
            return Box::pin(async move { Ok(answer) });
        }
        Box::pin(async move {
            match method.as_str() {
                "echo" => Ok(body),
                other => Err(HandlerError::Refused(format!("unknown method {other}"))),
            }
        })
    }
}

struct TestNode {
    node: RaftNode,
    sm: ListSm,
    addr: String,
    faults_file: PathBuf,
}

fn temp_dir(name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let p = std::env::temp_dir().join(format!(
        "drover-rpc-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

async fn start_cluster(dir: &std::path::Path) -> Vec<TestNode> {
    let mut listeners = Vec::new();
    let mut book = BTreeMap::new();
    for id in 1..=3u64 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        book.insert(id, PeerInfo::new(addr.clone(), format!("n{id}")));
        listeners.push((id, l, addr));
    }
    let mut nodes = Vec::new();
    for (id, listener, addr) in listeners {
        let faults_file = dir.join(format!("faults-{id}"));
        let faults = Arc::new(Faults::from_file(faults_file.clone()));
        let slot = Arc::new(Mutex::new(None));
        tokio::spawn(serve(
            listener,
            Arc::new(NodeHandler(slot.clone())),
            faults.clone(),
            crate::tunnel::tests::hub(),
            None,
            std::future::pending(),
        ));
        let client = Arc::new(RpcClient::new(addr.clone(), faults));
        let transport = RaftTransport::new(client, tokio::runtime::Handle::current());
        let mut cfg = RaftConfig::new(id, dir.join(format!("n{id}")), vec![1, 2, 3]);
        cfg.initial_peers = book.clone();
        cfg.tick_interval = Duration::from_millis(20);
        cfg.snapshot_threshold = 20;
        let sm = ListSm::default();
        let node = RaftNode::start(cfg, sm.clone(), Arc::new(transport.clone())).unwrap();
        transport.attach(node.clone());
        *slot.lock().unwrap() = Some(node.clone());
        nodes.push(TestNode {
            node,
            sm,
            addr,
            faults_file,
        });
    }
    nodes
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn leader_of(nodes: &[TestNode], among: &[usize]) -> usize {
    let mut leader = usize::MAX;
    eventually("a leader", || {
        let leaders: Vec<usize> = among
            .iter()
            .copied()
            .filter(|i| nodes[*i].node.leadership().borrow().is_leader)
            .collect();
        leader = leaders.first().copied().unwrap_or(usize::MAX);
        leaders.len() == 1
    })
    .await;
    leader
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_replicate_over_rpc_and_a_late_one_gets_a_snapshot() {
    let dir = temp_dir("replicate");
    let nodes = start_cluster(&dir).await;
    let leader = leader_of(&nodes, &[0, 1, 2]).await;
    for i in 0..50 {
        nodes[leader]
            .node
            .propose(format!("e{i}").into_bytes())
            .await
            .unwrap();
    }
    let want = nodes[leader].sm.0.lock().unwrap().clone();
    eventually("every node applied all 50", || {
        nodes.iter().all(|n| *n.sm.0.lock().unwrap() == want)
    })
    .await;
    assert!(nodes[leader].node.status().snapshot_index > 0, "compacted");

    // Cut one follower off, write past a snapshot, heal: it catches up by InstallSnapshot.
    let lagging = (0..3).find(|i| *i != leader).unwrap();
    let others: Vec<String> = (0..3)
        .filter(|i| *i != lagging)
        .map(|i| nodes[i].addr.clone())
        .collect();
    std::fs::write(&nodes[lagging].faults_file, others.join("\n")).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 50..120 {
        nodes[leader]
            .node
            .propose(format!("e{i}").into_bytes())
            .await
            .unwrap();
    }
    let first_log = nodes[leader].node.status().first_log_index;
    assert!(
        first_log > nodes[lagging].node.status().applied_index + 1,
        "the leader compacted past what the lagging node has"
    );
    std::fs::remove_file(&nodes[lagging].faults_file).unwrap();
    let want = nodes[leader].sm.0.lock().unwrap().clone();
    eventually("the lagging node caught up", || {
        *nodes[lagging].sm.0.lock().unwrap() == want
    })
    .await;
    for n in &nodes {
        n.node.shutdown();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_by_the_fault_filter_steps_down_and_the_rest_go_on() {
    let dir = temp_dir("partition");
    let nodes = start_cluster(&dir).await;
    let old = leader_of(&nodes, &[0, 1, 2]).await;
    nodes[old].node.propose(b"before".to_vec()).await.unwrap();
    let rest: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    let rest_addrs: Vec<String> = rest.iter().map(|i| nodes[*i].addr.clone()).collect();
    std::fs::write(&nodes[old].faults_file, rest_addrs.join("\n")).unwrap();
    // The filter re-reads its file every 100 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let outcome = tokio::time::timeout(WAIT, nodes[old].node.propose(b"minority".to_vec()))
        .await
        .expect("answered");
    assert!(outcome.is_err(), "a cut-off leader acknowledged a write");
    let new = leader_of(&nodes, &rest).await;
    nodes[new].node.propose(b"majority".to_vec()).await.unwrap();

    std::fs::remove_file(&nodes[old].faults_file).unwrap();
    let want = nodes[new].sm.0.lock().unwrap().clone();
    eventually("the old leader follows again", || {
        *nodes[old].sm.0.lock().unwrap() == want
    })
    .await;
    assert!(!want.iter().any(|e| e == b"minority"));
    for n in &nodes {
        n.node.shutdown();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_say_whether_they_ran() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(serve(
        l,
        Arc::new(NodeHandler(Arc::new(Mutex::new(None)))),
        Arc::new(Faults::none()),
        crate::tunnel::tests::hub(),
        None,
        std::future::pending(),
    ));
    let client = RpcClient::new("", Arc::new(Faults::none()));
    let echoed = client
        .call(&addr, "echo", b"hi".to_vec(), WAIT)
        .await
        .unwrap();
    assert_eq!(echoed, b"hi");
    let refused = client
        .call(&addr, "nope", Vec::new(), WAIT)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, RpcError::Refused { reason, .. } if reason.contains("unknown method")),
        "{refused}"
    );
    assert!(refused.is_not_sent());
    // Nothing listens on port 1.
    let unreachable = client
        .call("127.0.0.1:1", "echo", Vec::new(), WAIT)
        .await
        .unwrap_err();
    assert!(
        matches!(unreachable, RpcError::NotSent { .. }),
        "{unreachable}"
    );
}

/// An agent's TLS with a fresh certificate of `kind` from `ca`, its files in `dir`.
fn agent_tls(
    dir: &std::path::Path,
    ca: &drover_tls::generate::Pem,
    kind: drover_tls::generate::Kind,
) -> Arc<drover_tls::AgentTls> {
    use drover_tls::generate::agent_cert;
    std::fs::create_dir_all(dir).unwrap();
    let name = kind.label();
    let pem = agent_cert(ca, kind, "global", "nomad", &[], 1).unwrap();
    let (ca_file, cert_file, key_file) = (
        dir.join("ca.pem"),
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    std::fs::write(&ca_file, &ca.cert).unwrap();
    std::fs::write(&cert_file, &pem.cert).unwrap();
    std::fs::write(&key_file, &pem.key).unwrap();
    drover_tls::AgentTls::load(drover_tls::TlsSettings {
        http: false,
        rpc: true,
        files: drover_tls::TlsFiles {
            ca_file: Some(ca_file),
            cert_file: Some(cert_file),
            key_file: Some(key_file),
        },
        verify_server_hostname: true,
        verify_https_client: true,
        region: "global".into(),
    })
    .unwrap()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_calls_carry_the_callers_role_and_raft_wants_a_server_certificate() {
    use drover_tls::generate::{Kind, ca};
    let dir = temp_dir("tls");
    let ca_pem = ca("nomad", None, 1).unwrap();
    let server_tls = agent_tls(&dir, &ca_pem, Kind::Server);
    let client_tls = agent_tls(&dir, &ca_pem, Kind::Client);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(serve(
        l,
        Arc::new(NodeHandler(Arc::new(Mutex::new(None)))),
        Arc::new(Faults::none()),
        crate::tunnel::tests::hub(),
        Some(server_tls.clone()),
        std::future::pending(),
    ));
    let as_server = RpcClient::with_tls("", Arc::new(Faults::none()), Some(server_tls));
    let as_client = RpcClient::with_tls("", Arc::new(Faults::none()), Some(client_tls));
    let role = as_server
        .call(&addr, "role", Vec::new(), WAIT)
        .await
        .unwrap();
    assert_eq!(role, b"Server");
    let role = as_client
        .call(&addr, "role", Vec::new(), WAIT)
        .await
        .unwrap();
    assert_eq!(role, b"Client");
    as_server.raft(&addr, Vec::new(), WAIT).await.unwrap();
    let refused = as_client.raft(&addr, Vec::new(), WAIT).await.unwrap_err();
    assert!(
        refused.to_string().contains("need a server certificate"),
        "{refused}"
    );
    // Plain text on a TLS port gets no answer.
    let plain = RpcClient::new("", Arc::new(Faults::none()));
    let e = plain
        .call(&addr, "role", Vec::new(), WAIT)
        .await
        .unwrap_err();
    assert!(!matches!(e, RpcError::Refused { .. }), "{e}");
    // Another CA's certificate is refused at the handshake: the call is not sent.
    let stranger = agent_tls(
        &dir.join("other"),
        &ca("nomad", None, 1).unwrap(),
        Kind::Server,
    );
    let stranger = RpcClient::with_tls("", Arc::new(Faults::none()), Some(stranger));
    let e = stranger
        .call(&addr, "role", Vec::new(), WAIT)
        .await
        .unwrap_err();
    assert!(e.is_not_sent(), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
