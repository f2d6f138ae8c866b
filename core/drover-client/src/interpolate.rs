//! `${...}` interpolation of task configuration, environment values and the like.
//!
//! Rules, from Nomad's client:
//! - A reference is `${name}` where `name` is made of letters, digits, `_`, `-` and `.` (the
//!   pattern of Nomad's `helper/args.ReplaceEnv`): `${NOMAD_ALLOC_DIR}`, `${attr.kernel.name}`,
//!   `${node.unique.id}`, `${meta.foo}`. A name may be followed by HCL index steps with a quoted
//!   key, `${env["foo.bar"]}`, the form Nomad's HCL evaluation of driver config accepts for keys
//!   that are not identifiers. The lookup gets the text between `${` and `}` as written.
//! - A reference the lookup does not know is left exactly as written, as Nomad leaves it.
//! - `$${` is HCL's escape for a literal `${`: it becomes `${` and what follows is not
//!   interpolated. Nomad evaluates driver config as HCL templates, where this escape applies.
//! - Replacement values are inserted as they are and never scanned again.
//! - Anything else that starts with `${` but is not a reference (spaces, function calls, an
//!   unterminated `${`) is kept as written; references inside it are still replaced.

use serde_json::Value;

/// Replaces every known `${...}` reference in `input`; see the module docs for the rules.
pub fn interpolate(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar..];
        if let Some(escaped) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = escaped;
        } else if let Some(body) = after.strip_prefix("${")
            && let Some(name_len) = reference_len(body)
            && body[name_len..].starts_with('}')
        {
            let name = &body[..name_len];
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => {
                    out.push_str("${");
                    out.push_str(name);
                    out.push('}');
                }
            }
            rest = &body[name_len + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Applies [`interpolate`] to every string value in a JSON tree. Object keys are left alone.
pub fn interpolate_json(value: &Value, lookup: &dyn Fn(&str) -> Option<String>) -> Value {
    match value {
        Value::String(s) => Value::String(interpolate(s, lookup)),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| interpolate_json(item, lookup))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| (key.clone(), interpolate_json(item, lookup)))
                .collect(),
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
    }
}

/// Length in bytes of the reference at the start of `body` (the text after `${`), or `None`
/// when `body` does not start with one. The caller checks that `}` follows.
fn reference_len(body: &str) -> Option<usize> {
    let is_name_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
    let bytes = body.as_bytes();
    let mut len = bytes.iter().take_while(|&&b| is_name_byte(b)).count();
    if len == 0 {
        return None;
    }
    // Index steps: ["key"], where key has no quote, backslash or newline.
    while body[len..].starts_with("[\"") {
        let key_start = len + 2;
        let key_len = body[key_start..].find(['"', '\\', '\n'])?;
        let key_end = key_start + key_len;
        if !body[key_end..].starts_with("\"]") {
            return None;
        }
        len = key_end + 2;
    }
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn vars() -> HashMap<&'static str, &'static str> {
        HashMap::from([
            ("NOMAD_ALLOC_DIR", "/alloc"),
            ("attr.kernel.name", "linux"),
            ("node.unique.id", "n-1"),
            ("meta.foo", "bar"),
            ("env[\"a.b\"]", "dotted"),
            ("NOMAD-DASH", "dash"),
            ("LOOP", "${LOOP}"),
        ])
    }

    fn run(input: &str) -> String {
        let vars = vars();
        interpolate(input, &|name| vars.get(name).map(|v| v.to_string()))
    }

    #[test]
    fn known_references_are_replaced() {
        assert_eq!(run("${NOMAD_ALLOC_DIR}/data"), "/alloc/data");
        assert_eq!(
            run("k=${attr.kernel.name} id=${node.unique.id}"),
            "k=linux id=n-1"
        );
        assert_eq!(run("${meta.foo}${meta.foo}"), "barbar");
        assert_eq!(run("${NOMAD-DASH}"), "dash");
    }

    #[test]
    fn indexed_references_reach_lookup_as_written() {
        assert_eq!(run("x=${env[\"a.b\"]}"), "x=dotted");
        assert_eq!(run("${env[\"unknown key\"]}"), "${env[\"unknown key\"]}");
    }

    #[test]
    fn unknown_references_are_left_as_written() {
        assert_eq!(
            run("${NOPE} and ${attr.missing}"),
            "${NOPE} and ${attr.missing}"
        );
    }

    #[test]
    fn things_that_are_not_references_are_kept() {
        assert_eq!(
            run("$HOME $ ${ spaced } ${} ${unterminated"),
            "$HOME $ ${ spaced } ${} ${unterminated"
        );
        assert_eq!(run("cost: 5$"), "cost: 5$");
        assert_eq!(run("${upper(meta.foo)}"), "${upper(meta.foo)}");
        assert_eq!(run("${env[\"open}"), "${env[\"open}");
    }

    #[test]
    fn references_inside_non_references_are_still_replaced() {
        assert_eq!(run("${x${meta.foo}}"), "${xbar}");
    }

    #[test]
    fn double_dollar_escapes_a_reference() {
        assert_eq!(run("$${NOMAD_ALLOC_DIR}"), "${NOMAD_ALLOC_DIR}");
        assert_eq!(run("$${meta.foo} ${meta.foo}"), "${meta.foo} bar");
        assert_eq!(run("$$HOME"), "$$HOME");
    }

    #[test]
    fn replacement_values_are_not_scanned_again() {
        assert_eq!(run("${LOOP}"), "${LOOP}");
    }

    #[test]
    fn multibyte_text_around_references_is_preserved() {
        assert_eq!(run("é${meta.foo}ü$"), "ébarü$");
    }

    #[test]
    fn json_strings_are_interpolated_everywhere_but_keys() {
        let vars = vars();
        let lookup = |name: &str| vars.get(name).map(|v| v.to_string());
        let config = json!({
            "command": "${NOMAD_ALLOC_DIR}/bin",
            "args": ["-k", "${attr.kernel.name}", 3, true, null],
            "nested": {"${meta.foo}": {"deep": ["${node.unique.id}"]}},
        });
        let expected = json!({
            "command": "/alloc/bin",
            "args": ["-k", "linux", 3, true, null],
            "nested": {"${meta.foo}": {"deep": ["n-1"]}},
        });
        assert_eq!(interpolate_json(&config, &lookup), expected);
    }
}
