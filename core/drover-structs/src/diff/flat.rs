//! The building blocks of Nomad's job diff (`nomad/structs/diff.go` and `helper/flatmap`),
//! over the JSON form of Drover's structs: flattening an object into named primitive values,
//! field diffs, string-set diffs, primitive-object diffs and set diffs of objects, and the
//! order Nomad sorts field and object diffs in.
//!
//! Nomad flattens Go structs by reflection; here the same rules are applied to JSON: a
//! string, number or bool is a primitive field; a nested object is a struct or pointer and
//! left out, unless the caller names it as a string map (`Meta`, `Env`), whose entries become
//! `Meta[key]`; arrays and nulls are left out (Go slices and nil pointers).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{DiffType, FieldDiff, ObjectDiff};

/// Flattened fields: name to Go's `%v` of the value.
pub(super) type Flat = BTreeMap<String, String>;
/// A JSON object.
pub(super) type Obj = Map<String, Value>;

/// The value under `key`, with JSON null taken as absent (Go's nil pointer, slice or map).
pub(super) fn field<'a>(o: Option<&'a Obj>, key: &str) -> Option<&'a Value> {
    o.and_then(|o| o.get(key)).filter(|v| !v.is_null())
}

/// The object under `key`, if there is one.
pub(super) fn object<'a>(o: Option<&'a Obj>, key: &str) -> Option<&'a Obj> {
    field(o, key).and_then(Value::as_object)
}

/// The array under `key`; empty when absent or null.
pub(super) fn list<'a>(o: Option<&'a Obj>, key: &str) -> &'a [Value] {
    field(o, key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The strings of the array under `key` (a Go `[]string`).
pub(super) fn strings(o: Option<&Obj>, key: &str) -> Vec<String> {
    list(o, key)
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// The `Name` of an object (how task groups, tasks, checks and regions pair up).
pub(super) fn name_of(o: &Obj) -> &str {
    o.get("Name").and_then(Value::as_str).unwrap_or("")
}

/// The objects of a list, keyed by `key_of`; a later duplicate replaces an earlier one, as
/// in Nomad's maps.
pub(super) fn keyed<'a>(
    items: &'a [Value],
    key_of: impl Fn(&'a Obj) -> String,
) -> BTreeMap<String, &'a Obj> {
    items
        .iter()
        .filter_map(Value::as_object)
        .map(|o| (key_of(o), o))
        .collect()
}

/// Walks two keyed sets as Nomad's diffs do: every old entry with its new namesake (if
/// any), in key order, then the new entries that have no old one.
pub(super) fn paired<'a, T>(
    old: &BTreeMap<String, &'a Obj>,
    new: &BTreeMap<String, &'a Obj>,
    mut diff: impl FnMut(Option<&'a Obj>, Option<&'a Obj>) -> T,
) -> Vec<T> {
    let mut out = Vec::with_capacity(old.len().max(new.len()));
    for (k, o) in old {
        out.push(diff(Some(o), new.get(k).copied()));
    }
    for (k, n) in new {
        if !old.contains_key(k) {
            out.push(diff(None, Some(n)));
        }
    }
    out
}

