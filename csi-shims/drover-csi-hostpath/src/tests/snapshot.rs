use drover_csi::{
    CapacityRange, ListSnapshotsRequest, Secrets, Snapshot, StringMap, VolumeContentSource,
};

use super::*;

impl Harness {
    async fn snapshot(&self, volume: &Volume, name: &str) -> Result<Snapshot, CsiError> {
        self.client
            .create_snapshot(
                &volume.external_id,
                name,
                &StringMap::new(),
                &Secrets::default(),
            )
            .await
    }

    async fn create_from(
        &self,
        name: &str,
        source: VolumeContentSource,
        capacity: Option<CapacityRange>,
    ) -> Result<Volume, CsiError> {
        self.client
            .create_volume(&CreateVolumeRequest {
                name: name.into(),
                capabilities: vec![writer()],
                content_source: Some(source),
                capacity,
                ..Default::default()
            })
            .await
    }

    async fn list(&self, req: ListSnapshotsRequest) -> Result<Vec<String>, CsiError> {
        let page = self.client.list_snapshots_with(&req).await?;
        Ok(page.entries.into_iter().map(|s| s.id).collect())
    }
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}

#[tokio::test]
async fn a_snapshot_keeps_the_volume_as_it_was_and_restores_into_a_new_volume() {
    let h = Harness::start().await;
    let source = h.create("db").await;
    let dir = h.volume_dir(&source);
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/greeting"), "hello").unwrap();
    std::os::unix::fs::symlink("sub/greeting", dir.join("link")).unwrap();

    let snap = h.snapshot(&source, "nightly").await.unwrap();
    assert_eq!(snap.source_volume_id, source.external_id);
    assert_eq!(snap.size_bytes, source.capacity_bytes);
    assert!(snap.ready, "a copy is ready at once");
    assert!(snap.create_time_nanos > 0);
    std::fs::write(dir.join("sub/greeting"), "changed after the snapshot").unwrap();

    let restored = h
        .create_from(
            "restored",
            VolumeContentSource::Snapshot(snap.id.clone()),
            None,
        )
        .await
        .unwrap();
    assert_ne!(restored.external_id, source.external_id);
    assert_eq!(
        restored.content_source,
        Some(VolumeContentSource::Snapshot(snap.id.clone()))
    );
    assert_eq!(restored.capacity_bytes, source.capacity_bytes);
    let new_dir = h.volume_dir(&restored);
    assert_eq!(read(&new_dir, "sub/greeting"), "hello");
    assert_eq!(
        std::fs::read_link(new_dir.join("link")).unwrap(),
        Path::new("sub/greeting")
    );
    // The same request again is the same volume; from another source it is not.
    let again = h
        .create_from(
            "restored",
            VolumeContentSource::Snapshot(snap.id.clone()),
            None,
        )
        .await
        .unwrap();
    assert_eq!(again.external_id, restored.external_id);
    assert_eq!(
        code_of(
            h.create_from(
                "restored",
                VolumeContentSource::Volume(source.external_id.clone()),
                None
            )
            .await
        ),
        Code::AlreadyExists
    );
}

#[tokio::test]
async fn a_clone_copies_the_source_volume_now() {
    let h = Harness::start().await;
    let source = h.create("db").await;
    std::fs::write(h.volume_dir(&source).join("f"), "one").unwrap();
    let clone = h
        .create_from(
            "copy",
            VolumeContentSource::Volume(source.external_id.clone()),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        clone.content_source,
        Some(VolumeContentSource::Volume(source.external_id.clone()))
    );
    std::fs::write(h.volume_dir(&source).join("f"), "two").unwrap();
    assert_eq!(read(&h.volume_dir(&clone), "f"), "one");
}

#[tokio::test]
async fn a_restore_is_never_smaller_than_its_source() {
    let h = Harness::start().await;
    let source = h.create("db").await; // 1 GiB
    let snap = h.snapshot(&source, "s").await.unwrap();
    let bigger = h
        .create_from(
            "bigger",
            VolumeContentSource::Snapshot(snap.id.clone()),
            Some(CapacityRange {
                required_bytes: 2 * GIB,
                limit_bytes: 0,
            }),
        )
        .await
        .unwrap();
    assert_eq!(bigger.capacity_bytes, 2 * GIB);
    let grown = h
        .create_from(
            "grown",
            VolumeContentSource::Snapshot(snap.id.clone()),
            Some(CapacityRange {
                required_bytes: 1 << 20,
                limit_bytes: 0,
            }),
        )
        .await
        .unwrap();
    assert_eq!(grown.capacity_bytes, GIB);
    let too_small = h
        .create_from(
            "small",
            VolumeContentSource::Snapshot(snap.id.clone()),
            Some(CapacityRange {
                required_bytes: 0,
                limit_bytes: 1 << 20,
            }),
        )
        .await;
    assert_eq!(code_of(too_small), Code::OutOfRange);
}

