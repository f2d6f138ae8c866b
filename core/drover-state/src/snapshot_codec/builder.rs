//! The tables rebuilt from a snapshot's rows, with every index the store keeps beside them:
//! what both encodings decode into, row by row.

use std::sync::Arc;

use drover_structs::{
    AclPolicy, AclToken, Allocation, CsiPlugin, CsiVolume, Deployment, Evaluation, Job,
    JobSubmission, JobSummary, Namespace, Node, PeriodicLaunch, ScalingEvents, Variable,
    mesh::Intention,
};

use super::SnapshotError;
use imbl::OrdMap;

use crate::tables::{AllocKey, NsKey, NsRef, Table, Tables, VersionRef, with_entry};

/// The job versions table, as allocations are linked against it.
pub(super) type JobVersions = OrdMap<(NsKey, u64), Arc<Job>>;

/// An allocation as a snapshot stores it: without its job, and the version of the job it
/// runs (linked again from the job versions, which come before it).
pub(super) struct DecodedAlloc {
    pub alloc: Arc<Allocation>,
    pub job_version: Option<u64>,
}

/// An allocation linked to its job again and keyed, ready for its tables.
pub(super) struct LinkedAlloc {
    key: AllocKey,
    alloc: Arc<Allocation>,
}

impl DecodedAlloc {
    /// Links the job version the allocation ran and drops what the store derives from it;
    /// needs only the job versions, so threads decoding allocations do it too.
    pub fn link(self, job_versions: &JobVersions) -> LinkedAlloc {
        let DecodedAlloc {
            alloc: mut shared,
            job_version,
        } = self;
        // Just decoded, so not shared: `make_mut` changes it in place.
        let alloc = Arc::make_mut(&mut shared);
        alloc.job = job_version.and_then(|v| {
            job_versions
                .get(&VersionRef(NsRef(&alloc.namespace, &alloc.job_id), v))
                .cloned()
        });
        alloc.drop_derivable_legacy_resources();
        LinkedAlloc {
            key: AllocKey::from(alloc.id.as_str()),
            alloc: shared,
        }
    }
}

#[derive(Default)]
pub(super) struct TablesBuilder {
    t: Tables,
}

impl TablesBuilder {
    pub fn latest_index(&mut self, index: u64) {
        self.t.latest_index = index;
    }

    /// A table's index by its name; names this server does not know are left out.
    pub fn table_index(&mut self, name: &str, index: u64) {
        if let Some(table) = Table::ALL.iter().find(|tb| tb.name() == name) {
            self.t.indexes.insert(*table, index);
        }
    }

    pub fn job_version(&mut self, j: Job) {
        let k = (j.namespace.clone(), j.id.clone());
        self.t.job_versions.insert((k, j.version), Arc::new(j));
    }

    /// The current version of a job, which must be among the job versions already read.
    pub fn job(&mut self, ns: String, id: String, version: u64) -> Result<(), SnapshotError> {
        let k = (ns, id);
        let Some(j) = self.t.job_versions.get(&(k.clone(), version)).cloned() else {
            return Err(SnapshotError::Malformed(format!(
                "job {}/{} version {version} missing from job versions",
                k.0, k.1
            )));
        };
        self.t.jobs.insert(k, j);
        Ok(())
    }

    pub fn summary(&mut self, s: JobSummary) {
        self.t
            .job_summaries
            .insert((s.namespace.clone(), s.job_id.clone()), Arc::new(s));
    }

    pub fn eval(&mut self, e: Evaluation) {
        self.t
            .evals_by_job
            .entry((e.namespace.clone(), e.job_id.clone()))
            .or_default()
            .insert(e.id.clone());
        self.t.evals.insert(e.id.clone(), Arc::new(e));
    }

    /// The job versions read so far (all of them once allocations come).
    pub fn job_versions(&self) -> JobVersions {
        self.t.job_versions.clone()
    }

    pub fn alloc(&mut self, decoded: DecodedAlloc) {
        let linked = decoded.link(&self.t.job_versions);
        self.linked_alloc(linked);
    }

    pub fn linked_alloc(&mut self, linked: LinkedAlloc) {
        let LinkedAlloc { key, alloc } = linked;
        let t = &mut self.t;
        let a = &*alloc;
        crate::store::index_alloc(t, &key, a);
        if !a.terminal() {
            with_entry(
                &mut t.node_usage,
                a.node_id.as_str(),
                || a.node_id.clone(),
                |u| Arc::make_mut(u).add(a),
            );
        }
        t.allocs.insert(key, alloc);
    }

    pub fn node(&mut self, n: Node) {
        self.t.nodes.insert(n.id.clone(), Arc::new(n));
    }

    pub fn scheduler_config(&mut self, c: Option<drover_structs::SchedulerConfiguration>) {
        self.t.scheduler_config = c.map(Arc::new);
    }

    pub fn periodic_launch(&mut self, l: PeriodicLaunch) {
        self.t
            .periodic_launches
            .insert((l.namespace.clone(), l.id.clone()), Arc::new(l));
    }

    pub fn csi_volume(&mut self, v: CsiVolume) {
        let k = (v.namespace.clone(), v.id.clone());
        self.t
            .csi_volumes_by_plugin
            .entry(v.plugin_id.clone())
            .or_default()
            .insert(k.clone());
        self.t.csi_volumes.insert(k, Arc::new(v));
    }

    pub fn csi_plugin(&mut self, p: CsiPlugin) {
        self.t.csi_plugins.insert(p.id.clone(), Arc::new(p));
    }

    pub fn deployment(&mut self, d: Deployment) {
        self.t
            .deployments_by_job
            .entry((d.namespace.clone(), d.job_id.clone()))
            .or_default()
            .insert(d.id.clone());
        self.t.deployments.insert(d.id.clone(), Arc::new(d));
    }

    pub fn scaling_events(&mut self, ns: String, id: String, events: ScalingEvents) {
        self.t.scaling_events.insert((ns, id), Arc::new(events));
    }

    pub fn namespace(&mut self, n: Namespace) {
        self.t.namespaces.insert(n.name.clone(), Arc::new(n));
    }

    pub fn acl_policy(&mut self, p: AclPolicy) {
        self.t.acl_policies.insert(p.name.clone(), Arc::new(p));
    }

    pub fn acl_token(&mut self, tok: AclToken) {
        self.t
            .acl_tokens_by_secret
            .insert(tok.secret_id.clone(), tok.accessor_id.clone());
        self.t
            .acl_tokens
            .insert(tok.accessor_id.clone(), Arc::new(tok));
    }

    pub fn acl_bootstrap_index(&mut self, index: u64) {
        self.t.acl_bootstrap_index = index;
    }

    pub fn job_submission(&mut self, s: JobSubmission) {
        let k = (s.namespace.clone(), s.job_id.clone());
        self.t.job_submissions.insert((k, s.version), Arc::new(s));
    }

    pub fn variable(&mut self, v: Variable) {
        self.t
            .variables
            .insert((v.namespace.clone(), v.path.clone()), Arc::new(v));
    }

    pub fn mesh_ca(&mut self, ca: Option<drover_structs::mesh::MeshCa>) {
        self.t.mesh_ca = ca.map(Arc::new);
    }

    pub fn intention(&mut self, i: Intention) {
        let k = (
            i.namespace.clone(),
            i.source_name.clone(),
            i.destination_name.clone(),
        );
        self.t.intentions.insert(k, Arc::new(i));
    }

    pub fn finish(self) -> Tables {
        self.t
    }
}
