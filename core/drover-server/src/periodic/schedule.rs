//! When a periodic job launches next: its cron expressions evaluated on the wall clock of its
//! time zone (Nomad's `PeriodicConfig.Next`). A wall-clock time that a daylight-saving jump
//! skips runs at the same offset after the jump; one that repeats runs at its first occurrence.

use drover_structs::{PERIODIC_SPEC_CRON, PeriodicConfig};
use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

use drover_structs::cron::{Civil, CronExpr};

/// The zone a periodic block names (empty: UTC), with Go's error text for an unknown one.
pub(crate) fn zone(name: &str) -> Result<TimeZone, String> {
    if name.is_empty() || name == "UTC" {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| format!("unknown time zone {name}"))
}

fn civil_at(tz: &TimeZone, unix_nanos: i64) -> Result<Civil, String> {
    let ts = Timestamp::from_nanosecond(i128::from(unix_nanos)).map_err(|e| e.to_string())?;
    let dt = ts.to_zoned(tz.clone()).datetime();
    Ok(Civil::new(
        i32::from(dt.year()),
        dt.month() as u32,
        dt.day() as u32,
        dt.hour() as u32,
        dt.minute() as u32,
        dt.second() as u32,
    ))
}

fn instant_of(tz: &TimeZone, c: Civil) -> Result<i64, String> {
    let small = |v: u32| i8::try_from(v).map_err(|e| e.to_string());
    let year = i16::try_from(c.year).map_err(|e| e.to_string())?;
    let dt = DateTime::new(
        year,
        small(c.month)?,
        small(c.day)?,
        small(c.hour)?,
        small(c.minute)?,
        small(c.second)?,
        0,
    )
    .map_err(|e| e.to_string())?;
    let ts = tz
        .to_ambiguous_timestamp(dt)
        .compatible()
        .map_err(|e| e.to_string())?;
    i64::try_from(ts.as_nanosecond()).map_err(|e| e.to_string())
}

/// The first time of `expr` strictly after `after` (unix nanoseconds) in `tz`.
fn next_of(expr: &CronExpr, tz: &TimeZone, after: i64) -> Result<Option<i64>, String> {
    let mut c = civil_at(tz, after)?;
    // A repeated wall-clock hour can map a later civil time to an earlier instant; step on
    // until the instant is after `after`.
    for _ in 0..10_000 {
        let Some(next) = expr.next_after(c) else {
            return Ok(None);
        };
        let at = instant_of(tz, next)?;
        if at > after {
            return Ok(Some(at));
        }
        c = next;
    }
    Ok(None)
}

/// The next launch of a periodic job after `after` (unix nanoseconds): the earliest of its
/// expressions. `None` when none will match again (or the spec type is not cron).
pub(crate) fn next_launch(p: &PeriodicConfig, after: i64) -> Result<Option<i64>, String> {
    if p.spec_type != PERIODIC_SPEC_CRON {
        return Ok(None);
    }
    let tz = zone(p.zone_name())?;
    let mut earliest: Option<i64> = None;
    for spec in p.cron_specs() {
        let expr = CronExpr::parse(spec)
            .map_err(|e| format!("failed parsing cron expression {spec}: {e}"))?;
        if let Some(at) = next_of(&expr, &tz, after)? {
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        }
    }
    Ok(earliest)
}

