//! The plugin served in-process on a unix socket in a temporary directory, driven through
//! drover-csi's client (and a raw channel for what the typed client cannot send), checked
//! against the spec: required fields, idempotency, error codes, and real bind mounts.

mod controller;
mod identity;
mod node;
mod snapshot;

use std::path::{Path, PathBuf};

use drover_csi::{
    AccessMode, CallOptions, Code, CreateVolumeRequest, CsiClient, CsiError, Volume,
    VolumeCapability,
};
use tokio::sync::oneshot;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::{Config, ServeError, listen, serve};

pub const NODE: &str = "node-1";
pub const GIB: i64 = 1 << 30;

/// A running plugin and a client of it. Dropping it stops the plugin and undoes any mount
/// left under its directory, so that removing the directory cannot reach through a mount.
pub struct Harness {
    dir: tempfile::TempDir,
    pub config: Config,
    pub socket: PathBuf,
    pub client: CsiClient,
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
}

impl Harness {
    pub async fn start() -> Harness {
        Self::start_with(|_| {}).await
    }

    /// Starts with the test configuration as changed by `tweak`.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            node_id: NODE.into(),
            state_dir: dir.path().join("state"),
            max_volumes_per_node: 0,
            capacity_bytes: 10 * GIB,
        };
        tweak(&mut config);
        let socket = dir.path().join("csi.sock");
        let (stop, served) = spawn(config.clone(), &socket);
        let client = CsiClient::connect_with(&socket, test_options())
            .await
            .unwrap();
        Harness {
            dir,
            config,
            socket,
            client,
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// Stops the plugin and starts a new one on the same state and socket.
    pub async fn restart(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.unwrap().unwrap();
        }
        let (stop, served) = spawn(self.config.clone(), &self.socket);
        self.stop = Some(stop);
        self.served = Some(served);
        self.client = CsiClient::connect_with(&self.socket, test_options())
            .await
            .unwrap();
    }

    /// The harness's directory: socket, state and every staging and target path.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A path under the harness's directory (for staging and target paths).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn volume_dir(&self, volume: &Volume) -> PathBuf {
        self.config
            .state_dir
            .join("volumes")
            .join(&volume.external_id)
    }

    /// A volume of 1 GiB, single-node-writer.
    pub async fn create(&self, name: &str) -> Volume {
        self.client
            .create_volume(&CreateVolumeRequest {
                name: name.into(),
                capabilities: vec![writer()],
                ..Default::default()
            })
            .await
            .unwrap()
    }

    /// A channel for requests the typed client cannot build.
    pub async fn raw(&self) -> Channel {
        let socket = self.socket.clone();
        Endpoint::from_static("http://csi")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(socket).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .unwrap()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.abort();
        }
        for point in mounts_under(self.dir.path()).into_iter().rev() {
            let _ = nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

fn spawn(
    config: Config,
    socket: &Path,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), ServeError>>,
) {
    let listener = listen(socket).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(serve(config, listener, async {
        let _ = stopped.await;
    }));
    (stop, served)
}

fn test_options() -> CallOptions {
    CallOptions {
        timeout: std::time::Duration::from_secs(10),
        max_attempts: 3,
        initial_backoff: std::time::Duration::from_millis(20),
        max_backoff: std::time::Duration::from_millis(200),
    }
}

/// Mount points at or under `dir`, shortest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = crate::mounts::mount_points(&table)
        .filter(|p| p.starts_with(&dir))
        .collect();
    points.sort_by_key(|p| p.as_os_str().len());
    points
}

/// Whether `path` appears as a mount point in `/proc/self/mountinfo`.
pub fn in_mountinfo(path: &Path) -> bool {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    crate::mounts::mount_points(&table).any(|p| p == path)
}

pub fn writer() -> VolumeCapability {
    VolumeCapability::file_system(AccessMode::SingleNodeWriter)
}

/// The gRPC code of a failed call; panics on success or on a failure without a code.
#[track_caller]
pub fn code_of<T: std::fmt::Debug>(result: Result<T, CsiError>) -> Code {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code().unwrap_or_else(|| panic!("no gRPC code in {e}")),
    }
}

/// The code of a raw call's status.
#[track_caller]
pub fn raw_code<T: std::fmt::Debug>(result: Result<T, tonic::Status>) -> Code {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(s) => s.code(),
    }
}
