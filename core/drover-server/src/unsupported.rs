//! Job settings Drover parses but does not act on yet, refused at registration (and by
//! `/v1/validate/job`) with the setting's path and what is missing.
//!
//! Why: a job file that registers and then runs differently from Nomad (a service never
//! registered, a Vault token never fetched) fails later for no stated reason. Each entry here
//! goes when its feature lands; the list is the honest boundary of what Drover runs.

use drover_structs::{Job, MultiError, TaskGroup};
use serde_json::Value;

/// Every refusal for `job`, as one multi-error in Nomad's text (`Ok` when it can run).
pub fn refuse_unacted(job: &Job) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    refuse_system_disconnect(job, &mut m);
    // Node pools do not exist in Drover: a region that names one is refused.
    if let Some(spec) = job.multiregion_spec() {
        for (i, r) in spec.regions().iter().enumerate() {
            if r.node_pool.as_deref().is_some_and(|p| !p.is_empty()) {
                m.push(refusal(
                    &format!("Job.Multiregion.Regions[{i}].NodePool"),
                    "node_pool",
                    "node pools are not supported yet",
                ));
            }
        }
    }
    for (g, tg) in job.task_groups.iter().enumerate() {
        let at = format!("Job.TaskGroups[{g}]");
        refuse_group(tg, &at, &mut m);
        for (t, task) in tg.tasks.iter().enumerate() {
            let at = format!("{at}.Tasks[{t}]");
            let mut refuse = |field: &str, block: &str, why: &str| {
                m.push(format!(
                    "Task group {} task {}: {}",
                    tg.name,
                    task.name,
                    refusal(&format!("{at}.{field}"), block, why)
                ));
            };
            refuse_service_parts(&task.services, &mut refuse);
            if is_set(&task.vault) {
                refuse("Vault", "vault", "Vault integration is not supported");
            }
            if is_set(&task.scaling_policies) {
                refuse(
                    "ScalingPolicies",
                    "scaling",
                    "task scaling policies are not served yet",
                );
            }
            if task
                .resources
                .devices
                .as_ref()
                .is_some_and(|d| !d.is_empty())
            {
                refuse(
                    "Resources.Devices",
                    "device",
                    "device plugins are not supported yet",
                );
            }
        }
    }
    m.into_result()
}

/// The system scheduler does not yet keep allocations of disconnected nodes as `unknown`
/// (Nomad's reconcile_node): the disconnect settings of system and sysbatch groups.
fn refuse_system_disconnect(job: &Job, m: &mut MultiError) {
    if !matches!(
        job.job_type.as_str(),
        drover_structs::JOB_TYPE_SYSTEM | drover_structs::JOB_TYPE_SYSBATCH
    ) {
        return;
    }
    for tg in &job.task_groups {
        if tg.disconnect.is_some() {
            m.push(format!(
                "Task group {}: disconnect is not supported for {} jobs yet",
                tg.name, job.job_type
            ));
        }
        if tg.max_client_disconnect.is_some() {
            m.push(format!(
                "Task group {}: max_client_disconnect is not supported for {} jobs yet",
                tg.name, job.job_type
            ));
        }
    }
}

fn refuse_group(tg: &TaskGroup, at: &str, m: &mut MultiError) {
    let mut refuse = |field: &str, block: &str, why: &str| {
        m.push(format!(
            "Task group {}: {}",
            tg.name,
            refusal(&format!("{at}.{field}"), block, why)
        ));
    };
    refuse_service_parts(&tg.services, &mut refuse);
    refuse_network_mode(tg, &mut refuse);
    // Canonicalization gives every group `Consul {"Namespace": ""}`; only a namespace asks
    // for something.
    let consul_namespace = tg
        .consul
        .as_ref()
        .and_then(|c| c.get("Namespace"))
        .and_then(Value::as_str)
        .is_some_and(|ns| !ns.is_empty());
    if consul_namespace {
        refuse(
            "Consul.Namespace",
            "consul",
            "Consul integration is not supported",
        );
    }
}

