//! Agent shutdown on SIGTERM: quick while tasks run, and the tasks stay for the next agent.

use std::time::{Duration, Instant};

use drover_tests::{Agent, TempDir, allocs, find_process, output_text, write_job};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn sigterm_stops_the_agent_within_two_seconds_while_a_task_runs_and_leaves_the_task_running() {
    let dir = TempDir::new("shutdown-quick");
    let mut agent = Agent::start_dev(dir.path(), &[]);
    // A command line unique to this test, to find its process.
    let marker = format!("{}", 4000 + std::process::id() % 1000);
    let job = write_job(
        &dir,
        "sleepy.nomad",
        &format!(
            r#"
job "sleepy" {{
  datacenters = ["dc1"]
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args = ["{marker}"]
      }}
    }}
  }}
}}
"#
        ),
    );
    let out = agent.cli(&["job", "run", "-detach", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the task runs", WAIT, || {
        allocs(&agent, "sleepy")
            .iter()
            .any(|a| a["ClientStatus"] == "running")
            && find_process(&["/bin/sleep", &marker]).is_some()
    });
    let pid = find_process(&["/bin/sleep", &marker]).expect("the task's process");

    let started = Instant::now();
    // SAFETY: a signal to our own child process.
    unsafe { libc::kill(agent.child.id() as i32, libc::SIGTERM) };
    let exited = loop {
        if let Ok(Some(_)) = agent.child.try_wait() {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the agent did not exit within 30 s:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let still_running = find_process(&["/bin/sleep", &marker]) == Some(pid);
    // SAFETY: ending the task process this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(
        exited < Duration::from_secs(2),
        "the agent took {exited:?} to exit on SIGTERM:\n{}",
        agent.log()
    );
    assert!(still_running, "the task did not outlive the agent");
}
