//! The surface syntax of policy rules. Nomad reads rules with HCL1, which takes both HCL and
//! JSON; here HCL goes through hcl-edit and JSON through serde_json, and both come out as one
//! small tree of blocks and attributes (with where each was written, for HCL) that the policy
//! decoder walks.
//!
//! Only literal values are taken, as HCL1 does for policies: no variables, functions or
//! interpolation.

use std::ops::Range;

use hcl_edit::Span;
use hcl_edit::expr::Expression;
use hcl_edit::structure::Structure;
use hcl_edit::template::{Element, Template};
use serde_json::{Map, Value as Json};

use super::{Location, PolicyError, PolicyErrorKind};

/// A body: its attributes and its blocks, in the order written.
#[derive(Debug, Default)]
pub(super) struct Body {
    pub attrs: Vec<Attr>,
    pub blocks: Vec<Block>,
}

/// `key = value`.
#[derive(Debug)]
pub(super) struct Attr {
    pub key: String,
    pub value: Value,
    pub at: Option<Location>,
}

/// `kind "label" ... { body }`.
#[derive(Debug)]
pub(super) struct Block {
    pub kind: String,
    pub labels: Vec<String>,
    pub body: Body,
    pub at: Option<Location>,
}

/// A literal value, as far as policies care.
#[derive(Debug)]
pub(super) enum Value {
    /// A string; a number is kept as written (HCL1 decodes numbers into string fields).
    Text(String),
    List(Vec<(Value, Option<Location>)>),
    /// Anything else, described for error messages.
    Other(&'static str),
}

impl Value {
    pub fn describe(&self) -> &'static str {
        match self {
            Value::Text(_) => "a string",
            Value::List(_) => "a list",
            Value::Other(what) => what,
        }
    }
}

/// Reads rules: JSON when the text opens with `{` (as HCL1 decides), HCL otherwise.
pub(super) fn parse(rules: &str) -> Result<Body, PolicyError> {
    if rules.trim_start().starts_with('{') {
        parse_json(rules)
    } else {
        parse_hcl(rules)
    }
}

fn syntax(at: Option<Location>, message: String) -> PolicyError {
    PolicyError {
        kind: PolicyErrorKind::Syntax,
        location: at,
        message,
    }
}

// ---- HCL ----------------------------------------------------------------------------------

fn parse_hcl(src: &str) -> Result<Body, PolicyError> {
    let body = hcl_edit::parser::parse_body(src).map_err(|e| {
        let at = Location {
            line: e.location().line(),
            column: e.location().column(),
        };
        syntax(Some(at), e.message().to_string())
    })?;
    Ok(hcl_body(&body, src))
}

fn hcl_body(body: &hcl_edit::structure::Body, src: &str) -> Body {
    let mut out = Body::default();
    for item in body.iter() {
        match item {
            Structure::Attribute(a) => out.attrs.push(Attr {
                key: a.key.as_str().to_string(),
                value: hcl_value(&a.value, src),
                at: locate(src, a.key.span()),
            }),
            Structure::Block(b) => out.blocks.push(Block {
                kind: b.ident.as_str().to_string(),
                labels: b.labels.iter().map(|l| l.as_str().to_string()).collect(),
                body: hcl_body(&b.body, src),
                at: locate(src, b.ident.span()),
            }),
        }
    }
    out
}

fn hcl_value(e: &Expression, src: &str) -> Value {
    match e {
        Expression::String(s) => Value::Text(s.value().clone()),
        Expression::Number(n) => Value::Text(n.value().to_string()),
        Expression::Parenthesis(p) => hcl_value(p.inner(), src),
        Expression::StringTemplate(t) => literal_template(t),
        Expression::HeredocTemplate(h) => literal_template(&h.template),
        Expression::Array(items) => Value::List(
            items
                .iter()
                .map(|item| (hcl_value(item, src), locate(src, item.span())))
                .collect(),
        ),
        Expression::Bool(_) => Value::Other("a bool"),
        Expression::Null(_) => Value::Other("null"),
        Expression::Object(_) => Value::Other("an object"),
        _ => Value::Other("an expression (policies take literal values only)"),
    }
}

/// A template made only of literal text is that text; interpolation is refused.
fn literal_template(t: &Template) -> Value {
    let mut out = String::new();
    for element in t.iter() {
        match element {
            Element::Literal(l) => out.push_str(l.value()),
            _ => return Value::Other("an interpolated string (policies take literal values only)"),
        }
    }
    Value::Text(out)
}

