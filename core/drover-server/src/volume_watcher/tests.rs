use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use drover_structs::*;

use super::*;
use crate::csi::*;
use crate::test_server::{LeadingServer, start_leading};

struct TestServer {
    server: LeadingServer,
    rpc: Arc<FakeRpc>,
}

/// A single leading server whose client RPC is a [`FakeRpc`], with node n1 running the
/// `hostpath` plugin's node and controller instances, volume `db` registered, and job `web`
/// (whose group asks for `db`) with a running allocation `a1` holding a write claim on it.
async fn start_with_claim() -> TestServer {
    let server = start_leading().await;
    let rpc = Arc::new(FakeRpc::default());
    server.set_csi_client_rpc(rpc.clone());
    register_plugin_node(&server).await;
    server
        .register_csi_volumes("default", vec![volume("db")])
        .await
        .unwrap();
    put_job(&server, "web", "db").await;
    place_alloc(&server, "web", "a1").await;
    server
        .claim_csi_volume(CsiVolumeClaimRequest {
            volume_id: "db".into(),
            allocation_id: "a1".into(),
            claim: CsiClaimMode::Write,
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: CsiAttachmentMode::FileSystem,
            ..Default::default()
        })
        .await
        .unwrap();
    rpc.calls.lock().unwrap().clear();
    TestServer { server, rpc }
}

/// Records every call; controller detaches fail as many times as asked first.
#[derive(Default)]
struct FakeRpc {
    calls: Mutex<Vec<String>>,
    unpublish_failures: AtomicU32,
}

impl FakeRpc {
    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl CsiClientRpc for FakeRpc {
    fn controller_validate_volume(
        &self,
        _req: ControllerValidateVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
    fn controller_create_volume(
        &self,
        _req: ControllerCreateVolumeRequest,
    ) -> CsiRpcFuture<'_, ControllerCreateVolumeResponse> {
        Box::pin(async { Err("not in these tests".to_string()) })
    }
    fn controller_delete_volume(
        &self,
        _req: ControllerDeleteVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        Box::pin(async { Err("not in these tests".to_string()) })
    }
    fn controller_publish_volume(
        &self,
        req: ControllerPublishVolumeRequest,
    ) -> CsiRpcFuture<'_, BTreeMap<String, String>> {
        self.record(format!("publish {}", req.external_id));
        Box::pin(async { Ok(BTreeMap::new()) })
    }
    fn controller_unpublish_volume(
        &self,
        req: ControllerUnpublishVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        self.record(format!(
            "controller unpublish {} from {}",
            req.external_id, req.client_csi_node_id
        ));
        let fail = self
            .unpublish_failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        Box::pin(async move {
            if fail {
                Err("controller busy".to_string())
            } else {
                Ok(())
            }
        })
    }
    fn node_detach_volume(&self, req: NodeDetachVolumeRequest) -> CsiRpcFuture<'_, ()> {
        self.record(format!(
            "node detach {} for {}",
            req.volume_id, req.alloc_id
        ));
        Box::pin(async { Ok(()) })
    }
}

fn info(controller: bool) -> CsiInfo {
    CsiInfo {
        plugin_id: "hostpath".into(),
        alloc_id: "plugin-alloc".into(),
        healthy: true,
        requires_controller_plugin: true,
        controller_info: controller.then(|| CsiControllerInfo {
            supports_attach_detach: true,
            ..Default::default()
        }),
        node_info: (!controller).then(|| CsiNodeInfo {
            id: "storage-n1".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn register_plugin_node(server: &Server) {
    let node = Node {
        id: "n1".into(),
        datacenter: "dc1".into(),
        name: "n1".into(),
        csi_node_plugins: Some(BTreeMap::from([("hostpath".to_string(), info(false))])),
        csi_controller_plugins: Some(BTreeMap::from([("hostpath".to_string(), info(true))])),
        ..Default::default()
    };
    server.register_node(node).await.unwrap();
}

fn volume(id: &str) -> CsiVolume {
    CsiVolume {
        id: id.into(),
        name: id.into(),
        plugin_id: "hostpath".into(),
        requested_capabilities: vec![CsiVolumeCapability {
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: CsiAttachmentMode::FileSystem,
        }],
        ..Default::default()
    }
}

/// Job `id` with one group mounting CSI volume `source` (no volume when empty).
fn job(id: &str, source: &str) -> Job {
    let mut spec = serde_json::json!({
        "ID": id, "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}
        }]}]
    });
    if !source.is_empty() {
        spec["TaskGroups"][0]["Volumes"] = serde_json::json!({"data": {
            "Name": "data", "Type": "csi", "Source": source,
            "AccessMode": "single-node-writer", "AttachmentMode": "file-system"
        }});
    }
    drover_structs::decode::decode_api_job(spec).unwrap()
}

