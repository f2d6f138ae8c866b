//! `drover operator snapshot save` and `restore` against a dev agent: the archive is streamed
//! into the file as the state is encoded and checked before the file is kept; restoring it
//! brings back the state it was taken from; a damaged file is refused with a non-zero exit
//! and changes nothing.

use drover_tests::{Agent, TempDir, mock_job, output_text, write_job};

fn job_file(dir: &TempDir, name: &str) -> String {
    write_job(
        dir,
        &format!("{name}.nomad"),
        &mock_job(name, "batch", "50ms"),
    )
}

fn job_exists(agent: &Agent, name: &str) -> bool {
    agent.send("GET", &format!("/v1/job/{name}"), "").0 == 200
}

#[test]
fn a_saved_snapshot_restores_the_state_and_a_damaged_one_is_refused() {
    let dir = TempDir::new("operator-snapshot");
    let agent = Agent::start_dev(dir.path(), &[]);
    let out = agent.cli(&["job", "run", "-detach", &job_file(&dir, "kept")]);
    assert!(out.status.success(), "{}", output_text(&out));

    let file = dir.path().join("state.snap");
    let file = file.to_str().expect("utf-8 path");
    let out = agent.cli(&["operator", "snapshot", "save", file]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("State file written to"), "{text}");
    let archive = std::fs::read(file).expect("saved archive");
    assert!(archive.starts_with(b"DROVER-SNAPSHOT-2\n"));
    assert!(
        !dir.path().join("state.tmp-drover").exists(),
        "the file written aside was renamed"
    );

    let out = agent.cli(&["job", "run", "-detach", &job_file(&dir, "dropped")]);
    assert!(out.status.success(), "{}", output_text(&out));

    // One byte of the state changed: refused by the checksum, nothing restored.
    let mut damaged = archive.clone();
    let middle = archive.len() / 2;
    damaged[middle] ^= 0x01;
    let damaged_file = dir.path().join("damaged.snap");
    std::fs::write(&damaged_file, &damaged).expect("write damaged archive");
    let out = agent.cli(&[
        "operator",
        "snapshot",
        "restore",
        damaged_file.to_str().expect("utf-8 path"),
    ]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("Failed to restore snapshot"), "{text}");
    assert!(text.contains("corrupt"), "{text}");
    assert!(job_exists(&agent, "dropped"));

    let out = agent.cli(&["operator", "snapshot", "restore", file]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Snapshot Restored"), "{text}");
    assert!(job_exists(&agent, "kept"));
    assert!(!job_exists(&agent, "dropped"));
}
