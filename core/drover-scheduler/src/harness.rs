//! A test harness in the manner of Nomad's scheduler `Harness`: an in-memory [`State`], a
//! [`Planner`] that applies plans to it (re-checking each node with
//! [`allocs_fit`](crate::fit::allocs_fit) as the server's plan applier does) and records the
//! evaluations the scheduler writes, plus builders for nodes, jobs and allocations.
//!
//! Not behind `cfg(test)`: integration tests and benchmarks of this crate and of the server use
//! it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use drover_structs::{
    ALLOC_CLIENT_RUNNING, ALLOC_DESIRED_RUN, AllocatedResources, AllocatedSharedResources,
    AllocatedTaskResources, Allocation, CsiVolume, DEFAULT_NAMESPACE, DEFAULT_REGION, DriverInfo,
    EphemeralDisk, Evaluation, JOB_TYPE_BATCH, JOB_TYPE_SERVICE, JOB_TYPE_SYSBATCH,
    JOB_TYPE_SYSTEM, Job, NODE_ELIGIBLE, NODE_STATUS_READY, NetworkResource, Node, Plan,
    PlanResult, ReschedulePolicy, Resources, Task, TaskGroup, generate_id, time::now_nanos,
};

use crate::feasible::schedulable;
use crate::fit::allocs_fit;
use crate::{NodeAllocUsage, Planner, SchedulerConfig, SchedulerError, State, process_eval};

/// An in-memory view of cluster state (cloned for each evaluation the harness runs).
#[derive(Debug, Clone)]
pub struct MemState {
    index: u64,
    nodes: BTreeMap<String, Arc<Node>>,
    jobs: BTreeMap<(String, String), Arc<Job>>,
    allocs: BTreeMap<String, Arc<Allocation>>,
    by_node: BTreeMap<String, BTreeSet<String>>,
    by_job: BTreeMap<(String, String), BTreeSet<String>>,
    /// What each node's live allocations hold, kept up to date on every write (hashed: the
    /// scheduler looks every node it visits up here).
    usage: HashMap<String, Arc<NodeAllocUsage>>,
    /// Answer `node_usage` (true by default); off, the scheduler sums each node's allocations.
    keep_usage: bool,
    /// CSI volumes by (namespace, id), stored as the scheduler reads them (plugin health
    /// already on them).
    csi_volumes: BTreeMap<(String, String), Arc<CsiVolume>>,
}

impl Default for MemState {
    fn default() -> Self {
        MemState {
            index: 0,
            nodes: BTreeMap::new(),
            jobs: BTreeMap::new(),
            allocs: BTreeMap::new(),
            by_node: BTreeMap::new(),
            by_job: BTreeMap::new(),
            usage: HashMap::new(),
            keep_usage: true,
            csi_volumes: BTreeMap::new(),
        }
    }
}

impl MemState {
    /// Whether `node_usage` answers from the per-node summaries (the default) or not, so that
    /// the scheduler reads allocations instead.
    pub fn set_node_usage_summaries(&mut self, on: bool) {
        self.keep_usage = on;
    }

    fn bump(&mut self) -> u64 {
        self.index += 1;
        self.index
    }

    pub fn alloc(&self, id: &str) -> Option<Arc<Allocation>> {
        self.allocs.get(id).cloned()
    }

    /// Writes a CSI volume as the scheduler will read it (set `schedulable` and the claims
    /// as the test needs them).
    pub fn put_csi_volume(&mut self, vol: CsiVolume) {
        self.index += 1;
        self.csi_volumes
            .insert((vol.namespace.clone(), vol.id.clone()), Arc::new(vol));
    }

    /// Every allocation, in id order.
    pub fn allocs(&self) -> Vec<Arc<Allocation>> {
        self.allocs.values().cloned().collect()
    }

    fn put_node(&mut self, node: Node) -> Arc<Node> {
        let node = Arc::new(node);
        self.nodes.insert(node.id.clone(), node.clone());
        node
    }

