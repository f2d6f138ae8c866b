//! Out-of-process plugins: executables in `plugin_dir` speaking Nomad's external plugin
//! protocol (go-plugin's handshake, then gRPC over a unix socket), adapted to
//! `Arc<dyn drover_abi::Driver>`. External driver plugins written for Nomad and Drover's own
//! sidecars (drover-plugin-sdk) are the same thing to the agent.
//!
//! - [`load`] reattaches to the plugin an earlier agent started, when its saved reattach config
//!   still names a live, healthy process; otherwise it starts the executable. Either way it
//!   asks PluginInfo (a driver speaking API v0.1.0), ConfigSchema and TaskConfigSchema.
//! - Plugin and task config are msgpack-encoded against those schemas, as Nomad does.
//! - A supervisor thread per plugin restarts a plugin that dies, with backoff, re-applies its
//!   config and recovers its tasks (RecoverTask with the handles it keeps).
//! - With a state dir, the reattach config and the plugin's stderr log live there, and the
//!   plugin outlives the agent (its tasks keep being managed after a restart). Without one the
//!   plugin belongs to its driver object and is shut down when that is dropped.
//!
//! - Task events the plugin streams (TaskEvents) go to the agent's log, to the contract's
//!   `Driver::task_events` and to the listeners of [`GrpcDriver::subscribe_task_events`].
//! - Exec: the contract's `exec_task` uses ExecTask and falls back to ExecTaskStreaming for
//!   plugins that only stream; [`GrpcDriver::exec_streaming`] is the interactive form, over
//!   ExecTaskStreaming with ExecTask as its fallback.
//!
//! Calls run on a tokio runtime owned by this module; see [`runtime`].

mod adapter;
mod conn;
mod convert;
mod events;
mod exec;
mod exec_relay;
mod process;
mod reattach;
pub mod runtime;
mod supervisor;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use drover_abi::{DriverError, TaskHandle};

pub use adapter::GrpcDriver;
use conn::Conn;
pub use events::PluginTaskEvent;
pub use exec::{ExecEvent, ExecInputs, ExecSession};
use process::PluginProcess;
pub use reattach::ReattachConfig;

/// How long go-plugin's client waits for a plugin's handshake by default.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct GrpcOptions {
    /// Where reattach configs and plugin logs live (`<data_dir>/plugins`); `None` makes the
    /// plugin process belong to its driver object.
    pub state_dir: Option<PathBuf>,
    pub handshake_timeout: Duration,
}

impl Default for GrpcOptions {
    fn default() -> Self {
        GrpcOptions {
            state_dir: None,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    #[error("{}: could not start the plugin: {reason}", path.display())]
    Launch { path: PathBuf, reason: String },
    #[error("{}: {reason}", path.display())]
    Plugin { path: PathBuf, reason: String },
    #[error("{0}")]
    Runtime(String),
}

/// A driver plugin served by an executable.
pub struct GrpcPlugin {
    pub path: PathBuf,
    /// The name its `plugin "NAME"` block uses: the file name, as Nomad matches plugin blocks.
    pub config_name: String,
    pub driver: Arc<GrpcDriver>,
    /// Whether an earlier agent started the process (this one reattached to it).
    pub reattached: bool,
}

/// The `plugin "NAME"` block an executable answers to: its file name (Nomad strips only a
/// Windows `.exe`).
pub fn config_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.strip_suffix(".exe")
        .map(str::to_string)
        .unwrap_or(name)
}

/// The connection state of one plugin, shared by its driver object and its supervisor.
pub(crate) struct Shared {
    pub path: PathBuf,
    pub config_name: String,
    pub options: GrpcOptions,
    /// The driver name from the first PluginInfo; a restarted plugin must report the same.
    pub name: String,
    pub plugin_version: String,
    link: Mutex<Link>,
    changed: Condvar,
    /// Handles of the tasks this plugin runs, to recover them after a plugin restart.
    pub handles: Mutex<BTreeMap<String, TaskHandle>>,
    /// The last config applied with SetConfig, re-applied after a plugin restart.
    pub plugin_config: Mutex<Option<serde_json::Value>>,
    pub stopping: AtomicBool,
    /// Fires with `stopping`, for the async work that follows the plugin (its task events).
    stop_signal: tokio::sync::watch::Sender<bool>,
    /// Who listens to the plugin's task events.
    pub events: Arc<events::EventHub>,
    generation: AtomicU64,
}

struct Link {
    conn: Option<Conn>,
    generation: u64,
    /// Why there is no connection, for errors while there is none.
    down: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn new(path: &Path, config_name: String, options: GrpcOptions, conn: &Conn) -> Shared {
        Shared {
            path: path.to_path_buf(),
            config_name,
            options,
            name: conn.info.name.clone(),
            plugin_version: conn.info.plugin_version.clone(),
            link: Mutex::new(Link {
                conn: None,
                generation: 0,
                down: String::new(),
            }),
            changed: Condvar::new(),
            handles: Mutex::new(BTreeMap::new()),
            plugin_config: Mutex::new(None),
            stopping: AtomicBool::new(false),
            stop_signal: tokio::sync::watch::channel(false).0,
            events: Arc::default(),
            generation: AtomicU64::new(0),
        }
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// The driver object is going away: no more restarts, and nothing follows the plugin.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stop_signal.send_replace(true);
    }

