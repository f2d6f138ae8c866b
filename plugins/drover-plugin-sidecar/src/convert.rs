//! The plugin side's translations between Nomad's protocol messages and the driver contract:
//! requests in (proto -> drover_abi), answers out (drover_abi -> proto), errors as gRPC
//! statuses the way Nomad's plugins send them.

use std::path::PathBuf;
use std::time::Duration;

use drover_abi::{
    Capabilities, DriverError, ExecOutput, ExitResult, Fingerprint, FsIsolation, HealthState,
    MountConfig, MountPropagation, TaskConfig, TaskHandle, TaskResourceUsage, TaskResources,
    TaskState, TaskStatus,
};
use drover_plugin_proto::drivers as pb;
use drover_plugin_proto::hcl;
use drover_plugin_proto::msgpack;
use drover_plugin_proto::status::recoverable_status;
use drover_plugin_proto::structs::{Attribute, attribute};
use tonic::Status;

use drover_plugin_sdk::events::TaskEvent;

/// Largest piece of output in one ExecTaskStreaming message.
const EXEC_CHUNK: usize = 32 * 1024;

/// A driver error as the status Nomad's plugins answer: NotFound for unknown tasks,
/// InvalidArgument for bad config, Unimplemented for what the driver does not do,
/// FailedPrecondition (with a RecoverableError for start failures), Unknown otherwise.
pub fn status(e: DriverError) -> Status {
    match e {
        DriverError::InvalidConfig(m) => Status::invalid_argument(m),
        e @ DriverError::TaskNotFound(_) => Status::not_found(e.to_string()),
        e @ DriverError::TaskRunning(_) => Status::failed_precondition(e.to_string()),
        e @ DriverError::NotSupported(_) => Status::unimplemented(e.to_string()),
        DriverError::StartFailed {
            message,
            recoverable,
        } => recoverable_status(message, recoverable),
        DriverError::Other(m) => Status::unknown(m),
    }
}

pub fn duration(d: Option<&prost_types::Duration>) -> Duration {
    d.map(|d| {
        Duration::from_secs(d.seconds.max(0) as u64) + Duration::from_nanos(d.nanos.max(0) as u64)
    })
    .unwrap_or_default()
}

fn timestamp(nanos: i64) -> Option<prost_types::Timestamp> {
    (nanos > 0).then(|| prost_types::Timestamp {
        seconds: nanos.div_euclid(1_000_000_000),
        nanos: nanos.rem_euclid(1_000_000_000) as i32,
    })
}

/// The task as the driver contract describes it. The working directory is Drover's extension
/// field when set, else Nomad's rule: `<alloc_dir>/<task name>`.
pub fn task_config(c: &pb::TaskConfig) -> Result<TaskConfig, Status> {
    let driver_config = hcl::decode(&c.msgpack_driver_config)
        .map_err(|e| Status::invalid_argument(format!("decoding the task config: {e}")))?;
    let alloc_dir = PathBuf::from(&c.alloc_dir);
    let task_dir = if c.drover_task_dir.is_empty() {
        alloc_dir.join(&c.name)
    } else {
        PathBuf::from(&c.drover_task_dir)
    };
    let allocated = c
        .resources
        .as_ref()
        .and_then(|r| r.allocated_resources.as_ref());
    let memory = allocated.and_then(|a| a.memory.as_ref());
    let non_negative = |n: i64| u64::try_from(n).unwrap_or(0);
    let mounts = c.mounts.iter().map(mount).collect::<Result<Vec<_>, _>>()?;
    Ok(TaskConfig {
        id: c.id.clone(),
        name: c.name.clone(),
        alloc_id: c.alloc_id.clone(),
        job_name: c.job_name.clone(),
        group_name: c.task_group_name.clone(),
        env: std::sync::Arc::new(c.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        driver_config,
        resources: TaskResources {
            cpu_mhz: non_negative(
                allocated
                    .and_then(|a| a.cpu.as_ref())
                    .map_or(0, |c| c.cpu_shares),
            ),
            cores: 0,
            memory_mb: non_negative(memory.map_or(0, |m| m.memory_mb)),
            memory_max_mb: non_negative(memory.map_or(0, |m| m.memory_max_mb)),
        },
        user: c.user.clone(),
        alloc_dir,
        task_dir,
        stdout_path: PathBuf::from(&c.stdout_path),
        stderr_path: PathBuf::from(&c.stderr_path),
        mounts,
        network_isolation: c
            .network_isolation_spec
            .as_ref()
            .filter(|n| {
                use pb::network_isolation_spec::NetworkIsolationMode as Net;
                n.mode == Net::Group as i32 && !n.path.is_empty()
            })
            .map(|n| drover_abi::NetworkIsolation {
                path: PathBuf::from(&n.path),
                labels: n
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            }),
    })
}

/// One of Nomad's `Mount`s. An unknown propagation mode is refused rather than guessed: a CSI
/// plugin given "private" instead of "bidirectional" would publish volumes nobody sees.
fn mount(m: &pb::Mount) -> Result<MountConfig, Status> {
    let propagation_mode = MountPropagation::from_name(&m.propagation_mode).ok_or_else(|| {
        Status::invalid_argument(format!(
            "mount {}: unknown propagation mode {:?}",
            m.task_path, m.propagation_mode
        ))
    })?;
    Ok(MountConfig {
        task_path: m.task_path.clone(),
        host_path: m.host_path.clone(),
        readonly: m.readonly,
        propagation_mode,
    })
}

/// The handle Nomad's agent stores: the driver's `state` JSON travels msgpack-encoded in
/// `driver_state`, as Nomad's Go drivers encode theirs.
pub fn handle_out(handle: &TaskHandle, config: pb::TaskConfig) -> pb::TaskHandle {
    pb::TaskHandle {
        version: i32::try_from(handle.version).unwrap_or(i32::MAX),
        config: Some(config),
        state: pb::TaskState::Running as i32,
        driver_state: msgpack::encode(&msgpack::Value::from_json(&handle.state)),
    }
}

/// A handle from RecoverTask, back in the contract's terms.
pub fn handle_in(h: &pb::TaskHandle, driver: &str) -> Result<TaskHandle, Status> {
    let config = h
        .config
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("task handle without a task config"))?;
    let state = if h.driver_state.is_empty() {
        serde_json::Value::Null
    } else {
        msgpack::decode(&h.driver_state)
            .map_err(|e| Status::invalid_argument(format!("decoding the driver state: {e}")))?
            .to_json()
    };
    Ok(TaskHandle {
        version: u32::try_from(h.version).unwrap_or(0),
        driver: driver.to_string(),
        config: task_config(config)?,
        state,
    })
}

