//! A plugin's hclspec, compiled (names resolved, type expressions and literals parsed) and
//! evaluated against a JSON config body with hcldec's rules, as Nomad's
//! `hclutils.ParseHclInterface` does after turning the config into HCL's JSON syntax.
//! Problems are reported in HCL's words ("Missing required argument: ...").

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value as Json};

use super::cty::{Cty, convert, infer};
use super::literal;
use super::types::Type;
use crate::hclspec::{Spec, spec::Block as S};

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
    Attr {
        name: String,
        ty: Type,
        required: bool,
    },
    Block {
        name: String,
        required: bool,
        nested: Box<Node>,
    },
    BlockAttrs {
        name: String,
        ty: Type,
        required: bool,
    },
    BlockList {
        name: String,
        min: u64,
        max: u64,
        set: bool,
        nested: Box<Node>,
    },
    BlockMap {
        name: String,
        labels: Vec<String>,
        nested: Box<Node>,
    },
    Default {
        primary: Box<Node>,
        default: Box<Node>,
    },
    Literal(Json),
}

fn named(own: &str, implied: &str, kind: &str) -> Result<String, String> {
    match (own, implied) {
        ("", "") => Err(format!("missing name in {kind} spec")),
        ("", implied) => Ok(implied.to_string()),
        (own, _) => Ok(own.to_string()),
    }
}

fn nested(spec: &Option<Box<Spec>>, name: &str) -> Result<Box<Node>, String> {
    match spec {
        Some(s) => compile(s, "").map(Box::new),
        None => Err(format!("block spec {name:?} has no nested spec")),
    }
}

