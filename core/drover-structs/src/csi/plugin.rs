//! CSI plugins as the servers see them: what each client fingerprints about the plugin tasks it
//! runs (`CSIInfo` on the node), and the cluster-wide plugin that gathers them with its health
//! counts and the instances its jobs expect (Nomad's `CSIPlugin` bookkeeping).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::modes::CsiPluginType;
use crate::alloc::AllocListStub;
use crate::job::{JOB_TYPE_SYSBATCH, JOB_TYPE_SYSTEM, Job, Task};

/// What a controller plugin can do (its controller capabilities).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiControllerInfo {
    /// CREATE_DELETE_VOLUME
    #[serde(rename = "SupportsCreateDelete")]
    pub supports_create_delete: bool,
    /// PUBLISH_UNPUBLISH_VOLUME: volumes must be attached by the controller before use.
    #[serde(rename = "SupportsAttachDetach")]
    pub supports_attach_detach: bool,
    #[serde(rename = "SupportsListVolumes")]
    pub supports_list_volumes: bool,
    #[serde(rename = "SupportsGetCapacity")]
    pub supports_get_capacity: bool,
    #[serde(rename = "SupportsCreateDeleteSnapshot")]
    pub supports_create_delete_snapshot: bool,
    #[serde(rename = "SupportsListSnapshots")]
    pub supports_list_snapshots: bool,
    #[serde(rename = "SupportsClone")]
    pub supports_clone: bool,
    /// PUBLISH_READONLY
    #[serde(rename = "SupportsReadOnlyAttach")]
    pub supports_read_only_attach: bool,
    #[serde(rename = "SupportsExpand")]
    pub supports_expand: bool,
    #[serde(rename = "SupportsListVolumesAttachedNodes")]
    pub supports_list_volumes_attached_nodes: bool,
    #[serde(rename = "SupportsCondition")]
    pub supports_condition: bool,
    #[serde(rename = "SupportsGet")]
    pub supports_get: bool,
}

/// What a node plugin reports about the node it runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiNodeInfo {
    /// The storage provider's id of this node.
    #[serde(rename = "ID")]
    pub id: String,
    /// How many volumes the node takes; 0 is no limit.
    #[serde(rename = "MaxVolumes")]
    pub max_volumes: i64,
    #[serde(rename = "AccessibleTopology")]
    pub accessible_topology: Option<super::volume::CsiTopology>,
    #[serde(rename = "RequiresNodeStageVolume")]
    pub requires_node_stage_volume: bool,
    #[serde(rename = "SupportsStats")]
    pub supports_stats: bool,
    #[serde(rename = "SupportsExpand")]
    pub supports_expand: bool,
    #[serde(rename = "SupportsCondition")]
    pub supports_condition: bool,
}

/// One plugin instance on one node, as the node's fingerprint reports it (in the node's
/// `CSIControllerPlugins` or `CSINodePlugins`, by plugin id).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiInfo {
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    /// The allocation running the plugin task.
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    #[serde(rename = "Healthy")]
    pub healthy: bool,
    #[serde(rename = "HealthDescription")]
    pub health_description: String,
    /// RFC 3339.
    #[serde(rename = "UpdateTime", serialize_with = "super::serialize_go_time")]
    pub update_time: String,
    /// The vendor name from the plugin's GetPluginInfo.
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "ProviderVersion")]
    pub provider_version: String,
    /// The plugin has the CONTROLLER_SERVICE capability: volumes need a healthy controller.
    #[serde(rename = "RequiresControllerPlugin")]
    pub requires_controller_plugin: bool,
    /// The plugin has VOLUME_ACCESSIBILITY_CONSTRAINTS.
    #[serde(rename = "RequiresTopologies")]
    pub requires_topologies: bool,
    #[serde(rename = "ControllerInfo", skip_serializing_if = "Option::is_none")]
    pub controller_info: Option<CsiControllerInfo>,
    #[serde(rename = "NodeInfo", skip_serializing_if = "Option::is_none")]
    pub node_info: Option<CsiNodeInfo>,
}

/// A job that runs instances of a plugin and how many it expects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiJobDescription {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Version")]
    pub version: u64,
    #[serde(rename = "Expected")]
    pub expected: i64,
}

