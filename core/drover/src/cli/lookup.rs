//! Resolving the identifier a user typed (often a short prefix) to one object, the way Nomad's
//! commands do: ask the list endpoint with `?prefix=`, then decide here.

/// What a prefix matched.
#[derive(Debug, PartialEq)]
pub enum Match<T> {
    None,
    One(T),
    /// Several objects and none is an exact match; in the server's order.
    Many(Vec<T>),
}

/// Picks the object `prefix` names among `items` (the list endpoint's answer). Items not
/// starting with the prefix are dropped, in case the server ignored `?prefix=`. An exact
/// match wins over longer IDs sharing the prefix (a job `web` next to `web-2`).
pub fn resolve<T>(items: Vec<T>, prefix: &str, id: impl Fn(&T) -> &str) -> Match<T> {
    let mut matching: Vec<T> = items
        .into_iter()
        .filter(|i| id(i).starts_with(prefix))
        .collect();
    if let Some(pos) = matching.iter().position(|i| id(i) == prefix) {
        return Match::One(matching.swap_remove(pos));
    }
    match matching.len() {
        0 => Match::None,
        1 => Match::One(matching.remove(0)),
        _ => Match::Many(matching),
    }
}

/// Nomad's `sanitizeUUIDPrefix`: UUID prefixes are looked up by whole bytes, so an odd number
/// of hex digits loses its last one ("0d816e8" -> "0d816e").
pub fn sanitize_uuid_prefix(prefix: &str) -> &str {
    let hex_digits = prefix.chars().filter(|c| *c != '-').count();
    if hex_digits % 2 == 1 {
        let cut = prefix.char_indices().last().map(|(i, _)| i).unwrap_or(0);
        &prefix[..cut]
    } else {
        prefix
    }
}

/// Nomad refuses one-character identifiers for UUID lookups.
pub fn check_uuid_prefix(prefix: &str) -> Result<&str, String> {
    if prefix.chars().count() < 2 {
        return Err("Identifier must contain at least two characters.".into());
    }
    Ok(sanitize_uuid_prefix(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn unique_prefix_resolves_to_its_object() {
        let m = resolve(ids(&["0d816e8c-1", "1f2e3d4c-2"]), "0d81", |s| s.as_str());
        assert_eq!(m, Match::One("0d816e8c-1".to_string()));
    }

    #[test]
    fn exact_match_beats_longer_ids_with_same_prefix() {
        let m = resolve(ids(&["web-2", "web", "web-3"]), "web", |s| s.as_str());
        assert_eq!(m, Match::One("web".to_string()));
    }

    #[test]
    fn ambiguous_prefix_returns_all_candidates() {
        let m = resolve(ids(&["web-2", "web-3"]), "web", |s| s.as_str());
        assert_eq!(m, Match::Many(ids(&["web-2", "web-3"])));
    }

    #[test]
    fn items_not_sharing_the_prefix_are_ignored() {
        let m = resolve(ids(&["abc", "xyz"]), "zz", |s| s.as_str());
        assert_eq!(m, Match::None);
        let m = resolve(ids(&["abc", "xyz"]), "xy", |s| s.as_str());
        assert_eq!(m, Match::One("xyz".to_string()));
    }

    #[test]
    fn odd_length_uuid_prefixes_lose_last_digit() {
        assert_eq!(sanitize_uuid_prefix("0d816e8"), "0d816e");
        assert_eq!(sanitize_uuid_prefix("0d816e8c"), "0d816e8c");
        assert_eq!(sanitize_uuid_prefix("0d816e8c-1"), "0d816e8c-");
        assert_eq!(sanitize_uuid_prefix("0d816e8c-19"), "0d816e8c-19");
        assert!(check_uuid_prefix("0").is_err());
        assert_eq!(check_uuid_prefix("0d8"), Ok("0d"));
    }
}
