//! A task serving a CSI plugin (Nomad's `csi_plugin_supervisor` hook). Before the task starts:
//! the plugin's root directory on the host, visible in the task at `mount_dir` (its socket) and
//! at `stage_publish_base_dir` (where it mounts volumes), and `CSI_ENDPOINT`. While it runs:
//! probe until healthy, fingerprint, register with the [`CsiManager`], probe again every
//! [`PROBE_INTERVAL`] and report health changes. When it stops: deregister.
//!
//! Drivers without filesystem isolation (raw_exec) see host paths, so the plugin is told the
//! host paths. Isolating drivers (exec, docker) get driver mounts, as Nomad's hook asks for
//! them: the root at `mount_dir` (private: only the socket matters there) and at
//! `stage_publish_base_dir` with "bidirectional" propagation, from a root made a shared mount
//! point on the host, so the volumes the plugin stages and publishes inside its own mount
//! namespace appear on the host where the client binds them into other tasks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use drover_abi::{FsIsolation, MountConfig, MountPropagation};
use drover_csi::{CallOptions, CsiClient, CsiPluginConfig, SOCKET_NAME};
use drover_structs::csi::CsiPluginType;
use drover_structs::{Task, TaskEvent};
use tokio::sync::watch;

use super::fingerprint::fingerprint;
use super::host_mounts::{has_mounts_below, is_mount_point, make_shared_mount_point, unmount};
use super::{CsiManager, PluginInstance};

/// How often a healthy plugin is probed again (Nomad: 30 s).
pub const PROBE_INTERVAL: Duration = Duration::from_secs(30);
/// How often a plugin that is not ready yet is probed.
const WAIT_INTERVAL: Duration = Duration::from_millis(500);
/// Nomad's default `health_timeout`.
const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(30);
/// Nomad's default `stage_publish_base_dir`.
pub const DEFAULT_STAGE_PUBLISH_BASE_DIR: &str = "/local/csi";

/// The longest path a unix socket address holds (108 bytes with the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// The variable that tells a plugin task where to serve its socket.
pub const CSI_ENDPOINT: &str = "CSI_ENDPOINT";

/// Nomad's task event types of plugin health.
pub const TASK_EVENT_PLUGIN_HEALTHY: &str = "Plugin became healthy";
pub const TASK_EVENT_PLUGIN_UNHEALTHY: &str = "Plugin became unhealthy";

/// A plugin task, prepared or not.
#[derive(Debug, Clone)]
pub struct PluginTask {
    pub config: CsiPluginConfig,
    pub kind: CsiPluginType,
    pub alloc_id: String,
    pub host_root: PathBuf,
    /// The root as the plugin sees it (set by [`PluginTask::prepare`]).
    pub plugin_root: PathBuf,
    /// The task sets `CSI_ENDPOINT` itself (its `env` block): it is left as the task has it.
    pub endpoint_from_task: bool,
}

/// What a plugin task gets at its start: `CSI_ENDPOINT` and the driver's mounts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PluginSetup {
    pub env: BTreeMap<String, String>,
    pub mounts: Vec<MountConfig>,
}

impl PluginTask {
    /// The task's `csi_plugin` block, if it has one.
    pub fn of_task(
        task: &Task,
        alloc_id: &str,
        manager: &CsiManager,
    ) -> Option<Result<PluginTask, String>> {
        let raw = task.csi_plugin_config.as_ref()?;
        if raw.is_null() {
            return None;
        }
        let endpoint_from_task = task
            .env
            .as_ref()
            .is_some_and(|env| env.contains_key(CSI_ENDPOINT));
        Some(Self::parse(raw, alloc_id, manager).map(|p| PluginTask {
            endpoint_from_task,
            ..p
        }))
    }

    fn parse(
        raw: &serde_json::Value,
        alloc_id: &str,
        manager: &CsiManager,
    ) -> Result<PluginTask, String> {
        let config: CsiPluginConfig =
            serde_json::from_value(raw.clone()).map_err(|e| format!("csi_plugin block: {e}"))?;
        let mut config = config.validated().map_err(|e| e.to_string())?;
        if config.stage_publish_base_dir.is_empty() {
            config.stage_publish_base_dir = DEFAULT_STAGE_PUBLISH_BASE_DIR.into();
        }
        let kind = CsiPluginType::parse(&config.plugin_type)
            .ok_or_else(|| format!("csi_plugin: unknown type {:?}", config.plugin_type))?;
        let host_root = manager.plugin_root(kind, &config.id);
        Ok(PluginTask {
            plugin_root: host_root.clone(),
            config,
            kind,
            alloc_id: alloc_id.to_string(),
            host_root,
            endpoint_from_task: false,
        })
    }

