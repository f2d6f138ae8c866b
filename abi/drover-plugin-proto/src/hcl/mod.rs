//! Plugin and task config on the wire, as Nomad sends it: the agent decodes the config block
//! (JSON here, as Nomad turns it into HCL's JSON syntax) against the plugin's hclspec with
//! hcldec's rules, then msgpack-encodes the resulting cty value ([`ConfigSchema::encode`]).
//! The plugin decodes the msgpack back into its own config ([`decode`]).
//!
//! Faithful where it matters to plugins: unknown properties, missing required arguments,
//! block counts and type mismatches are refused with HCL's messages; values are converted to
//! the declared types (`"10"` to a number, a number to a string...); defaults apply; objects
//! and maps are sent with sorted keys, whole numbers as integers. Not covered: HCL templates
//! and functions inside config values (the agent interpolates `${...}` before this step).

mod cty;
mod eval;
mod literal;
pub mod spec;
pub mod types;

use serde_json::{Map, Value as Json};

use crate::hclspec::Spec;
use crate::msgpack::{self, MsgpackError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The plugin's spec itself cannot be used.
    #[error("invalid config schema: {0}")]
    Schema(String),
    /// The config does not fit the spec; one entry per problem, each naming the field.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    /// The plugin publishes no schema but the agent has config for it (Nomad's message).
    #[error("configuration not allowed but config passed")]
    NotAllowed,
    #[error(transparent)]
    Msgpack(#[from] MsgpackError),
}

/// A plugin's config spec, compiled once and applied to any number of config blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigSchema {
    /// `None` when the plugin publishes no spec: it takes no config.
    root: Option<eval::Node>,
}

impl ConfigSchema {
    /// Compiles `spec` (`None` or an empty spec: the plugin takes no config).
    pub fn compile(spec: Option<&Spec>) -> Result<ConfigSchema, ConfigError> {
        let root = match spec.filter(|s| s.block.is_some()) {
            None => None,
            Some(s) => Some(eval::compile(s, "").map_err(ConfigError::Schema)?),
        };
        Ok(ConfigSchema { root })
    }

    /// Decodes `config` (a JSON object; null is an empty one) against the spec and encodes
    /// the value as msgpack. Without a spec, an empty config encodes as no bytes and any
    /// other config is refused.
    pub fn encode(&self, config: &Json) -> Result<Vec<u8>, ConfigError> {
        let empty = Map::new();
        let body = match config {
            Json::Null => &empty,
            Json::Object(map) => map,
            _ => {
                return Err(ConfigError::Invalid(vec![
                    "config must be an object".to_string(),
                ]));
            }
        };
        let Some(root) = &self.root else {
            return if body.is_empty() {
                Ok(Vec::new())
            } else {
                Err(ConfigError::NotAllowed)
            };
        };
        let mut errs = Vec::new();
        let value = eval::eval_body(root, body, "", &mut errs);
        if !errs.is_empty() {
            return Err(ConfigError::Invalid(errs));
        }
        Ok(msgpack::encode(&value.to_msgpack()))
    }
}

/// Reads msgpack config back into JSON, dropping object properties that are null (what the
/// spec declares but the config left out), so that a driver sees only what was written or
/// defaulted. No bytes is an empty object.
pub fn decode(bytes: &[u8]) -> Result<Json, ConfigError> {
    if bytes.is_empty() {
        return Ok(Json::Object(Map::new()));
    }
    Ok(drop_nulls(msgpack::decode(bytes)?.to_json()))
}

