//! CSI on the client (Nomad's `csimanager` and its hooks): the plugins this node's tasks serve,
//! their fingerprint on the node, and the volumes mounted for allocations.
//!
//! - [`CsiManager`]: the registry of healthy plugin instances (one socket each) and what the
//!   node reports about them (`CSIControllerPlugins` / `CSINodePlugins`); the client pushes a
//!   node update whenever that changes.
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

struct Inner {
    root: PathBuf,
    plugins: Mutex<BTreeMap<String, PluginInstance>>,
    /// Bumped whenever a plugin is registered, for volume hooks waiting on one.
    registered: watch::Sender<u64>,
    node_plugins: watch::Sender<NodeCsiPlugins>,
    /// The allocations using each staged volume: unstaged when the last one leaves.
    stage_users: Mutex<BTreeMap<StageKey, BTreeSet<String>>>,
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

    /// Records a healthy, fingerprinted plugin and what the node reports about it.
    pub fn register(
        &self,
        instance: PluginInstance,
        controller: Option<CsiInfo>,
        node: Option<CsiInfo>,
    ) {
        let id = instance.id.clone();
        lock(&self.inner.plugins).insert(id.clone(), instance);
        self.set_infos(&id, controller, node);
        self.inner.registered.send_modify(|n| *n += 1);
    }

    /// Updates what the node reports about a plugin (health changes).
    pub fn set_infos(&self, plugin_id: &str, controller: Option<CsiInfo>, node: Option<CsiInfo>) {
        // A report that differs only in its time is no news: the node is not updated for it.
        self.inner.node_plugins.send_if_modified(|p| {
            let a = replace_info(&mut p.controllers, plugin_id, controller);
            let b = replace_info(&mut p.nodes, plugin_id, node);
            a || b
        });
    }

    /// Forgets the plugin served by `alloc_id` (its task stopped).
    pub fn deregister(&self, plugin_id: &str, alloc_id: &str) {
        let removed = {
            let mut plugins = lock(&self.inner.plugins);
            match plugins.get(plugin_id) {
                Some(p) if p.alloc_id == alloc_id => plugins.remove(plugin_id).is_some(),
                _ => false,
            }
        };
        let reported_by_alloc = {
            let p = self.inner.node_plugins.borrow();
            p.controllers
                .get(plugin_id)
                .or_else(|| p.nodes.get(plugin_id))
                .is_some_and(|i| i.alloc_id == alloc_id)
        };
        if removed || reported_by_alloc {
            self.set_infos(plugin_id, None, None);
        }
    }

    /// The running instance of a plugin on this node.
    pub fn plugin(&self, plugin_id: &str) -> Option<PluginInstance> {
        lock(&self.inner.plugins).get(plugin_id).cloned()
    }

    /// Waits up to `timeout` for a plugin to be registered.
    pub async fn wait_for_plugin(
        &self,
        plugin_id: &str,
        timeout: Duration,
    ) -> Option<PluginInstance> {
        let mut rx = self.inner.registered.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(p) = self.plugin(plugin_id) {
                return Some(p);
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return None },
                _ = tokio::time::sleep_until(deadline) => return self.plugin(plugin_id),
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
        m.set_infos("hostpath", None, Some(info("a1", true, "t1")));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        m.set_infos("hostpath", None, Some(info("a1", true, "t2")));
        assert!(!rx.has_changed().unwrap(), "same report, newer time");
        m.set_infos("hostpath", None, Some(info("a1", false, "t3")));
        assert!(rx.has_changed().unwrap(), "health changed");
        assert!(!m.node_plugins().nodes["hostpath"].healthy);
    }

    #[test]
    fn only_the_allocation_serving_a_plugin_removes_it_from_the_node() {
        let m = CsiManager::new("/nonexistent/csi");
        m.set_infos(
            "hostpath",
            Some(info("a2", true, "t")),
            Some(info("a2", true, "t")),
        );
        m.deregister("hostpath", "a1");
        assert!(m.node_plugins().nodes.contains_key("hostpath"));
        m.deregister("hostpath", "a2");
        assert_eq!(m.node_plugins(), NodeCsiPlugins::default());
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
