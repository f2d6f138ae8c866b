//! Fault tests of a three-server cluster: real `drover agent --server` processes on loopback,
//! SIGKILLed and restarted, partitioned with the transport's fault filter
//! (`DROVER_TEST_FAULTS`), under a steady load of writes. What must hold: every write that
//! got a success answer is on every server afterwards, the minority side of a partition
//! acknowledges nothing, writes resume within 5 s of a leader's death, and servers that
//! applied the same log have the same state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use drover_tests::{ServerCluster, TempDir, free_port, http_call, output_text};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn job(id: &str, marker: &str) -> Value {
    json!({
        "ID": id,
        "Datacenters": ["dc1"],
        "Meta": {"marker": marker},
        "TaskGroups": [{
            "Name": "g",
            "Count": 1,
            "Tasks": [{
                "Name": "t",
                "Driver": "mock_driver",
                "Config": {"run_for": "600s"},
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]
        }]
    })
}

fn register_body(id: &str) -> String {
    json!({ "Job": job(id, id) }).to_string()
}

/// What `http_call` answers: status and body, or why there was no answer.
type HttpResult = Result<(u16, String), String>;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn eventually(
    what: &str,
    timeout: Duration,
    cluster: &ServerCluster,
    mut cond: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}\n{}", cluster.logs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Job ids a server lists, read from its own state (`?stale`).
fn job_ids(cluster: &ServerCluster, i: usize) -> Option<BTreeSet<String>> {
    let jobs = cluster.get(i, "/v1/jobs?stale").ok()?;
    Some(
        jobs.as_array()?
            .iter()
            .filter_map(|j| j["ID"].as_str().map(str::to_string))
            .collect(),
    )
}

/// Writers registering new jobs round-robin over every server, recording each success.
struct Load {
    stop: Arc<AtomicBool>,
    /// Acknowledged writes: id, when the request was sent, when the answer came.
    acked: Arc<Mutex<Vec<(String, Instant, Instant)>>>,
    failed: Arc<Mutex<usize>>,
    workers: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(urls: Vec<String>, workers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(Mutex::new(0));
        let handles = (0..workers)
            .map(|w| {
                let (stop, acked, failed, urls) =
                    (stop.clone(), acked.clone(), failed.clone(), urls.clone());
                std::thread::spawn(move || {
                    let mut n = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let id = format!("load-{w}-{n}");
                        let url = format!("{}/v1/jobs", urls[(n + w) % urls.len()]);
                        n += 1;
                        let sent = Instant::now();
                        match http_call("PUT", &url, Some(&register_body(&id))) {
                            Ok((200, _)) => acked.lock().unwrap().push((id, sent, Instant::now())),
                            _ => {
                                *failed.lock().unwrap() += 1;
                                std::thread::sleep(Duration::from_millis(20));
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            acked,
            failed,
            workers: handles,
        }
    }

    /// When the first write sent after `t` was acknowledged.
    fn first_ack_after(&self, t: Instant) -> Option<Instant> {
        self.acked
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, sent, _)| *sent > t)
            .map(|(_, _, answered)| *answered)
            .min()
    }

    fn finish(self) -> (Vec<String>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            let _ = w.join();
        }
        let acked = self
            .acked
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _, _)| id.clone())
            .collect();
        let failed = *self.failed.lock().unwrap();
        (acked, failed)
    }
}

