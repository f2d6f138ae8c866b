//! Version constraints for the `version` and `semver` constraint operands: `">= 1.2, < 2.0"`.
//!
//! `version` follows hashicorp/go-version: lenient versions (`v1.2`, `1.2.3.4`, `1.2.3beta`),
//! the `~>` operator, and pre-release versions that only satisfy constraints written with a
//! pre-release of the same base version. `semver` follows Nomad's semver constraints: strict
//! `major[.minor[.patch]][-pre][+meta]` versions, no `~>`, and pre-releases ordered as the spec
//! says with no extra restriction.

use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum VersionMode {
    Version,
    Semver,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    /// Numeric segments, padded with zeros to at least three.
    segments: Vec<i64>,
    /// How many segments were written.
    specified: usize,
    pre: String,
}

impl Version {
    pub(crate) fn parse(s: &str, mode: VersionMode) -> Option<Version> {
        let s = s.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let (rest, _meta) = match s.split_once('+') {
            Some((r, m)) => {
                if !valid_dotted(m, mode) {
                    return None;
                }
                (r, Some(m))
            }
            None => (s, None),
        };
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (nums, tail) = rest.split_at(num_end);
        // A trailing dot belongs to no segment.
        if nums.is_empty() || nums.ends_with('.') {
            return None;
        }
        let mut segments = Vec::with_capacity(3);
        for part in nums.split('.') {
            segments.push(part.parse::<i64>().ok()?);
        }
        if mode == VersionMode::Semver && segments.len() > 3 {
            return None;
        }
        let pre = match tail.strip_prefix('-') {
            Some(p) => p,
            None if tail.is_empty() => "",
            // go-version accepts a pre-release glued to the version (`1.2.3beta1`).
            None if mode == VersionMode::Version
                && tail.starts_with(|c: char| c.is_ascii_alphabetic() || c == '~') =>
            {
                tail
            }
            None => return None,
        };
        if !pre.is_empty() && !valid_dotted(pre, mode) {
            return None;
        }
        if tail.starts_with('-') && pre.is_empty() {
            return None;
        }
        let specified = segments.len();
        while segments.len() < 3 {
            segments.push(0);
        }
        Some(Version {
            segments,
            specified,
            pre: pre.to_string(),
        })
    }

    fn compare(&self, other: &Version) -> Ordering {
        let len = self.segments.len().max(other.segments.len());
        for i in 0..len {
            let a = self.segments.get(i).copied().unwrap_or(0);
            let b = other.segments.get(i).copied().unwrap_or(0);
            match a.cmp(&b) {
                Ordering::Equal => continue,
                o => return o,
            }
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => compare_prereleases(&self.pre, &other.pre),
        }
    }

    fn same_base(&self, other: &Version) -> bool {
        let len = self.segments.len().max(other.segments.len());
        (0..len).all(|i| {
            self.segments.get(i).copied().unwrap_or(0)
                == other.segments.get(i).copied().unwrap_or(0)
        })
    }
}

/// Dot-separated identifiers of `[0-9A-Za-z-]` (and `~` for go-version).
fn valid_dotted(s: &str, mode: VersionMode) -> bool {
    s.split('.').all(|part| {
        !part.is_empty()
            && part.chars().all(|c| {
                c.is_ascii_alphanumeric() || c == '-' || (mode == VersionMode::Version && c == '~')
            })
    })
}

fn compare_prereleases(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let pa: Vec<&str> = a.split('.').collect();
    let pb: Vec<&str> = b.split('.').collect();
    for i in 0..pa.len().max(pb.len()) {
        let x = pa.get(i).copied().unwrap_or("");
        let y = pb.get(i).copied().unwrap_or("");
        match compare_part(x, y) {
            Ordering::Equal => continue,
            o => return o,
        }
    }
    Ordering::Equal
}

