//! Parameterized jobs and dispatch: the typed view of a job's `ParameterizedJob` block, the
//! rules a dispatch request must follow (Nomad's `validateDispatchRequest`, with its texts), the
//! ids of dispatched children, and the payload as a job carries it: snappy-compressed, then
//! base64 in JSON (as Nomad stores `Job.Payload`).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::job::Job;

/// Children of a parameterized job are named `<parent>/dispatch-<unix seconds>-<8 hex>`.
pub const DISPATCH_LAUNCH_SUFFIX: &str = "/dispatch-";
/// The largest payload a dispatch may carry (Nomad's `DispatchPayloadSizeLimit`).
pub const DISPATCH_PAYLOAD_SIZE_LIMIT: usize = 16 * 1024;
pub const DISPATCH_PAYLOAD_OPTIONAL: &str = "optional";
pub const DISPATCH_PAYLOAD_REQUIRED: &str = "required";
pub const DISPATCH_PAYLOAD_FORBIDDEN: &str = "forbidden";

/// Nomad's `ParameterizedJobConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ParameterizedJobConfig {
    #[serde(rename = "Payload")]
    pub payload: String,
    #[serde(rename = "MetaRequired", deserialize_with = "null_as_empty")]
    pub meta_required: Vec<String>,
    #[serde(rename = "MetaOptional", deserialize_with = "null_as_empty")]
    pub meta_optional: Vec<String>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

/// The body of `POST /v1/job/:id/dispatch` (Nomad's `JobDispatchRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobDispatchRequest {
    #[serde(rename = "JobID")]
    pub job_id: String,
    /// Base64, as Go encodes `[]byte`.
    #[serde(rename = "Payload")]
    pub payload: Option<String>,
    #[serde(rename = "Meta")]
    pub meta: Option<BTreeMap<String, String>>,
    #[serde(rename = "IdPrefixTemplate")]
    pub id_prefix_template: String,
    /// Nomad's `WriteRequest.IdempotencyToken`: a dispatch carrying the token of a child that
    /// still exists returns that child instead of creating one.
    #[serde(rename = "IdempotencyToken")]
    pub idempotency_token: String,
}

impl JobDispatchRequest {
    /// The payload's bytes.
    pub fn payload_bytes(&self) -> Result<Vec<u8>, String> {
        match self.payload.as_deref() {
            None | Some("") => Ok(Vec::new()),
            Some(b64) => STANDARD
                .decode(b64)
                .map_err(|e| format!("Payload is not valid base64: {e}")),
        }
    }
}

impl Job {
    /// The job's `ParameterizedJob` block, whether or not the job is a dispatched child.
    pub fn parameterized_config(&self) -> Option<ParameterizedJobConfig> {
        let value = self.parameterized_job.as_ref().filter(|p| !p.is_null())?;
        serde_json::from_value(value.clone()).ok()
    }
}

/// Go's `%v` of a string slice: `[a b]`.
fn go_list(keys: &[&str]) -> String {
    format!("[{}]", keys.join(" "))
}

/// Nomad's `validateDispatchRequest`: the payload rule, the size limit, and the meta keys
/// (none outside the declared ones, every required one present).
pub fn validate_dispatch(
    config: &ParameterizedJobConfig,
    payload: &[u8],
    meta: &BTreeMap<String, String>,
) -> Result<(), String> {
    let has_payload = !payload.is_empty();
    match config.payload.as_str() {
        DISPATCH_PAYLOAD_REQUIRED if !has_payload => {
            return Err("Payload is not provided but required by parameterized job".into());
        }
        DISPATCH_PAYLOAD_FORBIDDEN if has_payload => {
            return Err("Payload provided but forbidden by parameterized job".into());
        }
        _ => {}
    }
    if payload.len() > DISPATCH_PAYLOAD_SIZE_LIMIT {
        return Err(format!(
            "Payload exceeds maximum size; {} > {DISPATCH_PAYLOAD_SIZE_LIMIT}",
            payload.len()
        ));
    }
    let declared = |k: &str| {
        config.meta_required.iter().any(|r| r == k) || config.meta_optional.iter().any(|o| o == k)
    };
    let unpermitted: Vec<&str> = meta
        .keys()
        .map(String::as_str)
        .filter(|k| !declared(k))
        .collect();
    if !unpermitted.is_empty() {
        return Err(format!(
            "Dispatch request included unpermitted metadata keys: {}",
            go_list(&unpermitted)
        ));
    }
    let mut missing: Vec<&str> = config
        .meta_required
        .iter()
        .map(String::as_str)
        .filter(|k| !meta.contains_key(*k))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if !missing.is_empty() {
        return Err(format!(
            "Dispatch did not provide required meta keys: {}",
            go_list(&missing)
        ));
    }
    Ok(())
}

