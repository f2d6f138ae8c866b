//! A group's CSI volumes (Nomad's `csi_hook` and the csimanager's volume manager). Before the
//! tasks start, for each `volume "name" { type = "csi" }`: claim it on the servers (which
//! attach it through the controller and answer the publish context), stage it once per volume
//! and usage on the node (when the node plugin stages), and publish it into the allocation's
//! own directory. After the tasks end: unpublish, unstage when the last user on the node
//! leaves, and have the servers release the claim.
//!
//! Every step is idempotent, so after an agent restart the hook runs again for the allocations
//! it resumes: the claim is the allocation's already, stage and publish of what is in place
//! succeed (the CSI spec requires it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use drover_csi::{
    AccessMode, AttachmentMode, MountOptions, NodePublishRequest, NodeStageRequest, Secrets,
    VolumeCapability,
};
use drover_structs::csi::{
    CsiAccessMode, CsiAttachmentMode, CsiClaimMode, CsiClaimState, CsiMountOptions, CsiVolumeClaim,
    CsiVolumeClaimRequest, VOLUME_TYPE_CSI,
};
use drover_structs::{Allocation, TaskGroup};
use serde::{Deserialize, Serialize};

use super::server::CsiServerCalls;
use super::{CsiManager, PLUGIN_WAIT, PluginInstance};

/// How long a claim is retried (Nomad's `maxBackoffDuration`): the volume may still be held by
/// an allocation being stopped, or its plugin may have no healthy controller for now. The
/// allocation says why it waits meanwhile, and a stop ends the wait.
const CLAIM_RETRY_FOR: Duration = Duration::from_secs(24 * 3600);
/// The longest pause between two claim attempts.
const CLAIM_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// What a group's volume mounting tells its allocation while it waits, and when to give up.
pub struct ClaimWait<'a> {
    /// Called with why the allocation waits, each time the reason changes.
    pub report: &'a (dyn Fn(&str) + Send + Sync),
    /// Turns true when the allocation is to stop: a waiting claim gives up.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

/// The error of a claim given up because the allocation was stopped.
pub const CLAIM_STOPPED: &str = "the allocation was stopped while its volume claim waited";

/// One `volume` block of type csi, resolved for an allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupVolume {
    /// The block's name, what `volume_mount { volume = ... }` names.
    pub name: String,
    /// The volume's id (`source`, with `[index]` for `per_alloc`).
    pub volume_id: String,
    pub read_only: bool,
    pub access_mode: CsiAccessMode,
    pub attachment_mode: CsiAttachmentMode,
    /// The job's mount options; they replace the volume's.
    pub mount_options: Option<CsiMountOptions>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct VolumeRequestJson {
    #[serde(rename = "Type")]
    kind: String,
    #[serde(rename = "Source")]
    source: String,
    #[serde(rename = "ReadOnly")]
    read_only: bool,
    #[serde(rename = "AccessMode")]
    access_mode: String,
    #[serde(rename = "AttachmentMode")]
    attachment_mode: String,
    #[serde(rename = "MountOptions")]
    mount_options: Option<CsiMountOptions>,
    #[serde(rename = "PerAlloc")]
    per_alloc: bool,
}

/// The group's CSI volumes, by name.
pub fn group_csi_volumes(
    group: &TaskGroup,
    alloc: &Allocation,
) -> Result<Vec<GroupVolume>, String> {
    let Some(map) = group.volumes.as_ref().and_then(|v| v.as_object()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, raw) in map {
        let req: VolumeRequestJson =
            serde_json::from_value(raw.clone()).map_err(|e| format!("volume {name:?}: {e}"))?;
        if req.kind != VOLUME_TYPE_CSI {
            continue;
        }
        let volume_id = if req.per_alloc {
            let index = alloc
                .index()
                .ok_or_else(|| format!("volume {name:?}: allocation name has no index"))?;
            format!("{}[{index}]", req.source)
        } else {
            req.source.clone()
        };
        let access_mode = CsiAccessMode::parse(&req.access_mode)
            .ok_or_else(|| format!("volume {name:?}: unknown access mode {:?}", req.access_mode))?;
        let attachment_mode = CsiAttachmentMode::parse(&req.attachment_mode).ok_or_else(|| {
            format!(
                "volume {name:?}: unknown attachment mode {:?}",
                req.attachment_mode
            )
        })?;
        out.push(GroupVolume {
            name: name.clone(),
            volume_id,
            read_only: req.read_only,
            access_mode,
            attachment_mode,
            mount_options: req.mount_options,
        });
    }
    Ok(out)
}

