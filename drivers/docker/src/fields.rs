//! Reading config blocks that arrive as JSON in the shapes Nomad's HCL parsing produces: a map
//! written as `labels { a = "b" }` or `labels = { a = "b" }` arrives as a list of one object, a
//! repeated block as a list of objects, numbers inside string lists stay numbers. Every reader
//! here accepts those shapes and names the offending field in its error.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use thiserror::Error;

/// A config field that is missing, of the wrong type or not understood.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("field \"{field}\": {problem}")]
pub struct FieldError {
    /// Dotted path of the field, for example `volumes.enabled`.
    pub field: String,
    pub problem: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// One object of a config block, with the dotted path that leads to it.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    object: &'a Map<String, Value>,
    prefix: &'a str,
}

/// `null` reads as an empty block.
pub fn as_object<'a>(
    value: &'a Value,
    what: &str,
    empty: &'a Map<String, Value>,
) -> Result<&'a Map<String, Value>, FieldError> {
    match value {
        Value::Null => Ok(empty),
        Value::Object(o) => Ok(o),
        _ => Err(FieldError::new(what, "must be an object")),
    }
}

/// A scalar written where a string is expected: HCL lets `args = ["-p", 8080]` through.
fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl<'a> Fields<'a> {
    pub fn new(object: &'a Map<String, Value>, prefix: &'a str) -> Self {
        Fields { object, prefix }
    }

    pub fn path(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.object.get(name).filter(|v| !v.is_null())
    }

    fn err(&self, name: &str, problem: &str) -> FieldError {
        FieldError::new(self.path(name), problem)
    }

    /// Fails on the first key that is not in `known`.
    pub fn only(&self, known: &[&str]) -> Result<(), FieldError> {
        match self.object.keys().find(|k| !known.contains(&k.as_str())) {
            Some(unknown) => Err(FieldError::new(self.path(unknown), "unknown field")),
            None => Ok(()),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn string(&self, name: &str) -> Result<Option<String>, FieldError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.err(name, "must be a string")),
        }
    }

    /// A string, empty when absent.
    pub fn text(&self, name: &str) -> Result<String, FieldError> {
        Ok(self.string(name)?.unwrap_or_default())
    }

    pub fn bool_or(&self, name: &str, default: bool) -> Result<bool, FieldError> {
        match self.get(name) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
            Some(_) => Err(self.err(name, "must be a bool")),
        }
    }

    pub fn int(&self, name: &str) -> Result<Option<i64>, FieldError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .map(Some)
                .ok_or_else(|| self.err(name, "must be an integer")),
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| self.err(name, "must be an integer")),
            Some(_) => Err(self.err(name, "must be an integer")),
        }
    }

    /// A list of strings; numbers and bools in it are written out as strings.
    pub fn strings(&self, name: &str) -> Result<Vec<String>, FieldError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    scalar_string(v).ok_or_else(|| self.err(name, "must be a list of strings"))
                })
                .collect(),
            Some(_) => Err(self.err(name, "must be a list of strings")),
        }
    }

    /// A map of strings, written as an object or as a list of objects (merged in order).
    pub fn string_map(&self, name: &str) -> Result<BTreeMap<String, String>, FieldError> {
        let mut out = BTreeMap::new();
        let objects: Vec<&Map<String, Value>> = match self.get(name) {
            None => return Ok(out),
            Some(Value::Object(o)) => vec![o],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_object().ok_or_else(|| self.err(name, "must be a map")))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(self.err(name, "must be a map")),
        };
        for o in objects {
            for (k, v) in o {
                let v = scalar_string(v)
                    .ok_or_else(|| self.err(&format!("{name}.{k}"), "must be a string"))?;
                out.insert(k.clone(), v);
            }
        }
        Ok(out)
    }

    /// A repeatable block: an object or a list of objects.
    pub fn blocks(&self, name: &str) -> Result<Vec<&'a Map<String, Value>>, FieldError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Object(o)) => Ok(vec![o]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_object()
                        .ok_or_else(|| self.err(name, "must be a block"))
                })
                .collect(),
            Some(_) => Err(self.err(name, "must be a block")),
        }
    }

    /// A block that may appear once.
    pub fn block(&self, name: &str) -> Result<Option<&'a Map<String, Value>>, FieldError> {
        let mut blocks = self.blocks(name)?;
        match blocks.len() {
            0 => Ok(None),
            1 => Ok(blocks.pop()),
            _ => Err(self.err(name, "may only be given once")),
        }
    }

    /// A Go-style duration string such as "3m" or "1h30m".
    pub fn duration(&self, name: &str) -> Result<Option<Duration>, FieldError> {
        match self.string(name)? {
            None => Ok(None),
            Some(s) => humantime::parse_duration(s.trim())
                .map(Some)
                .map_err(|e| self.err(name, &format!("invalid duration {s:?}: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with<T>(v: Value, f: impl FnOnce(Fields<'_>) -> T) -> T {
        let o = v.as_object().unwrap().clone();
        f(Fields::new(&o, "cfg"))
    }

    #[test]
    fn maps_read_from_an_object_or_a_list_of_objects() {
        let m = with(json!({"labels": [{"a": "b"}, {"c": 1}]}), |f| {
            f.string_map("labels").unwrap()
        });
        assert_eq!(m["a"], "b");
        assert_eq!(m["c"], "1");
        let m = with(json!({"labels": {"x": "y"}}), |f| {
            f.string_map("labels").unwrap()
        });
        assert_eq!(m["x"], "y");
    }

    #[test]
    fn string_lists_take_numbers_and_reject_objects() {
        assert_eq!(
            with(json!({"args": ["-p", 8080]}), |f| f
                .strings("args")
                .unwrap()),
            vec!["-p", "8080"]
        );
        let err = with(json!({"args": [{"a": 1}]}), |f| {
            f.strings("args").unwrap_err()
        });
        assert_eq!(
            err.to_string(),
            "field \"cfg.args\": must be a list of strings"
        );
    }

    #[test]
    fn durations_parse_go_style() {
        let d = with(json!({"d": "1h30m"}), |f| f.duration("d").unwrap());
        assert_eq!(d, Some(Duration::from_secs(5400)));
        assert!(with(json!({"d": "soon"}), |f| f.duration("d").is_err()));
    }

    #[test]
    fn unknown_fields_are_named() {
        let err = with(json!({"imagee": "x"}), |f| f.only(&["image"]).unwrap_err());
        assert_eq!(err.to_string(), "field \"cfg.imagee\": unknown field");
    }

    #[test]
    fn a_single_block_given_twice_is_an_error() {
        let err = with(json!({"gc": [{}, {}]}), |f| f.block("gc").unwrap_err());
        assert!(err.to_string().contains("only be given once"));
    }
}
