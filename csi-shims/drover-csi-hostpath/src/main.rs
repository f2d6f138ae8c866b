//! `drover-csi-hostpath --endpoint unix:///csi/csi.sock --node-id NODE --state-dir DIR`: serves
//! the hostpath CSI plugin until SIGINT or SIGTERM. The endpoint may come from `CSI_ENDPOINT`,
//! as Nomad and other COs set it for plugin tasks.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use drover_csi_hostpath::{Config, listen, serve, socket_path_of_endpoint};

#[derive(Debug, Parser)]
#[command(name = "drover-csi-hostpath", version, about)]
struct Args {
    /// Where to serve CSI: unix:///path/csi.sock (or a plain path).
    #[arg(long, env = "CSI_ENDPOINT")]
    endpoint: String,
    /// This node's id, as NodeGetInfo reports it.
    #[arg(long)]
    node_id: String,
    /// Where volumes and the plugin's state live.
    #[arg(long)]
    state_dir: PathBuf,
    /// How many volumes may be published to this node (0: no limit).
    #[arg(long, default_value_t = 0)]
    max_volumes: i64,
    /// Size of the pool volumes come from, in bytes (default: the free space of the state
    /// directory's file system at start).
    #[arg(long)]
    capacity_bytes: Option<i64>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drover-csi-hostpath: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if args.node_id.is_empty() {
        return Err("--node-id must not be empty".into());
    }
    std::fs::create_dir_all(&args.state_dir)
        .map_err(|e| format!("creating {}: {e}", args.state_dir.display()))?;
    let capacity_bytes = match args.capacity_bytes {
        Some(bytes) if bytes >= 0 => bytes,
        Some(bytes) => return Err(format!("--capacity-bytes {bytes} is negative").into()),
        None => free_bytes(&args.state_dir)?,
    };
    let config = Config {
        node_id: args.node_id,
        state_dir: args.state_dir,
        max_volumes_per_node: args.max_volumes.max(0),
        capacity_bytes,
    };
    let socket = socket_path_of_endpoint(&args.endpoint)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = listen(&socket)?;
        tracing::info!(socket = %socket.display(), node = %config.node_id, "serving");
        let served = serve(config, listener, stop_signal()).await;
        let _ = std::fs::remove_file(&socket);
        served
    })?;
    Ok(())
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        // Without signal handlers the plugin runs until killed.
        _ => std::future::pending::<()>().await,
    }
}

fn free_bytes(dir: &std::path::Path) -> Result<i64, String> {
    let stats =
        nix::sys::statvfs::statvfs(dir).map_err(|e| format!("statvfs {}: {e}", dir.display()))?;
    let bytes = u128::from(stats.blocks_available()) * u128::from(stats.fragment_size());
    Ok(i64::try_from(bytes).unwrap_or(i64::MAX))
}
