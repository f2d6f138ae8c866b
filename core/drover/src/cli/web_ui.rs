//! `drover ui [ID]`: Nomad's `nomad ui`. Opens the agent's web UI in the browser, at the page
//! of the job, allocation or client the ID (or prefix) names, or prints the URL to open when
//! there is no display (or with `-show-url`).

use super::api::Client;
use super::status::{Context, Resolved, resolve};
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct UiArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Print the URL instead of opening a browser
    #[arg(long)]
    pub show_url: bool,
    /// A job, allocation or client ID (or prefix)
    pub id: Option<String>,
}

/// The UI path of what `id` names (the overview without one).
fn page_of(client: &Client, id: Option<&str>) -> Result<String, String> {
    let Some(id) = id.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok("/ui/".into());
    };
    let escape = super::api::escape_segment;
    match resolve(client, id).map_err(|e| format!("Error querying search with id: {e:#}"))? {
        Resolved::One(Context::Job, job) => {
            let ns = client.namespace().unwrap_or("default");
            Ok(format!("/ui/jobs/{}@{}", escape(&job), escape(ns)))
        }
        Resolved::One(Context::Alloc, alloc) => Ok(format!("/ui/allocations/{}", escape(&alloc))),
        Resolved::One(Context::Node, node) => Ok(format!("/ui/clients/{}", escape(&node))),
        Resolved::One(Context::Eval, _) => Ok("/ui/evaluations".into()),
        Resolved::None => Err(format!("No matches returned for query {id:?}")),
        Resolved::Several(found) => Err(format!(
            "Multiple matches found for id {id:?}: {}",
            found
                .iter()
                .map(|(context, ids)| format!("{context}: {}", ids.join(", ")))
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

/// The program that opens a URL on this desktop, when there is one.
fn opener() -> Option<&'static str> {
    if cfg!(target_os = "macos") {
        return Some("open");
    }
    let has_display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()));
    has_display.then_some("xdg-open")
}

pub fn run(args: UiArgs) -> anyhow::Result<Exit> {
    let client = args.conn.client()?;
    let path = match page_of(&client, args.id.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    let url = format!(
        "{}{path}",
        client.connection().address.trim_end_matches('/')
    );
    match opener().filter(|_| !args.show_url) {
        None => ui::out(&url),
        Some(program) => {
            ui::out(&format!("Opening URL {url:?}"));
            let opened = std::process::Command::new(program)
                .arg(&url)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
            if !opened.is_ok_and(|s| s.success()) {
                ui::err(&format!(
                    "Error opening the browser with {program}; open the URL above yourself"
                ));
                return Ok(1);
            }
        }
    }
    Ok(0)
}
