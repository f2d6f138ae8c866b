//! Job settings Drover does not act on yet are refused when the job is registered or
//! validated against an agent, naming the setting and its field path; nothing is registered.

use drover_tests::{Agent, TempDir, output_text, write_job};

const JOB: &str = r#"
job "refused" {
  datacenters = ["dc1"]
  group "g" {
    network {
      port "http" {}
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "5s" }
      vault {
        policies = ["app"]
      }
      service {
        name = "web"
        port = "http"
        check {
          type         = "grpc"
          grpc_use_tls = true
          interval     = "10s"
          timeout      = "2s"
        }
      }
    }
  }
}
"#;

#[test]
fn a_job_with_vault_and_a_tls_grpc_check_is_refused_by_run_and_validate_and_not_registered() {
    let dir = TempDir::new("unsupported");
    let agent = Agent::start_dev(dir.path(), &[]);
    let job = write_job(&dir, "refused.nomad", JOB);

    let out = agent.cli(&["job", "run", "-detach", &job]);
    let text = output_text(&out);
    assert!(!out.status.success(), "job run should fail: {text}");
    for expected in [
        "vault is not supported",
        "(Job.TaskGroups[0].Tasks[0].Vault)",
        "grpc_use_tls is not supported: gRPC checks over TLS are not supported yet",
        "(Job.TaskGroups[0].Tasks[0].Services[0].Checks[0].GRPCUseTLS)",
    ] {
        assert!(text.contains(expected), "{expected:?} missing: {text}");
    }
    let (status, _) =
        drover_tests::http_call("GET", &format!("{}/v1/job/refused", agent.addr()), None)
            .expect("HTTP call");
    assert_eq!(status, 404, "nothing is registered");

    let out = agent.cli(&["job", "validate", &job]);
    let text = output_text(&out);
    assert!(
        !out.status.success() && text.contains("vault is not supported"),
        "job validate: {text}"
    );
}
