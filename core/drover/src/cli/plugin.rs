//! `drover plugin status [ID]`: CSI plugins over `/v1/plugins` and `/v1/plugin/csi/:id`, in
//! Nomad's layout.

use std::collections::BTreeMap;

use drover_structs::{CsiInfo, CsiPlugin, CsiPluginListStub};

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID, format_kv, format_list, limit};
use super::job_status::alloc_stub_table;
use super::lookup::{self, Match};
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct PluginCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: PluginCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// List plugins, or show one plugin's details
    Status(PluginStatusArgs),
}

#[derive(Debug, clap::Args)]
pub struct PluginStatusArgs {
    /// Plugin type (only "csi")
    #[arg(long = "type", default_value = "csi")]
    pub kind: String,
    /// Show full identifiers and the plugin's capabilities
    #[arg(long)]
    pub verbose: bool,
    /// Only show the plugin's basic information
    #[arg(long)]
    pub short: bool,
    /// Print the plugin (or plugin list) as JSON
    #[arg(long)]
    pub json: bool,
    /// Plugin ID (or prefix); omit to list all plugins
    pub id: Option<String>,
}

pub fn run(cli: PluginCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        PluginCommand::Status(args) => status(&client, &args),
    }
}

/// Nomad's CSI plugin list (`csiFormatPlugins`).
pub fn plugin_list_table(plugins: &[CsiPluginListStub], length: usize) -> String {
    let mut rows =
        vec!["ID|Provider|Controllers Healthy/Expected|Nodes Healthy/Expected".to_string()];
    for p in plugins {
        rows.push(format!(
            "{}|{}|{}/{}|{}/{}",
            limit(&p.id, length),
            p.provider,
            p.controllers_healthy,
            p.controllers_expected,
            p.nodes_healthy,
            p.nodes_expected
        ));
    }
    format_list(&rows)
}

fn status(client: &Client, args: &PluginStatusArgs) -> anyhow::Result<Exit> {
    if args.kind != "csi" {
        ui::err(&format!("Unsupported plugin type: {}", args.kind));
        return Ok(1);
    }
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    let mut plugins: Vec<CsiPluginListStub> =
        match client.get_json("/v1/plugins", &[("type", "csi")]) {
            Ok((p, _)) => p,
            Err(e) => {
                ui::err(&format!("Error querying CSI plugins: {e}"));
                return Ok(1);
            }
        };
    plugins.sort_by(|a, b| a.id.cmp(&b.id));
    let Some(prefix) = args.id.as_deref() else {
        if args.json {
            ui::out(&super::job::to_indented_json(&serde_json::to_value(
                &plugins,
            )?));
        } else {
            ui::out("Container Storage Interface");
            if plugins.is_empty() {
                ui::err("No CSI plugins");
            } else {
                ui::out(&plugin_list_table(&plugins, length));
            }
        }
        return Ok(0);
    };
    let stub = match lookup::resolve(plugins, prefix, |p| p.id.as_str()) {
        Match::One(p) => p,
        Match::None => {
            ui::err(&format!("No plugins(s) with prefix or ID {prefix:?} found"));
            return Ok(1);
        }
        Match::Many(plugins) => {
            ui::err(&format!(
                "Prefix matched multiple plugins\n\n{}",
                plugin_list_table(&plugins, length)
            ));
            return Ok(1);
        }
    };
    let plugin: CsiPlugin =
        match client.get_json(&format!("/v1/plugin/csi/{}", escape_segment(&stub.id)), &[]) {
            Ok((p, _)) => p,
            Err(e) => {
                ui::err(&format!("Error querying plugin: {e}"));
                return Ok(1);
            }
        };
    if args.json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(
            &plugin,
        )?));
        return Ok(0);
    }
    ui::out(&format_plugin(&plugin, args.short, args.verbose, length));
    Ok(0)
}

/// Nomad's controller capability names, from any controller (they are alike).
fn controller_caps(controllers: &BTreeMap<String, CsiInfo>) -> Vec<&'static str> {
    let Some(c) = controllers
        .values()
        .find_map(|c| c.controller_info.as_ref())
    else {
        return Vec::new();
    };
    let mut caps: Vec<&str> = [
        (c.supports_create_delete, "CREATE_DELETE_VOLUME"),
        (c.supports_attach_detach, "CONTROLLER_ATTACH_DETACH"),
        (c.supports_list_volumes, "LIST_VOLUMES"),
        (c.supports_get_capacity, "GET_CAPACITY"),
        (c.supports_create_delete_snapshot, "CREATE_DELETE_SNAPSHOT"),
        (c.supports_list_snapshots, "LIST_SNAPSHOTS"),
        (c.supports_clone, "CLONE_VOLUME"),
        (c.supports_read_only_attach, "ATTACH_READONLY"),
        (c.supports_expand, "EXPAND_VOLUME"),
        (
            c.supports_list_volumes_attached_nodes,
            "LIST_VOLUMES_PUBLISHED_NODES",
        ),
        (c.supports_condition, "VOLUME_CONDITION"),
        (c.supports_get, "GET_VOLUME"),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| name)
    .collect();
    caps.sort_unstable();
    caps
}

