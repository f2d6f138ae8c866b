//! `/v1/jobs/parse` (HCL to job JSON) and `/v1/validate/job`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::response::Response;
use drover_jobspec::Variables;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::body::{JobRequest, decode_body, default_job_scope};
use crate::client_fs::blocking_fs;
use crate::error::ApiError;
use crate::query::{Params, QueryOptions};
use crate::response::{QueryMeta, respond_json};

/// The name parse errors cite, as Nomad's API parser names its input.
const PARSE_FILE_NAME: &str = "input.hcl";

/// Nomad's `JobsParseRequest`. `Variables` is HCL variable-file content (Nomad's form); an
/// object of name to value is taken too.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ParseRequest {
    #[serde(rename = "JobHCL")]
    job_hcl: String,
    #[serde(rename = "HCLv1")]
    hcl_v1: bool,
    #[serde(rename = "Canonicalize")]
    canonicalize: bool,
    #[serde(rename = "Variables")]
    variables: Option<Value>,
}

/// Calls of HCL functions that read the agent's filesystem. Nomad's API parser runs with the
/// filesystem disabled, so that a request cannot read the server's files; the jobspec crate
/// has no such switch, so such jobs are refused before parsing. Text that merely looks like a
/// call (inside a string) is refused too, which errs on the safe side.
static FS_FUNCTION_CALL: LazyLock<regex::Regex> = LazyLock::new(|| {
    // A constant pattern: it compiles, as the tests check.
    regex::Regex::new(r"\b(file|fileexists|fileset|filebase64|filebase64sha256|filebase64sha512|filemd5|filesha1|filesha256|filesha512|templatefile|abspath|pathexpand)\s*\(")
        .unwrap_or_else(|e| unreachable!("constant regex: {e}"))
});

/// `PUT|POST /v1/jobs/parse`: the job of an HCL file as Nomad's API JSON, canonicalised with
/// Nomad's defaults when `Canonicalize` is set.
pub(crate) async fn parse(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let request: ParseRequest = decode_body(&body, "request")?;
    if request.job_hcl.trim().is_empty() {
        return Err(ApiError::bad_request("Job spec is empty"));
    }
    if request.hcl_v1 {
        return Err(ApiError::bad_request(
            "HCL v1 job files are not supported; use HCL2",
        ));
    }
    if let Some(call) = FS_FUNCTION_CALL.captures(&request.job_hcl) {
        return Err(ApiError::bad_request(format!(
            "{PARSE_FILE_NAME}: filesystem function {}() is not allowed when parsing through the API",
            &call[1]
        )));
    }
    let variables = request.variables;
    let hcl = request.job_hcl;
    let mut job = blocking_fs(move || parse_with_variables(&hcl, variables.as_ref())).await?;
    if request.canonicalize {
        default_job_scope(&mut job, opts.write_namespace(), &s.agent.region);
        let decoded = drover_structs::decode::decode_api_job(job)?;
        job = serde_json::to_value(&decoded)
            .map_err(|e| ApiError::internal(format!("failed to encode job: {e}")))?;
    }
    let meta = QueryMeta::new(&s, s.server.snapshot().latest_index());
    respond_json(&job, Some(meta), opts.pretty)
}

/// A variable file written for one parse and removed after it.
struct TempVarFile(PathBuf);

impl TempVarFile {
    fn write(content: &str) -> Result<Self, ApiError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "drover-parse-vars-{}-{}.hcl",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, content).map_err(|e| {
            ApiError::internal(format!("cannot write variables to {}: {e}", path.display()))
        })?;
        Ok(TempVarFile(path))
    }
}

impl Drop for TempVarFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn parse_with_variables(hcl: &str, variables: Option<&Value>) -> Result<Value, ApiError> {
    let mut vars = Variables::default();
    let mut _var_file = None;
    match variables {
        None | Some(Value::Null) => {}
        Some(Value::String(content)) if content.trim().is_empty() => {}
        Some(Value::String(content)) => {
            let file = TempVarFile::write(content)?;
            vars.files.push(file.0.clone());
            _var_file = Some(file);
        }
        Some(Value::Object(map)) => {
            let mut values = BTreeMap::new();
            for (name, value) in map {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                values.insert(name.clone(), text);
            }
            vars.values = values;
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "failed to decode request: Variables: expected a string of HCL variable definitions",
            ));
        }
    }
    drover_jobspec::parse_hcl(hcl, PARSE_FILE_NAME, &vars)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// `PUT|POST /v1/validate/job`: Nomad's `JobValidateResponse`. A job that fails validation is
