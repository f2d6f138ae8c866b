//! CSI end to end with a real plugin: the hostpath plugin runs as a raw_exec job with a
//! `csi_plugin` block, the client fingerprints it (plugin status healthy, with its provider), a
//! volume is created through its controller, exec tasks write and read it through a
//! `volume_mount` (and a docker task reads it too, when a Docker daemon answers), a single-writer volume keeps a second writer out until the first stops, and
//! an agent killed while a volume is published comes back without a duplicate claim or a stray
//! mount; stopping releases the claim and unmounts everything; the plugin goes with its job.
//! The same plugin also serves volumes from under exec (root, `cap_add = ["sys_admin"]`).

use std::path::Path;
use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

// Builds the docker test image; plain std and the docker CLI, shared with the driver's tests.
#[path = "../../drivers/docker/src/testing.rs"]
#[allow(dead_code)]
mod docker_image;

const WAIT: Duration = Duration::from_secs(90);

/// A job whose exec task runs `script` with the volume at /data.
fn volume_job(name: &str, kind: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "{kind}"
  group "g" {{
    volume "data" {{
      type            = "csi"
      source          = "data"
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

/// A batch job whose docker task runs `script` with the volume at /data, read-only.
fn docker_volume_job(name: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "batch"
  group "g" {{
    volume "data" {{
      type            = "csi"
      source          = "data"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "docker"
      config {{
        image   = "{image}"
        command = "/bin/sh"
        args    = ["-c", "{script}"]
      }}
      volume_mount {{
        volume      = "data"
        destination = "/data"
        read_only   = true
      }}
      resources {{
        cpu    = 20
        memory = 32
      }}
    }}
  }}
}}
"#,
        image = docker_image::TEST_IMAGE
    )
}

fn run_job(agent: &Agent, dir: &TempDir, name: &str, text: &str) {
    let file = write_job(dir, &format!("{name}.nomad"), text);
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(
        out.status.success(),
        "job run {name}: {}",
        output_text(&out)
    );
}

fn stop_job(agent: &Agent, name: &str) {
    let out = agent.cli(&["job", "stop", "-detach", name]);
    assert!(
        out.status.success(),
        "job stop {name}: {}",
        output_text(&out)
    );
}

fn alloc_with_status(agent: &Agent, job: &str, status: &str) -> Option<Value> {
    allocs(agent, job)
        .into_iter()
        .find(|a| a["ClientStatus"] == status)
}

fn volume(agent: &Agent) -> Value {
    agent.get("/v1/volume/csi/data").unwrap_or(Value::Null)
}

fn claim_count(v: &Value, which: &str) -> usize {
    v[which].as_object().map_or(0, |m| m.len())
}

/// Mount points under `root` in this (the host's) mount table.
fn mounts_under(root: &Path) -> Vec<String> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|p| p.starts_with(&*root.to_string_lossy()))
        .collect()
}

fn task_log(agent: &Agent, alloc_id: &str) -> String {
    output_text(&agent.cli(&["alloc", "logs", alloc_id, "t"]))
}

