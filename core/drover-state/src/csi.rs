//! The CSI tables: volumes (by namespace and id, with a by-plugin index) and plugins (by id),
//! and the bookkeeping Nomad's state store does for them inside other writes:
//!
//! - a node's fingerprint (`CSIControllerPlugins`, `CSINodePlugins`) creates plugins (from the
//!   first healthy instance), updates their instances and health counts, and removes the
//!   node's instances it no longer reports;
//! - a job serving a plugin (a task with a `csi_plugin` block) records how many instances it
//!   expects; a stopped or purged job forgets that;
//! - an allocation that ended removes the instances it ran;
//! - a plugin with nothing left (no instances, no job expecting any) is deleted.
//!
//! Volumes are read with their plugin's health copied onto them (`Schedulable` and the counts)
//! and, for the API, with the allocations holding them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use drover_structs::{
    AllocListStub, Allocation, CsiClaimError, CsiClaimState, CsiPlugin, CsiPluginType, CsiVolume,
    CsiVolumeClaim, JOB_TYPE_SYSBATCH, JOB_TYPE_SYSTEM, Job, Node, VOLUME_TYPE_CSI,
    job_csi_plugins,
};

use crate::store::StateStore;
use crate::tables::{NsKey, StateSnapshot, Table, Tables};

/// Why a CSI write was refused (Nomad's texts). The entry then changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsiStateError {
    #[error("volume not found: {0}")]
    VolumeNotFound(String),
    /// Re-registering a volume that is in use, or changing its plugin or external id.
    #[error("volume exists: {0}")]
    VolumeExists(String),
    #[error("volume in use: {0}")]
    VolumeInUse(String),
    /// Nomad's `ErrUnknownAllocationPrefix`.
    #[error("Unknown allocation: {0}")]
    UnknownAllocation(String),
    #[error("{0}")]
    Claim(#[from] CsiClaimError),
    #[error("plugin in use")]
    PluginInUse,
    #[error("{0}")]
    Invalid(String),
}

fn key(ns: &str, id: &str) -> NsKey {
    (ns.to_string(), id.to_string())
}

/// Which volumes a list shows.
#[derive(Debug, Clone, Default)]
pub struct CsiVolumeFilter<'a> {
    /// `None`: every namespace.
    pub namespace: Option<&'a str>,
    /// Volume id prefix.
    pub prefix: &'a str,
    pub plugin_id: Option<&'a str>,
    /// Only volumes the live allocations on this node use.
    pub node_id: Option<&'a str>,
}

impl StateSnapshot {
    /// A volume as stored (no plugin health, no allocations).
    pub fn csi_volume(&self, ns: &str, id: &str) -> Option<Arc<CsiVolume>> {
        self.t.csi_volumes.get(&key(ns, id)).cloned()
    }

    /// A volume with its plugin's health (Nomad's `CSIVolumeByID`).
    pub fn csi_volume_with_health(&self, ns: &str, id: &str) -> Option<CsiVolume> {
        let mut v = (*self.csi_volume(ns, id)?).clone();
        v.apply_plugin_health(self.t.csi_plugins.get(&v.plugin_id).map(|p| &**p));
        Some(v)
    }

    /// A volume as the API shows it: plugin health, a past claim for every holder that ended,
    /// and the holders' allocation stubs (Nomad's `CSIVolumeDenormalize`).
    pub fn csi_volume_full(&self, ns: &str, id: &str) -> Option<CsiVolume> {
        let mut v = self.csi_volume_with_health(ns, id)?;
        v.add_past_claims_for_ended_allocs(&|id| {
            self.t.allocs.get(id).is_none_or(|a| a.terminal())
        });
        v.fill_allocations(&|id| self.t.allocs.get(id).map(|a| a.stub()));
        Some(v)
    }

    /// Volumes with their plugin's health, in (namespace, id) order.
    pub fn csi_volumes(&self, filter: &CsiVolumeFilter<'_>) -> Vec<CsiVolume> {
        let keys: Vec<NsKey> = match (filter.node_id, filter.plugin_id) {
            (Some(node), _) => self.csi_volume_keys_on_node(node).into_iter().collect(),
            (None, Some(plugin)) => self
                .t
                .csi_volumes_by_plugin
                .get(plugin)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
            (None, None) => self.t.csi_volumes.keys().cloned().collect(),
        };
        keys.iter()
            .filter(|(ns, id)| {
                filter.namespace.is_none_or(|want| want == ns) && id.starts_with(filter.prefix)
            })
            .filter_map(|(ns, id)| self.csi_volume_with_health(ns, id))
            .filter(|v| filter.plugin_id.is_none_or(|p| p == v.plugin_id))
            .collect()
    }

    /// Volumes the node's allocations that run (or are meant to) use, from their groups' `csi`
    /// volume requests (Nomad's `CSIVolumesByNodeID`).
    fn csi_volume_keys_on_node(&self, node_id: &str) -> BTreeSet<NsKey> {
        let mut out = BTreeSet::new();
        for a in self.allocs_by_node(node_id) {
            if !(a.desired_status == drover_structs::ALLOC_DESIRED_RUN
                || a.client_status == drover_structs::ALLOC_CLIENT_RUNNING)
            {
                continue;
            }
            for source in csi_sources_of(&a) {
                out.insert(key(&a.namespace, &source));
            }
        }
        out.retain(|k| self.t.csi_volumes.contains_key(k));
        out
    }