/// go-version's `comparePart`: numbers sort before words, a missing part sorts before a
/// number part and after a word part.
fn compare_part(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let na = a.parse::<i64>().ok();
    let nb = b.parse::<i64>().ok();
    if a.is_empty() {
        return if nb.is_some() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    if b.is_empty() {
        return if na.is_some() {
            Ordering::Greater
        } else {
            Ordering::Less
        };
    }
    match (na, nb) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    Pessimistic,
}

/// A parsed constraint list; every part must hold.
#[derive(Debug, Clone)]
pub(crate) struct VersionConstraints {
    parts: Vec<(Op, Version)>,
    mode: VersionMode,
}

impl VersionConstraints {
    pub(crate) fn parse(s: &str, mode: VersionMode) -> Option<VersionConstraints> {
        let mut parts = Vec::new();
        for raw in s.split(',') {
            let raw = raw.trim();
            let (op, rest) = split_op(raw);
            if op == Op::Pessimistic && mode == VersionMode::Semver {
                return None;
            }
            parts.push((op, Version::parse(rest, mode)?));
        }
        Some(VersionConstraints { parts, mode })
    }

    pub(crate) fn check(&self, v: &Version) -> bool {
        self.parts.iter().all(|(op, c)| match self.mode {
            VersionMode::Semver => check_plain(*op, v, c),
            VersionMode::Version => check_go_version(*op, v, c),
        })
    }
}

fn split_op(s: &str) -> (Op, &str) {
    for (text, op) in [
        ("~>", Op::Pessimistic),
        (">=", Op::Ge),
        ("<=", Op::Le),
        ("!=", Op::Ne),
        (">", Op::Gt),
        ("<", Op::Lt),
        ("=", Op::Eq),
    ] {
        if let Some(rest) = s.strip_prefix(text) {
            return (op, rest.trim_start());
        }
    }
    (Op::Eq, s)
}

fn check_plain(op: Op, v: &Version, c: &Version) -> bool {
    let o = v.compare(c);
    match op {
        Op::Eq => o == Ordering::Equal,
        Op::Ne => o != Ordering::Equal,
        Op::Gt => o == Ordering::Greater,
        Op::Lt => o == Ordering::Less,
        Op::Ge => o != Ordering::Less,
        Op::Le => o != Ordering::Greater,
        Op::Pessimistic => false,
    }
}

/// go-version: a pre-release version only satisfies constraints whose version is a pre-release
/// of the same base version.
fn prerelease_check(v: &Version, c: &Version) -> bool {
    match (v.pre.is_empty(), c.pre.is_empty()) {
        (false, false) => v.same_base(c),
        (false, true) => false,
        _ => true,
    }
}

fn check_go_version(op: Op, v: &Version, c: &Version) -> bool {
    match op {
        Op::Eq | Op::Ne => check_plain(op, v, c),
        Op::Pessimistic => pessimistic(v, c),
        _ => prerelease_check(v, c) && check_plain(op, v, c),
    }
}

/// `~> 1.2.3` means `>= 1.2.3, < 1.3`; `~> 1.2` means `>= 1.2, < 2`.
fn pessimistic(v: &Version, c: &Version) -> bool {
    if !prerelease_check(v, c) || (!c.pre.is_empty() && v.pre.is_empty()) {
        return false;
    }
    if v.compare(c) == Ordering::Less {
        return false;
    }
    let cs = c.segments.len();
    if cs > v.segments.len() {
        return false;
    }
    let fixed = c.specified.saturating_sub(1);
    if (0..fixed).any(|i| v.segments[i] != c.segments[i]) {
        return false;
    }
    c.segments[cs - 1] <= v.segments[cs - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(constraint: &str, version: &str, mode: VersionMode) -> bool {
        let c = VersionConstraints::parse(constraint, mode).expect("constraint parses");
        let v = Version::parse(version, mode).expect("version parses");
        c.check(&v)
    }

    #[test]
    fn ranges_combine_with_commas() {
        let m = VersionMode::Version;
        assert!(holds(">= 1.2, < 2.0", "1.2.0", m));
        assert!(holds(">= 1.2, < 2.0", "1.9.9", m));
        assert!(!holds(">= 1.2, < 2.0", "2.0.0", m));
        assert!(!holds(">= 1.2, < 2.0", "1.1", m));
        assert!(holds("1.2.3", "v1.2.3", m));
        assert!(holds("!= 1.2.3", "1.2.4", m));
    }

    #[test]
    fn numeric_segments_compare_as_numbers() {
        assert!(holds("> 1.9", "1.10", VersionMode::Version));
        assert!(holds("> 4.9.0", "4.19.0", VersionMode::Semver));
    }

    #[test]
    fn pessimistic_operator_bounds_the_last_written_segment() {
        let m = VersionMode::Version;
        assert!(holds("~> 1.2.3", "1.2.9", m));
        assert!(!holds("~> 1.2.3", "1.3.0", m));
        assert!(holds("~> 1.2", "1.9.0", m));
        assert!(!holds("~> 1.2", "2.0.0", m));
        assert!(!holds("~> 1.2.3", "1.2.2", m));
    }

    #[test]
    fn go_version_keeps_prereleases_away_from_plain_constraints() {
        let m = VersionMode::Version;
        assert!(!holds(">= 1.0", "1.5.0-beta1", m));
        assert!(holds(">= 1.5.0-alpha", "1.5.0-beta1", m));
        assert!(!holds(">= 1.4.0-alpha", "1.5.0-beta1", m));
    }

    #[test]
    fn semver_orders_prereleases_before_releases() {
        let m = VersionMode::Semver;
        assert!(holds(">= 1.0", "1.5.0-beta1", m));
        assert!(holds("< 1.5.0", "1.5.0-rc.1", m));
        assert!(holds("> 1.5.0-rc.1", "1.5.0-rc.2", m));
        assert!(holds("> 1.5.0-rc.9", "1.5.0-rc.10", m));
    }

    #[test]
    fn semver_rejects_what_go_version_accepts() {
        assert!(Version::parse("1.2.3.4", VersionMode::Semver).is_none());
        assert!(Version::parse("1.2.3.4", VersionMode::Version).is_some());
        assert!(Version::parse("1.2.3beta", VersionMode::Semver).is_none());
        assert!(Version::parse("1.2.3beta", VersionMode::Version).is_some());
        assert!(VersionConstraints::parse("~> 1.2", VersionMode::Semver).is_none());
        assert!(Version::parse("linux", VersionMode::Version).is_none());
        assert!(VersionConstraints::parse(">= x", VersionMode::Version).is_none());
    }

    #[test]
    fn build_metadata_is_ignored() {
        assert!(holds("= 1.2.3", "1.2.3+ent", VersionMode::Version));
        assert!(holds("= 1.2.3", "1.2.3+ent", VersionMode::Semver));
    }
}
