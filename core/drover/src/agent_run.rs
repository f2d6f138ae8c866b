//! Starting the agent's parts in order: server (RPC, cluster formation, leadership), drivers,
//! client (talking to the server in this process, or to remote servers over RPC), HTTP.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use drover_abi::Driver;
use drover_client::taskenv::EnvDenylist;
use drover_client::{Client, ClientConfig, ServerConn};
use drover_plugin_host::DriverCatalog;
use drover_server::{Server, ServerConfig};
use drover_structs::csi::{CsiVolumeClaim, CsiVolumeClaimRequest, CsiVolumeClaimResponse};
use drover_structs::{AllocClientUpdate, Allocation, Node};
use serde_json::json;

use crate::agent::AgentArgs;
use crate::agent_remote::RemoteServers;
use crate::config::{AgentFile, ClientBlock};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The client's link to a server in the same process.
struct LocalServer(Server);

impl ServerConn for LocalServer {
    async fn sign_mesh_leaf(
        &self,
        node_id: &str,
        alloc_id: &str,
        task: &str,
    ) -> Result<drover_structs::mesh::MeshLeaf, String> {
        self.0
            .sign_mesh_leaf(node_id, alloc_id, task)
            .await
            .map_err(|e| e.to_string())
    }
    async fn mesh_view(&self, namespace: &str) -> Result<drover_structs::mesh::MeshView, String> {
        self.0.mesh_view(namespace).await.map_err(|e| e.to_string())
    }
    async fn service_registrations(
        &self,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<Vec<drover_structs::ServiceRegistration>, String> {
        let query = drover_server::service_catalog::ServiceQuery {
            namespace: namespace.to_string(),
            name: name.map(str::to_string),
        };
        self.0
            .service_registrations(query)
            .await
            .map_err(|e| e.to_string())
    }
    async fn register_node(&self, node: Node) -> Result<Duration, String> {
        self.0
            .register_node(node)
            .await
            .map(|(_, ttl)| ttl)
            .map_err(|e| e.to_string())
    }
    async fn heartbeat(&self, node_id: &str) -> Result<Duration, String> {
        self.0.heartbeat(node_id).await.map_err(|e| e.to_string())
    }
    async fn node_allocs(
        &self,
        node_id: &str,
        min_index: u64,
        wait: Duration,
    ) -> Result<(Vec<Arc<Allocation>>, u64), String> {
        self.0
            .node_allocs(node_id, min_index, wait)
            .await
            .map_err(|e| e.to_string())
    }
    async fn update_allocs(&self, updates: Vec<AllocClientUpdate>) -> Result<(), String> {
        self.0
            .update_allocs(updates)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    async fn claim_csi_volume(
        &self,
        request: CsiVolumeClaimRequest,
    ) -> Result<CsiVolumeClaimResponse, String> {
        self.0
            .claim_csi_volume(request)
            .await
            .map_err(|e| e.to_string())
    }
    async fn unpublish_csi_volume(
        &self,
        namespace: &str,
        volume_id: &str,
        claim: CsiVolumeClaim,
    ) -> Result<(), String> {
        self.0
            .unpublish_csi_volume(namespace, volume_id, claim)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// The HTTP layer's view of the client.
struct HttpClient(Client);

impl drover_http::NodeClient for HttpClient {
    fn node_id(&self) -> String {
        self.0.node_id()
    }
    fn alloc_dir(&self, alloc_id: &str) -> Option<PathBuf> {
        self.0.alloc_dir(alloc_id)
    }
    fn last_heartbeat(&self) -> Option<std::time::SystemTime> {
        Some(self.0.last_heartbeat())
    }
    fn exec(
        &self,
        alloc_id: &str,
        task: &str,
        options: &drover_client::alloc_exec::ExecOptions,
        stream: &dyn drover_client::alloc_exec::ExecStream,
    ) -> Result<drover_client::alloc_exec::ExitResult, drover_client::alloc_exec::ExecError> {
        self.0.exec_task(alloc_id, task, options, stream)
    }
    fn stats(&self) -> serde_json::Value {
        serde_json::to_value(self.0.host_stats())
            .inspect_err(|e| tracing::warn!(error = %e, "encoding host stats"))
            .unwrap_or_default()
    }
    fn gauges(&self) -> Vec<drover_structs::metrics::Gauge> {
        self.0.gauges()
    }
    fn alloc_stats(&self, alloc_id: &str, task: Option<&str>) -> Option<serde_json::Value> {
        let usage = self.0.alloc_stats(alloc_id, task)?;
        serde_json::to_value(usage)
            .inspect_err(|e| tracing::warn!(error = %e, "encoding allocation stats"))
            .ok()
    }
    fn alloc_checks(&self, alloc_id: &str) -> Option<serde_json::Value> {
        let results = self.0.alloc_checks(alloc_id)?;
        serde_json::to_value(results)
            .inspect_err(|e| tracing::warn!(error = %e, "encoding check results"))
            .ok()
    }
    fn signal(
        &self,
        alloc_id: String,
        task: Option<String>,
        signal: String,
    ) -> drover_http::ControlFuture<'_> {
        Box::pin(async move {
            self.0
                .signal_alloc(&alloc_id, task.as_deref(), &signal)
                .await
        })
    }
    fn restart(
        &self,
        alloc_id: String,
        task: Option<String>,
        all_tasks: bool,
    ) -> drover_http::ControlFuture<'_> {
        Box::pin(async move {
            self.0
                .restart_alloc(&alloc_id, task.as_deref(), all_tasks)
                .await
        })
    }
    fn collect_alloc(&self, alloc_id: &str) -> Result<(), drover_client::gc::GcError> {
        self.0.collect_alloc(alloc_id)
    }
    fn collect_all(&self) -> (usize, Vec<drover_client::gc::GcError>) {
        self.0.collect_all()
    }
    fn node_meta(
        &self,
    ) -> Result<drover_client::node_meta::NodeMetaView, drover_client::node_meta::NodeMetaError>
    {
        self.0.node_meta()
    }
    fn apply_node_meta(
        &self,
        changes: drover_client::node_meta::MetaChanges,
    ) -> Result<drover_client::node_meta::NodeMetaView, drover_client::node_meta::NodeMetaError>
    {
        self.0.apply_node_meta(changes)
    }
}

/// The drivers this agent offers: the built-ins (registered here, the one place that names
/// them), then plugin_dir, each configured from its `plugin` block.
fn driver_catalog(
    file: &AgentFile,
    dev: bool,
    plugin_dir: Option<&std::path::Path>,
    plugin_state_dir: &std::path::Path,
) -> anyhow::Result<BTreeMap<String, Arc<dyn Driver>>> {
    let mut catalog = DriverCatalog::new();
    // gRPC plugins keep their reattach configs and logs here and outlive the agent.
    catalog.set_plugin_state_dir(plugin_state_dir);
    catalog.register(Arc::new(drover_driver_raw_exec::RawExecDriver::new()));
    catalog.register(Arc::new(drover_driver_exec::ExecDriver::new()));
    catalog.register(Arc::new(drover_driver_mock::MockDriver::new()));
    catalog.register(Arc::new(drover_driver_docker::DockerDriver::new()));
    if let Some(proxy) = crate::connect_proxy_driver::ConnectProxyDriver::new() {
        catalog.register(proxy);
    }
    let loaded = match plugin_dir {
        Some(dir) => catalog.load_plugin_dir(dir),
        None => Ok(()),
    };
    if let Err(e) = loaded.and_then(|()| catalog.configure(&plugin_configs(file, dev))) {
        // The agent does not start: the sidecars it started must not outlive it.
        catalog.stop_started_plugins();
        return Err(e.into());
    }
    Ok(catalog.into_map())
}

/// Each driver's plugin config: its `plugin` block, plus what the agent decides for the
/// built-ins. Nomad's dev agent enables raw_exec (an explicit `enabled` in the file still
/// wins; anywhere else raw_exec stays disabled), and the client's `chroot_env` is the exec
/// driver's (unless its plugin block sets one).
fn plugin_configs(file: &AgentFile, dev: bool) -> BTreeMap<String, serde_json::Value> {
    let mut configs: BTreeMap<String, serde_json::Value> = file
        .plugin
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, block)| (name, block.config.unwrap_or_else(|| json!({}))))
        .collect();
    if dev {
        let raw = configs
            .entry("raw_exec".into())
            .or_insert_with(|| json!({}));
        if raw.get("enabled").is_none() {
            raw["enabled"] = json!(true);
        }
    }
    if let Some(chroot_env) = file.client.as_ref().and_then(|c| c.chroot_env.as_ref()) {
        let exec = configs.entry("exec".into()).or_insert_with(|| json!({}));
        if exec.get("chroot_env").is_none() {
            exec["chroot_env"] = json!(chroot_env);
        }
    }
    configs
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let file = crate::config::load(&args.config)?;
    let dev = args.dev;
    let server_enabled = dev
        || args.server
        || file
            .server
            .as_ref()
            .and_then(|s| s.enabled)
            .unwrap_or(false);
    let client_enabled = dev
        || args.client
        || file
            .client
            .as_ref()
            .and_then(|c| c.enabled)
            .unwrap_or(false);
    if !server_enabled && !client_enabled {
        bail!("Must specify either server, client or dev mode for the agent.");
    }
    let remote_servers = client_servers(&args, &file);
    if client_enabled && !server_enabled && remote_servers.is_empty() {
        bail!(
            "a client-only agent needs the RPC addresses of servers: --servers host:port,... or client {{ servers = [...] }}"
        );
    }
    let mut temp_dir = None;
    let data_dir = match args.data_dir.clone().or(file.data_dir.clone()) {
        Some(d) => d,
        None if dev => {
            let d = std::env::temp_dir().join(format!("drover-dev-{}", std::process::id()));
            temp_dir = Some(d.clone());
            d
        }
        None => bail!("Must specify data directory (--data-dir or data_dir in the config)"),
    };
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let data_dir = data_dir.canonicalize().unwrap_or(data_dir);
    let bind = args
        .bind
        .clone()
        .or(file.bind_addr.clone())
        .unwrap_or_else(|| if dev { "127.0.0.1" } else { "0.0.0.0" }.to_string());
    let ports = file.ports.clone().unwrap_or_default();
    let http_port = args.http_port.or(ports.http).unwrap_or(4646);
    let rpc_port = args.rpc_port.or(ports.rpc).unwrap_or(4647);
    let region = file.region.clone().unwrap_or_else(|| "global".into());
    let datacenter = args
        .dc
        .clone()
        .or(file.datacenter.clone())
        .unwrap_or_else(|| "dc1".into());
    let addresses = file.addresses.clone().unwrap_or_default();
    let http_bind = addresses.http.as_deref().unwrap_or(&bind);
    let rpc_bind = addresses.rpc.as_deref().unwrap_or(&bind);
    let http_addr: SocketAddr = format!("{http_bind}:{http_port}")
        .parse()
        .with_context(|| format!("invalid HTTP bind address {http_bind:?}"))?;
    let rpc_addr: SocketAddr = format!("{rpc_bind}:{rpc_port}")
        .parse()
        .with_context(|| format!("invalid RPC bind address {rpc_bind:?}"))?;
    let plugin_dir = args.plugin_dir.clone().or(file.plugin_dir.clone());

