//! Job versions from the CLI against a dev agent: `job run -check-index` registers only at the
//! index it names (a stale one is refused in Nomad's words and changes nothing), `job revert`
//! registers an older version's spec as the newest version, `job eval` forces an evaluation,
//! `job history -p` shows each version's diff, `job plan` dry-runs a change.

use drover_tests::{Agent, TempDir, output_text, write_job};

fn job_file(dir: &TempDir, tag: &str) -> String {
    write_job(
        dir,
        &format!("web-{tag}.nomad"),
        &format!(
            r#"
job "web" {{
  datacenters = ["dc1"]
  meta {{
    tag = "{tag}"
  }}
  update {{
    max_parallel = 0
  }}
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600.77"]
      }}
      resources {{
        cpu    = 20
        memory = 16
      }}
    }}
  }}
}}
"#
        ),
    )
}

#[test]
fn check_index_revert_and_eval_work_on_job_versions_as_in_nomad() {
    let dir = TempDir::new("job-versions");
    let agent = Agent::start_dev(dir.path(), &[]);
    let out = agent.cli(&["job", "run", "-detach", &job_file(&dir, "a")]);
    assert!(out.status.success(), "{}", output_text(&out));
    let job = agent.get("/v1/job/web").expect("job");
    let modify_index = job["JobModifyIndex"].as_u64().expect("index");

    let stale = (modify_index + 100).to_string();
    let out = agent.cli(&[
        "job",
        "run",
        "-detach",
        "-check-index",
        &stale,
        &job_file(&dir, "b"),
    ]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "Enforcing job modify index {stale}: job exists with conflicting job modify index: {modify_index}"
        )) && text.contains("Job not updated"),
        "{text}"
    );
    assert_eq!(agent.get("/v1/job/web").expect("job")["Version"], 0);

    let current = modify_index.to_string();
    let out = agent.cli(&[
        "job",
        "run",
        "-detach",
        "-check-index",
        &current,
        &job_file(&dir, "b"),
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    let job = agent.get("/v1/job/web").expect("job");
    assert_eq!(
        (job["Version"].as_u64(), job["Meta"]["tag"].as_str()),
        (Some(1), Some("b"))
    );

    let out = agent.cli(&["job", "revert", "-detach", "web", "0"]);
    let text = output_text(&out);
    assert!(
        out.status.success() && text.contains("Evaluation ID: "),
        "{text}"
    );
    let job = agent.get("/v1/job/web").expect("job");
    assert_eq!(
        (job["Version"].as_u64(), job["Meta"]["tag"].as_str()),
        (Some(2), Some("a"))
    );
    let out = agent.cli(&["job", "revert", "web", "2"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(output_text(&out).contains("can't revert to current version"));

    let out = agent.cli(&["job", "history", "web"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let blocks: Vec<&str> = text.trim().split("\n\n").collect();
    assert_eq!(blocks.len(), 3, "{text}");
    assert!(
        blocks[0].starts_with("Version     = 2\nStable      = false\nSubmit Date = "),
        "{text}"
    );
    let out = agent.cli(&["job", "history", "-p", "web"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    // Version 2 (tag a again) against version 1 (tag b), in Nomad's diff format.
    assert!(
        text.contains(
            "Diff        = \n+/- Job: \"web\"\n+/- Meta[tag]: \"b\" => \"a\"\n    Task Group: \"g\""
        ),
        "{text}"
    );

    let out = agent.cli(&["job", "eval", "-detach", "web"]);
    let text = output_text(&out);
    assert!(
        out.status.success() && text.contains("Created eval ID: "),
        "{text}"
    );
    let out = agent.cli(&["job", "eval", "web"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("finished with status \"complete\""), "{text}");
}

#[test]
fn job_scale_stays_within_the_scaling_policy_and_changes_the_count() {
    let dir = TempDir::new("job-scale");
    let agent = Agent::start_dev(dir.path(), &[]);
    let file = write_job(
        &dir,
        "scaled.nomad",
        r#"
job "scaled" {
  datacenters = ["dc1"]
  update {
    max_parallel = 0
  }
  group "g" {
    scaling {
      min = 1
      max = 3
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600.78"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#,
    );
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    let out = agent.cli(&["job", "scale", "scaled", "5"]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("group count was greater than scaling policy maximum: 5 > 3"),
        "{text}"
    );
    let out = agent.cli(&["job", "scale", "scaled", "g", "2"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Monitoring evaluation"), "{text}");
    agent.eventually(
        "two running allocations",
        std::time::Duration::from_secs(60),
        || {
            drover_tests::allocs(&agent, "scaled")
                .iter()
                .filter(|a| a["ClientStatus"] == "running")
                .count()
                == 2
        },
    );
    let status = agent.get("/v1/job/scaled/scale").expect("scale status");
    assert_eq!(
        status["TaskGroups"]["g"]["Events"][0]["Count"], 2,
        "{status}"
    );
    assert_eq!(
        status["TaskGroups"]["g"]["Events"][0]["Message"],
        "submitted using the Nomad CLI"
    );
}

#[test]
fn job_plan_prints_the_annotated_diff_and_the_index_for_check_index_and_changes_nothing() {
    let dir = TempDir::new("job-plan");
    let agent = Agent::start_dev(dir.path(), &[]);
    let count = |n: u32| {
        write_job(
            &dir,
            &format!("plan-{n}.nomad"),
            &format!(
                r#"
job "plan" {{
  datacenters = ["dc1"]
  group "g" {{
    count = {n}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600.79"]
      }}
      resources {{
        cpu    = 20
        memory = 16
      }}
    }}
  }}
}}
"#
            ),
        )
    };
    let out = agent.cli(&["job", "plan", &count(1)]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "a new job creates: {text}");
    assert!(
        text.starts_with(
            "+ Job: \"plan\"\n+ Task Group: \"g\" (1 create)\n  + Task: \"t\" (forces create)"
        ),
        "{text}"
    );
    assert!(
        text.contains("Scheduler dry-run:\n- All tasks successfully allocated."),
        "{text}"
    );
    assert!(text.contains("Job Modify Index: 0\n"), "{text}");
    assert!(
        agent.get("/v1/job/plan").is_err(),
        "planning registers nothing"
    );

    let out = agent.cli(&["job", "run", "-detach", &count(1)]);
    assert!(out.status.success(), "{}", output_text(&out));
    let index = agent.get("/v1/job/plan").expect("job")["JobModifyIndex"]
        .as_u64()
        .expect("index");
    let two = count(2);
    let out = agent.cli(&["job", "plan", &two]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.starts_with(
            "+/- Job: \"plan\"\n+/- Task Group: \"g\" (1 create, 1 in-place update)\n  \
             +/- Count: \"1\" => \"2\" (forces create)\n      Task: \"t\"\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Job Modify Index: {index}\nTo submit the job with version verification run:\n\n\
             drover job run -check-index {index} {two}\n"
        )),
        "{text}"
    );
    assert_eq!(
        agent.get("/v1/job/plan").expect("job")["TaskGroups"][0]["Count"],
        1,
        "the plan changed nothing"
    );
    let out = agent.cli(&["job", "plan", &count(1)]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let out = agent.cli(&[
        "job",
        "run",
        "-detach",
        "-check-index",
        &index.to_string(),
        &two,
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(
        agent.get("/v1/job/plan").expect("job")["TaskGroups"][0]["Count"],
        2
    );

    let huge = write_job(
        &dir,
        "huge.nomad",
        r#"
job "huge" {
  datacenters = ["dc1"]
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      resources {
        cpu    = 20
        memory = 100000000
      }
    }
  }
}
"#,
    );
    let out = agent.cli(&["job", "plan", &huge]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("- WARNING: Failed to place all allocations.\n  Task Group \"g\" (failed to place 1 allocation):"),
        "{text}"
    );
    assert!(
        text.contains("Dimension \"memory\" exhausted on 1 nodes"),
        "{text}"
    );
}
