//! Placement rules: `Constraint.Validate`, `Affinity.Validate` and `Spread.Validate` of Nomad
//! 1.1, with the version-constraint grammars of hashicorp/go-version and Nomad's semver helper.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

use super::gofmt::quote;
use crate::job::{Affinity, Constraint, Spread};
use crate::multierror::MultiError;

const VERSION_RAW: &str = r"v?([0-9]+(\.[0-9]+)*?)(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|(-?([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?";
const SEMVER_RAW: &str = r"v?([0-9]+(\.[0-9]+){0,2})(-([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?";

/// One element of a go-version constraint list (`>= 1.2, < 2`).
static VERSION_CONSTRAINT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(&format!(r"^\s*(|=|!=|>|<|>=|<=|~>)\s*({VERSION_RAW})\s*$")).ok());

/// One element of a Nomad semver constraint list (no pessimistic `~>`).
static SEMVER_CONSTRAINT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(&format!(r"^\s*(|=|!=|>|<|>=|<=)\s*({SEMVER_RAW})\s*$")).ok());

/// hashicorp/go-version's `NewConstraint` (or Nomad's semver one) error text, if any.
fn version_constraint_error(grammar: &LazyLock<Option<Regex>>, spec: &str) -> Option<String> {
    // The patterns are constants; a failure to build them would show up in every test.
    let re = grammar.as_ref()?;
    spec.split(',')
        .find(|single| !re.is_match(single))
        .map(|single| format!("Malformed constraint: {single}"))
}

/// The error Go's `regexp.Compile` would give, worded after Go's `error parsing regexp: ...`.
fn regexp_error(pattern: &str) -> Option<String> {
    match Regex::new(pattern) {
        Ok(_) => None,
        Err(e) => {
            let text = e.to_string();
            let reason = text
                .lines()
                .rev()
                .find_map(|l| l.trim().strip_prefix("error: "))
                .unwrap_or(text.trim())
                .to_string();
            Some(format!("error parsing regexp: {reason}: `{pattern}`"))
        }
    }
}

/// Go's `strconv.ParseUint(s, 10, 64)` error text.
fn parse_uint_error(s: &str) -> Result<u64, String> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().map_err(|_| {
            format!(
                "strconv.ParseUint: parsing {}: value out of range",
                quote(s)
            )
        });
    }
    Err(format!(
        "strconv.ParseUint: parsing {}: invalid syntax",
        quote(s)
    ))
}

const COMPARISONS: [&str; 9] = ["=", "==", "is", "!=", "not", "<", "<=", ">", ">="];

/// Nomad's `Constraint.Validate`.
pub fn validate_constraint(c: &Constraint) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if c.operand.is_empty() {
        m.push("Missing constraint operand");
    }
    let mut require_ltarget = true;
    match c.operand.as_str() {
        "distinct_hosts" => require_ltarget = false,
        "set_contains_all" | "set_contains_any" | "set_contains" => {
            if c.r_target.is_empty() {
                m.push("Set contains constraint requires an RTarget");
            }
        }
        "regexp" => {
            if let Some(e) = regexp_error(&c.r_target) {
                m.push(format!("Regular expression failed to compile: {e}"));
            }
        }
        "version" => {
            if let Some(e) = version_constraint_error(&VERSION_CONSTRAINT, &c.r_target) {
                m.push(format!("Version constraint is invalid: {e}"));
            }
        }
        "semver" => {
            if let Some(e) = version_constraint_error(&SEMVER_CONSTRAINT, &c.r_target) {
                m.push(format!("Semver constraint is invalid: {e}"));
            }
        }
        "distinct_property" => {
            if !c.r_target.is_empty() {
                match parse_uint_error(&c.r_target) {
                    Err(e) => m.push(format!(
                        "Failed to convert RTarget {} to uint64: {e}",
                        quote(&c.r_target)
                    )),
                    Ok(0) => m.push(
                        "Distinct Property must have an allowed count of 1 or greater: 0 < 1",
                    ),
                    Ok(_) => {}
                }
            }
        }
        "is_set" | "is_not_set" => {
            if !c.r_target.is_empty() {
                m.push(format!(
                    "Operator {} does not support an RTarget",
                    quote(&c.operand)
                ));
            }
        }
        op if COMPARISONS.contains(&op) => {
            if c.r_target.is_empty() {
                m.push(format!("Operator {} requires an RTarget", quote(op)));
            }
        }
        other => m.push(format!("Unknown constraint type {}", quote(other))),
    }
    if require_ltarget && c.l_target.is_empty() {
        m.push("No LTarget provided but is required by constraint");
    }
    m.into_result()
}

