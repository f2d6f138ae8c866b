//! CSI volumes and plugins: `/v1/volumes`, `/v1/volume/csi/:id[/create|/delete|/detach]`,
//! `/v1/plugins` and `/v1/plugin/csi/:id`; snapshots at `/v1/volumes/snapshot` (`snapshot`).
//! Volume secrets and mount options (whose flags may hold credentials) are stored by the
//! servers but never answered here, as in Nomad.

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{delete, get, put};
use drover_state::{CsiVolumeFilter, Table};
use drover_structs::{CsiPluginListStub, CsiVolume, CsiVolumeListStub, VOLUME_TYPE_CSI};
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::body::decode_body;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions, blocking, parse_go_bool};
use crate::response::{QueryMeta, respond_json};

mod external;
mod snapshot;

/// The CSI routes, merged into the `/v1` router.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/volumes",
            get(volumes_list)
                .put(volumes_register)
                .post(volumes_register),
        )
        .route(
            "/v1/volume/csi/{id}",
            get(volume_get)
                .put(volume_register)
                .post(volume_register)
                .delete(volume_deregister),
        )
        .route(
            "/v1/volume/csi/{id}/create",
            put(volume_create).post(volume_create),
        )
        .route("/v1/volume/csi/{id}/delete", delete(volume_delete))
        .route(
            "/v1/volume/csi/{id}/detach",
            delete(volume_detach).put(volume_detach).post(volume_detach),
        )
        .route("/v1/plugins", get(plugins_list))
        .route("/v1/plugin/csi/{id}", get(plugin_get))
        .merge(snapshot::routes())
        .merge(external::routes())
}

/// Nomad's `CSIVolumeRegisterRequest` and `CSIVolumeCreateRequest` bodies.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VolumesRequest {
    #[serde(rename = "Volumes")]
    volumes: Vec<CsiVolume>,
}

/// Lists answer only for `?type=csi`; without a type Nomad answers an empty list.
fn wants_csi(params: &Params) -> bool {
    params.get("type").map(String::as_str) == Some(VOLUME_TYPE_CSI)
}

/// The answer of a write that returns nothing but its index.
fn write_answer(s: &AppState, index: u64, pretty: bool) -> Result<Response, ApiError> {
    let meta = QueryMeta::new(s, index);
    let body = json!({"Index": meta.index, "LastContact": 0, "KnownLeader": meta.known_leader});
    respond_json(&body, Some(meta), pretty)
}

/// `GET /v1/volumes?type=csi[&plugin_id=][&node_id=][&prefix=]`: volume stubs.
pub(crate) async fn volumes_list(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    if !wants_csi(&params) {
        let meta = QueryMeta::new(&s, s.server.snapshot().table_index(Table::CsiVolumes));
        return respond_json(&Vec::<CsiVolumeListStub>::new(), Some(meta), opts.pretty);
    }
    let plugin_id = params.get("plugin_id").filter(|p| !p.is_empty());
    let node_id = params.get("node_id").filter(|n| !n.is_empty());
    let (meta, stubs) = blocking(&s, &[Table::CsiVolumes], &opts, |snap| {
        let filter = CsiVolumeFilter {
            namespace: opts.namespace.as_deref(),
            prefix: &opts.prefix,
            plugin_id: plugin_id.map(String::as_str),
            node_id: node_id.map(String::as_str),
        };
        let stubs: Vec<CsiVolumeListStub> =
            snap.csi_volumes(&filter).iter().map(|v| v.stub()).collect();
        (snap.table_index(Table::CsiVolumes), stubs)
    })
    .await;
    respond_json(&stubs, Some(meta), opts.pretty)
}

async fn register(
    s: &AppState,
    params: &Params,
    body: &Bytes,
    path_id: Option<&str>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(params)?;
    let mut request: VolumesRequest = decode_body(body, "request")?;
    // A single volume without an id takes the one in the path.
    if let (Some(id), [vol]) = (path_id, request.volumes.as_mut_slice())
        && vol.id.is_empty()
    {
        vol.id = id.to_string();
    }
    let index = s
        .server
        .register_csi_volumes(opts.write_namespace(), request.volumes)
        .await?;
    write_answer(s, index, opts.pretty)
}

