//! Nomad 1.1's `Task.Validate` and the rules of the blocks a task carries: resources and
//! devices, logs, artifacts, vault, templates, dispatch payload, lifecycle, volume mounts and
//! CSI plugin configuration.

use std::collections::BTreeMap;

use serde_json::Value;

use super::gofmt::quote;
use super::json::{bool_of, int_of, items, list, set, str_of, strs};
use super::placement::{check_affinities, validate_affinity, validate_constraint};
use super::policies::validate_log_config;
use super::services::validate_task_services;
use crate::job::*;
use crate::multierror::MultiError;
use crate::resources::Resources;

/// Whether `path` joined under `prefix` in an allocation directory leaves it (Nomad's
/// `PathEscapesAllocDir`, done lexically as Go's `filepath.Join` and `Rel` do).
pub(crate) fn escapes_alloc_dir(prefix: &str, path: &str) -> bool {
    let mut stack: Vec<&str> = vec!["alloc-dir", "alloc-id"];
    for part in prefix.split('/').chain(path.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                stack.pop();
            }
            p => stack.push(p),
        }
    }
    !(stack.len() >= 2 && stack[0] == "alloc-dir" && stack[1] == "alloc-id")
}

/// Go's `strconv.ParseUint(s, 8, 12)` error text (template permissions).
fn octal_perms_error(s: &str) -> Option<String> {
    if s.is_empty() || !s.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Some(format!(
            "strconv.ParseUint: parsing {}: invalid syntax",
            quote(s)
        ));
    }
    match u64::from_str_radix(s, 8) {
        Ok(v) if v < 1 << 12 => None,
        _ => Some(format!(
            "strconv.ParseUint: parsing {}: value out of range",
            quote(s)
        )),
    }
}

/// Nomad's `Resources.Validate`; the minimums form a nested list of their own, as in Nomad.
fn validate_resources(r: &Resources) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if r.cores > 0 && r.cpu > 0 {
        m.push("Task can only ask for 'cpu' or 'cores' resource, not both.");
    }
    let mut min = MultiError::new();
    if r.cpu < 1 && r.cores == 0 {
        min.push(format!("minimum CPU value is 1; got {}", r.cpu));
    }
    if r.memory_mb < 10 {
        min.push(format!("minimum MemoryMB value is 10; got {}", r.memory_mb));
    }
    if let Err(e) = min.into_result() {
        m.push(e.to_string());
    }
    if r.disk_mb > 0 {
        m.push(
            "Task can't ask for disk resources, they have to be specified at the task group level.",
        );
    }
    for (i, d) in r.devices.iter().flatten().enumerate() {
        if let Err(e) = validate_device(d) {
            m.push(format!("device {} failed validation: {e}", i + 1));
        }
    }
    if r.memory_max_mb != 0 && r.memory_max_mb < r.memory_mb {
        m.push(format!(
            "MemoryMaxMB value ({}) should be larger than MemoryMB value ({})",
            r.memory_max_mb, r.memory_mb
        ));
    }
    m.into_result()
}

/// Nomad's `RequestedDevice.Validate`.
fn validate_device(d: &Value) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if str_of(d, "Name").is_empty() {
        m.push(
            "device name must be given as one of the following: type, vendor/type, or vendor/type/name",
        );
    }
    for (idx, c) in list(d, "Constraints").iter().enumerate() {
        let c: Constraint = serde_json::from_value(c.clone()).unwrap_or_default();
        match c.operand.as_str() {
            "distinct_hosts" | "distinct_property" => m.push(format!(
                "Constraint {} validation failed: using unsupported operand {}",
                idx + 1,
                quote(&c.operand)
            )),
            _ => {
                if let Err(e) = validate_constraint(&c) {
                    m.push(format!("Constraint {} validation failed: {e}", idx + 1));
                }
            }
        }
    }
    for (idx, a) in list(d, "Affinities").iter().enumerate() {
        let a: Affinity = serde_json::from_value(a.clone()).unwrap_or_default();
        if let Err(e) = validate_affinity(&a) {
            m.push(format!("Affinity {} validation failed: {e}", idx + 1));
        }
    }
    m.into_result()
}

/// Go's `hex.DecodeString` error text (`%#U` of the bad byte: the rune quoted when printable).
fn hex_error(s: &str) -> Option<String> {
    if let Some(c) = s.chars().find(|c| !c.is_ascii_hexdigit()) {
        let printable = if c.is_control() {
            String::new()
        } else if c == '\'' {
            " '\\''".to_string()
        } else {
            format!(" '{c}'")
        };
        return Some(format!(
            "encoding/hex: invalid byte: U+{:04X}{printable}",
            c as u32
        ));
    }
    (s.len() % 2 == 1).then(|| "encoding/hex: odd length hex string".to_string())
}