    let tls = match &file.tls {
        Some(block) => drover_tls::AgentTls::load(block.settings(&region)?)?,
        None => None,
    };
    let telemetry = crate::config::telemetry::settings(file.telemetry.as_ref())?;
    let acl_on = file.acl.as_ref().and_then(|a| a.enabled) == Some(true);
    if acl_on && server_enabled && !tls.as_ref().is_some_and(|t| t.rpc_enabled()) {
        // The HTTP API checks every token; the RPC port (Raft, forwarding, client sessions)
        // tells servers from clients only by their certificates.
        tracing::warn!(
            "ACLs are on but RPC is not mutual TLS: anyone who reaches the RPC port ({rpc_addr}) \
             is trusted as a server; set tls {{ rpc = true verify_server_hostname = true }}"
        );
    }
    // Bind HTTP first: a busy port is an error before anything else starts.
    let listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .with_context(|| format!("binding HTTP listener on {http_addr}"))?;

    warn_ignored_settings(&file);
    let node_name = args.node.clone().or(file.name.clone()).unwrap_or_default();
    let agent_name = if node_name.is_empty() {
        hostname()
    } else {
        node_name.clone()
    };
    let rpc_advertise = if server_enabled {
        advertise_rpc(&file, rpc_addr)?
    } else {
        rpc_addr.to_string()
    };
    let agent = drover_http::AgentInfo {
        name: agent_name.clone(),
        region: region.clone(),
        datacenter: datacenter.clone(),
        http_addr,
        rpc_addr: rpc_advertise.parse().unwrap_or(rpc_addr),
        server: server_enabled,
        client: client_enabled,
        version: VERSION.into(),
        prometheus_metrics: telemetry.prometheus_metrics,
        // Nomad's dev mode turns debugging on; otherwise the file decides (off by default).
        enable_debug: file.enable_debug.unwrap_or(dev),
        config_json: json!({
            "DataDir": data_dir,
            "BindAddr": bind,
            "Region": region,
            "Datacenter": datacenter,
            "DevMode": dev,
            "NodeName": node_name,
            "LogLevel": args.log_level.clone().unwrap_or_else(|| "info".into()).to_uppercase(),
            "LogJson": false,
            "EnableDebug": file.enable_debug.unwrap_or(dev),
            "PluginDir": plugin_dir.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            "Ports": {"HTTP": http_port, "RPC": rpc_port},
            "TLSConfig": {
                "EnableHTTP": tls.as_ref().is_some_and(|t| t.http_enabled()),
                "EnableRPC": tls.as_ref().is_some_and(|t| t.rpc_enabled()),
                "VerifyServerHostname": tls.as_ref().is_some_and(|t| t.settings().verify_server_hostname),
                "VerifyHTTPSClient": tls.as_ref().is_some_and(|t| t.settings().verify_https_client),
            },
            "Addresses": {"HTTP": bind, "RPC": bind},
            "AdvertiseAddrs": {"HTTP": http_addr.to_string(), "RPC": rpc_advertise},
            "Server": {
                "Enabled": server_enabled,
                "BootstrapExpect": args.bootstrap_expect.or(file.server.as_ref().and_then(|s| s.bootstrap_expect)).unwrap_or(u32::from(dev)),
            },
            "Client": {
                "Enabled": client_enabled,
                "Servers": if server_enabled { Vec::new() } else { remote_servers.clone() },
            },
            "Version": {
                "Version": VERSION,
                "VersionPrerelease": "",
                "VersionMetadata": "",
                "Revision": "",
            },
        }),
    };
    // HTTP answers from now on: until the agent's parts run (a server may wait long for its
    // peers, or to be joined), with the starting answers ("No cluster leader").
    let join_later = drover_server::JoinTargets::default();
    let (late, ready) = drover_http::late_router(drover_http::starting_router(
        agent.clone(),
        join_later.clone(),
    ));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(drover_http::serve(
        listener,
        late,
        tls.clone(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    let mut server = None;
    let mut server_tunnels = None;
    if server_enabled && !client_enabled {
        // Before the state is restored. An agent that also runs tasks keeps mimalloc's
        // default: its memory per task is what counts there (BENCHMARKS.md, issue 18).
        crate::resident_set::keep_freed_memory_for_reuse();
    }
    if server_enabled {
        // Bound before anything starts: a busy port is an error, not a silent cluster split.
        let rpc_listener = tokio::net::TcpListener::bind(rpc_addr)
            .await
            .with_context(|| format!("binding RPC listener on {rpc_addr}"))?;
        let sc = server_config(&args, &file, &data_dir, dev, &region, &datacenter)?;
        let sc = ServerConfig {
            rpc_addr: rpc_advertise.clone(),
            name: format!("{agent_name}.{region}"),
            join_later: join_later.clone(),
            ..sc
        };
        let net = drover_rpc::GrpcNet::new(
            rpc_listener,
            rpc_advertise.clone(),
            Arc::new(drover_rpc::Faults::from_env()),
            tls.clone(),
        );
        server_tunnels = Some(Arc::new(crate::agent_tunnels::ServerTunnels::new(
            net.tunnels(),
        )));
        let s = Server::start_with_net(sc, Arc::new(net))
            .await
            .context("starting server")?;
        // The dev agent is ready when it leads; a cluster server serves its API at once and
        // answers "No cluster leader" until there is one.
        if dev {
            s.wait_for_leadership(Duration::from_secs(10))
                .await
                .context("waiting for leadership")?;
        }
        server = Some(s);
    }

    let mut client = None;
    let remote = (!server_enabled)
        .then(|| Arc::new(RemoteServers::new(remote_servers.clone(), tls.clone())));
    if client_enabled {
        let mut cc = ClientConfig::new(data_dir.join("client"));
        cc.node_name = node_name.clone();
        cc.datacenter = datacenter.clone();
        cc.region = region.clone();
        cc.http_addr = http_addr.to_string();
        cc.version = VERSION.into();
        cc.drivers = driver_catalog(&file, dev, plugin_dir.as_deref(), &data_dir.join("plugins"))?;
        cc.bridge = Some(bridge_config(file.client.as_ref(), &cc.data_dir));
        if let Some(c) = &file.client {
            cc.node_class = c.node_class.clone().unwrap_or_default();
            cc.meta = c.meta.clone().unwrap_or_default();
            cc.cpu_total_compute = c.cpu_total_compute;
            cc.memory_total_mb = c.memory_total_mb;
            cc.env_denylist = env_denylist(c);
            cc.host_volumes = host_volumes(c);
            cc.gc = gc_limits(c)?;
            if let Some(r) = &c.reserved {
                cc.reserved_cpu = r.cpu.unwrap_or(0);
                cc.reserved_memory_mb = r.memory.unwrap_or(0);
                cc.reserved_disk_mb = r.disk.unwrap_or(0);
                cc.reserved_ports = r.reserved_ports.clone().unwrap_or_default();
                drover_structs::parse_port_ranges(&cc.reserved_ports)
                    .map_err(|e| anyhow::anyhow!("client.reserved.reserved_ports: {e}"))?;
            }
            if let Some(a) = &c.artifact {
                cc.artifact = artifact_config(a)?;
            }
        }
        cc.telemetry = telemetry.client;
        let c = match &server {
            Some(server) => Client::start(cc, Arc::new(LocalServer(server.clone()))).await,
            None => {
                // A client-only agent always has its servers (checked above).
                let remote = remote.clone().context("no servers for the client")?;
                Client::start(cc, remote).await
            }
        }
        .context("starting client")?;
        client = Some(c);
    }

    let node_client: Option<Arc<dyn drover_http::NodeClient>> = client
        .clone()
        .map(|c| Arc::new(HttpClient(c)) as Arc<dyn drover_http::NodeClient>);
    let mut sessions = Vec::new();
    let router = match (&server, &server_tunnels, &remote, &node_client) {
        (Some(server), Some(tunnels), _, _) => {
            let router =
                drover_http::router(server.clone(), node_client.clone(), agent, tunnels.clone());
            tunnels.serve_api(server.clone(), rpc_advertise.clone(), router.clone());
            // Controller and node-detach calls reach the node that runs the plugin.
            server.set_csi_client_rpc(Arc::new(crate::agent_csi_routes::RoutedCsiRpc::new(
                client.clone(),
                tunnels.clone(),
            )));
            router
        }
        (None, _, Some(remote), Some(node_client)) => {
            sessions = crate::agent_tunnels::keep_sessions(
                remote.rpc(),
                &remote.servers(),
                &node_client.node_id(),
                node_client.clone(),
                client
                    .clone()
                    .map(crate::agent_csi_routes::internal_routes)
                    .unwrap_or_default(),
            );
            if file.acl.as_ref().and_then(|a| a.enabled) == Some(true) {
                // Tokens are checked by the servers: nothing is answered here without them.
                let health = crate::agent_client_api::health_router();
                drover_http::client_agent_router_with_acls(health, remote.clone())
            } else {
                let local = crate::agent_client_api::router(client.clone(), agent, remote.clone());
                drover_http::client_agent_router(node_client.clone(), local, remote.clone())
            }
        }
        _ => bail!("an agent runs a server, a client, or both"),
    };
    // The web UI reads through the API router it sits beside (in process, with the
    // browser's token), so it answers on any agent the API answers on.
    let router = if file.ui_enabled() {
        router.clone().merge(drover_ui::routes(router))
    } else {
        router
    };
    ready.set(router);

    println!("==> Drover agent configuration:\n");
    println!("       Advertise Addrs: HTTP: {http_addr}; RPC: {rpc_advertise}");
    println!("            Bind Addrs: HTTP: {http_addr}");
    println!("                Client: {client_enabled}");
    println!(
        "                   TLS: HTTP: {}; RPC: {}",
        tls.as_ref().is_some_and(|t| t.http_enabled()),
        tls.as_ref().is_some_and(|t| t.rpc_enabled())
    );
    println!(
        "             Log Level: {}",
        args.log_level
            .clone()
            .or(file.log_level.clone())
            .unwrap_or_else(|| "INFO".into())
    );
    println!("                Region: {region} (DC: {datacenter})");
    println!("                Server: {server_enabled}");
    println!("               Version: {VERSION}");
    println!("              Data Dir: {}", data_dir.display());
    if let Some(c) = &client {
        println!("               Node ID: {}", c.node_id());
    }
    println!("\n==> Drover agent started! Log data will stream in below:\n");
    crate::resident_set::drop_clean();
    let trimmer = tokio::spawn(crate::resident_set::trim_after_bursts());

    wait_for_signal(tls.as_deref()).await;
    println!("==> Caught signal: shutting down");
    trimmer.abort();
    let _ = stop_tx.send(());
    for session in sessions {
        session.abort();
    }
    if let Some(c) = &client {
        c.shutdown();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), http).await;
    if let Some(server) = &server {
        server.shutdown();
    }
    if let Some(d) = temp_dir {
        // Nobody can reattach to plugins whose state goes away with the data dir.
        drover_plugin_host::grpc::stop_plugins(&d.join("plugins"), &[]);
        let _ = std::fs::remove_dir_all(d);
    }
    Ok(())
}

/// The server's settings: flags over the `server` block over defaults.
fn server_config(
    args: &AgentArgs,
    file: &AgentFile,
    data_dir: &std::path::Path,
    dev: bool,
    region: &str,
    datacenter: &str,
) -> anyhow::Result<ServerConfig> {
    let mut sc = ServerConfig::new(data_dir.join("server"));
    sc.region = region.to_string();
    sc.datacenter = datacenter.to_string();
    let block = file.server.clone().unwrap_or_default();
    if let Some(n) = block.num_schedulers {
        sc.num_schedulers = n;
    }
    if let Some(g) = &block.heartbeat_grace {
        sc.heartbeat_grace = drover_jobspec::parse_duration(g)
            .map_err(|e| anyhow::anyhow!("server.heartbeat_grace: {e}"))?;
    }
    if let Some(t) = &block.min_heartbeat_ttl {
        sc.heartbeat_ttl = drover_jobspec::parse_duration(t)
            .map_err(|e| anyhow::anyhow!("server.min_heartbeat_ttl: {e}"))?;
    }
    if let Some(r) = block.max_heartbeats_per_second {
        if r.is_nan() || r <= 0.0 {
            bail!("server.max_heartbeats_per_second must be positive, got {r}");
        }
        sc.max_heartbeats_per_second = r;
    }
    if let Some(t) = &block.failover_heartbeat_ttl {
        sc.failover_heartbeat_ttl = drover_jobspec::parse_duration(t)
            .map_err(|e| anyhow::anyhow!("server.failover_heartbeat_ttl: {e}"))?;
    }
    if let Some(m) = block.raft_multiplier {
        if !(1..=10).contains(&m) {
            bail!("server.raft_multiplier must be between 1 and 10, got {m}");
        }
        sc.raft_tick *= m;
    }
    if let Some(n) = block.raft_snapshot_threshold {
        sc.snapshot_threshold = n;
    }
    if let Some(n) = block.event_buffer_size {
        sc.event_buffer_size = n;
    }
    if block.enable_event_broker == Some(false) {
        sc.event_buffer_size = 0;
    }
    sc.acl_enabled = file.acl.as_ref().and_then(|a| a.enabled).unwrap_or(false);
    let mut join: Vec<String> = args.join.clone();
    if let Some(sj) = &block.server_join {
        join.extend(sj.retry_join.iter().cloned());
        join.extend(sj.start_join.iter().cloned());
    }
    join.extend(block.retry_join.iter().flatten().cloned());
    join.retain(|a| !a.trim().is_empty());
    join.dedup();
    // Without bootstrap_expect a server bootstraps alone, unless told to join others: then
    // it only ever joins (0), so it cannot start a second, separate cluster.
    sc.bootstrap_expect = if dev {
        1
    } else {
        args.bootstrap_expect
            .or(block.bootstrap_expect)
            .unwrap_or(if join.is_empty() { 1 } else { 0 })
    };
    sc.join = join;
    Ok(sc)
}

/// Servers a client-only agent talks to: `--servers`, then `client.servers`, then
/// `client.server_join.retry_join`.
fn client_servers(args: &AgentArgs, file: &AgentFile) -> Vec<String> {
    let mut servers: Vec<String> = args.servers.clone();
    if let Some(c) = &file.client {
        servers.extend(c.servers.iter().flatten().cloned());
        if let Some(sj) = &c.server_join {
            servers.extend(sj.retry_join.iter().cloned());
        }
    }
    servers.retain(|s| !s.trim().is_empty());
    servers.dedup();
    servers
}

/// The RPC address other servers and clients are told: `advertise { rpc = ... }`, else the
/// bind address, else (bound to all interfaces) the address this host routes out from.
fn advertise_rpc(file: &AgentFile, rpc_addr: SocketAddr) -> anyhow::Result<String> {
    if let Some(rpc) = file
        .advertise
        .as_ref()
        .and_then(|a| a.get("rpc"))
        .and_then(serde_json::Value::as_str)
    {
        return Ok(if rpc.contains(':') {
            rpc.to_string()
        } else {
            format!("{rpc}:{}", rpc_addr.port())
        });
    }
    if !rpc_addr.ip().is_unspecified() {
        return Ok(rpc_addr.to_string());
    }
    // No packet is sent: connecting a UDP socket only picks the outgoing interface.
    let ip = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip())
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    Ok(SocketAddr::new(ip, rpc_addr.port()).to_string())
}

/// The `client.options` keys Drover acts on; `warn_ignored_settings` reports any other.
const CLIENT_OPTIONS: &[&str] = &["env.denylist", "env.blacklist"];

/// The client's `host_volume` blocks as the node declares them (paths checked by the client).
fn host_volumes(
    c: &crate::config::ClientBlock,
) -> BTreeMap<String, drover_structs::ClientHostVolumeConfig> {
    c.host_volume
        .iter()
        .flatten()
        .map(|(name, b)| {
            let hv = drover_structs::ClientHostVolumeConfig {
                name: name.clone(),
                path: b.path.clone(),
                read_only: b.read_only,
            };
            (name.clone(), hv)
        })
        .collect()
}

/// The client's periodic GC settings over Nomad's defaults; a value that does not parse
/// stops the agent, naming its key.
fn gc_limits(c: &ClientBlock) -> anyhow::Result<drover_client::gc::GcLimits> {
    let mut limits = drover_client::gc::GcLimits::default();
    if let Some(v) = &c.gc_interval {
        limits.interval = drover_jobspec::parse_duration(v)
            .map_err(|e| anyhow::anyhow!("client.gc_interval: {e}"))?;
        if limits.interval.is_zero() {
            anyhow::bail!("client.gc_interval must be greater than 0");
        }
    }
    if let Some(n) = c.gc_max_allocs {
        limits.max_allocs = n;
    }
    for (key, value, slot) in [
        (
            "gc_disk_usage_threshold",
            c.gc_disk_usage_threshold,
            &mut limits.disk_usage_threshold,
        ),
        (
            "gc_inode_usage_threshold",
            c.gc_inode_usage_threshold,
            &mut limits.inode_usage_threshold,
        ),
    ] {
        if let Some(v) = value {
            if !(0.0..=100.0).contains(&v) {
                anyhow::bail!("client.{key} must be a percentage (0 to 100), got {v}");
            }
            *slot = v;
        }
    }
    Ok(limits)
}

/// The client's env denylist, as Nomad reads it: the `env.denylist` option, else its older name
/// `env.blacklist`, else Nomad's default list. A value replaces the default list.
fn env_denylist(client: &ClientBlock) -> EnvDenylist {
    let options = client.options.as_ref();
    ["env.denylist", "env.blacklist"]
        .iter()
        .find_map(|key| options.and_then(|o| o.get(*key)))
        .map(|list| EnvDenylist::parse(list))
        .unwrap_or_default()
}

/// The client's `artifact` block over Nomad's defaults; a value that does not parse stops the
/// agent, naming its key.
/// The client's bridge network: Nomad's defaults under the `client` block's settings.
fn bridge_config(
    c: Option<&crate::config::ClientBlock>,
    client_dir: &std::path::Path,
) -> drover_client::network::cni::BridgeConfig {
    let cni_path = c
        .and_then(|c| c.cni_path.as_deref())
        .unwrap_or("/opt/cni/bin:/usr/lib/cni");
    let dirs = cni_path
        .split(':')
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .collect();
    let mut bridge = drover_client::network::cni::BridgeConfig::with_defaults(dirs, client_dir);
    if let Some(c) = c {
        if let Some(name) = c.bridge_network_name.clone().filter(|n| !n.is_empty()) {
            bridge.name = name;
        }
        if let Some(subnet) = c.bridge_network_subnet.clone().filter(|s| !s.is_empty()) {
            bridge.subnet = subnet;
        }
        if let Some(hairpin) = c.bridge_network_hairpin_mode {
            bridge.hairpin = hairpin;
        }
    }
    bridge
}

fn artifact_config(
    block: &crate::config::ArtifactBlock,
) -> anyhow::Result<drover_client::artifact::ArtifactConfig> {
    use drover_client::artifact::parse_bytes;
    let mut c = drover_client::artifact::ArtifactConfig::default();
    let duration = |key: &str, v: &str| {
        drover_jobspec::parse_duration(v).map_err(|e| anyhow::anyhow!("client.artifact.{key}: {e}"))
    };
    let bytes = |key: &str, v: &str| {
        parse_bytes(v).map_err(|e| anyhow::anyhow!("client.artifact.{key}: {e}"))
    };
    if let Some(v) = &block.http_read_timeout {
        c.http_read_timeout = duration("http_read_timeout", v)?;
    }
    if let Some(v) = &block.http_max_size {
        c.http_max_bytes = bytes("http_max_size", v)?;
    }
    if let Some(v) = &block.decompression_size_limit {
        c.decompression_size_limit = bytes("decompression_size_limit", v)?;
    }
    if let Some(n) = block.decompression_file_count_limit {
        c.decompression_file_count_limit = n;
    }
    if let Some(b) = block.disable_filesystem_isolation {
        c.disable_filesystem_isolation = b;
    }
    for (key, v) in [
        ("gcs_timeout", &block.gcs_timeout),
        ("git_timeout", &block.git_timeout),
        ("hg_timeout", &block.hg_timeout),
        ("s3_timeout", &block.s3_timeout),
    ] {
        if let Some(v) = v {
            duration(key, v)?;
        }
    }
    Ok(c)
}

/// Settings Nomad accepts in `server` and `client` blocks (and `client.options` keys) that
/// Drover does not act on yet.
fn ignored_settings(file: &AgentFile) -> Vec<String> {
    let server = file
        .server
        .iter()
        .flat_map(|s| s.other.keys().map(|k| format!("server.{k}")));
    let client = file
        .client
        .iter()
        .flat_map(|c| c.other.keys().map(|k| format!("client.{k}")));
    let options = file
        .client
        .iter()
        .flat_map(|c| c.options.iter().flat_map(|o| o.keys()))
        .filter(|k| !CLIENT_OPTIONS.contains(&k.as_str()))
        .map(|k| format!("client.options[{k:?}]"));
    file.unsupported_settings()
        .into_iter()
        .chain(server)
        .chain(client)
        .chain(options)
        .chain(crate::config::telemetry::ignored(file.telemetry.as_ref()))
        .collect()
}

/// Says once at start-up which settings have no effect, so nobody believes they took effect.
fn warn_ignored_settings(file: &AgentFile) {
    for key in ignored_settings(file) {
        tracing::warn!(setting = %key, "agent setting is not supported yet and has no effect");
    }
}

/// Returns on SIGINT or SIGTERM. SIGHUP reloads the TLS certificate files, as Nomad's agent
/// does: connections made afterwards use the new ones; a bad file keeps the old ones.
async fn wait_for_signal(tls: Option<&drover_tls::AgentTls>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut hup) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(term), Ok(hup)) => (term, hup),
        _ => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return,
            _ = term.recv() => return,
            _ = hup.recv() => match tls {
                Some(tls) => match tls.reload() {
                    Ok(()) => println!("==> Caught signal: hangup: reloaded the TLS certificates"),
                    Err(e) => eprintln!("==> Caught signal: hangup: TLS reload failed, the old certificates stay: {e}"),
                },
                None => println!("==> Caught signal: hangup: nothing to reload"),
            },
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_str;

    fn args(join: &[&str], expect: Option<u32>) -> AgentArgs {
        AgentArgs {
            join: join.iter().map(|s| s.to_string()).collect(),
            bootstrap_expect: expect,
            ..AgentArgs::default()
        }
    }

    fn config(args: &AgentArgs, file: &AgentFile, dev: bool) -> ServerConfig {
        server_config(args, file, std::path::Path::new("/d"), dev, "global", "dc1").unwrap()
    }

    fn driver_settings(hcl: &str, dev: bool) -> BTreeMap<String, serde_json::Value> {
        plugin_configs(&parse_str(hcl, "agent.hcl").unwrap(), dev)
    }

    #[test]
    fn raw_exec_is_enabled_only_by_dev_mode_or_the_config_file() {
        assert_eq!(driver_settings("", true)["raw_exec"]["enabled"], true);
        assert!(!driver_settings("", false).contains_key("raw_exec"));
        let block = |enabled: bool| {
            format!("plugin \"raw_exec\" {{\n  config {{ enabled = {enabled} }}\n}}\n")
        };
        assert_eq!(
            driver_settings(&block(false), true)["raw_exec"]["enabled"],
            false
        );
        assert_eq!(
            driver_settings(&block(true), false)["raw_exec"]["enabled"],
            true
        );
    }

    #[test]
    fn client_chroot_env_reaches_the_exec_driver_unless_its_plugin_block_sets_one() {
        let client = "client {\n  chroot_env {\n    \"/usr\" = \"/usr\"\n  }\n}\n";
        assert_eq!(
            driver_settings(client, false)["exec"]["chroot_env"],
            json!({"/usr": "/usr"})
        );
        let both = format!(
            "{client}plugin \"exec\" {{\n  config {{\n    chroot_env = {{ \"/etc\" = \"/etc\" }}\n  }}\n}}\n"
        );
        assert_eq!(
            driver_settings(&both, false)["exec"]["chroot_env"],
            json!({"/etc": "/etc"})
        );
        assert!(!driver_settings("", false).contains_key("exec"));
    }

    #[test]
    fn a_server_bootstraps_alone_unless_told_to_join_or_to_expect_others() {
        let none = AgentFile::default();
        assert_eq!(config(&args(&[], None), &none, false).bootstrap_expect, 1);
        // Told to join but not how many to expect: it only ever joins.
        let joining = config(&args(&["10.0.0.1:4647"], None), &none, false);
        assert_eq!((joining.bootstrap_expect, joining.join.len()), (0, 1));
        assert_eq!(
            config(&args(&["a:1"], Some(3)), &none, false).bootstrap_expect,
            3
        );
        assert_eq!(
            config(&args(&["a:1"], Some(3)), &none, true).bootstrap_expect,
            1
        );
    }

    #[test]
    fn server_join_and_raft_settings_come_from_the_server_block() {
        let file = parse_str(
            r#"
server {
  bootstrap_expect = 5
  raft_multiplier = 2
  raft_snapshot_threshold = 100
  server_join { retry_join = ["a:4647", "b:4647"] }
}
client {
  servers = ["c:4647"]
  server_join { retry_join = ["d:4647"] }
}
"#,
            "agent.hcl",
        )
        .unwrap();
        let sc = config(&args(&["a:4647"], None), &file, false);
        assert_eq!(sc.bootstrap_expect, 5);
        assert_eq!(sc.join, vec!["a:4647", "b:4647"]);
        assert_eq!(sc.raft_tick, Duration::from_millis(100));
        assert_eq!(sc.snapshot_threshold, 100);
        let mut cli = args(&[], None);
        cli.servers = vec!["e:4647".into()];
        assert_eq!(
            client_servers(&cli, &file),
            vec!["e:4647", "c:4647", "d:4647"]
        );
        let bad = parse_str("server {\n raft_multiplier = 11\n}\n", "a.hcl").unwrap();
        assert!(
            server_config(
                &args(&[], None),
                &bad,
                std::path::Path::new("/d"),
                false,
                "g",
                "d"
            )
            .is_err()
        );
    }

    #[test]
    fn the_advertised_rpc_address_is_never_unspecified() {
        let file = AgentFile::default();
        let bound: SocketAddr = "127.0.0.1:4647".parse().unwrap();
        assert_eq!(advertise_rpc(&file, bound).unwrap(), "127.0.0.1:4647");
        let any: SocketAddr = "0.0.0.0:4647".parse().unwrap();
        let addr: SocketAddr = advertise_rpc(&file, any).unwrap().parse().unwrap();
        assert!(!addr.ip().is_unspecified());
        let file = parse_str("advertise {\n rpc = \"10.1.2.3\"\n}\n", "a.hcl").unwrap();
        assert_eq!(advertise_rpc(&file, any).unwrap(), "10.1.2.3:4647");
    }

    fn client_denylist(hcl: &str) -> EnvDenylist {
        let file = parse_str(hcl, "agent.hcl").unwrap();
        env_denylist(&file.client.unwrap_or_default())
    }

    #[test]
    fn client_option_env_denylist_replaces_the_default_and_env_blacklist_is_its_older_name() {
        assert_eq!(client_denylist(""), EnvDenylist::default());
        assert_eq!(client_denylist("client {}\n"), EnvDenylist::default());
        let denylist =
            "client {\n  options {\n    \"env.denylist\" = \"DROVER_TEST_SECRET,OTHER\"\n  }\n}\n";
        let list = client_denylist(denylist);
        assert!(list.contains("DROVER_TEST_SECRET") && list.contains("OTHER"));
        assert!(!list.contains("VAULT_TOKEN"));
        let assigned = "client {\n  options = {\n    \"env.blacklist\" = \"OLD\"\n  }\n}\n";
        assert_eq!(client_denylist(assigned), EnvDenylist::parse("OLD"));
        let both = "client {\n  options {\n    \"env.blacklist\" = \"OLD\"\n    \"env.denylist\" = \"NEW\"\n  }\n}\n";
        assert_eq!(client_denylist(both), EnvDenylist::parse("NEW"));
    }

    #[test]
    fn client_options_drover_does_not_act_on_are_reported_as_ignored() {
        let file = parse_str(
            "client {\n  options {\n    \"env.denylist\" = \"A\"\n    \"driver.raw_exec.enable\" = \"1\"\n  }\n}\n",
            "agent.hcl",
        )
        .unwrap();
        assert_eq!(
            ignored_settings(&file),
            vec!["client.options[\"driver.raw_exec.enable\"]".to_string()]
        );
    }
}