#[test]
fn leader_sigkilled_five_times_under_load_loses_no_acknowledged_write() {
    let dir = TempDir::new("cluster-kill");
    let mut cluster = ServerCluster::start(dir.path(), 3, "");
    let urls: Vec<String> = cluster.servers.iter().map(|s| s.http_addr()).collect();
    let load = Load::start(urls, 3);
    let mut elections = Vec::new();
    let mut resumes = Vec::new();
    for round in 0..5 {
        cluster.wait_agreed_leader(WAIT);
        // Some load under this leader first.
        let calm = Instant::now();
        while load.first_ack_after(calm).is_none() && calm.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        // Asked again right before the kill: the one to kill is the leader of this moment.
        let leader = cluster.wait_agreed_leader(WAIT);
        let killed = Instant::now();
        cluster.kill9(leader);
        let mut elected = None;
        let resumed = loop {
            if elected.is_none() && cluster.agreed_leader().is_some() {
                elected = Some(killed.elapsed());
            }
            if let Some(at) = load.first_ack_after(killed) {
                break at - killed;
            }
            if killed.elapsed() > Duration::from_secs(30) {
                panic!(
                    "round {round}: no write succeeded for 30 s\n{}",
                    cluster.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elected = elected.unwrap_or(resumed);
        eprintln!(
            "round {round}: leader elected after {elected:?}, writes resumed after {resumed:?}"
        );
        assert!(
            resumed < Duration::from_secs(5),
            "round {round}: writes resumed only after {resumed:?}\n{}",
            cluster.logs()
        );
        elections.push(elected);
        resumes.push(resumed);
        cluster.restart(leader);
        cluster.wait_agreed_leader(WAIT);
    }
    let (acked, failed) = load.finish();
    eprintln!(
        "{} writes acknowledged, {failed} failed; election median {:?} (max {:?}), write resume median {:?} (max {:?})",
        acked.len(),
        median(elections.clone()),
        elections.iter().max().unwrap(),
        median(resumes.clone()),
        resumes.iter().max().unwrap(),
    );
    assert!(acked.len() > 50, "the load made progress: {}", acked.len());
    for i in 0..3 {
        let mut missing = Vec::new();
        eventually(
            "every acknowledged write on every server",
            WAIT,
            &cluster,
            || {
                let Some(ids) = job_ids(&cluster, i) else {
                    return false;
                };
                missing = acked
                    .iter()
                    .filter(|id| !ids.contains(*id))
                    .cloned()
                    .collect();
                missing.is_empty()
            },
        );
    }
    cluster.wait_equal_digests(WAIT);
    // No client ran: nothing was placed, so no job has more allocations than its count.
    for i in 0..3 {
        let allocs = cluster.get(i, "/v1/allocations?stale").unwrap();
        assert_eq!(allocs.as_array().map(Vec::len), Some(0));
    }
}

#[test]
fn a_partitioned_leader_steps_down_and_acknowledges_nothing_while_the_majority_goes_on() {
    let dir = TempDir::new("cluster-partition");
    let cluster = ServerCluster::start(dir.path(), 3, "");
    let old = cluster.wait_agreed_leader(WAIT);
    let (status, body) = cluster.send(old, "PUT", "/v1/jobs", Some(&register_body("before")));
    assert_eq!(status, 200, "{body}");

    cluster.isolate(old);
    let majority: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    // The cut-off leader notices it lost its quorum and steps down.
    eventually(
        "the isolated leader steps down",
        Duration::from_secs(10),
        &cluster,
        || {
            cluster
                .get(old, "/v1/status/leader")
                .is_ok_and(|l| l.as_str() != Some(&cluster.servers[old].rpc_addr()))
        },
    );
    // Nothing written to the minority side is acknowledged. (Each attempt waits for a leader
    // for 5 s: they run side by side.)
    let minority_ids: Vec<String> = (0..4).map(|n| format!("minority-{n}")).collect();
    let url = cluster.servers[old].http_addr();
    let attempts: Vec<JoinHandle<(String, HttpResult)>> = minority_ids
        .iter()
        .map(|id| {
            let (id, url) = (id.clone(), url.clone());
            std::thread::spawn(move || {
                let r = http_call("PUT", &format!("{url}/v1/jobs"), Some(&register_body(&id)));
                (id, r)
            })
        })
        .collect();
    let read = cluster.get(old, "/v1/jobs");
    assert!(
        read.is_err(),
        "a consistent read without a leader must fail: {read:?}"
    );
    for attempt in attempts {
        let (id, r) = attempt.join().unwrap();
        assert!(
            !matches!(r, Ok((200, _))),
            "the minority acknowledged {id}: {r:?}"
        );
    }
    let (status, _) = cluster.send(old, "GET", "/v1/jobs?stale", None);
    assert_eq!(status, 200, "stale reads are served by any server");

    // The majority elects a leader of its own and keeps accepting writes.
    eventually("a new leader on the majority side", WAIT, &cluster, || {
        majority.iter().any(|i| {
            cluster
                .get(*i, "/v1/status/leader")
                .ok()
                .and_then(|l| l.as_str().and_then(|a| cluster.index_of(a)))
                .is_some_and(|l| majority.contains(&l))
        })
    });
    for (n, i) in majority.iter().cycle().take(6).enumerate() {
        let id = format!("majority-{n}");
        let mut ok = false;
        for _ in 0..20 {
            let (status, _) = cluster.send(*i, "PUT", "/v1/jobs", Some(&register_body(&id)));
            if status == 200 {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(ok, "the majority refused {id}\n{}", cluster.logs());
    }

    cluster.heal();
    cluster.wait_agreed_leader(WAIT);
    cluster.wait_equal_digests(WAIT);
    let ids = job_ids(&cluster, old).unwrap();
    assert!(
        ids.contains("before") && ids.contains("majority-5"),
        "{ids:?}"
    );
    for id in &minority_ids {
        assert!(
            !ids.contains(id),
            "{id} was never acknowledged and must not exist"
        );
    }
}

#[test]
fn all_servers_stopped_and_started_again_have_identical_state() {
    let dir = TempDir::new("cluster-restart");
    // Small snapshots: the follower that falls behind must be brought back by InstallSnapshot.
    let config = "server {\n  raft_snapshot_threshold = 32\n}\n";
    let mut cluster = ServerCluster::start(dir.path(), 3, config);
    let leader = cluster.wait_agreed_leader(WAIT);
    let register = |cluster: &ServerCluster, ids: std::ops::Range<usize>| {
        for n in ids {
            let id = format!("job-{n}");
            let mut ok = false;
            for _ in 0..50 {
                if cluster
                    .send(n % 3, "PUT", "/v1/jobs", Some(&register_body(&id)))
                    .0
                    == 200
                {
                    ok = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(ok, "registering {id}\n{}", cluster.logs());
        }
    };
    register(&cluster, 0..20);
    let lagging = (0..3).find(|i| *i != leader).unwrap();
    cluster.kill9(lagging);
    let up: Vec<usize> = (0..3).filter(|i| *i != lagging).collect();
    for (k, n) in (20..90).enumerate() {
        let i = up[k % 2];
        let id = format!("job-{n}");
        let mut ok = false;
        for _ in 0..50 {
            if cluster
                .send(i, "PUT", "/v1/jobs", Some(&register_body(&id)))
                .0
                == 200
            {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(ok, "registering {id}\n{}", cluster.logs());
    }
    cluster.restart(lagging);
    eventually("the lagging server caught up", WAIT, &cluster, || {
        job_ids(&cluster, lagging).is_some_and(|ids| ids.len() == 90)
    });
    let log = std::fs::read_to_string(cluster.servers[lagging].log_path()).unwrap();
    assert!(
        log.contains("installing snapshot from the leader"),
        "the leader compacted past the lagging server, which needed a snapshot"
    );

    // Quiet: every evaluation processed, so nothing changes while the servers are down.
    eventually("no pending evaluation", WAIT, &cluster, || {
        cluster.get(0, "/v1/evaluations").is_ok_and(|evals| {
            evals
                .as_array()
                .is_some_and(|e| e.iter().all(|e| e["Status"] != "pending"))
        })
    });
    let before = cluster.wait_equal_digests(WAIT);
    for i in 0..3 {
        cluster.stop(i);
    }
    for i in 0..3 {
        cluster.restart(i);
    }
    cluster.wait_agreed_leader(WAIT);
    let after = cluster.wait_equal_digests(WAIT);
    assert_eq!(
        before, after,
        "a full restart restores exactly the committed state"
    );
    for i in 0..3 {
        assert_eq!(job_ids(&cluster, i).unwrap().len(), 90);
    }
    // And the cluster works on.
    register(&cluster, 90..93);
    let out = cluster.cli(0, &["operator", "raft", "list-peers"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("true").count(), 3, "three voters:\n{text}");
    assert_eq!(text.matches("leader").count(), 1, "one leader:\n{text}");
}

/// One check-and-set attempt and what came of it.
#[derive(Debug, Clone)]
struct CasOp {
    token: String,
    expected: u64,
    outcome: CasOutcome,
}

#[derive(Debug, Clone, PartialEq)]
enum CasOutcome {
    /// Acknowledged, with the JobModifyIndex it created.
    Ok(u64),
    /// Refused: the index had moved.
    Conflict,
    /// No answer or an error: it may or may not have applied.
    Unknown,
}

#[test]
fn check_and_set_updates_stay_linearizable_across_leader_kills() {
    let dir = TempDir::new("cluster-cas");
    let mut cluster = ServerCluster::start(dir.path(), 3, "");
    let (status, body) = cluster.send(
        0,
        "PUT",
        "/v1/jobs",
        Some(
            &json!({"Job": job("reg", "init"), "EnforceIndex": true, "JobModifyIndex": 0})
                .to_string(),
        ),
    );
    assert_eq!(status, 200, "{body}");
    let urls: Vec<String> = cluster.servers.iter().map(|s| s.http_addr()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(Mutex::new(Vec::<CasOp>::new()));
    let workers: Vec<JoinHandle<()>> = (0..3)
        .map(|w| {
            let (stop, ops, urls) = (stop.clone(), ops.clone(), urls.clone());
            std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let base = &urls[(n + w) % urls.len()];
                    n += 1;
                    let Ok((200, body)) = http_call("GET", &format!("{base}/v1/job/reg"), None) else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    let Some(expected) = serde_json::from_str::<Value>(&body)
                        .ok()
                        .and_then(|j| j["JobModifyIndex"].as_u64())
                    else {
                        continue;
                    };
                    let token = format!("w{w}-{n}");
                    let body = json!({"Job": job("reg", &token), "EnforceIndex": true, "JobModifyIndex": expected});
                    let outcome = match http_call("PUT", &format!("{base}/v1/job/reg"), Some(&body.to_string())) {
                        Ok((200, answer)) => serde_json::from_str::<Value>(&answer)
                            .ok()
                            .and_then(|a| a["JobModifyIndex"].as_u64())
                            .map(CasOutcome::Ok)
                            .unwrap_or(CasOutcome::Unknown),
                        Ok((409, answer)) if answer.contains("Enforcing job modify index") => CasOutcome::Conflict,
                        _ => CasOutcome::Unknown,
                    };
                    ops.lock().unwrap().push(CasOp { token, expected, outcome });
                }
            })
        })
        .collect();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1500));
        let leader = cluster.wait_agreed_leader(WAIT);
        cluster.kill9(leader);
        std::thread::sleep(Duration::from_millis(1500));
        cluster.restart(leader);
        cluster.wait_agreed_leader(WAIT);
    }
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let ops = ops.lock().unwrap().clone();
    let acked: Vec<&CasOp> = ops
        .iter()
        .filter(|o| matches!(o.outcome, CasOutcome::Ok(_)))
        .collect();
    eprintln!(
        "{} CAS attempts: {} acknowledged, {} conflicts, {} unknown",
        ops.len(),
        acked.len(),
        ops.iter()
            .filter(|o| o.outcome == CasOutcome::Conflict)
            .count(),
        ops.iter()
            .filter(|o| o.outcome == CasOutcome::Unknown)
            .count()
    );
    assert!(acked.len() >= 5, "too little progress to judge: {ops:?}");

    // No two acknowledged updates expected the same index.
    let mut by_expected: BTreeMap<u64, &CasOp> = BTreeMap::new();
    for op in &acked {
        if let Some(other) = by_expected.insert(op.expected, op) {
            panic!(
                "two acknowledged CAS expected index {}: {other:?} and {op:?}",
                op.expected
            );
        }
    }

    // The job's history: every version after the first was written by one of our attempts,
    // expecting exactly the previous version's JobModifyIndex.
    let leader = cluster.wait_agreed_leader(WAIT);
    let versions = cluster.get(leader, "/v1/job/reg/versions").unwrap();
    let mut versions: Vec<Value> = versions["Versions"].as_array().unwrap().clone();
    versions.sort_by_key(|v| v["Version"].as_u64());
    let by_token: BTreeMap<&str, &CasOp> = ops.iter().map(|o| (o.token.as_str(), o)).collect();
    let mut seen = BTreeSet::new();
    for pair in versions.windows(2) {
        let (prev, cur) = (&pair[0], &pair[1]);
        let token = cur["Meta"]["marker"].as_str().unwrap();
        let op = by_token
            .get(token)
            .unwrap_or_else(|| panic!("version by nobody: {token}"));
        assert_ne!(
            op.outcome,
            CasOutcome::Conflict,
            "a refused CAS applied: {op:?}"
        );
        assert_eq!(
            op.expected,
            prev["JobModifyIndex"].as_u64().unwrap(),
            "{op:?} applied over a version it did not expect"
        );
        if let CasOutcome::Ok(index) = op.outcome {
            assert_eq!(Some(index), cur["JobModifyIndex"].as_u64(), "{op:?}");
        }
        seen.insert(token.to_string());
    }
    for op in &acked {
        assert!(seen.contains(&op.token), "acknowledged CAS lost: {op:?}");
    }
    cluster.wait_equal_digests(WAIT);
}

#[test]
fn a_client_only_agent_fails_over_and_its_node_stays_ready_across_a_leader_change() {
    let dir = TempDir::new("cluster-client");
    let config = "server {\n  min_heartbeat_ttl = \"2s\"\n  heartbeat_grace = \"2s\"\n}\n";
    let mut cluster = ServerCluster::start(dir.path(), 3, config);
    let servers: Vec<String> = cluster.servers.iter().map(|s| s.rpc_addr()).collect();
    let client_dir = dir.path().join("client");
    std::fs::create_dir_all(&client_dir).unwrap();
    let http_port = free_port();
    let log = std::fs::File::create(client_dir.join("agent.log")).unwrap();
    let mut client = std::process::Command::new(drover_tests::drover_bin())
        .args(["agent", "--client", "--node", "c1", "--bind", "127.0.0.1"])
        .arg("--data-dir")
        .arg(client_dir.join("data"))
        .args([
            "--http-port",
            &http_port.to_string(),
            "--servers",
            &servers.join(","),
        ])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let node_ready = |cluster: &ServerCluster, i: usize| {
        cluster.get(i, "/v1/nodes?stale").is_ok_and(|nodes| {
            nodes
                .as_array()
                .is_some_and(|n| n.len() == 1 && n[0]["Status"] == "ready")
        })
    };
    eventually("the client's node registered", WAIT, &cluster, || {
        node_ready(&cluster, 0)
    });
    let (status, body) = cluster.send(1, "PUT", "/v1/jobs", Some(&json!({"Job": {
        "ID": "svc", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 3, "Tasks": [{"Name": "t", "Driver": "mock_driver",
            "Config": {"run_for": "600s"}, "Resources": {"CPU": 10, "MemoryMB": 10}}]}]
    }}).to_string()));
    assert_eq!(status, 200, "{body}");
    let running = |cluster: &ServerCluster| {
        let allocs = cluster
            .get(0, "/v1/job/svc/allocations")
            .unwrap_or_default();
        let allocs = allocs.as_array().cloned().unwrap_or_default();
        (
            allocs.len(),
            allocs
                .iter()
                .filter(|a| a["ClientStatus"] == "running")
                .count(),
        )
    };
    eventually("three allocations running", WAIT, &cluster, || {
        running(&cluster) == (3, 3)
    });

    let leader = cluster.wait_agreed_leader(WAIT);
    cluster.kill9(leader);
    let new_leader = cluster.wait_agreed_leader(WAIT);
    // Longer than TTL plus grace: the node is marked down unless its heartbeats reach the new
    // leader (through whichever server answers) and the new leader gave it a fresh TTL.
    let watch_until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < watch_until {
        assert!(
            node_ready(&cluster, new_leader),
            "the node was marked down after a leader change\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    cluster.restart(leader);
    cluster.wait_agreed_leader(WAIT);
    let (total, running_now) = running(&cluster);
    assert_eq!(
        (total, running_now),
        (3, 3),
        "no job has more allocations than its count"
    );
    let _ = client.kill();
    let _ = client.wait();
}

/// A benchmark, not a test: job registrations per second through `PUT /v1/jobs` on one
/// server and on three (writes spread over all three; followers forward to the leader), with
/// durable Raft commits. Run it with
/// `cargo test -p drover-tests --test cluster -- --ignored --nocapture registrations_per_second`.
#[test]
#[ignore]
fn registrations_per_second() {
    const WRITERS: usize = 32;
    const RUN: Duration = Duration::from_secs(10);
    // DROVER_BENCH_SERVERS=3 measures one size only.
    let sizes: Vec<usize> = match std::env::var("DROVER_BENCH_SERVERS") {
        Ok(v) => v.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
        Err(_) => vec![1, 3],
    };
    for n in sizes {
        let dir = TempDir::new("cluster-bench");
        let cluster = ServerCluster::start(dir.path(), n, "");
        let urls: Vec<String> = cluster.servers.iter().map(|s| s.http_addr()).collect();
        let started = Instant::now();
        let writers: Vec<JoinHandle<(usize, usize)>> = (0..WRITERS)
            .map(|w| {
                let urls = urls.clone();
                std::thread::spawn(move || {
                    // One keep-alive connection per writer.
                    let agent: ureq::Agent = ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .build()
                        .into();
                    let (mut ok, mut failed) = (0, 0);
                    let mut k = 0;
                    while started.elapsed() < RUN {
                        let url = format!("{}/v1/jobs", urls[(w + k) % urls.len()]);
                        let body = register_body(&format!("bench-{w}-{k}"));
                        k += 1;
                        match agent.put(&url).send(&body) {
                            Ok(r) if r.status() == 200 => ok += 1,
                            _ => failed += 1,
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        let (ok, failed) = writers
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "{n} server(s): {ok} registrations in {secs:.1} s = {:.0}/s ({failed} failed)",
            ok as f64 / secs
        );
    }
}

#[test]
fn a_cluster_that_lost_its_quorum_comes_back_from_peers_json() {
    let dir = TempDir::new("cluster-recover");
    let mut cluster = ServerCluster::start(dir.path(), 3, "");
    let leader = cluster.wait_agreed_leader(WAIT);
    let (status, body) = cluster.send(leader, "PUT", "/v1/jobs", Some(&register_body("kept")));
    assert_eq!(status, 200, "{body}");
    let config = cluster
        .get(leader, "/v1/operator/raft/configuration")
        .unwrap();
    let survivor_addr = cluster.servers[0].rpc_addr();
    let survivor_id = config["Servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Address"] == survivor_addr.as_str())
        .and_then(|s| s["ID"].as_str())
        .unwrap()
        .to_string();
    eventually("the survivor has the job", WAIT, &cluster, || {
        job_ids(&cluster, 0).is_some_and(|ids| ids.contains("kept"))
    });
    // Two of three servers are gone for good; the third alone has no quorum.
    for i in 0..3 {
        cluster.kill9(i);
    }
    let peers_json = cluster.servers[0]
        .dir
        .join("data")
        .join("server")
        .join("raft")
        .join("peers.json");
    std::fs::write(
        &peers_json,
        json!([{"id": survivor_id, "address": survivor_addr, "non_voter": false}]).to_string(),
    )
    .unwrap();
    cluster.restart(0);
    assert_eq!(cluster.wait_agreed_leader(WAIT), 0);
    assert!(!peers_json.exists(), "peers.json is removed once applied");
    assert!(job_ids(&cluster, 0).unwrap().contains("kept"));
    let (status, body) = cluster.send(0, "PUT", "/v1/jobs", Some(&register_body("after")));
    assert_eq!(status, 200, "{body}");
    let out = cluster.cli(0, &["operator", "raft", "list-peers"]);
    let text = output_text(&out);
    assert_eq!(text.lines().count(), 2, "one server left:\n{text}");
}
