//! Job files written for Nomad 1.5+ place on a dev agent (datacenter "dc1"): `datacenters =
//! ["*"]`, a glob like `["d*"]`, and no `datacenters` at all (the server makes it `["*"]`,
//! while `job run -output` still prints what the file says).

use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

fn batch_job(name: &str, datacenters_line: &str) -> String {
    format!(
        r#"
job "{name}" {{
  {datacenters_line}
  type = "batch"
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/true"
      }}
      resources {{
        cpu = 20
        memory = 16
      }}
    }}
  }}
}}
"#
    )
}

#[test]
fn jobs_with_datacenter_globs_or_none_complete_on_a_dev_agent() {
    let dir = TempDir::new("dc-globs");
    let agent = Agent::start_dev(dir.path(), &[]);
    let cases = [
        ("star", r#"datacenters = ["*"]"#, Value::from(vec!["*"])),
        (
            "prefix",
            r#"datacenters = ["nowhere", "d*"]"#,
            Value::from(vec!["nowhere", "d*"]),
        ),
        ("nodcs", "", Value::from(vec!["*"])),
    ];
    for (name, line, stored) in &cases {
        let file = write_job(&dir, &format!("{name}.nomad"), &batch_job(name, line));
        if line.is_empty() {
            let out = agent.cli(&["job", "run", "-output", &file]);
            assert!(out.status.success(), "{}", output_text(&out));
            let printed: Value =
                serde_json::from_slice(&out.stdout).expect("job run -output prints JSON");
            assert!(
                printed["Job"]["Datacenters"].is_null(),
                "-output shows the file, not the server's default: {printed}"
            );
        }
        let out = agent.cli(&["job", "run", "-detach", &file]);
        assert!(out.status.success(), "{}", output_text(&out));
        agent.eventually(&format!("job {name} to complete"), WAIT, || {
            allocs(&agent, name)
                .iter()
                .any(|a| a["ClientStatus"] == "complete")
        });
        let job = agent.get(&format!("/v1/job/{name}")).unwrap();
        assert_eq!(&job["Datacenters"], stored, "{name}");
    }
}
