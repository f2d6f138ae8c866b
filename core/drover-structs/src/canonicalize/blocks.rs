//! Defaults of the smaller blocks, as Nomad's API `Canonicalize` methods set them and the
//! server's conversion shapes them: networks, templates, artifacts, vault, volume mounts,
//! devices, affinities and spreads, scaling, periodic and multiregion.

use serde_json::{Map, Value, json};

use super::{SEC, empty_to_null, is_unset, set_default};

fn objects(list: Option<&mut Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    let items: &mut [Value] = match list {
        Some(Value::Array(a)) => a.as_mut_slice(),
        _ => &mut [],
    };
    items.iter_mut().filter_map(Value::as_object_mut)
}

/// Affinities weigh 50 unless told otherwise.
pub(super) fn affinities(list: Option<&mut Value>) {
    for a in objects(list) {
        set_default(a, "Weight", json!(50));
    }
}

/// Spreads weigh 50 unless told otherwise.
pub(super) fn spreads(list: Option<&mut Value>) {
    for s in objects(list) {
        set_default(s, "Weight", json!(50));
    }
}

/// `NetworkResource`: no bandwidth unless asked (the API default went away in 0.12), ports on
/// the `default` host network, empty port lists as `null`.
pub(super) fn networks(list: Option<&mut Value>) {
    for n in objects(list) {
        set_default(n, "MBits", json!(0));
        for key in ["ReservedPorts", "DynamicPorts"] {
            empty_to_null(n, key);
            for p in objects(n.get_mut(key)) {
                if p.get("HostNetwork")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    p.insert("HostNetwork".into(), json!("default"));
                }
            }
        }
    }
}

/// Requested devices: one of each unless a count is given.
pub(super) fn devices(list: Option<&mut Value>) {
    for d in objects(list) {
        set_default(d, "Count", json!(1));
        affinities(d.get_mut("Affinities"));
    }
}

/// api `Template.Canonicalize`.
pub(super) fn templates(list: Option<&mut Value>) {
    for t in objects(list) {
        for key in ["SourcePath", "DestPath", "EmbeddedTmpl"] {
            set_default(t, key, json!(""));
        }
        set_default(t, "ChangeMode", json!("restart"));
        let signal = match t.get("ChangeSignal").and_then(Value::as_str) {
            Some(s) => s.to_uppercase(),
            None if t.get("ChangeMode").and_then(Value::as_str) == Some("signal") => {
                "SIGHUP".into()
            }
            None => String::new(),
        };
        t.insert("ChangeSignal".into(), json!(signal));
        set_default(t, "Splay", json!(5 * SEC));
        set_default(t, "Perms", json!("0644"));
        set_default(t, "LeftDelim", json!("{{"));
        set_default(t, "RightDelim", json!("}}"));
        set_default(t, "Envvars", json!(false));
        set_default(t, "VaultGrace", json!(0));
    }
}

/// api `TaskArtifact.Canonicalize`: mode `any`, into `local/` (or `local/<file>` in file mode).
pub(super) fn artifacts(list: Option<&mut Value>) {
    for a in objects(list) {
        set_default(a, "GetterMode", json!("any"));
        set_default(a, "GetterSource", json!(""));
        empty_to_null(a, "GetterOptions");
        empty_to_null(a, "GetterHeaders");
        if is_unset(a.get("RelativeDest")) {
            let dest = if a.get("GetterMode").and_then(Value::as_str) == Some("file") {
                let source = a.get("GetterSource").and_then(Value::as_str).unwrap_or("");
                // Go's path.Base: the last element, "." for an empty path.
                let base = source
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .filter(|b| !b.is_empty())
                    .unwrap_or(if source.starts_with('/') { "/" } else { "." });
                match base {
                    "." | "/" => "local".to_string(),
                    b => format!("local/{b}"),
                }
            } else {
                "local/".to_string()
            };
            a.insert("RelativeDest".into(), json!(dest));
        }
    }
}

/// api and server `Vault.Canonicalize`.
pub(super) fn vault(v: Option<&mut Value>) {
    let Some(Value::Object(v)) = v else {
        return;
    };
    set_default(v, "Env", json!(true));
    set_default(v, "Namespace", json!(""));
    set_default(v, "ChangeMode", json!("restart"));
    let signal = v
        .get("ChangeSignal")
        .and_then(Value::as_str)
        .unwrap_or("SIGHUP")
        .to_uppercase();
    v.insert("ChangeSignal".into(), json!(signal));
}

/// api `VolumeMount.Canonicalize`.
pub(super) fn volume_mounts(list: Option<&mut Value>) {
    for m in objects(list) {
        set_default(m, "PropagationMode", json!("private"));
        set_default(m, "ReadOnly", json!(false));
    }
}

/// The group's scaling policy in the server's shape (`ApiScalingPolicyToStructs`): enabled by
/// default, `min` defaulting to the count, a missing `max` as -1 (which validation reports),
/// and the target naming the job and group.
pub(super) fn scaling(
    policy: Option<&mut Value>,
    count: &Value,
    namespace: &str,
    job: &str,
    group: &str,
) {
    let Some(Value::Object(p)) = policy else {
        return;
    };
    set_default(p, "Enabled", json!(true));
    set_default(p, "Min", count.clone());
    set_default(p, "Max", json!(-1));
    if p.get("Type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        p.insert("Type".into(), json!("horizontal"));
    }
    p.remove("Namespace");
    p.insert(
        "Target".into(),
        json!({"Namespace": namespace, "Job": job, "Group": group}),
    );
    set_default(p, "ID", json!(""));
    set_default(p, "Policy", Value::Null);
    set_default(p, "CreateIndex", json!(0));
    set_default(p, "ModifyIndex", json!(0));
}