/// Nomad's `DispatchedID`: `<parent>/dispatch-[<template>-]<unix seconds>-<suffix>`, where
/// `suffix` is the first 8 characters of a fresh UUID.
pub fn dispatched_id(
    parent: &str,
    id_prefix_template: &str,
    unix_secs: i64,
    suffix: &str,
) -> String {
    if id_prefix_template.is_empty() {
        format!("{parent}{DISPATCH_LAUNCH_SUFFIX}{unix_secs}-{suffix}")
    } else {
        format!("{parent}{DISPATCH_LAUNCH_SUFFIX}{id_prefix_template}-{unix_secs}-{suffix}")
    }
}

/// A payload as a dispatched job carries it in `Job.Payload`: snappy, then base64.
pub fn encode_job_payload(raw: &[u8]) -> Value {
    Value::String(STANDARD.encode(snappy::compress(raw)))
}

/// The bytes of a dispatched job's `Job.Payload` (empty when it has none).
pub fn decode_job_payload(payload: &Value) -> Result<Vec<u8>, String> {
    let Some(b64) = payload.as_str().filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    let compressed = STANDARD
        .decode(b64)
        .map_err(|e| format!("payload is not base64: {e}"))?;
    snappy::decompress(&compressed)
}

/// The snappy block format (what Go's `snappy.Encode` writes). Compression here emits only
/// literals: payloads are small, and any snappy reader takes them; decompression reads copies
/// too.
mod snappy {
    /// Largest literal one element carries here.
    const CHUNK: usize = 65_536;

    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    pub(super) fn compress(raw: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(raw.len() + raw.len() / CHUNK * 3 + 8);
        put_varint(&mut out, raw.len() as u64);
        for chunk in raw.chunks(CHUNK) {
            let n = chunk.len() - 1;
            if n < 60 {
                out.push((n as u8) << 2);
            } else if n < 256 {
                out.push(60 << 2);
                out.push(n as u8);
            } else {
                out.push(61 << 2);
                out.extend_from_slice(&(n as u16).to_le_bytes());
            }
            out.extend_from_slice(chunk);
        }
        out
    }