pub fn exit_result(e: &ExitResult) -> pb::ExitResult {
    pb::ExitResult {
        exit_code: e.exit_code,
        signal: e.signal,
        oom_killed: e.oom_killed,
    }
}

pub fn task_status(s: &TaskStatus) -> pb::TaskStatus {
    let state = match s.state {
        TaskState::Unknown => pb::TaskState::Unknown,
        TaskState::Running => pb::TaskState::Running,
        TaskState::Exited => pb::TaskState::Exited,
    };
    pb::TaskStatus {
        id: s.id.clone(),
        name: s.name.clone(),
        state: state as i32,
        started_at: timestamp(s.started_at),
        completed_at: timestamp(s.completed_at),
        result: s.exit_result.as_ref().map(exit_result),
    }
}

pub fn task_stats(task_id: &str, u: &TaskResourceUsage) -> pb::TaskStats {
    use pb::cpu_usage::Fields as CpuFields;
    use pb::memory_usage::Fields as MemFields;
    let usage = pb::TaskResourceUsage {
        cpu: Some(pb::CpuUsage {
            total_ticks: u.cpu_total_ticks,
            measured_fields: vec![CpuFields::TotalTicks as i32],
            ..Default::default()
        }),
        memory: Some(pb::MemoryUsage {
            rss: u.memory_rss_bytes,
            measured_fields: vec![MemFields::Rss as i32],
            ..Default::default()
        }),
    };
    pb::TaskStats {
        id: task_id.to_string(),
        timestamp: timestamp(u.timestamp),
        agg_resource_usage: Some(usage),
        resource_usage_by_pid: Default::default(),
    }
}

pub fn fingerprint(f: &Fingerprint) -> pb::FingerprintResponse {
    use pb::fingerprint_response::HealthState as H;
    let health = match f.health {
        HealthState::Undetected => H::Undetected,
        HealthState::Unhealthy => H::Unhealthy,
        HealthState::Healthy => H::Healthy,
    };
    pb::FingerprintResponse {
        attributes: f
            .attributes
            .iter()
            .map(|(k, v)| {
                let attr = Attribute {
                    value: Some(attribute::Value::StringVal(v.clone())),
                    unit: String::new(),
                };
                (k.clone(), attr)
            })
            .collect(),
        health: health as i32,
        health_description: f.health_description.clone(),
    }
}

