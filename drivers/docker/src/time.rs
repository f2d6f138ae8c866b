//! Wall-clock time as the driver contract carries it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in nanoseconds; 0 if the clock is before 1970.
pub fn unix_nanos_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Unix time in whole seconds, as the daemon's `since` parameters take it.
pub fn unix_secs_now() -> i32 {
    i32::try_from(unix_nanos_now() / 1_000_000_000).unwrap_or(i32::MAX)
}
