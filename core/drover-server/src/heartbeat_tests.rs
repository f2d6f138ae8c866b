//! Nodes that stop heartbeating, on a real leading server: down and lost, or disconnected and
//! unknown until they come back; the TTLs a new leader gives.

use std::time::{Duration, Instant};

use drover_scheduler::harness::NodeBuilder;
use drover_structs::*;
use serde_json::json;

use crate::test_server::{LeadingServer, start_leading_with};

const WAIT: Duration = Duration::from_secs(20);

async fn fast_heartbeats() -> LeadingServer {
    start_leading_with(|c| {
        c.heartbeat_ttl = Duration::from_millis(300);
        c.heartbeat_grace = Duration::from_millis(200);
    })
    .await
}

fn job(id: &str, group_extra: serde_json::Value) -> Job {
    let mut group = json!({"Name": "g", "Count": 1, "Tasks": [{"Name": "t",
        "Driver": "mock_driver", "Resources": {"CPU": 100, "MemoryMB": 64}}]});
    if let (Some(g), Some(extra)) = (group.as_object_mut(), group_extra.as_object()) {
        g.extend(extra.clone());
    }
    let mut j = json!({"ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [group]});
    drover_structs::canonicalize::canonicalize_job(&mut j);
    drover_structs::decode::decode(j, "Job").unwrap()
}

async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn allocs(s: &LeadingServer, job: &str) -> Vec<std::sync::Arc<Allocation>> {
    s.snapshot().allocs_by_job(DEFAULT_NAMESPACE, job)
}

async fn report(s: &LeadingServer, a: &Allocation, status: &str) {
    s.update_allocs(vec![AllocClientUpdate {
        id: a.id.clone(),
        client_status: status.into(),
        ..Default::default()
    }])
    .await
    .unwrap();
}

/// Keeps `node` heartbeating until the returned handle is dropped (aborted).
fn keep_alive(s: &LeadingServer, node: &str) -> tokio::task::JoinHandle<()> {
    let server = s.server.clone();
    let node = node.to_string();
    tokio::spawn(async move {
        loop {
            let _ = server.heartbeat(&node).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_goes_down_and_its_allocations_are_lost_and_replaced() {
    let s = fast_heartbeats().await;
    let n1 = NodeBuilder::new().build();
    let (_, ttl) = s.register_node(n1.clone()).await.unwrap();
    assert!(ttl >= Duration::from_millis(300) && ttl < Duration::from_millis(600));
    s.register_job(job("plain", json!({})), None).await.unwrap();
    let first = eventually("a placement", || allocs(&s, "plain").first().cloned()).await;
    report(&s, &first, ALLOC_CLIENT_RUNNING).await;
    let n2 = NodeBuilder::new().build();
    s.register_node(n2.clone()).await.unwrap();
    let alive = keep_alive(&s, &n2.id);

    eventually("the silent node down", || {
        s.snapshot()
            .node(&n1.id)
            .filter(|n| n.status == NODE_STATUS_DOWN)
    })
    .await;
    let lost = eventually("the allocation lost", || {
        s.snapshot()
            .alloc(&first.id)
            .filter(|a| a.client_status == ALLOC_CLIENT_LOST)
    })
    .await;
    assert_eq!(lost.desired_status, ALLOC_DESIRED_STOP);
    eventually("a replacement on the live node", || {
        allocs(&s, "plain")
            .into_iter()
            .find(|a| a.node_id == n2.id && a.previous_allocation == first.id)
    })
    .await;
    // Back again: ready, and its lost allocation stays stopped for the client to kill.
    s.heartbeat(&n1.id).await.unwrap();
    assert_eq!(s.snapshot().node(&n1.id).unwrap().status, NODE_STATUS_READY);
    assert_eq!(
        s.snapshot().alloc(&first.id).unwrap().desired_status,
        ALLOC_DESIRED_STOP
    );
    alive.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_with_disconnectable_allocations_is_disconnected_until_it_reconnects() {
    let s = fast_heartbeats().await;
    let n1 = NodeBuilder::new().build();
    s.register_node(n1.clone()).await.unwrap();
    let disconnect = json!({"Disconnect": {"LostAfter": 3_600_000_000_000_i64,
        "Reconcile": "keep_original"}});
    s.register_job(job("kept", disconnect), None).await.unwrap();
    let original = eventually("a placement", || allocs(&s, "kept").first().cloned()).await;
    report(&s, &original, ALLOC_CLIENT_RUNNING).await;
    let n2 = NodeBuilder::new().build();
    s.register_node(n2.clone()).await.unwrap();
    let alive = keep_alive(&s, &n2.id);

    eventually("the silent node disconnected", || {
        s.snapshot()
            .node(&n1.id)
            .filter(|n| n.status == NODE_STATUS_DISCONNECTED)
    })
    .await;
    let unknown = eventually("the allocation unknown", || {
        s.snapshot()
            .alloc(&original.id)
            .filter(|a| a.client_status == ALLOC_CLIENT_UNKNOWN)
    })
    .await;
    assert_eq!(unknown.desired_status, ALLOC_DESIRED_RUN);
    let timeout = s.snapshot().eval(&unknown.followup_eval_id).unwrap();
    assert_eq!(timeout.triggered_by, TRIGGER_MAX_DISCONNECT_TIMEOUT);
    assert!(timeout.wait_until > drover_structs::time::now_nanos() + 3_000 * 1_000_000_000);
    let replacement = eventually("a replacement meanwhile", || {
        allocs(&s, "kept")
            .into_iter()
            .find(|a| a.node_id == n2.id && !a.terminal())
    })
    .await;
    report(&s, &replacement, ALLOC_CLIENT_RUNNING).await;
    // It stays disconnected past more TTLs: its allocation waits for it.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        s.snapshot().node(&n1.id).unwrap().status,
        NODE_STATUS_DISCONNECTED
    );

    // Back: ready, the client reports the original running; keep_original stops the
    // replacement.
    let alive1 = keep_alive(&s, &n1.id);
    eventually("the node ready", || {
        s.snapshot()
            .node(&n1.id)
            .filter(|n| n.status == NODE_STATUS_READY)
    })
    .await;
    report(&s, &original, ALLOC_CLIENT_RUNNING).await;
    let stopped = eventually("the replacement stopped", || {
        s.snapshot()
            .alloc(&replacement.id)
            .filter(|a| a.desired_status == ALLOC_DESIRED_STOP)
    })
    .await;
    assert_eq!(
        stopped.desired_description,
        "alloc not needed due to disconnected client reconnect"
    );
    let kept = s.snapshot().alloc(&original.id).unwrap();
    assert_eq!(kept.desired_status, ALLOC_DESIRED_RUN);
    alive.abort();
    alive1.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_gives_every_live_node_the_failover_ttl() {
    let s = start_leading_with(|c| c.failover_heartbeat_ttl = Duration::from_secs(120)).await;
    let n1 = NodeBuilder::new().build();
    s.register_node(n1.clone()).await.unwrap();
    let before = s.inner.heartbeats.deadline(&n1.id).unwrap();
    assert!(before < Instant::now() + Duration::from_secs(40));
    crate::server::reestablish_leadership(&s.inner).await;
    let after = s.inner.heartbeats.deadline(&n1.id).unwrap();
    assert!(
        after > Instant::now() + Duration::from_secs(110),
        "{after:?}"
    );
}
