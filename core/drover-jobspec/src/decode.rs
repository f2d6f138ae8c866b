//! Schema-driven decoding of an expanded HCL body into Nomad's api JSON shape.
//!
//! Follows gohcl's rules as Nomad's jobspec2 uses them: unknown arguments and
//! block types are errors, single blocks may appear once, map-typed blocks are
//! read as plain attributes, and driver `config` blocks keep nested blocks as
//! lists of objects (Nomad's `BlocksAsAttrs`).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use hcl_edit::Span;
use hcl_edit::expr::Expression;
use serde_json::{Map, Value as Json};

use crate::duration::parse_duration;
use crate::error::{DResult, Diag};
use crate::eval::Context;
use crate::schema::{self, Field, Kind, NEW, OMIT, ONE, PTR, REQ, Special, StructDef};
use crate::tree::{Attr, Block, Body, Label};
use crate::value::Value;

/// Job-wide pieces the job rules collect besides the job struct itself.
#[derive(Default)]
pub(crate) struct JobExtras {
    /// A `vault` block directly inside `job`, inherited by every task without one.
    pub vault: Option<Json>,
    /// `task` blocks directly inside `job`; each becomes a group of its own.
    pub tasks: Vec<Json>,
}

pub(crate) struct Decoder<'c> {
    pub ctx: &'c Context<'c>,
    pub extras: JobExtras,
}

fn unsupported_argument(name: &str, span: Option<Range<usize>>) -> Diag {
    Diag::new(
        span,
        "Unsupported argument",
        format!("An argument named \"{name}\" is not expected here."),
    )
}

fn unsupported_block(name: &str, span: Option<Range<usize>>) -> Diag {
    Diag::new(
        span,
        "Unsupported block type",
        format!("Blocks of type \"{name}\" are not expected here."),
    )
}

fn unsuitable(span: Option<Range<usize>>, detail: impl Into<String>) -> Diag {
    Diag::new(
        span,
        "Unsuitable value type",
        format!("Unsuitable value: {}", detail.into()),
    )
}

/// Checks the label count of a block against what its struct expects.
fn check_labels(block: &Block<'_>, want: usize, names: &str) -> DResult<()> {
    let have = block.labels.len();
    if have > want {
        let span = block
            .labels
            .get(want)
            .and_then(|l| l.span.clone())
            .or(block.span());
        return Err(Diag::new(
            span,
            format!("Extraneous label for {}", block.ty),
            if want == 0 {
                format!("No labels are expected for {} blocks.", block.ty)
            } else {
                format!(
                    "Only {want} labels ({names}) are expected for {} blocks.",
                    block.ty
                )
            },
        ));
    }
    if have < want {
        return Err(Diag::new(
            block.span(),
            format!("Missing {names} for {}", block.ty),
            format!("All {} blocks must have {want} labels ({names}).", block.ty),
        ));
    }
    Ok(())
}

/// Rejects a second definition of the same argument in one body.
fn check_duplicate_attrs(body: &Body<'_>) -> DResult<()> {
    let mut seen: HashMap<&str, &Attr<'_>> = HashMap::new();
    for a in &body.attrs {
        if seen.insert(a.name.as_str(), a).is_some() {
            return Err(Diag::new(
                a.name_span.clone(),
                "Attribute redefined",
                format!("The argument \"{}\" was already set.", a.name),
            ));
        }
    }
    Ok(())
}

/// An attribute of a map-typed block: name, value, and where the value is written.
type EvaluatedAttr = (String, Value, Option<Range<usize>>);

fn str_json(s: String) -> Json {
    Json::String(s)
}

