//! `drover-bench`: scheduler throughput on the real server code path.
//!
//! Starts a real server (Raft with redb on disk and fsync, the same FSM, eval broker, scheduler
//! workers and plan applier) in this process, registers N simulated nodes through the same
//! endpoint real clients use (no tasks run), submits J jobs of C allocations each with a
//! constraint, waits until every allocation is placed, and prints, last, one JSON line:
//! `{"placements", "seconds", "placements_per_sec", "p99_eval_ms", "peak_rss_mb", ...}`.
//!
//! `drover-bench --nodes 5000 --jobs 1000 --count 1000` is Nomad's C1M shape.
//! `--snapshot-threshold`, `--restart-after` and `--add-follower` measure a snapshot taken
//! during the run, a restart on the data it left, and a second server joining afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;

/// The allocator the `drover` binary uses too (the server allocates and frees many small
/// objects per placement, where glibc's malloc spends a third of the time), counting live heap
/// bytes when `--heap` asks for it.
#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

mod heap {
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

    /// Off by default: two atomic adds per allocation would slow the run being measured.
    pub static ENABLED: AtomicBool = AtomicBool::new(false);
    static LIVE: AtomicI64 = AtomicI64::new(0);

    /// Live heap bytes allocated since counting was enabled (frees of older blocks count
    /// too, so only differences between two readings mean something).
    pub fn live() -> i64 {
        LIVE.load(Ordering::Relaxed)
    }

    pub struct Counting;

    // SAFETY: every call is forwarded unchanged to mimalloc; the counter has no effect on it.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if ENABLED.load(Ordering::Relaxed) {
                LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            }
            // SAFETY: the caller's contract is mimalloc's.
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            if ENABLED.load(Ordering::Relaxed) {
                LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
            }
            // SAFETY: the caller's contract is mimalloc's.
            unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            if ENABLED.load(Ordering::Relaxed) {
                LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            }
            // SAFETY: the caller's contract is mimalloc's.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            if ENABLED.load(Ordering::Relaxed) {
                LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
            }
            // SAFETY: the caller's contract is mimalloc's.
            unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
        }
    }
}
use drover_server::{Server, ServerConfig};
use drover_structs::*;

#[derive(Parser, Debug)]
#[command(
    name = "drover-bench",
    about = "Scheduler throughput on the real server path"
)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    #[arg(long, default_value_t = 100)]
    jobs: usize,
    #[arg(long, default_value_t = 100)]
    count: usize,
    /// Scheduler workers.
    #[arg(long, default_value_t = 2)]
    schedulers: usize,
    /// Where the Raft log goes (a temp dir by default, removed afterwards).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Raft snapshot (and log compaction) every this many applied entries; the server's
    /// default when absent.
    #[arg(long)]
    snapshot_threshold: Option<u64>,
    /// Batches the event broker keeps (`/v1/event/stream`); 0 turns it off. The server's
    /// default (Nomad's 100) when absent.
    #[arg(long)]
    event_buffer_size: Option<usize>,
    /// Count live heap bytes (slower): reports the heap grown while placing, per allocation,
    /// and the heap of one stored allocation (a deep copy of 1,000 of them).
    #[arg(long)]
    heap: bool,
    /// Once all are placed (and a snapshot in flight is written), stop the server and start
    /// it again on the same data directory: reports how long until it leads and serves the
    /// job list.
    #[arg(long)]
    restart_after: bool,
    /// Only start a server on this data directory, as `--restart-after` does in a process of
    /// its own (so the run's memory is not counted), and print what it measured.
    #[arg(long, hide = true)]
    restart_only: Option<std::path::PathBuf>,
    /// With `--restart-only`: once the server serves, write an operator snapshot archive of
    /// the whole state into this file (as `GET /v1/operator/snapshot` streams it) and record
    /// its time, size and the RSS meanwhile.
    #[arg(long, requires = "restart_only")]
    save_snapshot: Option<std::path::PathBuf>,
    /// Once all are placed (and a snapshot in flight is written), start a second server in a
    /// process of its own that joins this one: reports how long until it holds the same
    /// state (digests compared), and this server's memory while it sends its snapshot.
    #[arg(long)]
    add_follower: bool,
    /// Join the server at this RPC address as `--add-follower` does, in this process, and
    /// print what it measured once it applied `--catch-up-to`; exit when stdin closes.
    #[arg(long, hide = true)]
    follower_of: Option<String>,
    #[arg(long, hide = true, default_value_t = 0)]
    catch_up_to: u64,
}

fn rss_mb() -> f64 {
    proc_status_mb("VmRSS:")
}

