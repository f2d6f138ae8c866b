//! `drover volume register | create | deregister | delete | detach | status | snapshot`: CSI
//! volumes over `/v1/volumes` and `/v1/volume/csi/...` (snapshots: `snapshot`), with Nomad's
//! messages and output layout.

use drover_structs::{
    CsiMountOptions, CsiPluginListStub, CsiVolume, CsiVolumeExternalList, CsiVolumeListStub,
    VOLUME_TYPE_CSI,
};
use serde_json::{Value, json};

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID, format_kv, format_list, limit};
use super::job_status::alloc_stub_table;
use super::lookup::{self, Match};
use super::{ConnArgs, Exit, ui};

mod snapshot;

#[derive(Debug, clap::Args)]
pub struct VolumeCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: VolumeCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum VolumeCommand {
    /// Create or update a volume from a specification file ("-" reads stdin)
    Register {
        /// Volume specification file (HCL or JSON)
        file: String,
    },
    /// Create a volume through its plugin's controller, then register it
    Create {
        /// Volume specification file (HCL or JSON)
        file: String,
    },
    /// Remove an unused volume
    Deregister {
        /// Deregister a volume whose allocations all ended but still hold claims
        #[arg(long)]
        force: bool,
        /// Volume ID (or prefix)
        id: String,
    },
    /// Delete a volume through its plugin's controller, then deregister it
    Delete {
        /// A secret for the plugin, KEY=VALUE (repeatable)
        #[arg(long = "secret", value_name = "KEY=VALUE")]
        secrets: Vec<String>,
        /// Volume ID (or prefix)
        id: String,
    },
    /// Detach a volume from a client node
    Detach {
        /// Volume ID (or prefix)
        volume: String,
        /// Node ID (or prefix)
        node: String,
    },
    /// List volumes, or show one volume's details
    Status(VolumeStatusArgs),
    /// Create, delete or list snapshots of volumes
    Snapshot {
        #[command(subcommand)]
        command: snapshot::SnapshotCommand,
    },
}

#[derive(Debug, clap::Args)]
pub struct VolumeStatusArgs {
    /// Volume type (only "csi")
    #[arg(long = "type", default_value = VOLUME_TYPE_CSI)]
    pub kind: String,
    /// Show full identifiers
    #[arg(long)]
    pub verbose: bool,
    /// Only show the volume's basic information
    #[arg(long)]
    pub short: bool,
    /// Print the volume (or volume list) as JSON
    #[arg(long)]
    pub json: bool,
    /// Volume ID (or prefix); omit to list all volumes
    pub id: Option<String>,
}

pub fn run(cli: VolumeCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    Ok(match cli.command {
        VolumeCommand::Register { file } => register(&client, &file, false),
        VolumeCommand::Create { file } => register(&client, &file, true),
        VolumeCommand::Deregister { force, id } => deregister(&client, &id, force),
        VolumeCommand::Delete { secrets, id } => delete(&client, &id, &secrets),
        VolumeCommand::Detach { volume, node } => detach(&client, &volume, &node),
        VolumeCommand::Status(args) => status(&client, &args)?,
        VolumeCommand::Snapshot { command } => snapshot::run(&client, command),
    })
}

/// `volume register FILE` / `volume create FILE`.
fn register(client: &Client, file: &str, create: bool) -> Exit {
    let spec = match super::volume_spec::load(file) {
        Ok(s) => s,
        Err(message) => {
            ui::err(&message);
            return 1;
        }
    };
    if spec.kind != VOLUME_TYPE_CSI {
        ui::err(&format!("Error unknown volume type: {}", spec.kind));
        return 1;
    }
    let client = match spec.volume.namespace.as_str() {
        "" => client.in_namespace(client.namespace().unwrap_or("default")),
        ns => client.in_namespace(ns),
    };
    let id = spec.volume.id.clone();
    let body = json!({ "Volumes": [spec.volume] });
    if !create {
        let path = format!("/v1/volume/csi/{}", escape_segment(&id));
        if let Err(e) = client.put_json::<Value>(&path, &[], &body) {
            ui::err(&format!("Error registering volume: {e}"));
            return 1;
        }
        return 0;
    }
    let path = format!("/v1/volume/csi/{}/create", escape_segment(&id));
    let created: Value = match client.put_json(&path, &[], &body) {
        Ok(v) => v,
        Err(e) => {
            ui::err(&format!("Error creating volume: {e}"));
            return 1;
        }
    };
    for vol in created["Volumes"].as_array().into_iter().flatten() {
        ui::out(&format!(
            "Created external volume {} with ID {}",
            vol["ExternalID"].as_str().unwrap_or(""),
            vol["ID"].as_str().unwrap_or("")
        ));
    }
    0
}

