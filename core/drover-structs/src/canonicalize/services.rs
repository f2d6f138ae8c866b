//! Services as Nomad registers them: the API's defaults (`Service.Canonicalize` in
//! api/services.go), the conversion to the server's shape (`ApiServicesToStructs`: no `Id`, no
//! service-level `CheckRestart`) and the server's own `Service.Canonicalize` (name
//! interpolation, default check names).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value, json};

use super::{SEC, empty_to_null, is_unset, set_default};

/// `${JOB}`-style references a service name may use (Nomad's `args.ReplaceEnv`).
static NAME_REF: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\$\{([a-zA-Z0-9_\-\.]+)\}").ok());

/// Where a service sits: its job, group and (for task services) task.
pub(super) struct Owner<'a> {
    pub job: &'a str,
    pub group: &'a str,
    pub task: Option<&'a str>,
}

/// Canonicalises a `Services` list in place.
pub(super) fn canonicalize_services(services: Option<&mut Value>, owner: &Owner<'_>) {
    let Some(Value::Array(list)) = services else {
        return;
    };
    for s in list.iter_mut() {
        if let Some(obj) = s.as_object_mut() {
            canonicalize_service(obj, owner);
        }
    }
}

fn interpolate_name(name: &str, owner: &Owner<'_>) -> String {
    let Some(re) = NAME_REF.as_ref() else {
        return name.to_string();
    };
    // Group services are canonicalised by the server with "group" as the task name.
    let task = owner.task.unwrap_or("group");
    re.replace_all(name, |c: &regex::Captures<'_>| match &c[1] {
        "JOB" => owner.job.to_string(),
        "TASKGROUP" => owner.group.to_string(),
        "TASK" => task.to_string(),
        "BASE" => format!("{}-{}-{task}", owner.job, owner.group),
        _ => c[0].to_string(),
    })
    .into_owned()
}

fn canonicalize_service(s: &mut Map<String, Value>, owner: &Owner<'_>) {
    // api.Service.Canonicalize
    let name = s.get("Name").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        let default = match owner.task {
            Some(task) => format!("{}-{}-{task}", owner.job, owner.group),
            None => format!("{}-{}", owner.job, owner.group),
        };
        s.insert("Name".into(), json!(default));
    }
    for (key, default) in [("AddressMode", "auto"), ("OnUpdate", "require_healthy")] {
        if s.get(key).and_then(Value::as_str).unwrap_or("").is_empty() {
            s.insert(key.into(), json!(default));
        }
    }
    if let Some(Value::Object(connect)) = s.get_mut("Connect") {
        canonicalize_connect(connect);
    }
    let service_restart = s.remove("CheckRestart").filter(|v| !v.is_null());
    let on_update = s.get("OnUpdate").cloned().unwrap_or(json!(""));
    if let Some(Value::Array(checks)) = s.get_mut("Checks") {
        for c in checks.iter_mut().filter_map(Value::as_object_mut) {
            let merged = merge_check_restart(service_restart.as_ref(), c.get("CheckRestart"));
            c.insert("CheckRestart".into(), merged);
            for key in ["SuccessBeforePassing", "FailuresBeforeCritical"] {
                if c.get(key).and_then(Value::as_i64).unwrap_or(0) < 0 {
                    c.insert(key.into(), json!(0));
                }
            }
            if c.get("OnUpdate")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                c.insert("OnUpdate".into(), on_update.clone());
            }
            // ApiServicesToStructs: checks of task services belong to that task.
            c.remove("Id");
            if owner.task.is_some() {
                c.insert("TaskName".into(), json!(""));
            }
        }
    }
    // ApiServicesToStructs drops the API-only fields.
    s.remove("Id");

    // structs.Service.Canonicalize
    for key in ["Tags", "CanaryTags", "Checks"] {
        empty_to_null(s, key);
    }
    let name = s
        .get("Name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = interpolate_name(&name, owner);
    s.insert("Name".into(), json!(name));
    if let Some(Value::Array(checks)) = s.get_mut("Checks") {
        for c in checks.iter_mut().filter_map(Value::as_object_mut) {
            empty_to_null(c, "Args");
            empty_to_null(c, "Header");
            if c.get("Name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                c.insert(
                    "Name".into(),
                    json!(format!(
                        "service: {} check",
                        crate::validate::gofmt::quote(&name)
                    )),
                );
            }
        }
    }
}

