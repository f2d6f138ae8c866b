use drover_csi::proto::controller_client::ControllerClient;
use drover_csi::{
    AttachmentMode, CapacityRange, CapacityRequest, ControllerExpandRequest,
    ControllerPublishRequest, MountOptions, Secrets, StringMap, Topology, TopologyRequirement,
    ValidateVolumeRequest, VolumeContentSource, proto,
};

use super::*;
use crate::TOPOLOGY_KEY;
use crate::controller::SOURCE_PATH_KEY;

fn sized(name: &str, required_bytes: i64, limit_bytes: i64) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        capacity: Some(CapacityRange {
            required_bytes,
            limit_bytes,
        }),
        capabilities: vec![writer()],
        ..Default::default()
    }
}

fn publish(
    volume: &Volume,
    node_id: &str,
    capability: VolumeCapability,
) -> ControllerPublishRequest {
    ControllerPublishRequest {
        external_id: volume.external_id.clone(),
        node_id: node_id.into(),
        capability,
        readonly: false,
        secrets: Secrets::default(),
        context: StringMap::new(),
    }
}

fn block() -> VolumeCapability {
    VolumeCapability {
        access_mode: AccessMode::SingleNodeWriter,
        attachment_mode: AttachmentMode::BlockDevice,
        mount_options: MountOptions::default(),
    }
}

fn this_node() -> Topology {
    Topology {
        segments: StringMap::from([(TOPOLOGY_KEY.to_string(), NODE.to_string())]),
    }
}

#[tokio::test]
async fn create_volume_is_idempotent_by_name_and_makes_a_directory() {
    let h = Harness::start().await;
    let first = h.create("data").await;
    assert!(!first.external_id.is_empty());
    assert!(h.volume_dir(&first).is_dir());
    assert_eq!(first.capacity_bytes, crate::plugin::DEFAULT_VOLUME_BYTES);
    assert_eq!(first.accessible_topology, vec![this_node()]);
    let again = h.create("data").await;
    assert_eq!(again, first);
    let other = h.create("logs").await;
    assert_ne!(other.external_id, first.external_id);
    let page = h.client.list_volumes(0, "").await.unwrap();
    assert_eq!(page.entries.len(), 2);
}

#[tokio::test]
async fn create_volume_honours_and_reports_the_capacity_range() {
    let h = Harness::start().await;
    let exact = h
        .client
        .create_volume(&sized("exact", GIB, GIB))
        .await
        .unwrap();
    assert_eq!(exact.capacity_bytes, GIB);
    let floor = h
        .client
        .create_volume(&sized("floor", 3 * GIB, 0))
        .await
        .unwrap();
    assert_eq!(floor.capacity_bytes, 3 * GIB);
    let ceiling = h
        .client
        .create_volume(&sized("ceiling", 0, 1000))
        .await
        .unwrap();
    assert_eq!(ceiling.capacity_bytes, 1000);
    // Asking again with a range the volume still fits is the same volume.
    let again = h
        .client
        .create_volume(&sized("floor", GIB, 4 * GIB))
        .await
        .unwrap();
    assert_eq!(again.external_id, floor.external_id);
}

#[tokio::test]
async fn the_same_name_with_an_incompatible_capacity_or_parameters_is_already_exists() {
    let h = Harness::start().await;
    h.client
        .create_volume(&sized("db", GIB, GIB))
        .await
        .unwrap();
    let bigger = h.client.create_volume(&sized("db", 2 * GIB, 0)).await;
    assert_eq!(code_of(bigger), Code::AlreadyExists);
    let smaller = h.client.create_volume(&sized("db", 0, GIB / 2)).await;
    assert_eq!(code_of(smaller), Code::AlreadyExists);
    let mut other_parameters = sized("db", GIB, GIB);
    other_parameters.parameters = StringMap::from([("tier".into(), "fast".into())]);
    let other = h.client.create_volume(&other_parameters).await;
    assert_eq!(code_of(other), Code::AlreadyExists);
}

