//! Host volumes end to end against a dev agent whose config declares `host_volume` blocks:
//! the node fingerprints them (Nomad's `HostVolumes`), exec tasks see the host directory at
//! their `volume_mount` destination (writable, or not when read-only), a docker task reads it
//! (when a Docker daemon answers), a raw_exec task asking for one is refused naming its
//! driver, a job asking for a volume no node has fails placement with Nomad's text, and an
//! agent whose host volume path does not exist refuses to start naming it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_tests::{Agent, TempDir, allocs, drover_bin, free_port, output_text, write_job};
use serde_json::Value;

// Builds the docker test image; plain std and the docker CLI, shared with the driver's tests.
#[path = "../../drivers/docker/src/testing.rs"]
#[allow(dead_code)]
mod docker_image;

const WAIT: Duration = Duration::from_secs(90);
const GREETING: &str = "hello-host-volume";

/// A host directory with a `greeting` file anyone may read, and write next to.
fn volume_dir(dir: &TempDir, name: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::create_dir_all(&path).expect("create the host volume directory");
    std::fs::write(path.join("greeting"), GREETING).expect("write the greeting");
    // exec tasks run as nobody: the directory is theirs to write unless mounted read-only.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
        .expect("open the host volume directory");
    path
}

/// An agent config declaring host volume `data` at `data` and read-only `certs` at `certs`.
fn agent_config(dir: &TempDir, data: &Path, certs: &Path) -> PathBuf {
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        format!(
            r#"
client {{
  host_volume "data" {{
    path      = "{}"
    read_only = false
  }}
  host_volume "certs" {{
    path      = "{}"
    read_only = true
  }}
}}
"#,
            data.display(),
            certs.display()
        ),
    )
    .expect("write the agent config");
    config
}

/// A dev agent with host volumes `data` (writable) and `certs` (read-only); answers the
/// agent and the two host directories.
fn start_agent(dir: &TempDir) -> (Agent, PathBuf, PathBuf) {
    let data = volume_dir(dir, "data-vol");
    let certs = volume_dir(dir, "certs-vol");
    let config = agent_config(dir, &data, &certs);
    let agent = Agent::start_dev(dir.path(), &["--config", config.to_str().expect("utf-8")]);
    (agent, data, certs)
}

/// A batch job whose task on `driver` runs `script` (with `/bin/sh -c`, or the docker test
/// image's sh) with group volume `v` (host volume `source`) mounted at /data.
fn volume_job(
    name: &str,
    driver: &str,
    source: &str,
    request_read_only: bool,
    mount_read_only: bool,
    script: &str,
) -> String {
    let image = if driver == "docker" {
        format!("image = \"{}\"\n", docker_image::TEST_IMAGE)
    } else {
        String::new()
    };
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "batch"
  group "g" {{
    volume "v" {{
      type      = "host"
      source    = "{source}"
      read_only = {request_read_only}
    }}
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    reschedule {{
      attempts  = 0
      unlimited = false
    }}
    task "t" {{
      driver = "{driver}"
      config {{
        {image}command = "/bin/sh"
        args    = ["-c", {script}]
      }}
      volume_mount {{
        volume      = "v"
        destination = "/data"
        read_only   = {mount_read_only}
      }}
      resources {{
        cpu    = 20
        memory = 32
      }}
    }}
  }}
}}
"#,
        script = Value::from(script)
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