    /// Writes an allocation directly (as another scheduler's committed plan would).
    pub fn put_alloc(&mut self, mut alloc: Allocation) {
        self.index += 1;
        if alloc.create_index == 0 {
            alloc.create_index = self.index;
        }
        alloc.modify_index = self.index;
        self.store_alloc(alloc);
    }

    fn store_alloc(&mut self, alloc: Allocation) {
        if let Some(old) = self.allocs.get(&alloc.id) {
            if let Some(u) = self.usage.get_mut(&old.node_id) {
                Arc::make_mut(u).remove(old);
            }
            if old.node_id != alloc.node_id
                && let Some(ids) = self.by_node.get_mut(&old.node_id)
            {
                ids.remove(&alloc.id);
            }
        }
        Arc::make_mut(self.usage.entry(alloc.node_id.clone()).or_default()).add(&alloc);
        self.by_node
            .entry(alloc.node_id.clone())
            .or_default()
            .insert(alloc.id.clone());
        self.by_job
            .entry((alloc.namespace.clone(), alloc.job_id.clone()))
            .or_default()
            .insert(alloc.id.clone());
        self.allocs.insert(alloc.id.clone(), Arc::new(alloc));
    }
}

impl State for MemState {
    fn index(&self) -> u64 {
        self.index
    }

    fn job(&self, namespace: &str, id: &str) -> Option<Arc<Job>> {
        self.jobs
            .get(&(namespace.to_string(), id.to_string()))
            .cloned()
    }

    fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.values().cloned().collect()
    }

    fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.nodes.get(id).cloned()
    }

    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.by_job
            .get(&(namespace.to_string(), job_id.to_string()))
            .into_iter()
            .flatten()
            .filter_map(|id| self.allocs.get(id).cloned())
            .collect()
    }

    fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.by_node
            .get(node_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.allocs.get(id).cloned())
            .collect()
    }

    fn node_usage(&self, node_id: &str) -> Option<Arc<NodeAllocUsage>> {
        if !self.keep_usage {
            return None;
        }
        Some(self.usage.get(node_id).cloned().unwrap_or_default())
    }

    fn alloc(&self, id: &str) -> Option<Arc<Allocation>> {
        self.allocs.get(id).cloned()
    }

    fn csi_volume(&self, namespace: &str, id: &str) -> Option<Arc<CsiVolume>> {
        self.csi_volumes
            .get(&(namespace.to_string(), id.to_string()))
            .cloned()
    }

    /// Volumes the node's running (or to be run) allocations ask for, each counted once.
    fn csi_volumes_per_plugin_on_node(&self, node_id: &str) -> BTreeMap<String, u64> {
        let mut used: BTreeSet<(String, String)> = BTreeSet::new();
        for a in self.allocs_by_node(node_id) {
            if a.desired_status != ALLOC_DESIRED_RUN && a.client_status != ALLOC_CLIENT_RUNNING {
                continue;
            }
            let Some(tg) = a
                .job
                .as_ref()
                .and_then(|j| j.lookup_task_group(&a.task_group))
            else {
                continue;
            };
            for ask in crate::csi::csi_asks(tg) {
                used.insert((a.namespace.clone(), ask.volume_id(&a.name)));
            }
        }
        let mut out = BTreeMap::new();
        for key in used {
            if let Some(v) = self.csi_volumes.get(&key) {
                *out.entry(v.plugin_id.clone()).or_insert(0) += 1;
            }
        }
        out
    }
}

type PlanHook = Box<dyn FnOnce(&mut MemState, &Plan)>;

