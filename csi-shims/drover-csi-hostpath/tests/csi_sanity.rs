//! The CSI conformance suite against the built plugin: csi-sanity (kubernetes-csi/csi-test
//! v5.4.0, `../shared/bin/csi-sanity`) runs against `drover-csi-hostpath` on a unix socket in a
//! temporary directory, with the options that match what the plugin advertises: staging and
//! target paths under that directory, small volumes, a small expansion, and the node's attach
//! limit (`--max-volumes`, reported by NodeGetInfo). Its JUnit report must show no failure, the
//! counts below, and only the skips listed below, each for a capability the plugin does not
//! advertise. Skips with a message when csi-sanity is not there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const PLUGIN: &str = env!("CARGO_BIN_EXE_drover-csi-hostpath");

/// What csi-sanity v5.4.0 reports for this plugin (92 specs).
const EXPECTED: Counts = Counts {
    passed: 73,
    failed: 0,
    skipped: 18,
    pending: 1,
};

/// Every skip: csi-sanity's message, how many specs give it, and why skipping is right.
const SKIPS: &[(&str, usize, &str)] = &[
    (
        "skipped - Modify volume not supported",
        1,
        "MODIFY_VOLUME is not advertised: a directory has no mutable parameters",
    ),
    (
        "skipped - Modify Volume not supported",
        1,
        "MODIFY_VOLUME is not advertised (as above)",
    ),
    (
        "skipped - ControllerModifyVolume not supported",
        6,
        "MODIFY_VOLUME is not advertised (as above)",
    ),
    (
        "skipped - GroupControllerService not supported",
        6,
        "the GROUP_CONTROLLER_SERVICE plugin capability is not advertised: no volume group snapshots",
    ),
    (
        "skipped - NodeExpandVolume not supported",
        4,
        "the node's EXPAND_VOLUME is not advertised: a directory needs no node step to grow \
         (ControllerExpandVolume answers node_expansion_required = false)",
    ),
];

/// The pending spec, and why it does not run.
const PENDING: &[(&str, &str)] = &[(
    "ListVolumes pagination should detect volumes added between pages",
    "disabled (XIt) in csi-test itself (kubernetes-csi/csi-test#223): it runs for no plugin",
)];

/// How long csi-sanity may take (it takes about a second).
const SANITY_DEADLINE: Duration = Duration::from_secs(300);

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    passed: usize,
    failed: usize,
    skipped: usize,
    pending: usize,
}

/// One `<testcase>` of the JUnit report.
#[derive(Debug)]
struct Case {
    name: String,
    status: String,
    /// The `<skipped message>` or `<failure message>`.
    message: String,
}

/// The plugin process; killed (and reaped) if the test ends before stopping it.
struct Running(Option<Child>);

