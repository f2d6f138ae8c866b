//! Times as Nomad's CLI prints them: ISO 8601 in the local zone (`formatTime`), relative ages
//! (`prettyTimeDiff`: "1m5s ago") and Go's `time.Duration` strings ("1.5s", "5m0s").

use drover_structs::time::{format_rfc3339_nanos, now_nanos, parse_rfc3339_nanos};

const NANOS: i64 = 1_000_000_000;

/// Seconds east of UTC of the local zone at `unix_secs` (0 when the zone is unknown).
fn local_offset_secs(unix_secs: i64) -> i64 {
    // time_t is 64-bit on every platform drover targets; the cast is lossless there.
    let t = unix_secs as libc::time_t;
    // SAFETY: `tm` is plain old data that localtime_r fills in; all-zero is a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers refer to live locals for the duration of the call; localtime_r is
    // the re-entrant variant and keeps no reference to them.
    let res = unsafe { libc::localtime_r(&t, &mut tm) };
    if res.is_null() {
        0
    } else {
        tm.tm_gmtoff as i64
    }
}

/// `2006-01-02T15:04:05Z07:00` for a UTC offset given in seconds.
fn format_with_offset(unix_nanos: i64, offset_secs: i64) -> String {
    let secs = unix_nanos.div_euclid(NANOS);
    let shifted = format_rfc3339_nanos(secs.saturating_add(offset_secs).saturating_mul(NANOS));
    let civil = shifted.get(..19).unwrap_or(&shifted);
    if offset_secs == 0 {
        format!("{civil}Z")
    } else {
        let sign = if offset_secs < 0 { '-' } else { '+' };
        let abs = offset_secs.abs();
        format!("{civil}{sign}{:02}:{:02}", abs / 3600, (abs % 3600) / 60)
    }
}

/// Nomad's `formatTime`: local ISO 8601, or "" for times at or before the epoch.
pub fn format_time(unix_nanos: i64) -> String {
    if unix_nanos < NANOS {
        return String::new();
    }
    format_with_offset(unix_nanos, local_offset_secs(unix_nanos.div_euclid(NANOS)))
}

/// Nomad's `formatTime` of a time carried in a given zone (as Go's `time.Time` carries its
/// location): ISO 8601 with that zone's offset, "Z" for UTC, "" at or before the epoch.
pub fn format_time_at_offset(unix_nanos: i64, offset_secs: i64) -> String {
    if unix_nanos < NANOS {
        return String::new();
    }
    format_with_offset(unix_nanos, offset_secs)
}

/// Now, formatted like [`format_time`] (monitor lines).
pub fn now_formatted() -> String {
    format_time(now_nanos())
}

/// Parses the RFC 3339 strings the API uses for `time.Time` fields. Go's zero time
/// (`0001-01-01T00:00:00Z`) and anything outside years 1700..2500 read as `None`, which also
/// keeps the nanosecond arithmetic far from overflow.
pub fn parse_time(s: &str) -> Option<i64> {
    let year: i64 = s.get(..4)?.parse().ok()?;
    if !(1700..2500).contains(&year) {
        return None;
    }
    if let Some(utc) = parse_rfc3339_nanos(s) {
        return Some(utc);
    }
    // A numeric offset instead of `Z`: "...T10:00:00.5+02:00".
    let (local, offset) = s.split_at(s.len().checked_sub(6)?);
    let sign = match offset.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (hh, mm) = offset.get(1..)?.split_once(':')?;
    let offset_secs = sign * (hh.parse::<i64>().ok()? * 3600 + mm.parse::<i64>().ok()? * 60);
    let as_utc = parse_rfc3339_nanos(&format!("{local}Z"))?;
    Some(as_utc - offset_secs * NANOS)
}

/// Nomad's `formatTaskTimes`: the formatted time, or "N/A" when unset.
pub fn format_rfc3339_or_na(s: Option<&str>) -> String {
    match s.and_then(parse_time) {
        Some(n) => format_time(n),
        None => "N/A".into(),
    }
}

