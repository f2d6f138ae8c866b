//! The job file a version was registered from (Nomad's job submissions): `job run` sends it,
//! `GET /v1/job/:id/submission?version=N` answers it per version with Nomad's errors, a
//! source over 1 MiB is not kept (the registration warns), and the UI's job page shows it.

use drover_tests::{Agent, TempDir, output_text, write_job};
use serde_json::Value;

fn job_file(count: u32, padding: usize) -> String {
    format!(
        "# {}\nvariable \"image\" {{\n  type = string\n}}\n\njob \"web\" {{\n  datacenters = [\"dc1\"]\n  meta {{\n    image = var.image\n  }}\n  group \"g\" {{\n    count = {count}\n    task \"t\" {{\n      driver = \"mock_driver\"\n      config {{\n        run_for = \"1m\"\n      }}\n      resources {{\n        cpu    = 10\n        memory = 10\n      }}\n    }}\n  }}\n}}\n",
        "x".repeat(padding)
    )
}

fn submission(agent: &Agent, query: &str) -> (u16, String) {
    agent.send("GET", &format!("/v1/job/web/submission{query}"), "")
}

#[test]
fn each_version_keeps_the_file_it_was_registered_from() {
    let dir = TempDir::new("job-submissions");
    let agent = Agent::start_dev(dir.path(), &[]);
    let v0 = job_file(1, 10);
    let file = write_job(&dir, "web.nomad", &v0);
    let out = agent.cli(&["job", "run", "-detach", "-var", "image=redis:7", &file]);
    assert!(out.status.success(), "{}", output_text(&out));

    let (status, body) = submission(&agent, "?version=0");
    assert_eq!(status, 200, "{body}");
    let s: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(s["Source"], v0.as_str());
    assert_eq!(s["Format"], "hcl2");
    assert_eq!(s["VariableFlags"]["image"], "redis:7");
    assert_eq!(
        (s["JobID"].clone(), s["Version"].clone()),
        ("web".into(), 0.into())
    );
    assert_eq!(s["Namespace"], "default");

    // A new version gets its own source; the old one keeps its own.
    let v1 = job_file(2, 10);
    std::fs::write(&file, &v1).expect("rewrite");
    let out = agent.cli(&["job", "run", "-detach", "-var", "image=redis:7", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    let (_, body) = submission(&agent, "?version=1");
    let s: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(s["Source"], v1.as_str());
    let (_, body) = submission(&agent, "?version=0");
    let s: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(s["Source"], v0.as_str());

    // Nomad's answers for a missing version parameter and for a version without a source.
    let (status, body) = submission(&agent, "");
    assert_eq!(
        (status, body.trim()),
        (400, "Unable to parse job submission version parameter")
    );
    let (status, body) = submission(&agent, "?version=9");
    assert_eq!((status, body.trim()), (404, "job source not found"));

    // Over 1 MiB the job still registers, says the source was not kept, and has none.
    let big = job_file(3, 1024 * 1024);
    std::fs::write(&file, &big).expect("rewrite");
    let out = agent.cli(&["job", "run", "-detach", "-var", "image=redis:7", &file]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("was not stored"), "{text}");
    let (status, _) = submission(&agent, "?version=2");
    assert_eq!(status, 404);

    // The job page shows the source of the version it shows (v2 has none, so go back to
    // one that has: v1 again becomes v3 with the same file).
    std::fs::write(&file, &v1).expect("rewrite");
    let out = agent.cli(&["job", "run", "-detach", "-var", "image=redis:7", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    let (status, page) = agent.send("GET", "/ui/jobs/web@default", "");
    assert_eq!(status, 200);
    assert!(page.contains("Definition (HCL)"), "{page}");
    assert!(page.contains("count = 2"), "the page shows the file");
    assert!(
        page.contains("image=redis:7"),
        "the page shows the variables"
    );
}