/// Runs the scheduler against a [`MemState`] and applies its plans to it.
#[derive(Default)]
pub struct Harness {
    pub state: MemState,
    pub config: SchedulerConfig,
    /// Every plan submitted, as submitted.
    pub plans: Vec<Plan>,
    /// What was committed of each plan.
    pub results: Vec<PlanResult>,
    /// Evaluations the scheduler created (blocked, follow-up).
    pub created_evals: Vec<Evaluation>,
    /// Evaluation updates the scheduler wrote, in order.
    pub updated_evals: Vec<Evaluation>,
    /// Evaluations the harness's plan applier created for the jobs of preempted allocations,
    /// as the server's applier must.
    pub preemption_evals: Vec<Evaluation>,
    /// Run against the state just before the next plans are checked, one per plan: stands in
    /// for another scheduler's writes landing first.
    before_plan: VecDeque<PlanHook>,
    /// Refuse every plan outright (each answered with a refresh).
    pub refuse_all_plans: bool,
}

impl Harness {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn upsert_node(&mut self, mut node: Node) -> Arc<Node> {
        let index = self.state.bump();
        if node.create_index == 0 {
            node.create_index = index;
        }
        node.modify_index = index;
        self.state.put_node(node)
    }

    /// Registers a job version: indexes set, version bumped when the job existed.
    pub fn upsert_job(&mut self, mut job: Job) -> Arc<Job> {
        let index = self.state.bump();
        if job.namespace.is_empty() {
            job.namespace = DEFAULT_NAMESPACE.to_string();
        }
        let key = (job.namespace.clone(), job.id.clone());
        match self.state.jobs.get(&key) {
            Some(old) => {
                job.version = old.version + 1;
                job.create_index = old.create_index;
            }
            None => job.create_index = index,
        }
        job.modify_index = index;
        job.job_modify_index = index;
        let job = Arc::new(job);
        self.state.jobs.insert(key, job.clone());
        job
    }

    pub fn upsert_alloc(&mut self, mut alloc: Allocation) {
        let index = self.state.bump();
        if alloc.create_index == 0 {
            alloc.create_index = index;
        }
        alloc.modify_index = index;
        self.state.store_alloc(alloc);
    }

    /// Runs `f` on the state right before the next plan is checked (it sees the plan).
    pub fn before_next_plan(&mut self, f: impl FnOnce(&mut MemState, &Plan) + 'static) {
        self.before_plan.push_back(Box::new(f));
    }

    /// Schedules `eval` against a snapshot of the current state.
    pub fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError> {
        let snapshot = self.state.clone();
        let config = self.config;
        process_eval(&snapshot, self, eval, &config)
    }

    /// The job's allocations that are not terminal, in name order.
    pub fn live_allocs(&self, job: &Job) -> Vec<Arc<Allocation>> {
        let mut v: Vec<Arc<Allocation>> = self
            .state
            .allocs_by_job(&job.namespace, &job.id)
            .into_iter()
            .filter(|a| !a.terminal())
            .collect();
        v.sort_by(|a, b| (a.index(), &a.id).cmp(&(b.index(), &b.id)));
        v
    }

    /// The last evaluation update written.
    pub fn last_eval(&self) -> Option<&Evaluation> {
        self.updated_evals.last()
    }

    /// Allocations of the last plan that were placed (or updated), over all nodes.
    pub fn last_plan_allocs(&self) -> Vec<&Allocation> {
        self.plans
            .last()
            .map(|p| p.node_allocation.values().flatten().collect())
            .unwrap_or_default()
    }

    /// Allocations the last plan stopped, over all nodes.
    pub fn last_plan_stops(&self) -> Vec<&Allocation> {
        self.plans
            .last()
            .map(|p| p.node_update.values().flatten().collect())
            .unwrap_or_default()
    }

    /// Whether the node can take the plan's allocations on top of what it runs, as the
    /// server's plan applier decides.
    fn node_fits(
        &self,
        node_id: &str,
        stops: &[Allocation],
        preempted: &[Allocation],
        places: &[Allocation],
    ) -> bool {
        if places.is_empty() {
            return true;
        }
        let Some(node) = self.state.nodes.get(node_id) else {
            return false;
        };
        // Updates to allocations already on the node may go to a node no longer schedulable.
        let only_updates = places.iter().all(|p| {
            self.state
                .allocs
                .get(&p.id)
                .is_some_and(|a| a.node_id == node_id)
        });
        if !schedulable(node) && !only_updates {
            return false;
        }
        let existing = self.state.allocs_by_node(node_id);
        let replaced: BTreeSet<&str> = stops
            .iter()
            .chain(preempted)
            .chain(places)
            .map(|a| a.id.as_str())
            .collect();
        let mut proposed: Vec<&Allocation> = existing
            .iter()
            .filter(|a| !a.terminal() && !replaced.contains(a.id.as_str()))
            .map(|a| a.as_ref())
            .collect();
        proposed.extend(places);
        allocs_fit(node, &proposed).is_ok()
    }

