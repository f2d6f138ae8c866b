//! Wall-clock timestamps as the contract carries them.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch; 0 if the clock is before 1970 (it never is on a sane host).
pub fn unix_nanos_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