/// A volume published for an allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MountedVolume {
    pub alloc_id: String,
    /// Nomad's id of this node.
    pub node_id: String,
    /// The group's name for it.
    pub name: String,
    pub volume_id: String,
    pub namespace: String,
    pub plugin_id: String,
    pub external_id: String,
    pub read_only: bool,
    pub claim_mode: CsiClaimMode,
    pub access_mode: CsiAccessMode,
    pub attachment_mode: CsiAttachmentMode,
    /// Usage directory name: `ro|rw-<attachment>-<access>`.
    pub usage: String,
    /// Where the volume is published, on the host (what tasks bind).
    pub host_path: PathBuf,
    /// The same, as the plugin sees it.
    pub plugin_target: PathBuf,
    /// The staging directory as the plugin sees it, when the plugin stages.
    pub staging: Option<PathBuf>,
}

/// Nomad's `UsageOptions.ToFS`: one directory per way of using a volume.
pub fn usage_dir(read_only: bool, attachment: CsiAttachmentMode, access: CsiAccessMode) -> String {
    format!(
        "{}-{}-{}",
        if read_only { "ro" } else { "rw" },
        attachment.as_str(),
        access.as_str()
    )
}

fn csi_access_mode(m: CsiAccessMode) -> Result<AccessMode, String> {
    Ok(match m {
        CsiAccessMode::SingleNodeReader => AccessMode::SingleNodeReaderOnly,
        CsiAccessMode::SingleNodeWriter => AccessMode::SingleNodeWriter,
        CsiAccessMode::MultiNodeReader => AccessMode::MultiNodeReaderOnly,
        CsiAccessMode::MultiNodeSingleWriter => AccessMode::MultiNodeSingleWriter,
        CsiAccessMode::MultiNodeMultiWriter => AccessMode::MultiNodeMultiWriter,
        CsiAccessMode::Unknown => return Err("volume access mode is not set".into()),
    })
}

/// The CSI capability of a (structs) access and attachment mode pair.
pub fn capability(
    access: CsiAccessMode,
    attachment: CsiAttachmentMode,
    mount_options: Option<&CsiMountOptions>,
) -> Result<VolumeCapability, String> {
    let attachment_mode = match attachment {
        CsiAttachmentMode::BlockDevice => AttachmentMode::BlockDevice,
        CsiAttachmentMode::FileSystem => AttachmentMode::FileSystem,
        CsiAttachmentMode::Unknown => return Err("volume attachment mode is not set".into()),
    };
    Ok(VolumeCapability {
        access_mode: csi_access_mode(access)?,
        attachment_mode,
        mount_options: mount_options
            .map(|m| MountOptions {
                fs_type: m.fs_type.clone(),
                mount_flags: m.mount_flags.clone(),
            })
            .unwrap_or_default(),
    })
}