#[tokio::test]
async fn create_volume_checks_its_required_and_invalid_fields() {
    let h = Harness::start().await;
    let nameless = h.client.create_volume(&sized("", GIB, 0)).await;
    assert_eq!(code_of(nameless), Code::InvalidArgument);
    let mut no_caps = sized("x", GIB, 0);
    no_caps.capabilities.clear();
    assert_eq!(
        code_of(h.client.create_volume(&no_caps).await),
        Code::InvalidArgument
    );
    let inverted = h.client.create_volume(&sized("x", 2 * GIB, GIB)).await;
    assert_eq!(code_of(inverted), Code::InvalidArgument);
    let negative = h.client.create_volume(&sized("x", -1, 0)).await;
    assert_eq!(code_of(negative), Code::InvalidArgument);

    // A capability without an access mode, which the typed client cannot build.
    let mut raw = ControllerClient::new(h.raw().await);
    let modeless = raw
        .create_volume(proto::CreateVolumeRequest {
            name: "x".into(),
            volume_capabilities: vec![proto::VolumeCapability {
                access_mode: None,
                access_type: Some(proto::volume_capability::AccessType::Mount(
                    Default::default(),
                )),
            }],
            ..Default::default()
        })
        .await;
    assert_eq!(raw_code(modeless), Code::InvalidArgument);
    assert!(
        h.client
            .list_volumes(0, "")
            .await
            .unwrap()
            .entries
            .is_empty()
    );
}

#[tokio::test]
async fn create_volume_refuses_block_devices_and_unknown_content_sources() {
    let h = Harness::start().await;
    let mut req = sized("blk", GIB, 0);
    req.capabilities = vec![block()];
    assert_eq!(
        code_of(h.client.create_volume(&req).await),
        Code::InvalidArgument
    );
    let mut clone = sized("clone", GIB, 0);
    clone.content_source = Some(VolumeContentSource::Volume("some-volume".into()));
    assert_eq!(
        code_of(h.client.create_volume(&clone).await),
        Code::NotFound
    );
}

#[tokio::test]
async fn create_volume_outside_this_nodes_topology_is_resource_exhausted() {
    let h = Harness::start().await;
    let elsewhere = Topology {
        segments: StringMap::from([(TOPOLOGY_KEY.to_string(), "node-2".to_string())]),
    };
    let mut req = sized("far", GIB, 0);
    req.accessibility = Some(TopologyRequirement {
        requisite: vec![elsewhere.clone()],
        preferred: vec![],
    });
    assert_eq!(
        code_of(h.client.create_volume(&req).await),
        Code::ResourceExhausted
    );
    req.accessibility = Some(TopologyRequirement {
        requisite: vec![elsewhere, this_node()],
        preferred: vec![this_node()],
    });
    let near = h.client.create_volume(&req).await.unwrap();
    assert_eq!(near.accessible_topology, vec![this_node()]);
}

#[tokio::test]
async fn the_pool_bounds_volume_sizes() {
    let h = Harness::start_with(|c| c.capacity_bytes = 3 * GIB).await;
    let too_big = h.client.create_volume(&sized("huge", 4 * GIB, 0)).await;
    assert_eq!(code_of(too_big), Code::OutOfRange);
    h.client
        .create_volume(&sized("a", 2 * GIB, 0))
        .await
        .unwrap();
    let no_room = h.client.create_volume(&sized("b", 2 * GIB, 0)).await;
    assert_eq!(code_of(no_room), Code::ResourceExhausted);
}

#[tokio::test]
async fn delete_volume_is_idempotent_and_removes_the_directory() {
    let h = Harness::start().await;
    let volume = h.create("gone").await;
    std::fs::write(h.volume_dir(&volume).join("file"), b"data").unwrap();
    h.client
        .delete_volume(&volume.external_id, &Secrets::default())
        .await
        .unwrap();
    assert!(!h.volume_dir(&volume).exists());
    // Again, and for a volume that never was: the spec wants OK.
    h.client
        .delete_volume(&volume.external_id, &Secrets::default())
        .await
        .unwrap();
    h.client
        .delete_volume("never-was", &Secrets::default())
        .await
        .unwrap();
    let missing_id = h.client.delete_volume("", &Secrets::default()).await;
    assert_eq!(code_of(missing_id), Code::InvalidArgument);
    // The name is free again.
    let reborn = h.create("gone").await;
    assert_ne!(reborn.external_id, volume.external_id);
}

#[tokio::test]
async fn a_published_volume_cannot_be_deleted() {
    let h = Harness::start().await;
    let volume = h.create("busy").await;
    h.client
        .controller_publish_volume(&publish(&volume, NODE, writer()))
        .await
        .unwrap();
    let refused = h
        .client
        .delete_volume(&volume.external_id, &Secrets::default())
        .await;
    assert_eq!(code_of(refused), Code::FailedPrecondition);
    assert!(h.volume_dir(&volume).is_dir());
}

