//! Logging from a plugin into the agent's log. Lines go to the host's log function when the host
//! provides one (every Drover agent does for a cdylib), otherwise to stderr. Each line carries
//! the plugin's package name.
//!
//! In sidecar mode every line goes to stderr as one JSON object in hclog's format
//! (`@level`, `@message`, `@module`, `@timestamp`), which the agent (Drover's or Nomad's
//! go-plugin client) reads from the plugin's stderr and logs at that level.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use drover_abi_ffi::LogLevel;
use drover_abi_ffi::plugin;

static SOURCE: OnceLock<&'static str> = OnceLock::new();
static SIDECAR: AtomicBool = AtomicBool::new(false);

/// Called by `export_driver!` with the plugin crate's name; the first name set stays.
pub fn set_source(name: &'static str) {
    let _ = SOURCE.set(name);
}

/// Switches to hclog JSON lines on stderr; the sidecar server calls it at start.
pub fn use_stderr_json() {
    SIDECAR.store(true, Ordering::Relaxed);
}

fn source() -> &'static str {
    SOURCE.get().copied().unwrap_or("plugin")
}

fn emit(level: LogLevel, message: &str) {
    if SIDECAR.load(Ordering::Relaxed) {
        eprintln!(
            "{}",
            hclog_line(level, source(), message, SystemTime::now())
        );
    } else {
        plugin::log(level, source(), message);
    }
}

/// One hclog JSON line.
fn hclog_line(level: LogLevel, module: &str, message: &str, at: SystemTime) -> String {
    let level = match level {
        LogLevel::Error => "error",
        LogLevel::Warn => "warn",
        LogLevel::Info => "info",
        LogLevel::Debug => "debug",
    };
    serde_json::json!({
        "@level": level,
        "@message": message,
        "@module": module,
        "@timestamp": rfc3339_micros(at),
    })
    .to_string()
}

/// `2006-01-02T15:04:05.000000Z`, the timestamp layout hclog writes and go-plugin parses.
fn rfc3339_micros(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_micros()
    )
}

/// Logs `message` at level error in the agent's log (a sidecar: hclog JSON on stderr).
pub fn error(message: impl std::fmt::Display) {
    emit(LogLevel::Error, &message.to_string());
}

/// Logs `message` at level warn in the agent's log.
pub fn warn(message: impl std::fmt::Display) {
    emit(LogLevel::Warn, &message.to_string());
}

/// Logs `message` at level info in the agent's log.
pub fn info(message: impl std::fmt::Display) {
    emit(LogLevel::Info, &message.to_string());
}

/// Logs `message` at level debug in the agent's log.
pub fn debug(message: impl std::fmt::Display) {
    emit(LogLevel::Debug, &message.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn hclog_lines_carry_level_message_module_and_utc_time() {
        let at = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        let line: serde_json::Value =
            serde_json::from_str(&hclog_line(LogLevel::Warn, "skel", "hi \"x\"", at)).unwrap();
        assert_eq!(line["@level"], "warn");
        assert_eq!(line["@message"], "hi \"x\"");
        assert_eq!(line["@module"], "skel");
        assert_eq!(line["@timestamp"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(rfc3339_micros(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(&rfc3339_micros(leap)[..10], "2000-02-29");
    }
}