    fn apply(&mut self, plan: &Plan, result: &PlanResult) -> u64 {
        let index = self.state.bump();
        let now = now_nanos();
        let mut preempted_jobs: BTreeSet<(String, String)> = BTreeSet::new();
        for p in result.node_preemptions.values().flatten() {
            let Some(old) = self.state.allocs.get(&p.id) else {
                continue;
            };
            let mut a = (**old).clone();
            a.desired_status = p.desired_status.clone();
            a.desired_description = p.desired_description.clone();
            a.preempted_by_allocation = p.preempted_by_allocation.clone();
            a.modify_index = index;
            a.modify_time = now;
            preempted_jobs.insert((a.namespace.clone(), a.job_id.clone()));
            self.state.store_alloc(a);
        }
        // As Nomad's plan applier does: the preempted jobs are evaluated again.
        for (ns, job_id) in preempted_jobs {
            if let Some(job) = self.state.job(&ns, &job_id) {
                self.preemption_evals
                    .push(Evaluation::for_job(&job, TRIGGER_PREEMPTION));
            }
        }
        for stop in result.node_update.values().flatten() {
            let Some(old) = self.state.allocs.get(&stop.id) else {
                continue;
            };
            let mut a = (**old).clone();
            a.desired_status = stop.desired_status.clone();
            a.desired_description = stop.desired_description.clone();
            // As the state store does: the lost transition is kept with its time.
            if stop.client_status == drover_structs::ALLOC_CLIENT_LOST
                && a.client_status != stop.client_status
            {
                a.append_client_state(&stop.client_status, now);
            }
            a.client_status = stop.client_status.clone();
            if !stop.followup_eval_id.is_empty() {
                a.followup_eval_id = stop.followup_eval_id.clone();
            }
            a.modify_index = index;
            a.modify_time = now;
            self.state.store_alloc(a);
        }
        for placed in result.node_allocation.values().flatten() {
            let mut a = placed.clone();
            if a.job.is_none() {
                a.job = plan.job.clone();
            }
            a.create_index = self
                .state
                .allocs
                .get(&a.id)
                .map(|old| old.create_index)
                .unwrap_or(index);
            a.modify_index = index;
            a.alloc_modify_index = index;
            if !a.previous_allocation.is_empty()
                && let Some(prev) = self.state.allocs.get(&a.previous_allocation)
            {
                let mut prev = (**prev).clone();
                prev.next_allocation = a.id.clone();
                prev.modify_index = index;
                self.state.store_alloc(prev);
            }
            self.state.store_alloc(a);
        }
        index
    }
}