/// A plugin: the controller and node instances the clients report, by node id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiPlugin {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "Version")]
    pub version: String,
    #[serde(rename = "ControllerRequired")]
    pub controller_required: bool,
    #[serde(rename = "Controllers")]
    pub controllers: BTreeMap<String, CsiInfo>,
    #[serde(rename = "Nodes")]
    pub nodes: BTreeMap<String, CsiInfo>,
    /// The allocations running the plugin's instances; only filled when read through the API.
    #[serde(rename = "Allocations", skip_serializing_if = "Option::is_none")]
    pub allocations: Option<Vec<AllocListStub>>,
    /// Jobs running controller instances, by (namespace, id) order.
    #[serde(rename = "ControllerJobs")]
    pub controller_jobs: Vec<CsiJobDescription>,
    #[serde(rename = "NodeJobs")]
    pub node_jobs: Vec<CsiJobDescription>,
    #[serde(rename = "ControllersHealthy")]
    pub controllers_healthy: i64,
    #[serde(rename = "ControllersExpected")]
    pub controllers_expected: i64,
    #[serde(rename = "NodesHealthy")]
    pub nodes_healthy: i64,
    #[serde(rename = "NodesExpected")]
    pub nodes_expected: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// The list view of `GET /v1/plugins?type=csi`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiPluginListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "ControllerRequired")]
    pub controller_required: bool,
    #[serde(rename = "ControllersHealthy")]
    pub controllers_healthy: i64,
    #[serde(rename = "ControllersExpected")]
    pub controllers_expected: i64,
    #[serde(rename = "NodesHealthy")]
    pub nodes_healthy: i64,
    #[serde(rename = "NodesExpected")]
    pub nodes_expected: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// The plugin a task serves, from its `csi_plugin` block (`CSIPluginConfig`): id and type.
/// `None` for ordinary tasks and for blocks without an id or with an unknown type (validation
/// refuses those before they are stored).
pub fn task_csi_plugin(task: &Task) -> Option<(String, CsiPluginType)> {
    let cfg = task.csi_plugin_config.as_ref()?.as_object()?;
    let id = cfg.get("ID")?.as_str().filter(|s| !s.is_empty())?;
    let kind = CsiPluginType::parse(cfg.get("Type")?.as_str()?)?;
    Some((id.to_string(), kind))
}

/// Every plugin a job's tasks serve, with the types of instance each runs.
pub fn job_csi_plugins(job: &Job) -> BTreeMap<String, Vec<CsiPluginType>> {
    let mut out: BTreeMap<String, Vec<CsiPluginType>> = BTreeMap::new();
    for tg in &job.task_groups {
        for task in &tg.tasks {
            if let Some((id, kind)) = task_csi_plugin(task) {
                out.entry(id).or_default().push(kind);
            }
        }
    }
    out
}

impl CsiPlugin {
    pub fn new(id: &str, index: u64) -> CsiPlugin {
        CsiPlugin {
            id: id.to_string(),
            create_index: index,
            modify_index: index,
            ..Default::default()
        }
    }

    /// Records the controller instance a node fingerprinted. An unhealthy instance the plugin
    /// did not know is not recorded (it would only have to be removed again once its allocation
    /// ends); a known one is kept with its new health.
    pub fn add_controller(&mut self, node_id: &str, info: &CsiInfo) {
        self.take_plugin_info(info);
        self.controller_required = info.requires_controller_plugin;
        if self.controllers.contains_key(node_id) || info.healthy {
            self.controllers.insert(node_id.to_string(), info.clone());
        }
        self.recount();
    }

    /// Records the node instance a node fingerprinted (see [`CsiPlugin::add_controller`]).
    pub fn add_node(&mut self, node_id: &str, info: &CsiInfo) {
        self.take_plugin_info(info);
        if self.nodes.contains_key(node_id) || info.healthy {
            self.nodes.insert(node_id.to_string(), info.clone());
        }
        self.recount();
    }

    /// A plugin created by a job knows its vendor only once an instance reports it.
    fn take_plugin_info(&mut self, info: &CsiInfo) {
        if !info.provider.is_empty() {
            self.provider.clone_from(&info.provider);
        }
        if !info.provider_version.is_empty() {
            self.version.clone_from(&info.provider_version);
        }
    }

    /// Forgets a node's instance of the given type (both for a monolith). Returns whether the
    /// plugin changed.
    pub fn delete_node_for_type(&mut self, node_id: &str, kind: CsiPluginType) -> bool {
        let mut changed = false;
        if kind.runs_controller() {
            changed |= self.controllers.remove(node_id).is_some();
        }
        if kind.runs_node() {
            changed |= self.nodes.remove(node_id).is_some();
        }
        self.recount();
        changed
    }

    /// Forgets the instances an allocation ran (it ended). Returns whether the plugin changed.
    pub fn delete_alloc(&mut self, alloc_id: &str, node_id: &str) -> bool {
        let mut changed = false;
        if self
            .controllers
            .get(node_id)
            .is_some_and(|i| i.alloc_id == alloc_id)
        {
            self.controllers.remove(node_id);
            changed = true;
        }
        if self
            .nodes
            .get(node_id)
            .is_some_and(|i| i.alloc_id == alloc_id)
        {
            self.nodes.remove(node_id);
            changed = true;
        }
        self.recount();
        changed
    }

