//! `drover volume snapshot create | delete | list`: CSI volume snapshots through the plugins'
//! controllers, over `/v1/volumes/snapshot`, with Nomad's messages and output
//! (`command/volume_snapshot_*.go`). Secrets go in the `X-Nomad-CSI-Secrets` header (and the
//! create body), as Nomad's API client sends them.

use std::collections::BTreeMap;

use drover_structs::{CsiPluginListStub, CsiSnapshot, CsiSnapshotList, VOLUME_TYPE_CSI};
use serde_json::{Value, json};

use super::super::api::Client;
use super::super::format::{format_list, humanize_ibytes, limit};
use super::super::plugin::plugin_list_table;
use super::super::timefmt::format_time;
use super::super::{Exit, ui};

/// The header carrying CSI secrets.
const SECRETS_HEADER: &str = "X-Nomad-CSI-Secrets";

#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCommand {
    /// Snapshot a volume
    Create {
        /// A parameter for the plugin, KEY=VALUE (repeatable)
        #[arg(long = "parameter", value_name = "KEY=VALUE")]
        parameters: Vec<String>,
        /// A secret for the plugin, KEY=VALUE (repeatable)
        #[arg(long = "secret", value_name = "KEY=VALUE")]
        secrets: Vec<String>,
        /// Display full information for the resulting snapshot
        #[arg(long)]
        verbose: bool,
        /// Volume ID (or prefix)
        volume: String,
        /// The snapshot's name, passed to the plugin (default: the volume ID and the time)
        name: Option<String>,
    },
    /// Delete a snapshot
    Delete {
        /// A secret for the plugin, KEY=VALUE (repeatable)
        #[arg(long = "secret", value_name = "KEY=VALUE")]
        secrets: Vec<String>,
        /// Plugin ID
        plugin: String,
        /// Snapshot ID
        snapshot: String,
    },
    /// Display a list of volume snapshots for a plugin
    List {
        /// Plugin ID (or prefix); may be left out when there is only one plugin
        #[arg(long, default_value = "")]
        plugin: String,
        /// A secret for the plugin, KEY=VALUE (repeatable)
        #[arg(long = "secret", value_name = "KEY=VALUE")]
        secrets: Vec<String>,
        /// How many results to show per page
        #[arg(long = "per-page", default_value_t = 30)]
        per_page: u32,
        /// Where to start pagination
        #[arg(long = "page-token", default_value = "")]
        page_token: String,
        /// Display full information for snapshots
        #[arg(long)]
        verbose: bool,
    },
}

pub fn run(client: &Client, command: SnapshotCommand) -> Exit {
    match command {
        SnapshotCommand::Create {
            parameters,
            secrets,
            verbose,
            volume,
            name,
        } => create(client, &volume, name, &parameters, &secrets, verbose),
        SnapshotCommand::Delete {
            secrets,
            plugin,
            snapshot,
        } => delete(client, &plugin, &snapshot, &secrets),
        SnapshotCommand::List {
            plugin,
            secrets,
            per_page,
            page_token,
            verbose,
        } => list(client, &plugin, &secrets, per_page, &page_token, verbose),
    }
}

/// `-secret key=value` flags as a map; `Err` is the message Nomad prints for a bad one.
fn parse_secrets(flags: &[String]) -> Result<BTreeMap<String, String>, String> {
    flags
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| "Secret must be in the format: -secret key=value".to_string())
        })
        .collect()
}

