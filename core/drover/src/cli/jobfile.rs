//! Reading a job file (or stdin) into the API's JSON job, with `-var` / `-var-file` inputs, and
//! Nomad's error wording around parse failures.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use drover_jobspec::{JobspecError, Variables};

/// Flags shared by the commands that read job files.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct JobFileArgs {
    /// Set an HCL2 input variable (repeatable)
    #[arg(long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,
    /// Read HCL2 input variables from a file (repeatable)
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
}

/// Parses `-var` values into the jobspec's variable inputs; `NOMAD_VAR_*` is read too.
fn variables(args: &JobFileArgs) -> Result<Variables, String> {
    let mut values = BTreeMap::new();
    for raw in &args.vars {
        let Some((key, value)) = raw.split_once('=') else {
            return Err(format!(
                "Invalid -var option: The given -var option {raw:?} is not correctly specified. \
                 Must be a variable name and value separated by an equals sign, like -var=\"key=value\"."
            ));
        };
        values.insert(key.trim().to_string(), value.to_string());
    }
    Ok(Variables {
        values,
        files: args.var_files.clone(),
        env: true,
    })
}

/// Reads and parses `path` (`-` for stdin). Errors come back as the full text Nomad prints,
/// e.g. `Error getting job struct: Error parsing job file from job.nomad:\njob.nomad:3:5: ...`.
pub fn load(path: &str, args: &JobFileArgs) -> Result<serde_json::Value, String> {
    load_with_source(path, args).map(|(job, _)| job)
}

/// As [`load`], with Nomad's `Submission` of the file: its source, format (`hcl2` or
/// `json`) and the variables given with it, which registration keeps for the version.
pub fn load_with_source(
    path: &str,
    args: &JobFileArgs,
) -> Result<(serde_json::Value, serde_json::Value), String> {
    let vars = variables(args).map_err(|e| format!("Error getting job struct: {e}"))?;
    let (src, name) = if path == "-" {
        let mut src = String::new();
        std::io::stdin().read_to_string(&mut src).map_err(|e| {
            format!("Error getting job struct: Error reading job file from stdin: {e}")
        })?;
        (src, "stdin".to_string())
    } else {
        let src = std::fs::read_to_string(path).map_err(|source| {
            describe(
                path,
                &JobspecError::Io {
                    path: PathBuf::from(path),
                    source,
                },
            )
        })?;
        (src, path.to_string())
    };
    let is_json = Path::new(path)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        || src.trim_start().starts_with('{');
    let parsed = if is_json {
        drover_jobspec::parse_json(&src, &name)
    } else {
        drover_jobspec::parse_hcl(&src, &name, &vars)
    };
    let job = parsed.map_err(|e| describe(path, &e))?;
    let mut var_files = String::new();
    for file in &args.var_files {
        // Already read by the parser: a file that vanished since only goes unrecorded.
        if let Ok(text) = std::fs::read_to_string(file) {
            var_files.push_str(&text);
            if !text.ends_with('\n') {
                var_files.push('\n');
            }
        }
    }
    let submission = serde_json::json!({
        "Source": src,
        "Format": if is_json { "json" } else { "hcl2" },
        "VariableFlags": vars.values,
        "Variables": var_files,
    });
    Ok((job, submission))
}

/// Nomad's wording: a job file that cannot be read is a "getting" error; anything wrong
/// inside it (or in a var file) a "parsing" error followed by the located message.
fn describe(path: &str, e: &JobspecError) -> String {
    match e {
        JobspecError::Io {
            path: failed,
            source,
        } if failed.as_path() == Path::new(path) => {
            format!("Error getting job struct: Error getting jobfile from {path:?}: {source}")
        }
        other => format!("Error getting job struct: Error parsing job file from {path}:\n{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(vars: &[&str]) -> JobFileArgs {
        JobFileArgs {
            vars: vars.iter().map(|s| s.to_string()).collect(),
            var_files: vec![],
        }
    }

    #[test]
    fn vars_split_on_first_equals() {
        let v = variables(&args(&["a=1", "b=x=y"])).unwrap();
        assert_eq!(v.values.get("a").map(String::as_str), Some("1"));
        assert_eq!(v.values.get("b").map(String::as_str), Some("x=y"));
        assert!(v.env);
    }

    #[test]
    fn var_without_equals_is_rejected() {
        let e = variables(&args(&["oops"])).unwrap_err();
        assert!(e.contains("Invalid -var option"), "{e}");
    }

    #[test]
    fn syntax_errors_are_reported_with_file_and_location() {
        let dir = std::env::temp_dir().join(format!("drover-cli-jobfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bad.nomad");
        std::fs::write(&file, "job \"x\" {\n  group \"g\" {\n").unwrap();
        let path = file.display().to_string();
        let e = load(&path, &JobFileArgs::default()).unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        let expected_head =
            format!("Error getting job struct: Error parsing job file from {path}:\n{path}:");
        assert!(e.starts_with(&expected_head), "{e}");
    }

    #[test]
    fn the_submission_keeps_the_source_its_format_and_the_variables() {
        let dir = std::env::temp_dir().join(format!("drover-cli-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("web.nomad");
        let src = "variable \"n\" {\n  type = number\n}\njob \"web\" {\n  group \"g\" {\n    count = var.n\n    task \"t\" {\n      driver = \"raw_exec\"\n    }\n  }\n}\n";
        std::fs::write(&file, src).unwrap();
        let path = file.display().to_string();
        let (job, submission) = load_with_source(&path, &args(&["n=3"])).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(job["TaskGroups"][0]["Count"], 3);
        assert_eq!(submission["Source"], src);
        assert_eq!(submission["Format"], "hcl2");
        assert_eq!(submission["VariableFlags"]["n"], "3");
    }

    #[test]
    fn missing_file_is_a_getting_error() {
        let e = load("/nonexistent/drover/job.nomad", &JobFileArgs::default()).unwrap_err();
        assert!(
            e.starts_with("Error getting job struct: Error getting jobfile from \"/nonexistent/drover/job.nomad\""),
            "{e}"
        );
    }
}
