//! The `*` globs Nomad matches datacenters with (github.com/ryanuber/go-glob, as
//! `Node.IsInAnyDC` uses it since Nomad 1.5): `*` stands for any run of characters, nothing
//! else is special.

/// The datacenters of a job that names none (Nomad 1.5+): every datacenter.
pub const DEFAULT_DATACENTERS_GLOB: &str = "*";

/// go-glob's `Glob(pattern, subj)`, step for step.
pub fn glob(pattern: &str, subj: &str) -> bool {
    if pattern.is_empty() {
        return subj.is_empty();
    }
    if pattern == "*" {
        return true;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let Some((last, inner)) = parts.split_last() else {
        // `split` yields at least one piece.
        return subj == pattern;
    };
    if inner.is_empty() {
        return subj == pattern;
    }
    let leading = pattern.starts_with('*');
    let trailing = pattern.ends_with('*');
    let mut rest = subj;
    for (i, part) in inner.iter().enumerate() {
        match rest.find(part) {
            Some(idx) if i > 0 || leading || idx == 0 => rest = &rest[idx + part.len()..],
            _ => return false,
        }
    }
    trailing || rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn a_lone_star_matches_every_datacenter() {
        assert!(glob("*", "dc1"));
        assert!(glob("*", ""));
    }

    #[test]
    fn a_pattern_without_star_matches_only_itself() {
        assert!(glob("dc1", "dc1"));
        assert!(!glob("dc1", "dc10"));
        assert!(!glob("", "dc1"));
        assert!(glob("", ""));
    }

    #[test]
    fn stars_match_prefixes_suffixes_and_middles() {
        assert!(glob("dc-*", "dc-east"));
        assert!(glob("dc-*", "dc-"));
        assert!(!glob("dc-*", "xdc-east"));
        assert!(glob("*-east", "dc-east"));
        assert!(!glob("*-east", "dc-east-2"));
        assert!(glob("us-*-1", "us-west-1"));
        assert!(!glob("us-*-1", "us-west-2"));
        assert!(glob("a*b*c", "a-x-b-y-c"));
        assert!(!glob("a*b*c", "a-x-c-y-b"));
        // Other glob characters are literal.
        assert!(!glob("dc?", "dc1"));
        assert!(glob("dc[1]", "dc[1]"));
    }
}