impl<'c> Decoder<'c> {
    pub(crate) fn new(ctx: &'c Context<'c>) -> Decoder<'c> {
        Decoder {
            ctx,
            extras: JobExtras::default(),
        }
    }

    pub(crate) fn eval(&self, a: &Attr<'_>) -> DResult<Value> {
        self.ctx.eval(a.expr, &a.scope)
    }

    /// Decodes a block into the JSON object for `def`.
    pub(crate) fn decode_block(
        &mut self,
        def: &'static StructDef,
        block: &Block<'_>,
    ) -> DResult<Map<String, Json>> {
        check_labels(block, def.labels, "name")?;
        self.decode_body(def, &block.labels, &block.body, block.span())
    }

    fn decode_body(
        &mut self,
        def: &'static StructDef,
        labels: &[Label],
        body: &Body<'_>,
        span: Option<Range<usize>>,
    ) -> DResult<Map<String, Json>> {
        match def.special {
            Special::Constraint => return self.decode_constraint(def, body),
            Special::Affinity => return self.decode_affinity(def, body),
            _ => {}
        }
        check_duplicate_attrs(body)?;
        let mut set: HashMap<&'static str, Json> = HashMap::new();
        let mut block_spans: HashMap<&'static str, Option<Range<usize>>> = HashMap::new();

        if let Some(label) = labels.first()
            && let Some(f) = def.fields.iter().find(|f| matches!(f.kind, Kind::Label))
        {
            set.insert(f.json, str_json(label.value.clone()));
        }

        for a in &body.attrs {
            let field = def
                .attr_field(&a.name)
                .ok_or_else(|| unsupported_argument(&a.name, a.name_span.clone()))?;
            let v = self.eval(a)?;
            if matches!(field.kind, Kind::StrMap) {
                // `meta = { ... }` attribute form; a block of the same name is a duplicate.
                if let Some(b) = body.blocks.iter().find(|b| b.ty == a.name) {
                    return Err(Diag::new(
                        b.span(),
                        format!("Duplicate {} block", a.name),
                        format!("{} may not be defined more than once.", a.name),
                    ));
                }
                if let Some(m) = str_map_from_value(&v, a.expr.span())? {
                    set.insert(field.json, m);
                }
                continue;
            }
            if let Some(j) = convert_attr(field, &v, a)? {
                set.insert(field.json, j);
            }
        }

        let mut scaling_seen: HashMap<String, Option<Range<usize>>> = HashMap::new();
        for b in &body.blocks {
            // Struct-specific blocks first.
            match (def.special, b.ty.as_str()) {
                (Special::Job, "vault") => {
                    check_labels(b, 0, "name")?;
                    if self.extras.vault.is_some() {
                        return Err(duplicate_block(b));
                    }
                    let v = self.decode_block(&schema::VAULT, b)?;
                    self.extras.vault = Some(Json::Object(v));
                    continue;
                }
                (Special::Job, "task") => {
                    let t = self.decode_block(&schema::TASK, b)?;
                    self.extras.tasks.push(Json::Object(t));
                    continue;
                }
                (Special::Group, "vault") => {
                    check_labels(b, 0, "name")?;
                    if set.contains_key("__group_vault") {
                        return Err(duplicate_block(b));
                    }
                    let v = self.decode_block(&schema::VAULT, b)?;
                    set.insert("__group_vault", Json::Object(v));
                    continue;
                }
                (Special::Task, "scaling") => {
                    let policy = self.decode_task_scaling(b, &mut scaling_seen)?;
                    push_list(&mut set, "ScalingPolicies", Json::Object(policy));
                    continue;
                }
                _ => {}
            }
            let field = def
                .block_field(&b.ty)
                .ok_or_else(|| unsupported_block(&b.ty, b.span()))?;
            match field.kind {
                Kind::Struct(d) => {
                    if set.contains_key(field.json) {
                        return Err(duplicate_block_at(
                            b,
                            block_spans.get(field.json).cloned().flatten(),
                        ));
                    }
                    let v = self.decode_block(d, b)?;
                    set.insert(field.json, Json::Object(v));
                    block_spans.insert(field.json, b.span());
                }
                Kind::List(d) => {
                    if field.has(ONE) && set.contains_key(field.json) {
                        return Err(Diag::new(
                            b.span(),
                            format!("Too many {} blocks", b.ty),
                            format!("Only one {} block is allowed here.", b.ty),
                        ));
                    }
                    let v = self.decode_block(d, b)?;
                    push_list(&mut set, field.json, Json::Object(v));
                }
                Kind::LabeledMap(d) => {
                    let v = self.decode_block(d, b)?;
                    let key = b
                        .labels
                        .first()
                        .map(|l| l.value.clone())
                        .unwrap_or_default();
                    let entry = set
                        .entry(field.json)
                        .or_insert_with(|| Json::Object(Map::new()));
                    if let Json::Object(m) = entry {
                        m.insert(key, Json::Object(v));
                    }
                }
                Kind::StrMap | Kind::StrListMap | Kind::AnyMap => {
                    check_labels(b, 0, "name")?;
                    if set.contains_key(field.json) {
                        return Err(duplicate_block_at(
                            b,
                            block_spans.get(field.json).cloned().flatten(),
                        ));
                    }
                    let v = match field.kind {
                        Kind::StrMap => self.str_map_block(&b.body)?,
                        Kind::StrListMap => self.str_list_map_block(&b.body)?,
                        _ => self.any_map_block(&b.body)?,
                    };
                    set.insert(field.json, v);
                    block_spans.insert(field.json, b.span());
                }
                _ => return Err(unsupported_block(&b.ty, b.span())),
            }
        }

        for f in def.fields.iter().filter(|f| f.has(REQ)) {
            if !set.contains_key(f.json) {
                return Err(Diag::new(
                    span.clone(),
                    "Missing required argument",
                    format!(
                        "The argument \"{}\" is required in a {} block, but no definition was found.",
                        f.hcl, def.name
                    ),
                ));
            }
        }

        if def.special == Special::Periodic
            && (set.contains_key("Spec") || set.contains_key("Specs"))
        {
            set.insert("SpecType", str_json("cron".into()));
        }
        if def.special == Special::Group {
            self.group_rules(&mut set, body)?;
        }
        if def.special == Special::Network {
            check_port_labels(body)?;
        }

        Ok(finish(def, set))
    }

    /// Nomad's group rules: a group `vault` applies to tasks without one, and a
    /// group scaling policy is horizontal and must set `max`.
    fn group_rules(
        &mut self,
        set: &mut HashMap<&'static str, Json>,
        body: &Body<'_>,
    ) -> DResult<()> {
        if let Some(vault) = set.remove("__group_vault")
            && let Some(Json::Array(tasks)) = set.get_mut("Tasks")
        {
            for t in tasks.iter_mut() {
                if let Json::Object(t) = t
                    && t.get("Vault").is_none_or(Json::is_null)
                {
                    t.insert("Vault".into(), vault.clone());
                }
            }
        }
        if let Some(Json::Object(scaling)) = set.get_mut("Scaling") {
            let ty = scaling
                .get("Type")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string();
            if ty.is_empty() {
                scaling.insert("Type".into(), str_json("horizontal".into()));
            }
            let block = body.blocks.iter().find(|b| b.ty == "scaling");
            let block_span = block.and_then(|b| b.span());
            if scaling.get("Max").is_none_or(Json::is_null) {
                return Err(Diag::new(
                    block_span,
                    "Missing required argument",
                    "The argument \"max\" is required, but no definition was found.",
                ));
            }
            if !ty.is_empty() && ty != "horizontal" {
                let at = block
                    .and_then(|b| b.body.attrs.iter().find(|a| a.name == "type"))
                    .and_then(|a| a.expr.span());
                return Err(Diag::new(
                    at,
                    "Invalid group scaling type",
                    format!("task group scaling policy had invalid type: {ty:?}"),
                ));
            }
        }
        Ok(())
    }

    /// A task's `scaling "cpu"` / `scaling "mem"` block (vertical autoscaling).
    fn decode_task_scaling(
        &mut self,
        b: &Block<'_>,
        seen: &mut HashMap<String, Option<Range<usize>>>,
    ) -> DResult<Map<String, Json>> {
        check_labels(b, 1, "name")?;
        let label = b
            .labels
            .first()
            .map(|l| l.value.to_lowercase())
            .unwrap_or_default();
        let label_span = b.labels.first().and_then(|l| l.span.clone());
        let policy_type = match label.as_str() {
            "cpu" => "vertical_cpu",
            "mem" => "vertical_mem",
            _ => {
                return Err(Diag::new(
                    label_span,
                    "Invalid scaling policy name",
                    "scaling policy name must be \"cpu\" or \"mem\"",
                ));
            }
        };
        if seen.insert(label.clone(), b.span()).is_some() {
            return Err(Diag::new(
                b.span(),
                format!("Duplicate scaling {label:?} block"),
                format!("Only one scaling {label} block is allowed."),
            ));
        }
        let mut policy = self.decode_body(&schema::SCALING, &[], &b.body, b.span())?;
        let ty = policy
            .get("Type")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_string();
        if ty.is_empty() {
            policy.insert("Type".into(), str_json(policy_type.into()));
        } else if ty != policy_type {
            return Err(Diag::new(
                b.span(),
                "Invalid scaling policy type",
                format!("Invalid policy type, expected {ty:?} but found {policy_type:?}"),
            ));
        }
        Ok(policy)
    }

    /// Evaluates the attributes of a constraint/affinity body, each converted to
    /// a string (bools for `distinct_hosts`).
    fn constraint_attrs(
        &self,
        body: &Body<'_>,
        allowed: &[&str],
    ) -> DResult<HashMap<String, Value>> {
        check_duplicate_attrs(body)?;
        if let Some(b) = body.blocks.first() {
            return Err(unsupported_block(&b.ty, b.span()));
        }
        let mut out = HashMap::new();
        for a in &body.attrs {
            if !allowed.contains(&a.name.as_str()) {
                return Err(unsupported_argument(&a.name, a.name_span.clone()));
            }
            let v = self.eval(a)?;
            let v = match (a.name.as_str(), &v) {
                ("distinct_hosts", _) => v
                    .to_bool()
                    .map_err(|e| Diag::new(a.expr.span(), "Incorrect attribute value type", e))?
                    .map(Value::Bool),
                ("weight", _) => v
                    .to_number()
                    .map_err(|e| Diag::new(a.expr.span(), "Incorrect attribute value type", e))?
                    .map(Value::Number),
                _ => v
                    .to_str()
                    .map_err(|e| {
                        Diag::new(
                            a.expr.span(),
                            "Incorrect attribute value type",
                            format!("Inappropriate value for attribute \"{}\": {e}.", a.name),
                        )
                    })?
                    .map(Value::String),
            };
            if let Some(v) = v {
                out.insert(a.name.clone(), v);
            }
        }
        Ok(out)
    }

    fn decode_constraint(
        &self,
        def: &'static StructDef,
        body: &Body<'_>,
    ) -> DResult<Map<String, Json>> {
        let attrs = self.constraint_attrs(
            body,
            &[
                "attribute",
                "value",
                "operator",
                "distinct_property",
                "distinct_hosts",
                "regexp",
                "version",
                "semver",
                "set_contains",
                "set_contains_all",
                "set_contains_any",
                "attribute_is_set",
                "attribute_is_not_set",
            ],
        )?;
        let s = |k: &str| match attrs.get(k) {
            Some(Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        let mut l = s("attribute");
        let mut r = s("value");
        let mut op = s("operator");
        for key in ["version", "semver", "regexp", "set_contains"] {
            let v = s(key);
            if !v.is_empty() {
                op = key.to_string();
                r = v;
            }
        }
        if matches!(attrs.get("distinct_hosts"), Some(Value::Bool(true))) {
            op = "distinct_hosts".into();
        }
        let prop = s("distinct_property");
        if !prop.is_empty() {
            op = "distinct_property".into();
            l = prop;
        }
        if op.is_empty() {
            op = "=".into();
        }
        let mut set = HashMap::new();
        set.insert("LTarget", str_json(l));
        set.insert("RTarget", str_json(r));
        set.insert("Operand", str_json(op));
        Ok(finish(def, set))
    }

    fn decode_affinity(
        &self,
        def: &'static StructDef,
        body: &Body<'_>,
    ) -> DResult<Map<String, Json>> {
        let attrs = self.constraint_attrs(
            body,
            &[
                "attribute",
                "value",
                "operator",
                "weight",
                "version",
                "semver",
                "regexp",
                "set_contains",
                "set_contains_all",
                "set_contains_any",
            ],
        )?;
        let s = |k: &str| match attrs.get(k) {
            Some(Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        let l = s("attribute");
        let mut r = s("value");
        let mut op = s("operator");
        for key in [
            "version",
            "semver",
            "regexp",
            "set_contains_any",
            "set_contains_all",
            "set_contains",
        ] {
            let v = s(key);
            if !v.is_empty() {
                op = key.to_string();
                r = v;
            }
        }
        if op.is_empty() {
            op = "=".into();
        }
        let mut set = HashMap::new();
        set.insert("LTarget", str_json(l));
        set.insert("RTarget", str_json(r));
        set.insert("Operand", str_json(op));
        if let Some(Value::Number(n)) = attrs.get("weight") {
            // Nomad truncates to int64 then narrows to int8, wrapping out-of-range weights.
            let w = n.as_i64().unwrap_or(n.as_f64() as i64);
            set.insert("Weight", Json::from(i64::from(w as i8)));
        }
        Ok(finish(def, set))
    }

    fn just_attributes(&self, body: &Body<'_>) -> DResult<Vec<EvaluatedAttr>> {
        check_duplicate_attrs(body)?;
        let mut out = Vec::new();
        for a in &body.attrs {
            out.push((a.name.clone(), self.eval(a)?, a.expr.span()));
        }
        Ok(out)
    }

    fn str_map_block(&self, body: &Body<'_>) -> DResult<Json> {
        if let Some(b) = body.blocks.first() {
            return Err(Diag::new(
                b.span(),
                format!("Unexpected \"{}\" block", b.ty),
                "Blocks are not allowed here.",
            ));
        }
        let mut m = Map::new();
        for (k, v, span) in self.just_attributes(body)? {
            match v.to_str() {
                Ok(Some(s)) => {
                    m.insert(k, Json::String(s));
                }
                Ok(None) => {}
                Err(e) => return Err(unsuitable(span, e)),
            }
        }
        Ok(Json::Object(m))
    }

    fn str_list_map_block(&self, body: &Body<'_>) -> DResult<Json> {
        if let Some(b) = body.blocks.first() {
            return Err(Diag::new(
                b.span(),
                format!("Unexpected \"{}\" block", b.ty),
                "Blocks are not allowed here.",
            ));
        }
        let mut m = Map::new();
        for (k, v, span) in self.just_attributes(body)? {
            let Value::Tuple(items) = v else {
                return Err(unsuitable(
                    span,
                    format!("list of string required, but have {}", v.type_name()),
                ));
            };
            let mut list = Vec::new();
            for item in items {
                // Stricter than cty on purpose: Nomad's own fixtures reject numbers in headers.
                match item {
                    Value::String(s) => list.push(Json::String(s)),
                    other => {
                        return Err(unsuitable(
                            span,
                            format!("header values must be strings, not {}", other.type_name()),
                        ));
                    }
                }
            }
            m.insert(k, Json::Array(list));
        }
        Ok(Json::Object(m))
    }

    /// A free-form map (driver config): nested blocks become lists of objects
    /// keyed by label, and object-valued arguments become one-element lists,
    /// exactly as Nomad's HCL2 parser keeps HCL1's shapes.
    fn any_map_block(&self, body: &Body<'_>) -> DResult<Json> {
        Ok(self.block_body_value(body, 0)?.to_json())
    }

    fn block_body_value(&self, body: &Body<'_>, depth: usize) -> DResult<Value> {
        if depth > 128 {
            return Err(Diag::new(
                None,
                "Nesting too deep",
                "Blocks are nested too deeply.",
            ));
        }
        let mut m: BTreeMap<String, Value> = BTreeMap::new();
        for (k, v, _) in self.just_attributes(body)? {
            let wrapped = match (body.attrs.iter().find(|a| a.name == k).map(|a| a.expr), v) {
                (Some(Expression::Object(_)), v) => Value::Tuple(vec![v]),
                (_, v) => v,
            };
            m.insert(k, wrapped);
        }
        let mut by_type: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
        for b in &body.blocks {
            let mut v = self.block_body_value(&b.body, depth + 1)?;
            for label in b.labels.iter().rev() {
                v = Value::Object(
                    [(label.value.clone(), Value::Tuple(vec![v]))]
                        .into_iter()
                        .collect(),
                );
            }
            by_type.entry(b.ty.as_str()).or_default().push(v);
        }
        for (ty, items) in by_type {
            m.insert(ty.to_string(), Value::Tuple(items));
        }
        Ok(Value::Object(m))
    }
}

/// Port labels name environment variables and service ports, so Nomad needs
/// them non-empty and unique regardless of case. (Nomad's HCL1 parser also
/// rejected dashes, but HCL2 jobs use them freely.)
fn check_port_labels(body: &Body<'_>) -> DResult<()> {
    let mut seen = HashMap::new();
    for b in body
        .blocks
        .iter()
        .filter(|b| b.ty == "port" || b.ty == "reserved_ports")
    {
        let Some(label) = b.labels.first() else {
            continue;
        };
        if label.value.is_empty() || label.value.chars().any(char::is_whitespace) {
            return Err(Diag::new(
                label.span.clone().or(b.span()),
                "Invalid port label",
                format!(
                    "Port label {:?} must be non-empty and contain no whitespace.",
                    label.value
                ),
            ));
        }
        if let Some(first) = seen.insert(label.value.to_lowercase(), label.value.clone()) {
            return Err(Diag::new(
                label.span.clone().or(b.span()),
                "Duplicate port label",
                format!(
                    "found a port label collision: {:?} and {:?}",
                    first, label.value
                ),
            ));
        }
    }
    Ok(())
}

fn duplicate_block(b: &Block<'_>) -> Diag {
    duplicate_block_at(b, None)
}

fn duplicate_block_at(b: &Block<'_>, _previous: Option<Range<usize>>) -> Diag {
    Diag::new(
        b.span(),
        format!("Duplicate {} block", b.ty),
        format!(
            "Only one block of type \"{}\" is allowed in this context.",
            b.ty
        ),
    )
}

fn push_list(set: &mut HashMap<&'static str, Json>, key: &'static str, item: Json) {
    let entry = set.entry(key).or_insert_with(|| Json::Array(Vec::new()));
    if let Json::Array(items) = entry {
        items.push(item);
    }
}

/// `env = { ... }` / `meta = { ... }` attribute form.
fn str_map_from_value(v: &Value, span: Option<Range<usize>>) -> DResult<Option<Json>> {
    match v {
        Value::Null => Ok(None),
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                match x.to_str() {
                    Ok(Some(s)) => {
                        out.insert(k.clone(), Json::String(s));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Err(unsuitable(
                            span,
                            format!("map of string required; element {k:?}: {e}"),
                        ));
                    }
                }
            }
            Ok(Some(Json::Object(out)))
        }
        other => Err(unsuitable(
            span,
            format!("map of string required, but have {}", other.type_name()),
        )),
    }
}

/// Converts an attribute value to the JSON for a scalar or list field;
/// `None` when the value is null (the field stays unset).
fn convert_attr(field: &Field, v: &Value, a: &Attr<'_>) -> DResult<Option<Json>> {
    let span = a.expr.span();
    let bad = |e: String| unsuitable(span.clone(), e);
    Ok(match field.kind {
        Kind::Str => v.to_str().map_err(bad)?.map(Json::String),
        Kind::Bool => v.to_bool().map_err(bad)?.map(Json::Bool),
        Kind::Int => match v.to_number().map_err(bad)? {
            None => None,
            Some(n) => Some(Json::from(n.as_i64().ok_or_else(|| {
                unsuitable(
                    span.clone(),
                    format!("a whole number is required for {}", a.name),
                )
            })?)),
        },
        Kind::Dur => match v {
            Value::Null => None,
            Value::String(s) => {
                let d = parse_duration(s).map_err(|_| {
                    Diag::new(
                        span.clone(),
                        format!("invalid duration {s:?} for {}", a.name),
                        "",
                    )
                })?;
                Some(Json::from(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)))
            }
            Value::Number(n) => Some(Json::from(n.as_i64().ok_or_else(|| {
                unsuitable(
                    span.clone(),
                    format!("a whole number of nanoseconds is required for {}", a.name),
                )
            })?)),
            other => {
                return Err(Diag::new(
                    span,
                    "Unsuitable value type",
                    format!(
                        "Unsuitable value: expected a string but found {}",
                        other.type_name()
                    ),
                ));
            }
        },
        Kind::StrList | Kind::IntList => match v {
            Value::Null => None,
            Value::Tuple(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    if matches!(field.kind, Kind::StrList) {
                        match item.to_str().map_err(bad)? {
                            Some(s) => out.push(Json::String(s)),
                            None => {
                                return Err(unsuitable(
                                    span,
                                    "null values are not allowed in this list",
                                ));
                            }
                        }
                    } else {
                        match item.to_number().map_err(bad)?.and_then(|n| n.as_i64()) {
                            Some(i) => out.push(Json::from(i)),
                            None => {
                                return Err(unsuitable(
                                    span,
                                    "a list of whole numbers is required",
                                ));
                            }
                        }
                    }
                }
                Some(Json::Array(out))
            }
            other => {
                let what = if matches!(field.kind, Kind::StrList) {
                    "string"
                } else {
                    "number"
                };
                return Err(unsuitable(
                    span,
                    format!("list of {what} required, but have {}", other.type_name()),
                ));
            }
        },
        _ => return Err(unsupported_argument(&a.name, a.name_span.clone())),
    })
}

/// Lays the decoded fields out in Nomad's order, filling in what Go's JSON
/// encoder prints for unset fields.
pub(crate) fn finish(
    def: &'static StructDef,
    mut set: HashMap<&'static str, Json>,
) -> Map<String, Json> {
    let mut out = Map::new();
    for f in def.fields {
        match set.remove(f.json) {
            Some(v) => {
                out.insert(f.json.to_string(), v);
            }
            None if f.has(NEW) || f.has(OMIT) => {}
            None => {
                out.insert(f.json.to_string(), zero(f));
            }
        }
    }
    out
}

/// The JSON Go prints for a field's zero value.
pub(crate) fn zero(f: &Field) -> Json {
    if f.has(PTR) {
        return Json::Null;
    }
    match f.kind {
        Kind::Str | Kind::Label => Json::String(String::new()),
        Kind::Int | Kind::Dur => Json::from(0),
        Kind::Bool => Json::Bool(false),
        _ => Json::Null,
    }
}
