//! The web UI at `/ui` in a real browser (headless Chromium over the DevTools protocol)
//! against a dev agent running jobs: every page loads without a console error and shows what
//! the API shows, live parts update without a reload (a log line printed after the page
//! opened appears), actions work through the API with the page's token, and ACLs apply to
//! the UI as they do to the API. Screenshots of the main pages go to
//! `target/ui-screenshots/` (`DROVER_UI_SCREENSHOTS` overrides).

use std::path::PathBuf;
use std::time::Duration;

use drover_tests::browser::Browser;
use drover_tests::{Agent, TempDir, allocs, output_text, workspace_root, write_job};
use serde_json::Value;

const LOAD: Duration = Duration::from_secs(20);
const LIVE: Duration = Duration::from_secs(30);
/// A button that asks to confirm takes a second click only this long after the first (a
/// double-click is not a confirmation).
const CONFIRM_AFTER: Duration = Duration::from_millis(600);

/// A task that prints what the test drops into its `local/say` file (so the test decides when
/// a line appears), and a tick every few seconds.
const TALKER: &str = r#"
job "talker" {
  datacenters = ["dc1"]
  group "app" {
    count = 2
    service {
      name     = "talker-svc"
      provider = "nomad"
      tags     = ["chatty"]
    }
    task "talk" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", "echo started; while true; do if [ -f local/say ]; then cat local/say; rm -f local/say; fi; sleep 0.2; done"]
      }
      service {
        name = "talker-script"
        check {
          name     = "talker-alive"
          type     = "script"
          command  = "/bin/sh"
          args     = ["-c", "echo alive"]
          interval = "1s"
          timeout  = "5s"
        }
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#;

const BATCH: &str = r#"
job "once" {
  datacenters = ["dc1"]
  type = "batch"
  group "run" {
    task "hello" {
      driver = "raw_exec"
      config {
        command = "/bin/echo"
        args = ["hello from once"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#;

/// A job no node can take: its evaluation carries placement failures.
const NOWHERE: &str = r#"
job "nowhere" {
  datacenters = ["dc1"]
  group "g" {
    constraint {
      attribute = "${attr.kernel.name}"
      value     = "plan9"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
"#;

fn browser() -> Browser {
    assert!(
        Browser::binary().is_some(),
        "chromium is needed for the UI tests (`apt-get install chromium`; .ci/run installs it)"
    );
    Browser::launch()
}

fn screenshot_dir() -> PathBuf {
    std::env::var_os("DROVER_UI_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/ui-screenshots"))
}

/// Loads `path`, waits for its main part, and checks the page reported no error.
fn open(b: &mut Browser, agent: &Agent, path: &str) {
    b.goto(&format!("{}{path}", agent.addr()), LOAD)
        .unwrap_or_else(|e| panic!("loading {path}: {e}"));
    b.wait_for("document.querySelector('main') !== null", LOAD)
        .unwrap_or_else(|e| panic!("{path} has no main part: {e}"));
    // The script runs deferred, and with a token stored reads the page again before it
    // shows it: wait for that (and for it to fail, if it does).
    b.wait_for(
        "document.readyState === 'complete' && document.querySelector('main[data-anon]') === null",
        LOAD,
    )
    .unwrap_or_else(|e| panic!("{path}: {e}"));
    let errors = b.take_console_errors();
    assert!(errors.is_empty(), "{path} reported errors: {errors:#?}");
}

fn text_of(b: &mut Browser, selector: &str) -> String {
    let js = format!(
        "(document.querySelector({}) || {{}}).innerText || ''",
        Value::from(selector)
    );
    b.eval(&js)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn run_job(agent: &Agent, dir: &TempDir, name: &str, text: &str) {
    let file = write_job(dir, name, text);
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
}

fn running_allocs(agent: &Agent, job: &str) -> Vec<Value> {
    allocs(agent, job)
        .into_iter()
        .filter(|a| a["ClientStatus"] == "running")
        .collect()
}

fn short(id: &str) -> &str {
    &id[..8]
}

#[test]
fn every_page_loads_without_console_errors_and_shows_what_the_api_shows() {
    let dir = TempDir::new("ui-pages");
    let agent = Agent::start_dev(dir.path(), &[]);
    run_job(&agent, &dir, "talker.hcl", TALKER);
    run_job(&agent, &dir, "once.hcl", BATCH);
    run_job(&agent, &dir, "nowhere.hcl", NOWHERE);
    agent.eventually("talker runs twice", LIVE, || {
        running_allocs(&agent, "talker").len() == 2
    });
    agent.eventually("once completes", LIVE, || {
        allocs(&agent, "once")
            .iter()
            .any(|a| a["ClientStatus"] == "complete")
    });
    let node = agent.get("/v1/nodes").expect("nodes")[0].clone();
    let node_id = node["ID"].as_str().expect("node id").to_string();
    let alloc = running_allocs(&agent, "talker")[0]["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    let shots = screenshot_dir();
    let mut b = browser();

    // `/ui` leads to the overview.
    open(&mut b, &agent, "/ui");
    let url = b.eval("location.pathname").expect("location");
    assert_eq!(url, "/ui/overview");
    let running = agent
        .get("/v1/allocations")
        .expect("allocations")
        .as_array()
        .expect("a list")
        .iter()
        .filter(|a| a["ClientStatus"] == "running")
        .count();
    assert_eq!(
        text_of(&mut b, "[data-status=running]"),
        running.to_string()
    );
    let leader = agent.get("/v1/status/leader").expect("leader");
    assert_eq!(text_of(&mut b, "#leader"), leader.as_str().expect("addr"));
    b.wait_for(
        "document.querySelector('#running-chart polyline') !== null",
        LOAD,
    )
    .expect("the chart is drawn");
    b.screenshot(&shots.join("overview.png")).expect("shot");

    open(&mut b, &agent, "/ui/jobs");
    let jobs = text_of(&mut b, "#jobs-table");
    assert!(
        jobs.contains("talker") && jobs.contains("once"),
        "jobs list: {jobs}"
    );
    b.screenshot(&shots.join("jobs.png")).expect("shot");
    open(&mut b, &agent, "/ui/jobs?search=tal");
    let found = text_of(&mut b, "#jobs-table");
    assert!(
        found.contains("talker") && !found.contains("once"),
        "{found}"
    );
    open(&mut b, &agent, "/ui/jobs?type=batch");
    let batch = text_of(&mut b, "#jobs-table");
    assert!(
        batch.contains("once") && !batch.contains("talker"),
        "{batch}"
    );

    open(&mut b, &agent, "/ui/jobs/talker@default");
    let page = b.text();
    for a in allocs(&agent, "talker") {
        let id = a["ID"].as_str().expect("id");
        assert!(
            page.contains(short(id)),
            "allocation {id} missing from the job page"
        );
    }
    for e in agent
        .get("/v1/job/talker/evaluations")
        .expect("evals")
        .as_array()
        .expect("a list")
    {
        let id = e["ID"].as_str().expect("id");
        assert!(page.contains(short(id)), "evaluation {id} missing");
    }
    assert!(page.contains("Version 0"), "{page}");
    assert_eq!(text_of(&mut b, "#job-status"), "running");
    b.screenshot(&shots.join("job.png")).expect("shot");

    // Placement failures, as `job status` gives them.
    open(&mut b, &agent, "/ui/jobs/nowhere@default");
    let evals = text_of(&mut b, "#evaluations");
    assert!(
        evals.contains("Constraint") && evals.contains("${attr.kernel.name} = plan9"),
        "{evals}"
    );

    // A watch list this agent did not sign is refused: the live wait reads only what a page
    // of its own watched.
    let forged = "0000000000000000.[[\"/v1/client/gc\",0]]";
    let (status, body) = agent.send(
        "GET",
        &format!("/ui/overview?live={}", forged.replace('"', "%22")),
        "",
    );
    assert_eq!(status, 400, "{body}");

    // `drover ui ID` gives the page of what the ID names.
    let out = agent.cli(&["ui", "-show-url", &alloc[..8]]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(
        output_text(&out).trim(),
        format!("{}/ui/allocations/{alloc}", agent.addr())
    );
    let out = agent.cli(&["ui", "-show-url", "talker"]);
    assert_eq!(
        output_text(&out).trim(),
        format!("{}/ui/jobs/talker@default", agent.addr())
    );

    open(&mut b, &agent, &format!("/ui/allocations/{alloc}"));
    assert_eq!(
        text_of(&mut b, "#alloc-status").split(' ').next(),
        Some("running")
    );
    b.wait_for(
        "document.getElementById('log-output').textContent.includes('started')",
        LIVE,
    )
    .expect("the log tail shows the task's first line");
    // The task service's check is listed with its latest result.
    let checks = text_of(&mut b, "section.checks");
    assert!(
        checks.contains("talker-alive") && checks.contains("talker-script"),
        "{checks}"
    );
    b.screenshot(&shots.join("allocation.png")).expect("shot");

    open(
        &mut b,
        &agent,
        &format!("/ui/allocations/{alloc}/fs?path=/alloc/logs"),
    );
    let listing = text_of(&mut b, "#fs-listing");
    assert!(listing.contains("talk.stdout.0"), "{listing}");
    open(
        &mut b,
        &agent,
        &format!("/ui/allocations/{alloc}/fs?path=/alloc/logs/talk.stdout.0"),
    );
    assert!(text_of(&mut b, "#fs-file").contains("started"));

    open(&mut b, &agent, "/ui/clients");
    let clients = text_of(&mut b, "#clients-table");
    assert!(
        clients.contains(node["Name"].as_str().expect("name")),
        "{clients}"
    );
    b.screenshot(&shots.join("clients.png")).expect("shot");
    open(&mut b, &agent, &format!("/ui/clients/{node_id}"));
    assert_eq!(text_of(&mut b, "#client-status"), "ready");
    let drivers = text_of(&mut b, "#drivers");
    assert!(drivers.contains("raw_exec"), "{drivers}");
    b.screenshot(&shots.join("client.png")).expect("shot");

    open(&mut b, &agent, "/ui/servers");
    let members = agent.get("/v1/agent/members").expect("members");
    let servers = text_of(&mut b, "#servers-table");
    assert!(
        servers.contains(members["Members"][0]["Name"].as_str().expect("name")),
        "{servers}"
    );
    let raft = text_of(&mut b, "#raft-table");
    assert!(raft.contains("leader"), "{raft}");

    open(&mut b, &agent, "/ui/topology");
    assert_eq!(
        b.eval(&format!(
            "document.querySelectorAll('[data-node=\"{node_id}\"] .alloc-block').length"
        ))
        .expect("blocks"),
        running
    );
    b.screenshot(&shots.join("topology.png")).expect("shot");

    open(&mut b, &agent, "/ui/evaluations");
    let evals = text_of(&mut b, "#evaluations");
    assert!(
        evals.contains("talker") && evals.contains("once"),
        "{evals}"
    );
    open(&mut b, &agent, "/ui/services");
    let services = text_of(&mut b, "#services-table");
    assert!(
        services.contains("talker-svc") && services.contains("chatty"),
        "{services}"
    );
    open(&mut b, &agent, "/ui/services/talker-svc@default");
    let regs = text_of(&mut b, "#registrations");
    for a in running_allocs(&agent, "talker") {
        let id = a["ID"].as_str().expect("id");
        assert!(regs.contains(short(id)), "{id} missing from {regs}");
    }

    open(&mut b, &agent, "/ui/csi/volumes");
    assert!(b.text().contains("No CSI volumes."));
    open(&mut b, &agent, "/ui/csi/plugins");
    assert!(b.text().contains("No CSI plugins."));
    open(&mut b, &agent, "/ui/settings/tokens");
    assert!(b.text().contains("No token set"));
}

#[test]
fn live_parts_update_without_a_reload_and_actions_go_through_the_api() {
    let dir = TempDir::new("ui-live");
    let agent = Agent::start_dev(dir.path(), &[]);
    run_job(&agent, &dir, "talker.hcl", TALKER);
    agent.eventually("talker runs twice", LIVE, || {
        running_allocs(&agent, "talker").len() == 2
    });
    let alloc = running_allocs(&agent, "talker")[0]["ID"]
        .as_str()
        .expect("alloc id")
        .to_string();
    let mut b = browser();

    // The log tail follows: a line the task prints after the page opened shows up.
    open(&mut b, &agent, &format!("/ui/allocations/{alloc}"));
    b.wait_for(
        "document.getElementById('log-output').textContent.includes('started')",
        LIVE,
    )
    .expect("first line");
    b.eval("window.__loaded_once = true")
        .expect("mark the page");
    let say = agent
        .data_dir
        .join("data/client/alloc")
        .join(&alloc)
        .join("talk/local/say");
    std::fs::write(&say, "printed-after-the-page-opened\n").expect("drop the line");
    b.wait_for(
        "document.getElementById('log-output').textContent.includes('printed-after-the-page-opened')",
        LIVE,
    )
    .expect("the followed log shows the new line");

    // Restart through the page's button: the task's events gain a restart, live.
    b.click("button.action[data-path$='/restart']")
        .expect("restart button");
    b.wait_for(
        "document.getElementById('alloc-tasks').innerText.includes('Restart Signaled')",
        LIVE,
    )
    .expect("the restart shows among the task's events without a reload");
    assert_eq!(
        b.eval("window.__loaded_once === true").expect("marker"),
        true,
        "the page was reloaded"
    );
    let errors = b.take_console_errors();
    assert!(errors.is_empty(), "{errors:#?}");

    // The job page follows the allocations: one stopped through the API shows as stopped
    // there without a reload.
    let other = running_allocs(&agent, "talker")
        .into_iter()
        .map(|a| a["ID"].as_str().expect("id").to_string())
        .find(|id| *id != alloc)
        .expect("the second allocation");
    open(&mut b, &agent, "/ui/jobs/talker@default");
    b.eval("window.__loaded_once = true")
        .expect("mark the page");
    let (status, body) = agent.send("POST", &format!("/v1/allocation/{other}/stop"), "");
    assert_eq!(status, 200, "{body}");
    b.wait_for(
        &format!(
            "(document.querySelector(\"tr[data-alloc='{other}']\") || {{}}).innerText?.includes('stop')"
        ),
        LIVE,
    )
    .expect("the job page shows the stopped allocation");
    assert_eq!(
        b.eval("window.__loaded_once === true").expect("marker"),
        true,
        "the job page was reloaded"
    );

    // The allocation page's stop button (two clicks: it asks to confirm).
    open(&mut b, &agent, &format!("/ui/allocations/{alloc}"));
    b.click("button.action[data-path$='/stop']").expect("stop");
    b.click("button.action[data-path$='/stop']")
        .expect("stop, clicked again at once");
    assert_eq!(
        agent
            .get(&format!("/v1/allocation/{alloc}"))
            .expect("alloc")["DesiredStatus"],
        "run",
        "one click arms the button, and a second one at once is a double-click"
    );
    std::thread::sleep(CONFIRM_AFTER);
    b.click("button.action[data-path$='/stop']")
        .expect("stop, confirmed");
    agent.eventually("the allocation stops", LIVE, || {
        agent
            .get(&format!("/v1/allocation/{alloc}"))
            .is_ok_and(|a| a["DesiredStatus"] == "stop")
    });
    b.wait_for(
        "document.getElementById('alloc-summary').innerText.includes('stop')",
        LIVE,
    )
    .expect("the allocation page shows the stop");

    // Drain and eligibility toggles on the client page.
    let node_id = agent.get("/v1/nodes").expect("nodes")[0]["ID"]
        .as_str()
        .expect("id")
        .to_string();
    open(&mut b, &agent, &format!("/ui/clients/{node_id}"));
    b.click("button.action[data-path$='/eligibility']")
        .expect("eligibility button");
    b.wait_for(
        "document.getElementById('client-eligibility').innerText === 'ineligible'",
        LIVE,
    )
    .expect("the client shows ineligible");
    assert_eq!(
        agent.get(&format!("/v1/node/{node_id}")).expect("node")["SchedulingEligibility"],
        "ineligible"
    );
    b.click("button.action[data-path$='/eligibility']")
        .expect("eligibility button again");
    b.wait_for(
        "document.getElementById('client-eligibility').innerText === 'eligible'",
        LIVE,
    )
    .expect("the client shows eligible again");
    let errors = b.take_console_errors();
    assert!(errors.is_empty(), "{errors:#?}");

    // A page left open holds one long poll and does not grow: twenty updates later, the
    // overview has as many elements as after the first and the browser as few connections.
    open(&mut b, &agent, "/ui/overview");
    let elements = "document.getElementsByTagName('*').length";
    let job = |i: usize| {
        format!(
            "{{\"Job\": {{\"ID\": \"filler-{i}\", \"Name\": \"filler-{i}\", \"Type\": \"batch\", \"Datacenters\": [\"dc1\"], \"TaskGroups\": [{{\"Name\": \"g\", \"Count\": 0, \"Tasks\": [{{\"Name\": \"t\", \"Driver\": \"raw_exec\", \"Config\": {{\"command\": \"/bin/true\"}}}}]}}]}}}}"
        )
    };
    let (status, body) = agent.send("PUT", "/v1/jobs", &job(0));
    assert_eq!(status, 200, "{body}");
    b.wait_for(
        "document.getElementById('jobs-count').innerText === '2'",
        LIVE,
    )
    .expect("the overview counts the new job");
    let first = b.eval(elements).expect("count");
    for i in 1..=20 {
        let (status, body) = agent.send("PUT", "/v1/jobs", &job(i));
        assert_eq!(status, 200, "{body}");
    }
    b.wait_for(
        "document.getElementById('jobs-count').innerText === '22'",
        LIVE,
    )
    .expect("the overview counts the twenty jobs");
    assert_eq!(b.eval(elements).expect("count"), first, "the page grew");
    let connections = established_connections_to(agent.http_port);
    assert!(
        connections <= 2,
        "{connections} connections open to the agent with one page open"
    );
}

/// Established TCP connections whose local port is `port` (the agent's side of them).
fn established_connections_to(port: u16) -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
        .filter(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let local_port = cols
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            local_port == Some(port) && cols.get(3) == Some(&"01")
        })
        .count()
}

#[test]
fn with_acls_the_ui_reads_and_acts_with_the_token_set_in_the_browser() {
    let dir = TempDir::new("ui-acl");
    let config = dir.path().join("acl.hcl");
    std::fs::write(&config, "acl {\n  enabled = true\n}\n").expect("config");
    let agent = Agent::start_dev(dir.path(), &["--config", config.to_str().expect("utf-8")]);
    let out = agent.cli(&["acl", "bootstrap"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let root = output_text(&out)
        .lines()
        .find_map(|l| {
            l.strip_prefix("Secret ID")
                .map(|v| v.trim_start_matches([' ', '=']).trim().to_string())
        })
        .expect("secret id");
    let readonly_rules = write_job(
        &dir,
        "read.hcl",
        "namespace \"default\" {\n  policy = \"read\"\n}\nnode {\n  policy = \"read\"\n}\n",
    );
    let as_root = |args: &[&str]| {
        let mut cmd = std::process::Command::new(drover_tests::drover_bin());
        cmd.args(args)
            .env("NOMAD_ADDR", agent.addr())
            .env("NOMAD_TOKEN", &root);
        let out = cmd.output().expect("run drover");
        assert!(out.status.success(), "{}", output_text(&out));
        output_text(&out)
    };
    as_root(&["acl", "policy", "apply", "read", &readonly_rules]);
    let reader = as_root(&[
        "acl", "token", "create", "-name", "reader", "-policy", "read",
    ])
    .lines()
    .find_map(|l| {
        l.strip_prefix("Secret ID")
            .map(|v| v.trim_start_matches([' ', '=']).trim().to_string())
    })
    .expect("reader secret");
    let job = write_job(&dir, "talker.hcl", TALKER);
    as_root(&["job", "run", "-detach", &job]);

    let mut b = browser();
    // Without a token the API refuses, and so does the page, saying why.
    open(&mut b, &agent, "/ui/jobs");
    let text = b.text();
    assert!(text.contains("403"), "{text}");
    assert!(text.contains("set a token"), "{text}");

    // The token page stores the read-only token; the jobs list then shows the job.
    open(&mut b, &agent, "/ui/settings/tokens");
    b.eval(&format!(
        "document.getElementById('token-secret').value = {}",
        Value::from(reader.as_str())
    ))
    .expect("type the token");
    b.click("#token-form button[type=submit]").expect("submit");
    b.wait_for(
        "(document.getElementById('token-name') || {}).innerText === 'reader'",
        LOAD,
    )
    .expect("the token page shows the token in use");
    open(&mut b, &agent, "/ui/jobs");
    assert!(text_of(&mut b, "#jobs-table").contains("talker"));
    assert_eq!(text_of(&mut b, "#token-state"), "Token set");
    // The token is nowhere a cookie could carry it to another port of this host.
    assert_eq!(b.eval("document.cookie").expect("cookies"), "");

    // A read-only token may not stop the job: the API's refusal shows, nothing changes.
    open(&mut b, &agent, "/ui/jobs/talker@default");
    assert_eq!(text_of(&mut b, "header.top h1"), "Job talker");
    b.click("button.action[data-method=DELETE]").expect("stop");
    std::thread::sleep(CONFIRM_AFTER);
    b.click("button.action[data-method=DELETE]")
        .expect("stop, confirmed");
    b.wait_for(
        "document.getElementById('flash').innerText.includes('403')",
        LOAD,
    )
    .expect("the refusal shows");
    b.take_console_errors(); // the refused call's 403
    assert_eq!(agent_job_stop(&agent, &root), Value::Bool(false));
}

/// The job's `Stop` flag, read with the management token.
fn agent_job_stop(agent: &Agent, root: &str) -> Value {
    let url = format!("{}/v1/job/talker", agent.addr());
    let mut resp = ureq::get(&url)
        .header("X-Nomad-Token", root)
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .expect("read the job");
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).expect("json")["Stop"].clone()
}
