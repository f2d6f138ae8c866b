//! Intentions (Consul's name): which services may call which. A rule names a source and a
//! destination service (either may be `*`) and allows or denies; the most specific rule that
//! matches a call decides (exact beats `*`, the destination weighing more than the source),
//! deny winning between equally specific ones; with no rule, the default decides.

use serde::{Deserialize, Serialize};

pub const ALLOW: &str = "allow";
pub const DENY: &str = "deny";
pub const ANY: &str = "*";

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intention {
    #[serde(rename = "SourceName")]
    pub source: String,
    #[serde(rename = "DestinationName")]
    pub destination: String,
    /// `allow` or `deny`.
    #[serde(rename = "Action")]
    pub action: String,
}

/// Every rule of a namespace and the default.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Intentions {
    pub rules: Vec<Intention>,
    /// What a call no rule matches gets: `allow` or `deny`.
    pub default: String,
}

impl Intentions {
    /// Whether `source` may call `destination`.
    pub fn allows(&self, source: &str, destination: &str) -> bool {
        let specificity = |i: &Intention| {
            let s = match i.source.as_str() {
                ANY => Some(0),
                s if s == source => Some(1),
                _ => None,
            }?;
            let d = match i.destination.as_str() {
                ANY => Some(0),
                d if d == destination => Some(2),
                _ => None,
            }?;
            Some(s + d)
        };
        let best = self
            .rules
            .iter()
            .filter_map(|i| specificity(i).map(|s| (s, i)))
            .max_by_key(|(s, i)| (*s, i.action == DENY));
        match best {
            Some((_, i)) => i.action == ALLOW,
            None => self.default != DENY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(source: &str, destination: &str, action: &str) -> Intention {
        Intention {
            source: source.into(),
            destination: destination.into(),
            action: action.into(),
        }
    }

    #[test]
    fn the_most_specific_rule_decides_and_deny_wins_a_tie() {
        let i = Intentions {
            rules: vec![
                rule("*", "db", DENY),
                rule("api", "db", ALLOW),
                rule("*", "*", ALLOW),
            ],
            default: DENY.into(),
        };
        assert!(i.allows("api", "db"));
        assert!(!i.allows("web", "db"));
        assert!(i.allows("web", "cache"));
        let tie = Intentions {
            rules: vec![rule("api", "db", ALLOW), rule("api", "db", DENY)],
            default: ALLOW.into(),
        };
        assert!(!tie.allows("api", "db"));
    }

    #[test]
    fn without_a_matching_rule_the_default_decides() {
        let mut i = Intentions {
            rules: vec![rule("api", "db", DENY)],
            default: ALLOW.into(),
        };
        assert!(i.allows("web", "db"));
        i.default = DENY.into();
        assert!(!i.allows("web", "db"));
        assert!(!i.allows("api", "db"));
    }
}
