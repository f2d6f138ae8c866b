//! `drover monitor`: streams the agent's own log (`/v1/agent/monitor`) to stdout until
//! interrupted or until the agent goes away.

use std::io::{Read, Write};

use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct MonitorArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Log level to stream (trace, debug, info, warn, error)
    #[arg(long = "log-level", default_value = "info")]
    pub log_level: String,
    /// Stream the log as JSON lines
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: MonitorArgs) -> anyhow::Result<Exit> {
    let client = args.conn.client()?;
    let json = if args.json { "true" } else { "false" };
    let query = [
        ("log_level", args.log_level.as_str()),
        ("log_json", json),
        ("plain", "true"),
    ];
    let mut stream = match client.get_stream("/v1/agent/monitor", &query) {
        Ok(s) => s,
        Err(e) => {
            ui::err(&format!("Error starting monitor: {e}"));
            return Ok(1);
        }
    };
    let mut buf = [0u8; 8192];
    let mut out = std::io::stdout().lock();
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(0),
            Ok(n) => {
                if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                    // stdout closed (`| head`): done.
                    return Ok(0);
                }
            }
            Err(e) => {
                ui::err(&format!("Error reading the log stream: {e}"));
                return Ok(1);
            }
        }
    }
}
