//! ACLs on a dev agent (`acl { enabled = true }`): anonymous requests are refused but for what
//! the anonymous policy allows; `acl bootstrap` makes the management token once (again only
//! through the reset file); a token with `namespace "dev" { policy = "write" }` runs jobs in
//! `dev`, is refused in `default`, and `namespace=*` shows it only `dev`'s jobs while the
//! management token sees all, each with its namespace; an expired token is refused. A
//! client-only agent with ACLs answers nothing itself: its tasks' logs need a token of the
//! task's namespace, checked by the servers.

use std::process::{Command, Output};
use std::time::Duration;

use drover_tests::{Agent, TempDir, drover_bin, output_text, write_job};
use serde_json::Value;

fn cli_as(agent: &Agent, token: &str, args: &[&str]) -> Output {
    Command::new(drover_bin())
        .args(args)
        .env("DROVER_ADDR", agent.addr())
        .env_remove("NOMAD_ADDR")
        .env("NOMAD_TOKEN", token)
        .output()
        .expect("run drover CLI")
}

fn get_as(agent: &Agent, token: Option<&str>, path: &str) -> (u16, String) {
    get_at(&agent.addr(), token, path)
}

/// GET `path` at the agent whose API is at `addr`, with `token` as `X-Nomad-Token`.
fn get_at(addr: &str, token: Option<&str>, path: &str) -> (u16, String) {
    let a: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = a.get(&format!("{addr}{path}"));
    if let Some(t) = token {
        req = req.header("X-Nomad-Token", t);
    }
    let mut resp = req.call().expect("request");
    (
        resp.status().as_u16(),
        resp.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// The value of a `Key = value` line of the CLI's token output.
fn field(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(" = ")?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {key} in {text}"))
}

fn job_in(dir: &TempDir, ns: &str) -> String {
    write_job(
        dir,
        &format!("web-{ns}.nomad"),
        &format!(
            r#"
job "web" {{
  namespace   = "{ns}"
  datacenters = ["dc1"]
  update {{
    max_parallel = 0
  }}
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600.85"]
      }}
      resources {{
        cpu    = 20
        memory = 16
      }}
    }}
  }}
}}
"#
        ),
    )
}

