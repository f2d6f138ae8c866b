//! The state of one scheduling attempt: the plan being built and, per node, what the node would
//! hold if the plan were applied (Nomad's `ProposedAllocs`), kept up to date incrementally as
//! the plan grows so that a placement never rescans a node's allocations.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use drover_structs::{Allocation, ComparableResources, Node, Plan};

use crate::State;
use crate::constraints::Matcher;
use crate::feasible::EvalEligibility;
use crate::fit::{alloc_resources, for_each_port, parse_port_range};
use crate::util::Rng;

/// What one allocation takes from its node.
struct Contribution {
    resources: ComparableResources,
    ports: Vec<(String, i64)>,
    /// The group, when the allocation belongs to the job being scheduled.
    job_group: Option<String>,
}

/// A node's proposed usage: existing live allocations, minus those the plan stops, plus those
/// the plan places or updates.
#[derive(Default)]
pub(crate) struct NodeUsage {
    allocs: HashMap<String, Contribution>,
    pub used: ComparableResources,
    ports: HashMap<String, HashMap<i64, u32>>,
    /// How many (ip, port) pairs are held more than once: a node already in conflict.
    pub collisions: u32,
    pub job_allocs: usize,
    job_groups: HashMap<String, usize>,
    /// The node's reserved host port ranges.
    pub reserved: Vec<(i64, i64)>,
}

impl NodeUsage {
    pub(crate) fn port_used(&self, ip: &str, port: i64) -> bool {
        self.reserved
            .iter()
            .any(|(lo, hi)| *lo <= port && port <= *hi)
            || self
                .ports
                .get(ip)
                .is_some_and(|m| m.get(&port).is_some_and(|n| *n > 0))
    }

    /// Allocations of the scheduled job's group `tg` on this node.
    pub(crate) fn group_allocs(&self, tg: &str) -> usize {
        self.job_groups.get(tg).copied().unwrap_or(0)
    }

    fn contains(&self, id: &str) -> bool {
        self.allocs.contains_key(id)
    }

    fn insert(&mut self, id: String, c: Contribution) {
        self.remove(&id);
        self.used.add(&c.resources);
        for (ip, port) in &c.ports {
            let held = self
                .ports
                .entry(ip.clone())
                .or_default()
                .entry(*port)
                .or_insert(0);
            *held += 1;
            if *held == 2 {
                self.collisions += 1;
            }
        }
        if let Some(g) = &c.job_group {
            self.job_allocs += 1;
            *self.job_groups.entry(g.clone()).or_insert(0) += 1;
        }
        self.allocs.insert(id, c);
    }