/// `PUT|POST /v1/volumes`: `{"Volumes": [...]}` registers volumes.
pub(crate) async fn volumes_register(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    register(&s, &params, &body, None).await
}

/// `PUT|POST /v1/volume/csi/:id`: as `PUT /v1/volumes`.
pub(crate) async fn volume_register(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    register(&s, &params, &body, Some(&id)).await
}

/// `GET /v1/volume/csi/:id`: the volume with its plugin's health and its allocations, without
/// secrets or mount options.
pub(crate) async fn volume_get(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let ns = opts.write_namespace().to_string();
    let (meta, vol) = blocking(&s, &[Table::CsiVolumes], &opts, |snap| {
        (
            snap.table_index(Table::CsiVolumes),
            snap.csi_volume_full(&ns, &id),
        )
    })
    .await;
    let vol = vol.ok_or_else(|| ApiError::not_found("volume not found").with_meta(meta))?;
    respond_json(&vol.sanitized(), Some(meta), opts.pretty)
}

/// `DELETE /v1/volume/csi/:id[?force=true]`: deregisters the volume.
pub(crate) async fn volume_deregister(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let force = match params.get("force").map(String::as_str) {
        None | Some("") => false,
        Some(raw) => {
            parse_go_bool(raw).ok_or_else(|| ApiError::bad_request("invalid force value"))?
        }
    };
    let index = s
        .server
        .deregister_csi_volume(opts.write_namespace(), &id, force)
        .await?;
    write_answer(&s, index, opts.pretty)
}

/// `PUT|POST /v1/volume/csi/:id/create`: creates volumes through their plugin's controller and
/// registers them; answers `{"Volumes": [...]}` as registered.
pub(crate) async fn volume_create(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let mut request: VolumesRequest = decode_body(&body, "request")?;
    if let [vol] = request.volumes.as_mut_slice()
        && vol.id.is_empty()
    {
        vol.id = id;
    }
    let (volumes, index) = s
        .server
        .create_csi_volumes(opts.write_namespace(), request.volumes)
        .await?;
    let meta = QueryMeta::new(&s, index);
    let body = json!({
        "Volumes": volumes,
        "Index": meta.index,
        "LastContact": 0,
        "KnownLeader": meta.known_leader,
    });
    respond_json(&body, Some(meta), opts.pretty)
}

/// Nomad's `?secrets=key=value,key2=value2` of a volume delete.
fn parse_secrets(raw: &str) -> Result<BTreeMap<String, String>, ApiError> {
    raw.split(',')
        .filter(|kv| !kv.trim().is_empty())
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.to_string()))
                .ok_or_else(|| {
                    ApiError::bad_request(format!("invalid secret {kv:?}: expected key=value"))
                })
        })
        .collect()
}

/// `DELETE /v1/volume/csi/:id/delete`: deletes the volume through its plugin's controller and
/// deregisters it.
pub(crate) async fn volume_delete(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let secrets = parse_secrets(params.get("secrets").map(String::as_str).unwrap_or(""))?;
    let index = s
        .server
        .delete_csi_volume(opts.write_namespace(), &id, secrets)
        .await?;
    write_answer(&s, index, opts.pretty)
}

/// `DELETE /v1/volume/csi/:id/detach?node=ID`: releases the volume's claims of ended
/// allocations on that node.
pub(crate) async fn volume_detach(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let node = params.get("node").filter(|n| !n.is_empty());
    let Some(node) = node else {
        return Err(ApiError::bad_request("detach requires node ID"));
    };
    let index = s
        .server
        .detach_csi_volume(opts.write_namespace(), &id, node)
        .await?;
    write_answer(&s, index, opts.pretty)
}

