//! The state of one scheduling attempt: the plan being built and, per node, what the node would
//! hold if the plan were applied (Nomad's `ProposedAllocs`), kept up to date incrementally as
//! the plan grows so that a placement never rescans a node's allocations. Also the counts behind
//! `distinct_property` and `spread`: how many of the job's live allocations sit on nodes with
//! each value of a node property, kept up to date the same way.

use std::sync::Arc;

use drover_structs::{Allocation, ComparableResources, Node, Plan};

use crate::State;
use crate::constraints::{Matcher, resolve_target};
use crate::feasible::EvalEligibility;
use crate::fit::{alloc_resources, for_each_port, parse_port_range};
use crate::util::{FxMap, Rng};

/// A group of the scheduled job, interned per attempt.
pub(crate) type GroupId = u16;

/// What one allocation holds on its node.
#[derive(Debug, Clone, Default)]
pub(crate) struct Holding {
    resources: ComparableResources,
    ports: Vec<(String, i64)>,
    /// The group, when the allocation belongs to the job being scheduled.
    job_group: Option<GroupId>,
}

/// A node's proposed usage: its live allocations in the state, minus those the plan stops or
/// preempts, plus those the plan places or updates.
#[derive(Default)]
pub(crate) struct NodeUsage {
    node_id: Option<Arc<str>>,
    /// The node's non-terminal allocations in the state, once read: the state's per-node
    /// summary usually makes that unnecessary.
    base: Option<Vec<Arc<Allocation>>>,
    /// Allocations whose holding the plan changed: stopped or preempted (`None`), placed or
    /// updated (`Some`). Absent ids hold what the state says.
    changed: FxMap<String, Option<Holding>>,
    pub used: ComparableResources,
    /// Held host ports: ip → port → holders. Empty (and never allocated) without ports.
    ports: FxMap<String, FxMap<i64, u32>>,
    /// How many (ip, port) pairs are held more than once: a node already in conflict.
    pub collisions: u32,
    pub job_allocs: usize,
    job_groups: Vec<(GroupId, usize)>,
    /// The node's reserved host port ranges, parsed when ports are asked for.
    reserved: Option<Vec<(i64, i64)>>,
}

impl NodeUsage {
    pub(crate) fn port_used(&self, ip: &str, port: i64) -> bool {
        self.reserved
            .iter()
            .flatten()
            .any(|(lo, hi)| *lo <= port && port <= *hi)
            || self
                .ports
                .get(ip)
                .is_some_and(|m| m.get(&port).is_some_and(|n| *n > 0))
    }

    /// Allocations of the scheduled job's group on this node.
    pub(crate) fn group_allocs(&self, group: GroupId) -> usize {
        self.job_groups
            .iter()
            .find(|(g, _)| *g == group)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    }

    /// The state's allocations on the node that the plan leaves untouched: the candidates for
    /// preemption. Empty until [`EvalContext::load_allocs`] read them.
    pub(crate) fn untouched(&self) -> impl Iterator<Item = &Arc<Allocation>> {
        self.base
            .iter()
            .flatten()
            .filter(|a| !self.changed.contains_key(a.id.as_str()))
    }

    #[cfg(test)]
    pub(crate) fn set_reserved(&mut self, ranges: Vec<(i64, i64)>) {
        self.reserved = Some(ranges);
    }

    fn add_port(&mut self, ip: &str, port: i64) {
        let held = match self.ports.get_mut(ip) {
            Some(m) => m.entry(port).or_insert(0),
            None => self
                .ports
                .entry(ip.to_string())
                .or_default()
                .entry(port)
                .or_insert(0),
        };
        *held += 1;
        if *held == 2 {
            self.collisions += 1;
        }
    }

    fn remove_port(&mut self, ip: &str, port: i64) {
        if let Some(held) = self.ports.get_mut(ip).and_then(|m| m.get_mut(&port)) {
            if *held == 2 {
                self.collisions = self.collisions.saturating_sub(1);
            }
            *held = held.saturating_sub(1);
        }
    }

