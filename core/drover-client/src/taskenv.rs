//! Nomad's task environment: the `NOMAD_*` variables a task sees, and the lookup that
//! interpolates `${NOMAD_*}`, `${attr.*}`, `${node.*}`, `${meta.*}` and `${env["..."]}` in task
//! config and `env` values.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use drover_abi::FsIsolation;
use drover_structs::{Allocation, Node, Task, TaskGroup};

/// Nomad's default `env.denylist` (`DefaultEnvDenyList` in Nomad's `helper/host`): agent
/// variables no task inherits unless the client's `env.denylist` option replaces the list.
pub const DEFAULT_ENV_DENYLIST: &[&str] = &[
    "CONSUL_TOKEN",
    "CONSUL_HTTP_TOKEN",
    "VAULT_TOKEN",
    "NOMAD_LICENSE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// The client's env denylist: names of the agent's variables that tasks never inherit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvDenylist(BTreeSet<String>);

impl Default for EnvDenylist {
    /// Nomad's default list.
    fn default() -> Self {
        EnvDenylist(DEFAULT_ENV_DENYLIST.iter().map(|s| s.to_string()).collect())
    }
}

impl EnvDenylist {
    /// Reads the comma-separated value of the client's `env.denylist` option, which replaces
    /// the default list as in Nomad (an empty value denies nothing). Names are trimmed, so
    /// `"A, B"` denies `B` too.
    pub fn parse(list: &str) -> Self {
        EnvDenylist(
            list.split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// The variables of `vars` whose names are not on the list.
    pub fn filter(
        &self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> BTreeMap<String, String> {
        vars.into_iter()
            .filter(|(name, _)| !self.contains(name))
            .collect()
    }
}

/// The agent's own environment minus `denylist`: what tasks of drivers without image isolation
/// inherit. Variables whose name or value is not UTF-8 are left out.
pub fn agent_env(denylist: &EnvDenylist) -> BTreeMap<String, String> {
    denylist.filter(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    )
}

/// Whether tasks of a driver with `isolation` inherit the agent's environment: Nomad gives it
/// to every driver but those that run an image (docker), whose tasks get the image's own.
pub fn inherits_agent_env(isolation: FsIsolation) -> bool {
    isolation != FsIsolation::Image
}

/// The directories of one task, as host paths.
pub struct TaskPaths<'a> {
    pub alloc_dir: &'a Path,
    pub task_local_dir: &'a Path,
    pub task_secrets_dir: &'a Path,
    pub task_tmp_dir: &'a Path,
}

/// Builds the environment of `task` in `alloc` on `node` as Nomad's taskenv builder does:
/// Nomad's variables; then `host_env` (the agent's variables minus the denylist, empty for
/// image-isolated drivers), each interpolated, for the names Nomad's variables leave unset; then
/// the task's own `env` block, interpolated against all of that, overriding it.
pub fn build_env(
    alloc: &Allocation,
    group: &TaskGroup,
    task: &Task,
    node: &Node,
    region: &str,
    paths: &TaskPaths<'_>,
    host_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    let job = alloc.job.as_deref();
    set(
        "NOMAD_ALLOC_DIR",
        paths.alloc_dir.join("alloc").display().to_string(),
    );
    set("NOMAD_TASK_DIR", paths.task_local_dir.display().to_string());
    set(
        "NOMAD_SECRETS_DIR",
        paths.task_secrets_dir.display().to_string(),
    );
    set("TMPDIR", paths.task_tmp_dir.display().to_string());
    set("NOMAD_ALLOC_ID", alloc.id.clone());
    set("NOMAD_SHORT_ALLOC_ID", alloc.id.chars().take(8).collect());
    set("NOMAD_ALLOC_NAME", alloc.name.clone());
    set(
        "NOMAD_ALLOC_INDEX",
        alloc.index().map(|i| i.to_string()).unwrap_or_default(),
    );
    set("NOMAD_TASK_NAME", task.name.clone());
    set("NOMAD_GROUP_NAME", group.name.clone());
    if let Some(job) = job {
        set("NOMAD_JOB_NAME", job.name.clone());
        set("NOMAD_JOB_ID", job.id.clone());
        set("NOMAD_JOB_PARENT_ID", job.parent_id.clone());
    }
    set("NOMAD_NAMESPACE", alloc.namespace.clone());
    set("NOMAD_REGION", region.to_string());
    set("NOMAD_DC", node.datacenter.clone());
    set("NOMAD_CPU_LIMIT", task.resources.cpu.to_string());
    if task.resources.cores > 0 {
        set("NOMAD_CPU_CORES", task.resources.cores.to_string());
    }
    set("NOMAD_MEMORY_LIMIT", task.resources.memory_mb.to_string());
    if task.resources.memory_max_mb > 0 {
        set(
            "NOMAD_MEMORY_MAX_LIMIT",
            task.resources.memory_max_mb.to_string(),
        );
    }
    // Meta: job, then group, then task; later wins. Both as written and upper-cased.
    let mut meta = BTreeMap::new();
    for m in [
        job.and_then(|j| j.meta.as_ref()),
        group.meta.as_ref(),
        task.meta.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        meta.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    for (k, v) in &meta {
        let clean = k.replace(['.', '-'], "_");
        set(&format!("NOMAD_META_{clean}"), v.clone());
        set(&format!("NOMAD_META_{}", clean.to_uppercase()), v.clone());
    }
    // Ports the allocation holds.
    let alloc_address = alloc
        .network_status
        .as_ref()
        .and_then(|n| n.get("Address"))
        .and_then(|a| a.as_str())
        .filter(|a| !a.is_empty());
    if let Some(res) = &alloc.allocated_resources {
        for p in res.shared.ports.iter().flatten() {
            let ip = if p.host_ip.is_empty() {
                node.primary_ip()
            } else {
                p.host_ip.clone()
            };
            let label = p.label.replace('-', "_");
            let inside = if p.to > 0 { p.to } else { p.value };
            set(&format!("NOMAD_PORT_{label}"), inside.to_string());
            set(&format!("NOMAD_HOST_PORT_{label}"), p.value.to_string());
            set(&format!("NOMAD_IP_{label}"), ip.clone());
            set(&format!("NOMAD_HOST_IP_{label}"), ip.clone());
            set(&format!("NOMAD_ADDR_{label}"), format!("{ip}:{inside}"));
            set(
                &format!("NOMAD_HOST_ADDR_{label}"),
                format!("{ip}:{}", p.value),
            );
            set(&format!("NOMAD_ALLOC_PORT_{label}"), inside.to_string());
            // The allocation's own address (bridge mode), where the port is `to` inside.
            if let Some(address) = alloc_address {
                set(&format!("NOMAD_ALLOC_IP_{label}"), address.to_string());
                set(
                    &format!("NOMAD_ALLOC_ADDR_{label}"),
                    format!("{address}:{inside}"),
                );
                set(
                    &format!("NOMAD_ALLOC_INTERFACE_{label}"),
                    crate::network::cni::INTERFACE.to_string(),
                );
            }
        }
        if let Some(tr) = res.tasks.get(&task.name) {
            for n in tr.networks.iter().flatten() {
                for p in n.all_ports() {
                    let label = p.label.replace('-', "_");
                    set(&format!("NOMAD_PORT_{label}"), p.value.to_string());
                    set(&format!("NOMAD_HOST_PORT_{label}"), p.value.to_string());
                    set(&format!("NOMAD_IP_{label}"), n.ip.clone());
                    set(
                        &format!("NOMAD_ADDR_{label}"),
                        format!("{}:{}", n.ip, p.value),
                    );
                }
            }
        }
    }
    // The agent's variables never replace Nomad's.
    if !host_env.is_empty() {
        let base = env.clone();
        let lookup = |name: &str| lookup_in(name, &base, node, region);
        for (k, v) in host_env {
            if !base.contains_key(k) {
                env.insert(k.clone(), crate::interpolate::interpolate(v, &lookup));
            }
        }
    }
    // The task's own env block, interpolated against what is set so far and the node.
    if let Some(task_env) = &task.env {
        let base = env.clone();
        let lookup = |name: &str| lookup_in(name, &base, node, region);
        for (k, v) in task_env {
            env.insert(k.clone(), crate::interpolate::interpolate(v, &lookup));
        }
    }
    env
}

/// Resolves one `${...}` reference against the task env and the node, as Nomad's client does.
pub fn lookup_in(
    name: &str,
    env: &BTreeMap<String, String>,
    node: &Node,
    region: &str,
) -> Option<String> {
    if let Some(v) = env.get(name) {
        return Some(v.clone());
    }
    if let Some(attr) = name.strip_prefix("attr.") {
        return node.attributes.get(attr).cloned();
    }
    if let Some(key) = name.strip_prefix("meta.") {
        return node.meta.get(key).cloned();
    }
    if let Some(inner) = name
        .strip_prefix("env[\"")
        .and_then(|s| s.strip_suffix("\"]"))
    {
        return env.get(inner).cloned();
    }
    match name {
        "node.unique.id" => Some(node.id.clone()),
        "node.unique.name" => Some(node.name.clone()),
        "node.datacenter" => Some(node.datacenter.clone()),
        "node.class" => Some(node.node_class.clone()),
        "node.region" => Some(region.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::*;
    use std::path::PathBuf;
    use std::sync::Arc;

    #[test]
    fn env_has_nomad_names_ports_meta_and_interpolated_task_env() {
        let job = Job {
            id: "web".into(),
            name: "web".into(),
            meta: Some([("owner".to_string(), "ops".to_string())].into()),
            ..Default::default()
        };
        let mut alloc = Allocation {
            id: "0123456789abcdef".into(),
            name: "web.api[2]".into(),
            namespace: "default".into(),
            job: Some(Arc::new(job)),
            ..Default::default()
        };
        let mut res = AllocatedResources::default();
        res.shared.ports = Some(vec![AllocatedPortMapping {
            label: "http".into(),
            value: 23456,
            to: 0,
            host_ip: "127.0.0.1".into(),
        }]);
        alloc.allocated_resources = Some(res);
        let group = TaskGroup {
            name: "api".into(),
            ..Default::default()
        };
        let task = Task {
            name: "server".into(),
            env: Some(
                [
                    ("LISTEN".to_string(), "${NOMAD_ADDR_http}".to_string()),
                    ("KERNEL".to_string(), "${attr.kernel.name}".to_string()),
                    ("NODE".to_string(), "${node.unique.id}".to_string()),
                ]
                .into(),
            ),
            resources: Resources {
                cpu: 100,
                memory_mb: 64,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut node = Node {
            id: "node-1".into(),
            datacenter: "dc1".into(),
            ..Default::default()
        };
        node.attributes.insert("kernel.name".into(), "linux".into());
        let a = PathBuf::from("/data/alloc/x");
        let l = a.join("server/local");
        let s = a.join("server/secrets");
        let t = a.join("server/tmp");
        let env = build_env(
            &alloc,
            &group,
            &task,
            &node,
            "global",
            &TaskPaths {
                alloc_dir: &a,
                task_local_dir: &l,
                task_secrets_dir: &s,
                task_tmp_dir: &t,
            },
            &BTreeMap::new(),
        );
        assert_eq!(env["NOMAD_ALLOC_DIR"], "/data/alloc/x/alloc");
        assert_eq!(env["NOMAD_TASK_DIR"], "/data/alloc/x/server/local");
        assert_eq!(env["NOMAD_ALLOC_INDEX"], "2");
        assert_eq!(env["NOMAD_SHORT_ALLOC_ID"], "01234567");
        assert_eq!(env["NOMAD_PORT_http"], "23456");
        assert_eq!(env["NOMAD_META_owner"], "ops");
        assert_eq!(env["NOMAD_META_OWNER"], "ops");
        assert_eq!(env["NOMAD_MEMORY_LIMIT"], "64");
        assert_eq!(env["LISTEN"], "127.0.0.1:23456");
        assert_eq!(env["KERNEL"], "linux");
        assert_eq!(env["NODE"], "node-1");
    }

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The environment of a task "t" with `task_env` in alloc "0123456789abcdef", given the
    /// agent variables `host_env`.
    fn env_with(
        task_env: &[(&str, &str)],
        host_env: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let alloc = Allocation {
            id: "0123456789abcdef".into(),
            name: "j.g[0]".into(),
            ..Default::default()
        };
        let group = TaskGroup {
            name: "g".into(),
            ..Default::default()
        };
        let task = Task {
            name: "t".into(),
            env: Some(vars(task_env)),
            ..Default::default()
        };
        let a = PathBuf::from("/data/alloc/x");
        let (l, s, t) = (a.join("t/local"), a.join("t/secrets"), a.join("t/tmp"));
        build_env(
            &alloc,
            &group,
            &task,
            &Node::default(),
            "global",
            &TaskPaths {
                alloc_dir: &a,
                task_local_dir: &l,
                task_secrets_dir: &s,
                task_tmp_dir: &t,
            },
            host_env,
        )
    }

    #[test]
    fn agent_variables_come_first_and_nomads_variables_and_the_task_env_override_them() {
        let host = vars(&[
            ("PATH", "/usr/sbin:/usr/bin"),
            ("HOME", "/root"),
            ("NOMAD_ALLOC_ID", "from-the-agent"),
            ("TMPDIR", "/tmp"),
            ("SHARED", "agent"),
            ("GREETING", "alloc ${NOMAD_SHORT_ALLOC_ID}"),
        ]);
        let env = env_with(
            &[("SHARED", "task"), ("PATH_PLUS", "/opt/bin:${PATH}")],
            &host,
        );
        assert_eq!(env["PATH"], "/usr/sbin:/usr/bin");
        assert_eq!(env["HOME"], "/root");
        assert_eq!(env["NOMAD_ALLOC_ID"], "0123456789abcdef");
        assert_eq!(env["TMPDIR"], "/data/alloc/x/t/tmp");
        assert_eq!(env["SHARED"], "task");
        assert_eq!(env["PATH_PLUS"], "/opt/bin:/usr/sbin:/usr/bin");
        // Agent values are interpolated too, as Nomad's builder does.
        assert_eq!(env["GREETING"], "alloc 01234567");
    }

    #[test]
    fn the_default_denylist_is_nomads_and_keeps_its_variables_from_tasks() {
        let list = EnvDenylist::default();
        for name in [
            "CONSUL_TOKEN",
            "CONSUL_HTTP_TOKEN",
            "VAULT_TOKEN",
            "NOMAD_LICENSE",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(list.contains(name), "{name} not denied");
        }
        let host = list.filter(vars(&[
            ("PATH", "/usr/bin"),
            ("VAULT_TOKEN", "s.secret"),
            ("AWS_SECRET_ACCESS_KEY", "key"),
        ]));
        let env = env_with(&[], &host);
        assert_eq!(env["PATH"], "/usr/bin");
        assert!(!env.contains_key("VAULT_TOKEN"));
        assert!(!env.contains_key("AWS_SECRET_ACCESS_KEY"));
    }

    #[test]
    fn a_configured_denylist_replaces_the_default_one() {
        let list = EnvDenylist::parse("DROVER_TEST_SECRET, OTHER_SECRET,");
        let host = list.filter(vars(&[
            ("PATH", "/usr/bin"),
            ("DROVER_TEST_SECRET", "hidden"),
            ("OTHER_SECRET", "hidden"),
            ("VAULT_TOKEN", "s.passed"),
        ]));
        assert_eq!(
            host,
            vars(&[("PATH", "/usr/bin"), ("VAULT_TOKEN", "s.passed")])
        );
        // An empty list denies nothing.
        assert!(!EnvDenylist::parse("").contains("VAULT_TOKEN"));
        assert_eq!(
            EnvDenylist::parse(" ").filter(vars(&[("VAULT_TOKEN", "t")])),
            vars(&[("VAULT_TOKEN", "t")])
        );
    }

    #[test]
    fn image_isolated_drivers_get_no_agent_environment_the_others_do() {
        assert!(inherits_agent_env(FsIsolation::None));
        assert!(inherits_agent_env(FsIsolation::Chroot));
        assert!(!inherits_agent_env(FsIsolation::Image));
        // What the task runner hands an image-isolated task: Nomad's variables and its env only.
        let env = env_with(&[("OWN", "1")], &BTreeMap::new());
        assert!(!env.contains_key("PATH"));
        assert!(
            env.keys()
                .all(|k| k.starts_with("NOMAD_") || k == "TMPDIR" || k == "OWN")
        );
    }

    #[test]
    fn the_agents_environment_is_read_from_the_process_minus_the_denylist() {
        let Ok(path) = std::env::var("PATH") else {
            return;
        };
        assert_eq!(agent_env(&EnvDenylist::default()).get("PATH"), Some(&path));
        assert!(!agent_env(&EnvDenylist::parse("PATH")).contains_key("PATH"));
    }
}
