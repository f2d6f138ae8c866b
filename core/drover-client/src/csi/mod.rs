//! CSI on the client (Nomad's `csimanager` and its hooks): the plugins this node's tasks serve,
//! their fingerprint on the node, and the volumes mounted for allocations.
//!
//! - [`CsiManager`]: the registry of healthy plugin instances (one socket each) and what the
//!   node reports about them (`CSIControllerPlugins` / `CSINodePlugins`); the client pushes a
//!   node update whenever that changes. Instances are kept per service, as Nomad's dynamic
//!   plugin registry keeps them per type: a node may run a plugin's controller and its node
//!   plugin as two allocations, and a monolith serves both.
//! - [`supervisor`]: a task with a `csi_plugin` block: its socket directory and mounts before it
//!   starts, then probing and fingerprinting it while it runs.
//! - [`volumes`]: a group's `volume "x" { type = "csi" }`: claim, stage, publish before the tasks
//!   start; unpublish, unstage, release after they end.
//!
//! Layout on the host, under `<client data dir>/csi/<type>/<plugin id>/` (the plugin's root,
//! the directory its socket lives in):
//! `csi.sock`, `staging/<volume>/<usage>/` (once per volume and usage on the node) and
//! `per-alloc/<alloc id>/<volume>/<usage>/` (what tasks bind).

pub mod fingerprint;
pub mod host_mounts;
pub mod server;
pub mod supervisor;
pub mod volumes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_csi::{CsiClient, NodeCapabilities};
use drover_structs::csi::{CsiInfo, CsiPluginType};
use tokio::sync::watch;

pub use server::{CsiServerCalls, ServerCsi};
pub use volumes::MountedVolume;

/// What the node reports about its plugins, by plugin id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeCsiPlugins {
    pub controllers: BTreeMap<String, CsiInfo>,
    pub nodes: BTreeMap<String, CsiInfo>,
}

/// One running plugin task, reachable on its socket.
#[derive(Clone)]
pub struct PluginInstance {
    pub id: String,
    pub kind: CsiPluginType,
    pub alloc_id: String,
    /// The plugin's root on the host (socket, staging and per-alloc directories).
    pub host_root: PathBuf,
    /// The same directory as the plugin sees it: the paths passed in stage and publish calls.
    pub plugin_root: PathBuf,
    pub client: CsiClient,
    /// The node service's capabilities and the storage provider's id of this node (node and
    /// monolith plugins).
    pub node_capabilities: NodeCapabilities,
    pub external_node_id: String,
}

impl PluginInstance {
    /// A path under the plugin's root, on the host and as the plugin sees it.
    pub fn paths(&self, rel: &Path) -> (PathBuf, PathBuf) {
        (self.host_root.join(rel), self.plugin_root.join(rel))
    }
}

/// Key of a staged volume: plugin, volume id, usage directory name.
type StageKey = (String, String, String);

/// The two services of a CSI plugin an instance can serve on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CsiService {
    Controller,
    Node,
}

impl CsiService {
    /// The services an instance of `kind` serves.
    pub fn of(kind: CsiPluginType) -> impl Iterator<Item = CsiService> {
        [
            kind.runs_controller().then_some(CsiService::Controller),
            kind.runs_node().then_some(CsiService::Node),
        ]
        .into_iter()
        .flatten()
    }
}

struct Inner {
    root: PathBuf,
    /// The registered instances, by plugin id and the service they serve.
    plugins: Mutex<BTreeMap<(String, CsiService), PluginInstance>>,
    /// Bumped whenever a plugin is registered, for volume hooks waiting on one.
    registered: watch::Sender<u64>,
    node_plugins: watch::Sender<NodeCsiPlugins>,
    /// The allocations using each staged volume: unstaged when the last one leaves.
    stage_users: Mutex<BTreeMap<StageKey, BTreeSet<String>>>,
    /// Held while a staged volume gets its first user or loses its last one, plugin call
    /// included, so a stage and an unstage of one key never overlap.
    stage_locks: Mutex<BTreeMap<StageKey, Arc<tokio::sync::Mutex<()>>>>,
    /// What each allocation has mounted, by (alloc id, volume id).
    mounted: Mutex<BTreeMap<(String, String), MountedVolume>>,
    /// Storage node events (mounts, unmounts, their errors) not yet sent to the servers.
    events: Mutex<Vec<drover_structs::NodeEvent>>,
    events_tx: watch::Sender<u64>,
}

