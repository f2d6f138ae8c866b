//! Client garbage collection on request (`/v1/client/allocation/:id/gc`, `/v1/client/gc`): an
//! allocation that ended loses its directory and records on the node; one that runs is refused
//! and keeps running; an unknown one is a 404 in Nomad's words.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, run_batch_script, run_long_sleep};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn an_ended_allocation_is_collected_and_a_running_one_is_refused() {
    let dir = TempDir::new("client-gc");
    let agent = Agent::start_dev(dir.path(), &[]);
    let out = run_batch_script(&agent, &dir, "say", "raw_exec", "echo done");
    assert!(out.contains("done"), "{out}");
    let ended = allocs(&agent, "say")
        .into_iter()
        .find(|a| a["ClientStatus"] == "complete")
        .expect("the batch allocation completed");
    let id = ended["ID"].as_str().expect("alloc id").to_string();
    let alloc_dir = dir.path().join("data/client/alloc").join(&id);
    assert!(alloc_dir.is_dir(), "{} exists before", alloc_dir.display());

    let pid = run_long_sleep(&agent, &dir, "raw_exec", "3600.401");
    let running = allocs(&agent, "long")[0]["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    let (status, body) = agent.send("PUT", &format!("/v1/client/allocation/{running}/gc"), "");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("still running"), "{body}");
    assert!(
        drover_tests::is_alive(pid),
        "refused collection leaves the task alone"
    );

    let (status, body) = agent.send("PUT", &format!("/v1/client/allocation/{id}/gc"), "");
    assert_eq!((status, body.as_str()), (200, "null"));
    assert!(
        !alloc_dir.exists(),
        "the ended allocation's directory is gone"
    );
    let (status, body) = agent.send("GET", &format!("/v1/client/fs/ls/{id}"), "");
    assert_eq!(status, 404, "{body}");

    let (status, body) = agent.send("PUT", "/v1/client/allocation/nope/gc", "");
    assert_eq!(
        (status, body.as_str()),
        (404, "Unknown allocation \"nope\"")
    );
    let (status, _) = agent.send("PUT", "/v1/client/gc", "");
    assert_eq!(status, 200);
    agent.eventually("the long task still running", WAIT, || {
        drover_tests::is_alive(pid)
    });
}

#[test]
fn periodic_gc_with_gc_max_allocs_five_keeps_five_ended_allocation_directories() {
    let dir = TempDir::new("client-gc-max");
    let config = dir.path().join("gc.hcl");
    std::fs::write(
        &config,
        "client {\n  gc_interval = \"1s\"\n  gc_max_allocs = 5\n}\n",
    )
    .expect("write agent config");
    let agent = Agent::start_dev(dir.path(), &["--config", config.to_str().expect("utf-8")]);
    let job = drover_tests::write_job(
        &dir,
        "eight.nomad",
        r#"
job "eight" {
  datacenters = ["dc1"]
  type = "batch"
  group "g" {
    count = 8
    ephemeral_disk {
      size = 10
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "50ms" }
      logs {
        max_files     = 1
        max_file_size = 5
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
"#,
    );
    let out = agent.cli(&["job", "run", &job]);
    assert!(out.status.success(), "{}", drover_tests::output_text(&out));
    agent.eventually("eight completed allocations", WAIT, || {
        allocs(&agent, "eight")
            .iter()
            .filter(|a| a["ClientStatus"] == "complete")
            .count()
            == 8
    });
    let alloc_root = dir.path().join("data/client/alloc");
    let dirs = || {
        std::fs::read_dir(&alloc_root)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.path().is_dir())
                    .count()
            })
            .unwrap_or(0)
    };
    agent.eventually(
        "the client to keep five allocation directories",
        WAIT,
        || dirs() == 5,
    );
    // It stays at five: the limit is not undershot by later passes.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(dirs(), 5);
}
