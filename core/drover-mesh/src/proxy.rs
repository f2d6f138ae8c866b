//! The proxy: its listeners are bound once from the first configuration; what they act on
//! (certificates, endpoints, intentions) is read from the newest configuration for every new
//! connection, so a rewrite of the file takes effect within a second without dropping
//! connections that are open.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{ConfigError, ExposePath, ProxyConfig};
use crate::identity::{self, Identity};

/// How often the configuration file is looked at.
const RELOAD_EVERY: Duration = Duration::from_secs(1);
/// How long a connection to a destination or the local service may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head an expose listener reads before it decides.
const MAX_HEAD: usize = 16 * 1024;

/// Why the proxy cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the proxy's certificates: {0}")]
    Tls(String),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A configuration with its TLS built.
pub struct Loaded {
    pub config: ProxyConfig,
    acceptor: TlsAcceptor,
    connector: TlsConnector,
    /// Spreads upstream connections over a destination's proxies.
    next: AtomicUsize,
}

impl Loaded {
    pub fn new(config: ProxyConfig) -> Result<Loaded, ProxyError> {
        let tls = drover_tls::mesh::workload_tls(&config.cert_pem, &config.key_pem, &config.ca_pem)
            .map_err(ProxyError::Tls)?;
        Ok(Loaded {
            config,
            acceptor: TlsAcceptor::from(tls.server),
            connector: TlsConnector::from(tls.client),
            next: AtomicUsize::new(0),
        })
    }
}

/// Runs the proxy of the configuration at `path` until the process ends; `ready` is called
/// once its listeners are bound and it serves.
pub async fn run(path: PathBuf, ready: impl FnOnce()) -> Result<(), ProxyError> {
    let first = ProxyConfig::load(&path)?;
    let (tx, rx) = watch::channel(Arc::new(Loaded::new(first.clone())?));
    let listeners = Listeners::bind(&first).await?;
    tokio::spawn(reload(path, first, tx));
    ready();
    listeners.serve(rx).await;
    Ok(())
}

/// Re-reads the file every second; a configuration that does not load is logged and the last
/// good one kept.
async fn reload(path: PathBuf, mut current: ProxyConfig, tx: watch::Sender<Arc<Loaded>>) {
    let mut tick = tokio::time::interval(RELOAD_EVERY);
    loop {
        tick.tick().await;
        let next = match ProxyConfig::load(&path) {
            Ok(c) if c == current => continue,
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "keeping the last proxy configuration");
                continue;
            }
        };
        match Loaded::new(next.clone()) {
            Ok(loaded) => {
                current = next;
                if tx.send(Arc::new(loaded)).is_err() {
                    return;
                }
            }
            Err(e) => tracing::warn!(error = %e, "keeping the last proxy configuration"),
        }
    }
}

/// The bound listeners of a proxy.
pub struct Listeners {
    inbound: Option<(TcpListener, SocketAddr)>,
    upstreams: Vec<(TcpListener, String)>,
    expose: Vec<(TcpListener, Vec<ExposePath>)>,
}

async fn listen(addr: SocketAddr) -> Result<TcpListener, ProxyError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ProxyError::Listen { addr, source })
}

impl Listeners {
    pub async fn bind(config: &ProxyConfig) -> Result<Listeners, ProxyError> {
        let inbound = match &config.inbound {
            Some(i) => Some((listen(i.bind).await?, i.local)),
            None => None,
        };
        let mut upstreams = Vec::new();
        for u in &config.upstreams {
            upstreams.push((listen(u.bind).await?, u.destination.clone()));
        }
        // One listener per port; several paths may share it.
        let mut by_port: std::collections::BTreeMap<u16, Vec<ExposePath>> = Default::default();
        for e in &config.expose {
            by_port.entry(e.listener_port).or_default().push(e.clone());
        }
        let mut expose = Vec::new();
        for (port, paths) in by_port {
            expose.push((listen(SocketAddr::from(([0, 0, 0, 0], port))).await?, paths));
        }
        Ok(Listeners {
            inbound,
            upstreams,
            expose,
        })
    }

