//! `drover alloc status` (and `alloc logs`, in `logs`; `alloc fs`, in `alloc_fs`; `alloc signal`
//! and `alloc restart`, in `alloc_lifecycle`; `alloc checks`, in `alloc_checks`).

use drover_client::alloc_stats::{AllocResourceUsage, ResourceUsage};
use drover_structs::{AllocListStub, Allocation, TaskState};
use serde_json::Value;

use super::alloc_checks::{self, AllocChecksArgs};
use super::alloc_exec::{self, AllocExecArgs};
use super::alloc_fs::{self, AllocFsArgs};
use super::alloc_lifecycle::{self, AllocRestartArgs, AllocSignalArgs};
use super::api::{Client, escape_segment};
use super::format::{
    FULL_ID, SHORT_ID, format_kv, format_list, format_list_with_spaces, humanize_ibytes,
    humanize_mb, limit, quote,
};
use super::job_status::alloc_stub_table;
use super::logs::{self, LogsArgs};
use super::lookup::{self, Match};
use super::metrics::format_alloc_metrics;
use super::timefmt::{ago, format_rfc3339_or_na, format_time, go_duration};
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct AllocCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: AllocCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AllocCommand {
    /// Display an allocation's status, task states and events
    Status(AllocStatusArgs),
    /// Print a task's stdout (or stderr) log
    Logs(LogsArgs),
    /// Inspect the contents of an allocation directory
    Fs(AllocFsArgs),
    /// Send a signal to an allocation's running tasks
    Signal(AllocSignalArgs),
    /// Restart an allocation's running tasks in place
    Restart(AllocRestartArgs),
    /// Run a command inside a running task of an allocation
    Exec(AllocExecArgs),
    /// Show the latest result of each service health check of an allocation
    Checks(AllocChecksArgs),
}

#[derive(Debug, clap::Args)]
pub struct AllocStatusArgs {
    /// Show full identifiers, times and placement metrics
    #[arg(long)]
    pub verbose: bool,
    /// Print the allocation as JSON
    #[arg(long)]
    pub json: bool,
    /// Display detailed resource usage statistics
    #[arg(long)]
    pub stats: bool,
    /// Allocation ID (or unique prefix)
    pub alloc: String,
}

pub fn run(cli: AllocCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        AllocCommand::Status(args) => alloc_status(&client, args),
        AllocCommand::Logs(args) => logs::run(&client, args),
        AllocCommand::Fs(args) => alloc_fs::run(&client, args),
        AllocCommand::Signal(args) => alloc_lifecycle::signal(&client, args),
        AllocCommand::Restart(args) => alloc_lifecycle::restart(&client, args),
        AllocCommand::Exec(args) => alloc_exec::run(&client, args),
        AllocCommand::Checks(args) => alloc_checks::run(&client, args),
    }
}

/// Resolves an allocation ID prefix and fetches the full allocation. `Err` is the message to
/// print (exit 1).
pub fn find_alloc(client: &Client, prefix: &str, verbose: bool) -> Result<Allocation, String> {
    let prefix = lookup::check_uuid_prefix(prefix.trim())?;
    let stubs: Vec<AllocListStub> = client
        .get_json("/v1/allocations", &[("prefix", prefix)])
        .map(|(s, _)| s)
        .map_err(|e| format!("Error querying allocation: {e}"))?;
    let stub = match lookup::resolve(stubs, prefix, |a| a.id.as_str()) {
        Match::One(stub) => stub,
        Match::None => {
            return Err(format!(
                "No allocation(s) with prefix or id {prefix:?} found"
            ));
        }
        Match::Many(stubs) => {
            let length = if verbose { FULL_ID } else { SHORT_ID };
            return Err(format!(
                "Prefix matched multiple allocations\n\n{}",
                alloc_stub_table(&stubs, verbose, length)
            ));
        }
    };
    let client = client.in_namespace(&stub.namespace);
    client
        .get_json(&format!("/v1/allocation/{}", escape_segment(&stub.id)), &[])
        .map(|(a, _)| a)
        .map_err(|e| format!("Error querying allocation: {e}"))
}

