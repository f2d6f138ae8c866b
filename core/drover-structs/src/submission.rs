//! Nomad's `JobSubmission`: the job file a version was registered from (HCL2 or JSON), with
//! the variables given with it, so `/v1/job/:id/submission` and the UI show what the operator
//! wrote rather than the API JSON it became.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A source larger than this is not kept (Nomad's `JobMaxSourceSize`, 1 MiB); the job still
/// registers, with a warning.
pub const JOB_MAX_SOURCE_SIZE: usize = 1024 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSubmission {
    /// The job file as submitted.
    #[serde(rename = "Source")]
    pub source: String,
    /// `hcl2` or `json`.
    #[serde(rename = "Format")]
    pub format: String,
    /// `-var` flags given with it.
    #[serde(rename = "VariableFlags")]
    pub variable_flags: BTreeMap<String, String>,
    /// The contents of `-var-file` files given with it.
    #[serde(rename = "Variables")]
    pub variables: String,
    /// Set by the server: the job version this is the source of.
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "Version")]
    pub version: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
}

impl JobSubmission {
    /// Whether this submission is small enough to keep.
    pub fn fits(&self) -> bool {
        self.source.len() + self.variables.len() <= JOB_MAX_SOURCE_SIZE
    }
}
