//! `drover namespace list|status|inspect|apply|delete`: namespaces over `/v1/namespaces` and
//! `/v1/namespace/:name`, with Nomad's output and messages. `apply` takes a name (with
//! `-description`) or a spec file (HCL or JSON, `-` for stdin).

use std::io::Read;

use drover_structs::{Namespace, NamespaceCapabilities};
use serde_json::Value;

use super::api::{Client, escape_segment};
use super::format::{format_kv, format_list};
use super::lookup::{self, Match};
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct NamespaceCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: NamespaceCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum NamespaceCommand {
    /// List namespaces
    List {
        /// Print the namespaces as JSON
        #[arg(long)]
        json: bool,
    },
    /// Display a namespace's details
    Status {
        /// Print the namespace as JSON
        #[arg(long)]
        json: bool,
        /// Namespace name (or prefix)
        namespace: String,
    },
    /// Print a namespace as JSON
    Inspect {
        /// Namespace name (or prefix)
        namespace: String,
    },
    /// Create or update a namespace, from a name or a spec file
    Apply {
        /// The namespace's description (with a name)
        #[arg(long)]
        description: Option<String>,
        /// Accepted for Nomad compatibility; quotas are not supported
        #[arg(long)]
        quota: Option<String>,
        /// Read the spec file as JSON
        #[arg(long)]
        json: bool,
        /// A namespace name, or a spec file ("-" reads stdin)
        input: String,
    },
    /// Delete a namespace
    Delete {
        /// Namespace name
        namespace: String,
    },
}

pub fn run(cli: NamespaceCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        NamespaceCommand::List { json } => list(&client, json),
        NamespaceCommand::Status { json, namespace } => status(&client, &namespace, json),
        NamespaceCommand::Inspect { namespace } => status(&client, &namespace, true),
        NamespaceCommand::Apply {
            description,
            quota,
            json,
            input,
        } => apply(&client, &input, description, quota, json),
        NamespaceCommand::Delete { namespace } => {
            let path = format!("/v1/namespace/{}", escape_segment(&namespace));
            match client.delete_json::<Value>(&path, &[]) {
                Ok(_) => {
                    ui::out(&format!("Successfully deleted namespace {namespace:?}!"));
                    Ok(0)
                }
                Err(e) => {
                    ui::err(&format!("Error deleting namespace: {e}"));
                    Ok(1)
                }
            }
        }
    }
}

fn fetch_all(client: &Client, prefix: &str) -> Result<Vec<Namespace>, String> {
    client
        .get_json::<Vec<Namespace>>("/v1/namespaces", &[("prefix", prefix)])
        .map(|(list, _)| list)
        .map_err(|e| format!("Error retrieving namespaces: {e}"))
}

/// Nomad's `formatNamespaces`: `Name|Description`, by name.
fn format_namespaces(list: &[Namespace]) -> String {
    let mut list: Vec<&Namespace> = list.iter().collect();
    list.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rows = vec!["Name|Description".to_string()];
    rows.extend(list.iter().map(|n| format!("{}|{}", n.name, n.description)));
    format_list(&rows)
}

fn list(client: &Client, json: bool) -> anyhow::Result<Exit> {
    let list = match fetch_all(client, "") {
        Ok(l) => l,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    if json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(&list)?));
    } else if list.is_empty() {
        ui::out("No namespaces found");
    } else {
        ui::out(&format_namespaces(&list));
    }
    Ok(0)
}

/// Nomad's `namespace status` body.
fn format_status(ns: &Namespace) -> String {
    let caps = ns.capabilities.clone().unwrap_or_default();
    let enabled = caps.enabled_task_drivers.unwrap_or_default();
    let disabled = caps.disabled_task_drivers.unwrap_or_default();
    let mut out = format_kv(&[
        format!("Name|{}", ns.name),
        format!("Description|{}", ns.description),
        format!("Quota|{}", ns.quota),
        format!(
            "EnabledDrivers|{}",
            if enabled.is_empty() {
                "*".to_string()
            } else {
                enabled.join(",")
            }
        ),
        format!("DisabledDrivers|{}", disabled.join(",")),
    ]);
    if let Some(meta) = ns.meta.as_ref().filter(|m| !m.is_empty()) {
        let rows: Vec<String> = meta.iter().map(|(k, v)| format!("{k}|{v}")).collect();
        out.push_str("\n\nMetadata\n");
        out.push_str(&format_kv(&rows));
    }
    out
}