    pub fn csi_plugin(&self, id: &str) -> Option<Arc<CsiPlugin>> {
        self.t.csi_plugins.get(id).cloned()
    }

    /// A plugin with the stubs of the allocations running its instances.
    pub fn csi_plugin_full(&self, id: &str) -> Option<CsiPlugin> {
        let mut p = (*self.csi_plugin(id)?).clone();
        let stubs: Vec<AllocListStub> = p
            .alloc_ids()
            .iter()
            .filter_map(|id| self.t.allocs.get(id.as_str()).map(|a| a.stub()))
            .collect();
        p.allocations = Some(stubs);
        Some(p)
    }

    /// Every plugin, in id order.
    pub fn csi_plugins(&self) -> Vec<Arc<CsiPlugin>> {
        self.t.csi_plugins.values().cloned().collect()
    }
}

/// The volume ids an allocation's group asks for with `type = "csi"`; a `per_alloc` volume is
/// `source[N]` for the allocation's index N.
fn csi_sources_of(a: &Allocation) -> Vec<String> {
    let Some(job) = &a.job else {
        return Vec::new();
    };
    let Some(tg) = job.task_groups.iter().find(|g| g.name == a.task_group) else {
        return Vec::new();
    };
    let Some(volumes) = tg.volumes.as_ref().and_then(|v| v.as_object()) else {
        return Vec::new();
    };
    volumes
        .values()
        .filter(|v| v.get("Type").and_then(|t| t.as_str()) == Some(VOLUME_TYPE_CSI))
        .filter_map(|v| {
            let source = v.get("Source")?.as_str()?;
            let per_alloc = v.get("PerAlloc").and_then(|p| p.as_bool()) == Some(true);
            Some(match (per_alloc, a.index()) {
                (true, Some(i)) => format!("{source}[{i}]"),
                _ => source.to_string(),
            })
        })
        .collect()
}

impl StateStore {
    /// Registers volumes, all or none (Nomad's `CSIVolumeRegister`). A volume that exists may
    /// be registered again while no allocation holds it and its plugin and external id stay;
    /// it keeps its past claims and create index.
    pub fn upsert_csi_volumes(
        &self,
        index: u64,
        volumes: Vec<CsiVolume>,
    ) -> Result<(), CsiStateError> {
        self.write(index, &[], |t| {
            for v in &volumes {
                if let Some(old) = t.csi_volumes.get(&key(&v.namespace, &v.id))
                    && (old.in_use()
                        || old.external_id != v.external_id
                        || old.plugin_id != v.plugin_id)
                {
                    return Err(CsiStateError::VolumeExists(v.id.clone()));
                }
            }
            for mut v in volumes {
                let k = key(&v.namespace, &v.id);
                match t.csi_volumes.get(&k) {
                    Some(old) => {
                        v.create_index = old.create_index;
                        v.past_claims.clone_from(&old.past_claims);
                    }
                    None => v.create_index = index,
                }
                v.modify_index = index;
                clear_alloc_stubs(&mut v);
                put_volume(t, v);
            }
            t.indexes.insert(Table::CsiVolumes, index);
            Ok(())
        })
    }

    /// Deregisters volumes, all or none (Nomad's `CSIVolumeDeregister`). A volume held by an
    /// allocation is refused, unless `force` and every holder has ended.
    pub fn delete_csi_volumes(
        &self,
        index: u64,
        namespace: &str,
        ids: &[String],
        force: bool,
    ) -> Result<(), CsiStateError> {
        self.write(index, &[], |t| {
            for id in ids {
                let Some(v) = t.csi_volumes.get(&key(namespace, id)) else {
                    return Err(CsiStateError::VolumeNotFound(id.clone()));
                };
                if v.in_use() && !(force && holders_ended(t, v)) {
                    return Err(CsiStateError::VolumeInUse(id.clone()));
                }
            }
            for id in ids {
                if let Some(v) = t.csi_volumes.remove(&key(namespace, id))
                    && let Some(set) = t.csi_volumes_by_plugin.get_mut(&v.plugin_id)
                {
                    set.remove(&key(namespace, id));
                }
            }
            t.indexes.insert(Table::CsiVolumes, index);
            Ok(())
        })
    }

