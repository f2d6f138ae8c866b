//! Names of the scorers in an allocation's `ScoreMetaData`.

use std::borrow::{Borrow, Cow};
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const SCORE_BINPACK: &str = "binpack";
pub const SCORE_JOB_ANTI_AFFINITY: &str = "job-anti-affinity";
pub const SCORE_RESCHEDULE_PENALTY: &str = "node-reschedule-penalty";
pub const SCORE_NODE_AFFINITY: &str = "node-affinity";
pub const SCORE_SPREAD: &str = "allocation-spread";
pub const SCORE_PREEMPTION: &str = "preemption";

/// The scorers the scheduler names.
const KNOWN: [&str; 6] = [
    SCORE_BINPACK,
    SCORE_JOB_ANTI_AFFINITY,
    SCORE_RESCHEDULE_PENALTY,
    SCORE_NODE_AFFINITY,
    SCORE_SPREAD,
    SCORE_PREEMPTION,
];

/// A scorer's name. Every placement keeps up to five nodes' scores by name; the scheduler's
/// own names are shared static strings rather than a copy in each (decoding maps them back to
/// the static ones), and any other name is kept as written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScorerName(Cow<'static, str>);

impl ScorerName {
    /// A name shared, not copied.
    pub const fn from_static(name: &'static str) -> Self {
        ScorerName(Cow::Borrowed(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for ScorerName {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for ScorerName {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

/// The shared static string of a scheduler's scorer name.
fn known(name: &str) -> Option<&'static str> {
    KNOWN.iter().find(|k| **k == name).copied()
}

impl From<&str> for ScorerName {
    fn from(name: &str) -> Self {
        match known(name) {
            Some(known) => ScorerName(Cow::Borrowed(known)),
            None => ScorerName(Cow::Owned(name.to_string())),
        }
    }
}

impl From<String> for ScorerName {
    fn from(name: String) -> Self {
        match known(&name) {
            Some(known) => ScorerName(Cow::Borrowed(known)),
            None => ScorerName(Cow::Owned(name)),
        }
    }
}

impl Borrow<str> for ScorerName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for ScorerName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ScorerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ScorerName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ScorerName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = Cow::<'de, str>::deserialize(deserializer)?;
        Ok(match name {
            Cow::Borrowed(s) => ScorerName::from(s),
            Cow::Owned(s) => ScorerName::from(s),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedulers_names_decode_to_the_shared_static_strings() {
        let known: ScorerName = serde_json::from_str(r#""binpack""#).unwrap();
        assert!(matches!(known.0, Cow::Borrowed(_)));
        let other: ScorerName = serde_json::from_str(r#""my-scorer""#).unwrap();
        assert!(matches!(other.0, Cow::Owned(_)));
        assert_eq!(other.as_str(), "my-scorer");
        assert_eq!(serde_json::to_string(&known).unwrap(), r#""binpack""#);
    }
}
