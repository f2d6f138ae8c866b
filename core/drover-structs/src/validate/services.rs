//! Service, check and Consul Connect rules of Nomad 1.1: `Service.Validate`,
//! `ServiceCheck.validate`, `ConsulConnect.Validate` and the group- and task-level
//! `validateServices`. Services are opaque JSON in the model; they are read as Nomad's server
//! structs after canonicalisation (check names defaulted, durations in nanoseconds).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::gofmt::{duration, quote};
use super::json::{bool_of, int_of, items, list, set, str_of};
use crate::multierror::MultiError;
use crate::resources::NetworkResource;

const MIN_CHECK_INTERVAL: i64 = 1_000_000_000;

/// `${...}` runtime references, replaced by a placeholder before a service name is checked.
static ENV_REF: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\$\{[a-zA-Z0-9_\-\.]+\}").ok());

/// RFC 1123 labels of at most 63 characters.
static SERVICE_NAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^(?i:[a-z0-9]|[a-z0-9][a-z0-9\-]{0,61}[a-z0-9])$").ok());

fn valid_service_name(name: &str) -> bool {
    // Both patterns are constants; they compile (the tests exercise them).
    let (Some(env), Some(re)) = (ENV_REF.as_ref(), SERVICE_NAME.as_ref()) else {
        return true;
    };
    re.is_match(&env.replace_all(name, "ENV-VAR"))
}

fn requires_port(check: &Value) -> bool {
    matches!(str_of(check, "Type"), "grpc" | "http" | "tcp")
}

fn has_sidecar(service: &Value) -> bool {
    set(service, "Connect").is_some_and(|c| set(c, "SidecarService").is_some())
}

/// Nomad's `Service.Validate`.
pub(crate) fn validate_service(s: &Value) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    let name = str_of(s, "Name");
    if !valid_service_name(name) {
        m.push(format!(
            "Service name must be valid per RFC 1123 and can contain only alphanumeric characters or dashes: {}",
            quote(name)
        ));
    }
    match str_of(s, "AddressMode") {
        "" | "auto" | "host" | "driver" | "alloc" => {}
        other => m.push(format!(
            "Service address_mode must be \"auto\", \"host\", or \"driver\"; not {}",
            quote(other)
        )),
    }
    match str_of(s, "OnUpdate") {
        "" | "require_healthy" | "ignore_warnings" | "ignore" => {}
        other => m.push(format!(
            "Service on_update must be \"require_healthy\", \"ignore_warnings\", or \"ignore\"; not {}",
            quote(other)
        )),
    }
    // `provider` arrived after Nomad 1.1; this is how later versions word it.
    match str_of(s, "Provider") {
        "" | "consul" | "nomad" => {}
        other => m.push(format!(
            "Service provider must be \"consul\", or \"nomad\"; not {}",
            quote(other)
        )),
    }
    let port = str_of(s, "PortLabel");
    for c in list(s, "Checks") {
        let check_name = str_of(c, "Name");
        if port.is_empty() && str_of(c, "PortLabel").is_empty() && requires_port(c) {
            m.push(format!(
                "Check {check_name} invalid: check requires a port but neither check nor service {} have a port",
                quote(name)
            ));
            continue;
        }
        if str_of(c, "Type") == "tcp" && has_sidecar(s) {
            m.push(format!(
                "Check {check_name} invalid: tcp checks are not valid for Connect enabled services"
            ));
            continue;
        }
        if let Err(e) = validate_check(c) {
            m.push(format!("Check {check_name} invalid: {e}"));
        }
    }
    if let Some(connect) = set(s, "Connect") {
        if let Err(e) = validate_connect(connect) {
            m.push(e);
        }
        if bool_of(connect, "Native") && str_of(s, "TaskName").is_empty() {
            m.push(format!(
                "Service {name} is Connect Native and requires setting the task"
            ));
        }
    }
    m.into_result()
}

/// Go's `url.Parse` accepting the path, and whether the result is absolute (has a scheme).
fn http_path(path: &str) -> Result<bool, ()> {
    if path.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(());
    }
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: Option<&u8>| b.is_some_and(u8::is_ascii_hexdigit);
            if !(hex(bytes.get(i + 1)) && hex(bytes.get(i + 2))) {
                return Err(());
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    match path.split_once(':') {
        Some(("", _)) => Err(()),
        Some((scheme, _))
            if scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            Ok(true)
        }
        Some((before, _)) if !before.contains('/') => Err(()),
        _ => Ok(false),
    }
}

