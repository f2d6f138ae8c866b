//! Cron expressions evaluated as hashicorp/cronexpr (Nomad's periodic `cron`) does: 5 to 7
//! fields, `[second] minute hour day-of-month month day-of-week [year]` (a sixth field is the
//! year, a seventh makes the first one seconds), the `@daily` style aliases, lists, ranges and
//! steps, month and weekday names, `L`/`LW`/`15W` in the day of month and `5L`/`5#3` in the day
//! of week. When both day fields are restricted a day matching either one matches (crontab's
//! rule). Times are civil (wall clock) times; zones are the caller's business.

use std::collections::BTreeSet;

/// Why an expression does not parse, in cronexpr's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CronError(String);

/// A wall-clock time to the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Civil {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl Civil {
    pub fn new(year: i32, month: u32, day: u32, hour: u32, minute: u32, second: u32) -> Civil {
        Civil {
            year,
            month,
            day,
            hour,
            minute,
            second,
        }
    }
}

/// The last year cronexpr knows.
const MAX_YEAR: i32 = 2099;
const MIN_YEAR: i32 = 1970;

#[derive(Clone, Copy)]
enum Field {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
    Year,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
            Field::Year => "year",
        }
    }

    fn range(self) -> (i32, i32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 6),
            Field::Year => (MIN_YEAR, MAX_YEAR),
        }
    }

    /// One value: a number in range, or a month or weekday name.
    fn value(self, s: &str) -> Option<i32> {
        const MONTHS: [&str; 12] = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        const MONTHS_LONG: [&str; 12] = [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ];
        const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        const DAYS_LONG: [&str; 7] = [
            "sunday",
            "monday",
            "tuesday",
            "wednesday",
            "thursday",
            "friday",
            "saturday",
        ];
        if !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit()) {
            let v: i32 = s.parse().ok()?;
            let (min, max) = self.range();
            // Sunday is 0 or 7.
            let max = if matches!(self, Field::DayOfWeek) {
                7
            } else {
                max
            };
            return (min..=max).contains(&v).then_some(v);
        }
        let position = |names: &[&str]| names.iter().position(|n| *n == s).map(|i| i as i32);
        match self {
            Field::Month => position(&MONTHS)
                .or_else(|| position(&MONTHS_LONG))
                .map(|i| i + 1),
            Field::DayOfWeek => position(&DAYS).or_else(|| position(&DAYS_LONG)),
            _ => None,
        }
    }
}

/// What one comma-separated entry of a field means.
enum Entry {
    /// `*` or `?`.
    All,
    /// Values from `first` to `last` by `step`.
    Span { first: i32, last: i32, step: i32 },
    /// Anything else: `L`, `15W`, `5#3`... for the day fields to read, an error otherwise.
    Other,
}

fn parse_entry(entry: &str, field: Field) -> Result<Entry, CronError> {
    let (min, max) = field.range();
    if entry == "*" || entry == "?" {
        return Ok(Entry::All);
    }
    let (base, step) = match entry.split_once('/') {
        Some((base, step)) => {
            let step: i32 = step
                .parse()
                .ok()
                .filter(|s| (1..=max).contains(s))
                .ok_or_else(|| CronError(format!("invalid interval {entry}")))?;
            (base, Some(step))
        }
        None => (entry, None),
    };
    if base == "*" {
        return Ok(Entry::Span {
            first: min,
            last: max,
            step: step.unwrap_or(1),
        });
    }
    if let Some((from, to)) = base.split_once('-')
        && let (Some(first), Some(last)) = (field.value(from), field.value(to))
    {
        return Ok(Entry::Span {
            first,
            last,
            step: step.unwrap_or(1),
        });
    }
    match field.value(base) {
        // `5/15`: from 5 to the end of the range.
        Some(first) => Ok(Entry::Span {
            first,
            last: if step.is_some() { max } else { first },
            step: step.unwrap_or(1),
        }),
        None if step.is_none() => Ok(Entry::Other),
        None => Err(syntax_error(field, entry)),
    }
}

fn syntax_error(field: Field, entry: &str) -> CronError {
    CronError(format!("syntax error in {} field: '{entry}'", field.name()))
}

fn entries(field_text: &str) -> impl Iterator<Item = String> + '_ {
    field_text
        .split(',')
        .filter(|e| !e.is_empty())
        .map(str::to_ascii_lowercase)
}

/// A plain field: the sorted values it allows.
fn plain_field(text: &str, field: Field) -> Result<Vec<i32>, CronError> {
    let (min, max) = field.range();
    let mut values = BTreeSet::new();
    for entry in entries(text) {
        match parse_entry(&entry, field)? {
            Entry::All => return Ok((min..=max).collect()),
            Entry::Span { first, last, step } => {
                values.extend((first..=last.min(max)).step_by(step as usize));
            }
            Entry::Other => return Err(syntax_error(field, &entry)),
        }
    }
    if values.is_empty() {
        return Err(CronError(format!(
            "{} field: missing directive",
            field.name()
        )));
    }
    Ok(values.into_iter().collect())
}

