//! `drover connect proxy -config FILE`: Drover's Connect sidecar proxy (drover-mesh), the
//! program of the `connect-proxy-<service>` tasks the admission hook adds; and
//! `drover intention create|delete|list`: the mesh's intentions (Consul's commands).

use std::path::PathBuf;

use drover_structs::mesh::Intention;
use serde_json::json;

use super::format::format_list;
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct ConnectCli {
    #[command(subcommand)]
    pub command: ConnectCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConnectCommand {
    /// Run a Connect sidecar proxy from the configuration the client wrote
    Proxy {
        /// The proxy's configuration file
        #[arg(long = "config", value_name = "FILE")]
        config: PathBuf,
    },
}

pub fn run(cli: ConnectCli) -> anyhow::Result<Exit> {
    match cli.command {
        ConnectCommand::Proxy { config } => Ok(run_proxy(config)),
    }
}

/// The configuration file of exactly `drover connect proxy -config FILE` (how sidecar tasks
/// run it), so the proxy can start without the CLI's command tree.
pub fn proxy_invocation(args: &[std::ffi::OsString]) -> Option<PathBuf> {
    let words: Vec<&str> = args
        .iter()
        .skip(1)
        .map(|a| a.to_str())
        .collect::<Option<_>>()?;
    match words.as_slice() {
        ["connect", "proxy", "-config" | "--config", path] => Some(PathBuf::from(path)),
        ["connect", "proxy", flag] => flag
            .strip_prefix("--config=")
            .or_else(|| flag.strip_prefix("-config="))
            .map(PathBuf::from),
        _ => None,
    }
}

/// mimalloc's setting that keeps a small process small: without eager commits of its arenas a
/// proxy holds about 2 MB of heap instead of 9 (BENCHMARKS.md). mimalloc reads it from the
/// environment when the process starts, before `main`; so the proxy, started without it, runs
/// itself again with it set (the same pid: `exec`). Should the exec fail, it runs as it is.
const LEAN_ALLOCATOR: (&str, &str) = ("MIMALLOC_ARENA_EAGER_COMMIT", "0");

pub fn lean_allocator(args: &[std::ffi::OsString]) {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(LEAN_ALLOCATOR.0).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let err = std::process::Command::new(exe)
        .args(args.iter().skip(1))
        .env(LEAN_ALLOCATOR.0, LEAN_ALLOCATOR.1)
        .exec();
    tracing::debug!(error = %err, "running the proxy with a lean allocator");
}

/// Once the proxy serves, lets go of the pages of program files it mapped to start (the
/// agent's whole binary, of which a proxy runs a small part): every clean, read-only file
/// mapping is dropped from the process (`MADV_DONTNEED`; the pages stay in the page cache,
/// shared) and marked `MADV_RANDOM`, so that a page faulted back in later comes alone rather
/// than with its 64 KiB neighbourhood. What the proxy then runs is faulted in as it runs: its
/// resident set is its working set (BENCHMARKS.md: 11.6 MB RSS before, of which 9 MB were
/// the binary's pages). Mappings holding written (anonymous) pages, such as the relocated
/// read-only data, are left alone: dropping them would lose what was written.
fn drop_startup_pages() {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    for (start, end) in clean_file_mappings(&smaps) {
        // SAFETY: the range is a whole mapping of this process that is file-backed, not
        // writable and holds no anonymous page: dropping its pages only makes later accesses
        // read them again from the file, unchanged.
        unsafe {
            let addr = start as *mut libc::c_void;
            let len = end - start;
            libc::madvise(addr, len, libc::MADV_DONTNEED);
            libc::madvise(addr, len, libc::MADV_RANDOM);
        }
    }
}

/// The address ranges of `smaps` that map a file read-only and hold no anonymous page.
fn clean_file_mappings(smaps: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    // (start, end, eligible so far) of the mapping whose fields are being read.
    let mut current: Option<(usize, usize, bool)> = None;
    let finish = |m: Option<(usize, usize, bool)>, out: &mut Vec<(usize, usize)>| {
        if let Some((start, end, true)) = m {
            out.push((start, end));
        }
    };
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(start), Ok(end)) =
                (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            finish(current.take(), &mut out);
            let perms = words.next().unwrap_or("");
            // offset, device, inode, then the path of a file mapping.
            let path = words.nth(3).unwrap_or("");
            let file = path.starts_with('/');
            current = Some((
                start,
                end,
                file && perms.starts_with('r') && !perms.contains('w'),
            ));
        } else if first == "Anonymous:"
            && words.next().is_some_and(|kb| kb != "0")
            && let Some(m) = current.as_mut()
        {
            m.2 = false;
        }
    }
    finish(current.take(), &mut out);
    out
}

