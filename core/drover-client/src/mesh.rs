//! The client's side of the service mesh: for each task of an allocation with a mesh identity
//! (its kind, `connect-proxy:<service>` or `connect-native:<service>`, never its name), a
//! certificate from the servers for that service, and for a proxy the configuration file
//! drover-mesh's proxy runs from (its listeners from the group's ports and the service's
//! `sidecar_service`, where its upstreams' proxies are, the intentions). Written into the
//! task's secrets directory before the task starts, then kept current (the view every few
//! seconds, the certificate before it expires) until the allocation stops.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use drover_mesh::config::{ExposePath, Inbound, ProxyConfig, Upstream};
use drover_mesh::intentions::{Intention, Intentions};
use drover_structs::mesh::{MeshLeaf, MeshView};
use drover_structs::{Allocation, TaskGroup};
use serde_json::Value;
use tokio::sync::watch;

use crate::client::ServerConn;
use crate::csi::server::CallFuture;

/// How often the proxies' view of the mesh is refreshed.
const REFRESH: Duration = Duration::from_secs(2);

/// The servers' mesh calls, as an object the allocation runners share.
pub trait MeshServerCalls: Send + Sync + 'static {
    fn sign_leaf(
        &self,
        node_id: String,
        alloc_id: String,
        task: String,
    ) -> CallFuture<'_, MeshLeaf>;
    fn view(&self, namespace: String) -> CallFuture<'_, MeshView>;
}

/// [`MeshServerCalls`] through a [`ServerConn`].
pub struct ServerMesh<S>(pub Arc<S>);

impl<S: ServerConn> MeshServerCalls for ServerMesh<S> {
    fn sign_leaf(
        &self,
        node_id: String,
        alloc_id: String,
        task: String,
    ) -> CallFuture<'_, MeshLeaf> {
        Box::pin(async move { self.0.sign_mesh_leaf(&node_id, &alloc_id, &task).await })
    }

    fn view(&self, namespace: String) -> CallFuture<'_, MeshView> {
        Box::pin(async move { self.0.mesh_view(&namespace).await })
    }
}

/// No servers to ask (tests of runners without a mesh).
pub struct NoMesh;

impl MeshServerCalls for NoMesh {
    fn sign_leaf(&self, _: String, _: String, _: String) -> CallFuture<'_, MeshLeaf> {
        Box::pin(async { Err("no service mesh here".to_string()) })
    }

    fn view(&self, _: String) -> CallFuture<'_, MeshView> {
        Box::pin(async { Err("no service mesh here".to_string()) })
    }
}

/// A task with a mesh identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshTask {
    pub task: String,
    pub service: String,
    /// A sidecar proxy (else a native task).
    pub proxy: bool,
    /// Its secrets directory.
    pub secrets: PathBuf,
}

/// The tasks of `group` with a mesh identity, from their kinds.
pub fn mesh_tasks(group: &TaskGroup) -> Vec<(String, String, bool)> {
    group
        .tasks
        .iter()
        .filter_map(|t| {
            if let Some(s) = t.kind.strip_prefix("connect-proxy:") {
                Some((t.name.clone(), s.to_string(), true))
            } else {
                t.kind
                    .strip_prefix("connect-native:")
                    .map(|s| (t.name.clone(), s.to_string(), false))
            }
        })
        .filter(|(_, s, _)| !s.is_empty())
        .collect()
}

/// The port inside the allocation's namespace of port `label` (its `to`, else its value), or
/// the label itself as a number.
fn inside_port(alloc: &Allocation, label: &str) -> Option<u16> {
    let mapped = alloc
        .allocated_resources
        .as_ref()
        .and_then(|r| r.shared.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.label == label));
    let port = match mapped {
        Some(p) if p.to > 0 => p.to,
        Some(p) => p.value,
        None => label.parse().ok()?,
    };
    u16::try_from(port).ok().filter(|p| *p > 0)
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A proxy's listeners.
struct Listeners {
    inbound: Option<Inbound>,
    upstreams: Vec<Upstream>,
    expose: Vec<ExposePath>,
}

