//! Native service registrations (Nomad's `provider = "nomad"`): what a running allocation's
//! `service` blocks register, in Nomad's `ServiceRegistration` shape.
//!
//! Drover derives them from the state instead of storing what clients report: a group's
//! services exist while its allocation runs (client status `running`, desired `run`), a
//! task's while that task runs too. So a registration can never outlive its allocation (a
//! lost node, a stopped job, a garbage-collected allocation all take it away in the same
//! entry), and every server answers the same list.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ALLOC_CLIENT_RUNNING, ALLOC_DESIRED_RUN, Allocation, Job, Node};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceRegistration {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "ServiceName")]
    pub service_name: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "Datacenter")]
    pub datacenter: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    #[serde(rename = "Tags")]
    pub tags: Vec<String>,
    #[serde(rename = "Address")]
    pub address: String,
    #[serde(rename = "Port")]
    pub port: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// The registrations of `alloc` (running `job`) on `node`: none unless it runs.
pub fn alloc_services(
    alloc: &Allocation,
    job: &Job,
    node: Option<&Node>,
) -> Vec<ServiceRegistration> {
    if alloc.client_status != ALLOC_CLIENT_RUNNING || alloc.desired_status != ALLOC_DESIRED_RUN {
        return Vec::new();
    }
    let Some(group) = job.task_groups.iter().find(|g| g.name == alloc.task_group) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let owner = format!("group-{}", group.name);
    for service in items(group.services.as_ref()) {
        out.push(register(alloc, node, service, &owner));
        // A Connect service's proxy registers as `<service>-sidecar-proxy` on the proxy's
        // port, as Nomad registers it in Consul: where other proxies dial it.
        if let Some(proxy) = sidecar_registration(service) {
            out.push(register(alloc, node, &proxy, &owner));
        }
    }
    for task in &group.tasks {
        let running = alloc
            .task_states
            .as_ref()
            .and_then(|s| s.get(&task.name))
            .is_some_and(|s| s.state == "running");
        if running {
            for service in items(task.services.as_ref()) {
                out.push(register(alloc, node, service, &task.name));
            }
        }
    }
    out
}

/// The allocation's own address (Nomad's `AllocNetworkStatus.Address`), in bridge mode.
pub fn alloc_address(alloc: &Allocation) -> Option<String> {
    alloc
        .network_status
        .as_ref()?
        .get("Address")?
        .as_str()
        .filter(|a| !a.is_empty())
        .map(str::to_string)
}

/// The name a Connect service's sidecar proxy registers under.
pub fn sidecar_service_name(service: &str) -> String {
    format!("{service}-sidecar-proxy")
}

/// The registration of a group service's sidecar proxy, if it has one: its port is the
/// sidecar service's, else `connect-proxy-<service>` (the port the admission hook adds).
fn sidecar_registration(service: &Value) -> Option<Value> {
    let sidecar = service
        .get("Connect")?
        .get("SidecarService")
        .filter(|s| !s.is_null())?;
    let name = str_of(service, "Name");
    let port = match str_of(sidecar, "Port") {
        "" => format!("connect-proxy-{name}"),
        p => p.to_string(),
    };
    Some(serde_json::json!({
        "Name": sidecar_service_name(name),
        "PortLabel": port,
        "Tags": sidecar.get("Tags").cloned().unwrap_or(Value::Null),
    }))
}

