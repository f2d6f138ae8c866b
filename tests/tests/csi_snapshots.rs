//! CSI snapshots and clones end to end, on a dev agent: a plugin job (our
//! `drover-csi-hostpath`, and the Kubernetes CSI hostpath driver `../shared/bin/hostpathplugin`
//! when it is there) serves a volume; a writer job writes a file into it; `volume snapshot
//! create` snapshots it; `volume create` makes one volume from that snapshot and another cloned
//! from the source volume; reader jobs on each see the writer's file; `volume snapshot list`
//! shows the snapshot and `volume snapshot delete` removes it. Secrets given to the snapshot
//! API never come back in its answers. With the controller on a client-only agent, a server
//! without a client reaches it for every snapshot call.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, workspace_root, write_job};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);
const PLUGIN: &str = "hostpath";

/// `cargo test` builds no binary of another package: build the plugin (a no-op when fresh).
fn build_our_plugin() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "-p", "drover-csi-hostpath"])
        .current_dir(workspace_root())
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build -p drover-csi-hostpath failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("debug")
        .join("drover-csi-hostpath")
}

/// The Kubernetes hostpath driver, or `None` (with a message) when `../shared/bin` lacks it.
fn k8s_hostpathplugin() -> Option<PathBuf> {
    let bin = workspace_root()
        .parent()
        .map(|p| p.join("shared/bin/hostpathplugin"))?;
    if bin.is_file() {
        Some(bin)
    } else {
        eprintln!(
            "skipping the Kubernetes hostpath driver: {} is missing (see ../shared/bin/README.md)",
            bin.display()
        );
        None
    }
}

/// A monolith plugin job: raw_exec running `command args`, the socket from `CSI_ENDPOINT`.
fn plugin_job(command: &Path, args: &[String]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        r#"
job "plugin-hostpath" {{
  datacenters = ["dc1"]
  group "monolith" {{
    task "plugin" {{
      driver = "raw_exec"
      config {{
        command = "{command}"
        args    = [{args}]
      }}
      csi_plugin {{
        id        = "{PLUGIN}"
        type      = "monolith"
        mount_dir = "/csi"
      }}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
  }}
}}
"#,
        command = command.display(),
        args = args.join(", "),
    )
}

/// A volume specification; `source` is an extra line (`snapshot_id = ...`, `clone_id = ...`).
fn volume_spec(id: &str, source: &str) -> String {
    format!(
        r#"
id           = "{id}"
name         = "{id}"
type         = "csi"
plugin_id    = "{PLUGIN}"
capacity_min = "10MiB"
{source}

capability {{
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}}
"#
    )
}

/// A batch job whose exec task runs `script` with volume `volume` at /data.
fn volume_job(name: &str, volume: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "batch"
  group "g" {{
    volume "data" {{
      type            = "csi"
      source          = "{volume}"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "{script}"]
      }}
      volume_mount {{
        volume      = "data"
        destination = "/data"
      }}
      resources {{
        cpu    = 20
        memory = 32
      }}
    }}
  }}
}}
"#
    )
}

struct Scenario {
    agent: Agent,
    dir: TempDir,
}

