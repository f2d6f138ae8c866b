//! Nomad's ACL policy language: the rules of a policy (`namespace`, `node_pool`, `host_volume`,
//! `agent`, `node`, `operator`, `quota`, `plugin` blocks, in HCL or JSON) parsed and validated
//! as Nomad's `acl.Parse` does, with each `policy = "..."` shorthand expanded into the
//! capabilities it stands for. [`Acl`] compiles parsed policies into the permissions a request
//! is checked against.
//!
//! Errors keep Nomad's wording ("Invalid namespace policy", "Invalid or duplicate policy
//! keys", ...) and add where the offending text was written (HCL only; serde_json gives no
//! positions past syntax errors).

mod capabilities;
mod compiled;
mod syntax;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

pub use capabilities::*;
pub use compiled::Acl;
use syntax::{Block, Body, Value};

// ---- policies -----------------------------------------------------------------------------

/// A `policy = "..."` value. Most blocks take deny, read, write and scale; `plugin` takes deny,
/// read, list and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyLevel {
    Deny,
    Read,
    List,
    Write,
    Scale,
}

impl PolicyLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyLevel::Deny => "deny",
            PolicyLevel::Read => "read",
            PolicyLevel::List => "list",
            PolicyLevel::Write => "write",
            PolicyLevel::Scale => "scale",
        }
    }

    fn named(s: &str) -> Option<Self> {
        Some(match s {
            "deny" => PolicyLevel::Deny,
            "read" => PolicyLevel::Read,
            "list" => PolicyLevel::List,
            "write" => PolicyLevel::Write,
            "scale" => PolicyLevel::Scale,
            _ => return None,
        })
    }

    /// Nomad's `isPolicyValid`: the levels every block but `plugin` takes.
    fn general(s: &str) -> Option<Self> {
        Self::named(s).filter(|l| *l != PolicyLevel::List)
    }

    /// Nomad's `PluginPolicy.isValid`.
    fn plugin(s: &str) -> Option<Self> {
        Self::named(s).filter(|l| *l != PolicyLevel::Scale)
    }
}

impl fmt::Display for PolicyLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed policy: its rules, with every shorthand already expanded into `capabilities`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub namespaces: Vec<NamespacePolicy>,
    pub node_pools: Vec<NodePoolPolicy>,
    pub host_volumes: Vec<HostVolumePolicy>,
    pub agent: Option<PolicyLevel>,
    pub node: Option<PolicyLevel>,
    pub operator: Option<OperatorPolicy>,
    pub quota: Option<PolicyLevel>,
    pub plugin: Option<PolicyLevel>,
    /// The rules as written.
    pub raw: String,
}

/// `namespace "NAME" { ... }`; `NAME` may hold `*` globs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespacePolicy {
    pub name: String,
    pub policy: Option<PolicyLevel>,
    /// Listed capabilities, then those of `policy`, then those implied (host-volume-write
    /// implies register, create, delete and read...), without repeats.
    pub capabilities: Vec<String>,
    pub variables: Option<VariablesPolicy>,
}

/// `variables { path "SPEC" { capabilities = [...] } }` inside a namespace rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VariablesPolicy {
    pub paths: Vec<VariablesPathPolicy>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VariablesPathPolicy {
    pub path_spec: String,
    /// As listed; `read` implies `list`, and `deny` stands alone.
    pub capabilities: Vec<String>,
}

/// `node_pool "NAME" { ... }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePoolPolicy {
    pub name: String,
    pub policy: Option<PolicyLevel>,
    pub capabilities: Vec<String>,
}

/// `host_volume "NAME" { ... }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostVolumePolicy {
    pub name: String,
    pub policy: Option<PolicyLevel>,
    pub capabilities: Vec<String>,
}

/// `operator { policy = "..." capabilities = [...] }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorPolicy {
    pub policy: Option<PolicyLevel>,
    pub capabilities: Vec<String>,
}

// ---- errors -------------------------------------------------------------------------------

/// Where in the rules something was written (one-based, columns in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// What is wrong with a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyErrorKind {
    /// The text is not HCL/JSON, or a value has the wrong shape ("Failed to parse ACL Policy").
    Syntax,
    /// No rule at all ("Invalid policy").
    Empty,
    /// Unknown top-level keys, or a single-instance block given twice.
    UnknownKeys,
    NamespaceName,
    NamespacePolicy,
    NamespaceCapability,
    Variables,
    NodePoolName,
    NodePoolPolicy,
    NodePoolCapability,
    HostVolumeName,
    HostVolumePolicy,
    HostVolumeCapability,
    AgentPolicy,
    NodePolicy,
    OperatorPolicy,
    OperatorCapability,
    QuotaPolicy,
    PluginPolicy,
}