    pub(super) fn decompress(data: &[u8]) -> Result<Vec<u8>, String> {
        let corrupt = || "payload is not valid snappy data".to_string();
        let mut pos = 0usize;
        let mut len: u64 = 0;
        let mut shift = 0;
        loop {
            let b = *data.get(pos).ok_or_else(corrupt)?;
            pos += 1;
            len |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
            shift += 7;
            if shift > 35 {
                return Err(corrupt());
            }
        }
        let len = usize::try_from(len).map_err(|_| corrupt())?;
        // Payloads are small; a declared length far beyond the input is corruption.
        if len > data.len().saturating_mul(64) + 64 {
            return Err(corrupt());
        }
        let mut out = Vec::with_capacity(len);
        let read_le = |pos: usize, n: usize| -> Result<usize, String> {
            let bytes = data.get(pos..pos + n).ok_or_else(corrupt)?;
            Ok(bytes
                .iter()
                .rev()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)))
        };
        while pos < data.len() {
            let tag = data[pos];
            pos += 1;
            let (copy_len, offset) = match tag & 3 {
                0 => {
                    let mut n = usize::from(tag >> 2);
                    if n >= 60 {
                        let extra = n - 59;
                        n = read_le(pos, extra)?;
                        pos += extra;
                    }
                    let literal = data.get(pos..pos + n + 1).ok_or_else(corrupt)?;
                    out.extend_from_slice(literal);
                    pos += n + 1;
                    continue;
                }
                1 => {
                    let low = usize::from(*data.get(pos).ok_or_else(corrupt)?);
                    pos += 1;
                    (
                        4 + usize::from((tag >> 2) & 7),
                        (usize::from(tag >> 5) << 8) | low,
                    )
                }
                2 => {
                    let off = read_le(pos, 2)?;
                    pos += 2;
                    (1 + usize::from(tag >> 2), off)
                }
                _ => {
                    let off = read_le(pos, 4)?;
                    pos += 4;
                    (1 + usize::from(tag >> 2), off)
                }
            };
            if offset == 0 || offset > out.len() || out.len() + copy_len > len {
                return Err(corrupt());
            }
            // Copies may overlap what they produce: byte by byte.
            let start = out.len() - offset;
            for i in 0..copy_len {
                let b = out[start + i];
                out.push(b);
            }
        }
        if out.len() != len {
            return Err(corrupt());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(payload: &str, required: &[&str], optional: &[&str]) -> ParameterizedJobConfig {
        ParameterizedJobConfig {
            payload: payload.into(),
            meta_required: required.iter().map(|s| s.to_string()).collect(),
            meta_optional: optional.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn payload_rules_read_as_nomads() {
        let none = BTreeMap::new();
        assert_eq!(
            validate_dispatch(&config("required", &[], &[]), b"", &none).unwrap_err(),
            "Payload is not provided but required by parameterized job"
        );
        assert_eq!(
            validate_dispatch(&config("forbidden", &[], &[]), b"x", &none).unwrap_err(),
            "Payload provided but forbidden by parameterized job"
        );
        assert!(validate_dispatch(&config("optional", &[], &[]), b"", &none).is_ok());
        let big = vec![b'x'; DISPATCH_PAYLOAD_SIZE_LIMIT + 1];
        assert_eq!(
            validate_dispatch(&config("optional", &[], &[]), &big, &none).unwrap_err(),
            "Payload exceeds maximum size; 16385 > 16384"
        );
        let exact = vec![b'x'; DISPATCH_PAYLOAD_SIZE_LIMIT];
        assert!(validate_dispatch(&config("required", &[], &[]), &exact, &none).is_ok());
    }

    #[test]
    fn meta_rules_read_as_nomads() {
        let c = config("optional", &["owner", "env"], &["note"]);
        assert_eq!(
            validate_dispatch(&c, b"", &meta(&[("owner", "a")])).unwrap_err(),
            "Dispatch did not provide required meta keys: [env]"
        );
        assert_eq!(
            validate_dispatch(
                &c,
                b"",
                &meta(&[("owner", "a"), ("env", "b"), ("zz", "1"), ("aa", "2")])
            )
            .unwrap_err(),
            "Dispatch request included unpermitted metadata keys: [aa zz]"
        );
        assert!(
            validate_dispatch(
                &c,
                b"",
                &meta(&[("owner", "a"), ("env", "b"), ("note", "c")])
            )
            .is_ok()
        );
    }

    #[test]
    fn dispatched_ids_follow_nomads_pattern() {
        assert_eq!(
            dispatched_id("render", "", 1_700_000_000, "0a1b2c3d"),
            "render/dispatch-1700000000-0a1b2c3d"
        );
        assert_eq!(
            dispatched_id("render", "nightly", 1_700_000_000, "0a1b2c3d"),
            "render/dispatch-nightly-1700000000-0a1b2c3d"
        );
    }

    #[test]
    fn payloads_round_trip_through_snappy_and_base64() {
        for raw in [
            Vec::new(),
            b"hello".to_vec(),
            vec![7u8; 61],
            (0..=255u8).cycle().take(70_000).collect(),
        ] {
            let encoded = encode_job_payload(&raw);
            assert_eq!(decode_job_payload(&encoded).unwrap(), raw);
        }
        // What Go's snappy.Encode writes for "hello": length 5, one literal.
        assert_eq!(
            encode_job_payload(b"hello"),
            Value::String("BRBoZWxsbw==".into())
        );
        // A stream with a back-reference copy, as real compressors write: "abcabcabc".
        // Literal of 3 (tag 2 << 2), then a copy of 6 at offset 3 (tag (6 - 1) << 2 | 2).
        let stream = [9u8, 2 << 2, b'a', b'b', b'c', (5 << 2) | 2, 3, 0];
        let with_copy = Value::String(STANDARD.encode(stream));
        assert_eq!(decode_job_payload(&with_copy).unwrap(), b"abcabcabc");
        assert!(decode_job_payload(&Value::String("bm90IHNuYXBweQ==".into())).is_err());
        assert_eq!(decode_job_payload(&Value::Null).unwrap(), Vec::<u8>::new());
    }
}