    fn remove(&mut self, id: &str) {
        let Some(c) = self.allocs.remove(id) else {
            return;
        };
        self.used.subtract(&c.resources);
        for (ip, port) in &c.ports {
            if let Some(held) = self.ports.get_mut(ip).and_then(|m| m.get_mut(port)) {
                if *held == 2 {
                    self.collisions = self.collisions.saturating_sub(1);
                }
                *held = held.saturating_sub(1);
            }
        }
        if let Some(g) = &c.job_group {
            self.job_allocs = self.job_allocs.saturating_sub(1);
            if let Some(n) = self.job_groups.get_mut(g) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

pub(crate) struct EvalContext<'s> {
    pub state: &'s dyn State,
    pub plan: Plan,
    namespace: String,
    job_id: String,
    usage: HashMap<String, NodeUsage>,
    nodes: HashMap<String, Option<Arc<Node>>>,
    pub eligibility: EvalEligibility,
    pub matcher: Matcher,
    pub rng: Rng,
    /// Every allocation of the job in the state (for `distinct_property`).
    pub job_allocs: Vec<Arc<Allocation>>,
}

impl<'s> EvalContext<'s> {
    pub(crate) fn new(
        state: &'s dyn State,
        plan: Plan,
        namespace: &str,
        job_id: &str,
        rng: Rng,
    ) -> Self {
        EvalContext {
            state,
            plan,
            namespace: namespace.to_string(),
            job_id: job_id.to_string(),
            usage: HashMap::new(),
            nodes: HashMap::new(),
            eligibility: EvalEligibility::default(),
            matcher: Matcher::default(),
            rng,
            job_allocs: Vec::new(),
        }
    }

    /// A node by id, looked up once per attempt.
    pub(crate) fn node(&mut self, id: &str) -> Option<Arc<Node>> {
        if let Some(n) = self.nodes.get(id) {
            return n.clone();
        }
        let n = self.state.node(id);
        self.nodes.insert(id.to_string(), n.clone());
        n
    }

    fn contribution(&self, alloc: &Allocation) -> Contribution {
        let mut ports = Vec::new();
        for_each_port(alloc, |ip, port| ports.push((ip.to_string(), port)));
        let same_job = alloc.job_id == self.job_id
            && (alloc.namespace == self.namespace || alloc.namespace.is_empty());
        Contribution {
            resources: alloc_resources(alloc),
            ports,
            job_group: same_job.then(|| alloc.task_group.clone()),
        }
    }

    /// The node's proposed usage, computed on first use and maintained from then on.
    pub(crate) fn usage(&mut self, node: &Node) -> &NodeUsage {
        if !self.usage.contains_key(&node.id) {
            let usage = self.compute_usage(node);
            self.usage.insert(node.id.clone(), usage);
        }
        // Inserted just above when missing.
        &self.usage[&node.id]
    }

    /// The node's proposed usage together with the random source, for port picking.
    pub(crate) fn usage_and_rng(&mut self, node: &Node) -> (&NodeUsage, &mut Rng) {
        if !self.usage.contains_key(&node.id) {
            let usage = self.compute_usage(node);
            self.usage.insert(node.id.clone(), usage);
        }
        // Inserted just above when missing.
        (&self.usage[&node.id], &mut self.rng)
    }

    fn compute_usage(&self, node: &Node) -> NodeUsage {
        let mut u = NodeUsage {
            reserved: node
                .reserved_resources
                .networks
                .reserved_host_ports
                .split(',')
                .filter_map(parse_port_range)
                .collect(),
            ..Default::default()
        };
        let stopped: HashSet<&str> = self
            .plan
            .node_update
            .get(&node.id)
            .into_iter()
            .flatten()
            .map(|a| a.id.as_str())
            .collect();
        for alloc in self.state.allocs_by_node(&node.id) {
            if alloc.terminal() || stopped.contains(alloc.id.as_str()) {
                continue;
            }
            u.insert(alloc.id.clone(), self.contribution(&alloc));
        }
        for alloc in self
            .plan
            .node_allocation
            .get(&node.id)
            .into_iter()
            .flatten()
        {
            if alloc.terminal() {
                u.remove(&alloc.id);
            } else {
                u.insert(alloc.id.clone(), self.contribution(alloc));
            }
        }
        u
    }

    /// Adds a new or updated allocation to the plan.
    pub(crate) fn append_alloc(&mut self, alloc: Allocation) {
        if self.usage.contains_key(&alloc.node_id) {
            // A terminal allocation updated in the plan (a follow-up eval id) holds nothing.
            let contribution = (!alloc.terminal()).then(|| self.contribution(&alloc));
            if let Some(usage) = self.usage.get_mut(&alloc.node_id) {
                match contribution {
                    Some(c) => usage.insert(alloc.id.clone(), c),
                    None => usage.remove(&alloc.id),
                }
            }
        }
        self.plan.append_alloc(alloc);
    }

    /// Adds a stop to the plan (Nomad's `AppendStoppedAlloc`).
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
        if let Some(usage) = self.usage.get_mut(&alloc.node_id) {
            usage.remove(&alloc.id);
        }
    }

    /// Takes a stop back out of the plan (Nomad's `PopUpdate`), giving the node its resources
    /// back when the allocation is still live.
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
        let replaced_in_plan = self
            .plan
            .node_allocation
            .get(&alloc.node_id)
            .is_some_and(|v| v.iter().any(|a| a.id == alloc.id));
        if alloc.terminal() || replaced_in_plan {
            return;
        }
        let contribution = self.contribution(alloc);
        if let Some(usage) = self.usage.get_mut(&alloc.node_id)
            && !usage.contains(&alloc.id)
        {
            usage.insert(alloc.id.clone(), contribution);
        }
    }

    pub(crate) fn into_plan(self) -> Plan {
        self.plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{Harness, mock_alloc, mock_job, mock_node};
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

    #[test]
    fn incremental_usage_matches_a_fresh_computation() {
        let mut h = Harness::new();
        let node = h.upsert_node(mock_node());
        let job = h.upsert_job(mock_job());
        let a = with_port(mock_alloc(&job, &node, 0), 8080);
        let b = mock_alloc(&job, &node, 1);
        h.upsert_alloc(a.clone());
        h.upsert_alloc(b.clone());
        let state = h.state.clone();
        let plan = Plan::default();
        let mut ctx = EvalContext::new(&state, plan, &job.namespace, &job.id, Rng::seeded("e", 1));
        let before = snapshot(ctx.usage(&node));
        assert_eq!(before.0.cpu_shares, 1000);
        assert_eq!(before.1, 2);
        assert!(before.3);

        ctx.append_stop(&a, "x", None, None);
        let c = with_port(mock_alloc(&job, &node, 2), 9090);
        ctx.append_alloc(c);
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
        let mut ctx = EvalContext::new(
            &state,
            Plan::default(),
            &job.namespace,
            &job.id,
            Rng::seeded("e", 1),
        );
        assert_eq!(ctx.usage(&node).collisions, 0);
        ctx.append_alloc(with_port(mock_alloc(&job, &node, 1), 8080));
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
        let mut ctx = EvalContext::new(
            &state,
            Plan::default(),
            &job.namespace,
            &job.id,
            Rng::seeded("e", 1),
        );
        assert_eq!(ctx.usage(&node).used.cpu_shares, 500);
        let mut failed = a.clone();
        failed.client_status = drover_structs::ALLOC_CLIENT_FAILED.into();
        failed.followup_eval_id = "f".into();
        ctx.append_alloc(failed);
        assert_eq!(ctx.usage(&node).used.cpu_shares, 0);
        assert_eq!(ctx.usage(&node).group_allocs("web"), 0);
    }
}
