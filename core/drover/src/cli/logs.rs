//! `drover alloc logs`: a task's stdout/stderr through `/v1/client/fs/logs` with `plain=true`,
//! optionally only the tail (`-tail`, `-n`, `-c`) and optionally followed (`-f`).

use std::io::Read;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use drover_structs::Allocation;

use super::alloc::find_alloc;
use super::api::{Client, escape_segment};
use super::format::{SHORT_ID, limit, quote};
use super::{Exit, ui};

/// Lines shown by `-tail` without `-n`/`-c`.
const DEFAULT_TAIL_LINES: u64 = 10;
/// Nomad's guess of bytes per line when turning `-n` into a byte offset.
const BYTES_PER_LINE: u64 = 120;
/// How long after the first bytes of a followed log the tail is cut and printed.
const TAIL_SETTLE: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// Show the task's stderr instead of its stdout
    #[arg(long)]
    pub stderr: bool,
    /// Keep streaming new output as it is written
    #[arg(short = 'f')]
    pub follow: bool,
    /// Start at the end of the log (10 lines unless -n or -c says otherwise)
    #[arg(long)]
    pub tail: bool,
    /// Show about this many lines from the end (implies -tail)
    #[arg(short = 'n', value_name = "LINES")]
    pub lines: Option<u64>,
    /// Show this many bytes from the end (implies -tail)
    #[arg(short = 'c', value_name = "BYTES")]
    pub bytes: Option<u64>,
    /// Show full identifiers in messages
    #[arg(long)]
    pub verbose: bool,
    /// Allocation ID (or unique prefix)
    pub alloc: String,
    /// Task name; may be left out when the allocation runs a single task
    pub task: Option<String>,
}

/// Where to start reading and how to trim what comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub origin: &'static str,
    pub offset: u64,
    /// Keep only this many trailing lines of the first chunk of output.
    pub lines: Option<u64>,
}

fn window(args: &LogsArgs) -> Window {
    let tail = args.tail || args.lines.is_some() || args.bytes.is_some();
    tail_window(tail, args.lines, args.bytes)
}

/// Nomad's `-tail`/`-n`/`-c`: from the start without `tail`; else `bytes` from the end, or
/// `lines` (10 by default) estimated at 120 bytes each and trimmed to that many lines.
pub(super) fn tail_window(tail: bool, lines: Option<u64>, bytes: Option<u64>) -> Window {
    if !tail {
        return Window {
            origin: "start",
            offset: 0,
            lines: None,
        };
    }
    let lines = match (lines, bytes) {
        (Some(n), _) => Some(n),
        (None, Some(_)) => None,
        (None, None) => Some(DEFAULT_TAIL_LINES),
    };
    let offset = match (bytes, lines) {
        (Some(b), _) => b,
        (None, Some(n)) => n.saturating_mul(BYTES_PER_LINE),
        (None, None) => 0,
    };
    Window {
        origin: "end",
        offset,
        lines,
    }
}

/// The task whose logs to show: the one named, or the group's only task. Messages are Nomad's.
pub(crate) fn pick_task(alloc: &Allocation, named: Option<&str>) -> Result<String, String> {
    let tasks: Vec<String> = match alloc
        .job
        .as_ref()
        .and_then(|j| j.lookup_task_group(&alloc.task_group))
    {
        Some(group) => group.tasks.iter().map(|t| t.name.clone()).collect(),
        // Without the job, the task states still name the tasks.
        None => alloc
            .task_states
            .iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect(),
    };
    if tasks.is_empty() {
        return Err(format!(
            "Could not find allocation task group: {}",
            alloc.task_group
        ));
    }
    match named {
        Some("") => Err("Task name required".into()),
        Some(name) if tasks.iter().any(|t| t == name) => Ok(name.to_string()),
        Some(name) => Err(format!(
            "Could not find task named: {name}. Found the following tasks: {}",
            tasks.join(", ")
        )),
        None if tasks.len() == 1 => Ok(tasks[0].clone()),
        None => {
            let mut msg = format!(
                "Allocation {} is running the following tasks:\n",
                quote(limit(&alloc.id, SHORT_ID))
            );
            for t in &tasks {
                msg.push_str(&format!("  * {t}\n"));
            }
            msg.push_str("\nPlease specify the task.");
            Err(msg)
        }
    }
}

/// The last `n` lines of `buf`, as Nomad's `LineLimitReader` cuts them: a newline ending the
/// buffer does not count as a line break.
fn last_lines(buf: &[u8], n: u64) -> &[u8] {
    if n == 0 {
        return &buf[buf.len()..];
    }
    let mut found = 0;
    for i in (0..buf.len()).rev() {
        if buf[i] == b'\n' && i != buf.len() - 1 {
            found += 1;
            if found == n {
                return &buf[i + 1..];
            }
        }
    }
    buf
}

