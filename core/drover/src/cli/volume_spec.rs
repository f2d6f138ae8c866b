//! Reading a volume specification file (`volume register FILE`, `volume create FILE`): HCL, as
//! Nomad's volume files are written, or JSON with the same keys. The file becomes a JSON tree
//! (blocks as lists of objects) that `drover_structs::volume_from_spec` decodes; every error
//! points at `file:line:column`.
//!
//! Like Nomad's HCL1 volume parser, only literal values are taken: no variables, functions or
//! interpolation (a `"${...}"` string stays as written).

use std::collections::BTreeMap;
use std::io::Read;
use std::ops::Range;

use drover_structs::{CsiVolume, volume_from_spec};
use hcl_edit::Span;
use hcl_edit::expr::{Expression, ObjectKey};
use hcl_edit::structure::{Body, Structure};
use hcl_edit::template::{Element, Template};
use serde_json::{Map, Value};

/// A decoded spec: its `type` (lowercased) and the volume.
#[derive(Debug)]
pub struct VolumeSpec {
    pub kind: String,
    pub volume: CsiVolume,
}

/// Reads and decodes `path` (`-` for stdin). `Err` is the whole message to print.
pub fn load(path: &str) -> Result<VolumeSpec, String> {
    let (src, name) = if path == "-" {
        let mut src = String::new();
        std::io::stdin()
            .read_to_string(&mut src)
            .map_err(|e| format!("Failed to read stdin: {e}"))?;
        (src, "stdin".to_string())
    } else {
        let src = std::fs::read_to_string(path).map_err(|e| format!("Failed to read file: {e}"))?;
        (src, path.to_string())
    };
    parse(&src, &name)
}

/// Decodes the text of a spec file named `file`.
pub fn parse(src: &str, file: &str) -> Result<VolumeSpec, String> {
    let (tree, positions) = if src.trim_start().starts_with('{') {
        let tree: Value = serde_json::from_str(src).map_err(|e| {
            format!(
                "Error parsing the volume type: parse error: {file}:{}:{}: {e}",
                e.line(),
                e.column()
            )
        })?;
        (tree, Positions::default())
    } else {
        let body = hcl_edit::parser::parse_body(src).map_err(|e| {
            format!(
                "Error parsing the volume type: parse error: {file}:{}:{}: {}",
                e.location().line(),
                e.location().column(),
                e.message()
            )
        })?;
        let mut positions = Positions {
            src,
            spans: BTreeMap::new(),
        };
        let tree = body_to_json(&body, "", &mut positions).map_err(|(span, message)| {
            format!(
                "Error decoding the volume definition: {}",
                positions.located(file, span.as_ref(), &message)
            )
        })?;
        (tree, positions)
    };
    let kind = match tree.get("type") {
        Some(Value::String(s)) => s.to_ascii_lowercase(),
        _ => String::new(),
    };
    let volume = volume_from_spec(&tree).map_err(|e| {
        let span = positions.span_of(&e.path);
        format!(
            "Error decoding the volume definition: {}",
            positions.located(file, span.as_ref(), &e.to_string())
        )
    })?;
    Ok(VolumeSpec { kind, volume })
}

/// The text of an HCL file of literal values (`file` names it in errors) as a JSON tree:
/// attributes as values, blocks as lists of objects (a labelled block keyed by its label).
/// Shared with other spec files (`namespace apply`); `what` opens error messages.
pub fn hcl_tree(src: &str, file: &str, what: &str) -> Result<Value, String> {
    let body = hcl_edit::parser::parse_body(src).map_err(|e| {
        format!(
            "{what}: {file}:{}:{}: {}",
            e.location().line(),
            e.location().column(),
            e.message()
        )
    })?;
    let mut positions = Positions {
        src,
        spans: BTreeMap::new(),
    };
    body_to_json(&body, "", &mut positions).map_err(|(span, message)| {
        format!(
            "{what}: {}",
            positions.located(file, span.as_ref(), &message)
        )
    })
}

/// Where each path of the tree was written (byte spans into the HCL source).
#[derive(Default)]
struct Positions<'a> {
    src: &'a str,
    spans: BTreeMap<String, Range<usize>>,
}

