//! Builders for hclspec trees, as Nomad's Go `hclspec.New*` helpers write them: what a plugin
//! author uses to publish the schema of its plugin and task config.
//!
//! ```
//! use drover_plugin_proto::hcl::spec::*;
//! let task = object([
//!     ("command", attr("command", "string", true)),
//!     ("args", attr("args", "list(string)", false)),
//!     ("verbose", default(attr("verbose", "bool", false), literal("false"))),
//! ]);
//! ```

use crate::hclspec::{self, Spec, spec::Block as S};

fn spec(block: S) -> Spec {
    Spec { block: Some(block) }
}

/// An object whose properties are the given specs, keyed by property name (an Attr or block
/// with an empty name reads the property of that name).
pub fn object<'a>(attributes: impl IntoIterator<Item = (&'a str, Spec)>) -> Spec {
    spec(S::Object(hclspec::Object {
        attributes: attributes
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    }))
}

/// An attribute of type `type_expr` (`string`, `number`, `bool`, `any`, `list(string)`, ...).
pub fn attr(name: &str, type_expr: &str, required: bool) -> Spec {
    spec(S::Attr(hclspec::Attr {
        name: name.to_string(),
        r#type: type_expr.to_string(),
        required,
    }))
}

/// Zero or one `name { ... }` block (exactly one when `required`).
pub fn block(name: &str, required: bool, nested: Spec) -> Spec {
    spec(S::BlockValue(Box::new(hclspec::Block {
        name: name.to_string(),
        required,
        nested: Some(Box::new(nested)),
    })))
}

/// Any number of `name { ... }` blocks, as a list.
pub fn block_list(name: &str, nested: Spec) -> Spec {
    spec(S::BlockList(Box::new(hclspec::BlockList {
        name: name.to_string(),
        min_items: 0,
        max_items: 0,
        nested: Some(Box::new(nested)),
    })))
}

/// A `name { key = value ... }` block read as a map of `type_expr`.
pub fn block_attrs(name: &str, type_expr: &str, required: bool) -> Spec {
    spec(S::BlockAttrs(hclspec::BlockAttrs {
        name: name.to_string(),
        r#type: type_expr.to_string(),
        required,
    }))
}

/// `primary`, or `fallback` when the config leaves it out.
pub fn default(primary: Spec, fallback: Spec) -> Spec {
    spec(S::Default(Box::new(hclspec::Default {
        primary: Some(Box::new(primary)),
        default: Some(Box::new(fallback)),
    })))
}

/// A constant written as an HCL expression: `"true"`, `"10"`, `"\"5m\""`, `"[]"`.
pub fn literal(hcl_expr: &str) -> Spec {
    spec(S::Literal(hclspec::Literal {
        value: hcl_expr.to_string(),
    }))
}

/// A tuple of the given specs' values.
pub fn array(values: impl IntoIterator<Item = Spec>) -> Spec {
    spec(S::Array(hclspec::Array {
        values: values.into_iter().collect(),
    }))
}
