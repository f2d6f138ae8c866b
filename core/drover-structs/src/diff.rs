//! Nomad's job diff (`nomad/structs/diff.go`): what changed between two versions of a job,
//! as `job plan` and `job history -p` show it, in the JSON shape of Nomad's API
//! (`JobDiff`, `TaskGroupDiff`, `TaskDiff`, `ObjectDiff`, `FieldDiff`).
//!
//! Both jobs are compared through their JSON form, with Nomad's rules for each level: which
//! fields are primitive (and which Nomad filters out: indexes, version, status, tokens),
//! which blocks become named object diffs, how lists pair up (task groups and tasks by
//! name, ports by label, constraints and networks as sets of whole objects), and when
//! unchanged fields are kept (`contextual`, which `job plan` and `job history` always ask
//! for). Fields and objects come in Nomad's order: fields by name, the objects of one kind
//! sorted, the kinds in the order Nomad appends them.

mod blocks;
mod flat;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::job::Job;
use flat::{
    Obj, Shape, field, field_diffs, flatten, flatten_all, keyed, list, name_of, object, opening,
    paired, primitive, primitive_object_diff, primitive_object_set_diff, string_set_diff, strings,
};

/// What happened to a job, group, task, object or field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DiffType {
    #[default]
    None,
    Added,
    Deleted,
    Edited,
}

/// Nomad's `JobDiff`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Fields", with = "null_if_empty")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects", with = "null_if_empty")]
    pub objects: Vec<ObjectDiff>,
    #[serde(rename = "TaskGroups", with = "null_if_empty")]
    pub task_groups: Vec<TaskGroupDiff>,
}

/// Nomad's `TaskGroupDiff`. `updates` is what the scheduler would do to the group's
/// allocations (filled by the scheduler's `annotate`; keys such as "create" and "in-place
/// update"); `None` (JSON null) until then.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskGroupDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Fields", with = "null_if_empty")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects", with = "null_if_empty")]
    pub objects: Vec<ObjectDiff>,
    #[serde(rename = "Tasks", with = "null_if_empty")]
    pub tasks: Vec<TaskDiff>,
    #[serde(rename = "Updates")]
    pub updates: Option<BTreeMap<String, u64>>,
}

/// Nomad's `TaskDiff`; `annotations` says what the change forces ("forces create/destroy
/// update", ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Fields", with = "null_if_empty")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects", with = "null_if_empty")]
    pub objects: Vec<ObjectDiff>,
    #[serde(rename = "Annotations", with = "null_if_empty")]
    pub annotations: Vec<String>,
}

/// Nomad's `ObjectDiff`: a block (`Resources`, `Config`, `Constraint`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObjectDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Fields", with = "null_if_empty")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects", with = "null_if_empty")]
    pub objects: Vec<ObjectDiff>,
}

/// Nomad's `FieldDiff`: one value, old and new as Go prints them ("" when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FieldDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Old")]
    pub old: String,
    #[serde(rename = "New")]
    pub new: String,
    #[serde(rename = "Annotations", with = "null_if_empty")]
    pub annotations: Vec<String>,
}

/// Why two jobs could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// Nomad only diffs versions of one job.
    #[error("can not diff jobs with different IDs: {0:?} and {1:?}")]
    DifferentIds(String, String),
    /// A job did not encode as JSON.
    #[error("can not diff the job: {0}")]
    Encode(String),
}

/// Nomad's empty lists are nil slices, which its API writes as `null`; `null` reads back as
/// empty.
mod null_if_empty {
    use super::*;

