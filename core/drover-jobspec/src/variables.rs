//! Input variables (`variable` / `variables` blocks, `--var`, `--var-file`,
//! `NOMAD_VAR_*`) and `locals`, resolved before the job is decoded.

use std::collections::BTreeMap;
use std::path::Path;

use hcl_edit::Span;
use hcl_edit::expr::Expression;
use hcl_edit::structure::{self, Structure};

use crate::Variables;
use crate::error::{DResult, Diag, JobspecError};
use crate::eval::Context;
use crate::eval::types::{Type, convert, parse_type};
use crate::value::Value;

/// Prefix of environment variables that set input variables.
const ENV_PREFIX: &str = "NOMAD_VAR_";

struct Validation<'a> {
    condition: &'a Expression,
    message: String,
    span: Option<std::ops::Range<usize>>,
}

struct Variable<'a> {
    ty: Option<Type>,
    /// The last assignment wins: default, then env, then files, then `--var`.
    value: Option<(Value, &'static str)>,
    validations: Vec<Validation<'a>>,
    span: Option<std::ops::Range<usize>>,
}

/// The evaluated `var.*` and `local.*` objects.
pub(crate) struct Resolved {
    pub vars: BTreeMap<String, Value>,
    pub locals: BTreeMap<String, Value>,
}

fn type_of(v: &Value) -> Option<Type> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) => Type::Bool,
        Value::Number(_) => Type::Number,
        Value::String(_) => Type::String,
        Value::Tuple(_) => Type::List(Box::new(Type::Any)),
        Value::Object(_) => Type::Map(Box::new(Type::Any)),
    })
}

/// Resolves variables and locals declared at the top of `body`.
pub(crate) fn resolve(
    body: &structure::Body,
    src: &str,
    file: &str,
    base_dir: &Path,
    inputs: &Variables,
) -> Result<Resolved, JobspecError> {
    let located = |d: Diag| d.into_error(file, src);
    let lit = Context::literal(src);
    let mut vars: BTreeMap<String, Variable<'_>> = BTreeMap::new();
    let mut local_exprs: Vec<(String, &Expression, Option<std::ops::Range<usize>>)> = Vec::new();

    for item in body.iter() {
        match item {
            Structure::Attribute(a) => {
                return Err(located(Diag::new(
                    a.key.span(),
                    "Unsupported argument",
                    format!(
                        "An argument named \"{}\" is not expected here.",
                        a.key.as_str()
                    ),
                )));
            }
            Structure::Block(b) => match b.ident.as_str() {
                "variable" => {
                    let [label] = b.labels.as_slice() else {
                        return Err(located(Diag::new(
                            b.ident.span(),
                            "Missing name for variable",
                            "All variable blocks must have 1 labels (name).",
                        )));
                    };
                    let name = label.as_str().to_string();
                    if vars.contains_key(&name) {
                        return Err(located(Diag::new(
                            b.ident.span(),
                            "Duplicate variable",
                            format!("Duplicate {name} variable definition found."),
                        )));
                    }
                    let v = variable_block(&lit, b).map_err(located)?;
                    vars.insert(name, v);
                }
                "variables" => {
                    for item in b.body.iter() {
                        match item {
                            Structure::Attribute(a) => {
                                let name = a.key.as_str().to_string();
                                if vars.contains_key(&name) {
                                    return Err(located(Diag::new(
                                        a.key.span(),
                                        "Duplicate variable",
                                        format!("Duplicate {name} variable definition found."),
                                    )));
                                }
                                let value = lit.eval(&a.value, &None).map_err(located)?;
                                vars.insert(
                                    name,
                                    Variable {
                                        ty: type_of(&value),
                                        value: Some((value, "default")),
                                        validations: Vec::new(),
                                        span: a.key.span(),
                                    },
                                );
                            }
                            Structure::Block(inner) => {
                                return Err(located(Diag::new(
                                    inner.ident.span(),
                                    "Unexpected block",
                                    "Blocks are not allowed in a variables block.",
                                )));
                            }
                        }
                    }
                }
                "locals" => {
                    for item in b.body.iter() {
                        match item {
                            Structure::Attribute(a) => {
                                let name = a.key.as_str().to_string();
                                if local_exprs.iter().any(|(n, _, _)| *n == name) {
                                    return Err(located(Diag::new(
                                        a.key.span(),
                                        "Duplicate value in locals",
                                        format!("Duplicate {name} definition found."),
                                    )));
                                }
                                local_exprs.push((name, &a.value, a.key.span()));
                            }
                            Structure::Block(inner) => {
                                return Err(located(Diag::new(
                                    inner.ident.span(),
                                    "Unexpected block",
                                    "Blocks are not allowed in a locals block.",
                                )));
                            }
                        }
                    }
                }
                "job" => {}
                other => {
                    return Err(located(Diag::new(
                        b.ident.span(),
                        "Unsupported block type",
                        format!("Blocks of type \"{other}\" are not expected here."),
                    )));
                }
            },
        }
    }

    if inputs.env {
        for (key, raw) in std::env::vars() {
            let Some(name) = key.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let Some(var) = vars.get_mut(name) else {
                continue;
            };
            let fake = format!("<value for var.{name} from env>");
            let v = value_from_string(&raw, var.ty.as_ref(), &fake)?;
            var.value = Some((v, "env"));
        }
    }

    for path in &inputs.files {
        assign_from_var_file(&mut vars, path)?;
    }

    for (name, raw) in &inputs.values {
        let Some(var) = vars.get_mut(name) else {
            return Err(JobspecError::Invalid {
                file: file.to_string(),
                location: None,
                message: format!(
                    "Undefined -var variable; A {name:?} variable was passed in the command line but was not found in known variables. To declare variable {name:?}, place this block in your job file"
                ),
            });
        };
        let fake = format!("<value for var.{name} from arguments>");
        let v = value_from_string(raw, var.ty.as_ref(), &fake)?;
        var.value = Some((v, "cmd"));
    }

    let mut values = BTreeMap::new();
    for (name, var) in &vars {
        let Some((value, from)) = &var.value else {
            return Err(located(Diag::new(
                var.span.clone(),
                format!("Unset variable {name:?}"),
                "A used variable must be set or have a default value; see https://www.nomadproject.io/docs/job-specification/hcl2/variables for details.",
            )));
        };
        validate(src, base_dir, name, value, from, &var.validations).map_err(located)?;
        values.insert(name.clone(), value.clone());
    }

    let locals = evaluate_locals(src, base_dir, &values, local_exprs).map_err(located)?;
    Ok(Resolved {
        vars: values,
        locals,
    })
}