/// A policy that cannot be used, with Nomad's message and, when known, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub kind: PolicyErrorKind,
    pub location: Option<Location>,
    /// The message without the location.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, self.location) {
            // HCL1's own form: "Failed to parse ACL Policy: At 3:5: ...".
            (PolicyErrorKind::Syntax, Some(at)) => {
                write!(f, "Failed to parse ACL Policy: At {at}: {}", self.message)
            }
            (PolicyErrorKind::Syntax, None) => {
                write!(f, "Failed to parse ACL Policy: {}", self.message)
            }
            (_, Some(at)) => write!(f, "{} (at {at})", self.message),
            (_, None) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for PolicyError {}

fn error(kind: PolicyErrorKind, location: Option<Location>, message: String) -> PolicyError {
    PolicyError {
        kind,
        location,
        message,
    }
}

fn push_unique(list: &mut Vec<String>, cap: &str) {
    if !list.iter().any(|c| c == cap) {
        list.push(cap.to_string());
    }
}

// ---- parsing ------------------------------------------------------------------------------

/// Parses and validates policy rules (HCL, or JSON when the text opens with `{`), as Nomad's
/// `acl.Parse` in strict mode, the mode policies are written with. Empty rules are an empty
/// policy, as in Nomad.
pub fn parse_policy(rules: &str) -> Result<Policy, PolicyError> {
    let mut policy = Policy {
        raw: rules.to_string(),
        ..Policy::default()
    };
    if rules.is_empty() {
        return Ok(policy);
    }
    let raw = decode(&syntax::parse(rules)?)?;
    if raw.is_empty() {
        return Err(error(
            PolicyErrorKind::Empty,
            None,
            format!("Invalid policy: {rules}"),
        ));
    }

    // Nomad's order of checks: namespaces, node pools, host volumes, unknown keys, then the
    // single-instance blocks.
    for rule in &raw.namespaces {
        policy.namespaces.push(namespace_rule(rule)?);
    }
    for rule in &raw.node_pools {
        policy.node_pools.push(node_pool_rule(rule)?);
    }
    for rule in &raw.host_volumes {
        policy.host_volumes.push(host_volume_rule(rule)?);
    }
    if let Some((_, at)) = raw.extra_keys.iter().next() {
        let keys: Vec<&str> = raw.extra_keys.keys().map(String::as_str).collect();
        return Err(error(
            PolicyErrorKind::UnknownKeys,
            *at,
            format!("Invalid or duplicate policy keys: {}", keys.join(", ")),
        ));
    }
    policy.agent = coarse_rule(
        &raw.agent,
        "agent",
        PolicyErrorKind::AgentPolicy,
        PolicyLevel::general,
    )?;
    policy.node = coarse_rule(
        &raw.node,
        "node",
        PolicyErrorKind::NodePolicy,
        PolicyLevel::general,
    )?;
    if let Some(rule) = &raw.operator {
        policy.operator = Some(operator_rule(rule)?);
    }
    policy.quota = coarse_rule(
        &raw.quota,
        "quota",
        PolicyErrorKind::QuotaPolicy,
        PolicyLevel::general,
    )?;
    policy.plugin = coarse_rule(
        &raw.plugin,
        "plugin",
        PolicyErrorKind::PluginPolicy,
        PolicyLevel::plugin,
    )?;
    Ok(policy)
}

/// A value and where it was written.
#[derive(Debug, Clone)]
struct Spot {
    text: String,
    at: Option<Location>,
}

/// One rule block as written, before validation.
#[derive(Debug, Default)]
struct RawRule {
    name: String,
    at: Option<Location>,
    policy: Option<Spot>,
    capabilities: Vec<Spot>,
    variables: Option<Vec<RawPath>>,
}

#[derive(Debug)]
struct RawPath {
    spec: String,
    at: Option<Location>,
    capabilities: Vec<Spot>,
}

#[derive(Debug, Default)]
struct RawPolicy {
    namespaces: Vec<RawRule>,
    node_pools: Vec<RawRule>,
    host_volumes: Vec<RawRule>,
    agent: Option<RawRule>,
    node: Option<RawRule>,
    operator: Option<RawRule>,
    quota: Option<RawRule>,
    plugin: Option<RawRule>,
    /// Unknown top-level keys and repeated single-instance blocks, sorted as Nomad lists them,
    /// with where each was first written.
    extra_keys: BTreeMap<String, Option<Location>>,
}

