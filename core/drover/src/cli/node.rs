//! `drover node status [ID]`: the node list, or one node's details, events, resources and
//! allocations.

use drover_structs::{Allocation, ComparableResources, Node, NodeListStub};

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID, format_kv, format_list, humanize_mb, limit};
use super::lookup::{self, Match};
use super::timefmt::{ago, format_time, parse_time};
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct NodeCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: NodeCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum NodeCommand {
    /// List nodes, or show one node's details
    Status(NodeStatusArgs),
    /// Drain a node: move its allocations elsewhere, or stop draining it
    Drain(super::node_drain::NodeDrainArgs),
    /// Make a node eligible or ineligible for new placements
    Eligibility(super::node_drain::NodeEligibilityArgs),
    /// Read or change a node's dynamic metadata
    #[command(subcommand)]
    Meta(super::node_meta::NodeMetaCommand),
    /// Remove a node from the servers; its allocations are lost and placed elsewhere
    Purge(super::node_meta::NodePurgeArgs),
}

#[derive(Debug, clap::Args)]
pub struct NodeStatusArgs {
    /// Display full information: with a node, its drivers, attributes and meta; the node
    /// list adds each node's address and version
    #[arg(long)]
    pub verbose: bool,
    /// Query the status of the local node (the agent's client)
    #[arg(long = "self", conflicts_with = "node")]
    pub local: bool,
    /// Only show the node's basic information
    #[arg(long)]
    pub short: bool,
    /// Print the node (or node list) as JSON
    #[arg(long)]
    pub json: bool,
    /// Node ID (or prefix); omit to list all nodes
    pub node: Option<String>,
}

pub fn run(cli: NodeCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        NodeCommand::Status(args) => node_status(&client, args),
        NodeCommand::Drain(args) => super::node_drain::drain(&client, args),
        NodeCommand::Eligibility(args) => super::node_drain::eligibility(&client, args),
        NodeCommand::Meta(command) => super::node_meta::run(&client, command),
        NodeCommand::Purge(args) => super::node_meta::purge(&client, args),
    }
}

/// Nomad's node list table (`formatNodeStubList`, plus address/version when verbose).
pub fn node_list_table(nodes: &[NodeListStub], verbose: bool) -> String {
    let length = if verbose { FULL_ID } else { SHORT_ID };
    let mut header = "ID|DC|Name|Class|".to_string();
    if verbose {
        header.push_str("Address|Version|");
    }
    header.push_str("Drain|Eligibility|Status");
    let mut rows = vec![header];
    for n in nodes {
        let mut row = format!(
            "{}|{}|{}|{}",
            limit(&n.id, length),
            n.datacenter,
            n.name,
            n.node_class
        );
        if verbose {
            row.push_str(&format!("|{}|{}", n.address, n.version));
        }
        row.push_str(&format!(
            "|{}|{}|{}",
            n.drain, n.scheduling_eligibility, n.status
        ));
        rows.push(row);
    }
    format_list(&rows)
}

fn node_status(client: &Client, args: NodeStatusArgs) -> anyhow::Result<Exit> {
    let local = if args.local {
        match local_node_id(client) {
            Ok(id) => Some(id),
            Err(message) => {
                ui::err(&message);
                return Ok(1);
            }
        }
    } else {
        None
    };
    let Some(prefix) = local.as_deref().or(args.node.as_deref()) else {
        let nodes: Vec<NodeListStub> = match client.get_json("/v1/nodes", &[]) {
            Ok((n, _)) => n,
            Err(e) => {
                ui::err(&format!("Error querying node status: {e}"));
                return Ok(1);
            }
        };
        if args.json {
            ui::out(&super::job::to_indented_json(&serde_json::to_value(
                &nodes,
            )?));
        } else if nodes.is_empty() {
            ui::out("No nodes registered");
        } else {
            ui::out(&node_list_table(&nodes, args.verbose));
        }
        return Ok(0);
    };
    let node = match find_node(client, prefix, args.verbose) {
        Ok(n) => n,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    if args.json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(&node)?));
        return Ok(0);
    }
    let allocs: Vec<Allocation> = match client.get_json(
        &format!("/v1/node/{}/allocations", escape_segment(&node.id)),
        &[],
    ) {
        Ok((a, _)) => a,
        Err(e) => {
            ui::err(&format!("Error querying node allocations: {e}"));
            return Ok(1);
        }
    };
    ui::out(&format_node(&node, &allocs, args.verbose, args.short));
    Ok(0)
}

/// The node ID of the agent the CLI talks to (Nomad's `getLocalNodeID`: `stats.client.node_id`
/// of `/v1/agent/self`). `Err` is the message to print.
pub(crate) fn local_node_id(client: &Client) -> Result<String, String> {
    let (info, _): (serde_json::Value, _) = client
        .get_json("/v1/agent/self", &[])
        .map_err(|e| format!("Error querying agent info: {e}"))?;
    let Some(stats) = info["stats"]["client"].as_object() else {
        return Err("Drover not running in client mode".to_string());
    };
    stats
        .get("node_id")
        .and_then(|id| id.as_str())
        .map(str::to_string)
        .ok_or_else(|| "Failed to determine node ID".to_string())
}