fn details(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Claims, stages and publishes every CSI volume of the group. On failure, what was done is
/// undone (claims released) and the error says which volume failed.
pub async fn mount_all(
    manager: &CsiManager,
    server: &dyn CsiServerCalls,
    alloc: &Allocation,
    volumes: &[GroupVolume],
    wait: &mut ClaimWait<'_>,
) -> Result<Vec<MountedVolume>, String> {
    let mut done = Vec::new();
    for v in volumes {
        match mount_one(manager, server, alloc, v, wait).await {
            Ok(m) => done.push(m),
            Err((claimed, e)) => {
                for m in done.iter().rev() {
                    unmount_and_release(manager, server, m).await;
                }
                if claimed {
                    release_claim(server, alloc, v).await;
                }
                return Err(format!("volume {:?}: {e}", v.name));
            }
        }
    }
    Ok(done)
}

/// Answers the error and whether the volume was claimed.
async fn mount_one(
    manager: &CsiManager,
    server: &dyn CsiServerCalls,
    alloc: &Allocation,
    v: &GroupVolume,
    wait: &mut ClaimWait<'_>,
) -> Result<MountedVolume, (bool, String)> {
    let claim_mode = if v.read_only {
        CsiClaimMode::Read
    } else {
        CsiClaimMode::Write
    };
    let request = CsiVolumeClaimRequest {
        volume_id: v.volume_id.clone(),
        namespace: alloc.namespace.clone(),
        allocation_id: alloc.id.clone(),
        node_id: alloc.node_id.clone(),
        external_node_id: String::new(),
        claim: claim_mode,
        access_mode: v.access_mode,
        attachment_mode: v.attachment_mode,
        state: CsiClaimState::Taken,
    };
    let deadline = tokio::time::Instant::now() + CLAIM_RETRY_FOR;
    let mut pause = Duration::from_millis(250);
    let mut reported = String::new();
    let response = loop {
        match server.claim(request.clone()).await {
            Ok(r) => break r,
            Err(e) if tokio::time::Instant::now() + pause < deadline => {
                let why = format!("waiting for CSI volume {:?}: {e}", v.volume_id);
                if why != reported {
                    tracing::info!(alloc = %alloc.id, volume = %v.volume_id, error = %e, "claiming CSI volume; retrying");
                    (wait.report)(&why);
                    reported = why;
                }
                if *wait.stop.borrow() {
                    return Err((false, CLAIM_STOPPED.into()));
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = wait.stop.changed() => return Err((false, CLAIM_STOPPED.into())),
                }
                pause = (pause * 2).min(CLAIM_BACKOFF_MAX);
            }
            Err(e) => return Err((false, format!("claim volume: {e}"))),
        }
    };
    let vol = response
        .volume
        .ok_or_else(|| (true, "the claim answered no volume".to_string()))?;
    let plugin = manager
        .wait_for_node_plugin(&vol.plugin_id, PLUGIN_WAIT)
        .await
        .ok_or_else(|| {
            (
                true,
                format!("CSI plugin {:?} is not running on this node", vol.plugin_id),
            )
        })?;
    let mount_options = v.mount_options.as_ref().or(vol.mount_options.as_ref());
    let cap = capability(v.access_mode, v.attachment_mode, mount_options).map_err(|e| (true, e))?;
    let usage = usage_dir(v.read_only, v.attachment_mode, v.access_mode);
    let mut mounted = MountedVolume {
        alloc_id: alloc.id.clone(),
        node_id: alloc.node_id.clone(),
        name: v.name.clone(),
        volume_id: vol.id.clone(),
        namespace: vol.namespace.clone(),
        plugin_id: vol.plugin_id.clone(),
        external_id: vol.remote_id().to_string(),
        read_only: v.read_only,
        claim_mode,
        access_mode: v.access_mode,
        attachment_mode: v.attachment_mode,
        usage: usage.clone(),
        host_path: PathBuf::new(),
        plugin_target: PathBuf::new(),
        staging: None,
    };
    let result = publish(
        manager,
        &plugin,
        &mut mounted,
        &cap,
        &response.publish_context,
        &Secrets(vol.secrets.clone().unwrap_or_default()),
        &vol.context,
    )
    .await;
    let mut event = details(&[("volume_id", &vol.id), ("alloc_id", &alloc.id)]);
    match result {
        Ok(()) => {
            event.insert("success".into(), "true".into());
            manager.node_event("Mount volume", event);
            manager.record_mounted(mounted.clone());
            Ok(mounted)
        }
        Err(e) => {
            event.insert("success".into(), "false".into());
            event.insert("error".into(), e.clone());
            manager.node_event("Mount volume", event);
            Err((true, e))
        }
    }
}

async fn publish(
    manager: &CsiManager,
    plugin: &PluginInstance,
    m: &mut MountedVolume,
    cap: &VolumeCapability,
    publish_context: &BTreeMap<String, String>,
    secrets: &Secrets,
    context: &BTreeMap<String, String>,
) -> Result<(), String> {
    let staging = if plugin.node_capabilities.stage_unstage_volume {
        let rel = Path::new("staging").join(&m.volume_id).join(&m.usage);
        let (host, in_plugin) = plugin.paths(&rel);
        let key = (m.plugin_id.clone(), m.volume_id.clone(), m.usage.clone());
        let request = NodeStageRequest {
            external_id: m.external_id.clone(),
            publish_context: publish_context.clone(),
            staging_target_path: in_plugin.clone(),
            capability: cap.clone(),
            secrets: secrets.clone(),
            context: context.clone(),
        };
        manager
            .stage_for(key, &m.alloc_id, || async {
                create_dirs(&host)?;
                plugin
                    .client
                    .node_stage_volume(&request)
                    .await
                    .map_err(|e| format!("stage volume: {e}"))
            })
            .await?;
        Some(in_plugin)
    } else {
        None
    };
    m.staging = staging.clone();
    let rel = Path::new("per-alloc")
        .join(&m.alloc_id)
        .join(&m.volume_id)
        .join(&m.usage);
    let (host, in_plugin) = plugin.paths(&rel);
    if let Some(parent) = host.parent() {
        create_dirs(parent)?;
    }
    m.host_path = host;
    m.plugin_target = in_plugin.clone();
    plugin
        .client
        .node_publish_volume(&NodePublishRequest {
            external_id: m.external_id.clone(),
            publish_context: publish_context.clone(),
            staging_target_path: staging,
            target_path: in_plugin,
            capability: cap.clone(),
            readonly: m.read_only,
            secrets: secrets.clone(),
            context: context.clone(),
        })
        .await
        .map_err(|e| {
            if let Some(key) = m
                .staging
                .as_ref()
                .map(|_| (m.plugin_id.clone(), m.volume_id.clone(), m.usage.clone()))
            {
                manager.remove_stage_user(&key, &m.alloc_id);
            }
            format!("publish volume: {e}")
        })
}

fn create_dirs(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))
}

