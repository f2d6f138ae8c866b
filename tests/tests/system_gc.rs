//! `PUT /v1/system/gc` (and `drover system gc`) on a real dev agent: ended jobs, their
//! evaluations and allocations are purged; a running job and its allocation are untouched.

use std::time::{Duration, Instant};

use drover_tests::{Agent, TempDir, http_call, mock_job, output_text, write_job};

fn status(agent: &Agent, path: &str) -> u16 {
    http_call("GET", &format!("{}{path}", agent.addr()), None)
        .expect("HTTP call")
        .0
}

fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn alloc_ids(agent: &Agent, job: &str) -> Vec<String> {
    let allocs = agent
        .get(&format!("/v1/job/{job}/allocations"))
        .unwrap_or_default();
    allocs
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|a| a["ID"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn forced_gc_purges_ended_jobs_with_their_evaluations_and_allocations_and_keeps_running_ones() {
    let dir = TempDir::new("system-gc");
    let agent = Agent::start_dev(dir.path(), &[]);
    for (name, kind, run_for) in [
        ("finished", "batch", "100ms"),
        ("stopped", "service", "10m"),
        ("serving", "service", "10m"),
    ] {
        let file = write_job(
            &dir,
            &format!("{name}.nomad"),
            &mock_job(name, kind, run_for),
        );
        let out = agent.cli(&["job", "run", &file]);
        assert!(out.status.success(), "{name}: {}", output_text(&out));
    }
    let out = agent.cli(&["job", "stop", "stopped"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let job_status = |id: &str| {
        agent
            .get(&format!("/v1/job/{id}"))
            .map(|j| j["Status"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    wait("both ended jobs to be dead", || {
        job_status("finished") == "dead" && job_status("stopped") == "dead"
    });
    let ended: Vec<String> = ["finished", "stopped"]
        .iter()
        .flat_map(|j| alloc_ids(&agent, j))
        .collect();
    let serving = alloc_ids(&agent, "serving");
    assert_eq!(serving.len(), 1);
    assert_eq!(ended.len(), 2, "{ended:?}");
    // The stopped job's allocation must be reported ended by its client first.
    wait("the stopped allocation to end", || {
        agent
            .get(&format!("/v1/allocation/{}", ended[1]))
            .is_ok_and(|a| a["ClientStatus"] == "complete")
    });

    let out = agent.cli(&["system", "gc"]);
    assert!(out.status.success(), "system gc: {}", output_text(&out));

    for id in ["finished", "stopped"] {
        assert_eq!(status(&agent, &format!("/v1/job/{id}")), 404, "{id} purged");
        let evals = agent.get(&format!("/v1/job/{id}/evaluations")).unwrap();
        assert_eq!(evals.as_array().map(Vec::len), Some(0), "{id}: {evals}");
    }
    for id in &ended {
        assert_eq!(status(&agent, &format!("/v1/allocation/{id}")), 404, "{id}");
    }
    assert_eq!(job_status("serving"), "running");
    let a = agent
        .get(&format!("/v1/allocation/{}", serving[0]))
        .expect("the running allocation stays");
    assert_eq!(a["ClientStatus"], "running");

    // The HTTP endpoint itself answers 200 with nothing left to collect.
    let (code, body) =
        http_call("PUT", &format!("{}/v1/system/gc", agent.addr()), Some("")).expect("HTTP call");
    assert_eq!(code, 200, "{body}");
}
