//! The diffs of the blocks inside jobs, groups and tasks, each as Nomad's `diff.go` writes
//! it: resources and networks (ports by label, networks as whole-object sets), devices,
//! services and their checks, Vault, templates, group volumes, scaling, multiregion and the
//! parameterized block.

use serde_json::{Value, json};

use super::flat::{
    Flat, Obj, Shape, field, field_diffs, flatten, flatten_all, keyed, list, name_of, object,
    opening, paired, primitive_object_diff, sort_fields, sort_objects, string_set_diff, strings,
    type_from_fields,
};
use super::{DiffType, ObjectDiff};

/// An object diff of `diff_type` named `name`.
fn object_diff(diff_type: DiffType, name: &str) -> ObjectDiff {
    ObjectDiff {
        diff_type,
        name: name.to_string(),
        ..Default::default()
    }
}

/// The primitive fields of both sides of a block, the absent side flattened to nothing.
fn flat_pair(
    old: Option<&Obj>,
    new: Option<&Obj>,
    filter: &[&str],
    maps: &[&str],
    defaults: &[(&str, &str)],
) -> (Flat, Flat) {
    (
        flatten(old, filter, maps, defaults),
        flatten(new, filter, maps, defaults),
    )
}

/// Nomad's `Resources.Diff`: the primitive fields, then the networks and devices.
pub(super) fn resources_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    contextual: bool,
) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "Resources");
    let (of, nf) = flat_pair(old, new, &[], &[], &[]);
    d.fields = field_diffs(&of, &nf, contextual);
    d.objects.extend(network_diffs(
        list(old, "Networks"),
        list(new, "Networks"),
        contextual,
    ));
    d.objects.extend(device_diffs(
        list(old, "Devices"),
        list(new, "Devices"),
        contextual,
    ));
    Some(d)
}

/// Nomad's `networkResourceDiffs`: networks are a set of whole objects, so a changed network
/// is one deleted and one added.
pub(super) fn network_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<ObjectDiff> {
    let o = keyed(old, |o| Value::Object(o.clone()).to_string());
    let n = keyed(new, |o| Value::Object(o.clone()).to_string());
    let mut out = Vec::new();
    for (k, ov) in &o {
        if !n.contains_key(k) {
            out.extend(network_diff(Some(ov), None, contextual));
        }
    }
    for (k, nv) in &n {
        if !o.contains_key(k) {
            out.extend(network_diff(None, Some(nv), contextual));
        }
    }
    sort_objects(&mut out);
    out
}

/// Nomad's `NetworkResource.Diff`: mode, hostname and bandwidth (not the device, CIDR or
/// IP), the static and dynamic ports, the DNS settings.
fn network_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "Network");
    let (of, nf) = flat_pair(
        old,
        new,
        &["Device", "CIDR", "IP"],
        &[],
        &[("Hostname", "")],
    );
    d.fields = field_diffs(&of, &nf, contextual);
    d.objects.extend(port_diffs(
        list(old, "ReservedPorts"),
        list(new, "ReservedPorts"),
        false,
        contextual,
    ));
    d.objects.extend(port_diffs(
        list(old, "DynamicPorts"),
        list(new, "DynamicPorts"),
        true,
        contextual,
    ));
    d.objects
        .extend(dns_diff(object(old, "DNS"), object(new, "DNS"), contextual));
    Some(d)
}

/// Nomad's `portDiffs`: ports pair up by label; a dynamic port's value is not compared.
fn port_diffs(old: &[Value], new: &[Value], dynamic: bool, contextual: bool) -> Vec<ObjectDiff> {
    let label = |o: &Obj| {
        o.get("Label")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let o = keyed(old, label);
    let n = keyed(new, label);
    let (name, shape) = if dynamic {
        (
            "Dynamic Port",
            Shape {
                filter: &["Value"],
                maps: &[],
            },
        )
    } else {
        ("Static Port", Shape::default())
    };
    let mut out: Vec<ObjectDiff> = paired(&o, &n, |ov, nv| {
        primitive_object_diff(ov, nv, shape, name, contextual)
    })
    .into_iter()
    .flatten()
    .collect();
    sort_objects(&mut out);
    out
}

/// Nomad's `DNSConfig.Diff`: servers, searches and options, each joined with commas.
fn dns_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "DNS");
    let flat = |o: Option<&Obj>| -> Flat {
        let Some(o) = o else { return Flat::new() };
        ["Servers", "Searches", "Options"]
            .into_iter()
            .filter_map(|k| {
                let v = strings(Some(o), k);
                (!v.is_empty()).then(|| (k.to_string(), v.join(",")))
            })
            .collect()
    };
    d.fields = field_diffs(&flat(old), &flat(new), contextual);
    Some(d)
}

