//! Config values as go-cty holds them after decoding, converted from JSON to a declared type the
//! way cty's `convert` does, and msgpack-encoded the way cty's `msgpack.Marshal(v, v.Type())`
//! does: object attributes and map keys in sorted order, whole numbers as integers, sets
//! sorted and without duplicates.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::types::Type;
use crate::msgpack::Value as Msg;

#[derive(Debug, Clone, PartialEq)]
pub enum Cty {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A number neither int64 nor float64 holds exactly: cty sends its decimal text.
    BigNumber(String),
    String(String),
    /// Lists, sets and tuples.
    Seq(Vec<Cty>),
    /// Maps and objects.
    Map(BTreeMap<String, Cty>),
}

impl Cty {
    pub fn is_null(&self) -> bool {
        matches!(self, Cty::Null)
    }

    pub fn to_msgpack(&self) -> Msg {
        match self {
            Cty::Null => Msg::Nil,
            Cty::Bool(b) => Msg::Bool(*b),
            Cty::Int(i) => Msg::int(*i),
            Cty::Float(f) => {
                // cty keeps numbers as big floats: a whole number is sent as an integer.
                if f.fract() == 0.0 && f.abs() < 9.2e18 {
                    Msg::int(*f as i64)
                } else {
                    Msg::Float(*f)
                }
            }
            Cty::BigNumber(s) | Cty::String(s) => Msg::Str(s.clone()),
            Cty::Seq(items) => Msg::Array(items.iter().map(Cty::to_msgpack).collect()),
            Cty::Map(map) => Msg::Map(
                map.iter()
                    .map(|(k, v)| (Msg::Str(k.clone()), v.to_msgpack()))
                    .collect(),
            ),
        }
    }

    fn number_text(&self) -> Option<String> {
        match self {
            Cty::Int(i) => Some(i.to_string()),
            Cty::Float(f) => Some(f.to_string()),
            Cty::BigNumber(s) => Some(s.clone()),
            _ => None,
        }
    }
}

fn number(n: &serde_json::Number) -> Cty {
    if let Some(i) = n.as_i64() {
        Cty::Int(i)
    } else if let Some(f) = n
        .as_f64()
        .filter(|f| n.as_u64().is_none_or(|u| *f as u64 == u))
    {
        Cty::Float(f)
    } else {
        Cty::BigNumber(n.to_string())
    }
}

fn parse_number(s: &str) -> Option<Cty> {
    let s = s.trim();
    if let Ok(i) = s.parse::<i64>() {
        return Some(Cty::Int(i));
    }
    s.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(Cty::Float)
}

/// The value of a JSON document with the types JSON implies (`any`): arrays become tuples,
/// objects objects.
pub fn infer(json: &Json) -> Cty {
    match json {
        Json::Null => Cty::Null,
        Json::Bool(b) => Cty::Bool(*b),
        Json::Number(n) => number(n),
        Json::String(s) => Cty::String(s.clone()),
        Json::Array(items) => Cty::Seq(items.iter().map(infer).collect()),
        Json::Object(map) => Cty::Map(map.iter().map(|(k, v)| (k.clone(), infer(v))).collect()),
    }
}

