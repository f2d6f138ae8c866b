//! Choosing a node for one placement (Nomad's `GenericStack` and `SystemStack`): nodes are
//! visited in a shuffled order that carries on where the previous placement stopped; each is
//! checked for feasibility (memoised per computed class), distinct hosts and properties, then
//! for fit (preempting lower-priority allocations when asked to), and scored. Only the first few
//! feasible nodes are scored (log2 of the node count for services, 2 for batch, at least 100
//! with affinities or spreads) and the best of those wins.
//!
//! The walk is the hot path of the scheduler: per visited node it does vector lookups for the
//! class verdicts and the node's usage, and builds the allocation's resources only for the
//! winner.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use drover_structs::{
    AllocMetric, AllocatedPortMapping, AllocatedTaskResources, Allocation, ComparableResources,
    Job, NetworkResource, Node, TaskGroup, VecMap,
};

use crate::SchedulerConfig;
use crate::constraints::{resolve_target, target_escapes};
use crate::context::{EvalContext, GroupId, NodeUsage};
use crate::csi::GroupCsi;
use crate::feasible::{
    ClassId, ClassVerdict, FILTER_CLASS_INELIGIBLE, FILTER_MISSING_DRIVERS, FILTER_MISSING_NETWORK,
    GroupRequirements, has_drivers, has_network_mode,
};
use crate::host_volumes::GroupHostVolumes;
use crate::network::PortPicker;
use crate::preempt::{self, Candidate};
use crate::rank::{NodeScores, TopScores, anti_affinity, fit_score, preemption_score};
use crate::spread::SpreadScorer;
use crate::util::Rng;

/// Options scored below or at this are passed over while better ones may follow.
const SKIP_SCORE_THRESHOLD: f64 = 0.0;
/// At most this many low-scoring options are passed over.
const MAX_SKIP: usize = 3;
/// With affinities or spreads at least this many feasible nodes are scored (or the group's
/// count, when larger), as in Nomad.
const MIN_CANDIDATES_WITH_PREFERENCES: usize = 100;
/// A node whose usage has not been looked up in this attempt.
const NO_SLOT: u32 = u32::MAX;

/// What the walk needs of a node, gathered once per attempt into one contiguous array so that
/// a visit does not chase the node's own (large, scattered) record.
#[derive(Clone, Copy)]
struct NodeFacts {
    available: ComparableResources,
    class: Option<ClassId>,
    /// The node's usage slot in the context, once looked up.
    slot: u32,
}

impl NodeFacts {
    fn of(ctx: &mut EvalContext<'_>, node: &Node) -> NodeFacts {
        NodeFacts {
            available: node.available(),
            class: ctx.eligibility.class_id(&node.computed_class),
            slot: NO_SLOT,
        }
    }
}

#[derive(Default)]
pub(crate) struct SelectOptions {
    /// Nodes a rescheduled allocation already failed on.
    pub penalty_nodes: HashSet<String>,
    /// A node to try first (sticky ephemeral disks).
    pub preferred: Option<Arc<Node>>,
    /// Evict lower-priority allocations when a node cannot take the placement otherwise.
    pub preempt: bool,
    /// The name of the allocation being placed (`job.group[N]`): picks the volume of a
    /// `per_alloc` CSI volume block.
    pub alloc_name: String,
}

/// The chosen node and the resources the placement gets there.
pub(crate) struct Selected {
    pub node: Arc<Node>,
    pub tasks: VecMap<String, AllocatedTaskResources>,
    pub shared_networks: Option<Vec<NetworkResource>>,
    pub shared_ports: Option<Vec<AllocatedPortMapping>>,
    /// Allocations to preempt for this placement.
    pub preempted: Vec<Arc<Allocation>>,
}

/// Which of Nomad's stacks this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StackKind {
    /// Services: log2(nodes) candidates, every scorer.
    Service,
    /// Batch jobs: 2 candidates, every scorer.
    Batch,
    /// System and sysbatch jobs: one given node, bin-packing score only.
    System,
}

