use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use drover_server::csi::*;
use drover_structs::{
    CsiAccessMode, CsiAttachmentMode, CsiControllerInfo, CsiInfo, CsiNodeInfo, CsiSnapshot,
    CsiSnapshotList, CsiVolume, CsiVolumeCapability, Node,
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{SECRETS_HEADER, header_secrets};
use crate::test_support::TestApi;

/// A plugin's controller as the servers reach it: records the secrets it is given.
#[derive(Default)]
struct FakeRpc {
    seen: Mutex<Vec<(String, BTreeMap<String, String>)>>,
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
    fn controller_create_snapshot(
        &self,
        req: ControllerCreateSnapshotRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshot> {
        self.seen
            .lock()
            .unwrap()
            .push((format!("create {}", req.name), req.secrets.clone()));
        Box::pin(async move {
            Ok(CsiSnapshot {
                id: format!("snap-{}", req.name),
                external_source_volume_id: req.external_source_volume_id,
                size_bytes: 4096,
                create_time: 1_700_000_000,
                is_ready: true,
                ..Default::default()
            })
        })
    }
    fn controller_delete_snapshot(
        &self,
        req: ControllerDeleteSnapshotRequest,
    ) -> CsiRpcFuture<'_, ()> {
        self.seen
            .lock()
            .unwrap()
            .push((format!("delete {}", req.snapshot_id), req.secrets.clone()));
        Box::pin(async { Ok(()) })
    }
    fn controller_list_snapshots(
        &self,
        req: ControllerListSnapshotsRequest,
    ) -> CsiRpcFuture<'_, CsiSnapshotList> {
        self.seen.lock().unwrap().push((
            format!("list {} {:?}", req.max_entries, req.starting_token),
            req.secrets.clone(),
        ));
        Box::pin(async {
            Ok(CsiSnapshotList {
                snapshots: vec![CsiSnapshot {
                    id: "snap-nightly".into(),
                    external_source_volume_id: "ext-db".into(),
                    is_ready: true,
                    ..Default::default()
                }],
                next_token: "next".into(),
            })
        })
    }
}

