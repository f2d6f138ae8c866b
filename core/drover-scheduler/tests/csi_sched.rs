//! CSI volume feasibility through the whole scheduler: which nodes a group asking for `csi`
//! volumes may use, and the placement failures (Nomad's texts) when none can.

use std::collections::BTreeMap;

use drover_scheduler::harness::{Harness, mock_alloc, mock_job, mock_node, register_eval};
use drover_structs::{
    AllocMetric, CsiAccessMode, CsiAttachmentMode, CsiClaimMode, CsiClaimState, CsiInfo,
    CsiNodeInfo, CsiVolume, CsiVolumeCapability, CsiVolumeClaim, EVAL_STATUS_BLOCKED, Job, Node,
};
use serde_json::json;

fn node_with_plugin(plugin: &str, healthy: bool, max_volumes: i64) -> Node {
    let mut n = mock_node();
    let info = CsiInfo {
        plugin_id: plugin.into(),
        healthy,
        node_info: Some(CsiNodeInfo {
            id: format!("ext-{}", n.id),
            max_volumes,
            ..Default::default()
        }),
        ..Default::default()
    };
    n.csi_node_plugins = Some(BTreeMap::from([(plugin.to_string(), info)]));
    n
}

fn volume(id: &str, mode: CsiAccessMode) -> CsiVolume {
    CsiVolume {
        id: id.into(),
        namespace: "default".into(),
        plugin_id: "hostpath".into(),
        schedulable: true,
        requested_capabilities: vec![CsiVolumeCapability {
            access_mode: mode,
            attachment_mode: CsiAttachmentMode::FileSystem,
        }],
        ..Default::default()
    }
}

/// The volume with a taken write claim of `alloc`.
fn written_by(mut v: CsiVolume, alloc: &str) -> CsiVolume {
    v.access_mode = v.requested_capabilities[0].access_mode;
    v.attachment_mode = CsiAttachmentMode::FileSystem;
    v.write_allocs.insert(alloc.into(), None);
    v.write_claims.insert(
        alloc.into(),
        CsiVolumeClaim {
            allocation_id: alloc.into(),
            mode: CsiClaimMode::Write,
            access_mode: v.access_mode,
            attachment_mode: CsiAttachmentMode::FileSystem,
            state: CsiClaimState::Taken,
            ..Default::default()
        },
    );
    v
}

/// A one-allocation service job whose group mounts CSI volume `source`.
fn job_with_volume(source: &str, read_only: bool, per_alloc: bool, count: i64) -> Job {
    let mut job = mock_job();
    let tg = &mut job.task_groups[0];
    tg.count = count;
    tg.volumes = Some(json!({
        "data": {
            "Name": "data",
            "Type": "csi",
            "Source": source,
            "ReadOnly": read_only,
            "AccessMode": "single-node-writer",
            "AttachmentMode": "file-system",
            "PerAlloc": per_alloc,
        }
    }));
    job
}

fn failure(h: &Harness) -> AllocMetric {
    let e = h.last_eval().expect("the eval was updated");
    e.failed_tg_allocs.as_ref().expect("a failed placement")["web"].clone()
}

fn filtered(m: &AllocMetric) -> BTreeMap<String, i64> {
    m.constraint_filtered.clone().unwrap_or_default().into()
}

#[test]
fn missing_volume_fails_placement_and_blocks() {
    let mut h = Harness::new();
    h.upsert_node(node_with_plugin("hostpath", true, 0));
    h.upsert_node(node_with_plugin("hostpath", true, 0));
    let job = h.upsert_job(job_with_volume("db", false, false, 1));
    h.process(&register_eval(&job)).unwrap();

    assert!(h.live_allocs(&job).is_empty());
    let m = failure(&h);
    assert_eq!(filtered(&m)["missing CSI Volume db"], 2);
    assert_eq!(h.created_evals.len(), 1);
    assert_eq!(h.created_evals[0].status, EVAL_STATUS_BLOCKED);
}