fn node(i: usize) -> Node {
    let mut n = Node {
        id: format!("{:08x}-0000-4000-8000-{:012x}", i, i),
        secret_id: generate_id(),
        datacenter: format!("dc{}", i % 3 + 1),
        name: format!("bench-node-{i}"),
        ..Default::default()
    };
    for (k, v) in [
        ("kernel.name", "linux"),
        ("os.name", "debian"),
        ("cpu.arch", "amd64"),
        ("driver.mock_driver", "1"),
    ] {
        n.attributes.insert(k.into(), v.into());
    }
    n.attributes
        .insert("unique.hostname".into(), n.name.clone());
    n.drivers.insert(
        "mock_driver".into(),
        DriverInfo {
            detected: true,
            healthy: true,
            health_description: "Healthy".into(),
            ..Default::default()
        },
    );
    n.node_resources.cpu.cpu_shares = 400_000;
    n.node_resources.memory.memory_mb = 400_000;
    n.node_resources.disk.disk_mb = 1_000_000;
    n.node_resources.networks = Some(vec![NetworkResource {
        mode: "host".into(),
        device: "eth0".into(),
        ip: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
        mbits: 1000,
        ..Default::default()
    }]);
    n
}

fn job(i: usize, count: usize) -> anyhow::Result<Job> {
    let api = serde_json::json!({
        "ID": format!("bench-{i}"),
        "Datacenters": ["dc1", "dc2", "dc3"],
        "Constraints": [{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}],
        "TaskGroups": [{
            "Name": "g",
            "Count": count,
            "EphemeralDisk": {"SizeMB": 10},
            "Tasks": [{
                "Name": "t",
                "Driver": "mock_driver",
                "Config": {"run_for": "1h"},
                "Resources": {"CPU": 10, "MemoryMB": 10},
                "LogConfig": {"MaxFiles": 1, "MaxFileSizeMB": 1}
            }]
        }]
    });
    Ok(decode::decode_api_job(api)?)
}

fn peak_rss_mb() -> f64 {
    proc_status_mb("VmHWM:")
}

fn proc_status_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Heap bytes of one stored allocation (its job is shared, not copied), in all and by part,
/// measured as the heap a deep copy of the sample takes.
fn heap_breakdown(sample: &[std::sync::Arc<Allocation>]) -> serde_json::Value {
    fn per_alloc<T>(sample: &[std::sync::Arc<Allocation>], part: impl Fn(&Allocation) -> T) -> i64 {
        let before = heap::live();
        let copies: Vec<T> = sample.iter().map(|a| part(a)).collect();
        let grown = heap::live() - before;
        drop(copies);
        grown / sample.len().max(1) as i64
    }
    serde_json::json!({
        "size_of_allocation": std::mem::size_of::<Allocation>(),
        "total": per_alloc(sample, |a| a.clone()),
        "metrics": per_alloc(sample, |a| a.metrics.clone()) - std::mem::size_of::<Option<AllocMetric>>() as i64,
        "allocated_resources": per_alloc(sample, |a| a.allocated_resources.clone())
            - std::mem::size_of::<Option<AllocatedResources>>() as i64,
        "legacy_task_resources": per_alloc(sample, |a| a.task_resources.clone())
            - std::mem::size_of::<Option<std::collections::BTreeMap<String, Resources>>>() as i64,
        "legacy_resources_and_shared": per_alloc(sample, |a| (a.resources.clone(), a.shared_resources.clone()))
            - 2 * std::mem::size_of::<Option<Resources>>() as i64,
    })
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[idx.min(v.len() - 1)]
}

fn config_for(args: &Args, dir: &std::path::Path) -> ServerConfig {
    let mut config = ServerConfig::new(dir);
    config.num_schedulers = args.schedulers;
    if let Some(n) = args.event_buffer_size {
        config.event_buffer_size = n;
    }
    if let Some(n) = args.snapshot_threshold {
        config.snapshot_threshold = n;
    }
    // Simulated nodes do not heartbeat; keep them ready for the whole run.
    config.heartbeat_ttl = Duration::from_secs(24 * 3600);
    config
}

/// A loopback RPC listener and the network on it, for a server other servers join.
async fn loopback_net() -> anyhow::Result<(String, Arc<drover_rpc::GrpcNet>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let net = drover_rpc::GrpcNet::new(
        listener,
        addr.clone(),
        Arc::new(drover_rpc::Faults::none()),
        None,
    );
    Ok((addr, Arc::new(net)))
}

