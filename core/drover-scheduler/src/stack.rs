//! Choosing a node for one placement (Nomad's `GenericStack.Select`): nodes are visited in a
//! shuffled order that carries on where the previous placement stopped; each is checked for
//! feasibility (memoised per computed class), distinct hosts and properties, then for fit, and
//! scored. Only the first few feasible nodes are scored (log2 of the node count for services,
//! 2 for batch) and the best of those wins.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use drover_structs::{
    AllocMetric, AllocatedPortMapping, AllocatedTaskResources, ComparableResources, Job,
    NetworkResource, Node, Opaque, TaskGroup,
};

use crate::SchedulerConfig;
use crate::constraints::resolve_target;
use crate::context::EvalContext;
use crate::feasible::{
    ClassVerdict, FILTER_CLASS_INELIGIBLE, FILTER_MISSING_DRIVERS, FILTER_MISSING_NETWORK,
    GroupRequirements, has_drivers, has_network_mode,
};
use crate::network::PortPicker;
use crate::rank::{
    SCORE_BINPACK, SCORE_JOB_ANTI_AFFINITY, SCORE_NODE_AFFINITY, SCORE_RESCHEDULE_PENALTY,
    TopScores, anti_affinity, fit_score,
};

/// Options scored below or at this are passed over while better ones may follow.
const SKIP_SCORE_THRESHOLD: f64 = 0.0;
/// At most this many low-scoring options are passed over.
const MAX_SKIP: usize = 3;

#[derive(Default)]
pub(crate) struct SelectOptions {
    /// Nodes a rescheduled allocation already failed on.
    pub penalty_nodes: HashSet<String>,
    /// A node to try first (sticky ephemeral disks).
    pub preferred: Option<Arc<Node>>,
}

/// The chosen node and the resources the placement gets there.
pub(crate) struct Selected {
    pub node: Arc<Node>,
    pub tasks: BTreeMap<String, AllocatedTaskResources>,
    pub task_lifecycles: BTreeMap<String, Opaque>,
    pub shared_networks: Option<Vec<NetworkResource>>,
    pub shared_ports: Option<Vec<AllocatedPortMapping>>,
    pub score: f64,
}

pub(crate) struct Stack {
    nodes: Vec<Arc<Node>>,
    /// Where the next placement starts visiting nodes.
    offset: usize,
    limit: usize,
    batch: bool,
}

impl Stack {
    pub(crate) fn new(batch: bool) -> Self {
        Stack {
            nodes: Vec::new(),
            offset: 0,
            limit: 2,
            batch,
        }
    }

    /// Sets the candidate nodes (already shuffled) and the candidate limit for them.
    pub(crate) fn set_nodes(&mut self, nodes: Vec<Arc<Node>>) {
        let n = nodes.len();
        self.limit = 2;
        if !self.batch && n > 0 {
            let log = (n as f64).log2().ceil() as usize;
            self.limit = self.limit.max(log);
        }
        self.nodes = nodes;
        self.offset = 0;
    }

    pub(crate) fn select(
        &mut self,
        ctx: &mut EvalContext<'_>,
        job: &Job,
        tg: &TaskGroup,
        options: &SelectOptions,
        config: &SchedulerConfig,
    ) -> (Option<Selected>, AllocMetric) {
        if let Some(preferred) = &options.preferred {
            let saved = std::mem::replace(&mut self.nodes, vec![preferred.clone()]);
            let saved_offset = std::mem::replace(&mut self.offset, 0);
            let found = self.select_inner(ctx, job, tg, &options.penalty_nodes, config);
            self.nodes = saved;
            self.offset = saved_offset;
            if found.0.is_some() {
                return found;
            }
        }
        self.select_inner(ctx, job, tg, &options.penalty_nodes, config)
    }