    /// Applies a claim or a release step to a volume (Nomad's `CSIVolumeClaim`). A claim
    /// without an allocation (a release of what a node holds) only moves the volume's index.
    pub fn csi_volume_claim(
        &self,
        index: u64,
        namespace: &str,
        volume_id: &str,
        claim: CsiVolumeClaim,
    ) -> Result<(), CsiStateError> {
        self.write(index, &[], |t| {
            let k = key(namespace, volume_id);
            let Some(stored) = t.csi_volumes.get(&k).cloned() else {
                return Err(CsiStateError::VolumeNotFound(volume_id.to_string()));
            };
            let alloc = if claim.state == CsiClaimState::Taken && !claim.allocation_id.is_empty() {
                match t.allocs.get(claim.allocation_id.as_str()) {
                    Some(a) => Some(a.clone()),
                    None => {
                        return Err(CsiStateError::UnknownAllocation(
                            claim.allocation_id.clone(),
                        ));
                    }
                }
            } else {
                None
            };
            let mut v = (*stored).clone();
            v.apply_plugin_health(t.csi_plugins.get(&v.plugin_id).map(|p| &**p));
            v.add_past_claims_for_ended_allocs(&|id| t.allocs.get(id).is_none_or(|a| a.terminal()));
            if !claim.allocation_id.is_empty() {
                let writer_job = |id: &str| {
                    t.allocs
                        .get(id)
                        .map(|a| (a.namespace.clone(), a.job_id.clone()))
                };
                v.claim(claim, alloc.as_deref(), &writer_job)?;
            }
            // Health is read from the plugin each time; the stored copy keeps what was
            // registered.
            v.schedulable = stored.schedulable;
            v.provider.clone_from(&stored.provider);
            v.provider_version.clone_from(&stored.provider_version);
            v.controller_required = stored.controller_required;
            v.controllers_healthy = stored.controllers_healthy;
            v.controllers_expected = stored.controllers_expected;
            v.nodes_healthy = stored.nodes_healthy;
            v.nodes_expected = stored.nodes_expected;
            v.modify_index = index;
            clear_alloc_stubs(&mut v);
            put_volume(t, v);
            t.indexes.insert(Table::CsiVolumes, index);
            Ok(())
        })
    }

    /// Deletes a plugin that has nothing left (the leader's plugin GC). Deleting a plugin that
    /// is gone already is not an error; one that gained instances or jobs since is refused.
    pub fn delete_csi_plugin(&self, index: u64, id: &str) -> Result<(), CsiStateError> {
        self.write(index, &[], |t| {
            let Some(p) = t.csi_plugins.get(id) else {
                return Ok(());
            };
            if !p.is_empty() {
                return Err(CsiStateError::PluginInUse);
            }
            t.csi_plugins.remove(id);
            t.indexes.insert(Table::CsiPlugins, index);
            Ok(())
        })
    }
}

/// Every holder of the volume has ended (Nomad's `volSafeToForce`).
fn holders_ended(t: &Tables, v: &CsiVolume) -> bool {
    v.read_allocs
        .keys()
        .chain(v.write_allocs.keys())
        .all(|id| t.allocs.get(id.as_str()).is_none_or(|a| a.terminal()))
}

/// Stored volumes name their holders only; the API fills the stubs when it reads.
fn clear_alloc_stubs(v: &mut CsiVolume) {
    v.read_allocs.values_mut().for_each(|s| *s = None);
    v.write_allocs.values_mut().for_each(|s| *s = None);
    v.allocations = None;
}

fn put_volume(t: &mut Tables, v: CsiVolume) {
    let k = key(&v.namespace, &v.id);
    if let Some(old) = t.csi_volumes.get(&k)
        && old.plugin_id != v.plugin_id
        && let Some(set) = t.csi_volumes_by_plugin.get_mut(&old.plugin_id)
    {
        set.remove(&k);
    }
    t.csi_volumes_by_plugin
        .entry(v.plugin_id.clone())
        .or_default()
        .insert(k.clone());
    t.csi_volumes.insert(k, Arc::new(v));
}

/// Stores a changed plugin, or deletes it when nothing is left (Nomad's `updateOrGCPlugin`).
fn update_or_gc(t: &mut Tables, mut p: CsiPlugin, index: u64) {
    p.modify_index = index;
    if p.is_empty() {
        t.csi_plugins.remove(&p.id);
    } else {
        t.csi_plugins.insert(p.id.clone(), Arc::new(p));
    }
    t.indexes.insert(Table::CsiPlugins, index);
}

/// A node registered or re-fingerprinted: its plugin instances are recorded (Nomad's
/// `upsertCSIPluginsForNode`). Called before the node is stored.
pub(crate) fn node_written(t: &mut Tables, node: &Node, index: u64) {
    let controllers = node.csi_controller_plugins.clone().unwrap_or_default();
    let nodes = node.csi_node_plugins.clone().unwrap_or_default();
    let mut changed: BTreeMap<String, CsiPlugin> = BTreeMap::new();
    for (kind, infos) in [
        (CsiPluginType::Controller, &controllers),
        (CsiPluginType::Node, &nodes),
    ] {
        for (plugin_id, info) in infos {
            // The instance of an allocation that ended, or that the servers stopped, left the
            // plugin: the node reporting it until the task is gone does not bring it back.
            if !info.alloc_id.is_empty()
                && t.allocs
                    .get(info.alloc_id.as_str())
                    .is_some_and(|a| a.terminal())
            {
                continue;
            }
            let plugin = match changed.remove(plugin_id) {
                Some(p) => Some(p),
                None => match t.csi_plugins.get(plugin_id) {
                    Some(p) => Some((**p).clone()),
                    // A plugin starts with its first healthy instance; an unhealthy one would
                    // recreate a plugin just emptied by its allocation ending.
                    None if info.healthy => Some(CsiPlugin::new(plugin_id, index)),
                    None => None,
                },
            };
            let Some(mut p) = plugin else { continue };
            match kind {
                CsiPluginType::Controller => p.add_controller(&node.id, info),
                _ => p.add_node(&node.id, info),
            }
            changed.insert(plugin_id.clone(), p);
        }
    }
    // Instances the node no longer reports are gone.
    let stale: Vec<String> = t
        .csi_plugins
        .iter()
        .filter(|(id, p)| {
            (p.controllers.contains_key(&node.id) && !controllers.contains_key(*id))
                || (p.nodes.contains_key(&node.id) && !nodes.contains_key(*id))
        })
        .map(|(id, _)| id.clone())
        .collect();
    for id in stale {
        let mut p = match changed.remove(&id) {
            Some(p) => p,
            None => match t.csi_plugins.get(&id) {
                Some(p) => (**p).clone(),
                None => continue,
            },
        };
        if !controllers.contains_key(&id) {
            p.delete_node_for_type(&node.id, CsiPluginType::Controller);
        }
        if !nodes.contains_key(&id) {
            p.delete_node_for_type(&node.id, CsiPluginType::Node);
        }
        changed.insert(id, p);
    }
    for (_, p) in changed {
        update_or_gc(t, p, index);
    }
}

