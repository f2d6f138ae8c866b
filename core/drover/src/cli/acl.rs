//! `drover acl bootstrap | policy apply|list|info|delete | token create|list|info|update|
//! delete|self`: ACLs over `/v1/acl/...`, with Nomad's output.

use drover_structs::{AclPolicy, AclPolicyListStub, AclToken, AclTokenListStub};
use serde_json::{Value, json};

use super::api::{Client, escape_segment};
use super::format::{format_kv, format_list};
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct AclCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: AclCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AclCommand {
    /// Create the initial management token
    Bootstrap {
        /// Print the token as JSON
        #[arg(long)]
        json: bool,
        /// A file holding the secret to use (Nomad's bootstrap secret); "-" reads stdin
        file: Option<String>,
    },
    /// Interact with ACL policies
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Interact with ACL tokens
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Create or update a policy from a rules file
    Apply {
        #[arg(long)]
        description: Option<String>,
        name: String,
        /// The rules file ("-" reads stdin)
        file: String,
    },
    /// List policies
    List {
        #[arg(long)]
        json: bool,
    },
    /// Display a policy
    Info {
        #[arg(long)]
        json: bool,
        name: String,
    },
    /// Delete a policy
    Delete { name: String },
}

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Create a token
    Create {
        #[arg(long)]
        name: Option<String>,
        /// "client" or "management"
        #[arg(long = "type", default_value = "client")]
        token_type: String,
        /// A policy the token carries (repeatable)
        #[arg(long = "policy")]
        policies: Vec<String>,
        #[arg(long)]
        global: bool,
        /// How long the token lives (Go duration)
        #[arg(long)]
        ttl: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List tokens
    List {
        #[arg(long)]
        json: bool,
    },
    /// Display a token
    Info {
        #[arg(long)]
        json: bool,
        accessor: String,
    },
    /// Display the token the request carries
    #[command(name = "self")]
    Own {
        #[arg(long)]
        json: bool,
    },
    /// Update a token's name, type or policies
    Update {
        #[arg(long)]
        name: Option<String>,
        #[arg(long = "type")]
        token_type: Option<String>,
        #[arg(long = "policy")]
        policies: Vec<String>,
        accessor: String,
    },
    /// Delete a token
    Delete { accessor: String },
}

pub fn run(cli: AclCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        AclCommand::Bootstrap { json, file } => bootstrap(&client, json, file.as_deref()),
        AclCommand::Policy(cmd) => policy(&client, cmd),
        AclCommand::Token(cmd) => token(&client, cmd),
    }
}

fn read_input(path: &str) -> Result<String, String> {
    if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| format!("Failed to read stdin: {e}"))?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("Failed to read file: {e}"))
    }
}

fn print_json(v: &impl serde::Serialize) -> anyhow::Result<Exit> {
    ui::out(&super::job::to_indented_json(&serde_json::to_value(v)?));
    Ok(0)
}

/// Nomad's `formatACLToken`.
fn format_token(t: &AclToken) -> String {
    let policies = if t.is_management() {
        "n/a".to_string()
    } else {
        format!("{:?}", t.policies.clone().unwrap_or_default())
    };
    format_kv(&[
        format!("Accessor ID|{}", t.accessor_id),
        format!("Secret ID|{}", t.secret_id),
        format!("Name|{}", t.name),
        format!("Type|{}", t.token_type),
        format!("Global|{}", t.global),
        format!("Create Time|{}", t.create_time),
        format!(
            "Expiry Time|{}",
            t.expiration_time.as_deref().unwrap_or("<none>")
        ),
        format!("Create Index|{}", t.create_index),
        format!("Modify Index|{}", t.modify_index),
        format!("Policies|{policies}"),
    ])
}

fn show_token(t: &AclToken, json: bool) -> anyhow::Result<Exit> {
    if json {
        return print_json(t);
    }
    ui::out(&format_token(t));
    Ok(0)
}

