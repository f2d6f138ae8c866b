//! Directory entries as Nomad's filesystem API describes them: Go's mode strings, RFC 3339
//! times and a sniffed content type.

use std::fs::{self, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How many bytes are read to guess a file's content type (as Go's `http.DetectContentType`).
const SNIFF_LEN: usize = 512;

/// One entry of a directory listing, serialised as Nomad's `AllocFileInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AllocFileInfo {
    pub name: String,
    pub is_dir: bool,
    pub size: u64,
    /// Go's `FileMode.String()`, e.g. `-rw-r--r--`, `drwxrwxrwx`, `Lrwxrwxrwx`.
    pub file_mode: String,
    /// RFC 3339 with nanoseconds, UTC.
    pub mod_time: String,
    /// Only set by [`AllocDir::stat`](super::AllocDir::stat); left out of JSON when empty, as in Nomad.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content_type: String,
}

pub(super) fn file_info(name: String, metadata: &Metadata, content_type: String) -> AllocFileInfo {
    let mod_time = metadata.modified().unwrap_or(UNIX_EPOCH);
    AllocFileInfo {
        name,
        is_dir: metadata.is_dir(),
        size: metadata.len(),
        file_mode: go_file_mode(metadata),
        mod_time: format_rfc3339_nano(mod_time),
        content_type,
    }
}

/// Go's `os.FileMode.String()`: one letter per set type bit from "dalTLDpSugct?" (`-` if none),
/// then the nine permission bits.
pub fn go_file_mode(metadata: &Metadata) -> String {
    let file_type = metadata.file_type();
    let mode = metadata.mode();
    let mut out = String::with_capacity(12);
    if file_type.is_dir() {
        out.push('d');
    }
    if file_type.is_symlink() {
        out.push('L');
    }
    if file_type.is_block_device() || file_type.is_char_device() {
        out.push('D');
    }
    if file_type.is_fifo() {
        out.push('p');
    }
    if file_type.is_socket() {
        out.push('S');
    }
    if mode & 0o4000 != 0 {
        out.push('u');
    }
    if mode & 0o2000 != 0 {
        out.push('g');
    }
    if file_type.is_char_device() {
        out.push('c');
    }
    if mode & 0o1000 != 0 {
        out.push('t');
    }
    if out.is_empty() {
        out.push('-');
    }
    const RWX: &[u8; 9] = b"rwxrwxrwx";
    for (i, letter) in RWX.iter().enumerate() {
        let bit = 1 << (8 - i);
        out.push(if mode & bit != 0 {
            char::from(*letter)
        } else {
            '-'
        });
    }
    out
}

/// RFC 3339 in UTC with Go's RFC3339Nano fraction (trailing zeros dropped, none if zero).
pub fn format_rfc3339_nano(time: SystemTime) -> String {
    let (secs, nanos) = match time.duration_since(UNIX_EPOCH) {
        Ok(since) => (
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
            since.subsec_nanos(),
        ),
        Err(before) => {
            let d = before.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                (-secs, 0)
            } else {
                (-secs - 1, 1_000_000_000 - d.subsec_nanos())
            }
        }
    };
    let days = secs.div_euclid(86_400);
    let day_secs = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        day_secs / 3600,
        (day_secs % 3600) / 60,
        day_secs % 60
    );
    if nanos != 0 {
        let fraction = format!("{nanos:09}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // day is 1..=31 and month 1..=12 by construction.
    (year, month as u32, day as u32)
}

/// Nomad's content type: a sniff of the first 512 bytes (a subset of Go's
/// `http.DetectContentType`), `application/json` for `.json` names, and
/// `application/octet-stream` for directories, empty or unreadable files.
pub(super) fn content_type(path: &Path, sniff: bool) -> String {
    let mut detected = "application/octet-stream";
    if sniff && let Ok(mut file) = fs::File::open(path) {
        let mut buf = [0u8; SNIFF_LEN];
        if let Ok(n) = file.read(&mut buf)
            && n > 0
        {
            detected = sniff_content_type(&buf[..n]);
        }
    }
    if path.extension().is_some_and(|ext| ext == "json") {
        detected = "application/json";
    }
    detected.to_string()
}

fn sniff_content_type(data: &[u8]) -> &'static str {
    const SIGNATURES: &[(&[u8], &str)] = &[
        (b"%PDF-", "application/pdf"),
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"\x1f\x8b\x08", "application/x-gzip"),
        (b"PK\x03\x04", "application/zip"),
        (b"\x7fELF", "application/octet-stream"),
    ];
    if let Some((_, kind)) = SIGNATURES.iter().find(|(magic, _)| data.starts_with(magic)) {
        return kind;
    }
    let trimmed = data
        .iter()
        .position(|b| !b" \t\n\r\x0c".contains(b))
        .map_or(&[][..], |start| &data[start..]);
    let starts_with_ignore_case = |prefix: &[u8]| {
        trimmed.len() >= prefix.len() && trimmed[..prefix.len()].eq_ignore_ascii_case(prefix)
    };
    if starts_with_ignore_case(b"<!DOCTYPE HTML") || starts_with_ignore_case(b"<html") {
        return "text/html; charset=utf-8";
    }
    if starts_with_ignore_case(b"<?xml") {
        return "text/xml; charset=utf-8";
    }
    // Go's "binary data" bytes: control characters other than tab, newline, form feed, CR, ESC.
    let is_binary = |b: &u8| matches!(b, 0x00..=0x08 | 0x0B | 0x0E..=0x1A | 0x1C..=0x1F);
    if data.iter().any(is_binary) {
        "application/octet-stream"
    } else {
        "text/plain; charset=utf-8"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffing_recognises_common_signatures() {
        assert_eq!(sniff_content_type(b"\x89PNG\r\n\x1a\nrest"), "image/png");
        assert_eq!(sniff_content_type(b"%PDF-1.4"), "application/pdf");
        assert_eq!(
            sniff_content_type(b"  <html><body>"),
            "text/html; charset=utf-8"
        );
        assert_eq!(
            sniff_content_type(b"<?xml version"),
            "text/xml; charset=utf-8"
        );
        assert_eq!(
            sniff_content_type("héllo\twörld".as_bytes()),
            "text/plain; charset=utf-8"
        );
    }

    #[test]
    fn rfc3339_formatting_matches_go() {
        let at = |secs: u64, nanos: u32| {
            format_rfc3339_nano(UNIX_EPOCH + std::time::Duration::new(secs, nanos))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_700_000_000, 120_000_000), "2023-11-14T22:13:20.12Z");
        assert_eq!(at(4_102_444_799, 1), "2099-12-31T23:59:59.000000001Z");
        assert_eq!(
            format_rfc3339_nano(UNIX_EPOCH - std::time::Duration::from_millis(500)),
            "1969-12-31T23:59:59.5Z"
        );
    }
}