    /// Makes `conn` the live connection, saves its reattach config and follows its task
    /// events.
    pub fn install(&self, conn: Conn) {
        if let Some(stream) = lock(&conn.events).take() {
            events::follow(
                stream,
                Arc::clone(&self.events),
                self.config_name.clone(),
                self.stop_signal.subscribe(),
            );
        }
        if let Some(dir) = &self.options.state_dir {
            let config = ReattachConfig {
                path: self.path.clone(),
                pid: conn.process.pid,
                start_ticks: conn.process.start_ticks,
                network: conn.handshake.network.clone(),
                address: conn.handshake.address.clone(),
                protocol_version: conn.handshake.app_version,
            };
            if let Err(e) = reattach::save(dir, &self.config_name, &config) {
                tracing::warn!(plugin = %self.config_name, error = %e, "could not save the reattach config");
            }
        }
        let mut link = lock(&self.link);
        link.generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        link.conn = Some(conn);
        self.changed.notify_all();
    }

    /// Drops the connection of `generation` (if it is still the live one) for `reason`.
    pub fn lost(&self, generation: Option<u64>, reason: String) {
        let mut link = lock(&self.link);
        if generation.is_none_or(|g| g == link.generation) {
            link.conn = None;
            link.down = reason;
        }
    }

    /// The live connection and its generation, waiting up to `wait` while the plugin restarts.
    pub fn current(&self, wait: Duration) -> Result<(Conn, u64), DriverError> {
        let deadline = Instant::now() + wait;
        let mut link = lock(&self.link);
        loop {
            if let Some(conn) = &link.conn {
                return Ok((conn.clone(), link.generation));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.stopping() {
                return Err(DriverError::Other(format!(
                    "plugin {} is not running: {}",
                    self.config_name, link.down
                )));
            }
            link = self
                .changed
                .wait_timeout(link, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Why there is no live connection (empty while there is one).
    pub fn down_reason(&self) -> String {
        let link = lock(&self.link);
        if link.conn.is_some() {
            String::new()
        } else {
            format!("plugin {} is not running: {}", self.config_name, link.down)
        }
    }

    /// The live connection without waiting, if any.
    pub fn now(&self) -> Option<Conn> {
        lock(&self.link).conn.clone()
    }
}

fn block<F>(future: F) -> Result<F::Output, GrpcError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    runtime::block(future).map_err(GrpcError::Runtime)
}

/// Connects again to the plugin an earlier agent started, if its reattach config names a live
/// process of this executable that answers as a driver.
fn reattach_to(state_dir: &Path, config_name: &str, path: &Path) -> Option<Conn> {
    let saved = reattach::load(state_dir, config_name)?;
    let forget = || reattach::remove(state_dir, config_name);
    if saved.path != path {
        forget();
        return None;
    }
    let Some(process) = PluginProcess::adopt(saved.pid, saved.start_ticks) else {
        tracing::info!(
            plugin = config_name,
            pid = saved.pid,
            "the plugin an earlier agent started is gone; starting it again"
        );
        forget();
        return None;
    };
    let process = Arc::new(process);
    let handshake = drover_plugin_proto::handshake::Handshake {
        core_version: drover_plugin_proto::handshake::CORE_PROTOCOL_VERSION,
        app_version: saved.protocol_version,
        network: saved.network,
        address: saved.address,
        protocol: "grpc".into(),
        server_cert: String::new(),
    };
    let reason = match block(conn::open(handshake, Arc::clone(&process))) {
        Ok(Ok(conn)) => {
            tracing::info!(
                plugin = config_name,
                pid = saved.pid,
                "reattached to the running plugin"
            );
            return Some(conn);
        }
        Ok(Err(reason)) => reason,
        Err(e) => e.to_string(),
    };
    tracing::warn!(plugin = config_name, pid = saved.pid, error = %reason, "could not reattach; replacing the plugin process");
    process.kill();
    forget();
    None
}

/// Starts the executable and connects to it.
fn start(path: &Path, options: &GrpcOptions, config_name: &str) -> Result<Conn, GrpcError> {
    let log = process::log_path(options.state_dir.as_deref(), config_name);
    if let Some(dir) = &options.state_dir {
        std::fs::create_dir_all(dir).map_err(|e| GrpcError::Launch {
            path: path.to_path_buf(),
            reason: format!("creating {}: {e}", dir.display()),
        })?;
    }
    let (process, handshake) = process::launch(path, log.as_deref(), options.handshake_timeout)?;
    let process = Arc::new(process);
    match block(conn::open(handshake, Arc::clone(&process)))? {
        Ok(conn) => Ok(conn),
        Err(reason) => {
            process.kill();
            Err(GrpcError::Plugin {
                path: path.to_path_buf(),
                reason,
            })
        }
    }
}

/// Stops the plugins that earlier agents left running with their reattach configs in
/// `state_dir`, except those configured as one of `keep`, and forgets them: SIGTERM, then
/// SIGKILL after two seconds. For plugins no longer in plugin_dir, and for a dev agent whose
/// data dir goes away with it.
pub fn stop_plugins(state_dir: &Path, keep: &[String]) {
    for name in reattach::saved(state_dir) {
        if keep.contains(&name) {
            continue;
        }
        if let Some(saved) = reattach::load(state_dir, &name)
            && let Some(process) = PluginProcess::adopt(saved.pid, saved.start_ticks)
        {
            tracing::info!(plugin = %name, pid = saved.pid, "stopping a plugin no longer in use");
            process.terminate(Duration::from_secs(2));
        }
        reattach::remove(state_dir, &name);
    }
}

/// Reattaches to, or starts, the plugin executable at `path` and returns its driver.
pub fn load(path: &Path, options: &GrpcOptions) -> Result<GrpcPlugin, GrpcError> {
    runtime::runtime().map_err(GrpcError::Runtime)?;
    let config_name = config_name(path);
    let reattached = options
        .state_dir
        .as_deref()
        .and_then(|dir| reattach_to(dir, &config_name, path));
    let was_running = reattached.is_some();
    let conn = match reattached {
        Some(conn) => conn,
        None => start(path, options, &config_name)?,
    };
    let process = Arc::clone(&conn.process);
    let shared = Arc::new(Shared::new(
        path,
        config_name.clone(),
        options.clone(),
        &conn,
    ));
    shared.install(conn);
    supervisor::watch(Arc::clone(&shared), process);
    if let Some(log) = process::log_path(options.state_dir.as_deref(), &config_name) {
        let watcher = Arc::clone(&shared);
        process::follow_log(log, config_name.clone(), move || watcher.stopping());
    }
    Ok(GrpcPlugin {
        path: path.to_path_buf(),
        config_name,
        driver: Arc::new(GrpcDriver::new(shared)),
        reattached: was_running,
    })
}

#[cfg(test)]
mod tests;