/// The client's CSI state. Cheap to clone.
#[derive(Clone)]
pub struct CsiManager {
    inner: Arc<Inner>,
}

/// How long a volume hook waits for the plugin it needs (Nomad waits a minute).
pub const PLUGIN_WAIT: Duration = Duration::from_secs(60);

impl CsiManager {
    /// `root` is `<client data dir>/csi`.
    pub fn new(root: impl Into<PathBuf>) -> CsiManager {
        CsiManager {
            inner: Arc::new(Inner {
                root: root.into(),
                plugins: Mutex::new(BTreeMap::new()),
                registered: watch::channel(0).0,
                node_plugins: watch::channel(NodeCsiPlugins::default()).0,
                stage_users: Mutex::new(BTreeMap::new()),
                stage_locks: Mutex::new(BTreeMap::new()),
                mounted: Mutex::new(BTreeMap::new()),
                events: Mutex::new(Vec::new()),
                events_tx: watch::channel(0).0,
            }),
        }
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The plugin's root directory on the host: `<root>/<type>/<plugin id>`.
    pub fn plugin_root(&self, kind: CsiPluginType, plugin_id: &str) -> PathBuf {
        self.inner.root.join(kind_dir(kind)).join(plugin_id)
    }

    /// Follows what the node reports about its plugins.
    pub fn subscribe_node_plugins(&self) -> watch::Receiver<NodeCsiPlugins> {
        self.inner.node_plugins.subscribe()
    }

    pub fn node_plugins(&self) -> NodeCsiPlugins {
        self.inner.node_plugins.borrow().clone()
    }

    /// Records a healthy, fingerprinted plugin instance and what the node reports about it,
    /// for the services its type serves only: a node plugin registering leaves the same
    /// plugin's controller on this node alone.
    pub fn register(
        &self,
        instance: PluginInstance,
        controller: Option<CsiInfo>,
        node: Option<CsiInfo>,
    ) {
        let (id, kind) = (instance.id.clone(), instance.kind);
        {
            let mut plugins = lock(&self.inner.plugins);
            for service in CsiService::of(kind) {
                plugins.insert((id.clone(), service), instance.clone());
            }
        }
        self.set_reports(&id, kind, controller, node);
        self.inner.registered.send_modify(|n| *n += 1);
    }

    /// Sets what the node reports about the services an instance of `kind` serves; the report
    /// of the plugin's other service stays as it is.
    fn set_reports(
        &self,
        plugin_id: &str,
        kind: CsiPluginType,
        controller: Option<CsiInfo>,
        node: Option<CsiInfo>,
    ) {
        let (mut controller, mut node) = (controller, node);
        self.update_reports(plugin_id, |service, _| {
            CsiService::of(kind)
                .any(|s| s == service)
                .then(|| match service {
                    CsiService::Controller => controller.take(),
                    CsiService::Node => node.take(),
                })
        });
    }

    /// Marks what `alloc_id` reports of a plugin unhealthy, saying why (its probe failed).
    pub fn mark_unhealthy(&self, plugin_id: &str, alloc_id: &str, error: &str) {
        self.update_reports(plugin_id, |_, current| {
            let current = current.filter(|i| i.alloc_id == alloc_id)?;
            Some(Some(fingerprint::unhealthy(current, error)))
        });
    }

    /// Forgets what `alloc_id` serves of a plugin (its task stopped); an instance of the same
    /// plugin from another allocation stays.
    pub fn deregister(&self, plugin_id: &str, alloc_id: &str) {
        lock(&self.inner.plugins).retain(|(id, _), p| id != plugin_id || p.alloc_id != alloc_id);
        self.update_reports(plugin_id, |_, current| {
            current
                .is_some_and(|i| i.alloc_id == alloc_id)
                .then_some(None)
        });
    }

    /// Changes what the node reports about a plugin, service by service: `change` answers the
    /// new report (`Some(None)` removes it) or `None` to leave it. A report that differs only in
    /// its time is no news: the node is not updated for it.
    fn update_reports(
        &self,
        plugin_id: &str,
        mut change: impl FnMut(CsiService, Option<&CsiInfo>) -> Option<Option<CsiInfo>>,
    ) {
        self.inner.node_plugins.send_if_modified(|p| {
            let mut modified = false;
            for (service, map) in [
                (CsiService::Controller, &mut p.controllers),
                (CsiService::Node, &mut p.nodes),
            ] {
                if let Some(new) = change(service, map.get(plugin_id)) {
                    modified |= replace_info(map, plugin_id, new);
                }
            }
            modified
        });
    }

    /// The running instance serving a plugin's controller on this node.
    pub fn controller_plugin(&self, plugin_id: &str) -> Option<PluginInstance> {
        self.instance(plugin_id, CsiService::Controller)
    }

    /// The running instance serving a plugin's node service on this node.
    pub fn node_plugin(&self, plugin_id: &str) -> Option<PluginInstance> {
        self.instance(plugin_id, CsiService::Node)
    }

    fn instance(&self, plugin_id: &str, service: CsiService) -> Option<PluginInstance> {
        lock(&self.inner.plugins)
            .get(&(plugin_id.to_string(), service))
            .cloned()
    }

    /// Waits up to `timeout` for a plugin's node service to be registered.
    pub async fn wait_for_node_plugin(
        &self,
        plugin_id: &str,
        timeout: Duration,
    ) -> Option<PluginInstance> {
        let mut rx = self.inner.registered.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(p) = self.node_plugin(plugin_id) {
                return Some(p);
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return None },
                _ = tokio::time::sleep_until(deadline) => return self.node_plugin(plugin_id),
            }
        }
    }

    /// Records a storage node event (Nomad's `Subsystem: "Storage"`) for the servers.
    pub fn node_event(&self, message: &str, details: BTreeMap<String, String>) {
        lock(&self.inner.events).push(drover_structs::NodeEvent {
            message: message.to_string(),
            subsystem: "Storage".into(),
            details: Some(details),
            timestamp: drover_structs::time::format_rfc3339_nanos(
                drover_structs::time::now_nanos(),
            ),
            create_index: 0,
        });
        self.inner.events_tx.send_modify(|n| *n += 1);
    }

    /// Storage node events not sent yet (taken).
    pub fn take_node_events(&self) -> Vec<drover_structs::NodeEvent> {
        std::mem::take(&mut *lock(&self.inner.events))
    }

    /// Wakes when node events are recorded.
    pub fn subscribe_node_events(&self) -> watch::Receiver<u64> {
        self.inner.events_tx.subscribe()
    }

    /// Makes `alloc_id` a user of the staged volume `key`; the first user runs `stage` (the
    /// plugin's NodeStageVolume), and stays no user if it fails. Decided and done under the
    /// key's lock: a user arriving while the last one leaves stages after that one's unstage
    /// (never before it, which would leave it publishing an unstaged volume).
    pub(crate) async fn stage_for<F, Fut, E>(
        &self,
        key: StageKey,
        alloc_id: &str,
        stage: F,
    ) -> Result<(), E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(), E>>,
    {
        let key_lock = self.stage_lock(&key);
        let _held = key_lock.lock().await;
        if self.add_stage_user(key.clone(), alloc_id)
            && let Err(e) = stage().await
        {
            self.remove_stage_user(&key, alloc_id);
            return Err(e);
        }
        Ok(())
    }

    /// Removes `alloc_id` from the users of the staged volume `key`; the last one runs
    /// `unstage` (NodeUnstageVolume), under the key's lock as [`CsiManager::stage_for`].
    pub(crate) async fn unstage_for<F, Fut, E>(
        &self,
        key: &StageKey,
        alloc_id: &str,
        unstage: F,
    ) -> Result<(), E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(), E>>,
    {
        let key_lock = self.stage_lock(key);
        let _held = key_lock.lock().await;
        if self.remove_stage_user(key, alloc_id) {
            unstage().await?;
        }
        Ok(())
    }

    fn stage_lock(&self, key: &StageKey) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.inner.stage_locks)
            .entry(key.clone())
            .or_default()
            .clone()
    }

    pub(crate) fn add_stage_user(&self, key: StageKey, alloc_id: &str) -> bool {
        let mut users = lock(&self.inner.stage_users);
        let set = users.entry(key).or_default();
        let first = set.is_empty();
        set.insert(alloc_id.to_string());
        first
    }

    /// Removes a user; answers whether nobody uses the staged volume any more.
    pub(crate) fn remove_stage_user(&self, key: &StageKey, alloc_id: &str) -> bool {
        let mut users = lock(&self.inner.stage_users);
        let Some(set) = users.get_mut(key) else {
            return true;
        };
        set.remove(alloc_id);
        if set.is_empty() {
            users.remove(key);
            true
        } else {
            false
        }
    }

    pub(crate) fn record_mounted(&self, v: MountedVolume) {
        lock(&self.inner.mounted).insert((v.alloc_id.clone(), v.volume_id.clone()), v);
    }

    pub(crate) fn take_mounted(&self, alloc_id: &str, volume_id: &str) -> Option<MountedVolume> {
        lock(&self.inner.mounted).remove(&(alloc_id.to_string(), volume_id.to_string()))
    }
}