/// `-parameter key=value` flags; one without `=` is skipped, as Nomad does.
fn parse_parameters(flags: &[String]) -> BTreeMap<String, String> {
    flags
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The header value of `secrets` (Nomad's `SetHeadersFromCSISecrets`).
fn secrets_header(secrets: &BTreeMap<String, String>) -> String {
    secrets
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `client` sending `secrets` in the CSI secrets header (none when there are none).
fn with_secrets(client: &Client, secrets: &BTreeMap<String, String>) -> Option<Client> {
    (!secrets.is_empty()).then(|| client.with_header(SECRETS_HEADER, &secrets_header(secrets)))
}

/// A name for a snapshot asked for without one: the CSI spec requires a name, and the
/// plugin uses it as its idempotency key.
fn default_name(volume_id: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{volume_id}-{secs}")
}

fn create(
    client: &Client,
    prefix: &str,
    name: Option<String>,
    parameters: &[String],
    secrets: &[String],
    verbose: bool,
) -> Exit {
    let secrets = match parse_secrets(secrets) {
        Ok(s) => s,
        Err(message) => {
            ui::err(&message);
            return 1;
        }
    };
    let vol = match super::find_volume(client, prefix) {
        Ok(v) => v,
        Err(message) => {
            ui::err(&message);
            return 1;
        }
    };
    let name = name.unwrap_or_else(|| default_name(&vol.id));
    let snapshot = CsiSnapshot {
        source_volume_id: vol.id.clone(),
        name,
        secrets: Some(secrets.clone()),
        parameters: Some(parse_parameters(parameters)),
        ..Default::default()
    };
    let with_header = with_secrets(client, &secrets);
    let client = with_header.as_ref().unwrap_or(client);
    let body = json!({ "Snapshots": [snapshot] });
    let answer: Value = match client.put_json("/v1/volumes/snapshot", &[], &body) {
        Ok(v) => v,
        Err(e) => {
            ui::err(&format!("Error snapshotting volume: {e}"));
            return 1;
        }
    };
    let snapshots: Vec<CsiSnapshot> =
        match serde_json::from_value(answer.get("Snapshots").cloned().unwrap_or(Value::Null)) {
            Ok(s) => s,
            Err(e) => {
                ui::err(&format!(
                    "Error snapshotting volume: unexpected answer: {e}"
                ));
                return 1;
            }
        };
    ui::out(&snapshot_table(&snapshots, verbose));
    0
}

fn delete(client: &Client, plugin: &str, snapshot: &str, secrets: &[String]) -> Exit {
    let secrets = match parse_secrets(secrets) {
        Ok(s) => s,
        Err(message) => {
            ui::err(&message);
            return 1;
        }
    };
    let with_header = with_secrets(client, &secrets);
    let client = with_header.as_ref().unwrap_or(client);
    let query = [("snapshot_id", snapshot), ("plugin_id", plugin)];
    if let Err(e) = client.delete_json::<Value>("/v1/volumes/snapshot", &query) {
        ui::err(&format!("Error deleting volume: {e}"));
        return 1;
    }
    0
}

/// The one plugin `prefix` names; `Err` is the message to print.
fn find_plugin(client: &Client, prefix: &str) -> Result<String, String> {
    let mut plugins: Vec<CsiPluginListStub> = client
        .get_json(
            "/v1/plugins",
            &[("type", VOLUME_TYPE_CSI), ("prefix", prefix)],
        )
        .map(|(p, _)| p)
        .map_err(|e| format!("Error querying CSI plugins: {e}"))?;
    match plugins.as_slice() {
        [] => Err(format!("No plugins(s) with prefix or ID {prefix:?} found")),
        [one] => Ok(one.id.clone()),
        many if many.iter().any(|p| p.id == prefix) => Ok(prefix.to_string()),
        _ => {
            plugins.sort_by(|a, b| a.id.cmp(&b.id));
            Err(format!(
                "Prefix matched multiple plugins\n\n{}",
                plugin_list_table(&plugins, 30)
            ))
        }
    }
}

fn list(
    client: &Client,
    plugin: &str,
    secrets: &[String],
    per_page: u32,
    page_token: &str,
    verbose: bool,
) -> Exit {
    let plugin_id = match find_plugin(client, plugin) {
        Ok(id) => id,
        Err(message) => {
            ui::err(&message);
            return 1;
        }
    };
    let secrets = match parse_secrets(secrets) {
        Ok(s) => s,
        Err(message) => {
            ui::err(&message);
            return 1;
        }
    };
    let with_header = with_secrets(client, &secrets);
    let client = with_header.as_ref().unwrap_or(client);
    let per_page = per_page.to_string();
    let mut query = vec![
        ("plugin_id", plugin_id.as_str()),
        ("per_page", per_page.as_str()),
    ];
    if !page_token.is_empty() {
        query.push(("next_token", page_token));
    }
    let page: CsiSnapshotList = match client.get_json("/v1/volumes/snapshot", &query) {
        Ok((page, _)) => page,
        Err(e) => {
            ui::err(&format!(
                "Error querying CSI external snapshots for plugin {plugin_id:?}: {e}"
            ));
            return 1;
        }
    };
    if page.snapshots.is_empty() {
        return 0;
    }
    ui::out(&snapshot_table(&page.snapshots, verbose));
    if !page.next_token.is_empty() {
        let args: Vec<String> = std::env::args().collect();
        ui::out(&format!(
            "\nResults have been paginated. To get the next page run:\n{} -page-token {}",
            args_without_page_token(&args),
            page.next_token
        ));
    }
    0
}

/// Nomad's `argsWithoutPageToken`: the command line without its `-page-token` flag.
fn args_without_page_token(args: &[String]) -> String {
    let mut kept = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let flag = arg.trim_start_matches('-');
        if arg.starts_with('-') && flag.starts_with("page-token") {
            i += if arg.contains('=') { 1 } else { 2 };
            continue;
        }
        kept.push(arg.as_str());
        i += 1;
    }
    kept.join(" ")
}

/// Nomad's `csiFormatSnapshots`.
fn snapshot_table(snapshots: &[CsiSnapshot], verbose: bool) -> String {
    let length = if verbose { 30 } else { 12 };
    let mut rows = vec!["Snapshot ID|Volume ID|Size|Create Time|Ready?".to_string()];
    for s in snapshots {
        rows.push(format!(
            "{}|{}|{}|{}|{}",
            s.id,
            limit(&s.external_source_volume_id, length),
            humanize_ibytes(u64::try_from(s.size_bytes).unwrap_or(0)),
            format_time(s.create_time.saturating_mul(1_000_000_000)),
            s.is_ready
        ));
    }
    format_list(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(id: &str, volume: &str) -> CsiSnapshot {
        CsiSnapshot {
            id: id.into(),
            external_source_volume_id: volume.into(),
            size_bytes: 10 << 20,
            create_time: 0,
            is_ready: true,
            ..Default::default()
        }
    }

    #[test]
    fn snapshot_table_has_nomads_columns_and_cuts_volume_ids() {
        let table = snapshot_table(&[snap("s1", "0123456789abcdefghij")], false);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            [
                "Snapshot", "ID", "Volume", "ID", "Size", "Create", "Time", "Ready?"
            ]
        );
        // A time at the epoch is blank, which the table shows as <none>.
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["s1", "0123456789ab", "10", "MiB", "<none>", "true"]
        );
        let verbose = snapshot_table(&[snap("s1", "0123456789abcdefghij")], true);
        assert!(verbose.contains("0123456789abcdefghij"), "{verbose}");
    }

    #[test]
    fn secrets_need_key_value_and_parameters_skip_bad_ones() {
        assert_eq!(
            parse_secrets(&["a=1".into(), "b=x=y".into()]).unwrap(),
            BTreeMap::from([
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "x=y".to_string())
            ])
        );
        assert_eq!(
            parse_secrets(&["nokey".into()]).unwrap_err(),
            "Secret must be in the format: -secret key=value"
        );
        assert_eq!(
            parse_parameters(&["k=v".into(), "bad".into()]),
            BTreeMap::from([("k".to_string(), "v".to_string())])
        );
        let secrets = parse_secrets(&["b=2".into(), "a=1".into()]).unwrap();
        assert_eq!(secrets_header(&secrets), "a=1,b=2");
    }

    #[test]
    fn pagination_hint_drops_the_page_token() {
        let args: Vec<String> = [
            "drover",
            "volume",
            "snapshot",
            "list",
            "-page-token",
            "5",
            "--page-token=6",
            "-plugin",
            "hostpath",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            args_without_page_token(&args),
            "drover volume snapshot list -plugin hostpath"
        );
    }

    #[test]
    fn default_names_start_with_the_volume() {
        assert!(default_name("db").starts_with("db-"));
    }
}
