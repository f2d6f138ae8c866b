//! Nomad's JSON stream frames, the non-plain format of the logs and file streaming APIs.

use serde::Serialize;

/// One frame of Nomad's streaming file and logs APIs. Empty fields are left out of the JSON, as
/// Nomad leaves them out; a frame with nothing set (`{}`) is a heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct StreamFrame<'a> {
    /// Offset in `file` just after `data`.
    #[serde(skip_serializing_if = "is_zero")]
    pub offset: u64,
    /// The bytes, base64 encoded (Go encodes `[]byte` so).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub data: String,
    /// Path relative to the allocation dir.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub file: &'a str,
    /// `"file deleted"` or `"file truncated"`, else empty.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub file_event: &'a str,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `{"Offset":N,"Data":"<base64>","File":"alloc/logs/x.stdout.0"}`, one frame of Nomad's
/// non-plain logs stream.
pub fn stream_frame_json(file_rel: &str, offset: u64, data: &[u8]) -> String {
    let frame = StreamFrame {
        offset,
        data: base64_encode(data),
        file: file_rel,
        file_event: "",
    };
    // A struct of integers and strings always serialises.
    serde_json::to_string(&frame).unwrap_or_else(|_| "{}".to_string())
}

/// Standard base64 with padding (RFC 4648), what Go's encoding/json produces for `[]byte`.
pub fn base64_encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for group in data.chunks(3) {
        let b = [
            group[0],
            group.get(1).copied().unwrap_or(0),
            group.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if group.len() > 1 { sextet(6) } else { '=' });
        out.push(if group.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

/// Standard base64 (RFC 4648, as [`base64_encode`] writes it; padding may be left out) back to
/// bytes; `None` for anything else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        Some(u32::from(v))
    }
    let body = text.trim_end_matches('=');
    if text.len() - body.len() > 2 || body.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    for group in body.as_bytes().chunks(4) {
        let mut n = 0u32;
        for (i, &c) in group.iter().enumerate() {
            n |= sextet(c)? << (18 - 6 * i);
        }
        // A group of k characters carries k - 1 bytes (k is 2, 3 or 4).
        out.extend_from_slice(&n.to_be_bytes()[1..group.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let cases: [(&str, &str); 7] = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(base64_encode(plain.as_bytes()), encoded);
        }
        assert_eq!(base64_encode(&[0xff, 0xfe, 0x00]), "//4A");
        for (plain, encoded) in cases {
            assert_eq!(base64_decode(encoded), Some(plain.as_bytes().to_vec()));
        }
        assert_eq!(base64_decode("//4A"), Some(vec![0xff, 0xfe, 0x00]));
        assert_eq!(base64_decode("Zm8"), Some(b"fo".to_vec()), "unpadded");
        assert_eq!(base64_decode("Zm9v!A=="), None);
        assert_eq!(base64_decode("Z"), None);
        assert_eq!(base64_decode("Zg==="), None);
    }

    #[test]
    fn stream_frame_json_has_nomads_fields_and_omits_empty_ones() {
        assert_eq!(
            stream_frame_json("alloc/logs/web.stdout.0", 6, b"hello\n"),
            r#"{"Offset":6,"Data":"aGVsbG8K","File":"alloc/logs/web.stdout.0"}"#
        );
        assert_eq!(stream_frame_json("", 0, b""), "{}");
        let event = StreamFrame {
            offset: 0,
            data: String::new(),
            file: "alloc/logs/web.stdout.0",
            file_event: "file truncated",
        };
        assert_eq!(
            serde_json::to_string(&event).expect("json"),
            r#"{"File":"alloc/logs/web.stdout.0","FileEvent":"file truncated"}"#
        );
    }
}
