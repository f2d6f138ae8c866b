//! `drover node drain` and `drover node eligibility`, with Nomad's flags and messages.

use std::collections::BTreeMap;
use std::time::Duration;

use drover_structs::{Allocation, Node};
use serde_json::{Value, json};

use super::api::{Client, escape_segment};
use super::node::{find_node, local_node_id};
use super::timefmt::now_formatted;
use super::{Exit, ui};

#[derive(Debug, clap::Args)]
pub struct NodeDrainArgs {
    /// Enable draining on the node
    #[arg(long)]
    pub enable: bool,
    /// Disable draining on the node
    #[arg(long)]
    pub disable: bool,
    /// How long to migrate before the remaining allocations are stopped (Go duration)
    #[arg(long)]
    pub deadline: Option<String>,
    /// Stop every allocation at once (deadline -1)
    #[arg(long)]
    pub force: bool,
    /// No deadline: allocations migrate as their migrate blocks allow, however long it takes
    #[arg(long = "no-deadline")]
    pub no_deadline: bool,
    /// Leave system jobs' allocations running
    #[arg(long = "ignore-system")]
    pub ignore_system: bool,
    /// With -disable: keep the node ineligible for scheduling
    #[arg(long = "keep-ineligible")]
    pub keep_ineligible: bool,
    /// Return once the drain strategy is set, without monitoring
    #[arg(long)]
    pub detach: bool,
    /// Monitor an ongoing drain
    #[arg(long)]
    pub monitor: bool,
    /// Drain the local node (the agent's client)
    #[arg(long = "self")]
    pub local: bool,
    /// Answer yes to prompts
    #[arg(long)]
    pub yes: bool,
    /// A message recorded with the drain
    #[arg(short = 'm', long = "m")]
    pub message: Option<String>,
    /// Node ID (or prefix)
    pub node: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct NodeEligibilityArgs {
    /// Make the node eligible for scheduling
    #[arg(long)]
    pub enable: bool,
    /// Make the node ineligible for scheduling
    #[arg(long)]
    pub disable: bool,
    /// The local node (the agent's client)
    #[arg(long = "self")]
    pub local: bool,
    /// Node ID (or prefix)
    pub node: Option<String>,
}

/// Nomad's default drain deadline.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(3600);

fn resolve_node(client: &Client, local: bool, node: Option<&str>) -> Result<Node, String> {
    let id = match (local, node) {
        (true, _) => local_node_id(client)?,
        (false, Some(n)) if !n.trim().is_empty() => n.to_string(),
        _ => return Err("Node ID must be specified if -self isn't being used".into()),
    };
    find_node(client, &id, false)
}

pub fn drain(client: &Client, args: NodeDrainArgs) -> anyhow::Result<Exit> {
    if args.enable == args.disable && !args.monitor {
        ui::err("Either the '-enable' or '-disable' flag must be set, unless using '-monitor'");
        return Ok(1);
    }
    let deadline_flags = [args.deadline.is_some(), args.force, args.no_deadline];
    if deadline_flags.iter().filter(|f| **f).count() > 1 {
        ui::err("Only one of the -deadline, -force, and -no-deadline flags may be set");
        return Ok(1);
    }
    let deadline: i64 = if args.force {
        -1
    } else if args.no_deadline {
        0
    } else {
        let d = match args.deadline.as_deref().map(drover_jobspec::parse_duration) {
            None => DEFAULT_DEADLINE,
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                ui::err(&format!(
                    "Failed to parse deadline {:?}: {e}",
                    args.deadline
                ));
                return Ok(1);
            }
        };
        i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
    };
    let node = match resolve_node(client, args.local, args.node.as_deref()) {
        Ok(n) => n,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    if args.monitor && !args.enable && !args.disable {
        return Ok(monitor(client, &node.id));
    }
    let spec = args
        .enable
        .then(|| json!({"Deadline": deadline, "IgnoreSystemJobs": args.ignore_system}));
    let mut meta = serde_json::Map::new();
    if let Some(m) = &args.message {
        meta.insert("message".into(), json!(m));
    }
    let body = json!({
        "NodeID": node.id,
        "DrainSpec": spec,
        "MarkEligible": args.disable && !args.keep_ineligible,
        "Meta": meta,
    });
    let path = format!("/v1/node/{}/drain", escape_segment(&node.id));
    if let Err(e) = client.put_json::<Value>(&path, &[], &body) {
        ui::err(&format!("Error updating drain specification: {e}"));
        return Ok(1);
    }
    if args.disable {
        ui::info(&format!("Node {:?} drain strategy unset", node.id));
        return Ok(0);
    }
    if args.detach {
        ui::info(&format!("Node {:?} drain strategy set", node.id));
        return Ok(0);
    }
    ui::info(&format!(
        "{}: Ctrl-C to stop monitoring: will not cancel the node drain",
        now_formatted()
    ));
    ui::info(&format!(
        "{}: Node {:?} drain strategy set",
        now_formatted(),
        node.id
    ));
    Ok(monitor(client, &node.id))
}

/// Follows the drain until the node's strategy is cleared and its allocations stopped,
/// printing what changes as Nomad's monitor does.
fn monitor(client: &Client, node_id: &str) -> Exit {
    let mut seen: BTreeMap<String, (bool, String)> = BTreeMap::new();
    let mut complete = false;
    loop {
        let node: Node =
            match client.get_json(&format!("/v1/node/{}", escape_segment(node_id)), &[]) {
                Ok((n, _)) => n,
                Err(e) => {
                    ui::err(&format!("Error monitoring node: {e}"));
                    return 1;
                }
            };
        let allocs: Vec<Allocation> = match client.get_json(
            &format!("/v1/node/{}/allocations", escape_segment(node_id)),
            &[],
        ) {
            Ok((a, _)) => a,
            Err(e) => {
                ui::err(&format!("Error monitoring allocations: {e}"));
                return 1;
            }
        };
        for a in &allocs {
            let marked = a.desired_transition.migrate == Some(true);
            let before = seen.get(&a.id).cloned();
            if marked && !before.as_ref().is_some_and(|(m, _)| *m) {
                ui::info(&format!(
                    "{}: Alloc {:?} marked for migration",
                    now_formatted(),
                    a.id
                ));
            }
            if let Some((_, status)) = &before
                && *status != a.client_status
            {
                ui::info(&format!(
                    "{}: Alloc {:?} status {} -> {}",
                    now_formatted(),
                    a.id,
                    status,
                    a.client_status
                ));
            }
            seen.insert(a.id.clone(), (marked, a.client_status.clone()));
        }
        let draining = node.drain_strategy.as_ref().is_some_and(|s| !s.is_null());
        if !draining && !complete {
            complete = true;
            ui::info(&format!(
                "{}: Drain complete for node {node_id}",
                now_formatted()
            ));
        }
        if complete && allocs.iter().all(|a| a.terminal()) {
            ui::info(&format!(
                "{}: All allocations on node {node_id:?} have stopped",
                now_formatted()
            ));
            return 0;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub fn eligibility(client: &Client, args: NodeEligibilityArgs) -> anyhow::Result<Exit> {
    if args.enable == args.disable {
        ui::err("Either the '-enable' or '-disable' flag must be set");
        return Ok(1);
    }
    let node = match resolve_node(client, args.local, args.node.as_deref()) {
        Ok(n) => n,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    let eligibility = if args.enable {
        "eligible"
    } else {
        "ineligible"
    };
    let path = format!("/v1/node/{}/eligibility", escape_segment(&node.id));
    let body = json!({"NodeID": node.id, "Eligibility": eligibility});
    if let Err(e) = client.put_json::<Value>(&path, &[], &body) {
        ui::err(&format!("Error updating scheduling eligibility: {e}"));
        return Ok(1);
    }
    ui::info(&format!(
        "Node {:?} scheduling eligibility set: {eligibility} for scheduling",
        node.id
    ));
    Ok(0)
}
