//! Go's formatting of the values Nomad puts in its error texts: `time.Duration.String()` and
//! `%q` string quoting, so that messages read exactly as Nomad's do.

const SECOND: u64 = 1_000_000_000;

/// Go's `time.Duration.String()` for nanoseconds: `0s`, `1.5µs`, `250ms`, `1m30s`, `2h0m0s`.
pub(crate) fn duration(nanos: i64) -> String {
    let neg = nanos < 0;
    let u = nanos.unsigned_abs();
    let mut out = if u < SECOND {
        match u {
            0 => "0s".to_string(),
            1..=999 => format!("{u}ns"),
            1_000..=999_999 => format!("{}µs", fraction(u, 3)),
            _ => format!("{}ms", fraction(u, 6)),
        }
    } else {
        let secs = fraction(u, 9);
        let whole = u / SECOND;
        let frac_part = secs
            .split_once('.')
            .map(|(_, f)| format!(".{f}"))
            .unwrap_or_default();
        let (h, m, s) = (whole / 3600, (whole / 60) % 60, whole % 60);
        if h > 0 {
            format!("{h}h{m}m{s}{frac_part}s")
        } else if whole >= 60 {
            format!("{m}m{s}{frac_part}s")
        } else {
            format!("{s}{frac_part}s")
        }
    };
    if neg {
        out.insert(0, '-');
    }
    out
}

/// `v / 10^prec` with its fraction, trailing zeros (and a bare point) left out.
fn fraction(v: u64, prec: u32) -> String {
    let scale = 10u64.pow(prec);
    let (int, frac) = (v / scale, v % scale);
    if frac == 0 {
        return int.to_string();
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    format!("{int}.{}", digits.trim_end_matches('0'))
}

/// Go's `%q` (`strconv.Quote`): double quotes, Go escapes for control characters.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` of a `[]string`: `[a b c]`.
pub(crate) fn string_list(items: &[&str]) -> String {
    format!("[{}]", items.join(" "))
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
pub(crate) fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_like_go() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(5), "5ns");
        assert_eq!(duration(1_500), "1.5µs");
        assert_eq!(duration(250_000_000), "250ms");
        assert_eq!(duration(1_000_000_000), "1s");
        assert_eq!(duration(1_500_000_000), "1.5s");
        assert_eq!(duration(90 * SECOND as i64), "1m30s");
        assert_eq!(duration(3600 * SECOND as i64), "1h0m0s");
        assert_eq!(duration(86_400 * SECOND as i64), "24h0m0s");
        assert_eq!(duration(-2 * SECOND as i64), "-2s");
        assert_eq!(duration(61 * SECOND as i64 + 500_000_000), "1m1.5s");
    }

    #[test]
    fn quoting_follows_go() {
        assert_eq!(quote("a\"b"), "\"a\\\"b\"");
        assert_eq!(quote("x\ny"), "\"x\\ny\"");
        assert_eq!(quote("\u{1}"), "\"\\x01\"");
        assert_eq!(quote("é"), "\"é\"");
        assert_eq!(quoted_list(&["a", "b"]), "[\"a\" \"b\"]");
        assert_eq!(string_list(&["a", "b"]), "[a b]");
    }
}
