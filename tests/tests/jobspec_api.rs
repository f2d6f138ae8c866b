//! Jobs registered from job files read back through `GET /v1/job/:id` exactly as Nomad 1.1.2
//! returns them: the job files below are equivalent to the jobs of the reference samples in
//! `../shared/reference/nomad-api-samples/`, and the responses are compared as JSON values,
//! leaving out only submission times and Raft indexes. Skips when the samples are absent.

use std::path::PathBuf;
use std::time::Duration;

use drover_tests::{Agent, TempDir, output_text, workspace_root};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);

/// Fields that differ between any two registrations: when and at which index.
const VOLATILE: [&str; 4] = ["SubmitTime", "CreateIndex", "ModifyIndex", "JobModifyIndex"];

fn sample(name: &str) -> Option<Value> {
    let path: PathBuf = workspace_root()
        .join("../shared/reference/nomad-api-samples")
        .join(name);
    let text = std::fs::read_to_string(&path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Every difference between two JSON values as `path: got X, expected Y`.
fn differences(path: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let p = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => differences(&p, x, y, out),
                    (Some(x), None) => out.push(format!("{p}: extra {x}")),
                    (None, Some(y)) => out.push(format!("{p}: missing, expected {y}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        _ if ours == theirs => {}
        _ => out.push(format!("{path}: got {ours}, expected {theirs}")),
    }
}

fn without_volatile(mut job: Value) -> Value {
    if let Some(o) = job.as_object_mut() {
        for k in VOLATILE {
            o.remove(k);
        }
    }
    job
}

/// Registers `hcl` through the CLI, waits until the job reaches `status`, and compares
/// `GET /v1/job/:id` with the sample.
fn registered_job_matches_sample(agent: &Agent, dir: &TempDir, hcl: &str, sample: &Value) {
    let id = sample["ID"].as_str().expect("sample has an ID").to_string();
    let file = dir.path().join(format!("{id}.nomad"));
    std::fs::write(&file, hcl).expect("write job file");
    let out = agent.cli(&["job", "run", "-detach", &file.display().to_string()]);
    assert!(
        out.status.success(),
        "job run failed: {}",
        output_text(&out)
    );
    let status = sample["Status"].as_str().unwrap_or("").to_string();
    agent.eventually(&format!("job {id} to be {status}"), WAIT, || {
        agent
            .get(&format!("/v1/job/{id}"))
            .is_ok_and(|j| j["Status"] == status.as_str())
    });
    let ours = agent.get(&format!("/v1/job/{id}")).expect("GET job");
    let mut diffs = Vec::new();
    differences(
        "Job",
        &without_volatile(ours),
        &without_volatile(sample.clone()),
        &mut diffs,
    );
    assert!(
        diffs.is_empty(),
        "job {id} differs from Nomad's:\n{}",
        diffs.join("\n")
    );
}

#[test]
fn registered_jobs_read_back_as_nomad_returns_them() {
    let (Some(sleep50), Some(batch)) = (sample("job_sleep50.json"), sample("job_batch_echo.json"))
    else {
        println!("skipping: ../shared/reference/nomad-api-samples not present");
        return;
    };
    let dir = TempDir::new("jobspec-api");
    let agent = Agent::start_dev(dir.path(), &[]);

    registered_job_matches_sample(
        &agent,
        &dir,
        r#"
job "batch-echo" {
  datacenters = ["dc1"]
  type        = "batch"
  group "g" {
    count = 5
    ephemeral_disk {
      size = 20
    }
    task "echo" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello-from-$NOMAD_ALLOC_INDEX; sleep 1"]
      }
      logs {
        max_files     = 1
        max_file_size = 5
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#,
        &batch,
    );

    registered_job_matches_sample(
        &agent,
        &dir,
        r#"
job "sleep50" {
  datacenters = ["dc1"]
  group "g" {
    count = 50
    restart {
      attempts = 0
    }
    ephemeral_disk {
      size = 20
    }
    task "sleep" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["300"]
      }
      logs {
        max_files     = 1
        max_file_size = 5
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#,
        &sleep50,
    );
    let out = agent.cli(&["job", "stop", "-detach", "sleep50"]);
    assert!(
        out.status.success(),
        "job stop failed: {}",
        output_text(&out)
    );
    // Tasks outlive their agent (as in Nomad): every allocation must be finished before the
    // agent goes, or its sleeps would be left behind.
    agent.eventually("every sleep50 allocation to finish", WAIT, || {
        agent
            .get("/v1/job/sleep50/allocations")
            .ok()
            .and_then(|a| a.as_array().cloned())
            .is_some_and(|a| {
                !a.is_empty()
                    && a.iter().all(|x| {
                        matches!(
                            x["ClientStatus"].as_str(),
                            Some("complete" | "failed" | "lost")
                        )
                    })
            })
    });
}
