//! Service health checks run by the client: http and script checks of a running allocation
//! are listed by `/v1/client/allocation/:id/checks` and `drover alloc checks`, a deployment
//! with `health_check = "checks"` turns healthy once they pass, and a check that keeps
//! failing restarts its task through `check_restart`.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// An HTTP server answering 200 "ok" on /health and 500 "broken" elsewhere, on the address
/// and port given as arguments.
const SERVER: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/health"
        self.send_response(200 if ok else 500)
        self.end_headers()
        self.wfile.write(b"ok" if ok else b"broken")
    def log_message(self, *args):
        pass
http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()
"#;

fn job(name: &str, group_body: &str, task_body: &str) -> String {
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  group "g" {{
    network {{
      port "http" {{}}
    }}
{group_body}
    task "serve" {{
      driver = "raw_exec"
      config {{
        command = "/usr/bin/python3"
        args    = ["-c", {server:?}, "${{NOMAD_IP_http}}", "${{NOMAD_PORT_http}}"]
      }}
      service {{
        name = "{name}-script"
        check {{
          name     = "script-ok"
          type     = "script"
          command  = "/bin/sh"
          args     = ["-c", "echo script-ok"]
          interval = "1s"
          timeout  = "5s"
        }}
        check {{
          name      = "script-warns"
          type      = "script"
          command   = "/bin/sh"
          args      = ["-c", "echo not yet; exit 1"]
          interval  = "1s"
          timeout   = "5s"
          on_update = "ignore"
        }}
      }}
{task_body}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
  }}
}}
"#,
        server = SERVER
    )
}

fn first_alloc(agent: &Agent, job: &str) -> Value {
    let mut found = Value::Null;
    agent.eventually("the allocation runs", WAIT, || {
        found = allocs(agent, job)
            .into_iter()
            .find(|a| a["ClientStatus"] == "running")
            .unwrap_or(Value::Null);
        !found.is_null()
    });
    found
}

fn checks(agent: &Agent, alloc: &str) -> Vec<Value> {
    agent
        .get(&format!("/v1/client/allocation/{alloc}/checks"))
        .ok()
        .and_then(|v| v.as_object().map(|m| m.values().cloned().collect()))
        .unwrap_or_default()
}

fn check_named<'a>(checks: &'a [Value], name: &str) -> Option<&'a Value> {
    checks.iter().find(|c| c["Check"] == name)
}