impl Planner for Harness {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Box<dyn State>>), SchedulerError> {
        self.plans.push(plan.clone());
        if let Some(hook) = self.before_plan.pop_front() {
            hook(&mut self.state, &plan);
        }
        if self.refuse_all_plans {
            let result = PlanResult {
                refresh_index: self.state.index.max(1),
                ..Default::default()
            };
            self.results.push(result.clone());
            return Ok((result, Some(Box::new(self.state.clone()))));
        }
        let mut result = PlanResult::default();
        let mut refused = false;
        let node_ids: BTreeSet<&String> = plan
            .node_update
            .keys()
            .chain(plan.node_allocation.keys())
            .chain(plan.node_preemptions.keys())
            .collect();
        let slice = |m: &'_ BTreeMap<String, Vec<Allocation>>, id: &str| -> Vec<Allocation> {
            m.get(id).cloned().unwrap_or_default()
        };
        for node_id in node_ids {
            let stops = slice(&plan.node_update, node_id);
            let preempted = slice(&plan.node_preemptions, node_id);
            let places = slice(&plan.node_allocation, node_id);
            // Stops always apply: freeing resources cannot overcommit a node.
            if !stops.is_empty() {
                result.node_update.insert(node_id.clone(), stops.clone());
            }
            // Preemptions only go with the placements they make room for.
            if self.node_fits(node_id, &stops, &preempted, &places) {
                if !places.is_empty() {
                    result.node_allocation.insert(node_id.clone(), places);
                }
                if !preempted.is_empty() {
                    result.node_preemptions.insert(node_id.clone(), preempted);
                }
            } else {
                refused = true;
            }
        }
        if refused && plan.all_at_once {
            result.node_update.clear();
            result.node_allocation.clear();
            result.node_preemptions.clear();
        }
        if !result.node_update.is_empty()
            || !result.node_allocation.is_empty()
            || !result.node_preemptions.is_empty()
        {
            result.alloc_index = self.apply(&plan, &result);
        }
        if refused {
            result.refresh_index = self.state.index.max(1);
        }
        self.results.push(result.clone());
        let refreshed: Option<Box<dyn State>> = if refused {
            Some(Box::new(self.state.clone()))
        } else {
            None
        };
        Ok((result, refreshed))
    }

    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.updated_evals.push(eval);
        Ok(())
    }

    fn create_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.created_evals.push(eval);
        Ok(())
    }
}

/// Nomad's trigger for evaluations of jobs whose allocations were preempted.
pub const TRIGGER_PREEMPTION: &str = "preemption";

