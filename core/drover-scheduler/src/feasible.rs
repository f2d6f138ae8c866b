//! Feasibility: which nodes a job may run on at all, before resources are considered. Ready
//! nodes in the job's datacenters, the task drivers, the job, group and task constraints, the
//! group's network mode; plus Nomad's per-computed-class memo of those verdicts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use drover_structs::{
    Affinity, Constraint, Job, NODE_STATUS_DOWN, Node, Spread, TaskGroup, VecMap,
};

use crate::State;
use crate::constraints::{DISTINCT_HOSTS, DISTINCT_PROPERTY, constraint_escapes};
use crate::util::FxMap;

pub(crate) const FILTER_MISSING_DRIVERS: &str = "missing drivers";
pub(crate) const FILTER_MISSING_NETWORK: &str = "missing network";
pub(crate) const FILTER_CLASS_INELIGIBLE: &str = "computed class ineligible";

/// Whether new allocations may be placed on the node: ready, eligible, not draining.
pub(crate) fn schedulable(node: &Node) -> bool {
    node.ready() && node.drain_strategy.as_ref().is_none_or(|d| d.is_null())
}

/// Whether the node's allocations must move or be replaced: it is down, draining, or gone.
pub(crate) fn tainted(node: Option<&Node>) -> bool {
    match node {
        None => true,
        Some(n) => {
            n.status == NODE_STATUS_DOWN
                || n.drain
                || n.drain_strategy.as_ref().is_some_and(|d| !d.is_null())
        }
    }
}

/// Nomad's `readyNodesInDCsAndPool` (1.5+): schedulable nodes in a datacenter one of the job's
/// globs matches (`Node::is_in_any_dc`), and how many there are per node datacenter (keyed by
/// the nodes' datacenters, so a datacenter without ready nodes does not appear).
pub(crate) fn ready_nodes_in_dcs(
    state: &dyn State,
    dcs: &[String],
) -> (Vec<Arc<Node>>, VecMap<String, i64>) {
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut out = Vec::new();
    for node in state.nodes() {
        if !schedulable(&node) || !node.is_in_any_dc(dcs) {
            continue;
        }
        *counts.entry(node.datacenter.clone()).or_default() += 1;
        out.push(node);
    }
    let by_dc: VecMap<String, i64> = counts.into_iter().collect();
    // The store's iteration order is not part of the contract; sort (when it is not already
    // by id) so that a seeded shuffle gives the same order for the same nodes.
    if !out.is_sorted_by(|a, b| a.id <= b.id) {
        out.sort_by(|a, b| a.id.cmp(&b.id));
    }
    (out, by_dc)
}

/// What one task group needs from a node, gathered once per placement.
pub(crate) struct GroupRequirements<'j> {
    pub job_constraints: Vec<&'j Constraint>,
    pub drivers: BTreeSet<&'j str>,
    /// Group and task constraints.
    pub constraints: Vec<&'j Constraint>,
    /// A network mode other than host that the node must offer (`bridge`, `cni/...`).
    pub network_mode: Option<&'j str>,
    pub job_distinct_hosts: bool,
    pub group_distinct_hosts: bool,
    /// `distinct_property` constraints, with whether each is the job's (true) or the group's.
    pub distinct_properties: Vec<(&'j Constraint, bool)>,
    pub affinities: Vec<&'j Affinity>,
    /// The job's spread blocks, then the group's.
    pub spreads: Vec<&'j Spread>,
}

impl<'j> GroupRequirements<'j> {
    pub(crate) fn new(job: &'j Job, tg: &'j TaskGroup) -> Self {
        let job_cs: Vec<&Constraint> = job.constraints.iter().flatten().collect();
        let group_cs: Vec<&Constraint> = tg
            .constraints
            .iter()
            .flatten()
            .chain(tg.tasks.iter().flat_map(|t| t.constraints.iter().flatten()))
            .collect();
        let distinct_properties = job_cs
            .iter()
            .filter(|c| c.operand == DISTINCT_PROPERTY)
            .map(|c| (*c, true))
            .chain(
                tg.constraints
                    .iter()
                    .flatten()
                    .filter(|c| c.operand == DISTINCT_PROPERTY)
                    .map(|c| (c, false)),
            )
            .collect();
        let network_mode = tg
            .networks
            .iter()
            .flatten()
            .next()
            .map(|n| n.mode.as_str())
            .filter(|m| !matches!(*m, "" | "host" | "none"));
        GroupRequirements {
            job_distinct_hosts: has_distinct_hosts(&job_cs),
            group_distinct_hosts: has_distinct_hosts(
                &tg.constraints.iter().flatten().collect::<Vec<_>>(),
            ),
            job_constraints: job_cs,
            drivers: tg.tasks.iter().map(|t| t.driver.as_str()).collect(),
            constraints: group_cs,
            network_mode,
            distinct_properties,
            affinities: job
                .affinities
                .iter()
                .flatten()
                .chain(tg.affinities.iter().flatten())
                .chain(tg.tasks.iter().flat_map(|t| t.affinities.iter().flatten()))
                .collect(),
            spreads: job
                .spreads
                .iter()
                .flatten()
                .chain(tg.spreads.iter().flatten())
                .collect(),
        }
    }
}

