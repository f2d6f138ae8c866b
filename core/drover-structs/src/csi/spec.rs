//! The volume specification an operator writes for `volume register` and `volume create`
//! (`id`, `plugin_id`, `capability { ... }`, `capacity_min = "10GiB"`...), decoded from the
//! JSON tree a spec file becomes (HCL blocks as arrays of objects, attributes as values) into
//! a [`CsiVolume`]. Errors name the path of the offending field (`capability[1].access_mode`)
//! so the reader of the file can point at its line.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::modes::{CsiAccessMode, CsiAttachmentMode};
use super::volume::{
    CsiMountOptions, CsiTopology, CsiTopologyRequest, CsiVolume, CsiVolumeCapability,
};

/// A problem with one field of a volume spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct CsiSpecError {
    /// Where in the spec: `capability[0].access_mode`; empty for the spec as a whole.
    pub path: String,
    pub message: String,
}

fn err(path: &str, message: impl Into<String>) -> CsiSpecError {
    CsiSpecError {
        path: path.to_string(),
        message: message.into(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

const TOP_KEYS: &[&str] = &[
    "id",
    "name",
    "type",
    "namespace",
    "external_id",
    "plugin_id",
    "snapshot_id",
    "clone_id",
    "access_mode",
    "attachment_mode",
    "capacity_min",
    "capacity_max",
    "capability",
    "mount_options",
    "secrets",
    "parameters",
    "context",
    "topology_request",
];

/// Decodes a volume spec. The `type` is not checked here: the caller dispatches on it.
pub fn volume_from_spec(spec: &Value) -> Result<CsiVolume, CsiSpecError> {
    let obj = object(spec, "")?;
    check_keys(obj, "", TOP_KEYS)?;
    let mut vol = CsiVolume::default();
    let text = |key: &str| -> Result<String, CsiSpecError> {
        obj.get(key)
            .map(|v| scalar_string(v, key))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    vol.id = text("id")?;
    vol.name = text("name")?;
    vol.namespace = text("namespace")?;
    vol.external_id = text("external_id")?;
    vol.plugin_id = text("plugin_id")?;
    vol.snapshot_id = text("snapshot_id")?;
    vol.clone_id = text("clone_id")?;
    if let Some(v) = obj.get("access_mode") {
        vol.access_mode = access_mode(v, "access_mode")?;
    }
    if let Some(v) = obj.get("attachment_mode") {
        vol.attachment_mode = attachment_mode(v, "attachment_mode")?;
    }
    for (key, slot) in [
        ("capacity_min", &mut vol.requested_capacity_min),
        ("capacity_max", &mut vol.requested_capacity_max),
    ] {
        if let Some(v) = obj.get(key) {
            *slot = capacity(v, key)?;
        }
    }
    if let Some(v) = obj.get("capability") {
        for (path, block) in blocks(v, "capability")? {
            check_keys(block, &path, &["access_mode", "attachment_mode"])?;
            let mut cap = CsiVolumeCapability::default();
            if let Some(v) = block.get("access_mode") {
                cap.access_mode = access_mode(v, &join(&path, "access_mode"))?;
            }
            if let Some(v) = block.get("attachment_mode") {
                cap.attachment_mode = attachment_mode(v, &join(&path, "attachment_mode"))?;
            }
            vol.requested_capabilities.push(cap);
        }
    }
    if let Some(v) = obj.get("mount_options") {
        // Nomad takes the first block.
        if let Some((path, block)) = blocks(v, "mount_options")?.into_iter().next() {
            check_keys(block, &path, &["fs_type", "mount_flags"])?;
            let mut opts = CsiMountOptions::default();
            if let Some(v) = block.get("fs_type") {
                opts.fs_type = scalar_string(v, &join(&path, "fs_type"))?;
            }
            if let Some(v) = block.get("mount_flags") {
                opts.mount_flags = string_list(v, &join(&path, "mount_flags"))?;
            }
            vol.mount_options = Some(opts);
        }
    }
    if let Some(v) = obj.get("secrets") {
        vol.secrets = Some(string_map(v, "secrets")?);
    }
    if let Some(v) = obj.get("parameters") {
        vol.parameters = string_map(v, "parameters")?;
    }
    if let Some(v) = obj.get("context") {
        vol.context = string_map(v, "context")?;
    }
    if let Some(v) = obj.get("topology_request") {
        let mut request = CsiTopologyRequest::default();
        for (path, block) in blocks(v, "topology_request")? {
            check_keys(block, &path, &["required", "preferred"])?;
            if let Some(v) = block.get("required") {
                request.required = topologies(v, &join(&path, "required"))?;
            }
            if let Some(v) = block.get("preferred") {
                request.preferred = topologies(v, &join(&path, "preferred"))?;
            }
        }
        vol.requested_topologies = Some(request);
    }
    Ok(vol)
}

/// `required { topology { segments { rack = "r1" } } ... }`: each `topology` block one segment
/// set; empty ones are skipped, as Nomad does.
fn topologies(v: &Value, path: &str) -> Result<Vec<CsiTopology>, CsiSpecError> {
    let mut out = Vec::new();
    for (path, block) in blocks(v, path)? {
        check_keys(block, &path, &["topology"])?;
        let Some(topos) = block.get("topology") else {
            continue;
        };
        for (path, topo) in blocks(topos, &join(&path, "topology"))? {
            check_keys(topo, &path, &["segments"])?;
            if let Some(segments) = topo.get("segments") {
                let segments = string_map(segments, &join(&path, "segments"))?;
                if !segments.is_empty() {
                    out.push(CsiTopology { segments });
                }
            }
        }
    }
    Ok(out)
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, CsiSpecError> {
    v.as_object().ok_or_else(|| {
        err(
            path,
            if path.is_empty() {
                "the volume specification must be an object".to_string()
            } else {
                "expected a block".to_string()
            },
        )
    })
}

/// Blocks with their paths.
type Blocks<'a> = Vec<(String, &'a Map<String, Value>)>;

/// The blocks of a block field: one object, or a list of them (repeated HCL blocks), each with
/// its path.
fn blocks<'a>(v: &'a Value, path: &str) -> Result<Blocks<'a>, CsiSpecError> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let p = format!("{path}[{i}]");
                object(item, &p).map(|o| (p, o))
            })
            .collect(),
        other => object(other, path).map(|o| vec![(path.to_string(), o)]),
    }
}

