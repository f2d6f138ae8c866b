//! Evaluation of HCL expressions and templates over hcl-edit's syntax tree.
//!
//! Mirrors Nomad's evaluation context: `var.*` and `local.*` resolve to the
//! job's variables, HCL functions are available, and any other root name
//! (`attr`, `node`, `meta`, `NOMAD_ALLOC_DIR`, `env`...) is a runtime reference
//! that Nomad keeps as the literal text `${...}` for the client to interpolate.

pub(crate) mod functions;
pub(crate) mod types;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;

use hcl_edit::Span;
use hcl_edit::expr::{
    BinaryOperator, Expression, ForExpr, FuncCall, ObjectKey, Traversal, TraversalOperator,
    UnaryOperator,
};
use hcl_edit::template::{Directive, Element, Template};

use crate::error::{DResult, Diag};
use crate::value::{Number, Value};

/// Guards against stack exhaustion on pathological nesting.
const MAX_DEPTH: usize = 256;

/// Values nested deeper than this are refused: every value is later walked
/// recursively (conversion, JSON, drop), so depth must stay small.
const MAX_VALUE_DEPTH: usize = 64;

/// Evaluation work allowed per context, in value nodes plus string bytes
/// produced, so that a job cannot make the parser exhaust memory or time.
const MAX_WORK: u64 = 64_000_000;

/// A name bound by a `for` expression, template `for` directive or dynamic block iterator.
#[derive(Debug)]
pub(crate) struct Scope {
    parent: Option<Rc<Scope>>,
    name: String,
    value: Value,
}

impl Scope {
    pub(crate) fn bind(
        parent: Option<Rc<Scope>>,
        name: impl Into<String>,
        value: Value,
    ) -> Rc<Scope> {
        Rc::new(Scope {
            parent,
            name: name.into(),
            value,
        })
    }

    fn lookup<'s>(scope: &'s Option<Rc<Scope>>, name: &str) -> Option<&'s Value> {
        let mut cur = scope.as_ref();
        while let Some(s) = cur {
            if s.name == name {
                return Some(&s.value);
            }
            cur = s.parent.as_ref();
        }
        None
    }
}

/// Everything an expression may refer to.
pub(crate) struct Context<'a> {
    /// The source the expressions were parsed from; runtime references are
    /// copied out of it verbatim.
    pub src: &'a str,
    /// `var.*`; `None` means variables are not available (variable files, defaults).
    pub vars: Option<&'a BTreeMap<String, Value>>,
    /// `local.*`.
    pub locals: Option<&'a BTreeMap<String, Value>>,
    /// Whether functions may be called (not in variable files).
    pub functions: bool,
    /// Directory `file()` and friends resolve relative paths against.
    pub base_dir: PathBuf,
    /// Work spent so far, see [`MAX_WORK`].
    work: Cell<u64>,
}

impl<'a> Context<'a> {
    /// A context for constant expressions: no variables, no functions.
    pub(crate) fn literal(src: &'a str) -> Context<'a> {
        Context {
            src,
            vars: None,
            locals: None,
            functions: false,
            base_dir: PathBuf::from("."),
            work: Cell::new(0),
        }
    }

    /// A context for job expressions: variables, locals and functions.
    pub(crate) fn new(
        src: &'a str,
        vars: &'a BTreeMap<String, Value>,
        locals: &'a BTreeMap<String, Value>,
        base_dir: PathBuf,
    ) -> Context<'a> {
        Context {
            src,
            vars: Some(vars),
            locals: Some(locals),
            functions: true,
            base_dir,
            work: Cell::new(0),
        }
    }

    /// Accounts for a freshly produced value and refuses values that are too
    /// deep or push the context past its work budget.
    fn charge(&self, v: &Value, span: Option<std::ops::Range<usize>>) -> DResult<()> {
        let spent = self.work.get();
        let (cost, depth) = measure(v, MAX_WORK.saturating_sub(spent).saturating_add(1));
        if depth > MAX_VALUE_DEPTH {
            return Err(Diag::new(
                span,
                "Value too deeply nested",
                format!("Values may be nested at most {MAX_VALUE_DEPTH} levels deep."),
            ));
        }
        let total = spent.saturating_add(cost);
        self.work.set(total);
        if total > MAX_WORK {
            return Err(Diag::new(
                span,
                "Expression too expensive",
                "Evaluating this job produces more data than the parser allows.",
            ));
        }
        Ok(())
    }

