//! Turning a task (its resources, environment, directories and docker `config` block) and the
//! agent's plugin config into Docker's container-create request, as Nomad's docker driver
//! does. Pure: no daemon calls, so every rule is unit-tested.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerCreateBody, DeviceMapping, EndpointIpamConfig, EndpointSettings, HealthConfig,
    HostConfig, HostConfigLogConfig, Mount, MountBindOptions, MountBindOptionsPropagationEnum,
    MountTmpfsOptions, MountType, MountVolumeOptions, MountVolumeOptionsDriverConfig,
    NetworkingConfig, PortBinding, ResourcesUlimits,
};
use drover_abi::{MountPropagation, TaskConfig};
use thiserror::Error;

use crate::caps;
use crate::paths::{PathRewrite, expand, is_within, task_binds};
use crate::plugin_config::PluginConfig;
use crate::task_config::{DockerTaskConfig, MountConfig};

/// Label every container gets, as in Nomad; finds a task's containers.
pub const LABEL_ALLOC_ID: &str = "com.hashicorp.nomad.alloc_id";
const LABEL_JOB_NAME: &str = "com.hashicorp.nomad.job_name";
const LABEL_JOB_ID: &str = "com.hashicorp.nomad.job_id";
const LABEL_GROUP_NAME: &str = "com.hashicorp.nomad.task_group_name";
const LABEL_TASK_NAME: &str = "com.hashicorp.nomad.task_name";
const LABEL_NAMESPACE: &str = "com.hashicorp.nomad.namespace";
const LABEL_NODE_NAME: &str = "com.hashicorp.nomad.node_name";
const LABEL_NODE_ID: &str = "com.hashicorp.nomad.node_id";

/// Docker's largest cpu-shares value.
const MAX_CPU_SHARES: u64 = 262_144;
/// Docker's smallest cpu-shares value.
const MIN_CPU_SHARES: u64 = 2;
const MIB: i64 = 1024 * 1024;

/// A task config the agent's plugin config does not allow, or that cannot be mapped.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    #[error("Docker privileged mode is disabled on this Nomad agent")]
    PrivilegedNotAllowed,
    #[error("driver does not allow the following capabilities: {}", .0.join(", "))]
    CapsNotAllowed(Vec<String>),
    #[error("volumes are not enabled; cannot {0}")]
    VolumesDisabled(String),
    #[error("invalid docker volume {spec:?}: {reason}")]
    InvalidVolume { spec: String, reason: String },
    #[error("invalid mount: {0}")]
    InvalidMount(String),
    #[error("Port {0:?} not found, check network block")]
    PortNotFound(String),
    #[error("pids_limit cannot be greater than nomad plugin config pids_limit: {0}")]
    PidsLimitTooHigh(i64),
    #[error("requested runtime {0:?} is not allowed")]
    RuntimeNotAllowed(String),
    #[error("malformed ulimit {name}: {value:?}")]
    InvalidUlimit { name: String, value: String },
    #[error("invalid security_opt {0:?}")]
    InvalidSecurityOpt(String),
}

/// What `create_container` gets: the container's name and its full configuration.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: String,
    pub body: ContainerCreateBody,
}

/// Nomad's container name: `<task>-<alloc_id>`.
pub fn container_name(task: &TaskConfig) -> String {
    format!("{}-{}", task.name.replace('/', "_"), task.alloc_id)
}

/// Hard limit and reservation in bytes (0 = unset). With a hard limit above `memory` (from
/// `memory_max` or the task's `memory_hard_limit`), `memory` becomes the reservation.
pub fn memory_limits(hard_limit_mb: i64, memory_mb: u64, memory_max_mb: u64) -> (i64, i64) {
    let soft = i64::try_from(memory_mb).unwrap_or(i64::MAX / MIB) * MIB;
    let hard = hard_limit_mb.max(i64::try_from(memory_max_mb).unwrap_or(0));
    if hard <= 0 {
        (soft, 0)
    } else {
        (hard.saturating_mul(MIB), soft)
    }
}