/// Nomad's node capability names, from any node instance.
fn node_caps(nodes: &BTreeMap<String, CsiInfo>) -> Vec<&'static str> {
    let Some(info) = nodes.values().find(|n| n.node_info.is_some()) else {
        return Vec::new();
    };
    let mut caps = Vec::new();
    if info.requires_topologies {
        caps.push("VOLUME_ACCESSIBILITY_CONSTRAINTS");
    }
    if let Some(n) = &info.node_info {
        for (on, name) in [
            (n.requires_node_stage_volume, "STAGE_UNSTAGE_VOLUME"),
            (n.supports_stats, "GET_VOLUME_STATS"),
            (n.supports_expand, "EXPAND_VOLUME"),
            (n.supports_condition, "VOLUME_CONDITION"),
        ] {
            if on {
                caps.push(name);
            }
        }
    }
    caps.sort_unstable();
    caps
}

/// `plugin status ID` (Nomad's `csiFormatPlugin`).
fn format_plugin(p: &CsiPlugin, short: bool, verbose: bool, length: usize) -> String {
    let rows = [
        format!("ID|{}", p.id),
        format!("Provider|{}", p.provider),
        format!("Version|{}", p.version),
        format!("Controllers Healthy|{}", p.controllers_healthy),
        format!("Controllers Expected|{}", p.controllers_expected),
        format!("Nodes Healthy|{}", p.nodes_healthy),
        format!("Nodes Expected|{}", p.nodes_expected),
    ];
    let mut out = format_kv(&rows);
    if short {
        return out;
    }
    if verbose {
        let caps = controller_caps(&p.controllers);
        if !caps.is_empty() {
            out.push_str("\n\nController Capabilities\n  ");
            out.push_str(&caps.join("\n  "));
        }
        let caps = node_caps(&p.nodes);
        if !caps.is_empty() {
            out.push_str("\n\nNode Capabilities\n  ");
            out.push_str(&caps.join("\n  "));
        }
        let mut topo = vec!["Node ID|Accessible Topology".to_string()];
        for (node_id, info) in &p.nodes {
            if let Some(t) = info
                .node_info
                .as_ref()
                .and_then(|n| n.accessible_topology.as_ref())
            {
                let segments: Vec<String> =
                    t.segments.iter().map(|(k, v)| format!("{k}={v}")).collect();
                topo.push(format!(
                    "{}|{}",
                    limit(node_id, SHORT_ID),
                    segments.join(",")
                ));
            }
        }
        if topo.len() > 1 {
            out.push_str("\n\nAccessible Topologies\n");
            out.push_str(&format_list(&topo));
        }
    }
    let allocs = p.allocations.clone().unwrap_or_default();
    out.push_str("\n\nAllocations\n");
    out.push_str(&alloc_stub_table(&allocs, verbose, length));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{CsiControllerInfo, CsiNodeInfo};

    #[test]
    fn list_shows_healthy_over_expected() {
        let stub = CsiPluginListStub {
            id: "hostpath".into(),
            provider: "hostpath.csi.k8s.io".into(),
            controllers_healthy: 0,
            controllers_expected: 0,
            nodes_healthy: 1,
            nodes_expected: 2,
            ..Default::default()
        };
        assert_eq!(
            plugin_list_table(&[stub], SHORT_ID),
            "ID        Provider             Controllers Healthy/Expected  Nodes Healthy/Expected\n\
             hostpath  hostpath.csi.k8s.io  0/0                           1/2"
        );
    }

    #[test]
    fn verbose_detail_lists_capabilities_sorted() {
        let mut p = CsiPlugin::new("hostpath", 1);
        p.controllers.insert(
            "n1".into(),
            CsiInfo {
                controller_info: Some(CsiControllerInfo {
                    supports_create_delete: true,
                    supports_attach_detach: true,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        p.nodes.insert(
            "n1".into(),
            CsiInfo {
                node_info: Some(CsiNodeInfo {
                    requires_node_stage_volume: true,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        let text = format_plugin(&p, false, true, FULL_ID);
        assert!(
            text.starts_with("ID                   = hostpath\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "\n\nController Capabilities\n  CONTROLLER_ATTACH_DETACH\n  CREATE_DELETE_VOLUME\n\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("Node Capabilities\n  STAGE_UNSTAGE_VOLUME\n"),
            "{text}"
        );
        assert!(
            text.ends_with("Allocations\nNo allocations placed"),
            "{text}"
        );
        assert!(!format_plugin(&p, false, false, SHORT_ID).contains("Capabilities"));
    }
}
