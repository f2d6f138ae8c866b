//! The agent side's translations between the driver contract and Nomad's protocol: requests
//! out (drover_abi -> proto), answers in (proto -> drover_abi), and gRPC statuses back into
//! `DriverError`s.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use drover_abi::{
    Capabilities, DriverError, ExitResult, Fingerprint, FsIsolation, HealthState, TaskConfig,
    TaskResourceUsage, TaskState, TaskStatus,
};
use drover_plugin_proto::drivers as pb;
use drover_plugin_proto::structs::{Attribute, attribute};
use prost::Message;
use tonic::{Code, Status};

/// What Nomad's agent sends as the client's loopback port range.
const CLIENT_MIN_PORT: u32 = 14_000;
const CLIENT_MAX_PORT: u32 = 14_512;

pub fn nomad_config() -> drover_plugin_proto::base::NomadConfig {
    drover_plugin_proto::base::NomadConfig {
        driver: Some(drover_plugin_proto::base::NomadDriverConfig {
            client_max_port: CLIENT_MAX_PORT,
            client_min_port: CLIENT_MIN_PORT,
        }),
    }
}

/// A status from the plugin as a driver error. `task_id` names the task the call was about.
/// Nomad's Go plugins answer most errors with code Unknown and Nomad's texts, which are
/// recognised too.
pub fn driver_error(method: &str, task_id: &str, s: Status) -> DriverError {
    let message = s.message().to_string();
    match s.code() {
        Code::NotFound => DriverError::TaskNotFound(task_id.to_string()),
        Code::InvalidArgument => DriverError::InvalidConfig(message),
        Code::Unimplemented => DriverError::NotSupported(method.to_string()),
        Code::FailedPrecondition => match drover_plugin_proto::status::recoverable(&s) {
            Some(recoverable) => DriverError::StartFailed {
                message,
                recoverable,
            },
            None if method == "start_task" => DriverError::StartFailed {
                message,
                recoverable: false,
            },
            None => DriverError::TaskRunning(task_id.to_string()),
        },
        Code::Unavailable => DriverError::Other(format!("plugin unavailable: {message}")),
        _ if message.contains("task not found") => DriverError::TaskNotFound(task_id.to_string()),
        _ if method == "destroy_task" && message.contains("running") => {
            DriverError::TaskRunning(task_id.to_string())
        }
        _ if method == "start_task" => DriverError::StartFailed {
            message,
            recoverable: false,
        },
        _ => DriverError::Other(message),
    }
}

/// Whether a failed call says the plugin process is gone or restarting rather than
/// answering.
pub fn is_transport_error(s: &Status) -> bool {
    s.code() == Code::Unavailable
        || (s.code() == Code::Unknown && s.message().contains("transport error"))
        || s.code() == Code::Cancelled && s.message().contains("connection")
}

pub fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

fn nanos(t: Option<&prost_types::Timestamp>) -> i64 {
    t.map_or(0, |t| {
        t.seconds
            .saturating_mul(1_000_000_000)
            .saturating_add(i64::from(t.nanos))
    })
}

pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The task for StartTask, its `config` block already msgpack-encoded against the plugin's
/// task schema. Memory limits follow Nomad's client (`memory_max` over `memory`).
pub fn task_config(c: &TaskConfig, msgpack_driver_config: Vec<u8>) -> pb::TaskConfig {
    let shares = i64::try_from(c.resources.cpu_mhz).unwrap_or(i64::MAX);
    let memory_mb = i64::try_from(c.resources.memory_mb).unwrap_or(i64::MAX);
    let memory_max_mb = i64::try_from(c.resources.memory_max_mb).unwrap_or(i64::MAX);
    let limit_mb = if memory_max_mb > 0 {
        memory_max_mb
    } else {
        memory_mb
    };
    pb::TaskConfig {
        id: c.id.clone(),
        name: c.name.clone(),
        msgpack_driver_config,
        env: c.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        resources: Some(pb::Resources {
            allocated_resources: Some(pb::AllocatedTaskResources {
                cpu: Some(pb::AllocatedCpuResources { cpu_shares: shares }),
                memory: Some(pb::AllocatedMemoryResources {
                    memory_mb,
                    memory_max_mb,
                }),
                networks: Vec::new(),
            }),
            linux_resources: Some(pb::LinuxResources {
                cpu_shares: shares,
                memory_limit_bytes: limit_mb.saturating_mul(1024 * 1024),
                ..Default::default()
            }),
            ports: Vec::new(),
        }),
        mounts: c
            .mounts
            .iter()
            .map(|m| pb::Mount {
                task_path: m.task_path.clone(),
                host_path: m.host_path.clone(),
                readonly: m.readonly,
                propagation_mode: m.propagation_mode.as_str().to_string(),
                selinux_label: String::new(),
            })
            .collect(),
        network_isolation_spec: c
            .network_isolation
            .as_ref()
            .map(|n| pb::NetworkIsolationSpec {
                mode: pb::network_isolation_spec::NetworkIsolationMode::Group as i32,
                path: path(&n.path),
                labels: n
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                hosts_config: None,
            }),
        user: c.user.clone(),
        alloc_dir: path(&c.alloc_dir),
        stdout_path: path(&c.stdout_path),
        stderr_path: path(&c.stderr_path),
        task_group_name: c.group_name.clone(),
        job_name: c.job_name.clone(),
        job_id: c.job_name.clone(),
        alloc_id: c.alloc_id.clone(),
        namespace: "default".to_string(),
        drover_task_dir: path(&c.task_dir),
        ..Default::default()
    }
}

/// The key under which a gRPC task's handle keeps the plugin's own TaskHandle.
const HANDLE_KEY: &str = "nomad_task_handle";

/// The contract's `state` for a plugin's TaskHandle: the handle, protobuf-encoded, in base64,
/// so that RecoverTask gets back exactly what StartTask returned.
pub fn handle_state(h: &pb::TaskHandle) -> serde_json::Value {
    let encoded = base64::engine::general_purpose::STANDARD.encode(h.encode_to_vec());
    serde_json::json!({ HANDLE_KEY: encoded })
}

/// The plugin's TaskHandle kept in a contract handle's `state`.
pub fn plugin_handle(state: &serde_json::Value) -> Result<pb::TaskHandle, DriverError> {
    let encoded = state
        .get(HANDLE_KEY)
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            DriverError::Other(format!(
                "the task handle has no {HANDLE_KEY}: it was not made by a gRPC plugin"
            ))
        })?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| DriverError::Other(format!("decoding the task handle: {e}")))?;
    pb::TaskHandle::decode(bytes.as_slice())
        .map_err(|e| DriverError::Other(format!("decoding the task handle: {e}")))
}

pub fn exit_result(r: Option<&pb::ExitResult>, err: &str) -> ExitResult {
    let r = r.cloned().unwrap_or_default();
    ExitResult {
        exit_code: r.exit_code,
        signal: r.signal,
        oom_killed: r.oom_killed,
        err: (!err.is_empty()).then(|| err.to_string()),
    }
}

pub fn task_status(s: &pb::TaskStatus) -> TaskStatus {
    let state = match pb::TaskState::try_from(s.state) {
        Ok(pb::TaskState::Running) => TaskState::Running,
        Ok(pb::TaskState::Exited) => TaskState::Exited,
        _ => TaskState::Unknown,
    };
    TaskStatus {
        id: s.id.clone(),
        name: s.name.clone(),
        state,
        started_at: nanos(s.started_at.as_ref()),
        completed_at: nanos(s.completed_at.as_ref()),
        // Nomad sets the result when the task completed; a running task's is meaningless.
        exit_result: (state == TaskState::Exited).then(|| exit_result(s.result.as_ref(), "")),
    }
}

