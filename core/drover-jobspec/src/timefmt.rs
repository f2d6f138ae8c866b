//! RFC 3339 timestamps for the `timeadd` function.

use crate::duration::parse_duration;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn num(s: &str, range: std::ops::Range<usize>) -> Result<i64, String> {
    s.get(range)
        .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("not a valid RFC3339 timestamp: {s:?}"))
}

/// `timeadd(timestamp, duration)`: adds a Go duration (which may be negative)
/// to an RFC 3339 timestamp, keeping its UTC offset.
pub(crate) fn time_add(ts: &str, duration: &str) -> Result<String, String> {
    let bad = || format!("not a valid RFC3339 timestamp: {ts:?}");
    if ts.len() < 20
        || ts
            .as_bytes()
            .get(10)
            .is_none_or(|b| !matches!(b, b'T' | b't'))
    {
        return Err(bad());
    }
    let (y, mo, d) = (num(ts, 0..4)?, num(ts, 5..7)?, num(ts, 8..10)?);
    let (h, mi, s) = (num(ts, 11..13)?, num(ts, 14..16)?, num(ts, 17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return Err(bad());
    }
    let mut rest = ts.get(19..).ok_or_else(bad)?;
    let mut nanos: i64 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        let digits = frac.get(..n.min(9)).ok_or_else(bad)?;
        if digits.is_empty() {
            return Err(bad());
        }
        nanos = digits.parse::<i64>().map_err(|_| bad())? * 10i64.pow(9 - digits.len() as u32);
        rest = frac.get(n..).ok_or_else(bad)?;
    }
    let offset_secs = match rest {
        "Z" | "z" => None,
        _ if rest.len() == 6 && matches!(rest.as_bytes().first(), Some(b'+' | b'-')) => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            Some(sign * (num(rest, 1..3)? * 3600 + num(rest, 4..6)? * 60))
        }
        _ => return Err(bad()),
    };
    let (negative, magnitude) = match duration.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, duration),
    };
    let delta = parse_duration(magnitude).map_err(|e| e.to_string())?;
    let delta = i128::try_from(delta.as_nanos()).map_err(|_| "duration too large".to_string())?;
    let local_secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s;
    let total = i128::from(local_secs) * 1_000_000_000
        + i128::from(nanos)
        + if negative { -delta } else { delta };
    let secs = i64::try_from(total.div_euclid(1_000_000_000))
        .map_err(|_| "time out of range".to_string())?;
    let frac = total.rem_euclid(1_000_000_000);
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let mut out = format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    );
    if frac != 0 {
        out.push_str(format!(".{frac:09}").trim_end_matches('0'));
    }
    match offset_secs {
        None => out.push('Z'),
        Some(o) => out.push_str(&format!(
            "{}{:02}:{:02}",
            if o < 0 { '-' } else { '+' },
            o.abs() / 3600,
            o.abs() % 3600 / 60
        )),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeadd_crosses_day_and_year_boundaries() {
        assert_eq!(
            time_add("2017-11-22T00:00:00Z", "10m").as_deref(),
            Ok("2017-11-22T00:10:00Z")
        );
        assert_eq!(
            time_add("2017-12-31T23:30:00+01:00", "1h").as_deref(),
            Ok("2018-01-01T00:30:00+01:00")
        );
        assert_eq!(
            time_add("2020-03-01T00:00:00Z", "-24h").as_deref(),
            Ok("2020-02-29T00:00:00Z")
        );
        assert_eq!(
            time_add("2020-03-01T00:00:00.5Z", "250ms").as_deref(),
            Ok("2020-03-01T00:00:00.75Z")
        );
        assert!(time_add("yesterday", "1h").is_err());
    }
}