fn variable_block<'a>(lit: &Context<'_>, b: &'a structure::Block) -> DResult<Variable<'a>> {
    let mut ty = None;
    let mut default = None;
    let mut validations = Vec::new();
    for item in b.body.iter() {
        match item {
            Structure::Attribute(a) => match a.key.as_str() {
                "description" => {
                    let d = lit.eval(&a.value, &None)?;
                    d.to_str().map_err(|e| {
                        Diag::new(a.value.span(), "Incorrect attribute value type", e)
                    })?;
                }
                "type" => ty = Some(parse_type(&a.value)?),
                "default" => default = Some((lit.eval(&a.value, &None)?, a.value.span())),
                // Accepted by newer Nomad versions; has no effect on the job.
                "sensitive" | "nullable" => {}
                other => {
                    return Err(Diag::new(
                        a.key.span(),
                        "Unsupported argument",
                        format!("An argument named \"{other}\" is not expected here."),
                    ));
                }
            },
            Structure::Block(v) if v.ident.as_str() == "validation" => {
                let mut condition = None;
                let mut message = None;
                for item in v.body.iter() {
                    match item {
                        Structure::Attribute(a) if a.key.as_str() == "condition" => {
                            condition = Some(&a.value)
                        }
                        Structure::Attribute(a) if a.key.as_str() == "error_message" => {
                            message = lit.eval(&a.value, &None)?.to_str().ok().flatten();
                        }
                        Structure::Attribute(a) => {
                            return Err(Diag::new(
                                a.key.span(),
                                "Unsupported argument",
                                format!(
                                    "An argument named \"{}\" is not expected here.",
                                    a.key.as_str()
                                ),
                            ));
                        }
                        Structure::Block(x) => {
                            return Err(Diag::new(
                                x.ident.span(),
                                "Unsupported block type",
                                format!(
                                    "Blocks of type \"{}\" are not expected here.",
                                    x.ident.as_str()
                                ),
                            ));
                        }
                    }
                }
                let (Some(condition), Some(message)) = (condition, message) else {
                    return Err(Diag::new(
                        v.ident.span(),
                        "Invalid variable validation specification",
                        "validation requires a condition and an error_message.",
                    ));
                };
                validations.push(Validation {
                    condition,
                    message,
                    span: v.ident.span(),
                });
            }
            Structure::Block(x) => {
                return Err(Diag::new(
                    x.ident.span(),
                    "Unsupported block type",
                    format!(
                        "Blocks of type \"{}\" are not expected here.",
                        x.ident.as_str()
                    ),
                ));
            }
        }
    }
    let value = match default {
        None => None,
        Some((v, span)) => {
            let v = match &ty {
                Some(t) => convert(v, t).map_err(|e| {
                    Diag::new(
                        span,
                        "Invalid default value for variable",
                        format!("This default value is not compatible with the variable's type constraint: {e}."),
                    )
                })?,
                None => v,
            };
            if ty.is_none() {
                ty = type_of(&v);
            }
            Some((v, "default"))
        }
    };
    Ok(Variable {
        ty,
        value,
        validations,
        span: b.ident.span(),
    })
}

