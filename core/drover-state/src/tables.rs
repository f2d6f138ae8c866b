//! The tables and read access to them. A [`StateSnapshot`] is a cheap clone of all tables.

use std::sync::Arc;

use drover_structs::{Allocation, Evaluation, Job, JobSubmission, JobSummary, Node};
use imbl::{OrdMap, OrdSet};

/// Key of namespaced objects: (namespace, id).
pub type NsKey = (String, String);
/// An allocation's id as the tables key it.
pub type AllocKey = Arc<str>;

/// The tables, for index tracking and blocking queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Jobs,
    JobVersions,
    JobSummary,
    Evals,
    Allocs,
    Nodes,
    SchedulerConfig,
    PeriodicLaunch,
    CsiVolumes,
    CsiPlugins,
    Deployments,
    ScalingEvents,
    Namespaces,
    AclPolicies,
    AclTokens,
    Variables,
    /// The mesh CA and the intentions.
    Mesh,
}

impl Table {
    pub const ALL: [Table; 17] = [
        Table::Jobs,
        Table::JobVersions,
        Table::JobSummary,
        Table::Evals,
        Table::Allocs,
        Table::Nodes,
        Table::SchedulerConfig,
        Table::PeriodicLaunch,
        Table::CsiVolumes,
        Table::CsiPlugins,
        Table::Deployments,
        Table::ScalingEvents,
        Table::Namespaces,
        Table::AclPolicies,
        Table::AclTokens,
        Table::Variables,
        Table::Mesh,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Table::Jobs => "jobs",
            Table::JobVersions => "job_version",
            Table::JobSummary => "job_summary",
            Table::Evals => "evals",
            Table::Allocs => "allocs",
            Table::Nodes => "nodes",
            Table::SchedulerConfig => "scheduler_config",
            Table::PeriodicLaunch => "periodic_launch",
            Table::CsiVolumes => "csi_volumes",
            Table::CsiPlugins => "csi_plugins",
            Table::Deployments => "deployment",
            Table::ScalingEvents => "scaling_event",
            Table::Namespaces => "namespaces",
            Table::AclPolicies => "acl_policy",
            Table::AclTokens => "acl_token",
            Table::Variables => "variables",
            Table::Mesh => "mesh",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Tables {
    pub jobs: OrdMap<NsKey, Arc<Job>>,
    pub job_versions: OrdMap<(NsKey, u64), Arc<Job>>,
    /// The job file each version was registered from, when the client sent it (written with
    /// the version, removed with the job; under the `JobVersions` index).
    pub job_submissions: OrdMap<(NsKey, u64), Arc<JobSubmission>>,
    pub job_summaries: OrdMap<NsKey, Arc<JobSummary>>,
    pub evals: OrdMap<String, Arc<Evaluation>>,
    pub evals_by_job: OrdMap<NsKey, OrdSet<String>>,
    /// Keyed by a shared copy of the id: the by-node and by-job indexes hold the same
    /// `Arc`, and the copy-on-write of a tree node (each write after a snapshot was taken)
    /// copies pointers rather than allocating every id again.
    pub allocs: OrdMap<AllocKey, Arc<Allocation>>,
    pub allocs_by_node: OrdMap<String, OrdSet<AllocKey>>,
    pub allocs_by_job: OrdMap<NsKey, OrdSet<AllocKey>>,
    pub nodes: OrdMap<String, Arc<Node>>,
    /// What each node's live allocations hold, kept in step with `allocs` by every write, so
    /// schedulers and the plan applier never sum a node's allocations themselves.
    pub node_usage: OrdMap<String, Arc<drover_structs::usage::NodeAllocUsage>>,
    /// The operator's scheduler configuration; `None` until one is set.
    pub scheduler_config: Option<Arc<drover_structs::SchedulerConfiguration>>,
    /// Last launch of each periodic job.
    pub periodic_launches: OrdMap<NsKey, Arc<drover_structs::PeriodicLaunch>>,
    /// CSI volumes by (namespace, id), and their keys by plugin id.
    pub csi_volumes: OrdMap<NsKey, Arc<drover_structs::CsiVolume>>,
    pub csi_volumes_by_plugin: OrdMap<String, OrdSet<NsKey>>,
    /// CSI plugins by id.
    pub csi_plugins: OrdMap<String, Arc<drover_structs::CsiPlugin>>,
    /// Deployments by id, and their ids by job.
    pub deployments: OrdMap<String, Arc<drover_structs::Deployment>>,
    pub deployments_by_job: OrdMap<NsKey, OrdSet<String>>,
    /// Each job's scaling events by group.
    pub scaling_events: OrdMap<NsKey, Arc<drover_structs::ScalingEvents>>,
    /// Namespaces written by operators, by name (`default` is there only once written).
    pub namespaces: OrdMap<String, Arc<drover_structs::Namespace>>,
    /// ACL policies by name; tokens by accessor id, and their accessors by secret id.
    pub acl_policies: OrdMap<String, Arc<drover_structs::AclPolicy>>,
    pub acl_tokens: OrdMap<String, Arc<drover_structs::AclToken>>,
    pub acl_tokens_by_secret: OrdMap<String, String>,
    /// Variables by (namespace, path).
    pub variables: OrdMap<NsKey, Arc<drover_structs::Variable>>,
    /// The mesh CA, once the leader made it.
    pub mesh_ca: Option<Arc<drover_structs::mesh::MeshCa>>,
    /// Intentions by (namespace, source, destination).
    pub intentions: OrdMap<(String, String, String), Arc<drover_structs::mesh::Intention>>,
    /// The index of the ACL bootstrap; 0 before it.
    pub acl_bootstrap_index: u64,
    pub indexes: OrdMap<Table, u64>,
    /// Raft index of the newest applied entry, whatever table it touched.
    pub latest_index: u64,
}

/// A read-only, consistent view of all tables at one index.
#[derive(Debug, Clone)]
pub struct StateSnapshot {
    pub(crate) t: Tables,
}

fn key(ns: &str, id: &str) -> NsKey {
    (ns.to_string(), id.to_string())
}

/// An [`NsKey`] looked up without building one: the tables are searched with borrowed
/// strings, so a read allocates no copy of the namespace and id (a restore of a million
/// allocations looks up a key for each).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NsRef<'a>(pub &'a str, pub &'a str);

impl equivalent::Equivalent<NsKey> for NsRef<'_> {
    fn equivalent(&self, key: &NsKey) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}

impl equivalent::Comparable<NsKey> for NsRef<'_> {
    /// The order of `NsKey` itself: namespace, then id.
    fn compare(&self, key: &NsKey) -> std::cmp::Ordering {
        self.0
            .cmp(key.0.as_str())
            .then_with(|| self.1.cmp(key.1.as_str()))
    }
}