fn drop_nulls(json: Json) -> Json {
    match json {
        Json::Object(map) => Json::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, drop_nulls(v)))
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.into_iter().map(drop_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::spec::*;
    use super::*;
    use crate::msgpack::Value as Msg;
    use serde_json::json;

    fn skeleton_task() -> ConfigSchema {
        ConfigSchema::compile(Some(&object([
            ("command", attr("command", "string", true)),
            ("args", attr("args", "list(string)", false)),
        ])))
        .unwrap()
    }

    fn message(r: Result<Vec<u8>, ConfigError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn a_task_config_encodes_as_ctys_msgpack_with_sorted_keys_and_nulls() {
        let bytes = skeleton_task()
            .encode(&json!({"command": "echo", "args": ["a", 1]}))
            .unwrap();
        assert_eq!(
            msgpack::decode(&bytes).unwrap(),
            Msg::Map(vec![
                (
                    Msg::Str("args".into()),
                    Msg::Array(vec![Msg::Str("a".into()), Msg::Str("1".into())])
                ),
                (Msg::Str("command".into()), Msg::Str("echo".into())),
            ])
        );
        // Exactly what go-cty writes for this object: fixmap, keys in order, fixstr.
        let bytes = skeleton_task().encode(&json!({"command": "ls"})).unwrap();
        assert_eq!(
            bytes,
            [
                0x82, 0xa4, b'a', b'r', b'g', b's', 0xc0, 0xa7, b'c', b'o', b'm', b'm', b'a', b'n',
                b'd', 0xa2, b'l', b's'
            ]
        );
        assert_eq!(decode(&bytes).unwrap(), json!({"command": "ls"}));
    }

    #[test]
    fn unknown_missing_and_mistyped_fields_are_refused_in_hcls_words() {
        let s = skeleton_task();
        let e = message(s.encode(&json!({"command": "/bin/true", "argz": []})));
        assert_eq!(
            e,
            "Extraneous JSON object property: No argument or block type is named \"argz\"."
        );
        let e = message(s.encode(&json!({})));
        assert!(
            e.contains("Missing required argument") && e.contains("\"command\""),
            "{e}"
        );
        let e = message(s.encode(&json!({"command": "x", "args": "y"})));
        assert!(
            e.contains("Inappropriate value for attribute \"args\": list of string required"),
            "{e}"
        );
        assert!(message(s.encode(&json!([]))).contains("object"));
    }

    #[test]
    fn defaults_literals_and_type_conversion_apply() {
        let s = ConfigSchema::compile(Some(&object([
            (
                "enabled",
                default(attr("enabled", "bool", false), literal("true")),
            ),
            (
                "gc",
                default(attr("gc", "string", false), literal("\"5m\"")),
            ),
            ("port", attr("port", "number", false)),
            (
                "volumes",
                default(attr("volumes", "list(string)", false), literal("[]")),
            ),
            ("kind", literal("\"fixed\"")),
        ])))
        .unwrap();
        let out = decode(&s.encode(&json!({"port": "8080"})).unwrap()).unwrap();
        assert_eq!(
            out,
            json!({"enabled": true, "gc": "5m", "port": 8080, "volumes": [], "kind": "fixed"})
        );
        let out = decode(&s.encode(&json!({"enabled": false})).unwrap()).unwrap();
        assert_eq!(out["enabled"], false);
    }

    #[test]
    fn blocks_lists_maps_and_attrs_follow_hcldec() {
        let s = ConfigSchema::compile(Some(&object([
            (
                "auth",
                block(
                    "auth",
                    false,
                    object([("username", attr("username", "string", true))]),
                ),
            ),
            (
                "mount",
                block_list(
                    "mount",
                    object([
                        ("source", attr("source", "string", true)),
                        ("readonly", attr("readonly", "bool", false)),
                    ]),
                ),
            ),
            ("labels", block_attrs("labels", "string", false)),
            ("inner", array([attr("a", "number", false), literal("1")])),
        ])))
        .unwrap();
        let config = json!({
            "auth": [{"username": "u"}],
            "mount": [{"source": "/a"}, {"source": "/b", "readonly": true}],
            "labels": {"team": "x"},
            "a": 2,
        });
        let out = decode(&s.encode(&config).unwrap()).unwrap();
        assert_eq!(
            out,
            json!({
                "auth": {"username": "u"},
                "mount": [{"source": "/a"}, {"source": "/b", "readonly": true}],
                "labels": {"team": "x"},
                "inner": [2, 1],
            })
        );
        // A single object is one block too; no blocks is an empty list.
        let out = decode(&s.encode(&json!({"mount": {"source": "/c"}})).unwrap()).unwrap();
        assert_eq!(out["mount"], json!([{"source": "/c"}]));
        let out = decode(&s.encode(&json!({})).unwrap()).unwrap();
        assert_eq!(out["mount"], json!([]));
        // Errors inside a block name the block and the field.
        let e = message(s.encode(&json!({"mount": [{"src": "/a"}]})));
        assert!(e.contains("mount: ") && e.contains("\"src\""), "{e}");
        assert!(e.contains("\"source\" is required"), "{e}");
        let e = message(s.encode(&json!({"auth": [{"username": "a"}, {"username": "b"}]})));
        assert!(e.contains("Duplicate auth block"), "{e}");
    }

    #[test]
    fn a_plugin_without_a_schema_takes_only_an_empty_config() {
        let s = ConfigSchema::compile(None).unwrap();
        assert_eq!(s.encode(&json!({})).unwrap(), Vec::<u8>::new());
        assert_eq!(s.encode(&json!({"x": 1})), Err(ConfigError::NotAllowed));
        assert_eq!(decode(&[]).unwrap(), json!({}));
        // An empty object spec refuses every field, naming it.
        let s = ConfigSchema::compile(Some(&object([]))).unwrap();
        assert!(message(s.encode(&json!({"verbose": true}))).contains("\"verbose\""));
        assert_eq!(decode(&s.encode(&json!({})).unwrap()).unwrap(), json!({}));
    }

    #[test]
    fn broken_schemas_are_refused_when_compiled() {
        for bad in [
            attr("", "string", false),
            object([("x", attr("x", "strng", false))]),
            object([("x", literal("var.y"))]),
            block_list("", object([])),
        ] {
            let r = ConfigSchema::compile(Some(&bad));
            assert!(matches!(r, Err(ConfigError::Schema(_))), "{r:?}");
        }
    }
}