    /// The inbound listener's address (tests bind port 0).
    pub fn inbound_addr(&self) -> Option<SocketAddr> {
        self.inbound.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    pub fn upstream_addrs(&self) -> Vec<SocketAddr> {
        self.upstreams
            .iter()
            .filter_map(|(l, _)| l.local_addr().ok())
            .collect()
    }

    /// Serves every listener until the process ends.
    pub async fn serve(self, config: watch::Receiver<Arc<Loaded>>) {
        let mut tasks = tokio::task::JoinSet::new();
        if let Some((listener, local)) = self.inbound {
            tasks.spawn(accept_loop(listener, config.clone(), move |conn, cfg| {
                inbound(conn, cfg, local)
            }));
        }
        for (listener, destination) in self.upstreams {
            let destination = Arc::new(destination);
            tasks.spawn(accept_loop(listener, config.clone(), move |conn, cfg| {
                upstream(conn, cfg, destination.clone())
            }));
        }
        for (listener, paths) in self.expose {
            let paths = Arc::new(paths);
            tasks.spawn(accept_loop(listener, config.clone(), move |conn, _| {
                expose(conn, paths.clone())
            }));
        }
        while tasks.join_next().await.is_some() {}
    }
}

async fn accept_loop<F, Fut>(listener: TcpListener, config: watch::Receiver<Arc<Loaded>>, handle: F)
where
    F: Fn(TcpStream, Arc<Loaded>) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    loop {
        let conn = match listener.accept().await {
            Ok((conn, _)) => conn,
            Err(e) => {
                // Out of descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = conn.set_nodelay(true);
        let current = config.borrow().clone();
        let served = handle(conn, current);
        tokio::spawn(async move {
            if let Err(e) = served.await {
                tracing::debug!(error = %e, "proxied connection ended");
            }
        });
    }
}

async fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    let conn = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connecting to {addr}: timed out"))?
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let _ = conn.set_nodelay(true);
    Ok(conn)
}

/// A caller over mTLS: its identity must be of this trust domain and namespace, and the
/// intentions must let it call this service.
async fn inbound(conn: TcpStream, cfg: Arc<Loaded>, local: SocketAddr) -> Result<(), String> {
    let mut tls = cfg
        .acceptor
        .accept(conn)
        .await
        .map_err(|e| format!("TLS handshake of a caller: {e}"))?;
    let caller = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|c| identity::of_certificate(c));
    let me = cfg.config.identity();
    let allowed = caller.as_ref().is_some_and(|c| {
        c.trust_domain == me.trust_domain
            && c.namespace == me.namespace
            && cfg.config.intentions.allows(&c.service, &me.service)
    });
    if !allowed {
        let _ = tls.shutdown().await;
        return Err(format!(
            "{} may not call {}",
            caller.map_or_else(
                || "a caller without a mesh identity".into(),
                |c| c.to_string()
            ),
            me
        ));
    }
    let mut service = connect(local).await?;
    tokio::io::copy_bidirectional(&mut tls, &mut service)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A workload dialing an upstream: over mTLS to one of the destination's proxies, which must
/// prove it is that destination.
async fn upstream(
    mut conn: TcpStream,
    cfg: Arc<Loaded>,
    destination: Arc<String>,
) -> Result<(), String> {
    let endpoints = cfg
        .config
        .endpoints
        .get(destination.as_str())
        .filter(|e| !e.is_empty())
        .ok_or_else(|| format!("no proxy of {destination} is known"))?;
    let start = cfg.next.fetch_add(1, Ordering::Relaxed);
    let want = Identity {
        trust_domain: cfg.config.trust_domain.clone(),
        namespace: cfg.config.namespace.clone(),
        service: destination.to_string(),
    };
    let name = ServerName::try_from(want.dns_name()).map_err(|e| e.to_string())?;
    // The first endpoint that takes the connection, starting at the next in turn.
    let mut last_error = String::new();
    for i in 0..endpoints.len() {
        let addr = endpoints[(start + i) % endpoints.len()];
        let tcp = match connect(addr).await {
            Ok(t) => t,
            Err(e) => {
                last_error = e;
                continue;
            }
        };
        let mut tls =
            match tokio::time::timeout(CONNECT_TIMEOUT, cfg.connector.connect(name.clone(), tcp))
                .await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    last_error = format!("TLS with {addr}: {e}");
                    continue;
                }
                Err(_) => {
                    last_error = format!("TLS with {addr}: timed out");
                    continue;
                }
            };
        return tokio::io::copy_bidirectional(&mut conn, &mut tls)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
    }
    Err(format!("reaching {destination}: {last_error}"))
}

/// An expose listener: forwards a request whose path is one of `paths` to its local port,
/// answers 404 to any other.
async fn expose(mut conn: TcpStream, paths: Arc<Vec<ExposePath>>) -> Result<(), String> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    let end = loop {
        let n = conn.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if head.len() > MAX_HEAD {
            return Err("request head too large".into());
        }
    };
    let line = String::from_utf8_lossy(&head[..end]);
    let target = line.split_whitespace().nth(1).unwrap_or("");
    let path = target.split('?').next().unwrap_or("");
    let Some(p) = paths.iter().find(|p| p.path == path) else {
        let _ = conn
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
        return Ok(());
    };
    let mut service = connect(SocketAddr::from(([127, 0, 0, 1], p.local_path_port))).await?;
    service.write_all(&head).await.map_err(|e| e.to_string())?;
    tokio::io::copy_bidirectional(&mut conn, &mut service)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Where the client keeps a proxy's configuration in its task's secrets directory.
pub fn config_path(secrets_dir: &Path) -> PathBuf {
    secrets_dir.join("mesh-proxy.json")
}

#[cfg(test)]
mod tests;
