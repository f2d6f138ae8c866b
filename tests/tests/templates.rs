//! End-to-end: the task `template` block on a dev agent. Templates are rendered into the task
//! directory before the task starts (the task's environment, node attributes as Nomad's
//! templates see them, `env = true` variables), a function Drover cannot serve fails the task
//! with Nomad's "Template failed" event, and a `change_mode = "signal"` template whose source
//! file changes while the task runs delivers its signal. What tasks print is read back through
//! `drover alloc logs`.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// A batch job `name` with one raw_exec task "t" running `/bin/sh -c script`, with the
/// `template` blocks given as HCL.
fn job(name: &str, templates: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "batch"
  group "g" {{
    restart {{
      attempts = 0
      mode = "fail"
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", {script}]
      }}
{templates}
      resources {{
        cpu = 20
        memory = 32
      }}
    }}
  }}
}}
"#,
        script = Value::from(script)
    )
}

/// One `template` block: `data` (quoted for HCL) into `destination`, with `extra` settings.
fn template(data: &str, destination: &str, extra: &str) -> String {
    format!(
        "      template {{\n        data = {}\n        destination = {:?}\n        {extra}\n      }}\n",
        Value::from(data),
        destination
    )
}

/// Registers `text` as job `name` (not waiting for it) and waits until its allocation has
/// `status`; answers the allocation.
fn run_until(agent: &Agent, dir: &TempDir, name: &str, text: &str, status: &str) -> Value {
    let file = write_job(dir, &format!("{name}.nomad"), text);
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(
        out.status.success(),
        "job run failed: {}\n{}",
        output_text(&out),
        agent.log()
    );
    agent.eventually(&format!("the alloc of {name} to be {status}"), WAIT, || {
        allocs(agent, name)
            .iter()
            .any(|a| a["ClientStatus"] == status)
    });
    let id = allocs(agent, name)[0]["ID"]
        .as_str()
        .expect("the alloc has an ID")
        .to_string();
    agent
        .get(&format!("/v1/allocation/{id}"))
        .expect("the allocation")
}

fn stdout_of(agent: &Agent, alloc_id: &str) -> String {
    let logs = agent.cli(&["alloc", "logs", alloc_id, "t"]);
    assert!(
        logs.status.success(),
        "alloc logs failed: {}",
        output_text(&logs)
    );
    String::from_utf8_lossy(&logs.stdout).to_string()
}