/// Resolves a volume id prefix to one volume's stub. `Err` is the message to print.
fn find_volume(client: &Client, prefix: &str) -> Result<CsiVolumeListStub, String> {
    let vols: Vec<CsiVolumeListStub> = client
        .get_json(
            "/v1/volumes",
            &[("type", VOLUME_TYPE_CSI), ("prefix", prefix)],
        )
        .map(|(v, _)| v)
        .map_err(|e| format!("Error querying volumes: {e}"))?;
    match lookup::resolve(vols, prefix, |v| v.id.as_str()) {
        Match::One(v) => Ok(v),
        Match::None => Err(format!("No volumes(s) with prefix or ID {prefix:?} found")),
        Match::Many(mut vols) => {
            vols.sort_by(|a, b| a.id.cmp(&b.id));
            Err(format!(
                "Prefix matched multiple volumes\n\n{}",
                volume_list_table(&vols, FULL_ID)
            ))
        }
    }
}

fn deregister(client: &Client, prefix: &str, force: bool) -> Exit {
    let vol = match find_volume(client, prefix) {
        Ok(v) => v,
        Err(message) => {
            ui::err(&message);
            return 1;
        }
    };
    let path = format!("/v1/volume/csi/{}", escape_segment(&vol.id));
    let force = if force { "true" } else { "false" };
    if let Err(e) = client.delete_json::<Value>(&path, &[("force", force)]) {
        ui::err(&format!("Error deregistering volume: {e}"));
        return 1;
    }
    ui::out(&format!("Successfully deregistered volume {:?}!", vol.id));
    0
}

fn delete(client: &Client, prefix: &str, secrets: &[String]) -> Exit {
    if let Some(bad) = secrets.iter().find(|s| !s.contains('=')) {
        ui::err(&format!(
            "Secret must be in the format: -secret key=value, got {bad:?}"
        ));
        return 1;
    }
    let vol = match find_volume(client, prefix) {
        Ok(v) => v,
        Err(message) => {
            ui::err(&message);
            return 1;
        }
    };
    let path = format!("/v1/volume/csi/{}/delete", escape_segment(&vol.id));
    let joined = secrets.join(",");
    let query: Vec<(&str, &str)> = if joined.is_empty() {
        Vec::new()
    } else {
        vec![("secrets", joined.as_str())]
    };
    if let Err(e) = client.delete_json::<Value>(&path, &query) {
        ui::err(&format!("Error deleting volume: {e}"));
        return 1;
    }
    ui::out(&format!("Successfully deleted volume {:?}!", vol.id));
    0
}

fn detach(client: &Client, volume: &str, node: &str) -> Exit {
    let vol = match find_volume(client, volume) {
        Ok(v) => v,
        Err(message) => {
            ui::err(&message);
            return 1;
        }
    };
    // A node that is gone (garbage collected) is still detached by the id given.
    let node_id = match super::node::find_node(client, node, false) {
        Ok(n) => n.id,
        Err(message) if message.starts_with("Prefix matched multiple nodes") => {
            ui::err(&message);
            return 1;
        }
        Err(_) => node.to_string(),
    };
    let path = format!("/v1/volume/csi/{}/detach", escape_segment(&vol.id));
    if let Err(e) = client.delete_json::<Value>(&path, &[("node", node_id.as_str())]) {
        ui::err(&format!("Error detaching volume: {e}"));
        return 1;
    }
    0
}