fn alloc_status(client: &Client, args: AllocStatusArgs) -> anyhow::Result<Exit> {
    let alloc = match find_alloc(client, &args.alloc, args.verbose) {
        Ok(a) => a,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    if args.json {
        ui::out(&super::job::to_indented_json(&serde_json::to_value(
            &alloc,
        )?));
        return Ok(0);
    }
    // Live usage, when there can be any, replaces the reserved figures (as Nomad shows it);
    // failing to get it only matters when it was asked for.
    let stats = if args.stats || alloc.client_status == "running" {
        match alloc_stats(client, &alloc) {
            Ok(stats) => Some(stats),
            Err(e) => {
                if args.stats {
                    ui::err(&format!("Couldn't retrieve stats: {e}"));
                }
                None
            }
        }
    } else {
        None
    };
    ui::out(&format_alloc_status(
        &alloc,
        args.verbose,
        stats.as_ref(),
        args.stats,
    ));
    Ok(0)
}

/// The allocation's resource usage, from the client that runs it.
fn alloc_stats(client: &Client, alloc: &Allocation) -> Result<AllocResourceUsage, String> {
    client
        .in_namespace(&alloc.namespace)
        .get_json(
            &format!("/v1/client/allocation/{}/stats", escape_segment(&alloc.id)),
            &[],
        )
        .map(|(usage, _)| usage)
        .map_err(|e| e.to_string())
}

/// The whole `alloc status` text. With `stats`, each running task's live usage; with
/// `display_stats` (`-stats`), its detailed figures too.
fn format_alloc_status(
    alloc: &Allocation,
    verbose: bool,
    stats: Option<&AllocResourceUsage>,
    display_stats: bool,
) -> String {
    let length = if verbose { FULL_ID } else { SHORT_ID };
    let mut out = format_kv(&basic_rows(alloc, verbose, length));
    if let Some(addresses) = network_text(alloc) {
        out.push_str("\n\n");
        out.push_str(&addresses);
    }
    for task in sorted_tasks(alloc) {
        let Some(state) = alloc.task_states.as_ref().and_then(|s| s.get(&task)) else {
            continue;
        };
        let lifecycle = lifecycle_of(alloc, &task)
            .map(|(hook, sidecar)| {
                if sidecar {
                    format!(" ({hook} sidecar)")
                } else {
                    format!(" ({hook})")
                }
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "\n\nTask {}{lifecycle} is {}",
            quote(&task),
            quote(&state.state)
        ));
        let usage = stats
            .and_then(|s| s.tasks.get(&task))
            .map(|t| &t.resource_usage);
        if let Some(resources) = task_resources_text(alloc, &task, usage) {
            out.push('\n');
            out.push_str(&resources);
        }
        if let Some(usage) = usage.filter(|_| display_stats) {
            let detail = verbose_usage_text(usage);
            if !detail.is_empty() {
                out.push_str("\n\n");
                out.push_str(&detail);
            }
        }
        out.push_str("\n\n");
        out.push_str(&task_status_text(state));
    }
    if verbose {
        out.push_str("\n\nPlacement Metrics\n");
        out.push_str(&format_alloc_metrics(
            &alloc.metrics.clone().unwrap_or_default(),
            true,
            "  ",
        ));
    }
    out
}

fn basic_rows(alloc: &Allocation, verbose: bool, length: usize) -> Vec<String> {
    let (created, modified) = if verbose {
        (
            format_time(alloc.create_time),
            format_time(alloc.modify_time),
        )
    } else {
        (ago(alloc.create_time), ago(alloc.modify_time))
    };
    let mut rows = vec![
        format!("ID|{}", alloc.id),
        format!("Eval ID|{}", limit(&alloc.eval_id, length)),
        format!("Name|{}", alloc.name),
        format!("Node ID|{}", limit(&alloc.node_id, length)),
        format!("Node Name|{}", alloc.node_name),
        format!("Job ID|{}", alloc.job_id),
        format!("Job Version|{}", alloc.job_version()),
        format!("Client Status|{}", alloc.client_status),
        format!("Client Description|{}", alloc.client_description),
        format!("Desired Status|{}", alloc.desired_status),
        format!("Desired Description|{}", alloc.desired_description),
        format!("Created|{created}"),
        format!("Modified|{modified}"),
    ];
    if !alloc.deployment_id.is_empty() {
        let status = alloc.deployment_status.as_ref();
        let health = match status.and_then(|s| s.healthy) {
            Some(true) => "healthy",
            Some(false) => "unhealthy",
            None => "unset",
        };
        rows.push(format!(
            "Deployment ID|{}",
            limit(&alloc.deployment_id, length)
        ));
        rows.push(format!("Deployment Health|{health}"));
        if status.is_some_and(|s| s.canary) {
            rows.push("Canary|true".into());
        }
    }
    if !alloc.next_allocation.is_empty() {
        rows.push(format!(
            "Replacement Alloc ID|{}",
            limit(&alloc.next_allocation, length)
        ));
    }
    if verbose {
        let m = alloc.metrics.clone().unwrap_or_default();
        rows.push(format!("Evaluated Nodes|{}", m.nodes_evaluated));
        rows.push(format!("Filtered Nodes|{}", m.nodes_filtered));
        rows.push(format!("Exhausted Nodes|{}", m.nodes_exhausted));
        rows.push(format!(
            "Allocation Time|{}",
            go_duration(m.allocation_time)
        ));
        rows.push(format!("Failures|{}", m.coalesced_failures));
    }
    rows
}

/// "Allocation Addresses" for group networks with ports.
fn network_text(alloc: &Allocation) -> Option<String> {
    let shared = &alloc.allocated_resources.as_ref()?.shared;
    let nw = shared.networks.as_ref()?.first()?;
    let mut rows = vec!["Label|Dynamic|Address".to_string()];
    let fmt_port = |label: &str, value: i64, to: i64, ip: &str| {
        let mut s = format!("{label}|yes|{ip}:{value}");
        if to > 0 {
            s.push_str(&format!(" -> {to}"));
        }
        s
    };
    match shared.ports.as_ref().filter(|p| !p.is_empty()) {
        Some(ports) => {
            for p in ports {
                rows.push(fmt_port(
                    &format!("*{}", p.label),
                    p.value,
                    p.to,
                    &p.host_ip,
                ));
            }
        }
        None => {
            for p in nw.all_ports() {
                rows.push(fmt_port(&p.label, p.value, p.to, &nw.ip));
            }
        }
    }
    if rows.len() == 1 {
        return None;
    }
    let mode = if nw.mode.is_empty() {
        String::new()
    } else {
        format!(" (mode = {})", quote(&nw.mode))
    };
    Some(format!(
        "Allocation Addresses{mode}:\n{}",
        format_list(&rows)
    ))
}

/// `(hook, sidecar)` of a task's lifecycle block, when it has one.
fn lifecycle_of(alloc: &Allocation, task: &str) -> Option<(String, bool)> {
    let job = alloc.job.as_ref()?;
    let group = job.lookup_task_group(&alloc.task_group)?;
    let lc = group
        .tasks
        .iter()
        .find(|t| t.name == task)?
        .lifecycle
        .as_ref()?;
    let hook = lc
        .get("Hook")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty())?;
    let sidecar = lc.get("Sidecar").and_then(Value::as_bool).unwrap_or(false);
    Some((hook.to_string(), sidecar))
}