impl RawPolicy {
    fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.node_pools.is_empty()
            && self.host_volumes.is_empty()
            && self.agent.is_none()
            && self.node.is_none()
            && self.operator.is_none()
            && self.quota.is_none()
            && self.plugin.is_none()
    }
}

const BLOCK_KINDS: &[&str] = &[
    "namespace",
    "node_pool",
    "host_volume",
    "agent",
    "node",
    "operator",
    "quota",
    "plugin",
];

fn syntax_error(at: Option<Location>, message: String) -> PolicyError {
    error(PolicyErrorKind::Syntax, at, message)
}

fn decode(body: &Body) -> Result<RawPolicy, PolicyError> {
    let mut raw = RawPolicy::default();
    for attr in &body.attrs {
        if BLOCK_KINDS.contains(&attr.key.as_str()) {
            return Err(syntax_error(
                attr.at,
                format!(
                    "{}: expected a block, got {}",
                    attr.key,
                    attr.value.describe()
                ),
            ));
        }
        raw.extra_keys.entry(attr.key.clone()).or_insert(attr.at);
    }
    for block in &body.blocks {
        let slot = match block.kind.as_str() {
            "namespace" => {
                raw.namespaces.push(decode_rule(block, true)?);
                continue;
            }
            "node_pool" => {
                raw.node_pools.push(decode_rule(block, true)?);
                continue;
            }
            "host_volume" => {
                raw.host_volumes.push(decode_rule(block, true)?);
                continue;
            }
            "agent" => &mut raw.agent,
            "node" => &mut raw.node,
            "operator" => &mut raw.operator,
            "quota" => &mut raw.quota,
            "plugin" => &mut raw.plugin,
            other => {
                raw.extra_keys.entry(other.to_string()).or_insert(block.at);
                continue;
            }
        };
        let rule = decode_rule(block, false)?;
        if slot.is_some() {
            raw.extra_keys.entry(block.kind.clone()).or_insert(block.at);
        } else {
            *slot = Some(rule);
        }
    }
    Ok(raw)
}

/// A rule block: its label (`labelled` kinds take one; a missing one is the empty name, which
/// validation refuses, as Nomad does), `policy`, `capabilities` and, in namespaces,
/// `variables`. Other keys inside a block are ignored, as HCL1 ignores them for Nomad.
fn decode_rule(block: &Block, labelled: bool) -> Result<RawRule, PolicyError> {
    let kind = &block.kind;
    let name = match (labelled, block.labels.as_slice()) {
        (true, []) | (false, []) => String::new(),
        (true, [name]) => name.clone(),
        (true, labels) => {
            return Err(syntax_error(
                block.at,
                format!("{kind}: takes one label, got {}", labels.len()),
            ));
        }
        (false, _) => {
            return Err(syntax_error(block.at, format!("{kind}: takes no label")));
        }
    };
    let mut rule = RawRule {
        name,
        at: block.at,
        ..RawRule::default()
    };
    let mut seen_capabilities = false;
    for attr in &block.body.attrs {
        match attr.key.as_str() {
            "policy" => {
                if rule.policy.is_some() {
                    return Err(syntax_error(
                        attr.at,
                        format!("{kind}: policy is set twice"),
                    ));
                }
                rule.policy = Some(text(&attr.value, attr.at, "policy")?);
            }
            "capabilities" => {
                if seen_capabilities {
                    return Err(syntax_error(
                        attr.at,
                        format!("{kind}: capabilities are set twice"),
                    ));
                }
                seen_capabilities = true;
                rule.capabilities = texts(&attr.value, attr.at, "capabilities")?;
            }
            _ => {}
        }
    }
    if kind == "namespace" {
        for inner in block.body.blocks.iter().filter(|b| b.kind == "variables") {
            let paths = rule.variables.get_or_insert_with(Vec::new);
            // HCL1 reads no paths from a labelled `variables "x" { ... }`.
            if inner.labels.is_empty() {
                decode_paths(inner, paths)?;
            }
        }
    }
    Ok(rule)
}

fn decode_paths(variables: &Block, out: &mut Vec<RawPath>) -> Result<(), PolicyError> {
    for path in variables.body.blocks.iter().filter(|b| b.kind == "path") {
        let spec = match path.labels.as_slice() {
            [] => String::new(),
            [spec] => spec.clone(),
            labels => {
                return Err(syntax_error(
                    path.at,
                    format!("path: takes one label, got {}", labels.len()),
                ));
            }
        };
        let mut capabilities = Vec::new();
        for attr in path.body.attrs.iter().filter(|a| a.key == "capabilities") {
            capabilities.extend(texts(&attr.value, attr.at, "capabilities")?);
        }
        out.push(RawPath {
            spec,
            at: path.at,
            capabilities,
        });
    }
    Ok(())
}