/// Nomad's CSI volume list (`csiFormatSortedVolumes`).
pub fn volume_list_table(vols: &[CsiVolumeListStub], length: usize) -> String {
    let mut rows = vec!["ID|Name|Plugin ID|Schedulable|Access Mode".to_string()];
    for v in vols {
        rows.push(format!(
            "{}|{}|{}|{}|{}",
            limit(&v.id, length),
            v.name,
            v.plugin_id,
            v.schedulable,
            v.access_mode
        ));
    }
    format_list(&rows)
}

fn status(client: &Client, args: &VolumeStatusArgs) -> anyhow::Result<Exit> {
    if args.kind != VOLUME_TYPE_CSI {
        ui::err(&format!("Error unknown volume type: {}", args.kind));
        return Ok(1);
    }
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    let Some(prefix) = args.id.as_deref() else {
        if !args.json {
            ui::out("Container Storage Interface");
        }
        let mut vols: Vec<CsiVolumeListStub> =
            match client.get_json("/v1/volumes", &[("type", VOLUME_TYPE_CSI)]) {
                Ok((v, _)) => v,
                Err(e) => {
                    ui::err(&format!("Error querying volumes: {e}"));
                    return Ok(1);
                }
            };
        vols.sort_by(|a, b| a.id.cmp(&b.id));
        if args.json {
            ui::out(&super::job::to_indented_json(&serde_json::to_value(&vols)?));
        } else if vols.is_empty() {
            ui::err("No CSI volumes");
        } else {
            ui::out(&volume_list_table(&vols, length));
        }
        if args.verbose && !args.json {
            return external_volumes(client, length);
        }
        return Ok(0);
    };
    let stub = match find_volume(client, prefix) {
        Ok(v) => v,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let vol: CsiVolume =
        match client.get_json(&format!("/v1/volume/csi/{}", escape_segment(&stub.id)), &[]) {
            Ok((v, _)) => v,
            Err(e) => {
                ui::err(&format!("Error querying volume: {e}"));
                return Ok(1);
            }
        };
    if args.json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(&vol)?));
        return Ok(0);
    }
    ui::out(&format_volume(&vol, args.short, args.verbose, length));
    Ok(0)
}

/// `volume status -verbose`: the volumes each controller's storage provider knows, registered
/// or not (Nomad's `ListExternal`), for the plugins whose controllers can list them.
fn external_volumes(client: &Client, length: usize) -> anyhow::Result<Exit> {
    let plugins: Vec<CsiPluginListStub> =
        match client.get_json("/v1/plugins", &[("type", VOLUME_TYPE_CSI)]) {
            Ok((p, _)) => p,
            Err(e) => {
                ui::err(&format!("Error querying CSI plugins: {e}"));
                return Ok(1);
            }
        };
    let mut code = 0;
    for plugin in plugins.iter().filter(|p| p.controller_required) {
        let list: CsiVolumeExternalList =
            match client.get_json("/v1/volumes/external", &[("plugin_id", &plugin.id)]) {
                Ok((l, _)) => l,
                Err(e) if e.to_string().contains("does not support listing volumes") => continue,
                Err(e) => {
                    ui::err(&format!(
                        "Error querying CSI external volumes for plugin {:?}: {e}",
                        plugin.id
                    ));
                    code = 1;
                    continue;
                }
            };
        if list.volumes.is_empty() {
            continue;
        }
        let mut rows = vec!["External ID|Condition|Nodes".to_string()];
        for v in &list.volumes {
            let condition = if v.is_abnormal {
                format!("Abnormal ({})", v.status)
            } else {
                "OK".to_string()
            };
            rows.push(format!(
                "{}|{}|{}",
                limit(&v.external_id, length),
                limit(&condition, 20),
                v.published_external_node_ids.join(",")
            ));
        }
        ui::out(&format!("\nExternal volumes of plugin {:?}", plugin.id));
        ui::out(&format_list(&rows));
    }
    Ok(code)
}