/// The listeners of the proxy of `service`, from the group's service and ports.
fn listeners(alloc: &Allocation, group: &TaskGroup, service: &str) -> Result<Listeners, String> {
    let services = group.services.as_ref().and_then(Value::as_array);
    let svc = services
        .into_iter()
        .flatten()
        .find(|s| text(s, "Name") == service)
        .ok_or_else(|| format!("the group has no service {service:?} for its proxy"))?;
    let sidecar = svc
        .get("Connect")
        .and_then(|c| c.get("SidecarService"))
        .filter(|s| !s.is_null())
        .ok_or_else(|| format!("service {service:?} has no sidecar_service"))?;
    let proxy = sidecar.get("Proxy").filter(|p| !p.is_null());
    let proxy_label = match text(sidecar, "Port") {
        "" => format!("connect-proxy-{service}"),
        p => p.to_string(),
    };
    let listen = inside_port(alloc, &proxy_label)
        .ok_or_else(|| format!("the allocation has no port {proxy_label:?} for the proxy"))?;
    let local_port = proxy
        .and_then(|p| p.get("LocalServicePort"))
        .and_then(Value::as_i64)
        .filter(|p| *p > 0)
        .and_then(|p| u16::try_from(p).ok())
        .or_else(|| inside_port(alloc, text(svc, "PortLabel")));
    let inbound = local_port.map(|local| Inbound {
        bind: SocketAddr::from(([0, 0, 0, 0], listen)),
        local: SocketAddr::from(([127, 0, 0, 1], local)),
    });
    let mut upstreams = Vec::new();
    for u in proxy.map(|p| items(p, "Upstreams")).unwrap_or(&[]) {
        let port = u
            .get("LocalBindPort")
            .and_then(Value::as_i64)
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| {
                format!(
                    "upstream {:?} has no local_bind_port",
                    text(u, "DestinationName")
                )
            })?;
        let address = match text(u, "LocalBindAddress") {
            "" => "127.0.0.1",
            a => a,
        };
        let bind = format!("{address}:{port}")
            .parse()
            .map_err(|e| format!("upstream local_bind_address {address:?}: {e}"))?;
        upstreams.push(Upstream {
            destination: text(u, "DestinationName").to_string(),
            bind,
        });
    }
    let mut expose = Vec::new();
    let paths = proxy
        .and_then(|p| p.get("ExposeConfig"))
        .map(|e| items(e, "Path"))
        .unwrap_or(&[]);
    for p in paths {
        let label = text(p, "ListenerPort");
        let listener_port = inside_port(alloc, label)
            .ok_or_else(|| format!("the allocation has no port {label:?} for an expose path"))?;
        let local_path_port = p
            .get("LocalPathPort")
            .and_then(Value::as_i64)
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("expose path {:?} has no local_path_port", text(p, "Path")))?;
        expose.push(ExposePath {
            path: text(p, "Path").to_string(),
            protocol: text(p, "Protocol").to_string(),
            local_path_port,
            listener_port,
        });
    }
    Ok(Listeners {
        inbound,
        upstreams,
        expose,
    })
}

/// The proxy configuration of `service` from its leaf and the mesh's view.
fn proxy_config(
    alloc: &Allocation,
    group: &TaskGroup,
    service: &str,
    leaf: &MeshLeaf,
    view: &MeshView,
) -> Result<ProxyConfig, String> {
    let Listeners {
        inbound,
        upstreams,
        expose,
    } = listeners(alloc, group, service)?;
    let endpoints = upstreams
        .iter()
        .map(|u| {
            let addrs = view
                .endpoints
                .get(&u.destination)
                .into_iter()
                .flatten()
                .filter_map(|a| a.parse().ok())
                .collect();
            (u.destination.clone(), addrs)
        })
        .collect::<BTreeMap<_, Vec<SocketAddr>>>();
    Ok(ProxyConfig {
        trust_domain: leaf.trust_domain.clone(),
        namespace: leaf.namespace.clone(),
        service: service.to_string(),
        inbound,
        upstreams,
        expose,
        endpoints,
        intentions: Intentions {
            rules: view
                .intentions
                .iter()
                .map(|i| Intention {
                    source: i.source_name.clone(),
                    destination: i.destination_name.clone(),
                    action: i.action.clone(),
                })
                .collect(),
            // With no rule that matches, calls are allowed (Consul's default without ACLs);
            // an intention `* => *` sets another default.
            default: drover_mesh::intentions::ALLOW.into(),
        },
        cert_pem: leaf.cert_pem.clone(),
        key_pem: leaf.key_pem.clone(),
        ca_pem: leaf.ca_pem.clone(),
    })
}

/// What the mesh tasks of one allocation were given, kept current by [`keep`].
pub struct MeshFiles {
    node_id: String,
    alloc: Arc<Allocation>,
    group: TaskGroup,
    tasks: Vec<MeshTask>,
    leaves: BTreeMap<String, MeshLeaf>,
    written: BTreeMap<String, ProxyConfig>,
}