async fn put_job(server: &Server, id: &str, source: &str) {
    server
        .inner
        .apply(LogEntry::JobRegister {
            job: job(id, source),
            evals: vec![],
            enforce_index: None,
            submission: None,
        })
        .await
        .unwrap();
}

/// A running allocation of the job on n1, placed through the log like the plan applier would.
async fn place_alloc(server: &Server, job_id: &str, id: &str) {
    let alloc = Allocation {
        id: id.into(),
        namespace: "default".into(),
        job_id: job_id.into(),
        node_id: "n1".into(),
        task_group: "g".into(),
        name: format!("{job_id}.g[0]"),
        desired_status: ALLOC_DESIRED_RUN.into(),
        client_status: ALLOC_CLIENT_RUNNING.into(),
        ..Default::default()
    };
    server
        .inner
        .apply(LogEntry::PlanResults {
            job: Some(("default".into(), job_id.into(), 0)),
            stopped: vec![],
            placed: vec![alloc],
            evals: vec![],
            deployment: None,
            deployment_updates: Vec::new(),
            at: 0,
        })
        .await
        .unwrap();
}

async fn end_alloc(server: &Server, id: &str) {
    server
        .update_allocs(vec![AllocClientUpdate {
            id: id.into(),
            client_status: ALLOC_CLIENT_COMPLETE.into(),
            ..Default::default()
        }])
        .await
        .unwrap();
}

fn stored(server: &Server) -> Arc<CsiVolume> {
    server.snapshot().csi_volume("default", "db").unwrap()
}