/// Services register natively (whatever their `provider`: Drover needs no Consul), the client
/// runs their checks and Drover's mesh their Connect sidecars; the settings neither acts on
/// are refused, naming their path.
fn refuse_service_parts(services: &Option<Value>, refuse: &mut impl FnMut(&str, &str, &str)) {
    let list = services.as_ref().and_then(Value::as_array);
    for (i, service) in list.into_iter().flatten().enumerate() {
        let checks = service.get("Checks").and_then(Value::as_array);
        for (j, check) in checks.into_iter().flatten().enumerate() {
            let at = |field: &str| format!("Services[{i}].Checks[{j}].{field}");
            let text = |k: &str| check.get(k).and_then(Value::as_str).unwrap_or("");
            let flag = |k: &str| check.get(k).and_then(Value::as_bool).unwrap_or(false);
            let number = |k: &str| check.get(k).and_then(Value::as_i64).unwrap_or(0);
            if text("AddressMode") == "driver" {
                refuse(
                    &at("AddressMode"),
                    "address_mode",
                    "checks on a driver's own address are not supported yet",
                );
            }
            if flag("GRPCUseTLS") {
                refuse(
                    &at("GRPCUseTLS"),
                    "grpc_use_tls",
                    "gRPC checks over TLS are not supported yet",
                );
            }
            if !text("TLSServerName").is_empty() {
                refuse(
                    &at("TLSServerName"),
                    "tls_server_name",
                    "a check's TLS server name is not supported yet",
                );
            }
            if number("FailuresBeforeWarning") != 0 {
                refuse(
                    &at("FailuresBeforeWarning"),
                    "failures_before_warning",
                    "checks turn warning only from a script's exit code 1",
                );
            }
        }
        if let Some(connect) = service.get("Connect").filter(|c| !c.is_null()) {
            refuse_connect_parts(connect, &format!("Services[{i}].Connect"), refuse);
        }
    }
}

