//! Decoding API JSON into the model with errors that name the field path
//! (`TaskGroups[0].Count: invalid type: string "x", expected i64`).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::job::Job;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {path}: {message}")]
pub struct DecodeError {
    pub what: String,
    /// Dotted field path with indexes, for example `TaskGroups[0].Tasks[1].Resources.CPU`.
    pub path: String,
    pub message: String,
}

/// Removes `null` members from every object, so that decoding falls back to defaults for them.
/// Go's JSON decoder treats null as "leave the zero value"; this gives the same result.
pub fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Decodes `value` into `T`, naming the failing field path.
pub fn decode<T: DeserializeOwned>(mut value: Value, what: &str) -> Result<T, DecodeError> {
    strip_nulls(&mut value);
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        DecodeError {
            what: what.to_string(),
            path: if path == "." { "(root)".into() } else { path },
            message: e.into_inner().to_string(),
        }
    })
}

/// Canonicalises a job in API JSON shape with Nomad's defaults and decodes it.
pub fn decode_api_job(mut value: Value) -> Result<Job, DecodeError> {
    if !value.is_object() {
        return Err(DecodeError {
            what: "Job".into(),
            path: "(root)".into(),
            message: "expected a JSON object".into(),
        });
    }
    crate::canonicalize::canonicalize_job(&mut value);
    decode(value, "Job")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decode_error_names_the_field_path() {
        let v = json!({"ID": "x", "TaskGroups": [{"Name": "g", "Count": "three"}]});
        let e = decode_api_job(v).unwrap_err();
        assert_eq!(e.path, "TaskGroups[0].Count");
        assert!(e.to_string().contains("TaskGroups[0].Count"), "{e}");
    }

    #[test]
    fn nomad_sample_job_round_trips() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/reference/nomad-api-samples/job_sleep50.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            eprintln!("skipping: {} not present", path.display());
            return;
        };
        let original: Value = serde_json::from_str(&text).unwrap();
        let job: Job = decode(original.clone(), "Job").unwrap();
        let back = serde_json::to_value(&job).unwrap();
        assert_eq!(back, original);
    }
}