/// Compiles `spec`; `implied` is the name an enclosing Object gives it.
pub fn compile(spec: &Spec, implied: &str) -> Result<Node, String> {
    let block = spec.block.as_ref().ok_or("empty spec")?;
    Ok(match block {
        S::Object(o) => {
            let mut attrs: Vec<(String, Node)> = o
                .attributes
                .iter()
                .map(|(k, s)| compile(s, k).map(|n| (k.clone(), n)))
                .collect::<Result<_, _>>()?;
            attrs.sort_by(|a, b| a.0.cmp(&b.0));
            Node::Object(attrs)
        }
        S::Array(a) => Node::Array(
            a.values
                .iter()
                .map(|s| compile(s, ""))
                .collect::<Result<_, _>>()?,
        ),
        S::Attr(a) => {
            let name = named(&a.name, implied, "attribute")?;
            let ty = Type::parse(&a.r#type).map_err(|e| format!("attribute {name:?}: {e}"))?;
            Node::Attr {
                name,
                ty,
                required: a.required,
            }
        }
        S::BlockValue(b) => {
            let name = named(&b.name, implied, "block")?;
            Node::Block {
                nested: nested(&b.nested, &name)?,
                name,
                required: b.required,
            }
        }
        S::BlockAttrs(b) => {
            let name = named(&b.name, implied, "block_attrs")?;
            let ty = Type::parse(&b.r#type).map_err(|e| format!("block {name:?}: {e}"))?;
            Node::BlockAttrs {
                name,
                ty,
                required: b.required,
            }
        }
        S::BlockList(b) => {
            let name = named(&b.name, implied, "block_list")?;
            Node::BlockList {
                nested: nested(&b.nested, &name)?,
                name,
                min: b.min_items,
                max: b.max_items,
                set: false,
            }
        }
        S::BlockSet(b) => {
            let name = named(&b.name, implied, "block_set")?;
            Node::BlockList {
                nested: nested(&b.nested, &name)?,
                name,
                min: b.min_items,
                max: b.max_items,
                set: true,
            }
        }
        S::BlockMap(b) => {
            let name = named(&b.name, implied, "block_map")?;
            if b.labels.is_empty() {
                return Err(format!("block_map {name:?} has no labels"));
            }
            Node::BlockMap {
                nested: nested(&b.nested, &name)?,
                name,
                labels: b.labels.clone(),
            }
        }
        S::Default(d) => {
            let part = |s: &Option<Box<Spec>>, which: &str| match s {
                Some(s) => compile(s, "").map(Box::new),
                None => Err(format!("default spec without {which}")),
            };
            Node::Default {
                primary: part(&d.primary, "primary")?,
                default: part(&d.default, "default")?,
            }
        }
        S::Literal(l) => Node::Literal(literal::parse(&l.value)?),
    })
}

impl Node {
    /// The argument and block names this node reads from the body it is applied to.
    fn names(&self, out: &mut BTreeSet<String>) {
        match self {
            Node::Object(attrs) => attrs.iter().for_each(|(_, n)| n.names(out)),
            Node::Array(items) => items.iter().for_each(|n| n.names(out)),
            Node::Attr { name, .. }
            | Node::Block { name, .. }
            | Node::BlockAttrs { name, .. }
            | Node::BlockList { name, .. }
            | Node::BlockMap { name, .. } => {
                out.insert(name.clone());
            }
            // Fallbacks impose no constraints (hcldec's DefaultSpec).
            Node::Default { primary, .. } => primary.names(out),
            Node::Literal(_) => {}
        }
    }

    /// The type of the value this node produces.
    pub fn implied_type(&self) -> Type {
        match self {
            Node::Object(attrs) => Type::Object(
                attrs
                    .iter()
                    .map(|(k, n)| (k.clone(), n.implied_type()))
                    .collect(),
            ),
            Node::Array(items) => Type::Tuple(items.iter().map(Node::implied_type).collect()),
            Node::Attr { ty, .. } => ty.clone(),
            Node::Block { nested, .. } => nested.implied_type(),
            Node::BlockAttrs { ty, .. } => Type::Map(Box::new(ty.clone())),
            Node::BlockList { nested, set, .. } => {
                let inner = Box::new(nested.implied_type());
                if *set {
                    Type::Set(inner)
                } else {
                    Type::List(inner)
                }
            }
            Node::BlockMap { labels, nested, .. } => labels
                .iter()
                .fold(nested.implied_type(), |t, _| Type::Map(Box::new(t))),
            Node::Default { primary, .. } => primary.implied_type(),
            Node::Literal(_) => Type::Any,
        }
    }
}

/// Evaluates `node` against a body: first every property of the body must be something the
/// node reads, then the node's value is built. Problems go to `errs`, prefixed with `at`.
pub fn eval_body(node: &Node, body: &Map<String, Json>, at: &str, errs: &mut Vec<String>) -> Cty {
    let mut names = BTreeSet::new();
    node.names(&mut names);
    for key in body.keys().filter(|k| !names.contains(*k)) {
        errs.push(format!(
            "{at}Extraneous JSON object property: No argument or block type is named {key:?}."
        ));
    }
    eval(node, body, at, errs)
}

/// The bodies of the blocks of one type: a JSON object is one block, an array of objects one
/// block each.
fn blocks<'a>(
    value: Option<&'a Json>,
    name: &str,
    at: &str,
    errs: &mut Vec<String>,
) -> Vec<&'a Map<String, Json>> {
    match value {
        None | Some(Json::Null) => Vec::new(),
        Some(Json::Object(body)) => vec![body],
        Some(Json::Array(items)) => items
            .iter()
            .filter_map(|item| match item {
                Json::Object(body) => Some(body),
                _ => {
                    errs.push(format!(
                        "{at}Incorrect JSON value type: A JSON object is required here, to define a {name:?} block."
                    ));
                    None
                }
            })
            .collect(),
        Some(_) => {
            errs.push(format!(
                "{at}Incorrect JSON value type: A JSON object is required here, to define a {name:?} block."
            ));
            Vec::new()
        }
    }
}