    /// Creates the plugin's root and says how the task sees it: the environment it gets
    /// (`CSI_ENDPOINT`, unless the task sets it itself, as Nomad leaves it) and, for isolating
    /// drivers, the mounts. Idempotent: runs before every start of the task.
    pub fn prepare(&mut self, isolation: FsIsolation) -> Result<PluginSetup, String> {
        let mut setup = self.prepare_dirs_and_mounts(isolation)?;
        if self.endpoint_from_task {
            setup.env.remove(CSI_ENDPOINT);
        }
        Ok(setup)
    }

    fn prepare_dirs_and_mounts(&mut self, isolation: FsIsolation) -> Result<PluginSetup, String> {
        // The client dials the socket at its host path whatever the driver: one that does not
        // fit a unix socket address could never be reached (and a plugin without filesystem
        // isolation could not even listen on it), so say so now rather than never get healthy.
        let socket = self.host_root.join(SOCKET_NAME);
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(format!(
                "the plugin's socket path {} is {} bytes long, more than the {MAX_SOCKET_PATH} a \
                 unix socket address holds: use a shorter data_dir",
                socket.display(),
                socket.as_os_str().len()
            ));
        }
        create_private_dir(&self.host_root)?;
        let mut setup = PluginSetup::default();
        if isolation == FsIsolation::None {
            self.plugin_root = self.host_root.clone();
            setup.env.insert(
                CSI_ENDPOINT.into(),
                format!("unix://{}", self.host_root.join(SOCKET_NAME).display()),
            );
            return Ok(setup);
        }
        make_shared_mount_point(&self.host_root).map_err(|e| e.to_string())?;
        let host_path = self.host_root.display().to_string();
        let stage_dir = &self.config.stage_publish_base_dir;
        if self.config.mount_dir != *stage_dir {
            setup.mounts.push(MountConfig {
                task_path: self.config.mount_dir.clone(),
                host_path: host_path.clone(),
                readonly: false,
                propagation_mode: MountPropagation::Private,
            });
        }
        setup.mounts.push(MountConfig {
            task_path: stage_dir.clone(),
            host_path,
            readonly: false,
            propagation_mode: MountPropagation::Bidirectional,
        });
        self.plugin_root = PathBuf::from(stage_dir);
        setup.env.insert(
            CSI_ENDPOINT.into(),
            format!("unix://{}", self.config.socket_path_in_task()),
        );
        Ok(setup)
    }

    /// Undoes the shared mount point [`PluginTask::prepare`] made of the root, once nothing is
    /// mounted below it any more (volumes still published stay reachable on the host).
    pub fn release_mounts(&self) {
        let busy = has_mounts_below(&self.host_root).unwrap_or(true);
        if busy || !is_mount_point(&self.host_root).unwrap_or(false) {
            return;
        }
        if let Err(e) = unmount(&self.host_root) {
            tracing::warn!(error = %e, "unmounting the CSI plugin directory");
        }
    }

    /// Starts probing and fingerprinting the plugin; task events go to `events`.
    pub fn supervise(
        &self,
        manager: CsiManager,
        events: crate::task_runner::OutsideEvents,
    ) -> Supervisor {
        let (stop, stop_rx) = watch::channel(false);
        let join = tokio::spawn(supervise(self.clone(), manager, events, stop_rx));
        Supervisor { stop, join }
    }

    fn health_timeout(&self) -> Duration {
        if self.config.health_timeout > 0 {
            Duration::from_nanos(self.config.health_timeout as u64)
        } else {
            DEFAULT_HEALTH_TIMEOUT
        }
    }
}

/// The running supervision of one plugin task.
pub struct Supervisor {
    stop: watch::Sender<bool>,
    join: tokio::task::JoinHandle<()>,
}

impl Supervisor {
    /// Stops supervising and deregisters the plugin.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.join.await;
    }
}

fn create_private_dir(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| format!("failed to create mount point {}: {e}", path.display()))
}

/// One probe: connects (the plugin may have been restarted) and asks whether it is ready.
async fn probe(socket: &Path) -> Result<CsiClient, String> {
    if !socket.exists() {
        return Err(format!(
            "failed to stat socket: {} is missing",
            socket.display()
        ));
    }
    let options = CallOptions {
        timeout: Duration::from_secs(5),
        max_attempts: 1,
        ..CallOptions::default()
    };
    let client = CsiClient::connect_with(socket, options)
        .await
        .map_err(|e| format!("failed to create csi client: {e}"))?;
    match client.probe().await {
        Ok(true) => Ok(client.with_options(CallOptions::default())),
        Ok(false) => Err("plugin is not ready".into()),
        Err(e) => Err(format!("failed to probe plugin: {e}")),
    }
}