    fn select_inner(
        &mut self,
        ctx: &mut EvalContext<'_>,
        job: &Job,
        tg: &TaskGroup,
        penalty_nodes: &HashSet<String>,
        config: &SchedulerConfig,
    ) -> (Option<Selected>, AllocMetric) {
        let start = Instant::now();
        let req = GroupRequirements::new(job, tg);
        // Affinities can only be honoured when every node is scored.
        let limit = if req.affinities.is_empty() {
            self.limit
        } else {
            usize::MAX
        };
        let properties = PropertyUse::build(ctx, job, tg, &req);
        let mut pass = Pass {
            nodes: &self.nodes,
            offset: &mut self.offset,
            seen: 0,
            ctx,
            tg,
            req: &req,
            properties,
            penalty_nodes,
            config,
            metric: AllocMetric::default(),
            top: TopScores::default(),
        };

        // Nomad's LimitIterator feeding a MaxScoreIterator.
        let mut best: Option<Selected> = None;
        let mut skipped = Skipped::default();
        let mut returned = 0;
        while returned < limit {
            let mut option = pass.next_ranked().or_else(|| skipped.take_next());
            if option.is_none() {
                break;
            }
            while skipped.len() < MAX_SKIP {
                match option.take() {
                    Some(o) if o.score <= SKIP_SCORE_THRESHOLD => {
                        skipped.push(o);
                        option = pass.next_ranked();
                    }
                    other => {
                        option = other;
                        break;
                    }
                }
            }
            returned += 1;
            let Some(option) =
                option.or_else(|| pass.next_ranked().or_else(|| skipped.take_next()))
            else {
                break;
            };
            if best.as_ref().is_none_or(|b| option.score > b.score) {
                best = Some(option);
            }
        }

        let mut metric = pass.metric;
        metric.score_meta_data = pass.top.finish();
        metric.allocation_time = start.elapsed().as_nanos() as i64;
        (best, metric)
    }
}

/// Low scorers passed over in the hope of something better, handed out in order once the
/// nodes run out.
#[derive(Default)]
struct Skipped {
    items: Vec<Option<Selected>>,
    next: usize,
}

impl Skipped {
    fn len(&self) -> usize {
        self.items.len()
    }

    fn push(&mut self, s: Selected) {
        self.items.push(Some(s));
    }

    fn take_next(&mut self) -> Option<Selected> {
        let slot = self.items.get_mut(self.next)?;
        self.next += 1;
        slot.take()
    }
}

/// One placement's walk over the nodes.
struct Pass<'p, 'c, 's> {
    nodes: &'p [Arc<Node>],
    offset: &'p mut usize,
    seen: usize,
    ctx: &'c mut EvalContext<'s>,
    tg: &'p TaskGroup,
    req: &'p GroupRequirements<'p>,
    properties: Option<PropertyUse>,
    penalty_nodes: &'p HashSet<String>,
    config: &'p SchedulerConfig,
    metric: AllocMetric,
    top: TopScores,
}