/// Sets or removes one report; answers whether it changed (its update time aside).
fn replace_info(
    map: &mut BTreeMap<String, CsiInfo>,
    plugin_id: &str,
    info: Option<CsiInfo>,
) -> bool {
    let same = |a: &CsiInfo, b: &CsiInfo| {
        CsiInfo {
            update_time: String::new(),
            ..a.clone()
        } == CsiInfo {
            update_time: String::new(),
            ..b.clone()
        }
    };
    match (map.get(plugin_id), info) {
        (Some(old), Some(new)) if same(old, &new) => false,
        (_, Some(new)) => {
            map.insert(plugin_id.to_string(), new);
            true
        }
        (Some(_), None) => {
            map.remove(plugin_id);
            true
        }
        (None, None) => false,
    }
}

fn kind_dir(kind: CsiPluginType) -> &'static str {
    match kind {
        CsiPluginType::Controller => "controller",
        CsiPluginType::Node => "node",
        CsiPluginType::Monolith => "monolith",
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(alloc: &str, healthy: bool, time: &str) -> CsiInfo {
        CsiInfo {
            plugin_id: "hostpath".into(),
            alloc_id: alloc.into(),
            healthy,
            update_time: time.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_report_that_only_changes_its_time_does_not_update_the_node() {
        let m = CsiManager::new("/nonexistent/csi");
        let mut rx = m.subscribe_node_plugins();
        let node = CsiPluginType::Node;
        m.set_reports("hostpath", node, None, Some(info("a1", true, "t1")));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        m.set_reports("hostpath", node, None, Some(info("a1", true, "t2")));
        assert!(!rx.has_changed().unwrap(), "same report, newer time");
        m.mark_unhealthy("hostpath", "a1", "probe failed");
        assert!(rx.has_changed().unwrap(), "health changed");
        let reported = &m.node_plugins().nodes["hostpath"];
        assert!(!reported.healthy);
        assert_eq!(reported.health_description, "probe failed");
    }

    #[test]
    fn only_the_allocation_serving_a_plugin_removes_it_from_the_node() {
        let m = CsiManager::new("/nonexistent/csi");
        m.set_reports(
            "hostpath",
            CsiPluginType::Monolith,
            Some(info("a2", true, "t")),
            Some(info("a2", true, "t")),
        );
        m.deregister("hostpath", "a1");
        assert!(m.node_plugins().nodes.contains_key("hostpath"));
        m.deregister("hostpath", "a2");
        assert_eq!(m.node_plugins(), NodeCsiPlugins::default());
    }

    #[test]
    fn a_controller_and_a_node_plugin_of_one_plugin_are_both_reported_by_one_node() {
        let m = CsiManager::new("/nonexistent/csi");
        let controller = info("ctl", true, "t");
        let node = info("nod", true, "t");
        m.set_reports(
            "hostpath",
            CsiPluginType::Controller,
            Some(controller.clone()),
            None,
        );
        m.set_reports("hostpath", CsiPluginType::Node, None, Some(node.clone()));
        let reported = m.node_plugins();
        assert_eq!(reported.controllers["hostpath"], controller, "still there");
        assert_eq!(reported.nodes["hostpath"], node);

        // The node plugin's probe fails: the controller stays healthy.
        m.mark_unhealthy("hostpath", "nod", "gone");
        let reported = m.node_plugins();
        assert!(reported.controllers["hostpath"].healthy);
        assert!(!reported.nodes["hostpath"].healthy);

        // The controller's task stops: the node plugin stays.
        m.deregister("hostpath", "ctl");
        let reported = m.node_plugins();
        assert!(!reported.controllers.contains_key("hostpath"));
        assert_eq!(reported.nodes["hostpath"].alloc_id, "nod");
    }

    /// An instance whose client is connected to a socket nobody serves calls on.
    async fn instance(dir: &Path, kind: CsiPluginType, alloc: &str) -> PluginInstance {
        let socket = dir.join(format!("{alloc}.sock"));
        let _ = std::fs::remove_file(&socket);
        // The listener's backlog accepts the connection; no call is made.
        let listener = tokio::net::UnixListener::bind(&socket).expect("bind a test socket");
        std::mem::forget(listener);
        PluginInstance {
            id: "hostpath".into(),
            kind,
            alloc_id: alloc.into(),
            host_root: dir.join(alloc),
            plugin_root: dir.join(alloc),
            client: CsiClient::connect(&socket).await.expect("connect"),
            node_capabilities: NodeCapabilities::default(),
            external_node_id: String::new(),
        }
    }

    #[tokio::test]
    async fn controller_calls_and_node_calls_reach_the_instance_serving_each() {
        let dir = std::env::temp_dir().join(format!("drover-csi-mgr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = CsiManager::new(dir.join("csi"));
        let controller = instance(&dir, CsiPluginType::Controller, "ctl").await;
        m.register(controller, Some(info("ctl", true, "t")), None);
        assert!(m.node_plugin("hostpath").is_none());
        let node = instance(&dir, CsiPluginType::Node, "nod").await;
        m.register(node, None, Some(info("nod", true, "t")));
        assert_eq!(m.controller_plugin("hostpath").unwrap().alloc_id, "ctl");
        assert_eq!(m.node_plugin("hostpath").unwrap().alloc_id, "nod");
        assert_eq!(m.node_plugins().controllers["hostpath"].alloc_id, "ctl");

        m.deregister("hostpath", "nod");
        assert!(m.node_plugin("hostpath").is_none());
        assert_eq!(m.controller_plugin("hostpath").unwrap().alloc_id, "ctl");

        // A monolith serves both.
        let mono = instance(&dir, CsiPluginType::Monolith, "mono").await;
        m.register(
            mono,
            Some(info("mono", true, "t")),
            Some(info("mono", true, "t")),
        );
        assert_eq!(m.controller_plugin("hostpath").unwrap().alloc_id, "mono");
        assert_eq!(m.node_plugin("hostpath").unwrap().alloc_id, "mono");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_staged_volume_is_released_by_its_last_user_only() {
        let m = CsiManager::new("/nonexistent/csi");
        let key = ("p".to_string(), "v".to_string(), "rw".to_string());
        assert!(m.add_stage_user(key.clone(), "a1"), "first user stages");
        assert!(!m.add_stage_user(key.clone(), "a2"));
        assert!(
            !m.add_stage_user(key.clone(), "a2"),
            "a restored user again"
        );
        assert!(!m.remove_stage_user(&key, "a1"));
        assert!(m.remove_stage_user(&key, "a2"), "last user unstages");
    }

    #[tokio::test]
    async fn a_user_arriving_while_the_last_one_unstages_stages_again_after_it() {
        let m = CsiManager::new("/nonexistent/csi");
        let key = ("p".to_string(), "v".to_string(), "rw".to_string());
        m.stage_for(key.clone(), "a1", || async { Ok::<_, ()>(()) })
            .await
            .unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (finish_unstage, unstage_may_finish) = tokio::sync::oneshot::channel::<()>();
        let (unstage_started, started) = tokio::sync::oneshot::channel::<()>();
        let leaving = {
            let (m, key, calls) = (m.clone(), key.clone(), calls.clone());
            tokio::spawn(async move {
                m.unstage_for(&key, "a1", || async move {
                    lock(&calls).push("unstage started");
                    let _ = unstage_started.send(());
                    let _ = unstage_may_finish.await;
                    lock(&calls).push("unstage done");
                    Ok::<_, ()>(())
                })
                .await
            })
        };
        started.await.unwrap();
        let arriving = {
            let (m, key, calls) = (m.clone(), key.clone(), calls.clone());
            tokio::spawn(async move {
                m.stage_for(key, "a2", || async move {
                    lock(&calls).push("stage");
                    Ok::<_, ()>(())
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(*lock(&calls), vec!["unstage started"], "the stage waits");
        finish_unstage.send(()).unwrap();
        leaving.await.unwrap().unwrap();
        arriving.await.unwrap().unwrap();
        assert_eq!(
            *lock(&calls),
            vec!["unstage started", "unstage done", "stage"]
        );
        // The new user holds the stage: its leaving unstages.
        let unstaged = std::sync::atomic::AtomicBool::new(false);
        m.unstage_for(&key, "a2", || async {
            unstaged.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, ()>(())
        })
        .await
        .unwrap();
        assert!(unstaged.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_failed_stage_leaves_no_user() {
        let m = CsiManager::new("/nonexistent/csi");
        let key = ("p".to_string(), "v".to_string(), "rw".to_string());
        let failed = m
            .stage_for(key.clone(), "a1", || async { Err::<(), _>("boom") })
            .await;
        assert_eq!(failed, Err("boom"));
        let mut staged_again = false;
        m.stage_for(key, "a2", || async {
            staged_again = true;
            Ok::<_, ()>(())
        })
        .await
        .unwrap();
        assert!(staged_again, "the next user is the first again");
    }

    #[test]
    fn plugin_roots_are_per_type_and_id() {
        let m = CsiManager::new("/data/client/csi");
        assert_eq!(
            m.plugin_root(CsiPluginType::Monolith, "hostpath"),
            PathBuf::from("/data/client/csi/monolith/hostpath")
        );
    }

    #[test]
    fn storage_events_are_kept_until_taken() {
        let m = CsiManager::new("/nonexistent/csi");
        let rx = m.subscribe_node_events();
        m.node_event(
            "Mount volume",
            BTreeMap::from([("volume_id".to_string(), "data".to_string())]),
        );
        assert!(rx.has_changed().unwrap());
        let events = m.take_node_events();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].subsystem, "Storage");
        assert!(m.take_node_events().is_empty());
    }
}
