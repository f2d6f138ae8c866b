//! `/v1/event/stream` over real agents: a stream opened before `job run` shows the job
//! registered, its evaluation updated and its allocation running, in that order; a follower
//! server streams the same events at the same indexes as the leader (the FSM feeds the
//! broker from committed entries); bad topics are refused with a 400.

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use drover_tests::{Agent, ServerCluster, TempDir, http_call, output_text, write_job};
use serde_json::Value;

const JOB: &str = r#"
job "events" {
  datacenters = ["dc1"]
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "30s" }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
"#;

/// The lines of one event stream, read on a thread so that a test can wait with a deadline.
struct Stream {
    lines: mpsc::Receiver<Value>,
}

impl Stream {
    fn open(url: &str) -> Stream {
        let response = ureq::get(url).call().expect("open the event stream");
        assert_eq!(response.status().as_u16(), 200);
        let (tx, lines) = mpsc::channel();
        let reader = BufReader::new(response.into_body().into_reader());
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    return;
                };
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Stream { lines }
    }

    /// Every (topic, type, key, client status) until `done` holds for the list or 30 s pass.
    fn collect_until(&self, mut done: impl FnMut(&[EventLine]) -> bool) -> Vec<EventLine> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        while !done(&seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(frame) => seen.extend(EventLine::all_of(&frame)),
                Err(_) => panic!("the stream ended or stalled; seen so far: {seen:#?}"),
            }
        }
        seen
    }
}

#[derive(Debug, Clone, PartialEq)]
struct EventLine {
    index: u64,
    topic: String,
    kind: String,
    key: String,
    client_status: String,
}

impl EventLine {
    fn all_of(frame: &Value) -> Vec<EventLine> {
        let Some(events) = frame["Events"].as_array() else {
            return Vec::new(); // a heartbeat `{}`
        };
        events
            .iter()
            .map(|e| EventLine {
                index: frame["Index"].as_u64().unwrap_or_default(),
                topic: e["Topic"].as_str().unwrap_or_default().into(),
                kind: e["Type"].as_str().unwrap_or_default().into(),
                key: e["Key"].as_str().unwrap_or_default().into(),
                client_status: e["Payload"]["Allocation"]["ClientStatus"]
                    .as_str()
                    .unwrap_or_default()
                    .into(),
            })
            .collect()
    }
}

fn position(seen: &[EventLine], f: impl Fn(&EventLine) -> bool) -> Option<usize> {
    seen.iter().position(f)
}

#[test]
fn a_stream_opened_before_job_run_shows_registration_evaluation_and_the_running_allocation_in_order()
 {
    let dir = TempDir::new("events-dev");
    let agent = Agent::start_dev(dir.path(), &[]);
    let stream = Stream::open(&format!(
        "{}/v1/event/stream?topic=Job:events&topic=Evaluation:events&topic=Allocation:events",
        agent.addr()
    ));
    let job = write_job(&dir, "events.nomad", JOB);
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(out.status.success(), "{}", output_text(&out));

    let running = |e: &EventLine| {
        e.topic == "Allocation" && e.kind == "AllocationUpdated" && e.client_status == "running"
    };
    let seen = stream.collect_until(|seen| seen.iter().any(running));
    let registered = position(&seen, |e| e.topic == "Job" && e.kind == "JobRegistered")
        .unwrap_or_else(|| panic!("no JobRegistered: {seen:#?}"));
    let evaluated = position(&seen, |e| {
        e.topic == "Evaluation" && e.kind == "EvaluationUpdated"
    })
    .unwrap_or_else(|| panic!("no EvaluationUpdated: {seen:#?}"));
    let placed = position(&seen, |e| e.topic == "Allocation" && e.kind == "PlanResult")
        .unwrap_or_else(|| panic!("no PlanResult: {seen:#?}"));
    let run = position(&seen, running).expect("the running allocation");
    assert!(
        registered < placed && placed < run && registered < evaluated,
        "out of order: {seen:#?}"
    );
    assert_eq!(seen[registered].key, "events");
    // Indexes never go backwards.
    assert!(
        seen.windows(2).all(|w| w[0].index <= w[1].index),
        "{seen:#?}"
    );

    // Resuming from an index replays only what came at or after it.
    let from = seen[placed].index;
    let replay = Stream::open(&format!(
        "{}/v1/event/stream?topic=Allocation:events&index={from}",
        agent.addr()
    ));
    let again = replay.collect_until(|s| s.iter().any(running));
    assert!(again.iter().all(|e| e.index >= from), "{again:#?}");
    assert_eq!(again[0].kind, "PlanResult");

    // `drover event stream` prints the same batches, a JSON object per line.
    let mut child = std::process::Command::new(drover_tests::drover_bin())
        .args(["event", "stream", "-topic", "Job:events", "-index", "1"])
        .env("DROVER_ADDR", agent.addr())
        .env_remove("NOMAD_ADDR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn drover event stream");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a line from drover event stream");
    let _ = child.kill();
    let _ = child.wait();
    let batch: Value = serde_json::from_str(&line).expect("a JSON line");
    let first = EventLine::all_of(&batch);
    assert_eq!(
        (
            first[0].topic.as_str(),
            first[0].kind.as_str(),
            first[0].key.as_str()
        ),
        ("Job", "JobRegistered", "events"),
        "{line}"
    );
}

#[test]
fn an_unknown_topic_or_index_is_refused_with_a_400() {
    let dir = TempDir::new("events-bad");
    let agent = Agent::start_dev(dir.path(), &[]);
    for query in ["topic=Jobs", "index=soon"] {
        let (status, body) = http_call(
            "GET",
            &format!("{}/v1/event/stream?{query}", agent.addr()),
            None,
        )
        .expect("HTTP call");
        assert_eq!(status, 400, "{query}: {body}");
    }
}

#[test]
fn a_follower_streams_the_same_events_at_the_same_indexes_as_the_leader() {
    let dir = TempDir::new("events-cluster");
    let cluster = ServerCluster::start(dir.path(), 3, "");
    let leader = cluster.wait_agreed_leader(Duration::from_secs(30));
    let follower = (leader + 1) % 3;
    let url = |i: usize| {
        format!(
            "{}/v1/event/stream?topic=Job:events&topic=Evaluation:events",
            cluster.servers[i].http_addr()
        )
    };
    let on_leader = Stream::open(&url(leader));
    let on_follower = Stream::open(&url(follower));
    let job = write_job(&dir, "events.nomad", JOB);
    let out = cluster.cli(follower, &["job", "run", "-detach", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    // No client: the evaluation ends blocked, after the job's registration.
    let blocked = |seen: &[EventLine]| {
        seen.iter()
            .filter(|e| e.topic == "Evaluation" && e.kind == "EvaluationUpdated")
            .count()
            >= 2
    };
    let a = on_leader.collect_until(blocked);
    let b = on_follower.collect_until(blocked);
    assert_eq!(a, b, "leader and follower streams differ");
    assert!(a.iter().any(|e| e.kind == "JobRegistered"), "{a:#?}");
}