/// An allocation was written: one that ended takes the plugin instances it ran with it
/// (Nomad's `updatePluginForTerminalAlloc`), and a system job's expected instances follow its
/// live allocations. `a` is the stored version; its `ModifyIndex` is the write's index.
pub(crate) fn alloc_written(t: &mut Tables, old: Option<&Allocation>, a: &Allocation) {
    let Some(job) = a.job.clone() else { return };
    let plugins = job_csi_plugins(&job);
    if plugins.is_empty() {
        return;
    }
    let index = a.modify_index;
    // Server-terminal counts too (Nomad's): a plugin allocation the servers stop leaves the
    // plugin at once, not only once its client reports it ended.
    let ended = a.terminal() && !old.is_some_and(|o| o.terminal());
    let liveness_changed = old.is_none_or(|o| o.terminal() != a.terminal());
    let system = is_system(&job);
    if !(ended || system && liveness_changed) {
        return;
    }
    let live = live_per_group(t, &job);
    for id in plugins.keys() {
        let Some(p) = t.csi_plugins.get(id) else {
            // Never became healthy, or already gone.
            continue;
        };
        let mut p = (**p).clone();
        if ended {
            p.delete_alloc(&a.id, &a.node_id);
        }
        if system && let Some(current) = t.jobs.get(&(job.namespace.clone(), job.id.clone())) {
            let current = current.clone();
            p.update_expected_with_job(&current, &live, current.stop);
        }
        update_or_gc(t, p, index);
    }
}

/// A job version is about to be stored: the plugins its tasks serve (now or in the version it
/// replaces) record the instances it expects, or forget it when it stopped (Nomad's
/// `updateJobCSIPlugins`). A plugin is created for a job that expects instances of it.
pub(crate) fn job_written(t: &mut Tables, job: &Job, index: u64) {
    let new = job_csi_plugins(job);
    let old = t
        .jobs
        .get(&(job.namespace.clone(), job.id.clone()))
        .map(|j| job_csi_plugins(j))
        .unwrap_or_default();
    if new.is_empty() && old.is_empty() {
        return;
    }
    let live = live_per_group(t, job);
    for id in new.keys().chain(old.keys()).collect::<BTreeSet<_>>() {
        let serves = new.contains_key(id);
        let mut p = match t.csi_plugins.get(id) {
            Some(p) => (**p).clone(),
            None if serves && !job.stop => CsiPlugin::new(id, index),
            None => continue,
        };
        p.update_expected_with_job(job, &live, job.stop || !serves);
        update_or_gc(t, p, index);
    }
}

/// A job is about to be removed: its plugins forget it and the instances its allocations ran
/// (Nomad's `deleteJobFromPlugins`).
pub(crate) fn job_deleted(t: &mut Tables, namespace: &str, job_id: &str, index: u64) {
    let Some(job) = t.jobs.get(&key(namespace, job_id)).cloned() else {
        return;
    };
    let plugins = job_csi_plugins(&job);
    if plugins.is_empty() {
        return;
    }
    let allocs: Vec<(String, String)> = t
        .allocs_by_job
        .get(&key(namespace, job_id))
        .map(|ids| {
            ids.iter()
                .filter_map(|id| t.allocs.get(id))
                .map(|a| (a.id.clone(), a.node_id.clone()))
                .collect()
        })
        .unwrap_or_default();
    for id in plugins.keys() {
        let Some(p) = t.csi_plugins.get(id) else {
            continue;
        };
        let mut p = (**p).clone();
        for (alloc_id, node_id) in &allocs {
            p.delete_alloc(alloc_id, node_id);
        }
        p.update_expected_with_job(&job, &BTreeMap::new(), true);
        update_or_gc(t, p, index);
    }
}

fn is_system(job: &Job) -> bool {
    job.job_type == JOB_TYPE_SYSTEM || job.job_type == JOB_TYPE_SYSBATCH
}

