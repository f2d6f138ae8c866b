//! Restarting a client agent disrupts nothing: a client-only agent running five tasks (raw_exec,
//! exec, docker, an in-process cdylib plugin and a go-plugin sidecar) is killed with SIGKILL ten
//! times in a row and started again each time; every task keeps its process (same PID), none
//! counts a restart, and once the job stops no process, container or mount is left behind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use drover_tests::clients::{ClientProc, RAW_EXEC_ENABLED};
use drover_tests::{PluginReaper, ServerCluster, TempDir, is_alive, output_text, write_job};
use serde_json::Value;

#[path = "../../drivers/docker/src/testing.rs"]
#[allow(dead_code)]
mod docker_image;

const WAIT: Duration = Duration::from_secs(90);
const ROUNDS: usize = 10;
const ALLOC_LABEL: &str = "com.hashicorp.nomad.alloc_id";

/// A plugin dir with the skeleton driver as a cdylib (`skeleton`) and as a sidecar.
fn plugin_dir(dir: &TempDir) -> PathBuf {
    let cdylib = drover_tests::build_workspace_binary("skeleton-driver", "libskeleton_driver.so");
    let sidecar = drover_tests::build_workspace_binary("skeleton-sidecar", "skeleton-sidecar");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    std::fs::copy(cdylib, plugins.join("skeleton.so")).expect("copy the cdylib plugin");
    std::fs::copy(sidecar, plugins.join("skeleton-sidecar")).expect("copy the sidecar plugin");
    plugins
}

/// One task of the job: its name, driver, and the `config` block's body.
struct TaskSpec {
    name: &'static str,
    driver: &'static str,
    /// The sleep's argument, unique per task: how its process is found.
    seconds: &'static str,
}

fn tasks(docker: bool) -> Vec<TaskSpec> {
    let mut t = vec![
        TaskSpec {
            name: "raw",
            driver: "raw_exec",
            seconds: "3600.201",
        },
        TaskSpec {
            name: "exec",
            driver: "exec",
            seconds: "3600.202",
        },
        TaskSpec {
            name: "cdylib",
            driver: "skeleton",
            seconds: "3600.203",
        },
        TaskSpec {
            name: "sidecar",
            driver: "skeleton-sidecar",
            seconds: "3600.204",
        },
    ];
    if docker {
        t.push(TaskSpec {
            name: "docker",
            driver: "docker",
            seconds: "3600.205",
        });
    }
    t
}

fn job(tasks: &[TaskSpec]) -> String {
    let mut body = String::new();
    for t in tasks {
        let config = match t.driver {
            "docker" => format!(
                "image = \"{}\"\n        command = \"sleep\"\n        args = [\"{}\"]",
                docker_image::TEST_IMAGE,
                t.seconds
            ),
            "exec" | "raw_exec" => format!(
                "command = \"/bin/sleep\"\n        args = [\"{}\"]",
                t.seconds
            ),
            _ => format!(
                "command = \"/bin/sleep\"\n        args = [\"{}\"]",
                t.seconds
            ),
        };
        body.push_str(&format!(
            r#"
    task "{name}" {{
      driver = "{driver}"
      config {{
        {config}
      }}
      resources {{
        cpu    = 20
        memory = 32
      }}
    }}
"#,
            name = t.name,
            driver = t.driver
        ));
    }
    format!(
        r#"
job "steady" {{
  datacenters = ["dc1"]
  group "g" {{
{body}
  }}
}}
"#
    )
}

/// The live process whose last argument is `seconds` (every task sleeps a unique time).
fn sleeper(seconds: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .collect();
        let is_sleep = args.first().is_some_and(|a| a.ends_with(b"sleep"));
        (is_sleep && args.last() == Some(&seconds.as_bytes()) && is_alive(pid)).then_some(pid)
    })
}