/// Runs `f` on the value under `q` in an index map, inserted at its default first when
/// missing: the owned key is built only then, not for every row added to an existing entry.
pub(crate) fn with_entry<K, V, Q>(
    map: &mut OrdMap<K, V>,
    q: &Q,
    owned: impl FnOnce() -> K,
    f: impl FnOnce(&mut V),
) where
    K: Ord + Clone,
    V: Clone + Default,
    Q: equivalent::Comparable<K> + ?Sized,
{
    match map.get_mut(q) {
        Some(v) => f(v),
        None => f(map.entry(owned()).or_default()),
    }
}

/// A `(NsKey, version)` key (job versions, submissions) looked up without building one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VersionRef<'a>(pub NsRef<'a>, pub u64);

impl equivalent::Equivalent<(NsKey, u64)> for VersionRef<'_> {
    fn equivalent(&self, key: &(NsKey, u64)) -> bool {
        self.1 == key.1 && self.0.equivalent(&key.0)
    }
}

impl equivalent::Comparable<(NsKey, u64)> for VersionRef<'_> {
    fn compare(&self, key: &(NsKey, u64)) -> std::cmp::Ordering {
        self.0.compare(&key.0).then_with(|| self.1.cmp(&key.1))
    }
}

impl StateSnapshot {
    /// Raft index of the newest entry this view includes.
    pub fn latest_index(&self) -> u64 {
        self.t.latest_index
    }

    /// Index of the last change to a table (at least 1, so clients always see a valid index).
    pub fn table_index(&self, table: Table) -> u64 {
        self.t.indexes.get(&table).copied().unwrap_or(0).max(1)
    }

    /// The highest index among several tables.
    pub fn max_index(&self, tables: &[Table]) -> u64 {
        tables
            .iter()
            .map(|t| self.table_index(*t))
            .max()
            .unwrap_or(1)
    }

