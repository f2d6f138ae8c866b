use drover_csi::proto::node_client::NodeClient;
use drover_csi::{NodePublishRequest, NodeStageRequest, Secrets, StringMap, proto};

use super::*;
use crate::TOPOLOGY_KEY;

fn stage(volume: &Volume, staging: &Path, capability: VolumeCapability) -> NodeStageRequest {
    NodeStageRequest {
        external_id: volume.external_id.clone(),
        publish_context: StringMap::new(),
        staging_target_path: staging.to_path_buf(),
        capability,
        secrets: Secrets::default(),
        context: StringMap::new(),
    }
}

fn publish(volume: &Volume, staging: Option<&Path>, target: &Path) -> NodePublishRequest {
    NodePublishRequest {
        external_id: volume.external_id.clone(),
        publish_context: StringMap::new(),
        staging_target_path: staging.map(Path::to_path_buf),
        target_path: target.to_path_buf(),
        capability: writer(),
        readonly: false,
        secrets: Secrets::default(),
        context: StringMap::new(),
    }
}

/// A staging directory as the CO makes it.
fn staging_dir(h: &Harness) -> PathBuf {
    let staging = h.path("staging/vol");
    std::fs::create_dir_all(&staging).unwrap();
    staging
}

#[tokio::test]
async fn node_get_info_reports_the_node_its_maximum_and_its_topology() {
    let h = Harness::start_with(|c| c.max_volumes_per_node = 7).await;
    let info = h.client.node_get_info().await.unwrap();
    assert_eq!(info.node_id, NODE);
    assert_eq!(info.max_volumes, 7);
    let topology = info.accessible_topology.unwrap();
    assert_eq!(
        topology.segments.get(TOPOLOGY_KEY).map(String::as_str),
        Some(NODE)
    );
}

#[tokio::test]
async fn node_capabilities_are_stage_unstage_and_volume_stats() {
    let h = Harness::start().await;
    let caps = h.client.node_get_capabilities().await.unwrap();
    assert!(caps.stage_unstage_volume);
    assert!(caps.get_volume_stats);
    assert!(!caps.expand_volume);
}

#[tokio::test]
async fn a_file_written_through_the_target_lands_in_the_volume_and_unpublish_unmounts() {
    let h = Harness::start().await;
    let volume = h.create("shared").await;
    let staging = staging_dir(&h);
    let target = h.path("alloc/task/vol");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();

    h.client
        .node_stage_volume(&stage(&volume, &staging, writer()))
        .await
        .unwrap();
    assert!(in_mountinfo(&staging));
    h.client
        .node_publish_volume(&publish(&volume, Some(&staging), &target))
        .await
        .unwrap();
    assert!(target.is_dir(), "the plugin creates the target");
    assert!(in_mountinfo(&target));

    std::fs::write(target.join("hello.txt"), b"from the task").unwrap();
    let landed = std::fs::read(h.volume_dir(&volume).join("hello.txt")).unwrap();
    assert_eq!(landed, b"from the task");

    h.client
        .node_unpublish_volume(&volume.external_id, &target)
        .await
        .unwrap();
    assert!(!in_mountinfo(&target));
    assert!(!target.exists(), "the plugin removes the target it made");
    h.client
        .node_unstage_volume(&volume.external_id, &staging)
        .await
        .unwrap();
    assert!(!in_mountinfo(&staging));
    // The data stays in the volume.
    assert!(h.volume_dir(&volume).join("hello.txt").is_file());
    assert!(mounts_under(h.root()).is_empty());
}

#[tokio::test]
async fn publish_without_staging_binds_the_volume_directory() {
    let h = Harness::start().await;
    let volume = h.create("direct").await;
    let target = h.path("direct-target");
    std::fs::write(h.volume_dir(&volume).join("seed"), b"seeded").unwrap();
    h.client
        .node_publish_volume(&publish(&volume, None, &target))
        .await
        .unwrap();
    assert!(in_mountinfo(&target));
    assert_eq!(std::fs::read(target.join("seed")).unwrap(), b"seeded");
    h.client
        .node_unpublish_volume(&volume.external_id, &target)
        .await
        .unwrap();
    assert!(!in_mountinfo(&target));
}