fn wait_for<T>(what: &str, client: &ClientProc, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; client log:\n{}",
            client.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn the_alloc(cluster: &ServerCluster) -> Option<Value> {
    cluster
        .get(0, "/v1/job/steady/allocations")
        .ok()?
        .as_array()?
        .first()
        .and_then(|stub| {
            let id = stub["ID"].as_str()?;
            cluster.get(0, &format!("/v1/allocation/{id}")).ok()
        })
}

fn all_running(alloc: &Value, tasks: &[TaskSpec]) -> bool {
    alloc["ClientStatus"] == "running"
        && tasks
            .iter()
            .all(|t| alloc["TaskStates"][t.name]["State"] == "running")
}

fn mounts_under(root: &Path) -> Vec<String> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|p| p.starts_with(&*root.to_string_lossy()))
        .collect()
}

fn containers_of(alloc_id: &str) -> Vec<String> {
    let filter = format!("label={ALLOC_LABEL}={alloc_id}");
    let out = Command::new("docker")
        .args(["ps", "-a", "-q", "--filter", &filter])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn ten_kills_of_a_client_agent_leave_every_task_running_untouched() {
    let docker = matches!(docker_image::docker_tests_enabled(), Ok(true));
    let dir = TempDir::new("client-restart");
    let plugins = plugin_dir(&dir);
    // The sidecar outlives agents by design; ended with the test, after the client.
    let _reaper = PluginReaper {
        dir: dir.path().join("steady"),
        program: "skeleton-sidecar",
    };
    let cluster = ServerCluster::start(dir.path(), 1, "");
    let servers = vec![cluster.servers[0].rpc_addr()];
    let config = format!("{RAW_EXEC_ENABLED}plugin_dir = \"{}\"\n", plugins.display());
    let mut client = ClientProc::start(dir.path(), "steady", &servers, &config);
    let tasks = tasks(docker);

    let job_file = write_job(&dir, "steady.nomad", &job(&tasks));
    let out = cluster.cli(0, &["job", "run", "-detach", &job_file]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    let alloc = wait_for("every task running", &client, || {
        the_alloc(&cluster).filter(|a| all_running(a, &tasks))
    });
    let alloc_id = alloc["ID"].as_str().expect("alloc id").to_string();
    let pids: Vec<i32> = tasks
        .iter()
        .map(|t| {
            wait_for(&format!("task {}'s process", t.name), &client, || {
                sleeper(t.seconds)
            })
        })
        .collect();

    for round in 1..=ROUNDS {
        client.kill9();
        for (t, pid) in tasks.iter().zip(&pids) {
            assert!(
                is_alive(*pid),
                "round {round}: task {} died with its agent",
                t.name
            );
        }
        client.restart();
        client.wait_ready(WAIT);
        // The restarted agent has recovered every task: it reports them running again.
        let alloc = wait_for(&format!("round {round}: tasks recovered"), &client, || {
            let a = the_alloc(&cluster)?;
            let log = client.log();
            let recovered = log.matches("node registered").count() > round;
            (all_running(&a, &tasks) && recovered).then_some(a)
        });
        for (t, pid) in tasks.iter().zip(&pids) {
            assert_eq!(
                sleeper(t.seconds),
                Some(*pid),
                "round {round}: task {} has another process",
                t.name
            );
            assert_eq!(
                alloc["TaskStates"][t.name]["Restarts"], 0,
                "round {round}: task {} restarted: {}",
                t.name, alloc["TaskStates"][t.name]
            );
        }
    }

    let out = cluster.cli(0, &["job", "stop", "steady"]);
    assert!(out.status.success(), "job stop: {}", output_text(&out));
    wait_for("every task's process gone", &client, || {
        tasks
            .iter()
            .all(|t| sleeper(t.seconds).is_none())
            .then_some(())
    });
    wait_for("the allocation complete", &client, || {
        the_alloc(&cluster).filter(|a| a["ClientStatus"] == "complete")
    });
    if docker {
        wait_for("no container left", &client, || {
            containers_of(&alloc_id).is_empty().then_some(())
        });
    }
    wait_for("no mount left", &client, || {
        mounts_under(&client.dir).is_empty().then_some(())
    });
    drop(client);
}