    /// Records how many instances `job` expects (Nomad's `UpdateExpectedWithJob`), or forgets
    /// the job when `terminal` (stopped or removed). Service and batch jobs expect their group
    /// counts; system jobs one per node they run on: `live_per_group` counts the job's live
    /// allocations by group.
    pub fn update_expected_with_job(
        &mut self,
        job: &Job,
        live_per_group: &BTreeMap<String, i64>,
        terminal: bool,
    ) {
        self.controller_jobs
            .retain(|d| !(d.namespace == job.namespace && d.id == job.id));
        self.node_jobs
            .retain(|d| !(d.namespace == job.namespace && d.id == job.id));
        if !terminal {
            let system = job.job_type == JOB_TYPE_SYSTEM || job.job_type == JOB_TYPE_SYSBATCH;
            let (mut controllers, mut nodes, mut serves) = (0, 0, false);
            for tg in &job.task_groups {
                let count = if system {
                    live_per_group.get(&tg.name).copied().unwrap_or(0)
                } else {
                    tg.count
                };
                for task in &tg.tasks {
                    let Some((id, kind)) = task_csi_plugin(task) else {
                        continue;
                    };
                    if id != self.id {
                        continue;
                    }
                    serves = true;
                    if kind.runs_controller() {
                        controllers += count;
                    }
                    if kind.runs_node() {
                        nodes += count;
                    }
                }
            }
            let describe = |expected| CsiJobDescription {
                namespace: job.namespace.clone(),
                id: job.id.clone(),
                version: job.version,
                expected,
            };
            if serves && job_serves(job, &self.id, CsiPluginType::runs_controller) {
                self.controller_jobs.push(describe(controllers));
            }
            if serves && job_serves(job, &self.id, CsiPluginType::runs_node) {
                self.node_jobs.push(describe(nodes));
            }
            let key = |d: &CsiJobDescription| (d.namespace.clone(), d.id.clone());
            self.controller_jobs.sort_by_key(key);
            self.node_jobs.sort_by_key(key);
        }
        self.recount();
    }

    /// Nothing left: no instance reports it and no job expects one.
    pub fn is_empty(&self) -> bool {
        self.controllers.is_empty()
            && self.nodes.is_empty()
            && self.controllers_expected == 0
            && self.nodes_expected == 0
    }

    /// The healthy and expected counts, from the instances and jobs recorded.
    fn recount(&mut self) {
        self.controllers_healthy = self.controllers.values().filter(|i| i.healthy).count() as i64;
        self.nodes_healthy = self.nodes.values().filter(|i| i.healthy).count() as i64;
        self.controllers_expected = self.controller_jobs.iter().map(|d| d.expected).sum();
        self.nodes_expected = self.node_jobs.iter().map(|d| d.expected).sum();
    }

    /// The controller capabilities, from any controller (instances of one plugin are alike).
    pub fn controller_info(&self) -> Option<&CsiControllerInfo> {
        self.controllers
            .values()
            .find_map(|c| c.controller_info.as_ref())
    }

    pub fn supports_create_delete(&self) -> bool {
        self.controller_info()
            .is_some_and(|c| c.supports_create_delete)
    }

    pub fn supports_attach_detach(&self) -> bool {
        self.controller_info()
            .is_some_and(|c| c.supports_attach_detach)
    }