/// What one group needs, computed once per attempt.
struct GroupState<'j> {
    tg: &'j TaskGroup,
    req: GroupRequirements<'j>,
    /// The group's index in the eligibility memo.
    eligibility: usize,
    group_id: GroupId,
    ask: ComparableResources,
    needs_ports: bool,
    affinity_weight: f64,
    /// Matched affinity weight per class, when no affinity depends on the node itself.
    affinity_by_class: Option<Vec<Option<f64>>>,
    spread: Option<SpreadScorer>,
    distinct: Vec<DistinctProperty>,
    host_volumes: GroupHostVolumes,
    csi: GroupCsi,
}

/// A `distinct_property` constraint: at most `allowed` allocations per property value.
struct DistinctProperty {
    attribute: String,
    allowed: u64,
    property: usize,
    error: Option<String>,
}

impl<'j> GroupState<'j> {
    fn new(ctx: &mut EvalContext<'_>, job: &'j Job, tg: &'j TaskGroup) -> GroupState<'j> {
        let req = GroupRequirements::new(job, tg);
        let eligibility = ctx.eligibility.group_index(&tg.name);
        let group_id = ctx.group_id(&tg.name);
        let needs_ports = tg.networks.iter().flatten().next().is_some()
            || tg
                .tasks
                .iter()
                .any(|t| t.resources.networks.iter().flatten().next().is_some());
        let affinity_weight = req.affinities.iter().map(|a| (a.weight as f64).abs()).sum();
        let affinity_escapes = req
            .affinities
            .iter()
            .any(|a| target_escapes(&a.l_target) || target_escapes(&a.r_target));
        let spread = SpreadScorer::new(ctx, &req.spreads, &tg.name, tg.count);
        let mut distinct = Vec::new();
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
            let group = (!job_level).then_some(tg.name.as_str());
            distinct.push(DistinctProperty {
                attribute: c.l_target.clone(),
                allowed,
                property: ctx.property(&c.l_target, group),
                error,
            });
        }
        GroupState {
            tg,
            ask: tg.combined_ask(),
            needs_ports,
            affinity_weight,
            affinity_by_class: (!affinity_escapes && !req.affinities.is_empty()).then(Vec::new),
            spread,
            distinct,
            eligibility,
            group_id,
            host_volumes: GroupHostVolumes::new(tg),
            csi: GroupCsi::new(tg),
            req,
        }
    }
}

pub(crate) struct Stack<'j> {
    kind: StackKind,
    nodes: Vec<Arc<Node>>,
    facts: Vec<NodeFacts>,
    /// Where the next placement starts visiting nodes.
    offset: usize,
    limit: usize,
    groups: Vec<GroupState<'j>>,
}

impl<'j> Stack<'j> {
    pub(crate) fn new(kind: StackKind) -> Self {
        Stack {
            kind,
            nodes: Vec::new(),
            facts: Vec::new(),
            offset: 0,
            limit: 2,
            groups: Vec::new(),
        }
    }

    /// Sets the candidate nodes (already shuffled) and the candidate limit for them.
    pub(crate) fn set_nodes(&mut self, ctx: &mut EvalContext<'_>, nodes: Vec<Arc<Node>>) {
        let n = nodes.len();
        self.limit = 2;
        if self.kind == StackKind::Service && n > 0 {
            let log = (n as f64).log2().ceil() as usize;
            self.limit = self.limit.max(log);
        }
        ctx.reserve_nodes(n);
        self.facts = nodes.iter().map(|node| NodeFacts::of(ctx, node)).collect();
        self.nodes = nodes;
        self.offset = 0;
    }

    fn group(&mut self, ctx: &mut EvalContext<'_>, job: &'j Job, tg: &'j TaskGroup) -> usize {
        if let Some(i) = self.groups.iter().position(|g| std::ptr::eq(g.tg, tg)) {
            return i;
        }
        self.groups.push(GroupState::new(ctx, job, tg));
        self.groups.len() - 1
    }