/// Nomad's `TaskArtifact.validateChecksum`.
fn artifact_checksum_error(options: Option<&Value>) -> Option<String> {
    let check = options?.get("checksum")?.as_str()?;
    if check.contains("${") && check.contains('}') {
        // Interpolated values are only known on the client.
        return None;
    }
    let check = check.trim();
    if check.is_empty() {
        return Some("checksum value cannot be empty".into());
    }
    let parts: Vec<&str> = check.split(':').collect();
    let [kind, value] = parts.as_slice() else {
        return Some(format!(
            "checksum must be given as \"type:value\"; got {}",
            quote(check)
        ));
    };
    if let Some(e) = hex_error(value) {
        return Some(format!("invalid checksum: {e}"));
    }
    let expected = match *kind {
        "md5" => 16,
        "sha1" => 20,
        "sha256" => 32,
        "sha512" => 64,
        other => return Some(format!("unsupported checksum type: {other}")),
    };
    (value.len() / 2 != expected).then(|| format!("invalid {kind} checksum: {value}"))
}

/// Nomad's `TaskArtifact.Validate`.
fn validate_artifact(a: &Value) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if str_of(a, "GetterSource").is_empty() {
        m.push("source must be specified");
    }
    match str_of(a, "GetterMode") {
        "" | "any" | "file" | "dir" => {}
        other => m.push(format!(
            "invalid artifact mode {}; must be one of: any, file, dir",
            quote(other)
        )),
    }
    if escapes_alloc_dir("task", str_of(a, "RelativeDest")) {
        m.push("destination escapes allocation directory");
    }
    if let Some(e) = artifact_checksum_error(set(a, "GetterOptions")) {
        m.push(e);
    }
    m.into_result()
}

/// Nomad's `Vault.Validate`.
fn validate_vault(v: &Value) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    let policies = strs(v, "Policies");
    if policies.is_empty() {
        m.push("Policy list cannot be empty");
    }
    for p in &policies {
        if *p == "root" {
            m.push("Can not specify \"root\" policy");
        }
    }
    match str_of(v, "ChangeMode") {
        "signal" => {
            if str_of(v, "ChangeSignal").is_empty() {
                m.push("Signal must be specified when using change mode \"signal\"");
            }
        }
        "noop" | "restart" => {}
        other => m.push(format!("Unknown change mode {}", quote(other))),
    }
    m.into_result()
}

/// Nomad's `Template.Validate`.
fn validate_template(t: &Value) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if str_of(t, "SourcePath").is_empty() && str_of(t, "EmbeddedTmpl").is_empty() {
        m.push("Must specify a source path or have an embedded template");
    }
    let dest = str_of(t, "DestPath");
    if dest.is_empty() {
        m.push("Must specify a destination for the template");
    }
    if escapes_alloc_dir("task", dest) {
        m.push("destination escapes allocation directory");
    }
    match str_of(t, "ChangeMode") {
        "noop" | "restart" => {}
        "signal" => {
            if str_of(t, "ChangeSignal").is_empty() {
                m.push("Must specify signal value when change mode is signal");
            }
            if bool_of(t, "Envvars") {
                m.push("cannot use signals with env var templates");
            }
        }
        "script" => match t.get("ChangeScript").filter(|c| !c.is_null()) {
            None => {
                m.push("must specify change script configuration value when change mode is script")
            }
            Some(script) if str_of(script, "Command").is_empty() => {
                m.push("must specify script path value when change mode is script")
            }
            Some(_) => {}
        },
        _ => m.push(
            "Invalid change mode. Must be one of the following: noop, signal, script, restart",
        ),
    }
    if int_of(t, "Splay") < 0 {
        m.push("Must specify positive splay value");
    }
    let perms = str_of(t, "Perms");
    if !perms.is_empty()
        && let Some(e) = octal_perms_error(perms)
    {
        m.push(format!("Failed to parse {} as octal: {e}", quote(perms)));
    }
    m.into_result()
}

/// Nomad's `TaskLifecycleConfig.Validate`.
fn validate_lifecycle(l: &Value) -> Result<(), String> {
    match str_of(l, "Hook") {
        "prestart" | "poststart" | "poststop" => Ok(()),
        "" => Err("no lifecycle hook provided".into()),
        other => Err(format!("invalid hook: {other}")),
    }
}

