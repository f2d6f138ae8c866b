//! End-to-end: a task's `artifact` blocks, fetched by the client before the task starts, as
//! Nomad's artifact hook does with go-getter. A small HTTP server started by the test serves a
//! file and tar.gz archives; raw_exec tasks print what was fetched, read back through
//! `drover alloc logs`. A wrong checksum or an archive entry that climbs out of the task
//! directory fails the task with Nomad's "Failed Artifact Download" event, before it starts,
//! with nothing written. https sources are served by Python's http.server behind a
//! throwaway CA made with the `openssl` command: trusted through `SSL_CERT_FILE`, as Go's
//! crypto/x509 (and so go-getter) trusts it, and refused with the certificate's problem when
//! the agent's trust store does not hold that CA.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_tests::{Agent, TempDir, allocs, output_text, write_job};
use serde_json::Value;
use sha2::{Digest, Sha256};

const WAIT: Duration = Duration::from_secs(60);

/// An HTTP/1.1 server on 127.0.0.1 answering GETs of the paths it was given (404 otherwise),
/// one connection at a time, recording each request's head.
struct FileServer {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

impl FileServer {
    fn start(files: BTreeMap<String, Vec<u8>>) -> FileServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the file server");
        let port = listener.local_addr().expect("local addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                let path = head
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("/")
                    .split('?')
                    .next()
                    .unwrap_or("/")
                    .to_string();
                seen.lock().expect("requests lock").push(head);
                let (status, body) = match files.get(&path) {
                    Some(body) => ("200 OK", body.clone()),
                    None => ("404 Not Found", b"not found".to_vec()),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        FileServer { port, requests }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("requests lock").clone()
    }
}

/// A tar.gz of `(name, content)` files, names written into the header as given so that
/// hostile ones (`../evil`) survive (the tar crate's builder would refuse them).
fn tar_gz(entries: &[(&str, &str)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut builder = tar::Builder::new(gz);
    for (name, content) in entries {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(content.len() as u64);
        header.set_cksum();
        builder
            .append(&header, content.as_bytes())
            .expect("append a tar entry");
    }
    builder
        .into_inner()
        .and_then(|gz| gz.finish())
        .expect("finish the tar.gz")
}

/// A batch job whose raw_exec task "t" runs `script` after fetching `artifacts` (HCL blocks);
/// no restarts, so a failed start fails the allocation at once.
fn job(name: &str, artifacts: &str, script: &str) -> String {
    job_with_restarts(name, artifacts, script, 0)
}

/// As `job`, with `attempts` restarts a second apart before the task fails.
fn job_with_restarts(name: &str, artifacts: &str, script: &str, attempts: u32) -> String {
    format!(
        r#"
job "{name}" {{
  datacenters = ["dc1"]
  type = "batch"
  group "g" {{
    restart {{
      attempts = {attempts}
      delay = "1s"
      mode = "fail"
    }}
    task "t" {{
      driver = "raw_exec"
{artifacts}
      config {{
        command = "/bin/sh"
        args = ["-c", "{script}"]
      }}
      resources {{
        cpu = 20
        memory = 32
      }}
    }}
  }}
}}
"#
    )
}

/// Runs the job and answers its allocation once it finished.
fn run_to_end(agent: &Agent, dir: &TempDir, name: &str, text: &str) -> Value {
    let file = write_job(dir, &format!("{name}.nomad"), text);
    let out = agent.cli(&["job", "run", "-detach", &file]);
    assert!(out.status.success(), "job run: {}", output_text(&out));
    agent.eventually("the allocation to finish", WAIT, || {
        allocs(agent, name)
            .iter()
            .any(|a| a["ClientStatus"] == "complete" || a["ClientStatus"] == "failed")
    });
    let id = allocs(agent, name)[0]["ID"]
        .as_str()
        .expect("alloc ID")
        .to_string();
    agent
        .get(&format!("/v1/allocation/{id}"))
        .expect("the allocation")
}

/// The allocation's directory on the agent's disk.
fn alloc_dir(agent: &Agent, alloc: &Value) -> PathBuf {
    let id = alloc["ID"].as_str().expect("alloc ID");
    agent.data_dir.join("data/client/alloc").join(id)
}

fn events(alloc: &Value) -> Vec<Value> {
    alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn event<'a>(events: &'a [Value], kind: &str) -> Option<&'a Value> {
    events.iter().find(|e| e["Type"] == kind)
}

#[test]
fn a_raw_exec_task_reads_a_fetched_file_and_an_unpacked_tar_gz_from_its_local_dir() {
    let hello = b"hello from an artifact\n".to_vec();
    let sum = hex(&Sha256::digest(&hello));
    let server = FileServer::start(BTreeMap::from([
        ("/files/art-ok/hello.txt".to_string(), hello),
        (
            "/bundle.tar.gz".to_string(),
            tar_gz(&[("inner/msg.txt", "unpacked from the tar.gz\n")]),
        ),
    ]));
    let dir = TempDir::new("artifacts-ok");
    let agent = Agent::start_dev(dir.path(), &[]);
    // The source interpolates the job's name; the checksum comes as an option; the archive's
    // checksum is in its URL's query; headers go to the server.
    let artifacts = format!(
        r#"
      artifact {{
        source = "{}"
        options {{
          checksum = "sha256:{sum}"
        }}
        headers {{
          X-Drover-Test = "artifact-header"
        }}
      }}
      artifact {{
        source = "{}?checksum=sha256:{}"
        destination = "local/bundle"
      }}"#,
        server.url("/files/${NOMAD_JOB_NAME}/hello.txt"),
        server.url("/bundle.tar.gz"),
        hex(&Sha256::digest(tar_gz(&[(
            "inner/msg.txt",
            "unpacked from the tar.gz\n"
        )]))),
    );
    let alloc = run_to_end(
        &agent,
        &dir,
        "art-ok",
        &job(
            "art-ok",
            &artifacts,
            "cat local/hello.txt local/bundle/inner/msg.txt",
        ),
    );
    assert_eq!(
        alloc["ClientStatus"],
        "complete",
        "{}\n{}",
        alloc["TaskStates"],
        agent.log()
    );
    let evs = events(&alloc);
    let downloading = event(&evs, "Downloading Artifacts").expect("a Downloading Artifacts event");
    assert_eq!(
        downloading["DisplayMessage"],
        "Client is downloading artifacts"
    );
    let id = alloc["ID"].as_str().expect("alloc ID");
    let logs = agent.cli(&["alloc", "logs", id, "t"]);
    let text = String::from_utf8_lossy(&logs.stdout);
    assert_eq!(
        text,
        "hello from an artifact\nunpacked from the tar.gz\n",
        "{}",
        output_text(&logs)
    );
    let requests = server.requests();
    let hello_request = requests
        .iter()
        .find(|r| r.starts_with("GET /files/art-ok/hello.txt "))
        .expect("the file was asked for by its interpolated path");
    assert!(
        hello_request
            .to_ascii_lowercase()
            .contains("x-drover-test: artifact-header"),
        "{hello_request}"
    );
    // go-getter's own parameters are not sent to the server.
    assert!(
        requests.iter().all(|r| !r.contains("checksum=")),
        "{requests:?}"
    );
}

#[test]
fn a_wrong_checksum_fails_the_task_with_failed_artifact_download_before_it_starts() {
    let server = FileServer::start(BTreeMap::from([(
        "/hello.txt".to_string(),
        b"hello\n".to_vec(),
    )]));
    let dir = TempDir::new("artifacts-bad-sum");
    let agent = Agent::start_dev(dir.path(), &[]);
    let wrong = "0".repeat(64);
    let artifacts = format!(
        r#"
      artifact {{
        source = "{}"
        options {{
          checksum = "sha256:{wrong}"
        }}
      }}"#,
        server.url("/hello.txt")
    );
    let alloc = run_to_end(
        &agent,
        &dir,
        "art-sum",
        &job("art-sum", &artifacts, "echo started > local/ran"),
    );
    assert_eq!(alloc["ClientStatus"], "failed", "{}", alloc["TaskStates"]);
    let evs = events(&alloc);
    let failed = event(&evs, "Failed Artifact Download").expect("a Failed Artifact Download event");
    let message = failed["DisplayMessage"].as_str().unwrap_or_default();
    let expected_start = format!(
        "failed to download artifact \"{}\": Checksums did not match for {}.\nExpected: {wrong}\nGot: {}",
        server.url("/hello.txt"),
        server.url("/hello.txt"),
        hex(&Sha256::digest(b"hello\n")),
    );
    assert!(message.starts_with(&expected_start), "{message}");
    assert_eq!(failed["DownloadError"], message);
    assert!(event(&evs, "Started").is_none(), "{evs:?}");
    assert!(event(&evs, "Not Restarting").is_some(), "{evs:?}");
    let local = alloc_dir(&agent, &alloc).join("t/local");
    assert!(!local.join("hello.txt").exists(), "the file was written");
    assert!(!local.join("ran").exists(), "the task ran");
}

#[test]
fn a_tar_gz_entry_climbing_out_of_the_task_dir_fails_the_task_and_writes_nothing() {
    let server = FileServer::start(BTreeMap::from([(
        "/evil.tar.gz".to_string(),
        tar_gz(&[("ok.txt", "fine\n"), ("../evil", "escaped\n")]),
    )]));
    let dir = TempDir::new("artifacts-evil");
    let agent = Agent::start_dev(dir.path(), &[]);
    // Unpacked into the task directory itself: `../evil` would land in the allocation's.
    let artifacts = format!(
        r#"
      artifact {{
        source = "{}"
        destination = "."
      }}"#,
        server.url("/evil.tar.gz")
    );
    let alloc = run_to_end(
        &agent,
        &dir,
        "art-evil",
        &job("art-evil", &artifacts, "echo started > local/ran"),
    );
    assert_eq!(alloc["ClientStatus"], "failed", "{}", alloc["TaskStates"]);
    let evs = events(&alloc);
    let failed = event(&evs, "Failed Artifact Download").expect("a Failed Artifact Download event");
    let message = failed["DisplayMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains("archive entry \"../evil\" escapes the destination directory"),
        "{message}"
    );
    assert!(event(&evs, "Started").is_none(), "{evs:?}");
    let alloc_dir = alloc_dir(&agent, &alloc);
    assert!(!alloc_dir.join("evil").exists(), "an entry escaped");
    assert!(
        !alloc_dir.join("t/ok.txt").exists(),
        "part of a refused archive was written"
    );
    assert!(!alloc_dir.join("t/local/ran").exists(), "the task ran");
}

#[test]
fn a_failed_artifact_download_is_retried_as_the_restart_policy_says() {
    let server = FileServer::start(BTreeMap::from([(
        "/hello.txt".to_string(),
        b"hello\n".to_vec(),
    )]));
    let dir = TempDir::new("artifacts-retry");
    let agent = Agent::start_dev(dir.path(), &[]);
    let artifacts = format!(
        r#"
      artifact {{
        source = "{}?checksum=md5:{}"
      }}"#,
        server.url("/hello.txt"),
        "0".repeat(32)
    );
    let alloc = run_to_end(
        &agent,
        &dir,
        "art-retry",
        &job_with_restarts("art-retry", &artifacts, "true", 1),
    );
    assert_eq!(alloc["ClientStatus"], "failed", "{}", alloc["TaskStates"]);
    let state = &alloc["TaskStates"]["t"];
    assert_eq!(state["Restarts"], 1, "{state}");
    let evs = events(&alloc);
    let kinds: Vec<&str> = evs.iter().filter_map(|e| e["Type"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Received",
            "Task Setup",
            "Downloading Artifacts",
            "Failed Artifact Download",
            "Restarting",
            "Downloading Artifacts",
            "Failed Artifact Download",
            "Not Restarting",
        ],
        "{state}"
    );
    let asked = server
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /hello.txt "))
        .count();
    assert_eq!(asked, 2, "one download per attempt");
}

/// Whether `program args` runs and succeeds (to skip the https tests without the tools).
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The https tests need the `openssl` command and Python's ssl module.
fn https_tools() -> bool {
    let ok = runs("openssl", &["version"]) && runs("python3", &["-c", "import ssl, http.server"]);
    if !ok {
        eprintln!("skipping: the https artifact tests need `openssl` and `python3` (with ssl)");
    }
    ok
}

/// An OpenSSL config for a test CA and a server certificate for 127.0.0.1 (no reliance on
/// the system's openssl.cnf).
const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = Drover artifact test CA
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        output_text(&out)
    );
}