/// Unpublishes (and unstages, for the last user) a volume on this node; records the node
/// event. Does not talk to the servers.
pub async fn unmount(manager: &CsiManager, m: &MountedVolume) -> Result<(), String> {
    let result = unmount_inner(manager, m).await;
    let mut event = details(&[("volume_id", &m.volume_id), ("alloc_id", &m.alloc_id)]);
    match &result {
        Ok(()) => {
            event.insert("success".into(), "true".into());
        }
        Err(e) => {
            event.insert("success".into(), "false".into());
            event.insert("error".into(), e.clone());
        }
    }
    manager.node_event("Unmount volume", event);
    result
}

async fn unmount_inner(manager: &CsiManager, m: &MountedVolume) -> Result<(), String> {
    let plugin = manager
        .wait_for_node_plugin(&m.plugin_id, Duration::from_secs(10))
        .await
        .ok_or_else(|| format!("CSI plugin {:?} is not running on this node", m.plugin_id))?;
    plugin
        .client
        .node_unpublish_volume(&m.external_id, &m.plugin_target)
        .await
        .map_err(|e| format!("unpublish volume: {e}"))?;
    remove_empty_dirs(&m.host_path, &plugin.host_root);
    if let Some(staging) = &m.staging {
        let key = (m.plugin_id.clone(), m.volume_id.clone(), m.usage.clone());
        manager
            .unstage_for(&key, &m.alloc_id, || async {
                plugin
                    .client
                    .node_unstage_volume(&m.external_id, staging)
                    .await
                    .map_err(|e| format!("unstage volume: {e}"))?;
                let rel = Path::new("staging").join(&m.volume_id).join(&m.usage);
                remove_empty_dirs(&plugin.host_root.join(rel), &plugin.host_root);
                Ok::<(), String>(())
            })
            .await?;
    }
    Ok(())
}

/// Removes `dir` and its parents while they are empty, stopping at `root`. Never recursive:
/// a directory with anything in it (a volume still mounted) stays.
fn remove_empty_dirs(dir: &Path, root: &Path) {
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d == root || !d.starts_with(root) || std::fs::remove_dir(d).is_err() {
            return;
        }
        cur = d.parent();
    }
}

/// Unmounts a volume and has the servers release the allocation's claim.
pub async fn unmount_and_release(
    manager: &CsiManager,
    server: &dyn CsiServerCalls,
    m: &MountedVolume,
) {
    let _ = manager.take_mounted(&m.alloc_id, &m.volume_id);
    if let Err(e) = unmount(manager, m).await {
        tracing::warn!(alloc = %m.alloc_id, volume = %m.volume_id, error = %e, "unmounting CSI volume");
    }
    // The node let go of the volume itself: the claim says so by carrying no access mode
    // (Nomad's "already released client-side"), so the servers do not ask this node again.
    let claim = CsiVolumeClaim {
        allocation_id: m.alloc_id.clone(),
        node_id: m.node_id.clone(),
        external_node_id: String::new(),
        mode: m.claim_mode,
        access_mode: CsiAccessMode::Unknown,
        attachment_mode: CsiAttachmentMode::Unknown,
        state: CsiClaimState::Unpublishing,
    };
    unpublish_with_retry(server, &m.namespace, &m.volume_id, claim).await;
}