fn text(value: &Value, at: Option<Location>, key: &str) -> Result<Spot, PolicyError> {
    match value {
        Value::Text(s) => Ok(Spot {
            text: s.clone(),
            at,
        }),
        other => Err(syntax_error(
            at,
            format!("{key}: expected a string, got {}", other.describe()),
        )),
    }
}

fn texts(value: &Value, at: Option<Location>, key: &str) -> Result<Vec<Spot>, PolicyError> {
    let Value::List(items) = value else {
        return Err(syntax_error(
            at,
            format!(
                "{key}: expected a list of strings, got {}",
                value.describe()
            ),
        ));
    };
    items
        .iter()
        .map(|(item, item_at)| text(item, item_at.or(at), key))
        .collect()
}

// ---- validation ---------------------------------------------------------------------------

fn valid_name(name: &str, extra: &[char]) -> bool {
    (1..=128).contains(&name.chars().count())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '*' || extra.contains(&c))
}

/// A `policy` of a rule that may leave it out: an empty one counts as left out, as in Nomad.
fn optional_level(
    spot: &Option<Spot>,
    valid: fn(&str) -> Option<PolicyLevel>,
) -> Result<Option<PolicyLevel>, Spot> {
    match spot {
        None => Ok(None),
        Some(s) if s.text.is_empty() => Ok(None),
        Some(s) => valid(&s.text).map(Some).ok_or_else(|| s.clone()),
    }
}

fn namespace_rule(rule: &RawRule) -> Result<NamespacePolicy, PolicyError> {
    let name = &rule.name;
    if !valid_name(name, &[]) {
        return Err(error(
            PolicyErrorKind::NamespaceName,
            rule.at,
            format!("Invalid namespace name: {name:?}"),
        ));
    }
    let level = optional_level(&rule.policy, PolicyLevel::general).map_err(|bad| {
        error(
            PolicyErrorKind::NamespacePolicy,
            bad.at,
            format!(
                "Invalid namespace policy: {:?} in namespace {name:?}",
                bad.text
            ),
        )
    })?;
    let mut capabilities = Vec::new();
    for cap in &rule.capabilities {
        if !NAMESPACE_CAPABILITIES.contains(&cap.text.as_str()) {
            return Err(error(
                PolicyErrorKind::NamespaceCapability,
                cap.at,
                format!(
                    "Invalid namespace capability '{}' in namespace {name:?}",
                    cap.text
                ),
            ));
        }
        push_unique(&mut capabilities, &cap.text);
    }
    for cap in level.map(expand_namespace_policy).unwrap_or_default() {
        push_unique(&mut capabilities, cap);
    }
    let implied: Vec<&str> = capabilities
        .iter()
        .flat_map(|c| implied_namespace_capabilities(c).iter().copied())
        .collect();
    for cap in implied {
        push_unique(&mut capabilities, cap);
    }
    let variables = match &rule.variables {
        None => None,
        Some(paths) => Some(variables_rule(name, paths)?),
    };
    Ok(NamespacePolicy {
        name: name.clone(),
        policy: level,
        capabilities,
        variables,
    })
}

fn variables_rule(ns: &str, paths: &[RawPath]) -> Result<VariablesPolicy, PolicyError> {
    let fail = |at, message| error(PolicyErrorKind::Variables, at, message);
    if paths.is_empty() {
        return Err(fail(
            None,
            format!("Invalid variable policy: no variable paths in namespace {ns}"),
        ));
    }
    let mut out = VariablesPolicy::default();
    for path in paths {
        if path.spec.is_empty() {
            return Err(fail(
                path.at,
                format!("Invalid missing variable path in namespace {ns}"),
            ));
        }
        if path.spec.starts_with('/') {
            return Err(fail(
                path.at,
                format!(
                    "Invalid variable path {:?} in namespace {ns}: cannot start with a leading '/'",
                    path.spec
                ),
            ));
        }
        let mut capabilities = Vec::new();
        for cap in &path.capabilities {
            if !VARIABLES_CAPABILITIES.contains(&cap.text.as_str()) {
                return Err(fail(
                    cap.at,
                    format!(
                        "Invalid variable capability '{}' in namespace {ns}",
                        cap.text
                    ),
                ));
            }
            push_unique(&mut capabilities, &cap.text);
        }
        // Nomad's expandVariablesCapabilities: deny stands alone, read implies list.
        if capabilities.iter().any(|c| c == VARIABLES_CAP_DENY) {
            capabilities = vec![VARIABLES_CAP_DENY.to_string()];
        } else if capabilities.iter().any(|c| c == VARIABLES_CAP_READ) {
            push_unique(&mut capabilities, VARIABLES_CAP_LIST);
        }
        out.paths.push(VariablesPathPolicy {
            path_spec: path.spec.clone(),
            capabilities,
        });
    }
    Ok(out)
}