    fn add_group(&mut self, group: GroupId) {
        self.job_allocs += 1;
        match self.job_groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, n)) => *n += 1,
            None => self.job_groups.push((group, 1)),
        }
    }

    fn remove_group(&mut self, group: GroupId) {
        self.job_allocs = self.job_allocs.saturating_sub(1);
        if let Some((_, n)) = self.job_groups.iter_mut().find(|(g, _)| *g == group) {
            *n = n.saturating_sub(1);
        }
    }

    fn add(&mut self, h: &Holding) {
        self.used.add(&h.resources);
        for (ip, port) in &h.ports {
            self.add_port(ip, *port);
        }
        if let Some(g) = h.job_group {
            self.add_group(g);
        }
    }

    fn subtract(&mut self, h: &Holding) {
        self.used.subtract(&h.resources);
        for (ip, port) in &h.ports {
            self.remove_port(ip, *port);
        }
        if let Some(g) = h.job_group {
            self.remove_group(g);
        }
    }
}

/// How to find what an allocation held before a change.
enum Before<'a> {
    /// A new allocation: it held nothing.
    Nothing,
    /// The allocation as the state has it.
    State(&'a Allocation),
    /// Look it up among the node's allocations.
    Lookup,
}

/// How many of the job's live allocations (optionally of one group) sit on nodes with each
/// value of a node property.
pub(crate) struct PropertyCount {
    attribute: String,
    group: Option<String>,
    pub counts: FxMap<String, u64>,
}

pub(crate) struct EvalContext<'s> {
    pub state: &'s dyn State,
    pub plan: Plan,
    namespace: String,
    job_id: String,
    slots: FxMap<Arc<str>, u32>,
    usage: Vec<NodeUsage>,
    nodes: FxMap<String, Option<Arc<Node>>>,
    pub eligibility: EvalEligibility,
    pub matcher: Matcher,
    pub rng: Rng,
    /// The job's live allocations as the plan leaves them (id → node, group); built when the
    /// first property count is asked for.
    job_live: Option<FxMap<String, (String, String)>>,
    properties: Vec<PropertyCount>,
    /// Allocations the plan preempts, per (namespace, job, group).
    preempted: FxMap<(String, String, String), usize>,
    /// The job's group names, interned.
    groups: Vec<String>,
    /// The groups of the job's live allocations in the state, by node; read when the first
    /// node's usage comes from the state's summary.
    job_by_node: Option<FxMap<String, Vec<GroupId>>>,
    /// Nodes the plan changed before their usage was computed: only these need the plan
    /// replayed when it is.
    unreplayed: FxMap<String, ()>,
}

fn lookup_node(
    nodes: &mut FxMap<String, Option<Arc<Node>>>,
    state: &dyn State,
    id: &str,
) -> Option<Arc<Node>> {
    if let Some(n) = nodes.get(id) {
        return n.clone();
    }
    let n = state.node(id);
    nodes.insert(id.to_string(), n.clone());
    n
}

impl<'s> EvalContext<'s> {
    pub(crate) fn new(
        state: &'s dyn State,
        plan: Plan,
        namespace: &str,
        job_id: &str,
        rng: Rng,
    ) -> Self {
        let unreplayed = plan
            .node_update
            .keys()
            .chain(plan.node_allocation.keys())
            .chain(plan.node_preemptions.keys())
            .map(|id| (id.clone(), ()))
            .collect();
        EvalContext {
            state,
            plan,
            namespace: namespace.to_string(),
            job_id: job_id.to_string(),
            slots: FxMap::default(),
            usage: Vec::new(),
            nodes: FxMap::default(),
            eligibility: EvalEligibility::default(),
            matcher: Matcher::default(),
            rng,
            job_live: None,
            properties: Vec::new(),
            preempted: FxMap::default(),
            groups: Vec::new(),
            job_by_node: None,
            unreplayed,
        }
    }

    /// The interned id of one of the job's groups.
    pub(crate) fn group_id(&mut self, name: &str) -> GroupId {
        if let Some(i) = self.groups.iter().position(|g| g == name) {
            return i as GroupId;
        }
        self.groups.push(name.to_string());
        (self.groups.len() - 1) as GroupId
    }

    /// A node by id, looked up once per attempt.
    pub(crate) fn node(&mut self, id: &str) -> Option<Arc<Node>> {
        lookup_node(&mut self.nodes, self.state, id)
    }

    fn is_job_alloc(&self, alloc: &Allocation) -> bool {
        alloc.job_id == self.job_id
            && (alloc.namespace == self.namespace || alloc.namespace.is_empty())
    }