/// Resolves a node ID prefix and fetches the node. `Err` is the message to print.
pub fn find_node(client: &Client, prefix: &str, verbose: bool) -> Result<Node, String> {
    let prefix = lookup::check_uuid_prefix(prefix.trim())?;
    let nodes: Vec<NodeListStub> = client
        .get_json("/v1/nodes", &[("prefix", prefix)])
        .map(|(n, _)| n)
        .map_err(|e| format!("Error querying node info: {e}"))?;
    let stub = match lookup::resolve(nodes, prefix, |n| n.id.as_str()) {
        Match::One(n) => n,
        Match::None => return Err(format!("No node(s) with prefix {prefix:?} found")),
        Match::Many(nodes) => {
            return Err(format!(
                "Prefix matched multiple nodes\n\n{}",
                node_list_table(&nodes, verbose)
            ));
        }
    };
    client
        .get_json(&format!("/v1/node/{}", escape_segment(&stub.id)), &[])
        .map(|(n, _)| n)
        .map_err(|e| format!("Error querying node info: {e}"))
}

/// The CSI plugins of one kind running on the node, by id (`CSI Controllers`, `CSI Drivers`).
fn csi_plugin_names(
    plugins: &Option<std::collections::BTreeMap<String, drover_structs::CsiInfo>>,
) -> String {
    plugins
        .iter()
        .flat_map(|m| m.keys())
        .cloned()
        .collect::<Vec<_>>()
        .join(",")
}

