//! Parse throughput over the shared job corpus: every job file Nomad 1.1.2 accepted (those
//! with a reference output), read into memory once, then parsed over and over for a few
//! seconds. Reports files per second and source megabytes per second.
//!
//! Run with `cargo bench -p drover-jobspec --bench parse`. Skips when `../shared` is absent.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use drover_jobspec::{Variables, parse_hcl, parse_json};

/// How long each measured round runs.
const ROUND: Duration = Duration::from_secs(3);
const ROUNDS: usize = 5;

struct JobFile {
    name: String,
    src: String,
    json: bool,
}

fn corpus() -> Option<Vec<JobFile>> {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/jobspecs");
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).ok()?;
    let mut files = Vec::new();
    for line in manifest.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        let (Some(path), Some(&"valid")) = (cols.first(), cols.get(3)) else {
            continue;
        };
        let reference = dir
            .join("nomad-1.1.2-output")
            .join(format!("{}.json", path.replace('/', "__")));
        if !reference.is_file() {
            continue;
        }
        let file = dir.join(path);
        let Ok(src) = std::fs::read_to_string(&file) else {
            continue;
        };
        files.push(JobFile {
            name: file.display().to_string(),
            json: path.ends_with(".json") || src.trim_start().starts_with('{'),
            src,
        });
    }
    Some(files)
}

/// Parses every file once; returns how many parsed without error.
fn parse_all(files: &[JobFile], vars: &Variables) -> usize {
    files
        .iter()
        .filter(|f| {
            if f.json {
                parse_json(&f.src, &f.name).is_ok()
            } else {
                parse_hcl(&f.src, &f.name, vars).is_ok()
            }
        })
        .count()
}

fn main() {
    let Some(files) = corpus() else {
        println!("skipping: ../shared/jobspecs not present");
        return;
    };
    let vars = Variables::default();
    let bytes: usize = files.iter().map(|f| f.src.len()).sum();
    let ok = parse_all(&files, &vars);
    println!(
        "corpus: {} files ({ok} parse), {:.1} KiB of source",
        files.len(),
        bytes as f64 / 1024.0
    );
    let mut rates = Vec::new();
    for round in 1..=ROUNDS {
        let started = Instant::now();
        let mut parsed = 0usize;
        while started.elapsed() < ROUND {
            parse_all(&files, &vars);
            parsed += files.len();
        }
        let secs = started.elapsed().as_secs_f64();
        let per_sec = parsed as f64 / secs;
        let mb_per_sec = (parsed as f64 / files.len() as f64) * bytes as f64 / secs / 1e6;
        println!("round {round}: {per_sec:.0} files/s ({mb_per_sec:.1} MB/s of source)");
        rates.push(per_sec);
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "parse: median {:.0} files/s (min {:.0}, max {:.0}) over {ROUNDS} rounds of {}s",
        rates[ROUNDS / 2],
        rates[0],
        rates[ROUNDS - 1],
        ROUND.as_secs()
    );
}