/// Waits for the job's allocation to end and answers it (complete or failed).
fn finished_alloc(agent: &Agent, job: &str) -> Value {
    let ended = || {
        allocs(agent, job)
            .into_iter()
            .find(|a| a["ClientStatus"] == "complete" || a["ClientStatus"] == "failed")
    };
    agent.eventually(&format!("{job}'s allocation to end"), WAIT, || {
        ended().is_some()
    });
    let id = ended().expect("ended")["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    agent
        .get(&format!("/v1/allocation/{id}"))
        .expect("the allocation")
}

fn task_log(agent: &Agent, alloc: &Value) -> String {
    let id = alloc["ID"].as_str().expect("alloc id");
    output_text(&agent.cli(&["alloc", "logs", id, "t"]))
}

fn node(agent: &Agent) -> Value {
    let nodes = agent.get("/v1/nodes").expect("nodes");
    let id = nodes[0]["ID"].as_str().expect("node id").to_string();
    agent.get(&format!("/v1/node/{id}")).expect("the node")
}

#[test]
fn the_node_reports_its_host_volumes_in_nomads_shape() {
    let dir = TempDir::new("hostvol-node");
    let (agent, data, certs) = start_agent(&dir);
    let volumes = &node(&agent)["HostVolumes"];
    assert_eq!(volumes["data"]["Path"], data.display().to_string().as_str());
    assert_eq!(volumes["data"]["ReadOnly"], false);
    assert_eq!(
        volumes["certs"]["Path"],
        certs.display().to_string().as_str()
    );
    assert_eq!(volumes["certs"]["ReadOnly"], true);
    assert_eq!(volumes.as_object().map(|v| v.len()), Some(2), "{volumes}");
    // The list view carries them too.
    let list = agent.get("/v1/nodes").expect("nodes");
    assert_eq!(list[0]["HostVolumes"]["data"]["ReadOnly"], false, "{list}");
}

#[test]
fn an_exec_task_reads_and_writes_the_host_volume_at_its_destination() {
    let dir = TempDir::new("hostvol-exec-rw");
    let (agent, data, _) = start_agent(&dir);
    run_job(
        &agent,
        &dir,
        "writer",
        &volume_job(
            "writer",
            "exec",
            "data",
            false,
            false,
            "cat /data/greeting && echo written-by-task > /data/out",
        ),
    );
    let alloc = finished_alloc(&agent, "writer");
    let log = task_log(&agent, &alloc);
    assert_eq!(alloc["ClientStatus"], "complete", "{alloc}\n{log}");
    assert!(log.contains(GREETING), "the task saw: {log}");
    let written = std::fs::read_to_string(data.join("out")).unwrap_or_default();
    assert_eq!(written.trim(), "written-by-task");
}

#[test]
fn a_read_only_volume_mount_cannot_be_written_by_an_exec_task() {
    let dir = TempDir::new("hostvol-exec-ro");
    let (agent, data, certs) = start_agent(&dir);
    let script = "cat /data/greeting; if touch /data/nope 2>&1; then echo write-succeeded; else echo write-failed; fi";
    // Read-only on the mount's side, on a writable host volume.
    run_job(
        &agent,
        &dir,
        "mount-ro",
        &volume_job("mount-ro", "exec", "data", false, true, script),
    );
    // Read-only on the host volume's side (and so the request must be too, to place).
    run_job(
        &agent,
        &dir,
        "host-ro",
        &volume_job("host-ro", "exec", "certs", true, false, script),
    );
    for (job, host) in [("mount-ro", &data), ("host-ro", &certs)] {
        let alloc = finished_alloc(&agent, job);
        let log = task_log(&agent, &alloc);
        assert!(log.contains(GREETING), "{job} saw: {log}");
        assert!(log.contains("write-failed"), "{job} saw: {log}");
        assert!(log.contains("Read-only file system"), "{job} saw: {log}");
        assert!(!log.contains("write-succeeded"), "{job} saw: {log}");
        assert!(
            !host.join("nope").exists(),
            "{job} wrote into the host volume"
        );
    }
}

#[test]
fn a_job_asking_for_a_host_volume_no_node_has_fails_placement_with_nomads_message() {
    let dir = TempDir::new("hostvol-missing");
    let (agent, _, _) = start_agent(&dir);
    // No node has "nowhere"; a writer of the read-only "certs" cannot place either.
    for (job, source, read_only) in [("missing", "nowhere", false), ("ro-writer", "certs", false)] {
        run_job(
            &agent,
            &dir,
            job,
            &volume_job(job, "exec", source, read_only, false, "true"),
        );
        agent.eventually(&format!("{job}'s placement to fail"), WAIT, || {
            output_text(&agent.cli(&["job", "status", job])).contains("Placement Failure")
        });
        let status = output_text(&agent.cli(&["job", "status", job]));
        assert!(
            status.contains("missing compatible host volumes"),
            "{job}: {status}"
        );
        assert!(allocs(&agent, job).is_empty(), "{job} placed");
        let evals = agent
            .get(&format!("/v1/job/{job}/evaluations"))
            .expect("evaluations");
        let failed = evals
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|e| e["FailedTGAllocs"]["g"].as_object().cloned())
            .unwrap_or_else(|| panic!("{job}: no failed placement in {evals}"));
        assert_eq!(
            failed["ConstraintFiltered"]["missing compatible host volumes"], 1,
            "{job}: {failed:?}"
        );
    }
}

#[test]
fn a_raw_exec_task_mounting_a_host_volume_is_refused_naming_its_driver() {
    let dir = TempDir::new("hostvol-raw-exec");
    let (agent, data, _) = start_agent(&dir);
    run_job(
        &agent,
        &dir,
        "raw",
        &volume_job(
            "raw",
            "raw_exec",
            "data",
            false,
            false,
            "touch /data/raw-ran",
        ),
    );
    let alloc = finished_alloc(&agent, "raw");
    assert_eq!(alloc["ClientStatus"], "failed", "{alloc}");
    let events = alloc["TaskStates"]["t"]["Events"].to_string();
    assert!(
        events.contains(r#"task driver \"raw_exec\" for \"t\" does not support host volumes"#),
        "{events}"
    );
    // Refused before the driver started anything.
    assert!(!data.join("raw-ran").exists(), "the raw_exec task ran");
    assert!(!events.contains("\"Started\""), "{events}");
}

#[test]
fn a_docker_task_reads_the_host_volume_read_only_as_its_mount_asks() {
    match docker_image::docker_tests_enabled() {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => panic!("{e}"),
    }
    let dir = TempDir::new("hostvol-docker");
    let (agent, data, _) = start_agent(&dir);
    run_job(
        &agent,
        &dir,
        "docker-reader",
        &volume_job(
            "docker-reader",
            "docker",
            "data",
            false,
            true,
            "cat /data/greeting; touch /data/nope 2>/dev/null && echo writable || echo read-only",
        ),
    );
    let alloc = finished_alloc(&agent, "docker-reader");
    let log = task_log(&agent, &alloc);
    assert_eq!(alloc["ClientStatus"], "complete", "{alloc}\n{log}");
    assert!(log.contains(GREETING), "the docker task saw: {log}");
    assert!(log.contains("read-only"), "the docker task saw: {log}");
    assert!(!data.join("nope").exists());
}

#[test]
fn an_agent_whose_host_volume_path_does_not_exist_refuses_to_start_naming_it() {
    let dir = TempDir::new("hostvol-bad-path");
    let missing = dir.path().join("not-there");
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        format!(
            "client {{\n  host_volume \"data\" {{\n    path = \"{}\"\n  }}\n}}\n",
            missing.display()
        ),
    )
    .expect("write the agent config");
    let mut child = Command::new(drover_bin())
        .arg("agent")
        .arg("--dev")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--http-port")
        .arg(free_port().to_string())
        .arg("--rpc-port")
        .arg(free_port().to_string())
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the agent");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the agent") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent kept running with a missing host volume path");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("the agent's output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("failed to validate volume data")
            && text.contains(&missing.display().to_string()),
        "{text}"
    );
}
