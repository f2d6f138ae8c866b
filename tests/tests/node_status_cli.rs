//! `drover node status` as Nomad's: `-self` shows the agent's own node, `-verbose` its drivers.

use drover_tests::{Agent, TempDir, output_text};

#[test]
fn node_status_self_shows_the_local_node_and_verbose_adds_its_drivers() {
    let dir = TempDir::new("node-status-self");
    let agent = Agent::start_dev(dir.path(), &[]);
    let nodes = agent.get("/v1/nodes").expect("the node list");
    let id = nodes[0]["ID"].as_str().expect("a node ID").to_string();

    let out = agent.cli(&["node", "status", "-self"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(&format!("ID              = {id}")), "{text}");
    assert!(text.contains("Driver Status"), "{text}");

    let out = agent.cli(&["node", "status", "-self", "-verbose"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let drivers = text.split("\nDrivers\n").nth(1).unwrap_or_default();
    assert!(
        drivers.contains("raw_exec") && drivers.contains("mock_driver"),
        "no drivers listed:\n{text}"
    );

    // The list's verbose form adds full IDs, addresses and versions, as Nomad's.
    let out = agent.cli(&["node", "status", "-verbose"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Address") && text.contains(&id), "{text}");
}