fn events(alloc: &Value) -> Vec<Value> {
    alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn templates_render_the_alloc_id_a_node_attribute_and_env_vars_before_the_task_starts() {
    let dir = TempDir::new("templates-render");
    let agent = Agent::start_dev(dir.path(), &[]);
    let templates = [
        template(
            "{{ env \"NOMAD_ALLOC_ID\" }} {{ env \"attr.kernel.name\" }}\n{{- /* trimmed */ -}}\n",
            "local/out.txt",
            "",
        ),
        template(
            "GREETING={{ \"hello\" | toUpper }}\n# a comment\nexport COUNT={{ 2 | add 3 }}\n",
            "secrets/app.env",
            "env = true",
        ),
    ]
    .concat();
    let script = "cat local/out.txt; echo; echo \"greeting=$GREETING count=$COUNT\"";
    let alloc = run_until(
        &agent,
        &dir,
        "rendered",
        &job("rendered", &templates, script),
        "complete",
    );
    let alloc_id = alloc["ID"].as_str().expect("alloc id");
    let node_id = alloc["NodeID"].as_str().expect("node id");
    let node = agent.get(&format!("/v1/node/{node_id}")).expect("the node");
    let kernel = node["Attributes"]["kernel.name"]
        .as_str()
        .expect("the node has kernel.name");
    assert_eq!(
        stdout_of(&agent, alloc_id),
        format!("{alloc_id} {kernel}\ngreeting=HELLO count=5\n")
    );
}

#[test]
fn a_template_calling_nomad_var_fails_the_task_with_a_template_failed_event() {
    let dir = TempDir::new("templates-unsupported");
    let agent = Agent::start_dev(dir.path(), &[]);
    let templates = template(
        "{{ with nomadVar \"nomad/jobs\" }}{{ .x }}{{ end }}",
        "local/db.conf",
        "",
    );
    let alloc = run_until(
        &agent,
        &dir,
        "unsupported-fn",
        &job("unsupported-fn", &templates, "echo started"),
        "failed",
    );
    let state = &alloc["TaskStates"]["t"];
    assert_eq!(state["Failed"], true, "{state}");
    assert!(
        state["StartedAt"].is_null(),
        "the task never started: {state}"
    );
    let failed = events(&alloc)
        .into_iter()
        .find(|e| e["Type"] == "Killing" && e["FailsTask"] == true)
        .unwrap_or_else(|| panic!("no failing Killing event: {state}"));
    let message = failed["DisplayMessage"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Template failed: ")
            && message.contains("function \"nomadVar\" is not supported"),
        "{message}"
    );
}

#[test]
fn a_signal_template_whose_source_changes_sends_its_change_signal_to_the_task() {
    let dir = TempDir::new("templates-signal");
    let agent = Agent::start_dev(dir.path(), &[]);
    // The first template writes the second one's source; the task then changes that source,
    // which the client's re-render sees, rewriting local/app.conf and sending SIGUSR1.
    let templates = [
        template("v1\n", "local/app.tpl", "change_mode = \"noop\""),
        "      template {\n        source = \"local/app.tpl\"\n        destination = \"local/app.conf\"\n        change_mode = \"signal\"\n        change_signal = \"SIGUSR1\"\n      }\n"
            .to_string(),
    ]
    .concat();
    let script = r#"trap 'echo "got USR1: $(cat local/app.conf)"; exit 0' USR1
echo "before: $(cat local/app.conf)"
echo v2 > local/app.tpl
i=0
while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
echo "no signal"
exit 1"#;
    let alloc = run_until(
        &agent,
        &dir,
        "signalled",
        &job("signalled", &templates, script),
        "complete",
    );
    let alloc_id = alloc["ID"].as_str().expect("alloc id");
    assert_eq!(stdout_of(&agent, alloc_id), "before: v1\ngot USR1: v2\n");
    let signalled = events(&alloc).into_iter().any(|e| {
        e["Type"] == "Signaling"
            && e["DisplayMessage"] == "Task being sent signal SIGUSR1: template changed"
    });
    assert!(signalled, "no Signaling event: {}", alloc["TaskStates"]);
}

#[test]
fn a_restart_template_whose_source_changes_restarts_the_task_with_the_new_output() {
    let dir = TempDir::new("templates-restart");
    let agent = Agent::start_dev(dir.path(), &[]);
    let templates = [
        template("v1\n", "local/app.tpl", "change_mode = \"noop\""),
        "      template {\n        source = \"local/app.tpl\"\n        destination = \"local/app.conf\"\n      }\n".to_string(),
    ]
    .concat();
    // The first run changes the source and waits to be restarted; the second one sees v2.
    let script = r#"echo "run: $(cat local/app.conf)"
if [ "$(cat local/app.conf)" = v2 ]; then exit 0; fi
echo v2 > local/app.tpl
i=0
while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
exit 1"#;
    let alloc = run_until(
        &agent,
        &dir,
        "restarted",
        &job("restarted", &templates, script),
        "complete",
    );
    let alloc_id = alloc["ID"].as_str().expect("alloc id");
    assert_eq!(stdout_of(&agent, alloc_id), "run: v1\nrun: v2\n");
    let state = &alloc["TaskStates"]["t"];
    assert_eq!(state["Restarts"], 1, "{state}");
    let signalled = events(&alloc).into_iter().any(|e| {
        e["Type"] == "Restart Signaled"
            && e["DisplayMessage"] == "Template with change_mode restart re-rendered"
    });
    assert!(signalled, "no Restart Signaled event: {state}");
}

#[test]
fn templates_of_a_task_taken_back_after_an_agent_restart_keep_signalling_on_change() {
    let dir = TempDir::new("templates-recover");
    let mut agent = Agent::start_dev(dir.path(), &[]);
    // The clock template changes every render: its file changing after the restart shows the
    // new agent re-renders. It comes last, so the templates before it were taken back by then.
    let templates = [
        template("v1\n", "local/app.tpl", "change_mode = \"noop\""),
        "      template {\n        source = \"local/app.tpl\"\n        destination = \"local/app.conf\"\n        change_mode = \"signal\"\n        change_signal = \"SIGUSR1\"\n      }\n"
            .to_string(),
        template(
            "{{ timestamp \"2006-01-02T15:04:05.000000000Z07:00\" }}",
            "local/clock.txt",
            "change_mode = \"noop\"",
        ),
    ]
    .concat();
    let script = r#"trap 'echo "got USR1: $(cat local/app.conf)"; exit 0' USR1
echo "dir=$(pwd)"
i=0
while [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
exit 1"#;
    let alloc = run_until(
        &agent,
        &dir,
        "recovered",
        &job("recovered", &templates, script),
        "running",
    );
    let alloc_id = alloc["ID"].as_str().expect("alloc id").to_string();
    let mut task_dir = String::new();
    agent.eventually("the task to print its directory", WAIT, || {
        let out = agent.cli(&["alloc", "logs", &alloc_id, "t"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        match text.lines().find_map(|l| l.strip_prefix("dir=")) {
            Some(d) => {
                task_dir = d.to_string();
                true
            }
            None => false,
        }
    });
    let task_dir = std::path::PathBuf::from(task_dir);
    agent.kill9();
    let agent = Agent::start_on_ports(dir.path(), agent.http_port, agent.rpc_port, &[]);
    let clock = || std::fs::read_to_string(task_dir.join("local/clock.txt")).unwrap_or_default();
    let seen = clock();
    agent.eventually("the new agent to re-render the templates", WAIT, || {
        clock() != seen
    });
    std::fs::write(task_dir.join("local/app.tpl"), "v2\n").expect("change the source");
    agent.eventually("the task to print that it got the signal", WAIT, || {
        stdout_of(&agent, &alloc_id).contains("got USR1")
    });
    assert_eq!(
        stdout_of(&agent, &alloc_id),
        format!("dir={}\ngot USR1: v2\n", task_dir.display())
    );
    let alloc = agent
        .get(&format!("/v1/allocation/{alloc_id}"))
        .expect("the allocation");
    let signalled = events(&alloc).into_iter().any(|e| {
        e["Type"] == "Signaling"
            && e["DisplayMessage"] == "Task being sent signal SIGUSR1: template changed"
    });
    assert!(signalled, "no Signaling event: {}", alloc["TaskStates"]);
}

#[test]
fn an_exec_tasks_templates_see_the_directories_as_the_task_does() {
    let dir = TempDir::new("templates-exec");
    let agent = Agent::start_dev(dir.path(), &[]);
    let templates = template(
        "{{ env \"NOMAD_TASK_DIR\" }} {{ env \"NOMAD_ALLOC_DIR\" }} {{ env \"NOMAD_SECRETS_DIR\" }}\n",
        "local/paths.txt",
        "",
    );
    let text = job("exec-paths", &templates, "cat /local/paths.txt")
        .replace("driver = \"raw_exec\"", "driver = \"exec\"");
    let alloc = run_until(&agent, &dir, "exec-paths", &text, "complete");
    let alloc_id = alloc["ID"].as_str().expect("alloc id");
    assert_eq!(stdout_of(&agent, alloc_id), "/local /alloc /secrets\n");
}

/// A template with `change_mode = "script"` whose source the task changes: `change_script`
/// as HCL, the task waiting up to 30 s for `local/marker` and printing it.
fn script_job(name: &str, change_script: &str) -> String {
    let templates = [
        template("v1\n", "local/app.tpl", "change_mode = \"noop\""),
        format!(
            "      template {{\n        source = \"local/app.tpl\"\n        destination = \"local/app.conf\"\n        change_mode = \"script\"\n        splay = \"0s\"\n        change_script {{\n{change_script}\n        }}\n      }}\n"
        ),
    ]
    .concat();
    let script = r#"echo "before: $(cat local/app.conf)"
echo v2 > local/app.tpl
i=0
while [ $i -lt 300 ] && [ ! -e local/marker ]; do sleep 0.1; i=$((i+1)); done
if [ -e local/marker ]; then echo "marker: $(cat local/marker)"; exit 0; fi
sleep 30
exit 1"#;
    job(name, &templates, script)
}

#[test]
fn a_script_template_whose_source_changes_runs_its_change_script_in_the_task() {
    let dir = TempDir::new("templates-script");
    let agent = Agent::start_dev(dir.path(), &[]);
    let change_script = r#"          command = "/bin/sh"
          args = ["-c", "cat local/app.conf > local/marker"]
          timeout = "10s"
          fail_on_error = false"#;
    let alloc = run_until(
        &agent,
        &dir,
        "scripted",
        &script_job("scripted", change_script),
        "complete",
    );
    let alloc_id = alloc["ID"].as_str().expect("alloc id");
    assert_eq!(stdout_of(&agent, alloc_id), "before: v1\nmarker: v2\n");
    let ran = events(&alloc).into_iter().any(|e| {
        e["Type"] == "Task hook message"
            && e["DisplayMessage"]
                == "Template successfully ran script /bin/sh with arguments: [-c cat local/app.conf > local/marker]. Exit code: 0"
    });
    assert!(ran, "no Task hook message event: {}", alloc["TaskStates"]);
}

#[test]
fn a_failing_change_script_with_fail_on_error_kills_the_task_with_nomads_events() {
    let dir = TempDir::new("templates-script-fail");
    let agent = Agent::start_dev(dir.path(), &[]);
    let change_script = r#"          command = "/bin/sh"
          args = ["-c", "exit 3"]
          fail_on_error = true"#;
    let alloc = run_until(
        &agent,
        &dir,
        "script-failed",
        &script_job("script-failed", change_script),
        "failed",
    );
    let events = events(&alloc);
    let hook_failed = events.iter().any(|e| {
        e["Type"] == "Task hook failed"
            && e["DisplayMessage"]
                == "Template ran script /bin/sh with arguments [-c exit 3] on change but it exited with code: 3"
    });
    assert!(
        hook_failed,
        "no Task hook failed event: {}",
        alloc["TaskStates"]
    );
    let killed = events.iter().any(|e| {
        e["Type"] == "Killing"
            && e["FailsTask"] == true
            && e["DisplayMessage"] == "Template script failed, task is being killed"
    });
    assert!(killed, "no failing Killing event: {}", alloc["TaskStates"]);
}
