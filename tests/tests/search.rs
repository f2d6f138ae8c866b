//! `/v1/search` and `/v1/search/fuzzy` over a real dev agent, and `drover status PREFIX`
//! resolving a prefix through them as Nomad's CLI does.

use drover_tests::{Agent, TempDir, http_call, output_text, write_job};
use serde_json::{Value, json};

const JOB: &str = r#"
job "search-web" {
  datacenters = ["dc1"]
  group "frontend" {
    task "nginx-task" {
      driver = "mock_driver"
      config {
        run_for = "30s"
        command = "/usr/sbin/nginx"
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
"#;

fn search(agent: &Agent, path: &str, body: Value) -> (u16, Value) {
    let (status, text) = http_call(
        "POST",
        &format!("{}{path}", agent.addr()),
        Some(&body.to_string()),
    )
    .expect("HTTP call");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[test]
fn prefix_and_fuzzy_search_find_jobs_groups_tasks_and_allocations_and_status_resolves_a_prefix() {
    let dir = TempDir::new("search");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(&dir, "web.nomad", JOB);
    // Detached: the task ends at once, so its deployment fails (and `job run` would say so).
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually(
        "the allocation to be placed",
        std::time::Duration::from_secs(60),
        || drover_tests::allocs(&agent, "search-web").len() == 1,
    );

    let (status, all) = search(
        &agent,
        "/v1/search",
        json!({"Prefix": "sea", "Context": "all"}),
    );
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["Matches"]["jobs"], json!(["search-web"]));
    assert!(all["Matches"]["evals"].is_null(), "{all}");
    assert_eq!(all["Truncations"]["jobs"], false);
    for ctx in [
        "allocs",
        "deployment",
        "evals",
        "jobs",
        "nodes",
        "plugins",
        "volumes",
    ] {
        assert!(all["Matches"].get(ctx).is_some(), "{ctx} missing: {all}");
    }

    // An allocation's id prefix, in its own context.
    let allocs: Value = agent.get("/v1/job/search-web/allocations").unwrap();
    let alloc_id = allocs[0]["ID"].as_str().expect("an allocation").to_string();
    let (_, found) = search(
        &agent,
        "/v1/search",
        json!({"Prefix": &alloc_id[..4], "Context": "allocs"}),
    );
    assert!(
        found["Matches"]["allocs"]
            .as_array()
            .is_some_and(|ids| ids.iter().any(|i| i == alloc_id.as_str())),
        "{found}"
    );
    assert!(found["Matches"].get("jobs").is_none(), "{found}");

    let (status, fuzzy) = search(
        &agent,
        "/v1/search/fuzzy",
        json!({"Text": "FRONT", "Context": "jobs"}),
    );
    assert_eq!(status, 200, "{fuzzy}");
    assert_eq!(
        fuzzy["Matches"]["groups"],
        json!([{"ID": "frontend", "Scope": ["default", "search-web"]}])
    );
    let (_, fuzzy) = search(
        &agent,
        "/v1/search/fuzzy",
        json!({"Text": "nginx", "Context": "all"}),
    );
    assert_eq!(
        fuzzy["Matches"]["tasks"],
        json!([{"ID": "nginx-task", "Scope": ["default", "search-web", "frontend"]}]),
        "{fuzzy}"
    );
    assert_eq!(
        fuzzy["Matches"]["commands"][0]["Scope"],
        json!(["default", "search-web", "frontend", "nginx-task"]),
        "{fuzzy}"
    );

    let (status, e) = search(
        &agent,
        "/v1/search",
        json!({"Prefix": "s", "Context": "job"}),
    );
    assert_eq!(status, 400, "{e}");
    let (status, e) = search(
        &agent,
        "/v1/search/fuzzy",
        json!({"Text": "s", "Context": "jobs"}),
    );
    assert_eq!(status, 400, "{e}");
    assert!(e.to_string().contains("at least 2 characters"), "{e}");

    let out = agent.cli(&["status", "search"]);
    assert!(
        out.status.success() && output_text(&out).contains("search-web"),
        "{}",
        output_text(&out)
    );
    let out = agent.cli(&["status", "nothing-like-this"]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("No matches returned for query"),
        "{}",
        output_text(&out)
    );
}
