//! `/v1/metrics` and `/v1/client/stats` of a dev agent configured as Nomad's agents are: a
//! `-config` directory holding JSON and an extensionless HCL file with a `telemetry` block.
//! The Prometheus text goes through a Prometheus text parser; the JSON is compared with the
//! Nomad 1.1.2 samples.

use std::collections::BTreeSet;
use std::time::Duration;

use drover_tests::{Agent, TempDir, json_keys, nomad_sample, run_long_sleep};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

fn names(body: &Value, list: &str) -> BTreeSet<String> {
    body[list]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["Name"].as_str().map(str::to_string))
        .collect()
}

/// The families of a Prometheus text, by name, with their type, as the parser reads them.
fn families(text: &str) -> std::collections::BTreeMap<String, String> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text parses");
    scrape
        .samples
        .iter()
        .map(|s| {
            let kind = match s.value {
                prometheus_parse::Value::Counter(_) => "counter",
                prometheus_parse::Value::Gauge(_) => "gauge",
                prometheus_parse::Value::Summary(_) => "summary",
                prometheus_parse::Value::Histogram(_) => "histogram",
                prometheus_parse::Value::Untyped(_) => "untyped",
            };
            (s.metric.clone(), kind.to_string())
        })
        .collect()
}

#[test]
fn telemetry_from_a_config_directory_publishes_node_and_allocation_metrics_as_nomad() {
    let dir = TempDir::new("metrics-telemetry");
    let config = dir.path().join("agent.d");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("10-telemetry.json"),
        r#"{"telemetry": [{"publish_node_metrics": true, "collection_interval": "1s",
             "statsd_address": "127.0.0.1:8125"}]}"#,
    )
    .unwrap();
    let extra = dir.path().join("allocs");
    std::fs::write(
        &extra,
        "telemetry {\n  publish_allocation_metrics = true\n  prometheus_metrics = true\n}\nconsul {\n  address = \"127.0.0.1:8500\"\n}\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let agent = Agent::start_dev(
        &dir.path().join("data"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--config",
            extra.to_str().unwrap(),
        ],
    );
    // Keys Drover does not act on are named at start-up, never silently dropped.
    for key in ["telemetry.statsd_address", "consul"] {
        assert!(
            agent.log().contains(&format!("setting={key}")),
            "no warning for {key}:\n{}",
            agent.log()
        );
    }
    let sleep_arg = "7277.1";
    run_long_sleep(&agent, &dir, "raw_exec", sleep_arg);

    // The allocation's usage shows once a collection sampled it.
    let mut body = Value::Null;
    agent.eventually("allocation gauges", WAIT, || {
        body = agent.get("/v1/metrics").unwrap_or_default();
        names(&body, "Gauges").contains("nomad.client.allocs.memory.rss")
    });
    let nomad = nomad_sample("metrics.json");
    assert_eq!(json_keys(&body), json_keys(&nomad));
    for list in ["Gauges", "Counters", "Samples"] {
        let ours = &body[list][0];
        assert_eq!(
            json_keys(ours),
            json_keys(&nomad[list][0]),
            "{list}: {ours}"
        );
    }
    // Every figure Drover has that Nomad's sample agent had (a dev agent running a sleep job
    // with both publish settings on), under the same name.
    let shared = [
        "nomad.raft.appliedIndex",
        "nomad.raft.lastIndex",
        "nomad.nomad.broker.total_ready",
        "nomad.nomad.broker.total_unacked",
        "nomad.nomad.broker.total_blocked",
        "nomad.nomad.broker.service.ready",
        "nomad.nomad.blocked_evals.total_blocked",
        "nomad.nomad.plan.queue_depth",
        "nomad.nomad.heartbeat.active",
        "nomad.nomad.job_status.running",
        "nomad.nomad.job_summary.running",
        "nomad.client.allocations.running",
        "nomad.client.allocations.pending",
        "nomad.client.allocations.terminal",
        "nomad.client.allocated.cpu",
        "nomad.client.allocated.memory",
        "nomad.client.unallocated.memory",
        "nomad.client.host.memory.total",
        "nomad.client.host.memory.available",
        "nomad.client.host.cpu.total",
        "nomad.client.host.cpu.idle",
        "nomad.client.uptime",
        "nomad.client.allocs.memory.rss",
        "nomad.client.allocs.memory.allocated",
        "nomad.client.allocs.cpu.total_percent",
        "nomad.client.allocs.cpu.allocated",
    ];
    let ours = names(&body, "Gauges");
    let theirs = names(&nomad, "Gauges");
    for name in shared {
        assert!(theirs.contains(name), "{name} is not in Nomad's sample");
        assert!(ours.contains(name), "{name} missing:\n{ours:?}");
    }
    for (list, name) in [
        ("Counters", "nomad.raft.apply"),
        ("Samples", "nomad.raft.commitTime"),
        ("Samples", "nomad.nomad.plan.submit"),
        ("Samples", "nomad.nomad.plan.evaluate"),
        ("Samples", "nomad.nomad.plan.apply"),
        ("Samples", "nomad.nomad.worker.dequeue_eval"),
        ("Samples", "nomad.nomad.worker.invoke_scheduler.service"),
        ("Samples", "nomad.nomad.worker.submit_plan"),
        ("Samples", "nomad.nomad.worker.update_eval"),
    ] {
        assert!(
            names(&nomad, list).contains(name),
            "{name} is not in Nomad's sample"
        );
        assert!(
            names(&body, list).contains(name),
            "{list} lacks {name}: {body}"
        );
    }
    let rss = body["Gauges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["Name"] == "nomad.client.allocs.memory.rss")
        .unwrap();
    assert_eq!(
        json_keys(&rss["Labels"]),
        json_keys(
            &nomad["Gauges"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["Name"] == "nomad.client.allocs.memory.rss")
                .unwrap()["Labels"]
        )
    );
    assert_eq!(rss["Labels"]["job"], "long");
    assert!(rss["Value"].as_f64() > Some(0.0), "{rss}");

    // The Prometheus text, as a Prometheus parser reads it.
    let (status, text) = agent.send("GET", "/v1/metrics?format=prometheus", "");
    assert_eq!(status, 200, "{text}");
    let families = families(&text);
    for (family, kind) in [
        ("nomad_raft_appliedIndex", "gauge"),
        ("nomad_raft_apply", "counter"),
        ("nomad_nomad_broker_total_ready", "gauge"),
        ("nomad_nomad_plan_queue_depth", "gauge"),
        ("nomad_nomad_plan_submit", "summary"),
        ("nomad_nomad_worker_invoke_scheduler_service", "summary"),
        ("nomad_client_allocations_running", "gauge"),
        ("nomad_client_host_memory_total", "gauge"),
        ("nomad_client_allocs_memory_rss", "gauge"),
    ] {
        if kind == "summary" {
            // A summary without quantiles reaches the parser as its `_sum` and `_count`.
            for part in ["sum", "count"] {
                assert!(
                    families.contains_key(&format!("{family}_{part}")),
                    "{family}_{part} in:\n{text}"
                );
            }
            assert!(text.contains(&format!("# TYPE {family} summary\n")));
        } else {
            assert_eq!(
                families.get(family).map(String::as_str),
                Some(kind),
                "{family} in:\n{text}"
            );
        }
    }

    // `/v1/client/stats` is the latest collection, in Nomad's shape.
    let stats = agent.get("/v1/client/stats").expect("client stats");
    let nomad = nomad_sample("client_stats.json");
    assert_eq!(json_keys(&stats), json_keys(&nomad));
    assert_eq!(json_keys(&stats["Memory"]), json_keys(&nomad["Memory"]));
    assert_eq!(json_keys(&stats["CPU"][0]), json_keys(&nomad["CPU"][0]));
    assert_eq!(
        json_keys(&stats["AllocDirStats"]),
        json_keys(&nomad["AllocDirStats"])
    );
    assert!(stats["Memory"]["Total"].as_u64() > Some(0), "{stats}");
    assert!(stats["Uptime"].as_u64() > Some(0), "{stats}");
    let cpus = stats["CPU"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(
        cpus,
        std::thread::available_parallelism()
            .map_or(0, |n| n.get())
            .max(cpus)
    );
}

#[test]
fn prometheus_text_is_refused_when_prometheus_metrics_is_off() {
    let dir = TempDir::new("metrics-prometheus-off");
    let config = dir.path().join("agent.hcl");
    std::fs::write(&config, "telemetry {\n  prometheus_metrics = false\n}\n").unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let agent = Agent::start_dev(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let (status, text) = agent.send("GET", "/v1/metrics?format=prometheus", "");
    assert_eq!((status, text.trim()), (415, "Prometheus is not enabled"));
    assert_eq!(agent.send("GET", "/v1/metrics", "").0, 200);
    // Without publish settings, no host or allocation figures.
    let body = agent.get("/v1/metrics").expect("metrics");
    let gauges = names(&body, "Gauges");
    assert!(gauges.contains("nomad.client.allocations.running"));
    assert!(
        !gauges.iter().any(|g| g.starts_with("nomad.client.host.")),
        "{gauges:?}"
    );
}