    /// Picks a node among the stack's nodes (the preferred node first, when one is given).
    pub(crate) fn select(
        &mut self,
        ctx: &mut EvalContext<'_>,
        job: &'j Job,
        tg: &'j TaskGroup,
        options: &SelectOptions,
        config: &SchedulerConfig,
    ) -> (Option<Selected>, AllocMetric) {
        if let Some(preferred) = &options.preferred {
            let found = self.select_on(ctx, job, tg, preferred, options, config);
            if found.0.is_some() {
                return found;
            }
        }
        let g = self.group(ctx, job, tg);
        self.groups[g].csi.begin(
            ctx.state,
            &job.namespace,
            &job.id,
            Some(&options.alloc_name),
        );
        self.groups[g].host_volumes.begin(Some(&options.alloc_name));
        let Stack {
            kind,
            nodes,
            facts,
            offset,
            limit,
            groups,
        } = self;
        let view = NodeView {
            nodes,
            facts,
            offset,
        };
        run(
            ctx,
            *kind,
            *limit,
            view,
            job,
            &mut groups[g],
            options,
            config,
        )
    }

    /// Checks one given node only (system placements, in-place updates, preferred nodes).
    pub(crate) fn select_on(
        &mut self,
        ctx: &mut EvalContext<'_>,
        job: &'j Job,
        tg: &'j TaskGroup,
        node: &Arc<Node>,
        options: &SelectOptions,
        config: &SchedulerConfig,
    ) -> (Option<Selected>, AllocMetric) {
        let g = self.group(ctx, job, tg);
        self.groups[g].csi.begin(
            ctx.state,
            &job.namespace,
            &job.id,
            Some(&options.alloc_name),
        );
        self.groups[g].host_volumes.begin(Some(&options.alloc_name));
        let nodes = [node.clone()];
        let mut facts = [NodeFacts::of(ctx, node)];
        let mut offset = 0;
        let view = NodeView {
            nodes: &nodes,
            facts: &mut facts,
            offset: &mut offset,
        };
        run(
            ctx,
            self.kind,
            1,
            view,
            job,
            &mut self.groups[g],
            options,
            config,
        )
    }
}

impl<'j> Stack<'j> {
    /// Whether the node passes the job's and the group's constraints, drivers and network
    /// mode (memoised per class like any visit), whatever it holds.
    pub(crate) fn feasible_on(
        &mut self,
        ctx: &mut EvalContext<'_>,
        job: &'j Job,
        tg: &'j TaskGroup,
        node: &Arc<Node>,
    ) -> bool {
        let g = self.group(ctx, job, tg);
        // An allocation that runs holds its volumes already: only constraints are checked.
        self.groups[g]
            .csi
            .begin(ctx.state, &job.namespace, &job.id, None);
        self.groups[g].host_volumes.begin(None);
        let nodes = [node.clone()];
        let mut facts = [NodeFacts::of(ctx, node)];
        let mut offset = 0;
        let options = SelectOptions::default();
        let config = SchedulerConfig::default();
        let mut pass = Pass {
            view: NodeView {
                nodes: &nodes,
                facts: &mut facts,
                offset: &mut offset,
            },
            seen: 0,
            ctx,
            kind: self.kind,
            job,
            g: &mut self.groups[g],
            options: &options,
            config: &config,
            metric: AllocMetric::default(),
            top: TopScores::default(),
        };
        pass.feasible(0)
    }
}

/// The nodes one placement walks, with what is known about each.
struct NodeView<'v> {
    nodes: &'v [Arc<Node>],
    facts: &'v mut [NodeFacts],
    offset: &'v mut usize,
}

