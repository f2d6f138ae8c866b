//! Tasks that write output keep running while their agent is down: a raw_exec and an exec task
//! print a numbered line every 50 ms; the agent is killed with SIGKILL, stays down a while (no
//! log pump reads their FIFOs), and starts again on the same data dir. Both tasks keep their
//! process, count no restart, and every line they printed, those of the downtime included, is in
//! their logs in order. (Before, their first write with no reader was a SIGPIPE that killed
//! them; chatty tasks such as CSI plugins died on every agent restart.)

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, find_process, is_alive, output_text, write_job};

const WAIT: Duration = Duration::from_secs(60);

/// A shell loop printing `<marker> <n>` every 50 ms; the marker makes its process findable.
fn script(marker: &str) -> String {
    format!("i=0; while true; do i=$((i+1)); echo {marker} $i; sleep 0.05; done")
}

fn job(raw_marker: &str, exec_marker: &str) -> String {
    let task = |name: &str, driver: &str, marker: &str| {
        format!(
            r#"
    task "{name}" {{
      driver = "{driver}"
      config {{
        command = "/bin/sh"
        args    = ["-c", "{script}"]
      }}
      resources {{
        cpu    = 20
        memory = 32
      }}
    }}"#,
            script = script(marker)
        )
    };
    format!(
        r#"
job "chatty" {{
  datacenters = ["dc1"]
  group "g" {{{raw}{exec}
  }}
}}
"#,
        raw = task("raw", "raw_exec", raw_marker),
        exec = task("exec", "exec", exec_marker),
    )
}

/// The numbers of the task's log lines, in order.
fn logged_numbers(agent: &Agent, alloc_id: &str, task: &str) -> Vec<u64> {
    let out = agent.cli(&["alloc", "logs", alloc_id, task]);
    assert!(out.status.success(), "alloc logs: {}", output_text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

fn pid_of(marker: &str) -> Option<i32> {
    find_process(&["/bin/sh", "-c", &script(marker)])
}

#[test]
fn tasks_writing_while_their_agent_is_down_keep_running_and_lose_no_line() {
    let dir = TempDir::new("chatty");
    let mut agent = Agent::start_dev(dir.path(), &[]);
    let tag = std::process::id();
    let (raw_marker, exec_marker) = (format!("raw-{tag}"), format!("exec-{tag}"));
    let file = write_job(&dir, "chatty.nomad", &job(&raw_marker, &exec_marker));
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    agent.eventually("both tasks to run", WAIT, || {
        pid_of(&raw_marker).is_some() && pid_of(&exec_marker).is_some()
    });
    let alloc_id = allocs(&agent, "chatty")[0]["ID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pids = [pid_of(&raw_marker), pid_of(&exec_marker)];

    let (http, rpc) = (agent.http_port, agent.rpc_port);
    agent.kill9();
    // About thirty lines each while nothing reads their output.
    std::thread::sleep(Duration::from_millis(1500));
    for pid in pids.iter().flatten() {
        assert!(is_alive(*pid), "task {pid} died while its agent was down");
    }
    let agent = Agent::start_on_ports(dir.path(), http, rpc, &[]);
    // Lines of before, of the downtime and of after.
    agent.eventually("the logs to go on after the restart", WAIT, || {
        ["raw", "exec"]
            .iter()
            .all(|t| logged_numbers(&agent, &alloc_id, t).len() > 100)
    });
    assert_eq!([pid_of(&raw_marker), pid_of(&exec_marker)], pids);
    let alloc = agent
        .get(&format!("/v1/allocation/{alloc_id}"))
        .expect("the allocation");
    for task in ["raw", "exec"] {
        assert_eq!(alloc["TaskStates"][task]["Restarts"], 0, "{alloc:#}");
        let numbers = logged_numbers(&agent, &alloc_id, task);
        let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
        assert_eq!(numbers, expected, "{task}: every line, in order");
    }

    let out = agent.cli(&["job", "stop", "chatty"]);
    assert!(out.status.success(), "job stop: {}", output_text(&out));
    agent.eventually("the tasks to end", WAIT, || {
        pid_of(&raw_marker).is_none() && pid_of(&exec_marker).is_none()
    });
    let mut agent = agent;
    agent.terminate();
}