/// still a 200; only a body that cannot be decoded is a 400.
pub(crate) async fn validate(
    State(s): State<AppState>,
    Query(params): Query<Params>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&params)?;
    let request: JobRequest = decode_body(&body, "request")?;
    let Some(mut job_json) = request.job else {
        return Err(ApiError::bad_request("Job must be specified"));
    };
    default_job_scope(&mut job_json, opts.write_namespace(), &s.agent.region);
    let job = drover_structs::decode::decode_api_job(job_json)?;
    // What registration would refuse: Nomad's rules, then what Drover does not act on yet.
    let checked = drover_structs::validate::validate_job(&job)
        .and_then(|()| drover_server::unsupported::refuse_unacted(&job));
    let (errors, error) = match checked {
        Ok(()) => (Value::Null, String::new()),
        Err(multi) => (json!(multi.errors), multi.to_string()),
    };
    let body = json!({
        "DriverConfigValidated": true,
        "ValidationErrors": errors,
        "Error": error,
        "Warnings": "",
    });
    let meta = QueryMeta::new(&s, s.server.snapshot().latest_index());
    respond_json(&body, Some(meta), opts.pretty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filesystem_functions_are_spotted() {
        assert!(FS_FUNCTION_CALL.is_match(r#"config { args = [file("/etc/passwd")] }"#));
        assert!(FS_FUNCTION_CALL.is_match("x = templatefile (\"a\", {})"));
        assert!(!FS_FUNCTION_CALL.is_match(r#"config { command = "profile" }"#));
        assert!(!FS_FUNCTION_CALL.is_match("x = myfile"));
    }
}

#[cfg(test)]
mod api_tests {
    use axum::http::StatusCode;
    use serde_json::json;

    use crate::test_support::{TestApi, web_job};

    const HCL: &str = r#"
variable "image_tag" {
  type    = string
  default = "latest"
}

job "example" {
  datacenters = ["dc1"]

  group "cache" {
    task "redis" {
      driver = "docker"
      config {
        image = "redis:${var.image_tag}"
      }
      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
"#;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parse_turns_hcl_into_job_json() {
        let api = TestApi::start().await;
        let r = api.put("/v1/jobs/parse", &json!({"JobHCL": HCL})).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let job = r.json();
        assert_eq!(job["ID"], "example");
        assert_eq!(
            job["TaskGroups"][0]["Tasks"][0]["Config"]["image"],
            "redis:latest"
        );

        let r = api
            .put(
                "/v1/jobs/parse",
                &json!({"JobHCL": HCL, "Canonicalize": true, "Variables": "image_tag = \"7\""}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let job = r.json();
        assert_eq!(job["Namespace"], "default");
        assert_eq!(job["Priority"], 50);
        assert_eq!(job["Type"], "service");
        assert_eq!(job["TaskGroups"][0]["Count"], 1);
        assert_eq!(
            job["TaskGroups"][0]["Tasks"][0]["Config"]["image"],
            "redis:7"
        );

        let r = api
            .put(
                "/v1/jobs/parse",
                &json!({"JobHCL": HCL, "Variables": {"image_tag": "6"}}),
            )
            .await;
        assert_eq!(
            r.json()["TaskGroups"][0]["Tasks"][0]["Config"]["image"],
            "redis:6"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parse_errors_are_400s() {
        let api = TestApi::start().await;
        let r = api
            .put("/v1/jobs/parse", &json!({"JobHCL": "job \"x\" {"}))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(r.text().starts_with("input.hcl:"), "{}", r.text());
        let r = api.put("/v1/jobs/parse", &json!({})).await;
        assert_eq!(
            (r.status, r.text().as_str()),
            (StatusCode::BAD_REQUEST, "Job spec is empty")
        );
        let sneaky = "job \"x\" {\n  meta { secret = file(\"/etc/passwd\") }\n}";
        let r = api.put("/v1/jobs/parse", &json!({"JobHCL": sneaky})).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(r.text().contains("file() is not allowed"), "{}", r.text());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn validate_reports_problems_in_the_body() {
        let api = TestApi::start().await;
        let r = api
            .put("/v1/validate/job", &json!({"Job": web_job("web")}))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert!(r.index() > 0);
        assert_eq!(
            r.json(),
            json!({"DriverConfigValidated": true, "ValidationErrors": null, "Error": "", "Warnings": ""})
        );

        let mut bad = web_job("web");
        // (An empty datacenter list is no error since Nomad 1.5: it becomes ["*"].)
        bad["Priority"] = json!(500);
        let r = api.put("/v1/validate/job", &json!({"Job": bad})).await;
        assert_eq!(r.status, StatusCode::OK);
        let body = r.json();
        let errors = body["ValidationErrors"].as_array().unwrap();
        assert!(!errors.is_empty());
        assert!(body["Error"].as_str().unwrap().contains("error"), "{body}");
        assert!(
            body["Error"]
                .as_str()
                .unwrap()
                .contains(errors[0].as_str().unwrap())
        );

        let mut malformed = web_job("web");
        malformed["Priority"] = json!("high");
        let r = api
            .put("/v1/validate/job", &json!({"Job": malformed}))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert!(r.text().contains("Priority"), "{}", r.text());
    }
}