/// A server whose node n1 runs the `hostpath` plugin (controller with snapshots, node), and
/// volume `db` registered with a secret.
async fn start() -> (TestApi, Arc<FakeRpc>) {
    let api = TestApi::start().await;
    let rpc = Arc::new(FakeRpc::default());
    api.server.set_csi_client_rpc(rpc.clone());
    let info = |controller: bool| CsiInfo {
        plugin_id: "hostpath".into(),
        alloc_id: "plugin-alloc".into(),
        healthy: true,
        provider: "hostpath.csi.drover.dev".into(),
        requires_controller_plugin: true,
        controller_info: controller.then(|| CsiControllerInfo {
            supports_create_delete: true,
            supports_create_delete_snapshot: true,
            supports_list_snapshots: true,
            ..Default::default()
        }),
        node_info: (!controller).then(|| CsiNodeInfo {
            id: "storage-1".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let node = Node {
        id: "0d816e8c-19bd-2066-474e-6f7e52291a4c".into(),
        datacenter: "dc1".into(),
        name: "n1".into(),
        csi_node_plugins: Some(BTreeMap::from([("hostpath".to_string(), info(false))])),
        csi_controller_plugins: Some(BTreeMap::from([("hostpath".to_string(), info(true))])),
        ..Default::default()
    };
    api.server
        .register_node(node)
        .await
        .expect("node registers");
    let volume = CsiVolume {
        id: "db".into(),
        name: "db".into(),
        external_id: "ext-db".into(),
        plugin_id: "hostpath".into(),
        requested_capabilities: vec![CsiVolumeCapability {
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: CsiAttachmentMode::FileSystem,
        }],
        secrets: Some(BTreeMap::from([(
            "volume".to_string(),
            "v0lume-s3cr3t".to_string(),
        )])),
        ..Default::default()
    };
    api.server
        .register_csi_volumes("default", vec![volume])
        .await
        .expect("volume registers");
    (api, rpc)
}

/// A request with the CSI secrets header.
async fn call_with_secrets(
    api: &TestApi,
    method: Method,
    uri: &str,
    body: Option<Value>,
    secrets: &str,
) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(SECRETS_HEADER, secrets)
        .body(body.map(|b| Body::from(b.to_string())).unwrap_or_default())
        .expect("request");
    let response = api.router.clone().oneshot(request).await.expect("answer");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_create_answers_nomads_shape_without_secrets() {
    let (api, rpc) = start().await;
    let body = json!({"Snapshots": [{
        "SourceVolumeID": "db", "Name": "nightly",
        "Secrets": {"token": "r3quest-s3cr3t"}, "Parameters": {"a": "b"}
    }]});
    let (status, text) = call_with_secrets(
        &api,
        Method::PUT,
        "/v1/volumes/snapshot",
        Some(body),
        "token=h3ader,extra=x",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    let snap = &answer["Snapshots"][0];
    assert_eq!(snap["ID"], "snap-nightly");
    assert_eq!(snap["ExternalSourceVolumeID"], "ext-db");
    assert_eq!(snap["SourceVolumeID"], "db");
    assert_eq!(snap["PluginID"], "hostpath");
    assert_eq!(snap["SizeBytes"], 4096);
    assert_eq!(snap["CreateTime"], 1_700_000_000);
    assert_eq!(snap["IsReady"], true);
    assert_eq!(snap["Secrets"], Value::Null);
    assert!(answer["Index"].as_u64().is_some_and(|i| i > 0), "{answer}");
    assert!(
        !text.contains("s3cr3t") && !text.contains("h3ader"),
        "{text}"
    );
    // The plugin got the volume's secrets, the header's and the body's (which win).
    let seen = rpc.seen.lock().unwrap().clone();
    assert_eq!(seen[0].0, "create nightly");
    assert_eq!(
        seen[0].1,
        BTreeMap::from([
            ("extra".to_string(), "x".to_string()),
            ("token".to_string(), "r3quest-s3cr3t".to_string()),
            ("volume".to_string(), "v0lume-s3cr3t".to_string()),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_list_and_delete_take_query_and_secrets_header() {
    let (api, rpc) = start().await;
    let (status, text) = call_with_secrets(
        &api,
        Method::GET,
        "/v1/volumes/snapshot?plugin_id=hostpath&per_page=5&next_token=t1",
        None,
        "token=t",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["Snapshots"][0]["ID"], "snap-nightly");
    assert_eq!(answer["Snapshots"][0]["PluginID"], "hostpath");
    assert_eq!(answer["NextToken"], "next");
    let (status, text) = call_with_secrets(
        &api,
        Method::DELETE,
        "/v1/volumes/snapshot?plugin_id=hostpath&snapshot_id=snap-nightly",
        None,
        "token=t",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let token = BTreeMap::from([("token".to_string(), "t".to_string())]);
    assert_eq!(
        rpc.seen.lock().unwrap().clone(),
        vec![
            ("list 5 \"t1\"".to_string(), token.clone()),
            ("delete snap-nightly".to_string(), token),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_requests_without_what_they_need_get_400_with_a_reason() {
    let (api, rpc) = start().await;
    let r = api.get("/v1/volumes/snapshot").await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (StatusCode::BAD_REQUEST, "no such plugin")
    );
    let r = api
        .get("/v1/volumes/snapshot?plugin_id=hostpath&per_page=many")
        .await;
    assert_eq!(
        (r.status, r.text().as_str()),
        (StatusCode::BAD_REQUEST, "Invalid per_page: \"many\"")
    );
    let r = api
        .put(
            "/v1/volumes/snapshot",
            &json!({"Snapshots": [{"SourceVolumeID": "nope", "Name": "x"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.text(),
        "1 error occurred:\n\t* no such volume \"nope\"\n\n"
    );
    let r = api
        .call(
            Method::DELETE,
            "/v1/volumes/snapshot?plugin_id=other&snapshot_id=s",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.text(), "1 error occurred:\n\t* no such plugin\n\n");
    assert!(rpc.seen.lock().unwrap().is_empty());
}

#[test]
fn secrets_header_parses_like_nomad() {
    let mut headers = HeaderMap::new();
    assert!(header_secrets(&headers).is_empty());
    headers.insert(
        SECRETS_HEADER,
        HeaderValue::from_static("a=1,b=x=y,broken,c="),
    );
    assert_eq!(
        header_secrets(&headers),
        BTreeMap::from([
            ("a".to_string(), "1".to_string()),
            ("b".to_string(), "x=y".to_string()),
            ("c".to_string(), String::new()),
        ])
    );
}