/// Detected drivers by name, unhealthy ones marked (`Driver Status`).
fn driver_summary(node: &Node) -> String {
    node.drivers
        .iter()
        .filter(|(_, d)| d.detected)
        .map(|(name, d)| {
            if d.healthy {
                name.clone()
            } else {
                format!("{name} (unhealthy)")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Nomad's `formatAllocList` (full allocations, as `/v1/node/:id/allocations` returns them).
fn alloc_list_table(allocs: &[Allocation], verbose: bool) -> String {
    if allocs.is_empty() {
        return "No allocations placed".into();
    }
    let length = if verbose { FULL_ID } else { SHORT_ID };
    let mut rows = Vec::with_capacity(allocs.len() + 1);
    if verbose {
        rows.push(
            "ID|Eval ID|Node ID|Task Group|Version|Desired|Status|Created|Modified".to_string(),
        );
    } else {
        rows.push("ID|Node ID|Task Group|Version|Desired|Status|Created|Modified".to_string());
    }
    for a in allocs {
        let (created, modified) = if verbose {
            (format_time(a.create_time), format_time(a.modify_time))
        } else {
            (ago(a.create_time), ago(a.modify_time))
        };
        let eval = if verbose {
            format!("|{}", limit(&a.eval_id, length))
        } else {
            String::new()
        };
        rows.push(format!(
            "{}{eval}|{}|{}|{}|{}|{}|{created}|{modified}",
            limit(&a.id, length),
            limit(&a.node_id, length),
            a.task_group,
            a.job_version(),
            a.desired_status,
            a.client_status
        ));
    }
    format_list(&rows)
}

/// "Allocated Resources": what running allocations hold against what the node offers.
fn allocated_resources_table(node: &Node, allocs: &[Allocation]) -> String {
    let total = node.available();
    let mut used = ComparableResources::default();
    for a in allocs.iter().filter(|a| a.client_status == "running") {
        if let Some(r) = &a.allocated_resources {
            used.add(&r.comparable());
        }
    }
    format_list(&[
        "CPU|Memory|Disk".to_string(),
        format!(
            "{}/{} MHz|{}/{}|{}/{}",
            used.cpu_shares,
            total.cpu_shares,
            humanize_mb(used.memory_mb),
            humanize_mb(total.memory_mb),
            humanize_mb(used.disk_mb),
            humanize_mb(total.disk_mb)
        ),
    ])
}

/// The whole `node status ID` text.
fn format_node(node: &Node, allocs: &[Allocation], verbose: bool, short: bool) -> String {
    let mut basic = vec![
        format!("ID|{}", node.id),
        format!("Name|{}", node.name),
        format!("Class|{}", node.node_class),
        format!("DC|{}", node.datacenter),
        format!("Drain|{}", node.drain),
        format!("Eligibility|{}", node.scheduling_eligibility),
        format!("Status|{}", node.status),
        format!(
            "CSI Controllers|{}",
            csi_plugin_names(&node.csi_controller_plugins)
        ),
        format!("CSI Drivers|{}", csi_plugin_names(&node.csi_node_plugins)),
    ];
    if short {
        basic.push(format!("Drivers|{}", driver_summary(node)));
        let mut out = format_kv(&basic);
        out.push_str("\n\nAllocations\n");
        out.push_str(&alloc_list_table(allocs, verbose));
        return out;
    }
    if !verbose {
        basic.push(format!("Driver Status|{}", driver_summary(node)));
    }
    let mut out = format_kv(&basic);

    if verbose {
        let mut rows = vec!["Driver|Detected|Healthy|Message|Time".to_string()];
        for (name, d) in &node.drivers {
            let time = parse_time(&d.update_time)
                .map(format_time)
                .unwrap_or_default();
            rows.push(format!(
                "{name}|{}|{}|{}|{time}",
                d.detected, d.healthy, d.health_description
            ));
        }
        out.push_str("\n\nDrivers\n");
        out.push_str(&format_list(&rows));
    }

    let events = node.events.as_deref().unwrap_or_default();
    let mut rows = vec![
        if verbose {
            "Time|Subsystem|Message|Details"
        } else {
            "Time|Subsystem|Message"
        }
        .to_string(),
    ];
    for e in events.iter().rev() {
        let time = parse_time(&e.timestamp)
            .map(format_time)
            .unwrap_or_else(|| e.timestamp.clone());
        let driver = e
            .details
            .as_ref()
            .and_then(|d| d.get("driver"))
            .filter(|d| !d.is_empty());
        let subsystem = match driver {
            Some(d) => format!("Driver: {d}"),
            None => e.subsystem.clone(),
        };
        if verbose {
            let details = e
                .details
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}: {v} "))
                .collect::<Vec<_>>()
                .join(", ");
            rows.push(format!("{time}|{subsystem}|{}|{details}", e.message));
        } else {
            rows.push(format!("{time}|{subsystem}|{}", e.message));
        }
    }
    out.push_str("\n\nNode Events\n");
    out.push_str(&format_list(&rows));

    out.push_str("\n\nAllocated Resources\n");
    out.push_str(&allocated_resources_table(node, allocs));

    out.push_str("\n\nAllocations\n");
    out.push_str(&alloc_list_table(allocs, verbose));

    if verbose {
        let attrs: Vec<String> = node
            .attributes
            .iter()
            .map(|(k, v)| format!("{k}|{v}"))
            .collect();
        out.push_str("\n\nAttributes\n");
        out.push_str(&format_kv(&attrs));
        let meta: Vec<String> = node.meta.iter().map(|(k, v)| format!("{k}|{v}")).collect();
        out.push_str("\n\nMeta\n");
        out.push_str(&format_kv(&meta));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::DriverInfo;
    use std::collections::BTreeMap;

    fn node() -> Node {
        let mut n = Node {
            id: "0d816e8c-19bd-2066-474e-6f7e52291a4c".into(),
            name: "vm".into(),
            datacenter: "dc1".into(),
            scheduling_eligibility: "eligible".into(),
            status: "ready".into(),
            drivers: BTreeMap::from([
                (
                    "raw_exec".to_string(),
                    DriverInfo {
                        detected: true,
                        healthy: true,
                        ..Default::default()
                    },
                ),
                ("docker".to_string(), DriverInfo::default()),
                (
                    "exec".to_string(),
                    DriverInfo {
                        detected: true,
                        healthy: false,
                        ..Default::default()
                    },
                ),
            ]),
            ..Default::default()
        };
        n.node_resources.cpu.cpu_shares = 2000;
        n.node_resources.memory.memory_mb = 1024;
        n
    }

    #[test]
    fn list_table_shows_a_disconnected_node_as_nomad_does() {
        let mut n = node();
        n.status = drover_structs::NODE_STATUS_DISCONNECTED.into();
        assert_eq!(
            node_list_table(&[n.stub()], false),
            "ID        DC   Name  Class   Drain  Eligibility  Status\n\
             0d816e8c  dc1  vm    <none>  false  eligible     disconnected"
        );
    }

    #[test]
    fn list_table_shows_short_ids() {
        let stub = node().stub();
        assert_eq!(
            node_list_table(&[stub], false),
            "ID        DC   Name  Class   Drain  Eligibility  Status\n\
             0d816e8c  dc1  vm    <none>  false  eligible     ready"
        );
    }

    #[test]
    fn detail_lists_drivers_resources_and_allocations() {
        let text = format_node(&node(), &[], false, false);
        assert!(
            text.starts_with("ID              = 0d816e8c-19bd-2066-474e-6f7e52291a4c\n"),
            "{text}"
        );
        assert!(
            text.contains("Driver Status   = exec (unhealthy),raw_exec\n"),
            "{text}"
        );
        assert!(
            text.contains("\n\nNode Events\nTime  Subsystem  Message\n"),
            "{text}"
        );
        assert!(text.contains("Allocated Resources\nCPU         Memory       Disk\n0/2000 MHz  0 B/1.0 GiB  0 B/0 B"), "{text}");
        assert!(
            text.ends_with("Allocations\nNo allocations placed"),
            "{text}"
        );
    }
}
