//! The client: registers this node with the servers, heartbeats, watches the node's
//! allocations, runs them, and reports their status back in batches.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use drover_abi::{Driver, HealthState, TaskHandle};
use drover_structs::time::{format_rfc3339_nanos, now_nanos};
use drover_structs::*;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::alloc_control::{AllocControl, AllocControlError};
use crate::alloc_runner::{self, AllocRunnerHandle, RunnerEnv};
use crate::csi::{CsiManager, ServerCsi};
use crate::heartbeat_stop::HeartbeatClock;
use crate::node_meta::{MetaChanges, NodeMetaError, NodeMetaView};
use crate::state_db::ClientStateDb;
use crate::taskenv::EnvDenylist;

mod alloc_sync;
mod heartbeat;
mod telemetry;

use alloc_sync::{sync_updates, watch_allocs};
use heartbeat::{RunnerStops, register_and_heartbeat};

/// How the client reaches the servers. In the dev agent this is the server itself, in-process;
/// a networked client implements it over RPC.
pub trait ServerConn: Send + Sync + 'static {
    /// Registers (or re-registers) the node; returns the heartbeat TTL.
    fn register_node(&self, node: Node) -> impl Future<Output = Result<Duration, String>> + Send;
    /// Heartbeats; returns the TTL to heartbeat within.
    fn heartbeat(&self, node_id: &str) -> impl Future<Output = Result<Duration, String>> + Send;
    /// The node's allocations once their index passes `min_index`, or after `wait`.
    fn node_allocs(
        &self,
        node_id: &str,
        min_index: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<(Vec<Arc<Allocation>>, u64), String>> + Send;
    fn update_allocs(
        &self,
        updates: Vec<AllocClientUpdate>,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// Claims a CSI volume for an allocation of this node (Nomad's `CSIVolume.Claim`).
    fn claim_csi_volume(
        &self,
        request: drover_structs::csi::CsiVolumeClaimRequest,
    ) -> impl Future<Output = Result<drover_structs::csi::CsiVolumeClaimResponse, String>> + Send
    {
        let _ = request;
        async { Err("this server connection cannot claim CSI volumes".to_string()) }
    }
    /// Releases an allocation's claim once this node unmounted the volume (Nomad's
    /// `CSIVolume.Unpublish`).
    fn unpublish_csi_volume(
        &self,
        namespace: &str,
        volume_id: &str,
        claim: drover_structs::csi::CsiVolumeClaim,
    ) -> impl Future<Output = Result<(), String>> + Send {
        let _ = (namespace, volume_id, claim);
        async { Err("this server connection cannot release CSI claims".to_string()) }
    }
    /// A mesh certificate for the identity of task `task` of allocation `alloc_id` (of this
    /// node).
    fn sign_mesh_leaf(
        &self,
        node_id: &str,
        alloc_id: &str,
        task: &str,
    ) -> impl Future<Output = Result<drover_structs::mesh::MeshLeaf, String>> + Send {
        let _ = (node_id, alloc_id, task);
        async { Err("this server connection has no service mesh".to_string()) }
    }
    /// What the proxies of `namespace` need: intentions and where services' proxies listen.
    fn mesh_view(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<drover_structs::mesh::MeshView, String>> + Send {
        let _ = namespace;
        async { Err("this server connection has no service mesh".to_string()) }
    }
    /// The native service registrations of `namespace` (of service `name` only, when given),
    /// for templates.
    fn service_registrations(
        &self,
        namespace: &str,
        name: Option<&str>,
    ) -> impl Future<Output = Result<Vec<drover_structs::ServiceRegistration>, String>> + Send {
        let _ = (namespace, name);
        async { Err("this server connection has no service catalog".to_string()) }
    }
}

#[derive(Clone)]
pub struct ClientConfig {
    pub data_dir: PathBuf,
    /// The periodic GC of ended allocations (`gc_interval`, `gc_max_allocs`, thresholds).
    pub gc: crate::gc::GcLimits,
    pub node_name: String,
    pub datacenter: String,
    pub region: String,
    pub node_class: String,
    pub meta: BTreeMap<String, String>,
    /// Overrides of the fingerprinted totals (`cpu_total_compute`, `memory_total_mb`).
    pub cpu_total_compute: Option<u64>,
    pub memory_total_mb: Option<u64>,
    /// The `reserved { cpu memory disk reserved_ports }` block.
    pub reserved_cpu: u64,
    pub reserved_memory_mb: u64,
    pub reserved_disk_mb: u64,
    pub reserved_ports: String,
    /// The agent's HTTP address, advertised as the node's `HTTPAddr`.
    pub http_addr: String,
    pub version: String,
    /// Built-in and plugin drivers by name, already configured.
    pub drivers: BTreeMap<String, Arc<dyn Driver>>,
    /// How often status updates are sent to the servers, batched.
    pub update_interval: Duration,
    /// Agent variables tasks never inherit (Nomad's `env.denylist` client option).
    pub env_denylist: EnvDenylist,
    /// The client's `artifact` block: download timeouts and size limits.
    pub artifact: crate::artifact::ArtifactConfig,
    /// The `host_volume "name" { path read_only }` blocks, by name; each path must exist.
    pub host_volumes: BTreeMap<String, ClientHostVolumeConfig>,
    /// The agent's `telemetry` settings the client acts on.
    pub telemetry: crate::client_metrics::Telemetry,
    /// Bridge networking's CNI settings; offered to jobs (the node's `bridge` network) only
    /// when its plugins are there and the agent runs as root.
    pub bridge: Option<crate::network::cni::BridgeConfig>,
}

impl ClientConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ClientConfig {
            data_dir: data_dir.into(),
            node_name: String::new(),
            datacenter: "dc1".into(),
            region: DEFAULT_REGION.into(),
            node_class: String::new(),
            meta: BTreeMap::new(),
            cpu_total_compute: None,
            gc: crate::gc::GcLimits::default(),
            memory_total_mb: None,
            reserved_cpu: 0,
            reserved_memory_mb: 0,
            reserved_disk_mb: 0,
            reserved_ports: String::new(),
            http_addr: String::new(),
            version: env!("CARGO_PKG_VERSION").into(),
            drivers: BTreeMap::new(),
            update_interval: Duration::from_millis(10),
            env_denylist: EnvDenylist::default(),
            artifact: Default::default(),
            host_volumes: BTreeMap::new(),
            telemetry: Default::default(),
            bridge: None,
        }
    }
}