    pub fn job(&self, ns: &str, id: &str) -> Option<Arc<Job>> {
        self.t.jobs.get(&NsRef(ns, id)).cloned()
    }

    /// Jobs of a namespace (`None` = all namespaces), ordered by namespace and id.
    pub fn jobs(&self, ns: Option<&str>) -> Vec<Arc<Job>> {
        self.t
            .jobs
            .iter()
            .filter(|((n, _), _)| ns.is_none_or(|want| want == n))
            .map(|(_, j)| j.clone())
            .collect()
    }

    pub fn job_version(&self, ns: &str, id: &str, version: u64) -> Option<Arc<Job>> {
        self.t
            .job_versions
            .get(&VersionRef(NsRef(ns, id), version))
            .cloned()
    }

    /// The native service registrations of allocation `id` (none unless it runs).
    pub fn alloc_service_registrations(
        &self,
        id: &str,
    ) -> Vec<drover_structs::ServiceRegistration> {
        // Only a running allocation registers anything: no node lookup for the others.
        let Some(a) = self
            .t
            .allocs
            .get(id)
            .filter(|a| a.client_status == drover_structs::ALLOC_CLIENT_RUNNING)
        else {
            return Vec::new();
        };
        match &a.job {
            Some(job) => drover_structs::service::alloc_services(
                a,
                job,
                self.t.nodes.get(&a.node_id).map(|n| &**n),
            ),
            None => Vec::new(),
        }
    }

    /// The native service registrations of running allocations (see
    /// [`drover_structs::service`]), in namespace `ns` (every namespace with `None`). Derived
    /// on each read: they change only when allocations do (under the `Allocs` index).
    pub fn service_registrations(
        &self,
        ns: Option<&str>,
    ) -> Vec<drover_structs::ServiceRegistration> {
        self.t
            .allocs
            .values()
            .filter(|a| a.client_status == drover_structs::ALLOC_CLIENT_RUNNING)
            .filter(|a| ns.is_none_or(|want| want == a.namespace))
            .flat_map(|a| match &a.job {
                Some(job) => drover_structs::service::alloc_services(
                    a,
                    job,
                    self.t.nodes.get(&a.node_id).map(|n| &**n),
                ),
                None => Vec::new(),
            })
            .collect()
    }

    /// The job file version `version` of a job was registered from, if it was sent.
    pub fn job_submission(&self, ns: &str, id: &str, version: u64) -> Option<Arc<JobSubmission>> {
        self.t
            .job_submissions
            .get(&VersionRef(NsRef(ns, id), version))
            .cloned()
    }

    /// Every stored version of a job, newest first.
    pub fn job_versions(&self, ns: &str, id: &str) -> Vec<Arc<Job>> {
        let k = key(ns, id);
        let mut v: Vec<Arc<Job>> = self
            .t
            .job_versions
            .range((k.clone(), 0)..=(k, u64::MAX))
            .map(|(_, j)| j.clone())
            .collect();
        v.reverse();
        v
    }

    pub fn job_summary(&self, ns: &str, id: &str) -> Option<Arc<JobSummary>> {
        self.t.job_summaries.get(&NsRef(ns, id)).cloned()
    }

    pub fn eval(&self, id: &str) -> Option<Arc<Evaluation>> {
        self.t.evals.get(id).cloned()
    }

    pub fn evals(&self) -> Vec<Arc<Evaluation>> {
        self.t.evals.values().cloned().collect()
    }