/// The day-of-month field.
#[derive(Debug, Clone, Default)]
struct DaysOfMonth {
    restricted: bool,
    days: BTreeSet<i32>,
    /// `15W`: the weekday nearest the 15th, within the month.
    workdays: BTreeSet<i32>,
    last: bool,
    last_workday: bool,
}

/// The day-of-week field (0 = Sunday).
#[derive(Debug, Clone, Default)]
struct DaysOfWeek {
    restricted: bool,
    days: BTreeSet<i32>,
    /// `5#3` as `(3 - 1) * 7 + 5`.
    nth: BTreeSet<i32>,
    /// `5L`: the last of that weekday in the month.
    last: BTreeSet<i32>,
}

fn dom_field(text: &str) -> Result<DaysOfMonth, CronError> {
    let mut d = DaysOfMonth {
        restricted: true,
        ..Default::default()
    };
    for entry in entries(text) {
        match parse_entry(&entry, Field::DayOfMonth)? {
            Entry::All => d.restricted = false,
            Entry::Span { first, last, step } => {
                d.days.extend((first..=last).step_by(step as usize));
            }
            Entry::Other => match entry.as_str() {
                "l" => d.last = true,
                "lw" => d.last_workday = true,
                _ => match entry
                    .strip_suffix('w')
                    .and_then(|v| Field::DayOfMonth.value(v))
                {
                    Some(day) => {
                        d.workdays.insert(day);
                    }
                    None => return Err(syntax_error(Field::DayOfMonth, &entry)),
                },
            },
        }
    }
    Ok(d)
}

fn dow_field(text: &str) -> Result<DaysOfWeek, CronError> {
    let mut d = DaysOfWeek {
        restricted: true,
        ..Default::default()
    };
    for entry in entries(text) {
        match parse_entry(&entry, Field::DayOfWeek)? {
            Entry::All => d.restricted = false,
            Entry::Span { first, last, step } => {
                d.days
                    .extend((first..=last).step_by(step as usize).map(|v| v % 7));
            }
            Entry::Other => {
                if let Some(day) = entry
                    .strip_suffix('l')
                    .and_then(|v| Field::DayOfWeek.value(v))
                {
                    d.last.insert(day % 7);
                } else if let Some((day, nth)) = entry.split_once('#')
                    && let Some(day) = Field::DayOfWeek.value(day)
                    && let Ok(nth @ 1..=5) = nth.parse::<i32>()
                {
                    d.nth.insert((nth - 1) * 7 + day % 7);
                } else {
                    return Err(syntax_error(Field::DayOfWeek, &entry));
                }
            }
        }
    }
    Ok(d)
}

/// A parsed cron expression.
#[derive(Debug, Clone)]
pub struct CronExpr {
    seconds: Vec<i32>,
    minutes: Vec<i32>,
    hours: Vec<i32>,
    dom: DaysOfMonth,
    months: Vec<i32>,
    dow: DaysOfWeek,
    years: Vec<i32>,
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// 0 = Sunday (Sakamoto's method).
fn weekday(year: i32, month: u32, day: u32) -> i32 {
    const T: [i32; 12] = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];
    let y = if month < 3 { year - 1 } else { year };
    (y + y / 4 - y / 100 + y / 400 + T[month as usize - 1] + day as i32).rem_euclid(7)
}

/// The weekday nearest `day` without leaving the month (cronexpr's `workdayOfMonth`).
fn workday_near(year: i32, month: u32, day: i32) -> i32 {
    let last = days_in_month(year, month) as i32;
    match weekday(year, month, day as u32) {
        6 if day > 1 => day - 1,
        6 => day + 2,
        0 if day < last => day + 1,
        0 => day - 2,
        _ => day,
    }
}

fn first_at_least(values: &[i32], from: i32) -> Option<i32> {
    values.iter().copied().find(|v| *v >= from)
}

impl CronExpr {
    pub fn parse(line: &str) -> Result<CronExpr, CronError> {
        let normalized = match line.trim() {
            "@yearly" | "@annually" => "0 0 0 1 1 * *",
            "@monthly" => "0 0 0 1 * * *",
            "@weekly" => "0 0 0 * * 0 *",
            "@daily" | "@midnight" => "0 0 0 * * * *",
            "@hourly" => "0 0 * * * * *",
            other => other,
        };
        let mut fields: Vec<&str> = normalized.split_whitespace().collect();
        if fields.len() < 5 {
            return Err(CronError("missing field(s)".into()));
        }
        // cronexpr ignores fields beyond the seventh.
        fields.truncate(7);
        let seconds = if fields.len() == 7 {
            plain_field(fields.remove(0), Field::Second)?
        } else {
            vec![0]
        };
        let years = match fields.get(5) {
            Some(text) => plain_field(text, Field::Year)?,
            None => (MIN_YEAR..=MAX_YEAR).collect(),
        };
        Ok(CronExpr {
            seconds,
            minutes: plain_field(fields[0], Field::Minute)?,
            hours: plain_field(fields[1], Field::Hour)?,
            dom: dom_field(fields[2])?,
            months: plain_field(fields[3], Field::Month)?,
            dow: dow_field(fields[4])?,
            years,
        })
    }

