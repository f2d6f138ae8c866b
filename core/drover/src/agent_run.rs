//! Starting the agent's parts in order: server (and its leadership), drivers, client, HTTP.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use drover_abi::Driver;
use drover_client::{Client, ClientConfig, ServerConn};
use drover_plugin_host::DriverCatalog;
use drover_server::{Server, ServerConfig};
use drover_structs::{AllocClientUpdate, Allocation, Node};
use serde_json::json;

use crate::agent::AgentArgs;
use crate::config::{AgentFile, parse_file};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The client's link to a server in the same process.
struct LocalServer(Server);

impl ServerConn for LocalServer {
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
        Ok(self.0.node_allocs(node_id, min_index, wait).await)
    }
    async fn update_allocs(&self, updates: Vec<AllocClientUpdate>) -> Result<(), String> {
        self.0
            .update_allocs(updates)
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
    fn stats(&self) -> serde_json::Value {
        json!({
            "Timestamp": drover_structs::time::now_nanos(),
            "AllocDirStats": null,
            "Memory": null,
            "CPU": null,
            "Uptime": 0,
            "AllocationsKnown": self.0.alloc_count(),
        })
    }
}

/// The drivers this agent offers: the built-ins (registered here, the one place that names
/// them), then plugin_dir, each configured from its `plugin` block.
fn driver_catalog(
    file: &AgentFile,
    dev: bool,
    plugin_dir: Option<&std::path::Path>,
) -> anyhow::Result<BTreeMap<String, Arc<dyn Driver>>> {
    let mut catalog = DriverCatalog::new();
    catalog.register(Arc::new(drover_driver_raw_exec::RawExecDriver::new()));
    catalog.register(Arc::new(drover_driver_exec::ExecDriver::new()));
    catalog.register(Arc::new(drover_driver_mock::MockDriver::new()));
    if let Some(dir) = plugin_dir {
        catalog.load_plugin_dir(dir)?;
    }
    let mut configs: BTreeMap<String, serde_json::Value> = file
        .plugin
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, block)| (name, block.config.unwrap_or_else(|| json!({}))))
        .collect();
    // Nomad's dev agent enables raw_exec.
    if dev {
        let raw = configs
            .entry("raw_exec".into())
            .or_insert_with(|| json!({}));
        if raw.get("enabled").is_none() {
            raw["enabled"] = json!(true);
        }
    }
    catalog.configure(&configs)?;
    Ok(catalog.into_map())
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let mut file = AgentFile::default();
    for path in &args.config {
        file = file.merge(parse_file(path)?);
    }
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
    if client_enabled && !server_enabled {
        bail!(
            "a client-only agent (without --server) needs remote servers, which is not supported yet: run the client together with a server (--server --client, or --dev)"
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
    let http_addr: SocketAddr = format!("{bind}:{http_port}")
        .parse()
        .with_context(|| format!("invalid bind address {bind:?}"))?;
    let rpc_addr: SocketAddr = format!("{bind}:{rpc_port}")
        .parse()
        .with_context(|| format!("invalid bind address {bind:?}"))?;
    let plugin_dir = args.plugin_dir.clone().or(file.plugin_dir.clone());

    // Bind HTTP first: a busy port is an error before anything else starts.
    let listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .with_context(|| format!("binding HTTP listener on {http_addr}"))?;

    warn_ignored_settings(&file);
    let mut sc = ServerConfig::new(data_dir.join("server"));
    sc.region = region.clone();
    sc.datacenter = datacenter.clone();
    if let Some(s) = &file.server {
        if let Some(n) = s.num_schedulers {
            sc.num_schedulers = n;
        }
        if let Some(g) = &s.heartbeat_grace {
            sc.heartbeat_grace = drover_jobspec::parse_duration(g)
                .map_err(|e| anyhow::anyhow!("server.heartbeat_grace: {e}"))?;
        }
        if let Some(t) = &s.min_heartbeat_ttl {
            sc.heartbeat_ttl = drover_jobspec::parse_duration(t)
                .map_err(|e| anyhow::anyhow!("server.min_heartbeat_ttl: {e}"))?;
        }
    }
    let server = Server::start(sc).await.context("starting server")?;
    server
        .wait_for_leadership(Duration::from_secs(10))
        .await
        .context("waiting for leadership")?;

    let node_name = args.node.clone().or(file.name.clone()).unwrap_or_default();
    let mut client = None;
    if client_enabled {
        let mut cc = ClientConfig::new(data_dir.join("client"));
        cc.node_name = node_name.clone();
        cc.datacenter = datacenter.clone();
        cc.region = region.clone();
        cc.http_addr = http_addr.to_string();
        cc.version = VERSION.into();
        cc.drivers = driver_catalog(&file, dev, plugin_dir.as_deref())?;
        if let Some(c) = &file.client {
            cc.node_class = c.node_class.clone().unwrap_or_default();
            cc.meta = c.meta.clone().unwrap_or_default();
            cc.cpu_total_compute = c.cpu_total_compute;
            cc.memory_total_mb = c.memory_total_mb;
            if let Some(r) = &c.reserved {
                cc.reserved_cpu = r.cpu.unwrap_or(0);
                cc.reserved_memory_mb = r.memory.unwrap_or(0);
                cc.reserved_disk_mb = r.disk.unwrap_or(0);
                cc.reserved_ports = r.reserved_ports.clone().unwrap_or_default();
                drover_structs::parse_port_ranges(&cc.reserved_ports)
                    .map_err(|e| anyhow::anyhow!("client.reserved.reserved_ports: {e}"))?;
            }
        }
        let c = Client::start(cc, Arc::new(LocalServer(server.clone())))
            .await
            .context("starting client")?;
        client = Some(c);
    }

    let agent = drover_http::AgentInfo {
        name: if node_name.is_empty() {
            hostname()
        } else {
            node_name.clone()
        },
        region: region.clone(),
        datacenter: datacenter.clone(),
        http_addr,
        rpc_addr,
        server: server_enabled,
        client: client_enabled,
        version: VERSION.into(),
        config_json: json!({
            "DataDir": data_dir,
            "BindAddr": bind,
            "Region": region,
            "Datacenter": datacenter,
            "DevMode": dev,
            "Ports": {"HTTP": http_port, "RPC": rpc_port},
            "Server": {"Enabled": server_enabled},
            "Client": {"Enabled": client_enabled},
            "Version": {"Version": VERSION},
        }),
    };
    let node_client: Option<Arc<dyn drover_http::NodeClient>> = client
        .clone()
        .map(|c| Arc::new(HttpClient(c)) as Arc<dyn drover_http::NodeClient>);
    let router = drover_http::router(server.clone(), node_client, agent);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(drover_http::serve(listener, router, async move {
        let _ = stop_rx.await;
    }));

    println!("==> Drover agent configuration:\n");
    println!("       Advertise Addrs: HTTP: {http_addr}; RPC: {rpc_addr}");
    println!("            Bind Addrs: HTTP: {http_addr}");
    println!("                Client: {client_enabled}");
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

    wait_for_signal().await;
    println!("==> Caught signal: shutting down");
    let _ = stop_tx.send(());
    if let Some(c) = &client {
        c.shutdown();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), http).await;
    server.shutdown();
    if let Some(d) = temp_dir {
        let _ = std::fs::remove_dir_all(d);
    }
    Ok(())
}

/// Settings Nomad accepts in `server` and `client` blocks that Drover does not act on yet: said
/// once at start-up, so nobody believes they took effect.
fn warn_ignored_settings(file: &AgentFile) {
    let server = file
        .server
        .iter()
        .flat_map(|s| s.other.keys().map(|k| format!("server.{k}")));
    let client = file
        .client
        .iter()
        .flat_map(|c| c.other.keys().map(|k| format!("client.{k}")));
    for key in server.chain(client) {
        tracing::warn!(setting = %key, "agent setting is not supported yet and has no effect");
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