/// Drover's mesh runs sidecar proxies and native tasks; gateways, transparent proxying,
/// other namespaces or datacenters as upstreams, and Envoy's own settings are refused.
fn refuse_connect_parts(connect: &Value, at: &str, refuse: &mut impl FnMut(&str, &str, &str)) {
    let set = |v: Option<&Value>| match v {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    };
    if set(connect.get("Gateway")) {
        refuse(
            &format!("{at}.Gateway"),
            "gateway",
            "mesh gateways are not supported yet",
        );
    }
    let proxy = connect.get("SidecarService").and_then(|s| s.get("Proxy"));
    let Some(proxy) = proxy.filter(|p| !p.is_null()) else {
        return;
    };
    let at = format!("{at}.SidecarService.Proxy");
    if set(proxy.get("TransparentProxy")) {
        refuse(
            &format!("{at}.TransparentProxy"),
            "transparent_proxy",
            "transparent proxying is not supported yet",
        );
    }
    if set(proxy.get("Config")) {
        refuse(
            &format!("{at}.Config"),
            "config",
            "Envoy's settings have no meaning for Drover's proxy",
        );
    }
    let upstreams = proxy.get("Upstreams").and_then(Value::as_array);
    for (j, u) in upstreams.into_iter().flatten().enumerate() {
        for (field, block, why) in [
            (
                "Datacenter",
                "datacenter",
                "upstreams in other datacenters are not supported yet",
            ),
            (
                "DestinationNamespace",
                "destination_namespace",
                "upstreams in other namespaces are not supported yet",
            ),
            (
                "DestinationPeer",
                "destination_peer",
                "cluster peering is not supported",
            ),
            (
                "DestinationPartition",
                "destination_partition",
                "admin partitions are not supported",
            ),
            (
                "LocalBindSocketPath",
                "local_bind_socket_path",
                "unix socket upstreams are not supported yet",
            ),
        ] {
            if set(u.get(field)) {
                refuse(&format!("{at}.Upstreams[{j}].{field}"), block, why);
            }
        }
        let gateway_mode = u
            .get("MeshGateway")
            .and_then(|g| g.get("Mode"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if !gateway_mode.is_empty() && gateway_mode != "none" {
            refuse(
                &format!("{at}.Upstreams[{j}].MeshGateway"),
                "mesh_gateway",
                "mesh gateways are not supported yet",
            );
        }
    }
}

/// Host and bridge networking run (docker tasks through their driver's pause container);
/// other modes do not yet.
fn refuse_network_mode(tg: &TaskGroup, refuse: &mut impl FnMut(&str, &str, &str)) {
    for (i, n) in tg.networks.iter().flatten().enumerate() {
        let at = format!("Networks[{i}].Mode");
        match n.mode.as_str() {
            "" | "host" | "bridge" => {}
            other => refuse(
                &at,
                "network",
                &format!("network mode {other:?} is not supported yet (host and bridge are)"),
            ),
        }
    }
}

/// `field (block): why`, the shape every refusal has.
fn refusal(path: &str, block: &str, why: &str) -> String {
    format!("{block} is not supported: {why} ({path})")
}

/// An opaque block counts as given when it is neither absent, null, nor empty.
fn is_set(v: &Option<Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{Task, TaskGroup, UpdateStrategy};
    use serde_json::json;

    fn job_with(tg: TaskGroup) -> Job {
        Job {
            job_type: drover_structs::JOB_TYPE_SERVICE.into(),
            task_groups: vec![tg],
            ..Default::default()
        }
    }

    fn group(task: Task) -> TaskGroup {
        TaskGroup {
            name: "g".into(),
            tasks: vec![task],
            ..Default::default()
        }
    }

    fn task() -> Task {
        Task {
            name: "t".into(),
            ..Default::default()
        }
    }

    #[test]
    fn services_without_checks_or_connect_are_accepted() {
        let mut t = task();
        t.services = Some(json!([{"Name": "web", "PortLabel": "http", "Checks": null}]));
        let mut tg = group(t);
        tg.services = Some(json!([{"Name": "g", "Provider": "consul", "Connect": null}]));
        assert!(refuse_unacted(&job_with(tg)).is_ok());
    }

    #[test]
    fn a_plain_job_with_canonical_defaults_is_accepted() {
        let mut tg = group(task());
        tg.consul = Some(json!({"Namespace": ""}));
        tg.services = Some(json!([]));
        tg.volumes = Some(json!({"data": {"Type": "csi", "Source": "vol"}}));
        assert!(refuse_unacted(&job_with(tg)).is_ok());
    }

    #[test]
    fn bridge_runs_with_any_driver_but_other_modes_are_refused() {
        let net = |mode: &str| drover_structs::NetworkResource {
            mode: mode.into(),
            ..Default::default()
        };
        let mut tg = group(task());
        tg.networks = Some(vec![net("bridge")]);
        assert!(refuse_unacted(&job_with(tg.clone())).is_ok());
        tg.tasks[0].driver = "docker".into();
        assert!(refuse_unacted(&job_with(tg.clone())).is_ok());
        tg.networks = Some(vec![net("cni/mynet")]);
        let e = refuse_unacted(&job_with(tg)).unwrap_err().to_string();
        assert!(
            e.contains("network mode \"cni/mynet\" is not supported"),
            "{e}"
        );
    }

    #[test]
    fn a_template_is_accepted_now_that_the_client_renders_it() {
        let mut t = task();
        t.templates = Some(json!([{"EmbeddedTmpl": "x", "DestPath": "local/x"}]));
        assert!(refuse_unacted(&job_with(group(t))).is_ok());
    }

    #[test]
    fn vault_is_refused_naming_the_task_and_the_field_path() {
        let mut t = task();
        t.vault = Some(json!({"Policies": ["x"]}));
        let e = refuse_unacted(&job_with(group(t))).unwrap_err().to_string();
        assert!(
            e.contains("Task group g task t: vault is not supported")
                && e.contains("(Job.TaskGroups[0].Tasks[0].Vault)"),
            "{e}"
        );
    }

    #[test]
    fn checks_run_but_their_mesh_and_driver_settings_are_refused_with_their_path() {
        let mut t = task();
        t.services = Some(json!([{"Name": "web", "Checks": [
            {"Type": "http", "Path": "/", "Method": "POST", "OnUpdate": "ignore"},
            {"Type": "grpc", "Expose": true, "GRPCUseTLS": true, "AddressMode": "driver"}
        ]}]));
        let e = refuse_unacted(&job_with(group(t))).unwrap_err();
        assert_eq!(e.errors.len(), 2, "{e}");
        let text = e.to_string();
        for path in [
            "Job.TaskGroups[0].Tasks[0].Services[0].Checks[1].GRPCUseTLS",
            "Job.TaskGroups[0].Tasks[0].Services[0].Checks[1].AddressMode",
        ] {
            assert!(text.contains(path), "{path} missing in {text}");
        }
        assert!(!text.contains("Checks[0]"), "{text}");
    }

    #[test]
    fn gateways_connect_extras_vault_and_devices_are_refused_each_with_its_path() {
        let mut t = task();
        t.services = Some(
            json!([{"Name": "web", "Connect": {"SidecarService": {"Proxy": {
                "Config": {"envoy_extra": 1},
                "Upstreams": [{"DestinationName": "db", "LocalBindPort": 8080, "Datacenter": "dc2"}]
            }}}}]),
        );
        t.vault = Some(json!({"Policies": ["x"]}));
        t.resources.devices = Some(vec![json!({"Name": "nvidia/gpu"})]);
        let mut tg = group(t);
        tg.services = Some(json!([{"Name": "plain", "Connect": {"Native": true}},
            {"Name": "g", "Connect": {"Gateway": {"Ingress": {}}}}]));
        let e = refuse_unacted(&job_with(tg)).unwrap_err();
        assert_eq!(e.errors.len(), 5, "{e}");
        let text = e.to_string();
        for path in [
            "Job.TaskGroups[0].Services[1].Connect.Gateway",
            "Job.TaskGroups[0].Tasks[0].Services[0].Connect.SidecarService.Proxy.Config",
            "Job.TaskGroups[0].Tasks[0].Services[0].Connect.SidecarService.Proxy.Upstreams[0].Datacenter",
            "Job.TaskGroups[0].Tasks[0].Vault",
            "Job.TaskGroups[0].Tasks[0].Resources.Devices",
        ] {
            assert!(text.contains(path), "{path} missing from {text}");
        }
    }

    #[test]
    fn host_and_csi_volumes_are_accepted() {
        let mut tg = group(task());
        tg.volumes = Some(json!({
            "data": {"Type": "host", "Source": "data"},
            "vol": {"Type": "csi", "Source": "vol"},
        }));
        assert!(refuse_unacted(&job_with(tg)).is_ok());
    }

    #[test]
    fn update_settings_with_canaries_are_accepted_now_that_deployments_run_them() {
        let mut tg = group(task());
        tg.update = Some(UpdateStrategy {
            max_parallel: 2,
            canary: 1,
            auto_promote: true,
            auto_revert: true,
            ..Default::default()
        });
        assert!(refuse_unacted(&job_with(tg)).is_ok());
    }

    #[test]
    fn system_jobs_with_disconnect_settings_are_refused_naming_the_field() {
        let mut tg = group(task());
        tg.max_client_disconnect = Some(1);
        let mut job = job_with(tg);
        assert!(refuse_unacted(&job).is_ok());
        job.job_type = drover_structs::JOB_TYPE_SYSTEM.into();
        let e = refuse_unacted(&job).unwrap_err().to_string();
        assert!(
            e.contains("max_client_disconnect is not supported for system jobs"),
            "{e}"
        );
    }

    #[test]
    fn a_multiregion_region_with_a_node_pool_is_refused() {
        let mut job = job_with(TaskGroup::default());
        job.multiregion = Some(json!({"Regions": [{"Name": "east", "NodePool": "gpu"}]}));
        let e = refuse_unacted(&job).unwrap_err().to_string();
        assert!(e.contains("(Job.Multiregion.Regions[0].NodePool)"), "{e}");
        job.multiregion = Some(json!({"Regions": [{"Name": "east"}]}));
        assert!(refuse_unacted(&job).is_ok());
    }
}