/// The job's live (non-terminal) allocations by group; only system jobs need it.
fn live_per_group(t: &Tables, job: &Job) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    if !is_system(job) {
        return out;
    }
    if let Some(ids) = t
        .allocs_by_job
        .get(&(job.namespace.clone(), job.id.clone()))
    {
        for a in ids.iter().filter_map(|id| t.allocs.get(id)) {
            if !a.terminal() {
                *out.entry(a.task_group.clone()).or_insert(0) += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::*;
    use serde_json::json;

    fn info(plugin: &str, alloc: &str, healthy: bool, controller: bool) -> CsiInfo {
        CsiInfo {
            plugin_id: plugin.into(),
            alloc_id: alloc.into(),
            healthy,
            provider: "org.example.hostpath".into(),
            provider_version: "0.1".into(),
            requires_controller_plugin: controller,
            controller_info: controller.then(|| CsiControllerInfo {
                supports_attach_detach: true,
                ..Default::default()
            }),
            node_info: (!controller).then(|| CsiNodeInfo {
                id: format!("ext-{alloc}"),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn node(id: &str, controllers: &[CsiInfo], nodes: &[CsiInfo]) -> Node {
        let map = |infos: &[CsiInfo]| {
            Some(
                infos
                    .iter()
                    .map(|i| (i.plugin_id.clone(), i.clone()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        Node {
            id: id.into(),
            status: NODE_STATUS_READY.into(),
            csi_controller_plugins: map(controllers),
            csi_node_plugins: map(nodes),
            ..Default::default()
        }
    }

    fn plugin_job(id: &str, kind: &str, count: i64) -> Job {
        Job {
            id: id.into(),
            name: id.into(),
            namespace: "default".into(),
            job_type: "service".into(),
            priority: 50,
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count,
                tasks: vec![Task {
                    name: "plugin".into(),
                    driver: "raw_exec".into(),
                    csi_plugin_config: Some(json!({"ID": "hostpath", "Type": kind})),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn volume(id: &str, mode: CsiAccessMode) -> CsiVolume {
        CsiVolume {
            id: id.into(),
            namespace: "default".into(),
            plugin_id: "hostpath".into(),
            requested_capabilities: vec![CsiVolumeCapability {
                access_mode: mode,
                attachment_mode: CsiAttachmentMode::FileSystem,
            }],
            secrets: Some(BTreeMap::from([("key".to_string(), "s3cr3t".to_string())])),
            ..Default::default()
        }
    }

    fn alloc(id: &str, job: &str, node: &str) -> Allocation {
        Allocation {
            id: id.into(),
            namespace: "default".into(),
            job_id: job.into(),
            node_id: node.into(),
            task_group: "g".into(),
            name: format!("{job}.g[0]"),
            desired_status: ALLOC_DESIRED_RUN.into(),
            client_status: ALLOC_CLIENT_RUNNING.into(),
            ..Default::default()
        }
    }

    fn client_update(id: &str, status: &str) -> AllocClientUpdate {
        AllocClientUpdate {
            id: id.into(),
            client_status: status.into(),
            ..Default::default()
        }
    }

    fn claim(alloc: &str, mode: CsiClaimMode, state: CsiClaimState) -> CsiVolumeClaim {
        CsiVolumeClaim {
            allocation_id: alloc.into(),
            node_id: "n1".into(),
            mode,
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: CsiAttachmentMode::FileSystem,
            state,
            ..Default::default()
        }
    }

    /// A store with a healthy node plugin on n1 (so volumes are schedulable), the plugin's job
    /// and a running allocation of it.
    fn store_with_healthy_plugin() -> StateStore {
        let s = StateStore::new();
        s.upsert_job(1, plugin_job("plug", "node", 1));
        let jv = s.snapshot().job("default", "plug");
        s.upsert_plan_results(2, jv, vec![], vec![alloc("pa", "plug", "n1")], vec![]);
        s.upsert_node(3, node("n1", &[], &[info("hostpath", "pa", true, false)]));
        s
    }

    #[test]
    fn a_plugin_allocation_the_servers_stop_leaves_the_plugin() {
        let s = store_with_healthy_plugin();
        assert_eq!(
            s.snapshot().csi_plugin("hostpath").unwrap().nodes_healthy,
            1
        );
        let jv = s.snapshot().job("default", "plug");
        let stopped = Allocation {
            desired_status: ALLOC_DESIRED_STOP.into(),
            ..alloc("pa", "plug", "n1")
        };
        s.upsert_plan_results(4, jv, vec![], vec![stopped], vec![]);
        let gone = |s: &StateStore| {
            s.snapshot()
                .csi_plugin("hostpath")
                .is_none_or(|p| p.nodes.is_empty() && p.nodes_healthy == 0)
        };
        assert!(gone(&s));
        // Its task still runs until the client stops it: the next fingerprint keeps it out.
        s.upsert_node(5, node("n1", &[], &[info("hostpath", "pa", true, false)]));
        assert!(gone(&s));
    }

    #[test]
    fn first_healthy_fingerprint_creates_the_plugin() {
        let s = StateStore::new();
        s.upsert_node(1, node("n1", &[], &[info("hostpath", "a1", false, false)]));
        assert!(s.snapshot().csi_plugin("hostpath").is_none());
        s.upsert_node(2, node("n1", &[], &[info("hostpath", "a1", true, false)]));
        let snap = s.snapshot();
        let p = snap.csi_plugin("hostpath").unwrap();
        assert_eq!((p.nodes_healthy, p.controllers_healthy), (1, 0));
        assert_eq!((p.create_index, p.modify_index), (2, 2));
        assert_eq!(p.provider, "org.example.hostpath");
        assert_eq!(snap.table_index(Table::CsiPlugins), 2);
        // Turning unhealthy keeps the instance, uncounted.
        s.upsert_node(3, node("n1", &[], &[info("hostpath", "a1", false, false)]));
        let p = s.snapshot().csi_plugin("hostpath").unwrap();
        assert_eq!((p.nodes.len(), p.nodes_healthy), (1, 0));
    }

    #[test]
    fn counts_span_nodes_and_types() {
        let s = StateStore::new();
        s.upsert_node(
            1,
            node(
                "n1",
                &[info("hostpath", "a1", true, true)],
                &[info("hostpath", "a1", true, false)],
            ),
        );
        s.upsert_node(2, node("n2", &[], &[info("hostpath", "a2", true, false)]));
        let p = s.snapshot().csi_plugin("hostpath").unwrap();
        assert_eq!((p.controllers_healthy, p.nodes_healthy), (1, 2));
        assert!(p.controller_required);
    }

    #[test]
    fn node_losing_only_its_controller_keeps_its_node_instance() {
        let s = StateStore::new();
        s.upsert_node(
            1,
            node(
                "n1",
                &[info("hostpath", "a1", true, true)],
                &[info("hostpath", "a1", true, false)],
            ),
        );
        s.upsert_node(2, node("n1", &[], &[info("hostpath", "a1", true, false)]));
        let p = s.snapshot().csi_plugin("hostpath").unwrap();
        assert_eq!((p.controllers_healthy, p.nodes_healthy), (0, 1));
        assert!(p.controllers.is_empty() && p.nodes.contains_key("n1"));
        assert_eq!(p.modify_index, 2);
        // Losing the node instance too leaves nothing: the plugin goes.
        s.upsert_node(3, node("n1", &[], &[]));
        assert!(s.snapshot().csi_plugin("hostpath").is_none());
        assert_eq!(s.snapshot().table_index(Table::CsiPlugins), 3);
    }

    #[test]
    fn ended_allocation_removes_its_instances_and_empties_the_plugin() {
        let s = store_with_healthy_plugin();
        let p = s.snapshot().csi_plugin("hostpath").unwrap();
        assert_eq!((p.nodes_healthy, p.nodes_expected), (1, 1));
        // The job still expects an instance: the plugin stays, without healthy nodes.
        s.update_allocs_from_client(4, vec![client_update("pa", ALLOC_CLIENT_FAILED)]);
        let p = s.snapshot().csi_plugin("hostpath").unwrap();
        assert_eq!(
            (p.nodes.len(), p.nodes_healthy, p.nodes_expected),
            (0, 0, 1)
        );
        assert_eq!(p.modify_index, 4);
        // The job purged, nothing is left.
        s.delete_job(5, "default", "plug").unwrap();
        assert!(s.snapshot().csi_plugin("hostpath").is_none());
    }

    #[test]
    fn purging_a_plugin_job_drops_its_running_instances() {
        let s = store_with_healthy_plugin();
        s.delete_job(4, "default", "plug").unwrap();
        assert!(s.snapshot().csi_plugin("hostpath").is_none());
    }

    #[test]
    fn jobs_create_plugins_with_expected_counts_and_stopping_clears_them() {
        let s = StateStore::new();
        s.upsert_job(1, plugin_job("plug", "monolith", 2));
        let p = s.snapshot().csi_plugin("hostpath").unwrap();
        assert_eq!((p.controllers_expected, p.nodes_expected), (2, 2));
        assert_eq!(p.node_jobs[0].id, "plug");
        let mut stopped = plugin_job("plug", "monolith", 2);
        stopped.stop = true;
        s.upsert_job(2, stopped);
        assert!(
            s.snapshot().csi_plugin("hostpath").is_none(),
            "a stopped job expects nothing; an empty plugin is deleted"
        );
    }

    #[test]
    fn system_jobs_expect_one_instance_per_live_allocation() {
        let s = StateStore::new();
        let mut job = plugin_job("nodes", "node", 1);
        job.job_type = JOB_TYPE_SYSTEM.into();
        s.upsert_job(1, job);
        assert!(s.snapshot().csi_plugin("hostpath").is_none());
        s.upsert_node(2, node("n1", &[], &[info("hostpath", "a1", true, false)]));
        let jv = s.snapshot().job("default", "nodes");
        s.upsert_plan_results(
            3,
            jv,
            vec![],
            vec![alloc("a1", "nodes", "n1"), alloc("a2", "nodes", "n2")],
            vec![],
        );
        let p = s.snapshot().csi_plugin("hostpath").unwrap();
        assert_eq!(p.nodes_expected, 2);
        s.update_allocs_from_client(4, vec![client_update("a2", ALLOC_CLIENT_COMPLETE)]);
        assert_eq!(
            s.snapshot().csi_plugin("hostpath").unwrap().nodes_expected,
            1
        );
    }

    #[test]
    fn registered_volume_reads_back_with_plugin_health() {
        let s = store_with_healthy_plugin();
        s.upsert_csi_volumes(10, vec![volume("db", CsiAccessMode::SingleNodeWriter)])
            .unwrap();
        let snap = s.snapshot();
        let v = snap.csi_volume_full("default", "db").unwrap();
        assert!(v.schedulable);
        assert_eq!((v.nodes_healthy, v.nodes_expected), (1, 1));
        assert_eq!(v.provider, "org.example.hostpath");
        assert_eq!((v.create_index, v.modify_index), (10, 10));
        assert_eq!(v.allocations, Some(vec![]));
        assert_eq!(snap.table_index(Table::CsiVolumes), 10);
        let listed = snap.csi_volumes(&CsiVolumeFilter {
            plugin_id: Some("hostpath"),
            ..Default::default()
        });
        assert_eq!(listed.len(), 1);
        assert!(
            snap.csi_volumes(&CsiVolumeFilter {
                plugin_id: Some("other"),
                ..Default::default()
            })
            .is_empty()
        );
        // Without a plugin the volume is not schedulable.
        let orphan = CsiVolume {
            plugin_id: "nope".into(),
            ..volume("x", CsiAccessMode::SingleNodeWriter)
        };
        s.upsert_csi_volumes(11, vec![orphan]).unwrap();
        assert!(
            !s.snapshot()
                .csi_volume_with_health("default", "x")
                .unwrap()
                .schedulable
        );
    }

    #[test]
    fn claims_follow_access_modes_and_release_steps() {
        let s = store_with_healthy_plugin();
        s.upsert_csi_volumes(10, vec![volume("db", CsiAccessMode::SingleNodeWriter)])
            .unwrap();
        let jv = s.snapshot().job("default", "plug");
        s.upsert_job(11, plugin_job("web", "node", 1));
        let web = s.snapshot().job("default", "web");
        s.upsert_plan_results(12, jv, vec![], vec![alloc("w1", "plug", "n1")], vec![]);
        s.upsert_plan_results(13, web, vec![], vec![alloc("w2", "web", "n1")], vec![]);
        let write = |a| claim(a, CsiClaimMode::Write, CsiClaimState::Taken);
        s.csi_volume_claim(14, "default", "db", write("w1"))
            .unwrap();
        // Claiming again is accepted.
        s.csi_volume_claim(15, "default", "db", write("w1"))
            .unwrap();
        let e = s
            .csi_volume_claim(16, "default", "db", write("w2"))
            .unwrap_err();
        assert_eq!(e.to_string(), "volume max claim reached");
        let e = s
            .csi_volume_claim(16, "default", "db", write("ghost"))
            .unwrap_err();
        assert_eq!(e.to_string(), "Unknown allocation: ghost");
        let v = s.snapshot().csi_volume_full("default", "db").unwrap();
        assert_eq!(v.access_mode, CsiAccessMode::SingleNodeWriter);
        assert_eq!(v.allocations.as_ref().map(Vec::len), Some(1));
        assert_eq!(v.write_allocs["w1"].as_ref().unwrap().job_id, "plug");
        assert_eq!(v.modify_index, 15);

        // The release steps keep the claim until ready-to-free.
        for state in [
            CsiClaimState::Unpublishing,
            CsiClaimState::NodeDetached,
            CsiClaimState::ControllerDetached,
        ] {
            s.csi_volume_claim(20, "default", "db", claim("w1", CsiClaimMode::Write, state))
                .unwrap();
            let v = s.snapshot().csi_volume("default", "db").unwrap();
            assert_eq!(v.past_claims["w1"].state, state);
            assert!(v.in_use());
            // Stored volumes keep no stubs.
            assert_eq!(v.write_allocs["w1"], None);
        }
        s.csi_volume_claim(
            21,
            "default",
            "db",
            claim("w1", CsiClaimMode::Write, CsiClaimState::ReadyToFree),
        )
        .unwrap();
        let v = s.snapshot().csi_volume("default", "db").unwrap();
        assert!(!v.in_use() && v.past_claims.is_empty());
        // The writer gone, another job's writer fits.
        s.csi_volume_claim(22, "default", "db", write("w2"))
            .unwrap();
    }

    #[test]
    fn unschedulable_volume_refuses_claims() {
        let s = StateStore::new();
        s.upsert_job(1, plugin_job("plug", "node", 1));
        let jv = s.snapshot().job("default", "plug");
        s.upsert_plan_results(2, jv, vec![], vec![alloc("w1", "plug", "n1")], vec![]);
        s.upsert_csi_volumes(3, vec![volume("db", CsiAccessMode::SingleNodeWriter)])
            .unwrap();
        let e = s
            .csi_volume_claim(
                4,
                "default",
                "db",
                claim("w1", CsiClaimMode::Write, CsiClaimState::Taken),
            )
            .unwrap_err();
        assert_eq!(e.to_string(), "unschedulable");
        assert_eq!(
            s.snapshot()
                .csi_volume("default", "db")
                .unwrap()
                .modify_index,
            3
        );
    }

    #[test]
    fn ended_holder_shows_an_unpublishing_past_claim() {
        let s = store_with_healthy_plugin();
        s.upsert_csi_volumes(10, vec![volume("db", CsiAccessMode::SingleNodeWriter)])
            .unwrap();
        s.csi_volume_claim(
            11,
            "default",
            "db",
            claim("pa", CsiClaimMode::Write, CsiClaimState::Taken),
        )
        .unwrap();
        s.update_allocs_from_client(12, vec![client_update("pa", ALLOC_CLIENT_COMPLETE)]);
        let v = s.snapshot().csi_volume_full("default", "db").unwrap();
        assert_eq!(v.past_claims["pa"].state, CsiClaimState::Unpublishing);
        assert!(v.in_use());
    }

    #[test]
    fn reregistration_and_deregistration_rules() {
        let s = store_with_healthy_plugin();
        s.upsert_csi_volumes(10, vec![volume("db", CsiAccessMode::SingleNodeWriter)])
            .unwrap();
        // Unused: may change what is not immutable; keeps its create index.
        let mut renamed = volume("db", CsiAccessMode::SingleNodeWriter);
        renamed.name = "database".into();
        s.upsert_csi_volumes(11, vec![renamed]).unwrap();
        let v = s.snapshot().csi_volume("default", "db").unwrap();
        assert_eq!(
            (v.name.as_str(), v.create_index, v.modify_index),
            ("database", 10, 11)
        );
        // The plugin cannot change.
        let mut moved = volume("db", CsiAccessMode::SingleNodeWriter);
        moved.plugin_id = "other".into();
        assert_eq!(
            s.upsert_csi_volumes(12, vec![moved]).unwrap_err(),
            CsiStateError::VolumeExists("db".into())
        );
        // In use: neither re-registration nor deregistration.
        s.csi_volume_claim(
            13,
            "default",
            "db",
            claim("pa", CsiClaimMode::Write, CsiClaimState::Taken),
        )
        .unwrap();
        assert!(
            s.upsert_csi_volumes(14, vec![volume("db", CsiAccessMode::SingleNodeWriter)])
                .is_err()
        );
        let e = s
            .delete_csi_volumes(14, "default", &["db".into()], false)
            .unwrap_err();
        assert_eq!(e.to_string(), "volume in use: db");
        // Forced while the holder still runs: refused; once it ended: done.
        assert!(
            s.delete_csi_volumes(15, "default", &["db".into()], true)
                .is_err()
        );
        s.update_allocs_from_client(16, vec![client_update("pa", ALLOC_CLIENT_COMPLETE)]);
        s.delete_csi_volumes(17, "default", &["db".into()], true)
            .unwrap();
        assert!(s.snapshot().csi_volume("default", "db").is_none());
        assert!(
            s.snapshot()
                .csi_volumes(&CsiVolumeFilter {
                    plugin_id: Some("hostpath"),
                    ..Default::default()
                })
                .is_empty()
        );
        let e = s
            .delete_csi_volumes(18, "default", &["db".into()], false)
            .unwrap_err();
        assert_eq!(e.to_string(), "volume not found: db");
    }

    #[test]
    fn volumes_on_a_node_come_from_its_allocations_groups() {
        let s = store_with_healthy_plugin();
        s.upsert_csi_volumes(10, vec![volume("db", CsiAccessMode::SingleNodeWriter)])
            .unwrap();
        s.upsert_csi_volumes(11, vec![volume("logs", CsiAccessMode::SingleNodeWriter)])
            .unwrap();
        let mut job = plugin_job("web", "node", 1);
        job.task_groups[0].tasks[0].csi_plugin_config = None;
        job.task_groups[0].volumes = Some(json!({"data": {"Type": "csi", "Source": "db"}}));
        s.upsert_job(12, job);
        let jv = s.snapshot().job("default", "web");
        s.upsert_plan_results(13, jv, vec![], vec![alloc("w1", "web", "n9")], vec![]);
        let on_node = s.snapshot().csi_volumes(&CsiVolumeFilter {
            node_id: Some("n9"),
            ..Default::default()
        });
        assert_eq!(
            on_node.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
            vec!["db"]
        );
    }

    #[test]
    fn plugin_gc_deletes_only_empty_plugins() {
        let s = store_with_healthy_plugin();
        assert_eq!(
            s.delete_csi_plugin(10, "hostpath").unwrap_err(),
            CsiStateError::PluginInUse
        );
        s.delete_csi_plugin(10, "never-existed").unwrap();
    }

    #[test]
    fn snapshot_keeps_volumes_plugins_and_secrets() {
        let s = store_with_healthy_plugin();
        s.upsert_csi_volumes(10, vec![volume("db", CsiAccessMode::SingleNodeWriter)])
            .unwrap();
        let snap = s.snapshot();
        let restored = StateStore::new();
        restored.restore(&snap.encode()).unwrap();
        let r = restored.snapshot();
        assert_eq!(r.digest(), snap.digest());
        let v = r.csi_volume("default", "db").unwrap();
        assert_eq!(v.secrets.as_ref().unwrap()["key"], "s3cr3t");
        assert_eq!(r.csi_plugin("hostpath").unwrap().nodes_healthy, 1);
        assert_eq!(
            r.csi_volumes(&CsiVolumeFilter {
                plugin_id: Some("hostpath"),
                ..Default::default()
            })
            .len(),
            1
        );
        assert_eq!(r.table_index(Table::CsiVolumes), 10);
    }
}