#[allow(clippy::too_many_arguments)]
fn run<'j>(
    ctx: &mut EvalContext<'_>,
    kind: StackKind,
    base_limit: usize,
    view: NodeView<'_>,
    job: &'j Job,
    group: &mut GroupState<'j>,
    options: &SelectOptions,
    config: &SchedulerConfig,
) -> (Option<Selected>, AllocMetric) {
    let start = Instant::now();
    let limit = match kind {
        StackKind::System => usize::MAX,
        _ if !group.req.affinities.is_empty() || group.spread.is_some() => {
            (group.tg.count.max(0) as usize).max(MIN_CANDIDATES_WITH_PREFERENCES)
        }
        _ => base_limit,
    };
    let mut pass = Pass {
        view,
        seen: 0,
        ctx,
        kind,
        job,
        g: group,
        options,
        config,
        metric: AllocMetric::default(),
        top: TopScores::default(),
    };

    // Nomad's LimitIterator feeding a MaxScoreIterator.
    let mut best: Option<Ranked> = None;
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
        let Some(option) = option.or_else(|| pass.next_ranked().or_else(|| skipped.take_next()))
        else {
            break;
        };
        if best.as_ref().is_none_or(|b| option.score > b.score) {
            best = Some(option);
        }
    }

    let selected = best.map(|b| pass.materialize(b));
    let mut metric = pass.metric;
    metric.score_meta_data = pass.top.finish(pass.view.nodes);
    metric.allocation_time = start.elapsed().as_nanos() as i64;
    (selected, metric)
}

/// Ports a placement got on a node.
struct PortOffer {
    shared: Option<(Vec<AllocatedPortMapping>, NetworkResource)>,
    /// Per task of the group, in order.
    tasks: Vec<Option<NetworkResource>>,
}

/// A feasible node that fits, with its score.
struct Ranked {
    pos: usize,
    score: f64,
    ports: Option<PortOffer>,
    preempted: Vec<Arc<Allocation>>,
}

/// Low scorers passed over in the hope of something better, handed out in order once the
/// nodes run out.
#[derive(Default)]
struct Skipped {
    items: Vec<Option<Ranked>>,
    next: usize,
}

impl Skipped {
    fn len(&self) -> usize {
        self.items.len()
    }

    fn push(&mut self, s: Ranked) {
        self.items.push(Some(s));
    }

    fn take_next(&mut self) -> Option<Ranked> {
        let slot = self.items.get_mut(self.next)?;
        self.next += 1;
        slot.take()
    }
}

/// Nomad's `AllocMetric.FilterNode`, without allocating for keys already counted.
fn filter_node(metric: &mut AllocMetric, node: &Node, reason: &str) {
    metric.filter_node(&node.node_class, Some(reason));
}

/// Nomad's `AllocMetric.ExhaustedNode`, without allocating for keys already counted.
fn exhaust_node(metric: &mut AllocMetric, node: &Node, dimension: &str) {
    metric.exhausted_node(&node.node_class, dimension);
}

/// One placement's walk over the nodes.
struct Pass<'p, 'c, 's, 'j> {
    view: NodeView<'p>,
    seen: usize,
    ctx: &'c mut EvalContext<'s>,
    kind: StackKind,
    job: &'j Job,
    g: &'p mut GroupState<'j>,
    options: &'p SelectOptions,
    config: &'p SchedulerConfig,
    metric: AllocMetric,
    top: TopScores,
}

impl Pass<'_, '_, '_, '_> {
    /// The next node in visiting order; every node is visited at most once per placement.
    fn source_next(&mut self) -> Option<usize> {
        let n = self.view.nodes.len();
        if self.seen >= n {
            return None;
        }
        let pos = *self.view.offset % n;
        *self.view.offset = (pos + 1) % n;
        self.seen += 1;
        self.metric.nodes_evaluated += 1;
        Some(pos)
    }

    fn slot(&mut self, pos: usize) -> u32 {
        let slot = self.view.facts[pos].slot;
        if slot != NO_SLOT {
            return slot;
        }
        let slot = self.ctx.usage_slot(&self.view.nodes[pos]);
        self.view.facts[pos].slot = slot;
        slot
    }

    fn next_ranked(&mut self) -> Option<Ranked> {
        loop {
            let pos = self.source_next()?;
            if !self.feasible(pos) || !self.distinct(pos) {
                continue;
            }
            if let Some(ranked) = self.fit_and_score(pos) {
                return Some(ranked);
            }
        }
    }