impl Scenario {
    fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.agent.cli(args);
        let text = output_text(&out);
        assert!(
            out.status.success(),
            "drover {}: {text}\nagent log:\n{}",
            args.join(" "),
            self.agent.log()
        );
        text
    }

    fn run_job(&self, name: &str, text: &str) {
        let file = write_job(&self.dir, &format!("{name}.nomad"), text);
        self.cli_ok(&["job", "run", "-detach", &file]);
    }

    fn create_volume(&self, id: &str, source: &str) -> Value {
        let file = write_job(
            &self.dir,
            &format!("{id}.volume.hcl"),
            &volume_spec(id, source),
        );
        let text = self.cli_ok(&["volume", "create", &file]);
        assert!(text.contains(&format!("with ID {id}")), "{text}");
        self.agent
            .get(&format!("/v1/volume/csi/{id}"))
            .unwrap_or_else(|e| panic!("volume {id}: {e}"))
    }

    fn volume_free(&self, id: &str) -> bool {
        let v = self
            .agent
            .get(&format!("/v1/volume/csi/{id}"))
            .unwrap_or(Value::Null);
        let count = |k: &str| v[k].as_object().map_or(usize::MAX, |m| m.len());
        count("WriteAllocs") == 0 && count("ReadAllocs") == 0 && count("PastClaims") == 0
    }

    /// Runs a batch job on `volume` to its end; answers its task's log. The volume's claim is
    /// released when this returns.
    fn run_to_completion(&self, name: &str, volume: &str, script: &str) -> String {
        self.run_job(name, &volume_job(name, volume, script));
        let agent = &self.agent;
        agent.eventually(&format!("{name} to finish"), WAIT, || {
            allocs(agent, name)
                .iter()
                .any(|a| a["ClientStatus"] == "complete" || a["ClientStatus"] == "failed")
        });
        let done = allocs(agent, name);
        let alloc = done
            .iter()
            .find(|a| a["ClientStatus"] == "complete")
            .unwrap_or_else(|| panic!("{name} failed: {done:?}\nlog:\n{}", agent.log()));
        let id = alloc["ID"].as_str().unwrap_or_default().to_string();
        let log = output_text(&agent.cli(&["alloc", "logs", &id, "t"]));
        agent.eventually(&format!("{name}'s claim on {volume} to go"), WAIT, || {
            self.volume_free(volume)
        });
        log
    }

    /// Snapshot ids `volume snapshot list` shows (the first column after the header).
    fn listed_snapshots(&self) -> Vec<String> {
        let text = self.cli_ok(&["volume", "snapshot", "list", "-plugin", PLUGIN]);
        text.lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }
}