#[tokio::test]
async fn a_readonly_publish_refuses_writes() {
    let h = Harness::start().await;
    let volume = h.create("ro").await;
    let asked = h.path("asked-ro");
    let mut req = publish(&volume, None, &asked);
    req.readonly = true;
    h.client.node_publish_volume(&req).await.unwrap();
    let err = std::fs::write(asked.join("x"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc_erofs()), "{err}");

    // A reader-only access mode is read-only even when `readonly` is not set.
    let other = h.create("ro2").await;
    let implied = h.path("implied-ro");
    let mut req = publish(&other, None, &implied);
    req.capability = VolumeCapability::file_system(AccessMode::SingleNodeReaderOnly);
    h.client.node_publish_volume(&req).await.unwrap();
    let err = std::fs::write(implied.join("x"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc_erofs()), "{err}");
    // The volume itself stays writable.
    std::fs::write(h.volume_dir(&other).join("y"), b"y").unwrap();
}

fn libc_erofs() -> i32 {
    nix::errno::Errno::EROFS as i32
}

#[tokio::test]
async fn node_stage_is_idempotent_and_another_capability_is_already_exists() {
    let h = Harness::start().await;
    let volume = h.create("st").await;
    let staging = staging_dir(&h);
    for _ in 0..2 {
        h.client
            .node_stage_volume(&stage(&volume, &staging, writer()))
            .await
            .unwrap();
    }
    assert_eq!(mounts_under(&staging).len(), 1, "staged once, not twice");
    let reader = VolumeCapability::file_system(AccessMode::MultiNodeReaderOnly);
    let other = h
        .client
        .node_stage_volume(&stage(&volume, &staging, reader))
        .await;
    assert_eq!(code_of(other), Code::AlreadyExists);
}

#[tokio::test]
async fn node_publish_is_idempotent_and_other_arguments_at_the_same_target_are_already_exists() {
    let h = Harness::start().await;
    let volume = h.create("pub").await;
    let target = h.path("t1");
    for _ in 0..2 {
        h.client
            .node_publish_volume(&publish(&volume, None, &target))
            .await
            .unwrap();
    }
    assert_eq!(mounts_under(&target).len(), 1, "published once, not twice");
    let mut readonly = publish(&volume, None, &target);
    readonly.readonly = true;
    assert_eq!(
        code_of(h.client.node_publish_volume(&readonly).await),
        Code::AlreadyExists
    );
}

#[tokio::test]
async fn a_second_target_is_failed_precondition_unless_the_volume_is_multi_node() {
    let h = Harness::start().await;
    let single = h.create("single").await;
    h.client
        .node_publish_volume(&publish(&single, None, &h.path("s1")))
        .await
        .unwrap();
    let second = h
        .client
        .node_publish_volume(&publish(&single, None, &h.path("s2")))
        .await;
    assert_eq!(code_of(second), Code::FailedPrecondition);
    assert!(!in_mountinfo(&h.path("s2")));

    let multi = h.create("multi").await;
    for target in ["m1", "m2"] {
        let mut req = publish(&multi, None, &h.path(target));
        req.capability = VolumeCapability::file_system(AccessMode::MultiNodeMultiWriter);
        h.client.node_publish_volume(&req).await.unwrap();
    }
    assert!(in_mountinfo(&h.path("m1")) && in_mountinfo(&h.path("m2")));
}

#[tokio::test]
async fn publishing_from_a_path_that_is_not_staged_is_failed_precondition() {
    let h = Harness::start().await;
    let volume = h.create("unstaged").await;
    let staging = staging_dir(&h);
    let attempt = h
        .client
        .node_publish_volume(&publish(&volume, Some(&staging), &h.path("t")))
        .await;
    assert_eq!(code_of(attempt), Code::FailedPrecondition);
    assert!(!in_mountinfo(&h.path("t")));
}