/// api `CheckRestart.Merge` then `Canonicalize`: the check's values over the service's, a
/// one-second grace by default; `null` when neither is set.
fn merge_check_restart(service: Option<&Value>, check: Option<&Value>) -> Value {
    let check = check.filter(|v| !v.is_null());
    let mut merged = match (service, check) {
        (None, None) => return Value::Null,
        (None, Some(c)) => c.clone(),
        (Some(s), None) => s.clone(),
        (Some(s), Some(c)) => {
            let mut out = s.clone();
            if c.get("Limit").and_then(Value::as_i64).unwrap_or(0) > 0 {
                out["Limit"] = c["Limit"].clone();
            }
            if !is_unset(c.get("Grace")) {
                out["Grace"] = c["Grace"].clone();
            }
            if c.get("IgnoreWarnings")
                .and_then(Value::as_bool)
                .unwrap_or(false)
            {
                out["IgnoreWarnings"] = json!(true);
            }
            out
        }
    };
    if let Some(obj) = merged.as_object_mut() {
        set_default(obj, "Limit", json!(0));
        set_default(obj, "Grace", json!(SEC));
        set_default(obj, "IgnoreWarnings", json!(false));
    }
    merged
}

/// What Nomad's Connect admission hook does for native services: a native service without a
/// task in a group of one task is implemented by that task, and the implementing task gets the
/// `connect-native:<service>` kind.
pub(super) fn assign_connect_native_tasks(g: &mut Map<String, Value>) {
    let only_task = match g.get("Tasks") {
        Some(Value::Array(tasks)) if tasks.len() == 1 => tasks[0]
            .get("Name")
            .and_then(Value::as_str)
            .map(str::to_string),
        _ => None,
    };
    let mut kinds = Vec::new();
    if let Some(Value::Array(services)) = g.get_mut("Services") {
        for s in services.iter_mut().filter_map(Value::as_object_mut) {
            let native = s
                .get("Connect")
                .and_then(|c| c.get("Native"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if !native {
                continue;
            }
            let task = match s.get("TaskName").and_then(Value::as_str).unwrap_or("") {
                "" => match &only_task {
                    Some(t) => {
                        s.insert("TaskName".into(), json!(t));
                        t.clone()
                    }
                    None => continue,
                },
                t => t.to_string(),
            };
            let name = s.get("Name").and_then(Value::as_str).unwrap_or("");
            kinds.push((task, format!("connect-native:{name}")));
        }
    }
    if let Some(Value::Array(tasks)) = g.get_mut("Tasks") {
        for t in tasks.iter_mut().filter_map(Value::as_object_mut) {
            let name = t.get("Name").and_then(Value::as_str).unwrap_or("");
            if let Some((_, kind)) = kinds.iter().find(|(task, _)| task == name) {
                t.insert("Kind".into(), json!(kind));
            }
        }
    }
}

/// Task names and kinds of Connect sidecars (Nomad's `ConnectProxyPrefix`).
pub const CONNECT_PROXY_PREFIX: &str = "connect-proxy";

/// What Nomad's Connect admission hook does for sidecar services: each group service with a
/// `sidecar_service` gets a proxy task `connect-proxy-<service>` of kind
/// `connect-proxy:<service>` (a prestart sidecar running Drover's proxy, merged with the
/// service's `sidecar_task`), unless the group already has a task of that kind, and a port
/// `connect-proxy-<service>` (`to = -1`) on the group's network unless the sidecar service
/// names its own. A check with `expose = true` on such a service gets the expose path it
/// needs (Nomad's expose-check hook).
pub(super) fn inject_connect_sidecars(g: &mut Map<String, Value>) {
    let mut proxies = Vec::new();
    let networks = g.get("Networks").cloned();
    if let Some(Value::Array(services)) = g.get_mut("Services") {
        for s in services.iter_mut().filter_map(Value::as_object_mut) {
            let name = s
                .get("Name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let service_port = s
                .get("PortLabel")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let checks = s.get("Checks").cloned();
            let Some(Value::Object(connect)) = s.get_mut("Connect") else {
                continue;
            };
            let sidecar_task = connect.get("SidecarTask").filter(|t| !t.is_null()).cloned();
            let Some(Value::Object(sidecar)) = connect.get_mut("SidecarService") else {
                continue;
            };
            let port = match sidecar.get("Port").and_then(Value::as_str) {
                Some(p) if !p.is_empty() => p.to_string(),
                _ => format!("{CONNECT_PROXY_PREFIX}-{name}"),
            };
            add_expose_paths(sidecar, checks.as_ref(), &service_port, networks.as_ref());
            proxies.push((name, port, sidecar_task));
        }
    }
    for (service, port, overrides) in proxies {
        let kind = format!("{CONNECT_PROXY_PREFIX}:{service}");
        let has_task = match g.get("Tasks") {
            Some(Value::Array(tasks)) => tasks
                .iter()
                .any(|t| t.get("Kind").and_then(Value::as_str) == Some(kind.as_str())),
            _ => false,
        };
        if !has_task {
            let mut task = sidecar_task(&service);
            if let (Some(Value::Object(base)), Some(Value::Object(over))) =
                (Some(&mut task), overrides.as_ref())
            {
                merge_sidecar_task(base, over);
            }
            match g.get_mut("Tasks") {
                Some(Value::Array(tasks)) => tasks.push(task),
                _ => {
                    g.insert("Tasks".into(), json!([task]));
                }
            }
        }
        add_group_port(g, &port);
    }
}

/// Nomad's `newConnectSidecarTask`, running Drover's proxy on the built-in `connect_proxy`
/// driver (the agent's own binary with the configuration the client writes; it takes no
/// config).
fn sidecar_task(service: &str) -> Value {
    json!({
        "Name": format!("{CONNECT_PROXY_PREFIX}-{service}"),
        "Kind": format!("{CONNECT_PROXY_PREFIX}:{service}"),
        "Driver": "connect_proxy",
        "ShutdownDelay": 5 * SEC,
        "LogConfig": {"MaxFiles": 2, "MaxFileSizeMB": 2},
        "Resources": {"CPU": 250, "MemoryMB": 128},
        "Lifecycle": {"Hook": "prestart", "Sidecar": true},
    })
}

/// Nomad's `SidecarTask.MergeIntoTask`: what the user set replaces the defaults (the config
/// and env maps key by key).
fn merge_sidecar_task(task: &mut Map<String, Value>, over: &Map<String, Value>) {
    for (key, value) in over {
        if is_unset(Some(value)) {
            continue;
        }
        match (key.as_str(), task.get_mut(key), value) {
            ("Config" | "Env" | "Meta", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (k, v) in theirs {
                    mine.insert(k.clone(), v.clone());
                }
            }
            ("Resources" | "LogConfig", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (k, v) in theirs.iter().filter(|(_, v)| !is_unset(Some(v))) {
                    mine.insert(k.clone(), v.clone());
                }
            }
            _ => {
                task.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Adds dynamic port `label` (`to = -1`) to the group's first network, unless a network
/// already has a port of that label.
fn add_group_port(g: &mut Map<String, Value>, label: &str) {
    let Some(Value::Array(networks)) = g.get_mut("Networks") else {
        return;
    };
    let has = networks.iter().any(|n| {
        ["ReservedPorts", "DynamicPorts"].iter().any(|k| {
            n.get(*k).and_then(Value::as_array).is_some_and(|ports| {
                ports
                    .iter()
                    .any(|p| p.get("Label").and_then(Value::as_str) == Some(label))
            })
        })
    });
    if has {
        return;
    }
    let Some(Value::Object(first)) = networks.first_mut() else {
        return;
    };
    let port = json!({"Label": label, "Value": 0, "To": -1, "HostNetwork": "default"});
    match first.get_mut("DynamicPorts") {
        Some(Value::Array(ports)) => ports.push(port),
        _ => {
            first.insert("DynamicPorts".into(), json!([port]));
        }
    }
}

/// Nomad's `exposePathsHook`: an `http` or `grpc` check with a path and `expose = true`
/// gets an expose path in the sidecar's proxy: the check's path and protocol, the port the
/// service listens on inside the namespace as `local_path_port` (its port label's static value
/// or `to`, else the label as a number; 0 when neither, which validation refuses), and the
/// check's port label as `listener_port`. An identical path already there is not added twice.
fn add_expose_paths(
    sidecar: &mut Map<String, Value>,
    checks: Option<&Value>,
    service_port: &str,
    networks: Option<&Value>,
) {
    let local_port = local_service_port(service_port, networks);
    let exposed: Vec<Value> = checks
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("Expose").and_then(Value::as_bool) == Some(true))
        .filter(|c| {
            let kind = c.get("Type").and_then(Value::as_str).unwrap_or("");
            let path = c.get("Path").and_then(Value::as_str).unwrap_or("");
            matches!(kind.to_ascii_lowercase().as_str(), "http" | "grpc") && path.starts_with('/')
        })
        .map(|c| {
            let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            json!({
                "Path": text("Path"),
                "Protocol": text("Protocol"),
                "LocalPathPort": local_port,
                "ListenerPort": text("PortLabel"),
            })
        })
        .collect();
    if exposed.is_empty() {
        return;
    }
    let proxy = sidecar.entry("Proxy").or_insert(Value::Null);
    if !proxy.is_object() {
        *proxy = json!({});
    }
    let Some(proxy) = proxy.as_object_mut() else {
        return;
    };
    let expose = proxy.entry("ExposeConfig").or_insert(Value::Null);
    if !expose.is_object() {
        *expose = json!({});
    }
    let Some(expose) = expose.as_object_mut() else {
        return;
    };
    let paths = expose.entry("Path").or_insert(Value::Null);
    if !paths.is_array() {
        *paths = json!([]);
    }
    if let Some(paths) = paths.as_array_mut() {
        for p in exposed {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
    }
}

/// The port a service listens on inside its namespace: its label's static value or `to` on
/// the group's networks, else the label itself as a number, else 0.
fn local_service_port(label: &str, networks: Option<&Value>) -> i64 {
    let ports = networks
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|n| {
            ["ReservedPorts", "DynamicPorts"]
                .into_iter()
                .filter_map(move |k| n.get(k).and_then(Value::as_array))
                .flatten()
        });
    for p in ports {
        if p.get("Label").and_then(Value::as_str) != Some(label) {
            continue;
        }
        let value = p.get("Value").and_then(Value::as_i64).unwrap_or(0);
        let to = p.get("To").and_then(Value::as_i64).unwrap_or(0);
        return if value > 0 { value } else { to.max(0) };
    }
    label.parse().unwrap_or(0)
}

/// api `ConsulConnect.Canonicalize` and the blocks under it.
fn canonicalize_connect(c: &mut Map<String, Value>) {
    if let Some(Value::Object(sidecar)) = c.get_mut("SidecarService") {
        empty_to_null(sidecar, "Tags");
        if let Some(Value::Object(proxy)) = sidecar.get_mut("Proxy") {
            canonicalize_proxy(proxy);
        }
    }
    if let Some(Value::Object(task)) = c.get_mut("SidecarTask") {
        empty_to_null(task, "Config");
        empty_to_null(task, "Env");
        empty_to_null(task, "Meta");
        let mut res = match task.remove("Resources") {
            Some(Value::Object(r)) => r,
            _ => Map::new(),
        };
        super::canonicalize_resources(&mut res);
        task.insert("Resources".into(), Value::Object(res));
        let logs = super::merge_onto(
            json!({"MaxFiles": 10, "MaxFileSizeMB": 10}),
            task.get("LogConfig"),
        );
        task.insert("LogConfig".into(), logs);
        set_default(task, "KillTimeout", json!(5 * SEC));
        set_default(task, "ShutdownDelay", json!(0));
    }
    if let Some(Value::Object(gateway)) = c.get_mut("Gateway") {
        if let Some(Value::Object(proxy)) = gateway.get_mut("Proxy") {
            set_default(proxy, "ConnectTimeout", json!(5 * SEC));
            empty_to_null(proxy, "Config");
            // The server's bind addresses are a map (never null) of address and port.
            let binds: Map<String, Value> = match proxy.get("EnvoyGatewayBindAddresses") {
                Some(Value::Object(b)) => b
                    .iter()
                    .map(|(k, v)| {
                        let address = v.get("Address").cloned().unwrap_or(json!(""));
                        let port = v.get("Port").cloned().unwrap_or(json!(0));
                        (k.clone(), json!({"Address": address, "Port": port}))
                    })
                    .collect(),
                _ => Map::new(),
            };
            proxy.insert("EnvoyGatewayBindAddresses".into(), Value::Object(binds));
        }
        if let Some(Value::Object(ingress)) = gateway.get_mut("Ingress") {
            empty_to_null(ingress, "Listeners");
            if let Some(Value::Array(listeners)) = ingress.get_mut("Listeners") {
                for l in listeners.iter_mut().filter_map(Value::as_object_mut) {
                    if l.get("Protocol")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .is_empty()
                    {
                        l.insert("Protocol".into(), json!("tcp"));
                    }
                    empty_to_null(l, "Services");
                    if let Some(Value::Array(services)) = l.get_mut("Services") {
                        for s in services.iter_mut().filter_map(Value::as_object_mut) {
                            empty_to_null(s, "Hosts");
                        }
                    }
                }
            }
        }
    }
}

fn canonicalize_proxy(p: &mut Map<String, Value>) {
    if let Some(Value::Object(expose)) = p.get_mut("ExposeConfig") {
        empty_to_null(expose, "Path");
    }
    empty_to_null(p, "Upstreams");
    empty_to_null(p, "Config");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(task: Option<&'static str>) -> Owner<'static> {
        Owner {
            job: "shop",
            group: "web",
            task,
        }
    }

    #[test]
    fn unnamed_services_get_nomads_default_names() {
        let mut v = json!([{}]);
        canonicalize_services(Some(&mut v), &owner(Some("nginx")));
        assert_eq!(v[0]["Name"], "shop-web-nginx");
        let mut v = json!([{}]);
        canonicalize_services(Some(&mut v), &owner(None));
        assert_eq!(v[0]["Name"], "shop-web");
        assert_eq!(v[0]["AddressMode"], "auto");
        assert_eq!(v[0]["OnUpdate"], "require_healthy");
    }

    #[test]
    fn names_interpolate_job_group_and_task() {
        let mut v = json!([{"Name": "${JOB}-${TASKGROUP}-${TASK}-x"}, {"Name": "${BASE}"},
            {"Name": "${NOMAD_META_x}"}]);
        canonicalize_services(Some(&mut v), &owner(None));
        assert_eq!(v[0]["Name"], "shop-web-group-x");
        assert_eq!(v[1]["Name"], "shop-web-group");
        assert_eq!(v[2]["Name"], "${NOMAD_META_x}");
    }

    #[test]
    fn checks_inherit_restart_and_on_update_and_get_default_names() {
        let mut v = json!([{"Name": "api", "Id": "", "OnUpdate": "ignore_warnings",
            "CheckRestart": {"Limit": 3, "Grace": null, "IgnoreWarnings": true},
            "Tags": [],
            "Checks": [{"Id": "", "Name": "", "Args": [], "Header": {}, "TaskName": "t",
                "SuccessBeforePassing": -1, "CheckRestart": {"Limit": 0, "Grace": 2_000_000_000i64}}]}]);
        canonicalize_services(Some(&mut v), &owner(Some("t")));
        let s = &v[0];
        assert!(s.get("Id").is_none());
        assert!(s.get("CheckRestart").is_none());
        assert!(s["Tags"].is_null());
        let c = &s["Checks"][0];
        assert_eq!(c["Name"], "service: \"api\" check");
        assert_eq!(
            c["CheckRestart"],
            json!({"Limit": 3, "Grace": 2_000_000_000i64, "IgnoreWarnings": true})
        );
        assert_eq!(c["OnUpdate"], "ignore_warnings");
        assert_eq!(c["SuccessBeforePassing"], 0);
        assert_eq!(c["TaskName"], "");
        assert!(c["Args"].is_null() && c["Header"].is_null());
        assert!(c.get("Id").is_none());
    }

    #[test]
    fn group_checks_keep_their_task_and_get_a_default_grace() {
        let mut v = json!([{"Name": "api", "Checks": [{"Name": "c", "TaskName": "t",
            "CheckRestart": {"Limit": 2}}]}]);
        canonicalize_services(Some(&mut v), &owner(None));
        let c = &v[0]["Checks"][0];
        assert_eq!(c["TaskName"], "t");
        assert_eq!(c["CheckRestart"]["Grace"], SEC);
    }

    #[test]
    fn connect_blocks_get_their_defaults() {
        let mut v = json!([{"Name": "api", "Connect": {
            "SidecarService": {"Tags": [], "Proxy": {"Upstreams": [], "Config": {}}},
            "SidecarTask": {"Driver": "docker"},
            "Gateway": {"Proxy": {}, "Ingress": {"Listeners": [{"Port": 80, "Services": [{"Name": "a", "Hosts": []}]}]}}
        }}]);
        canonicalize_services(Some(&mut v), &owner(None));
        let c = &v[0]["Connect"];
        assert!(c["SidecarService"]["Tags"].is_null());
        assert!(c["SidecarService"]["Proxy"]["Upstreams"].is_null());
        assert_eq!(c["SidecarTask"]["Resources"]["CPU"], 100);
        assert_eq!(c["SidecarTask"]["Resources"]["MemoryMB"], 300);
        assert_eq!(c["SidecarTask"]["KillTimeout"], 5 * SEC);
        assert_eq!(c["SidecarTask"]["LogConfig"]["MaxFiles"], 10);
        assert_eq!(c["Gateway"]["Proxy"]["ConnectTimeout"], 5 * SEC);
        assert_eq!(
            c["Gateway"]["Proxy"]["EnvoyGatewayBindAddresses"],
            json!({})
        );
        assert_eq!(c["Gateway"]["Ingress"]["Listeners"][0]["Protocol"], "tcp");
        assert!(c["Gateway"]["Ingress"]["Listeners"][0]["Services"][0]["Hosts"].is_null());
    }

    #[test]
    fn native_services_are_bound_to_the_only_task() {
        let mut g = json!({"Services": [{"Name": "api", "Connect": {"Native": true}}],
            "Tasks": [{"Name": "server"}]});
        assign_connect_native_tasks(g.as_object_mut().unwrap());
        assert_eq!(g["Services"][0]["TaskName"], "server");
        assert_eq!(g["Tasks"][0]["Kind"], "connect-native:api");
        let mut g = json!({"Services": [{"Name": "api", "Connect": {"Native": true}}],
            "Tasks": [{"Name": "a"}, {"Name": "b"}]});
        assign_connect_native_tasks(g.as_object_mut().unwrap());
        assert_eq!(g["Services"][0].get("TaskName"), None);
    }
}