    /// The days of a month the expression allows (cronexpr's `calculateActualDaysOfMonth`).
    fn days(&self, year: i32, month: u32) -> Vec<i32> {
        let last = days_in_month(year, month) as i32;
        if !self.dom.restricted && !self.dow.restricted {
            return (1..=last).collect();
        }
        let mut days = BTreeSet::new();
        if self.dom.restricted {
            if self.dom.last {
                days.insert(last);
            }
            if self.dom.last_workday {
                days.insert(workday_near(year, month, last));
            }
            days.extend(self.dom.days.iter().copied().filter(|d| *d <= last));
            days.extend(
                self.dom
                    .workdays
                    .iter()
                    .filter(|d| **d <= last)
                    .map(|d| workday_near(year, month, *d)),
            );
        }
        if self.dow.restricted {
            let first = weekday(year, month, 1);
            // The first day of the month that falls on weekday `w`.
            let first_on = |w: i32| 1 + (w - first).rem_euclid(7);
            for w in &self.dow.days {
                days.extend((first_on(*w)..=last).step_by(7));
            }
            for n in &self.dow.nth {
                let day = first_on(n % 7) + 7 * (n / 7);
                if day <= last {
                    days.insert(day);
                }
            }
            for w in &self.dow.last {
                let mut day = first_on(*w);
                while day + 7 <= last {
                    day += 7;
                }
                days.insert(day);
            }
        }
        days.into_iter().collect()
    }

    /// The first time strictly after `from` that the expression matches, `None` if there is
    /// none before the end of 2099.
    pub fn next_after(&self, from: Civil) -> Option<Civil> {
        let mut c = step_second(from)?;
        // Every round moves `c` forward to the start of a later unit; the bound only guards
        // against an expression no date can satisfy (the 30th of February...).
        for _ in 0..100_000 {
            if c.year > MAX_YEAR {
                return None;
            }
            if !self.years.contains(&c.year) {
                let year = first_at_least(&self.years, c.year + 1)?;
                c = Civil::new(year, 1, 1, 0, 0, 0);
                continue;
            }
            if !self.months.contains(&(c.month as i32)) {
                c = match first_at_least(&self.months, c.month as i32 + 1) {
                    Some(m) => Civil::new(c.year, m as u32, 1, 0, 0, 0),
                    None => Civil::new(c.year + 1, 1, 1, 0, 0, 0),
                };
                continue;
            }
            let days = self.days(c.year, c.month);
            if !days.contains(&(c.day as i32)) {
                c = match first_at_least(&days, c.day as i32 + 1) {
                    Some(d) => Civil::new(c.year, c.month, d as u32, 0, 0, 0),
                    None => next_month(c),
                };
                continue;
            }
            if !self.hours.contains(&(c.hour as i32)) {
                c = match first_at_least(&self.hours, c.hour as i32 + 1) {
                    Some(h) => Civil::new(c.year, c.month, c.day, h as u32, 0, 0),
                    None => next_day(c),
                };
                continue;
            }
            if !self.minutes.contains(&(c.minute as i32)) {
                c = match first_at_least(&self.minutes, c.minute as i32 + 1) {
                    Some(m) => Civil::new(c.year, c.month, c.day, c.hour, m as u32, 0),
                    None => next_hour(c),
                };
                continue;
            }
            if !self.seconds.contains(&(c.second as i32)) {
                c = match first_at_least(&self.seconds, c.second as i32 + 1) {
                    Some(s) => Civil::new(c.year, c.month, c.day, c.hour, c.minute, s as u32),
                    None => next_minute(c),
                };
                continue;
            }
            return Some(c);
        }
        None
    }
}

fn next_month(c: Civil) -> Civil {
    if c.month >= 12 {
        Civil::new(c.year + 1, 1, 1, 0, 0, 0)
    } else {
        Civil::new(c.year, c.month + 1, 1, 0, 0, 0)
    }
}

fn next_day(c: Civil) -> Civil {
    if c.day >= days_in_month(c.year, c.month) {
        next_month(c)
    } else {
        Civil::new(c.year, c.month, c.day + 1, 0, 0, 0)
    }
}