    /// Nomad's `FeasibilityWrapper`: job checks, then group checks, each memoised per computed
    /// class unless its constraints escape the class.
    fn feasible(&mut self, pos: usize) -> bool {
        let nodes = self.view.nodes;
        let node: &Node = &nodes[pos];
        let class = self.view.facts[pos].class;
        let job_verdict = self.ctx.eligibility.job_status(class);
        match job_verdict {
            ClassVerdict::Ineligible => {
                filter_node(&mut self.metric, node, FILTER_CLASS_INELIGIBLE);
                return false;
            }
            ClassVerdict::Eligible => {}
            ClassVerdict::Unknown | ClassVerdict::Escaped => {
                let matcher = &mut self.ctx.matcher;
                let failed = self
                    .g
                    .req
                    .job_constraints
                    .iter()
                    .find(|c| !matcher.meets(c, node));
                let eligible = failed.is_none();
                if let Some(c) = failed {
                    filter_node(&mut self.metric, node, &c.to_string());
                }
                if job_verdict == ClassVerdict::Unknown
                    && let Some(class) = class
                {
                    self.ctx.eligibility.set_job_eligibility(eligible, class);
                }
                if !eligible {
                    return false;
                }
            }
        }
        let group_verdict = self.ctx.eligibility.group_status(self.g.eligibility, class);
        let eligible = match group_verdict {
            ClassVerdict::Ineligible => {
                filter_node(&mut self.metric, node, FILTER_CLASS_INELIGIBLE);
                false
            }
            ClassVerdict::Eligible => true,
            ClassVerdict::Unknown | ClassVerdict::Escaped => {
                let failed = group_check(&mut self.ctx.matcher, &self.g.req, node);
                if group_verdict == ClassVerdict::Unknown
                    && let Some(class) = class
                {
                    self.ctx.eligibility.set_group_eligibility(
                        failed.is_none(),
                        self.g.eligibility,
                        class,
                    );
                }
                match failed {
                    Some(reason) => {
                        filter_node(&mut self.metric, node, &reason);
                        false
                    }
                    None => true,
                }
            }
        };
        // Host volumes are not part of the computed class (and a `per_alloc` source depends
        // on the allocation): checked for every node, like Nomad's "available" checks.
        if eligible && let Err(reason) = self.g.host_volumes.check(node) {
            filter_node(&mut self.metric, node, reason);
            return false;
        }
        // Nomad's "available" checks: transient, so never memoised for the class.
        if eligible && let Err(reason) = self.g.csi.check(self.ctx.state, node) {
            filter_node(&mut self.metric, node, &reason);
            return false;
        }
        eligible
    }

    /// `distinct_hosts` and `distinct_property`, which depend on what is placed where.
    fn distinct(&mut self, pos: usize) -> bool {
        if self.kind == StackKind::System
            || !self.g.req.job_distinct_hosts
                && !self.g.req.group_distinct_hosts
                && self.g.distinct.is_empty()
        {
            return true;
        }
        let nodes = self.view.nodes;
        let node: &Node = &nodes[pos];
        if self.kind != StackKind::System
            && (self.g.req.job_distinct_hosts || self.g.req.group_distinct_hosts)
        {
            let slot = self.slot(pos);
            let usage = self.ctx.usage_at(slot);
            let collides = (self.g.req.job_distinct_hosts && usage.job_allocs > 0)
                || usage.group_allocs(self.g.group_id) > 0;
            if collides {
                filter_node(&mut self.metric, node, crate::constraints::DISTINCT_HOSTS);
                return false;
            }
        }
        for d in &self.g.distinct {
            let reason = match &d.error {
                Some(e) => Some(e.clone()),
                None => match resolve_target(&d.attribute, node) {
                    None => Some(format!("missing property {:?}", d.attribute)),
                    Some(value) => {
                        let used = self
                            .ctx
                            .property_count(d.property)
                            .counts
                            .get(value)
                            .copied()
                            .unwrap_or(0);
                        (used >= d.allowed).then(|| {
                            format!(
                                "distinct_property: {}={} used by {} allocs",
                                d.attribute, value, used
                            )
                        })
                    }
                },
            };
            if let Some(reason) = reason {
                filter_node(&mut self.metric, node, &reason);
                return false;
            }
        }
        true
    }

