//! Mutual TLS end to end: certificates made by `drover tls ca create` and `tls cert create`,
//! three servers with Nomad's strict `tls` block (HTTPS and RPC, server names verified, HTTPS
//! clients verified), a client agent scheduling through them, the CLI over HTTPS with its CLI
//! certificate; a server holding only a client certificate, a CLI without a certificate and
//! plain HTTP are all refused.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_tests::clients::{ClientProc, RAW_EXEC_ENABLED};
use drover_tests::{
    HttpsIdentity, ServerCluster, TempDir, drover_bin, free_port, http_call, output_text, write_job,
};

const WAIT: Duration = Duration::from_secs(60);

const JOB: &str = r#"
job "tls-web" {
  datacenters = ["dc1"]
  group "web" {
    task "web" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 0.2; done"]
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
"#;

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `drover tls ...` in `dir`; panics with its output unless it succeeds.
fn tls_cli(dir: &Path, args: &[&str]) {
    let out = Command::new(drover_bin())
        .arg("tls")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run drover tls");
    assert!(out.status.success(), "tls {args:?}: {}", output_text(&out));
}

/// The agent `tls` block with the certificate `kind` made for region global.
fn tls_block(dir: &Path, kind: &str, http: bool) -> String {
    format!(
        "tls {{\n  http = {http}\n  rpc = true\n  ca_file = \"{ca}\"\n  cert_file = \"{d}/global-{kind}-nomad.pem\"\n  key_file = \"{d}/global-{kind}-nomad-key.pem\"\n  verify_server_hostname = true\n  verify_https_client = true\n}}\n",
        ca = dir.join("nomad-agent-ca.pem").display(),
        d = dir.display(),
    )
}

#[test]
fn a_strict_tls_cluster_forms_schedules_and_serves_the_cli_and_refuses_client_certificates_as_servers()
 {
    let dir = TempDir::new("tls-cluster");
    let certs = dir.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    tls_cli(&certs, &["ca", "create"]);
    for kind in ["-server", "-client", "-cli"] {
        tls_cli(&certs, &["cert", "create", kind]);
    }
    // Nothing already there is replaced.
    let again = Command::new(drover_bin())
        .args(["tls", "cert", "create", "-server"])
        .current_dir(&certs)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        output_text(&again).contains("already exists"),
        "{}",
        output_text(&again)
    );

    let cli_identity = HttpsIdentity {
        ca_file: certs.join("nomad-agent-ca.pem"),
        cert_file: certs.join("global-cli-nomad.pem"),
        key_file: certs.join("global-cli-nomad-key.pem"),
    };
    let cluster = ServerCluster::start_https(
        dir.path(),
        3,
        &tls_block(&certs, "server", true),
        cli_identity.clone(),
    );
    let servers: Vec<String> = cluster.servers.iter().map(|s| s.rpc_addr()).collect();

    // A client agent reaches the servers over mutual TLS with its client certificate.
    let client_config = format!("{RAW_EXEC_ENABLED}{}", tls_block(&certs, "client", false));
    let client = ClientProc::start(dir.path(), "c1", &servers, &client_config);
    let node_id = client.node_id();

    // The CLI over HTTPS with the CLI certificate, against a follower: forwarded over TLS RPC.
    let leader = cluster.wait_agreed_leader(WAIT);
    let follower = (leader + 1) % 3;
    let job = write_job(&dir, "web.nomad.hcl", JOB);
    let run = cluster.cli(follower, &["job", "run", "-detach", &job]);
    assert!(run.status.success(), "job run: {}", output_text(&run));
    wait_for("the allocation running on the TLS client", || {
        cluster
            .get(follower, "/v1/job/tls-web/allocations")
            .ok()
            .and_then(|v| v.as_array().cloned())
            .is_some_and(|a| {
                a.iter().any(|a| {
                    a["ClientStatus"] == "running" && a["NodeID"].as_str() == Some(&node_id)
                })
            })
    });
    let status = cluster.cli(follower, &["job", "status", "tls-web"]);
    assert!(
        status.success_text().contains("running"),
        "{}",
        output_text(&status)
    );

    // The same with Nomad's single-dash flags instead of the environment.
    let https = cluster.servers[0].http_addr();
    let flags = Command::new(drover_bin())
        .args(["node", "status"])
        .arg(format!("-address={https}"))
        .arg(format!("-ca-cert={}", cli_identity.ca_file.display()))
        .arg(format!("-client-cert={}", cli_identity.cert_file.display()))
        .arg(format!("-client-key={}", cli_identity.key_file.display()))
        .env_remove("DROVER_ADDR")
        .env_remove("NOMAD_ADDR")
        .output()
        .unwrap();
    assert!(
        flags.success_text().contains(&node_id[..8]),
        "{}",
        output_text(&flags)
    );

    // The CLI without a certificate: the server wants one.
    let bare = Command::new(drover_bin())
        .args(["job", "status"])
        .env("NOMAD_ADDR", &https)
        .env("NOMAD_CACERT", &cli_identity.ca_file)
        .env_remove("DROVER_ADDR")
        .output()
        .unwrap();
    assert!(!bare.status.success(), "{}", output_text(&bare));
    assert!(
        output_text(&bare).contains("-client-cert"),
        "{}",
        output_text(&bare)
    );
    // Nor does it trust a server whose CA it was not given.
    let untrusted = Command::new(drover_bin())
        .args(["job", "status"])
        .env("NOMAD_ADDR", &https)
        .env_remove("DROVER_ADDR")
        .output()
        .unwrap();
    assert!(!untrusted.status.success(), "{}", output_text(&untrusted));
    assert!(
        output_text(&untrusted).contains("-ca-cert"),
        "{}",
        output_text(&untrusted)
    );

    // Plain HTTP on the HTTPS port gets Go's 400.
    let plain = https.replacen("https://", "http://", 1);
    let (code, body) = http_call("GET", &format!("{plain}/v1/jobs"), None).unwrap();
    assert_eq!(code, 400);
    assert!(
        body.contains("Client sent an HTTP request to an HTTPS server"),
        "{body}"
    );

    // A server holding only a client certificate cannot join: the others refuse its calls.
    let rogue_dir = dir.path().join("rogue");
    std::fs::create_dir_all(&rogue_dir).unwrap();
    let rogue_config = rogue_dir.join("agent.hcl");
    std::fs::write(&rogue_config, tls_block(&certs, "client", false)).unwrap();
    let rogue_log = rogue_dir.join("agent.log");
    let log = std::fs::File::create(&rogue_log).unwrap();
    let mut rogue = Command::new(drover_bin())
        .args([
            "agent",
            "--server",
            "--bind",
            "127.0.0.1",
            "--node",
            "rogue",
        ])
        .args(["--bootstrap-expect", "3", "--join", &servers[0]])
        .args(["--data-dir", &rogue_dir.join("data").display().to_string()])
        .args(["--http-port", &free_port().to_string()])
        .args(["--rpc-port", &free_port().to_string()])
        .args(["--config", &rogue_config.display().to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_for("the rogue server's calls refused", || {
        cluster.logs().contains("a Client certificate may not call")
    });
    std::thread::sleep(Duration::from_secs(2));
    let raft = cluster
        .get(leader, "/v1/operator/raft/configuration")
        .unwrap();
    let peers = raft["Servers"].as_array().unwrap();
    assert_eq!(peers.len(), 3, "{raft}");
    assert!(
        peers.iter().all(|p| p["Node"] != "rogue"),
        "the rogue server got into the Raft configuration: {raft}"
    );
    let members = cluster.get(leader, "/v1/agent/members").unwrap();
    assert!(
        !members.to_string().contains("rogue"),
        "the rogue server is a member: {members}"
    );
    let _ = rogue.kill();
    let _ = rogue.wait();
}

trait SuccessText {
    fn success_text(&self) -> String;
}

impl SuccessText for std::process::Output {
    fn success_text(&self) -> String {
        assert!(self.status.success(), "{}", output_text(self));
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}