fn bootstrap(client: &Client, json: bool, file: Option<&str>) -> anyhow::Result<Exit> {
    let secret = match file.map(read_input).transpose() {
        Ok(s) => s.map(|s| s.trim().to_string()).unwrap_or_default(),
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    let body = json!({ "BootstrapSecret": secret });
    match client.put_json::<AclToken>("/v1/acl/bootstrap", &[], &body) {
        Ok(t) => show_token(&t, json),
        Err(e) => {
            ui::err(&format!("Error bootstrapping: {e}"));
            Ok(1)
        }
    }
}

fn policy(client: &Client, cmd: PolicyCommand) -> anyhow::Result<Exit> {
    match cmd {
        PolicyCommand::Apply {
            description,
            name,
            file,
        } => {
            let rules = match read_input(&file) {
                Ok(r) => r,
                Err(e) => {
                    ui::err(&e);
                    return Ok(1);
                }
            };
            let body = serde_json::to_value(AclPolicy {
                name: name.clone(),
                description: description.unwrap_or_default(),
                rules,
                ..Default::default()
            })?;
            let path = format!("/v1/acl/policy/{}", escape_segment(&name));
            match client.put_json::<Value>(&path, &[], &body) {
                Ok(_) => {
                    ui::out(&format!("Successfully wrote {name:?} ACL policy!"));
                    Ok(0)
                }
                Err(e) => {
                    ui::err(&format!("Error writing ACL policy: {e}"));
                    Ok(1)
                }
            }
        }
        PolicyCommand::List { json } => {
            let list: Vec<AclPolicyListStub> = match client.get_json("/v1/acl/policies", &[]) {
                Ok((l, _)) => l,
                Err(e) => {
                    ui::err(&format!("Error listing ACL policies: {e}"));
                    return Ok(1);
                }
            };
            if json {
                return print_json(&list);
            }
            if list.is_empty() {
                ui::out("No policies found");
                return Ok(0);
            }
            let mut rows = vec!["Name|Description".to_string()];
            rows.extend(list.iter().map(|p| format!("{}|{}", p.name, p.description)));
            ui::out(&format_list(&rows));
            Ok(0)
        }
        PolicyCommand::Info { json, name } => {
            let path = format!("/v1/acl/policy/{}", escape_segment(&name));
            let p: AclPolicy = match client.get_json(&path, &[]) {
                Ok((p, _)) => p,
                Err(e) => {
                    ui::err(&format!("Error fetching ACL policy: {e}"));
                    return Ok(1);
                }
            };
            if json {
                return print_json(&p);
            }
            ui::out(&format_kv(&[
                format!("Name|{}", p.name),
                format!("Description|{}", p.description),
                format!("CreateIndex|{}", p.create_index),
                format!("ModifyIndex|{}", p.modify_index),
            ]));
            ui::out(&format!("\nRules\n\n{}", p.rules.trim_end()));
            Ok(0)
        }
        PolicyCommand::Delete { name } => {
            let path = format!("/v1/acl/policy/{}", escape_segment(&name));
            match client.delete_json::<Value>(&path, &[]) {
                Ok(_) => {
                    ui::out(&format!("Successfully deleted {name:?} ACL policy!"));
                    Ok(0)
                }
                Err(e) => {
                    ui::err(&format!("Error deleting ACL policy: {e}"));
                    Ok(1)
                }
            }
        }
    }
}

fn token(client: &Client, cmd: TokenCommand) -> anyhow::Result<Exit> {
    match cmd {
        TokenCommand::Create {
            name,
            token_type,
            policies,
            global,
            ttl,
            json,
        } => {
            let ttl = match ttl
                .as_deref()
                .map(drover_jobspec::parse_duration)
                .transpose()
            {
                Ok(d) => d.map_or(0, |d| d.as_nanos() as i64),
                Err(e) => {
                    ui::err(&format!("Error parsing TTL: {e}"));
                    return Ok(1);
                }
            };
            let body = serde_json::to_value(AclToken {
                name: name.unwrap_or_default(),
                token_type,
                policies: (!policies.is_empty()).then_some(policies),
                global,
                expiration_ttl: ttl,
                ..Default::default()
            })?;
            match client.put_json::<AclToken>("/v1/acl/token", &[], &body) {
                Ok(t) => show_token(&t, json),
                Err(e) => {
                    ui::err(&format!("Error creating token: {e}"));
                    Ok(1)
                }
            }
        }
        TokenCommand::List { json } => {
            let list: Vec<AclTokenListStub> = match client.get_json("/v1/acl/tokens", &[]) {
                Ok((l, _)) => l,
                Err(e) => {
                    ui::err(&format!("Error listing tokens: {e}"));
                    return Ok(1);
                }
            };
            if json {
                return print_json(&list);
            }
            if list.is_empty() {
                ui::out("No tokens found");
                return Ok(0);
            }
            let now = drover_structs::time::now_nanos();
            let mut rows = vec!["Name|Type|Global|Accessor ID|Expired".to_string()];
            for t in &list {
                let expired = t
                    .expiration_time
                    .as_deref()
                    .and_then(drover_structs::time::parse_rfc3339_nanos)
                    .is_some_and(|at| at <= now);
                rows.push(format!(
                    "{}|{}|{}|{}|{expired}",
                    t.name, t.token_type, t.global, t.accessor_id
                ));
            }
            ui::out(&format_list(&rows));
            Ok(0)
        }
        TokenCommand::Info { json, accessor } => {
            let path = format!("/v1/acl/token/{}", escape_segment(&accessor));
            match client.get_json::<AclToken>(&path, &[]) {
                Ok((t, _)) => show_token(&t, json),
                Err(e) => {
                    ui::err(&format!("Error fetching token: {e}"));
                    Ok(1)
                }
            }
        }
        TokenCommand::Own { json } => {
            match client.get_json::<AclToken>("/v1/acl/token/self", &[]) {
                Ok((t, _)) => show_token(&t, json),
                Err(e) => {
                    ui::err(&format!("Error fetching self token: {e}"));
                    Ok(1)
                }
            }
        }
        TokenCommand::Update {
            name,
            token_type,
            policies,
            accessor,
        } => {
            let path = format!("/v1/acl/token/{}", escape_segment(&accessor));
            let mut t: AclToken = match client.get_json(&path, &[]) {
                Ok((t, _)) => t,
                Err(e) => {
                    ui::err(&format!("Error fetching token: {e}"));
                    return Ok(1);
                }
            };
            if let Some(n) = name {
                t.name = n;
            }
            if let Some(kind) = token_type {
                t.token_type = kind;
            }
            if !policies.is_empty() {
                t.policies = Some(policies);
            }
            match client.put_json::<AclToken>(&path, &[], &serde_json::to_value(&t)?) {
                Ok(t) => show_token(&t, false),
                Err(e) => {
                    ui::err(&format!("Error updating token: {e}"));
                    Ok(1)
                }
            }
        }
        TokenCommand::Delete { accessor } => {
            let path = format!("/v1/acl/token/{}", escape_segment(&accessor));
            match client.delete_json::<Value>(&path, &[]) {
                Ok(_) => {
                    ui::out(&format!("Token {accessor} successfully deleted"));
                    Ok(0)
                }
                Err(e) => {
                    ui::err(&format!("Error deleting token: {e}"));
                    Ok(1)
                }
            }
        }
    }
}
