//! `csi_socket_relay --listen unix:///a.sock --to /b.sock`: serves a unix socket by relaying
//! every connection to another one, byte for byte, both ways.
//!
//! The CSI scenarios use it as a node plugin task in front of a plugin process that another
//! task runs: the Kubernetes hostpath driver keeps its volumes in one process's memory (it
//! reads its state file only when it starts), so a controller job and a node job of it must
//! reach the same process. The relay is a plain socket forwarder: it knows nothing of CSI.

use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::thread;

#[derive(Debug)]
struct Args {
    listen: PathBuf,
    to: PathBuf,
}

fn socket_path(arg: &str) -> PathBuf {
    PathBuf::from(arg.strip_prefix("unix://").unwrap_or(arg))
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut listen, mut to) = (None, None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = Some(socket_path(&value)),
            "--to" => to = Some(socket_path(&value)),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Args {
        listen: listen.ok_or("--listen is required")?,
        to: to.ok_or("--to is required")?,
    })
}

/// Copies one direction until EOF, then shuts the other side's write half so its reader sees
/// EOF too.
fn pump(mut from: UnixStream, mut to: UnixStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Write);
}

fn relay(client: UnixStream, target: &Path) -> io::Result<()> {
    let upstream = UnixStream::connect(target)?;
    let (client_rx, upstream_rx) = (client.try_clone()?, upstream.try_clone()?);
    thread::spawn(move || pump(client_rx, upstream));
    thread::spawn(move || pump(upstream_rx, client));
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("csi_socket_relay: {e}");
            return ExitCode::from(2);
        }
    };
    // A socket left by an earlier run of this task would make bind fail.
    let _ = std::fs::remove_file(&args.listen);
    let listener = match UnixListener::bind(&args.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("csi_socket_relay: bind {}: {e}", args.listen.display());
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "csi_socket_relay: {} -> {}",
        args.listen.display(),
        args.to.display()
    );
    for conn in listener.incoming() {
        match conn {
            // A failed connect drops the client's connection: it sees the plugin as not
            // ready and tries again.
            Ok(client) => {
                if let Err(e) = relay(client, &args.to) {
                    eprintln!("csi_socket_relay: connect {}: {e}", args.to.display());
                }
            }
            Err(e) => eprintln!("csi_socket_relay: accept: {e}"),
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse(list.iter().map(|s| s.to_string()))
    }

    #[test]
    fn endpoints_are_taken_with_or_without_the_unix_scheme() {
        let a = args(&["--listen", "unix:///tmp/a.sock", "--to", "/tmp/b.sock"])
            .expect("both flags given");
        assert_eq!(a.listen, PathBuf::from("/tmp/a.sock"));
        assert_eq!(a.to, PathBuf::from("/tmp/b.sock"));
    }

    #[test]
    fn a_missing_or_unknown_flag_is_refused() {
        assert!(args(&["--listen", "/tmp/a.sock"]).is_err());
        assert!(args(&["--to"]).is_err());
        assert!(args(&["--listen", "/a", "--to", "/b", "--x", "y"]).is_err());
    }

    #[test]
    fn bytes_go_both_ways_through_the_relay() {
        use std::io::{Read, Write};
        let dir = std::env::temp_dir().join(format!("relay-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let target = dir.join("t.sock");
        let _ = std::fs::remove_file(&target);
        let upstream = UnixListener::bind(&target).expect("bind target");
        let echo = thread::spawn(move || {
            let (mut s, _) = upstream.accept().expect("accept");
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).expect("read");
            s.write_all(&buf).expect("write");
        });
        let (client, relayed) = UnixStream::pair().expect("socket pair");
        relay(relayed, &target).expect("relay connects");
        let mut client = client;
        client.write_all(b"ping").expect("send");
        let mut back = [0u8; 4];
        client.read_exact(&mut back).expect("answer");
        assert_eq!(&back, b"ping");
        echo.join().expect("echo thread");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
