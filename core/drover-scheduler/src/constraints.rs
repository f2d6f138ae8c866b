//! Constraint targets and operators, with Nomad's semantics: `${attr.*}`, `${meta.*}`,
//! `${node.*}` targets resolved against a node; `=`, `!=`, ordering, `regexp`, `version`,
//! `semver`, set operators and `is_set` / `is_not_set`.

use std::collections::HashMap;

use drover_structs::{Constraint, Node};
use regex::Regex;

use crate::version::{Version, VersionConstraints, VersionMode};

pub(crate) const DISTINCT_HOSTS: &str = "distinct_hosts";
pub(crate) const DISTINCT_PROPERTY: &str = "distinct_property";

/// Resolves a constraint target against a node. Literals resolve to themselves; `None` means the
/// node has no such attribute (or the interpolation is unknown).
pub(crate) fn resolve_target<'a>(target: &'a str, node: &'a Node) -> Option<&'a str> {
    if !target.starts_with("${") {
        return Some(target);
    }
    match target {
        "${node.unique.id}" => return Some(&node.id),
        "${node.datacenter}" => return Some(&node.datacenter),
        "${node.unique.name}" => return Some(&node.name),
        "${node.class}" => return Some(&node.node_class),
        _ => {}
    }
    let inner = target.strip_prefix("${")?.strip_suffix('}')?;
    if let Some(attr) = inner.strip_prefix("attr.") {
        return node.attributes.get(attr).map(String::as_str);
    }
    if let Some(key) = inner.strip_prefix("meta.") {
        return node.meta.get(key).map(String::as_str);
    }
    None
}

/// Whether a target depends on something unique to a node, so that the verdict cannot be shared
/// between nodes of the same computed class.
pub(crate) fn target_escapes(target: &str) -> bool {
    target.starts_with("${node.unique.")
        || target.starts_with("${attr.unique.")
        || target.starts_with("${meta.unique.")
}

pub(crate) fn constraint_escapes(c: &Constraint) -> bool {
    target_escapes(&c.l_target) || target_escapes(&c.r_target)
}

/// Checks constraints, caching compiled regular expressions and version constraints for the
/// length of one evaluation.
#[derive(Default)]
pub(crate) struct Matcher {
    regexes: HashMap<String, Option<Regex>>,
    versions: HashMap<(VersionMode, String), Option<VersionConstraints>>,
}

impl Matcher {
    pub(crate) fn meets(&mut self, c: &Constraint, node: &Node) -> bool {
        let l = resolve_target(&c.l_target, node);
        let r = resolve_target(&c.r_target, node);
        self.check(&c.operand, l, r)
    }

    /// Nomad's `checkConstraint`. `l`/`r` are `None` when the target did not resolve.
    pub(crate) fn check(&mut self, operand: &str, l: Option<&str>, r: Option<&str>) -> bool {
        match operand {
            DISTINCT_HOSTS | DISTINCT_PROPERTY => true,
            "=" | "==" | "is" => matches!((l, r), (Some(a), Some(b)) if a == b),
            "!=" | "not" => l.unwrap_or("") != r.unwrap_or(""),
            "<" | "<=" | ">" | ">=" => match (l, r) {
                (Some(a), Some(b)) => check_order(operand, a, b),
                _ => false,
            },
            "is_set" => l.is_some(),
            "is_not_set" => l.is_none(),
            "version" => self.version_match(VersionMode::Version, l, r),
            "semver" => self.version_match(VersionMode::Semver, l, r),
            "regexp" => match (l, r) {
                (Some(a), Some(b)) => self.regex_match(a, b),
                _ => false,
            },
            "set_contains" | "set_contains_all" => match (l, r) {
                (Some(a), Some(b)) => set_contains_all(a, b),
                _ => false,
            },
            "set_contains_any" => match (l, r) {
                (Some(a), Some(b)) => set_contains_any(a, b),
                _ => false,
            },
            _ => false,
        }
    }

    fn regex_match(&mut self, value: &str, pattern: &str) -> bool {
        let re = self
            .regexes
            .entry(pattern.to_string())
            .or_insert_with(|| Regex::new(pattern).ok());
        re.as_ref().is_some_and(|re| re.is_match(value))
    }

    fn version_match(&mut self, mode: VersionMode, l: Option<&str>, r: Option<&str>) -> bool {
        let (Some(v), Some(c)) = (l, r) else {
            return false;
        };
        let Some(version) = Version::parse(v, mode) else {
            return false;
        };
        let constraints = self
            .versions
            .entry((mode, c.to_string()))
            .or_insert_with(|| VersionConstraints::parse(c, mode));
        constraints.as_ref().is_some_and(|c| c.check(&version))
    }
}

/// Compares as integers when both sides are integers, else as floats when both are numbers,
/// else lexically (Nomad's `checkOrder`).
fn check_order(op: &str, l: &str, r: &str) -> bool {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (l.parse::<i64>(), r.parse::<i64>()) {
        (Ok(a), Ok(b)) => Some(a.cmp(&b)),
        _ => match (l.parse::<f64>(), r.parse::<f64>()) {
            (Ok(a), Ok(b)) => a.partial_cmp(&b),
            _ => Some(l.cmp(r)),
        },
    };
    let Some(ord) = ord else {
        return false;
    };
    match op {
        "<" => ord == Ordering::Less,
        "<=" => ord != Ordering::Greater,
        ">" => ord == Ordering::Greater,
        ">=" => ord != Ordering::Less,
        _ => false,
    }
}