    /// Node ids of the healthy controller instances, in id order.
    pub fn healthy_controller_nodes(&self) -> Vec<String> {
        self.controllers
            .iter()
            .filter(|(_, i)| i.healthy)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The allocations running instances, each once.
    pub fn alloc_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .controllers
            .values()
            .chain(self.nodes.values())
            .map(|i| i.alloc_id.clone())
            .filter(|id| !id.is_empty())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    pub fn stub(&self) -> CsiPluginListStub {
        CsiPluginListStub {
            id: self.id.clone(),
            provider: self.provider.clone(),
            controller_required: self.controller_required,
            controllers_healthy: self.controllers_healthy,
            controllers_expected: self.controllers_expected,
            nodes_healthy: self.nodes_healthy,
            nodes_expected: self.nodes_expected,
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

fn job_serves(job: &Job, plugin: &str, runs: fn(CsiPluginType) -> bool) -> bool {
    job.task_groups
        .iter()
        .flat_map(|tg| &tg.tasks)
        .any(|t| task_csi_plugin(t).is_some_and(|(id, kind)| id == plugin && runs(kind)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::TaskGroup;

    fn info(alloc: &str, healthy: bool, controller: bool) -> CsiInfo {
        CsiInfo {
            plugin_id: "p".into(),
            alloc_id: alloc.into(),
            healthy,
            provider: "org.example".into(),
            provider_version: "1.0".into(),
            requires_controller_plugin: true,
            controller_info: controller.then(CsiControllerInfo::default),
            node_info: (!controller).then(CsiNodeInfo::default),
            ..Default::default()
        }
    }

    fn plugin_job(kind: &str, count: i64) -> Job {
        Job {
            id: "plug".into(),
            namespace: "default".into(),
            job_type: "service".into(),
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count,
                tasks: vec![Task {
                    name: "t".into(),
                    csi_plugin_config: Some(serde_json::json!({"ID": "p", "Type": kind})),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn healthy_instances_are_counted_per_type() {
        let mut p = CsiPlugin::new("p", 1);
        p.add_controller("n1", &info("a1", true, true));
        p.add_node("n1", &info("a1", true, false));
        p.add_node("n2", &info("a2", true, false));
        assert_eq!((p.controllers_healthy, p.nodes_healthy), (1, 2));
        assert!(p.controller_required);
        assert_eq!(
            (p.provider.as_str(), p.version.as_str()),
            ("org.example", "1.0")
        );
        // A known instance turning unhealthy stays, uncounted.
        p.add_node("n2", &info("a2", false, false));
        assert_eq!((p.nodes.len(), p.nodes_healthy), (2, 1));
    }

    #[test]
    fn unhealthy_unknown_instances_are_not_recorded() {
        let mut p = CsiPlugin::new("p", 1);
        p.add_node("n1", &info("a1", false, false));
        assert!(p.nodes.is_empty());
        assert!(p.is_empty());
    }

    #[test]
    fn losing_one_type_on_a_node_keeps_the_other() {
        let mut p = CsiPlugin::new("p", 1);
        p.add_controller("n1", &info("a1", true, true));
        p.add_node("n1", &info("a1", true, false));
        assert!(p.delete_node_for_type("n1", CsiPluginType::Controller));
        assert_eq!((p.controllers_healthy, p.nodes_healthy), (0, 1));
        assert!(!p.is_empty());
        assert!(!p.delete_node_for_type("n1", CsiPluginType::Controller));
        assert!(p.delete_node_for_type("n1", CsiPluginType::Monolith));
        assert!(p.is_empty());
    }

    #[test]
    fn ended_alloc_removes_only_its_own_instances() {
        let mut p = CsiPlugin::new("p", 1);
        p.add_node("n1", &info("a1", true, false));
        p.add_node("n2", &info("a2", true, false));
        assert!(!p.delete_alloc("other", "n1"));
        assert!(p.delete_alloc("a1", "n1"));
        assert_eq!(p.nodes_healthy, 1);
        assert_eq!(p.alloc_ids(), vec!["a2".to_string()]);
    }

    #[test]
    fn jobs_set_expected_counts_and_terminal_jobs_clear_them() {
        let mut p = CsiPlugin::new("p", 1);
        p.update_expected_with_job(&plugin_job("monolith", 3), &BTreeMap::new(), false);
        assert_eq!((p.controllers_expected, p.nodes_expected), (3, 3));
        assert!(!p.is_empty(), "a job expecting instances keeps the plugin");
        p.update_expected_with_job(&plugin_job("node", 2), &BTreeMap::new(), false);
        assert_eq!((p.controllers_expected, p.nodes_expected), (0, 2));
        assert_eq!(p.node_jobs.len(), 1);
        p.update_expected_with_job(&plugin_job("node", 2), &BTreeMap::new(), true);
        assert_eq!((p.controllers_expected, p.nodes_expected), (0, 0));
        assert!(p.is_empty());
    }

    #[test]
    fn task_plugin_needs_an_id_and_a_known_type() {
        let mut t = Task::default();
        assert_eq!(task_csi_plugin(&t), None);
        t.csi_plugin_config = Some(serde_json::json!({"ID": "x", "Type": "node"}));
        assert_eq!(task_csi_plugin(&t), Some(("x".into(), CsiPluginType::Node)));
        t.csi_plugin_config = Some(serde_json::json!({"ID": "x", "Type": "both"}));
        assert_eq!(task_csi_plugin(&t), None);
    }

    #[test]
    fn csi_info_json_omits_absent_service_infos() {
        let json = serde_json::to_value(info("a", true, true)).unwrap();
        assert!(json.get("NodeInfo").is_none());
        assert_eq!(json["ControllerInfo"]["SupportsAttachDetach"], false);
        assert_eq!(json["UpdateTime"], "0001-01-01T00:00:00Z");
    }
}