/// Builds nodes like Nomad's `mock.Node()`: 4000 MHz, 8192 MB, 100 GB disk, reserving
/// 100 MHz / 256 MB / 4 GB and port 22, a host network at 192.168.0.100, the `exec`,
/// `raw_exec` and `mock_driver` drivers, in `dc1`.
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    node: Node,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeBuilder {
    pub fn new() -> Self {
        let mut n = Node {
            id: generate_id(),
            secret_id: generate_id(),
            datacenter: "dc1".into(),
            name: "foobar".into(),
            node_class: "linux-medium-pci".into(),
            status: NODE_STATUS_READY.into(),
            scheduling_eligibility: NODE_ELIGIBLE.into(),
            ..Default::default()
        };
        for (k, v) in [
            ("kernel.name", "linux"),
            ("arch", "x86"),
            ("nomad.version", "1.1.2"),
            ("driver.exec", "1"),
            ("driver.mock_driver", "1"),
            ("driver.raw_exec", "1"),
        ] {
            n.attributes.insert(k.into(), v.into());
        }
        for d in ["exec", "raw_exec", "mock_driver"] {
            n.drivers.insert(d.into(), healthy_driver());
        }
        n.meta.insert("pci-dss".into(), "true".into());
        n.node_resources.cpu.cpu_shares = 4000;
        n.node_resources.memory.memory_mb = 8192;
        n.node_resources.disk.disk_mb = 100 * 1024;
        n.node_resources.networks = Some(vec![NetworkResource {
            mode: "host".into(),
            device: "eth0".into(),
            cidr: "192.168.0.100/32".into(),
            ip: "192.168.0.100".into(),
            mbits: 1000,
            ..Default::default()
        }]);
        n.reserved_resources.cpu.cpu_shares = 100;
        n.reserved_resources.memory.memory_mb = 256;
        n.reserved_resources.disk.disk_mb = 4 * 1024;
        n.reserved_resources.networks.reserved_host_ports = "22".into();
        NodeBuilder { node: n }
    }

    pub fn id(mut self, id: &str) -> Self {
        self.node.id = id.into();
        self
    }

    pub fn name(mut self, name: &str) -> Self {
        self.node.name = name.into();
        self
    }

    pub fn datacenter(mut self, dc: &str) -> Self {
        self.node.datacenter = dc.into();
        self
    }

    pub fn class(mut self, class: &str) -> Self {
        self.node.node_class = class.into();
        self
    }

    /// Total cpu (MHz) and memory (MB), with nothing reserved.
    pub fn resources(mut self, cpu: i64, memory_mb: i64) -> Self {
        self.node.node_resources.cpu.cpu_shares = cpu;
        self.node.node_resources.memory.memory_mb = memory_mb;
        self.node.reserved_resources.cpu.cpu_shares = 0;
        self.node.reserved_resources.memory.memory_mb = 0;
        self.node.reserved_resources.disk.disk_mb = 0;
        self
    }

    pub fn reserved(mut self, cpu: i64, memory_mb: i64) -> Self {
        self.node.reserved_resources.cpu.cpu_shares = cpu;
        self.node.reserved_resources.memory.memory_mb = memory_mb;
        self
    }

    pub fn reserved_ports(mut self, spec: &str) -> Self {
        self.node.reserved_resources.networks.reserved_host_ports = spec.into();
        self
    }

    pub fn attr(mut self, key: &str, value: &str) -> Self {
        self.node.attributes.insert(key.into(), value.into());
        self
    }

    pub fn meta(mut self, key: &str, value: &str) -> Self {
        self.node.meta.insert(key.into(), value.into());
        self
    }

    /// Keeps only the named drivers (healthy), dropping their legacy attributes too.
    pub fn only_drivers(mut self, drivers: &[&str]) -> Self {
        self.node.drivers.clear();
        self.node
            .attributes
            .retain(|k, _| !k.starts_with("driver."));
        for d in drivers {
            self.node.drivers.insert((*d).into(), healthy_driver());
        }
        self
    }

    pub fn status(mut self, status: &str) -> Self {
        self.node.status = status.into();
        self
    }

    /// Declares a client `host_volume` (its path is under `/srv`).
    pub fn host_volume(mut self, name: &str, read_only: bool) -> Self {
        let hv = drover_structs::ClientHostVolumeConfig {
            name: name.into(),
            path: format!("/srv/{name}"),
            read_only,
        };
        self.node
            .host_volumes
            .get_or_insert_with(BTreeMap::new)
            .insert(name.into(), hv);
        self
    }

    /// The node, with its computed class.
    pub fn build(mut self) -> Node {
        self.node.compute_class();
        self.node
    }
}

fn healthy_driver() -> DriverInfo {
    DriverInfo {
        detected: true,
        healthy: true,
        health_description: "healthy".into(),
        ..Default::default()
    }
}

/// A mock node (see [`NodeBuilder`]).
pub fn mock_node() -> Node {
    NodeBuilder::new().build()
}