impl Positions<'_> {
    /// The span of `path`, or of the nearest enclosing path that has one.
    fn span_of(&self, path: &str) -> Option<Range<usize>> {
        let mut p = path;
        loop {
            if let Some(s) = self.spans.get(p) {
                return Some(s.clone());
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }

    fn located(&self, file: &str, span: Option<&Range<usize>>, message: &str) -> String {
        match span {
            Some(s) => {
                let (line, column) = line_col(self.src, s.start);
                format!("{file}:{line}:{column}: {message}")
            }
            None => format!("{file}: {message}"),
        }
    }
}

/// One-based line and column (in characters) of a byte offset.
fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let before = &src[..offset.min(src.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, column)
}

type Located<T> = Result<T, (Option<Range<usize>>, String)>;

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A body: attributes become values, blocks become lists of objects under their type.
fn body_to_json(body: &Body, path: &str, pos: &mut Positions<'_>) -> Located<Value> {
    let mut out = Map::new();
    for item in body.iter() {
        match item {
            Structure::Attribute(a) => {
                let key = a.key.as_str();
                let p = join(path, key);
                if out.contains_key(key) {
                    return Err((a.key.span(), format!("duplicate attribute {key:?}")));
                }
                if let Some(s) = a.key.span() {
                    pos.spans.insert(p.clone(), s);
                }
                let value = expr_to_json(&a.value, &p, pos)?;
                out.insert(key.to_string(), value);
            }
            Structure::Block(b) => {
                let key = b.ident.as_str();
                if !b.labels.is_empty() {
                    return Err((b.ident.span(), format!("block {key:?} takes no labels")));
                }
                let entry = out
                    .entry(key.to_string())
                    .or_insert_with(|| Value::Array(Vec::new()));
                let Value::Array(list) = entry else {
                    return Err((
                        b.ident.span(),
                        format!("{key:?} is set both as an attribute and as a block"),
                    ));
                };
                let p = format!("{}[{}]", join(path, key), list.len());
                if let Some(s) = b.ident.span() {
                    pos.spans.insert(p.clone(), s);
                    pos.spans
                        .entry(join(path, key))
                        .or_insert_with(|| b.ident.span().unwrap_or_default());
                }
                let value = body_to_json(&b.body, &p, pos)?;
                // The entry was created above and is still an array.
                if let Some(Value::Array(list)) = out.get_mut(key) {
                    list.push(value);
                }
            }
        }
    }
    Ok(Value::Object(out))
}

/// A literal expression as JSON; anything computed is refused.
fn expr_to_json(e: &Expression, path: &str, pos: &mut Positions<'_>) -> Located<Value> {
    Ok(match e {
        Expression::Null(_) => Value::Null,
        Expression::Bool(b) => Value::Bool(*b.value()),
        Expression::Number(n) => {
            let n = n.value();
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                n.as_f64().map(Value::from).unwrap_or(Value::Null)
            }
        }
        Expression::String(s) => Value::String(s.value().clone()),
        Expression::StringTemplate(t) => Value::String(template_text(t, e.span(), pos.src)),
        Expression::HeredocTemplate(h) => {
            Value::String(template_text(&h.template, e.span(), pos.src))
        }
        Expression::Parenthesis(p) => expr_to_json(p.inner(), path, pos)?,
        Expression::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let p = format!("{path}[{i}]");
                    if let Some(s) = item.span() {
                        pos.spans.insert(p.clone(), s);
                    }
                    expr_to_json(item, &p, pos)
                })
                .collect::<Located<Vec<Value>>>()?,
        ),
        Expression::Object(obj) => {
            let mut out = Map::new();
            for (key, value) in obj.iter() {
                let (name, span) = match key {
                    ObjectKey::Ident(id) => (id.as_str().to_string(), id.span()),
                    ObjectKey::Expression(Expression::String(s)) => (s.value().clone(), s.span()),
                    ObjectKey::Expression(other) => {
                        return Err((other.span(), "object keys must be names or strings".into()));
                    }
                };
                let p = join(path, &name);
                if let Some(s) = span {
                    pos.spans.insert(p.clone(), s);
                }
                let v = expr_to_json(value.expr(), &p, pos)?;
                out.insert(name, v);
            }
            Value::Object(out)
        }
        other => {
            return Err((
                other.span(),
                "volume specifications take literal values only (no variables, functions or \
                 operators)"
                    .into(),
            ));
        }
    })
}