#[tokio::test]
async fn node_calls_on_an_unknown_volume_are_not_found() {
    let h = Harness::start().await;
    let ghost = Volume {
        external_id: "no-such-volume".into(),
        ..Default::default()
    };
    let staging = staging_dir(&h);
    let target = h.path("t");
    assert_eq!(
        code_of(
            h.client
                .node_stage_volume(&stage(&ghost, &staging, writer()))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code_of(
            h.client
                .node_unstage_volume(&ghost.external_id, &staging)
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code_of(
            h.client
                .node_publish_volume(&publish(&ghost, None, &target))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code_of(
            h.client
                .node_unpublish_volume(&ghost.external_id, &target)
                .await
        ),
        Code::NotFound
    );
    assert!(!target.exists());
}

#[tokio::test]
async fn node_calls_check_their_required_fields() {
    let h = Harness::start().await;
    let volume = h.create("req").await;
    let staging = staging_dir(&h);
    let mut no_id = stage(&volume, &staging, writer());
    no_id.external_id.clear();
    assert_eq!(
        code_of(h.client.node_stage_volume(&no_id).await),
        Code::InvalidArgument
    );
    let relative = stage(&volume, Path::new("relative/path"), writer());
    assert_eq!(
        code_of(h.client.node_stage_volume(&relative).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code_of(
            h.client
                .node_unstage_volume(&volume.external_id, Path::new(""))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code_of(
            h.client
                .node_publish_volume(&publish(&volume, None, Path::new("")))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code_of(h.client.node_unpublish_volume("", &h.path("t")).await),
        Code::InvalidArgument
    );
    let mut raw = NodeClient::new(h.raw().await);
    let no_capability = raw
        .node_publish_volume(proto::NodePublishVolumeRequest {
            volume_id: volume.external_id.clone(),
            target_path: h.path("t").display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(raw_code(no_capability), Code::InvalidArgument);
    let no_capability = raw
        .node_stage_volume(proto::NodeStageVolumeRequest {
            volume_id: volume.external_id.clone(),
            staging_target_path: staging.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(raw_code(no_capability), Code::InvalidArgument);
    assert!(mounts_under(h.root()).is_empty());
}

#[tokio::test]
async fn unpublish_and_unstage_of_what_is_not_there_succeed() {
    let h = Harness::start().await;
    let volume = h.create("idem").await;
    let staging = staging_dir(&h);
    let target = h.path("never-published");
    h.client
        .node_unpublish_volume(&volume.external_id, &target)
        .await
        .unwrap();
    h.client
        .node_unstage_volume(&volume.external_id, &staging)
        .await
        .unwrap();
    // And twice after a real publish.
    h.client
        .node_publish_volume(&publish(&volume, None, &target))
        .await
        .unwrap();
    for _ in 0..2 {
        h.client
            .node_unpublish_volume(&volume.external_id, &target)
            .await
            .unwrap();
    }
    assert!(!in_mountinfo(&target));
}

#[tokio::test]
async fn a_volume_mounted_on_the_node_cannot_be_deleted() {
    let h = Harness::start().await;
    let volume = h.create("mounted").await;
    let staging = staging_dir(&h);
    h.client
        .node_stage_volume(&stage(&volume, &staging, writer()))
        .await
        .unwrap();
    let refused = h
        .client
        .delete_volume(&volume.external_id, &Secrets::default())
        .await;
    assert_eq!(code_of(refused), Code::FailedPrecondition);
    h.client
        .node_unstage_volume(&volume.external_id, &staging)
        .await
        .unwrap();
    h.client
        .delete_volume(&volume.external_id, &Secrets::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_restarted_plugin_still_knows_and_undoes_its_mounts() {
    let mut h = Harness::start().await;
    let volume = h.create("persist").await;
    let staging = staging_dir(&h);
    let target = h.path("persist-target");
    h.client
        .node_stage_volume(&stage(&volume, &staging, writer()))
        .await
        .unwrap();
    h.client
        .node_publish_volume(&publish(&volume, Some(&staging), &target))
        .await
        .unwrap();
    h.restart().await;
    // Same call again: idempotent against the records the new process loaded.
    h.client
        .node_publish_volume(&publish(&volume, Some(&staging), &target))
        .await
        .unwrap();
    h.client
        .node_unpublish_volume(&volume.external_id, &target)
        .await
        .unwrap();
    h.client
        .node_unstage_volume(&volume.external_id, &staging)
        .await
        .unwrap();
    assert!(mounts_under(h.root()).is_empty());
}

#[tokio::test]
async fn volume_stats_report_bytes_and_inodes_of_a_published_volume() {
    use drover_csi::proto::volume_usage::Unit;
    let h = Harness::start().await;
    let volume = h.create("stats").await;
    let target = h.path("stats-target");
    h.client
        .node_publish_volume(&publish(&volume, None, &target))
        .await
        .unwrap();
    let mut raw = NodeClient::new(h.raw().await);
    let stats = raw
        .node_get_volume_stats(proto::NodeGetVolumeStatsRequest {
            volume_id: volume.external_id.clone(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let bytes = stats
        .usage
        .iter()
        .find(|u| u.unit == Unit::Bytes as i32)
        .unwrap();
    assert!(bytes.total > 0 && bytes.available <= bytes.total);
    assert!(stats.usage.iter().any(|u| u.unit == Unit::Inodes as i32));
    let gone = raw
        .node_get_volume_stats(proto::NodeGetVolumeStatsRequest {
            volume_id: volume.external_id.clone(),
            volume_path: h.path("nowhere").display().to_string(),
            staging_target_path: String::new(),
        })
        .await;
    assert_eq!(raw_code(gone), Code::NotFound);
}

fn stats_request(volume_id: &str, volume_path: &str) -> proto::NodeGetVolumeStatsRequest {
    proto::NodeGetVolumeStatsRequest {
        volume_id: volume_id.into(),
        volume_path: volume_path.into(),
        staging_target_path: String::new(),
    }
}

#[tokio::test]
async fn volume_stats_of_an_unknown_volume_are_not_found_whatever_the_path() {
    let h = Harness::start().await;
    let mut raw = NodeClient::new(h.raw().await);
    let missing_id = raw
        .node_get_volume_stats(stats_request("", "/some/path"))
        .await;
    assert_eq!(raw_code(missing_id), Code::InvalidArgument);
    let missing_path = raw.node_get_volume_stats(stats_request("nope", "")).await;
    assert_eq!(raw_code(missing_path), Code::InvalidArgument);
    // The volume's absence is the answer, before anything about the path (csi-sanity).
    for path in ["some/path", "/some/path"] {
        let unknown = raw.node_get_volume_stats(stats_request("nope", path)).await;
        assert_eq!(raw_code(unknown), Code::NotFound, "{path}");
    }
}

#[tokio::test]
async fn volume_stats_are_not_found_where_the_volume_is_not_staged_or_published() {
    let h = Harness::start().await;
    let volume = h.create("where").await;
    let other = h.create("elsewhere").await;
    let staging = staging_dir(&h);
    let target = h.path("where-target");
    let other_target = h.path("elsewhere-target");
    h.client
        .node_stage_volume(&stage(&volume, &staging, writer()))
        .await
        .unwrap();
    h.client
        .node_publish_volume(&publish(&volume, Some(&staging), &target))
        .await
        .unwrap();
    h.client
        .node_publish_volume(&publish(&other, None, &other_target))
        .await
        .unwrap();
    let mut raw = NodeClient::new(h.raw().await);
    let id = volume.external_id.as_str();
    for at in [&staging, &target] {
        let stats = raw
            .node_get_volume_stats(stats_request(id, &at.display().to_string()))
            .await;
        assert!(stats.is_ok(), "{}: {stats:?}", at.display());
    }
    // A relative path, a directory that exists but holds no mount of this volume (its
    // numbers would be the node's), and another volume's target.
    let root = h.root().display().to_string();
    let elsewhere = other_target.display().to_string();
    for path in ["some/path", root.as_str(), elsewhere.as_str()] {
        let wrong = raw.node_get_volume_stats(stats_request(id, path)).await;
        assert_eq!(raw_code(wrong), Code::NotFound, "{path}");
    }
    h.client.node_unpublish_volume(id, &target).await.unwrap();
    let unpublished = raw
        .node_get_volume_stats(stats_request(id, &target.display().to_string()))
        .await;
    assert_eq!(raw_code(unpublished), Code::NotFound);
    h.client.node_unstage_volume(id, &staging).await.unwrap();
    h.client
        .node_unpublish_volume(&other.external_id, &other_target)
        .await
        .unwrap();
}