/// `GET /v1/plugins?type=csi`: plugin stubs.
pub(crate) async fn plugins_list(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    if !wants_csi(&params) {
        let meta = QueryMeta::new(&s, s.server.snapshot().table_index(Table::CsiPlugins));
        return respond_json(&Vec::<CsiPluginListStub>::new(), Some(meta), opts.pretty);
    }
    let (meta, stubs) = blocking(&s, &[Table::CsiPlugins], &opts, |snap| {
        let stubs: Vec<CsiPluginListStub> = snap
            .csi_plugins()
            .iter()
            .filter(|p| p.id.starts_with(&opts.prefix))
            .map(|p| p.stub())
            .collect();
        (snap.table_index(Table::CsiPlugins), stubs)
    })
    .await;
    respond_json(&stubs, Some(meta), opts.pretty)
}

/// `GET /v1/plugin/csi/:id`: the plugin with its instances and their allocations.
pub(crate) async fn plugin_get(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let (meta, plugin) = blocking(&s, &[Table::CsiPlugins], &opts, |snap| {
        (
            snap.table_index(Table::CsiPlugins),
            snap.csi_plugin_full(&id),
        )
    })
    .await;
    let plugin = plugin.ok_or_else(|| ApiError::not_found("plugin not found").with_meta(meta))?;
    respond_json(&plugin, Some(meta), opts.pretty)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use axum::http::{Method, StatusCode};
    use drover_structs::{CsiControllerInfo, CsiInfo, CsiNodeInfo, Node};
    use serde_json::json;

    use crate::test_support::TestApi;

    fn register_body(volume: serde_json::Value) -> serde_json::Value {
        json!({ "Volumes": [volume] })
    }

    /// Registers a node whose fingerprint reports a healthy `hostpath` node plugin.
    async fn register_plugin_node(api: &TestApi, with_controller: bool) {
        let info = |controller: bool| CsiInfo {
            plugin_id: "hostpath".into(),
            alloc_id: "plugin-alloc".into(),
            healthy: true,
            provider: "hostpath.csi.k8s.io".into(),
            provider_version: "1.9".into(),
            requires_controller_plugin: with_controller,
            controller_info: controller.then(|| CsiControllerInfo {
                supports_create_delete: true,
                ..Default::default()
            }),
            node_info: (!controller).then(|| CsiNodeInfo {
                id: "storage-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut controllers = BTreeMap::new();
        if with_controller {
            controllers.insert("hostpath".to_string(), info(true));
        }
        let node = Node {
            id: "0d816e8c-19bd-2066-474e-6f7e52291a4c".into(),
            datacenter: "dc1".into(),
            name: "n1".into(),
            csi_node_plugins: Some(BTreeMap::from([("hostpath".to_string(), info(false))])),
            csi_controller_plugins: Some(controllers),
            ..Default::default()
        };
        api.server
            .register_node(node)
            .await
            .expect("node registers");
    }

    fn volume(id: &str) -> serde_json::Value {
        json!({
            "ID": id,
            "Name": "database",
            "PluginID": "hostpath",
            "RequestedCapabilities": [
                {"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}
            ],
            "MountOptions": {"FSType": "ext4", "MountFlags": ["password=m0unt-s3cr3t"]},
            "Secrets": {"token": "v0lume-s3cr3t"},
            "Parameters": {"a": "b"}
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn volumes_register_read_list_and_deregister_without_secrets() {
        let api = TestApi::start().await;
        register_plugin_node(&api, false).await;
        let r = api.get("/v1/volumes").await;
        assert_eq!((r.status, r.json()), (StatusCode::OK, json!([])));

        let r = api.put("/v1/volumes", &register_body(volume("db"))).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let written = r.index();

        let r = api.get("/v1/volume/csi/db").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.index(), written);
        let v = r.json();
        assert_eq!(v["ID"], "db");
        assert_eq!(v["Namespace"], "default");
        assert_eq!(v["Schedulable"], true);
        assert_eq!(v["Provider"], "hostpath.csi.k8s.io");
        assert_eq!(v["NodesHealthy"], 1);
        assert_eq!(v["Allocations"], json!([]));
        assert_eq!(v["Secrets"], serde_json::Value::Null);
        assert_eq!(v["MountOptions"], serde_json::Value::Null);
        assert_eq!(v["Parameters"]["a"], "b");
        assert!(!r.text().contains("s3cr3t"), "{}", r.text());

        let list = api.get("/v1/volumes?type=csi&plugin_id=hostpath").await;
        assert_eq!(list.json()[0]["ID"], "db");
        assert_eq!(list.json()[0]["CurrentWriters"], 0);
        assert!(!list.text().contains("s3cr3t"));
        let other = api.get("/v1/volumes?type=csi&plugin_id=other").await;
        assert_eq!(other.json(), json!([]));
        let by_node = api
            .get("/v1/volumes?type=csi&node_id=0d816e8c-19bd-2066-474e-6f7e52291a4c")
            .await;
        assert_eq!(by_node.json(), json!([]), "no allocation uses it there");

        let plugins = api.get("/v1/plugins?type=csi").await;
        assert_eq!(plugins.json()[0]["ID"], "hostpath");
        assert_eq!(plugins.json()[0]["NodesHealthy"], 1);
        let plugin = api.get("/v1/plugin/csi/hostpath").await;
        assert_eq!(plugin.status, StatusCode::OK);
        assert_eq!(
            plugin.json()["Nodes"]["0d816e8c-19bd-2066-474e-6f7e52291a4c"]["NodeInfo"]["ID"],
            "storage-1"
        );
        assert_eq!(plugin.json()["Allocations"], json!([]));
        let r = api.get("/v1/plugin/csi/nope").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "plugin not found")
        );

        let r = api.call(Method::DELETE, "/v1/volume/csi/db", None).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let r = api.get("/v1/volume/csi/db").await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "volume not found")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_requests_get_4xx_with_a_reason() {
        let api = TestApi::start().await;
        let mut bad = volume("db");
        bad["RequestedCapabilities"][0]["AccessMode"] = json!("read-write");
        let r = api.put("/v1/volumes", &register_body(bad)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text().starts_with(
                "failed to decode request: Volumes[0].RequestedCapabilities[0].AccessMode: unknown variant"
            ),
            "{}",
            r.text()
        );
        let r = api.put("/v1/volumes", &register_body(volume("db"))).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (
                StatusCode::BAD_REQUEST,
                "no CSI plugin named: hostpath could be found"
            )
        );
        // The path's id fills a volume without one.
        register_plugin_node(&api, false).await;
        let mut unnamed = volume("");
        unnamed.as_object_mut().unwrap().remove("ID");
        let r = api
            .put("/v1/volume/csi/from-path", &register_body(unnamed))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(
            api.get("/v1/volume/csi/from-path").await.status,
            StatusCode::OK
        );

        let r = api
            .call(Method::DELETE, "/v1/volume/csi/from-path/detach", None)
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "detach requires node ID")
        );
        let r = api
            .call(Method::DELETE, "/v1/volume/csi/from-path?force=maybe", None)
            .await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "invalid force value")
        );
        let r = api.call(Method::DELETE, "/v1/volume/csi/nope", None).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::NOT_FOUND, "volume not found: nope")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn controller_work_is_refused_until_the_servers_can_reach_plugins() {
        let api = TestApi::start().await;
        register_plugin_node(&api, true).await;
        let r = api
            .put("/v1/volume/csi/db/create", &register_body(volume("db")))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(
            r.text().starts_with("not supported: no controller RPC"),
            "{}",
            r.text()
        );
        let r = api
            .call(Method::DELETE, "/v1/volume/csi/db/delete", None)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    }

    #[test]
    fn delete_secrets_parse_as_key_value_pairs() {
        let s = super::parse_secrets("a=1,b=x=y").unwrap();
        assert_eq!((s["a"].as_str(), s["b"].as_str()), ("1", "x=y"));
        assert!(super::parse_secrets("nokey").is_err());
        assert!(super::parse_secrets("").unwrap().is_empty());
    }
}