#[tokio::test]
async fn controller_publish_records_the_attachment_and_is_idempotent() {
    let h = Harness::start().await;
    let volume = h.create("att").await;
    let context = h
        .client
        .controller_publish_volume(&publish(&volume, NODE, writer()))
        .await
        .unwrap();
    assert_eq!(
        context.get(SOURCE_PATH_KEY).map(PathBuf::from),
        Some(h.volume_dir(&volume))
    );
    let again = h
        .client
        .controller_publish_volume(&publish(&volume, NODE, writer()))
        .await
        .unwrap();
    assert_eq!(again, context);
    let page = h.client.list_volumes(0, "").await.unwrap();
    assert_eq!(page.entries[0].published_node_ids, vec![NODE.to_string()]);
}

#[tokio::test]
async fn controller_publish_with_another_capability_or_readonly_flag_is_already_exists() {
    let h = Harness::start().await;
    let volume = h.create("att").await;
    h.client
        .controller_publish_volume(&publish(&volume, NODE, writer()))
        .await
        .unwrap();
    let reader = VolumeCapability::file_system(AccessMode::SingleNodeReaderOnly);
    let other_mode = h
        .client
        .controller_publish_volume(&publish(&volume, NODE, reader))
        .await;
    assert_eq!(code_of(other_mode), Code::AlreadyExists);
    let mut readonly = publish(&volume, NODE, writer());
    readonly.readonly = true;
    let other_flag = h.client.controller_publish_volume(&readonly).await;
    assert_eq!(code_of(other_flag), Code::AlreadyExists);
}

#[tokio::test]
async fn controller_publish_of_an_unknown_volume_or_node_is_not_found() {
    let h = Harness::start().await;
    let volume = h.create("att").await;
    let unknown_node = h
        .client
        .controller_publish_volume(&publish(&volume, "node-9", writer()))
        .await;
    assert_eq!(code_of(unknown_node), Code::NotFound);
    let mut unknown_volume = publish(&volume, NODE, writer());
    unknown_volume.external_id = "no-such-volume".into();
    let unknown_volume = h.client.controller_publish_volume(&unknown_volume).await;
    assert_eq!(code_of(unknown_volume), Code::NotFound);
}

#[tokio::test]
async fn controller_publish_requires_volume_node_and_capability() {
    let h = Harness::start().await;
    let volume = h.create("att").await;
    let no_node = h
        .client
        .controller_publish_volume(&publish(&volume, "", writer()))
        .await;
    assert_eq!(code_of(no_node), Code::InvalidArgument);
    let mut no_volume = publish(&volume, NODE, writer());
    no_volume.external_id.clear();
    assert_eq!(
        code_of(h.client.controller_publish_volume(&no_volume).await),
        Code::InvalidArgument
    );
    let mut raw = ControllerClient::new(h.raw().await);
    let no_capability = raw
        .controller_publish_volume(proto::ControllerPublishVolumeRequest {
            volume_id: volume.external_id.clone(),
            node_id: NODE.into(),
            ..Default::default()
        })
        .await;
    assert_eq!(raw_code(no_capability), Code::InvalidArgument);
}

#[tokio::test]
async fn controller_publish_beyond_the_nodes_maximum_is_resource_exhausted() {
    let h = Harness::start_with(|c| c.max_volumes_per_node = 1).await;
    let first = h.create("one").await;
    let second = h.create("two").await;
    h.client
        .controller_publish_volume(&publish(&first, NODE, writer()))
        .await
        .unwrap();
    let over = h
        .client
        .controller_publish_volume(&publish(&second, NODE, writer()))
        .await;
    assert_eq!(code_of(over), Code::ResourceExhausted);
    h.client
        .controller_unpublish_volume(&first.external_id, NODE, &Secrets::default())
        .await
        .unwrap();
    h.client
        .controller_publish_volume(&publish(&second, NODE, writer()))
        .await
        .unwrap();
}

