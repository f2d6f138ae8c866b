//! Web UI render benchmark (a bench binary, not a test): the server-side time of the pages
//! that carry a job's 2,000 allocations (the job page, the client page), the overview and the
//! topology on a dev agent holding them, as the `Server-Timing` header reports it (API reads
//! in process included) and as a client sees the whole answer.
//!
//! Run: `cargo build --release -p drover && DROVER_BIN=target/release/drover cargo bench -p drover-tests --bench ui_render`
//! Figures go in BENCHMARKS.md.

use std::time::{Duration, Instant};

use drover_tests::{Agent, TempDir};
use serde_json::Value;

const ALLOCS: usize = 2000;
const ROUNDS: usize = 30;

/// One page fetch: the server's render time (ms), the whole request's time (ms), the size.
fn fetch(agent: &Agent, path: &str) -> (f64, f64, usize) {
    let url = format!("{}{path}", agent.addr());
    let start = Instant::now();
    let mut r = ureq::get(&url).call().expect("page");
    let render = r
        .headers()
        .get("Server-Timing")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("render;dur="))
        .and_then(|v| v.parse().ok())
        .expect("a Server-Timing header");
    let body = r.body_mut().read_to_string().expect("body");
    (render, start.elapsed().as_secs_f64() * 1000.0, body.len())
}

fn summary(name: &str, agent: &Agent, path: &str) {
    fetch(agent, path); // warm
    let mut render = Vec::new();
    let mut total = Vec::new();
    let mut size = 0;
    for _ in 0..ROUNDS {
        let (r, t, s) = fetch(agent, path);
        render.push(r);
        total.push(t);
        size = s;
    }
    render.sort_by(f64::total_cmp);
    total.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    println!(
        "{name}: render p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms; whole request p50 {:.1} ms; {} KiB ({ROUNDS} rounds)",
        pct(&render, 0.5),
        pct(&render, 0.95),
        render[render.len() - 1],
        pct(&total, 0.5),
        size / 1024
    );
}

fn main() {
    let dir = TempDir::new("bench-ui");
    let agent = Agent::start_dev(dir.path(), &["--log-level", "warn"]);
    let job = serde_json::json!({"Job": {
        "ID": "wide", "Name": "wide", "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": ALLOCS, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10ms"},
            "Resources": {"CPU": 1, "MemoryMB": 10}
        }]}]
    }});
    let (status, text) = agent.send("PUT", "/v1/jobs", &job.to_string());
    assert_eq!(status, 200, "{text}");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let allocs = agent.get("/v1/job/wide/allocations").unwrap_or(Value::Null);
        let done = allocs
            .as_array()
            .map(|a| a.iter().filter(|a| a["ClientStatus"] == "complete").count())
            .unwrap_or(0);
        if done == ALLOCS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {ALLOCS} complete after 300 s:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let node = agent.get("/v1/nodes").expect("nodes")[0]["ID"]
        .as_str()
        .expect("node id")
        .to_string();
    println!("dev agent with one job of {ALLOCS} allocations (mock_driver, complete):");
    summary("job page", &agent, "/ui/jobs/wide@default");
    summary("client page", &agent, &format!("/ui/clients/{node}"));
    summary("overview", &agent, "/ui/overview");
    summary("topology", &agent, "/ui/topology");
}