    pub fn evals_by_job(&self, ns: &str, job_id: &str) -> Vec<Arc<Evaluation>> {
        self.t
            .evals_by_job
            .get(&NsRef(ns, job_id))
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| self.t.evals.get(id).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn alloc(&self, id: &str) -> Option<Arc<Allocation>> {
        self.t.allocs.get(id).cloned()
    }

    pub fn allocs(&self) -> Vec<Arc<Allocation>> {
        self.t.allocs.values().cloned().collect()
    }

    /// Number of allocations, without building a list.
    pub fn alloc_count(&self) -> usize {
        self.t.allocs.len()
    }

    pub fn allocs_by_job(&self, ns: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.t
            .allocs_by_job
            .get(&NsRef(ns, job_id))
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| self.t.allocs.get(id).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.t
            .allocs_by_node
            .get(node_id)
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| self.t.allocs.get(id).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn allocs_by_eval(&self, eval_id: &str) -> Vec<Arc<Allocation>> {
        let Some(eval) = self.eval(eval_id) else {
            return Vec::new();
        };
        self.allocs_by_job(&eval.namespace, &eval.job_id)
            .into_iter()
            .filter(|a| a.eval_id == eval_id)
            .collect()
    }

    /// The highest `AllocModifyIndex` among a node's allocations: clients block on this, and
    /// their own status updates do not move it.
    pub fn node_allocs_index(&self, node_id: &str) -> u64 {
        self.t
            .allocs_by_node
            .get(node_id)
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| self.t.allocs.get(id))
                    .map(|a| a.alloc_modify_index)
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    }

    /// What a node's live (non-terminal) allocations hold together.
    pub fn node_usage(&self, node_id: &str) -> Option<Arc<drover_structs::usage::NodeAllocUsage>> {
        self.t.node_usage.get(node_id).cloned()
    }

    pub fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.t.nodes.get(id).cloned()
    }

    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.t.nodes.values().cloned().collect()
    }

    /// Objects whose id starts with `prefix` (Nomad's `?prefix=` and short-id lookups).
    pub fn allocs_by_prefix(&self, prefix: &str) -> Vec<Arc<Allocation>> {
        self.t
            .allocs
            .range::<_, str>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, a)| a.clone())
            .collect()
    }

    pub fn evals_by_prefix(&self, prefix: &str) -> Vec<Arc<Evaluation>> {
        self.t
            .evals
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// A job's scaling events by group, newest first.
    pub fn scaling_events(
        &self,
        ns: &str,
        job_id: &str,
    ) -> Option<Arc<drover_structs::ScalingEvents>> {
        self.t.scaling_events.get(&NsRef(ns, job_id)).cloned()
    }

    pub fn nodes_by_prefix(&self, prefix: &str) -> Vec<Arc<Node>> {
        self.t
            .nodes
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// A digest of every table, equal on servers that applied the same entries.
    pub fn digest(&self) -> u64 {
        use std::hash::Hasher;
        /// Feeds what it is given to the hasher: the encoding is digested as it is written,
        /// never held whole.
        struct HashWriter<H>(H);
        impl<H: Hasher> std::io::Write for HashWriter<H> {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.write(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut out = HashWriter(std::collections::hash_map::DefaultHasher::new());
        // Hashing cannot fail, nor can serialising plain data structs.
        let _ = self.encode_to(&mut out);
        out.0.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use equivalent::Comparable;

    fn keys() -> Vec<NsKey> {
        // Prefixes of each other on both sides, so the field boundary matters.
        [
            ("a", "bc"),
            ("ab", "c"),
            ("a", "b"),
            ("", "x"),
            ("b", ""),
            ("default", "web"),
        ]
        .iter()
        .map(|(ns, id)| key(ns, id))
        .collect()
    }

    #[test]
    fn borrowed_keys_order_exactly_as_the_owned_keys() {
        for a in keys() {
            for b in keys() {
                assert_eq!(NsRef(&a.0, &a.1).compare(&b), a.cmp(&b), "{a:?} {b:?}");
                for (va, vb) in [(1, 1), (1, 2), (2, 1)] {
                    let owned = ((a.clone(), va), (b.clone(), vb));
                    assert_eq!(
                        VersionRef(NsRef(&a.0, &a.1), va).compare(&owned.1),
                        owned.0.cmp(&owned.1)
                    );
                }
            }
        }
    }

    #[test]
    fn borrowed_keys_find_what_owned_keys_find_and_with_entry_copies_a_key_only_when_missing() {
        let mut map: OrdMap<NsKey, u32> = keys().into_iter().zip(0u32..).collect();
        for (k, v) in keys().into_iter().zip(0u32..) {
            assert_eq!(map.get(&NsRef(&k.0, &k.1)), Some(&v));
        }
        assert_eq!(map.get(&NsRef("a", "bcd")), None);

        let mut copies = 0;
        for (ns, id) in [("default", "web"), ("default", "api"), ("default", "api")] {
            with_entry(
                &mut map,
                &NsRef(ns, id),
                || {
                    copies += 1;
                    key(ns, id)
                },
                |n| *n += 100,
            );
        }
        assert_eq!(copies, 1);
        assert_eq!(map.get(&NsRef("default", "web")), Some(&105));
        assert_eq!(map.get(&NsRef("default", "api")), Some(&200));
    }
}
