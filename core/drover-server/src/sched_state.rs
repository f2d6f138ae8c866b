//! The scheduler's view of state: a state store snapshot behind the scheduler's `State` trait.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_scheduler::State;
use drover_state::{CsiVolumeFilter, StateSnapshot};
use drover_structs::{Allocation, CsiVolume, Job, Node};

pub struct SnapshotState(pub StateSnapshot);

impl State for SnapshotState {
    fn index(&self) -> u64 {
        self.0.latest_index()
    }
    fn job(&self, namespace: &str, id: &str) -> Option<Arc<Job>> {
        self.0.job(namespace, id)
    }
    fn nodes(&self) -> Vec<Arc<Node>> {
        self.0.nodes()
    }
    fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.0.node(id)
    }
    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.0.allocs_by_job(namespace, job_id)
    }
    fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.0.allocs_by_node(node_id)
    }
    fn node_usage(&self, node_id: &str) -> Option<Arc<drover_structs::usage::NodeAllocUsage>> {
        // Every node has an entry once it holds an allocation; an empty default otherwise.
        Some(self.0.node_usage(node_id).unwrap_or_default())
    }
    fn alloc(&self, id: &str) -> Option<Arc<Allocation>> {
        self.0.alloc(id)
    }
    fn csi_volume(&self, namespace: &str, id: &str) -> Option<Arc<CsiVolume>> {
        self.0.csi_volume_with_health(namespace, id).map(Arc::new)
    }
    fn latest_deployment(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Option<Arc<drover_structs::Deployment>> {
        self.0.latest_deployment(namespace, job_id)
    }
    fn csi_volumes_per_plugin_on_node(&self, node_id: &str) -> BTreeMap<String, u64> {
        let filter = CsiVolumeFilter {
            node_id: Some(node_id),
            ..Default::default()
        };
        let mut out = BTreeMap::new();
        for v in self.0.csi_volumes(&filter) {
            *out.entry(v.plugin_id).or_insert(0) += 1;
        }
        out
    }
}