    pub fn serialize<S: Serializer, T: Serialize>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        if v.is_empty() {
            s.serialize_none()
        } else {
            s.collect_seq(v)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Vec<T>, D::Error> {
        Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
    }
}

/// Job fields Nomad leaves out of the diff (they change with every version), plus
/// `Payload`, a byte slice to Nomad and so never a primitive field.
const JOB_FILTER: &[&str] = &[
    "ID",
    "Status",
    "StatusDescription",
    "Version",
    "Stable",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "Update",
    "SubmitTime",
    "NomadTokenID",
    "VaultToken",
    "Payload",
];

/// Group fields that are pointers in Nomad's struct: compared only when both versions have
/// the group, an unset one as "".
const GROUP_POINTER_FIELDS: &[&str] = &[
    "ShutdownDelay",
    "StopAfterClientDisconnect",
    "MaxClientDisconnect",
];

/// Nomad's `Job.Diff`: the difference from `old` to `new`; a missing side makes the job
/// added or deleted. `contextual` keeps the unchanged fields of changed blocks (what `job
/// plan` and `job history` ask for). Fails when the two jobs have different IDs.
pub fn job_diff(
    old: Option<&Job>,
    new: Option<&Job>,
    contextual: bool,
) -> Result<JobDiff, DiffError> {
    let encode = |j: &Job| serde_json::to_value(j).map_err(|e| DiffError::Encode(e.to_string()));
    let old_v = old.map(encode).transpose()?;
    let new_v = new.map(encode).transpose()?;
    let (o, n) = (
        old_v.as_ref().and_then(Value::as_object),
        new_v.as_ref().and_then(Value::as_object),
    );
    let mut diff = JobDiff::default();
    match (old, new) {
        (None, None) => return Ok(diff),
        (None, Some(nj)) => {
            diff.diff_type = DiffType::Added;
            diff.id = nj.id.clone();
        }
        (Some(oj), None) => {
            diff.diff_type = DiffType::Deleted;
            diff.id = oj.id.clone();
        }
        (Some(oj), Some(nj)) => {
            if oj.id != nj.id {
                return Err(DiffError::DifferentIds(oj.id.clone(), nj.id.clone()));
            }
            diff.id = nj.id.clone();
        }
    }

    let meta = Shape {
        filter: JOB_FILTER,
        maps: &["Meta"],
    };
    diff.fields = field_diffs(
        &flatten(o, meta.filter, meta.maps, &[]),
        &flatten(n, meta.filter, meta.maps, &[]),
        false,
    );
    if let Some(d) = string_set_diff(
        &strings(o, "Datacenters"),
        &strings(n, "Datacenters"),
        "Datacenters",
        contextual,
    )
    .filter(|d| d.diff_type != DiffType::None)
    {
        diff.objects.push(d);
    }
    set_diffs(&mut diff.objects, o, n, contextual);
    diff.task_groups = group_diffs(list(o, "TaskGroups"), list(n, "TaskGroups"), contextual);
    diff.objects.extend(primitive_object_diff(
        object(o, "Periodic"),
        object(n, "Periodic"),
        Shape::default(),
        "Periodic",
        contextual,
    ));
    diff.objects.extend(blocks::parameterized_job_diff(
        object(o, "ParameterizedJob"),
        object(n, "ParameterizedJob"),
        contextual,
    ));
    diff.objects.extend(blocks::multiregion_diff(
        object(o, "Multiregion"),
        object(n, "Multiregion"),
        contextual,
    ));

    // Nomad decides "edited" from what the diff shows, not from the whole job: the filtered
    // fields change with every version.
    if diff.diff_type == DiffType::None
        && (diff.fields.iter().any(|f| f.diff_type != DiffType::None)
            || diff.objects.iter().any(|d| d.diff_type != DiffType::None)
            || diff
                .task_groups
                .iter()
                .any(|d| d.diff_type != DiffType::None))
    {
        diff.diff_type = DiffType::Edited;
    }
    Ok(diff)
}

/// The constraint and affinity sets of a job, group or task.
fn set_diffs(out: &mut Vec<ObjectDiff>, o: Option<&Obj>, n: Option<&Obj>, contextual: bool) {
    for (key, name) in [("Constraints", "Constraint"), ("Affinities", "Affinity")] {
        out.extend(primitive_object_set_diff(
            list(o, key),
            list(n, key),
            Shape::default(),
            name,
            contextual,
        ));
    }
}

/// Nomad's `taskGroupDiffs`: groups pair up by name; sorted by name.
fn group_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<TaskGroupDiff> {
    let o = keyed(old, |g| name_of(g).to_string());
    let n = keyed(new, |g| name_of(g).to_string());
    let mut out: Vec<TaskGroupDiff> = paired(&o, &n, |od, nd| group_diff(od, nd, contextual));
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Nomad's `TaskGroup.Diff`.
fn group_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> TaskGroupDiff {
    let mut d = TaskGroupDiff::default();
    let Some(named) = new.or(old) else {
        return d;
    };
    d.diff_type = opening(old, new).unwrap_or(DiffType::None);
    d.name = name_of(named).to_string();

    let filter: Vec<&str> = ["Name"]
        .into_iter()
        .chain(GROUP_POINTER_FIELDS.iter().copied())
        .collect();
    let mut of = flatten(old, &filter, &["Meta"], &[]);
    let mut nf = flatten(new, &filter, &["Meta"], &[]);
    if old.is_some() && new.is_some() {
        for key in GROUP_POINTER_FIELDS {
            let value = |g| {
                field(g, key)
                    .and_then(|v| primitive(v, false))
                    .unwrap_or_default()
            };
            of.insert((*key).to_string(), value(old));
            nf.insert((*key).to_string(), value(new));
        }
    }
    d.fields = field_diffs(&of, &nf, false);

    set_diffs(&mut d.objects, old, new, contextual);
    for key in [
        "RestartPolicy",
        "ReschedulePolicy",
        "EphemeralDisk",
        "Consul",
    ] {
        d.objects.extend(primitive_object_diff(
            object(old, key),
            object(new, key),
            Shape::default(),
            key,
            contextual,
        ));
    }
    d.objects.extend(primitive_object_diff(
        object(old, "Update"),
        object(new, "Update"),
        Shape {
            filter: &["Stagger"],
            maps: &[],
        },
        "Update",
        contextual,
    ));
    d.objects.extend(blocks::network_diffs(
        list(old, "Networks"),
        list(new, "Networks"),
        contextual,
    ));
    d.objects.extend(blocks::scaling_diff(
        object(old, "Scaling"),
        object(new, "Scaling"),
    ));
    d.objects.extend(blocks::service_diffs(
        list(old, "Services"),
        list(new, "Services"),
        contextual,
    ));
    d.objects.extend(blocks::volume_diffs(
        object(old, "Volumes"),
        object(new, "Volumes"),
        contextual,
    ));
    d.tasks = task_diffs(list(old, "Tasks"), list(new, "Tasks"), contextual);
    d
}

/// Nomad's `taskDiffs`: tasks pair up by name; sorted by name.
fn task_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<TaskDiff> {
    let o = keyed(old, |t| name_of(t).to_string());
    let n = keyed(new, |t| name_of(t).to_string());
    let mut out: Vec<TaskDiff> = paired(&o, &n, |od, nd| task_diff(od, nd, contextual));
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Nomad's `Task.Diff`.
fn task_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> TaskDiff {
    let mut d = TaskDiff::default();
    let Some(named) = new.or(old) else {
        return d;
    };
    d.diff_type = opening(old, new).unwrap_or(DiffType::None);
    d.name = name_of(named).to_string();

    let (filter, maps) = (["Name", "Config"], ["Env", "Meta"]);
    d.fields = field_diffs(
        &flatten(old, &filter, &maps, &[]),
        &flatten(new, &filter, &maps, &[]),
        false,
    );
    set_diffs(&mut d.objects, old, new, contextual);
    d.objects.extend(config_diff(
        field(old, "Config"),
        field(new, "Config"),
        contextual,
    ));
    d.objects.extend(blocks::resources_diff(
        object(old, "Resources"),
        object(new, "Resources"),
        contextual,
    ));
    for key in ["LogConfig", "DispatchPayload"] {
        d.objects.extend(primitive_object_diff(
            object(old, key),
            object(new, key),
            Shape::default(),
            key,
            contextual,
        ));
    }
    d.objects.extend(primitive_object_set_diff(
        list(old, "Artifacts"),
        list(new, "Artifacts"),
        Shape {
            filter: &[],
            maps: &["GetterOptions", "GetterHeaders"],
        },
        "Artifact",
        contextual,
    ));
    d.objects.extend(blocks::service_diffs(
        list(old, "Services"),
        list(new, "Services"),
        contextual,
    ));
    d.objects.extend(blocks::vault_diff(
        object(old, "Vault"),
        object(new, "Vault"),
        contextual,
    ));
    d.objects.extend(blocks::template_diffs(
        list(old, "Templates"),
        list(new, "Templates"),
        contextual,
    ));
    d
}

/// Nomad's `configDiff`: every leaf of the driver config, named by its path (`image`,
/// `args[0]`, `port_map[0][db]`); numbers print as Go prints a decoded JSON number.
fn config_diff(old: Option<&Value>, new: Option<&Value>, contextual: bool) -> Option<ObjectDiff> {
    if old == new {
        return None;
    }
    let empty = |v: Option<&Value>| v.and_then(Value::as_object).is_none_or(|m| m.is_empty());
    let diff_type = if empty(old) {
        DiffType::Added
    } else if empty(new) {
        DiffType::Deleted
    } else {
        DiffType::Edited
    };
    Some(ObjectDiff {
        diff_type,
        name: "Config".into(),
        fields: field_diffs(&flatten_all(old, true), &flatten_all(new, true), contextual),
        objects: Vec::new(),
    })
}