/// The offset from UTC, in seconds, of `zone_name` (empty: UTC) at `unix_nanos`: what the
/// launch time reads as on the job's wall clock.
pub(crate) fn utc_offset_secs(zone_name: &str, unix_nanos: i64) -> Result<i32, String> {
    let tz = zone(zone_name)?;
    let ts = Timestamp::from_nanosecond(i128::from(unix_nanos)).map_err(|e| e.to_string())?;
    Ok(tz.to_offset(ts).seconds())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> i64 {
        let ts: Timestamp = rfc3339.parse().unwrap();
        ts.as_nanosecond() as i64
    }

    fn periodic(specs: &[&str], tz: &str) -> PeriodicConfig {
        PeriodicConfig {
            enabled: true,
            spec: if specs.len() == 1 {
                specs[0].into()
            } else {
                String::new()
            },
            specs: if specs.len() == 1 {
                Vec::new()
            } else {
                specs.iter().map(|s| s.to_string()).collect()
            },
            spec_type: "cron".into(),
            prohibit_overlap: false,
            time_zone: tz.into(),
        }
    }

    fn next(p: &PeriodicConfig, after: &str) -> i64 {
        next_launch(p, at(after)).unwrap().unwrap()
    }

    #[test]
    fn launch_times_follow_the_job_time_zone_and_its_daylight_saving() {
        let nine = periodic(&["0 9 * * *"], "America/New_York");
        // Winter: 09:00 EST is 14:00 UTC.
        assert_eq!(
            next(&nine, "2024-01-15T15:00:00Z"),
            at("2024-01-16T14:00:00Z")
        );
        // Summer: 09:00 EDT is 13:00 UTC.
        assert_eq!(
            next(&nine, "2024-07-15T12:00:00Z"),
            at("2024-07-15T13:00:00Z")
        );
        let utc = periodic(&["0 9 * * *"], "");
        assert_eq!(
            next(&utc, "2024-07-15T12:00:00Z"),
            at("2024-07-16T09:00:00Z")
        );
        let tokyo = periodic(&["30 8 * * *"], "Asia/Tokyo");
        assert_eq!(
            next(&tokyo, "2024-07-15T00:00:00Z"),
            at("2024-07-15T23:30:00Z")
        );
    }

    #[test]
    fn skipped_and_repeated_wall_clock_times() {
        let half_past_two = periodic(&["30 2 * * *"], "America/New_York");
        // 2024-03-10 02:30 does not exist in New York: it runs at 03:30 EDT.
        assert_eq!(
            next(&half_past_two, "2024-03-10T05:00:00Z"),
            at("2024-03-10T07:30:00Z")
        );
        let half_past_one = periodic(&["30 1 * * *"], "America/New_York");
        // 2024-11-03 01:30 happens twice; it runs once, at the first (EDT).
        assert_eq!(
            next(&half_past_one, "2024-11-03T04:00:00Z"),
            at("2024-11-03T05:30:00Z")
        );
        assert_eq!(
            next(&half_past_one, "2024-11-03T05:30:00Z"),
            at("2024-11-04T06:30:00Z")
        );
    }

    #[test]
    fn the_earliest_of_several_crons_wins_and_seconds_are_honoured() {
        let both = periodic(&["0 12 * * *", "0 6 * * *"], "UTC");
        assert_eq!(
            next(&both, "2024-01-01T07:00:00Z"),
            at("2024-01-01T12:00:00Z")
        );
        assert_eq!(
            next(&both, "2024-01-01T13:00:00Z"),
            at("2024-01-02T06:00:00Z")
        );
        let every_second = periodic(&["* * * * * * *"], "UTC");
        assert_eq!(
            next_launch(&every_second, at("2024-01-01T00:00:00Z") + 500_000_000),
            Ok(Some(at("2024-01-01T00:00:01Z")))
        );
    }

    #[test]
    fn unknown_zones_and_bad_specs_are_errors() {
        let p = periodic(&["* * * * *"], "Mars/Olympus_Mons");
        assert_eq!(
            next_launch(&p, 0).unwrap_err(),
            "unknown time zone Mars/Olympus_Mons"
        );
        let p = periodic(&["* *"], "UTC");
        assert_eq!(
            next_launch(&p, 0).unwrap_err(),
            "failed parsing cron expression * *: missing field(s)"
        );
    }

    #[test]
    fn offsets_follow_the_zone_and_its_daylight_saving() {
        assert_eq!(utc_offset_secs("", at("2024-01-15T15:00:00Z")), Ok(0));
        assert_eq!(
            utc_offset_secs("America/New_York", at("2024-01-15T15:00:00Z")),
            Ok(-5 * 3600)
        );
        assert_eq!(
            utc_offset_secs("America/New_York", at("2024-07-15T15:00:00Z")),
            Ok(-4 * 3600)
        );
        assert_eq!(
            utc_offset_secs("Asia/Kolkata", at("2024-07-15T15:00:00Z")),
            Ok(5 * 3600 + 1800)
        );
        assert!(utc_offset_secs("Mars/Olympus_Mons", 0).is_err());
    }
}
