use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use drover_structs::*;

use crate::ServerError;
use crate::csi::*;
use crate::test_server::{LeadingServer, start_leading};

/// Records every call; answers as a plugin with two snapshots would.
#[derive(Default)]
struct FakeRpc {
    calls: Mutex<Vec<String>>,
    /// The secrets of the last call.
    secrets: Mutex<BTreeMap<String, String>>,
}

impl FakeRpc {
    fn record(&self, call: String, secrets: &BTreeMap<String, String>) {
        self.calls.lock().unwrap().push(call);
        *self.secrets.lock().unwrap() = secrets.clone();
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
    fn secrets(&self) -> BTreeMap<String, String> {
        self.secrets.lock().unwrap().clone()
    }
}

fn nope<T: Send + 'static>() -> CsiRpcFuture<'static, T> {
    Box::pin(async { Err("not in these tests".to_string()) })
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
        req: ControllerCreateVolumeRequest,
    ) -> CsiRpcFuture<'_, ControllerCreateVolumeResponse> {
        self.record(
            format!(
                "create volume {} snapshot {:?} clone {:?}",
                req.name, req.snapshot_id, req.clone_id
            ),
            &req.secrets,
        );
        Box::pin(async move {
            Ok(ControllerCreateVolumeResponse {
                external_volume_id: format!("ext-{}", req.name),
                ..Default::default()
            })
        })
    }
    fn controller_delete_volume(
        &self,
        _req: ControllerDeleteVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        nope()
    }
    fn controller_publish_volume(
        &self,
        _req: ControllerPublishVolumeRequest,
    ) -> CsiRpcFuture<'_, BTreeMap<String, String>> {
        nope()
    }
    fn controller_unpublish_volume(
        &self,
        _req: ControllerUnpublishVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        nope()
    }
    fn node_detach_volume(&self, _req: NodeDetachVolumeRequest) -> CsiRpcFuture<'_, ()> {
        nope()
    }
    fn controller_create_snapshot(
        &self,
        req: ControllerCreateSnapshotRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshot> {
        self.record(
            format!(
                "create {} of {} on {} params {:?}",
                req.name, req.external_source_volume_id, req.controller_node_id, req.parameters
            ),
            &req.secrets,
        );
        Box::pin(async move {
            Ok(CsiSnapshot {
                id: format!("snap-{}", req.name),
                external_source_volume_id: req.external_source_volume_id,
                size_bytes: 1 << 20,
                create_time: 1_700_000_000,
                is_ready: true,
                // A plugin's answer never carries these; make sure they are not passed on.
                secrets: Some(BTreeMap::from([("leak".to_string(), "x".to_string())])),
                ..Default::default()
            })
        })
    }
    fn controller_delete_snapshot(
        &self,
        req: ControllerDeleteSnapshotRequest,
    ) -> CsiRpcFuture<'_, ()> {
        self.record(format!("delete {}", req.snapshot_id), &req.secrets);
        Box::pin(async { Ok(()) })
    }
    fn controller_list_snapshots(
        &self,
        req: ControllerListSnapshotsRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshotList> {
        self.record(
            format!("list max {} from {:?}", req.max_entries, req.starting_token),
            &req.secrets,
        );
        Box::pin(async {
            let snap = |id: &str| CsiSnapshot {
                id: id.into(),
                external_source_volume_id: "ext-db".into(),
                is_ready: true,
                ..Default::default()
            };
            Ok(CsiSnapshotList {
                // More than asked for: the server keeps to the page size.
                snapshots: vec![snap("s1"), snap("s2")],
                next_token: "2".into(),
            })
        })
    }
}