/// Task names in Nomad's display order: lifecycle tasks (plain before sidecars), then main
/// tasks, each by name.
fn sorted_tasks(alloc: &Allocation) -> Vec<String> {
    let mut names: Vec<String> = alloc
        .task_states
        .iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .collect();
    names.sort_by_key(|name| {
        let rank = match lifecycle_of(alloc, name) {
            Some((_, false)) => 0,
            Some((_, true)) => 1,
            None => 2,
        };
        (rank, name.clone())
    });
    names
}

/// The "Task Resources" table, from the legacy per-task resources or the allocated ones; with
/// live `usage`, CPU and memory read "used/reserved".
fn task_resources_text(
    alloc: &Allocation,
    task: &str,
    usage: Option<&ResourceUsage>,
) -> Option<String> {
    let (cpu, memory_mb, networks) = match alloc.task_resources.as_ref().and_then(|r| r.get(task)) {
        Some(r) => (r.cpu, r.memory_mb, r.networks.clone().unwrap_or_default()),
        None => {
            let r = alloc.allocated_resources.as_ref()?.tasks.get(task)?;
            (
                r.cpu.cpu_shares,
                r.memory.memory_mb,
                r.networks.clone().unwrap_or_default(),
            )
        }
    };
    let disk_mb = alloc
        .resources
        .as_ref()
        .map(|r| r.disk_mb)
        .filter(|d| *d > 0)
        .or_else(|| alloc.allocated_resources.as_ref().map(|r| r.shared.disk_mb))
        .unwrap_or(0);
    let addrs: Vec<String> = networks
        .iter()
        .flat_map(|nw| {
            nw.all_ports()
                .map(move |p| format!("{}: {}:{}", p.label, nw.ip, p.value))
        })
        .collect();
    let (mut cpu_text, mut memory_text) = (cpu.to_string(), humanize_mb(memory_mb));
    if let Some(usage) = usage {
        cpu_text = format!("{}/{cpu_text}", usage.cpu_stats.total_ticks.floor());
        // Nomad's rule: RSS, unless it was not measured and is zero (then Usage).
        let memory = &usage.memory_stats;
        let used = if memory.rss == 0 && !memory.measured.iter().any(|m| m == "RSS") {
            memory.usage
        } else {
            memory.rss
        };
        memory_text = format!("{}/{memory_text}", humanize_ibytes(used));
    }
    let mut rows = vec![
        "CPU|Memory|Disk|Addresses".to_string(),
        format!(
            "{cpu_text} MHz|{memory_text}|{}|{}",
            humanize_mb(disk_mb),
            addrs.first().map(String::as_str).unwrap_or_default()
        ),
    ];
    rows.extend(addrs.iter().skip(1).map(|a| format!("|||{a}")));
    Some(format!(
        "Task Resources\n{}",
        format_list_with_spaces(&rows)
    ))
}

