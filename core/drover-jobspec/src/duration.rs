//! Go's `time.ParseDuration` syntax: "300ms", "1.5h", "2h45m", "10s".

use std::time::Duration;

/// Nanoseconds per unit suffix Go accepts.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{00b5}s" | "\u{03bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses a Go duration string. Negative durations are rejected because
/// `std::time::Duration` cannot hold them; Go's limit of about 292 years applies.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let mut rest = s;
    let mut negative = false;
    if let Some(r) = rest.strip_prefix('-') {
        negative = true;
        rest = r;
    } else if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    // Exact arithmetic in units of 1e-18 ns would be overkill; fractions are
    // accumulated in f64 per term, integers exactly.
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after_int) = rest.split_at(int_len);
        let (frac_part, after_num) = match after_int.strip_prefix('.') {
            Some(r) => {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                r.split_at(n)
            }
            None => ("", after_int),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after_num
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map(|(i, _)| i)
            .unwrap_or(after_num.len());
        let (unit, next) = after_num.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {s:?}"));
        }
        let scale = unit_nanos(unit)
            .ok_or_else(|| format!("time: unknown unit {unit:?} in duration {s:?}"))?;
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse::<u128>().map_err(|_| invalid())?
        };
        let mut term = whole.checked_mul(scale).ok_or_else(invalid)?;
        if !frac_part.is_empty() {
            let digits = frac_part
                .get(..frac_part.len().min(18))
                .unwrap_or(frac_part);
            let frac: u128 = digits.parse().map_err(|_| invalid())?;
            let denom = 10u128.pow(u32::try_from(digits.len()).unwrap_or(18));
            term = term.checked_add(frac * scale / denom).ok_or_else(invalid)?;
        }
        total = total.checked_add(term).ok_or_else(invalid)?;
        if total > i64::MAX as u128 {
            return Err(invalid());
        }
        rest = next;
    }
    if negative && total != 0 {
        return Err(format!("time: negative duration {s:?} is not supported"));
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| invalid())?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| invalid())?;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_duration_forms_parse() {
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1us"), Ok(Duration::from_micros(1)));
        assert_eq!(parse_duration("1µs"), Ok(Duration::from_micros(1)));
        assert_eq!(parse_duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(
            parse_duration("2h45m0.5s"),
            Ok(Duration::from_millis(9_900_500))
        );
    }

    #[test]
    fn malformed_durations_are_rejected() {
        for bad in [
            "",
            "10",
            "10q",
            "s",
            ".s",
            "1h-",
            "1..5s",
            "-5s",
            "9999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should fail");
        }
    }
}