    fn holding(&mut self, alloc: &Allocation) -> Holding {
        let mut ports = Vec::new();
        for_each_port(alloc, |ip, port| ports.push((ip.to_string(), port)));
        let job_group = self
            .is_job_alloc(alloc)
            .then(|| self.group_id(&alloc.task_group));
        Holding {
            resources: alloc_resources(alloc),
            ports,
            job_group,
        }
    }

    /// The slot of the node's proposed usage, computed on first use and maintained from then on.
    pub(crate) fn usage_slot(&mut self, node: &Node) -> u32 {
        if let Some(slot) = self.slots.get(node.id.as_str()) {
            return *slot;
        }
        self.compute_usage(node)
    }

    pub(crate) fn usage_at(&self, slot: u32) -> &NodeUsage {
        &self.usage[slot as usize]
    }

    /// The node's proposed usage together with the random source, for port picking.
    pub(crate) fn usage_and_rng(&mut self, slot: u32) -> (&NodeUsage, &mut Rng) {
        (&self.usage[slot as usize], &mut self.rng)
    }

    /// The node's proposed usage.
    #[cfg(test)]
    pub(crate) fn usage(&mut self, node: &Node) -> &NodeUsage {
        let slot = self.usage_slot(node);
        self.usage_at(slot)
    }

    /// Makes room for the usage of `n` more nodes.
    pub(crate) fn reserve_nodes(&mut self, n: usize) {
        self.slots.reserve(n);
        self.usage.reserve(n);
    }

    /// Parses the node's reserved host ports into its usage, before ports are assigned there.
    pub(crate) fn load_reserved_ports(&mut self, slot: u32, node: &Node) {
        let u = &mut self.usage[slot as usize];
        if u.reserved.is_none() {
            u.reserved = Some(
                node.reserved_resources
                    .networks
                    .reserved_host_ports
                    .split(',')
                    .filter_map(parse_port_range)
                    .collect(),
            );
        }
    }

    fn compute_usage(&mut self, node: &Node) -> u32 {
        let mut u = NodeUsage::default();
        match self.state.node_usage(&node.id) {
            Some(summary) => {
                u.used = summary.used;
                for (ip, port) in &summary.ports {
                    u.add_port(ip, *port);
                }
                self.ensure_job_by_node();
                let groups = self
                    .job_by_node
                    .as_ref()
                    .filter(|m| !m.is_empty())
                    .and_then(|m| m.get(node.id.as_str()));
                for g in groups.into_iter().flatten() {
                    u.add_group(*g);
                }
            }
            None => {
                let base = self.live_allocs_on(&node.id);
                for a in &base {
                    u.used.add(&alloc_resources(a));
                    for_each_port(a, |ip, port| u.add_port(ip, port));
                    if self.is_job_alloc(a) {
                        let g = self.group_id(&a.task_group);
                        u.add_group(g);
                    }
                }
                u.base = Some(base);
            }
        }
        let slot = self.usage.len() as u32;
        let key: Arc<str> = Arc::from(node.id.as_str());
        u.node_id = Some(key.clone());
        self.usage.push(u);
        self.slots.insert(key, slot);

        // Replay what the plan already holds for this node.
        let id = node.id.as_str();
        if self.unreplayed.remove(id).is_none() {
            return slot;
        }
        let stops: Vec<String> = self
            .plan
            .node_update
            .get(id)
            .into_iter()
            .chain(self.plan.node_preemptions.get(id))
            .flatten()
            .map(|a| a.id.clone())
            .collect();
        for alloc_id in stops {
            self.set_holding(id, &alloc_id, None, Before::Lookup);
        }
        let placed: Vec<Allocation> = self
            .plan
            .node_allocation
            .get(id)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for a in placed {
            let h = (!a.terminal()).then(|| self.holding(&a));
            self.set_holding(id, &a.id, h, Before::Lookup);
        }
        slot
    }

    fn live_allocs_on(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.state
            .allocs_by_node(node_id)
            .into_iter()
            .filter(|a| !a.terminal())
            .collect()
    }

    /// Reads the node's allocations when only the state's summary was used so far (to find
    /// allocations to preempt, or to look one up).
    pub(crate) fn load_allocs(&mut self, slot: u32) {
        let i = slot as usize;
        if self.usage[i].base.is_some() {
            return;
        }
        let base = match self.usage[i].node_id.clone() {
            Some(id) => self.live_allocs_on(&id),
            None => Vec::new(),
        };
        self.usage[i].base = Some(base);
    }

