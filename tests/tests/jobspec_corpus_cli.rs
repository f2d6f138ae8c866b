//! `drover job run --output FILE` over every job file of the shared corpus that Nomad 1.1.2
//! accepted: the CLI prints the same `{"Job": ...}` JSON that `nomad job run -output` printed
//! (compared as JSON values). The library's own corpus test covers the parser; this one covers
//! the command line around it. Skips when `../shared/jobspecs` is absent.

use std::process::Command;

use drover_tests::{drover_bin, workspace_root};
use serde_json::Value;

/// Where the first difference between two JSON values is, if any.
fn first_difference(path: &str, ours: &Value, theirs: &Value) -> Option<String> {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys().chain(b.keys()) {
                let p = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = first_difference(&p, x, y) {
                            return Some(d);
                        }
                    }
                    (Some(x), None) => return Some(format!("{p}: extra {x}")),
                    (None, Some(y)) => return Some(format!("{p}: missing, expected {y}")),
                    (None, None) => {}
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(&format!("{path}[{i}]"), x, y)),
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => None,
        _ if ours == theirs => None,
        _ => Some(format!("{path}: got {ours}, expected {theirs}")),
    }
}

#[test]
fn job_run_output_prints_what_nomad_printed_for_every_corpus_file() {
    let dir = workspace_root().join("../shared/jobspecs");
    let Ok(manifest) = std::fs::read_to_string(dir.join("MANIFEST.tsv")) else {
        println!("skipping: ../shared/jobspecs not present");
        return;
    };
    let mut compared = 0;
    let mut failures = Vec::new();
    for line in manifest.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        let (Some(path), Some(&"valid")) = (cols.first(), cols.get(3)) else {
            continue;
        };
        let reference = dir
            .join("nomad-1.1.2-output")
            .join(format!("{}.json", path.replace('/', "__")));
        let Ok(text) = std::fs::read_to_string(&reference) else {
            continue;
        };
        let theirs: Value = serde_json::from_str(&text).expect("reference is JSON");
        compared += 1;
        let out = Command::new(drover_bin())
            .args(["job", "run", "--output"])
            .arg(dir.join(path))
            // No agent is needed; an unreachable address proves none is contacted.
            .env("DROVER_ADDR", "http://127.0.0.1:1")
            .env_remove("NOMAD_ADDR")
            .output()
            .expect("run drover");
        if !out.status.success() {
            failures.push(format!(
                "{path}: exit {:?}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            continue;
        }
        match serde_json::from_slice::<Value>(&out.stdout) {
            Ok(ours) => {
                if let Some(d) = first_difference("", &ours, &theirs) {
                    failures.push(format!("{path}: {d}"));
                }
            }
            Err(e) => failures.push(format!("{path}: output is not JSON: {e}")),
        }
    }
    println!(
        "job run --output: {} of {compared} corpus files match",
        compared - failures.len()
    );
    assert!(compared > 0, "no corpus file has a reference output");
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
