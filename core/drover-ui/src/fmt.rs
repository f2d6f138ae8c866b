//! Reading API JSON leniently and showing its values: a missing field shows as empty, never
//! as an error page, because the API leaves out what is unset.

use std::time::{SystemTime, UNIX_EPOCH};

use maud::{Markup, html};
use serde_json::Value;

/// The string at `key` (empty when absent or not a string).
pub fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The number at `key` (0 when absent).
pub fn n(v: &Value, key: &str) -> i64 {
    v.get(key)
        .and_then(|x| x.as_i64().or_else(|| x.as_f64().map(|f| f as i64)))
        .unwrap_or(0)
}

/// The number at a path of keys (0 when any is absent).
pub fn n_at(v: &Value, path: &[&str]) -> i64 {
    let mut cur = v;
    for key in path {
        match cur.get(key) {
            Some(next) => cur = next,
            None => return 0,
        }
    }
    cur.as_i64()
        .or_else(|| cur.as_f64().map(|f| f as i64))
        .unwrap_or(0)
}

/// The boolean at `key` (false when absent).
pub fn b(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The array at `key` (empty when absent or null).
pub fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The array `v` itself (empty when it is not one).
pub fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// The object at `key` as (name, value) pairs in key order (empty when absent).
pub fn entries<'a>(v: &'a Value, key: &str) -> Vec<(&'a str, &'a Value)> {
    v.get(key)
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

/// The first 8 characters of an ID, as Nomad's UI and CLI show them.
pub fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Nanoseconds since the epoch (Nomad's `CreateTime`, event `Time`) as UTC.
pub fn time_ns(ns: i64) -> String {
    if ns <= 0 {
        return String::new();
    }
    utc(ns / 1_000_000_000)
}

/// Seconds since the epoch as `YYYY-MM-DD hh:mm:ss UTC`.
pub fn utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// How long ago `ns` (nanoseconds since the epoch) was, coarsely ("3m ago").
pub fn ago_ns(ns: i64) -> String {
    if ns <= 0 {
        return String::new();
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let secs = (now - ns / 1_000_000_000).max(0);
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h{}m ago", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// A byte count in binary units.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A status word as a colored badge (`running`, `failed`, `ready`...).
pub fn badge(status: &str) -> Markup {
    let class = match status {
        "running" | "ready" | "successful" | "complete" | "alive" | "eligible" | "healthy"
        | "true" | "leader" | "success" => "good",
        "failed" | "lost" | "dead" | "down" | "cancelled" | "ineligible" | "unhealthy"
        | "blocked" | "false" | "failure" => "bad",
        "pending" | "starting" | "initializing" | "paused" | "draining" | "unknown" | "queued"
        | "disconnected" | "warning" => "warn",
        _ => "plain",
    };
    html! { span class={"badge " (class)} { (status) } }
}

/// A horizontal bar of labelled parts, each as wide as its share of the total.
pub fn bar(parts: &[(&str, i64, &str)]) -> Markup {
    let total: i64 = parts.iter().map(|(_, n, _)| (*n).max(0)).sum();
    html! {
        div.bar role="img" aria-label=(parts.iter().map(|(l, n, _)| format!("{l} {n}")).collect::<Vec<_>>().join(", ")) {
            @for (label, count, class) in parts {
                @if *count > 0 && total > 0 {
                    span class={"part " (class)} style={"width:" (format!("{:.2}", *count as f64 * 100.0 / total as f64)) "%"}
                        title={(label) ": " (count)} {}
                }
            }
        }
    }
}

/// A used-against-asked meter (`used` of `of`, in `unit`).
pub fn meter(label: &str, used: i64, of: i64, shown: &str) -> Markup {
    let pct = if of > 0 {
        (used as f64 * 100.0 / of as f64).clamp(0.0, 100.0)
    } else {
        0.0
    };
    html! {
        div.meter {
            span.meter-label { (label) }
            div.meter-track {
                span.meter-fill class=[(pct > 90.0).then_some("hot")] style={"width:" (format!("{pct:.1}")) "%"} {}
            }
            span.meter-value { (shown) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_are_shown_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_796_000_000), "2026-11-30 00:53:20 UTC");
        assert_eq!(
            time_ns(1_700_000_000_123_456_789),
            "2023-11-14 22:13:20 UTC"
        );
        assert_eq!(time_ns(0), "");
    }

    #[test]
    fn missing_fields_read_as_empty() {
        let v = json!({"A": "x", "N": 3, "F": 2.9, "L": [1], "O": {"b": 1, "a": 2}});
        assert_eq!((s(&v, "A"), s(&v, "B")), ("x", ""));
        assert_eq!((n(&v, "N"), n(&v, "F"), n(&v, "Z")), (3, 2, 0));
        assert_eq!(list(&v, "L").len(), 1);
        assert!(list(&v, "Z").is_empty());
        let keys: Vec<_> = entries(&v, "O").into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(n_at(&json!({"A": {"B": 5}}), &["A", "B"]), 5);
    }

    #[test]
    fn bytes_use_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }

    #[test]
    fn bars_size_parts_by_share_and_skip_empty_ones() {
        let html = bar(&[
            ("running", 3, "good"),
            ("failed", 1, "bad"),
            ("lost", 0, "bad"),
        ])
        .into_string();
        assert!(html.contains("width:75.00%"), "{html}");
        assert!(html.contains("width:25.00%"), "{html}");
        assert!(!html.contains("lost: 0"), "{html}");
    }
}