/// Interprets a `--var` or `NOMAD_VAR_` string for a variable of type `ty`:
/// strings and numbers are taken literally, other types parse as HCL.
fn value_from_string(raw: &str, ty: Option<&Type>, fake_file: &str) -> Result<Value, JobspecError> {
    let invalid = |message: String| JobspecError::Invalid {
        file: fake_file.to_string(),
        location: None,
        message,
    };
    let value = match ty {
        None => Value::string(raw),
        Some(t) if t.takes_literal_strings() => Value::string(raw),
        Some(_) => {
            let expr = hcl_edit::parser::parse_expr(raw).map_err(|e| JobspecError::Syntax {
                file: fake_file.to_string(),
                line: e.location().line(),
                column: e.location().column(),
                message: e.message().to_string(),
            })?;
            Context::literal(raw)
                .eval(&expr, &None)
                .map_err(|d| d.into_error(fake_file, raw))?
        }
    };
    match ty {
        Some(t) => convert(value, t).map_err(|e| {
            invalid(format!(
                "Invalid value for variable; The value is not compatible with the variable's type constraint: {e}."
            ))
        }),
        None => Ok(value),
    }
}

fn assign_from_var_file(
    vars: &mut BTreeMap<String, Variable<'_>>,
    path: &Path,
) -> Result<(), JobspecError> {
    let file = path.display().to_string();
    let src = std::fs::read_to_string(path).map_err(|source| JobspecError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let body = crate::parse_syntax(&src, &file)?;
    let lit = Context::literal(&src);
    for item in body.iter() {
        match item {
            Structure::Block(b) => {
                return Err(Diag::new(
                    b.ident.span(),
                    "Variable declaration in a .var file",
                    "A .var file is used to assign values to variables that have already been declared in job files, not to declare new variables.",
                )
                .into_error(&file, &src));
            }
            Structure::Attribute(a) => {
                let name = a.key.as_str();
                let Some(var) = vars.get_mut(name) else {
                    return Err(Diag::new(
                        a.key.span(),
                        "Undefined variable",
                        format!("A {name:?} variable was set but was not found in known variables. To declare variable {name:?}, place this block in your job files"),
                    )
                    .into_error(&file, &src));
                };
                let v = lit
                    .eval(&a.value, &None)
                    .map_err(|d| d.into_error(&file, &src))?;
                let v = match &var.ty {
                    Some(t) => convert(v, t).map_err(|e| {
                        Diag::new(
                            a.value.span(),
                            "Invalid value for variable",
                            format!("The value for {name} is not compatible with the variable's type constraint: {e}."),
                        )
                        .into_error(&file, &src)
                    })?,
                    None => v,
                };
                var.value = Some((v, "varfile"));
            }
        }
    }
    Ok(())
}

fn validate(
    src: &str,
    base_dir: &Path,
    name: &str,
    value: &Value,
    from: &str,
    validations: &[Validation<'_>],
) -> DResult<()> {
    if validations.is_empty() {
        return Ok(());
    }
    let vars: BTreeMap<String, Value> = [(name.to_string(), value.clone())].into_iter().collect();
    let locals = BTreeMap::new();
    let ctx = Context::new(src, &vars, &locals, base_dir.to_path_buf());
    for v in validations {
        let ok = ctx.eval(v.condition, &None)?;
        match ok.to_bool() {
            Ok(Some(true)) => {}
            Ok(Some(false)) => {
                return Err(Diag::new(
                    v.condition.span().or(v.span.clone()),
                    format!("Invalid value for {from} variable"),
                    v.message.clone(),
                ));
            }
            _ => {
                return Err(Diag::new(
                    v.condition.span(),
                    "Invalid variable validation result",
                    "Validation condition expression must return either true or false.",
                ));
            }
        }
    }
    Ok(())
}

/// Evaluates locals in dependency order by retrying those that refer to
/// locals not evaluated yet, as Nomad does.
fn evaluate_locals(
    src: &str,
    base_dir: &Path,
    vars: &BTreeMap<String, Value>,
    mut pending: Vec<(String, &Expression, Option<std::ops::Range<usize>>)>,
) -> DResult<BTreeMap<String, Value>> {
    let mut locals = BTreeMap::new();
    while !pending.is_empty() {
        let mut progressed = false;
        let mut last_err = None;
        let mut still = Vec::new();
        for (name, expr, span) in pending {
            let ctx = Context::new(src, vars, &locals, base_dir.to_path_buf());
            match ctx.eval(expr, &None) {
                Ok(v) => {
                    locals.insert(name, v);
                    progressed = true;
                }
                Err(e) => {
                    last_err = Some(e);
                    still.push((name, expr, span));
                }
            }
        }
        if !progressed {
            return Err(last_err.unwrap_or_else(|| {
                Diag::new(None, "Invalid locals", "locals could not be evaluated")
            }));
        }
        pending = still;
    }
    Ok(locals)
}