/// `*` matches any run of characters; everything else literally (go-glob's rules).
fn glob_match(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || s.len() < first.len() + last.len() || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

fn labels(
    task: &TaskConfig,
    cfg: &DockerTaskConfig,
    plugin: &PluginConfig,
) -> HashMap<String, String> {
    let mut out: HashMap<String, String> = cfg.labels.clone().into_iter().collect();
    out.insert(LABEL_ALLOC_ID.to_string(), task.alloc_id.clone());
    let env = |k: &str| task.env.get(k).cloned();
    let extras: [(&str, &str, Option<String>); 7] = [
        ("job_name", LABEL_JOB_NAME, Some(task.job_name.clone())),
        ("job_id", LABEL_JOB_ID, env("NOMAD_JOB_ID")),
        (
            "task_group_name",
            LABEL_GROUP_NAME,
            Some(task.group_name.clone()),
        ),
        ("task_name", LABEL_TASK_NAME, Some(task.name.clone())),
        ("namespace", LABEL_NAMESPACE, env("NOMAD_NAMESPACE")),
        ("node_name", LABEL_NODE_NAME, env("NOMAD_NODE_NAME")),
        ("node_id", LABEL_NODE_ID, env("NOMAD_NODE_ID")),
    ];
    for (key, label, value) in extras {
        if let Some(value) = value
            && plugin.extra_labels.iter().any(|p| glob_match(p, key))
        {
            out.insert(label.to_string(), value);
        }
    }
    out
}

/// The task's environment with its directories at their container paths. TMPDIR names a host
/// directory that is not mounted, so the image's default applies instead.
fn environment(task: &TaskConfig, rewrite: &PathRewrite) -> Vec<String> {
    let mut env = (*task.env).clone();
    env.insert(
        "NOMAD_ALLOC_DIR".into(),
        crate::paths::ALLOC_DIR_IN_CONTAINER.into(),
    );
    env.insert(
        "NOMAD_TASK_DIR".into(),
        crate::paths::LOCAL_DIR_IN_CONTAINER.into(),
    );
    env.insert(
        "NOMAD_SECRETS_DIR".into(),
        crate::paths::SECRETS_DIR_IN_CONTAINER.into(),
    );
    env.remove("TMPDIR");
    env.iter()
        .map(|(k, v)| format!("{k}={}", rewrite.apply(v)))
        .collect()
}

fn binds(
    task: &TaskConfig,
    cfg: &DockerTaskConfig,
    plugin: &PluginConfig,
) -> Result<Vec<String>, SpecError> {
    let mut out: Vec<String> = task_binds(task)
        .iter()
        .map(|(host, inside)| format!("{}:{inside}", host.display()))
        .collect();
    let local_volumes = cfg.volume_driver.is_empty();
    if !plugin.volumes.enabled && !local_volumes {
        return Err(SpecError::VolumesDisabled(format!(
            "use volume driver {:?}",
            cfg.volume_driver
        )));
    }
    for spec in &cfg.volumes {
        let parts: Vec<&str> = spec.split(':').collect();
        let (src, dst, mode) = match parts.as_slice() {
            [s, d] => (*s, *d, None),
            [s, d, m] => (*s, *d, Some(*m)),
            _ => {
                return Err(SpecError::InvalidVolume {
                    spec: spec.clone(),
                    reason: "expected host:container[:mode]".into(),
                });
            }
        };
        if src.is_empty() || !dst.starts_with('/') {
            return Err(SpecError::InvalidVolume {
                spec: spec.clone(),
                reason: "the container path must be absolute".into(),
            });
        }
        let src = if local_volumes {
            let expanded = expand(&task.task_dir, src);
            if !plugin.volumes.enabled && !is_within(&task.alloc_dir, &expanded) {
                return Err(SpecError::VolumesDisabled(format!(
                    "mount host paths: {spec:?}"
                )));
            }
            expanded.display().to_string()
        } else {
            // A named volume of the volume driver.
            src.to_string()
        };
        out.push(match mode {
            Some(m) => format!("{src}:{dst}:{m}"),
            None => format!("{src}:{dst}"),
        });
    }
    if !plugin.volumes.selinux_label.is_empty() {
        for b in &mut out {
            b.push(':');
            b.push_str(&plugin.volumes.selinux_label);
        }
    }
    Ok(out)
}

fn mount(task: &TaskConfig, m: &MountConfig, plugin: &PluginConfig) -> Result<Mount, SpecError> {
    let mut out = Mount {
        target: Some(m.target.clone()),
        read_only: Some(m.readonly),
        ..Default::default()
    };
    match m.typ.as_str() {
        "bind" => {
            let source = expand(&task.task_dir, &m.source);
            if !plugin.volumes.enabled && !is_within(&task.alloc_dir, &source) {
                return Err(SpecError::VolumesDisabled(format!(
                    "mount host path: {:?}",
                    source.display().to_string()
                )));
            }
            out.typ = Some(MountType::BIND);
            out.source = Some(source.display().to_string());
            let propagation = if m.propagation.is_empty() {
                "rprivate"
            } else {
                &m.propagation
            };
            out.bind_options = Some(MountBindOptions {
                propagation: Some(propagation.parse().map_err(|_| {
                    SpecError::InvalidMount(format!("unknown bind propagation {propagation:?}"))
                })?),
                ..Default::default()
            });
        }
        "tmpfs" => {
            out.typ = Some(MountType::TMPFS);
            out.tmpfs_options = Some(MountTmpfsOptions {
                size_bytes: m.tmpfs_size,
                mode: m.tmpfs_mode,
                ..Default::default()
            });
        }
        _ => {
            if !plugin.volumes.enabled {
                return Err(SpecError::VolumesDisabled(format!(
                    "mount volume: {:?}",
                    m.source
                )));
            }
            out.typ = Some(MountType::VOLUME);
            out.source = Some(m.source.clone());
            out.volume_options = Some(MountVolumeOptions {
                no_copy: Some(m.volume_no_copy),
                labels: Some(m.volume_labels.clone().into_iter().collect()),
                driver_config: (!m.volume_driver.is_empty()).then(|| {
                    MountVolumeOptionsDriverConfig {
                        name: Some(m.volume_driver.clone()),
                        options: Some(m.volume_driver_options.clone().into_iter().collect()),
                    }
                }),
                ..Default::default()
            });
        }
    }
    Ok(out)
}

/// A mount the agent asks for (`TaskConfig::mounts`: CSI volumes, a CSI plugin's directories),
/// as Nomad's docker driver makes it: a bind with the propagation mapped to Linux's recursive
/// modes. These come from the agent, not the job, so `volumes.enabled` does not gate them.
fn agent_mount(m: &drover_abi::MountConfig) -> Result<Mount, SpecError> {
    if !m.task_path.starts_with('/') || !m.host_path.starts_with('/') {
        return Err(SpecError::InvalidMount(format!(
            "{} -> {}: both paths must be absolute",
            m.host_path, m.task_path
        )));
    }
    let propagation = match m.propagation_mode {
        MountPropagation::Private => MountBindOptionsPropagationEnum::RPRIVATE,
        MountPropagation::HostToTask => MountBindOptionsPropagationEnum::RSLAVE,
        MountPropagation::Bidirectional => MountBindOptionsPropagationEnum::RSHARED,
    };
    Ok(Mount {
        typ: Some(MountType::BIND),
        source: Some(m.host_path.clone()),
        target: Some(m.task_path.clone()),
        read_only: Some(m.readonly),
        bind_options: Some(MountBindOptions {
            propagation: Some(propagation),
            ..Default::default()
        }),
        ..Default::default()
    })
}

type Ports = (Vec<String>, HashMap<String, Option<Vec<PortBinding>>>);

/// Publishes the group network ports named in `ports`. The allocation's ports are in the task
/// environment: `NOMAD_HOST_PORT_<label>` on the host, `NOMAD_PORT_<label>` inside (the port's
/// `to`, or the host port), bound to `NOMAD_HOST_IP_<label>`. Both TCP and UDP, like Nomad.
fn ports(
    task: &TaskConfig,
    cfg: &DockerTaskConfig,
    network_mode: &str,
) -> Result<Ports, SpecError> {
    let mut exposed = Vec::new();
    let mut bindings = HashMap::new();
    if network_mode == "host" || network_mode.starts_with("container:") {
        return Ok((exposed, bindings));
    }
    for label in &cfg.ports {
        let key = label.replace('-', "_");
        let host_port = task
            .env
            .get(&format!("NOMAD_HOST_PORT_{key}"))
            .ok_or_else(|| SpecError::PortNotFound(label.clone()))?;
        let inside = task
            .env
            .get(&format!("NOMAD_PORT_{key}"))
            .unwrap_or(host_port);
        let host_ip = task
            .env
            .get(&format!("NOMAD_HOST_IP_{key}"))
            .or_else(|| task.env.get(&format!("NOMAD_IP_{key}")))
            .cloned()
            .unwrap_or_default();
        for proto in ["tcp", "udp"] {
            let port = format!("{inside}/{proto}");
            exposed.push(port.clone());
            bindings.insert(
                port,
                Some(vec![PortBinding {
                    host_ip: Some(host_ip.clone()),
                    host_port: Some(host_port.clone()),
                }]),
            );
        }
    }
    Ok((exposed, bindings))
}

fn ulimits(cfg: &DockerTaskConfig) -> Result<Vec<ResourcesUlimits>, SpecError> {
    cfg.ulimit
        .iter()
        .map(|(name, raw)| {
            let bad = || SpecError::InvalidUlimit {
                name: name.clone(),
                value: raw.clone(),
            };
            let (soft, hard) = raw.split_once(':').unwrap_or((raw, raw));
            Ok(ResourcesUlimits {
                name: Some(name.clone()),
                soft: Some(soft.trim().parse().map_err(|_| bad())?),
                hard: Some(hard.trim().parse().map_err(|_| bad())?),
            })
        })
        .collect()
}

/// `seccomp=<file>` options carry the profile's JSON itself, as the docker CLI sends them.
fn security_opts(opts: &[String]) -> Result<Vec<String>, SpecError> {
    opts.iter()
        .map(|opt| {
            let (key, value) = match opt.split_once('=').or_else(|| opt.split_once(':')) {
                Some(kv) => kv,
                None if opt == "no-new-privileges" => return Ok(opt.clone()),
                None => return Err(SpecError::InvalidSecurityOpt(opt.clone())),
            };
            if key != "seccomp" || value == "unconfined" {
                return Ok(opt.clone());
            }
            let text = std::fs::read_to_string(value)
                .map_err(|e| SpecError::InvalidSecurityOpt(format!("{opt}: {e}")))?;
            let profile: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| SpecError::InvalidSecurityOpt(format!("{opt}: {e}")))?;
            Ok(format!("seccomp={profile}"))
        })
        .collect()
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn non_empty_list<T: Clone>(v: &[T]) -> Option<Vec<T>> {
    (!v.is_empty()).then(|| v.to_vec())
}

fn map_of(m: &BTreeMap<String, String>) -> Option<HashMap<String, String>> {
    (!m.is_empty()).then(|| m.clone().into_iter().collect())
}

/// Builds the create request for `task`.
pub fn build_container_spec(
    task: &TaskConfig,
    cfg: &DockerTaskConfig,
    plugin: &PluginConfig,
) -> Result<ContainerSpec, SpecError> {
    if cfg.privileged && !plugin.allow_privileged {
        return Err(SpecError::PrivilegedNotAllowed);
    }
    let (cap_add, cap_drop) = caps::delta(&plugin.allow_caps, &cfg.cap_add, &cfg.cap_drop)
        .map_err(SpecError::CapsNotAllowed)?;
    if plugin.pids_limit > 0 && cfg.pids_limit > plugin.pids_limit {
        return Err(SpecError::PidsLimitTooHigh(plugin.pids_limit));
    }
    let pids_limit = if cfg.pids_limit > 0 {
        cfg.pids_limit
    } else {
        plugin.pids_limit
    };
    if !cfg.runtime.is_empty() && !plugin.allow_runtimes.contains(&cfg.runtime) {
        return Err(SpecError::RuntimeNotAllowed(cfg.runtime.clone()));
    }
    let rewrite = PathRewrite::for_task(task);
    // A task of a bridge-mode allocation joins the pause container holding its namespace
    // (unless its config names a mode itself, as Nomad lets it).
    let group_mode = crate::network::task_network_mode(task.network_isolation.as_ref());
    let network_mode = match &group_mode {
        Some(mode) if cfg.network_mode.is_empty() => mode.clone(),
        _ => cfg.network_mode.clone(),
    };
    let (exposed_ports, port_bindings) = ports(task, cfg, &network_mode)?;
    let mut mounts = cfg
        .mounts
        .iter()
        .map(|m| mount(task, m, plugin))
        .collect::<Result<Vec<_>, _>>()?;
    for m in &task.mounts {
        mounts.push(agent_mount(m)?);
    }
    let (memory, reservation) = memory_limits(
        cfg.memory_hard_limit,
        task.resources.memory_mb,
        task.resources.memory_max_mb,
    );
    let cpu_shares = (task.resources.cpu_mhz > 0)
        .then(|| task.resources.cpu_mhz.clamp(MIN_CPU_SHARES, MAX_CPU_SHARES) as i64);
    let log_config = match &cfg.logging {
        Some(l) if !l.driver.is_empty() || !l.options.is_empty() => HostConfigLogConfig {
            typ: non_empty(&l.driver),
            config: Some(l.options.clone().into_iter().collect()),
        },
        _ => HostConfigLogConfig {
            typ: Some(plugin.logging.driver.clone()),
            config: Some(plugin.logging.options.clone().into_iter().collect()),
        },
    };
    let host_config = HostConfig {
        binds: Some(binds(task, cfg, plugin)?),
        mounts: (!mounts.is_empty()).then_some(mounts),
        volume_driver: non_empty(&cfg.volume_driver),
        memory: (memory > 0).then_some(memory),
        memory_reservation: (reservation > 0).then_some(reservation),
        // No swap: the hard limit is the limit.
        memory_swap: (memory > 0).then_some(memory),
        memory_swappiness: (memory > 0).then_some(0),
        cpu_shares,
        cpuset_cpus: non_empty(&cfg.cpuset_cpus),
        pids_limit: (pids_limit > 0).then_some(pids_limit),
        privileged: Some(cfg.privileged),
        cap_add: non_empty_list(&cap_add),
        cap_drop: non_empty_list(&cap_drop),
        network_mode: non_empty(&network_mode),
        port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
        dns: non_empty_list(&cfg.dns_servers),
        dns_search: non_empty_list(&cfg.dns_search_domains),
        dns_options: non_empty_list(&cfg.dns_options),
        extra_hosts: non_empty_list(&cfg.extra_hosts),
        group_add: non_empty_list(&cfg.group_add),
        init: cfg.init.then_some(true),
        readonly_rootfs: Some(cfg.readonly_rootfs),
        ipc_mode: non_empty(&cfg.ipc_mode),
        pid_mode: non_empty(&cfg.pid_mode),
        uts_mode: non_empty(&cfg.uts_mode),
        userns_mode: non_empty(&cfg.userns_mode),
        security_opt: non_empty_list(&security_opts(&cfg.security_opt)?),
        shm_size: (cfg.shm_size > 0).then_some(cfg.shm_size),
        storage_opt: map_of(&cfg.storage_opt),
        sysctls: map_of(&cfg.sysctl),
        ulimits: non_empty_list(&ulimits(cfg)?),
        runtime: non_empty(&cfg.runtime),
        devices: non_empty_list(
            &cfg.devices
                .iter()
                .map(|d| DeviceMapping {
                    path_on_host: Some(d.host_path.clone()),
                    path_in_container: Some(d.container_path.clone()),
                    cgroup_permissions: Some(d.cgroup_permissions.clone()),
                })
                .collect::<Vec<_>>(),
        ),
        log_config: Some(log_config),
        ..Default::default()
    };
    let networking_config = (!cfg.network_aliases.is_empty()
        || !cfg.ipv4_address.is_empty()
        || !cfg.ipv6_address.is_empty())
    .then(|| {
        let endpoint = if network_mode.is_empty() {
            "bridge".to_string()
        } else {
            network_mode.clone()
        };
        let ipam = (!cfg.ipv4_address.is_empty() || !cfg.ipv6_address.is_empty()).then(|| {
            EndpointIpamConfig {
                ipv4_address: non_empty(&cfg.ipv4_address),
                ipv6_address: non_empty(&cfg.ipv6_address),
                ..Default::default()
            }
        });
        NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                endpoint,
                EndpointSettings {
                    aliases: non_empty_list(&cfg.network_aliases),
                    ipam_config: ipam,
                    ..Default::default()
                },
            )])),
        }
    });
    let cmd = if !cfg.command.is_empty() {
        let mut cmd = vec![rewrite.apply(&cfg.command)];
        cmd.extend(cfg.args.iter().map(|a| rewrite.apply(a)));
        Some(cmd)
    } else {
        non_empty_list(
            &cfg.args
                .iter()
                .map(|a| rewrite.apply(a))
                .collect::<Vec<_>>(),
        )
    };
    let body = ContainerCreateBody {
        image: Some(cfg.image.clone()),
        cmd,
        entrypoint: non_empty_list(
            &cfg.entrypoint
                .iter()
                .map(|a| rewrite.apply(a))
                .collect::<Vec<_>>(),
        ),
        working_dir: non_empty(&rewrite.apply(&cfg.work_dir)),
        // The daemon refuses a hostname for a container in another's namespace.
        hostname: non_empty(&cfg.hostname).filter(|_| !network_mode.starts_with("container:")),
        user: non_empty(&task.user),
        env: Some(environment(task, &rewrite)),
        labels: Some(labels(task, cfg, plugin)),
        tty: Some(cfg.tty),
        open_stdin: Some(cfg.interactive),
        exposed_ports: (!exposed_ports.is_empty()).then_some(exposed_ports),
        healthcheck: cfg.healthchecks_disabled.then(|| HealthConfig {
            test: Some(vec!["NONE".to_string()]),
            ..Default::default()
        }),
        host_config: Some(host_config),
        networking_config,
        ..Default::default()
    };
    Ok(ContainerSpec {
        name: container_name(task),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task_config::parse_task_config;
    use drover_abi::TaskResources;
    use serde_json::json;
    use std::path::PathBuf;

    fn task() -> TaskConfig {
        let alloc_dir = PathBuf::from("/data/alloc/a1");
        let task_dir = alloc_dir.join("web");
        let env = BTreeMap::from([
            (
                "NOMAD_ALLOC_DIR".to_string(),
                "/data/alloc/a1/alloc".to_string(),
            ),
            (
                "NOMAD_TASK_DIR".to_string(),
                "/data/alloc/a1/web/local".to_string(),
            ),
            (
                "NOMAD_SECRETS_DIR".to_string(),
                "/data/alloc/a1/web/secrets".to_string(),
            ),
            ("TMPDIR".to_string(), "/data/alloc/a1/web/tmp".to_string()),
            (
                "CONF".to_string(),
                "/data/alloc/a1/web/local/app.conf".to_string(),
            ),
            ("NOMAD_PORT_http".to_string(), "8080".to_string()),
            ("NOMAD_HOST_PORT_http".to_string(), "23456".to_string()),
            ("NOMAD_HOST_IP_http".to_string(), "127.0.0.1".to_string()),
            ("NOMAD_JOB_ID".to_string(), "job-id".to_string()),
        ]);
        TaskConfig {
            id: "a1/web/x".into(),
            name: "web".into(),
            alloc_id: "a1".into(),
            job_name: "job".into(),
            group_name: "g".into(),
            env: std::sync::Arc::new(env),
            driver_config: json!({}),
            resources: TaskResources {
                cpu_mhz: 500,
                cores: 0,
                memory_mb: 64,
                memory_max_mb: 0,
            },
            user: String::new(),
            alloc_dir,
            task_dir,
            stdout_path: PathBuf::from("/dev/null"),
            stderr_path: PathBuf::from("/dev/null"),
            ..Default::default()
        }
    }

    fn build(cfg: serde_json::Value, plugin: &PluginConfig) -> Result<ContainerSpec, SpecError> {
        build_container_spec(&task(), &parse_task_config(&cfg).unwrap(), plugin)
    }

    fn host(spec: &ContainerSpec) -> &HostConfig {
        spec.body.host_config.as_ref().unwrap()
    }

    #[test]
    fn agent_mounts_become_binds_with_linux_propagation_even_without_volumes() {
        let mut task = task();
        let mount = |task_path: &str, readonly, propagation_mode| drover_abi::MountConfig {
            task_path: task_path.into(),
            host_path: format!("/host{task_path}"),
            readonly,
            propagation_mode,
        };
        task.mounts = vec![
            mount("/data", true, MountPropagation::Private),
            mount("/seen", false, MountPropagation::HostToTask),
            mount("/csi", false, MountPropagation::Bidirectional),
        ];
        let cfg = parse_task_config(&json!({"image": "b"})).unwrap();
        let spec = build_container_spec(&task, &cfg, &PluginConfig::default()).unwrap();
        let seen: Vec<_> = host(&spec)
            .mounts
            .clone()
            .unwrap()
            .into_iter()
            .map(|m| {
                (
                    m.typ,
                    m.source.unwrap(),
                    m.target.unwrap(),
                    m.read_only,
                    m.bind_options.unwrap().propagation.unwrap(),
                )
            })
            .collect();
        let bind = Some(MountType::BIND);
        use MountBindOptionsPropagationEnum as P;
        assert_eq!(
            seen,
            vec![
                (
                    bind,
                    "/host/data".into(),
                    "/data".into(),
                    Some(true),
                    P::RPRIVATE
                ),
                (
                    bind,
                    "/host/seen".into(),
                    "/seen".into(),
                    Some(false),
                    P::RSLAVE
                ),
                (
                    bind,
                    "/host/csi".into(),
                    "/csi".into(),
                    Some(false),
                    P::RSHARED
                ),
            ]
        );
        task.mounts = vec![mount("relative", false, MountPropagation::Private)];
        let err = build_container_spec(&task, &cfg, &PluginConfig::default()).unwrap_err();
        assert!(matches!(err, SpecError::InvalidMount(_)), "{err}");
    }

    #[test]
    fn task_dirs_are_mounted_and_env_points_inside_the_container() {
        let spec = build(
            json!({"image": "busybox", "command": "/bin/cat", "args": ["${NOMAD_TASK_DIR}", "/data/alloc/a1/web/local/f"]}),
            &PluginConfig::default(),
        )
        .unwrap();
        assert_eq!(spec.name, "web-a1");
        let binds = host(&spec).binds.clone().unwrap();
        assert_eq!(
            binds,
            vec![
                "/data/alloc/a1/alloc:/alloc",
                "/data/alloc/a1/web/local:/local",
                "/data/alloc/a1/web/secrets:/secrets"
            ]
        );
        let env = spec.body.env.clone().unwrap();
        assert!(env.contains(&"NOMAD_ALLOC_DIR=/alloc".to_string()));
        assert!(env.contains(&"NOMAD_TASK_DIR=/local".to_string()));
        assert!(env.contains(&"NOMAD_SECRETS_DIR=/secrets".to_string()));
        assert!(env.contains(&"CONF=/local/app.conf".to_string()));
        assert!(!env.iter().any(|e| e.starts_with("TMPDIR=")));
        assert_eq!(
            spec.body.cmd.clone().unwrap(),
            vec!["/bin/cat", "${NOMAD_TASK_DIR}", "/local/f"]
        );
        assert_eq!(spec.body.labels.clone().unwrap()[LABEL_ALLOC_ID], "a1");
    }

    #[test]
    fn memory_and_cpu_follow_the_task_resources() {
        let spec = build(json!({"image": "busybox"}), &PluginConfig::default()).unwrap();
        assert_eq!(host(&spec).memory, Some(64 * MIB));
        assert_eq!(host(&spec).memory_swap, Some(64 * MIB));
        assert_eq!(host(&spec).memory_reservation, None);
        assert_eq!(host(&spec).cpu_shares, Some(500));
        assert_eq!(memory_limits(0, 64, 128), (128 * MIB, 64 * MIB));
        assert_eq!(memory_limits(256, 64, 128), (256 * MIB, 64 * MIB));
        assert_eq!(memory_limits(0, 0, 0), (0, 0));
    }

    #[test]
    fn group_ports_are_published_on_the_host_ip() {
        let spec = build(
            json!({"image": "busybox", "ports": ["http"]}),
            &PluginConfig::default(),
        )
        .unwrap();
        let bindings = host(&spec).port_bindings.clone().unwrap();
        let b = bindings["8080/tcp"].clone().unwrap();
        assert_eq!(b[0].host_port.as_deref(), Some("23456"));
        assert_eq!(b[0].host_ip.as_deref(), Some("127.0.0.1"));
        assert!(bindings.contains_key("8080/udp"));
        let err = build(
            json!({"image": "busybox", "ports": ["db"]}),
            &PluginConfig::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Port \"db\" not found, check network block"
        );
        let spec = build(
            json!({"image": "busybox", "ports": ["http"], "network_mode": "host"}),
            &PluginConfig::default(),
        )
        .unwrap();
        assert!(host(&spec).port_bindings.is_none());
    }

    #[test]
    fn host_paths_need_volumes_enabled() {
        let plugin = PluginConfig::default();
        assert!(
            build(
                json!({"image": "b", "volumes": ["local/data:/data"]}),
                &plugin
            )
            .is_ok()
        );
        assert!(
            build(
                json!({"image": "b", "volumes": ["../alloc/x:/x:ro"]}),
                &plugin
            )
            .is_ok()
        );
        let err = build(
            json!({"image": "b", "volumes": ["/etc:/host-etc"]}),
            &plugin,
        )
        .unwrap_err();
        assert!(matches!(err, SpecError::VolumesDisabled(_)), "{err}");
        let err = build(
            json!({"image": "b", "mount": {"type": "bind", "source": "/etc", "target": "/e"}}),
            &plugin,
        )
        .unwrap_err();
        assert!(matches!(err, SpecError::VolumesDisabled(_)), "{err}");
        let err = build(
            json!({"image": "b", "mount": {"source": "named", "target": "/v"}}),
            &plugin,
        )
        .unwrap_err();
        assert!(matches!(err, SpecError::VolumesDisabled(_)), "{err}");
        let mut enabled = PluginConfig::default();
        enabled.volumes.enabled = true;
        let spec = build(
            json!({"image": "b", "volumes": ["/etc:/host-etc:ro"]}),
            &enabled,
        )
        .unwrap();
        assert!(
            host(&spec)
                .binds
                .clone()
                .unwrap()
                .contains(&"/etc:/host-etc:ro".to_string())
        );
        let spec = build(
            json!({"image": "b", "mount": {"type": "bind", "source": "local/x", "target": "/x"}}),
            &plugin,
        )
        .unwrap();
        let m = &host(&spec).mounts.clone().unwrap()[0];
        assert_eq!(m.source.as_deref(), Some("/data/alloc/a1/web/local/x"));
    }

    #[test]
    fn privileged_and_caps_are_checked_against_the_plugin_config() {
        let plugin = PluginConfig::default();
        assert_eq!(
            build(json!({"image": "b", "privileged": true}), &plugin).unwrap_err(),
            SpecError::PrivilegedNotAllowed
        );
        let err = build(json!({"image": "b", "cap_add": ["SYS_ADMIN"]}), &plugin).unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver does not allow the following capabilities: sys_admin"
        );
        let mut allowed = PluginConfig {
            allow_privileged: true,
            ..PluginConfig::default()
        };
        allowed.allow_caps.push("SYS_ADMIN".into());
        let spec = build(
            json!({"image": "b", "privileged": true, "cap_add": ["SYS_ADMIN"], "cap_drop": ["chown"]}),
            &allowed,
        )
        .unwrap();
        assert_eq!(host(&spec).privileged, Some(true));
        assert_eq!(host(&spec).cap_add.clone().unwrap(), vec!["sys_admin"]);
        let drop = host(&spec).cap_drop.clone().unwrap();
        assert!(drop.contains(&"chown".to_string()) && drop.contains(&"net_raw".to_string()));
    }

    #[test]
    fn extra_labels_follow_globs() {
        let plugin = PluginConfig {
            extra_labels: vec!["job_*".into(), "task_name".into()],
            ..PluginConfig::default()
        };
        let spec = build(json!({"image": "b", "labels": {"team": "x"}}), &plugin).unwrap();
        let labels = spec.body.labels.unwrap();
        assert_eq!(labels["team"], "x");
        assert_eq!(labels[LABEL_JOB_NAME], "job");
        assert_eq!(labels[LABEL_JOB_ID], "job-id");
        assert_eq!(labels[LABEL_TASK_NAME], "web");
        assert!(!labels.contains_key(LABEL_GROUP_NAME));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("a*c*e", "abcde"));
        assert!(!glob_match("a*c", "abd"));
    }

    #[test]
    fn ulimits_and_pids_limits_are_checked() {
        let spec = build(
            json!({"image": "b", "ulimit": {"nofile": "1024:2048", "core": "0"}}),
            &PluginConfig::default(),
        )
        .unwrap();
        let ul = host(&spec).ulimits.clone().unwrap();
        assert!(ul.iter().any(|u| u.name.as_deref() == Some("nofile")
            && u.soft == Some(1024)
            && u.hard == Some(2048)));
        assert!(
            build(
                json!({"image": "b", "ulimit": {"nofile": "x"}}),
                &PluginConfig::default()
            )
            .is_err()
        );
        let plugin = PluginConfig {
            pids_limit: 10,
            ..PluginConfig::default()
        };
        assert_eq!(
            build(json!({"image": "b", "pids_limit": 20}), &plugin).unwrap_err(),
            SpecError::PidsLimitTooHigh(10)
        );
        assert_eq!(
            host(&build(json!({"image": "b"}), &plugin).unwrap()).pids_limit,
            Some(10)
        );
    }
}