/// The bridge configuration when bridge networking can work on this node (logged once when
/// it is configured but cannot).
fn usable_bridge(config: &ClientConfig) -> crate::network::Bridge {
    let bridge = config.bridge.as_ref()?;
    match crate::network::available(bridge) {
        Ok(()) => Some(Arc::new(bridge.clone())),
        Err(why) => {
            tracing::info!(reason = %why, "bridge networking is not offered");
            None
        }
    }
}

/// What the client keeps on disk per allocation, to resume it after a restart.
#[derive(Serialize, Deserialize)]
struct AllocRecord {
    alloc: Allocation,
    task_states: BTreeMap<String, TaskState>,
}

impl AllocRecord {
    /// Takes in what the client last reported for the allocation.
    fn apply_saved_status(&mut self, u: AllocClientUpdate) {
        self.alloc.client_status = u.client_status;
        if let Some(ts) = u.task_states {
            self.task_states = ts;
        }
        // The deployment health decided before the restart: reported again, never decided
        // anew (see `alloc_health::tracked_strategy`).
        if let Some(ds) = u.deployment_status {
            self.alloc.deployment_status = Some(Box::new(ds));
        }
    }
}

pub(crate) struct Shared {
    pub(crate) runners: Mutex<HashMap<String, AllocRunnerHandle>>,
    /// The node as last fingerprinted; a change is pushed to the servers.
    node: watch::Sender<Arc<Node>>,
}

/// A running client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
    pub(crate) config: Arc<ClientConfig>,
    shutdown: watch::Sender<bool>,
    csi: CsiManager,
    /// The last successful heartbeat (kept across restarts).
    heartbeat: Arc<HeartbeatClock>,
    pub(crate) db: ClientStateDb,
    /// Host statistics and gauges, collected every `config.telemetry.collection_interval`.
    telemetry: Arc<crate::client_metrics::ClientTelemetry>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("client state: {0}")]
    State(#[from] crate::state_db::StateDbError),
    #[error("client data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    NodeMeta(#[from] crate::node_meta::NodeMetaError),
    /// Nomad's text for a `host_volume` whose path cannot be read at start (the reason is
    /// part of the text, not a separate source, so it is printed once).
    #[error("failed to validate volume {name}, err: stat {path}: {reason}")]
    HostVolume {
        name: String,
        path: String,
        reason: std::io::Error,
    },
}

