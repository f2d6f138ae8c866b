//! Compiled permissions (Nomad's `acl.ACL`): the policies of a token merged into one
//! structure that requests are checked against.
//!
//! Merging follows Nomad's `NewACL`: per namespace, node pool or host volume name the
//! capabilities of every rule are unioned, except that `deny` clears them and then stays; for
//! the single-level blocks the most permissive level wins, deny over all
//! (deny > write > read > list). Names holding `*` are globs; a request is matched against the
//! exact name first, then against the closest matching glob.

use std::collections::{BTreeMap, BTreeSet};

use super::{CAP_DENY, OPERATOR_CAP_DENY, Policy, PolicyLevel, VARIABLES_CAP_DENY};

type CapabilitySet = BTreeSet<String>;

/// Capability sets by exact name and by glob. `BTreeMap` walks keys in byte order, as Nomad's
/// radix trees do, which decides ties between equally close globs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Rules {
    exact: BTreeMap<String, CapabilitySet>,
    globs: BTreeMap<String, CapabilitySet>,
}

/// The key variables rules are kept and matched under (Nomad's): namespace, NUL, path.
fn variable_key(ns: &str, path: &str) -> String {
    format!("{ns}\u{0}{path}")
}

impl Rules {
    /// Adds one rule's capabilities. Deny already there wins; deny in the rule replaces
    /// whatever was there. The entry is made even for a rule granting nothing, so an exact
    /// rule without capabilities still hides the globs, as in Nomad.
    fn add(&mut self, name: &str, capabilities: &[String], deny: &str) {
        let map = if name.contains('*') {
            &mut self.globs
        } else {
            &mut self.exact
        };
        let set = map.entry(name.to_string()).or_default();
        merge_capabilities(set, capabilities, deny);
    }

    /// Nomad's `matching*CapabilitySet`: the exact rule, else the closest glob.
    fn matching(&self, name: &str) -> Option<&CapabilitySet> {
        self.exact
            .get(name)
            .or_else(|| closest_matching_glob(&self.globs, name))
    }

    fn all(&self) -> impl Iterator<Item = &CapabilitySet> {
        self.exact.values().chain(self.globs.values())
    }
}

fn merge_capabilities(set: &mut CapabilitySet, capabilities: &[String], deny: &str) {
    if set.contains(deny) {
        return;
    }
    for cap in capabilities {
        if cap == deny {
            set.clear();
            set.insert(deny.to_string());
            return;
        }
        set.insert(cap.clone());
    }
}

/// Nomad's `findClosestMatchingGlob`: among the globs matching `name`, the one with the
/// smallest difference `len(name) - len(glob) + count("*")`, that is the one whose literal part
/// covers most of the name. Nomad stable-sorts with a `<=` comparison, which puts the last of
/// equally close globs (in byte order) first; so does the `<=` here.
fn closest_matching_glob<'a>(
    globs: &'a BTreeMap<String, CapabilitySet>,
    name: &str,
) -> Option<&'a CapabilitySet> {
    let mut best: Option<(isize, &CapabilitySet)> = None;
    for (pattern, set) in globs {
        if !glob_match(pattern, name) {
            continue;
        }
        let stars = pattern.matches('*').count();
        let difference = name.len() as isize - pattern.len() as isize + stars as isize;
        if best.is_none_or(|(d, _)| difference <= d) {
            best = Some((difference, set));
        }
    }
    best.map(|(_, set)| set)
}

/// `*` matches any run of characters (go-glob, as Nomad uses it): the parts between stars must
/// appear in order, the first at the start unless the pattern opens with `*`, the last at the
/// end unless it closes with `*`. Each middle part takes its first occurrence.
pub(super) fn glob_match(pattern: &str, subject: &str) -> bool {
    if pattern.is_empty() {
        return subject.is_empty();
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let [middle @ .., last] = parts.as_slice() else {
        return false; // split yields at least one part
    };
    if middle.is_empty() {
        return subject == pattern;
    }
    let leading = pattern.starts_with('*');
    let trailing = pattern.ends_with('*');
    let mut rest = subject;
    for (i, part) in middle.iter().enumerate() {
        let Some(idx) = rest.find(part) else {
            return false;
        };
        if i == 0 && !leading && idx != 0 {
            return false;
        }
        rest = &rest[idx + part.len()..];
    }
    trailing || rest.ends_with(last)
}

/// Nomad's `maxPrivilege`: deny over everything, then write, read, list. `scale` alone merges
/// to nothing, as in Nomad.
fn max_privilege(a: Option<PolicyLevel>, b: Option<PolicyLevel>) -> Option<PolicyLevel> {
    let either = |l| a == Some(l) || b == Some(l);
    [
        PolicyLevel::Deny,
        PolicyLevel::Write,
        PolicyLevel::Read,
        PolicyLevel::List,
    ]
    .into_iter()
    .find(|l| either(*l))
}

/// The permissions of a token: management (everything), or its policies merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    management: bool,
    namespaces: Rules,
    node_pools: Rules,
    host_volumes: Rules,
    /// Variables path rules by `variable_key` (a glob when the namespace or the path holds
    /// `*`).
    variables: Rules,
    agent: Option<PolicyLevel>,
    node: Option<PolicyLevel>,
    operator: Option<PolicyLevel>,
    operator_capabilities: CapabilitySet,
    quota: Option<PolicyLevel>,
    plugin: Option<PolicyLevel>,
}

impl Acl {
    /// The ACL of a management token: every check passes.
    pub fn management() -> Acl {
        Acl {
            management: true,
            ..Acl::default()
        }
    }