#[test]
fn tokens_and_policies_decide_what_each_request_may_do() {
    let dir = TempDir::new("acl");
    let config = dir.path().join("acl.hcl");
    std::fs::write(&config, "acl {\n  enabled = true\n}\n").expect("config");
    let agent = Agent::start_dev(dir.path(), &["--config", config.to_str().expect("utf-8")]);

    assert_eq!(
        get_as(&agent, None, "/v1/jobs"),
        (403, "Permission denied".to_string())
    );
    assert_eq!(
        get_as(&agent, Some("made-up"), "/v1/jobs").1,
        "ACL token not found"
    );
    assert_eq!(get_as(&agent, None, "/v1/agent/health").0, 200);

    let out = agent.cli(&["acl", "bootstrap"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let root = field(&text, "Secret ID");
    assert_eq!(field(&text, "Type"), "management");
    let out = agent.cli(&["acl", "bootstrap"]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let reset_index = text
        .split("reset index: ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .expect("reset index")
        .to_string();
    assert!(text.contains("ACL bootstrap already done"), "{text}");

    agent.eventually("a ready node", Duration::from_secs(30), || {
        let (_, body) = get_as(&agent, Some(&root), "/v1/nodes");
        body.contains("\"Status\":\"ready\"")
    });
    let out = cli_as(&agent, &root, &["namespace", "apply", "dev"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let rules = write_job(
        &dir,
        "dev.hcl",
        "namespace \"dev\" {\n  policy = \"write\"\n}\n",
    );
    let out = cli_as(
        &agent,
        &root,
        &["acl", "policy", "apply", "dev-write", &rules],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let bad = write_job(
        &dir,
        "bad.hcl",
        "namespace \"dev\" {\n  policy = \"sudo\"\n}\n",
    );
    let out = cli_as(&agent, &root, &["acl", "policy", "apply", "bad", &bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        output_text(&out).contains("Invalid namespace policy"),
        "{}",
        output_text(&out)
    );
    let out = cli_as(
        &agent,
        &root,
        &[
            "acl",
            "token",
            "create",
            "-name",
            "dev",
            "-policy",
            "dev-write",
        ],
    );
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let dev = field(&text, "Secret ID");

    let out = cli_as(
        &agent,
        &dev,
        &["job", "run", "-detach", &job_in(&dir, "dev")],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let out = cli_as(
        &agent,
        &dev,
        &["job", "run", "-detach", &job_in(&dir, "default")],
    );
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("Permission denied"), "{text}");
    let out = cli_as(
        &agent,
        &root,
        &["job", "run", "-detach", &job_in(&dir, "default")],
    );
    assert!(out.status.success(), "{}", output_text(&out));

    let namespaces = |token: &str| -> Vec<String> {
        let (status, body) = get_as(&agent, Some(token), "/v1/jobs?namespace=*");
        assert_eq!(status, 200, "{body}");
        let list: serde_json::Value = serde_json::from_str(&body).expect("json");
        let mut ns: Vec<String> = list
            .as_array()
            .expect("list")
            .iter()
            .map(|j| j["Namespace"].as_str().unwrap_or_default().to_string())
            .collect();
        ns.sort();
        ns
    };
    assert_eq!(namespaces(&dev), ["dev"]);
    assert_eq!(namespaces(&root), ["default", "dev"]);
    assert_eq!(
        get_as(&agent, Some(&dev), "/v1/jobs").0,
        403,
        "default is not dev's"
    );
    // Lists of every namespace leave out default's objects; default's objects by id are
    // refused, whatever namespace the query names.
    let (status, body) = get_as(&agent, Some(&dev), "/v1/evaluations?namespace=*");
    assert_eq!(status, 200, "{body}");
    let evals: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(
        evals
            .as_array()
            .expect("list")
            .iter()
            .all(|e| e["Namespace"] == "dev"),
        "{body}"
    );
    let (_, body) = get_as(&agent, Some(&root), "/v1/evaluations?namespace=default");
    let default_evals: serde_json::Value = serde_json::from_str(&body).expect("json");
    let eval = default_evals[0]["ID"]
        .as_str()
        .expect("an eval")
        .to_string();
    assert_eq!(
        get_as(
            &agent,
            Some(&dev),
            &format!("/v1/evaluation/{eval}?namespace=dev")
        )
        .0,
        403
    );
    assert_eq!(get_as(&agent, Some(&dev), "/v1/volumes?namespace=*").0, 403);
    assert_eq!(get_as(&agent, Some(&dev), "/v1/nodes").0, 403);
    assert_eq!(get_as(&agent, Some(&dev), "/v1/acl/tokens").0, 403);
    // Allocations and their logs are checked in the allocation's own namespace.
    let alloc_of = |ns: &str| -> String {
        let mut id = String::new();
        agent.eventually(
            &format!("a running allocation in {ns}"),
            Duration::from_secs(30),
            || {
                let (_, body) = get_as(
                    &agent,
                    Some(&root),
                    &format!("/v1/allocations?namespace={ns}"),
                );
                let list: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                match list
                    .as_array()
                    .and_then(|l| l.iter().find(|a| a["ClientStatus"] == "running"))
                {
                    Some(a) => {
                        id = a["ID"].as_str().unwrap_or_default().to_string();
                        true
                    }
                    None => false,
                }
            },
        );
        id
    };
    let (mine, theirs) = (alloc_of("dev"), alloc_of("default"));
    let logs = |id: &str| format!("/v1/client/fs/logs/{id}?task=t&type=stdout&namespace=dev");
    assert_eq!(get_as(&agent, Some(&dev), &logs(&mine)).0, 200);
    assert_eq!(
        get_as(&agent, Some(&dev), &logs(&theirs)),
        (403, "Permission denied".to_string())
    );
    assert_eq!(
        get_as(
            &agent,
            Some(&dev),
            &format!("/v1/allocation/{theirs}?namespace=dev")
        )
        .0,
        403
    );
    assert_eq!(
        get_as(
            &agent,
            Some(&dev),
            &format!("/v1/allocation/{mine}?namespace=dev")
        )
        .0,
        200
    );
    let (_, body) = get_as(&agent, Some(&dev), "/v1/namespaces");
    assert!(
        body.contains("\"Name\":\"dev\"") && !body.contains("\"Name\":\"default\""),
        "only the namespaces the token has rules for: {body}"
    );
    let out = cli_as(&agent, &dev, &["acl", "token", "self"]);
    assert!(
        output_text(&out).contains("Name         = dev"),
        "{}",
        output_text(&out)
    );

    // The anonymous policy opens what it names to requests without a token.
    let anon = write_job(
        &dir,
        "anon.hcl",
        "namespace \"default\" {\n  policy = \"read\"\n}\n",
    );
    let out = cli_as(
        &agent,
        &root,
        &["acl", "policy", "apply", "anonymous", &anon],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    assert_eq!(get_as(&agent, None, "/v1/jobs").0, 200);
    assert_eq!(get_as(&agent, None, "/v1/jobs?namespace=dev").0, 403);

    let short = expired_token(&agent, &root, "dev-write");
    assert_eq!(
        get_as(&agent, Some(&short), "/v1/jobs?namespace=dev"),
        (403, "ACL token expired".to_string())
    );

    // The reset file lets the bootstrap run once more.
    std::fs::write(
        dir.path().join("data/server/acl-bootstrap-reset"),
        &reset_index,
    )
    .expect("reset file");
    let out = agent.cli(&["acl", "bootstrap"]);
    assert!(out.status.success(), "{}", output_text(&out));
}

#[test]
fn a_client_only_agent_with_acls_serves_its_tasks_logs_only_to_tokens_of_their_namespace() {
    let dir = TempDir::new("acl-client");
    let config = dir.path().join("acl.hcl");
    std::fs::write(&config, "acl {\n  enabled = true\n}\n").expect("config");
    let server = Agent::start_dev(dir.path(), &["--config", config.to_str().expect("utf-8")]);
    let root = field(
        &output_text(&server.cli(&["acl", "bootstrap"])),
        "Secret ID",
    );
    let client_config = format!(
        "{}acl {{\n  enabled = true\n}}\n",
        drover_tests::clients::RAW_EXEC_ENABLED
    );
    let client = drover_tests::clients::ClientProc::start_unwaited(
        dir.path(),
        "c1",
        &[format!("127.0.0.1:{}", server.rpc_port)],
        &client_config,
    );
    server.eventually("the client's node ready", Duration::from_secs(60), || {
        let (_, body) = get_as(&server, Some(&root), "/v1/nodes");
        body.contains("\"Name\":\"c1\"") && body.matches("\"Status\":\"ready\"").count() == 2
    });
    let client_get = |token: Option<&str>, path: &str| get_at(&client.addr(), token, path);
    assert_eq!(client_get(None, "/v1/agent/health").0, 200);
    assert_eq!(
        client_get(None, "/v1/jobs"),
        (403, "Permission denied".to_string())
    );

    for ns in ["dev", "ops"] {
        let out = cli_as(&server, &root, &["namespace", "apply", ns]);
        assert!(out.status.success(), "{}", output_text(&out));
        let rules = write_job(
            &dir,
            &format!("{ns}.hcl"),
            &format!("namespace \"{ns}\" {{\n  policy = \"write\"\n}}\n"),
        );
        let out = cli_as(&server, &root, &["acl", "policy", "apply", ns, &rules]);
        assert!(out.status.success(), "{}", output_text(&out));
    }
    let token_of = |policy: &str| {
        let out = cli_as(
            &server,
            &root,
            &["acl", "token", "create", "-policy", policy],
        );
        field(&output_text(&out), "Secret ID")
    };
    let (dev, ops) = (token_of("dev"), token_of("ops"));
    let job = write_job(
        &dir,
        "pinned.nomad",
        r#"
job "pinned" {
  namespace   = "dev"
  datacenters = ["dc1"]
  constraint {
    attribute = "${node.unique.name}"
    value     = "c1"
  }
  update {
    max_parallel = 0
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo from-c1; exec sleep 3600.86"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#,
    );
    let out = cli_as(&server, &dev, &["job", "run", "-detach", &job]);
    assert!(out.status.success(), "{}", output_text(&out));
    let mut alloc = String::new();
    server.eventually(
        "the pinned allocation running",
        Duration::from_secs(30),
        || {
            let (_, body) = get_as(&server, Some(&root), "/v1/allocations?namespace=dev");
            let list: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            match list
                .as_array()
                .and_then(|l| l.iter().find(|a| a["ClientStatus"] == "running"))
            {
                Some(a) => {
                    alloc = a["ID"].as_str().unwrap_or_default().to_string();
                    true
                }
                None => false,
            }
        },
    );
    let logs = format!("/v1/client/fs/logs/{alloc}?task=t&type=stdout&plain=true");
    assert_eq!(client_get(None, &logs).0, 403, "no token");
    assert_eq!(
        client_get(Some(&ops), &logs).0,
        403,
        "another namespace's token"
    );
    server.eventually(
        "the task's output through the client",
        Duration::from_secs(20),
        || {
            let (status, body) = client_get(Some(&dev), &logs);
            status == 200 && body.contains("from-c1")
        },
    );
}

/// `method` `path` with `token` and `body`, for the writes the CLI has no verb for.
fn send_as(agent: &Agent, token: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let a: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}{path}", agent.addr());
    let resp = match method {
        "PUT" => a.put(&url).header("X-Nomad-Token", token).send(body),
        "DELETE" => a.delete(&url).header("X-Nomad-Token", token).call(),
        _ => a.post(&url).header("X-Nomad-Token", token).send(body),
    };
    let mut resp = resp.expect("request");
    (
        resp.status().as_u16(),
        resp.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// A dev agent with ACLs on, bootstrapped (the management secret answered) and namespace
/// `dev` made.
fn acl_agent_with_dev(name: &str) -> (TempDir, Agent, String) {
    let dir = TempDir::new(name);
    let config = dir.path().join("acl.hcl");
    std::fs::write(&config, "acl {\n  enabled = true\n}\n").expect("config");
    let agent = Agent::start_dev(dir.path(), &["--config", config.to_str().expect("utf-8")]);
    let out = agent.cli(&["acl", "bootstrap"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let root = field(&output_text(&out), "Secret ID");
    let out = cli_as(&agent, &root, &["namespace", "apply", "dev"]);
    assert!(out.status.success(), "{}", output_text(&out));
    (dir, agent, root)
}

/// The secret of a token of `policy` made with a 1 s TTL, once it has expired.
fn expired_token(agent: &Agent, root: &str, policy: &str) -> String {
    let out = cli_as(
        agent,
        root,
        &["acl", "token", "create", "-policy", policy, "-ttl", "1s"],
    );
    let secret = field(&output_text(&out), "Secret ID");
    std::thread::sleep(Duration::from_millis(1500));
    secret
}

/// A client token of policy `name` with `rules`, made with the management token `root`.
fn token_with(
    agent: &Agent,
    dir: &TempDir,
    root: &str,
    name: &str,
    rules: &str,
) -> (String, String) {
    let file = write_job(dir, &format!("{name}.hcl"), rules);
    let out = cli_as(agent, root, &["acl", "policy", "apply", name, &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    let out = cli_as(agent, root, &["acl", "token", "create", "-policy", name]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    (field(&text, "Secret ID"), field(&text, "Accessor ID"))
}

#[test]
fn a_namespace_token_cannot_reach_another_namespace_through_volumes_scaling_or_a_stream_it_outlives()
 {
    let (dir, agent, root) = acl_agent_with_dev("acl-attacks");
    let rules = "namespace \"dev\" {\n  policy = \"write\"\n  capabilities = [\"csi-write-volume\", \"csi-read-volume\", \"read-scaling-policy\"]\n}\n";
    let (dev, dev_accessor) = token_with(&agent, &dir, &root, "dev-write", rules);

    // A volume whose body names `default`, sent with `?namespace=dev`: checked in default.
    let volume = |ns: &str| {
        format!(
            r#"{{"Volumes": [{{"ID": "v1", "Name": "v1", "Namespace": "{ns}", "PluginID": "nowhere",
               "RequestedCapabilities": [{{"AccessMode": "single-node-writer",
               "AttachmentMode": "file-system"}}]}}]}}"#
        )
    };
    assert_eq!(
        send_as(
            &agent,
            &dev,
            "PUT",
            "/v1/volume/csi/v1?namespace=dev",
            &volume("default")
        ),
        (403, "Permission denied".to_string())
    );
    let (status, body) = send_as(
        &agent,
        &dev,
        "PUT",
        "/v1/volume/csi/v1?namespace=dev",
        &volume("dev"),
    );
    assert_eq!(
        status, 400,
        "in its own namespace only the missing plugin stops it: {body}"
    );
    assert!(body.contains("no CSI plugin"), "{body}");
    // IDs that would become paths outside the plugin's directory on a client.
    let (status, body) = send_as(
        &agent,
        &root,
        "PUT",
        "/v1/volume/csi/x?namespace=dev",
        &volume("dev").replace("\"ID\": \"v1\"", "\"ID\": \"../../etc\""),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("volume id \"../../etc\""), "{body}");

    // default's scaling policy is not found through dev.
    let scaled = write_job(
        &dir,
        "scaled.nomad",
        r#"
job "scaled" {
  datacenters = ["dc1"]
  group "g" {
    count = 0
    scaling {
      min = 0
      max = 3
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
"#,
    );
    let out = cli_as(&agent, &root, &["job", "run", "-detach", &scaled]);
    assert!(out.status.success(), "{}", output_text(&out));
    let (_, body) = get_as(
        &agent,
        Some(&root),
        "/v1/scaling/policies?namespace=default",
    );
    let policies: serde_json::Value = serde_json::from_str(&body).expect("json");
    let policy = policies[0]["ID"].as_str().expect("a policy").to_string();
    let path = format!("/v1/scaling/policy/{policy}");
    assert_eq!(get_as(&agent, Some(&root), &path).0, 200);
    assert_eq!(
        get_as(&agent, Some(&dev), &format!("{path}?namespace=dev")).0,
        404
    );
    assert_eq!(get_as(&agent, Some(&dev), &path).0, 403);

    // A stream opened with a token ends once the token is deleted.
    let url = format!("{}/v1/event/stream?namespace=dev", agent.addr());
    let secret = dev.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let resp = ureq::get(&url).header("X-Nomad-Token", &secret).call();
        let mut rest = String::new();
        let ended = resp.map(|mut r| {
            std::io::Read::read_to_string(&mut r.body_mut().as_reader(), &mut rest).is_ok()
        });
        let _ = done_tx.send(ended);
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        done_rx.try_recv().is_err(),
        "the stream ended while its token was valid"
    );
    let out = cli_as(&agent, &root, &["acl", "token", "delete", &dev_accessor]);
    assert!(out.status.success(), "{}", output_text(&out));
    let ended = done_rx.recv_timeout(Duration::from_secs(8));
    assert!(ended.is_ok(), "the stream outlived its deleted token");
    assert_eq!(get_as(&agent, Some(&dev), "/v1/acl/token/self").0, 403);

    // An expired token is refused by token/self too.
    let short = expired_token(&agent, &root, "dev-write");
    assert_eq!(
        get_as(&agent, Some(&short), "/v1/acl/token/self"),
        (403, "ACL token expired".to_string())
    );
}

#[test]
fn a_namespace_token_reads_and_writes_only_the_variables_its_paths_grant() {
    let (dir, agent, root) = acl_agent_with_dev("acl-vars");
    let rules = "namespace \"dev\" {\n  policy = \"write\"\n  variables {\n    path \"app/*\" {\n      capabilities = [\"write\", \"read\", \"destroy\"]\n    }\n  }\n}\n";
    let (dev, _) = token_with(&agent, &dir, &root, "dev-vars", rules);

    let out = cli_as(
        &agent,
        &root,
        &[
            "var",
            "put",
            "-namespace",
            "default",
            "app/secret",
            "pw=hunter2",
        ],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let out = cli_as(
        &agent,
        &dev,
        &["var", "put", "-namespace", "dev", "app/db", "user=me"],
    );
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Created variable \"app/db\" with modify index"),
        "{text}"
    );

    // Another namespace's variable, by the CLI and by a body naming it.
    let out = cli_as(
        &agent,
        &dev,
        &["var", "get", "-namespace", "default", "app/secret"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("Permission denied"),
        "{}",
        output_text(&out)
    );
    assert!(!output_text(&out).contains("hunter2"));
    assert_eq!(
        send_as(
            &agent,
            &dev,
            "PUT",
            "/v1/var/app/secret?namespace=dev",
            r#"{"Namespace": "default", "Items": {"pw": "mine"}}"#
        ),
        (403, "Permission denied".to_string())
    );
    let (_, body) = get_as(&agent, Some(&root), "/v1/var/app/secret?namespace=default");
    assert!(
        body.contains("hunter2"),
        "the default variable was changed: {body}"
    );
    // A path its rule does not cover, in its own namespace.
    let out = cli_as(
        &agent,
        &dev,
        &["var", "put", "-namespace", "dev", "other/x", "k=v"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));

    // Lists of every namespace leave out what it may not list (read implies list).
    let (status, body) = get_as(&agent, Some(&dev), "/v1/vars?namespace=*");
    assert_eq!(status, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("json");
    let seen: Vec<String> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|v| {
            format!(
                "{}:{}",
                v["Namespace"].as_str().unwrap_or(""),
                v["Path"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(seen, ["dev:app/db"]);

    // Check-and-set: a plain put over a stored variable conflicts; -force writes.
    let out = cli_as(
        &agent,
        &dev,
        &["var", "put", "-namespace", "dev", "app/db", "user=you"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        output_text(&out).contains("Check-and-Set conflict"),
        "{}",
        output_text(&out)
    );
    let out = cli_as(
        &agent,
        &dev,
        &[
            "var",
            "put",
            "-force",
            "-namespace",
            "dev",
            "app/db",
            "user=you",
        ],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let out = cli_as(
        &agent,
        &dev,
        &["var", "get", "-namespace", "dev", "-item", "user", "app/db"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "you");
    let out = cli_as(
        &agent,
        &dev,
        &["var", "purge", "-namespace", "dev", "app/db"],
    );
    assert!(
        output_text(&out).contains("Successfully purged variable \"app/db\"!"),
        "{}",
        output_text(&out)
    );
    let out = cli_as(&agent, &dev, &["var", "get", "-namespace", "dev", "app/db"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        output_text(&out).contains("Variable not found"),
        "{}",
        output_text(&out)
    );
}

#[test]
fn agent_host_data_needs_a_token_that_reads_the_agent() {
    let (dir, agent, root) = acl_agent_with_dev("acl-agent-host");
    let (reader, _) = token_with(
        &agent,
        &dir,
        &root,
        "agent-read",
        "agent {\n  policy = \"read\"\n}\n",
    );
    let (jobs_only, _) = token_with(
        &agent,
        &dir,
        &root,
        "jobs-only",
        "namespace \"default\" {\n  policy = \"read\"\n}\n",
    );
    assert_eq!(get_as(&agent, None, "/v1/agent/host").0, 403);
    assert_eq!(get_as(&agent, Some(&jobs_only), "/v1/agent/host").0, 403);
    for token in [&reader, &root] {
        let (status, body) = get_as(&agent, Some(token), "/v1/agent/host");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"ResolvConf\""), "{body}");
    }
}

/// Reads the event stream at `path` as `token` until a line contains `want` (or 20 s pass),
/// and returns what was read.
fn stream_as(agent: &Agent, token: &str, path: &str, want: &str) -> String {
    let url = format!("{}{path}", agent.addr());
    let (token, wanted) = (token.to_string(), want.to_string());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(mut resp) = ureq::get(&url).header("X-Nomad-Token", &token).call() else {
            return;
        };
        let reader = std::io::BufReader::new(resp.body_mut().as_reader());
        for line in std::io::BufRead::lines(reader).map_while(Result::ok) {
            let done = line.contains(&wanted);
            if tx.send(line).is_err() || done {
                return;
            }
        }
    });
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if line.contains(want) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    seen
}

#[test]
fn acl_token_and_policy_changes_stream_to_management_tokens_without_secrets() {
    let (dir, agent, root) = acl_agent_with_dev("acl-events");
    let (reader, accessor) = token_with(
        &agent,
        &dir,
        &root,
        "ops-read",
        "node {\n  policy = \"read\"\n}\n",
    );
    let out = cli_as(&agent, &root, &["acl", "token", "delete", &accessor]);
    assert!(out.status.success(), "{}", output_text(&out));
    let out = cli_as(&agent, &root, &["acl", "policy", "delete", "ops-read"]);
    assert!(out.status.success(), "{}", output_text(&out));

    let seen = stream_as(
        &agent,
        &root,
        "/v1/event/stream?topic=ACLToken&topic=ACLPolicy&index=1",
        "ACLPolicyDeleted",
    );
    let events: Vec<Value> = seen
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|b| b["Events"].as_array().cloned().unwrap_or_default())
        .collect();
    let kinds: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["Type"].as_str().unwrap_or_default().to_string(),
                e["Key"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for want in [
        ("ACLPolicyUpserted", "ops-read"),
        ("ACLTokenUpserted", accessor.as_str()),
        ("ACLTokenDeleted", accessor.as_str()),
        ("ACLPolicyDeleted", "ops-read"),
    ] {
        assert!(
            kinds.iter().any(|(t, k)| t == want.0 && k == want.1),
            "{want:?} not in {kinds:?}\n{seen}"
        );
    }
    for e in events.iter().filter(|e| e["Topic"] == "ACLToken") {
        assert_eq!(e["Payload"]["ACLToken"]["SecretID"], "", "{e}");
        assert!(!seen.contains(&reader), "a secret was streamed");
    }

    // A token that may not manage ACLs sees none of it: its stream, replayed past a node
    // change made after every ACL change, holds the node and no ACL event.
    let (nodes, _) = token_with(
        &agent,
        &dir,
        &root,
        "nodes",
        "node {\n  policy = \"read\"\n}\n",
    );
    let (_, list) = get_as(&agent, Some(&root), "/v1/nodes");
    let list: Value = serde_json::from_str(&list).expect("nodes");
    let node = list[0]["ID"].as_str().expect("node id").to_string();
    let out = cli_as(&agent, &root, &["node", "eligibility", "-disable", &node]);
    assert!(out.status.success(), "{}", output_text(&out));
    let seen = stream_as(
        &agent,
        &nodes,
        "/v1/event/stream?index=1",
        "\"Type\":\"NodeDrain\"",
    );
    assert!(seen.contains("\"Type\":\"NodeDrain\""), "{seen}");
    assert!(!seen.contains("\"Topic\":\"ACL"), "{seen}");
}

#[test]
fn search_shows_a_token_only_what_it_may_read() {
    let (dir, agent, root) = acl_agent_with_dev("acl-search");
    for ns in ["default", "dev"] {
        let out = cli_as(&agent, &root, &["job", "run", "-detach", &job_in(&dir, ns)]);
        assert!(out.status.success(), "{}", output_text(&out));
    }
    let (dev, _) = token_with(
        &agent,
        &dir,
        &root,
        "dev-read",
        "namespace \"dev\" {\n  policy = \"read\"\n}\n",
    );
    let search = |token: &str, path: &str, body: &str| -> Value {
        let (status, text) = send_as(&agent, token, "POST", path, body);
        assert_eq!(status, 200, "{path}: {text}");
        serde_json::from_str(&text).expect("search JSON")
    };
    // Management sees both jobs' namespaces and the node.
    let all = search(
        &root,
        "/v1/search?namespace=*",
        r#"{"Prefix": "", "Context": "all"}"#,
    );
    assert_eq!(all["Matches"]["jobs"], serde_json::json!(["web"]), "{all}");
    assert!(
        all["Matches"]["nodes"]
            .as_array()
            .is_some_and(|n| n.len() == 1),
        "{all}"
    );
    let namespaces = all["Matches"]["namespaces"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(namespaces.len(), 2, "{all}");

    // The dev reader: its namespace's job, no node, no default namespace.
    let mine = search(
        &dev,
        "/v1/search?namespace=dev",
        r#"{"Prefix": "", "Context": "all"}"#,
    );
    assert_eq!(
        mine["Matches"]["jobs"],
        serde_json::json!(["web"]),
        "{mine}"
    );
    assert_eq!(mine["Matches"]["nodes"], Value::Null, "{mine}");
    assert_eq!(
        mine["Matches"]["namespaces"],
        serde_json::json!(["dev"]),
        "{mine}"
    );
    let theirs = search(
        &dev,
        "/v1/search?namespace=default",
        r#"{"Prefix": "", "Context": "jobs"}"#,
    );
    assert_eq!(theirs["Matches"]["jobs"], Value::Null, "{theirs}");
    let fuzzy = search(
        &dev,
        "/v1/search/fuzzy?namespace=*",
        r#"{"Text": "web", "Context": "jobs"}"#,
    );
    let scopes: Vec<&Value> = fuzzy["Matches"]["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| &m["Scope"][0])
        .collect();
    assert_eq!(scopes, [&Value::from("dev")], "{fuzzy}");
    // No token at all: the anonymous policy (none) sees nothing.
    let (status, text) = send_as(
        &agent,
        "",
        "POST",
        "/v1/search",
        r#"{"Prefix": "", "Context": "jobs"}"#,
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"jobs\":null"), "{text}");
}