#[tokio::test]
async fn snapshot_names_are_idempotency_keys_and_sources_must_exist() {
    let h = Harness::start().await;
    let a = h.create("a").await;
    let b = h.create("b").await;
    let first = h.snapshot(&a, "s").await.unwrap();
    let second = h.snapshot(&a, "s").await.unwrap();
    assert_eq!(first, second);
    assert_eq!(code_of(h.snapshot(&b, "s").await), Code::AlreadyExists);
    let missing = Volume {
        external_id: "no-such-volume".into(),
        ..a.clone()
    };
    assert_eq!(code_of(h.snapshot(&missing, "t").await), Code::NotFound);
    assert_eq!(code_of(h.snapshot(&a, "").await), Code::InvalidArgument);
    let no_source = Volume {
        external_id: String::new(),
        ..a
    };
    assert_eq!(
        code_of(h.snapshot(&no_source, "u").await),
        Code::InvalidArgument
    );
    assert_eq!(
        code_of(
            h.create_from("x", VolumeContentSource::Snapshot("nope".into()), None)
                .await
        ),
        Code::NotFound
    );
}

#[tokio::test]
async fn deleting_a_snapshot_removes_its_copy_and_is_idempotent() {
    let h = Harness::start().await;
    let v = h.create("v").await;
    let snap = h.snapshot(&v, "s").await.unwrap();
    let copy = h.config.state_dir.join("snapshots").join(&snap.id);
    assert!(copy.is_dir());
    h.client
        .delete_snapshot(&snap.id, &Secrets::default())
        .await
        .unwrap();
    assert!(!copy.exists());
    h.client
        .delete_snapshot(&snap.id, &Secrets::default())
        .await
        .unwrap();
    assert_eq!(
        code_of(h.client.delete_snapshot("", &Secrets::default()).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code_of(
            h.create_from("x", VolumeContentSource::Snapshot(snap.id), None)
                .await
        ),
        Code::NotFound
    );
}

#[tokio::test]
async fn list_snapshots_filters_and_pages() {
    let h = Harness::start().await;
    let a = h.create("a").await;
    let b = h.create("b").await;
    let mut ids = vec![
        h.snapshot(&a, "a1").await.unwrap().id,
        h.snapshot(&a, "a2").await.unwrap().id,
        h.snapshot(&b, "b1").await.unwrap().id,
    ];
    ids.sort();
    let all = h.list(ListSnapshotsRequest::default()).await.unwrap();
    assert_eq!(all, ids);
    let of_b = h
        .list(ListSnapshotsRequest {
            source_volume_id: b.external_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(of_b.len(), 1);
    let one = h
        .list(ListSnapshotsRequest {
            snapshot_id: ids[1].clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(one, vec![ids[1].clone()]);
    for unknown in [
        ListSnapshotsRequest {
            snapshot_id: "nope".into(),
            ..Default::default()
        },
        ListSnapshotsRequest {
            source_volume_id: "nope".into(),
            ..Default::default()
        },
    ] {
        assert!(h.list(unknown).await.unwrap().is_empty());
    }

    let page = h
        .client
        .list_snapshots_with(&ListSnapshotsRequest {
            max_entries: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.entries.len(), 2);
    assert_eq!(page.next_token, "2");
    let rest = h.client.list_snapshots(2, &page.next_token).await.unwrap();
    assert_eq!(rest.entries.len(), 1);
    assert_eq!(rest.next_token, "");
    assert_eq!(
        code_of(h.client.list_snapshots(0, "9").await),
        Code::Aborted
    );
    assert_eq!(
        code_of(h.client.list_snapshots(-1, "").await),
        Code::InvalidArgument
    );
}

#[tokio::test]
async fn snapshots_survive_a_plugin_restart() {
    let mut h = Harness::start().await;
    let v = h.create("v").await;
    std::fs::write(h.volume_dir(&v).join("f"), "kept").unwrap();
    let snap = h.snapshot(&v, "s").await.unwrap();
    h.restart().await;
    assert_eq!(
        h.list(ListSnapshotsRequest::default()).await.unwrap(),
        vec![snap.id.clone()]
    );
    let restored = h
        .create_from("r", VolumeContentSource::Snapshot(snap.id), None)
        .await
        .unwrap();
    assert_eq!(read(&h.volume_dir(&restored), "f"), "kept");
}