    /// Merges policies (Nomad's `NewACL`). No policies grant nothing.
    pub fn from_policies(policies: &[Policy]) -> Acl {
        let mut acl = Acl::default();
        for policy in policies {
            for ns in &policy.namespaces {
                acl.namespaces.add(&ns.name, &ns.capabilities, CAP_DENY);
                for path in ns.variables.iter().flat_map(|v| &v.paths) {
                    acl.variables.add(
                        &variable_key(&ns.name, &path.path_spec),
                        &path.capabilities,
                        VARIABLES_CAP_DENY,
                    );
                }
            }
            for pool in &policy.node_pools {
                acl.node_pools.add(&pool.name, &pool.capabilities, CAP_DENY);
            }
            for hv in &policy.host_volumes {
                acl.host_volumes.add(&hv.name, &hv.capabilities, CAP_DENY);
            }
            if let Some(level) = policy.agent {
                acl.agent = max_privilege(acl.agent, Some(level));
            }
            if let Some(level) = policy.node {
                acl.node = max_privilege(acl.node, Some(level));
            }
            if let Some(op) = &policy.operator {
                acl.operator = max_privilege(acl.operator, op.policy);
                merge_capabilities(
                    &mut acl.operator_capabilities,
                    &op.capabilities,
                    OPERATOR_CAP_DENY,
                );
            }
            if let Some(level) = policy.quota {
                acl.quota = max_privilege(acl.quota, Some(level));
            }
            if let Some(level) = policy.plugin {
                acl.plugin = max_privilege(acl.plugin, Some(level));
            }
        }
        acl
    }

    pub fn is_management(&self) -> bool {
        self.management
    }

    /// Whether `capability` is granted in namespace `ns`. For `ns == "*"` (all namespaces)
    /// it is enough that any namespace rule grants it.
    pub fn allow_namespace_operation(&self, ns: &str, capability: &str) -> bool {
        if self.management {
            return true;
        }
        if ns == "*" && self.namespaces.all().any(|set| set.contains(capability)) {
            return true;
        }
        self.namespaces
            .matching(ns)
            .is_some_and(|set| set.contains(capability))
    }

    /// Whether anything at all is granted in namespace `ns` (a rule granting capabilities and
    /// not deny). For `ns == "*"` it is enough that any namespace rule grants something.
    pub fn allow_namespace(&self, ns: &str) -> bool {
        if self.management {
            return true;
        }
        if ns == "*" && self.namespaces.all().any(grants_something) {
            return true;
        }
        self.namespaces.matching(ns).is_some_and(grants_something)
    }

    /// Whether variables `capability` (list, read, write, destroy) is granted on `path` in
    /// namespace `ns` (Nomad's `AllowVariableOperation`): the exact rule, else the closest
    /// glob over namespace and path together. A namespace's `policy` grants no variables.
    pub fn allow_variable_operation(&self, ns: &str, path: &str, capability: &str) -> bool {
        self.management
            || self
                .variables
                .matching(&variable_key(ns, path))
                .is_some_and(|set| set.contains(capability))
    }

    /// Whether `capability` is granted on node pool `pool`.
    pub fn allow_node_pool_operation(&self, pool: &str, capability: &str) -> bool {
        self.management
            || self
                .node_pools
                .matching(pool)
                .is_some_and(|set| set.contains(capability))
    }

    /// Whether anything is granted on node pool `pool`.
    pub fn allow_node_pool(&self, pool: &str) -> bool {
        self.management || self.node_pools.matching(pool).is_some_and(grants_something)
    }

    /// Whether `capability` (mount-readonly, mount-readwrite) is granted on host volume `name`.
    pub fn allow_host_volume_operation(&self, name: &str, capability: &str) -> bool {
        self.management
            || self
                .host_volumes
                .matching(name)
                .is_some_and(|set| set.contains(capability))
    }

    /// Whether anything is granted on host volume `name`.
    pub fn allow_host_volume(&self, name: &str) -> bool {
        self.management
            || self
                .host_volumes
                .matching(name)
                .is_some_and(grants_something)
    }

    pub fn allow_agent_read(&self) -> bool {
        self.management || read_or_write(self.agent)
    }

    pub fn allow_agent_write(&self) -> bool {
        self.management || self.agent == Some(PolicyLevel::Write)
    }

    pub fn allow_node_read(&self) -> bool {
        self.management || read_or_write(self.node)
    }

    pub fn allow_node_write(&self) -> bool {
        self.management || self.node == Some(PolicyLevel::Write)
    }

    pub fn allow_operator_read(&self) -> bool {
        self.management || read_or_write(self.operator)
    }

    pub fn allow_operator_write(&self) -> bool {
        self.management || self.operator == Some(PolicyLevel::Write)
    }

    /// Whether an operator capability (snapshot-save, license-read) is granted: merged like a
    /// namespace's capabilities, deny clearing the rest.
    pub fn allow_operator_operation(&self, capability: &str) -> bool {
        self.management || self.operator_capabilities.contains(capability)
    }

    pub fn allow_quota_read(&self) -> bool {
        self.management || read_or_write(self.quota)
    }

    pub fn allow_quota_write(&self) -> bool {
        self.management || self.quota == Some(PolicyLevel::Write)
    }

    /// Only `plugin { policy = "read" }` reads plugins: Nomad grants nothing for "write".
    pub fn allow_plugin_read(&self) -> bool {
        self.management || self.plugin == Some(PolicyLevel::Read)
    }

    /// `read` or `list` lists plugins.
    pub fn allow_plugin_list(&self) -> bool {
        self.management || matches!(self.plugin, Some(PolicyLevel::Read | PolicyLevel::List))
    }
}

fn grants_something(set: &CapabilitySet) -> bool {
    !set.is_empty() && !set.contains(CAP_DENY)
}

fn read_or_write(level: Option<PolicyLevel>) -> bool {
    matches!(level, Some(PolicyLevel::Read | PolicyLevel::Write))
}
