//! What Nomad's jobspec2 does to a decoded job before printing it (`normalizeJob`).

use std::collections::HashMap;

use serde_json::{Map, Value as Json};

use crate::decode::{JobExtras, finish};
use crate::schema;

/// Applies Nomad's defaults and rewrites to a decoded job object.
pub(crate) fn normalize_job(job: &mut Map<String, Json>, job_label: &str, extras: JobExtras) {
    for key in ["Name", "ID"] {
        if job.get(key).is_none_or(Json::is_null) {
            job.insert(key.into(), Json::String(job_label.to_string()));
        }
    }

    // Tasks written directly under `job` each become a group of their own,
    // placed before the explicit groups.
    if !extras.tasks.is_empty() {
        let mut groups: Vec<Json> = extras
            .tasks
            .into_iter()
            .map(|task| {
                let name = task.get("Name").cloned().unwrap_or(Json::Null);
                let mut set = HashMap::new();
                set.insert("Name", name);
                set.insert("Tasks", Json::Array(vec![task]));
                Json::Object(finish(&schema::TASK_GROUP, set))
            })
            .collect();
        if let Some(Json::Array(existing)) = job.get_mut("TaskGroups") {
            groups.append(existing);
        }
        job.insert("TaskGroups".into(), Json::Array(groups));
    }

    let mut job_vault = extras.vault;
    if let Some(v) = job_vault.as_mut() {
        normalize_vault(v);
    }

    let Some(Json::Array(groups)) = job.get_mut("TaskGroups") else {
        return;
    };
    for group in groups.iter_mut().filter_map(Json::as_object_mut) {
        normalize_networks(group.get_mut("Networks"));
        let Some(Json::Array(tasks)) = group.get_mut("Tasks") else {
            continue;
        };
        for task in tasks.iter_mut().filter_map(Json::as_object_mut) {
            if let Some(Json::Object(res)) = task.get_mut("Resources") {
                normalize_networks(res.get_mut("Networks"));
            }
            if let Some(Json::Array(templates)) = task.get_mut("Templates") {
                for t in templates.iter_mut().filter_map(Json::as_object_mut) {
                    normalize_template(t);
                }
            }
            match task.get_mut("Vault") {
                Some(v) if !v.is_null() => normalize_vault(v),
                _ => {
                    if let Some(v) = &job_vault {
                        task.insert("Vault".into(), v.clone());
                    }
                }
            }
        }
    }
}

fn set_default(obj: &mut Map<String, Json>, key: &str, value: Json) {
    if obj.get(key).is_none_or(Json::is_null) {
        obj.insert(key.into(), value);
    }
}

fn normalize_vault(v: &mut Json) {
    if let Json::Object(v) = v {
        set_default(v, "Env", Json::Bool(true));
        set_default(v, "ChangeMode", Json::String("restart".into()));
    }
}

fn normalize_template(t: &mut Map<String, Json>) {
    set_default(t, "ChangeMode", Json::String("restart".into()));
    set_default(t, "Perms", Json::String("0644".into()));
    set_default(t, "Splay", Json::from(5_000_000_000i64));
    if let Some(Json::Object(cs)) = t.get_mut("ChangeScript") {
        set_default(cs, "Args", Json::Array(Vec::new()));
        set_default(cs, "Timeout", Json::from(5_000_000_000i64));
        set_default(cs, "FailOnError", Json::Bool(false));
    }
}

/// `port` blocks with a static value are reserved ports; the rest are dynamic.
fn normalize_networks(networks: Option<&mut Json>) {
    let Some(Json::Array(networks)) = networks else {
        return;
    };
    for n in networks.iter_mut().filter_map(Json::as_object_mut) {
        let Some(Json::Array(ports)) = n.get("DynamicPorts").cloned() else {
            continue;
        };
        if ports.is_empty() {
            continue;
        }
        let (reserved, dynamic): (Vec<Json>, Vec<Json>) = ports
            .into_iter()
            .partition(|p| p.get("Value").and_then(Json::as_i64).unwrap_or(0) > 0);
        n.insert(
            "DynamicPorts".into(),
            if dynamic.is_empty() {
                Json::Null
            } else {
                Json::Array(dynamic)
            },
        );
        n.insert(
            "ReservedPorts".into(),
            if reserved.is_empty() {
                Json::Null
            } else {
                Json::Array(reserved)
            },
        );
    }
}