/// Writes what every mesh task of the allocation needs before any task starts. `None` when
/// the group has none.
pub async fn prepare(
    calls: &dyn MeshServerCalls,
    node_id: &str,
    alloc: Arc<Allocation>,
    group: &TaskGroup,
    secrets_dir: impl Fn(&str) -> Option<PathBuf>,
) -> Result<Option<MeshFiles>, String> {
    let found = mesh_tasks(group);
    if found.is_empty() {
        return Ok(None);
    }
    let tasks = found
        .into_iter()
        .map(|(task, service, proxy)| {
            let secrets = secrets_dir(&task)
                .ok_or_else(|| format!("task {task:?} has no secrets directory"))?;
            Ok(MeshTask {
                task,
                service,
                proxy,
                secrets,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut files = MeshFiles {
        node_id: node_id.to_string(),
        alloc,
        group: group.clone(),
        tasks,
        leaves: BTreeMap::new(),
        written: BTreeMap::new(),
    };
    files.refresh(calls, true).await?;
    Ok(Some(files))
}

impl MeshFiles {
    /// Renews leaves that are a third from expiry (or all, with `force`), and rewrites the
    /// files that changed.
    async fn refresh(&mut self, calls: &dyn MeshServerCalls, force: bool) -> Result<(), String> {
        let now = drover_structs::time::now_nanos() / 1_000_000_000;
        let lifetime = i64::from(LEAF_RENEW_BEFORE_SECS);
        for t in &self.tasks {
            let due = self
                .leaves
                .get(&t.task)
                .is_none_or(|l| l.expires - now < lifetime);
            if force || due {
                let leaf = calls
                    .sign_leaf(self.node_id.clone(), self.alloc.id.clone(), t.task.clone())
                    .await
                    .map_err(|e| {
                        format!("getting the mesh certificate of task {:?}: {e}", t.task)
                    })?;
                if !t.proxy {
                    write_native_files(&t.secrets, &leaf)?;
                }
                self.leaves.insert(t.task.clone(), leaf);
            }
        }
        if !self.tasks.iter().any(|t| t.proxy) {
            return Ok(());
        }
        let view = calls
            .view(self.alloc.namespace.clone())
            .await
            .map_err(|e| format!("reading the mesh: {e}"))?;
        for t in self.tasks.iter().filter(|t| t.proxy) {
            let Some(leaf) = self.leaves.get(&t.task) else {
                continue;
            };
            let config = proxy_config(&self.alloc, &self.group, &t.service, leaf, &view)?;
            if self.written.get(&t.task) == Some(&config) {
                continue;
            }
            let path = drover_mesh::proxy::config_path(&t.secrets);
            config
                .store(&path)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            self.written.insert(t.task.clone(), config);
        }
        Ok(())
    }
}

/// Leaves are renewed once less than this is left of them (a third of the servers' 72 h).
const LEAF_RENEW_BEFORE_SECS: u32 = 24 * 3600;

/// A native task's certificate, key and CA in its secrets directory (`connect/`).
fn write_native_files(secrets: &std::path::Path, leaf: &MeshLeaf) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = secrets.join("connect");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (name, text, mode) in [
        ("leaf.pem", &leaf.cert_pem, 0o644),
        ("leaf-key.pem", &leaf.key_pem, 0o600),
        ("ca.pem", &leaf.ca_pem, 0o644),
    ] {
        let path = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp"));
        let written = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        written.map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Keeps the files current until `stop` turns true or its sender goes. A failed refresh is
/// logged and tried again at the next tick: the proxy runs on with what it has.
pub async fn keep(
    mut files: MeshFiles,
    calls: Arc<dyn MeshServerCalls>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Err(e) = files.refresh(calls.as_ref(), false).await {
                    tracing::warn!(alloc = %files.alloc.id, error = %e, "refreshing the mesh configuration");
                }
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{AllocatedPortMapping, AllocatedResources, Task};
    use serde_json::json;

    fn alloc() -> Allocation {
        let mut r = AllocatedResources::default();
        r.shared.ports = Some(vec![
            AllocatedPortMapping {
                label: "connect-proxy-api".into(),
                value: 25000,
                to: -1,
                host_ip: "10.0.0.1".into(),
            },
            AllocatedPortMapping {
                label: "health".into(),
                value: 25001,
                to: -1,
                host_ip: "10.0.0.1".into(),
            },
        ]);
        Allocation {
            id: "a1".into(),
            namespace: "default".into(),
            allocated_resources: Some(r),
            ..Default::default()
        }
    }

    fn group() -> TaskGroup {
        TaskGroup {
            name: "api".into(),
            services: Some(json!([{"Name": "api", "PortLabel": "9001", "Connect": {
                "SidecarService": {"Proxy": {
                    "Upstreams": [{"DestinationName": "db", "LocalBindPort": 8080}],
                    "ExposeConfig": {"Path": [{"Path": "/health", "Protocol": "http",
                        "LocalPathPort": 9001, "ListenerPort": "health"}]}
                }}
            }}])),
            tasks: vec![
                Task {
                    name: "app".into(),
                    ..Default::default()
                },
                Task {
                    name: "connect-proxy-api".into(),
                    kind: "connect-proxy:api".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn identities_come_from_kinds_and_the_proxy_listens_where_the_group_says() {
        let g = group();
        assert_eq!(
            mesh_tasks(&g),
            vec![("connect-proxy-api".to_string(), "api".to_string(), true)]
        );
        let leaf = MeshLeaf {
            trust_domain: "t.drover".into(),
            namespace: "default".into(),
            service: "api".into(),
            ..Default::default()
        };
        let view = MeshView {
            endpoints: [("db".to_string(), vec!["10.0.0.2:26000".to_string()])].into(),
            intentions: vec![drover_structs::mesh::Intention {
                source_name: "api".into(),
                destination_name: "db".into(),
                action: "deny".into(),
                ..Default::default()
            }],
            index: 1,
        };
        let c = proxy_config(&alloc(), &g, "api", &leaf, &view).unwrap();
        let inbound = c.inbound.unwrap();
        assert_eq!(inbound.bind.to_string(), "0.0.0.0:25000");
        assert_eq!(inbound.local.to_string(), "127.0.0.1:9001");
        assert_eq!(c.upstreams[0].bind.to_string(), "127.0.0.1:8080");
        assert_eq!(c.endpoints["db"][0].to_string(), "10.0.0.2:26000");
        assert_eq!(c.expose[0].listener_port, 25001);
        assert!(!c.intentions.allows("api", "db"));
        assert!(c.intentions.allows("web", "db"));
    }

    /// Signs leaves expiring `ttl_secs` from now and counts the calls.
    struct Fake {
        ttl_secs: i64,
        signed: std::sync::atomic::AtomicUsize,
    }

    impl MeshServerCalls for Fake {
        fn sign_leaf(&self, _: String, _: String, task: String) -> CallFuture<'_, MeshLeaf> {
            self.signed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let expires = drover_structs::time::now_nanos() / 1_000_000_000 + self.ttl_secs;
            Box::pin(async move {
                Ok(MeshLeaf {
                    trust_domain: "t.drover".into(),
                    namespace: "default".into(),
                    service: task,
                    cert_pem: "CERT".into(),
                    key_pem: "KEY".into(),
                    ca_pem: "CA".into(),
                    expires,
                })
            })
        }

        fn view(&self, _: String) -> CallFuture<'_, MeshView> {
            Box::pin(async { Ok(MeshView::default()) })
        }
    }

    #[tokio::test]
    async fn a_native_task_gets_its_files_and_a_leaf_near_expiry_is_renewed() {
        let dir = std::env::temp_dir().join(format!("drover-mesh-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let group = TaskGroup {
            tasks: vec![Task {
                name: "app".into(),
                kind: "connect-native:web".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        // Leaves that expire within the renewal margin are signed again at every refresh.
        let calls = Fake {
            ttl_secs: 60,
            signed: Default::default(),
        };
        let mut files = prepare(&calls, "n1", Arc::new(alloc()), &group, |_| {
            Some(dir.clone())
        })
        .await
        .unwrap()
        .expect("a mesh task");
        let key = dir.join("connect/leaf-key.pem");
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "KEY");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        files.refresh(&calls, false).await.unwrap();
        assert_eq!(calls.signed.load(std::sync::atomic::Ordering::SeqCst), 2);
        // A leaf far from expiry is kept.
        let lasting = Fake {
            ttl_secs: 72 * 3600,
            signed: Default::default(),
        };
        let mut files = prepare(&lasting, "n1", Arc::new(alloc()), &group, |_| {
            Some(dir.clone())
        })
        .await
        .unwrap()
        .expect("a mesh task");
        files.refresh(&lasting, false).await.unwrap();
        assert_eq!(lasting.signed.load(std::sync::atomic::Ordering::SeqCst), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