    /// Nomad's `BinPackIterator` (with its preemption) and the scoring iterators after it.
    fn fit_and_score(&mut self, pos: usize) -> Option<Ranked> {
        let nodes = self.view.nodes;
        let node: &Arc<Node> = &nodes[pos];
        let available = self.view.facts[pos].available;
        let slot = self.slot(pos);
        if self.ctx.usage_at(slot).collisions > 0 {
            exhaust_node(&mut self.metric, node, "network: port collision");
            return None;
        }
        let preempt = self.options.preempt;
        if preempt {
            self.ctx.load_allocs(slot);
        }
        let mut preempted: Vec<Arc<Allocation>> = Vec::new();
        let mut released_ports: Vec<(String, i64)> = Vec::new();
        let mut released = ComparableResources::default();

        let ports = if self.g.needs_ports {
            self.ctx.load_reserved_ports(slot, node);
            loop {
                let (min, max) = (
                    i64::from(self.config.min_dynamic_port),
                    i64::from(self.config.max_dynamic_port),
                );
                let (usage, rng) = self.ctx.usage_and_rng(slot);
                match assign_ports(self.g.tg, node, usage, rng, min, max, &released_ports) {
                    Ok(offer) => break Some(offer),
                    Err((reason, conflict)) => {
                        // A static port held by a lower-priority allocation: preempt it and
                        // try again.
                        let victim = conflict.filter(|_| preempt).and_then(|(ip, port)| {
                            port_holder(usage, &ip, port, &preempted)
                                .filter(|a| preempt::preemptible(self.job.priority, a))
                                .cloned()
                        });
                        let Some(victim) = victim else {
                            exhaust_node(&mut self.metric, node, &format!("network: {reason}"));
                            return None;
                        };
                        crate::fit::for_each_port(&victim, |ip, port| {
                            released_ports.push((ip.to_string(), port));
                        });
                        released.add(&crate::fit::alloc_resources(&victim));
                        preempted.push(victim);
                    }
                }
            }
        } else {
            None
        };

        let usage = self.ctx.usage_at(slot);
        let mut util = usage.used;
        util.subtract(&released);
        util.add(&self.g.ask);
        if let Err(dimension) = available.superset(&util) {
            if !preempt {
                exhaust_node(&mut self.metric, node, dimension);
                return None;
            }
            let mut remaining = available;
            remaining.subtract(&usage.used);
            remaining.add(&released);
            let candidates: Vec<Candidate> = usage
                .untouched()
                .filter(|a| !preempted.iter().any(|p| p.id == a.id))
                .map(|a| Candidate::new(a, self.ctx.preemptions_of(a)))
                .collect();
            match preempt::for_resources(self.job.priority, remaining, candidates, &self.g.ask) {
                Some(more) => preempted.extend(more),
                None => {
                    exhaust_node(&mut self.metric, node, dimension);
                    return None;
                }
            }
        }
        let group_allocs = usage.group_allocs(self.g.group_id);

        // Nomad scores a preempting placement by the utilization before the preemption.
        let mut scores = NodeScores {
            binpack: fit_score(&available, &util, self.config.algorithm),
            ..Default::default()
        };
        let mut sum = scores.binpack;
        let mut n = 1.0;
        let mut add = |v: f64, sum: &mut f64| {
            *sum += v;
            n += 1.0;
        };
        if self.kind != StackKind::System {
            let anti = anti_affinity(group_allocs, self.g.tg.count);
            if let Some(v) = anti {
                add(v, &mut sum);
            }
            scores.anti_affinity = Some(anti.unwrap_or(0.0));
            let penalized = !self.options.penalty_nodes.is_empty()
                && self.options.penalty_nodes.contains(&node.id);
            if penalized {
                add(-1.0, &mut sum);
            }
            scores.penalty = Some(if penalized { -1.0 } else { 0.0 });
            if self.g.req.affinities.is_empty() {
                scores.affinity = Some(0.0);
            } else {
                let matched = self.affinity_matched(pos);
                if matched != 0.0 {
                    let v = matched / self.g.affinity_weight;
                    add(v, &mut sum);
                    scores.affinity = Some(v);
                }
            }
            if let Some(spread) = self.g.spread.as_mut() {
                let v = spread.score(self.ctx, node);
                if v != 0.0 {
                    add(v, &mut sum);
                    scores.spread = Some(v);
                }
            }
            if !preempted.is_empty() {
                let v = preemption_score(
                    preempted
                        .iter()
                        .map(|a| a.job.as_ref().map(|j| j.priority).unwrap_or(0)),
                );
                add(v, &mut sum);
                scores.preemption = Some(v);
            }
        }
        scores.norm = sum / n;
        self.top.push(pos, scores);
        Some(Ranked {
            pos,
            score: scores.norm,
            ports,
            preempted,
        })
    }