#[test]
fn only_nodes_with_a_healthy_node_plugin_are_feasible() {
    let mut h = Harness::new();
    let bare = h.upsert_node(mock_node());
    let sick = h.upsert_node(node_with_plugin("hostpath", false, 0));
    let good = h.upsert_node(node_with_plugin("hostpath", true, 0));
    h.state
        .put_csi_volume(volume("db", CsiAccessMode::SingleNodeWriter));
    let job = h.upsert_job(job_with_volume("db", false, false, 1));
    h.process(&register_eval(&job)).unwrap();

    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].node_id, good.id);
    // The placement's metric names why the other nodes were passed over, when it saw them.
    let m = live[0].metrics.as_ref().unwrap();
    let f = filtered(m);
    for (node, text) in [
        (&bare, "is missing from client"),
        (&sick, "is unhealthy on client"),
    ] {
        let want = format!("CSI plugin hostpath {text} {}", node.id);
        assert!(f.get(&want).is_none_or(|n| *n == 1), "{f:?}");
    }

    // With only the two unfit nodes, the reasons are both reported.
    let mut h2 = Harness::new();
    let bare = h2.upsert_node(mock_node());
    let sick = h2.upsert_node(node_with_plugin("hostpath", false, 0));
    h2.state
        .put_csi_volume(volume("db", CsiAccessMode::SingleNodeWriter));
    let job = h2.upsert_job(job_with_volume("db", false, false, 1));
    h2.process(&register_eval(&job)).unwrap();
    let f = filtered(&failure(&h2));
    assert_eq!(
        f[&format!("CSI plugin hostpath is missing from client {}", bare.id)],
        1
    );
    assert_eq!(
        f[&format!("CSI plugin hostpath is unhealthy on client {}", sick.id)],
        1
    );
}

#[test]
fn unschedulable_volume_refuses_writers_and_readers() {
    let mut h = Harness::new();
    h.upsert_node(node_with_plugin("hostpath", true, 0));
    let mut v = volume("db", CsiAccessMode::SingleNodeWriter);
    // A plugin needing a controller with none healthy: the volume is not schedulable.
    v.schedulable = false;
    h.state.put_csi_volume(v);
    let writer = h.upsert_job(job_with_volume("db", false, false, 1));
    h.process(&register_eval(&writer)).unwrap();
    assert_eq!(
        filtered(&failure(&h))["CSI volume db is unschedulable or is read-only"],
        1
    );
    let reader = h.upsert_job(job_with_volume("db", true, false, 1));
    h.process(&register_eval(&reader)).unwrap();
    assert_eq!(
        filtered(&failure(&h))["CSI volume db is unschedulable or has exhausted its available reader claims"],
        1
    );
}

#[test]
fn writer_of_another_job_blocks_a_second_writer_but_not_readers() {
    let mut h = Harness::new();
    let node = h.upsert_node(node_with_plugin("hostpath", true, 0));
    let other = h.upsert_job(job_with_volume("db", false, false, 1));
    let holder = mock_alloc(&other, &node, 0);
    h.upsert_alloc(holder.clone());
    h.state.put_csi_volume(written_by(
        volume("db", CsiAccessMode::MultiNodeSingleWriter),
        &holder.id,
    ));

    let writer = h.upsert_job(job_with_volume("db", false, false, 1));
    h.process(&register_eval(&writer)).unwrap();
    assert!(h.live_allocs(&writer).is_empty());
    assert_eq!(
        filtered(&failure(&h))["CSI volume db has exhausted its available writer claims"],
        1
    );
    assert_eq!(h.created_evals.last().unwrap().status, EVAL_STATUS_BLOCKED);

    let reader = h.upsert_job(job_with_volume("db", true, false, 1));
    h.process(&register_eval(&reader)).unwrap();
    assert_eq!(h.live_allocs(&reader).len(), 1);
}