/// Nomad's `ValidateConnectProxyService`.
fn connect_proxy_service_error(service: &str, group_services: Option<&Value>) -> Option<String> {
    let mut names = Vec::new();
    for s in items(group_services) {
        let connect_sidecar = set(s, "Connect").is_some_and(|c| set(c, "SidecarService").is_some());
        if !connect_sidecar {
            continue;
        }
        if str_of(s, "Name") == service {
            return None;
        }
        names.push(str_of(s, "Name"));
    }
    Some(if names.is_empty() {
        format!(
            "No Connect services in task group with Connect proxy ({})",
            quote(service)
        )
    } else {
        format!(
            "Connect proxy service name ({}) not found in Connect services from task group: {}",
            quote(service),
            super::gofmt::string_list(&names)
        )
    })
}

/// Nomad's `Task.Validate`.
pub(crate) fn validate_task(t: &Task, tg: &TaskGroup, job_type: &str) -> Result<(), MultiError> {
    let mut m = MultiError::new();
    if t.name.is_empty() {
        m.push("Missing task name");
    }
    if t.name.contains(['/', '\\']) {
        m.push("Task name cannot include slashes");
    } else if t.name.contains('\0') {
        m.push("Task name cannot include null characters");
    }
    if t.driver.is_empty() {
        m.push("Missing task driver");
    }
    if t.kill_timeout < 0 {
        m.push("KillTimeout must be a positive value");
    }
    if t.shutdown_delay < 0 {
        m.push("ShutdownDelay must be a positive value");
    }
    if let Err(e) = validate_resources(&t.resources) {
        m.push(e.to_string());
    }
    match &t.log_config {
        None => m.push("Missing Log Config"),
        Some(lc) => {
            if let Err(e) = validate_log_config(lc) {
                m.push(e.to_string());
            }
        }
    }
    for (idx, c) in t.constraints.iter().flatten().enumerate() {
        if let Err(e) = validate_constraint(c) {
            m.push(format!("Constraint {} validation failed: {e}", idx + 1));
        }
        if c.operand == "distinct_hosts" || c.operand == "distinct_property" {
            m.push(format!(
                "Constraint {} has disallowed Operand at task level: {}",
                idx + 1,
                c.operand
            ));
        }
    }
    check_affinities(&mut m, t.affinities.as_ref(), job_type == JOB_TYPE_SYSTEM);
    if let Err(e) = validate_task_services(
        t.services.as_ref(),
        tg.networks.as_ref(),
        t.resources.networks.as_ref(),
    ) {
        m.push(e.to_string());
    }
    if let (Some(lc), Some(disk)) = (&t.log_config, &tg.ephemeral_disk) {
        let usage = lc.max_files.saturating_mul(lc.max_file_size_mb);
        if disk.size_mb <= usage {
            m.push(format!(
                "log storage ({usage} MB) must be less than requested disk capacity ({} MB)",
                disk.size_mb
            ));
        }
    }
    for (idx, a) in items(t.artifacts.as_ref()).iter().enumerate() {
        if let Err(e) = validate_artifact(a) {
            m.push(format!("Artifact {} validation failed: {e}", idx + 1));
        }
    }
    if let Some(v) = t.vault.as_ref().filter(|v| !v.is_null())
        && let Err(e) = validate_vault(v)
    {
        m.push(format!("Vault validation failed: {e}"));
    }
    let mut destinations: BTreeMap<&str, usize> = BTreeMap::new();
    for (idx, tmpl) in items(t.templates.as_ref()).iter().enumerate() {
        if let Err(e) = validate_template(tmpl) {
            m.push(format!("Template {} validation failed: {e}", idx + 1));
        }
        let dest = str_of(tmpl, "DestPath");
        if let Some(other) = destinations.get(dest) {
            m.push(format!(
                "Template {} has same destination as {other}",
                idx + 1
            ));
        } else {
            destinations.insert(dest, idx + 1);
        }
    }
    if let Some(dp) = t.dispatch_payload.as_ref().filter(|v| !v.is_null())
        && escapes_alloc_dir("task/local/", str_of(dp, "File"))
    {
        m.push("Dispatch Payload validation failed: destination escapes allocation directory");
    }
    if let Some(l) = t.lifecycle.as_ref().filter(|v| !v.is_null())
        && let Err(e) = validate_lifecycle(l)
    {
        m.push(format!("Lifecycle validation failed: {e}"));
    }
    if let Some(service) = t
        .kind
        .strip_prefix("connect-proxy:")
        .filter(|s| !s.is_empty())
    {
        if !items(t.services.as_ref()).is_empty() {
            m.push("Connect proxy task must not have a service stanza");
        }
        if t.leader {
            m.push("Connect proxy task must not have leader set");
        }
        if let Some(e) = connect_proxy_service_error(service, tg.services.as_ref()) {
            m.push(e);
        }
    }
    for (idx, vm) in items(t.volume_mounts.as_ref()).iter().enumerate() {
        let mode = str_of(vm, "PropagationMode");
        if !matches!(mode, "" | "private" | "host-to-task" | "bidirectional") {
            m.push(format!(
                "Volume Mount ({idx}) has an invalid propagation mode: \"{mode}\""
            ));
        }
    }
    if let Some(csi) = t.csi_plugin_config.as_ref().filter(|v| !v.is_null()) {
        let id = str_of(csi, "ID");
        if id.is_empty() {
            m.push("CSIPluginConfig must have a non-empty PluginID");
        } else if let Some(why) = crate::csi::unsafe_csi_id(id) {
            m.push(format!("CSIPluginConfig PluginID {id:?} {why}"));
        }
        let kind = str_of(csi, "Type");
        if !matches!(kind, "node" | "controller" | "monolith") {
            m.push(format!(
                "CSIPluginConfig PluginType must be one of 'node', 'controller', or 'monolith', got: \"{kind}\""
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

    #[test]
    fn paths_escaping_the_alloc_dir_are_found() {
        assert!(!escapes_alloc_dir("task", "local/file"));
        assert!(!escapes_alloc_dir("task", "../alloc/data"));
        assert!(escapes_alloc_dir("task", "../../etc/passwd"));
        assert!(!escapes_alloc_dir("task", "/etc/passwd"));
        assert!(!escapes_alloc_dir("task/local/", "../secret"));
        assert!(escapes_alloc_dir("task/local/", "../../../../root"));
    }

    #[test]
    fn resources_minimums_nest_like_nomad() {
        let r = Resources {
            cpu: 0,
            memory_mb: 1,
            disk_mb: 5,
            ..Default::default()
        };
        assert_eq!(
            errors(validate_resources(&r)),
            [
                "2 errors occurred:\n\t* minimum CPU value is 1; got 0\n\t* minimum MemoryMB value is 10; got 1\n\n",
                "Task can't ask for disk resources, they have to be specified at the task group level."
            ]
        );
        let r = Resources {
            cpu: 100,
            memory_mb: 100,
            devices: Some(vec![
                json!({"Constraints": [{"LTarget": "a", "RTarget": "b", "Operand": "distinct_hosts"}]}),
            ]),
            ..Default::default()
        };
        assert_eq!(
            errors(validate_resources(&r)),
            [
                "device 1 failed validation: 2 errors occurred:\n\t* device name must be given as one of the following: type, vendor/type, or vendor/type/name\n\t* Constraint 1 validation failed: using unsupported operand \"distinct_hosts\"\n\n"
            ]
        );
    }

    #[test]
    fn artifacts_need_a_source_and_a_valid_checksum() {
        assert_eq!(
            errors(validate_artifact(&json!({"GetterMode": "tarball",
                "RelativeDest": "../../x", "GetterOptions": {"checksum": "md5:abc"}}))),
            [
                "source must be specified",
                "invalid artifact mode \"tarball\"; must be one of: any, file, dir",
                "destination escapes allocation directory",
                "invalid checksum: encoding/hex: odd length hex string"
            ]
        );
        let a = |c: &str| json!({"GetterSource": "https://x/y", "GetterOptions": {"checksum": c}});
        assert_eq!(
            errors(validate_artifact(&a("crc:00"))),
            ["unsupported checksum type: crc"]
        );
        assert_eq!(
            errors(validate_artifact(&a("md5:00"))),
            ["invalid md5 checksum: 00"]
        );
        assert_eq!(
            errors(validate_artifact(&a("abc"))),
            ["checksum must be given as \"type:value\"; got \"abc\""]
        );
        assert_eq!(
            errors(validate_artifact(&a("md5:zz"))),
            ["invalid checksum: encoding/hex: invalid byte: U+007A 'z'"]
        );
        assert!(validate_artifact(&a("md5:${NOMAD_META_sum}")).is_ok());
        assert!(validate_artifact(&a("md5:d41d8cd98f00b204e9800998ecf8427e")).is_ok());
    }

    #[test]
    fn vault_and_template_rules() {
        assert_eq!(
            errors(validate_vault(
                &json!({"Policies": ["root"], "ChangeMode": "signal"})
            )),
            [
                "Can not specify \"root\" policy",
                "Signal must be specified when using change mode \"signal\""
            ]
        );
        assert_eq!(
            errors(validate_template(
                &json!({"DestPath": "../../x", "ChangeMode": "signal",
                "Envvars": true, "Splay": -1, "Perms": "999"})
            )),
            [
                "Must specify a source path or have an embedded template",
                "destination escapes allocation directory",
                "Must specify signal value when change mode is signal",
                "cannot use signals with env var templates",
                "Must specify positive splay value",
                "Failed to parse \"999\" as octal: strconv.ParseUint: parsing \"999\": invalid syntax"
            ]
        );
        assert_eq!(
            errors(validate_template(
                &json!({"EmbeddedTmpl": "x", "DestPath": "local/a", "ChangeMode": "reload"})
            )),
            ["Invalid change mode. Must be one of the following: noop, signal, script, restart"]
        );
        let script = |change_script: Value| {
            errors(validate_template(
                &json!({"EmbeddedTmpl": "x", "DestPath": "local/a",
                "ChangeMode": "script", "ChangeScript": change_script}),
            ))
        };
        assert_eq!(
            script(Value::Null),
            ["must specify change script configuration value when change mode is script"]
        );
        assert_eq!(
            script(json!({"Args": ["a"]})),
            ["must specify script path value when change mode is script"]
        );
        assert!(script(json!({"Command": "/local/reload.sh"})).is_empty());
    }

    fn task(extra: Value) -> Task {
        let mut v = json!({"Name": "t", "Driver": "raw_exec",
            "Resources": {"CPU": 100, "MemoryMB": 64}, "LogConfig": {"MaxFiles": 1, "MaxFileSizeMB": 1}});
        if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn task_blocks_are_validated_in_nomads_order() {
        let tg = TaskGroup {
            ephemeral_disk: Some(EphemeralDisk {
                size_mb: 300,
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = task(json!({
            "Templates": [
                {"EmbeddedTmpl": "a", "DestPath": "local/x", "ChangeMode": "noop"},
                {"EmbeddedTmpl": "b", "DestPath": "local/x", "ChangeMode": "noop"}],
            "DispatchPayload": {"File": "../../../etc"},
            "Lifecycle": {"Hook": "prestop"},
            "VolumeMounts": [{"Volume": "v", "PropagationMode": "shared"}],
            "CSIPluginConfig": {"ID": "", "Type": "both"},
            "Vault": {"Policies": [], "ChangeMode": "restart"},
        }));
        assert_eq!(
            errors(validate_task(&t, &tg, "service")),
            [
                "Vault validation failed: 1 error occurred:\n\t* Policy list cannot be empty\n\n",
                "Template 2 has same destination as 1",
                "Dispatch Payload validation failed: destination escapes allocation directory",
                "Lifecycle validation failed: invalid hook: prestop",
                "Volume Mount (0) has an invalid propagation mode: \"shared\"",
                "CSIPluginConfig must have a non-empty PluginID",
                "CSIPluginConfig PluginType must be one of 'node', 'controller', or 'monolith', got: \"both\""
            ]
        );
    }

    #[test]
    fn a_csi_plugin_id_that_would_climb_out_of_the_plugin_directory_is_refused() {
        let tg = TaskGroup::default();
        for id in ["../../etc", "a/b", ".."] {
            let t = task(json!({"CSIPluginConfig": {"ID": id, "Type": "node"}}));
            let errs = errors(validate_task(&t, &tg, "service"));
            assert!(
                errs.iter()
                    .any(|e| e.starts_with(&format!("CSIPluginConfig PluginID {id:?}"))),
                "{id}: {errs:?}"
            );
        }
        let ok = task(json!({"CSIPluginConfig": {"ID": "hostpath.csi-1", "Type": "node"}}));
        assert!(
            !errors(validate_task(&ok, &tg, "service"))
                .iter()
                .any(|e| e.contains("PluginID"))
        );
    }

    #[test]
    fn connect_proxy_tasks_must_match_a_sidecar_service() {
        let tg = TaskGroup {
            services: Some(json!([{"Name": "api", "Connect": {"SidecarService": {}}}])),
            ..Default::default()
        };
        let t = task(json!({"Kind": "connect-proxy:web", "Leader": true}));
        assert_eq!(
            errors(validate_task(&t, &tg, "service")),
            [
                "Connect proxy task must not have leader set",
                "Connect proxy service name (\"web\") not found in Connect services from task group: [api]"
            ]
        );
    }

    #[test]
    fn system_tasks_may_not_have_affinities() {
        let t = task(
            json!({"Affinities": [{"LTarget": "a", "RTarget": "b", "Operand": "=", "Weight": 50}]}),
        );
        assert_eq!(
            errors(validate_task(&t, &TaskGroup::default(), "system")),
            ["System jobs may not have an affinity stanza"]
        );
    }
}
