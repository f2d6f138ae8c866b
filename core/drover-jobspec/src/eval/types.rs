//! Type constraints of `variable` blocks (`type = list(string)`) and value
//! conversion to them.

use std::collections::BTreeMap;

use hcl_edit::Span;
use hcl_edit::expr::{Expression, ObjectKey};

use crate::error::{DResult, Diag};
use crate::value::Value;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Type {
    Any,
    String,
    Number,
    Bool,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Object(BTreeMap<String, Type>),
    Tuple(Vec<Type>),
}

impl Type {
    /// Whether `--var` strings for this type are taken literally rather than
    /// parsed as HCL expressions (Nomad's `expressionFromVariableDefinition`).
    pub(crate) fn takes_literal_strings(&self) -> bool {
        matches!(self, Type::String | Type::Number)
    }
}

fn invalid(expr: &Expression, detail: impl Into<String>) -> Diag {
    Diag::new(expr.span(), "Invalid type specification", detail)
}

/// Parses a type expression such as `map(list(string))`.
pub(crate) fn parse_type(expr: &Expression) -> DResult<Type> {
    match expr {
        Expression::Variable(v) => match v.as_str() {
            "string" => Ok(Type::String),
            "number" => Ok(Type::Number),
            "bool" => Ok(Type::Bool),
            "any" => Ok(Type::Any),
            "list" | "set" | "map" => Err(invalid(
                expr,
                format!(
                    "The {} type constructor requires one argument specifying the element type.",
                    v.as_str()
                ),
            )),
            other => Err(invalid(
                expr,
                format!("The keyword {other:?} is not a valid type specification."),
            )),
        },
        Expression::FuncCall(call) => {
            let name = call.name.name.as_str();
            let args: Vec<&Expression> = call.args.iter().collect();
            let [arg] = args.as_slice() else {
                return Err(invalid(
                    expr,
                    format!("The {name} type constructor requires exactly one argument."),
                ));
            };
            match name {
                "list" => Ok(Type::List(Box::new(parse_type(arg)?))),
                "set" => Ok(Type::Set(Box::new(parse_type(arg)?))),
                "map" => Ok(Type::Map(Box::new(parse_type(arg)?))),
                "object" => {
                    let Expression::Object(obj) = arg else {
                        return Err(invalid(
                            arg,
                            "Object type constructor requires a map whose keys are attribute names and whose values are the corresponding attribute types.",
                        ));
                    };
                    let mut attrs = BTreeMap::new();
                    for (k, v) in obj.iter() {
                        let key = match k {
                            ObjectKey::Ident(id) => id.as_str().to_string(),
                            ObjectKey::Expression(Expression::String(s)) => s.value().clone(),
                            ObjectKey::Expression(e) => {
                                return Err(invalid(
                                    e,
                                    "Object constructor map keys must be attribute names.",
                                ));
                            }
                        };
                        attrs.insert(key, parse_type(v.expr())?);
                    }
                    Ok(Type::Object(attrs))
                }
                "tuple" => {
                    let Expression::Array(items) = arg else {
                        return Err(invalid(
                            arg,
                            "The tuple type constructor requires a list of element types.",
                        ));
                    };
                    items
                        .iter()
                        .map(parse_type)
                        .collect::<DResult<Vec<_>>>()
                        .map(Type::Tuple)
                }
                other => Err(invalid(
                    expr,
                    format!("Keyword {other:?} is not a valid type constructor."),
                )),
            }
        }
        Expression::Parenthesis(p) => parse_type(p.inner()),
        _ => Err(invalid(
            expr,
            "A type specification is either a primitive type keyword (bool, number, string) or a complex type constructor call, like list(string).",
        )),
    }
}

