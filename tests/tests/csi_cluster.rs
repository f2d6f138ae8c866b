//! CSI with the controller on a client-only agent: a server without a client of its own creates,
//! publishes, unpublishes, detaches and deletes a volume through the node that runs the
//! plugin (over that node's session with the server), as Nomad's servers call `ClientCSI`.

use std::path::Path;
use std::time::{Duration, Instant};

use drover_tests::clients::{ClientProc, RAW_EXEC_ENABLED};
use drover_tests::{ServerCluster, TempDir, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(90);

const WRITER: &str = r#"
job "writer" {
  datacenters = ["dc1"]
  type = "batch"
  group "g" {
    volume "data" {
      type            = "csi"
      source          = "data"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello-cluster > $NOMAD_TASK_DIR/../data/greeting && echo wrote"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
"#;

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

/// The text of the first file named `name` under `root`.
fn file_under(root: &Path, name: &str) -> Option<String> {
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(text) = file_under(&path, name) {
                return Some(text);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return std::fs::read_to_string(&path).ok();
        }
    }
    None
}

fn claims(v: &Value, which: &str) -> usize {
    v[which].as_object().map_or(0, |m| m.len())
}

#[test]
fn a_server_without_a_client_drives_a_csi_controller_on_a_client_only_agent() {
    let bin = drover_tests::csi::our_hostpath_plugin();
    let dir = TempDir::new("csi-cluster");
    let cluster = ServerCluster::start(dir.path(), 1, "");
    let servers = vec![cluster.servers[0].rpc_addr()];
    let client = ClientProc::start(dir.path(), "storage", &servers, RAW_EXEC_ENABLED);

    let state = dir.path().join("hostpath-state");
    let plugin = write_job(
        &dir,
        "plugin.nomad",
        &drover_tests::csi::hostpath_plugin_job(&bin, &state),
    );
    let out = cluster.cli(0, &["job", "run", "-detach", &plugin]);
    assert!(out.status.success(), "plugin job: {}", output_text(&out));
    wait_for("the plugin to be healthy", || {
        cluster
            .get(0, "/v1/plugin/csi/hostpath")
            .ok()
            .filter(|p| p["ControllersHealthy"] == 1 && p["NodesHealthy"] == 1)
    });

    // CreateVolume runs on the storage node's controller.
    let spec = write_job(&dir, "data.volume.hcl", drover_tests::csi::HOSTPATH_VOLUME);
    let out = cluster.cli(0, &["volume", "create", &spec]);
    assert!(out.status.success(), "volume create: {}", output_text(&out));
    let vol = cluster.get(0, "/v1/volume/csi/data").expect("the volume");
    let external = vol["ExternalID"].as_str().unwrap_or_default().to_string();
    assert!(!external.is_empty(), "{vol}");
    assert!(
        state.exists(),
        "the plugin made the volume in its state dir on the storage node"
    );

    // A claim: published by the controller there, mounted on the node; released after.
    let writer = write_job(&dir, "writer.nomad", WRITER);
    let out = cluster.cli(0, &["job", "run", "-detach", &writer]);
    assert!(out.status.success(), "writer job: {}", output_text(&out));
    let done = wait_for("the writer to finish", || {
        cluster
            .get(0, "/v1/job/writer/allocations")
            .ok()?
            .as_array()?
            .iter()
            .find(|a| a["ClientStatus"] == "complete" || a["ClientStatus"] == "failed")
            .cloned()
    });
    assert_eq!(done["ClientStatus"], "complete", "{done}\n{}", client.log());
    assert!(
        file_under(&state, "greeting").is_some_and(|t| t.contains("hello-cluster")),
        "the writer's file is in the volume"
    );
    wait_for("the claim released", || {
        let v = cluster.get(0, "/v1/volume/csi/data").ok()?;
        (claims(&v, "WriteAllocs") == 0 && claims(&v, "PastClaims") == 0).then_some(())
    });

    // DeleteVolume runs there too.
    let out = cluster.cli(0, &["volume", "delete", "data"]);
    assert!(out.status.success(), "volume delete: {}", output_text(&out));
    let gone = cluster.get(0, "/v1/volume/csi/data");
    assert!(gone.is_err(), "the volume is gone: {gone:?}");
    drop(client);
}