fn controller_info(snapshots: bool) -> CsiInfo {
    CsiInfo {
        plugin_id: "hostpath".into(),
        alloc_id: "plugin-alloc".into(),
        healthy: true,
        provider: "hostpath.csi.drover.dev".into(),
        requires_controller_plugin: true,
        controller_info: Some(CsiControllerInfo {
            supports_create_delete: true,
            supports_create_delete_snapshot: snapshots,
            supports_list_snapshots: snapshots,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Node n1 runs the plugin's controller and node; volume `db` (external id `ext-db`, with
/// secrets) is registered. The client RPC is `rpc`, or without it one that has only the
/// trait's default snapshot calls.
async fn start(snapshots: bool, rpc: Option<Arc<FakeRpc>>) -> LeadingServer {
    let server = start_leading().await;
    match rpc {
        Some(rpc) => server.set_csi_client_rpc(rpc),
        None => server.set_csi_client_rpc(Arc::new(NoSnapshots)),
    }
    let node_info = CsiInfo {
        node_info: Some(CsiNodeInfo {
            id: "storage-1".into(),
            ..Default::default()
        }),
        controller_info: None,
        ..controller_info(snapshots)
    };
    let node = Node {
        id: "n1".into(),
        datacenter: "dc1".into(),
        name: "n1".into(),
        csi_node_plugins: Some(BTreeMap::from([("hostpath".to_string(), node_info)])),
        csi_controller_plugins: Some(BTreeMap::from([(
            "hostpath".to_string(),
            controller_info(snapshots),
        )])),
        ..Default::default()
    };
    server.register_node(node).await.unwrap();
    let volume = CsiVolume {
        id: "db".into(),
        name: "db".into(),
        external_id: "ext-db".into(),
        plugin_id: "hostpath".into(),
        requested_capabilities: vec![CsiVolumeCapability {
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: CsiAttachmentMode::FileSystem,
        }],
        secrets: Some(BTreeMap::from([
            ("token".to_string(), "volume-token".to_string()),
            ("region".to_string(), "eu".to_string()),
        ])),
        ..Default::default()
    };
    server
        .register_csi_volumes("default", vec![volume])
        .await
        .unwrap();
    server
}

/// A client RPC that only validates volumes: its snapshot calls are the trait's defaults.
struct NoSnapshots;

impl CsiClientRpc for NoSnapshots {
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
        nope()
    }
    fn controller_delete_volume(
        &self,
        _req: ControllerDeleteVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        nope()
    }
    fn controller_publish_volume(
        &self,
        _req: ControllerPublishVolumeRequest,
    ) -> CsiRpcFuture<'_, BTreeMap<String, String>> {
        nope()
    }
    fn controller_unpublish_volume(
        &self,
        _req: ControllerUnpublishVolumeRequest,
    ) -> CsiRpcFuture<'_, ()> {
        nope()
    }
    fn node_detach_volume(&self, _req: NodeDetachVolumeRequest) -> CsiRpcFuture<'_, ()> {
        nope()
    }
}