/// Nomad's `ServiceCheck.validate`: the first problem only, as Nomad returns.
fn validate_check(c: &Value) -> Result<(), String> {
    let check_type = str_of(c, "Type").to_ascii_lowercase();
    match check_type.as_str() {
        "grpc" | "tcp" => {}
        "http" => {
            let path = str_of(c, "Path");
            if path.is_empty() {
                return Err("http type must have a valid http path".into());
            }
            match http_path(path) {
                Err(()) => return Err("http type must have a valid http path".into()),
                Ok(true) => return Err("http type must have a relative http path".into()),
                Ok(false) => {}
            }
        }
        "script" => {
            if str_of(c, "Command").is_empty() {
                return Err("script type must have a valid script path".into());
            }
        }
        _ => {
            return Err(format!(
                "invalid type ({}), must be one of \"http\", \"tcp\", or \"script\" type",
                quote(str_of(c, "Type"))
            ));
        }
    }
    let min = duration(MIN_CHECK_INTERVAL);
    let interval = int_of(c, "Interval");
    if interval == 0 {
        return Err(format!(
            "missing required value interval. Interval cannot be less than {min}"
        ));
    } else if interval < MIN_CHECK_INTERVAL {
        return Err(format!(
            "interval ({}) cannot be lower than {min}",
            duration(interval)
        ));
    }
    let timeout = int_of(c, "Timeout");
    if timeout == 0 {
        return Err(format!(
            "missing required value timeout. Timeout cannot be less than {min}"
        ));
    } else if timeout < MIN_CHECK_INTERVAL {
        return Err(format!(
            "timeout ({}) is lower than required minimum timeout {min}",
            duration(timeout)
        ));
    }
    match str_of(c, "InitialStatus") {
        "" | "passing" | "warning" | "critical" => {}
        other => {
            return Err(format!(
                "invalid initial check state ({other}), must be one of \"passing\", \"warning\", \"critical\" or empty"
            ));
        }
    }
    match str_of(c, "AddressMode") {
        "" | "host" | "driver" | "alloc" => {}
        "auto" => {
            return Err("invalid address_mode \"auto\" - auto only valid for services".into());
        }
        other => return Err(format!("invalid address_mode {}", quote(other))),
    }
    let on_update = str_of(c, "OnUpdate");
    match on_update {
        "" | "require_healthy" | "ignore_warnings" | "ignore" => {}
        other => {
            return Err(format!(
                "on_update must be \"require_healthy\", \"ignore_warnings\", or \"ignore\"; got {}",
                quote(other)
            ));
        }
    }
    if let Some(cr) = set(c, "CheckRestart") {
        if on_update == "ignore" {
            return Err(format!(
                "on_update value {} is not compatible with check_restart",
                quote(on_update)
            ));
        }
        let ignore_warnings = bool_of(cr, "IgnoreWarnings");
        if !ignore_warnings && on_update == "ignore_warnings" {
            return Err(format!(
                "on_update value {} not supported with check_restart ignore_warnings value \"{ignore_warnings}\"",
                quote(on_update)
            ));
        }
    }
    if bool_of(c, "Expose") && !matches!(check_type.as_str(), "grpc" | "http") {
        return Err("expose may only be set on HTTP or gRPC checks".into());
    }
    let pass_fail = matches!(str_of(c, "Type"), "tcp" | "http" | "grpc");
    let success = int_of(c, "SuccessBeforePassing");
    if success < 0 {
        return Err("success_before_passing must be non-negative".into());
    } else if success > 0 && !pass_fail {
        return Err(format!(
            "success_before_passing not supported for check of type {}",
            quote(str_of(c, "Type"))
        ));
    }
    let failures = int_of(c, "FailuresBeforeCritical");
    if failures < 0 {
        return Err("failures_before_critical must be non-negative".into());
    } else if failures > 0 && !pass_fail {
        return Err(format!(
            "failures_before_critical not supported for check of type {}",
            quote(str_of(c, "Type"))
        ));
    }
    if let Some(cr) = set(c, "CheckRestart") {
        let mut m = MultiError::new();
        let limit = int_of(cr, "Limit");
        if limit < 0 {
            m.push(format!(
                "limit must be greater than or equal to 0 but found {limit}"
            ));
        }
        let grace = int_of(cr, "Grace");
        if grace < 0 {
            m.push(format!(
                "grace period must be greater than or equal to 0 but found {grace}"
            ));
        }
        m.into_result().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Nomad's `ConsulConnect.Validate`: exactly one of native, sidecar or gateway.
fn validate_connect(c: &Value) -> Result<(), String> {
    let sidecar = set(c, "SidecarService").is_some();
    let native = bool_of(c, "Native");
    let gateway = set(c, "Gateway");
    let kinds = [sidecar, native, gateway.is_some()]
        .iter()
        .filter(|x| **x)
        .count();
    if kinds == 0 {
        return Err("Consul Connect must be native or use a sidecar service".into());
    }
    if kinds != 1 {
        return Err(
            "Consul Connect must be exclusively native, make use of a sidecar, or represent a Gateway"
                .into(),
        );
    }
    match gateway {
        Some(g) => validate_gateway(g),
        None => Ok(()),
    }
}

fn validate_gateway(g: &Value) -> Result<(), String> {
    if let Some(p) = set(g, "Proxy") {
        if set(p, "ConnectTimeout").is_none() {
            return Err("Consul Gateway Proxy connection_timeout must be set".into());
        }
        match str_of(p, "EnvoyDNSDiscoveryType") {
            "" | "STRICT_DNS" | "LOGICAL_DNS" => {}
            _ => {
                return Err(
                    "Consul Gateway Proxy Envoy DNS Discovery type must be STRICT_DNS or LOGICAL_DNS"
                        .into(),
                );
            }
        }
        if let Some(Value::Object(binds)) = set(p, "EnvoyGatewayBindAddresses") {
            for addr in binds.values().filter(|a| !a.is_null()) {
                if str_of(addr, "Address").is_empty() {
                    return Err("Consul Gateway Bind Address must be set".into());
                }
                let port = int_of(addr, "Port");
                if port <= 0 && port != -1 {
                    return Err("Consul Gateway Bind Address must set valid Port".into());
                }
            }
        }
    }
    if let Some(ingress) = set(g, "Ingress") {
        let listeners = list(ingress, "Listeners");
        if listeners.is_empty() {
            return Err("Consul Ingress Gateway requires at least one listener".into());
        }
        for l in listeners {
            if int_of(l, "Port") <= 0 {
                return Err("Consul Ingress Listener requires valid Port".into());
            }
            let protocol = str_of(l, "Protocol");
            if !matches!(protocol, "http" | "tcp") {
                return Err(format!(
                    "Consul Ingress Listener requires protocol of \"http\" or \"tcp\", got {}",
                    quote(protocol)
                ));
            }
            let services = list(l, "Services");
            if services.is_empty() {
                return Err("Consul Ingress Listener requires one or more services".into());
            }
            for s in services {
                validate_ingress_service(s, protocol == "http")?;
            }
        }
    }
    if let Some(term) = set(g, "Terminating") {
        let services = list(term, "Services");
        if services.is_empty() {
            return Err("Consul Terminating Gateway requires at least one service".into());
        }
        for s in services {
            validate_linked_service(s)?;
        }
    }
    let kinds = ["Ingress", "Terminating", "Mesh"]
        .iter()
        .filter(|k| set(g, k).is_some())
        .count();
    if kinds != 1 {
        return Err("One Consul Gateway Configuration Entry must be set".into());
    }
    Ok(())
}

fn validate_ingress_service(s: &Value, http: bool) -> Result<(), String> {
    let name = str_of(s, "Name");
    if name.is_empty() {
        return Err("Consul Ingress Service requires a name".into());
    }
    let hosts = list(s, "Hosts");
    if http {
        if name != "*" && hosts.is_empty() {
            return Err(
                "Consul Ingress Service requires one or more hosts when using HTTP protocol".into(),
            );
        }
    } else {
        if name == "*" {
            return Err(
                "Consul Ingress Service supports wildcard names only with HTTP protocol".into(),
            );
        }
        if !hosts.is_empty() {
            return Err(
                "Consul Ingress Service supports hosts only when using HTTP protocol".into(),
            );
        }
    }
    Ok(())
}

fn validate_linked_service(s: &Value) -> Result<(), String> {
    if str_of(s, "Name").is_empty() {
        return Err("Consul Linked Service requires Name".into());
    }
    let ca = !str_of(s, "CAFile").is_empty();
    let cert = !str_of(s, "CertFile").is_empty();
    let key = !str_of(s, "KeyFile").is_empty();
    let sni = !str_of(s, "SNI").is_empty();
    if (cert || key) && !ca {
        return Err("Consul Linked Service TLS requires CAFile".into());
    }
    if cert != key {
        return Err("Consul Linked Service TLS Cert and Key must both be set".into());
    }
    if sni && !ca {
        return Err("Consul Linked Service TLS SNI requires CAFile".into());
    }
    Ok(())
}

/// A task's name and services, as the group-level checks see them.
pub(crate) struct TaskServices<'a> {
    pub name: &'a str,
    pub services: Option<&'a Value>,
}

/// Nomad's `TaskGroup.validateServices`: group services valid, no duplicates with task
/// services, check `task` references only on group services and to tasks that exist.
pub(crate) fn validate_group_services(
    group_services: Option<&Value>,
    tasks: &[TaskServices<'_>],
) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    let mut known_tasks = BTreeSet::new();
    let mut known_services = BTreeSet::new();
    for t in tasks {
        known_tasks.insert(t.name);
        for s in items(t.services) {
            let key = format!("{}{}", str_of(s, "Name"), str_of(s, "PortLabel"));
            if known_services.contains(&key) {
                m.push(format!("Service {} is duplicate", str_of(s, "Name")));
            }
            for c in list(s, "Checks") {
                if !str_of(c, "TaskName").is_empty() {
                    m.push(format!(
                        "Check {} is invalid: only task group service checks can be assigned tasks",
                        str_of(c, "Name")
                    ));
                }
            }
            known_services.insert(key);
        }
    }
    for (i, s) in items(group_services).iter().enumerate() {
        let name = str_of(s, "Name");
        if let Err(e) = validate_service(s) {
            m.push(format!("Service[{i}] {name} validation failed: {e}"));
            continue;
        }
        if str_of(s, "AddressMode") == "driver" {
            m.push(format!(
                "service {} cannot use address_mode=\"driver\", only services defined in a \"task\" block can use this mode",
                quote(name)
            ));
        }
        let key = format!("{name}{}", str_of(s, "PortLabel"));
        if known_services.contains(&key) {
            m.push(format!("Service {name} is duplicate"));
        }
        known_services.insert(key);
        for c in list(s, "Checks") {
            let task = str_of(c, "TaskName");
            if task.is_empty() {
                continue;
            }
            let check_name = str_of(c, "Name");
            if !matches!(str_of(c, "Type"), "script" | "grpc") {
                m.push(format!(
                    "Check {check_name} invalid: only script and gRPC checks should have tasks"
                ));
            }
            if str_of(c, "AddressMode") == "driver" {
                // Nomad names the service here, not the check.
                m.push(format!(
                    "Check {} invalid: cannot use address_mode=\"driver\", only checks defined in a \"task\" service block can use this mode",
                    quote(name)
                ));
            }
            if !known_tasks.contains(task) {
                m.push(format!(
                    "Check {check_name} invalid: refers to non-existent task {task}"
                ));
            }
        }
    }
    m.into_result()
}

/// Nomad's `validateScriptChecksInGroupServices`: script checks of group services must name
/// the task to run in.
pub(crate) fn validate_group_script_checks(
    group: &str,
    group_services: Option<&Value>,
) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    for s in items(group_services) {
        if !str_of(s, "TaskName").is_empty() {
            continue;
        }
        for c in list(s, "Checks") {
            if str_of(c, "Type") == "script" && str_of(c, "TaskName").is_empty() {
                m.push(format!(
                    "Service [{group}]->{} or Check {} must specify task parameter",
                    str_of(s, "Name"),
                    str_of(c, "Name")
                ));
            }
        }
    }
    m.into_result()
}