    fn ensure_job_by_node(&mut self) {
        if self.job_by_node.is_some() {
            return;
        }
        let mut m: FxMap<String, Vec<GroupId>> = FxMap::default();
        for a in self.state.allocs_by_job(&self.namespace, &self.job_id) {
            if a.terminal() || !self.is_job_alloc(&a) {
                continue;
            }
            let g = self.group_id(&a.task_group);
            m.entry(a.node_id.clone()).or_default().push(g);
        }
        self.job_by_node = Some(m);
    }

    /// Records that the allocation now holds `new` on the node, when the node's usage is
    /// being tracked.
    fn set_holding(&mut self, node_id: &str, id: &str, new: Option<Holding>, before: Before<'_>) {
        let Some(slot) = self.slots.get(node_id).copied() else {
            if !self.unreplayed.contains_key(node_id) {
                self.unreplayed.insert(node_id.to_string(), ());
            }
            return;
        };
        let prev = match self.usage[slot as usize].changed.remove(id) {
            Some(p) => p,
            None => match before {
                Before::Nothing => None,
                Before::State(a) => (!a.terminal()).then(|| self.holding(a)),
                Before::Lookup => {
                    self.load_allocs(slot);
                    let found = self.usage[slot as usize]
                        .base
                        .iter()
                        .flatten()
                        .find(|a| a.id == id)
                        .cloned();
                    found.map(|a| self.holding(&a))
                }
            },
        };
        let u = &mut self.usage[slot as usize];
        if let Some(p) = &prev {
            u.subtract(p);
        }
        if let Some(n) = &new {
            u.add(n);
        }
        u.changed.insert(id.to_string(), new);
    }

    /// Adds a new allocation (one the state does not have) to the plan.
    pub(crate) fn append_placement(&mut self, alloc: Allocation) {
        let h = self.holding(&alloc);
        if self.is_job_alloc(&alloc) {
            self.track(
                &alloc.id,
                Some((alloc.node_id.clone(), alloc.task_group.clone())),
            );
        }
        self.set_holding(&alloc.node_id, &alloc.id, Some(h), Before::Nothing);
        self.plan.append_alloc(alloc);
    }

    /// Adds an updated version of an existing allocation to the plan (in-place updates, or
    /// only new attributes).
    pub(crate) fn append_alloc(&mut self, alloc: Allocation) {
        // A terminal allocation updated in the plan (a follow-up eval id) holds nothing.
        let h = (!alloc.terminal()).then(|| self.holding(&alloc));
        if self.is_job_alloc(&alloc) {
            let live = h
                .is_some()
                .then(|| (alloc.node_id.clone(), alloc.task_group.clone()));
            self.track(&alloc.id, live);
        }
        self.set_holding(&alloc.node_id, &alloc.id, h, Before::Lookup);
        self.plan.append_alloc(alloc);
    }

    /// Adds a stop to the plan (Nomad's `AppendStoppedAlloc`). `alloc` is the state's version.
    pub(crate) fn append_stop(
        &mut self,
        alloc: &Allocation,
        description: &str,
        client_status: Option<&str>,
        followup_eval_id: Option<&str>,
    ) {
        if self.plan.job.is_none() && alloc.job.is_some() {
            self.plan.job = alloc.job.clone();
        }
        self.plan.append_stop(alloc, description, client_status);
        if let Some(f) = followup_eval_id
            && let Some(last) = self
                .plan
                .node_update
                .get_mut(&alloc.node_id)
                .and_then(|v| v.last_mut())
        {
            last.followup_eval_id = f.to_string();
        }
        if self.is_job_alloc(alloc) {
            self.track(&alloc.id, None);
        }
        self.set_holding(&alloc.node_id, &alloc.id, None, Before::State(alloc));
    }