#[test]
fn http_and_script_checks_pass_show_in_alloc_checks_and_make_the_deployment_healthy() {
    let dir = TempDir::new("checks-pass");
    let agent = Agent::start_dev(dir.path(), &[]);
    let group = r#"
    update {
      health_check     = "checks"
      min_healthy_time = "2s"
      healthy_deadline = "60s"
      progress_deadline = "90s"
    }
    service {
      name     = "web"
      port     = "http"
      provider = "nomad"
      check {
        name     = "alive"
        type     = "http"
        path     = "/health"
        interval = "1s"
        timeout  = "2s"
      }
    }"#;
    let file = write_job(&dir, "web.nomad", &job("web", group, ""));
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    let alloc = first_alloc(&agent, "web");
    let id = alloc["ID"].as_str().expect("alloc id").to_string();

    agent.eventually("every check has a result", WAIT, || {
        let c = checks(&agent, &id);
        c.len() == 3
            && check_named(&c, "alive").is_some_and(|r| r["Status"] == "success")
            && check_named(&c, "script-ok").is_some_and(|r| r["Status"] == "success")
            && check_named(&c, "script-warns").is_some_and(|r| r["Status"] == "warning")
    });
    let c = checks(&agent, &id);
    let alive = check_named(&c, "alive").expect("http check");
    assert_eq!(alive["StatusCode"], 200, "{alive}");
    assert_eq!(alive["Output"], "nomad: http ok");
    assert_eq!(alive["Mode"], "healthiness");
    assert_eq!(alive["Service"], "web");
    assert!(
        alive.get("Task").is_none(),
        "a group check has no task: {alive}"
    );
    assert_eq!(alive["Group"], alloc["Name"]);
    assert_eq!(alive["ID"].as_str().map(str::len), Some(32));
    let script = check_named(&c, "script-ok").expect("script check");
    assert_eq!(script["Output"], "script-ok\n");
    assert_eq!(script["Task"], "serve");
    let warns = check_named(&c, "script-warns").expect("warning check");
    assert_eq!(warns["Mode"], "readiness");
    assert_eq!(warns["Output"], "not yet\n");

    // The readiness check's warning does not hold the deployment back.
    agent.eventually("the deployment succeeds", WAIT, || {
        agent
            .get("/v1/job/web/deployment")
            .is_ok_and(|d| d["Status"] == "successful")
    });
    let alloc = agent.get(&format!("/v1/allocation/{id}")).expect("alloc");
    assert_eq!(alloc["DeploymentStatus"]["Healthy"], true, "{alloc}");

    let out = agent.cli(&["alloc", "checks", &id]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.starts_with("Status of 3 Nomad Service Checks"),
        "{text}"
    );
    // Nomad's `formatList` of `key|=|value` rows: the keys padded, then `=` and the value.
    let rows: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    for expected in [
        ("Name", "alive"),
        ("StatusCode", "200"),
        ("Output", "nomad: http ok"),
        ("Task", "(group)"),
        ("Status", "warning"),
    ] {
        assert!(rows.contains(&expected), "{expected:?} missing in {text}");
    }

    // Stopped: the checks go with the allocation.
    let out = agent.cli(&["job", "stop", "-detach", "web"]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("the results are purged", WAIT, || {
        checks(&agent, &id).is_empty()
    });
}

fn restart_events(agent: &Agent, alloc: &str) -> Vec<Value> {
    let alloc = agent
        .get(&format!("/v1/allocation/{alloc}"))
        .unwrap_or(Value::Null);
    alloc["TaskStates"]["serve"]["Events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_check_that_keeps_failing_restarts_its_task_by_check_restart() {
    let dir = TempDir::new("checks-restart");
    let agent = Agent::start_dev(dir.path(), &[]);
    let group = r#"
    restart {
      attempts = 5
      interval = "5m"
      delay    = "1s"
      mode     = "fail"
    }
"#;
    let task = r#"
      service {
        name = "flaky"
        port = "http"
        check {
          name     = "broken"
          type     = "http"
          path     = "/broken"
          interval = "1s"
          timeout  = "2s"
          check_restart {
            limit = 2
            grace = "1s"
          }
        }
      }"#;
    let file = write_job(&dir, "flaky.nomad", &job("flaky", group, task));
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    let id = first_alloc(&agent, "flaky")["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();

    agent.eventually("the failing check restarts the task", WAIT, || {
        restart_events(&agent, &id).iter().any(|e| {
            e["Type"] == "Restart Signaled"
                && e["RestartReason"] == "healthcheck: check \"broken\" unhealthy"
        })
    });
    // The restart counts against the restart policy: Nomad's "Restarting" with its delay.
    agent.eventually("the task runs again", WAIT, || {
        let alloc = agent
            .get(&format!("/v1/allocation/{id}"))
            .unwrap_or(Value::Null);
        let state = &alloc["TaskStates"]["serve"];
        state["Restarts"].as_u64().unwrap_or(0) >= 1 && state["State"] == "running"
    });
    let events = restart_events(&agent, &id);
    assert!(
        events
            .iter()
            .any(|e| e["Type"] == "Restarting" && e["RestartReason"] == "Restart within policy"),
        "{events:?}"
    );
    let c = checks(&agent, &id);
    let broken = check_named(&c, "broken").expect("the check");
    assert_ne!(broken["Status"], "success", "{broken}");
}