fn status(client: &Client, given: &str, json: bool) -> anyhow::Result<Exit> {
    let list = match fetch_all(client, given) {
        Ok(l) => l,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    let ns = match lookup::resolve(list, given, |n: &Namespace| n.name.as_str()) {
        Match::One(n) => n,
        Match::None => {
            ui::err(&format!(
                "Error retrieving namespaces: Namespace {given:?} matched no namespaces"
            ));
            return Ok(1);
        }
        Match::Many(many) => {
            ui::err(&format!(
                "Prefix matched multiple namespaces\n\n{}",
                format_namespaces(&many)
            ));
            return Ok(1);
        }
    };
    if json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(&ns)?));
    } else {
        ui::out(&format_status(&ns));
    }
    Ok(0)
}

/// Reads a namespace spec file: HCL as Nomad writes it (`name`, `description`,
/// `capabilities { enabled_task_drivers disabled_task_drivers ... }`, `meta { }`) or JSON in
/// the API's shape.
fn read_spec(input: &str, json: bool) -> Result<Namespace, String> {
    let (src, file) = if input == "-" {
        let mut src = String::new();
        std::io::stdin()
            .read_to_string(&mut src)
            .map_err(|e| format!("Failed to read stdin: {e}"))?;
        (src, "stdin".to_string())
    } else {
        let src =
            std::fs::read_to_string(input).map_err(|e| format!("Failed to read file: {e}"))?;
        (src, input.to_string())
    };
    if json || src.trim_start().starts_with('{') {
        return serde_json::from_str(&src).map_err(|e| format!("Failed to parse quota: {e}"));
    }
    let tree = super::volume_spec::hcl_tree(&src, &file, "Error parsing quota specification")?;
    namespace_from_tree(&tree, &file)
}

fn strings(v: Option<&Value>, at: &str) -> Result<Option<Vec<String>>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{at}: expected a list of strings"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(format!("{at}: expected a list of strings")),
    }
}

/// The HCL tree of a namespace spec as a namespace; unknown keys are errors naming them.
fn namespace_from_tree(tree: &Value, file: &str) -> Result<Namespace, String> {
    let err = |m: String| format!("Error parsing quota specification: {file}: {m}");
    let obj = tree
        .as_object()
        .ok_or_else(|| err("expected a namespace".into()))?;
    let mut ns = Namespace::default();
    for (k, v) in obj {
        let text = |v: &Value| -> Result<String, String> {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| err(format!("{k}: expected a string")))
        };
        match k.as_str() {
            "name" => ns.name = text(v)?,
            "description" => ns.description = text(v)?,
            "quota" => ns.quota = text(v)?,
            "capabilities" => {
                let block = v
                    .as_array()
                    .and_then(|b| b.first())
                    .and_then(Value::as_object)
                    .ok_or_else(|| err("capabilities: expected a block".into()))?;
                let mut caps = NamespaceCapabilities::default();
                for (ck, cv) in block {
                    let at = format!("capabilities.{ck}");
                    let list = strings(Some(cv), &at).map_err(err)?;
                    match ck.as_str() {
                        "enabled_task_drivers" => caps.enabled_task_drivers = list,
                        "disabled_task_drivers" => caps.disabled_task_drivers = list,
                        "enabled_network_modes" => caps.enabled_network_modes = list,
                        "disabled_network_modes" => caps.disabled_network_modes = list,
                        other => return Err(err(format!("invalid key {other:?} in capabilities"))),
                    }
                }
                ns.capabilities = Some(caps);
            }
            "meta" => {
                let block = v
                    .as_array()
                    .and_then(|b| b.first())
                    .and_then(Value::as_object)
                    .ok_or_else(|| err("meta: expected a block".into()))?;
                let mut meta = std::collections::BTreeMap::new();
                for (mk, mv) in block {
                    let value = mv
                        .as_str()
                        .ok_or_else(|| err(format!("meta.{mk}: expected a string")))?;
                    meta.insert(mk.clone(), value.to_string());
                }
                ns.meta = Some(meta);
            }
            other => return Err(err(format!("invalid key {other:?}"))),
        }
    }
    Ok(ns)
}