/// `distinct_hosts` applies when present, unless its value says false.
fn has_distinct_hosts(cs: &[&Constraint]) -> bool {
    cs.iter().any(|c| {
        c.operand == DISTINCT_HOSTS
            && (c.r_target.is_empty() || c.r_target.parse::<bool>().unwrap_or(true))
    })
}

/// Nomad's driver check: a driver with fingerprinted info must be detected and healthy; an old
/// client without driver info must carry a true `driver.<name>` attribute.
pub(crate) fn has_drivers(node: &Node, drivers: &BTreeSet<&str>) -> bool {
    drivers.iter().all(|d| match node.drivers.get(*d) {
        Some(info) => info.detected && info.healthy,
        None => node
            .attributes
            .get(&format!("driver.{d}"))
            .is_some_and(|v| parse_go_bool(v)),
    })
}

fn parse_go_bool(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// Whether the node offers the network mode (host mode is always assumed present).
pub(crate) fn has_network_mode(node: &Node, mode: &str) -> bool {
    node.node_resources
        .networks
        .iter()
        .flatten()
        .any(|n| n.mode == mode)
}

/// A memoised verdict for one computed class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassVerdict {
    Unknown,
    Eligible,
    Ineligible,
    /// Constraints use node-unique targets (or the node has no class): every node must be
    /// checked.
    Escaped,
}

/// A computed class, interned: an index into [`EvalEligibility`]'s class table.
pub(crate) type ClassId = u32;

#[derive(Debug, Default)]
struct GroupEligibility {
    name: String,
    escaped: bool,
    verdicts: Vec<Option<bool>>,
}

/// Nomad's `EvalEligibility`: per computed class, whether the job's and each group's
/// constraints hold, so that the remaining nodes of a class skip the checks. Classes are
/// interned once per node visit list, so a verdict is a vector lookup.
#[derive(Debug, Default)]
pub(crate) struct EvalEligibility {
    class_names: Vec<String>,
    class_ids: FxMap<String, ClassId>,
    job: Vec<Option<bool>>,
    job_escaped: bool,
    groups: Vec<GroupEligibility>,
}

fn verdict(escaped: bool, class: Option<ClassId>, table: &[Option<bool>]) -> ClassVerdict {
    let Some(class) = class.filter(|_| !escaped) else {
        return ClassVerdict::Escaped;
    };
    match table.get(class as usize).copied().flatten() {
        Some(true) => ClassVerdict::Eligible,
        Some(false) => ClassVerdict::Ineligible,
        None => ClassVerdict::Unknown,
    }
}

fn record(table: &mut Vec<Option<bool>>, class: ClassId, eligible: bool) {
    let i = class as usize;
    if table.len() <= i {
        table.resize(i + 1, None);
    }
    table[i] = Some(eligible);
}

impl EvalEligibility {
    pub(crate) fn set_job(&mut self, job: &Job) {
        self.job_escaped = job.constraints.iter().flatten().any(constraint_escapes);
        for tg in &job.task_groups {
            let escaped = tg
                .constraints
                .iter()
                .flatten()
                .chain(tg.tasks.iter().flat_map(|t| t.constraints.iter().flatten()))
                .any(constraint_escapes);
            let g = self.group_index(&tg.name);
            self.groups[g].escaped = escaped;
        }
    }

    /// The interned id of a computed class; `None` for nodes without one (never memoised).
    pub(crate) fn class_id(&mut self, class: &str) -> Option<ClassId> {
        if class.is_empty() {
            return None;
        }
        if let Some(id) = self.class_ids.get(class) {
            return Some(*id);
        }
        let id = self.class_names.len() as ClassId;
        self.class_names.push(class.to_string());
        self.class_ids.insert(class.to_string(), id);
        Some(id)
    }

    /// The index of a group's verdicts (created empty for a group `set_job` did not see).
    pub(crate) fn group_index(&mut self, tg: &str) -> usize {
        if let Some(i) = self.groups.iter().position(|g| g.name == tg) {
            return i;
        }
        self.groups.push(GroupEligibility {
            name: tg.to_string(),
            ..Default::default()
        });
        self.groups.len() - 1
    }

    pub(crate) fn job_status(&self, class: Option<ClassId>) -> ClassVerdict {
        verdict(self.job_escaped, class, &self.job)
    }