impl Client {
    /// Fingerprints the node, restores allocations from the client state, registers with the
    /// servers and starts running what they assign.
    pub async fn start<S: ServerConn>(
        config: ClientConfig,
        server: Arc<S>,
    ) -> Result<Client, ClientError> {
        std::fs::create_dir_all(&config.data_dir).map_err(|source| ClientError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
        let db_path = ClientStateDb::default_path(&config.data_dir);
        if let Some(parent) = db_path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| ClientError::DataDir {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let db = ClientStateDb::open(&db_path)?;
        let node = build_node(&config, &db)?;
        let node = Arc::new(node);
        let (updates_tx, updates_rx) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            runners: Mutex::new(HashMap::new()),
            node: watch::channel(node.clone()).0,
        });
        let config = Arc::new(config);
        let csi = CsiManager::new(config.data_dir.join("csi"));
        let env = RunnerEnv {
            node: node.clone(),
            region: config.region.clone(),
            data_dir: config.data_dir.clone(),
            drivers: Arc::new(config.drivers.clone()),
            db: db.clone(),
            updates: updates_tx,
            csi: csi.clone(),
            csi_server: Arc::new(ServerCsi(server.clone())),
            mesh_server: Arc::new(crate::mesh::ServerMesh(server.clone())),
            catalog: Arc::new(crate::template::services::ServerCatalog(server.clone())),
            driver_events: Default::default(),
            agent_env: Arc::new(crate::taskenv::agent_env(&config.env_denylist)),
            artifact: Arc::new(config.artifact.clone()),
            bridge: usable_bridge(&config),
        };
        // Pumps end with the client (`shutdown`); the drivers' events reach the runners.
        crate::driver_events::start_pumps(&config.drivers, &env.driver_events, &shutdown_rx);
        let heartbeat = Arc::new(HeartbeatClock::load(db.clone(), SystemTime::now()));
        let client = Client {
            shared: shared.clone(),
            config: config.clone(),
            shutdown,
            csi: csi.clone(),
            heartbeat: heartbeat.clone(),
            db: db.clone(),
            telemetry: Arc::new(crate::client_metrics::ClientTelemetry::new(
                crate::host_stats::HostStatsCollector::new(&config.data_dir),
                config.telemetry,
            )),
        };
        let known = client.restore(&env, &db);
        let collecting = client.clone();
        tokio::spawn(crate::client_metrics::collection_loop(
            client.telemetry.clone(),
            move || collecting.collect_telemetry(),
            shutdown_rx.clone(),
        ));
        tokio::spawn(sync_updates(
            server.clone(),
            db.clone(),
            updates_rx,
            config.update_interval,
        ));
        tokio::spawn(follow_csi_plugins(
            csi.clone(),
            shared.clone(),
            shutdown_rx.clone(),
        ));
        tokio::spawn(register_and_heartbeat(
            server.clone(),
            shared.clone(),
            heartbeat.clone(),
            shutdown_rx.clone(),
        ));
        tokio::spawn(crate::heartbeat_stop::watch(
            heartbeat,
            Arc::new(RunnerStops(shared.clone())),
            shutdown_rx.clone(),
        ));
        tokio::spawn(crate::gc::run_periodic(
            client.clone(),
            config.gc.clone(),
            shutdown_rx.clone(),
        ));
        tokio::spawn(watch_allocs(
            client.clone(),
            server,
            env,
            known,
            shutdown_rx,
        ));
        Ok(client)
    }

    pub fn node(&self) -> Arc<Node> {
        self.shared.node.borrow().clone()
    }

    /// When a heartbeat last reached a server (or the client started, if none has yet).
    pub fn last_heartbeat(&self) -> SystemTime {
        self.heartbeat.last_ok()
    }

    /// The node's CSI plugins and mounted volumes.
    pub fn csi(&self) -> CsiManager {
        self.csi.clone()
    }

    pub fn node_id(&self) -> String {
        self.node().id.clone()
    }

    /// The node's metadata: merged, dynamic and static (`/v1/client/metadata`).
    pub fn node_meta(&self) -> Result<NodeMetaView, NodeMetaError> {
        Ok(NodeMetaView {
            meta: self.node().meta.clone(),
            dynamic: crate::node_meta::load(&self.db)?,
            static_meta: self.config.meta.clone(),
        })
    }