/// An attribute as Nomad's client shows it in node attributes.
fn attribute_text(a: &Attribute) -> String {
    let value = match &a.value {
        Some(attribute::Value::StringVal(s)) => s.clone(),
        Some(attribute::Value::IntVal(i)) => i.to_string(),
        Some(attribute::Value::FloatVal(f)) => f.to_string(),
        Some(attribute::Value::BoolVal(b)) => b.to_string(),
        None => String::new(),
    };
    format!("{value}{}", a.unit)
}

pub fn fingerprint(f: &pb::FingerprintResponse) -> Fingerprint {
    use pb::fingerprint_response::HealthState as H;
    let health = match H::try_from(f.health) {
        Ok(H::Healthy) => HealthState::Healthy,
        Ok(H::Unhealthy) => HealthState::Unhealthy,
        _ => HealthState::Undetected,
    };
    Fingerprint {
        health,
        health_description: f.health_description.clone(),
        attributes: f
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), attribute_text(v)))
            .collect(),
    }
}

pub fn capabilities(c: Option<&pb::DriverCapabilities>) -> Capabilities {
    use pb::driver_capabilities::{FsIsolation as Fs, MountConfigs};
    let c = c.cloned().unwrap_or_default();
    Capabilities {
        send_signals: c.send_signals,
        exec: c.exec,
        fs_isolation: match Fs::try_from(c.fs_isolation) {
            Ok(Fs::Chroot) | Ok(Fs::Unveil) => FsIsolation::Chroot,
            Ok(Fs::Image) => FsIsolation::Image,
            _ => FsIsolation::None,
        },
        network_isolation: network_isolation(&c),
        group_network: group_network(&c),
        mount_configs: c.mount_configs != MountConfigs::NoMounts as i32,
    }
}

/// Whether the plugin isolates task networks itself (Nomad's task mode).
fn network_isolation(c: &pb::DriverCapabilities) -> bool {
    use pb::network_isolation_spec::NetworkIsolationMode as Net;
    c.network_isolation_modes
        .iter()
        .any(|m| Net::try_from(*m) == Ok(Net::Task))
}

/// Whether the plugin runs tasks in a namespace the client made (Nomad's group mode). One that
/// must make the namespace itself (CreateNetwork, which the driver contract cannot ask for) does
/// not count.
fn group_network(c: &pb::DriverCapabilities) -> bool {
    use pb::network_isolation_spec::NetworkIsolationMode as Net;
    !c.must_create_network
        && c.network_isolation_modes
            .iter()
            .any(|m| Net::try_from(*m) == Ok(Net::Group))
}