/// Nomad's `CheckHCLKeys`: a key it does not know is an error.
fn check_keys(obj: &Map<String, Value>, path: &str, valid: &[&str]) -> Result<(), CsiSpecError> {
    match obj.keys().find(|k| !valid.contains(&k.as_str())) {
        Some(k) => Err(err(&join(path, k), format!("invalid key: {k}"))),
        None => Ok(()),
    }
}

/// A string, or a number or boolean taken as its text (mapstructure's weak decoding).
fn scalar_string(v: &Value, path: &str) -> Result<String, CsiSpecError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null => Ok(String::new()),
        _ => Err(err(path, "expected a string")),
    }
}

fn string_list(v: &Value, path: &str) -> Result<Vec<String>, CsiSpecError> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| scalar_string(item, &format!("{path}[{i}]")))
            .collect(),
        _ => Err(err(path, "expected a list of strings")),
    }
}

/// A map of strings: an object (`secrets = { ... }` or a JSON object) or blocks of them
/// (`secrets { ... }`), merged in order.
fn string_map(v: &Value, path: &str) -> Result<BTreeMap<String, String>, CsiSpecError> {
    let mut out = BTreeMap::new();
    for (path, obj) in blocks(v, path)? {
        for (k, v) in obj {
            out.insert(k.clone(), scalar_string(v, &join(&path, k))?);
        }
    }
    Ok(out)
}

fn access_mode(v: &Value, path: &str) -> Result<CsiAccessMode, CsiSpecError> {
    let s = scalar_string(v, path)?;
    CsiAccessMode::parse(&s).ok_or_else(|| {
        err(
            path,
            format!(
                "unknown access mode {s:?} (expected one of single-node-reader-only, \
                 single-node-writer, multi-node-reader-only, multi-node-single-writer, \
                 multi-node-multi-writer)"
            ),
        )
    })
}

fn attachment_mode(v: &Value, path: &str) -> Result<CsiAttachmentMode, CsiSpecError> {
    let s = scalar_string(v, path)?;
    CsiAttachmentMode::parse(&s).ok_or_else(|| {
        err(
            path,
            format!("unknown attachment mode {s:?} (expected file-system or block-device)"),
        )
    })
}

/// `capacity_min = "10GiB"`: a size with go-humanize's units, or a number of bytes.
fn capacity(v: &Value, path: &str) -> Result<i64, CsiSpecError> {
    let bytes = match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("could not parse value as bytes: {n} is not a whole number")),
        Value::String(s) if s.is_empty() => Ok(0),
        Value::String(s) => {
            parse_bytes(s).map_err(|e| format!("could not parse value as bytes: {e}"))
        }
        _ => Err("could not parse value as bytes: expected a string".to_string()),
    }
    .map_err(|e| err(path, format!("invalid {path}: {e}")))?;
    i64::try_from(bytes).map_err(|_| err(path, format!("invalid {path}: too large: {bytes}")))
}