fn eval(node: &Node, body: &Map<String, Json>, at: &str, errs: &mut Vec<String>) -> Cty {
    match node {
        Node::Object(attrs) => Cty::Map(
            attrs
                .iter()
                .map(|(k, n)| (k.clone(), eval(n, body, at, errs)))
                .collect(),
        ),
        Node::Array(items) => Cty::Seq(items.iter().map(|n| eval(n, body, at, errs)).collect()),
        Node::Attr { name, ty, required } => match body.get(name) {
            None => {
                if *required {
                    errs.push(format!(
                        "{at}Missing required argument: The argument {name:?} is required, but no definition was found."
                    ));
                }
                Cty::Null
            }
            Some(v) => convert(v, ty).unwrap_or_else(|why| {
                errs.push(format!(
                    "{at}Incorrect attribute value type: Inappropriate value for attribute {name:?}: {why}."
                ));
                Cty::Null
            }),
        },
        Node::Block {
            name,
            required,
            nested,
        } => {
            let found = blocks(body.get(name), name, at, errs);
            match found.as_slice() {
                [] => {
                    if *required {
                        errs.push(format!(
                            "{at}Missing {name} block: A block of type {name:?} is required here."
                        ));
                    }
                    Cty::Null
                }
                [one] => eval_body(nested, one, &format!("{at}{name}: "), errs),
                _ => {
                    errs.push(format!(
                        "{at}Duplicate {name} block: Only one block of type {name:?} is allowed."
                    ));
                    Cty::Null
                }
            }
        }
        Node::BlockAttrs { name, ty, required } => {
            let found = blocks(body.get(name), name, at, errs);
            match found.as_slice() {
                [] => {
                    if *required {
                        errs.push(format!(
                            "{at}Missing {name} block: A block of type {name:?} is required here."
                        ));
                    }
                    Cty::Null
                }
                [one] => convert(&Json::Object((*one).clone()), &Type::Map(Box::new(ty.clone())))
                    .unwrap_or_else(|why| {
                        errs.push(format!(
                            "{at}Incorrect attribute value type: Inappropriate value in block {name:?}: {why}."
                        ));
                        Cty::Null
                    }),
                _ => {
                    errs.push(format!(
                        "{at}Duplicate {name} block: Only one block of type {name:?} is allowed."
                    ));
                    Cty::Null
                }
            }
        }
        Node::BlockList {
            name,
            min,
            max,
            set,
            nested,
        } => {
            let found = blocks(body.get(name), name, at, errs);
            let count = found.len() as u64;
            if count < *min {
                errs.push(format!(
                    "{at}Insufficient {name} blocks: At least {min} {name:?} blocks are required."
                ));
            }
            if *max > 0 && count > *max {
                errs.push(format!(
                    "{at}Too many {name} blocks: No more than {max} {name:?} blocks are allowed."
                ));
            }
            let mut items: Vec<Cty> = found
                .iter()
                .map(|b| eval_body(nested, b, &format!("{at}{name}: "), errs))
                .collect();
            if *set {
                let mut unique: Vec<Cty> = Vec::with_capacity(items.len());
                for item in items {
                    if !unique.contains(&item) {
                        unique.push(item);
                    }
                }
                items = unique;
            }
            Cty::Seq(items)
        }
        Node::BlockMap {
            name,
            labels,
            nested,
        } => match body.get(name) {
            None | Some(Json::Null) => Cty::Map(BTreeMap::new()),
            Some(v) => eval_labels(v, labels, name, nested, &format!("{at}{name}: "), errs),
        },
        Node::Default { primary, default } => {
            let value = eval(primary, body, at, errs);
            if !value.is_null() {
                return value;
            }
            match default.as_ref() {
                Node::Literal(json) => {
                    convert(json, &primary.implied_type()).unwrap_or_else(|why| {
                        errs.push(format!("{at}Invalid default value: {why}."));
                        Cty::Null
                    })
                }
                other => eval(other, body, at, errs),
            }
        }
        Node::Literal(json) => infer(json),
    }
}

/// One level of a block map per label: `{"label": {...next level or the body...}}`.
fn eval_labels(
    value: &Json,
    labels: &[String],
    name: &str,
    nested: &Node,
    at: &str,
    errs: &mut Vec<String>,
) -> Cty {
    let Some((label, rest)) = labels.split_first() else {
        return match blocks(Some(value), name, at, errs).as_slice() {
            [one] => eval_body(nested, one, at, errs),
            [] => Cty::Null,
            _ => {
                errs.push(format!(
                    "{at}Duplicate {name} block: Only one block of type {name:?} with these labels is allowed."
                ));
                Cty::Null
            }
        };
    };
    let Json::Object(map) = value else {
        errs.push(format!(
            "{at}Incorrect JSON value type: A JSON object is required here, keyed by the {label:?} label."
        ));
        return Cty::Null;
    };
    Cty::Map(
        map.iter()
            .map(|(k, v)| {
                let inner = eval_labels(v, rest, name, nested, &format!("{at}{k}: "), errs);
                (k.clone(), inner)
            })
            .collect(),
    )
}