impl Running {
    /// Stops the plugin with SIGTERM, as a CO would, and waits for it.
    fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.0.take()?;
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let status = wait_until(&mut child, Instant::now() + Duration::from_secs(10));
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        status
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Undoes any mount left under the temporary directory before it is removed, so that removing
/// it can never reach through a mount.
struct Unmounting(tempfile::TempDir);

impl Drop for Unmounting {
    fn drop(&mut self) {
        for point in mounts_under(self.0.path()).into_iter().rev() {
            let _ = nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

fn csi_sanity() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bin/csi-sanity");
    path.is_file().then_some(path)
}

fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// Mount points at or under `dir`, shortest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(field.replace("\\040", " ")))
        .filter(|p| p.starts_with(&dir))
        .collect();
    points.sort_by_key(|p| p.as_os_str().len());
    points
}

/// XML attribute text as written, with the five entities and numeric references undone.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The value of attribute `name` in the tag text `tag`.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(unescape(&tag[start..start + len]))
}

/// The test cases of a Ginkgo JUnit report (Ginkgo writes each `<testcase ...>` tag on one
/// line, attributes in double quotes).
fn cases(report: &str) -> Vec<Case> {
    report
        .split("<testcase ")
        .skip(1)
        .map(|chunk| {
            let body = chunk.split("</testcase>").next().unwrap_or(chunk);
            let tag = body.split('>').next().unwrap_or(body);
            let tag = format!(" {tag}");
            let message = ["<skipped ", "<failure ", "<error "]
                .iter()
                .find_map(|open| {
                    let at = body.find(open)?;
                    let inner = &body[at + open.len() - 1..];
                    attribute(inner.split('>').next().unwrap_or(inner), "message")
                })
                .unwrap_or_default();
            Case {
                name: attribute(&tag, "name").unwrap_or_default(),
                status: attribute(&tag, "status").unwrap_or_default(),
                message,
            }
        })
        .collect()
}

fn counts(cases: &[Case]) -> Counts {
    let mut counts = Counts::default();
    for case in cases {
        match case.status.as_str() {
            "passed" => counts.passed += 1,
            "skipped" => counts.skipped += 1,
            "pending" => counts.pending += 1,
            // "failed", "panicked", "interrupted", "timedout"...: all failures.
            _ => counts.failed += 1,
        }
    }
    counts
}

#[test]
fn csi_sanity_passes_every_spec_that_applies_to_the_advertised_capabilities() {
    let Some(sanity) = csi_sanity() else {
        eprintln!(
            "skipped: ../shared/bin/csi-sanity (kubernetes-csi/csi-test v5.4.0) is not there"
        );
        return;
    };
    let dir = Unmounting(tempfile::tempdir().expect("a temporary directory"));
    let root = dir.0.path();
    let socket = root.join("csi.sock");
    let state = root.join("state");
    let plugin_log = std::fs::File::create(root.join("plugin.log")).expect("plugin.log");
    let mut plugin = Running(Some(
        Command::new(PLUGIN)
            .arg("--endpoint")
            .arg(format!("unix://{}", socket.display()))
            .args(["--node-id", "sanity-node"])
            .arg("--state-dir")
            .arg(&state)
            // Bookkeeping only: nothing is allocated on disk.
            .args(["--capacity-bytes", "8589934592"])
            // NodeGetInfo reports it; csi-sanity's attach-limit spec publishes one more.
            .args(["--max-volumes", "2"])
            .stdout(Stdio::null())
            .stderr(plugin_log)
            .spawn()
            .expect("start drover-csi-hostpath"),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the plugin never opened its socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let report = root.join("junit.xml");
    let output = std::fs::File::create(root.join("sanity.out")).expect("sanity.out");
    let errors = output.try_clone().expect("sanity.out");
    let started = Instant::now();
    let mut run = Command::new(&sanity)
        .arg("--csi.endpoint")
        .arg(format!("unix://{}", socket.display()))
        // Small volumes and a small expansion: the default sizes are 10 GiB and +1 GiB.
        .args(["--csi.testvolumesize", "16777216"])
        .args(["--csi.testvolumeexpandsize", "33554432"])
        .arg("--csi.testnodevolumeattachlimit")
        .arg("--csi.mountdir")
        .arg(root.join("mount"))
        .arg("--csi.stagingdir")
        .arg(root.join("staging"))
        .arg("--ginkgo.junit-report")
        .arg(&report)
        .arg("--ginkgo.no-color")
        .stdout(output)
        .stderr(errors)
        .spawn()
        .expect("start csi-sanity");
    let status = wait_until(&mut run, started + SANITY_DEADLINE);
    if status.is_none() {
        let _ = run.kill();
        let _ = run.wait();
    }
    let took = started.elapsed();
    let stopped = plugin.stop();
    let out = std::fs::read_to_string(root.join("sanity.out")).unwrap_or_default();
    let tail: String = {
        let lines: Vec<&str> = out.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    };
    let status = status.unwrap_or_else(|| {
        panic!("csi-sanity ran longer than {SANITY_DEADLINE:?}; its output ends:\n{tail}")
    });
    let report = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no JUnit report ({e}); csi-sanity said:\n{tail}"));
    let cases = cases(&report);
    let got = counts(&cases);
    eprintln!("csi-sanity took {took:?}: {got:?}");

    let failures: Vec<String> = cases
        .iter()
        .filter(|c| !matches!(c.status.as_str(), "passed" | "skipped" | "pending"))
        .map(|c| format!("{} ({}): {}", c.name, c.status, c.message))
        .collect();
    assert!(
        failures.is_empty(),
        "csi-sanity failures:\n{}\n\noutput ends:\n{tail}",
        failures.join("\n")
    );
    assert!(status.success(), "csi-sanity exited {status}:\n{tail}");

    let mut skips: BTreeMap<&str, usize> = BTreeMap::new();
    for case in cases.iter().filter(|c| c.status == "skipped") {
        *skips.entry(case.message.as_str()).or_default() += 1;
    }
    let expected_skips: BTreeMap<&str, usize> =
        SKIPS.iter().map(|(message, n, _)| (*message, *n)).collect();
    assert_eq!(
        skips, expected_skips,
        "the skips changed: a new one needs its reason in SKIPS, or a capability came or went"
    );
    let pending: Vec<&Case> = cases.iter().filter(|c| c.status == "pending").collect();
    assert_eq!(pending.len(), PENDING.len(), "pending specs: {pending:?}");
    for (name, _) in PENDING {
        assert!(
            pending.iter().any(|c| c.name.contains(name)),
            "{name:?} is not pending: {pending:?}"
        );
    }
    assert_eq!(got, EXPECTED);

    // csi-sanity deletes what it made: the plugin must have let go of every mount and directory.
    assert_eq!(
        mounts_under(root),
        Vec::<PathBuf>::new(),
        "mounts left behind"
    );
    let left: Vec<_> = std::fs::read_dir(state.join("volumes"))
        .expect("the volumes directory")
        .collect();
    assert!(left.is_empty(), "volume directories left behind: {left:?}");
    let stopped = stopped.expect("the plugin stops on SIGTERM");
    assert!(stopped.success(), "the plugin exited {stopped} on SIGTERM");
}

#[test]
fn junit_cases_are_read_with_their_status_and_message() {
    let report = r#"<testsuites><testsuite>
          <testcase name="[It] A &quot;b&quot; should work" classname="S" status="passed" time="0.1">
          </testcase>
          <testcase name="[It] Snap should fail" classname="S" status="skipped" time="0.1">
              <skipped message="skipped - CreateSnapshot not supported"></skipped>
              <system-err>&gt; Enter</system-err>
          </testcase>
          <testcase name="[It] Stats should fail" classname="S" status="failed" time="0.1">
              <failure message="unexpected error: a &amp; b&#xA;" type="failed">x</failure>
          </testcase>
          <testcase name="[It] Paged" classname="S" status="pending" time="0"></testcase>
        </testsuite></testsuites>"#;
    let cases = cases(report);
    let seen: Vec<(&str, &str, &str)> = cases
        .iter()
        .map(|c| (c.name.as_str(), c.status.as_str(), c.message.as_str()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("[It] A \"b\" should work", "passed", ""),
            (
                "[It] Snap should fail",
                "skipped",
                "skipped - CreateSnapshot not supported"
            ),
            (
                "[It] Stats should fail",
                "failed",
                "unexpected error: a & b\n"
            ),
            ("[It] Paged", "pending", ""),
        ]
    );
    assert_eq!(
        counts(&cases),
        Counts {
            passed: 1,
            failed: 1,
            skipped: 1,
            pending: 1
        }
    );
}