    /// Nomad's `NodeAffinityIterator`: the sum of the weights of the affinities the node
    /// matches (memoised per class when no affinity depends on the node itself).
    fn affinity_matched(&mut self, pos: usize) -> f64 {
        let nodes = self.view.nodes;
        let node: &Node = &nodes[pos];
        let class = self.view.facts[pos].class;
        if let (Some(class), Some(cache)) = (class, self.g.affinity_by_class.as_ref())
            && let Some(Some(v)) = cache.get(class as usize)
        {
            return *v;
        }
        let mut matched = 0.0;
        for a in &self.g.req.affinities {
            let l = resolve_target(&a.l_target, node);
            let r = resolve_target(&a.r_target, node);
            if self.ctx.matcher.check(&a.operand, l, r) {
                matched += a.weight as f64;
            }
        }
        if let (Some(class), Some(cache)) = (class, self.g.affinity_by_class.as_mut()) {
            let i = class as usize;
            if cache.len() <= i {
                cache.resize(i + 1, None);
            }
            cache[i] = Some(matched);
        }
        matched
    }

    /// The winner's resources, built once.
    fn materialize(&self, r: Ranked) -> Selected {
        let tg = self.g.tg;
        let mut tasks = VecMap::with_capacity(tg.tasks.len());
        let (shared, mut task_nets) = match r.ports {
            Some(p) => (p.shared, p.tasks),
            None => (None, Vec::new()),
        };
        for (i, task) in tg.tasks.iter().enumerate() {
            let mut tr = AllocatedTaskResources::default();
            tr.cpu.cpu_shares = task.resources.cpu;
            tr.memory.memory_mb = task.resources.memory_mb;
            tr.networks = task_nets.get_mut(i).and_then(Option::take).map(|n| vec![n]);
            tasks.insert(task.name.clone(), tr);
        }
        let (shared_ports, shared_networks) = match shared {
            Some((ports, net)) => (Some(ports), Some(vec![net])),
            None => (None, None),
        };
        Selected {
            node: self.view.nodes[r.pos].clone(),
            tasks,
            shared_networks,
            shared_ports,
            preempted: r.preempted,
        }
    }
}

/// Drivers, group and task constraints, network mode: the first failure's reason.
fn group_check(
    matcher: &mut crate::constraints::Matcher,
    req: &GroupRequirements<'_>,
    node: &Node,
) -> Option<String> {
    if !has_drivers(node, &req.drivers) {
        return Some(FILTER_MISSING_DRIVERS.to_string());
    }
    if let Some(c) = req.constraints.iter().find(|c| !matcher.meets(c, node)) {
        return Some(c.to_string());
    }
    if let Some(mode) = req.network_mode
        && !has_network_mode(node, mode)
    {
        return Some(FILTER_MISSING_NETWORK.to_string());
    }
    None
}