#[test]
fn hostpath_plugin_serves_volumes_to_exec_tasks_across_restarts() {
    let bin = drover_tests::csi::our_hostpath_plugin();
    let dir = TempDir::new("csi-hostpath");
    let data_dir = dir.path().join("data");
    let mut agent = Agent::start_dev(dir.path(), &[]);

    // The plugin task: fingerprinted healthy, with its vendor as provider.
    let state = dir.path().join("hostpath-state");
    run_job(
        &agent,
        &dir,
        "plugin",
        &drover_tests::csi::hostpath_plugin_job(&bin, &state),
    );
    agent.eventually("the plugin to be healthy", WAIT, || {
        agent
            .get("/v1/plugin/csi/hostpath")
            .is_ok_and(|p| p["ControllersHealthy"] == 1 && p["NodesHealthy"] == 1)
    });
    let node = agent.get("/v1/nodes").unwrap()[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let node_detail = agent.get(&format!("/v1/node/{node}")).unwrap();
    let info = &node_detail["CSINodePlugins"]["hostpath"];
    assert_eq!(info["Healthy"], true, "{node_detail}");
    assert_eq!(info["NodeInfo"]["ID"], node.as_str());
    assert_eq!(info["NodeInfo"]["RequiresNodeStageVolume"], true);
    let controller = &node_detail["CSIControllerPlugins"]["hostpath"];
    assert_eq!(controller["ControllerInfo"]["SupportsCreateDelete"], true);
    let out = agent.cli(&["plugin", "status", "hostpath"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("hostpath.csi.drover.dev"), "{text}");
    assert!(text.contains("Controllers Healthy  = 1"), "{text}");
    assert!(text.contains("Nodes Healthy        = 1"), "{text}");

    // Created through the controller.
    let spec = write_job(&dir, "data.volume.hcl", drover_tests::csi::HOSTPATH_VOLUME);
    let out = agent.cli(&["volume", "create", &spec]);
    assert!(out.status.success(), "volume create: {}", output_text(&out));
    let vol = volume(&agent);
    assert_eq!(vol["Schedulable"], true, "{vol}");
    assert!(
        vol["ExternalID"].as_str().is_some_and(|s| !s.is_empty()),
        "{vol}"
    );

    // A writer, then a reader of what it wrote.
    run_job(
        &agent,
        &dir,
        "writer",
        &volume_job(
            "writer",
            "batch",
            "echo hello-csi > /data/greeting && echo wrote",
        ),
    );
    agent.eventually("the writer to complete", WAIT, || {
        alloc_with_status(&agent, "writer", "complete").is_some()
            || alloc_with_status(&agent, "writer", "failed").is_some()
    });
    let writer = alloc_with_status(&agent, "writer", "complete").unwrap_or_else(|| {
        panic!(
            "writer failed: {:?}\nlog:\n{}",
            allocs(&agent, "writer"),
            agent.log()
        )
    });
    assert!(task_log(&agent, writer["ID"].as_str().unwrap()).contains("wrote"));
    agent.eventually("the writer's claim to be released", WAIT, || {
        let v = volume(&agent);
        claim_count(&v, "WriteAllocs") == 0 && claim_count(&v, "PastClaims") == 0
    });
    run_job(
        &agent,
        &dir,
        "reader",
        &volume_job("reader", "batch", "cat /data/greeting"),
    );
    agent.eventually("the reader to complete", WAIT, || {
        alloc_with_status(&agent, "reader", "complete").is_some()
            || alloc_with_status(&agent, "reader", "failed").is_some()
    });
    let reader = alloc_with_status(&agent, "reader", "complete")
        .unwrap_or_else(|| panic!("reader failed: {:?}", allocs(&agent, "reader")));
    let log = task_log(&agent, reader["ID"].as_str().unwrap());
    assert!(log.contains("hello-csi"), "reader saw: {log}");
    agent.eventually("the reader's claim to be released", WAIT, || {
        let v = volume(&agent);
        claim_count(&v, "WriteAllocs") == 0 && claim_count(&v, "PastClaims") == 0
    });

    // A docker task sees the same volume through a driver mount (no host bind in its task
    // directory), read-only as its volume_mount asks.
    match docker_image::docker_tests_enabled() {
        Ok(true) => {
            run_job(
                &agent,
                &dir,
                "docker-reader",
                &docker_volume_job(
                    "docker-reader",
                    "cat /data/greeting; touch /data/nope 2>/dev/null && echo writable || echo read-only",
                ),
            );
            agent.eventually("the docker reader to complete", WAIT, || {
                alloc_with_status(&agent, "docker-reader", "complete").is_some()
                    || alloc_with_status(&agent, "docker-reader", "failed").is_some()
            });
            let reader =
                alloc_with_status(&agent, "docker-reader", "complete").unwrap_or_else(|| {
                    panic!(
                        "docker reader failed: {:?}\nlog:\n{}",
                        allocs(&agent, "docker-reader"),
                        agent.log()
                    )
                });
            let log = task_log(&agent, reader["ID"].as_str().unwrap());
            assert!(log.contains("hello-csi"), "docker reader saw: {log}");
            assert!(log.contains("read-only"), "docker reader saw: {log}");
            agent.eventually("the docker reader's claim to be released", WAIT, || {
                let v = volume(&agent);
                claim_count(&v, "WriteAllocs") == 0 && claim_count(&v, "PastClaims") == 0
            });
        }
        Ok(false) => {}
        Err(e) => panic!("{e}"),
    }

    // Single writer: a second service job waits until the first lets go.
    run_job(
        &agent,
        &dir,
        "holder",
        &volume_job("holder", "service", "sleep 600"),
    );
    agent.eventually("the holder to run", WAIT, || {
        alloc_with_status(&agent, "holder", "running").is_some()
    });
    run_job(
        &agent,
        &dir,
        "second",
        &volume_job("second", "service", "cat /data/greeting; sleep 600"),
    );
    agent.eventually("the second job's placement to fail", WAIT, || {
        let out = agent.cli(&["job", "status", "second"]);
        output_text(&out).contains("Placement Failure")
    });
    let text = output_text(&agent.cli(&["job", "status", "second"]));
    assert!(
        text.contains("exhausted its available writer claims"),
        "the reason is missing: {text}"
    );
    assert!(alloc_with_status(&agent, "second", "running").is_none());
    stop_job(&agent, "holder");
    agent.eventually("the second job to run", WAIT, || {
        alloc_with_status(&agent, "second", "running").is_some()
    });
    let second = alloc_with_status(&agent, "second", "running").unwrap();
    let second_id = second["ID"].as_str().unwrap().to_string();

    // Killed while the volume is published: the new agent takes everything back as it was.
    let before = mounts_under(&data_dir);
    assert!(
        before.iter().any(|m| m.contains(&second_id)),
        "the published volume is mounted: {before:?}"
    );
    let fingerprinted_at = |agent: &Agent| {
        agent
            .get(&format!("/v1/node/{node}"))
            .unwrap_or(Value::Null)["CSINodePlugins"]["hostpath"]["UpdateTime"]
            .clone()
    };
    let first_fingerprint = fingerprinted_at(&agent);
    agent.kill9();
    let agent = Agent::start_dev(dir.path(), &[]);
    agent.eventually(
        "the recovered plugin to be fingerprinted again",
        WAIT,
        || fingerprinted_at(&agent) != first_fingerprint,
    );
    // The hook ran again for the resumed allocation: a second successful mount event for it.
    agent.eventually(
        "the volume to be mounted again for the resumed allocation",
        WAIT,
        || {
            let node = agent
                .get(&format!("/v1/node/{node}"))
                .unwrap_or(Value::Null);
            node["Events"].as_array().is_some_and(|events| {
                events
                    .iter()
                    .filter(|e| {
                        e["Message"] == "Mount volume"
                            && e["Details"]["alloc_id"] == second_id.as_str()
                            && e["Details"]["success"] == "true"
                    })
                    .count()
                    == 2
            })
        },
    );
    assert!(alloc_with_status(&agent, "second", "running").is_some());
    let vol = volume(&agent);
    assert_eq!(claim_count(&vol, "WriteClaims"), 1, "{vol}");
    assert!(vol["WriteClaims"].get(&second_id).is_some(), "{vol}");
    let after = mounts_under(&data_dir);
    assert_eq!(
        before.len(),
        after.len(),
        "before {before:?}\nafter {after:?}"
    );

    // Stopping releases the claim and unmounts everything.
    stop_job(&agent, "second");
    agent.eventually("the claim to be freed", WAIT, || {
        let v = volume(&agent);
        claim_count(&v, "WriteClaims") == 0
            && claim_count(&v, "WriteAllocs") == 0
            && claim_count(&v, "PastClaims") == 0
    });
    agent.eventually("every volume mount to be gone", WAIT, || {
        mounts_under(&data_dir).is_empty()
    });

    // The node's storage events.
    let out = agent.cli(&["node", "status", "-verbose", &node]);
    let text = output_text(&out);
    assert!(text.contains("Mount volume"), "{text}");
    assert!(text.contains("Unmount volume"), "{text}");

    // The plugin goes with its job.
    let out = agent.cli(&["volume", "delete", "data"]);
    assert!(out.status.success(), "volume delete: {}", output_text(&out));
    stop_job(&agent, "plugin-hostpath");
    agent.eventually("the plugin to be gone", WAIT, || {
        agent.get("/v1/plugin/csi/hostpath").is_err()
    });
    let mut agent = agent;
    agent.terminate();
}

/// A node (monolith) plugin under exec, as operators isolate them: root in its own root
/// filesystem with `cap_add = ["sys_admin"]` (allowed by the exec plugin's `allow_caps`), its
/// mounts reaching the host through the bidirectional stage directory. Volumes it serves are
/// written and read by other tasks.
#[test]
fn a_plugin_under_exec_with_sys_admin_serves_volumes() {
    let bin = drover_tests::csi::our_hostpath_plugin();
    let dir = TempDir::new("csi-exec-plugin");
    let config = dir.path().join("exec.hcl");
    std::fs::write(
        &config,
        "client {\n  artifact {\n    disable_filesystem_isolation = true\n  }\n}\nplugin \"exec\" {\n  config {\n    allow_caps = [\"audit_write\", \"chown\", \"dac_override\", \"fowner\", \"fsetid\", \"kill\", \"mknod\", \"net_bind_service\", \"setfcap\", \"setgid\", \"setpcap\", \"setuid\", \"sys_chroot\", \"sys_admin\"]\n  }\n}\n",
    )
    .unwrap();
    let agent = Agent::start_dev(dir.path(), &["--config", config.to_str().unwrap()]);
    let plugin = format!(
        r#"
job "plugin-hostpath" {{
  datacenters = ["dc1"]
  group "monolith" {{
    task "plugin" {{
      driver = "exec"
      user   = "root"
      artifact {{
        source      = "file://{bin}"
        destination = "local/"
      }}
      config {{
        command = "local/drover-csi-hostpath"
        args    = ["--node-id", "${{node.unique.id}}", "--state-dir", "/local/state"]
        cap_add = ["sys_admin"]
      }}
      csi_plugin {{
        id        = "hostpath"
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
        bin = bin.display()
    );
    run_job(&agent, &dir, "plugin", &plugin);
    agent.eventually("the exec plugin to be healthy", WAIT, || {
        agent
            .get("/v1/plugin/csi/hostpath")
            .is_ok_and(|p| p["ControllersHealthy"] == 1 && p["NodesHealthy"] == 1)
    });
    let spec = write_job(&dir, "data.volume.hcl", drover_tests::csi::HOSTPATH_VOLUME);
    let out = agent.cli(&["volume", "create", &spec]);
    assert!(out.status.success(), "volume create: {}", output_text(&out));
    for (name, script, expect) in [
        (
            "writer",
            "echo from-exec-plugin > /data/greeting && echo wrote",
            "wrote",
        ),
        ("reader", "cat /data/greeting", "from-exec-plugin"),
    ] {
        run_job(&agent, &dir, name, &volume_job(name, "batch", script));
        agent.eventually(&format!("the {name} to end"), WAIT, || {
            alloc_with_status(&agent, name, "complete").is_some()
                || alloc_with_status(&agent, name, "failed").is_some()
        });
        let done = alloc_with_status(&agent, name, "complete").unwrap_or_else(|| {
            panic!(
                "{name} failed: {:?}\nlog:\n{}",
                allocs(&agent, name),
                agent.log()
            )
        });
        let log = task_log(&agent, done["ID"].as_str().unwrap());
        assert!(log.contains(expect), "{name} said: {log}");
        agent.eventually(&format!("the {name}'s claim to be released"), WAIT, || {
            let v = volume(&agent);
            claim_count(&v, "WriteAllocs") == 0 && claim_count(&v, "ReadAllocs") == 0
        });
    }
    stop_job(&agent, "plugin-hostpath");
    agent.eventually("the plugin to go", WAIT, || {
        agent.get("/v1/plugin/csi/hostpath").is_err()
    });
}
