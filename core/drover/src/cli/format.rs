//! Text layout shared by every command: Nomad's columnize tables (`formatList`, `formatKV`),
//! identifier truncation, byte sizes and Go's `%q` / `%.3g` renderings.

/// Short identifiers: the first 8 characters of a UUID, as Nomad prints them by default.
pub const SHORT_ID: usize = 8;
/// Full identifiers (`-verbose`).
pub const FULL_ID: usize = 36;

/// How a table treats its cells, mirroring the columnize configs Nomad uses.
struct Columns<'a> {
    /// Put between columns.
    glue: &'a str,
    /// Replaces cells that are empty after trimming; `None` leaves them blank.
    empty: Option<&'a str>,
}

/// Nomad's `formatList`: `|`-separated rows aligned in columns two spaces apart, blank cells
/// shown as `<none>` so the output stays awk-able.
pub fn format_list<S: AsRef<str>>(rows: &[S]) -> String {
    columnize(
        rows,
        &Columns {
            glue: "  ",
            empty: Some("<none>"),
        },
    )
}

/// Nomad's `formatListWithSpaces`: like [`format_list`] but blank cells stay blank.
pub fn format_list_with_spaces<S: AsRef<str>>(rows: &[S]) -> String {
    columnize(
        rows,
        &Columns {
            glue: "  ",
            empty: None,
        },
    )
}

/// Nomad's `formatKV`: `Key|Value` rows rendered as aligned `Key = Value` lines.
pub fn format_kv<S: AsRef<str>>(rows: &[S]) -> String {
    columnize(
        rows,
        &Columns {
            glue: " = ",
            empty: Some("<none>"),
        },
    )
}

/// ryanuber/columnize: every row is split on `|`, cells are trimmed, each column is as wide as
/// its widest cell (counted in characters) and the last cell of a row is never padded. Rows with
/// fewer cells use the widths of the leading columns only.
fn columnize<S: AsRef<str>>(rows: &[S], cfg: &Columns<'_>) -> String {
    let cells: Vec<Vec<&str>> = rows
        .iter()
        .map(|row| {
            row.as_ref()
                .split('|')
                .map(|cell| {
                    let cell = cell.trim();
                    match cfg.empty {
                        Some(placeholder) if cell.is_empty() => placeholder,
                        _ => cell,
                    }
                })
                .collect()
        })
        .collect();

    let mut widths: Vec<usize> = Vec::new();
    for row in &cells {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(max) => *max = (*max).max(w),
                None => widths.push(w),
            }
        }
    }

    let mut out = String::new();
    for row in &cells {
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                out.push_str(cell);
            } else {
                out.push_str(cell);
                let pad = widths[i].saturating_sub(cell.chars().count());
                out.extend(std::iter::repeat_n(' ', pad));
                out.push_str(cfg.glue);
            }
        }
        out.push('\n');
    }
    // columnize drops the final newline only.
    out.pop();
    out
}

/// Nomad's `limit`: at most `length` characters of `s`.
pub fn limit(s: &str, length: usize) -> &str {
    match s.char_indices().nth(length) {
        Some((byte, _)) => &s[..byte],
        None => s,
    }
}

/// Go's `%q` for the strings Nomad quotes in messages (IDs, group names, constraints).
pub fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// go-humanize's `IBytes`: `300 MiB`, `1.5 GiB`, `512 B`.
pub fn humanize_ibytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 10 {
        return format!("{bytes} B");
    }
    let b = bytes as f64;
    let exp = (b.ln() / 1024f64.ln()).floor() as usize;
    let exp = exp.min(UNITS.len() - 1);
    let val = (b / 1024f64.powi(exp as i32) * 10.0 + 0.5).floor() / 10.0;
    if val < 10.0 {
        format!("{val:.1} {}", UNITS[exp])
    } else {
        format!("{val:.0} {}", UNITS[exp])
    }
}

/// Megabytes (as the API counts memory and disk) rendered with [`humanize_ibytes`].
pub fn humanize_mb(mb: i64) -> String {
    humanize_ibytes(u64::try_from(mb).unwrap_or(0).saturating_mul(1024 * 1024))
}