impl Pass<'_, '_, '_> {
    /// The next node in visiting order; every node is visited at most once per placement.
    fn source_next(&mut self) -> Option<Arc<Node>> {
        let n = self.nodes.len();
        if self.seen >= n {
            return None;
        }
        let node = self.nodes[*self.offset % n].clone();
        *self.offset = (*self.offset + 1) % n;
        self.seen += 1;
        self.metric.nodes_evaluated += 1;
        Some(node)
    }

    fn filter(&mut self, node: &Node, reason: &str) {
        self.metric.filter_node(&node.node_class, Some(reason));
    }

    fn next_ranked(&mut self) -> Option<Selected> {
        loop {
            let node = self.source_next()?;
            if !self.feasible(&node) || !self.distinct(&node) {
                continue;
            }
            if let Some(ranked) = self.fit_and_score(node) {
                return Some(ranked);
            }
        }
    }

    /// Nomad's `FeasibilityWrapper`: job checks, then group checks, each memoised per computed
    /// class unless its constraints escape the class.
    fn feasible(&mut self, node: &Node) -> bool {
        let class = node.computed_class.as_str();
        let tg_name = self.tg.name.as_str();
        let job_verdict = self.ctx.eligibility.job_status(class);
        match job_verdict {
            ClassVerdict::Ineligible => {
                self.filter(node, FILTER_CLASS_INELIGIBLE);
                return false;
            }
            ClassVerdict::Eligible => {}
            ClassVerdict::Unknown | ClassVerdict::Escaped => {
                let failed = self
                    .req
                    .job_constraints
                    .iter()
                    .find(|c| !self.ctx.matcher.meets(c, node))
                    .map(|c| c.to_string());
                let memo = job_verdict == ClassVerdict::Unknown;
                if let Some(reason) = failed {
                    self.filter(node, &reason);
                    if memo {
                        self.ctx.eligibility.set_job_eligibility(false, class);
                    }
                    return false;
                }
                if memo {
                    self.ctx.eligibility.set_job_eligibility(true, class);
                }
            }
        }
        let group_verdict = self.ctx.eligibility.group_status(tg_name, class);
        match group_verdict {
            ClassVerdict::Ineligible => {
                self.filter(node, FILTER_CLASS_INELIGIBLE);
                false
            }
            ClassVerdict::Eligible => true,
            ClassVerdict::Unknown | ClassVerdict::Escaped => {
                let failed = self.group_check(node);
                let memo = group_verdict == ClassVerdict::Unknown;
                if memo {
                    self.ctx
                        .eligibility
                        .set_group_eligibility(failed.is_none(), tg_name, class);
                }
                match failed {
                    Some(reason) => {
                        self.filter(node, &reason);
                        false
                    }
                    None => true,
                }
            }
        }
    }

    /// Drivers, group and task constraints, network mode: the first failure's reason.
    fn group_check(&mut self, node: &Node) -> Option<String> {
        if !has_drivers(node, &self.req.drivers) {
            return Some(FILTER_MISSING_DRIVERS.to_string());
        }
        if let Some(c) = self
            .req
            .constraints
            .iter()
            .find(|c| !self.ctx.matcher.meets(c, node))
        {
            return Some(c.to_string());
        }
        if let Some(mode) = self.req.network_mode
            && !has_network_mode(node, mode)
        {
            return Some(FILTER_MISSING_NETWORK.to_string());
        }
        None
    }

    /// `distinct_hosts` and `distinct_property`, which depend on what is placed where.
    fn distinct(&mut self, node: &Node) -> bool {
        if self.req.job_distinct_hosts || self.req.group_distinct_hosts {
            let usage = self.ctx.usage(node);
            let collides = (self.req.job_distinct_hosts && usage.job_allocs > 0)
                || usage.group_allocs(&self.tg.name) > 0;
            if collides {
                self.filter(node, crate::constraints::DISTINCT_HOSTS);
                return false;
            }
        }
        if let Some(props) = &self.properties
            && let Some(reason) = props.violation(node)
        {
            self.filter(node, &reason);
            return false;
        }
        true
    }

    /// Nomad's `BinPackIterator` and the scoring iterators after it.
    fn fit_and_score(&mut self, node: Arc<Node>) -> Option<Selected> {
        let tg = self.tg;
        let (min, max) = (
            i64::from(self.config.min_dynamic_port),
            i64::from(self.config.max_dynamic_port),
        );
        let (usage, rng) = self.ctx.usage_and_rng(&node);
        if usage.collisions > 0 {
            self.metric
                .exhausted_node(&node.node_class, "network: port collision");
            return None;
        }
        let mut picker = PortPicker {
            node: &node,
            usage,
            min,
            max,
            taken: Vec::new(),
        };
        let mut shared_networks = None;
        let mut shared_ports = None;
        if let Some(ask) = tg.networks.iter().flatten().next() {
            match picker.assign_group(ask, rng) {
                Ok((ports, net)) => {
                    shared_ports = Some(ports);
                    shared_networks = Some(vec![net]);
                }
                Err(e) => {
                    self.metric
                        .exhausted_node(&node.node_class, &format!("network: {e}"));
                    return None;
                }
            }
        }
        let mut ask = ComparableResources {
            disk_mb: tg.ephemeral_disk.as_ref().map(|d| d.size_mb).unwrap_or(0),
            ..Default::default()
        };
        let mut tasks = BTreeMap::new();
        let mut task_lifecycles = BTreeMap::new();
        for task in &tg.tasks {
            let mut tr = AllocatedTaskResources::default();
            tr.cpu.cpu_shares = task.resources.cpu;
            tr.memory.memory_mb = task.resources.memory_mb;
            if let Some(net) = task.resources.networks.iter().flatten().next() {
                match picker.assign_task(net, rng) {
                    Ok(offer) => tr.networks = Some(vec![offer]),
                    Err(e) => {
                        self.metric
                            .exhausted_node(&node.node_class, &format!("network: {e}"));
                        return None;
                    }
                }
            }
            ask.cpu_shares += tr.cpu.cpu_shares;
            ask.memory_mb += tr.memory.memory_mb;
            tasks.insert(task.name.clone(), tr);
            task_lifecycles.insert(task.name.clone(), task.lifecycle.clone());
        }
        let mut util = usage.used;
        util.add(&ask);
        if let Err(dimension) = node.available().superset(&util) {
            self.metric.exhausted_node(&node.node_class, dimension);
            return None;
        }
        let group_allocs = usage.group_allocs(&tg.name);

        let mut scores: Vec<f64> = Vec::with_capacity(4);
        let mut named: BTreeMap<String, f64> = BTreeMap::new();
        let fitness = fit_score(&node, &util, self.config.algorithm);
        scores.push(fitness);
        named.insert(SCORE_BINPACK.into(), fitness);
        let anti = anti_affinity(group_allocs, tg.count);
        scores.extend(anti);
        named.insert(SCORE_JOB_ANTI_AFFINITY.into(), anti.unwrap_or(0.0));
        let penalty = if self.penalty_nodes.contains(&node.id) {
            scores.push(-1.0);
            -1.0
        } else {
            0.0
        };
        named.insert(SCORE_RESCHEDULE_PENALTY.into(), penalty);
        let affinity = self.affinity_score(&node);
        if affinity != 0.0 {
            scores.push(affinity);
        }
        named.insert(SCORE_NODE_AFFINITY.into(), affinity);
        let norm = scores.iter().sum::<f64>() / scores.len() as f64;
        self.top.push(&node.id, named, norm);

        Some(Selected {
            node,
            tasks,
            task_lifecycles,
            shared_networks,
            shared_ports,
            score: norm,
        })
    }

    /// Nomad's `NodeAffinityIterator`: matched weights over the sum of all weights' magnitudes.
    fn affinity_score(&mut self, node: &Node) -> f64 {
        if self.req.affinities.is_empty() {
            return 0.0;
        }
        let total_weight: f64 = self
            .req
            .affinities
            .iter()
            .map(|a| (a.weight as f64).abs())
            .sum();
        if total_weight == 0.0 {
            return 0.0;
        }
        let mut matched = 0.0;
        for a in &self.req.affinities {
            let l = resolve_target(&a.l_target, node);
            let r = resolve_target(&a.r_target, node);
            if self.ctx.matcher.check(&a.operand, l, r) {
                matched += a.weight as f64;
            }
        }
        matched / total_weight
    }
}