/// Nomad's `prettyTimeDiff(first, now)`: the two most significant units of the distance,
/// "0s ago" under a second, "from now" for future times, "" for the zero time.
pub fn pretty_time_diff(first_nanos: i64, now: i64) -> String {
    if first_nanos == 0 {
        return String::new();
    }
    let round = |n: i64| (n.saturating_add(NANOS / 2)).div_euclid(NANOS);
    let (first, second) = (round(first_nanos), round(now));
    let (secs, suffix) = if second >= first {
        (second - first, "ago")
    } else {
        (first - second, "from now")
    };
    let mut u = secs.unsigned_abs();
    // (value, unit) from least to most significant, zero values skipped.
    let mut parts: Vec<(u64, &str)> = Vec::new();
    let s = u % 60;
    if s > 0 {
        parts.push((s, "s"));
    }
    u /= 60;
    if u > 0 {
        if u % 60 > 0 {
            parts.push((u % 60, "m"));
        }
        u /= 60;
        if u > 0 {
            if u % 24 > 0 {
                parts.push((u % 24, "h"));
            }
            u /= 24;
        }
        if u > 0 {
            if u % 30 > 0 {
                parts.push((u % 30, "d"));
            }
            u /= 30;
        }
        if u > 0 {
            if u % 12 > 0 {
                parts.push((u % 12, "mo"));
            }
            u /= 12;
        }
        if u > 0 {
            parts.push((u, "y"));
        }
    }
    if parts.is_empty() {
        return format!("0s {suffix}");
    }
    let text: String = parts
        .iter()
        .rev()
        .take(2)
        .map(|(v, unit)| format!("{v}{unit}"))
        .collect();
    format!("{text} {suffix}")
}

/// [`pretty_time_diff`] against the current time.
pub fn ago(unix_nanos: i64) -> String {
    pretty_time_diff(unix_nanos, now_nanos())
}

/// Go's `time.Duration.String()` for a count of nanoseconds.
pub fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let u = nanos.unsigned_abs();
    if u < 1_000 {
        return format!("{sign}{u}ns");
    }
    if u < 1_000_000 {
        return format!("{sign}{}µs", fraction(u, 1_000));
    }
    if u < NANOS as u64 {
        return format!("{sign}{}ms", fraction(u, 1_000_000));
    }
    let total_secs = u / NANOS as u64;
    let frac = u % NANOS as u64;
    let (h, m, s) = (total_secs / 3600, (total_secs % 3600) / 60, total_secs % 60);
    let secs = fraction(s * NANOS as u64 + frac, NANOS as u64);
    if h > 0 {
        format!("{sign}{h}h{m}m{secs}s")
    } else if m > 0 {
        format!("{sign}{m}m{secs}s")
    } else {
        format!("{sign}{secs}s")
    }
}

/// `value / unit` with the remainder as decimals, trailing zeros dropped ("1.5", "12").
fn fraction(value: u64, unit: u64) -> String {
    let whole = value / unit;
    let rem = value % unit;
    if rem == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let decimals = format!("{rem:0width$}");
    format!("{whole}.{}", decimals.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_795_969_466_075_878_645; // 2026-11-29T16:24:26.075878645Z

    #[test]
    fn formats_iso8601_with_zone_suffix() {
        assert_eq!(format_with_offset(T0, 0), "2026-11-29T16:24:26Z");
        assert_eq!(format_with_offset(T0, 3600), "2026-11-29T17:24:26+01:00");
        assert_eq!(
            format_with_offset(T0, -(5 * 3600 + 1800)),
            "2026-11-29T10:54:26-05:30"
        );
    }

    #[test]
    fn epoch_and_zero_times_format_as_empty() {
        assert_eq!(format_time(0), "");
        assert_eq!(format_time(-5), "");
    }

    #[test]
    fn parses_utc_offset_and_rejects_go_zero_time() {
        assert_eq!(parse_time("2026-11-29T16:24:26.075878645Z"), Some(T0));
        assert_eq!(parse_time("2026-11-29T17:24:26.075878645+01:00"), Some(T0));
        assert_eq!(parse_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(parse_time("junk"), None);
        assert_eq!(format_rfc3339_or_na(None), "N/A");
    }

    #[test]
    fn pretty_diff_keeps_two_most_significant_units() {
        let s = NANOS;
        assert_eq!(pretty_time_diff(T0, T0 + 5 * s), "5s ago");
        assert_eq!(pretty_time_diff(T0, T0 + 65 * s), "1m5s ago");
        assert_eq!(pretty_time_diff(T0, T0 + 60 * s), "1m ago");
        assert_eq!(pretty_time_diff(T0, T0 + (3600 + 61) * s), "1h1m ago");
        assert_eq!(
            pretty_time_diff(T0, T0 + (2 * 86400 + 3 * 3600 + 7) * s),
            "2d3h ago"
        );
        assert_eq!(pretty_time_diff(T0, T0 + 100_000_000), "0s ago");
        assert_eq!(pretty_time_diff(T0 + 90 * s, T0), "1m30s from now");
        assert_eq!(pretty_time_diff(0, T0), "");
    }

    #[test]
    fn go_duration_strings() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(999), "999ns");
        assert_eq!(go_duration(52_340), "52.34µs");
        assert_eq!(go_duration(1_500_000), "1.5ms");
        assert_eq!(go_duration(1_500_000_000), "1.5s");
        assert_eq!(go_duration(300 * NANOS), "5m0s");
        assert_eq!(go_duration(3600 * NANOS), "1h0m0s");
        assert_eq!(go_duration(-2 * NANOS), "-2s");
    }
}