    /// Adds a preemption to the plan (Nomad's `AppendPreemptedAlloc`). `alloc` is the state's
    /// version; `by` the id of the allocation that needs its resources.
    pub(crate) fn append_preemption(&mut self, alloc: &Allocation, by: &str) {
        self.plan.append_preempted(alloc, by);
        let key = (
            alloc.namespace.clone(),
            alloc.job_id.clone(),
            alloc.task_group.clone(),
        );
        *self.preempted.entry(key).or_insert(0) += 1;
        if self.is_job_alloc(alloc) {
            self.track(&alloc.id, None);
        }
        self.set_holding(&alloc.node_id, &alloc.id, None, Before::State(alloc));
    }

    /// How many allocations of the allocation's job and group the plan already preempts.
    pub(crate) fn preemptions_of(&self, alloc: &Allocation) -> usize {
        self.preempted
            .iter()
            .find(|((ns, job, tg), _)| {
                *ns == alloc.namespace && *job == alloc.job_id && *tg == alloc.task_group
            })
            .map(|(_, n)| *n)
            .unwrap_or(0)
    }

    /// Takes a stop back out of the plan (Nomad's `PopUpdate`), giving the node its resources
    /// back when the allocation is still live. `alloc` is the state's version.
    pub(crate) fn pop_update(&mut self, alloc: &Allocation) {
        let Some(updates) = self.plan.node_update.get_mut(&alloc.node_id) else {
            return;
        };
        if let Some(pos) = updates.iter().rposition(|a| a.id == alloc.id) {
            updates.remove(pos);
        }
        if updates.is_empty() {
            self.plan.node_update.remove(&alloc.node_id);
        }
        let in_plan = self
            .plan
            .node_allocation
            .get(&alloc.node_id)
            .and_then(|v| v.iter().rev().find(|a| a.id == alloc.id))
            .cloned();
        let now = match &in_plan {
            Some(a) => (!a.terminal()).then(|| self.holding(a)),
            None => (!alloc.terminal()).then(|| self.holding(alloc)),
        };
        if self.is_job_alloc(alloc) {
            let live = now
                .is_some()
                .then(|| (alloc.node_id.clone(), alloc.task_group.clone()));
            self.track(&alloc.id, live);
        }
        self.set_holding(&alloc.node_id, &alloc.id, now, Before::State(alloc));
    }

    /// The index of the count of the job's live allocations (of `group`, or all) per value of
    /// `attribute`; built on first use and maintained as the plan changes.
    pub(crate) fn property(&mut self, attribute: &str, group: Option<&str>) -> usize {
        if let Some(i) = self
            .properties
            .iter()
            .position(|p| p.attribute == attribute && p.group.as_deref() == group)
        {
            return i;
        }
        self.ensure_job_live();
        let mut counts: FxMap<String, u64> = FxMap::default();
        let live = self.job_live.as_ref().map(|l| {
            l.values()
                .filter(|(_, g)| group.is_none_or(|want| want == g))
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>()
        });
        for node_id in live.into_iter().flatten() {
            let Some(node) = self.node(&node_id) else {
                continue;
            };
            if let Some(v) = resolve_target(attribute, &node) {
                *counts.entry(v.to_string()).or_insert(0) += 1;
            }
        }
        self.properties.push(PropertyCount {
            attribute: attribute.to_string(),
            group: group.map(str::to_string),
            counts,
        });
        self.properties.len() - 1
    }

    pub(crate) fn property_count(&self, index: usize) -> &PropertyCount {
        &self.properties[index]
    }

    fn ensure_job_live(&mut self) {
        if self.job_live.is_some() {
            return;
        }
        let mut live: FxMap<String, (String, String)> = FxMap::default();
        for a in self.state.allocs_by_job(&self.namespace, &self.job_id) {
            if !a.terminal() {
                live.insert(a.id.clone(), (a.node_id.clone(), a.task_group.clone()));
            }
        }
        for a in self
            .plan
            .node_update
            .values()
            .chain(self.plan.node_preemptions.values())
            .flatten()
        {
            live.remove(&a.id);
        }
        for a in self.plan.node_allocation.values().flatten() {
            if !self.is_job_alloc(a) {
                continue;
            }
            if a.terminal() {
                live.remove(&a.id);
            } else {
                live.insert(a.id.clone(), (a.node_id.clone(), a.task_group.clone()));
            }
        }
        self.job_live = Some(live);
    }