fn apply(
    client: &Client,
    input: &str,
    description: Option<String>,
    quota: Option<String>,
    json: bool,
) -> anyhow::Result<Exit> {
    let is_file = input == "-" || std::path::Path::new(input).is_file();
    let ns = if is_file {
        if description.is_some() || quota.is_some() {
            ui::err("Flags are ignored when a file is specified!");
        }
        match read_spec(input, json) {
            Ok(ns) => ns,
            Err(e) => {
                ui::err(&e);
                return Ok(1);
            }
        }
    } else {
        let path = format!("/v1/namespace/{}", escape_segment(input));
        let mut ns = match client.get_json::<Namespace>(&path, &[]) {
            Ok((ns, _)) => ns,
            Err(e) if e.is_not_found() => Namespace {
                name: input.to_string(),
                ..Default::default()
            },
            Err(e) => {
                ui::err(&format!("Error looking up namespace: {e}"));
                return Ok(1);
            }
        };
        if let Some(d) = description {
            ns.description = d;
        }
        if let Some(q) = quota {
            ns.quota = q;
        }
        ns
    };
    if ns.name.is_empty() {
        ui::err("Namespace name required");
        return Ok(1);
    }
    let body = serde_json::to_value(&ns)?;
    let path = format!("/v1/namespace/{}", escape_segment(&ns.name));
    match client.put_json::<Value>(&path, &[], &body) {
        Ok(_) => {
            ui::out(&format!("Successfully applied namespace {:?}!", ns.name));
            Ok(0)
        }
        Err(e) => {
            ui::err(&format!("Error applying namespace: {e}"));
            Ok(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hcl_spec_reads_as_nomads_namespace() {
        let src = r#"
name        = "dev"
description = "the dev team"
capabilities {
  enabled_task_drivers  = ["docker", "exec"]
  disabled_task_drivers = ["raw_exec"]
}
meta {
  team = "a"
}
"#;
        let tree = super::super::volume_spec::hcl_tree(src, "ns.hcl", "x").unwrap();
        let ns = namespace_from_tree(&tree, "ns.hcl").unwrap();
        assert_eq!(ns.name, "dev");
        let caps = ns.capabilities.clone().unwrap();
        assert_eq!(caps.enabled_task_drivers.unwrap(), ["docker", "exec"]);
        assert_eq!(caps.disabled_task_drivers.unwrap(), ["raw_exec"]);
        assert_eq!(
            format_status(&ns),
            "Name            = dev\nDescription     = the dev team\nQuota           = <none>\n\
             EnabledDrivers  = docker,exec\nDisabledDrivers = raw_exec\n\nMetadata\nteam = a"
        );
        let tree = super::super::volume_spec::hcl_tree("nme = \"x\"\n", "ns.hcl", "x").unwrap();
        let e = namespace_from_tree(&tree, "ns.hcl").unwrap_err();
        assert!(e.contains("invalid key \"nme\""), "{e}");
    }

    #[test]
    fn namespaces_list_by_name() {
        let list = vec![
            Namespace {
                name: "zeta".into(),
                ..Default::default()
            },
            Namespace {
                name: "default".into(),
                description: "Default shared namespace".into(),
                ..Default::default()
            },
        ];
        assert_eq!(
            format_namespaces(&list),
            "Name     Description\ndefault  Default shared namespace\nzeta     <none>"
        );
    }
}
