//! Native service registrations (Nomad's `provider = "nomad"`): a running allocation's group
//! and task services are listed by `/v1/services`, `/v1/service/:name` and `drover service`,
//! with the allocation's address and port, and are gone once it stops.

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

const JOB: &str = r#"
job "shop" {
  datacenters = ["dc1"]
  group "api" {
    count = 2
    network {
      port "http" {}
    }
    service {
      name     = "shop-api"
      port     = "http"
      tags     = ["v1", "public"]
      provider = "nomad"
    }
    task "serve" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["300"]
      }
      service {
        name = "shop-metrics"
        port = "http"
        tags = ["metrics"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#;

fn registrations(agent: &Agent, name: &str) -> Vec<Value> {
    agent
        .get(&format!("/v1/service/{name}"))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// A dev agent running `JOB`, both of its allocations registered.
fn run_shop(dir: &TempDir) -> Agent {
    let agent = Agent::start_dev(dir.path(), &[]);
    let file = write_job(dir, "shop.nomad", JOB);
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("both allocations register", WAIT, || {
        registrations(&agent, "shop-api").len() == 2
            && registrations(&agent, "shop-metrics").len() == 2
    });
    agent
}

#[test]
fn running_allocations_register_their_services_and_stopping_them_deregisters() {
    let dir = TempDir::new("services");
    let agent = run_shop(&dir);

    // Each registration carries its allocation's port and the node's address.
    for r in registrations(&agent, "shop-api") {
        let alloc = agent
            .get(&format!(
                "/v1/allocation/{}",
                r["AllocID"].as_str().expect("alloc id")
            ))
            .expect("alloc");
        let port = &alloc["AllocatedResources"]["Shared"]["Ports"][0];
        assert_eq!(port["Label"], "http");
        assert_eq!(r["Port"], port["Value"], "{r}");
        assert_eq!(r["Address"], port["HostIP"], "{r}");
        assert_eq!(r["Tags"], serde_json::json!(["v1", "public"]));
        assert_eq!(r["JobID"], "shop");
        assert_eq!(r["NodeID"], alloc["NodeID"]);
        let id = format!(
            "_nomad-task-{}-group-api-shop-api-http",
            r["AllocID"].as_str().expect("id")
        );
        assert_eq!(r["ID"], id.as_str());
    }
    // The task's service (registered once the task runs) shares the group's port.
    for r in registrations(&agent, "shop-metrics") {
        let id = format!(
            "_nomad-task-{}-serve-shop-metrics-http",
            r["AllocID"].as_str().expect("id")
        );
        assert_eq!(r["ID"], id.as_str());
        assert!(r["Port"].as_i64().is_some_and(|p| p > 0), "{r}");
    }

    let list = agent.get("/v1/services").expect("services");
    assert_eq!(list[0]["Namespace"], "default", "{list}");
    let names: Vec<&str> = list[0]["Services"]
        .as_array()
        .expect("services")
        .iter()
        .filter_map(|s| s["ServiceName"].as_str())
        .collect();
    assert_eq!(names, ["shop-api", "shop-metrics"]);

    let of_job = agent.get("/v1/job/shop/services").expect("job services");
    assert_eq!(of_job.as_array().map(Vec::len), Some(4), "{of_job}");
    let (status, page) = agent.send("GET", "/ui/jobs/shop@default", "");
    assert_eq!(status, 200);
    assert!(
        page.contains("shop-metrics"),
        "the job page lists the services"
    );

    let out = agent.cli(&["service", "list"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("shop-api") && text.contains("[public,v1]"),
        "{text}"
    );
    let out = agent.cli(&["service", "info", "shop-api"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    let first = &registrations(&agent, "shop-api")[0];
    let address = format!(
        "{}:{}",
        first["Address"].as_str().expect("addr"),
        first["Port"]
    );
    assert!(text.contains(&address), "{address} missing: {text}");
    let out = agent.cli(&[
        "service",
        "delete",
        "shop-api",
        first["ID"].as_str().expect("id"),
    ]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("is not supported"),
        "{}",
        output_text(&out)
    );

    // A blocking query on the list answers when an allocation stops.
    let (_, _, index) = agent.get_with_index("/v1/services");
    let stopped = allocs(&agent, "shop")[0]["ID"]
        .as_str()
        .expect("id")
        .to_string();
    let (status, body) = agent.send("POST", &format!("/v1/allocation/{stopped}/stop"), "");
    assert_eq!(status, 200, "{body}");
    let (status, _, next) = agent.get_with_index(&format!("/v1/services?index={index}&wait=20s"));
    assert_eq!(status, 200);
    assert!(next > index);
    agent.eventually("the stopped allocation's services go", WAIT, || {
        registrations(&agent, "shop-api")
            .iter()
            .all(|r| r["AllocID"] != stopped.as_str())
    });

    let out = agent.cli(&["job", "stop", "-detach", "shop"]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("every service goes with the job", WAIT, || {
        agent
            .get("/v1/services")
            .is_ok_and(|v| v.as_array().is_some_and(|a| a.is_empty()))
    });
    let out = agent.cli(&["service", "list"]);
    assert!(output_text(&out).contains("No service registrations found"));
}

/// A task whose template lists the `shop` services, as Nomad's native service discovery is
/// used: `nomadService` (all, by tag) and `nomadServices`.
const FRONT: &str = r#"
job "front" {
  datacenters = ["dc1"]
  group "web" {
    task "proxy" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["300"]
      }
      template {
        data        = <<EOT
{{ range nomadService "shop-api" }}api {{ .Address }}:{{ .Port }} {{ .Tags }}
{{ end }}{{ range nomadService "metrics.shop-metrics" }}metrics {{ .Port }}
{{ end }}{{ range nomadServices }}service {{ .Name }} {{ .Tags }}
{{ end }}{{ range nomadService 1 (env "NOMAD_ALLOC_ID") "shop-api" }}picked {{ .Port }}
{{ end }}
EOT
        destination = "local/upstreams.txt"
        change_mode = "noop"
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
"#;

#[test]
fn a_template_renders_the_services_of_its_namespace_and_follows_them() {
    let dir = TempDir::new("services-template");
    let agent = run_shop(&dir);
    let file = write_job(&dir, "front.nomad", FRONT);
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "{}", output_text(&out));
    let mut front = String::new();
    agent.eventually("the front task runs", WAIT, || {
        front = allocs(&agent, "front")
            .into_iter()
            .find(|a| a["ClientStatus"] == "running")
            .and_then(|a| a["ID"].as_str().map(str::to_string))
            .unwrap_or_default();
        !front.is_empty()
    });
    let rendered = || {
        let out = agent.cli(&["alloc", "fs", &front, "proxy/local/upstreams.txt"]);
        output_text(&out)
    };
    let mut api: Vec<Value> = registrations(&agent, "shop-api");
    api.sort_by_key(|r| r["ID"].as_str().unwrap_or_default().to_string());
    let lines = |api: &[Value]| -> Vec<String> {
        api.iter()
            .map(|r| {
                format!(
                    "api {}:{} [public v1]",
                    r["Address"].as_str().unwrap_or_default(),
                    r["Port"]
                )
            })
            .collect()
    };
    let text = rendered();
    for line in lines(&api) {
        assert!(text.contains(&line), "{line:?} missing from {text:?}");
    }
    let count = |text: &str, prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count(&text, "metrics "), 2, "{text}");
    assert!(
        text.contains("service shop-api [public v1]\nservice shop-metrics [metrics]\n"),
        "{text}"
    );
    assert_eq!(count(&text, "picked "), 1, "{text}");

    // One instance goes: the file follows within the re-render interval.
    let out = agent.cli(&["job", "scale", "shop", "api", "1"]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("one instance left in the template", WAIT, || {
        let text = rendered();
        count(&text, "api ") == 1 && count(&text, "picked ") == 1
    });
    let out = agent.cli(&["job", "stop", "shop"]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually("no instance left in the template", WAIT, || {
        let text = rendered();
        text.lines().all(|l| l.trim().is_empty())
    });
}
