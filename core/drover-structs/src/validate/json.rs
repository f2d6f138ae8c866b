//! Reading the blocks the model keeps as opaque JSON (services, volumes, templates...) the way
//! Go's decoder would see them: a missing or `null` member is the zero value. Values of the
//! wrong JSON type read as zero too; validation then reports what is missing.

use serde_json::Value;

pub(crate) fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn int_of(v: &Value, key: &str) -> i64 {
    match v.get(key) {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .unwrap_or(0),
        _ => 0,
    }
}

pub(crate) fn bool_of(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The member when it is set (not missing, not `null`).
pub(crate) fn set<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

/// The elements of an array member; nothing for anything else.
pub(crate) fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The elements of an opaque top-level block that is a list (`Services`, `Templates`...).
pub(crate) fn items(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The string elements of an array member.
pub(crate) fn strs<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    list(v, key).iter().filter_map(Value::as_str).collect()
}