fn items(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn register(
    alloc: &Allocation,
    node: Option<&Node>,
    service: &Value,
    owner: &str,
) -> ServiceRegistration {
    let name = str_of(service, "Name");
    let label = str_of(service, "PortLabel");
    // A port label names one of the allocation's ports; a number is the port itself.
    let mapped = alloc
        .allocated_resources
        .as_ref()
        .and_then(|r| r.shared.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.label == label));
    // `address_mode = "alloc"`: the allocation's own address (bridge mode) and the port
    // inside it.
    let alloc_address = (str_of(service, "AddressMode") == "alloc")
        .then(|| alloc_address(alloc))
        .flatten();
    let port = match (label.parse::<i64>(), mapped) {
        (Ok(n), _) => n,
        (Err(_), Some(p)) if alloc_address.is_some() && p.to > 0 => p.to,
        (Err(_), Some(p)) => p.value,
        (Err(_), None) => 0,
    };
    let node_ip = node
        .and_then(|n| n.attributes.get("unique.network.ip-address"))
        .cloned()
        .unwrap_or_default();
    let address = match str_of(service, "Address") {
        "" if alloc_address.is_some() => alloc_address.unwrap_or_default(),
        "" => mapped
            .map(|p| p.host_ip.clone())
            .filter(|ip| !ip.is_empty())
            .unwrap_or(node_ip),
        explicit => explicit.to_string(),
    };
    ServiceRegistration {
        // Nomad's ID: `_nomad-task-<alloc>-<group-G | task>-<service>-<port label>`.
        id: format!("_nomad-task-{}-{owner}-{name}-{label}", alloc.id),
        service_name: name.to_string(),
        namespace: alloc.namespace.clone(),
        node_id: alloc.node_id.clone(),
        datacenter: node.map(|n| n.datacenter.clone()).unwrap_or_default(),
        job_id: alloc.job_id.clone(),
        alloc_id: alloc.id.clone(),
        tags: service
            .get("Tags")
            .and_then(Value::as_array)
            .map(|t| {
                t.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        address,
        port,
        create_index: alloc.create_index,
        modify_index: alloc.modify_index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AllocatedPortMapping, AllocatedResources, Task, TaskGroup, TaskState};
    use serde_json::json;

    fn job() -> Job {
        Job {
            id: "web".into(),
            task_groups: vec![TaskGroup {
                name: "g".into(),
                services: Some(json!([{"Name": "api", "PortLabel": "http", "Tags": ["v1"]}])),
                tasks: vec![Task {
                    name: "t".into(),
                    services: Some(json!([{"Name": "metrics", "PortLabel": "9100"}])),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn alloc(client: &str, task: &str) -> Allocation {
        let mut resources = AllocatedResources::default();
        resources.shared.ports = Some(vec![AllocatedPortMapping {
            label: "http".into(),
            value: 23456,
            to: 0,
            host_ip: "10.0.0.7".into(),
        }]);
        Allocation {
            id: "a1".into(),
            namespace: "default".into(),
            job_id: "web".into(),
            node_id: "n1".into(),
            task_group: "g".into(),
            client_status: client.into(),
            desired_status: ALLOC_DESIRED_RUN.into(),
            allocated_resources: Some(resources),
            task_states: Some(
                [(
                    "t".to_string(),
                    TaskState {
                        state: task.into(),
                        ..Default::default()
                    },
                )]
                .into(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_running_allocation_registers_its_group_and_running_task_services() {
        let regs = alloc_services(&alloc("running", "running"), &job(), None);
        assert_eq!(regs.len(), 2);
        assert_eq!(regs[0].id, "_nomad-task-a1-group-g-api-http");
        assert_eq!(
            (regs[0].address.as_str(), regs[0].port),
            ("10.0.0.7", 23456)
        );
        assert_eq!(regs[0].tags, ["v1"]);
        assert_eq!(
            (regs[1].service_name.as_str(), regs[1].port),
            ("metrics", 9100)
        );
        assert_eq!(regs[1].id, "_nomad-task-a1-t-metrics-9100");
    }

    #[test]
    fn nothing_is_registered_before_it_runs_or_once_it_stops() {
        assert!(alloc_services(&alloc("pending", "pending"), &job(), None).is_empty());
        assert!(alloc_services(&alloc("complete", "dead"), &job(), None).is_empty());
        let mut stopping = alloc("running", "running");
        stopping.desired_status = "stop".into();
        assert!(alloc_services(&stopping, &job(), None).is_empty());
        // A task that is not running yet keeps its own services back.
        let regs = alloc_services(&alloc("running", "pending"), &job(), None);
        assert_eq!(regs.len(), 1);
        assert_eq!(regs[0].service_name, "api");
    }
}
