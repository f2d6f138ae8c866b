//! A client cut off for a short while from servers that allow its allocations to disconnect
//! (`max_client_disconnect`, `disconnect { lost_after }`): the node goes `disconnected`, its
//! allocation `unknown`; when the link comes back the node is ready again and the original
//! allocation is kept running (with `reconcile = "keep_original"` the replacement placed
//! meanwhile on another node is stopped).

use std::time::{Duration, Instant};

use drover_tests::clients::{ClientProc, RAW_EXEC_ENABLED};
use drover_tests::netns::NetNs;
use drover_tests::{ServerCluster, TempDir, find_process, is_alive, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);
const SERVER_CONFIG: &str = "server {\n  heartbeat_grace = \"2s\"\n}\n";

fn job(marker: &str, setting: &str) -> String {
    format!(
        r#"
job "flaky" {{
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
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kills the task's process when the test ends: agents leave tasks running by design.
struct KillOnDrop(&'static str);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        while let Some(pid) = find_process(&["/bin/sleep", self.0]) {
            drover_tests::signal(pid, 9);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn alloc(cluster: &ServerCluster, id: &str) -> Value {
    cluster
        .get(0, &format!("/v1/allocation/{id}"))
        .unwrap_or(Value::Null)
}

fn allocs(cluster: &ServerCluster) -> Vec<Value> {
    cluster
        .get(0, "/v1/job/flaky/allocations")
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
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
    let _task = KillOnDrop(marker);
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
    let job_file = write_job(&dir, "flaky.nomad", &job(marker, setting));
    let out = cluster.cli(0, &["job", "run", "-detach", &job_file]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    let pid = wait_for("the task's process", || {
        find_process(&["/bin/sleep", marker])
    });
    let original = wait_for("the allocation", || {
        allocs(&cluster)
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
            allocs(&cluster)
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