/// The whole snapshot and clone story against the plugin `job` runs; `provider` is what its
/// GetPluginInfo answers.
fn snapshot_restore_and_clone(name: &str, job: impl FnOnce(&Path) -> String, provider: &str) {
    let dir = TempDir::new(name);
    let agent = Agent::start_dev(dir.path(), &[]);
    let s = Scenario { agent, dir };
    s.run_job("plugin-hostpath", &job(s.dir.path()));
    let agent = &s.agent;
    agent.eventually("the plugin to be healthy", WAIT, || {
        agent
            .get(&format!("/v1/plugin/csi/{PLUGIN}"))
            .is_ok_and(|p| p["ControllersHealthy"] == 1 && p["NodesHealthy"] == 1)
    });
    let plugin = agent.get(&format!("/v1/plugin/csi/{PLUGIN}")).unwrap();
    assert_eq!(plugin["Provider"], provider, "{plugin}");
    let controller = plugin["Controllers"]
        .as_object()
        .and_then(|c| c.values().next())
        .cloned()
        .unwrap_or(Value::Null);
    let caps = &controller["ControllerInfo"];
    assert_eq!(caps["SupportsCreateDeleteSnapshot"], true, "{controller}");
    assert_eq!(caps["SupportsListSnapshots"], true, "{controller}");
    assert_eq!(caps["SupportsClone"], true, "{controller}");

    // A volume with a file in it.
    let source = s.create_volume("data", "");
    let source_external = source["ExternalID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!source_external.is_empty(), "{source}");
    let token = format!("snapshot-me-{}", std::process::id());
    let log = s.run_to_completion(
        "writer",
        "data",
        &format!("echo {token} > /data/greeting && echo wrote"),
    );
    assert!(log.contains("wrote"), "writer: {log}");

    // The snapshot, with Nomad's table.
    let text = s.cli_ok(&["volume", "snapshot", "create", "data", "nightly"]);
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "Snapshot", "ID", "Volume", "ID", "Size", "Create", "Time", "Ready?"
        ],
        "{text}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let snapshot_id = row.first().copied().unwrap_or_default().to_string();
    assert!(!snapshot_id.is_empty(), "{text}");
    assert_eq!(row.last(), Some(&"true"), "ready: {text}");
    assert!(
        source_external.starts_with(row.get(1).copied().unwrap_or("?")),
        "the source's external id (cut to 12) in {text}"
    );

    // The API: the same name again is the same snapshot; its secrets are passed, not answered.
    let body = json!({"Snapshots": [{
        "SourceVolumeID": "data", "Name": "nightly",
        "Secrets": {"token": "sn4p-s3cr3t"}
    }]});
    let (status, answer) = agent.send("PUT", "/v1/volumes/snapshot", &body.to_string());
    assert_eq!(status, 200, "{answer}");
    assert!(!answer.contains("sn4p-s3cr3t"), "{answer}");
    let again: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(again["Snapshots"][0]["ID"], snapshot_id.as_str(), "{again}");
    assert_eq!(again["Snapshots"][0]["SourceVolumeID"], "data", "{again}");
    assert_eq!(again["Snapshots"][0]["PluginID"], PLUGIN, "{again}");

    assert!(
        s.listed_snapshots().contains(&snapshot_id),
        "snapshot list: {:?}",
        s.listed_snapshots()
    );
    let (status, listed) = agent.send(
        "GET",
        &format!("/v1/volumes/snapshot?plugin_id={PLUGIN}&per_page=10"),
        "",
    );
    assert_eq!(status, 200, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert!(listed["NextToken"].is_string(), "{listed}");

    // The file changes after the snapshot; a restore has it as it was, a clone as it is now.
    s.run_to_completion("rewriter", "data", "echo changed > /data/after");
    let restored = s.create_volume("restored", &format!("snapshot_id = {snapshot_id:?}"));
    assert_eq!(restored["SnapshotID"], snapshot_id.as_str(), "{restored}");
    assert_ne!(restored["ExternalID"], source["ExternalID"]);
    let log = s.run_to_completion(
        "reader-restored",
        "restored",
        "cat /data/greeting; ls /data",
    );
    assert!(log.contains(&token), "the restored volume has: {log}");
    assert!(
        !log.contains("after"),
        "the restore is as of the snapshot: {log}"
    );

    let cloned = s.create_volume("cloned", &format!("clone_id = {source_external:?}"));
    assert_eq!(cloned["CloneID"], source_external.as_str(), "{cloned}");
    let log = s.run_to_completion("reader-cloned", "cloned", "cat /data/greeting /data/after");
    assert!(log.contains(&token), "the clone has: {log}");
    assert!(log.contains("changed"), "the clone has: {log}");

    // Delete: gone from the list.
    s.cli_ok(&["volume", "snapshot", "delete", PLUGIN, &snapshot_id]);
    assert!(
        !s.listed_snapshots().contains(&snapshot_id),
        "still listed after delete"
    );

    for id in ["restored", "cloned", "data"] {
        s.cli_ok(&["volume", "delete", id]);
    }
    s.cli_ok(&["job", "stop", "-detach", "plugin-hostpath"]);
    agent.eventually("the plugin to be gone", WAIT, || {
        agent.get(&format!("/v1/plugin/csi/{PLUGIN}")).is_err()
    });
}

#[test]
fn our_hostpath_plugin_restores_a_snapshot_and_clones_a_volume_with_the_writers_file() {
    let bin = build_our_plugin();
    snapshot_restore_and_clone(
        "snap",
        |dir| {
            let state = dir.join("hostpath-state").display().to_string();
            plugin_job(
                &bin,
                &[
                    "--node-id".into(),
                    "${node.unique.id}".into(),
                    "--state-dir".into(),
                    state,
                ],
            )
        },
        "hostpath.csi.drover.dev",
    );
}

#[test]
fn kubernetes_hostpath_driver_restores_a_snapshot_and_clones_a_volume_with_the_writers_file() {
    let Some(bin) = k8s_hostpathplugin() else {
        return;
    };
    snapshot_restore_and_clone(
        "snapk8s",
        |dir| {
            let state = dir.join("k8s-state").display().to_string();
            plugin_job(
                &bin,
                &[
                    "--endpoint".into(),
                    "${CSI_ENDPOINT}".into(),
                    "--nodeid".into(),
                    "${node.unique.name}".into(),
                    "--drivername".into(),
                    "hostpath.csi.k8s.io".into(),
                    "--statedir".into(),
                    state,
                ],
            )
        },
        "hostpath.csi.k8s.io",
    );
}

/// The snapshot calls from a server without a client reach the controller on a client-only
/// agent through that node's session (the internal CSI routes over a tunnel).
#[test]
fn a_server_without_a_client_snapshots_through_a_controller_on_a_client_only_agent() {
    use drover_tests::ServerCluster;
    use drover_tests::clients::{ClientProc, RAW_EXEC_ENABLED};

    let bin = build_our_plugin();
    let dir = TempDir::new("snapcl");
    let cluster = ServerCluster::start(dir.path(), 1, "");
    let servers = vec![cluster.servers[0].rpc_addr()];
    let client = ClientProc::start(dir.path(), "storage", &servers, RAW_EXEC_ENABLED);
    let cli_ok = |args: &[&str]| {
        let out = cluster.cli(0, args);
        let text = output_text(&out);
        assert!(
            out.status.success(),
            "drover {}: {text}\nclient log:\n{}",
            args.join(" "),
            client.log()
        );
        text
    };
    let wait = |what: &str, mut cond: Box<dyn FnMut() -> bool + '_>| {
        let deadline = std::time::Instant::now() + WAIT;
        while !cond() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}\nclient log:\n{}",
                client.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };

    let state = dir.path().join("hostpath-state");
    let job = plugin_job(
        &bin,
        &[
            "--node-id".into(),
            "${node.unique.id}".into(),
            "--state-dir".into(),
            state.display().to_string(),
        ],
    );
    cli_ok(&[
        "job",
        "run",
        "-detach",
        &write_job(&dir, "plugin.nomad", &job),
    ]);
    wait(
        "the plugin to be healthy",
        Box::new(|| {
            cluster
                .get(0, &format!("/v1/plugin/csi/{PLUGIN}"))
                .is_ok_and(|p| p["ControllersHealthy"] == 1 && p["NodesHealthy"] == 1)
        }),
    );
    let volume_of = |id: &str| {
        let spec = write_job(&dir, &format!("{id}.hcl"), &volume_spec(id, ""));
        cli_ok(&["volume", "create", &spec]);
        cluster
            .get(0, &format!("/v1/volume/csi/{id}"))
            .map(|v| v["ExternalID"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    let source = volume_of("data");
    std::fs::write(state.join("volumes").join(&source).join("greeting"), "hi").unwrap();

    let text = cli_ok(&["volume", "snapshot", "create", "data", "remote"]);
    let snapshot_id = text
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_default()
        .to_string();
    assert!(!snapshot_id.is_empty(), "{text}");
    let listed = cli_ok(&["volume", "snapshot", "list", "-plugin", PLUGIN]);
    assert!(listed.contains(&snapshot_id), "{listed}");

    let spec = write_job(
        &dir,
        "restored.hcl",
        &volume_spec("restored", &format!("snapshot_id = {snapshot_id:?}")),
    );
    cli_ok(&["volume", "create", &spec]);
    let restored = cluster
        .get(0, "/v1/volume/csi/restored")
        .map(|v| v["ExternalID"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    let copied = std::fs::read_to_string(state.join("volumes").join(&restored).join("greeting"));
    assert_eq!(
        copied.ok().as_deref(),
        Some("hi"),
        "the restore copied the file"
    );

    cli_ok(&["volume", "snapshot", "delete", PLUGIN, &snapshot_id]);
    let listed = cli_ok(&["volume", "snapshot", "list", "-plugin", PLUGIN]);
    assert!(!listed.contains(&snapshot_id), "{listed}");
    for id in ["restored", "data"] {
        cli_ok(&["volume", "delete", id]);
    }
    drop(client);
}
