//! Namespaces from the CLI against a dev agent: `namespace apply` by name and from a spec
//! file, jobs run only in a namespace that exists and with the drivers it allows, objects of
//! one namespace are invisible from another unless `-namespace '*'` asks for all (each with
//! its namespace), and a namespace is deleted only once nothing live is left in it.

use drover_tests::{Agent, TempDir, output_text, write_job};

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
        args    = ["-c", "exec sleep 3600.84"]
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
fn namespaces_file_jobs_apart_and_guard_their_drivers_and_deletion() {
    let dir = TempDir::new("namespaces");
    let agent = Agent::start_dev(dir.path(), &[]);

    let out = agent.cli(&["job", "run", "-detach", &job_in(&dir, "dev")]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("job \"web\" is in nonexistent namespace \"dev\""),
        "{text}"
    );

    let out = agent.cli(&["namespace", "apply", "-description", "the dev team", "dev"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Successfully applied namespace \"dev\"!"),
        "{text}"
    );
    let spec = write_job(
        &dir,
        "locked.hcl",
        r#"
name        = "locked"
description = "docker only"
capabilities {
  enabled_task_drivers = ["docker"]
}
"#,
    );
    let out = agent.cli(&["namespace", "apply", &spec]);
    assert!(out.status.success(), "{}", output_text(&out));
    let out = agent.cli(&["namespace", "list"]);
    let text = output_text(&out);
    assert!(
        text.starts_with("Name     Description\ndefault  Default shared namespace\ndev      the dev team\nlocked   docker only"),
        "{text}"
    );
    let out = agent.cli(&["namespace", "status", "locked"]);
    let text = output_text(&out);
    assert!(text.contains("EnabledDrivers  = docker"), "{text}");

    let out = agent.cli(&["job", "run", "-detach", &job_in(&dir, "locked")]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("used task driver \"raw_exec\" is not allowed in namespace \"locked\""),
        "{text}"
    );

    for ns in ["dev", "default"] {
        let out = agent.cli(&["job", "run", "-detach", &job_in(&dir, ns)]);
        assert!(out.status.success(), "{}", output_text(&out));
    }
    let dev_only = agent.get("/v1/jobs?namespace=dev").expect("jobs");
    assert_eq!(dev_only.as_array().map(Vec::len), Some(1));
    assert_eq!(dev_only[0]["Namespace"], "dev");
    let all = agent.get("/v1/jobs?namespace=*").expect("jobs");
    let mut namespaces: Vec<&str> = all
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|j| j["Namespace"].as_str())
        .collect();
    namespaces.sort();
    assert_eq!(namespaces, ["default", "dev"]);
    let out = agent.cli(&["job", "status", "-namespace", "*"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Namespace"), "{text}");

    let out = agent.cli(&["namespace", "delete", "dev"]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("namespace \"dev\" has non-terminal jobs in regions: [global]"),
        "{text}"
    );
    let out = agent.cli(&["namespace", "delete", "default"]);
    assert!(
        output_text(&out).contains("can not delete default namespace"),
        "{}",
        output_text(&out)
    );
    let out = agent.cli(&[
        "job",
        "stop",
        "-purge",
        "-detach",
        "-namespace",
        "dev",
        "web",
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
    agent.eventually(
        "dev's allocation ended",
        std::time::Duration::from_secs(20),
        || agent.cli(&["namespace", "delete", "dev"]).status.success(),
    );
    let out = agent.cli(&["namespace", "status", "dev"]);
    assert_eq!(out.status.code(), Some(1));
}