/// Runs the proxy until it is stopped; the exit code.
pub fn run_proxy(config: PathBuf) -> Exit {
    // Warnings and errors reach the task's stderr log.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .try_init();
    // One thread: a proxy moves bytes between a few sockets; TLS is the only work.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error starting the proxy's runtime: {e}"));
            return 1;
        }
    };
    match runtime.block_on(drover_mesh::proxy::run(config, drop_startup_pages)) {
        Ok(()) => 0,
        Err(e) => {
            ui::err(&format!("Error running the proxy: {e}"));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_clean_read_only_file_mappings_are_dropped() {
        let smaps = "\
55ad1d186000-55ad1dd02000 r--p 00000000 fe:01 123 /usr/bin/drover
Rss:                2536 kB
Anonymous:             0 kB
55ad1dd02000-55ad207e2000 r-xp 00b7b000 fe:01 123 /usr/bin/drover
Anonymous:             0 kB
55ad207e2000-55ad20913000 r--p 03658000 fe:01 123 /usr/bin/drover
Anonymous:          1212 kB
55ad20913000-55ad20914000 rw-p 03789000 fe:01 123 /usr/bin/drover
Anonymous:             4 kB
20000000000-20000280000 rw-p 00000000 00:00 0
Anonymous:           268 kB
7ffc530e6000-7ffc53107000 rw-p 00000000 00:00 0                          [stack]
Anonymous:            68 kB
7f80b6d50000-7f80b6ea6000 r-xp 00028000 fe:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
";
        assert_eq!(
            clean_file_mappings(smaps),
            vec![
                (0x55ad1d186000, 0x55ad1dd02000),
                (0x55ad1dd02000, 0x55ad207e2000),
                (0x7f80b6d50000, 0x7f80b6ea6000),
            ]
        );
    }

    #[test]
    fn the_sidecar_invocation_is_recognized_and_nothing_else() {
        let args = |words: &[&str]| -> Vec<std::ffi::OsString> {
            std::iter::once("drover")
                .chain(words.iter().copied())
                .map(Into::into)
                .collect()
        };
        assert_eq!(
            proxy_invocation(&args(&["connect", "proxy", "-config", "/s/p.json"])),
            Some(PathBuf::from("/s/p.json"))
        );
        assert_eq!(
            proxy_invocation(&args(&["connect", "proxy", "--config=/s/p.json"])),
            Some(PathBuf::from("/s/p.json"))
        );
        assert_eq!(proxy_invocation(&args(&["connect", "proxy"])), None);
        assert_eq!(proxy_invocation(&args(&["job", "run", "x"])), None);
    }
}

#[derive(Debug, clap::Args)]
pub struct IntentionCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: IntentionCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum IntentionCommand {
    /// Allow or deny calls from SOURCE to DESTINATION (either may be "*")
    Create {
        /// Deny the calls (the default is to allow them)
        #[arg(long)]
        deny: bool,
        /// Allow the calls
        #[arg(long, conflicts_with = "deny")]
        allow: bool,
        /// Replace an intention of the same pair
        #[arg(long)]
        replace: bool,
        /// A description kept with the intention
        #[arg(long, default_value = "")]
        description: String,
        source: String,
        destination: String,
    },
    /// Delete the intention from SOURCE to DESTINATION
    Delete { source: String, destination: String },
    /// List the intentions of the namespace
    List,
}

pub fn run_intention(cli: IntentionCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    let path = "/v1/connect/intentions/exact";
    match cli.command {
        IntentionCommand::Create {
            deny,
            allow: _,
            replace,
            description,
            source,
            destination,
        } => {
            let pair = [
                ("source", source.as_str()),
                ("destination", destination.as_str()),
            ];
            if !replace {
                let existing: Result<Intention, _> = client.get_json(path, &pair).map(|(i, _)| i);
                if existing.is_ok() {
                    ui::err(&format!(
                        "Error creating intention: an intention {source} => {destination} exists; use -replace to change it"
                    ));
                    return Ok(1);
                }
            }
            let action = if deny { "deny" } else { "allow" };
            let body = json!({"Action": action, "Description": description});
            match client.put_json::<serde_json::Value>(path, &pair, &body) {
                Ok(_) => {
                    ui::out(&format!("Created: {source} => {destination} ({action})"));
                    Ok(0)
                }
                Err(e) => {
                    ui::err(&format!("Error creating intention: {e}"));
                    Ok(1)
                }
            }
        }
        IntentionCommand::Delete {
            source,
            destination,
        } => {
            let pair = [
                ("source", source.as_str()),
                ("destination", destination.as_str()),
            ];
            match client.delete_json::<serde_json::Value>(path, &pair) {
                Ok(_) => {
                    ui::out(&format!("Intention deleted: {source} => {destination}"));
                    Ok(0)
                }
                Err(e) => {
                    ui::err(&format!("Error deleting intention: {e}"));
                    Ok(1)
                }
            }
        }
        IntentionCommand::List => {
            let list: Vec<Intention> = match client.get_json("/v1/connect/intentions", &[]) {
                Ok((list, _)) => list,
                Err(e) => {
                    ui::err(&format!("Error listing intentions: {e}"));
                    return Ok(1);
                }
            };
            if list.is_empty() {
                ui::out("No intentions");
                return Ok(0);
            }
            let mut rows = vec!["Source|Action|Destination|Description".to_string()];
            for i in list {
                rows.push(format!(
                    "{}|{}|{}|{}",
                    i.source_name, i.action, i.destination_name, i.description
                ));
            }
            ui::out(&format_list(&rows));
            Ok(0)
        }
    }
}