/// Waits (up to 10 s) until the stored volume passes `test`.
async fn wait_volume(server: &Server, what: &str, test: impl Fn(&CsiVolume) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !test(&stored(server)) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            stored(server)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_allocation_claim_is_detached_from_node_and_controller_then_freed() {
    let t = start_with_claim().await;
    assert!(stored(&t.server).in_use());

    end_alloc(&t.server, "a1").await;
    wait_volume(&t.server, "the claim to be freed", |v| !v.in_use()).await;
    let v = stored(&t.server);
    assert!(v.past_claims.is_empty() && v.write_claims.is_empty());
    assert_eq!(v.access_mode, CsiAccessMode::Unknown);
    assert_eq!(
        t.rpc.calls(),
        vec![
            "node detach db for a1".to_string(),
            "controller unpublish db from storage-n1".to_string(),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_controller_detach_is_retried_from_where_it_stopped() {
    let t = start_with_claim().await;
    t.rpc.unpublish_failures.store(1, Ordering::SeqCst);

    end_alloc(&t.server, "a1").await;
    // The node part is recorded; the controller part failed and the claim is still held.
    wait_volume(&t.server, "the node detach to be recorded", |v| {
        v.past_claims
            .get("a1")
            .is_some_and(|c| c.state == CsiClaimState::NodeDetached)
    })
    .await;
    assert!(stored(&t.server).in_use());

    wait_volume(&t.server, "the retry to free the claim", |v| !v.in_use()).await;
    assert_eq!(
        t.rpc.calls(),
        vec![
            "node detach db for a1".to_string(),
            "controller unpublish db from storage-n1".to_string(),
            "controller unpublish db from storage-n1".to_string(),
        ],
        "the retry resumes at the controller step"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_runs_only_while_started_with_leadership() {
    let t = start_with_claim().await;
    let inner = &t.server.inner;
    assert!(inner.volume_watcher.is_running(), "started with leadership");

    inner.volume_watcher.stop();
    assert!(!inner.volume_watcher.is_running());
    end_alloc(&t.server, "a1").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(stored(&t.server).in_use(), "nothing released while stopped");
    assert!(t.rpc.calls().is_empty());

    // A new leader resumes from the state.
    inner.volume_watcher.start(inner.clone());
    wait_volume(&t.server, "the claim to be freed", |v| !v.in_use()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_of_a_stopped_allocation_still_running_is_left_to_its_client() {
    let t = start_with_claim().await;
    t.server
        .inner
        .apply(LogEntry::AllocDesiredUpdate {
            ids: vec!["a1".into()],
            desired_status: ALLOC_DESIRED_STOP.into(),
            desired_description: "stopped".into(),
            evals: vec![],
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(stored(&t.server).in_use());
    assert!(t.rpc.calls().is_empty(), "{:?}", t.rpc.calls());

    // The client unmounted and released it itself; nothing is left for the watcher.
    t.server
        .unpublish_csi_volume(
            "default",
            "db",
            CsiVolumeClaim {
                allocation_id: "a1".into(),
                node_id: "n1".into(),
                mode: CsiClaimMode::Write,
                state: CsiClaimState::Unpublishing,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!stored(&t.server).in_use());
    assert_eq!(
        t.rpc.calls(),
        vec!["controller unpublish db from storage-n1".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_claim_unblocks_evaluations_of_jobs_waiting_for_the_volume() {
    let t = start_with_claim().await;
    put_job(&t.server, "second", "db").await;
    put_job(&t.server, "other", "").await;
    let inner = &t.server.inner;
    // No scheduling: what is unblocked would be scheduled (and blocked) again at once.
    inner.broker.set_enabled(false);
    for job_id in ["second", "other"] {
        let snap = t.server.snapshot();
        let mut e = Evaluation::for_job(&snap.job("default", job_id).unwrap(), "queued-allocs");
        e.status = EVAL_STATUS_BLOCKED.into();
        inner.block_eval(e).await;
    }
    let blocked = || -> Vec<String> {
        let b = inner.blocked.lock().unwrap();
        let mut v: Vec<String> = b.keys().map(|(_, j)| j.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(blocked(), vec!["other".to_string(), "second".to_string()]);

    // The client releases its claim (no allocation ended yet, so no capacity change).
    t.server
        .unpublish_csi_volume(
            "default",
            "db",
            CsiVolumeClaim {
                allocation_id: "a1".into(),
                node_id: "n1".into(),
                mode: CsiClaimMode::Write,
                state: CsiClaimState::Unpublishing,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!stored(&t.server).in_use());
    assert_eq!(
        blocked(),
        vec!["other".to_string()],
        "only the job asking for the volume was woken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluation_blocked_on_a_snapshot_older_than_a_freed_claim_is_enqueued_again() {
    let t = start_with_claim().await;
    put_job(&t.server, "second", "db").await;
    put_job(&t.server, "third", "db").await;
    let inner = &t.server.inner;
    // The scheduler of "second" works on this snapshot while the claim is freed, so nothing is
    // blocked yet for the release to wake.
    let seen = t.server.snapshot().latest_index();
    t.server
        .unpublish_csi_volume(
            "default",
            "db",
            CsiVolumeClaim {
                allocation_id: "a1".into(),
                node_id: "n1".into(),
                mode: CsiClaimMode::Write,
                state: CsiClaimState::Unpublishing,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!stored(&t.server).in_use());
    let blocked_eval = |job_id: &str, snapshot_index: u64| {
        let snap = t.server.snapshot();
        let mut e = Evaluation::for_job(&snap.job("default", job_id).unwrap(), "queued-allocs");
        e.status = EVAL_STATUS_BLOCKED.into();
        e.snapshot_index = snapshot_index;
        e
    };
    let late = blocked_eval("second", seen);
    // One blocked by a scheduler that saw the freed claim has nothing to wait for but the next
    // change.
    let current = blocked_eval("third", t.server.snapshot().latest_index());
    inner
        .apply(LogEntry::EvalUpdate {
            evals: vec![late.clone(), current.clone()],
        })
        .await
        .unwrap();
    inner.block_eval(late.clone()).await;
    inner.block_eval(current).await;
    let blocked: Vec<String> = {
        let b = inner.blocked.lock().unwrap();
        b.keys().map(|(_, j)| j.clone()).collect()
    };
    assert_eq!(
        blocked,
        vec!["third".to_string()],
        "the late one was not kept"
    );
    // It went to the scheduler again, which evaluated it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while t
        .server
        .snapshot()
        .eval(&late.id)
        .is_some_and(|e| e.status == EVAL_STATUS_BLOCKED)
    {
        assert!(
            Instant::now() < deadline,
            "the late evaluation was never run"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_job_records_past_claims_of_its_ended_allocations() {
    let t = start_with_claim().await;
    // Watcher off, to see what the deregistration itself writes.
    t.server.inner.volume_watcher.stop();
    end_alloc(&t.server, "a1").await;
    assert!(stored(&t.server).past_claims.is_empty());

    t.server
        .deregister_job("default", "web", false)
        .await
        .unwrap();
    let v = stored(&t.server);
    assert_eq!(v.past_claims["a1"].state, CsiClaimState::Unpublishing);
    assert_eq!(v.past_claims["a1"].mode, CsiClaimMode::Write);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_gc_records_past_claims_of_ended_holders() {
    let t = start_with_claim().await;
    t.server.inner.volume_watcher.stop();
    assert!(gc_volume_claims(&t.server).await.unwrap().is_empty());
    end_alloc(&t.server, "a1").await;
    assert_eq!(
        gc_volume_claims(&t.server).await.unwrap(),
        vec![("default".to_string(), "db".to_string())]
    );
    assert_eq!(
        stored(&t.server).past_claims["a1"].state,
        CsiClaimState::Unpublishing
    );
    // Recorded once: the next GC has nothing to do.
    assert!(gc_volume_claims(&t.server).await.unwrap().is_empty());
}

#[test]
fn jobs_use_volumes_by_source_or_per_alloc_index() {
    let plain = job("web", "db");
    assert!(job_uses_csi_volume(&plain, "db"));
    assert!(!job_uses_csi_volume(&plain, "db[0]"));
    assert!(!job_uses_csi_volume(&job("web", ""), "db"));
    let mut per_alloc = plain.clone();
    if let Some(v) = per_alloc.task_groups[0].volumes.as_mut() {
        v["data"]["PerAlloc"] = serde_json::json!(true);
    }
    assert!(job_uses_csi_volume(&per_alloc, "db[3]"));
    assert!(!job_uses_csi_volume(&per_alloc, "db"));
    assert!(!job_uses_csi_volume(&per_alloc, "db[x]"));
    assert!(!job_uses_csi_volume(&per_alloc, "dbx[1]"));
}

/// Waits (up to 15 s) until `test` holds on the server's state.
async fn wait_state(server: &Server, what: &str, test: impl Fn(&StateSnapshot) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !test(&server.snapshot()) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn live_allocs(snap: &StateSnapshot, job_id: &str) -> Vec<Arc<Allocation>> {
    snap.allocs_by_job("default", job_id)
        .into_iter()
        .filter(|a| !a.terminal())
        .collect()
}

/// The whole path: a second writer of a single-writer volume is blocked by the scheduler with
/// Nomad's reason, and placed once the first writer's job stops, its allocation ends and the
/// watcher frees the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_writer_is_placed_once_the_claim_is_freed() {
    let t = TestServer {
        server: start_leading().await,
        rpc: Arc::new(FakeRpc::default()),
    };
    let server = t.server.server.clone();
    server.set_csi_client_rpc(t.rpc.clone());
    let mut node = drover_scheduler::harness::NodeBuilder::new()
        .id("n1")
        .build();
    node.csi_node_plugins = Some(BTreeMap::from([("hostpath".to_string(), info(false))]));
    node.csi_controller_plugins = Some(BTreeMap::from([("hostpath".to_string(), info(true))]));
    server.register_node(node).await.unwrap();
    server
        .register_csi_volumes("default", vec![volume("db")])
        .await
        .unwrap();

    server.register_job(job("first", "db"), None).await.unwrap();
    wait_state(&server, "the first writer placed", |s| {
        live_allocs(s, "first").len() == 1
    })
    .await;
    let first = live_allocs(&server.snapshot(), "first")[0].clone();
    // Its client claims the volume.
    server
        .claim_csi_volume(CsiVolumeClaimRequest {
            volume_id: "db".into(),
            allocation_id: first.id.clone(),
            claim: CsiClaimMode::Write,
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: CsiAttachmentMode::FileSystem,
            ..Default::default()
        })
        .await
        .unwrap();

    server
        .register_job(job("second", "db"), None)
        .await
        .unwrap();
    wait_state(&server, "the second writer blocked", |s| {
        s.evals().iter().any(|e| {
            e.job_id == "second"
                && e.failed_tg_allocs.as_ref().is_some_and(|f| {
                    f["g"].constraint_filtered.as_ref().is_some_and(|c| {
                        c.contains_key("CSI volume db has exhausted its available writer claims")
                    })
                })
        })
    })
    .await;
    assert!(live_allocs(&server.snapshot(), "second").is_empty());

    // The first job stops; its client ends the allocation (and does not release the claim:
    // the watcher does).
    server
        .deregister_job("default", "first", false)
        .await
        .unwrap();
    wait_state(&server, "the first writer stopped", |s| {
        live_allocs(s, "first").is_empty()
    })
    .await;
    end_alloc(&server, &first.id).await;
    wait_state(&server, "the second writer placed", |s| {
        live_allocs(s, "second").len() == 1
    })
    .await;
    assert!(
        t.rpc
            .calls()
            .contains(&"controller unpublish db from storage-n1".to_string())
    );
}
