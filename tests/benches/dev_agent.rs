//! Dev-agent benchmarks (a bench binary, not a test): submit-to-all-running time for 100 mock
//! allocations and for 50 raw_exec sleeps; the agent's memory idle, with those 50 tasks and
//! after they are stopped and purged, and its threads; then the 1,000-task shape: one agent
//! whose node is given room for them running 1,000 raw_exec sleeps (issue 18's table).
//!
//! Run: `cargo build --release -p drover && DROVER_BIN=target/release/drover cargo bench -p drover-tests --bench dev_agent`
//! Figures go in BENCHMARKS.md.

use std::time::{Duration, Instant};

use drover_tests::{Agent, TempDir};
use serde_json::Value;

/// Running allocations of a job, from its summary, with a blocking query on `index` so the
/// watcher costs the agent nothing between changes. Returns the count and the next index.
fn running(agent: &Agent, job: &str, index: u64) -> (usize, u64) {
    let path = format!("/v1/job/{job}/summary?index={index}&wait=1s");
    let (status, body, next) = agent.get_with_index(&path);
    if status != 200 {
        return (0, index);
    }
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let count = v["Summary"]
        .as_object()
        .map(|groups| {
            groups
                .values()
                .map(|g| g["Running"].as_u64().unwrap_or(0))
                .sum::<u64>()
        })
        .unwrap_or(0);
    (count as usize, next)
}

/// Registers `job_json` through the HTTP API and returns the time until `count` allocations run.
fn submit_to_running(agent: &Agent, job_id: &str, job_json: &Value, count: usize) -> Duration {
    let body = serde_json::json!({ "Job": job_json }).to_string();
    let start = Instant::now();
    let (status, text) = agent.send("PUT", "/v1/jobs", &body);
    assert_eq!(status, 200, "register failed: {text}");
    let deadline = start + Duration::from_secs(60);
    let mut index = 0;
    loop {
        let (n, next) = running(agent, job_id, index);
        if n >= count {
            break;
        }
        index = next;
        assert!(
            Instant::now() < deadline,
            "not all running after 60s:\n{}",
            agent.log()
        );
    }
    start.elapsed()
}

/// Proportional set size of a process in kB (`/proc/<pid>/smaps_rollup`).
fn pss_kb(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// VmRSS of a process in kB, and its thread count.
fn rss_kb_and_threads(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("Threads:") as usize)
}

/// Stops and purges `job`, waits until none of its allocations runs, then a few seconds for
/// the agent to let go of what they held.
fn stop_and_purge(agent: &Agent, job: &str) {
    let (status, text) = agent.send("DELETE", &format!("/v1/job/{job}?purge=true"), "");
    assert_eq!(status, 200, "stop failed: {text}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = agent.send("GET", "/v1/allocations", "");
        let live = status == 200
            && serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .any(|a| a["ClientStatus"] == "running" || a["ClientStatus"] == "pending");
        if !live {
            break;
        }
        assert!(Instant::now() < deadline, "allocations still run after 60s");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(5));
}

fn mock_job(id: &str, count: usize) -> Value {
    serde_json::json!({
        "ID": id, "Name": id, "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "30s"},
            "Resources": {"CPU": 10, "MemoryMB": 10}
        }]}]
    })
}

fn sleep_job(id: &str, count: usize) -> Value {
    serde_json::json!({
        "ID": id, "Name": id, "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
            "Name": "sleep", "Driver": "raw_exec",
            "Config": {"command": "/bin/sleep", "args": ["300"]},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]}]
    })
}

/// The sleeps of the 1,000-task shape, with the small log and disk reservations the issue's
/// comparison used (`logs { max_files = 1 max_file_size = 5 }`, `ephemeral_disk { size = 20 }`):
/// Nomad's defaults (300 MB of disk each) do not fit 1,000 on one node.
fn small_sleep_job(id: &str, count: usize) -> Value {
    let mut job = sleep_job(id, count);
    job["TaskGroups"][0]["EphemeralDisk"] = serde_json::json!({"SizeMB": 20});
    job["TaskGroups"][0]["Tasks"][0]["LogConfig"] =
        serde_json::json!({"MaxFiles": 1, "MaxFileSizeMB": 5});
    job
}

/// The 1,000-task shape: submit-to-running and the agent's PSS 1 s after, `rounds` times.
fn thousand_tasks(rounds: usize, kept: &mut Vec<TempDir>) -> (Vec<Duration>, Vec<u64>) {
    let mut times = Vec::new();
    let mut pss = Vec::new();
    for round in 0..rounds {
        let dir = TempDir::new("bench-1k");
        // Room for 1,000 tasks of 20 MHz and 16 MB whatever the machine.
        let config = dir.path().join("big-node.hcl");
        std::fs::write(
            &config,
            "client {\n  cpu_total_compute = 100000\n  memory_total_mb = 65536\n}\n",
        )
        .expect("write agent config");
        let config = config.to_string_lossy().to_string();
        let agent = Agent::start_dev(dir.path(), &["--log-level", "warn", "--config", &config]);
        let id = format!("thousand{round}");
        times.push(submit_to_running(
            &agent,
            &id,
            &small_sleep_job(&id, 1000),
            1000,
        ));
        std::thread::sleep(Duration::from_secs(1));
        pss.push(pss_kb(agent.child.id()));
        drop(agent);
        keep_until_the_end(dir, kept);
    }
    (times, pss)
}