    /// Sets and unsets dynamic node metadata: stored in the client state, then the node
    /// (with its new computed class) is sent to the servers. Refused input changes nothing.
    /// Blocks on the client state.
    pub fn apply_node_meta(&self, changes: MetaChanges) -> Result<NodeMetaView, NodeMetaError> {
        crate::node_meta::validate(&changes)?;
        let mut outcome = Ok(());
        // Inside the node's write lock, so concurrent applies cannot interleave their
        // read-modify-write of the stored map.
        self.shared.node.send_if_modified(|node| {
            let stored = crate::node_meta::load(&self.db).and_then(|mut dynamic| {
                dynamic.extend(changes);
                crate::node_meta::store(&self.db, &dynamic).map(|()| dynamic)
            });
            match stored {
                Ok(dynamic) => {
                    let mut n = (**node).clone();
                    n.meta = crate::node_meta::merged(&self.config.meta, &dynamic);
                    n.compute_class();
                    *node = Arc::new(n);
                    true
                }
                Err(e) => {
                    outcome = Err(e);
                    false
                }
            }
        });
        outcome?;
        self.node_meta()
    }

    /// Root of an allocation's directory on this node, if this client ran it.
    pub fn alloc_dir(&self, alloc_id: &str) -> Option<PathBuf> {
        let runners = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(r) = runners.get(alloc_id) {
            return Some(r.alloc_dir.clone());
        }
        let dir = crate::allocdir::AllocDir::new(&self.config.data_dir, alloc_id).ok()?;
        dir.path().is_dir().then(|| dir.path().to_path_buf())
    }

    /// Resource usage of the running tasks of an allocation this client runs (of task `task`
    /// only, if given), sampled from their drivers; `None` for an allocation it does not run.
    /// Blocks on the drivers: call it from a thread that may block.
    pub fn alloc_stats(
        &self,
        alloc_id: &str,
        task: Option<&str>,
    ) -> Option<crate::alloc_stats::AllocResourceUsage> {
        let live = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(alloc_id)?
            .live
            .clone();
        Some(live.sample(task, mhz_per_core(&self.node())))
    }

    /// The latest result of each service check of an allocation this client runs, by check
    /// id (`/v1/client/allocation/:id/checks`); `None` for an allocation it does not know.
    /// Empty once the allocation stopped, as Nomad purges them then.
    pub fn alloc_checks(
        &self,
        alloc_id: &str,
    ) -> Option<BTreeMap<String, drover_structs::service_check::CheckQueryResult>> {
        let runners = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Some(runners.get(alloc_id)?.checks.results())
    }

    /// The running tasks of an allocation this client runs (for `alloc exec`).
    pub(crate) fn live_tasks(&self, alloc_id: &str) -> Option<crate::alloc_stats::LiveTasks> {
        self.shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(alloc_id)
            .map(|r| r.live.clone())
    }

    /// The signal and restart controls of an allocation this client runs.
    fn alloc_control(&self, alloc_id: &str) -> Result<AllocControl, AllocControlError> {
        self.shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(alloc_id)
            .map(|r| r.control.clone())
            .ok_or_else(|| AllocControlError::UnknownAlloc(alloc_id.to_string()))
    }

    /// Nomad's `alloc signal`: sends `signal` to task `task` of the allocation, or to all of its
    /// tasks (see [`AllocControl::signal`]).
    pub async fn signal_alloc(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        signal: &str,
    ) -> Result<(), AllocControlError> {
        self.alloc_control(alloc_id)?.signal(task, signal).await
    }

    /// Nomad's `alloc restart`: restarts task `task` of the allocation, or its running tasks
    /// (see [`AllocControl::restart`]).
    pub async fn restart_alloc(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        all_tasks: bool,
    ) -> Result<(), AllocControlError> {
        self.alloc_control(alloc_id)?.restart(task, all_tasks).await
    }