/// go-humanize's `ParseBytes`: a number (`,` allowed as a thousands separator, a fraction
/// allowed) and an optional unit, SI (`kB`, `MB`, `G`...) or IEC (`KiB`, `Mi`...), any case.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let digits = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == ','))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let number: String = s[..digits].chars().filter(|c| *c != ',').collect();
    let value: f64 = number
        .parse()
        .map_err(|_| format!("strconv.ParseFloat: parsing {number:?}: invalid syntax"))?;
    let unit = s[digits..].trim().to_ascii_lowercase();
    let scale: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "ki" | "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mi" | "mib" => 1024f64.powi(2),
        "g" | "gb" => 1e9,
        "gi" | "gib" => 1024f64.powi(3),
        "t" | "tb" => 1e12,
        "ti" | "tib" => 1024f64.powi(4),
        "p" | "pb" => 1e15,
        "pi" | "pib" => 1024f64.powi(5),
        "e" | "eb" => 1e18,
        "ei" | "eib" => 1024f64.powi(6),
        other => return Err(format!("unhandled size name: {other}")),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("too large: {s}"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn full_spec_decodes_every_field() {
        let spec = json!({
            "id": "db", "name": "database", "type": "csi", "plugin_id": "hostpath",
            "external_id": "vol-1", "capacity_min": "10GiB", "capacity_max": "20G",
            "capability": [
                {"access_mode": "single-node-writer", "attachment_mode": "file-system"},
                {"access_mode": "single-node-reader-only", "attachment_mode": "block-device"}
            ],
            "mount_options": [{"fs_type": "ext4", "mount_flags": ["noatime"]}],
            "secrets": [{"password": "hunter2"}],
            "parameters": {"skuname": "Premium_LRS", "size": 3},
            "context": {"a": "b"},
            "topology_request": [{
                "required": [{"topology": [
                    {"segments": [{"rack": "R1", "zone": "z1"}]},
                    {"segments": [{"rack": "R2"}]}
                ]}],
                "preferred": [{"topology": [{"segments": [{"rack": "R1"}]}]}]
            }]
        });
        let v = volume_from_spec(&spec).unwrap();
        assert_eq!((v.id.as_str(), v.name.as_str()), ("db", "database"));
        assert_eq!(v.plugin_id, "hostpath");
        assert_eq!(v.external_id, "vol-1");
        assert_eq!(v.requested_capacity_min, 10 * 1024 * 1024 * 1024);
        assert_eq!(v.requested_capacity_max, 20_000_000_000);
        assert_eq!(v.requested_capabilities.len(), 2);
        assert_eq!(
            v.requested_capabilities[1].attachment_mode,
            CsiAttachmentMode::BlockDevice
        );
        let mo = v.mount_options.unwrap();
        assert_eq!((mo.fs_type.as_str(), mo.mount_flags.len()), ("ext4", 1));
        assert_eq!(v.secrets.unwrap()["password"], "hunter2");
        assert_eq!(v.parameters["size"], "3");
        let topo = v.requested_topologies.unwrap();
        assert_eq!(topo.required.len(), 2);
        assert_eq!(topo.required[0].segments["zone"], "z1");
        assert_eq!(topo.preferred.len(), 1);
    }

    #[test]
    fn unknown_keys_and_bad_modes_name_their_path() {
        let e = volume_from_spec(&json!({"id": "x", "plugin-id": "p"})).unwrap_err();
        assert_eq!(e.to_string(), "plugin-id: invalid key: plugin-id");
        let e = volume_from_spec(&json!({"capability": [
            {"access_mode": "single-node-writer"},
            {"access_mode": "rw"}
        ]}))
        .unwrap_err();
        assert_eq!(e.path, "capability[1].access_mode");
        assert!(e.message.starts_with("unknown access mode \"rw\""), "{e}");
        let e = volume_from_spec(&json!({"capability": {"fs": 1}})).unwrap_err();
        assert_eq!(e.path, "capability.fs");
    }

    #[test]
    fn bad_capacity_is_reported_like_nomad() {
        let e = volume_from_spec(&json!({"capacity_min": "10XB"})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "capacity_min: invalid capacity_min: could not parse value as bytes: unhandled size name: xb"
        );
    }

    #[test]
    fn bytes_parse_with_si_and_iec_units() {
        assert_eq!(parse_bytes("42").unwrap(), 42);
        assert_eq!(parse_bytes("1,000 B").unwrap(), 1000);
        assert_eq!(parse_bytes("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_bytes("2 mb").unwrap(), 2_000_000);
        assert_eq!(parse_bytes("1Gi").unwrap(), 1 << 30);
        assert!(parse_bytes("GiB").is_err());
        assert!(parse_bytes("1 parsec").is_err());
    }
}