/// Converts a value to a type the way cty's `convert.Convert` does for the
/// cases jobs use.
pub(crate) fn convert(v: Value, t: &Type) -> Result<Value, String> {
    if v.is_null() {
        return Ok(v);
    }
    match t {
        Type::Any => Ok(v),
        Type::String => v
            .to_str()
            .map(|s| s.map(Value::String).unwrap_or(Value::Null)),
        Type::Number => v
            .to_number()
            .map(|n| n.map(Value::Number).unwrap_or(Value::Null)),
        Type::Bool => v
            .to_bool()
            .map(|b| b.map(Value::Bool).unwrap_or(Value::Null)),
        Type::List(et) | Type::Set(et) => match v {
            Value::Tuple(items) => {
                let mut out: Vec<Value> = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    let c = convert(item, et).map_err(|e| format!("element {i}: {e}"))?;
                    if !(matches!(t, Type::Set(_)) && out.contains(&c)) {
                        out.push(c);
                    }
                }
                Ok(Value::Tuple(out))
            }
            other => Err(format!(
                "list of {} required, but have {}",
                type_label(et),
                other.type_name()
            )),
        },
        Type::Map(et) => match v {
            Value::Object(m) => m
                .into_iter()
                .map(|(k, x)| {
                    convert(x, et)
                        .map(|c| (k.clone(), c))
                        .map_err(|e| format!("element {k:?}: {e}"))
                })
                .collect::<Result<BTreeMap<_, _>, _>>()
                .map(Value::Object),
            other => Err(format!(
                "map of {} required, but have {}",
                type_label(et),
                other.type_name()
            )),
        },
        Type::Object(attrs) => match v {
            Value::Object(mut m) => {
                let mut out = BTreeMap::new();
                for (name, at) in attrs {
                    let x = m
                        .remove(name)
                        .ok_or_else(|| format!("attribute {name:?} is required"))?;
                    out.insert(
                        name.clone(),
                        convert(x, at).map_err(|e| format!("attribute {name:?}: {e}"))?,
                    );
                }
                Ok(Value::Object(out))
            }
            other => Err(format!("object required, but have {}", other.type_name())),
        },
        Type::Tuple(types) => match v {
            Value::Tuple(items) if items.len() == types.len() => items
                .into_iter()
                .zip(types)
                .map(|(x, et)| convert(x, et))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Tuple),
            Value::Tuple(items) => Err(format!(
                "tuple required with {} elements, but have {}",
                types.len(),
                items.len()
            )),
            other => Err(format!("tuple required, but have {}", other.type_name())),
        },
    }
}

fn type_label(t: &Type) -> &'static str {
    match t {
        Type::Any => "any",
        Type::String => "string",
        Type::Number => "number",
        Type::Bool => "bool",
        Type::List(_) => "list",
        Type::Set(_) => "set",
        Type::Map(_) => "map",
        Type::Object(_) => "object",
        Type::Tuple(_) => "tuple",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(src: &str) -> Type {
        parse_type(&hcl_edit::parser::parse_expr(src).expect("valid expression"))
            .expect("valid type")
    }

    #[test]
    fn type_expressions_parse() {
        assert_eq!(ty("list(string)"), Type::List(Box::new(Type::String)));
        assert_eq!(ty("map(number)"), Type::Map(Box::new(Type::Number)));
        assert!(
            matches!(ty("object({a = string, b = list(number)})"), Type::Object(m) if m.len() == 2)
        );
        assert!(parse_type(&hcl_edit::parser::parse_expr("strin").expect("expr")).is_err());
    }

    #[test]
    fn values_convert_to_declared_types() {
        assert_eq!(
            convert(Value::int(3), &Type::String),
            Ok(Value::string("3"))
        );
        assert_eq!(
            convert(
                Value::Tuple(vec![Value::int(1), Value::string("2")]),
                &Type::List(Box::new(Type::Number))
            ),
            Ok(Value::Tuple(vec![Value::int(1), Value::int(2)]))
        );
        assert!(convert(Value::string("x"), &Type::List(Box::new(Type::String))).is_err());
    }
}