pub fn capabilities(c: &Capabilities) -> pb::DriverCapabilities {
    use pb::driver_capabilities::{FsIsolation as Fs, MountConfigs};
    use pb::network_isolation_spec::NetworkIsolationMode as Net;
    let fs = match c.fs_isolation {
        FsIsolation::None => Fs::None,
        FsIsolation::Chroot => Fs::Chroot,
        FsIsolation::Image => Fs::Image,
    };
    // A driver that isolates networks does it per task, on its own (docker's bridge). Group
    // mode would need the namespace Nomad's client makes (or CreateNetwork, which the contract
    // cannot serve) handed to the task, and the contract has no place for it.
    let mut modes = vec![Net::Host as i32];
    if c.group_network {
        modes.push(Net::Group as i32);
    }
    if c.network_isolation {
        modes.push(Net::Task as i32);
    }
    pb::DriverCapabilities {
        send_signals: c.send_signals,
        exec: c.exec,
        fs_isolation: fs as i32,
        network_isolation_modes: modes,
        mount_configs: if c.mount_configs {
            MountConfigs::UnknownMounts as i32
        } else {
            MountConfigs::NoMounts as i32
        },
        // The contract cannot create network namespaces: never ask for CreateNetwork.
        must_create_network: false,
        ..Default::default()
    }
}

