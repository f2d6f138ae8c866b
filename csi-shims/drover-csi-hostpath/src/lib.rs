//! `drover-csi-hostpath`: a monolith CSI plugin (Identity + Controller + Node on one unix
//! socket) whose volumes are directories under a state directory of the node. Meant for
//! tests and single-node clusters, as Kubernetes' csi-driver-host-path is:
//! - CreateVolume makes `<state-dir>/volumes/<id>`; names, capacities and attachments are kept
//!   in `<state-dir>/state.json`, so a restarted plugin knows its volumes. Capacities are
//!   bookkeeping against a pool size (`Config::capacity_bytes`): nothing enforces them on
//!   disk.
//! - NodeStageVolume bind-mounts the volume directory on the staging path, NodePublishVolume
//!   bind-mounts the staging path (or the volume directory when not staged) on the target,
//!   read-only when asked or when the access mode only reads.
//! - Volumes live on one node: every volume's accessible topology is this node
//!   ([`TOPOLOGY_KEY`] = node id), and ControllerPublishVolume knows only this node.
//! - Snapshots are copies of a volume's directory (`<state-dir>/snapshots/<id>`), ready at
//!   once; CreateVolume from a snapshot or from another volume (cloning) starts from a copy.
//! - Block devices are not supported.
//!
//! Must not depend on: Drover's server, client or drivers (only drover-csi, the protocol).

mod controller;
mod identity;
mod mounts;
mod node;
mod plugin;
mod snapshot;
mod store;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use drover_csi::proto::controller_server::ControllerServer;
use drover_csi::proto::identity_server::IdentityServer;
use drover_csi::proto::node_server::NodeServer;

pub use plugin::Config;
pub use store::StoreError;

/// The plugin's name (`GetPluginInfo`).
pub const PLUGIN_NAME: &str = "hostpath.csi.drover.dev";

/// The topology segment every volume and the node carry: the node id.
pub const TOPOLOGY_KEY: &str = "topology.hostpath.csi.drover.dev/node";

/// Why the plugin cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("endpoint {0:?}: only unix sockets are supported (unix:///path or a path)")]
    Endpoint(String),
    #[error("listening on {}: {source}", path.display())]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// The socket path of a CSI endpoint: `unix:///path`, `unix:/path` or a plain path.
pub fn socket_path_of_endpoint(endpoint: &str) -> Result<PathBuf, ServeError> {
    let path = match endpoint.strip_prefix("unix://") {
        Some(rest) => rest,
        None => match endpoint.strip_prefix("unix:") {
            Some(rest) => rest,
            None if !endpoint.contains("://") => endpoint,
            None => return Err(ServeError::Endpoint(endpoint.to_string())),
        },
    };
    if path.is_empty() {
        return Err(ServeError::Endpoint(endpoint.to_string()));
    }
    Ok(PathBuf::from(path))
}

/// Listens on `path`, replacing a socket a previous run left behind (a plugin restarted by
/// its supervisor finds its old socket file in place).
pub fn listen(path: &Path) -> Result<tokio::net::UnixListener, ServeError> {
    use std::os::unix::fs::FileTypeExt;
    let listen_error = |source| ServeError::Listen {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(listen_error)?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && meta.file_type().is_socket()
    {
        std::fs::remove_file(path).map_err(listen_error)?;
    }
    tokio::net::UnixListener::bind(path).map_err(listen_error)
}

/// How long a stopping plugin lets calls in flight finish. Bounded: a graceful stop would
/// otherwise wait for every client to hang up, and a CO keeps its connection open.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Serves the plugin on `listener` until `shutdown` completes (then up to [`SHUTDOWN_GRACE`]
/// more for calls in flight).
pub async fn serve(
    config: Config,
    listener: tokio::net::UnixListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let plugin = std::sync::Arc::new(plugin::Plugin::open(config)?);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = tonic::transport::Server::builder()
        .add_service(IdentityServer::new(identity::Identity))
        .add_service(ControllerServer::new(controller::Controller(
            plugin.clone(),
        )))
        .add_service(NodeServer::new(node::Node(plugin)))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            async move {
                let mut stopped = stopped;
                let _ = stopped.wait_for(|s| *s).await;
            },
        );
    tokio::pin!(server);
    tokio::pin!(shutdown);
    tokio::select! {
        served = &mut server => return Ok(served?),
        () = &mut shutdown => {}
    }
    let _ = stop.send(true);
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(served) => Ok(served?),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests;