fn node_pool_rule(rule: &RawRule) -> Result<NodePoolPolicy, PolicyError> {
    let name = &rule.name;
    if !valid_name(name, &['_']) {
        return Err(error(
            PolicyErrorKind::NodePoolName,
            rule.at,
            format!("Invalid node pool name '{name}'"),
        ));
    }
    let level = optional_level(&rule.policy, PolicyLevel::general).map_err(|bad| {
        error(
            PolicyErrorKind::NodePoolPolicy,
            bad.at,
            format!("Invalid node pool policy '{}' for '{name}'", bad.text),
        )
    })?;
    let mut capabilities = Vec::new();
    for cap in &rule.capabilities {
        if !NODE_POOL_CAPABILITIES.contains(&cap.text.as_str()) {
            return Err(error(
                PolicyErrorKind::NodePoolCapability,
                cap.at,
                format!("Invalid node pool capability '{}' for '{name}'", cap.text),
            ));
        }
        push_unique(&mut capabilities, &cap.text);
    }
    for cap in level.map(expand_node_pool_policy).unwrap_or_default() {
        push_unique(&mut capabilities, cap);
    }
    Ok(NodePoolPolicy {
        name: name.clone(),
        policy: level,
        capabilities,
    })
}

fn host_volume_rule(rule: &RawRule) -> Result<HostVolumePolicy, PolicyError> {
    let name = &rule.name;
    if !valid_name(name, &[]) {
        return Err(error(
            PolicyErrorKind::HostVolumeName,
            rule.at,
            format!("Invalid host volume name: {name:?}"),
        ));
    }
    let level = optional_level(&rule.policy, PolicyLevel::general).map_err(|bad| {
        error(
            PolicyErrorKind::HostVolumePolicy,
            bad.at,
            format!(
                "Invalid host volume policy: {:?} in host volume {name:?}",
                bad.text
            ),
        )
    })?;
    let mut capabilities = Vec::new();
    for cap in &rule.capabilities {
        if !HOST_VOLUME_CAPABILITIES.contains(&cap.text.as_str()) {
            return Err(error(
                PolicyErrorKind::HostVolumeCapability,
                cap.at,
                format!(
                    "Invalid host volume capability '{}' in host volume {name:?}",
                    cap.text
                ),
            ));
        }
        push_unique(&mut capabilities, &cap.text);
    }
    for cap in level.map(expand_host_volume_policy).unwrap_or_default() {
        push_unique(&mut capabilities, cap);
    }
    Ok(HostVolumePolicy {
        name: name.clone(),
        policy: level,
        capabilities,
    })
}

/// `agent`, `node`, `quota` or `plugin`: a block whose `policy` is required.
fn coarse_rule(
    rule: &Option<RawRule>,
    what: &str,
    kind: PolicyErrorKind,
    valid: fn(&str) -> Option<PolicyLevel>,
) -> Result<Option<PolicyLevel>, PolicyError> {
    let Some(rule) = rule else {
        return Ok(None);
    };
    match &rule.policy {
        Some(spot) => valid(&spot.text).map(Some).ok_or_else(|| {
            error(
                kind,
                spot.at,
                format!("Invalid {what} policy: {:?}", spot.text),
            )
        }),
        None => Err(error(
            kind,
            rule.at,
            format!("Invalid {what} policy: no policy set"),
        )),
    }
}

fn operator_rule(rule: &RawRule) -> Result<OperatorPolicy, PolicyError> {
    let level = optional_level(&rule.policy, PolicyLevel::general).map_err(|bad| {
        error(
            PolicyErrorKind::OperatorPolicy,
            bad.at,
            format!("Invalid operator policy: {:?}", bad.text),
        )
    })?;
    let mut capabilities = Vec::new();
    for cap in &rule.capabilities {
        if !OPERATOR_CAPABILITIES.contains(&cap.text.as_str()) {
            return Err(error(
                PolicyErrorKind::OperatorCapability,
                cap.at,
                format!("Invalid operator capability '{}'", cap.text),
            ));
        }
        push_unique(&mut capabilities, &cap.text);
    }
    for cap in level.map(expand_operator_policy).unwrap_or_default() {
        push_unique(&mut capabilities, cap);
    }
    Ok(OperatorPolicy {
        policy: level,
        capabilities,
    })
}