/// Nomad's `Affinity.Validate`.
pub fn validate_affinity(a: &Affinity) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if a.operand.is_empty() {
        m.push("Missing affinity operand");
    }
    match a.operand.as_str() {
        "set_contains_all" | "set_contains_any" | "set_contains" => {
            if a.r_target.is_empty() {
                m.push("Set contains operators require an RTarget");
            }
        }
        "regexp" => {
            if let Some(e) = regexp_error(&a.r_target) {
                m.push(format!("Regular expression failed to compile: {e}"));
            }
        }
        "version" => {
            if let Some(e) = version_constraint_error(&VERSION_CONSTRAINT, &a.r_target) {
                m.push(format!("Version affinity is invalid: {e}"));
            }
        }
        "semver" => {
            if let Some(e) = version_constraint_error(&SEMVER_CONSTRAINT, &a.r_target) {
                m.push(format!("Semver affinity is invalid: {e}"));
            }
        }
        op if COMPARISONS.contains(&op) => {
            if a.r_target.is_empty() {
                m.push(format!("Operator {} requires an RTarget", quote(op)));
            }
        }
        other => m.push(format!("Unknown affinity operator {}", quote(other))),
    }
    if a.l_target.is_empty() {
        m.push("No LTarget provided but is required");
    }
    if a.weight == 0 {
        m.push("Affinity weight cannot be zero");
    }
    if !(-100..=100).contains(&a.weight) {
        m.push("Affinity weight must be within the range [-100,100]");
    }
    m.into_result()
}

/// Nomad's `Spread.Validate`.
pub fn validate_spread(s: &Spread) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if s.attribute.is_empty() {
        m.push("Missing spread attribute");
    }
    if s.weight <= 0 || s.weight > 100 {
        m.push("Spread stanza must have a positive weight from 0 to 100");
    }
    let mut seen = BTreeSet::new();
    let mut sum: i64 = 0;
    for t in s.spread_target.iter().flatten() {
        if !seen.insert(t.value.as_str()) {
            m.push(format!(
                "Spread target value {} already defined",
                quote(&t.value)
            ));
        }
        if t.percent > 100 {
            m.push(format!(
                "Spread target percentage for value {} must be between 0 and 100",
                quote(&t.value)
            ));
        }
        sum = sum.saturating_add(t.percent);
    }
    if sum > 100 {
        m.push(format!(
            "Sum of spread target percentages must not be greater than 100%; got {sum}%"
        ));
    }
    m.into_result()
}

/// Validates a list of affinities as Nomad's job, group and task validation do: `System jobs may
/// not have an affinity stanza` for system jobs, every affinity's problems otherwise.
pub(crate) fn check_affinities(
    m: &mut MultiError,
    affinities: Option<&Vec<Affinity>>,
    system: bool,
) {
    if system {
        if affinities.is_some() {
            m.push("System jobs may not have an affinity stanza");
        }
        return;
    }
    for (idx, a) in affinities.into_iter().flatten().enumerate() {
        if let Err(e) = validate_affinity(a) {
            m.push(format!("Affinity {} validation failed: {e}", idx + 1));
        }
    }
}

/// The job- and group-level spread rules.
pub(crate) fn check_spreads(m: &mut MultiError, spreads: Option<&Vec<Spread>>, system: bool) {
    if system {
        if spreads.is_some() {
            m.push("System jobs may not have a spread stanza");
        }
        return;
    }
    for (idx, s) in spreads.into_iter().flatten().enumerate() {
        if let Err(e) = validate_spread(s) {
            m.push(format!("Spread {} validation failed: {e}", idx + 1));
        }
    }
}