/// Converts `json` to `ty`, or says why not in cty's words ("list of string required").
/// Null converts to every type.
pub fn convert(json: &Json, ty: &Type) -> Result<Cty, String> {
    if json.is_null() {
        return Ok(Cty::Null);
    }
    let required = || format!("{} required", ty.friendly());
    match ty {
        Type::Any => Ok(infer(json)),
        Type::String => match json {
            Json::String(s) => Ok(Cty::String(s.clone())),
            Json::Bool(b) => Ok(Cty::String(b.to_string())),
            Json::Number(n) => Ok(Cty::String(number(n).number_text().unwrap_or_default())),
            _ => Err(required()),
        },
        Type::Number => match json {
            Json::Number(n) => Ok(number(n)),
            Json::String(s) => parse_number(s).ok_or_else(|| "a number is required".to_string()),
            _ => Err("a number is required".into()),
        },
        Type::Bool => match json {
            Json::Bool(b) => Ok(Cty::Bool(*b)),
            Json::String(s) if s == "true" || s == "1" => Ok(Cty::Bool(true)),
            Json::String(s) if s == "false" || s == "0" => Ok(Cty::Bool(false)),
            _ => Err("a bool is required".into()),
        },
        Type::List(elem) | Type::Set(elem) => {
            let Json::Array(items) = json else {
                return Err(required());
            };
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(convert(item, elem).map_err(|e| format!("element {i}: {e}"))?);
            }
            if matches!(ty, Type::Set(_)) {
                out = set_order(out);
            }
            Ok(Cty::Seq(out))
        }
        Type::Map(elem) => {
            let Json::Object(map) = json else {
                return Err(required());
            };
            let mut out = BTreeMap::new();
            for (k, v) in map {
                out.insert(
                    k.clone(),
                    convert(v, elem).map_err(|e| format!("element {k:?}: {e}"))?,
                );
            }
            Ok(Cty::Map(out))
        }
        Type::Object(attrs) => {
            let Json::Object(map) = json else {
                return Err("object required".into());
            };
            if let Some(extra) = map.keys().find(|k| !attrs.contains_key(*k)) {
                return Err(format!("unsupported attribute {extra:?}"));
            }
            let mut out = BTreeMap::new();
            for (name, aty) in attrs {
                match map.get(name) {
                    Some(v) => {
                        out.insert(
                            name.clone(),
                            convert(v, aty).map_err(|e| format!("attribute {name:?}: {e}"))?,
                        );
                    }
                    None => return Err(format!("attribute {name:?} is required")),
                }
            }
            Ok(Cty::Map(out))
        }
        Type::Tuple(types) => {
            let Json::Array(items) = json else {
                return Err("tuple required".into());
            };
            if items.len() != types.len() {
                return Err(format!("tuple required with {} elements", types.len()));
            }
            items
                .iter()
                .zip(types)
                .enumerate()
                .map(|(i, (item, t))| convert(item, t).map_err(|e| format!("element {i}: {e}")))
                .collect::<Result<Vec<_>, _>>()
                .map(Cty::Seq)
        }
    }
}

/// Removes duplicates and orders a set's elements: cty sends strings in lexical order and
/// numbers in numeric order; other elements keep their order.
fn set_order(items: Vec<Cty>) -> Vec<Cty> {
    let mut out: Vec<Cty> = Vec::with_capacity(items.len());
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    let key = |c: &Cty| match c {
        Cty::Int(i) => Some((0, *i as f64, String::new())),
        Cty::Float(f) => Some((0, *f, String::new())),
        Cty::String(s) => Some((1, 0.0, s.clone())),
        _ => None,
    };
    if out.iter().all(|c| key(c).is_some()) {
        out.sort_by(|a, b| {
            key(a)
                .partial_cmp(&key(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ty(s: &str) -> Type {
        Type::parse(s).unwrap()
    }

    #[test]
    fn primitives_convert_as_cty_does() {
        assert_eq!(convert(&json!("10"), &ty("number")), Ok(Cty::Int(10)));
        assert_eq!(
            convert(&json!(1.5), &ty("string")),
            Ok(Cty::String("1.5".into()))
        );
        assert_eq!(
            convert(&json!(3), &ty("string")),
            Ok(Cty::String("3".into()))
        );
        assert_eq!(convert(&json!("true"), &ty("bool")), Ok(Cty::Bool(true)));
        assert_eq!(convert(&json!(null), &ty("string")), Ok(Cty::Null));
        assert!(convert(&json!("x"), &ty("number")).is_err());
        assert!(convert(&json!([1]), &ty("string")).is_err());
    }

    #[test]
    fn collection_errors_name_the_element() {
        assert_eq!(
            convert(&json!(["a", [1]]), &ty("list(string)")),
            Err("element 1: string required".to_string())
        );
        assert_eq!(
            convert(&json!("a"), &ty("list(string)")),
            Err("list of string required".to_string())
        );
        assert!(convert(&json!({"a": 1, "b": 2}), &ty("object({a = number})")).is_err());
        assert!(convert(&json!({}), &ty("object({a = number})")).is_err());
    }

    #[test]
    fn sets_are_deduplicated_and_sorted() {
        assert_eq!(
            convert(&json!(["b", "a", "b"]), &ty("set(string)")),
            Ok(Cty::Seq(vec![
                Cty::String("a".into()),
                Cty::String("b".into())
            ]))
        );
    }

    #[test]
    fn whole_floats_encode_as_integers_like_ctys_big_floats() {
        assert_eq!(Cty::Float(2.0).to_msgpack(), Msg::UInt(2));
        assert_eq!(Cty::Float(2.5).to_msgpack(), Msg::Float(2.5));
        assert_eq!(Cty::Int(-4).to_msgpack(), Msg::Int(-4));
    }
}