/// Nomad's `csiVolMountOption`.
fn mount_options_text(opts: Option<&CsiMountOptions>) -> String {
    let Some(o) = opts else {
        return "<none>".into();
    };
    let mut out = String::new();
    if !o.fs_type.is_empty() {
        out = format!("fs_type: {}", o.fs_type);
    }
    if !o.mount_flags.is_empty() {
        out = format!("{out} flags: {}", o.mount_flags.join(", "));
    }
    out
}

/// `volume status ID` (Nomad's `formatBasic`).
fn format_volume(vol: &CsiVolume, short: bool, verbose: bool, length: usize) -> String {
    let rows = [
        format!("ID|{}", vol.id),
        format!("Name|{}", vol.name),
        format!("External ID|{}", vol.external_id),
        format!("Plugin ID|{}", vol.plugin_id),
        format!("Provider|{}", vol.provider),
        format!("Version|{}", vol.provider_version),
        format!("Schedulable|{}", vol.schedulable),
        format!("Controllers Healthy|{}", vol.controllers_healthy),
        format!("Controllers Expected|{}", vol.controllers_expected),
        format!("Nodes Healthy|{}", vol.nodes_healthy),
        format!("Nodes Expected|{}", vol.nodes_expected),
        format!("Access Mode|{}", vol.access_mode),
        format!("Attachment Mode|{}", vol.attachment_mode),
        format!(
            "Mount Options|{}",
            mount_options_text(vol.mount_options.as_ref())
        ),
        format!("Namespace|{}", vol.namespace),
    ];
    let basic = format_kv(&rows);
    if short {
        return basic;
    }
    let allocs = vol.allocations.clone().unwrap_or_default();
    format!(
        "{basic}\n\nAllocations\n{}",
        alloc_stub_table(&allocs, verbose, length)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::CsiAccessMode;

    #[test]
    fn list_table_matches_nomads_columns() {
        let stub = CsiVolumeListStub {
            id: "mysql-0123456789".into(),
            name: "mysql".into(),
            plugin_id: "hostpath".into(),
            schedulable: true,
            access_mode: CsiAccessMode::SingleNodeWriter,
            ..Default::default()
        };
        assert_eq!(
            volume_list_table(&[stub], SHORT_ID),
            "ID        Name   Plugin ID  Schedulable  Access Mode\n\
             mysql-01  mysql  hostpath   true         single-node-writer"
        );
        let unclaimed = CsiVolumeListStub {
            id: "db".into(),
            ..Default::default()
        };
        assert!(volume_list_table(&[unclaimed], SHORT_ID).ends_with("false        <none>"));
    }

    #[test]
    fn volume_detail_lists_basics_then_allocations() {
        let vol = CsiVolume {
            id: "mysql".into(),
            name: "mysql".into(),
            plugin_id: "hostpath".into(),
            namespace: "default".into(),
            schedulable: true,
            nodes_healthy: 1,
            ..Default::default()
        };
        let text = format_volume(&vol, false, false, SHORT_ID);
        assert!(text.starts_with("ID                   = mysql\n"), "{text}");
        assert!(text.contains("\nExternal ID          = <none>\n"), "{text}");
        assert!(text.contains("\nMount Options        = <none>\n"), "{text}");
        assert!(text.contains("\nNodes Healthy        = 1\n"), "{text}");
        assert!(
            text.ends_with("Namespace            = default\n\nAllocations\nNo allocations placed"),
            "{text}"
        );
        assert!(!format_volume(&vol, true, false, SHORT_ID).contains("Allocations"));
    }

    #[test]
    fn mount_options_render_like_nomad() {
        assert_eq!(mount_options_text(None), "<none>");
        let o = CsiMountOptions {
            fs_type: "ext4".into(),
            mount_flags: vec!["noatime".into(), "ro".into()],
        };
        assert_eq!(
            mount_options_text(Some(&o)),
            "fs_type: ext4 flags: noatime, ro"
        );
    }
}