pub fn run(client: &Client, args: LogsArgs) -> anyhow::Result<Exit> {
    let alloc = match find_alloc(client, &args.alloc, args.verbose) {
        Ok(a) => a,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let task = match pick_task(&alloc, args.task.as_deref()) {
        Ok(t) => t,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let win = window(&args);
    let offset = win.offset.to_string();
    let query = [
        ("task", task.as_str()),
        ("type", if args.stderr { "stderr" } else { "stdout" }),
        ("plain", "true"),
        ("follow", if args.follow { "true" } else { "false" }),
        ("origin", win.origin),
        ("offset", offset.as_str()),
    ];
    let client = client.in_namespace(&alloc.namespace);
    let path = format!("/v1/client/fs/logs/{}", escape_segment(&alloc.id));
    let reader = match client.get_stream(&path, &query) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error reading file: {e}"));
            return Ok(1);
        }
    };
    match stream(reader, win.lines, args.follow) {
        Ok(()) => Ok(0),
        Err(e) => {
            ui::err(&format!("Error reading logs: {e}"));
            Ok(1)
        }
    }
}

/// Copies the log to stdout. With a line limit, output is held back and trimmed: all of it
/// when not following; when following, what arrives within [`TAIL_SETTLE`] of the first bytes.
pub(super) fn stream(
    reader: Box<dyn Read + Send>,
    lines: Option<u64>,
    follow: bool,
) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<std::io::Result<Vec<u8>>>();
    // Reads block; a thread lets the main loop notice silence while waiting for the tail.
    std::thread::spawn(move || {
        let mut reader = reader;
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.send(Ok(buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    break;
                }
            }
        }
    });

    if let Some(n) = lines {
        let mut pending = Vec::new();
        if follow {
            // The agent sends the existing tail at once, then new output as it is written
            // (which may never pause). Collect for a moment after the first bytes, trim, go on.
            let first = match rx.recv() {
                Ok(chunk) => chunk?,
                Err(mpsc::RecvError) => return Ok(()),
            };
            pending.extend_from_slice(&first);
            let deadline = Instant::now() + TAIL_SETTLE;
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                match rx.recv_timeout(left) {
                    Ok(chunk) => pending.extend_from_slice(&chunk?),
                    // Timed out (tail collected) or the stream ended.
                    Err(_) => break,
                }
            }
        } else {
            // A finite answer: trim all of it, even if the agent ignored the offset.
            for chunk in rx.iter() {
                pending.extend_from_slice(&chunk?);
            }
        }
        write_out(last_lines(&pending, n))?;
    }
    for chunk in rx {
        write_out(&chunk?)?;
    }
    Ok(())
}

/// A closed stdout ends the command quietly rather than as a log-reading error.
fn write_out(bytes: &[u8]) -> std::io::Result<()> {
    match ui::raw(bytes) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{Job, Task, TaskGroup};
    use std::sync::Arc;

    fn args(tail: bool, lines: Option<u64>, bytes: Option<u64>) -> LogsArgs {
        LogsArgs {
            stderr: false,
            follow: false,
            tail,
            lines,
            bytes,
            verbose: false,
            alloc: "x".into(),
            task: None,
        }
    }

    #[test]
    fn window_defaults_to_whole_log_and_tail_to_ten_lines() {
        assert_eq!(window(&args(false, None, None)).origin, "start");
        assert_eq!(
            window(&args(true, None, None)),
            Window {
                origin: "end",
                offset: 1200,
                lines: Some(10)
            }
        );
        assert_eq!(window(&args(false, Some(3), None)).offset, 360);
        assert_eq!(
            window(&args(false, None, Some(50))),
            Window {
                origin: "end",
                offset: 50,
                lines: None
            }
        );
    }

    #[test]
    fn last_lines_ignores_the_final_newline() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 1), b"c");
        assert_eq!(last_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(last_lines(b"a\nb\n", 0), b"");
    }

    fn alloc_with_tasks(names: &[&str]) -> Allocation {
        let group = TaskGroup {
            name: "g".into(),
            tasks: names
                .iter()
                .map(|n| Task {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        Allocation {
            id: "00e818ce-f004-06d0-d884-b854ff043de4".into(),
            task_group: "g".into(),
            job: Some(Arc::new(Job {
                task_groups: vec![group],
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn single_task_is_picked_without_a_name() {
        assert_eq!(
            pick_task(&alloc_with_tasks(&["web"]), None),
            Ok("web".to_string())
        );
    }

    #[test]
    fn several_tasks_require_a_name() {
        let e = pick_task(&alloc_with_tasks(&["a", "b"]), None).unwrap_err();
        assert_eq!(
            e,
            "Allocation \"00e818ce\" is running the following tasks:\n  * a\n  * b\n\nPlease specify the task."
        );
        assert_eq!(
            pick_task(&alloc_with_tasks(&["a", "b"]), Some("b")),
            Ok("b".to_string())
        );
        let e = pick_task(&alloc_with_tasks(&["a"]), Some("zz")).unwrap_err();
        assert_eq!(
            e,
            "Could not find task named: zz. Found the following tasks: a"
        );
    }
}