#[tokio::test]
async fn controller_unpublish_is_idempotent_and_tolerates_unknown_volumes() {
    let h = Harness::start().await;
    let volume = h.create("att").await;
    h.client
        .controller_publish_volume(&publish(&volume, NODE, writer()))
        .await
        .unwrap();
    for _ in 0..2 {
        h.client
            .controller_unpublish_volume(&volume.external_id, NODE, &Secrets::default())
            .await
            .unwrap();
    }
    let page = h.client.list_volumes(0, "").await.unwrap();
    assert!(page.entries[0].published_node_ids.is_empty());
    // No node: from every node.
    h.client
        .controller_publish_volume(&publish(&volume, NODE, writer()))
        .await
        .unwrap();
    h.client
        .controller_unpublish_volume(&volume.external_id, "", &Secrets::default())
        .await
        .unwrap();
    let page = h.client.list_volumes(0, "").await.unwrap();
    assert!(page.entries[0].published_node_ids.is_empty());
    h.client
        .controller_unpublish_volume("no-such-volume", NODE, &Secrets::default())
        .await
        .unwrap();
    let no_id = h
        .client
        .controller_unpublish_volume("", NODE, &Secrets::default())
        .await;
    assert_eq!(code_of(no_id), Code::InvalidArgument);
}

fn validate(volume: &Volume, capabilities: Vec<VolumeCapability>) -> ValidateVolumeRequest {
    ValidateVolumeRequest {
        external_id: volume.external_id.clone(),
        capabilities,
        ..Default::default()
    }
}

#[tokio::test]
async fn validate_confirms_file_systems_in_every_mode_and_refuses_block_devices() {
    let h = Harness::start().await;
    let volume = h.create("v").await;
    let every_mode = AccessMode::ALL
        .into_iter()
        .map(VolumeCapability::file_system)
        .collect();
    h.client
        .controller_validate_capabilities(&validate(&volume, every_mode))
        .await
        .unwrap();
    let refused = h
        .client
        .controller_validate_capabilities(&validate(&volume, vec![writer(), block()]))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, CsiError::NotConfirmed { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("block"), "{refused}");
    let mut other_parameters = validate(&volume, vec![writer()]);
    other_parameters.parameters = StringMap::from([("tier".into(), "fast".into())]);
    let refused = h
        .client
        .controller_validate_capabilities(&other_parameters)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, CsiError::NotConfirmed { .. }),
        "{refused:?}"
    );
}

#[tokio::test]
async fn validate_needs_a_known_volume_and_capabilities() {
    let h = Harness::start().await;
    let volume = h.create("v").await;
    let mut unknown = validate(&volume, vec![writer()]);
    unknown.external_id = "no-such-volume".into();
    assert_eq!(
        code_of(h.client.controller_validate_capabilities(&unknown).await),
        Code::NotFound
    );
    let none = h
        .client
        .controller_validate_capabilities(&validate(&volume, vec![]))
        .await;
    assert_eq!(code_of(none), Code::InvalidArgument);
    let mut no_id = validate(&volume, vec![writer()]);
    no_id.external_id.clear();
    assert_eq!(
        code_of(h.client.controller_validate_capabilities(&no_id).await),
        Code::InvalidArgument
    );
}

#[tokio::test]
async fn list_volumes_pages_with_starting_token_and_max_entries() {
    let h = Harness::start().await;
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(h.create(&format!("v{i}")).await.external_id);
    }
    made.sort();
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = h.client.list_volumes(2, &token).await.unwrap();
        assert!(page.entries.len() <= 2);
        seen.extend(page.entries.into_iter().map(|e| e.volume.external_id));
        pages += 1;
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, made);
    let all = h.client.list_volumes(0, "").await.unwrap();
    assert_eq!(all.entries.len(), 5);
    assert!(all.next_token.is_empty());
}

#[tokio::test]
async fn list_volumes_refuses_a_bad_token_and_a_negative_page_size() {
    let h = Harness::start().await;
    h.create("v").await;
    assert_eq!(
        code_of(h.client.list_volumes(0, "bogus").await),
        Code::Aborted
    );
    assert_eq!(code_of(h.client.list_volumes(0, "7").await), Code::Aborted);
    assert_eq!(
        code_of(h.client.list_volumes(-1, "").await),
        Code::InvalidArgument
    );
}