fn snapshot_of(volume: &str, name: &str) -> CsiSnapshot {
    CsiSnapshot {
        source_volume_id: volume.into(),
        name: name.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_create_asks_the_controller_with_merged_secrets_and_answers_none() {
    let rpc = Arc::new(FakeRpc::default());
    let server = start(true, Some(rpc.clone())).await;
    let request = CsiSnapshot {
        secrets: Some(BTreeMap::from([(
            "token".to_string(),
            "request-token".to_string(),
        )])),
        parameters: Some(BTreeMap::from([("kind".to_string(), "full".to_string())])),
        ..snapshot_of("db", "nightly")
    };
    let (made, index) = server
        .create_csi_snapshots("default", vec![request])
        .await
        .unwrap();
    assert!(index > 0);
    assert_eq!(
        rpc.calls(),
        vec![r#"create nightly of ext-db on n1 params {"kind": "full"}"#.to_string()]
    );
    // The volume's secrets, the request's overriding them.
    assert_eq!(
        rpc.secrets(),
        BTreeMap::from([
            ("region".to_string(), "eu".to_string()),
            ("token".to_string(), "request-token".to_string()),
        ])
    );
    assert_eq!(made.len(), 1);
    let snap = &made[0];
    assert_eq!(snap.id, "snap-nightly");
    assert_eq!(snap.external_source_volume_id, "ext-db");
    assert_eq!(snap.source_volume_id, "db");
    assert_eq!(snap.plugin_id, "hostpath");
    assert_eq!(
        (snap.size_bytes, snap.create_time),
        (1 << 20, 1_700_000_000)
    );
    assert!(snap.is_ready);
    assert_eq!(snap.secrets, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_of_an_unknown_volume_or_plugin_is_refused_with_every_reason() {
    let rpc = Arc::new(FakeRpc::default());
    let server = start(true, Some(rpc.clone())).await;
    let e = server
        .create_csi_snapshots(
            "default",
            vec![
                snapshot_of("nope", "a"),
                CsiSnapshot {
                    plugin_id: "other".into(),
                    ..snapshot_of("db", "b")
                },
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ServerError::BadRequest(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "2 errors occurred:\n\t* no such volume \"nope\"\n\t* no such plugin \"other\"\n\n"
    );
    assert!(rpc.calls().is_empty());
    let e = server
        .create_csi_snapshots("default", vec![])
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "missing snapshot definition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_without_snapshots_are_refused_before_any_call() {
    let rpc = Arc::new(FakeRpc::default());
    let server = start(false, Some(rpc.clone())).await;
    let e = server
        .create_csi_snapshots("default", vec![snapshot_of("db", "a")])
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "1 error occurred:\n\t* plugin \"hostpath\" does not support snapshot\n\n"
    );
    let e = server
        .delete_csi_snapshots(vec![CsiSnapshot {
            id: "s1".into(),
            plugin_id: "hostpath".into(),
            ..Default::default()
        }])
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "1 error occurred:\n\t* plugin does not support snapshot\n\n"
    );
    let e = server
        .list_csi_snapshots("hostpath", 0, "", BTreeMap::new())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "plugin does not support listing snapshots");
    let e = server
        .list_csi_snapshots("", 0, "", BTreeMap::new())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "no such plugin");
    assert!(rpc.calls().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_delete_passes_its_secrets_to_the_controller() {
    let rpc = Arc::new(FakeRpc::default());
    let server = start(true, Some(rpc.clone())).await;
    let secrets = BTreeMap::from([("token".to_string(), "t".to_string())]);
    server
        .delete_csi_snapshots(vec![CsiSnapshot {
            id: "s1".into(),
            plugin_id: "hostpath".into(),
            secrets: Some(secrets.clone()),
            ..Default::default()
        }])
        .await
        .unwrap();
    assert_eq!(rpc.calls(), vec!["delete s1".to_string()]);
    assert_eq!(rpc.secrets(), secrets);
    let e = server
        .delete_csi_snapshots(vec![CsiSnapshot {
            plugin_id: "hostpath".into(),
            ..Default::default()
        }])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("missing snapshot ID"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_list_keeps_to_the_page_and_names_the_plugin() {
    let rpc = Arc::new(FakeRpc::default());
    let server = start(true, Some(rpc.clone())).await;
    let secrets = BTreeMap::from([("token".to_string(), "t".to_string())]);
    let (list, _) = server
        .list_csi_snapshots("hostpath", 1, "0", secrets.clone())
        .await
        .unwrap();
    assert_eq!(rpc.calls(), vec![r#"list max 1 from "0""#.to_string()]);
    assert_eq!(rpc.secrets(), secrets);
    assert_eq!(list.snapshots.len(), 1);
    assert_eq!(list.snapshots[0].id, "s1");
    assert_eq!(list.snapshots[0].plugin_id, "hostpath");
    assert_eq!(list.next_token, "2");
    let (all, _) = server
        .list_csi_snapshots("hostpath", 0, "", BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(all.snapshots.len(), 2);
    let e = server
        .list_csi_snapshots("hostpath", -1, "", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(matches!(e, ServerError::BadRequest(_)), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_snapshot_calls_says_not_supported() {
    let server = start(true, None).await;
    let e = server
        .create_csi_snapshots("default", vec![snapshot_of("db", "a")])
        .await
        .unwrap_err();
    assert!(matches!(e, ServerError::Internal(_)), "{e:?}");
    assert!(
        e.to_string().contains(
            "could not create snapshot: CSI controller of plugin \"hostpath\" failed to create \
             the snapshot: not supported: this agent cannot ask CSI plugin \"hostpath\" to \
             create a snapshot"
        ),
        "{e}"
    );
}

fn volume_from(id: &str, snapshot_id: &str, clone_id: &str) -> CsiVolume {
    CsiVolume {
        id: id.into(),
        name: id.into(),
        plugin_id: "hostpath".into(),
        snapshot_id: snapshot_id.into(),
        clone_id: clone_id.into(),
        requested_capabilities: vec![CsiVolumeCapability {
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: CsiAttachmentMode::FileSystem,
        }],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_from_snapshots_or_clones_need_a_plugin_that_advertises_them() {
    let rpc = Arc::new(FakeRpc::default());
    let server = start(false, Some(rpc.clone())).await;
    let e = server
        .create_csi_volumes("default", vec![volume_from("restored", "snap-1", "")])
        .await
        .unwrap_err();
    assert!(matches!(e, ServerError::BadRequest(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "plugin \"hostpath\" does not support snapshots: cannot create volume \"restored\" \
         from snapshot \"snap-1\""
    );
    let e = server
        .create_csi_volumes("default", vec![volume_from("copy", "", "db")])
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "plugin \"hostpath\" does not support cloning: cannot create volume \"copy\" from \
         volume \"db\""
    );
    assert!(rpc.calls().is_empty(), "{:?}", rpc.calls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_from_a_snapshot_names_it_to_the_controller() {
    let rpc = Arc::new(FakeRpc::default());
    let server = start(true, Some(rpc.clone())).await;
    let (made, _) = server
        .create_csi_volumes("default", vec![volume_from("restored", "snap-1", "")])
        .await
        .unwrap();
    assert_eq!(made[0].external_id, "ext-restored");
    assert_eq!(made[0].snapshot_id, "snap-1");
    assert_eq!(
        rpc.calls(),
        vec![r#"create volume restored snapshot "snap-1" clone """#.to_string()]
    );
}
