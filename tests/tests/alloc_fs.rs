//! `drover alloc fs` (and its alias `drover fs`) against a real dev agent and a raw_exec task
//! that writes one file into its local dir and keeps appending to another.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use drover_tests::{Agent, TempDir, allocs, drover_bin, output_text, write_job};

const WAIT: Duration = Duration::from_secs(60);

const JOB: &str = r#"
job "fsjob" {
  datacenters = ["dc1"]
  group "g" {
    task "writer" {
      driver = "raw_exec"
      kill_timeout = "1s"
      config {
        command = "/bin/sh"
        args = ["-c", "printf 'hello fs\\n' > \"$NOMAD_TASK_DIR/hello.txt\"; i=0; while true; do echo \"line-$i\" >> \"$NOMAD_TASK_DIR/grow.txt\"; i=$((i+1)); sleep 0.2; done"]
      }
      resources {
        cpu = 20
        memory = 32
      }
    }
  }
}
"#;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The highest `line-N` in `text`.
fn last_line_number(text: &str) -> Option<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("line-")?.parse().ok())
        .max()
}

#[test]
fn alloc_fs_lists_prints_stats_tails_and_follows_files_of_a_running_task() {
    let dir = TempDir::new("alloc-fs");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(&dir, "fsjob.nomad", JOB);
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    agent.eventually("the alloc to run", WAIT, || {
        allocs(&agent, "fsjob")
            .iter()
            .any(|a| a["ClientStatus"] == "running")
    });
    let alloc_id = allocs(&agent, "fsjob")[0]["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    let prefix = &alloc_id[..8];

    // The listing of the task's local dir names both files.
    agent.eventually("both files in the listing", WAIT, || {
        let out = agent.cli(&["alloc", "fs", prefix, "writer/local"]);
        let text = stdout(&out);
        out.status.success() && text.contains("hello.txt") && text.contains("grow.txt")
    });
    let out = agent.cli(&["alloc", "fs", prefix, "writer/local"]);
    let text = stdout(&out);
    assert!(
        text.starts_with("Mode") && text.contains("Modified Time") && text.contains("Name"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("-rw") && l.contains(" 9 B ") && l.ends_with("hello.txt")),
        "{text}"
    );
    // Directories end in a slash.
    let out = agent.cli(&["alloc", "fs", prefix, "writer"]);
    assert!(
        stdout(&out).lines().any(|l| l.ends_with("local/")),
        "{}",
        output_text(&out)
    );

    // A file is printed, by either name of the command.
    let out = agent.cli(&["alloc", "fs", prefix, "writer/local/hello.txt"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(stdout(&out), "hello fs\n");
    let out = agent.cli(&["fs", prefix, "writer/local/hello.txt"]);
    assert_eq!(stdout(&out), "hello fs\n", "{}", output_text(&out));
    let out = agent.cli(&["alloc", "fs", "-job", "fsjob", "writer/local/hello.txt"]);
    assert_eq!(stdout(&out), "hello fs\n", "{}", output_text(&out));

    // -stat shows the size (humanized, or in bytes with -H) and the content type.
    let out = agent.cli(&["alloc", "fs", "-stat", prefix, "writer/local/hello.txt"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        text.starts_with("Mode") && text.contains("Content Type"),
        "{text}"
    );
    let row = text.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains(" 9 B ") && row.contains("text/plain") && row.ends_with("hello.txt"),
        "{text}"
    );
    let out = agent.cli(&[
        "alloc",
        "fs",
        "-stat",
        "-H",
        prefix,
        "writer/local/hello.txt",
    ]);
    let text = stdout(&out);
    let row = text.lines().nth(1).unwrap_or_default();
    assert_eq!(row.split_whitespace().nth(1), Some("9"), "{text}");

    // -tail -n 2: the last two lines of the growing file.
    agent.eventually("a few lines in grow.txt", WAIT, || {
        let out = agent.cli(&["alloc", "fs", prefix, "writer/local/grow.txt"]);
        last_line_number(&stdout(&out)).is_some_and(|n| n >= 3)
    });
    let out = agent.cli(&[
        "alloc",
        "fs",
        "-tail",
        "-n",
        "2",
        prefix,
        "writer/local/grow.txt",
    ]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.lines().all(|l| l.starts_with("line-")), "{text}");

    // Errors are the agent's, with exit code 1.
    let out = agent.cli(&["alloc", "fs", prefix, "writer/local/nope"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("Unexpected response code: 404"),
        "{}",
        output_text(&out)
    );

    // -f prints lines written after it started.
    let out = agent.cli(&["alloc", "fs", prefix, "writer/local/grow.txt"]);
    let before = last_line_number(&stdout(&out)).expect("lines so far");
    let mut follower = Command::new(drover_bin())
        .args(["alloc", "fs", "-f", prefix, "writer/local/grow.txt"])
        .env("DROVER_ADDR", agent.addr())
        .env_remove("NOMAD_ADDR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the follower");
    let follower_out = follower.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(follower_out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let want = format!("line-{}", before + 3);
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while !seen.contains(&want) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(
        seen.contains(&want),
        "the follower never printed {want}; it printed {seen:?}"
    );
    assert_eq!(
        seen.first().map(String::as_str),
        Some("line-0"),
        "from the start"
    );

    let out = agent.cli(&["job", "stop", "-detach", "fsjob"]);
    assert!(out.status.success(), "job stop: {}", output_text(&out));
}