async fn release_claim(server: &dyn CsiServerCalls, alloc: &Allocation, v: &GroupVolume) {
    let claim = CsiVolumeClaim {
        allocation_id: alloc.id.clone(),
        node_id: alloc.node_id.clone(),
        mode: if v.read_only {
            CsiClaimMode::Read
        } else {
            CsiClaimMode::Write
        },
        state: CsiClaimState::Unpublishing,
        ..Default::default()
    };
    unpublish_with_retry(server, &alloc.namespace, &v.volume_id, claim).await;
}

async fn unpublish_with_retry(
    server: &dyn CsiServerCalls,
    namespace: &str,
    volume_id: &str,
    claim: CsiVolumeClaim,
) {
    let mut wait = Duration::from_millis(250);
    for attempt in 0..8 {
        match server
            .unpublish(namespace.to_string(), volume_id.to_string(), claim.clone())
            .await
        {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(volume = %volume_id, attempt, error = %e, "releasing CSI claim");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Unmounts what an allocation has mounted of a volume (the servers asking, Nomad's
/// `ClientCSI.NodeDetachVolume`). With nothing recorded (the agent restarted since), the
/// publish target is worked out from the request and unpublished if it is there.
pub async fn detach(
    manager: &CsiManager,
    plugin_id: &str,
    alloc_id: &str,
    volume_id: &str,
    external_id: &str,
    usage: String,
) -> Result<(), String> {
    if let Some(m) = manager.take_mounted(alloc_id, volume_id) {
        return unmount(manager, &m).await;
    }
    let Some(plugin) = manager.node_plugin(plugin_id) else {
        return Ok(());
    };
    let rel = Path::new("per-alloc")
        .join(alloc_id)
        .join(volume_id)
        .join(&usage);
    let (host, in_plugin) = plugin.paths(&rel);
    if !host.exists() {
        return Ok(());
    }
    let staging = plugin.node_capabilities.stage_unstage_volume.then(|| {
        plugin
            .paths(&Path::new("staging").join(volume_id).join(&usage))
            .1
    });
    let m = MountedVolume {
        alloc_id: alloc_id.to_string(),
        node_id: String::new(),
        name: String::new(),
        volume_id: volume_id.to_string(),
        namespace: String::new(),
        plugin_id: plugin_id.to_string(),
        external_id: external_id.to_string(),
        read_only: false,
        claim_mode: CsiClaimMode::Write,
        access_mode: CsiAccessMode::Unknown,
        attachment_mode: CsiAttachmentMode::Unknown,
        usage,
        host_path: host,
        plugin_target: in_plugin,
        staging,
    };
    unmount(manager, &m).await
}

/// A published volume bound into a task (`volume_mount`).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskBind {
    /// The published volume on the host.
    pub host_path: PathBuf,
    /// Where the task sees it (`destination`).
    pub destination: String,
    pub read_only: bool,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct VolumeMountJson {
    #[serde(rename = "Volume")]
    volume: String,
    #[serde(rename = "Destination")]
    destination: String,
    #[serde(rename = "ReadOnly")]
    read_only: bool,
}

/// The task's `volume_mount` blocks that name one of the mounted CSI volumes.
pub fn task_binds(task: &drover_structs::Task, mounted: &[MountedVolume]) -> Vec<TaskBind> {
    let Some(list) = task.volume_mounts.as_ref().and_then(|v| v.as_array()) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|raw| serde_json::from_value::<VolumeMountJson>(raw.clone()).ok())
        .filter_map(|vm| {
            let m = mounted.iter().find(|m| m.name == vm.volume)?;
            Some(TaskBind {
                host_path: m.host_path.clone(),
                destination: vm.destination,
                read_only: vm.read_only || m.read_only,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Servers whose plugin has no healthy controller: every claim fails so.
    struct NoController {
        claims: std::sync::atomic::AtomicUsize,
    }

    impl CsiServerCalls for NoController {
        fn claim(
            &self,
            _: CsiVolumeClaimRequest,
        ) -> super::super::server::CallFuture<'_, drover_structs::csi::CsiVolumeClaimResponse>
        {
            self.claims
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async { Err("no healthy controllers for CSI plugin: hostpath".to_string()) })
        }
        fn unpublish(
            &self,
            _: String,
            _: String,
            _: CsiVolumeClaim,
        ) -> super::super::server::CallFuture<'_, ()> {
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_claim_says_why_once_keeps_trying_and_gives_up_when_the_allocation_stops() {
        let manager = CsiManager::new("/nonexistent/csi");
        let server = NoController {
            claims: Default::default(),
        };
        let group = TaskGroup {
            volumes: Some(json!({"data": {"Type": "csi", "Source": "db",
                "AccessMode": "single-node-writer", "AttachmentMode": "file-system"}})),
            ..Default::default()
        };
        let alloc = Allocation {
            id: "a1".into(),
            name: "web.g[0]".into(),
            ..Default::default()
        };
        let wanted = group_csi_volumes(&group, &alloc).unwrap();
        let reasons = std::sync::Mutex::new(Vec::<String>::new());
        let report = |why: &str| reasons.lock().unwrap().push(why.to_string());
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut wait = ClaimWait {
            report: &report,
            stop,
        };
        let mounting = mount_all(&manager, &server, &alloc, &wanted, &mut wait);
        let stopper = async {
            // Far past the old 90 s limit, in paused time.
            tokio::time::sleep(Duration::from_secs(600)).await;
            stop_tx.send(true).unwrap();
        };
        let (result, ()) = tokio::join!(mounting, stopper);
        let err = result.unwrap_err();
        assert!(err.contains(CLAIM_STOPPED), "{err}");
        assert_eq!(
            *reasons.lock().unwrap(),
            ["waiting for CSI volume \"db\": no healthy controllers for CSI plugin: hostpath"]
        );
        let tries = server.claims.load(std::sync::atomic::Ordering::SeqCst);
        assert!(tries > 50, "retried only {tries} times in 600 s");
    }

    #[test]
    fn usage_directories_follow_nomads_names() {
        assert_eq!(
            usage_dir(
                false,
                CsiAttachmentMode::FileSystem,
                CsiAccessMode::SingleNodeWriter
            ),
            "rw-file-system-single-node-writer"
        );
        assert_eq!(
            usage_dir(
                true,
                CsiAttachmentMode::BlockDevice,
                CsiAccessMode::MultiNodeReader
            ),
            "ro-block-device-multi-node-reader-only"
        );
    }

    #[test]
    fn only_csi_volumes_are_taken_and_per_alloc_sources_get_the_index() {
        let group = TaskGroup {
            volumes: Some(json!({
                "data": {"Type": "csi", "Source": "db", "AccessMode": "single-node-writer",
                         "AttachmentMode": "file-system", "PerAlloc": true,
                         "MountOptions": {"FSType": "ext4", "MountFlags": ["noatime"]}},
                "host": {"Type": "host", "Source": "scratch"}
            })),
            ..Default::default()
        };
        let alloc = Allocation {
            name: "example.cache[2]".into(),
            ..Default::default()
        };
        let vols = group_csi_volumes(&group, &alloc).unwrap();
        assert_eq!(vols.len(), 1);
        assert_eq!(vols[0].volume_id, "db[2]");
        assert_eq!(vols[0].access_mode, CsiAccessMode::SingleNodeWriter);
        assert_eq!(
            vols[0].mount_options.as_ref().unwrap().mount_flags,
            vec!["noatime".to_string()]
        );
    }

    #[test]
    fn an_unset_access_mode_is_refused_before_any_plugin_call() {
        assert!(capability(CsiAccessMode::Unknown, CsiAttachmentMode::FileSystem, None).is_err());
        let cap = capability(
            CsiAccessMode::SingleNodeWriter,
            CsiAttachmentMode::FileSystem,
            Some(&CsiMountOptions {
                fs_type: "xfs".into(),
                mount_flags: vec![],
            }),
        )
        .unwrap();
        assert_eq!(cap.mount_options.fs_type, "xfs");
    }

    #[test]
    fn empty_directories_are_removed_up_to_the_root_only() {
        let root = std::env::temp_dir().join(format!("drover-csi-rm-{}", std::process::id()));
        let leaf = root.join("per-alloc/a/vol/rw");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(root.join("per-alloc/keep"), b"x").unwrap();
        remove_empty_dirs(&leaf, &root);
        assert!(!root.join("per-alloc/a").exists());
        assert!(root.join("per-alloc").exists(), "a non-empty parent stays");
        let _ = std::fs::remove_dir_all(&root);
    }
}