#[test]
fn replacement_of_the_writing_allocation_may_take_the_volume() {
    let mut h = Harness::new();
    let node = h.upsert_node(node_with_plugin("hostpath", true, 0));
    h.state
        .put_csi_volume(volume("db", CsiAccessMode::SingleNodeWriter));
    let job = h.upsert_job(job_with_volume("db", false, false, 1));
    h.process(&register_eval(&job)).unwrap();
    let first = h.live_allocs(&job)[0].clone();
    assert_eq!(first.node_id, node.id);
    // The client claimed the volume for it.
    h.state.put_csi_volume(written_by(
        volume("db", CsiAccessMode::SingleNodeWriter),
        &first.id,
    ));

    // A destructive update replaces the writer: the replacement may claim the volume.
    let mut changed = (*job).clone();
    changed.task_groups[0].tasks[0].config = Some(
        [("command".to_string(), json!("/bin/true"))]
            .into_iter()
            .collect(),
    );
    let changed = h.upsert_job(changed);
    h.process(&register_eval(&changed)).unwrap();
    let live = h.live_allocs(&changed);
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].previous_allocation, first.id);
    assert!(h.last_eval().unwrap().failed_tg_allocs.is_none());
}

#[test]
fn writer_claim_of_a_collected_allocation_blocks_until_released() {
    let mut h = Harness::new();
    h.upsert_node(node_with_plugin("hostpath", true, 0));
    h.state.put_csi_volume(written_by(
        volume("db", CsiAccessMode::SingleNodeWriter),
        "gone-alloc",
    ));
    let job = h.upsert_job(job_with_volume("db", false, false, 1));
    h.process(&register_eval(&job)).unwrap();
    assert_eq!(
        filtered(&failure(&h))["CSI volume db has exhausted its available writer claims and is claimed by a \
             garbage collected allocation gone-alloc; waiting for claim to be released"],
        1
    );

    // The claim freed, the same evaluation places.
    h.state
        .put_csi_volume(volume("db", CsiAccessMode::SingleNodeWriter));
    h.process(&register_eval(&job)).unwrap();
    assert_eq!(h.live_allocs(&job).len(), 1);
}

#[test]
fn per_alloc_volumes_use_the_allocation_index() {
    let mut h = Harness::new();
    h.upsert_node(node_with_plugin("hostpath", true, 0));
    h.state
        .put_csi_volume(volume("data[0]", CsiAccessMode::SingleNodeWriter));
    let job = h.upsert_job(job_with_volume("data", false, true, 2));
    h.process(&register_eval(&job)).unwrap();

    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 1);
    assert!(live[0].name.ends_with("[0]"));
    assert_eq!(filtered(&failure(&h))["missing CSI Volume data[1]"], 1);
}

#[test]
fn node_plugin_max_volumes_is_respected() {
    let mut h = Harness::new();
    let full = h.upsert_node(node_with_plugin("hostpath", true, 1));
    // Another job's allocation on the node already uses a volume of the plugin.
    let other = h.upsert_job(job_with_volume("logs", false, false, 1));
    h.state
        .put_csi_volume(volume("logs", CsiAccessMode::MultiNodeMultiWriter));
    h.upsert_alloc(mock_alloc(&other, &full, 0));
    h.state
        .put_csi_volume(volume("db", CsiAccessMode::SingleNodeWriter));
    let job = h.upsert_job(job_with_volume("db", false, false, 1));
    h.process(&register_eval(&job)).unwrap();
    assert_eq!(
        filtered(&failure(&h))[&format!(
            "CSI plugin hostpath has the maximum number of volumes on client {}",
            full.id
        )],
        1
    );

    let roomy = h.upsert_node(node_with_plugin("hostpath", true, 2));
    h.process(&register_eval(&job)).unwrap();
    let live = h.live_allocs(&job);
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].node_id, roomy.id);
}