fn locate(src: &str, span: Option<Range<usize>>) -> Option<Location> {
    span.map(|s| line_col(src, s.start))
}

/// One-based line and column (in characters) of a byte offset.
fn line_col(src: &str, offset: usize) -> Location {
    let before = src.get(..offset.min(src.len())).unwrap_or(src);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Location { line, column }
}

// ---- JSON ---------------------------------------------------------------------------------

/// Which keys of a JSON body are blocks, with how many labels each takes (the JSON form nests
/// one object per label) and the schema of the block's own body.
struct Schema(&'static [(&'static str, usize, &'static Schema)]);

const LEAF: Schema = Schema(&[]);
const VARIABLES: Schema = Schema(&[("path", 1, &LEAF)]);
const NAMESPACE: Schema = Schema(&[("variables", 0, &VARIABLES)]);
const TOP: Schema = Schema(&[
    ("namespace", 1, &NAMESPACE),
    ("node_pool", 1, &LEAF),
    ("host_volume", 1, &LEAF),
    ("agent", 0, &LEAF),
    ("node", 0, &LEAF),
    ("operator", 0, &LEAF),
    ("quota", 0, &LEAF),
    ("plugin", 0, &LEAF),
]);

fn parse_json(src: &str) -> Result<Body, PolicyError> {
    let text = strip_trailing_commas(src);
    let tree: Json = serde_json::from_str(&text).map_err(|e| {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
        let at = Location {
            line: e.line(),
            column: e.column(),
        };
        syntax(Some(at), message)
    })?;
    match &tree {
        Json::Object(map) => json_body(map, &TOP),
        _ => Err(syntax(None, "the rules must be a JSON object".into())),
    }
}

fn json_body(map: &Map<String, Json>, schema: &Schema) -> Result<Body, PolicyError> {
    let mut body = Body::default();
    for (key, value) in map {
        match schema.0.iter().find(|(name, _, _)| name == key) {
            Some((_, labels, inner)) => {
                json_blocks(key, value, *labels, Vec::new(), inner, &mut body.blocks)?;
            }
            None => body.attrs.push(Attr {
                key: key.clone(),
                value: json_value(value),
                at: None,
            }),
        }
    }
    Ok(body)
}

/// The blocks of `kind` written as `value`: an object per remaining label, then the body; a
/// list at any level holds several.
fn json_blocks(
    kind: &str,
    value: &Json,
    labels_left: usize,
    labels: Vec<String>,
    schema: &Schema,
    out: &mut Vec<Block>,
) -> Result<(), PolicyError> {
    match value {
        Json::Array(items) => {
            for item in items {
                json_blocks(kind, item, labels_left, labels.clone(), schema, out)?;
            }
        }
        Json::Object(map) if labels_left > 0 => {
            for (label, inner) in map {
                let mut labels = labels.clone();
                labels.push(label.clone());
                json_blocks(kind, inner, labels_left - 1, labels, schema, out)?;
            }
        }
        Json::Object(map) => out.push(Block {
            kind: kind.to_string(),
            labels,
            body: json_body(map, schema)?,
            at: None,
        }),
        other => {
            let got = json_value(other);
            return Err(syntax(
                None,
                format!("{kind}: expected an object, got {}", got.describe()),
            ));
        }
    }
    Ok(())
}

fn json_value(value: &Json) -> Value {
    match value {
        Json::String(s) => Value::Text(s.clone()),
        Json::Number(n) => Value::Text(n.to_string()),
        Json::Array(items) => Value::List(items.iter().map(|v| (json_value(v), None)).collect()),
        Json::Bool(_) => Value::Other("a bool"),
        Json::Null => Value::Other("null"),
        Json::Object(_) => Value::Other("an object"),
    }
}

/// HCL1's JSON reader takes a trailing comma before `}` or `]` (Nomad's own examples have
/// them); serde_json does not, so each such comma becomes a space (positions are kept).
fn strip_trailing_commas(src: &str) -> String {
    let bytes = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in src.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if c == ',' {
            // `,` is one byte, so `i + 1` is within the text.
            let next = bytes[i + 1..].iter().find(|b| !b.is_ascii_whitespace());
            if matches!(next, Some(b'}') | Some(b']')) {
                out.push(' ');
                continue;
            }
        }
        out.push(c);
    }
    out
}