/// Go's `%v` of a primitive value: integers in decimal, floats as Go prints a `float64`
/// (`floats` treats every number as one, as Go holds the numbers of a decoded
/// `map[string]interface{}`), bools and strings as they are.
pub(super) fn primitive(v: &Value, floats: bool) -> Option<String> {
    match v {
        Value::Bool(b) => Some(b.to_string()),
        Value::String(s) => Some(s.clone()),
        Value::Number(n) if floats || n.is_f64() => n.as_f64().map(go_float),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)` (what `%v` prints): the shortest digits that
/// read back as `f`, in exponent form when the decimal exponent is below -4 or at least 6, as
/// Go decides for the shortest precision (`1e+06`, `123456`, `1.5e-05`).
pub(super) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Rust's `{:e}` gives the same shortest digits: "-1.234567e6", "1e-5".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if digits.is_empty() {
        return sci;
    }
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}{rest}e{esign}{:02}", exp.abs());
    }
    // Fixed form: the point goes after `exp + 1` digits.
    let point = exp + 1;
    let n = digits.len() as i64;
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point >= n {
        format!("{digits}{}", "0".repeat((point - n) as usize))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

/// Nomad's `flatmap.Flatten(obj, filter, true)`: the primitive fields of an object, the
/// entries of the string maps named in `maps` as `Name[key]`, less the `filter`ed names.
/// `defaults` stands in for fields Drover leaves out of its JSON when empty but Nomad's
/// struct always has.
pub(super) fn flatten(
    o: Option<&Obj>,
    filter: &[&str],
    maps: &[&str],
    defaults: &[(&str, &str)],
) -> Flat {
    let mut flat = Flat::new();
    let Some(o) = o else { return flat };
    for (k, v) in o {
        match v {
            Value::Object(m) if maps.contains(&k.as_str()) => {
                for (mk, mv) in m {
                    if let Some(s) = primitive(mv, false) {
                        flat.insert(format!("{k}[{mk}]"), s);
                    }
                }
            }
            v => {
                if let Some(s) = primitive(v, false) {
                    flat.insert(k.clone(), s);
                }
            }
        }
    }
    for (k, v) in defaults {
        flat.entry((*k).to_string())
            .or_insert_with(|| (*v).to_string());
    }
    for f in filter {
        flat.remove(*f);
    }
    flat
}

/// Nomad's `flatmap.Flatten(obj, nil, false)` for maps and lists (task config, check
/// headers, scaling policies): every leaf, named by its path (`args[0]`, `port_map[0][db]`),
/// null as `nil`.
pub(super) fn flatten_all(v: Option<&Value>, floats: bool) -> Flat {
    fn walk(prefix: &str, v: &Value, floats: bool, out: &mut Flat) {
        match v {
            Value::Null => {
                out.insert(prefix.to_string(), "nil".into());
            }
            Value::Object(m) => {
                for (k, v) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}[{k}]")
                    };
                    walk(&p, v, floats, out);
                }
            }
            Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    walk(&format!("{prefix}[{i}]"), v, floats, out);
                }
            }
            v => {
                if let Some(s) = primitive(v, floats) {
                    out.insert(prefix.to_string(), s);
                }
            }
        }
    }
    let mut out = Flat::new();
    if let Some(v) = v.filter(|v| !v.is_null()) {
        walk("", v, floats, &mut out);
    }
    out
}

/// Nomad's `fieldDiff`: nothing when equal (unless `contextual`), an empty side is an
/// addition or a deletion.
pub(super) fn field_diff(old: &str, new: &str, name: &str, contextual: bool) -> Option<FieldDiff> {
    let mut d = FieldDiff {
        name: name.to_string(),
        ..Default::default()
    };
    if old == new {
        if !contextual {
            return None;
        }
        d.old = old.to_string();
        d.new = new.to_string();
        return Some(d);
    }
    if old.is_empty() {
        d.diff_type = DiffType::Added;
        d.new = new.to_string();
    } else if new.is_empty() {
        d.diff_type = DiffType::Deleted;
        d.old = old.to_string();
    } else {
        d.diff_type = DiffType::Edited;
        d.old = old.to_string();
        d.new = new.to_string();
    }
    Some(d)
}

/// Nomad's `fieldDiffs` over two flattened objects, sorted.
pub(super) fn field_diffs(old: &Flat, new: &Flat, contextual: bool) -> Vec<FieldDiff> {
    let names: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let mut out: Vec<FieldDiff> = names
        .into_iter()
        .filter_map(|k| {
            let o = old.get(k).map_or("", String::as_str);
            let n = new.get(k).map_or("", String::as_str);
            field_diff(o, n, k, contextual)
        })
        .collect();
    sort_fields(&mut out);
    out
}

/// Nomad's `stringSetDiff`: each string added or removed is a field named `name`.
pub(super) fn string_set_diff(
    old: &[String],
    new: &[String],
    name: &str,
    contextual: bool,
) -> Option<ObjectDiff> {
    let o: BTreeSet<&String> = old.iter().collect();
    let n: BTreeSet<&String> = new.iter().collect();
    if o == n && !contextual {
        return None;
    }
    let mut d = ObjectDiff {
        name: name.to_string(),
        ..Default::default()
    };
    let (mut added, mut removed) = (false, false);
    for k in &o {
        if !n.contains(k) {
            d.fields.extend(field_diff(k, "", name, contextual));
            removed = true;
        } else if contextual {
            d.fields.extend(field_diff(k, k, name, contextual));
        }
    }
    for k in n.difference(&o) {
        d.fields.extend(field_diff("", k, name, contextual));
        added = true;
    }
    sort_fields(&mut d.fields);
    d.diff_type = match (added, removed) {
        (true, true) => DiffType::Edited,
        (true, false) => DiffType::Added,
        (false, true) => DiffType::Deleted,
        (false, false) if d.fields.is_empty() => return None,
        (false, false) => DiffType::None,
    };
    Some(d)
}

/// The type Nomad gives an object from its field diffs: edited, or added and deleted
/// together, is an edit; `None` when nothing changed.
pub(super) fn type_from_fields(fields: &[FieldDiff]) -> Option<DiffType> {
    let has = |t: DiffType| fields.iter().any(|f| f.diff_type == t);
    if has(DiffType::Edited) || (has(DiffType::Added) && has(DiffType::Deleted)) {
        Some(DiffType::Edited)
    } else if has(DiffType::Added) {
        Some(DiffType::Added)
    } else if has(DiffType::Deleted) {
        Some(DiffType::Deleted)
    } else {
        None
    }
}

/// How a block diff opens in Nomad: nothing when both sides are equal, otherwise added,
/// deleted or edited by which side is missing.
pub(super) fn opening(old: Option<&Obj>, new: Option<&Obj>) -> Option<DiffType> {
    if old == new {
        return None;
    }
    Some(match (old, new) {
        (None, _) => DiffType::Added,
        (_, None) => DiffType::Deleted,
        _ => DiffType::Edited,
    })
}

/// Options of [`primitive_object_diff`] and [`primitive_object_set_diff`]: fields left out
/// and string maps flattened.
#[derive(Clone, Copy, Default)]
pub(super) struct Shape<'a> {
    pub filter: &'a [&'a str],
    pub maps: &'a [&'a str],
}

/// Nomad's `primitiveObjectDiff`: the primitive fields of two objects, typed by what
/// changed; nothing when no field changed.
pub(super) fn primitive_object_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    shape: Shape<'_>,
    name: &str,
    contextual: bool,
) -> Option<ObjectDiff> {
    let of = flatten(old, shape.filter, shape.maps, &[]);
    let nf = flatten(new, shape.filter, shape.maps, &[]);
    let fields = field_diffs(&of, &nf, contextual);
    Some(ObjectDiff {
        diff_type: type_from_fields(&fields)?,
        name: name.to_string(),
        fields,
        objects: Vec::new(),
    })
}

/// Nomad's `primitiveObjectSetDiff`: two lists as sets of whole objects (Nomad hashes each
/// one); an object in one set only is added or deleted, a changed one is both.
pub(super) fn primitive_object_set_diff(
    old: &[Value],
    new: &[Value],
    shape: Shape<'_>,
    name: &str,
    contextual: bool,
) -> Vec<ObjectDiff> {
    // serde_json's maps are sorted, so equal objects print the same.
    let o = keyed(old, |o| Value::Object(o.clone()).to_string());
    let n = keyed(new, |o| Value::Object(o.clone()).to_string());
    let mut out: Vec<ObjectDiff> = paired(&o, &n, |ov, nv| {
        primitive_object_diff(ov, nv, shape, name, contextual)
    })
    .into_iter()
    .flatten()
    .collect();
    sort_objects(&mut out);
    out
}

/// Nomad's order of diff types in a sort: edited, added, deleted, none.
fn type_rank(t: DiffType) -> u8 {
    match t {
        DiffType::Edited => 0,
        DiffType::Added => 1,
        DiffType::Deleted => 2,
        DiffType::None => 3,
    }
}

/// Nomad's `FieldDiff.Less`: by name, then old value, then new value.
fn field_cmp(a: &FieldDiff, b: &FieldDiff) -> Ordering {
    a.name
        .cmp(&b.name)
        .then_with(|| a.old.cmp(&b.old))
        .then_with(|| a.new.cmp(&b.new))
}

/// Nomad's `ObjectDiff.Less`: by name, type, number of fields, number of objects, then the
/// fields and objects themselves (compared in order here, where Go's comparison is not a
/// strict order).
fn object_cmp(a: &ObjectDiff, b: &ObjectDiff) -> Ordering {
    a.name
        .cmp(&b.name)
        .then_with(|| type_rank(a.diff_type).cmp(&type_rank(b.diff_type)))
        .then_with(|| a.fields.len().cmp(&b.fields.len()))
        .then_with(|| a.objects.len().cmp(&b.objects.len()))
        .then_with(|| {
            a.fields
                .iter()
                .zip(&b.fields)
                .map(|(x, y)| field_cmp(x, y))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        })
        .then_with(|| {
            a.objects
                .iter()
                .zip(&b.objects)
                .map(|(x, y)| object_cmp(x, y))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        })
}

pub(super) fn sort_fields(fields: &mut [FieldDiff]) {
    fields.sort_by(field_cmp);
}

pub(super) fn sort_objects(objects: &mut [ObjectDiff]) {
    objects.sort_by(object_cmp);
}