    pub(crate) fn set_job_eligibility(&mut self, eligible: bool, class: ClassId) {
        record(&mut self.job, class, eligible);
    }

    pub(crate) fn group_status(&self, group: usize, class: Option<ClassId>) -> ClassVerdict {
        match self.groups.get(group) {
            Some(g) => verdict(g.escaped, class, &g.verdicts),
            None => ClassVerdict::Escaped,
        }
    }

    pub(crate) fn set_group_eligibility(&mut self, eligible: bool, group: usize, class: ClassId) {
        if let Some(g) = self.groups.get_mut(group) {
            record(&mut g.verdicts, class, eligible);
        }
    }

    /// Whether any constraint escaped class memoisation (then a blocked evaluation must be
    /// retried on any capacity change, not only its classes').
    pub(crate) fn has_escaped(&self) -> bool {
        self.job_escaped || self.groups.iter().any(|g| g.escaped)
    }

    /// Nomad's `GetClasses`: a class is eligible when some group may use it and the job's own
    /// constraints do not rule it out.
    pub(crate) fn classes(&self) -> BTreeMap<String, bool> {
        let name = |i: usize| self.class_names.get(i).cloned().unwrap_or_default();
        let mut out: BTreeMap<String, bool> = BTreeMap::new();
        for g in &self.groups {
            for (i, v) in g.verdicts.iter().enumerate() {
                match v {
                    Some(true) => {
                        out.insert(name(i), true);
                    }
                    Some(false) => {
                        out.entry(name(i)).or_insert(false);
                    }
                    None => {}
                }
            }
        }
        for (i, v) in self.job.iter().enumerate() {
            match v {
                Some(true) => {
                    out.entry(name(i)).or_insert(true);
                }
                Some(false) => {
                    out.insert(name(i), false);
                }
                None => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::DriverInfo;

    #[test]
    fn drivers_need_detected_and_healthy_or_a_true_legacy_attribute() {
        let mut n = Node::default();
        n.drivers.insert(
            "exec".into(),
            DriverInfo {
                detected: true,
                healthy: true,
                ..Default::default()
            },
        );
        n.drivers.insert(
            "docker".into(),
            DriverInfo {
                detected: true,
                healthy: false,
                ..Default::default()
            },
        );
        n.attributes.insert("driver.raw_exec".into(), "1".into());
        n.attributes.insert("driver.java".into(), "0".into());
        let want = |d: &[&'static str]| d.iter().copied().collect::<BTreeSet<&str>>();
        assert!(has_drivers(&n, &want(&["exec", "raw_exec"])));
        assert!(!has_drivers(&n, &want(&["docker"])));
        assert!(!has_drivers(&n, &want(&["java"])));
        assert!(!has_drivers(&n, &want(&["qemu"])));
    }

    #[test]
    fn eligibility_memoises_per_class_and_merges_job_and_groups() {
        let mut e = EvalEligibility::default();
        e.set_job(&Job {
            task_groups: vec![TaskGroup {
                name: "g".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let (c1, c2, c3) = (e.class_id("c1"), e.class_id("c2"), e.class_id("c3"));
        assert_eq!(e.class_id("c1"), c1, "a class is interned once");
        let g = e.group_index("g");
        assert_eq!(e.job_status(c1), ClassVerdict::Unknown);
        e.set_job_eligibility(true, c1.unwrap());
        e.set_job_eligibility(false, c2.unwrap());
        e.set_group_eligibility(false, g, c1.unwrap());
        e.set_group_eligibility(true, g, c3.unwrap());
        assert_eq!(e.job_status(c1), ClassVerdict::Eligible);
        assert_eq!(e.group_status(g, c1), ClassVerdict::Ineligible);
        assert_eq!(e.group_status(g, c2), ClassVerdict::Unknown);
        assert_eq!(e.class_id(""), None);
        assert_eq!(e.job_status(None), ClassVerdict::Escaped);
        let classes = e.classes();
        assert_eq!(classes.get("c1"), Some(&false));
        assert_eq!(classes.get("c2"), Some(&false));
        assert_eq!(classes.get("c3"), Some(&true));
        assert!(!e.has_escaped());
    }

    #[test]
    fn unique_constraints_escape_the_group() {
        let mut e = EvalEligibility::default();
        e.set_job(&Job {
            task_groups: vec![TaskGroup {
                name: "g".into(),
                constraints: Some(vec![Constraint {
                    l_target: "${node.unique.name}".into(),
                    operand: "=".into(),
                    r_target: "a".into(),
                }]),
                ..Default::default()
            }],
            ..Default::default()
        });
        let (g, c1) = (e.group_index("g"), e.class_id("c1"));
        assert_eq!(e.group_status(g, c1), ClassVerdict::Escaped);
        assert!(e.has_escaped());
    }
}