async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

/// Nomad's kill of a plugin task that did not become healthy in time: it fails the task.
fn health_timeout_kill(timeout: Duration) -> TaskEvent {
    let mut ev = TaskEvent::new(drover_structs::TASK_EVENT_KILLING);
    ev.fails_task = true;
    ev.display_message = format!(
        "CSI plugin did not become healthy before configured {} health timeout",
        drover_structs::time::go_duration(timeout.as_nanos() as i64)
    );
    ev
}

fn event(kind: &str, message: String) -> TaskEvent {
    TaskEvent::new(kind).with_message(message)
}

/// Probes, fingerprints and registers the plugin; answers whether it registered.
async fn register(
    task: &PluginTask,
    manager: &CsiManager,
    client: CsiClient,
) -> Result<(), String> {
    let fp = fingerprint(&client, &task.config.id, &task.alloc_id, task.kind)
        .await
        .map_err(|e| format!("failed to fingerprint plugin: {e}"))?;
    manager.register(
        PluginInstance {
            id: task.config.id.clone(),
            kind: task.kind,
            alloc_id: task.alloc_id.clone(),
            host_root: task.host_root.clone(),
            plugin_root: task.plugin_root.clone(),
            client,
            node_capabilities: fp.node_capabilities,
            external_node_id: fp.external_node_id,
        },
        fp.controller,
        fp.node,
    );
    Ok(())
}

