//! CSI volumes and plugins end to end, on the server side: a job serving a CSI plugin makes the
//! plugin known, a volume for it is registered from an HCL spec with the CLI, read back through
//! the CLI and the API (never with its secrets), and deregistered.

use std::time::Duration;

use drover_tests::{Agent, TempDir, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// A node plugin job that never places (no node has this kernel): the plugin exists from the
/// job's expected instances alone, whatever the client does with plugin tasks.
const PLUGIN_JOB: &str = r#"
job "csi-hostpath" {
  datacenters = ["dc1"]
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "no-such-kernel"
  }
  group "nodes" {
    task "plugin" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      csi_plugin {
        id        = "hostpath"
        type      = "node"
        mount_dir = "/csi"
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#;

const VOLUME: &str = r#"
id        = "mysql"
name      = "mysql database"
type      = "csi"
plugin_id = "hostpath"
capacity_min = "1GiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

mount_options {
  fs_type     = "ext4"
  mount_flags = ["password=m0unt-s3cr3t"]
}

secrets {
  token = "v0lume-s3cr3t"
}

parameters {
  tier = "gold"
}
"#;

#[test]
fn volume_registers_reads_back_without_secrets_and_deregisters() {
    let dir = TempDir::new("csi-api");
    let agent = Agent::start_dev(dir.path(), &[]);

    // No plugin yet: registration is refused with Nomad's text.
    let spec = write_job(&dir, "mysql.volume.hcl", VOLUME);
    let out = agent.cli(&["volume", "register", &spec]);
    assert!(!out.status.success(), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("no CSI plugin named: hostpath could be found"),
        "{}",
        output_text(&out)
    );

    let job = write_job(&dir, "plugin.nomad", PLUGIN_JOB);
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    agent.eventually("the plugin to be known", WAIT, || {
        agent
            .get("/v1/plugins?type=csi")
            .ok()
            .and_then(|v| v.as_array().cloned())
            .is_some_and(|p| p.iter().any(|p| p["ID"] == "hostpath"))
    });
    let plugin = agent.get("/v1/plugin/csi/hostpath").unwrap();
    assert_eq!(plugin["NodesExpected"], 1);
    assert_eq!(plugin["NodesHealthy"], 0);
    let out = agent.cli(&["plugin", "status"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Container Storage Interface"), "{text}");
    assert!(text.contains("hostpath"), "{text}");

    // A spec error points at the file and line.
    let bad = write_job(
        &dir,
        "bad.volume.hcl",
        "id = \"x\"\ntype = \"csi\"\ncapacity_min = \"1 parsec\"\n",
    );
    let out = agent.cli(&["volume", "register", &bad]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains(&format!("{bad}:3:1: capacity_min: invalid capacity_min")),
        "{}",
        output_text(&out)
    );

    let out = agent.cli(&["volume", "register", &spec]);
    assert!(out.status.success(), "register: {}", output_text(&out));

    // The API: the volume with its plugin's counts, no secrets, no mount flags.
    let (status, body, index) = agent.get_with_index("/v1/volume/csi/mysql");
    assert_eq!(status, 200, "{body}");
    assert!(index > 0);
    assert!(!body.contains("s3cr3t"), "{body}");
    let vol: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(vol["Name"], "mysql database");
    assert_eq!(vol["PluginID"], "hostpath");
    assert_eq!(vol["RequestedCapacityMin"], 1u64 << 30);
    assert_eq!(
        vol["RequestedCapabilities"][0]["AccessMode"],
        "single-node-writer"
    );
    assert_eq!(vol["Parameters"]["tier"], "gold");
    assert_eq!(vol["NodesExpected"], 1);
    assert_eq!(vol["Schedulable"], false, "no healthy node plugin");
    assert_eq!(vol["Secrets"], Value::Null);
    let list = agent.get("/v1/volumes?type=csi").unwrap();
    assert_eq!(list[0]["ID"], "mysql");
    let (_, list_body, _) = agent.get_with_index("/v1/volumes?type=csi&plugin_id=hostpath");
    assert!(list_body.contains("\"mysql\"") && !list_body.contains("s3cr3t"));

    // The CLI: list and detail.
    let out = agent.cli(&["volume", "status"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Container Storage Interface"), "{text}");
    assert!(text.contains("mysql"), "{text}");
    let out = agent.cli(&["volume", "status", "mys"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("ID                   = mysql\n"), "{text}");
    assert!(text.contains("Plugin ID            = hostpath\n"), "{text}");
    assert!(text.contains("Schedulable          = false\n"), "{text}");
    assert!(text.contains("Mount Options        = <none>\n"), "{text}");
    assert!(
        text.contains("Allocations\nNo allocations placed"),
        "{text}"
    );
    assert!(!text.contains("s3cr3t"), "{text}");
    let out = agent.cli(&["volume", "status", "-json", "mysql"]);
    let json: Value = serde_json::from_slice(&out.stdout).expect("volume status -json");
    assert_eq!(json["ID"], "mysql");
    assert!(!output_text(&out).contains("s3cr3t"));

    // Controller work needs the controller, which a node-only plugin does not have.
    let out = agent.cli(&["volume", "delete", "mysql"]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("Error deleting volume"),
        "{}",
        output_text(&out)
    );

    let out = agent.cli(&["volume", "deregister", "mysql"]);
    assert!(out.status.success(), "deregister: {}", output_text(&out));
    assert!(
        output_text(&out).contains("Successfully deregistered volume \"mysql\"!"),
        "{}",
        output_text(&out)
    );
    let (status, body, _) = agent.get_with_index("/v1/volume/csi/mysql");
    assert_eq!((status, body.as_str()), (404, "volume not found"));
    let out = agent.cli(&["volume", "status", "mysql"]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("No volumes(s) with prefix or ID \"mysql\" found"),
        "{}",
        output_text(&out)
    );

    // Purging the plugin job leaves the plugin with nothing: it goes.
    let out = agent.cli(&["job", "stop", "-purge", "csi-hostpath"]);
    assert!(out.status.success(), "job stop: {}", output_text(&out));
    agent.eventually("the plugin to be gone", WAIT, || {
        agent.get("/v1/plugin/csi/hostpath").is_err()
    });

    // The event stream, replayed from the start, has the volume's life and the plugin.
    let events = replay_events(
        &agent,
        "topic=CSIVolume&topic=CSIPlugin",
        "CSIVolumeDeregistered",
    );
    for (topic, kind, key) in [
        ("CSIVolume", "CSIVolumeRegistered", "mysql"),
        ("CSIVolume", "CSIVolumeDeregistered", "mysql"),
    ] {
        assert!(
            events
                .iter()
                .any(|e| e["Topic"] == topic && e["Type"] == kind && e["Key"] == key),
            "no {kind} of {key}: {events:#?}"
        );
    }
    assert!(
        events
            .iter()
            .any(|e| e["Topic"] == "CSIPlugin" && e["Key"] == "hostpath"),
        "{events:#?}"
    );
    let registered = events
        .iter()
        .find(|e| e["Type"] == "CSIVolumeRegistered")
        .expect("registered");
    assert_eq!(registered["Payload"]["Volume"]["PluginID"], "hostpath");
    assert!(!registered.to_string().contains("s3cr3t"), "{registered}");
}

/// The events of `/v1/event/stream?{topics}&index=1` until one of type `until` (or 30 s).
fn replay_events(agent: &Agent, topics: &str, until: &str) -> Vec<Value> {
    use std::io::BufRead;
    let url = format!("{}/v1/event/stream?{topics}&index=1", agent.addr());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(mut resp) = ureq::get(&url).call() else {
            return;
        };
        let reader = std::io::BufReader::new(resp.body_mut().as_reader());
        for line in reader.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + WAIT;
    let mut events = Vec::new();
    while !events.iter().any(|e: &Value| e["Type"] == until) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        let batch: Value = serde_json::from_str(&line).unwrap_or_default();
        events.extend(batch["Events"].as_array().cloned().unwrap_or_default());
    }
    events
}

/// A plugin task whose plugin never serves its socket is killed, failing, once its
/// `health_timeout` passed (Nomad's plugin supervisor), instead of waiting forever.
#[test]
fn a_plugin_task_not_healthy_within_its_health_timeout_fails() {
    let dir = TempDir::new("csi-health-timeout");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(
        &dir,
        "silent.nomad",
        r#"
job "silent-plugin" {
  datacenters = ["dc1"]
  group "nodes" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "plugin" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      csi_plugin {
        id             = "silent"
        type           = "node"
        mount_dir      = "/csi"
        health_timeout = "2s"
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#,
    );
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    let mut alloc = Value::Null;
    agent.eventually("the plugin task to fail", WAIT, || {
        alloc = agent
            .get("/v1/job/silent-plugin/allocations")
            .ok()
            .and_then(|a| a.as_array().and_then(|l| l.first().cloned()))
            .unwrap_or_default();
        alloc["ClientStatus"] == "failed"
    });
    let id = alloc["ID"].as_str().expect("an allocation id");
    let full = agent
        .get(&format!("/v1/allocation/{id}"))
        .expect("the allocation");
    let events = full["TaskStates"]["plugin"]["Events"].to_string();
    assert!(
        events.contains("CSI plugin did not become healthy before configured 2s health timeout"),
        "{events}"
    );
}