/// Go's `%.3g`: three significant digits, trailing zeros dropped, exponent form only for very
/// small or large magnitudes (`0.0766`, `-0.28`, `1`, `1.23e+03`).
pub fn format_g3(v: f64) -> String {
    const PREC: i32 = 3;
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sign = if v < 0.0 { "-" } else { "" };
    // `{:.2e}` rounds to three significant digits: "7.66e-2".
    let sci = format!("{:.*e}", (PREC - 1) as usize, v.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let nd = digits.len() as i32;
    // Decimal point position in Go's decimal representation: value = 0.DIGITS * 10^dp.
    let dp = exp + 1;

    let mut eprec = PREC;
    if eprec > nd && nd >= dp {
        eprec = nd;
    }
    if exp < -4 || exp >= eprec {
        let prec = PREC.min(nd);
        let mut s = String::from(sign);
        s.push_str(&digits[..1]);
        if prec > 1 {
            s.push('.');
            s.push_str(&digits[1..prec as usize]);
        }
        let (esign, eabs) = if exp < 0 { ('-', -exp) } else { ('+', exp) };
        s.push_str(&format!("e{esign}{eabs:02}"));
        return s;
    }
    let prec = if PREC > dp { nd } else { PREC };
    let decimals = (prec - dp).max(0);
    let digit_at = |i: i32| -> char {
        if i >= 0 && i < nd {
            digits.as_bytes()[i as usize] as char
        } else {
            '0'
        }
    };
    let mut s = String::from(sign);
    if dp > 0 {
        for i in 0..dp {
            s.push(digit_at(i));
        }
    } else {
        s.push('0');
    }
    if decimals > 0 {
        s.push('.');
        for i in 0..decimals {
            s.push(digit_at(dp + i));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_aligns_columns_and_leaves_last_column_unpadded() {
        let out = format_list(&[
            "ID|Type|Priority|Status",
            "sleep50|service|50|running",
            "a|batch|100|dead",
        ]);
        assert_eq!(
            out,
            "ID       Type     Priority  Status\n\
             sleep50  service  50        running\n\
             a        batch    100       dead"
        );
    }

    #[test]
    fn list_replaces_blank_cells_with_none_placeholder() {
        let out = format_list(&["ID|Class|Status", "abc| |ready"]);
        assert_eq!(out, "ID   Class   Status\nabc  <none>  ready");
    }

    #[test]
    fn list_with_spaces_keeps_blank_cells_blank() {
        let out = format_list_with_spaces(&["CPU|Memory|Addresses", "100 MHz|300 MiB|"]);
        assert_eq!(out, "CPU      Memory   Addresses\n100 MHz  300 MiB  ");
    }

    #[test]
    fn kv_aligns_equals_signs() {
        let out = format_kv(&["ID|sleep50", "Submit Date|x", "Desired Description|"]);
        assert_eq!(
            out,
            "ID                  = sleep50\n\
             Submit Date         = x\n\
             Desired Description = <none>"
        );
    }

    #[test]
    fn rows_with_fewer_cells_use_leading_widths() {
        let out = format_list(&["a|bbbb|c", "xx|y"]);
        assert_eq!(out, "a   bbbb  c\nxx  y");
    }

    #[test]
    fn widths_count_characters_not_bytes() {
        let out = format_list(&["µs|x", "ab|y"]);
        assert_eq!(out, "µs  x\nab  y");
    }

    #[test]
    fn empty_input_renders_empty_string() {
        assert_eq!(format_list::<&str>(&[]), "");
    }

    #[test]
    fn limit_truncates_to_length() {
        assert_eq!(limit("0d816e8c-19bd-2066", SHORT_ID), "0d816e8c");
        assert_eq!(limit("abc", SHORT_ID), "abc");
    }

    #[test]
    fn ibytes_matches_go_humanize() {
        assert_eq!(humanize_ibytes(5), "5 B");
        assert_eq!(humanize_mb(300), "300 MiB");
        assert_eq!(humanize_mb(1024), "1.0 GiB");
        assert_eq!(humanize_mb(1536), "1.5 GiB");
        assert_eq!(humanize_mb(0), "0 B");
    }

    #[test]
    fn g3_matches_go_formatting() {
        assert_eq!(format_g3(0.07663658455308327), "0.0766");
        assert_eq!(format_g3(-0.28), "-0.28");
        assert_eq!(format_g3(0.0), "0");
        assert_eq!(format_g3(1.0), "1");
        assert_eq!(format_g3(100.0), "100");
        assert_eq!(format_g3(12.5), "12.5");
        assert_eq!(format_g3(1234.0), "1.23e+03");
        assert_eq!(format_g3(0.00001234), "1.23e-05");
        assert_eq!(format_g3(0.5), "0.5");
    }
}