/// Starts [`follow`] in a new process of this program (its memory is its own) and waits for
/// its report while sampling this process's memory; the follower stops once reported.
async fn add_follower(
    args: &Args,
    leader: &Server,
    leader_addr: &str,
    dir: &std::path::Path,
) -> anyhow::Result<serde_json::Value> {
    let catch_up_to = leader.raft_status().applied_index;
    let follower_dir = dir.with_extension("follower");
    let _ = std::fs::remove_dir_all(&follower_dir);
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.arg("--follower-of").arg(leader_addr);
    cmd.arg("--data-dir").arg(&follower_dir);
    cmd.args(["--catch-up-to", &catch_up_to.to_string()]);
    cmd.args(["--schedulers", &args.schedulers.to_string()]);
    cmd.args(["--timeout", &args.timeout.to_string()]);
    if let Some(n) = args.snapshot_threshold {
        cmd.args(["--snapshot-threshold", &n.to_string()]);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().context("follower stdout")?;
    let mut report = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).map(|_| line)
    });
    let rss_before = rss_mb();
    let mut leader_peak = rss_before;
    let mut sampler = tokio::time::interval(Duration::from_millis(100));
    let line = loop {
        tokio::select! {
            line = &mut report => break line??,
            _ = sampler.tick() => leader_peak = leader_peak.max(rss_mb()),
        }
    };
    if line.is_empty() {
        let _ = child.kill();
        anyhow::bail!("the follower ended without a report: {}", child.wait()?);
    }
    let mut measured: serde_json::Value = serde_json::from_str(&line)?;
    let own = leader.state_digest();
    measured["leader_state_index"] = own.index.into();
    measured["same_state"] = (measured["state_index"] == own.index
        && measured["digest"] == format!("{:016x}", own.digest))
    .into();
    measured["leader_rss_before_mb"] = rss_before.round().into();
    measured["leader_peak_rss_during_mb"] = leader_peak.round().into();
    drop(child.stdin.take());
    child.wait()?;
    let _ = std::fs::remove_dir_all(&follower_dir);
    Ok(measured)
}

/// A server that joins `leader_addr` and reports once it applied `catch_up_to`.
async fn follow(args: &Args, leader_addr: &str, dir: &std::path::Path) -> anyhow::Result<()> {
    let (addr, net) = loopback_net().await?;
    let mut config = config_for(args, dir);
    config.rpc_addr = addr;
    config.name = "follower.global".into();
    config.bootstrap_expect = 2;
    config.join = vec![leader_addr.to_string()];
    let start = Instant::now();
    let server = Server::start_with_net(config, net).await?;
    let deadline = start + Duration::from_secs(args.timeout);
    while server.raft_status().applied_index < args.catch_up_to {
        anyhow::ensure!(
            Instant::now() < deadline,
            "follower applied {} of {} after {}s",
            server.raft_status().applied_index,
            args.catch_up_to,
            args.timeout
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let caught_up = start.elapsed().as_secs_f64();
    let digest = server.state_digest();
    let line = serde_json::json!({
        "caught_up_seconds": (caught_up * 1000.0).round() / 1000.0,
        "applied_index": server.raft_status().applied_index,
        "state_index": digest.index,
        "digest": format!("{:016x}", digest.digest),
        "allocs": server.snapshot().alloc_count(),
        "follower_peak_rss_mb": peak_rss_mb().round(),
    });
    println!("{line}");
    // Stay a member until the leader has what it wants.
    tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink()))
        .await??;
    server.shutdown();
    Ok(())
}