/// api `PeriodicConfig.Canonicalize`.
pub(super) fn periodic(p: Option<&mut Value>) {
    let Some(Value::Object(p)) = p else {
        return;
    };
    set_default(p, "Enabled", json!(true));
    set_default(p, "Spec", json!(""));
    set_default(p, "SpecType", json!("cron"));
    set_default(p, "ProhibitOverlap", json!(false));
    set_default(p, "TimeZone", json!("UTC"));
}

/// Server `ParameterizedJobConfig.Canonicalize`: payloads are optional unless told otherwise.
pub(super) fn parameterized(p: Option<&mut Value>) {
    let Some(Value::Object(p)) = p else {
        return;
    };
    if p.get("Payload")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        p.insert("Payload".into(), json!("optional"));
    }
}

/// api `Multiregion.Canonicalize`.
pub(super) fn multiregion(m: Option<&mut Value>) {
    let Some(Value::Object(m)) = m else {
        return;
    };
    match m.get_mut("Strategy") {
        Some(Value::Object(s)) => {
            set_default(s, "MaxParallel", json!(0));
            set_default(s, "OnFailure", json!(""));
        }
        _ => {
            m.insert(
                "Strategy".into(),
                json!({"MaxParallel": 0, "OnFailure": ""}),
            );
        }
    }
    if is_unset(m.get("Regions")) {
        m.insert("Regions".into(), json!([]));
    }
    for r in objects(m.get_mut("Regions")) {
        set_default(r, "Count", json!(1));
        set_default(r, "Datacenters", json!([]));
        set_default(r, "Meta", json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_ports_land_on_the_default_host_network() {
        let mut n = json!([{"MBits": null, "ReservedPorts": [], "DynamicPorts": [{"Label": "http", "HostNetwork": ""}]}]);
        networks(Some(&mut n));
        assert_eq!(n[0]["MBits"], 0);
        assert!(n[0]["ReservedPorts"].is_null());
        assert_eq!(n[0]["DynamicPorts"][0]["HostNetwork"], "default");
    }

    #[test]
    fn templates_get_nomads_defaults() {
        let mut t = json!([{"DestPath": "local/a", "ChangeMode": "signal", "ChangeSignal": null},
            {"DestPath": "local/b", "ChangeSignal": "sigusr1"}]);
        templates(Some(&mut t));
        assert_eq!(t[0]["ChangeSignal"], "SIGHUP");
        assert_eq!(t[0]["Splay"], 5 * SEC);
        assert_eq!(t[0]["Perms"], "0644");
        assert_eq!(t[0]["LeftDelim"], "{{");
        assert_eq!(t[1]["ChangeMode"], "restart");
        assert_eq!(t[1]["ChangeSignal"], "SIGUSR1");
    }

    #[test]
    fn artifacts_default_to_local() {
        let mut a = json!([{"GetterSource": "https://x/y/tool.tgz"},
            {"GetterSource": "https://x/y/tool.bin", "GetterMode": "file"},
            {"GetterSource": "s", "RelativeDest": "here", "GetterOptions": {}}]);
        artifacts(Some(&mut a));
        assert_eq!(a[0]["RelativeDest"], "local/");
        assert_eq!(a[0]["GetterMode"], "any");
        assert_eq!(a[1]["RelativeDest"], "local/tool.bin");
        assert_eq!(a[2]["RelativeDest"], "here");
        assert!(a[2]["GetterOptions"].is_null());
    }

    #[test]
    fn vault_defaults_and_upper_case_signal() {
        let mut v = json!({"Policies": ["p"], "ChangeSignal": "sighup"});
        vault(Some(&mut v));
        assert_eq!(
            v,
            json!({"Policies": ["p"], "ChangeSignal": "SIGHUP", "Env": true,
            "Namespace": "", "ChangeMode": "restart"})
        );
    }

    #[test]
    fn scaling_policy_targets_its_group() {
        let mut p = json!({"Min": null, "Max": null, "Policy": null, "Enabled": null,
            "Type": "", "ID": "", "Namespace": "", "Target": null, "CreateIndex": 0, "ModifyIndex": 0});
        scaling(Some(&mut p), &json!(3), "default", "web", "g");
        assert_eq!(
            p,
            json!({"Min": 3, "Max": -1, "Policy": null, "Enabled": true, "Type": "horizontal",
                "ID": "", "Target": {"Namespace": "default", "Job": "web", "Group": "g"},
                "CreateIndex": 0, "ModifyIndex": 0})
        );
    }

    #[test]
    fn periodic_and_multiregion_defaults() {
        let mut p = json!({"Spec": "@daily"});
        periodic(Some(&mut p));
        assert_eq!(p["Enabled"], true);
        assert_eq!(p["SpecType"], "cron");
        assert_eq!(p["TimeZone"], "UTC");
        let mut m = json!({"Regions": [{"Name": "east"}]});
        multiregion(Some(&mut m));
        assert_eq!(m["Strategy"], json!({"MaxParallel": 0, "OnFailure": ""}));
        assert_eq!(m["Regions"][0]["Count"], 1);
    }
}