/// A service job like Nomad's `mock.Job()`: group `web` of 10, task `web` on `exec` asking
/// 500 MHz and 256 MB, 150 MB of ephemeral disk, Nomad's default service reschedule policy.
pub fn mock_job() -> Job {
    let id = format!("mock-service-{}", &generate_id()[..8]);
    Job {
        region: DEFAULT_REGION.into(),
        namespace: DEFAULT_NAMESPACE.into(),
        name: id.clone(),
        id,
        job_type: JOB_TYPE_SERVICE.into(),
        priority: 50,
        datacenters: vec!["dc1".into()],
        constraints: Some(vec![drover_structs::Constraint {
            l_target: "${attr.kernel.name}".into(),
            r_target: "linux".into(),
            operand: "=".into(),
        }]),
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count: 10,
            ephemeral_disk: Some(EphemeralDisk {
                size_mb: 150,
                ..Default::default()
            }),
            reschedule_policy: Some(ReschedulePolicy {
                attempts: 0,
                interval: 0,
                delay: 30_000_000_000,
                delay_function: "exponential".into(),
                max_delay: 3_600_000_000_000,
                unlimited: true,
            }),
            tasks: vec![Task {
                name: "web".into(),
                driver: "exec".into(),
                config: Some(
                    [("command".to_string(), serde_json::json!("/bin/date"))]
                        .into_iter()
                        .collect(),
                ),
                resources: Resources {
                    cpu: 500,
                    memory_mb: 256,
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }],
        status: "pending".into(),
        ..Default::default()
    }
}

/// A batch job like Nomad's `mock.BatchJob()`: group `web` of 10 on `mock_driver`, Nomad's
/// default batch reschedule policy (one attempt a day, 5 s delay).
pub fn mock_batch_job() -> Job {
    let mut job = mock_job();
    job.id = format!("mock-batch-{}", &generate_id()[..8]);
    job.name = job.id.clone();
    job.job_type = JOB_TYPE_BATCH.into();
    let tg = &mut job.task_groups[0];
    tg.reschedule_policy = Some(ReschedulePolicy {
        attempts: 1,
        interval: 24 * 3_600_000_000_000,
        delay: 5_000_000_000,
        delay_function: "constant".into(),
        max_delay: 0,
        unlimited: false,
    });
    tg.tasks[0].driver = "mock_driver".into();
    job
}

/// A system job like Nomad's `mock.SystemJob()`: group `web` (count 1) with task `web` on
/// `exec` asking 500 MHz and 256 MB, priority 100, constrained to Linux, no update stanza.
pub fn mock_system_job() -> Job {
    let mut job = mock_job();
    job.id = format!("mock-system-{}", &generate_id()[..8]);
    job.name = job.id.clone();
    job.job_type = JOB_TYPE_SYSTEM.into();
    job.priority = 100;
    let tg = &mut job.task_groups[0];
    tg.count = 1;
    tg.reschedule_policy = None;
    job
}

/// A sysbatch job like Nomad's `mock.SystemBatchJob()`: group `pinger` (count 1) with task
/// `ping-example` on `exec`, priority 10.
pub fn mock_sysbatch_job() -> Job {
    let mut job = mock_system_job();
    job.id = format!("mock-sysbatch-{}", &generate_id()[..8]);
    job.name = job.id.clone();
    job.job_type = JOB_TYPE_SYSBATCH.into();
    job.priority = 10;
    let tg = &mut job.task_groups[0];
    tg.name = "pinger".into();
    tg.tasks[0].name = "ping-example".into();
    job
}

/// A running allocation `job.group[index]` of the job's first group on `node`, with the
/// resources that group asks for.
pub fn mock_alloc(job: &Arc<Job>, node: &Node, index: u64) -> Allocation {
    let tg = &job.task_groups[0];
    let mut allocated = AllocatedResources {
        shared: AllocatedSharedResources {
            disk_mb: tg.ephemeral_disk.as_ref().map(|d| d.size_mb).unwrap_or(0),
            ..Default::default()
        },
        ..Default::default()
    };
    for t in &tg.tasks {
        let mut tr = AllocatedTaskResources::default();
        tr.cpu.cpu_shares = t.resources.cpu;
        tr.memory.memory_mb = t.resources.memory_mb;
        allocated.tasks.insert(t.name.clone(), tr);
        allocated.task_lifecycles.insert(t.name.clone(), None);
    }
    let now = now_nanos();
    Allocation {
        id: generate_id(),
        namespace: job.namespace.clone(),
        eval_id: generate_id(),
        name: crate::util::alloc_name(&job.id, &tg.name, index),
        node_id: node.id.clone(),
        node_name: node.name.clone(),
        job_id: job.id.clone(),
        job: Some(job.clone()),
        task_group: tg.name.clone(),
        allocated_resources: Some(allocated),
        desired_status: ALLOC_DESIRED_RUN.into(),
        client_status: ALLOC_CLIENT_RUNNING.into(),
        create_time: now,
        modify_time: now,
        ..Default::default()
    }
}

/// A pending `job-register` evaluation for the job.
pub fn register_eval(job: &Job) -> Evaluation {
    Evaluation::for_job(job, drover_structs::TRIGGER_JOB_REGISTER)
}