    /// Number of allocations this client is running or has run since it started.
    pub fn alloc_count(&self) -> usize {
        self.shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Allocations this client runs now and those whose runners ended (Nomad's
    /// `nomad.client.allocations.running` and `.terminal` gauges).
    pub fn alloc_counts(&self) -> (usize, usize) {
        let runners = self
            .shared
            .runners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let done = runners.values().filter(|r| r.is_done()).count();
        (runners.len() - done, done)
    }

    /// Stops watching for allocations. Tasks keep running (they are recovered on restart),
    /// as Nomad's client leaves them when the agent stops.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Resumes the allocations saved before a restart. Returns the allocations it knows.
    fn restore(&self, env: &RunnerEnv, db: &ClientStateDb) -> HashMap<String, u64> {
        let mut known = HashMap::new();
        let records = match db.all_allocs() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "reading client state");
                return known;
            }
        };
        for (id, bytes) in records {
            let Ok(mut rec) = serde_json::from_slice::<AllocRecord>(&bytes) else {
                tracing::warn!(alloc = %id, "client state record unreadable; skipping");
                continue;
            };
            if let Ok(Some(status)) = db.get_alloc_status(&id)
                && let Ok(u) = serde_json::from_slice::<AllocClientUpdate>(&status)
            {
                rec.apply_saved_status(u);
            }
            known.insert(id.clone(), rec.alloc.alloc_modify_index);
            if rec.alloc.server_terminal()
                || rec.task_states.values().all(|s| s.state == TASK_STATE_DEAD)
                    && !rec.task_states.is_empty()
            {
                continue;
            }
            let handles: BTreeMap<String, TaskHandle> = db
                .task_handles(&id)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(task, b)| Some((task, serde_json::from_slice(&b).ok()?)))
                .collect();
            match alloc_runner::start(env.clone(), Arc::new(rec.alloc), rec.task_states, handles) {
                Ok(h) => {
                    self.shared
                        .runners
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id, h);
                }
                Err(e) => tracing::warn!(alloc = %id, error = %e, "restoring allocation"),
            }
        }
        known
    }
}

/// The node as fingerprinted: host attributes and resources, drivers, reserved resources.
fn build_node(config: &ClientConfig, db: &ClientStateDb) -> Result<Node, ClientError> {
    // The node id survives restarts: the servers know the node by it.
    let id = match db.get_meta("node_id")? {
        Some(b) => String::from_utf8_lossy(&b).to_string(),
        None => {
            let id = generate_id();
            db.put_meta("node_id", id.as_bytes())?;
            id
        }
    };
    let secret = match db.get_meta("secret_id")? {
        Some(b) => String::from_utf8_lossy(&b).to_string(),
        None => {
            let s = generate_id();
            db.put_meta("secret_id", s.as_bytes())?;
            s
        }
    };
    let fp = crate::fingerprint::fingerprint_host(&config.data_dir, &config.version);
    let mut attributes = fp.attributes.clone();
    let cpu = config.cpu_total_compute.unwrap_or(fp.cpu_total_mhz) as i64;
    let mem = config.memory_total_mb.unwrap_or(fp.memory_mb) as i64;
    let disk = fp.disk_mb as i64;
    attributes.insert("cpu.totalcompute".into(), cpu.to_string());
    attributes.insert("memory.totalbytes".into(), (mem * 1024 * 1024).to_string());
    attributes.insert("nomad.version".into(), config.version.clone());
    let mut drivers = BTreeMap::new();
    let now = format_rfc3339_nanos(now_nanos());
    for (name, d) in &config.drivers {
        let f = d.fingerprint();
        let healthy = f.health == HealthState::Healthy;
        if healthy {
            for (k, v) in &f.attributes {
                attributes.insert(k.clone(), v.clone());
            }
        }
        drivers.insert(
            name.clone(),
            DriverInfo {
                attributes: (!f.attributes.is_empty()).then(|| f.attributes.clone()),
                detected: f.health != HealthState::Undetected,
                healthy,
                health_description: f.health_description.clone(),
                update_time: now.clone(),
            },
        );
    }
    let hostname = attributes
        .get("unique.hostname")
        .cloned()
        .unwrap_or_else(|| "localhost".into());
    let ip = attributes
        .get("unique.network.ip-address")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".into());
    let network = NetworkResource {
        mode: "host".into(),
        device: "lo".into(),
        cidr: format!("{ip}/32"),
        ip,
        mbits: 1000,
        ..Default::default()
    };
    let mut node = Node {
        id,
        secret_id: secret,
        datacenter: config.datacenter.clone(),
        name: if config.node_name.is_empty() {
            hostname
        } else {
            config.node_name.clone()
        },
        http_addr: config.http_addr.clone(),
        attributes,
        meta: crate::node_meta::merged(&config.meta, &crate::node_meta::load(db)?),
        node_class: config.node_class.clone(),
        drivers,
        status: NODE_STATUS_INIT.into(),
        scheduling_eligibility: NODE_ELIGIBLE.into(),
        ..Default::default()
    };
    node.node_resources.cpu.cpu_shares = cpu;
    node.node_resources.cpu.total_cpu_cores = fp
        .attributes
        .get("cpu.numcores")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    node.node_resources.memory.memory_mb = mem;
    node.node_resources.disk.disk_mb = disk;
    let mut networks = vec![network.clone()];
    if usable_bridge(config).is_some() {
        // Nomad's bridge fingerprint: the mode is offered, its addresses are the CNI's.
        networks.push(NetworkResource {
            mode: crate::network::MODE_BRIDGE.into(),
            ..Default::default()
        });
    }
    node.node_resources.networks = Some(networks);
    node.reserved_resources.cpu.cpu_shares = config.reserved_cpu as i64;
    node.reserved_resources.memory.memory_mb = config.reserved_memory_mb as i64;
    node.reserved_resources.disk.disk_mb = config.reserved_disk_mb as i64;
    node.reserved_resources.networks.reserved_host_ports = config.reserved_ports.clone();
    node.resources = Resources {
        cpu,
        memory_mb: mem,
        disk_mb: disk,
        networks: Some(vec![network]),
        ..Default::default()
    };
    node.reserved = Resources {
        cpu: config.reserved_cpu as i64,
        memory_mb: config.reserved_memory_mb as i64,
        disk_mb: config.reserved_disk_mb as i64,
        ..Default::default()
    };
    node.host_volumes = host_volumes(config)?;
    node.compute_class();
    Ok(node)
}