/// Assigns the group's and its tasks' ports on the node. On failure, the reason and the static
/// port that was taken, if that is what failed.
#[allow(clippy::type_complexity)]
fn assign_ports(
    tg: &TaskGroup,
    node: &Node,
    usage: &NodeUsage,
    rng: &mut Rng,
    min: i64,
    max: i64,
    released: &[(String, i64)],
) -> Result<PortOffer, (String, Option<(String, i64)>)> {
    let mut picker = PortPicker {
        node,
        usage,
        min,
        max,
        taken: Vec::new(),
        released,
        conflict: None,
    };
    let mut offer = PortOffer {
        shared: None,
        tasks: Vec::with_capacity(tg.tasks.len()),
    };
    if let Some(ask) = tg.networks.iter().flatten().next() {
        match picker.assign_group(ask, rng) {
            Ok(assigned) => offer.shared = Some(assigned),
            Err(e) => return Err((e, picker.conflict.take())),
        }
    }
    for task in &tg.tasks {
        match task.resources.networks.iter().flatten().next() {
            Some(net) => match picker.assign_task(net, rng) {
                Ok(n) => offer.tasks.push(Some(n)),
                Err(e) => return Err((e, picker.conflict.take())),
            },
            None => offer.tasks.push(None),
        }
    }
    Ok(offer)
}

/// The untouched allocation on the node that holds the host port, unless already chosen.
fn port_holder<'u>(
    usage: &'u NodeUsage,
    ip: &str,
    port: i64,
    chosen: &[Arc<Allocation>],
) -> Option<&'u Arc<Allocation>> {
    usage.untouched().find(|a| {
        if chosen.iter().any(|c| c.id == a.id) {
            return false;
        }
        let mut holds = false;
        crate::fit::for_each_port(a, |i, p| holds = holds || (p == port && i == ip));
        holds
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{Harness, mock_alloc, mock_batch_job, mock_node};
    use drover_structs::Plan;

    fn ctx<'s>(state: &'s crate::harness::MemState, job: &Job) -> EvalContext<'s> {
        let mut ctx = EvalContext::new(
            state,
            Plan::default(),
            &job.namespace,
            &job.id,
            Rng::seeded("e", 1),
        );
        ctx.eligibility.set_job(job);
        ctx
    }

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
        let mut ctx = ctx(&state, &job);
        let mut stack = Stack::new(StackKind::Batch);
        stack.set_nodes(&mut ctx, nodes.clone());
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
        let mut h = Harness::new();
        let job = h.upsert_job(mock_batch_job());
        let state = h.state.clone();
        let mut ctx = ctx(&state, &job);
        let nodes: Vec<Arc<Node>> = (0..20).map(|_| Arc::new(mock_node())).collect();
        let mut s = Stack::new(StackKind::Batch);
        s.set_nodes(&mut ctx, nodes.clone());
        assert_eq!(s.limit, 2);
        let mut s = Stack::new(StackKind::Service);
        s.set_nodes(&mut ctx, nodes);
        assert_eq!(s.limit, 5);
        s.set_nodes(&mut ctx, vec![Arc::new(mock_node())]);
        assert_eq!(s.limit, 2);
    }

    #[test]
    fn successive_placements_continue_where_the_last_stopped() {
        let mut h = Harness::new();
        let nodes: Vec<Arc<Node>> = (0..6).map(|_| h.upsert_node(mock_node())).collect();
        let job = h.upsert_job(mock_batch_job());
        let state = h.state.clone();
        let mut ctx = ctx(&state, &job);
        let mut stack = Stack::new(StackKind::Batch);
        stack.set_nodes(&mut ctx, nodes);
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

    #[test]
    fn metric_counters_do_not_repeat_keys() {
        let node = Node {
            node_class: "c".into(),
            ..Default::default()
        };
        let mut m = AllocMetric::default();
        filter_node(&mut m, &node, "r");
        filter_node(&mut m, &node, "r");
        exhaust_node(&mut m, &node, "cpu");
        assert_eq!(m.nodes_filtered, 2);
        assert_eq!(m.class_filtered.as_ref().unwrap()["c"], 2);
        assert_eq!(m.constraint_filtered.as_ref().unwrap()["r"], 2);
        assert_eq!(m.dimension_exhausted.as_ref().unwrap()["cpu"], 1);
    }
}
