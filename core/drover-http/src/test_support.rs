//! A real server in a temporary directory behind the router, and requests sent to it with
//! `tower::ServiceExt::oneshot`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, Response, StatusCode};
use drover_server::{Server, ServerConfig};
use drover_structs::{DriverInfo, Node};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::{AgentInfo, NodeClient, router};

/// A directory removed when dropped.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "drover-http-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn agent_info() -> AgentInfo {
    AgentInfo {
        name: "test-agent".into(),
        region: "global".into(),
        datacenter: "dc1".into(),
        http_addr: "127.0.0.1:4646".parse().expect("addr"),
        rpc_addr: "127.0.0.1:4647".parse().expect("addr"),
        server: true,
        client: false,
        version: "0.1.0".into(),
        config_json: json!({"Region": "global", "Datacenter": "dc1"}),
        prometheus_metrics: true,
        enable_debug: true,
    }
}

/// A client whose allocations live under `<data_dir>/alloc/<id>` when that directory exists.
pub(crate) struct DirClient {
    pub node_id: String,
    pub data_dir: PathBuf,
}

impl NodeClient for DirClient {
    fn node_id(&self) -> String {
        self.node_id.clone()
    }

    fn alloc_dir(&self, alloc_id: &str) -> Option<PathBuf> {
        let dir = self.data_dir.join("alloc").join(alloc_id);
        dir.is_dir().then_some(dir)
    }

    fn stats(&self) -> Value {
        json!({"Uptime": 42, "CPU": []})
    }
}

pub(crate) struct TestApi {
    pub router: Router,
    pub server: Server,
    /// Kept for its drop: the server's data goes with the test.
    _dir: TempDir,
}

impl Drop for TestApi {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}

pub(crate) struct TestResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl TestResponse {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ascii header").to_string())
    }

    /// `X-Nomad-Index`, which must be present and positive.
    pub fn index(&self) -> u64 {
        let index: u64 = self
            .header("X-Nomad-Index")
            .expect("X-Nomad-Index header")
            .parse()
            .expect("numeric index");
        assert!(index > 0, "X-Nomad-Index must never be 0");
        index
    }
}

impl TestApi {
    pub async fn start() -> Self {
        Self::start_with(|_| None).await
    }

    /// Starts with the client `make_client` builds from the test's data dir.
    pub async fn start_with(
        make_client: impl FnOnce(&Path) -> Option<Arc<dyn NodeClient>>,
    ) -> Self {
        let dir = TempDir::new("api");
        let mut config = ServerConfig::new(dir.0.join("server"));
        config.num_schedulers = 1;
        let server = Server::start(config).await.expect("server starts");
        server
            .wait_for_leadership(Duration::from_secs(20))
            .await
            .expect("server leads");
        let client = make_client(&dir.0);
        let mut agent = agent_info();
        agent.client = client.is_some();
        let router = router(server.clone(), client, agent, Arc::new(crate::NoTunnels));
        TestApi {
            router,
            server,
            _dir: dir,
        }
    }

    /// The response as it comes, its body not yet read (for streams).
    pub async fn raw(&self, method: Method, uri: &str, body: Option<&str>) -> Response<Body> {
        self.raw_bytes(method, uri, body.map(|b| b.as_bytes().to_vec()))
            .await
    }

    /// As [`TestApi::raw`], with a body that need not be text (snapshot archives).
    pub async fn raw_bytes(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
    ) -> Response<Body> {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(body.map(Body::from).unwrap_or_default())
            .expect("request");
        self.router
            .clone()
            .oneshot(request)
            .await
            .expect("router is infallible")
    }

    pub async fn call(&self, method: Method, uri: &str, body: Option<&str>) -> TestResponse {
        self.call_bytes(method, uri, body.map(|b| b.as_bytes().to_vec()))
            .await
    }

    /// As [`TestApi::call`], with a body that need not be text.
    pub async fn call_bytes(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
    ) -> TestResponse {
        let response = self.raw_bytes(method, uri, body).await;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec();
        TestResponse {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, uri: &str) -> TestResponse {
        self.call(Method::GET, uri, None).await
    }

    pub async fn put(&self, uri: &str, body: &Value) -> TestResponse {
        self.call(Method::PUT, uri, Some(&body.to_string())).await
    }

    pub async fn delete(&self, uri: &str) -> TestResponse {
        self.call(Method::DELETE, uri, None).await
    }

    /// Registers `job` through the API and returns the response body.
    pub async fn register(&self, job: Value) -> Value {
        let r = self.put("/v1/jobs", &json!({ "Job": job })).await;
        assert_eq!(r.status, StatusCode::OK, "register: {}", r.text());
        r.json()
    }

    /// Registers a ready node able to run `raw_exec` tasks; returns its id.
    pub async fn register_node(&self, id: &str) -> String {
        let mut node = Node {
            id: id.into(),
            secret_id: "node-secret-do-not-leak".into(),
            datacenter: "dc1".into(),
            name: format!("node-{id}"),
            scheduling_eligibility: drover_structs::NODE_ELIGIBLE.into(),
            ..Default::default()
        };
        node.attributes.insert("kernel.name".into(), "linux".into());
        node.attributes.insert("driver.raw_exec".into(), "1".into());
        node.attributes
            .insert("unique.network.ip-address".into(), "127.0.0.1".into());
        node.drivers.insert(
            "raw_exec".into(),
            DriverInfo {
                detected: true,
                healthy: true,
                ..Default::default()
            },
        );
        node.node_resources.cpu.cpu_shares = 8000;
        node.node_resources.memory.memory_mb = 16_384;
        node.node_resources.disk.disk_mb = 100_000;
        node.compute_class();
        self.server
            .register_node(node)
            .await
            .expect("node registers");
        id.to_string()
    }
}

/// A small valid service job in API JSON shape.
pub(crate) fn web_job(id: &str) -> Value {
    json!({
        "ID": id,
        "Datacenters": ["dc1"],
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
    })
}

/// A client with a data dir under the test's dir; returns the API and the data dir.
pub(crate) async fn api_with_client(node_id: &str) -> (TestApi, PathBuf) {
    let node_id = node_id.to_string();
    let mut data_dir = PathBuf::new();
    let api = TestApi::start_with(|dir| {
        data_dir = dir.join("client");
        Some(Arc::new(DirClient {
            node_id,
            data_dir: data_dir.clone(),
        }) as Arc<dyn NodeClient>)
    })
    .await;
    (api, data_dir)
}