/// Makes a self-signed CA `<name>.pem` (key `<name>.key`, subject `CN=<name>`) in `dir`;
/// answers the PEM's path.
fn make_ca(dir: &Path, name: &str) -> PathBuf {
    std::fs::write(dir.join("openssl.cnf"), OPENSSL_CNF).expect("write openssl.cnf");
    let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-config",
            "openssl.cnf",
            "-extensions",
            "v3_ca",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "2",
            "-subj",
            &format!("/CN=Drover test {name}"),
        ],
    );
    dir.join(pem)
}

/// Python's http.server over TLS on a loopback port, serving `root`, with a certificate for
/// 127.0.0.1 signed by a CA of its own; killed on drop.
struct HttpsServer {
    child: Child,
    port: u16,
    /// The CA that signed the server's certificate.
    ca: PathBuf,
}

const HTTPS_SERVER_PY: &str = "\
import functools, http.server, ssl, sys
root, cert, key = sys.argv[1:4]
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
print(httpd.server_address[1], flush=True)
httpd.serve_forever()
";

impl HttpsServer {
    /// Serves `files` (name, content) from `dir/www`; keys and certificates go in `dir`.
    fn start(dir: &Path, files: &[(&str, &[u8])]) -> HttpsServer {
        let ca = make_ca(dir, "ca");
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-config",
                "openssl.cnf",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "openssl.cnf",
                "-extensions",
                "v3_server",
            ],
        );
        let www = dir.join("www");
        std::fs::create_dir_all(&www).expect("create the served directory");
        for (name, content) in files {
            std::fs::write(www.join(name), content).expect("write a served file");
        }
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(HTTPS_SERVER_PY)
            .arg(&www)
            .arg(dir.join("server.pem"))
            .arg(dir.join("server.key"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the https server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("the server's stdout"))
            .read_line(&mut line)
            .expect("read the https server's port");
        let port = match line.trim().parse() {
            Ok(port) => port,
            Err(_) => {
                let _ = child.kill();
                panic!("the https server did not say its port: {line:?}");
            }
        };
        HttpsServer { child, port, ca }
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_https_artifact_signed_by_a_ca_in_ssl_cert_file_is_checked_and_fetched() {
    if !https_tools() {
        return;
    }
    let hello = b"hello over https\n";
    let dir = TempDir::new("artifacts-https");
    let server = HttpsServer::start(dir.path(), &[("hello.txt", hello)]);
    let ca = server.ca.to_str().expect("utf-8 path");
    let agent = Agent::start_dev_with_env(dir.path(), &[], &[("SSL_CERT_FILE", ca)]);
    let artifacts = format!(
        r#"
      artifact {{
        source = "{}"
        options {{
          checksum = "sha256:{}"
        }}
      }}"#,
        server.url("/hello.txt"),
        hex(&Sha256::digest(hello)),
    );
    let alloc = run_to_end(
        &agent,
        &dir,
        "art-https",
        &job("art-https", &artifacts, "cat local/hello.txt"),
    );
    assert_eq!(
        alloc["ClientStatus"],
        "complete",
        "{}\n{}",
        alloc["TaskStates"],
        agent.log()
    );
    let fetched = alloc_dir(&agent, &alloc).join("t/local/hello.txt");
    assert_eq!(std::fs::read(&fetched).expect("the fetched file"), hello);
    let id = alloc["ID"].as_str().expect("alloc ID");
    let logs = agent.cli(&["alloc", "logs", id, "t"]);
    assert_eq!(
        String::from_utf8_lossy(&logs.stdout),
        "hello over https\n",
        "{}",
        output_text(&logs)
    );
}

#[test]
fn an_https_artifact_from_an_untrusted_ca_fails_with_the_certificate_problem() {
    if !https_tools() {
        return;
    }
    let dir = TempDir::new("artifacts-https-untrusted");
    let server = HttpsServer::start(dir.path(), &[("hello.txt", b"hello\n")]);
    // The agent trusts only another CA, so the server's is unknown to it whatever the
    // machine's own store holds.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).expect("create the other CA's directory");
    let other_ca = make_ca(&other, "other-ca");
    let other_ca = other_ca.to_str().expect("utf-8 path");
    let agent = Agent::start_dev_with_env(dir.path(), &[], &[("SSL_CERT_FILE", other_ca)]);
    let artifacts = format!(
        r#"
      artifact {{
        source = "{}"
      }}"#,
        server.url("/hello.txt")
    );
    let alloc = run_to_end(
        &agent,
        &dir,
        "art-https-bad",
        &job("art-https-bad", &artifacts, "echo started > local/ran"),
    );
    assert_eq!(alloc["ClientStatus"], "failed", "{}", alloc["TaskStates"]);
    let evs = events(&alloc);
    let failed = event(&evs, "Failed Artifact Download").expect("a Failed Artifact Download event");
    let message = failed["DisplayMessage"].as_str().unwrap_or_default();
    let url = server.url("/hello.txt");
    assert!(
        message.starts_with(&format!(
            "failed to download artifact \"{url}\": TLS connection to {url} failed: "
        )),
        "{message}"
    );
    assert!(
        message.contains("invalid peer certificate")
            && message.contains("certificate signed by unknown authority"),
        "{message}"
    );
    assert!(event(&evs, "Started").is_none(), "{evs:?}");
    let local = alloc_dir(&agent, &alloc).join("t/local");
    assert!(!local.join("hello.txt").exists(), "the file was written");
    assert!(!local.join("ran").exists(), "the task ran");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
