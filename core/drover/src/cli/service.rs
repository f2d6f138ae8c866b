//! `drover service list|info|delete`: the native service registrations over `/v1/services`
//! and `/v1/service/:name`, with Nomad's tables.

use drover_structs::ServiceRegistration;
use serde_json::Value;

use super::api::{Client, escape_segment};
use super::format::{format_list, limit};
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct ServiceCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: ServiceCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ServiceCommand {
    /// List the registered services
    List {
        /// Print the services as JSON
        #[arg(long)]
        json: bool,
    },
    /// Display a service's registrations
    Info {
        /// Print the registrations as JSON
        #[arg(long)]
        json: bool,
        /// Show full identifiers
        #[arg(long)]
        verbose: bool,
        /// Service name
        service: String,
    },
    /// Delete a service registration
    Delete {
        /// Service name
        service: String,
        /// Registration ID
        id: String,
    },
}

pub fn run(cli: ServiceCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        ServiceCommand::List { json } => list(&client, json),
        ServiceCommand::Info {
            json,
            verbose,
            service,
        } => info(&client, &service, json, verbose),
        ServiceCommand::Delete { service, id } => {
            let path = format!(
                "/v1/service/{}/{}",
                escape_segment(&service),
                escape_segment(&id)
            );
            match client.delete_json::<Value>(&path, &[]) {
                Ok(_) => {
                    ui::out(&format!("Successfully deleted service registration {id:?}"));
                    Ok(0)
                }
                Err(e) => {
                    ui::err(&format!("Error deleting service registration: {e}"));
                    Ok(1)
                }
            }
        }
    }
}

fn tags(v: &Value) -> String {
    let list: Vec<&str> = v
        .as_array()
        .map(|t| t.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    format!("[{}]", list.join(","))
}

fn list(client: &Client, json: bool) -> anyhow::Result<Exit> {
    let namespaces: Value = match client.get_json("/v1/services", &[]) {
        Ok((v, _)) => v,
        Err(e) => {
            ui::err(&format!("Error listing service registrations: {e}"));
            return Ok(1);
        }
    };
    if json {
        ui::out(&super::job::to_indented_json(&namespaces));
        return Ok(0);
    }
    let all = client.namespace() == Some("*");
    let mut rows = vec![if all {
        "Service Name|Namespace|Tags".to_string()
    } else {
        "Service Name|Tags".to_string()
    }];
    for ns in namespaces.as_array().into_iter().flatten() {
        for s in ns["Services"].as_array().into_iter().flatten() {
            let name = s["ServiceName"].as_str().unwrap_or_default();
            rows.push(if all {
                format!(
                    "{name}|{}|{}",
                    ns["Namespace"].as_str().unwrap_or_default(),
                    tags(&s["Tags"])
                )
            } else {
                format!("{name}|{}", tags(&s["Tags"]))
            });
        }
    }
    if rows.len() == 1 {
        ui::out("No service registrations found");
        return Ok(0);
    }
    ui::out(&format_list(&rows));
    Ok(0)
}

fn info(client: &Client, service: &str, json: bool, verbose: bool) -> anyhow::Result<Exit> {
    let path = format!("/v1/service/{}", escape_segment(service));
    let regs: Vec<ServiceRegistration> = match client.get_json(&path, &[]) {
        Ok((v, _)) => v,
        Err(e) => {
            ui::err(&format!("Error listing service registrations: {e}"));
            return Ok(1);
        }
    };
    if json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(&regs)?));
        return Ok(0);
    }
    if regs.is_empty() {
        ui::err(&format!("No service registrations found for {service:?}"));
        return Ok(1);
    }
    let id = |s: &str| {
        if verbose {
            s.to_string()
        } else {
            limit(s, 8).to_string()
        }
    };
    let mut rows = vec!["Job ID|Address|Tags|Node ID|Alloc ID".to_string()];
    for r in &regs {
        rows.push(format!(
            "{}|{}:{}|[{}]|{}|{}",
            r.job_id,
            r.address,
            r.port,
            r.tags.join(","),
            id(&r.node_id),
            id(&r.alloc_id)
        ));
    }
    ui::out(&format_list(&rows));
    Ok(0)
}
