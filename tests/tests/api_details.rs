//! Details of the HTTP API that Nomad's own clients check, over a real dev agent: the node's
//! JSON beside Nomad 1.1.2's (the legacy `Resources` and `Reserved` blocks Nomad's CLI reads in
//! `node status -verbose`), `?resources=true` on the node and allocation lists, and the answer
//! to deregistering a job that does not exist.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, json_keys, nomad_sample, run_long_sleep};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn node_json_has_nomads_blocks_and_lists_carry_resources_when_asked() {
    let dir = TempDir::new("api-details-node");
    let agent = Agent::start_dev(dir.path(), &[]);
    let nodes = agent.get("/v1/nodes").expect("nodes");
    let id = nodes[0]["ID"].as_str().expect("node id").to_string();
    let node = agent.get(&format!("/v1/node/{id}")).expect("node");
    let nomad = nomad_sample("node_by_id.json");
    assert_eq!(json_keys(&node), json_keys(&nomad));
    for block in [
        "Resources",
        "Reserved",
        "NodeResources",
        "ReservedResources",
    ] {
        assert_eq!(
            json_keys(&node[block]),
            json_keys(&nomad[block]),
            "{block}: {}",
            node[block]
        );
    }
    // What Nomad's CLI dereferences in `node status -verbose`.
    assert!(
        node["Resources"]["CPU"].as_i64() > Some(0),
        "{}",
        node["Resources"]
    );
    assert!(
        node["Resources"]["MemoryMB"].as_i64() > Some(0),
        "{}",
        node["Resources"]
    );
    assert!(node["Reserved"].is_object(), "{}", node["Reserved"]);

    let stub = &agent.get("/v1/nodes?resources=true").expect("nodes")[0];
    assert_eq!(json_keys(stub), json_keys(&nomad_sample("nodes.json")[0]));
    assert!(
        stub["NodeResources"]["Memory"]["MemoryMB"].as_i64() > Some(0),
        "{stub}"
    );

    run_long_sleep(&agent, &dir, "raw_exec", "7311.4");
    let plain = agent.get("/v1/allocations").expect("allocations");
    let nomad = nomad_sample("allocations.json");
    assert_eq!(json_keys(&plain[0]), json_keys(&nomad[0]));
    assert_eq!(
        plain[0]["AllocatedResources"], nomad[0]["AllocatedResources"],
        "null, as Nomad's"
    );
    let full = agent
        .get("/v1/allocations?resources=true")
        .expect("allocations");
    assert_eq!(
        full[0]["AllocatedResources"]["Tasks"]["sleep"]["Memory"]["MemoryMB"], 16,
        "{}",
        full[0]
    );
}

#[test]
fn deregistering_an_unknown_job_answers_with_an_evaluation_as_nomad_1_1() {
    let dir = TempDir::new("api-details-deregister");
    let agent = Agent::start_dev(dir.path(), &[]);
    for path in [
        "/v1/job/never-registered",
        "/v1/job/never-registered?purge=true",
    ] {
        let (status, body) = agent.send("DELETE", path, "");
        assert_eq!(status, 200, "{path}: {body}");
        let body: Value = serde_json::from_str(&body).expect("JSON");
        for key in [
            "EvalID",
            "EvalCreateIndex",
            "JobModifyIndex",
            "Index",
            "KnownLeader",
        ] {
            assert!(body.get(key).is_some(), "{key} missing: {body}");
        }
        let eval_id = body["EvalID"].as_str().expect("eval id").to_string();
        agent.eventually("the evaluation to complete", WAIT, || {
            agent
                .get(&format!("/v1/evaluation/{eval_id}"))
                .is_ok_and(|e| e["Status"] == "complete")
        });
    }
    assert!(agent.get("/v1/job/never-registered").is_err());
    assert!(allocs(&agent, "never-registered").is_empty());
    // The CLI looks the job up first, as Nomad's does.
    let out = agent.cli(&["job", "stop", "never-registered"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn agent_host_describes_the_host_and_needs_enable_debug_without_acls() {
    let dir = TempDir::new("api-details-host");
    let agent = Agent::start_dev(dir.path(), &[]);
    let host = agent.get("/v1/agent/host").expect("agent host");
    for key in [
        "OS",
        "Network",
        "ResolvConf",
        "Hosts",
        "Environment",
        "Disk",
    ] {
        assert!(host.get(key).is_some(), "{key} missing: {host}");
    }
    let addresses: Vec<&str> = host["Network"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["address"].as_str())
        .collect();
    assert!(addresses.contains(&"127.0.0.1"), "{addresses:?}");
    assert_eq!(
        host["Environment"]["PATH"].as_str(),
        std::env::var("PATH").ok().as_deref()
    );

    let off = TempDir::new("api-details-host-off");
    let config = off.path().join("agent.hcl");
    std::fs::write(&config, "enable_debug = false\n").unwrap();
    std::fs::create_dir_all(off.path().join("data")).unwrap();
    let agent = Agent::start_dev(
        &off.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    assert_eq!(
        agent.send("GET", "/v1/agent/host", ""),
        (403, "Permission denied".to_string())
    );
}