fn next_hour(c: Civil) -> Civil {
    if c.hour >= 23 {
        next_day(c)
    } else {
        Civil::new(c.year, c.month, c.day, c.hour + 1, 0, 0)
    }
}

fn next_minute(c: Civil) -> Civil {
    if c.minute >= 59 {
        next_hour(c)
    } else {
        Civil::new(c.year, c.month, c.day, c.hour, c.minute + 1, 0)
    }
}

fn step_second(c: Civil) -> Option<Civil> {
    if c.year > MAX_YEAR {
        return None;
    }
    Some(if c.second >= 59 {
        next_minute(c)
    } else {
        Civil {
            second: c.second + 1,
            ..c
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(expr: &str, from: Civil) -> Civil {
        CronExpr::parse(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .next_after(from)
            .unwrap_or_else(|| panic!("{expr}: no next time"))
    }

    #[test]
    fn five_fields_run_on_the_minute_and_seven_on_the_second() {
        let from = Civil::new(2024, 1, 15, 10, 20, 30);
        assert_eq!(next("* * * * *", from), Civil::new(2024, 1, 15, 10, 21, 0));
        assert_eq!(
            next("*/15 * * * *", from),
            Civil::new(2024, 1, 15, 10, 30, 0)
        );
        // Six fields: the sixth is the year, not seconds.
        assert_eq!(
            next("* * * * * *", from),
            Civil::new(2024, 1, 15, 10, 21, 0)
        );
        assert_eq!(
            next("0 0 1 1 * 2030", from),
            Civil::new(2030, 1, 1, 0, 0, 0)
        );
        assert_eq!(
            next("* * * * * * *", from),
            Civil::new(2024, 1, 15, 10, 20, 31)
        );
        assert_eq!(
            next("*/10 * * * * * *", from),
            Civil::new(2024, 1, 15, 10, 20, 40)
        );
    }

    #[test]
    fn carries_cross_hours_days_months_and_years() {
        assert_eq!(
            next("0 0 * * *", Civil::new(2023, 12, 31, 23, 59, 59)),
            Civil::new(2024, 1, 1, 0, 0, 0)
        );
        assert_eq!(
            next("30 2 1,15 * *", Civil::new(2024, 1, 15, 3, 0, 0)),
            Civil::new(2024, 2, 1, 2, 30, 0)
        );
        assert_eq!(
            next("0 0 29 2 *", Civil::new(2024, 3, 1, 0, 0, 0)),
            Civil::new(2028, 2, 29, 0, 0, 0)
        );
        assert_eq!(
            next("@hourly", Civil::new(2024, 1, 1, 5, 0, 0)),
            Civil::new(2024, 1, 1, 6, 0, 0)
        );
        assert_eq!(
            next("@weekly", Civil::new(2024, 1, 1, 5, 0, 0)),
            Civil::new(2024, 1, 7, 0, 0, 0)
        );
        assert!(
            CronExpr::parse("0 0 30 2 *")
                .unwrap()
                .next_after(Civil::new(2024, 1, 1, 0, 0, 0))
                .is_none()
        );
    }

    #[test]
    fn day_fields_follow_cronexpr() {
        // 2024-01-01 is a Monday.
        let from = Civil::new(2024, 1, 1, 12, 0, 0);
        assert_eq!(
            next("0 9 * * mon-fri", Civil::new(2024, 1, 5, 12, 0, 0)),
            Civil::new(2024, 1, 8, 9, 0, 0)
        );
        assert_eq!(next("0 0 L * ?", from), Civil::new(2024, 1, 31, 0, 0, 0));
        assert_eq!(next("0 0 * * 5L", from), Civil::new(2024, 1, 26, 0, 0, 0));
        assert_eq!(
            next("0 0 * JAN,jul sun#2", from),
            Civil::new(2024, 1, 14, 0, 0, 0)
        );
        // The 6th of January 2024 is a Saturday: 6W is Friday the 5th.
        assert_eq!(next("0 0 6W * *", from), Civil::new(2024, 1, 5, 0, 0, 0));
        // Both day fields restricted: either matches.
        assert_eq!(next("0 0 20 * sun", from), Civil::new(2024, 1, 7, 0, 0, 0));
        assert_eq!(next("0 0 * * 7", from), Civil::new(2024, 1, 7, 0, 0, 0));
    }

    #[test]
    fn malformed_expressions_read_like_cronexpr() {
        let err = |e: &str| CronExpr::parse(e).unwrap_err().to_string();
        assert_eq!(err("* *"), "missing field(s)");
        assert_eq!(err("61 * * * *"), "syntax error in minute field: '61'");
        assert_eq!(err("* * * foo *"), "syntax error in month field: 'foo'");
        assert_eq!(err("*/0 * * * *"), "invalid interval */0");
    }
}