    pub(crate) fn eval(&self, expr: &Expression, scope: &Option<Rc<Scope>>) -> DResult<Value> {
        self.eval_depth(expr, scope, 0)
    }

    fn text(&self, span: &Option<std::ops::Range<usize>>) -> &'a str {
        span.as_ref()
            .and_then(|s| self.src.get(s.clone()))
            .unwrap_or("")
    }

    /// Accounts for `n` bytes of template text produced without evaluation.
    fn charge_bytes(&self, n: usize, span: Option<std::ops::Range<usize>>) -> DResult<()> {
        let total = self.work.get().saturating_add(n as u64);
        self.work.set(total);
        if total > MAX_WORK {
            return Err(Diag::new(
                span,
                "Expression too expensive",
                "Evaluating this job produces more data than the parser allows.",
            ));
        }
        Ok(())
    }

    fn eval_depth(
        &self,
        expr: &Expression,
        scope: &Option<Rc<Scope>>,
        depth: usize,
    ) -> DResult<Value> {
        let v = self.eval_unmetered(expr, scope, depth)?;
        self.charge(&v, expr.span())?;
        Ok(v)
    }

    fn eval_unmetered(
        &self,
        expr: &Expression,
        scope: &Option<Rc<Scope>>,
        depth: usize,
    ) -> DResult<Value> {
        if depth > MAX_DEPTH {
            return Err(Diag::new(
                expr.span(),
                "Expression too complex",
                "nesting is too deep",
            ));
        }
        let d = depth + 1;
        match expr {
            Expression::Null(_) => Ok(Value::Null),
            Expression::Bool(b) => Ok(Value::Bool(*b.value())),
            Expression::Number(n) => Ok(Value::Number(convert_number(n.value()))),
            Expression::String(s) => Ok(Value::string(s.value().clone())),
            Expression::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items.iter() {
                    out.push(self.eval_depth(item, scope, d)?);
                }
                Ok(Value::Tuple(out))
            }
            Expression::Object(obj) => {
                let mut out = BTreeMap::new();
                for (key, value) in obj.iter() {
                    let k = self.object_key(key, scope, d)?;
                    let v = self.eval_depth(value.expr(), scope, d)?;
                    out.insert(k, v);
                }
                Ok(Value::Object(out))
            }
            Expression::StringTemplate(t) => self.eval_template(t, scope, d),
            Expression::HeredocTemplate(h) => self.eval_template(&h.template, scope, d),
            Expression::Parenthesis(p) => self.eval_depth(p.inner(), scope, d),
            Expression::Variable(v) => self.lookup_root(v.as_str(), expr.span(), scope),
            Expression::Traversal(t) => self.eval_traversal(t, scope, d),
            Expression::Conditional(c) => {
                let cond = self.eval_depth(&c.cond_expr, scope, d)?;
                let cond = cond
                    .to_bool()
                    .map_err(|e| Diag::new(c.cond_expr.span(), "Incorrect condition type", e))?
                    .ok_or_else(|| {
                        Diag::new(
                            c.cond_expr.span(),
                            "Null condition",
                            "The condition value is null.",
                        )
                    })?;
                if cond {
                    self.eval_depth(&c.true_expr, scope, d)
                } else {
                    self.eval_depth(&c.false_expr, scope, d)
                }
            }
            Expression::FuncCall(call) => self.eval_call(call, scope, d),
            Expression::UnaryOp(op) => {
                let v = self.eval_depth(&op.expr, scope, d)?;
                match op.operator.value() {
                    UnaryOperator::Neg => {
                        let n = num_operand(&v, op.expr.span())?;
                        Ok(Value::Number(match n {
                            Number::Int(i) => i
                                .checked_neg()
                                .map(Number::Int)
                                .unwrap_or(Number::Float(-(i as f64))),
                            Number::Float(f) => Number::Float(-f),
                        }))
                    }
                    UnaryOperator::Not => {
                        let b = bool_operand(&v, op.expr.span())?;
                        Ok(Value::Bool(!b))
                    }
                }
            }
            Expression::BinaryOp(op) => {
                let operator = *op.operator.value();
                // && and || short-circuit in neither HCL nor here; both sides must be valid.
                let lhs = self.eval_depth(&op.lhs_expr, scope, d)?;
                let rhs = self.eval_depth(&op.rhs_expr, scope, d)?;
                binary(
                    operator,
                    &lhs,
                    &rhs,
                    op.lhs_expr.span(),
                    op.rhs_expr.span(),
                    expr.span(),
                )
            }
            Expression::ForExpr(f) => self.eval_for(f, scope, d),
        }
    }

    fn object_key(
        &self,
        key: &ObjectKey,
        scope: &Option<Rc<Scope>>,
        depth: usize,
    ) -> DResult<String> {
        match key {
            ObjectKey::Ident(id) => Ok(id.as_str().to_string()),
            ObjectKey::Expression(e) => {
                // A parenthesised or bare variable key is an expression; a bare
                // identifier-like key is literal (handled by the Ident arm).
                let v = self.eval_depth(e, scope, depth)?;
                v.to_str()
                    .map_err(|m| Diag::new(e.span(), "Incorrect key type", m))?
                    .ok_or_else(|| {
                        Diag::new(
                            e.span(),
                            "Incorrect key type",
                            "Can't use a null value as a key.",
                        )
                    })
            }
        }
    }

    /// Whether `name` resolves in this context (otherwise it is a runtime reference).
    fn is_known_root(&self, name: &str, scope: &Option<Rc<Scope>>) -> bool {
        Scope::lookup(scope, name).is_some()
            || (name == "var" && self.vars.is_some())
            || (name == "local" && self.locals.is_some())
    }

    fn lookup_root(
        &self,
        name: &str,
        span: Option<std::ops::Range<usize>>,
        scope: &Option<Rc<Scope>>,
    ) -> DResult<Value> {
        if let Some(v) = Scope::lookup(scope, name) {
            return Ok(v.clone());
        }
        match (name, self.vars, self.locals) {
            ("var", Some(vars), _) => Ok(Value::Object(vars.clone())),
            ("local", _, Some(locals)) => Ok(Value::Object(locals.clone())),
            _ if self.vars.is_none() => Err(Diag::new(
                span,
                "Variables not allowed",
                "Variables may not be used here.",
            )),
            _ => Ok(Value::string(format!("${{{}}}", self.text(&span)))),
        }
    }

    fn root_name(expr: &Expression) -> Option<&str> {
        match expr {
            Expression::Variable(v) => Some(v.as_str()),
            Expression::Traversal(t) => Self::root_name(&t.expr),
            _ => None,
        }
    }

    /// Whether the expression is a reference to a runtime (non var/local) name.
    fn is_runtime_reference(&self, expr: &Expression, scope: &Option<Rc<Scope>>) -> bool {
        if self.vars.is_none() {
            return false;
        }
        match expr {
            Expression::Variable(_) | Expression::Traversal(_) => {
                Self::root_name(expr).is_some_and(|n| !self.is_known_root(n, scope))
            }
            _ => false,
        }
    }

    fn eval_traversal(
        &self,
        t: &Traversal,
        scope: &Option<Rc<Scope>>,
        depth: usize,
    ) -> DResult<Value> {
        if let Some(root) = Self::root_name(&t.expr)
            && matches!(t.expr, Expression::Variable(_))
            && !self.is_known_root(root, scope)
            && self.vars.is_some()
        {
            // The whole traversal is a runtime reference such as attr.kernel.name.
            return Ok(Value::string(format!("${{{}}}", self.text(&t.span()))));
        }
        // `var.x` / `local.x`: look the attribute up directly instead of
        // materialising the whole variable object first.
        if let (Expression::Variable(root), Some(first)) = (&t.expr, t.operators.first())
            && let TraversalOperator::GetAttr(name) = first.value()
            && Scope::lookup(scope, root.as_str()).is_none()
        {
            let table = match root.as_str() {
                "var" => self.vars,
                "local" => self.locals,
                _ => None,
            };
            if let Some(table) = table {
                let mut value = table.get(name.as_str()).cloned().ok_or_else(|| {
                    Diag::new(
                        first.span(),
                        "Unsupported attribute",
                        format!(
                            "This object does not have an attribute named \"{}\".",
                            name.as_str()
                        ),
                    )
                })?;
                self.apply_operators(
                    &mut value,
                    t.operators.get(1..).unwrap_or(&[]),
                    scope,
                    depth,
                )?;
                return Ok(value);
            }
        }
        let mut value = self.eval_depth(&t.expr, scope, depth)?;
        self.apply_operators(&mut value, &t.operators, scope, depth)?;
        Ok(value)
    }

    fn apply_operators(
        &self,
        value: &mut Value,
        ops: &[hcl_edit::Decorated<TraversalOperator>],
        scope: &Option<Rc<Scope>>,
        depth: usize,
    ) -> DResult<()> {
        for (i, op) in ops.iter().enumerate() {
            match op.value() {
                TraversalOperator::GetAttr(name) => {
                    *value = get_attr(value, name.as_str(), op.span())?;
                }
                TraversalOperator::Index(idx) => {
                    let key = self.eval_depth(idx, scope, depth)?;
                    *value = index(value, &key, idx.span())?;
                }
                TraversalOperator::LegacyIndex(n) => {
                    let key = Value::int(i64::try_from(*n.value()).unwrap_or(i64::MAX));
                    *value = index(value, &key, op.span())?;
                }
                TraversalOperator::AttrSplat(_) | TraversalOperator::FullSplat(_) => {
                    let items = match std::mem::replace(value, Value::Null) {
                        Value::Null => Vec::new(),
                        Value::Tuple(items) => items,
                        other => vec![other],
                    };
                    let rest = ops.get(i + 1..).unwrap_or(&[]);
                    let mut out = Vec::with_capacity(items.len());
                    for mut item in items {
                        self.apply_operators(&mut item, rest, scope, depth + 1)?;
                        out.push(item);
                    }
                    *value = Value::Tuple(out);
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn eval_call(
        &self,
        call: &FuncCall,
        scope: &Option<Rc<Scope>>,
        depth: usize,
    ) -> DResult<Value> {
        let name = call.name.name.as_str();
        let span = call.name.name.span();
        if !self.functions {
            return Err(Diag::new(
                span,
                "Function calls not allowed",
                "Functions may not be called here.",
            ));
        }
        // Functions that take unevaluated arguments.
        match name {
            "try" => {
                let mut last = None;
                for arg in call.args.iter() {
                    match self.eval_depth(arg, scope, depth) {
                        Ok(v) => return Ok(v),
                        Err(e) => last = Some(e),
                    }
                }
                return Err(last.unwrap_or_else(|| {
                    Diag::new(
                        span,
                        "Error in function call",
                        "Call to function \"try\" failed: at least one argument is required.",
                    )
                }));
            }
            "can" => {
                let args: Vec<&Expression> = call.args.iter().collect();
                let [arg] = args.as_slice() else {
                    return Err(Diag::new(
                        span,
                        "Error in function call",
                        "Call to function \"can\" failed: exactly one argument is required.",
                    ));
                };
                return Ok(Value::Bool(self.eval_depth(arg, scope, depth).is_ok()));
            }
            "convert" => {
                let args: Vec<&Expression> = call.args.iter().collect();
                let [value, ty] = args.as_slice() else {
                    return Err(Diag::new(
                        span,
                        "Error in function call",
                        "Call to function \"convert\" failed: two arguments are required.",
                    ));
                };
                let ty = types::parse_type(ty)?;
                let v = self.eval_depth(value, scope, depth)?;
                return types::convert(v, &ty).map_err(|e| {
                    Diag::new(value.span(), "Invalid value for \"value\" parameter", e)
                });
            }
            _ => {}
        }
        let mut args = Vec::with_capacity(call.args.len());
        let count = call.args.len();
        for (i, arg) in call.args.iter().enumerate() {
            let v = self.eval_depth(arg, scope, depth)?;
            if call.args.expand_final() && i + 1 == count {
                match v {
                    Value::Tuple(items) => args.extend(items),
                    Value::Null => {}
                    other => {
                        return Err(Diag::new(
                            arg.span(),
                            "Invalid expanding argument value",
                            format!(
                                "The expanding argument (indicated by ...) must be of a tuple or list type, not {}.",
                                other.type_name()
                            ),
                        ));
                    }
                }
            } else {
                args.push(v);
            }
        }
        functions::call(self, name, args).map_err(|e| match e {
            functions::CallError::Unknown => Diag::new(
                span,
                "Call to unknown function",
                format!("There is no function named \"{name}\"."),
            ),
            functions::CallError::Invalid(msg) => Diag::new(
                call.span(),
                "Error in function call",
                format!("Call to function \"{name}\" failed: {msg}."),
            ),
        })
    }

    fn eval_for(&self, f: &ForExpr, scope: &Option<Rc<Scope>>, depth: usize) -> DResult<Value> {
        let coll = self.eval_depth(&f.intro.collection_expr, scope, depth)?;
        let pairs = iterate(&coll).ok_or_else(|| {
            Diag::new(
                f.intro.collection_expr.span(),
                "Iteration over non-iterable value",
                format!(
                    "A value of type {} cannot be used as the collection in a 'for' expression.",
                    coll.type_name()
                ),
            )
        })?;
        let key_var = f.intro.key_var.as_ref().map(|k| k.as_str().to_string());
        let value_var = f.intro.value_var.as_str().to_string();
        let mut tuple = Vec::new();
        let mut object: BTreeMap<String, Value> = BTreeMap::new();
        let mut grouped: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (k, v) in pairs {
            let mut inner = scope.clone();
            if let Some(kv) = &key_var {
                inner = Some(Scope::bind(inner, kv.clone(), k));
            }
            let inner = Some(Scope::bind(inner, value_var.clone(), v));
            if let Some(cond) = &f.cond {
                let c = self.eval_depth(&cond.expr, &inner, depth)?;
                let keep = c
                    .to_bool()
                    .map_err(|e| Diag::new(cond.expr.span(), "Invalid 'for' condition", e))?
                    .unwrap_or(false);
                if !keep {
                    continue;
                }
            }
            let value = self.eval_depth(&f.value_expr, &inner, depth)?;
            match &f.key_expr {
                None => tuple.push(value),
                Some(key_expr) => {
                    let key = self.eval_depth(key_expr, &inner, depth)?;
                    let key = key
                        .to_str()
                        .map_err(|e| Diag::new(key_expr.span(), "Invalid object key", e))?
                        .ok_or_else(|| {
                            Diag::new(
                                key_expr.span(),
                                "Invalid object key",
                                "Key expression in 'for' expression must not produce a null value.",
                            )
                        })?;
                    if f.grouping {
                        grouped.entry(key).or_default().push(value);
                    } else {
                        match object.entry(key) {
                            std::collections::btree_map::Entry::Occupied(e) => {
                                return Err(Diag::new(
                                    key_expr.span(),
                                    "Duplicate object key",
                                    format!(
                                        "Two different items produced the key {:?} in this 'for' expression. If duplicates are expected, use the ellipsis (...) after the value expression to enable grouping by key.",
                                        e.key()
                                    ),
                                ));
                            }
                            std::collections::btree_map::Entry::Vacant(e) => {
                                e.insert(value);
                            }
                        }
                    }
                }
            }
        }
        Ok(match (&f.key_expr, f.grouping) {
            (None, _) => Value::Tuple(tuple),
            (Some(_), true) => Value::Object(
                grouped
                    .into_iter()
                    .map(|(k, v)| (k, Value::Tuple(v)))
                    .collect(),
            ),
            (Some(_), false) => Value::Object(object),
        })
    }

    /// Evaluates a template. A template that is exactly one interpolation
    /// yields the interpolated value unconverted, as in HCL.
    pub(crate) fn eval_template(
        &self,
        t: &Template,
        scope: &Option<Rc<Scope>>,
        depth: usize,
    ) -> DResult<Value> {
        if let Some(Element::Interpolation(interp)) = t.as_single_element() {
            if self.is_runtime_reference(&interp.expr, scope) {
                return Ok(Value::string(self.text(&interp.span())));
            }
            return self.eval_depth(&interp.expr, scope, depth);
        }
        let mut out = String::new();
        self.render_template(t, scope, depth, &mut out)?;
        Ok(Value::String(out))
    }

    fn render_template(
        &self,
        t: &Template,
        scope: &Option<Rc<Scope>>,
        depth: usize,
        out: &mut String,
    ) -> DResult<()> {
        if depth > MAX_DEPTH {
            return Err(Diag::new(
                t.span(),
                "Template too complex",
                "nesting is too deep",
            ));
        }
        let elements: Vec<&Element> = t.iter().collect();
        for (i, el) in elements.iter().enumerate() {
            match el {
                Element::Literal(lit) => {
                    let mut text: &str = lit.as_str();
                    if i > 0 && strips_following(elements[i - 1]) {
                        text = text.trim_start();
                    }
                    if elements
                        .get(i + 1)
                        .is_some_and(|next| strips_preceding(next))
                    {
                        text = text.trim_end();
                    }
                    self.charge_bytes(text.len(), lit.span())?;
                    out.push_str(text);
                }
                Element::Interpolation(interp) => {
                    if self.is_runtime_reference(&interp.expr, scope) {
                        out.push_str(self.text(&interp.span()));
                        continue;
                    }
                    let v = self.eval_depth(&interp.expr, scope, depth + 1)?;
                    out.push_str(&template_string(&v, interp.expr.span())?);
                }
                Element::Directive(d) if matches!(**d, Directive::If(_)) => {
                    let Directive::If(dir) = &**d else { continue };
                    let c = self.eval_depth(&dir.if_expr.cond_expr, scope, depth + 1)?;
                    let c = c
                        .to_bool()
                        .map_err(|e| {
                            Diag::new(dir.if_expr.cond_expr.span(), "Invalid 'if' condition", e)
                        })?
                        .unwrap_or(false);
                    if c {
                        self.render_template(&dir.if_expr.template, scope, depth + 1, out)?;
                    } else if let Some(else_expr) = &dir.else_expr {
                        self.render_template(&else_expr.template, scope, depth + 1, out)?;
                    }
                }
                Element::Directive(d) => {
                    let Directive::For(dir) = &**d else { continue };
                    let fe = &dir.for_expr;
                    let coll = self.eval_depth(&fe.collection_expr, scope, depth + 1)?;
                    let pairs = iterate(&coll).ok_or_else(|| {
                        Diag::new(
                            fe.collection_expr.span(),
                            "Iteration over non-iterable value",
                            "",
                        )
                    })?;
                    for (k, v) in pairs {
                        let mut inner = scope.clone();
                        if let Some(kv) = &fe.key_var {
                            inner = Some(Scope::bind(inner, kv.as_str(), k));
                        }
                        let inner = Some(Scope::bind(inner, fe.value_var.as_str(), v));
                        self.render_template(&fe.template, &inner, depth + 1, out)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Size (nodes plus string bytes) and nesting depth of a value,
/// computed without recursion; counting stops once `limit` is exceeded.
fn measure(v: &Value, limit: u64) -> (u64, usize) {
    let mut stack = vec![(v, 1usize)];
    let (mut size, mut depth) = (0u64, 0usize);
    while let Some((v, d)) = stack.pop() {
        size += 1;
        depth = depth.max(d);
        if size > limit || depth > MAX_VALUE_DEPTH {
            break;
        }
        match v {
            Value::String(s) => size += s.len() as u64,
            Value::Tuple(items) => stack.extend(items.iter().map(|x| (x, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    (size, depth)
}

fn strips_following(el: &Element) -> bool {
    match el {
        Element::Interpolation(i) => i.strip.strip_end(),
        Element::Directive(d) => match &**d {
            Directive::If(d) => d.endif_expr.strip.strip_end(),
            Directive::For(d) => d.endfor_expr.strip.strip_end(),
        },
        Element::Literal(_) => false,
    }
}

fn strips_preceding(el: &Element) -> bool {
    match el {
        Element::Interpolation(i) => i.strip.strip_start(),
        Element::Directive(d) => match &**d {
            Directive::If(d) => d.if_expr.strip.strip_start(),
            Directive::For(d) => d.for_expr.strip.strip_start(),
        },
        Element::Literal(_) => false,
    }
}

fn template_string(v: &Value, span: Option<std::ops::Range<usize>>) -> DResult<String> {
    match v.to_str() {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(Diag::new(
            span,
            "Invalid template interpolation value",
            "The expression result is null. Cannot include a null value in a string template.",
        )),
        Err(_) => Err(Diag::new(
            span,
            "Invalid template interpolation value",
            format!(
                "Cannot include the given value in a string template: string required, but have {}.",
                v.type_name()
            ),
        )),
    }
}

fn convert_number(n: &hcl_edit::Number) -> Number {
    if let Some(i) = n.as_i64() {
        Number::Int(i)
    } else {
        Number::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Key/value pairs of a collection in HCL iteration order.
pub(crate) fn iterate(v: &Value) -> Option<Vec<(Value, Value)>> {
    match v {
        Value::Tuple(items) => Some(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| (Value::int(i64::try_from(i).unwrap_or(i64::MAX)), x.clone()))
                .collect(),
        ),
        Value::Object(map) => Some(
            map.iter()
                .map(|(k, x)| (Value::string(k.clone()), x.clone()))
                .collect(),
        ),
        _ => None,
    }
}

fn get_attr(v: &Value, name: &str, span: Option<std::ops::Range<usize>>) -> DResult<Value> {
    match v {
        Value::Object(map) => map.get(name).cloned().ok_or_else(|| {
            Diag::new(
                span,
                "Unsupported attribute",
                format!("This object does not have an attribute named \"{name}\"."),
            )
        }),
        Value::Null => Err(Diag::new(
            span,
            "Attempt to get attribute from null value",
            "This value is null, so it does not have any attributes.",
        )),
        other => Err(Diag::new(
            span,
            "Unsupported attribute",
            format!(
                "Can't access attributes on a primitive-typed value ({}).",
                other.type_name()
            ),
        )),
    }
}

fn index(v: &Value, key: &Value, span: Option<std::ops::Range<usize>>) -> DResult<Value> {
    match v {
        Value::Tuple(items) => {
            let n = key
                .to_number()
                .ok()
                .flatten()
                .and_then(Number::as_i64)
                .ok_or_else(|| Diag::new(span.clone(), "Invalid index", "The given key does not identify an element in this collection value: a number is required."))?;
            usize::try_from(n)
                .ok()
                .and_then(|i| items.get(i))
                .cloned()
                .ok_or_else(|| {
                    Diag::new(
                        span,
                        "Invalid index",
                        "The given key does not identify an element in this collection value.",
                    )
                })
        }
        Value::Object(map) => {
            let k = key
                .to_str()
                .ok()
                .flatten()
                .ok_or_else(|| Diag::new(span.clone(), "Invalid index", "The given key does not identify an element in this collection value: string required."))?;
            map.get(&k).cloned().ok_or_else(|| {
                Diag::new(
                    span,
                    "Invalid index",
                    "The given key does not identify an element in this collection value.",
                )
            })
        }
        Value::Null => Err(Diag::new(
            span,
            "Attempt to index null value",
            "This value is null, so it does not have any indices.",
        )),
        other => Err(Diag::new(
            span,
            "Invalid index",
            format!(
                "This value does not have any indices ({}).",
                other.type_name()
            ),
        )),
    }
}

fn num_operand(v: &Value, span: Option<std::ops::Range<usize>>) -> DResult<Number> {
    v.to_number()
        .map_err(|e| {
            Diag::new(
                span.clone(),
                "Invalid operand",
                format!("Unsuitable value for operand: {e}."),
            )
        })?
        .ok_or_else(|| {
            Diag::new(
                span,
                "Invalid operand",
                "Unsuitable value for operand: a number is required, but the value is null.",
            )
        })
}

fn bool_operand(v: &Value, span: Option<std::ops::Range<usize>>) -> DResult<bool> {
    v.to_bool()
        .map_err(|e| {
            Diag::new(
                span.clone(),
                "Invalid operand",
                format!("Unsuitable value for operand: {e}."),
            )
        })?
        .ok_or_else(|| {
            Diag::new(
                span,
                "Invalid operand",
                "Unsuitable value for operand: a bool is required, but the value is null.",
            )
        })
}

fn binary(
    op: BinaryOperator,
    lhs: &Value,
    rhs: &Value,
    lspan: Option<std::ops::Range<usize>>,
    rspan: Option<std::ops::Range<usize>>,
    span: Option<std::ops::Range<usize>>,
) -> DResult<Value> {
    use BinaryOperator as B;
    match op {
        B::Eq => Ok(Value::Bool(lhs == rhs)),
        B::NotEq => Ok(Value::Bool(lhs != rhs)),
        B::And => Ok(Value::Bool(
            bool_operand(lhs, lspan)? && bool_operand(rhs, rspan)?,
        )),
        B::Or => Ok(Value::Bool(
            bool_operand(lhs, lspan)? || bool_operand(rhs, rspan)?,
        )),
        B::Less | B::LessEq | B::Greater | B::GreaterEq => {
            let a = num_operand(lhs, lspan)?.as_f64();
            let b = num_operand(rhs, rspan)?.as_f64();
            Ok(Value::Bool(match op {
                B::Less => a < b,
                B::LessEq => a <= b,
                B::Greater => a > b,
                _ => a >= b,
            }))
        }
        B::Plus | B::Minus | B::Mul | B::Div | B::Mod => {
            let a = num_operand(lhs, lspan)?.normalized();
            let b = num_operand(rhs, rspan)?.normalized();
            arith(op, a, b).map(Value::Number).ok_or_else(|| {
                Diag::new(
                    span,
                    "Operation failed",
                    "Error during operation: can't divide by zero.",
                )
            })
        }
    }
}

fn arith(op: BinaryOperator, a: Number, b: Number) -> Option<Number> {
    use BinaryOperator as B;
    if let (Number::Int(x), Number::Int(y)) = (a, b) {
        let exact = match op {
            B::Plus => x.checked_add(y),
            B::Minus => x.checked_sub(y),
            B::Mul => x.checked_mul(y),
            B::Div if y != 0 && x.checked_rem(y) == Some(0) => x.checked_div(y),
            B::Mod if y != 0 => x.checked_rem(y),
            B::Div | B::Mod if y == 0 => return None,
            _ => None,
        };
        if let Some(v) = exact {
            return Some(Number::Int(v));
        }
    }
    let (x, y) = (a.as_f64(), b.as_f64());
    let r = match op {
        B::Plus => x + y,
        B::Minus => x - y,
        B::Mul => x * y,
        B::Div if y == 0.0 => return None,
        B::Div => x / y,
        B::Mod if y == 0.0 => return None,
        _ => x % y,
    };
    Some(Number::Float(r).normalized())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval_with(src: &str, vars: &BTreeMap<String, Value>) -> DResult<Value> {
        let expr = hcl_edit::parser::parse_expr(src)
            .map_err(|e| Diag::new(None, e.message().to_string(), ""))?;
        let locals = BTreeMap::new();
        let ctx = Context::new(src, vars, &locals, PathBuf::from("."));
        ctx.eval(&expr, &None)
    }

    fn eval(src: &str) -> DResult<Value> {
        eval_with(src, &BTreeMap::new())
    }

    #[test]
    fn runtime_references_stay_literal() {
        assert_eq!(
            eval(r#""${attr.kernel.name}""#),
            Ok(Value::string("${attr.kernel.name}"))
        );
        assert_eq!(
            eval(r#""${NOMAD_ALLOC_DIR}/x""#),
            Ok(Value::string("${NOMAD_ALLOC_DIR}/x"))
        );
        assert_eq!(
            eval(r#""${env["BLAH"]}""#),
            Ok(Value::string(r#"${env["BLAH"]}"#))
        );
        assert_eq!(
            eval(r#""with spaces ${   root.  field[  "FOO"].5  }""#),
            Ok(Value::string(
                r#"with spaces ${   root.  field[  "FOO"].5  }"#
            ))
        );
        assert_eq!(
            eval(r#""foo-${attr.network.dev-us-east1-relay-vpc.external-ip.0}""#),
            Ok(Value::string(
                "foo-${attr.network.dev-us-east1-relay-vpc.external-ip.0}"
            ))
        );
        assert_eq!(eval("meta.mytest"), Ok(Value::string("${meta.mytest}")));
    }

    #[test]
    fn variables_resolve_and_unknown_ones_fail() {
        let mut vars = BTreeMap::new();
        vars.insert("region".to_string(), Value::string("eu"));
        assert_eq!(
            eval_with(r#""${var.region}-1""#, &vars),
            Ok(Value::string("eu-1"))
        );
        let err = eval_with("var.nope", &vars).unwrap_err();
        assert_eq!(err.summary, "Unsupported attribute");
    }

    #[test]
    fn single_interpolation_keeps_the_value_type() {
        let mut vars = BTreeMap::new();
        vars.insert("n".to_string(), Value::int(3));
        assert_eq!(eval_with(r#""${var.n}""#, &vars), Ok(Value::int(3)));
    }

    #[test]
    fn for_expressions_and_operators_evaluate() {
        assert_eq!(
            eval(r#"[for s in ["a", "b"] : upper(s) if s != "x"]"#),
            Ok(Value::Tuple(vec![Value::string("A"), Value::string("B")]))
        );
        assert_eq!(eval("1 + 2 * 3"), Ok(Value::int(7)));
        assert_eq!(eval("7 / 2"), Ok(Value::Number(Number::Float(3.5))));
        assert_eq!(
            eval("true && !false ? \"y\" : \"n\""),
            Ok(Value::string("y"))
        );
        assert!(eval("1 / 0").is_err());
        assert_eq!(
            eval(r#"try(var.nope, "fallback")"#),
            Ok(Value::string("fallback"))
        );
        assert_eq!(eval(r#"can(var.nope)"#), Ok(Value::Bool(false)));
        assert_eq!(eval(r#"convert(5, string)"#), Ok(Value::string("5")));
    }

    #[test]
    fn template_directives_render() {
        assert_eq!(
            eval(r#""%{ for x in ["a", "b"] }${x},%{ endfor }""#),
            Ok(Value::string("a,b,"))
        );
        assert_eq!(
            eval(r#""%{ if true }yes%{ else }no%{ endif }""#),
            Ok(Value::string("yes"))
        );
    }

    #[test]
    fn splat_and_index_traverse_collections() {
        assert_eq!(
            eval(r#"[{a = 1}, {a = 2}][*].a"#),
            Ok(Value::Tuple(vec![Value::int(1), Value::int(2)]))
        );
        assert_eq!(eval(r#"{x = [5, 6]}.x[1]"#), Ok(Value::int(6)));
        assert!(eval(r#"[1][3]"#).is_err());
    }
}