/// A template's text: its literal parts, and any interpolation as written (HCL1 does not
/// evaluate them in volume files).
fn template_text(t: &Template, span: Option<Range<usize>>, src: &str) -> String {
    let mut out = String::new();
    for element in t.iter() {
        match element {
            Element::Literal(l) => out.push_str(l.value()),
            other => {
                if let Some(text) = other.span().and_then(|s| src.get(s)) {
                    out.push_str(text);
                } else if let Some(text) = span.clone().and_then(|s| src.get(s)) {
                    return text.trim_matches('"').to_string();
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{CsiAccessMode, CsiAttachmentMode};

    const SPEC: &str = r#"
id        = "mysql"
name      = "mysql"
type      = "csi"
plugin_id = "hostpath"
capacity_min = "10GiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime"]
}

secrets {
  password = "hunter2"
}

parameters = {
  skuname = "Premium_LRS"
}

topology_request {
  required {
    topology {
      segments {
        rack = "R1"
      }
    }
  }
}
"#;

    #[test]
    fn hcl_spec_decodes_like_nomads() {
        let spec = parse(SPEC, "vol.hcl").unwrap();
        assert_eq!(spec.kind, "csi");
        let v = spec.volume;
        assert_eq!((v.id.as_str(), v.plugin_id.as_str()), ("mysql", "hostpath"));
        assert_eq!(v.requested_capacity_min, 10 << 30);
        assert_eq!(
            (
                v.requested_capabilities[0].access_mode,
                v.requested_capabilities[0].attachment_mode
            ),
            (
                CsiAccessMode::SingleNodeWriter,
                CsiAttachmentMode::FileSystem
            )
        );
        assert_eq!(v.mount_options.unwrap().mount_flags, vec!["noatime"]);
        assert_eq!(v.secrets.unwrap()["password"], "hunter2");
        assert_eq!(v.parameters["skuname"], "Premium_LRS");
        assert_eq!(
            v.requested_topologies.unwrap().required[0].segments["rack"],
            "R1"
        );
    }

    #[test]
    fn json_spec_takes_the_same_keys() {
        let spec = parse(
            r#"{"id": "db", "type": "CSI", "plugin_id": "p",
                "capability": [{"access_mode": "multi-node-multi-writer", "attachment_mode": "block-device"}]}"#,
            "vol.json",
        )
        .unwrap();
        assert_eq!(spec.kind, "csi");
        assert_eq!(spec.volume.requested_capabilities.len(), 1);
    }

    #[test]
    fn errors_point_at_file_line_and_column() {
        let src = "id = \"x\"\ncapability {\n  access_mode = \"rw\"\n}\n";
        let e = parse(src, "vol.hcl").unwrap_err();
        assert!(
            e.starts_with(
                "Error decoding the volume definition: vol.hcl:3:3: capability[0].access_mode: unknown access mode \"rw\""
            ),
            "{e}"
        );
        let e = parse("id = \"x\"\nplugin-id = \"p\"\n", "vol.hcl").unwrap_err();
        assert_eq!(
            e,
            "Error decoding the volume definition: vol.hcl:2:1: plugin-id: invalid key: plugin-id"
        );
        let e = parse("id = \"x\"\ncapacity_max = \"3 parsecs\"\n", "v.hcl").unwrap_err();
        assert!(
            e.contains("v.hcl:2:1: capacity_max: invalid capacity_max"),
            "{e}"
        );
        let e = parse("id = var.x\n", "v.hcl").unwrap_err();
        assert!(
            e.contains("v.hcl:1:6: volume specifications take literal values only"),
            "{e}"
        );
        let e = parse("capability {\n", "v.hcl").unwrap_err();
        assert!(
            e.starts_with("Error parsing the volume type: parse error: v.hcl:"),
            "{e}"
        );
        let e = parse("{\"id\": ", "v.json").unwrap_err();
        assert!(
            e.starts_with("Error parsing the volume type: parse error: v.json:1:"),
            "{e}"
        );
    }

    #[test]
    fn interpolations_stay_as_written() {
        let spec = parse("id = \"vol-${NOMAD_ALLOC_INDEX}\"\n", "v.hcl").unwrap();
        assert_eq!(spec.volume.id, "vol-${NOMAD_ALLOC_INDEX}");
    }
}
