//! Query parameters every read takes (`index`, `wait`, `namespace`, `prefix`, `pretty`), Go's
//! duration and boolean syntax, and the blocking-query loop.

use std::collections::HashMap;
use std::time::Duration;

use drover_state::{StateSnapshot, Table};

use crate::AppState;
use crate::error::ApiError;
use crate::response::QueryMeta;

/// How long a blocking query waits when `?wait` is not given.
pub(crate) const DEFAULT_BLOCKING_WAIT: Duration = Duration::from_secs(5 * 60);
/// The longest a blocking query may wait, whatever `?wait` says.
pub(crate) const MAX_BLOCKING_WAIT: Duration = Duration::from_secs(10 * 60);

pub(crate) type Params = HashMap<String, String>;

/// The common options of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueryOptions {
    /// Answer only once the data's index passes this (0: answer now).
    pub min_index: u64,
    pub wait: Duration,
    /// `None` means every namespace (`?namespace=*`).
    pub namespace: Option<String>,
    pub prefix: String,
    pub pretty: bool,
}

impl QueryOptions {
    pub fn parse(params: &Params) -> Result<Self, ApiError> {
        let min_index = match params.get("index") {
            None => 0,
            Some(s) => s
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request("Invalid index"))?,
        };
        let wait = match params.get("wait") {
            None => DEFAULT_BLOCKING_WAIT,
            Some(s) => {
                parse_go_duration(s).map_err(|_| ApiError::bad_request("Invalid wait time"))?
            }
        }
        .min(MAX_BLOCKING_WAIT);
        let namespace = match params.get("namespace").map(String::as_str) {
            None | Some("") => Some(drover_structs::DEFAULT_NAMESPACE.to_string()),
            Some("*") => None,
            Some(ns) => Some(ns.to_string()),
        };
        Ok(QueryOptions {
            min_index,
            wait,
            namespace,
            prefix: params.get("prefix").cloned().unwrap_or_default(),
            pretty: flag(params, "pretty")?,
        })
    }

    /// Whether an object of namespace `ns` is in this query's view.
    pub fn in_namespace(&self, ns: &str) -> bool {
        self.namespace.as_deref().is_none_or(|want| want == ns)
    }

    /// The namespace a write goes to (`default` for `*` or none).
    pub fn write_namespace(&self) -> &str {
        self.namespace
            .as_deref()
            .unwrap_or(drover_structs::DEFAULT_NAMESPACE)
    }
}

/// Runs a read against the newest state, and while its index is not past `?index`, again after
/// each change to `tables`, until `?wait` passes; answers with the last result. `read` returns
/// the index of what it found (an object's `ModifyIndex`, a table's index) and the answer.
pub(crate) async fn blocking<T>(
    state: &AppState,
    tables: &[Table],
    opts: &QueryOptions,
    mut read: impl FnMut(&StateSnapshot) -> (u64, T),
) -> (QueryMeta, T) {
    let store = state.server.state();
    let deadline = tokio::time::Instant::now() + opts.wait;
    let mut snap = state.server.snapshot();
    loop {
        let (index, answer) = read(&snap);
        let now = tokio::time::Instant::now();
        if opts.min_index == 0 || index > opts.min_index || now >= deadline {
            return (QueryMeta::new(state, index), answer);
        }
        snap = store
            .wait_for(tables, snap.max_index(tables), deadline - now)
            .await;
    }
}

/// A boolean flag in Go's `strconv.ParseBool` syntax; present without a value (`?pretty`)
/// means true, absent means false.
pub(crate) fn flag(params: &Params, name: &str) -> Result<bool, ApiError> {
    match params.get(name).map(String::as_str) {
        None => Ok(false),
        Some("") => Ok(true),
        Some(s) => parse_go_bool(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Failed to parse value of {name:?} ({s}) as a bool: strconv.ParseBool: parsing {s:?}: invalid syntax"
            ))
        }),
    }
}

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Parses a duration in Go's `time.ParseDuration` syntax ("300ms", "1.5s", "1h2m", "0"), the
/// syntax of `?wait=`. Negative durations are refused: nothing here can wait less than zero.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let rest = s.strip_prefix('+').unwrap_or(s);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() || rest.starts_with('-') {
        return Err(invalid());
    }
    let mut total_nanos: f64 = 0.0;
    let mut rest = rest;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("time: missing unit in duration {s:?}"))?;
        let (number, tail) = rest.split_at(number_len);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            other => return Err(format!("time: unknown unit {other:?} in duration {s:?}")),
        };
        total_nanos += value * scale;
        rest = tail;
    }
    if !total_nanos.is_finite() || total_nanos > u64::MAX as f64 {
        return Err(invalid());
    }
    Ok(Duration::from_nanos(total_nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn go_durations_parse_like_time_parse_duration() {
        let ok = |s: &str| parse_go_duration(s).unwrap();
        assert_eq!(ok("5s"), Duration::from_secs(5));
        assert_eq!(ok("100ms"), Duration::from_millis(100));
        assert_eq!(ok("1m"), Duration::from_secs(60));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("250us"), Duration::from_micros(250));
        assert_eq!(ok("0"), Duration::ZERO);
        for bad in ["", "5", "s", "5x", "-5s", "1..5s", "abc"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn wait_defaults_to_five_minutes_and_is_capped_at_ten() {
        let o = QueryOptions::parse(&params(&[("index", "7")])).unwrap();
        assert_eq!(o.min_index, 7);
        assert_eq!(o.wait, DEFAULT_BLOCKING_WAIT);
        let o = QueryOptions::parse(&params(&[("wait", "1h")])).unwrap();
        assert_eq!(o.wait, MAX_BLOCKING_WAIT);
    }

    #[test]
    fn bad_index_and_wait_are_nomads_400s() {
        let e = QueryOptions::parse(&params(&[("index", "x")])).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.message.as_str()),
            (400, "Invalid index")
        );
        let e = QueryOptions::parse(&params(&[("wait", "5")])).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.message.as_str()),
            (400, "Invalid wait time")
        );
    }

    #[test]
    fn namespace_star_means_all_and_absent_means_default() {
        let all = QueryOptions::parse(&params(&[("namespace", "*")])).unwrap();
        assert!(all.in_namespace("a") && all.in_namespace("default"));
        let default = QueryOptions::parse(&params(&[])).unwrap();
        assert!(default.in_namespace("default") && !default.in_namespace("a"));
    }

    #[test]
    fn flags_take_go_booleans_and_bare_names() {
        assert!(flag(&params(&[("purge", "true")]), "purge").unwrap());
        assert!(flag(&params(&[("pretty", "")]), "pretty").unwrap());
        assert!(!flag(&params(&[("purge", "0")]), "purge").unwrap());
        assert!(!flag(&params(&[]), "purge").unwrap());
        assert!(flag(&params(&[("purge", "yes")]), "purge").is_err());
    }
}
