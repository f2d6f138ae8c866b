//! 20 containers started through the docker driver (`start_task` from 20 threads, as the
//! client's blocking pool calls it) against the same 20 containers started directly with
//! `docker run -d` (20 CLI processes at once). Both: the locally built busybox image running
//! `sleep 300`, the task's three directories bound, memory and CPU limits, a label. Timed until
//! every start has returned (the containers run); clean-up is not timed.
//!
//! `cargo bench -p drover-driver-docker --bench docker_start` (ROUNDS=n to change the rounds).

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_abi::{Driver, TaskConfig, TaskResources};
use drover_driver_docker::{DockerDriver, LABEL_ALLOC_ID};
use serde_json::json;

#[path = "../src/testing.rs"]
#[allow(dead_code)]
mod testing;

const TASKS: usize = 20;

/// One allocation's directories and log FIFOs, drained like the host drains them.
struct AllocDirs {
    alloc_id: String,
    root: PathBuf,
}

impl AllocDirs {
    fn new(run: &str, i: usize) -> AllocDirs {
        let alloc_id = format!("bench-{run}-{i}");
        let root = std::env::temp_dir().join(format!("drover-docker-bench-{alloc_id}"));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["alloc", "task/local", "task/secrets", "logs"] {
            std::fs::create_dir_all(root.join(d)).expect("create alloc dirs");
        }
        for kind in ["stdout", "stderr"] {
            let fifo = root.join(format!("logs/.task.{kind}.fifo"));
            let ok = Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .expect("mkfifo")
                .success();
            assert!(ok, "mkfifo {}", fifo.display());
            drain(&fifo);
        }
        AllocDirs { alloc_id, root }
    }

    fn task_config(&self) -> TaskConfig {
        TaskConfig {
            id: format!("{}/task/0", self.alloc_id),
            name: "task".into(),
            alloc_id: self.alloc_id.clone(),
            job_name: "bench".into(),
            group_name: "g".into(),
            env: std::sync::Arc::new(BTreeMap::from([(
                "NOMAD_ALLOC_ID".to_string(),
                self.alloc_id.clone(),
            )])),
            driver_config: json!({
                "image": testing::TEST_IMAGE,
                "command": "/bin/sleep",
                "args": ["300"],
            }),
            resources: TaskResources {
                cpu_mhz: 100,
                cores: 0,
                memory_mb: 64,
                memory_max_mb: 0,
            },
            user: String::new(),
            alloc_dir: self.root.clone(),
            task_dir: self.root.join("task"),
            stdout_path: self.root.join("logs/.task.stdout.fifo"),
            stderr_path: self.root.join("logs/.task.stderr.fifo"),
            ..Default::default()
        }
    }

    /// The same container as the driver creates, as a `docker run -d` command line.
    fn docker_run_args(&self) -> Vec<String> {
        let bind =
            |host: &str, inside: &str| format!("{}:{inside}", self.root.join(host).display());
        [
            "run",
            "-d",
            "--name",
            &format!("direct-{}", self.alloc_id),
            "--label",
            &format!("{LABEL_ALLOC_ID}={}", self.alloc_id),
            "-v",
            &bind("alloc", "/alloc"),
            "-v",
            &bind("task/local", "/local"),
            "-v",
            &bind("task/secrets", "/secrets"),
            "--memory",
            "64m",
            "--memory-swap",
            "64m",
            "--cpu-shares",
            "100",
            "--cap-drop",
            "net_raw",
            "--log-opt",
            "max-file=2",
            "--log-opt",
            "max-size=2m",
            testing::TEST_IMAGE,
            "/bin/sleep",
            "300",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

impl Drop for AllocDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Holds the FIFO open read-write and reads it forever, like the agent's log pump.
fn drain(fifo: &Path) {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(fifo)
        .expect("open FIFO");
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
    });
}

fn remove_bench_containers() {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("label={LABEL_ALLOC_ID}"),
        ])
        .args(["--filter", "name=bench-"])
        .output()
        .expect("docker ps");
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if !ids.is_empty() {
        let _ = Command::new("docker")
            .arg("rm")
            .arg("-f")
            .args(&ids)
            .output();
    }
}

fn through_driver(round: usize) -> Duration {
    let driver = Arc::new(DockerDriver::new());
    driver
        .set_config(&json!({"gc": {"image": false}}))
        .expect("plugin config");
    let dirs: Vec<AllocDirs> = (0..TASKS)
        .map(|i| AllocDirs::new(&format!("d{round}"), i))
        .collect();
    let configs: Vec<TaskConfig> = dirs.iter().map(AllocDirs::task_config).collect();
    let start = Instant::now();
    let threads: Vec<_> = configs
        .iter()
        .cloned()
        .map(|cfg| {
            let d = Arc::clone(&driver);
            std::thread::spawn(move || d.start_task(&cfg).map(drop))
        })
        .collect();
    for t in threads {
        t.join().expect("start thread").expect("start_task");
    }
    let elapsed = start.elapsed();
    for cfg in &configs {
        driver.destroy_task(&cfg.id, true).expect("destroy_task");
    }
    elapsed
}

fn direct(round: usize) -> Duration {
    let dirs: Vec<AllocDirs> = (0..TASKS)
        .map(|i| AllocDirs::new(&format!("c{round}"), i))
        .collect();
    let start = Instant::now();
    let children: Vec<_> = dirs
        .iter()
        .map(|d| {
            Command::new("docker")
                .args(d.docker_run_args())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn docker run")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("docker run").success(), "docker run failed");
    }
    let elapsed = start.elapsed();
    let names: Vec<String> = dirs
        .iter()
        .map(|d| format!("direct-{}", d.alloc_id))
        .collect();
    let _ = Command::new("docker")
        .arg("rm")
        .arg("-f")
        .args(&names)
        .output();
    elapsed
}

fn summary(name: &str, mut v: Vec<Duration>) -> Duration {
    v.sort();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let median = v[v.len() / 2];
    println!(
        "{name}: median {:.0} ms (min {:.0}, max {:.0}) over {} rounds",
        ms(&median),
        ms(&v[0]),
        ms(&v[v.len() - 1]),
        v.len()
    );
    median
}

fn main() {
    match testing::docker_tests_enabled() {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => panic!("{e}"),
    }
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    remove_bench_containers();
    // One unmeasured round each: the first containers pay for the daemon's caches.
    through_driver(usize::MAX);
    direct(usize::MAX);
    let (mut via_driver, mut via_cli) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate the order so neither always runs on a daemon still busy cleaning up.
        if round % 2 == 0 {
            via_driver.push(through_driver(round));
            via_cli.push(direct(round));
        } else {
            via_cli.push(direct(round));
            via_driver.push(through_driver(round));
        }
    }
    println!("{TASKS} containers started at once, until every start returned:");
    let d = summary("  docker driver (start_task x20)", via_driver);
    let c = summary("  docker run -d x20 (CLI)       ", via_cli);
    println!(
        "  ratio driver/direct: {:.2}",
        d.as_secs_f64() / c.as_secs_f64()
    );
}