/// The node's host volumes: every configured path must exist, as Nomad checks when the client
/// sets up its node (none configured is `null`, as in Nomad).
fn host_volumes(
    config: &ClientConfig,
) -> Result<Option<BTreeMap<String, ClientHostVolumeConfig>>, ClientError> {
    if config.host_volumes.is_empty() {
        return Ok(None);
    }
    for (name, hv) in &config.host_volumes {
        std::fs::metadata(&hv.path).map_err(|reason| ClientError::HostVolume {
            name: name.clone(),
            path: hv.path.clone(),
            reason,
        })?;
    }
    Ok(Some(config.host_volumes.clone()))
}

/// Puts what the node's CSI plugins report into the node, which the heartbeat loop then
/// pushes to the servers.
async fn follow_csi_plugins(
    csi: CsiManager,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut plugins = csi.subscribe_node_plugins();
    let mut events = csi.subscribe_node_events();
    loop {
        tokio::select! {
            changed = plugins.changed() => if changed.is_err() { return },
            changed = events.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => return,
        }
        let reported = plugins.borrow_and_update().clone();
        events.borrow_and_update();
        let new_events = csi.take_node_events();
        shared.node.send_modify(|node| {
            let mut n = (**node).clone();
            n.csi_controller_plugins =
                (!reported.controllers.is_empty()).then(|| reported.controllers.clone());
            n.csi_node_plugins = (!reported.nodes.is_empty()).then(|| reported.nodes.clone());
            if !new_events.is_empty() {
                n.events
                    .get_or_insert_with(Vec::new)
                    .extend(new_events.iter().cloned());
            }
            *node = Arc::new(n);
        });
    }
}

/// The speed of one core, to turn CPU percent into MHz as Nomad reports it: the node's
/// compute over its cores, else its fingerprinted frequency.
fn mhz_per_core(node: &Node) -> f64 {
    let cpu = &node.node_resources.cpu;
    if cpu.cpu_shares > 0 && cpu.total_cpu_cores > 0 {
        return cpu.cpu_shares as f64 / cpu.total_cpu_cores as f64;
    }
    node.attributes
        .get("cpu.frequency")
        .and_then(|f| f.parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod restore_tests {
    use super::*;

    #[test]
    fn a_saved_status_brings_back_the_decided_deployment_health() {
        let mut rec = AllocRecord {
            alloc: Allocation {
                deployment_id: "d1".into(),
                ..Default::default()
            },
            task_states: BTreeMap::new(),
        };
        let health = AllocDeploymentStatus {
            healthy: Some(true),
            timestamp: "2026-01-01T00:00:00Z".into(),
            ..Default::default()
        };
        rec.apply_saved_status(AllocClientUpdate {
            id: "a1".into(),
            client_status: ALLOC_CLIENT_RUNNING.into(),
            deployment_status: Some(health.clone()),
            ..Default::default()
        });
        assert_eq!(rec.alloc.client_status, ALLOC_CLIENT_RUNNING);
        assert_eq!(rec.alloc.deployment_status.as_deref(), Some(&health));
        // A status saved before any decision leaves the allocation's own.
        rec.apply_saved_status(AllocClientUpdate::default());
        assert_eq!(rec.alloc.deployment_status.as_deref(), Some(&health));
    }
}