/// Runs [`restart`] in a new process of this program, as an operator's restart would.
fn restart_in_child(args: &Args, dir: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.arg("--restart-only").arg(dir);
    cmd.args(["--jobs", &args.jobs.to_string()]);
    cmd.args(["--schedulers", &args.schedulers.to_string()]);
    if let Some(n) = args.snapshot_threshold {
        cmd.args(["--snapshot-threshold", &n.to_string()]);
    }
    let out = cmd.stderr(std::process::Stdio::inherit()).output()?;
    anyhow::ensure!(
        out.status.success(),
        "restarted server failed: {}",
        out.status
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Starts the server again on the data directory the run left: the snapshot is restored and
/// the log after it replayed before it can lead.
async fn restart(
    config: ServerConfig,
    jobs: usize,
    save_to: Option<&std::path::Path>,
) -> anyhow::Result<serde_json::Value> {
    let rss_before = rss_mb();
    let start = Instant::now();
    let server = Server::start(config).await?;
    let started = start.elapsed().as_secs_f64();
    server.wait_for_leadership(Duration::from_secs(60)).await?;
    let leading = start.elapsed().as_secs_f64();
    let listed = server.snapshot().jobs(None).len();
    let serving = start.elapsed().as_secs_f64();
    anyhow::ensure!(
        listed == jobs,
        "restarted server lists {listed} of {jobs} jobs"
    );
    let allocs = server.snapshot().alloc_count();
    let rss_after = rss_mb();
    let round = |s: f64| (s * 1000.0).round() / 1000.0;
    let saved = match save_to {
        Some(path) => Some(save_snapshot(&server, path).await?),
        None => None,
    };
    server.shutdown();
    Ok(serde_json::json!({
        "state_restored_seconds": round(started),
        "leader_seconds": round(leading),
        "jobs_listed_seconds": round(serving),
        "allocs": allocs,
        "rss_before_mb": rss_before.round(),
        "rss_after_mb": rss_after.round(),
        "peak_rss_mb": peak_rss_mb().round(),
        "operator_snapshot": saved,
    }))
}

/// Writes an operator snapshot archive of the whole state into `path` and measures it: the
/// seconds it took, its size, and the process's RSS sampled every 100 ms meanwhile.
async fn save_snapshot(
    server: &Server,
    path: &std::path::Path,
) -> anyhow::Result<serde_json::Value> {
    let file = std::io::BufWriter::with_capacity(
        1024 * 1024,
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    let rss_before = rss_mb();
    let start = Instant::now();
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    server
        .save_snapshot_to(file, move |written| {
            let _ = tx.send(written.map(|(_, meta)| meta));
        })
        .await?;
    let mut rss_max = rss_before;
    let meta = loop {
        match tokio::time::timeout(Duration::from_millis(100), &mut rx).await {
            Ok(done) => break done.context("the snapshot writer ended without a result")??,
            Err(_) => rss_max = rss_max.max(rss_mb()),
        }
    };
    Ok(serde_json::json!({
        "seconds": (start.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        "bytes": meta.size,
        "rss_before_mb": rss_before.round(),
        "rss_max_mb": rss_max.round(),
    }))
}

/// As the `drover` agent does when it runs a server (`resident_set::keep_freed_memory_for_reuse`,
/// where the measurements behind it are): mimalloc keeps freed memory 5 s (1 s by default) before
/// purging it, unless `MIMALLOC_PURGE_DELAY` says otherwise. mimalloc's option 15 is `mi_option_purge_delay`.
fn keep_freed_memory_for_reuse() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an integer option; no pointer is involved.
        unsafe { libmimalloc_sys::mi_option_set(15, 5_000) };
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    keep_freed_memory_for_reuse();
    let args = Args::parse();
    // `RUST_LOG=info` shows the server's own timings (snapshot restore, log replay).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    if let Some(leader) = &args.follower_of {
        let dir = args
            .data_dir
            .clone()
            .context("--follower-of needs --data-dir")?;
        return follow(&args, leader, &dir).await;
    }
    if let Some(dir) = &args.restart_only {
        let measured = restart(
            config_for(&args, dir),
            args.jobs,
            args.save_snapshot.as_deref(),
        )
        .await?;
        println!("{measured}");
        return Ok(());
    }
    let (dir, temp) = match &args.data_dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("drover-bench-{}", std::process::id())),
            true,
        ),
    };
    let mut leader_addr = String::new();
    let server = if args.add_follower {
        let (addr, net) = loopback_net().await?;
        let mut config = config_for(&args, &dir);
        config.rpc_addr = addr.clone();
        config.name = "leader.global".into();
        leader_addr = addr;
        Server::start_with_net(config, net).await?
    } else {
        Server::start(config_for(&args, &dir)).await?
    };
    server.wait_for_leadership(Duration::from_secs(10)).await?;

    let t_nodes = Instant::now();
    let mut handles = Vec::with_capacity(args.nodes);
    for i in 0..args.nodes {
        let s = server.clone();
        handles.push(tokio::spawn(async move { s.register_node(node(i)).await }));
    }
    for h in handles {
        h.await??;
    }
    let nodes_secs = t_nodes.elapsed().as_secs_f64();
    eprintln!("registered {} nodes in {:.2}s", args.nodes, nodes_secs);

    let jobs: Vec<Job> = (0..args.jobs)
        .map(|i| job(i, args.count))
        .collect::<anyhow::Result<_>>()?;
    heap::ENABLED.store(args.heap, std::sync::atomic::Ordering::Relaxed);
    let heap_before = heap::live();
    let rss_before = rss_mb();
    let expected = args.jobs * args.count;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(args.jobs);
    for j in jobs {
        let s = server.clone();
        handles.push(tokio::spawn(async move { s.register_job(j, None).await }));
    }
    for h in handles {
        h.await??;
    }
    let deadline = start + Duration::from_secs(args.timeout);
    let mut last_report = Instant::now();
    // The longest time the placed count stood still once placing began (a snapshot or a
    // compaction holding up the log shows here), sampled every 20 ms.
    let mut longest_stall = Duration::ZERO;
    // When it began (seconds since placing began) and how many were placed then.
    let mut longest_stall_at = (0.0, 0);
    let (mut last_count, mut last_change) = (0, Instant::now());
    loop {
        let placed = server.snapshot().alloc_count();
        if placed != last_count {
            if last_count > 0 && last_change.elapsed() > longest_stall {
                longest_stall = last_change.elapsed();
                let began = last_change.duration_since(start).as_secs_f64();
                longest_stall_at = ((began * 10.0).round() / 10.0, last_count);
            }
            (last_count, last_change) = (placed, Instant::now());
        }
        if placed >= expected {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "timed out: {placed} of {expected} placed after {}s",
                args.timeout
            );
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "{placed} of {expected} placed after {:.1}s",
                start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let snap = server.snapshot();
    let eval_ms: Vec<f64> = snap
        .evals()
        .iter()
        .filter(|e| e.status == EVAL_STATUS_COMPLETE && e.triggered_by == TRIGGER_JOB_REGISTER)
        .map(|e| (e.modify_time - e.create_time) as f64 / 1e6)
        .collect();
    let placements = snap.alloc_count();
    let heap_placed = heap::live() - heap_before;
    let rss_placed = rss_mb() - rss_before;
    // A snapshot started near the end is still being written: its memory belongs to the run.
    let snapshot_wait = Instant::now();
    if let Some(threshold) = args.snapshot_threshold {
        let taken_by = server.raft_status().applied_index;
        while server.raft_status().snapshot_index + threshold <= taken_by
            && snapshot_wait.elapsed() < Duration::from_secs(args.timeout)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let snapshot_wait = snapshot_wait.elapsed().as_secs_f64();
    let raft = server.raft_status();
    let follower = if args.add_follower {
        Some(add_follower(&args, &server, &leader_addr, &dir).await?)
    } else {
        None
    };
    server.shutdown();
    // Let the server's threads settle so the heap counter sees only the copies below.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sample: Vec<_> = snap.allocs().into_iter().take(1000).collect();
    let breakdown = heap_breakdown(&sample);
    // The Raft snapshot this state would take (one redb value, at most 3 GiB).
    let snapshot_bytes = if args.heap { snap.encode().len() } else { 0 };
    let restart = if args.restart_after {
        drop((snap, sample, server));
        Some(restart_in_child(&args, &dir)?)
    } else {
        None
    };
    if temp {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let line = serde_json::json!({
        "nodes": args.nodes,
        "jobs": args.jobs,
        "count": args.count,
        "placements": placements,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "placements_per_sec": (placements as f64 / seconds).round(),
        "p99_eval_ms": (percentile(eval_ms, 0.99) * 10.0).round() / 10.0,
        "peak_rss_mb": (peak_rss_mb() * 10.0).round() / 10.0,
        "node_register_seconds": (nodes_secs * 1000.0).round() / 1000.0,
        "rss_grown_per_alloc_bytes": (rss_placed * 1048576.0 / placements.max(1) as f64).round(),
        "longest_stall_ms": longest_stall.as_millis(),
        "longest_stall_at": {"seconds": longest_stall_at.0, "placed": longest_stall_at.1},
        "snapshot_wait_seconds": (snapshot_wait * 10.0).round() / 10.0,
        "raft_log": {
            "first": raft.first_log_index,
            "last": raft.last_log_index,
            "snapshot": raft.snapshot_index,
            "payload_mb_in_memory": raft.storage.log_bytes_in_memory / 1048576,
        },
    });
    let mut line = line;
    if let Some(restart) = restart {
        line["restart"] = restart;
    }
    if let Some(follower) = follower {
        line["follower"] = follower;
    }
    if args.heap {
        line["heap_grown_per_alloc_bytes"] = ((heap_placed as f64) / placements.max(1) as f64)
            .round()
            .into();
        line["heap_of_one_alloc_bytes"] = breakdown;
        line["state_snapshot_bytes_per_alloc"] = (snapshot_bytes as f64 / placements.max(1) as f64)
            .round()
            .into();
    }
    println!("{line}");
    Ok(())
}