/// Constraint list at the job or group level.
pub(crate) fn check_constraints(m: &mut MultiError, constraints: Option<&Vec<Constraint>>) {
    for (idx, c) in constraints.into_iter().flatten().enumerate() {
        if let Err(e) = validate_constraint(c) {
            m.push(format!("Constraint {} validation failed: {e}", idx + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::SpreadTarget;

    fn constraint(l: &str, op: &str, r: &str) -> Constraint {
        Constraint {
            l_target: l.into(),
            r_target: r.into(),
            operand: op.into(),
        }
    }

    fn errors(r: Result<(), MultiError>) -> Vec<String> {
        r.err().map(|e| e.errors).unwrap_or_default()
    }

    #[test]
    fn comparison_operators_need_an_rtarget() {
        assert_eq!(
            errors(validate_constraint(&constraint("${attr.a}", "=", ""))),
            ["Operator \"=\" requires an RTarget"]
        );
    }

    #[test]
    fn empty_operand_is_missing_and_unknown_like_nomad() {
        assert_eq!(
            errors(validate_constraint(&constraint("a", "", "b"))),
            ["Missing constraint operand", "Unknown constraint type \"\""]
        );
    }

    #[test]
    fn distinct_hosts_needs_no_ltarget() {
        assert!(validate_constraint(&constraint("", "distinct_hosts", "")).is_ok());
        assert_eq!(
            errors(validate_constraint(&constraint("", "is_set", ""))),
            ["No LTarget provided but is required by constraint"]
        );
    }

    #[test]
    fn distinct_property_count_is_a_positive_uint() {
        assert_eq!(
            errors(validate_constraint(&constraint(
                "${meta.rack}",
                "distinct_property",
                "x"
            ))),
            [
                "Failed to convert RTarget \"x\" to uint64: strconv.ParseUint: parsing \"x\": invalid syntax"
            ]
        );
        assert_eq!(
            errors(validate_constraint(&constraint(
                "${meta.rack}",
                "distinct_property",
                "0"
            ))),
            ["Distinct Property must have an allowed count of 1 or greater: 0 < 1"]
        );
        assert!(validate_constraint(&constraint("${meta.rack}", "distinct_property", "2")).is_ok());
    }

    #[test]
    fn version_constraints_follow_go_version() {
        assert!(validate_constraint(&constraint("${attr.v}", "version", ">= 1.2, < 2.0")).is_ok());
        assert!(validate_constraint(&constraint("${attr.v}", "version", "~> 1.2.3-beta")).is_ok());
        assert_eq!(
            errors(validate_constraint(&constraint(
                "${attr.v}",
                "version",
                ">> 1"
            ))),
            ["Version constraint is invalid: Malformed constraint: >> 1"]
        );
        assert_eq!(
            errors(validate_constraint(&constraint(
                "${attr.v}",
                "semver",
                "~> 1.2"
            ))),
            ["Semver constraint is invalid: Malformed constraint: ~> 1.2"]
        );
        assert_eq!(
            errors(validate_constraint(&constraint("${attr.v}", "version", ""))),
            ["Version constraint is invalid: Malformed constraint: "]
        );
    }

    #[test]
    fn bad_regexp_is_reported_on_one_line() {
        let e = errors(validate_constraint(&constraint("${attr.a}", "regexp", "(")));
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("Regular expression failed to compile: error parsing regexp:"),
            "{e:?}"
        );
        assert!(!e[0].contains('\n'));
    }

    #[test]
    fn affinity_weights_are_bounded_and_non_zero() {
        let a = Affinity {
            l_target: "${node.datacenter}".into(),
            r_target: "dc1".into(),
            operand: "=".into(),
            weight: 0,
        };
        assert_eq!(
            errors(validate_affinity(&a)),
            ["Affinity weight cannot be zero"]
        );
        let a = Affinity { weight: 101, ..a };
        assert_eq!(
            errors(validate_affinity(&a)),
            ["Affinity weight must be within the range [-100,100]"]
        );
        let a = Affinity {
            operand: "near".into(),
            l_target: String::new(),
            weight: 50,
            ..a
        };
        assert_eq!(
            errors(validate_affinity(&a)),
            [
                "Unknown affinity operator \"near\"",
                "No LTarget provided but is required"
            ]
        );
    }

    #[test]
    fn spread_targets_must_be_unique_and_sum_to_at_most_100() {
        let target = |v: &str, p| SpreadTarget {
            value: v.into(),
            percent: p,
        };
        let s = Spread {
            attribute: "${node.datacenter}".into(),
            weight: 0,
            spread_target: Some(vec![
                target("dc1", 70),
                target("dc1", 50),
                target("dc2", 101),
            ]),
        };
        assert_eq!(
            errors(validate_spread(&s)),
            [
                "Spread stanza must have a positive weight from 0 to 100",
                "Spread target value \"dc1\" already defined",
                "Spread target percentage for value \"dc2\" must be between 0 and 100",
                "Sum of spread target percentages must not be greater than 100%; got 221%"
            ]
        );
    }
}
