//! Parses every job file of the shared corpus and compares the result with
//! what Nomad 1.1.2's `nomad job run -output` printed for it.
//!
//! Skips (with a message) when the shared folder is absent. Every remaining difference it
//! prints is listed, with its reason, in `docs/JOBSPEC-DIFFERENCES.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use drover_jobspec::{Variables, parse_file};
use serde_json::Value;

/// Files whose output must match Nomad's exactly; raise as fidelity improves, never lower.
const MATCH_FLOOR: usize = 220;

fn corpus_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/jobspecs");
    dir.join("MANIFEST.tsv").is_file().then_some(dir)
}

/// Collects up to `limit` differences between two JSON values as `path: ours != theirs`.
fn diff(path: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>, limit: usize) {
    if out.len() >= limit {
        return;
    }
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff(&p, x, y, out, limit),
                    (Some(x), None) => out.push(format!("{p}: extra {x}")),
                    (None, Some(y)) => out.push(format!("{p}: missing, expected {y}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out, limit);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        _ if ours == theirs => {}
        _ => {
            let short = |v: &Value| {
                let s = v.to_string();
                if s.len() > 160 {
                    format!(
                        "{}...",
                        &s[..s.char_indices().nth(160).map(|(i, _)| i).unwrap_or(s.len())]
                    )
                } else {
                    s
                }
            };
            out.push(format!(
                "{path}: got {} expected {}",
                short(ours),
                short(theirs)
            ));
        }
    }
}

/// Manifest entries marked `error` that Nomad itself accepts: the manifest
/// derived them from test names, but Nomad's tests assert these inputs parse.
const MISLABELED_ERRORS: &[(&str, &str)] = &[
    (
        "nomad-inline/jobspec2_parse_test/TestParse_InvalidScalingSyntax_1.hcl",
        "the \"valid\" case of TestParse_InvalidScalingSyntax, which requires NoError",
    ),
    (
        "nomad-inline/jobspec2_parse_test/TestParse_UndefinedVariables_2.hcl",
        "the \"unquoted\" case of TestParse_UndefinedVariables, which expects \"${meta.mytest}\"",
    ),
];

/// Variables Nomad's own tests passed when the corpus entry expects an error
/// that only those inputs trigger.
fn inputs_for(path: &str, scratch: &Path) -> Variables {
    let mut vars = Variables::default();
    if path.ends_with("TestParse_InvalidHCL_1.hcl") {
        // Nomad's test feeds this valid job an unparsable --var-file.
        let bad = scratch.join("invalid-var-file.hcl");
        let _ = std::fs::write(&bad, "invalid{hcl");
        vars.files.push(bad);
    }
    vars
}

/// A value for every declared variable, for files whose variables have no defaults.
fn stand_in_vars(file: &Path) -> Variables {
    let mut vars = Variables::default();
    let src = std::fs::read_to_string(file).unwrap_or_default();
    for line in src.lines() {
        let Some(rest) = line.trim_start().strip_prefix("variable \"") else {
            continue;
        };
        let Some(name) = rest.split('"').next() else {
            continue;
        };
        let value = if line.contains("list") || src.contains(&format!("var.{name}[")) {
            "[\"1\"]"
        } else {
            "1"
        };
        vars.values.insert(name.to_string(), value.to_string());
    }
    vars
}

#[test]
fn corpus_matches_nomad_output() {
    let Some(dir) = corpus_dir() else {
        println!("skipping: shared job corpus not found");
        return;
    };
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("manifest readable");
    let scratch =
        std::env::temp_dir().join(format!("drover-jobspec-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch dir");

    let mut matched = 0;
    let mut compared = 0;
    let mut parsed_without_reference = 0;
    let mut without_reference = 0;
    let mut failures: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unexpected_ok = Vec::new();

    for line in manifest.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        let (Some(path), Some(expected)) = (cols.first(), cols.get(3)) else {
            continue;
        };
        let file = dir.join(path);
        let result = parse_file(&file, &inputs_for(path, &scratch));
        match *expected {
            "error" => {
                if let Some((_, why)) = MISLABELED_ERRORS.iter().find(|(p, _)| p == path) {
                    println!(
                        "note: {path} is marked error but Nomad accepts it ({why}); accepted: {}",
                        result.is_ok()
                    );
                } else if result.is_ok() {
                    unexpected_ok.push(path.to_string());
                }
            }
            "valid" => {
                let reference = dir
                    .join("nomad-1.1.2-output")
                    .join(format!("{}.json", path.replace('/', "__")));
                let Ok(text) = std::fs::read_to_string(&reference) else {
                    without_reference += 1;
                    // Nomad's e2e suites pass -var values; stand-ins exercise the rest of the file.
                    let result = match result {
                        Err(e) if e.to_string().contains("Unset variable") => {
                            parse_file(&file, &stand_in_vars(&file))
                        }
                        other => other,
                    };
                    match result {
                        Ok(_) => parsed_without_reference += 1,
                        Err(e) => println!("note: {path} (no 1.1.2 reference) failed: {e}"),
                    }
                    continue;
                };
                compared += 1;
                let theirs: Value = serde_json::from_str(&text).expect("reference is JSON");
                let theirs = &theirs["Job"];
                match result {
                    Ok(ours) => {
                        let mut d = Vec::new();
                        diff("Job", &ours, theirs, &mut d, 8);
                        if d.is_empty() {
                            matched += 1;
                        } else {
                            failures.insert(path.to_string(), d);
                        }
                    }
                    Err(e) => {
                        failures.insert(path.to_string(), vec![format!("error: {e}")]);
                    }
                }
            }
            _ => {}
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);

    for (path, diffs) in failures.iter().take(40) {
        println!("MISMATCH {path}");
        for d in diffs {
            println!("    {d}");
        }
    }
    for path in &unexpected_ok {
        println!("ACCEPTED BUT SHOULD FAIL {path}");
    }
    println!(
        "corpus: {matched}/{compared} match Nomad 1.1.2 output; {parsed_without_reference}/{without_reference} newer-only files parse; {} error files accepted",
        unexpected_ok.len()
    );
    assert!(
        unexpected_ok.is_empty(),
        "files that must fail were accepted: {unexpected_ok:?}"
    );
    assert!(
        matched >= MATCH_FLOOR,
        "only {matched} files match, floor is {MATCH_FLOOR}"
    );
}