#[tokio::test]
async fn get_capacity_shrinks_as_volumes_are_made_and_is_zero_for_what_cannot_be_served() {
    let h = Harness::start_with(|c| c.capacity_bytes = 5 * GIB).await;
    let before = h
        .client
        .get_capacity(&CapacityRequest::default())
        .await
        .unwrap();
    assert_eq!(before.available, 5 * GIB);
    assert_eq!(before.maximum_volume_size, Some(5 * GIB));
    h.client
        .create_volume(&sized("a", 2 * GIB, 0))
        .await
        .unwrap();
    let after = h
        .client
        .get_capacity(&CapacityRequest {
            capabilities: vec![writer()],
            accessible_topology: Some(this_node()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(after.available, 3 * GIB);
    let for_block = h
        .client
        .get_capacity(&CapacityRequest {
            capabilities: vec![block()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(for_block.available, 0);
    let elsewhere = h
        .client
        .get_capacity(&CapacityRequest {
            accessible_topology: Some(Topology {
                segments: StringMap::from([("zone".into(), "z9".into())]),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(elsewhere.available, 0);
}

#[tokio::test]
async fn controller_capabilities_list_what_the_plugin_does() {
    let h = Harness::start().await;
    let caps = h.client.controller_get_capabilities().await.unwrap();
    assert_eq!(caps, crate::controller::CAPABILITIES);
    assert!(caps.create_delete_volume && caps.publish_unpublish_volume);
    assert!(caps.list_volumes && caps.list_volumes_published_nodes && caps.get_capacity);
    assert!(caps.create_delete_snapshot && caps.list_snapshots && caps.clone_volume);
}

fn expand(volume: &Volume, required_bytes: i64) -> ControllerExpandRequest {
    ControllerExpandRequest {
        external_id: volume.external_id.clone(),
        capacity: CapacityRange {
            required_bytes,
            limit_bytes: 0,
        },
        capability: Some(writer()),
        secrets: Secrets::default(),
    }
}

#[tokio::test]
async fn controller_expand_grows_the_volume_and_is_idempotent() {
    let h = Harness::start_with(|c| c.capacity_bytes = 4 * GIB).await;
    let volume = h
        .client
        .create_volume(&sized("grow", GIB, 0))
        .await
        .unwrap();
    let grown = h
        .client
        .controller_expand_volume(&expand(&volume, 2 * GIB))
        .await
        .unwrap();
    assert_eq!(grown.capacity_bytes, 2 * GIB);
    assert!(!grown.node_expansion_required);
    let again = h
        .client
        .controller_expand_volume(&expand(&volume, 2 * GIB))
        .await
        .unwrap();
    assert_eq!(again.capacity_bytes, 2 * GIB);
    let smaller = h
        .client
        .controller_expand_volume(&expand(&volume, GIB))
        .await
        .unwrap();
    assert_eq!(smaller.capacity_bytes, 2 * GIB, "volumes never shrink");
    let listed = h.client.list_volumes(0, "").await.unwrap();
    assert_eq!(listed.entries[0].volume.capacity_bytes, 2 * GIB);
    let beyond = h
        .client
        .controller_expand_volume(&expand(&volume, 5 * GIB))
        .await;
    assert_eq!(code_of(beyond), Code::OutOfRange);
    let mut unknown = expand(&volume, 2 * GIB);
    unknown.external_id = "no-such-volume".into();
    assert_eq!(
        code_of(h.client.controller_expand_volume(&unknown).await),
        Code::NotFound
    );
    let no_range = h.client.controller_expand_volume(&expand(&volume, 0)).await;
    assert_eq!(code_of(no_range), Code::InvalidArgument);
}

#[tokio::test]
async fn controller_get_volume_reports_the_volume_and_its_nodes() {
    let h = Harness::start().await;
    let volume = h.create("v").await;
    h.client
        .controller_publish_volume(&publish(&volume, NODE, writer()))
        .await
        .unwrap();
    let mut raw = ControllerClient::new(h.raw().await);
    let got = raw
        .controller_get_volume(proto::ControllerGetVolumeRequest {
            volume_id: volume.external_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.volume.unwrap().volume_id, volume.external_id);
    assert_eq!(
        got.status.unwrap().published_node_ids,
        vec![NODE.to_string()]
    );
    let missing = raw
        .controller_get_volume(proto::ControllerGetVolumeRequest {
            volume_id: "no-such-volume".into(),
        })
        .await;
    assert_eq!(raw_code(missing), Code::NotFound);
}

#[tokio::test]
async fn volumes_and_attachments_survive_a_restart_of_the_plugin() {
    let mut h = Harness::start().await;
    let volume = h.create("kept").await;
    h.client
        .controller_publish_volume(&publish(&volume, NODE, writer()))
        .await
        .unwrap();
    h.restart().await;
    let page = h.client.list_volumes(0, "").await.unwrap();
    assert_eq!(page.entries.len(), 1);
    assert_eq!(page.entries[0].volume, volume);
    assert_eq!(page.entries[0].published_node_ids, vec![NODE.to_string()]);
    // CreateVolume with the same name still finds it.
    assert_eq!(h.create("kept").await, volume);
}