/// Nomad's `requestedDevicesDiffs`: devices pair up by name.
fn device_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<ObjectDiff> {
    let o = keyed(old, |o| name_of(o).to_string());
    let n = keyed(new, |o| name_of(o).to_string());
    let diff = |old: Option<&Obj>, new: Option<&Obj>| {
        let mut d = object_diff(opening(old, new)?, "Device");
        let (of, nf) = flat_pair(old, new, &[], &[], &[]);
        d.fields = field_diffs(&of, &nf, contextual);
        Some(d)
    };
    let mut out: Vec<ObjectDiff> = paired(&o, &n, diff).into_iter().flatten().collect();
    sort_objects(&mut out);
    out
}

/// Nomad's `serviceDiffs`: services have no identity, so each old service pairs with the
/// unmatched new one scoring highest on name (3), port label (2) and position (1), needing
/// more than 2; the rest are added or deleted.
pub(super) fn service_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<ObjectDiff> {
    let old: Vec<&Obj> = old.iter().filter_map(Value::as_object).collect();
    let new: Vec<&Obj> = new.iter().filter_map(Value::as_object).collect();
    if let ([o], [n]) = (old.as_slice(), new.as_slice()) {
        return service_diff(Some(o), Some(n), contextual)
            .into_iter()
            .collect();
    }
    let text = |o: &Obj, k: &str| o.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut new_matched = vec![false; new.len()];
    let mut out = Vec::new();
    for (oi, o) in old.iter().enumerate() {
        let mut best: Option<(usize, u32)> = None;
        for (ni, n) in new.iter().enumerate() {
            if new_matched[ni] {
                continue;
            }
            let mut score = 0;
            if ni == oi {
                score += 1;
            }
            if text(o, "PortLabel") == text(n, "PortLabel") {
                score += 2;
            }
            if text(o, "Name") == text(n, "Name") {
                score += 3;
            }
            if score > 2 && best.is_none_or(|(_, s)| score > s) {
                best = Some((ni, score));
            }
        }
        match best {
            Some((ni, _)) => {
                new_matched[ni] = true;
                out.extend(service_diff(Some(o), Some(new[ni]), contextual));
            }
            None => out.extend(service_diff(Some(o), None, contextual)),
        }
    }
    for (ni, n) in new.iter().enumerate() {
        if !new_matched[ni] {
            out.extend(service_diff(None, Some(n), contextual));
        }
    }
    sort_objects(&mut out);
    out
}

/// Nomad's `serviceDiff`: the primitive fields (with the meta and tagged-address maps), the
/// canary tags and tags as sets, the checks.
fn service_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "Service");
    let maps = ["Meta", "CanaryMeta", "TaggedAddresses"];
    let (of, nf) = flat_pair(old, new, &[], &maps, &[]);
    d.fields = field_diffs(&of, &nf, contextual);
    for key in ["CanaryTags", "Tags"] {
        d.objects.extend(string_set_diff(
            &strings(old, key),
            &strings(new, key),
            key,
            contextual,
        ));
    }
    d.objects.extend(check_diffs(
        list(old, "Checks"),
        list(new, "Checks"),
        contextual,
    ));
    Some(d)
}

/// Nomad's `serviceCheckDiffs`: checks pair up by name.
fn check_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<ObjectDiff> {
    let o = keyed(old, |o| name_of(o).to_string());
    let n = keyed(new, |o| name_of(o).to_string());
    let mut out: Vec<ObjectDiff> = paired(&o, &n, |ov, nv| check_diff(ov, nv, contextual))
        .into_iter()
        .flatten()
        .collect();
    sort_objects(&mut out);
    out
}

