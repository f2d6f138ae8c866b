//! Cron expressions as hashicorp/cronexpr reads them for periodic jobs: 5 to 7 fields
//! (`[second] minute hour day-of-month month day-of-week [year]`), the `@daily` style aliases,
//! lists, ranges, steps, month and weekday names, and `L`, `W`, `#` forms. Only whether an
//! expression parses matters here; the errors read as cronexpr's do.

/// Why a cron expression does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CronError(String);

impl std::fmt::Display for CronError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Clone, Copy)]
enum FieldKind {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
    Year,
}

impl FieldKind {
    fn name(self) -> &'static str {
        match self {
            FieldKind::Second => "second",
            FieldKind::Minute => "minute",
            FieldKind::Hour => "hour",
            FieldKind::DayOfMonth => "day-of-month",
            FieldKind::Month => "month",
            FieldKind::DayOfWeek => "day-of-week",
            FieldKind::Year => "year",
        }
    }

    fn range(self) -> (u32, u32) {
        match self {
            FieldKind::Second | FieldKind::Minute => (0, 59),
            FieldKind::Hour => (0, 23),
            FieldKind::DayOfMonth => (1, 31),
            FieldKind::Month => (1, 12),
            FieldKind::DayOfWeek => (0, 7),
            FieldKind::Year => (1970, 2099),
        }
    }

    fn names(self) -> &'static [(&'static str, u32)] {
        match self {
            FieldKind::Month => &MONTHS,
            FieldKind::DayOfWeek => &WEEKDAYS,
            _ => &[],
        }
    }
}

const MONTHS: [(&str, u32); 24] = [
    ("jan", 1),
    ("feb", 2),
    ("mar", 3),
    ("apr", 4),
    ("may", 5),
    ("jun", 6),
    ("jul", 7),
    ("aug", 8),
    ("sep", 9),
    ("oct", 10),
    ("nov", 11),
    ("dec", 12),
    ("january", 1),
    ("february", 2),
    ("march", 3),
    ("april", 4),
    ("may", 5),
    ("june", 6),
    ("july", 7),
    ("august", 8),
    ("september", 9),
    ("october", 10),
    ("november", 11),
    ("december", 12),
];

const WEEKDAYS: [(&str, u32); 14] = [
    ("sun", 0),
    ("mon", 1),
    ("tue", 2),
    ("wed", 3),
    ("thu", 4),
    ("fri", 5),
    ("sat", 6),
    ("sunday", 0),
    ("monday", 1),
    ("tuesday", 2),
    ("wednesday", 3),
    ("thursday", 4),
    ("friday", 5),
    ("saturday", 6),
];

/// Whether `line` is a cron expression cronexpr accepts.
pub(crate) fn parse(line: &str) -> Result<(), CronError> {
    let normalized = match line.trim() {
        "@yearly" | "@annually" => "0 0 0 1 1 * *",
        "@monthly" => "0 0 0 1 * * *",
        "@weekly" => "0 0 0 * * 0 *",
        "@daily" | "@midnight" => "0 0 0 * * * *",
        "@hourly" => "0 0 * * * * *",
        _ => line,
    };
    let mut fields: Vec<&str> = normalized.split_whitespace().collect();
    if fields.len() < 5 {
        return Err(CronError("missing field(s)".into()));
    }
    // cronexpr ignores fields beyond the seventh.
    fields.truncate(7);
    let kinds: &[FieldKind] = match fields.len() {
        5 => &[
            FieldKind::Minute,
            FieldKind::Hour,
            FieldKind::DayOfMonth,
            FieldKind::Month,
            FieldKind::DayOfWeek,
        ],
        6 => &[
            FieldKind::Minute,
            FieldKind::Hour,
            FieldKind::DayOfMonth,
            FieldKind::Month,
            FieldKind::DayOfWeek,
            FieldKind::Year,
        ],
        _ => &[
            FieldKind::Second,
            FieldKind::Minute,
            FieldKind::Hour,
            FieldKind::DayOfMonth,
            FieldKind::Month,
            FieldKind::DayOfWeek,
            FieldKind::Year,
        ],
    };
    for (field, kind) in fields.iter().zip(kinds) {
        for entry in field.split(',') {
            if !entry_ok(entry, *kind) {
                return Err(CronError(format!(
                    "syntax error in {} field: '{entry}'",
                    kind.name()
                )));
            }
        }
    }
    Ok(())
}

fn value(s: &str, kind: FieldKind) -> Option<u32> {
    let (min, max) = kind.range();
    if !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u32>().ok().filter(|v| (min..=max).contains(v));
    }
    let lower = s.to_ascii_lowercase();
    kind.names()
        .iter()
        .find(|(name, _)| *name == lower)
        .map(|(_, v)| *v)
}

fn entry_ok(entry: &str, kind: FieldKind) -> bool {
    let wildcard = |s: &str| {
        s == "*" || (s == "?" && matches!(kind, FieldKind::DayOfMonth | FieldKind::DayOfWeek))
    };
    if wildcard(entry) {
        return true;
    }
    match kind {
        FieldKind::DayOfMonth => {
            if entry == "L" || entry == "LW" {
                return true;
            }
            if let Some(day) = entry.strip_suffix('W') {
                return value(day, kind).is_some();
            }
        }
        FieldKind::DayOfWeek => {
            if let Some(day) = entry.strip_suffix('L') {
                return value(day, kind).is_some();
            }
            if let Some((day, nth)) = entry.split_once('#') {
                return value(day, kind).is_some() && matches!(nth, "1" | "2" | "3" | "4" | "5");
            }
        }
        _ => {}
    }
    let (base, step) = match entry.split_once('/') {
        Some((b, s)) => (b, Some(s)),
        None => (entry, None),
    };
    if let Some(step) = step
        && !(!step.is_empty()
            && step.len() <= 4
            && step.bytes().all(|b| b.is_ascii_digit())
            && step.parse::<u32>().is_ok_and(|n| n > 0))
    {
        return false;
    }
    if wildcard(base) {
        return step.is_some() || base == "*";
    }
    match base.split_once('-') {
        Some((from, to)) => value(from, kind).is_some() && value(to, kind).is_some(),
        None => value(base, kind).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_expressions_parse() {
        for ok in [
            "* * * * *",
            "*/15 * * * *",
            "0 9-17 * * mon-fri",
            "30 2 1,15 * *",
            "0 0 L * ?",
            "0 0 * JAN,jul sun#2",
            "0 0 0 * * * 2030",
            "@daily",
            "@weekly",
            "0 30 4 1 * ? *",
        ] {
            assert!(parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn errors_name_the_field_like_cronexpr() {
        assert_eq!(parse("* *").unwrap_err().to_string(), "missing field(s)");
        assert_eq!(
            parse("61 * * * *").unwrap_err().to_string(),
            "syntax error in minute field: '61'"
        );
        assert_eq!(
            parse("* * * foo *").unwrap_err().to_string(),
            "syntax error in month field: 'foo'"
        );
        assert_eq!(
            parse("* 25 * * *").unwrap_err().to_string(),
            "syntax error in hour field: '25'"
        );
        assert_eq!(
            parse("*/0 * * * *").unwrap_err().to_string(),
            "syntax error in minute field: '*/0'"
        );
    }
}