/// How many allocations of the job (or group) hold each value of a `distinct_property`
/// target, computed once per placement.
struct PropertyUse {
    sets: Vec<PropertySet>,
}

struct PropertySet {
    target: String,
    allowed: u64,
    error: Option<String>,
    used: HashMap<String, u64>,
}

impl PropertyUse {
    fn build(
        ctx: &mut EvalContext<'_>,
        job: &Job,
        tg: &TaskGroup,
        req: &GroupRequirements<'_>,
    ) -> Option<PropertyUse> {
        if req.distinct_properties.is_empty() {
            return None;
        }
        // The job's live allocations as the plan would leave them.
        let stopped: HashSet<&str> = ctx
            .plan
            .node_update
            .values()
            .flatten()
            .map(|a| a.id.as_str())
            .collect();
        let placed: Vec<(String, String)> = ctx
            .plan
            .node_allocation
            .values()
            .flatten()
            .filter(|a| a.job_id == job.id)
            .map(|a| (a.node_id.clone(), a.task_group.clone()))
            .collect();
        let placed_ids: HashSet<&str> = ctx
            .plan
            .node_allocation
            .values()
            .flatten()
            .map(|a| a.id.as_str())
            .collect();
        let mut live: Vec<(String, String)> = ctx
            .job_allocs
            .iter()
            .filter(|a| {
                !a.terminal()
                    && !stopped.contains(a.id.as_str())
                    && !placed_ids.contains(a.id.as_str())
            })
            .map(|a| (a.node_id.clone(), a.task_group.clone()))
            .collect();
        live.extend(placed);

        let mut sets = Vec::new();
        for (c, job_level) in &req.distinct_properties {
            let (allowed, error) = if c.r_target.is_empty() {
                (1, None)
            } else {
                match c.r_target.parse::<u64>() {
                    Ok(n) => (n, None),
                    Err(e) => (
                        0,
                        Some(format!(
                            "failed to convert RTarget {:?} to uint64: {e}",
                            c.r_target
                        )),
                    ),
                }
            };
            let mut used: HashMap<String, u64> = HashMap::new();
            for (node_id, group) in &live {
                if !job_level && *group != tg.name {
                    continue;
                }
                let Some(node) = ctx.node(node_id) else {
                    continue;
                };
                if let Some(v) = resolve_target(&c.l_target, &node) {
                    *used.entry(v.to_string()).or_insert(0) += 1;
                }
            }
            sets.push(PropertySet {
                target: c.l_target.clone(),
                allowed,
                error,
                used,
            });
        }
        Some(PropertyUse { sets })
    }