/// Nomad's `serviceCheckDiff`: the primitive fields, the headers, `check_restart`.
fn check_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "Check");
    let (of, nf) = flat_pair(old, new, &[], &[], &[]);
    d.fields = field_diffs(&of, &nf, contextual);
    let (oh, nh) = (object(old, "Header"), object(new, "Header"));
    if oh != nh {
        let t = if oh.is_none_or(|h| h.is_empty()) {
            DiffType::Added
        } else if nh.is_none_or(|h| h.is_empty()) {
            DiffType::Deleted
        } else {
            DiffType::Edited
        };
        let mut h = object_diff(t, "Header");
        let as_value = |o: Option<&Obj>| o.map(|o| Value::Object(o.clone()));
        h.fields = field_diffs(
            &flatten_all(as_value(oh).as_ref(), false),
            &flatten_all(as_value(nh).as_ref(), false),
            contextual,
        );
        d.objects.push(h);
    }
    let (ocr, ncr) = (object(old, "CheckRestart"), object(new, "CheckRestart"));
    if let Some(t) = opening(ocr, ncr) {
        let mut cr = object_diff(t, "CheckRestart");
        let (of, nf) = flat_pair(ocr, ncr, &[], &[], &[]);
        cr.fields = field_diffs(&of, &nf, contextual);
        d.objects.push(cr);
    }
    Some(d)
}

/// Nomad's `vaultDiff`: the primitive fields and the policies as a set.
pub(super) fn vault_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    contextual: bool,
) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "Vault");
    let (of, nf) = flat_pair(old, new, &[], &[], &[]);
    d.fields = field_diffs(&of, &nf, contextual);
    d.objects.extend(string_set_diff(
        &strings(old, "Policies"),
        &strings(new, "Policies"),
        "Policies",
        contextual,
    ));
    Some(d)
}

/// Nomad's `templateDiffs`: a single template on each side is compared as is; otherwise
/// templates pair up by destination (`DiffID`).
pub(super) fn template_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<ObjectDiff> {
    let old: Vec<&Obj> = old.iter().filter_map(Value::as_object).collect();
    let new: Vec<&Obj> = new.iter().filter_map(Value::as_object).collect();
    if let ([o], [n]) = (old.as_slice(), new.as_slice()) {
        return template_diff(Some(o), Some(n), contextual)
            .into_iter()
            .collect();
    }
    let dest = |o: &Obj| {
        o.get("DestPath")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut new_matched = vec![false; new.len()];
    let mut out = Vec::new();
    for o in &old {
        let found = (0..new.len()).find(|&i| !new_matched[i] && dest(new[i]) == dest(o));
        match found {
            Some(i) => {
                new_matched[i] = true;
                out.extend(template_diff(Some(o), Some(new[i]), contextual));
            }
            None => out.extend(template_diff(Some(o), None, contextual)),
        }
    }
    for (i, n) in new.iter().enumerate() {
        if !new_matched[i] {
            out.extend(template_diff(None, Some(n), contextual));
        }
    }
    sort_objects(&mut out);
    out
}

/// Nomad's `templateDiff`: the primitive fields, the wait settings (which Nomad names
/// "Template" too) and the change script.
fn template_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "Template");
    let (of, nf) = flat_pair(old, new, &[], &[], &[]);
    d.fields = field_diffs(&of, &nf, contextual);
    let (ow, nw) = (field(old, "Wait"), field(new, "Wait"));
    if let Some(t) = opening(ow.and_then(Value::as_object), nw.and_then(Value::as_object)) {
        let mut w = object_diff(t, "Template");
        w.fields = field_diffs(&flatten_all(ow, false), &flatten_all(nw, false), contextual);
        d.objects.push(w);
    }
    let (ocs, ncs) = (object(old, "ChangeScript"), object(new, "ChangeScript"));
    if let Some(t) = opening(ocs, ncs) {
        let mut cs = object_diff(t, "ChangeScript");
        let (of, nf) = flat_pair(ocs, ncs, &[], &[], &[]);
        cs.fields = field_diffs(&of, &nf, contextual);
        cs.objects.extend(string_set_diff(
            &strings(ocs, "Args"),
            &strings(ncs, "Args"),
            "Args",
            contextual,
        ));
        d.objects.push(cs);
    }
    Some(d)
}

/// Nomad's `volumeDiffs`: a group's volume requests pair up by their name in the map; those
/// of the old version come first (Nomad's order among them is Go's map order; here it is
/// by name).
pub(super) fn volume_diffs(
    old: Option<&Obj>,
    new: Option<&Obj>,
    contextual: bool,
) -> Vec<ObjectDiff> {
    if old == new {
        return Vec::new();
    }
    let mut out = Vec::new();
    for k in old.into_iter().flat_map(|m| m.keys()) {
        out.extend(volume_diff(object(old, k), object(new, k), contextual));
    }
    for k in new.into_iter().flat_map(|m| m.keys()) {
        if old.is_none_or(|m| !m.contains_key(k)) {
            out.extend(volume_diff(None, object(new, k), contextual));
        }
    }
    out
}

