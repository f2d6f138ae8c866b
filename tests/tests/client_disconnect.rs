//! A client cut off from its servers, in a network namespace whose link the test takes down:
//! allocations whose group sets `stop_after_client_disconnect` are stopped by the client once
//! that long has passed since its last heartbeat (also when the client restarts during the
//! partition), and the servers mark them lost and place the replacement no earlier than the
//! same delay after the loss. Cut off for a short while from servers that let its allocations
//! disconnect (`max_client_disconnect`, `disconnect { lost_after }`), the node goes
//! `disconnected` and its allocation `unknown`; when the link comes back the original is kept
//! (with `reconcile = "keep_original"`, the replacement placed meanwhile is stopped).

use std::time::{Duration, Instant, SystemTime};

use drover_tests::clients::{ClientProc, RAW_EXEC_ENABLED};
use drover_tests::netns::NetNs;
use drover_tests::{ServerCluster, TempDir, find_process, is_alive, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);
const GRACE: Duration = Duration::from_secs(10);
/// Servers notice a silent node within its TTL (10 s, the minimum) plus this grace.
const SERVER_CONFIG: &str = "server {\n  heartbeat_grace = \"2s\"\n}\n";

/// The group's setting in its older form.
const STOP_AFTER: &str = "stop_after_client_disconnect = \"10s\"";
/// The same in Nomad's newer `disconnect` block.
const STOP_ON_CLIENT_AFTER: &str = "disconnect {\n      stop_on_client_after = \"10s\"\n    }";

fn job(name: &str, marker: &str, setting: &str) -> String {
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  type        = "service"

  group "g" {{
    {setting}

    task "t" {{
      driver = "raw_exec"

      config {{
        command = "/bin/sleep"
        args    = ["{marker}"]
      }}

      resources {{
        cpu    = 20
        memory = 16
      }}
    }}
  }}
}}
"#
    )
}

fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// When the client's last heartbeat reached a server, from its self report.
fn last_heartbeat(client: &ClientProc) -> SystemTime {
    let report = client.get("/v1/agent/self").expect("client self report");
    let ago = report["stats"]["client"]["last_heartbeat"]
        .as_str()
        .and_then(drover_tests::clients::parse_go_duration)
        .unwrap_or_else(|| panic!("no last_heartbeat in {report}"));
    SystemTime::now() - ago
}