/// Nomad's task-level `validateServices`: valid services, no group-only features, unique
/// names and checks, and every referenced port label defined by the group's first network or
/// the task's own networks.
pub(crate) fn validate_task_services(
    services: Option<&Value>,
    group_networks: Option<&Vec<NetworkResource>>,
    task_networks: Option<&Vec<NetworkResource>>,
) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    let mut service_ports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add_port = |label: &str, service: &str| {
        service_ports
            .entry(label.to_string())
            .or_default()
            .insert(service.to_string());
    };
    let mut known = BTreeSet::new();
    for (i, s) in items(services).iter().enumerate() {
        let name = str_of(s, "Name");
        if let Err(e) = validate_service(s) {
            m.push(format!(
                "service[{i}] {} validation failed: {e}",
                quote(name)
            ));
        }
        let address_mode = str_of(s, "AddressMode");
        if address_mode == "alloc" {
            m.push(format!(
                "service {} cannot use address_mode=\"alloc\", only services defined in a \"group\" block can use this mode",
                quote(name)
            ));
        }
        let port = str_of(s, "PortLabel");
        if !known.insert(format!("{name}{port}")) {
            m.push(format!("service {} is duplicate", quote(name)));
        }
        // Numeric ports are fine for address_mode = "driver"; labels must exist.
        let numeric_driver_port = address_mode == "driver" && port.parse::<i64>().is_ok();
        if !port.is_empty() && !numeric_driver_port {
            add_port(port, name);
        }
        if set(s, "Connect").is_some() {
            m.push(format!(
                "service {} cannot have \"connect\" block, only services defined in a \"group\" block can",
                quote(name)
            ));
        }
        let mut known_checks = BTreeSet::new();
        for c in list(s, "Checks") {
            let check_name = str_of(c, "Name");
            if !known_checks.insert(check_name) {
                m.push(format!("check {} is duplicate", quote(check_name)));
            }
            if str_of(c, "AddressMode") == "alloc" {
                // Nomad names the service here, not the check.
                m.push(format!(
                    "check {} cannot use address_mode=\"alloc\", only checks defined in a \"group\" service block can use this mode",
                    quote(name)
                ));
            }
            if !requires_port(c) {
                continue;
            }
            let effective = match str_of(c, "PortLabel") {
                "" => port,
                p => p,
            };
            if effective.is_empty() {
                m.push(format!("check {} is missing a port", quote(check_name)));
                continue;
            }
            match effective.parse::<i64>() {
                Ok(n) if str_of(c, "AddressMode") == "driver" => {
                    if n <= 0 {
                        m.push(format!(
                            "check {} has invalid numeric port {n}",
                            quote(check_name)
                        ));
                    }
                }
                Ok(n) => m.push(format!(
                    "check {} cannot use a numeric port {n} without setting address_mode=\"driver\"",
                    quote(check_name)
                )),
                Err(_) => add_port(effective, name),
            }
        }
    }
    let mut labels = BTreeSet::new();
    if let Some(first) = group_networks.and_then(|n| n.first()) {
        labels.extend(first.all_ports().map(|p| p.label.as_str()));
    }
    for n in task_networks.into_iter().flatten() {
        labels.extend(n.all_ports().map(|p| p.label.as_str()));
    }
    for (label, services) in &service_ports {
        if !labels.contains(label.as_str()) {
            let names: Vec<&str> = services.iter().map(String::as_str).collect();
            m.push(format!(
                "port label {} referenced by services {} does not exist",
                quote(label),
                names.join(", ")
            ));
        }
    }
    m.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(r: Result<(), MultiError>) -> Vec<String> {
        r.err().map(|e| e.errors).unwrap_or_default()
    }

    fn check(extra: Value) -> Value {
        let mut c = json!({"Name": "alive", "Type": "http", "Path": "/health",
            "Interval": 10_000_000_000i64, "Timeout": 2_000_000_000i64});
        if let (Some(o), Value::Object(e)) = (c.as_object_mut(), extra) {
            o.extend(e);
        }
        c
    }

    #[test]
    fn service_names_follow_rfc_1123_with_runtime_references_allowed() {
        assert!(validate_service(&json!({"Name": "web-${NOMAD_ALLOC_INDEX}"})).is_ok());
        assert_eq!(
            errors(validate_service(&json!({"Name": "web_api"}))),
            [
                "Service name must be valid per RFC 1123 and can contain only alphanumeric characters or dashes: \"web_api\""
            ]
        );
    }

    #[test]
    fn address_mode_on_update_and_provider_are_enumerations() {
        assert_eq!(
            errors(validate_service(
                &json!({"Name": "web", "AddressMode": "bridge",
                "OnUpdate": "never", "Provider": "etcd"})
            )),
            [
                "Service address_mode must be \"auto\", \"host\", or \"driver\"; not \"bridge\"",
                "Service on_update must be \"require_healthy\", \"ignore_warnings\", or \"ignore\"; not \"never\"",
                "Service provider must be \"consul\", or \"nomad\"; not \"etcd\""
            ]
        );
    }

    #[test]
    fn checks_need_a_port_a_path_and_sane_timing() {
        let s = json!({"Name": "web", "Checks": [check(json!({}))]});
        assert_eq!(
            errors(validate_service(&s)),
            [
                "Check alive invalid: check requires a port but neither check nor service \"web\" have a port"
            ]
        );
        let s = json!({"Name": "web", "PortLabel": "http", "Checks": [
            check(json!({"Path": "http://x/health"})),
            check(json!({"Name": "fast", "Interval": 500_000_000})),
            check(json!({"Name": "t", "Timeout": 0})),
            check(json!({"Name": "bogus", "Type": "udp"})),
            check(json!({"Name": "s", "Type": "script"})),
            check(json!({"Name": "st", "InitialStatus": "ok"})),
            check(json!({"Name": "am", "AddressMode": "auto"})),
            check(json!({"Name": "ex", "Type": "tcp", "Expose": true})),
            check(json!({"Name": "sbp", "Type": "script", "Command": "x", "SuccessBeforePassing": 2})),
            check(json!({"Name": "cr", "OnUpdate": "ignore", "CheckRestart": {"Limit": 1}})),
            check(json!({"Name": "neg", "CheckRestart": {"Limit": -1, "Grace": -5}})),
        ]});
        assert_eq!(
            errors(validate_service(&s)),
            [
                "Check alive invalid: http type must have a relative http path",
                "Check fast invalid: interval (500ms) cannot be lower than 1s",
                "Check t invalid: missing required value timeout. Timeout cannot be less than 1s",
                "Check bogus invalid: invalid type (\"udp\"), must be one of \"http\", \"tcp\", or \"script\" type",
                "Check s invalid: script type must have a valid script path",
                "Check st invalid: invalid initial check state (ok), must be one of \"passing\", \"warning\", \"critical\" or empty",
                "Check am invalid: invalid address_mode \"auto\" - auto only valid for services",
                "Check ex invalid: expose may only be set on HTTP or gRPC checks",
                "Check sbp invalid: success_before_passing not supported for check of type \"script\"",
                "Check cr invalid: on_update value \"ignore\" is not compatible with check_restart",
                "Check neg invalid: 2 errors occurred:\n\t* limit must be greater than or equal to 0 but found -1\n\t* grace period must be greater than or equal to 0 but found -5\n\n",
            ]
        );
    }

    #[test]
    fn connect_must_be_exactly_one_kind() {
        let s = json!({"Name": "api", "Connect": {"Native": false}});
        assert_eq!(
            errors(validate_service(&s)),
            ["Consul Connect must be native or use a sidecar service"]
        );
        let s = json!({"Name": "api", "Connect": {"Native": true, "SidecarService": {}}});
        assert_eq!(
            errors(validate_service(&s))[0],
            "Consul Connect must be exclusively native, make use of a sidecar, or represent a Gateway"
        );
        let s = json!({"Name": "api", "Connect": {"Native": true}});
        assert_eq!(
            errors(validate_service(&s)),
            ["Service api is Connect Native and requires setting the task"]
        );
        let s = json!({"Name": "api", "PortLabel": "p", "Connect": {"SidecarService": {}},
            "Checks": [check(json!({"Type": "tcp"}))]});
        assert_eq!(
            errors(validate_service(&s)),
            ["Check alive invalid: tcp checks are not valid for Connect enabled services"]
        );
    }

    #[test]
    fn gateways_need_a_configuration_entry() {
        let s = json!({"Name": "gw", "Connect": {"Gateway": {
            "Proxy": {"ConnectTimeout": 5_000_000_000i64}}}});
        assert_eq!(
            errors(validate_service(&s)),
            ["One Consul Gateway Configuration Entry must be set"]
        );
        let s = json!({"Name": "gw", "Connect": {"Gateway": {"Ingress": {"Listeners": [
            {"Port": 8080, "Protocol": "tcp", "Services": [{"Name": "*"}]}]}}}});
        assert_eq!(
            errors(validate_service(&s)),
            ["Consul Ingress Service supports wildcard names only with HTTP protocol"]
        );
        let s = json!({"Name": "gw", "Connect": {"Gateway": {"Terminating": {"Services": [
            {"Name": "db", "CertFile": "c"}]}}}});
        assert_eq!(
            errors(validate_service(&s)),
            ["Consul Linked Service TLS requires CAFile"]
        );
    }

    #[test]
    fn group_services_are_checked_against_tasks() {
        let task_services = json!([{"Name": "web", "PortLabel": "http",
            "Checks": [check(json!({"Name": "c1", "TaskName": "x"}))]}]);
        let tasks = [TaskServices {
            name: "server",
            services: Some(&task_services),
        }];
        let group = json!([
            {"Name": "web", "PortLabel": "http", "AddressMode": "driver",
             "Checks": [check(json!({"Name": "c2", "Type": "http", "TaskName": "nope", "PortLabel": "http"}))]},
            {"Name": "bad name"},
        ]);
        assert_eq!(
            errors(validate_group_services(Some(&group), &tasks)),
            [
                "Check c1 is invalid: only task group service checks can be assigned tasks",
                "service \"web\" cannot use address_mode=\"driver\", only services defined in a \"task\" block can use this mode",
                "Service web is duplicate",
                "Check c2 invalid: only script and gRPC checks should have tasks",
                "Check c2 invalid: refers to non-existent task nope",
                "Service[1] bad name validation failed: 1 error occurred:\n\t* Service name must be valid per RFC 1123 and can contain only alphanumeric characters or dashes: \"bad name\"\n\n",
            ]
        );
    }

    #[test]
    fn group_script_checks_need_a_task() {
        let group = json!([{"Name": "web", "Checks": [{"Name": "s", "Type": "script"}]}]);
        assert_eq!(
            errors(validate_group_script_checks("api", Some(&group))),
            ["Service [api]->web or Check s must specify task parameter"]
        );
    }

    #[test]
    fn task_services_reference_defined_ports() {
        let net = NetworkResource {
            dynamic_ports: Some(vec![crate::resources::Port {
                label: "http".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let services = json!([
            {"Name": "web", "PortLabel": "http"},
            {"Name": "web", "PortLabel": "http"},
            {"Name": "metrics", "PortLabel": "prom", "AddressMode": "alloc",
             "Connect": {"Native": true}, "Checks": [
                {"Name": "c", "Type": "tcp", "PortLabel": "9090", "Interval": 10_000_000_000i64, "Timeout": 1_000_000_000i64},
                {"Name": "c", "Type": "tcp", "PortLabel": "admin", "Interval": 10_000_000_000i64, "Timeout": 1_000_000_000i64},
             ]},
        ]);
        assert_eq!(
            errors(validate_task_services(
                Some(&services),
                Some(&vec![net]),
                None
            )),
            [
                "service \"web\" is duplicate",
                "service[2] \"metrics\" validation failed: 1 error occurred:\n\t* Service metrics is Connect Native and requires setting the task\n\n",
                "service \"metrics\" cannot use address_mode=\"alloc\", only services defined in a \"group\" block can use this mode",
                "service \"metrics\" cannot have \"connect\" block, only services defined in a \"group\" block can",
                "check \"c\" cannot use a numeric port 9090 without setting address_mode=\"driver\"",
                "check \"c\" is duplicate",
                "port label \"admin\" referenced by services metrics does not exist",
                "port label \"prom\" referenced by services metrics does not exist",
            ]
        );
    }
}
