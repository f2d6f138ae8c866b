//! Parses Nomad job files (HCL2, and JSON jobs) into the JSON that
//! `nomad job run -output` prints: Nomad's `api.Job` shape with PascalCase
//! keys, unset pointer fields as `null` and durations as integer nanoseconds.
//!
//! HCL decoding follows Nomad 1.1.2's `jobspec2` package: `variable`,
//! `variables` and `locals` blocks, `--var` / `--var-file` / `NOMAD_VAR_*`
//! inputs, `dynamic` blocks, the HCL function library, and runtime references
//! (`${attr.kernel.name}`, `${NOMAD_ALLOC_DIR}`, ...) kept verbatim.
//!
//! This crate must not depend on other Drover crates (callers turn the JSON
//! into their own model) nor on an async runtime.

mod decode;
mod digest;
mod duration;
mod error;
mod eval;
mod normalize;
mod schema;
mod timefmt;
mod tree;
mod value;
mod variables;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hcl_edit::Span;
use hcl_edit::structure::{self, Structure};

pub use crate::duration::parse_duration;
pub use crate::error::JobspecError;

use crate::error::Diag;
use crate::eval::Context;

/// Inputs for `variable` blocks.
#[derive(Debug, Clone, Default)]
pub struct Variables {
    /// `--var name=value` pairs.
    pub values: BTreeMap<String, String>,
    /// `--var-file` paths, applied in order.
    pub files: Vec<PathBuf>,
    /// Whether to read `NOMAD_VAR_<name>` from the process environment.
    pub env: bool,
}

/// Parses HCL source, mapping hcl-edit's syntax errors to ours.
pub(crate) fn parse_syntax(src: &str, file: &str) -> Result<structure::Body, JobspecError> {
    hcl_edit::parser::parse_body(src).map_err(|e| JobspecError::Syntax {
        file: file.to_string(),
        line: e.location().line(),
        column: e.location().column(),
        message: e.message().to_string(),
    })
}

/// Parses an HCL job file and returns the job object (not wrapped in `{"Job": ...}`).
pub fn parse_hcl(
    src: &str,
    filename: &str,
    vars: &Variables,
) -> Result<serde_json::Value, JobspecError> {
    let body = parse_syntax(src, filename)?;
    let base_dir = Path::new(filename)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let located = |d: Diag| d.into_error(filename, src);

    let resolved = variables::resolve(&body, src, filename, &base_dir, vars)?;

    let mut jobs = body.iter().filter_map(|s| match s {
        Structure::Block(b) if b.ident.as_str() == "job" => Some(b),
        _ => None,
    });
    let Some(job) = jobs.next() else {
        return Err(located(Diag::new(
            None,
            "Missing job block",
            "A job block is required",
        )));
    };
    if let Some(dup) = jobs.next() {
        return Err(located(Diag::new(
            dup.ident.span(),
            "Duplicate job block",
            "Only one block of type \"job\" is allowed.",
        )));
    }
    let [label] = job.labels.as_slice() else {
        return Err(located(Diag::new(
            job.ident.span(),
            "Missing name for job",
            "All job blocks must have 1 labels (name).",
        )));
    };

    let ctx = Context::new(src, &resolved.vars, &resolved.locals, base_dir);
    let block = tree::Block {
        ty: "job".into(),
        ty_span: job.ident.span(),
        labels: vec![tree::Label {
            value: label.as_str().to_string(),
            span: label.span(),
        }],
        body: tree::build(&ctx, &job.body, &None).map_err(located)?,
    };
    let mut decoder = decode::Decoder::new(&ctx);
    let mut out = decoder
        .decode_block(&schema::JOB, &block)
        .map_err(located)?;
    normalize::normalize_job(&mut out, label.as_str(), decoder.extras);
    Ok(serde_json::Value::Object(out))
}

/// Parses a JSON job: either `{"Job": {...}}` (what `nomad job run -output`
/// prints) or a bare job object. Returns the job object.
pub fn parse_json(src: &str, filename: &str) -> Result<serde_json::Value, JobspecError> {
    let v: serde_json::Value = serde_json::from_str(src).map_err(|e| JobspecError::Syntax {
        file: filename.to_string(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let invalid = |message: &str| JobspecError::Invalid {
        file: filename.to_string(),
        location: None,
        message: message.to_string(),
    };
    let serde_json::Value::Object(mut obj) = v else {
        return Err(invalid("a JSON job must be an object"));
    };
    let job = match obj.remove("Job") {
        Some(inner) => inner,
        None if obj.contains_key("job") && !obj.contains_key("ID") && !obj.contains_key("Name") => {
            return Err(invalid(
                "HCL's JSON syntax (a lower-case \"job\" key) is not supported; give the API form {\"Job\": {...}}",
            ));
        }
        None => serde_json::Value::Object(obj),
    };
    match &job {
        serde_json::Value::Object(j)
            if j.get("ID")
                .or(j.get("Name"))
                .is_some_and(serde_json::Value::is_string) =>
        {
            Ok(job)
        }
        serde_json::Value::Object(_) => {
            Err(invalid("the job has neither an \"ID\" nor a \"Name\""))
        }
        _ => Err(invalid("\"Job\" must be an object")),
    }
}

/// Reads and parses a job file: JSON when the extension is `.json` or the
/// content starts with `{`, HCL otherwise.
pub fn parse_file(path: &Path, vars: &Variables) -> Result<serde_json::Value, JobspecError> {
    let src = std::fs::read_to_string(path).map_err(|source| JobspecError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path.display().to_string();
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        || src.trim_start().starts_with('{');
    if is_json {
        parse_json(&src, &name)
    } else {
        parse_hcl(&src, &name, vars)
    }
}

#[cfg(test)]
mod tests;