/// Stops a finished round's tasks but leaves its files until every round is measured. On a
/// file system without a journal (ext4 as this machine mounts it), inodes deleted in the last
/// minutes are skipped one by one when new ones are allocated: removing a round's files right
/// before the next round (14,000 inodes for 1,000 tasks) made that round's 14,000 new ones
/// pay for it, which is the harness measuring itself.
fn keep_until_the_end(dir: TempDir, kept: &mut Vec<TempDir>) {
    drover_tests::kill_processes_working_under(dir.path());
    kept.push(dir);
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let rounds = 5;
    let mut mock_times = Vec::new();
    let mut sleep_times = Vec::new();
    let mut pss = Vec::new();
    let mut idle = Vec::new();
    let mut threads = Vec::new();
    let mut after = Vec::new();
    let mut kept = Vec::new();
    for round in 0..rounds {
        let dir = TempDir::new("bench");
        let agent = Agent::start_dev(dir.path(), &["--log-level", "warn"]);
        mock_times.push(submit_to_running(
            &agent,
            &format!("mock{round}"),
            &mock_job(&format!("mock{round}"), 100),
            100,
        ));
        drop(agent);
        keep_until_the_end(dir, &mut kept);

        let dir = TempDir::new("bench-sleep");
        let agent = Agent::start_dev(dir.path(), &["--log-level", "warn"]);
        // Idle: the agent trims itself once 3 quiet seconds follow its start-up
        // (`resident_set`); measured after that, not during it.
        std::thread::sleep(Duration::from_secs(5));
        let pid = agent.child.id();
        idle.push((rss_kb_and_threads(pid).0, pss_kb(pid)));
        sleep_times.push(submit_to_running(
            &agent,
            &format!("sleep{round}"),
            &sleep_job(&format!("sleep{round}"), 50),
            50,
        ));
        std::thread::sleep(Duration::from_millis(500));
        pss.push(pss_kb(pid));
        threads.push(rss_kb_and_threads(pid).1);
        stop_and_purge(&agent, &format!("sleep{round}"));
        let (rss, left) = rss_kb_and_threads(pid);
        after.push((rss, pss_kb(pid), left));
        drop(agent);
        keep_until_the_end(dir, &mut kept);
    }
    let (thousand_times, thousand_pss) = thousand_tasks(3, &mut kept);
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let summary = |name: &str, v: &[Duration]| {
        let mut s: Vec<f64> = v.iter().map(ms).collect();
        s.sort_by(|a, b| a.total_cmp(b));
        println!(
            "{name}: median {:.0} ms, min {:.0} ms, max {:.0} ms over {} runs",
            s[s.len() / 2],
            s[0],
            s[s.len() - 1],
            s.len()
        );
    };
    summary(
        "100 mock_driver allocations, submit to all running",
        &mock_times,
    );
    summary("50 raw_exec sleeps, submit to all running", &sleep_times);
    let mb = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort();
        format!(
            "median {:.1} MB (min {:.1}, max {:.1})",
            v[v.len() / 2] as f64 / 1024.0,
            v[0] as f64 / 1024.0,
            v[v.len() - 1] as f64 / 1024.0
        )
    };
    println!("agent PSS with 50 raw_exec tasks: {}", mb(&pss));
    let column = |v: &[(u64, u64)], i: usize| {
        v.iter()
            .map(|r| if i == 0 { r.0 } else { r.1 })
            .collect::<Vec<_>>()
    };
    println!(
        "agent RSS idle: {}; PSS idle: {}",
        mb(&column(&idle, 0)),
        mb(&column(&idle, 1))
    );
    let mut t = threads.clone();
    t.sort();
    println!(
        "agent threads with 50 tasks: min {}, max {}",
        t[0],
        t[t.len() - 1]
    );
    let stopped: Vec<(u64, u64)> = after.iter().map(|a| (a.0, a.1)).collect();
    let mut left: Vec<usize> = after.iter().map(|a| a.2).collect();
    left.sort();
    println!(
        "agent after those 50 are stopped and purged (5 s later): RSS {}, PSS {}, threads {}-{}",
        mb(&column(&stopped, 0)),
        mb(&column(&stopped, 1)),
        left[0],
        left[left.len() - 1]
    );
    summary(
        "1,000 raw_exec sleeps on one client, submit to all running",
        &thousand_times,
    );
    println!(
        "agent PSS with those 1,000 tasks (1 s after): {}",
        mb(&thousand_pss)
    );
}
