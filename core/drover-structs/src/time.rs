//! Time helpers: Nomad writes timestamps as unix nanoseconds (i64) in most places and as RFC 3339
//! strings with nanoseconds in task states and node driver info. No clock crate needed for that.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now as unix nanoseconds.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Formats unix nanoseconds as RFC 3339 in UTC with nanoseconds, as Go's `time.Time` marshals:
/// `2026-11-29T16:24:26.075878645Z` (trailing zeros of the fraction trimmed).
pub fn format_rfc3339_nanos(unix_nanos: i64) -> String {
    let secs = unix_nanos.div_euclid(1_000_000_000);
    let nanos = unix_nanos.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let mut s = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        y,
        m,
        d,
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    );
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// Parses what `format_rfc3339_nanos` writes (UTC only, `Z` suffix) back to unix nanoseconds.
pub fn parse_rfc3339_nanos(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut dp = date.split('-');
    let y: i64 = dp.next()?.parse().ok()?;
    let m: u32 = dp.next()?.parse().ok()?;
    let d: u32 = dp.next()?.parse().ok()?;
    let (hms, frac) = match time.split_once('.') {
        Some((a, b)) => (a, b),
        None => (time, ""),
    };
    let mut tp = hms.split(':');
    let hh: i64 = tp.next()?.parse().ok()?;
    let mm: i64 = tp.next()?.parse().ok()?;
    let ss: i64 = tp.next()?.parse().ok()?;
    let mut nanos: i64 = 0;
    if !frac.is_empty() {
        if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        nanos = format!("{frac:0<9}").parse().ok()?;
    }
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || y.abs() > 1_000_000 {
        return None;
    }
    let days = days_from_civil(y, m, d);
    // Outside what i64 nanoseconds hold (Go's zero time, year 1, among them): no time.
    let secs = days
        .checked_mul(86_400)?
        .checked_add(hh * 3600 + mm * 60 + ss)?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

// Howard Hinnant's civil calendar algorithms.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Go's `time.Duration.String()` for a count of nanoseconds ("300ms", "1.5s", "1m0s").
pub fn go_duration(nanos: i64) -> String {
    const SEC: u64 = 1_000_000_000;
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
    if u < SEC {
        return format!("{sign}{}ms", fraction(u, 1_000_000));
    }
    let total = u / SEC;
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let secs = fraction(s * SEC + u % SEC, SEC);
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
    let (whole, rem) = (value / unit, value % unit);
    if rem == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let decimals = format!("{rem:0width$}");
    format!("{whole}.{}", decimals.trim_end_matches('0'))
}

#[cfg(test)]
mod go_duration_tests {
    use super::go_duration;

    #[test]
    fn durations_print_as_go_prints_them() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(300_000_000), "300ms");
        assert_eq!(go_duration(1_500_000_000), "1.5s");
        assert_eq!(go_duration(5_000_000_000), "5s");
        assert_eq!(go_duration(60_000_000_000), "1m0s");
        assert_eq!(go_duration(3_723_000_000_000), "1h2m3s");
        assert_eq!(go_duration(1_500), "1.5µs");
        assert_eq!(go_duration(7), "7ns");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_beyond_what_nanoseconds_hold_parse_to_none_not_a_panic() {
        assert_eq!(super::parse_rfc3339_nanos("0001-01-01T00:00:00Z"), None);
        assert_eq!(super::parse_rfc3339_nanos("2026-13-01T00:00:00Z"), None);
        assert!(super::parse_rfc3339_nanos("2026-12-01T00:00:00Z").is_some());
    }

    use super::*;

    #[test]
    fn formats_like_go_time_marshal() {
        assert_eq!(
            format_rfc3339_nanos(1_795_969_466_075_878_645),
            "2026-11-29T16:24:26.075878645Z"
        );
        assert_eq!(format_rfc3339_nanos(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_rfc3339_nanos(1_500_000_000),
            "1970-01-01T00:00:01.5Z"
        );
    }

    #[test]
    fn parse_inverts_format() {
        for n in [0, 1_795_969_466_075_878_645, 951_782_400_000_000_001] {
            assert_eq!(parse_rfc3339_nanos(&format_rfc3339_nanos(n)), Some(n));
        }
        assert_eq!(parse_rfc3339_nanos("garbage"), None);
    }
}