/// `-stats`: the measured memory and CPU figures of one task, each as a table of its measured
/// names (sorted) over their values.
fn verbose_usage_text(usage: &ResourceUsage) -> String {
    let mut parts = Vec::new();
    let memory = &usage.memory_stats;
    if !memory.measured.is_empty() {
        let mut names = memory.measured.clone();
        names.sort();
        let values: Vec<String> = names
            .iter()
            .filter_map(|name| {
                let bytes = match name.as_str() {
                    "RSS" => memory.rss,
                    "Cache" => memory.cache,
                    "Swap" => memory.swap,
                    "Usage" => memory.usage,
                    "Max Usage" => memory.max_usage,
                    "Kernel Usage" => memory.kernel_usage,
                    "Kernel Max Usage" => memory.kernel_max_usage,
                    _ => return None,
                };
                Some(humanize_ibytes(bytes))
            })
            .collect();
        parts.push(format!(
            "Memory Stats\n{}",
            format_list(&[names.join("|"), values.join("|")])
        ));
    }
    let cpu = &usage.cpu_stats;
    if !cpu.measured.is_empty() {
        let mut names = cpu.measured.clone();
        names.sort();
        let values: Vec<String> = names
            .iter()
            .filter_map(|name| {
                Some(match name.as_str() {
                    "Percent" => format!("{:.2}%", cpu.percent),
                    "Throttled Periods" => cpu.throttled_periods.to_string(),
                    "Throttled Time" => cpu.throttled_time.to_string(),
                    "User Mode" => format!("{:.2}%", cpu.user_mode),
                    "System Mode" => format!("{:.2}%", cpu.system_mode),
                    _ => return None,
                })
            })
            .collect();
        parts.push(format!(
            "CPU Stats\n{}",
            format_list(&[names.join("|"), values.join("|")])
        ));
    }
    parts.join("\n\n")
}