fn allocs_of(cluster: &ServerCluster, job: &str) -> Vec<Value> {
    cluster
        .get(0, &format!("/v1/job/{job}/allocations"))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// Kills the task's process, if it still runs, when the test ends (pass or fail): agents leave
/// their tasks running by design, and a leftover would be found by the next run.
struct KillOnDrop(&'static str);

impl KillOnDrop {
    fn new(marker: &'static str) -> KillOnDrop {
        // A leftover of an earlier run that was killed: not this run's task.
        while let Some(pid) = find_process(&["/bin/sleep", marker]) {
            drover_tests::signal(pid, 9);
            std::thread::sleep(Duration::from_millis(50));
        }
        KillOnDrop(marker)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        while let Some(pid) = find_process(&["/bin/sleep", self.0]) {
            drover_tests::signal(pid, 9);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Runs the scenario; `restart_during_partition` kills the client with SIGKILL once it is cut
/// off and starts it again, still cut off.
fn partitioned_client_stops_its_allocation(
    marker: &'static str,
    setting: &str,
    restart_during_partition: bool,
) {
    let ns = match NetNs::create() {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("skipping: no network namespace for the client ({e})");
            return;
        }
    };
    let _task = KillOnDrop::new(marker);
    let dir = TempDir::new("client-disconnect");
    let cluster = ServerCluster::start_on(dir.path(), 1, SERVER_CONFIG, &ns.host_ip);
    let servers = vec![cluster.servers[0].rpc_addr()];
    let mut cut_off = ClientProc::start_in_netns(
        dir.path(),
        "cut-off",
        &servers,
        RAW_EXEC_ENABLED,
        &ns.name,
        &ns.ns_ip,
    );
    let job_file = write_job(
        &dir,
        "partitioned.nomad",
        &job("partitioned", marker, setting),
    );
    let out = cluster.cli(0, &["job", "run", "-detach", &job_file]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    let pid = wait_for("the task's process", || {
        find_process(&["/bin/sleep", marker])
    });
    let original = allocs_of(&cluster, "partitioned")
        .into_iter()
        .next()
        .expect("the allocation")["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    // The replacement's node, on this host's side of the cut.
    let spare = ClientProc::start(dir.path(), "spare", &servers, RAW_EXEC_ENABLED);

    let last_ok = last_heartbeat(&cut_off);
    ns.link_down();
    if restart_during_partition {
        cut_off.kill9();
        assert!(is_alive(pid), "a killed agent leaves its task running");
        cut_off.restart();
    }
    let deadline = Instant::now() + WAIT;
    while is_alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the task was not stopped; client log:\n{}",
            cut_off.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped_after = SystemTime::now()
        .duration_since(last_ok)
        .unwrap_or_default();
    assert!(
        stopped_after >= GRACE && stopped_after <= GRACE + Duration::from_secs(2),
        "stopped {stopped_after:?} after the last heartbeat (want {GRACE:?} to {GRACE:?} + 2s)"
    );

    // The servers: lost after the TTL, its replacement delayed by the same grace.
    let lost = wait_for("the allocation marked lost", || {
        let a = cluster.get(0, &format!("/v1/allocation/{original}")).ok()?;
        (a["ClientStatus"] == "lost").then_some(a)
    });
    let lost_at = SystemTime::now();
    let followup = lost["FollowupEvalID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !followup.is_empty(),
        "a lost allocation links its delayed evaluation: {lost}"
    );
    let evals = cluster
        .get(0, "/v1/job/partitioned/evaluations")
        .expect("evaluations");
    assert!(
        evals
            .as_array()
            .expect("a list")
            .iter()
            .all(|e| e["Status"] != "blocked"),
        "no blocked evaluation for a delayed placement: {evals}"
    );
    let replacement = wait_for("the replacement running", || {
        allocs_of(&cluster, "partitioned")
            .into_iter()
            .find(|a| a["ID"] != original.as_str() && a["ClientStatus"] == "running")
    });
    let placed_after = SystemTime::now()
        .duration_since(lost_at)
        .unwrap_or_default();
    assert!(
        placed_after + Duration::from_secs(2) >= GRACE,
        "replacement placed {placed_after:?} after the loss, before the {GRACE:?} delay"
    );
    assert_eq!(
        replacement["NodeID"].as_str(),
        Some(spare.node_id().as_str())
    );
    eprintln!(
        "task stopped {stopped_after:?} after the last heartbeat; replacement running {placed_after:?} after the loss was seen"
    );
    drop((spare, cut_off, cluster, ns));
}

#[test]
fn a_partitioned_client_stops_the_task_when_stop_after_client_disconnect_runs_out() {
    partitioned_client_stops_its_allocation("3600.101", STOP_AFTER, false);
}

#[test]
fn a_client_restarted_while_partitioned_still_stops_the_task_on_time() {
    partitioned_client_stops_its_allocation("3600.102", STOP_AFTER, true);
}

#[test]
fn a_partitioned_client_stops_the_task_when_disconnect_stop_on_client_after_runs_out() {
    partitioned_client_stops_its_allocation("3600.103", STOP_ON_CLIENT_AFTER, false);
}

fn alloc(cluster: &ServerCluster, id: &str) -> Value {
    cluster
        .get(0, &format!("/v1/allocation/{id}"))
        .unwrap_or(Value::Null)
}

/// Runs the scenario; with `spare`, another client can take a replacement meanwhile.
fn short_partition_keeps_the_original(marker: &'static str, setting: &str, spare: bool) {
    let ns = match NetNs::create() {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("skipping: no network namespace for the client ({e})");
            return;
        }
    };
    let _task = KillOnDrop::new(marker);
    let dir = TempDir::new("client-reconnect");
    let cluster = ServerCluster::start_on(dir.path(), 1, SERVER_CONFIG, &ns.host_ip);
    let servers = vec![cluster.servers[0].rpc_addr()];
    let flaky = ClientProc::start_in_netns(
        dir.path(),
        "flaky",
        &servers,
        RAW_EXEC_ENABLED,
        &ns.name,
        &ns.ns_ip,
    );
    let job_file = write_job(&dir, "flaky.nomad", &job("flaky", marker, setting));
    let out = cluster.cli(0, &["job", "run", "-detach", &job_file]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    let pid = wait_for("the task's process", || {
        find_process(&["/bin/sleep", marker])
    });
    let original = wait_for("the allocation", || {
        allocs_of(&cluster, "flaky")
            .into_iter()
            .find(|a| a["ClientStatus"] == "running")
            .and_then(|a| a["ID"].as_str().map(str::to_string))
    });
    let node_id = flaky.node_id();
    let spare = spare.then(|| ClientProc::start(dir.path(), "spare", &servers, RAW_EXEC_ENABLED));

    ns.link_down();
    wait_for("the node disconnected", || {
        let node = cluster.get(0, &format!("/v1/node/{node_id}")).ok()?;
        (node["Status"] == "disconnected").then_some(())
    });
    wait_for("the allocation unknown", || {
        (alloc(&cluster, &original)["ClientStatus"] == "unknown").then_some(())
    });
    let replacement = spare.as_ref().map(|spare| {
        wait_for("a replacement running on the spare node", || {
            allocs_of(&cluster, "flaky")
                .into_iter()
                .find(|a| {
                    a["ID"] != original.as_str()
                        && a["ClientStatus"] == "running"
                        && a["NodeID"].as_str() == Some(spare.node_id().as_str())
                })
                .and_then(|a| a["ID"].as_str().map(str::to_string))
        })
    });
    assert!(
        is_alive(pid),
        "a disconnected client keeps its task running"
    );

    ns.link_up();
    wait_for("the node ready again", || {
        let node = cluster.get(0, &format!("/v1/node/{node_id}")).ok()?;
        (node["Status"] == "ready").then_some(())
    });
    wait_for("the original running again in the servers' view", || {
        let a = alloc(&cluster, &original);
        (a["ClientStatus"] == "running" && a["DesiredStatus"] == "run").then_some(())
    });
    if let Some(replacement) = &replacement {
        wait_for("the replacement stopped", || {
            (alloc(&cluster, replacement)["DesiredStatus"] == "stop").then_some(())
        });
    }
    // Settled: the original still runs, with the same process.
    std::thread::sleep(Duration::from_secs(3));
    let a = alloc(&cluster, &original);
    assert_eq!(
        (a["ClientStatus"].as_str(), a["DesiredStatus"].as_str()),
        (Some("running"), Some("run")),
        "{a}"
    );
    assert!(
        is_alive(pid),
        "the original's process survived the partition"
    );
    drop((spare, flaky, cluster, ns));
}

#[test]
fn a_short_partition_shows_unknown_and_max_client_disconnect_keeps_the_original() {
    short_partition_keeps_the_original("3600.501", "max_client_disconnect = \"1m\"", false);
}

#[test]
fn reconcile_keep_original_stops_the_replacement_on_reconnect() {
    short_partition_keeps_the_original(
        "3600.502",
        "disconnect {\n      lost_after = \"1m\"\n      reconcile  = \"keep_original\"\n    }",
        true,
    );
}