async fn supervise(
    task: PluginTask,
    manager: CsiManager,
    events: crate::task_runner::OutsideEvents,
    mut stop: watch::Receiver<bool>,
) {
    let id = task.config.id.clone();
    let socket = task.host_root.join(SOCKET_NAME);
    let started = tokio::time::Instant::now();
    // Until it first registers: probe often, so a new plugin is usable quickly.
    loop {
        let result = match probe(&socket).await {
            Ok(client) => register(&task, &manager, client).await,
            Err(e) => Err(e),
        };
        let last_error = match result {
            Ok(()) => {
                let _ = events.send(Box::new(event(
                    TASK_EVENT_PLUGIN_HEALTHY,
                    format!("plugin: {id}"),
                )));
                tracing::info!(plugin = %id, "CSI plugin registered");
                break;
            }
            Err(e) => e,
        };
        if started.elapsed() > task.health_timeout() {
            let _ = events.send(Box::new(event(
                TASK_EVENT_PLUGIN_UNHEALTHY,
                format!("plugin {id} did not become healthy: {last_error}"),
            )));
            // Nomad kills the task, failing it: its allocation is replaced elsewhere.
            let _ = events.send(Box::new(health_timeout_kill(task.health_timeout())));
            manager.deregister(&id, &task.alloc_id);
            return;
        }
        tracing::debug!(plugin = %id, error = %last_error, "CSI plugin not ready");
        if sleep_or_stop(WAIT_INTERVAL, &mut stop).await {
            manager.deregister(&id, &task.alloc_id);
            return;
        }
    }
    let mut healthy = true;
    loop {
        if sleep_or_stop(PROBE_INTERVAL, &mut stop).await {
            break;
        }
        let result = match probe(&socket).await {
            Ok(client) => register(&task, &manager, client).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) if !healthy => {
                healthy = true;
                let _ = events.send(Box::new(event(
                    TASK_EVENT_PLUGIN_HEALTHY,
                    format!("plugin: {id}"),
                )));
            }
            Ok(()) => {}
            Err(e) => {
                manager.mark_unhealthy(&id, &task.alloc_id, &e);
                if healthy {
                    healthy = false;
                    let _ = events.send(Box::new(event(
                        TASK_EVENT_PLUGIN_UNHEALTHY,
                        format!("error: {e}"),
                    )));
                }
            }
        }
    }
    manager.deregister(&id, &task.alloc_id);
    tracing::info!(plugin = %id, "CSI plugin deregistered");
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    fn plugin(host_root: PathBuf) -> PluginTask {
        PluginTask {
            config: CsiPluginConfig {
                id: "hostpath".into(),
                plugin_type: "monolith".into(),
                mount_dir: "/csi".into(),
                stage_publish_base_dir: DEFAULT_STAGE_PUBLISH_BASE_DIR.into(),
                health_timeout: 0,
            },
            kind: CsiPluginType::Monolith,
            alloc_id: "a1".into(),
            plugin_root: host_root.clone(),
            host_root,
            endpoint_from_task: false,
        }
    }

    #[tokio::test]
    async fn a_plugin_not_healthy_within_its_health_timeout_is_killed_failing_its_task() {
        let root = std::env::temp_dir().join(format!("drover-sup-late-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let mut task = plugin(root.clone());
        task.config.health_timeout = Duration::from_millis(100).as_nanos() as i64;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (_stop_tx, stop) = watch::channel(false);
        // No socket ever appears: the supervisor gives up on its own.
        supervise(task, CsiManager::new(&root), tx, stop).await;
        let unhealthy = rx.try_recv().expect("an unhealthy event");
        assert_eq!(unhealthy.event_type, TASK_EVENT_PLUGIN_UNHEALTHY);
        let kill = rx.try_recv().expect("the kill");
        assert_eq!(kill.event_type, drover_structs::TASK_EVENT_KILLING);
        assert!(kill.fails_task);
        assert_eq!(
            kill.display_message,
            "CSI plugin did not become healthy before configured 100ms health timeout"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_socket_path_too_long_for_a_unix_socket_fails_the_setup_with_the_reason() {
        let root = std::env::temp_dir().join("d".repeat(120));
        let mut p = plugin(root.clone());
        let err = p.prepare(FsIsolation::None).unwrap_err();
        assert!(err.contains("use a shorter data_dir"), "{err}");
        assert!(!root.exists(), "nothing made");
        let fits = std::env::temp_dir().join(format!("drover-sup-len-{}", std::process::id()));
        assert!(plugin(fits.clone()).prepare(FsIsolation::None).is_ok());
        let _ = std::fs::remove_dir_all(&fits);
    }

    #[test]
    fn a_csi_endpoint_the_task_sets_itself_is_left_alone() {
        let root = std::env::temp_dir().join(format!("drover-sup-own-{}", std::process::id()));
        let manager = CsiManager::new(&root);
        let task = Task {
            name: "plugin".into(),
            env: Some(BTreeMap::from([(
                CSI_ENDPOINT.to_string(),
                "unix://csi/csi.sock".to_string(),
            )])),
            csi_plugin_config: Some(serde_json::json!({
                "ID": "hostpath", "Type": "monolith", "MountDir": "/csi"
            })),
            ..Default::default()
        };
        let mut p = PluginTask::of_task(&task, "a1", &manager)
            .expect("a csi_plugin block")
            .expect("a valid block");
        assert!(p.endpoint_from_task);
        let setup = p.prepare(FsIsolation::None).unwrap();
        assert!(setup.env.is_empty(), "{setup:?}");
        assert!(
            root.join("monolith/hostpath").is_dir(),
            "the root is made all the same"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_plugin_without_isolation_gets_the_host_socket_and_no_mounts() {
        let root = std::env::temp_dir().join(format!("drover-sup-none-{}", std::process::id()));
        let mut p = plugin(root.clone());
        let setup = p.prepare(FsIsolation::None).unwrap();
        assert!(setup.mounts.is_empty());
        assert_eq!(
            setup.env["CSI_ENDPOINT"],
            format!("unix://{}", root.join(SOCKET_NAME).display())
        );
        assert!(!is_mount_point(&root).unwrap());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn an_isolated_plugin_gets_its_socket_dir_and_a_bidirectional_stage_dir() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: needs root to mount");
            return;
        }
        let root = std::env::temp_dir().join(format!("drover-sup-iso-{}", std::process::id()));
        let mut p = plugin(root.clone());
        let setup = p.prepare(FsIsolation::Chroot).unwrap();
        let host_path = root.display().to_string();
        assert_eq!(
            setup.mounts,
            vec![
                MountConfig {
                    task_path: "/csi".into(),
                    host_path: host_path.clone(),
                    readonly: false,
                    propagation_mode: MountPropagation::Private,
                },
                MountConfig {
                    task_path: "/local/csi".into(),
                    host_path,
                    readonly: false,
                    propagation_mode: MountPropagation::Bidirectional,
                },
            ]
        );
        assert_eq!(setup.env["CSI_ENDPOINT"], "unix:///csi/csi.sock");
        assert_eq!(p.plugin_root, PathBuf::from("/local/csi"));
        // The root is a shared mount point until the task lets it go.
        assert!(is_mount_point(&root).unwrap());
        p.prepare(FsIsolation::Chroot).unwrap();
        p.release_mounts();
        assert!(!is_mount_point(&root).unwrap());
        let _ = std::fs::remove_dir_all(&root);
    }
}