    /// Why the node would break a `distinct_property` constraint, if it would.
    fn violation(&self, node: &Node) -> Option<String> {
        for set in &self.sets {
            if let Some(e) = &set.error {
                return Some(e.clone());
            }
            let Some(value) = resolve_target(&set.target, node) else {
                return Some(format!("missing property {:?}", set.target));
            };
            let used = set.used.get(value).copied().unwrap_or(0);
            if used >= set.allowed {
                return Some(format!(
                    "distinct_property: {}={} used by {} allocs",
                    set.target, value, used
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{Harness, mock_alloc, mock_batch_job, mock_node};
    use crate::util::Rng;
    use drover_structs::Plan;

    #[test]
    fn low_scoring_nodes_are_passed_over_for_a_better_one() {
        let mut h = Harness::new();
        let nodes: Vec<Arc<Node>> = (0..4).map(|_| h.upsert_node(mock_node())).collect();
        let mut job = mock_batch_job();
        job.task_groups[0].count = 2;
        let job = h.upsert_job(job);
        // The first three nodes in visiting order already run one of the group's allocations,
        // which scores them below zero.
        for (i, n) in nodes.iter().take(3).enumerate() {
            h.upsert_alloc(mock_alloc(&job, n, i as u64));
        }
        let state = h.state.clone();
        let mut ctx = EvalContext::new(
            &state,
            Plan::default(),
            &job.namespace,
            &job.id,
            Rng::seeded("e", 1),
        );
        ctx.eligibility.set_job(&job);
        let mut stack = Stack::new(true);
        stack.set_nodes(nodes.clone());
        let config = SchedulerConfig::default();
        let (sel, metric) = stack.select(
            &mut ctx,
            &job,
            &job.task_groups[0],
            &SelectOptions::default(),
            &config,
        );
        let sel = sel.expect("a node is chosen");
        assert_eq!(sel.node.id, nodes[3].id);
        assert_eq!(metric.nodes_evaluated, 4);
        assert_eq!(metric.score_meta_data.as_ref().map(Vec::len), Some(4));
    }

    #[test]
    fn batch_scores_two_nodes_and_services_log2_of_the_count() {
        let nodes: Vec<Arc<Node>> = (0..20).map(|_| Arc::new(mock_node())).collect();
        let mut s = Stack::new(true);
        s.set_nodes(nodes.clone());
        assert_eq!(s.limit, 2);
        let mut s = Stack::new(false);
        s.set_nodes(nodes);
        assert_eq!(s.limit, 5);
        s.set_nodes(vec![Arc::new(mock_node())]);
        assert_eq!(s.limit, 2);
    }

    #[test]
    fn successive_placements_continue_where_the_last_stopped() {
        let mut h = Harness::new();
        let nodes: Vec<Arc<Node>> = (0..6).map(|_| h.upsert_node(mock_node())).collect();
        let job = h.upsert_job(mock_batch_job());
        let state = h.state.clone();
        let mut ctx = EvalContext::new(
            &state,
            Plan::default(),
            &job.namespace,
            &job.id,
            Rng::seeded("e", 1),
        );
        ctx.eligibility.set_job(&job);
        let mut stack = Stack::new(true);
        stack.set_nodes(nodes);
        let config = SchedulerConfig::default();
        let tg = &job.task_groups[0];
        let (_, first) = stack.select(&mut ctx, &job, tg, &SelectOptions::default(), &config);
        let (_, second) = stack.select(&mut ctx, &job, tg, &SelectOptions::default(), &config);
        let ids = |m: &AllocMetric| -> Vec<String> {
            let mut v: Vec<String> = m
                .score_meta_data
                .iter()
                .flatten()
                .map(|s| s.node_id.clone())
                .collect();
            v.sort();
            v
        };
        assert_eq!(first.nodes_evaluated, 2);
        assert_eq!(second.nodes_evaluated, 2);
        let (a, b) = (ids(&first), ids(&second));
        assert!(
            a.iter().all(|id| !b.contains(id)),
            "the second placement looks at other nodes"
        );
    }
}
