//! Go's duration syntax (`time.ParseDuration`), as job files write timings: "30s", "1h30m",
//! "1.5s", "250ms". Units: ns, us (or µs, μs), ms, s, m, h; each number needs a unit, except a
//! lone "0".

use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit { unit: String, input: String },
    #[error("duration {0:?} is out of range")]
    Overflow(String),
}

const NANOS_PER_UNIT: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Go's limit: a duration is an i64 count of nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Splits leading ASCII digits off `s`.
fn take_digits(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// Parses a Go duration. A negative duration (valid in Go) becomes zero: as a timer it means
/// "now", which is all this crate uses durations for.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let (negative, mut rest) = match input.as_bytes().first() {
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        _ => (false, input),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (whole, after_whole) = take_digits(rest);
        let (fraction, after_number) = match after_whole.strip_prefix('.') {
            Some(after_dot) => take_digits(after_dot),
            None => ("", after_whole),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = after_number
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let scale = NANOS_PER_UNIT
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, nanos)| *nanos)
            .ok_or_else(|| DurationError::UnknownUnit {
                unit: unit.to_string(),
                input: input.to_string(),
            })?;
        let overflow = || DurationError::Overflow(input.to_string());
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| overflow())?
        };
        let mut value = whole.checked_mul(scale).ok_or_else(overflow)?;
        // Digits past nanosecond precision cannot change the result; ignore them as Go does.
        let mut place = scale;
        for digit in fraction.bytes() {
            place /= 10;
            if place == 0 {
                break;
            }
            value += u128::from(digit - b'0') * place;
        }
        total = total.checked_add(value).ok_or_else(overflow)?;
        if total > MAX_NANOS {
            return Err(overflow());
        }
        rest = after_unit;
    }
    if negative {
        return Ok(Duration::ZERO);
    }
    // `total` <= i64::MAX, so it fits a u64.
    Ok(Duration::from_nanos(
        u64::try_from(total).unwrap_or(u64::MAX),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Duration {
        parse_go_duration(s).unwrap()
    }

    #[test]
    fn single_units_parse() {
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("2us"), Duration::from_micros(2));
        assert_eq!(ok("2µs"), Duration::from_micros(2));
        assert_eq!(ok("2μs"), Duration::from_micros(2));
        assert_eq!(ok("7ns"), Duration::from_nanos(7));
        assert_eq!(ok("3m"), Duration::from_secs(180));
        assert_eq!(ok("2h"), Duration::from_secs(7200));
    }

    #[test]
    fn compound_and_fractional_values_parse() {
        assert_eq!(ok("1h2m3.5s"), Duration::from_millis(3_723_500));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("+10ms"), Duration::from_millis(10));
        assert_eq!(ok("1.0000000001s"), Duration::from_secs(1));
    }

    #[test]
    fn zero_and_negative_become_zero() {
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("-0"), Duration::ZERO);
        assert_eq!(ok("-1s"), Duration::ZERO);
    }

    #[test]
    fn malformed_durations_are_rejected() {
        assert_eq!(
            parse_go_duration(""),
            Err(DurationError::Invalid("".into()))
        );
        assert_eq!(
            parse_go_duration("."),
            Err(DurationError::Invalid(".".into()))
        );
        assert_eq!(
            parse_go_duration("s"),
            Err(DurationError::Invalid("s".into()))
        );
        assert_eq!(
            parse_go_duration("10"),
            Err(DurationError::MissingUnit("10".into()))
        );
        assert_eq!(
            parse_go_duration("3d"),
            Err(DurationError::UnknownUnit {
                unit: "d".into(),
                input: "3d".into()
            })
        );
        assert_eq!(
            parse_go_duration("1s2"),
            Err(DurationError::MissingUnit("1s2".into()))
        );
    }

    #[test]
    fn out_of_range_is_rejected() {
        // Go's maximum is about 2562047h.
        assert!(parse_go_duration("2562047h").is_ok());
        assert_eq!(
            parse_go_duration("2562048h"),
            Err(DurationError::Overflow("2562048h".into()))
        );
        assert_eq!(
            parse_go_duration("99999999999999999999999999999999999999999h"),
            Err(DurationError::Overflow(
                "99999999999999999999999999999999999999999h".into()
            ))
        );
    }
}