fn set_contains_all(l: &str, r: &str) -> bool {
    r.split(',')
        .map(str::trim)
        .all(|want| l.split(',').map(str::trim).any(|have| have == want))
}

fn set_contains_any(l: &str, r: &str) -> bool {
    r.split(',')
        .map(str::trim)
        .any(|want| l.split(',').map(str::trim).any(|have| have == want))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        let mut n = Node {
            id: "id-1".into(),
            name: "worker-1".into(),
            datacenter: "dc1".into(),
            node_class: "large".into(),
            ..Default::default()
        };
        n.attributes.insert("kernel.name".into(), "linux".into());
        n.attributes.insert("cpu.numcores".into(), "8".into());
        n.attributes
            .insert("driver.docker.version".into(), "20.10.7".into());
        n.attributes.insert("os.features".into(), "a, b,c".into());
        n.meta.insert("rack".into(), "r1".into());
        n
    }

    fn c(l: &str, op: &str, r: &str) -> Constraint {
        Constraint {
            l_target: l.into(),
            operand: op.into(),
            r_target: r.into(),
        }
    }

    #[test]
    fn targets_resolve_against_the_node() {
        let n = node();
        assert_eq!(resolve_target("${node.unique.id}", &n), Some("id-1"));
        assert_eq!(resolve_target("${node.unique.name}", &n), Some("worker-1"));
        assert_eq!(resolve_target("${node.datacenter}", &n), Some("dc1"));
        assert_eq!(resolve_target("${node.class}", &n), Some("large"));
        assert_eq!(resolve_target("${attr.kernel.name}", &n), Some("linux"));
        assert_eq!(resolve_target("${meta.rack}", &n), Some("r1"));
        assert_eq!(resolve_target("${meta.nope}", &n), None);
        assert_eq!(resolve_target("${bogus}", &n), None);
        assert_eq!(resolve_target("literal", &n), Some("literal"));
    }

    #[test]
    fn equality_needs_both_sides_and_inequality_treats_missing_as_empty() {
        let n = node();
        let mut m = Matcher::default();
        assert!(m.meets(&c("${attr.kernel.name}", "=", "linux"), &n));
        assert!(m.meets(&c("${attr.kernel.name}", "is", "linux"), &n));
        assert!(!m.meets(&c("${attr.missing}", "==", "linux"), &n));
        assert!(m.meets(&c("${attr.missing}", "!=", "linux"), &n));
        assert!(!m.meets(&c("${attr.missing}", "!=", ""), &n));
        assert!(m.meets(&c("${attr.kernel.name}", "not", "windows"), &n));
    }

    #[test]
    fn ordering_is_numeric_for_numbers_and_lexical_otherwise() {
        let n = node();
        let mut m = Matcher::default();
        assert!(m.meets(&c("${attr.cpu.numcores}", ">=", "4"), &n));
        assert!(m.meets(&c("${attr.cpu.numcores}", "<", "10"), &n));
        assert!(m.meets(&c("${attr.cpu.numcores}", ">", "7.5"), &n));
        assert!(m.meets(&c("${meta.rack}", "<", "r2"), &n));
        assert!(!m.meets(&c("${meta.missing}", "<", "r2"), &n));
    }

    #[test]
    fn regexp_version_and_sets() {
        let n = node();
        let mut m = Matcher::default();
        assert!(m.meets(&c("${attr.kernel.name}", "regexp", "^lin"), &n));
        assert!(!m.meets(&c("${attr.kernel.name}", "regexp", "("), &n));
        assert!(m.meets(
            &c("${attr.driver.docker.version}", "version", ">= 19.03, < 21"),
            &n
        ));
        // An unparsable version constraint never matches.
        assert!(!m.meets(&c("${attr.driver.docker.version}", "semver", "~ 1"), &n));
        assert!(m.meets(&c("${attr.os.features}", "set_contains", "b,c"), &n));
        assert!(!m.meets(&c("${attr.os.features}", "set_contains", "b,d"), &n));
        assert!(m.meets(&c("${attr.os.features}", "set_contains_any", "d, a"), &n));
        assert!(m.meets(&c("${attr.os.features}", "is_set", ""), &n));
        assert!(m.meets(&c("${attr.nope}", "is_not_set", ""), &n));
        assert!(!m.meets(&c("${attr.kernel.name}", "bogus-op", "x"), &n));
    }

    #[test]
    fn distinct_operators_pass_the_constraint_checker() {
        let n = node();
        let mut m = Matcher::default();
        assert!(m.meets(&c("", DISTINCT_HOSTS, "true"), &n));
        assert!(m.meets(&c("${meta.rack}", DISTINCT_PROPERTY, "1"), &n));
    }

    #[test]
    fn unique_targets_escape_class_caching() {
        assert!(constraint_escapes(&c("${node.unique.id}", "=", "x")));
        assert!(constraint_escapes(&c("x", "=", "${attr.unique.hostname}")));
        assert!(!constraint_escapes(&c("${attr.kernel.name}", "=", "linux")));
    }
}
