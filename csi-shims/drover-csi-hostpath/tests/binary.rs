//! The built binary: flags, CSI_ENDPOINT, serving, and a clean stop on SIGTERM.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use drover_csi::{AccessMode, CreateVolumeRequest, CsiClient, VolumeCapability};

const BIN: &str = env!("CARGO_BIN_EXE_drover-csi-hostpath");

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_binary_serves_on_csi_endpoint_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("plugin/csi.sock");
    let state = dir.path().join("state");
    let plugin = Killed(
        Command::new(BIN)
            .env("CSI_ENDPOINT", format!("unix://{}", socket.display()))
            .args([
                "--node-id",
                "n1",
                "--capacity-bytes",
                "1073741824",
                "--state-dir",
            ])
            .arg(&state)
            .spawn()
            .unwrap(),
    );
    wait_for(&socket).await;
    let client = CsiClient::connect(&socket).await.unwrap();
    assert!(client.probe().await.unwrap());
    assert_eq!(client.node_get_info().await.unwrap().node_id, "n1");
    let volume = client
        .create_volume(&CreateVolumeRequest {
            name: "v".into(),
            capabilities: vec![VolumeCapability::file_system(AccessMode::SingleNodeWriter)],
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(state.join("volumes").join(&volume.external_id).is_dir());
    assert!(state.join("state.json").is_file());

    let pid = nix::unistd::Pid::from_raw(i32::try_from(plugin.0.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    // The client stays connected, as a CO does: the plugin must stop anyway.
    let started = Instant::now();
    let status = tokio::task::spawn_blocking(move || {
        let mut plugin = plugin;
        plugin.0.wait()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(15));
    drop(client);
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the socket is removed on exit");
}

#[test]
fn the_binary_refuses_a_tcp_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args([
            "--endpoint",
            "tcp://127.0.0.1:1234",
            "--node-id",
            "n1",
            "--state-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unix"), "{stderr}");
}