/// Nomad's `volumeDiff`: the primitive fields and the CSI mount options.
fn volume_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "Volume");
    let (of, nf) = flat_pair(old, new, &[], &[], &[]);
    d.fields = field_diffs(&of, &nf, contextual);
    let (om, nm) = (object(old, "MountOptions"), object(new, "MountOptions"));
    if let Some(t) = opening(om, nm) {
        let mut m = object_diff(t, "MountOptions");
        let (of, nf) = flat_pair(om, nm, &[], &[], &[]);
        m.fields = field_diffs(&of, &nf, contextual);
        m.objects.extend(string_set_diff(
            &strings(om, "MountFlags"),
            &strings(nm, "MountFlags"),
            "MountFlags",
            contextual,
        ));
        d.objects.push(m);
    }
    Some(d)
}

/// Nomad's `scalingDiff`: min, max, enabled and the target beyond job, group and namespace
/// (never contextual), then the policy, every leaf of it.
pub(super) fn scaling_diff(old: Option<&Obj>, new: Option<&Obj>) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "Scaling");
    let filter = [
        "CreateIndex",
        "ModifyIndex",
        "ID",
        "Type",
        "Target[Job]",
        "Target[Group]",
        "Target[Namespace]",
    ];
    let (of, nf) = flat_pair(old, new, &filter, &["Target"], &[]);
    d.fields = field_diffs(&of, &nf, false);
    let (op, np) = (field(old, "Policy"), field(new, "Policy"));
    if op != np {
        let len = |p: Option<&Value>| p.and_then(Value::as_object).map_or(0, |m| m.len());
        let t = if len(op) == 0 {
            DiffType::Added
        } else if len(np) == 0 {
            DiffType::Deleted
        } else {
            DiffType::Edited
        };
        let mut p = object_diff(t, "Policy");
        p.fields = field_diffs(&flatten_all(op, true), &flatten_all(np, true), false);
        d.objects.push(p);
    }
    sort_fields(&mut d.fields);
    sort_objects(&mut d.objects);
    Some(d)
}

/// Nomad's `parameterizedJobDiff`: the payload setting and the meta keys as sets.
pub(super) fn parameterized_job_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    contextual: bool,
) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "ParameterizedJob");
    let (of, nf) = flat_pair(old, new, &[], &[], &[]);
    d.fields = field_diffs(&of, &nf, contextual);
    for key in ["MetaOptional", "MetaRequired"] {
        d.objects.extend(string_set_diff(
            &strings(old, key),
            &strings(new, key),
            key,
            contextual,
        ));
    }
    Some(d)
}

/// Nomad's `multiregionDiff`: the strategy (against an empty one when the block is new) and
/// the regions by name.
pub(super) fn multiregion_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    contextual: bool,
) -> Option<ObjectDiff> {
    let mut d = object_diff(opening(old, new)?, "Multiregion");
    // A new block is compared with Nomad's canonical empty one: an empty strategy.
    let empty_strategy = json!({"MaxParallel": 0, "OnFailure": ""});
    let old_strategy = match old {
        None => empty_strategy.as_object(),
        Some(_) => object(old, "Strategy"),
    };
    d.objects.extend(primitive_object_diff(
        old_strategy,
        object(new, "Strategy"),
        Shape::default(),
        "Strategy",
        contextual,
    ));
    let o = keyed(list(old, "Regions"), |o| name_of(o).to_string());
    let n = keyed(list(new, "Regions"), |o| name_of(o).to_string());
    d.objects.extend(
        paired(&o, &n, |ov, nv| region_diff(ov, nv, contextual))
            .into_iter()
            .flatten(),
    );
    sort_objects(&mut d.objects);
    Some(d)
}

/// Nomad's `multiregionRegionDiff`: typed by its fields alone, so a region whose only change
/// is its datacenters shows no diff, as in Nomad.
fn region_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    opening(old, new)?;
    let (of, nf) = flat_pair(old, new, &[], &["Meta"], &[]);
    let fields = field_diffs(&of, &nf, contextual);
    let mut d = object_diff(type_from_fields(&fields)?, "Region");
    d.fields = fields;
    if let Some(dc) = string_set_diff(
        &strings(old, "Datacenters"),
        &strings(new, "Datacenters"),
        "Datacenters",
        contextual,
    )
    .filter(|dc| dc.diff_type != DiffType::None)
    {
        d.objects.push(dc);
    }
    Some(d)
}
