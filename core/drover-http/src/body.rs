//! Request bodies: JSON parsed leniently (unknown fields ignored, as Nomad's decoder does) with
//! errors that name the field.

use axum::body::Bytes;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

/// Parses a body as JSON; an empty body is `null`, for the caller to judge.
pub(crate) fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("failed to decode request body: {e}")))
}

/// Parses a body as JSON and decodes it into `T`, naming the failing field.
pub(crate) fn decode_body<T: DeserializeOwned + Default>(
    body: &Bytes,
    what: &str,
) -> Result<T, ApiError> {
    match parse_json(body)? {
        Value::Null => Ok(T::default()),
        value => Ok(drover_structs::decode::decode(value, what)?),
    }
}

/// Nomad's `JobRegisterRequest` (and `JobValidateRequest`, a subset): the job stays JSON until
/// it is canonicalised and decoded on its own, so errors name paths inside the job.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct JobRequest {
    #[serde(rename = "Job")]
    pub job: Option<Value>,
    #[serde(rename = "EnforceIndex")]
    pub enforce_index: bool,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    /// Nomad's `Submission`: the job file the job was parsed from (kept for its version).
    #[serde(rename = "Submission")]
    pub submission: Option<drover_structs::JobSubmission>,
}

/// Nomad's `JobPlanRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct JobPlanRequest {
    #[serde(rename = "Job")]
    pub job: Option<Value>,
    #[serde(rename = "Diff")]
    pub diff: bool,
    /// Sentinel policies are an Enterprise feature Drover has no counterpart of; accepted and
    /// without effect, as in Nomad's open-source edition.
    #[serde(rename = "PolicyOverride")]
    pub policy_override: bool,
}

/// Fills a job's namespace and region from the request when the job names none, as Nomad fills
/// them from the write request. The job must be a JSON object, else it is left for decoding to
/// report.
pub(crate) fn default_job_scope(job: &mut Value, namespace: &str, region: &str) {
    let Some(obj) = job.as_object_mut() else {
        return;
    };
    for (field, value) in [("Namespace", namespace), ("Region", region)] {
        let unset = match obj.get(field) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(_) => false,
        };
        if unset {
            obj.insert(field.to_string(), Value::String(value.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn malformed_json_is_a_400_with_the_position() {
        let e = parse_json(&Bytes::from_static(b"{\"Job\": ")).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert!(
            e.message.starts_with("failed to decode request body: "),
            "{}",
            e.message
        );
        assert!(e.message.contains("line 1"), "{}", e.message);
    }

    #[test]
    fn wrapper_fields_of_the_wrong_type_name_the_field() {
        let e = decode_body::<JobRequest>(
            &Bytes::from_static(b"{\"EnforceIndex\": \"yes\"}"),
            "request",
        )
        .unwrap_err();
        assert!(
            e.message
                .starts_with("failed to decode request: EnforceIndex: "),
            "{}",
            e.message
        );
    }

    #[test]
    fn job_scope_defaults_only_fill_what_is_missing() {
        let mut job = json!({"ID": "a", "Namespace": "", "Region": "eu"});
        default_job_scope(&mut job, "prod", "global");
        assert_eq!(job["Namespace"], "prod");
        assert_eq!(job["Region"], "eu");
    }
}