pub fn task_event(e: &TaskEvent) -> pb::DriverTaskEvent {
    pb::DriverTaskEvent {
        task_id: e.task_id.clone(),
        alloc_id: e.alloc_id.clone(),
        task_name: e.task_name.clone(),
        timestamp: timestamp(e.timestamp),
        message: e.message.clone(),
        annotations: e
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// A finished exec as the messages of an ExecTaskStreaming answer, in the order Nomad's plugins
/// send them: stdout in pieces then its close, the same for stderr, then the exit.
pub fn exec_stream_messages(out: &ExecOutput) -> Vec<pb::ExecTaskStreamingResponse> {
    let io = |data: &[u8], close: bool| pb::ExecTaskStreamingIoOperation {
        data: data.to_vec(),
        close,
    };
    let mut messages = Vec::new();
    for chunk in out.stdout.chunks(EXEC_CHUNK) {
        messages.push(pb::ExecTaskStreamingResponse {
            stdout: Some(io(chunk, false)),
            ..Default::default()
        });
    }
    messages.push(pb::ExecTaskStreamingResponse {
        stdout: Some(io(&[], true)),
        ..Default::default()
    });
    for chunk in out.stderr.chunks(EXEC_CHUNK) {
        messages.push(pb::ExecTaskStreamingResponse {
            stderr: Some(io(chunk, false)),
            ..Default::default()
        });
    }
    messages.push(pb::ExecTaskStreamingResponse {
        stderr: Some(io(&[], true)),
        ..Default::default()
    });
    messages.push(pb::ExecTaskStreamingResponse {
        exited: true,
        result: Some(pb::ExitResult {
            exit_code: out.exit_code,
            ..Default::default()
        }),
        ..Default::default()
    });
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_plugin_proto::hcl::{ConfigSchema, spec};
    use serde_json::json;

    #[test]
    fn a_task_config_from_the_wire_keeps_everything_the_contract_needs() {
        let schema = ConfigSchema::compile(Some(&spec::object([
            ("command", spec::attr("command", "string", true)),
            ("args", spec::attr("args", "list(string)", false)),
        ])))
        .unwrap();
        let wire = pb::TaskConfig {
            id: "a/t/1".into(),
            name: "t".into(),
            msgpack_driver_config: schema.encode(&json!({"command": "sleep"})).unwrap(),
            env: [("A".to_string(), "1".to_string())].into(),
            alloc_dir: "/data/alloc/a".into(),
            stdout_path: "/fifo/out".into(),
            resources: Some(pb::Resources {
                allocated_resources: Some(pb::AllocatedTaskResources {
                    cpu: Some(pb::AllocatedCpuResources { cpu_shares: 250 }),
                    memory: Some(pb::AllocatedMemoryResources {
                        memory_mb: 64,
                        memory_max_mb: 128,
                    }),
                    networks: vec![],
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let c = task_config(&wire).unwrap();
        // Absent optional fields are left out, as in a cdylib's JSON.
        assert_eq!(c.driver_config, json!({"command": "sleep"}));
        assert_eq!(c.task_dir, PathBuf::from("/data/alloc/a/t"));
        assert_eq!(c.env["A"], "1");
        assert_eq!(
            (
                c.resources.cpu_mhz,
                c.resources.memory_mb,
                c.resources.memory_max_mb
            ),
            (250, 64, 128)
        );
        assert!(c.mounts.is_empty());
        let with_mount = pb::TaskConfig {
            mounts: vec![pb::Mount {
                task_path: "/csi".into(),
                host_path: "/host/csi".into(),
                readonly: true,
                propagation_mode: "bidirectional".into(),
                selinux_label: String::new(),
            }],
            ..wire.clone()
        };
        assert_eq!(
            task_config(&with_mount).unwrap().mounts,
            vec![MountConfig {
                task_path: "/csi".into(),
                host_path: "/host/csi".into(),
                readonly: true,
                propagation_mode: MountPropagation::Bidirectional,
            }]
        );
        let mut bad_mode = with_mount.clone();
        bad_mode.mounts[0].propagation_mode = "sideways".into();
        assert_eq!(
            task_config(&bad_mode).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let with_dir = pb::TaskConfig {
            drover_task_dir: "/elsewhere".into(),
            ..wire
        };
        assert_eq!(
            task_config(&with_dir).unwrap().task_dir,
            PathBuf::from("/elsewhere")
        );
    }

    #[test]
    fn a_handle_roundtrips_its_driver_state_through_msgpack() {
        let config = pb::TaskConfig {
            id: "x".into(),
            ..Default::default()
        };
        let handle = TaskHandle {
            version: 1,
            driver: "d".into(),
            config: task_config(&config).unwrap(),
            state: json!({"pid": 42, "start_ticks": 7, "started_at": 1_700_000_000_000_000_000i64}),
        };
        let wire = handle_out(&handle, config);
        assert_eq!(wire.version, 1);
        let back = handle_in(&wire, "d").unwrap();
        assert_eq!(back, handle);
    }

    #[test]
    fn errors_map_to_the_codes_nomads_plugins_use() {
        use tonic::Code;
        assert_eq!(
            status(DriverError::TaskNotFound("t".into())).code(),
            Code::NotFound
        );
        assert_eq!(
            status(DriverError::InvalidConfig("x".into())).code(),
            Code::InvalidArgument
        );
        assert_eq!(
            status(DriverError::NotSupported("exec_task".into())).code(),
            Code::Unimplemented
        );
        let s = status(DriverError::StartFailed {
            message: "no".into(),
            recoverable: true,
        });
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(drover_plugin_proto::status::recoverable(&s), Some(true));
        assert_eq!(status(DriverError::Other("x".into())).code(), Code::Unknown);
    }

    #[test]
    fn an_exec_streams_stdout_then_stderr_each_closed_then_the_exit() {
        let out = ExecOutput {
            stdout: vec![b'o'; EXEC_CHUNK + 1],
            stderr: b"err".to_vec(),
            exit_code: 3,
        };
        let m = exec_stream_messages(&out);
        assert_eq!(m.len(), 6, "{m:?}");
        let data = |io: &Option<pb::ExecTaskStreamingIoOperation>| {
            io.as_ref().map(|o| (o.data.len(), o.close))
        };
        assert_eq!(data(&m[0].stdout), Some((EXEC_CHUNK, false)));
        assert_eq!(data(&m[1].stdout), Some((1, false)));
        assert_eq!(data(&m[2].stdout), Some((0, true)));
        assert_eq!(m[3].stderr.as_ref().unwrap().data, b"err");
        assert_eq!(data(&m[4].stderr), Some((0, true)));
        assert!(m.iter().take(5).all(|m| !m.exited));
        assert!(m[5].exited);
        assert_eq!(m[5].result.as_ref().unwrap().exit_code, 3);
    }

    #[test]
    fn a_task_event_keeps_its_ids_time_and_annotations() {
        let config = task_config(&pb::TaskConfig {
            id: "a1/web/x".into(),
            name: "web".into(),
            alloc_id: "a1".into(),
            ..Default::default()
        })
        .unwrap();
        let mut event = TaskEvent::for_task(&config, "pulled").with_annotation("image", "bb");
        event.timestamp = 2_000_000_001;
        let wire = task_event(&event);
        assert_eq!(
            (
                wire.task_id.as_str(),
                wire.alloc_id.as_str(),
                wire.task_name.as_str()
            ),
            ("a1/web/x", "a1", "web")
        );
        assert_eq!(wire.message, "pulled");
        assert_eq!(wire.annotations["image"], "bb");
        assert_eq!(
            wire.timestamp,
            Some(prost_types::Timestamp {
                seconds: 2,
                nanos: 1
            })
        );
    }

    #[test]
    fn network_isolation_is_offered_per_task_and_never_needs_create_network() {
        use pb::network_isolation_spec::NetworkIsolationMode as Net;
        let mut caps = Capabilities {
            send_signals: false,
            exec: false,
            fs_isolation: FsIsolation::None,
            network_isolation: false,
            group_network: false,
            mount_configs: false,
        };
        let wire = capabilities(&caps);
        assert_eq!(wire.network_isolation_modes, vec![Net::Host as i32]);
        assert!(!wire.must_create_network);
        caps.network_isolation = true;
        let wire = capabilities(&caps);
        assert_eq!(
            wire.network_isolation_modes,
            vec![Net::Host as i32, Net::Task as i32]
        );
        assert!(!wire.must_create_network);
    }

    #[test]
    fn timestamps_leave_zero_unset() {
        assert_eq!(timestamp(0), None);
        assert_eq!(
            timestamp(1_500_000_000),
            Some(prost_types::Timestamp {
                seconds: 1,
                nanos: 500_000_000
            })
        );
    }
}