    /// Moves one of the job's allocations in the live set and in every property count.
    fn track(&mut self, id: &str, now: Option<(String, String)>) {
        let Some(live) = self.job_live.as_mut() else {
            return;
        };
        let before = match &now {
            Some(v) => live.insert(id.to_string(), v.clone()),
            None => live.remove(id),
        };
        if self.properties.is_empty() {
            return;
        }
        for (sign, entry) in [(-1i64, before), (1, now)] {
            let Some((node_id, group)) = entry else {
                continue;
            };
            let Some(node) = lookup_node(&mut self.nodes, self.state, &node_id) else {
                continue;
            };
            for p in self.properties.iter_mut() {
                if p.group.as_ref().is_some_and(|g| *g != group) {
                    continue;
                }
                let Some(v) = resolve_target(&p.attribute, &node) else {
                    continue;
                };
                if sign > 0 {
                    *p.counts.entry(v.to_string()).or_insert(0) += 1;
                } else if let Some(c) = p.counts.get_mut(v) {
                    *c = c.saturating_sub(1);
                }
            }
        }
    }

    pub(crate) fn into_plan(self) -> Plan {
        self.plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{Harness, NodeBuilder, mock_alloc, mock_job, mock_node};
    use drover_structs::AllocatedPortMapping;

    fn with_port(mut a: Allocation, port: i64) -> Allocation {
        if let Some(ar) = a.allocated_resources.as_mut() {
            ar.shared.ports = Some(vec![AllocatedPortMapping {
                label: "http".into(),
                value: port,
                to: 0,
                host_ip: "192.168.0.100".into(),
            }]);
        }
        a
    }

    fn snapshot(u: &NodeUsage) -> (ComparableResources, usize, u32, bool, bool) {
        (
            u.used,
            u.job_allocs,
            u.collisions,
            u.port_used("192.168.0.100", 8080),
            u.port_used("192.168.0.100", 9090),
        )
    }

    fn ctx<'s>(
        state: &'s crate::harness::MemState,
        plan: Plan,
        job: &Arc<drover_structs::Job>,
    ) -> EvalContext<'s> {
        EvalContext::new(state, plan, &job.namespace, &job.id, Rng::seeded("e", 1))
    }

    #[test]
    fn incremental_usage_matches_a_fresh_computation() {
        incremental_usage_matches_a_fresh_computation_with(true);
        incremental_usage_matches_a_fresh_computation_with(false);
    }

    fn incremental_usage_matches_a_fresh_computation_with(summaries: bool) {
        let mut h = Harness::new();
        h.state.set_node_usage_summaries(summaries);
        let node = h.upsert_node(mock_node());
        let job = h.upsert_job(mock_job());
        let a = with_port(mock_alloc(&job, &node, 0), 8080);
        let b = mock_alloc(&job, &node, 1);
        h.upsert_alloc(a.clone());
        h.upsert_alloc(b.clone());
        let state = h.state.clone();
        let a = state.alloc(&a.id).unwrap();
        let mut ctx = ctx(&state, Plan::default(), &job);
        let before = snapshot(ctx.usage(&node));
        assert_eq!(before.0.cpu_shares, 1000);
        assert_eq!(before.1, 2);
        assert!(before.3);

        ctx.append_stop(&a, "x", None, None);
        let c = with_port(mock_alloc(&job, &node, 2), 9090);
        ctx.append_placement(c);
        let after = snapshot(ctx.usage(&node));
        assert_eq!(after.0.cpu_shares, 1000);
        assert!(!after.3 && after.4);

        let mut fresh = EvalContext::new(
            &state,
            ctx.plan.clone(),
            &job.namespace,
            &job.id,
            Rng::seeded("e", 1),
        );
        assert_eq!(snapshot(fresh.usage(&node)), after);

        ctx.pop_update(&a);
        let popped = snapshot(ctx.usage(&node));
        assert_eq!(popped.0.cpu_shares, 1500);
        assert!(popped.3 && popped.4);
        assert!(
            ctx.plan.node_update.is_empty(),
            "an emptied node entry is removed"
        );
    }

    #[test]
    fn duplicate_ports_count_as_a_collision_until_released() {
        let mut h = Harness::new();
        let node = h.upsert_node(mock_node());
        let job = h.upsert_job(mock_job());
        let a = with_port(mock_alloc(&job, &node, 0), 8080);
        h.upsert_alloc(a.clone());
        let state = h.state.clone();
        let mut ctx = ctx(&state, Plan::default(), &job);
        assert_eq!(ctx.usage(&node).collisions, 0);
        ctx.append_placement(with_port(mock_alloc(&job, &node, 1), 8080));
        assert_eq!(ctx.usage(&node).collisions, 1);
        ctx.append_stop(&a, "x", None, None);
        assert_eq!(ctx.usage(&node).collisions, 0);
        assert!(ctx.usage(&node).port_used("192.168.0.100", 8080));
    }

    #[test]
    fn terminal_allocations_in_the_plan_hold_nothing() {
        let mut h = Harness::new();
        let node = h.upsert_node(mock_node());
        let job = h.upsert_job(mock_job());
        let a = mock_alloc(&job, &node, 0);
        h.upsert_alloc(a.clone());
        let state = h.state.clone();
        let mut ctx = ctx(&state, Plan::default(), &job);
        assert_eq!(ctx.usage(&node).used.cpu_shares, 500);
        let mut failed = a.clone();
        failed.client_status = drover_structs::ALLOC_CLIENT_FAILED.into();
        failed.followup_eval_id = "f".into();
        ctx.append_alloc(failed);
        assert_eq!(ctx.usage(&node).used.cpu_shares, 0);
        let web = ctx.group_id("web");
        assert_eq!(ctx.usage(&node).group_allocs(web), 0);
    }

    #[test]
    fn preempted_allocations_free_their_node_and_are_counted_per_group() {
        let mut h = Harness::new();
        let node = h.upsert_node(mock_node());
        let job = h.upsert_job(mock_job());
        let other = h.upsert_job(mock_job());
        let victim = mock_alloc(&other, &node, 0);
        h.upsert_alloc(victim.clone());
        let state = h.state.clone();
        let victim = state.alloc(&victim.id).unwrap();
        let mut ctx = ctx(&state, Plan::default(), &job);
        assert_eq!(ctx.usage(&node).used.cpu_shares, 500);
        assert_eq!(
            ctx.usage(&node).untouched().count(),
            0,
            "allocations are read only when needed"
        );
        let slot = ctx.usage_slot(&node);
        ctx.load_allocs(slot);
        assert_eq!(ctx.usage(&node).untouched().count(), 1);
        ctx.append_preemption(&victim, "new-alloc");
        assert_eq!(ctx.usage(&node).used.cpu_shares, 0);
        assert_eq!(ctx.usage(&node).untouched().count(), 0);
        assert_eq!(ctx.preemptions_of(&victim), 1);
        let p = &ctx.plan.node_preemptions[&node.id][0];
        assert_eq!(p.preempted_by_allocation, "new-alloc");
        assert_eq!(p.desired_description, "Preempted by alloc ID new-alloc");
        // A node first looked at after the preemption sees it too.
        let mut fresh = EvalContext::new(
            &state,
            ctx.plan.clone(),
            &job.namespace,
            &job.id,
            Rng::seeded("e", 1),
        );
        assert_eq!(fresh.usage(&node).used.cpu_shares, 0);
    }

    #[test]
    fn property_counts_follow_the_plan() {
        let mut h = Harness::new();
        let r1 = h.upsert_node(NodeBuilder::new().meta("rack", "r1").build());
        let r2 = h.upsert_node(NodeBuilder::new().meta("rack", "r2").build());
        let job = h.upsert_job(mock_job());
        let a = mock_alloc(&job, &r1, 0);
        h.upsert_alloc(a.clone());
        let state = h.state.clone();
        let a = state.alloc(&a.id).unwrap();
        let mut ctx = ctx(&state, Plan::default(), &job);
        let p = ctx.property("${meta.rack}", Some("web"));
        assert_eq!(ctx.property("${meta.rack}", Some("web")), p, "built once");
        assert_eq!(ctx.property_count(p).counts.get("r1"), Some(&1));
        ctx.append_placement(mock_alloc(&job, &r2, 1));
        ctx.append_placement(mock_alloc(&job, &r2, 2));
        ctx.append_stop(&a, "x", None, None);
        let counts = &ctx.property_count(p).counts;
        assert_eq!((counts.get("r1"), counts.get("r2")), (Some(&0), Some(&2)));
        let other_group = ctx.property("${meta.rack}", Some("db"));
        assert!(ctx.property_count(other_group).counts.is_empty());
    }
}