pub fn usage(stats: Option<&pb::TaskStats>) -> TaskResourceUsage {
    let agg = stats.and_then(|s| s.agg_resource_usage.as_ref());
    let timestamp = nanos(stats.and_then(|s| s.timestamp.as_ref()));
    TaskResourceUsage {
        memory_rss_bytes: agg.and_then(|a| a.memory.as_ref()).map_or(0, |m| m.rss),
        cpu_total_ticks: agg
            .and_then(|a| a.cpu.as_ref())
            .map_or(0.0, |c| c.total_ticks),
        timestamp: if timestamp > 0 {
            timestamp
        } else {
            now_nanos()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn statuses_become_the_contracts_errors() {
        let e = |method, s| driver_error(method, "t1", s);
        assert_eq!(
            e("inspect_task", Status::not_found("x")),
            DriverError::TaskNotFound("t1".into())
        );
        assert_eq!(
            e(
                "destroy_task",
                Status::unknown("task not found for given id")
            ),
            DriverError::TaskNotFound("t1".into())
        );
        assert_eq!(
            e(
                "destroy_task",
                Status::unknown("cannot destroy running task")
            ),
            DriverError::TaskRunning("t1".into())
        );
        assert_eq!(
            e(
                "destroy_task",
                Status::failed_precondition("task t1 is still running")
            ),
            DriverError::TaskRunning("t1".into())
        );
        assert_eq!(
            e("exec_task", Status::unimplemented("no")),
            DriverError::NotSupported("exec_task".into())
        );
        assert_eq!(
            e(
                "start_task",
                drover_plugin_proto::status::recoverable_status("pull", true)
            ),
            DriverError::StartFailed {
                message: "pull".into(),
                recoverable: true
            }
        );
        assert_eq!(
            e("start_task", Status::unknown("boom")),
            DriverError::StartFailed {
                message: "boom".into(),
                recoverable: false
            }
        );
        assert_eq!(
            e("validate", Status::invalid_argument("bad \"x\"")),
            DriverError::InvalidConfig("bad \"x\"".into())
        );
    }

    #[test]
    fn mounts_travel_with_nomads_propagation_names() {
        let config = TaskConfig {
            mounts: vec![
                drover_abi::MountConfig {
                    task_path: "/csi".into(),
                    host_path: "/data/csi/plugin".into(),
                    readonly: false,
                    propagation_mode: drover_abi::MountPropagation::Bidirectional,
                },
                drover_abi::MountConfig {
                    task_path: "/data".into(),
                    host_path: "/published/vol".into(),
                    readonly: true,
                    propagation_mode: drover_abi::MountPropagation::Private,
                },
            ],
            ..Default::default()
        };
        let wire = task_config(&config, Vec::new());
        let seen: Vec<_> = wire
            .mounts
            .iter()
            .map(|m| {
                (
                    m.task_path.as_str(),
                    m.host_path.as_str(),
                    m.readonly,
                    m.propagation_mode.as_str(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                ("/csi", "/data/csi/plugin", false, "bidirectional"),
                ("/data", "/published/vol", true, "private"),
            ]
        );
    }

    #[test]
    fn a_plugin_handle_survives_the_contracts_json_state() {
        let h = pb::TaskHandle {
            version: 3,
            config: Some(pb::TaskConfig {
                id: "a/b/c".into(),
                ..Default::default()
            }),
            state: pb::TaskState::Running as i32,
            driver_state: vec![0x81, 0xa1, b'p', 0x2a],
        };
        let state = handle_state(&h);
        let through_json: serde_json::Value = serde_json::from_str(&state.to_string()).unwrap();
        assert_eq!(plugin_handle(&through_json).unwrap(), h);
        assert!(plugin_handle(&json!({"pid": 1})).is_err());
    }

    #[test]
    fn attributes_read_like_nomads_node_attributes() {
        let a = |v, unit: &str| Attribute {
            value: Some(v),
            unit: unit.into(),
        };
        assert_eq!(
            attribute_text(&a(attribute::Value::BoolVal(true), "")),
            "true"
        );
        assert_eq!(
            attribute_text(&a(attribute::Value::IntVal(512), "MB")),
            "512MB"
        );
        assert_eq!(
            attribute_text(&a(attribute::Value::StringVal("1".into()), "")),
            "1"
        );
    }

    #[test]
    fn group_mode_needing_create_network_is_not_offered_and_task_mode_is_the_drivers() {
        use pb::network_isolation_spec::NetworkIsolationMode as Net;
        let caps = |modes: &[Net], must_create_network| {
            let c = capabilities(Some(&pb::DriverCapabilities {
                network_isolation_modes: modes.iter().map(|m| *m as i32).collect(),
                must_create_network,
                ..Default::default()
            }));
            (c.network_isolation, c.group_network)
        };
        assert_eq!(caps(&[Net::Host], false), (false, false));
        assert_eq!(caps(&[Net::Host, Net::Task], false), (true, false));
        assert_eq!(caps(&[Net::Host, Net::Group], false), (false, true));
        assert_eq!(caps(&[Net::Host, Net::Group], true), (false, false));
    }

    #[test]
    fn a_running_tasks_result_is_not_reported() {
        let s = pb::TaskStatus {
            state: pb::TaskState::Running as i32,
            result: Some(pb::ExitResult::default()),
            started_at: Some(prost_types::Timestamp {
                seconds: 2,
                nanos: 5,
            }),
            ..Default::default()
        };
        let status = task_status(&s);
        assert_eq!(status.exit_result, None);
        assert_eq!(status.started_at, 2_000_000_005);
        assert_eq!(status.completed_at, 0);
    }
}
