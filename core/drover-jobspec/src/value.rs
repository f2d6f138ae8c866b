//! The dynamic value model expressions evaluate to (a small subset of cty).
//!
//! HCL distinguishes lists from tuples and maps from objects; Nomad's decoding
//! never depends on that distinction, so one sequence and one mapping kind suffice.

use std::collections::BTreeMap;
use std::fmt;

/// An HCL number: integers stay exact, everything else is a float.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    pub(crate) fn as_f64(self) -> f64 {
        match self {
            // Precision loss above 2^53 is accepted, as cty's float fallback does.
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }

    /// The exact integer this number represents, if it is whole and fits in i64.
    pub(crate) fn as_i64(self) -> Option<i64> {
        match self {
            Number::Int(i) => Some(i),
            Number::Float(f) => float_to_i64(f),
        }
    }

    /// Collapses whole floats to integers so that `2.0 * 3` prints as `6`.
    pub(crate) fn normalized(self) -> Number {
        match self {
            Number::Float(f) => match float_to_i64(f) {
                Some(i) => Number::Int(i),
                None => Number::Float(f),
            },
            n => n,
        }
    }
}

fn float_to_i64(f: f64) -> Option<i64> {
    // i64::MIN as f64 is exactly -2^63; anything at or past +2^63 does not fit.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if f.is_finite() && f.fract() == 0.0 && (-LIMIT..LIMIT).contains(&f) {
        Some(f as i64)
    } else {
        None
    }
}

impl PartialEq for Number {
    fn eq(&self, other: &Number) -> bool {
        match (self.normalized(), other.normalized()) {
            (Number::Int(a), Number::Int(b)) => a == b,
            (a, b) => a.as_f64() == b.as_f64(),
        }
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.normalized() {
            Number::Int(i) => write!(f, "{i}"),
            // Rust's float Display never uses exponents, like cty's Text('f', -1).
            Number::Float(x) => write!(f, "{x}"),
        }
    }
}

/// An evaluated HCL value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Tuple(Vec<Value>),
    Object(BTreeMap<String, Value>),
}

impl Value {
    pub(crate) fn string(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }

    pub(crate) fn int(i: i64) -> Value {
        Value::Number(Number::Int(i))
    }

    /// The type name HCL uses in error messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Tuple(_) => "tuple",
            Value::Object(_) => "object",
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Converts to a string the way cty's convert does for primitives.
    pub(crate) fn to_str(&self) -> Result<Option<String>, String> {
        match self {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            Value::Number(n) => Ok(Some(n.to_string())),
            Value::Bool(b) => Ok(Some(b.to_string())),
            other => Err(format!("string required, but have {}", other.type_name())),
        }
    }

    pub(crate) fn to_number(&self) -> Result<Option<Number>, String> {
        match self {
            Value::Null => Ok(None),
            Value::Number(n) => Ok(Some(*n)),
            Value::String(s) => parse_number(s)
                .map(Some)
                .ok_or_else(|| format!("a number is required, but have string {s:?}")),
            other => Err(format!("number required, but have {}", other.type_name())),
        }
    }

    pub(crate) fn to_bool(&self) -> Result<Option<bool>, String> {
        match self {
            Value::Null => Ok(None),
            Value::Bool(b) => Ok(Some(*b)),
            Value::String(s) if s == "true" => Ok(Some(true)),
            Value::String(s) if s == "false" => Ok(Some(false)),
            Value::String(s) => Err(format!("a bool is required, but have string {s:?}")),
            other => Err(format!("bool required, but have {}", other.type_name())),
        }
    }

    /// Renders the value as the JSON Nomad's decoder would produce for an
    /// `interface{}` destination (driver config, scaling policy).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => number_to_json(*n),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Tuple(items) => {
                serde_json::Value::Array(items.iter().map(Value::to_json).collect())
            }
            Value::Object(map) => serde_json::Value::Object(
                map.iter().map(|(k, v)| (k.clone(), v.to_json())).collect(),
            ),
        }
    }

    /// The inverse of [`Value::to_json`], used for JSON inputs and `jsondecode`.
    pub(crate) fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::int(i),
                None => Value::Number(Number::Float(n.as_f64().unwrap_or(f64::NAN))),
            },
            serde_json::Value::String(s) => Value::string(s.clone()),
            serde_json::Value::Array(a) => Value::Tuple(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }
}

pub(crate) fn number_to_json(n: Number) -> serde_json::Value {
    match n.normalized() {
        Number::Int(i) => serde_json::Value::from(i),
        Number::Float(f) => serde_json::Number::from_f64(f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
    }
}

/// Parses a decimal number the way cty converts strings to numbers.
pub(crate) fn parse_number(s: &str) -> Option<Number> {
    let t = s.trim();
    if t.is_empty() {
        return None;
    }
    if let Ok(i) = t.parse::<i64>() {
        return Some(Number::Int(i));
    }
    // Reject forms Rust accepts but cty does not ("inf", "nan").
    if !t
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    t.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(Number::Float)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_floats_print_and_serialize_as_integers() {
        assert_eq!(Number::Float(6.0).to_string(), "6");
        assert_eq!(number_to_json(Number::Float(6.0)), serde_json::json!(6));
        assert_eq!(Number::Float(3.2).to_string(), "3.2");
    }

    #[test]
    fn primitives_convert_to_strings_like_cty() {
        assert_eq!(Value::Bool(true).to_str(), Ok(Some("true".into())));
        assert_eq!(
            Value::int(21474836470).to_str(),
            Ok(Some("21474836470".into()))
        );
        assert!(Value::Tuple(vec![]).to_str().is_err());
    }

    #[test]
    fn strings_convert_to_numbers_and_bools() {
        assert_eq!(Value::string("5").to_number(), Ok(Some(Number::Int(5))));
        assert!(Value::string("five").to_number().is_err());
        assert!(Value::string("inf").to_number().is_err());
        assert_eq!(Value::string("false").to_bool(), Ok(Some(false)));
    }
}