/// "Task Events:" and "Recent Events:" for one task, newest event first.
fn task_status_text(state: &TaskState) -> String {
    let basic = format_kv(&[
        format!(
            "Started At|{}",
            format_rfc3339_or_na(state.started_at.as_deref())
        ),
        format!(
            "Finished At|{}",
            format_rfc3339_or_na(state.finished_at.as_deref())
        ),
        format!("Total Restarts|{}", state.restarts),
        format!(
            "Last Restart|{}",
            format_rfc3339_or_na(state.last_restart.as_deref())
        ),
    ]);
    let mut rows = vec!["Time|Type|Description".to_string()];
    for event in state.events.iter().rev() {
        let message = if event.display_message.is_empty() {
            event.default_display_message()
        } else {
            event.display_message.clone()
        };
        rows.push(format!(
            "{}|{}|{message}",
            format_time(event.time),
            event.event_type
        ));
    }
    format!(
        "Task Events:\n{basic}\n\nRecent Events:\n{}",
        format_list(&rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{AllocatedResources, AllocatedTaskResources, TaskEvent};
    use std::collections::BTreeMap;

    fn sample_alloc() -> Allocation {
        let mut tasks = drover_structs::VecMap::new();
        let mut r = AllocatedTaskResources::default();
        r.cpu.cpu_shares = 100;
        r.memory.memory_mb = 300;
        tasks.insert("sleep".to_string(), r);
        let mut allocated = AllocatedResources {
            tasks,
            ..Default::default()
        };
        allocated.shared.disk_mb = 300;
        let event = TaskEvent {
            event_type: "Received".into(),
            time: 1_795_969_465_107_203_844,
            display_message: "Task received by client".into(),
            ..Default::default()
        };
        Allocation {
            id: "00e818ce-f004-06d0-d884-b854ff043de4".into(),
            eval_id: "119906ce-0cf3-3fe4-f750-20a7d024e738".into(),
            name: "sleep50.g[13]".into(),
            node_id: "0d816e8c-19bd-2066-474e-6f7e52291a4c".into(),
            node_name: "vm".into(),
            job_id: "sleep50".into(),
            task_group: "g".into(),
            client_status: "running".into(),
            desired_status: "run".into(),
            allocated_resources: Some(allocated),
            task_states: Some(BTreeMap::from([(
                "sleep".to_string(),
                TaskState {
                    state: "running".into(),
                    events: vec![event],
                    ..Default::default()
                },
            )])),
            ..Default::default()
        }
    }

    #[test]
    fn status_shows_basic_info_task_heading_and_events() {
        let text = format_alloc_status(&sample_alloc(), false, None, false);
        assert!(
            text.starts_with("ID                  = 00e818ce-f004-06d0-d884-b854ff043de4\n"),
            "{text}"
        );
        assert!(
            text.contains("\nEval ID             = 119906ce\n"),
            "{text}"
        );
        assert!(text.contains("\nDesired Description = <none>\n"), "{text}");
        assert!(
            text.contains("\n\nTask \"sleep\" is \"running\"\nTask Resources\n"),
            "{text}"
        );
        assert!(text.contains("100 MHz  300 MiB  300 MiB"), "{text}");
        assert!(
            text.contains("Task Events:\nStarted At     = N/A\n"),
            "{text}"
        );
        assert!(text.contains("Recent Events:\nTime"), "{text}");
        assert!(text.contains("Received  Task received by client"), "{text}");
        assert!(!text.contains("Placement Metrics"));
    }

    #[test]
    fn verbose_status_adds_placement_metrics() {
        let text = format_alloc_status(&sample_alloc(), true, None, false);
        assert!(text.contains("\nAllocation Time     = 0s\n"), "{text}");
        assert!(
            text.ends_with("Placement Metrics\n  * No nodes were eligible for evaluation"),
            "{text}"
        );
    }

    #[test]
    fn live_usage_shows_used_over_reserved_and_stats_adds_the_measured_figures() {
        let usage: AllocResourceUsage = serde_json::from_value(serde_json::json!({
            "Tasks": {"sleep": {"ResourceUsage": {
                "MemoryStats": {"RSS": 57344, "Measured": ["RSS"]},
                "CpuStats": {"TotalTicks": 12.7, "Percent": 0.5, "Measured": ["Percent"]},
            }}},
        }))
        .unwrap();
        let text = format_alloc_status(&sample_alloc(), false, Some(&usage), false);
        assert!(
            text.contains("12/100 MHz  56 KiB/300 MiB  300 MiB"),
            "{text}"
        );
        assert!(!text.contains("Memory Stats"), "{text}");

        let text = format_alloc_status(&sample_alloc(), false, Some(&usage), true);
        assert!(
            text.contains(
                "\n\nMemory Stats\nRSS\n56 KiB\n\nCPU Stats\nPercent\n0.50%\n\nTask Events:"
            ),
            "{text}"
        );
    }
}
