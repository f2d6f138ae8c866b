//! Type expressions of `Attr.type` and `BlockAttrs.type`: `string`, `number`, `bool`, `any`,
//! `list(T)`, `set(T)`, `map(T)`, `object({name = T, ...})`, `tuple([T, ...])`, as cty's
//! `typeexpr` reads them.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    String,
    Number,
    Bool,
    /// cty's dynamic pseudo-type: any value, kept with its own type.
    Any,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Object(BTreeMap<String, Type>),
    Tuple(Vec<Type>),
}

impl Type {
    /// Parses a type expression. An empty expression means `any`.
    pub fn parse(expr: &str) -> Result<Type, String> {
        let tokens = tokenize(expr)?;
        if tokens.is_empty() {
            return Ok(Type::Any);
        }
        let mut parser = Parser { tokens, at: 0 };
        let ty = parser.ty()?;
        match parser.tokens.get(parser.at) {
            None => Ok(ty),
            Some(t) => Err(format!("unexpected {t:?} in type expression {expr:?}")),
        }
    }

    /// cty's friendly name, as its conversion errors use it ("list of string").
    pub fn friendly(&self) -> String {
        match self {
            Type::String => "string".into(),
            Type::Number => "number".into(),
            Type::Bool => "bool".into(),
            Type::Any => "any value".into(),
            Type::List(t) => format!("list of {}", t.friendly()),
            Type::Set(t) => format!("set of {}", t.friendly()),
            Type::Map(t) => format!("map of {}", t.friendly()),
            Type::Object(_) => "object".into(),
            Type::Tuple(_) => "tuple".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Punct(char),
}

fn tokenize(expr: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c.is_alphanumeric() || c == '_' {
            let mut ident = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    ident.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            tokens.push(Token::Ident(ident));
        } else if c == '"' {
            // A quoted name (object attribute) or a quoted whole expression.
            chars.next();
            let mut ident = String::new();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some(c) => ident.push(c),
                    None => return Err(format!("unterminated string in type expression {expr:?}")),
                }
            }
            tokens.push(Token::Ident(ident));
        } else if "(){}[]=:,".contains(c) {
            tokens.push(Token::Punct(c));
            chars.next();
        } else {
            return Err(format!("unexpected {c:?} in type expression {expr:?}"));
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        match self.next() {
            Some(Token::Punct(p)) if p == c => Ok(()),
            other => Err(format!(
                "expected {c:?} in type expression, found {other:?}"
            )),
        }
    }

    fn peek_punct(&self, c: char) -> bool {
        matches!(self.tokens.get(self.at), Some(Token::Punct(p)) if *p == c)
    }

    fn ty(&mut self) -> Result<Type, String> {
        let name = match self.next() {
            Some(Token::Ident(name)) => name,
            other => return Err(format!("expected a type, found {other:?}")),
        };
        match name.as_str() {
            "string" => Ok(Type::String),
            "number" => Ok(Type::Number),
            "bool" => Ok(Type::Bool),
            "any" => Ok(Type::Any),
            "list" | "set" | "map" => {
                self.expect('(')?;
                let inner = Box::new(self.ty()?);
                self.expect(')')?;
                Ok(match name.as_str() {
                    "list" => Type::List(inner),
                    "set" => Type::Set(inner),
                    _ => Type::Map(inner),
                })
            }
            "object" => {
                self.expect('(')?;
                self.expect('{')?;
                let mut attrs = BTreeMap::new();
                while !self.peek_punct('}') {
                    let key = match self.next() {
                        Some(Token::Ident(k)) => k,
                        other => {
                            return Err(format!("expected an attribute name, found {other:?}"));
                        }
                    };
                    if self.peek_punct('=') {
                        self.expect('=')?;
                    } else {
                        self.expect(':')?;
                    }
                    attrs.insert(key, self.ty()?);
                    if self.peek_punct(',') {
                        self.expect(',')?;
                    }
                }
                self.expect('}')?;
                self.expect(')')?;
                Ok(Type::Object(attrs))
            }
            "tuple" => {
                self.expect('(')?;
                self.expect('[')?;
                let mut items = Vec::new();
                while !self.peek_punct(']') {
                    items.push(self.ty()?);
                    if self.peek_punct(',') {
                        self.expect(',')?;
                    }
                }
                self.expect(']')?;
                self.expect(')')?;
                Ok(Type::Tuple(items))
            }
            other => Err(format!("unknown type {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitive_and_collection_types_parse() {
        assert_eq!(Type::parse("string"), Ok(Type::String));
        assert_eq!(Type::parse(""), Ok(Type::Any));
        assert_eq!(
            Type::parse("list(map(number))"),
            Ok(Type::List(Box::new(Type::Map(Box::new(Type::Number)))))
        );
        assert_eq!(
            Type::parse("object({name = string, port: number})"),
            Ok(Type::Object(BTreeMap::from([
                ("name".to_string(), Type::String),
                ("port".to_string(), Type::Number),
            ])))
        );
        assert_eq!(
            Type::parse("tuple([string, bool])"),
            Ok(Type::Tuple(vec![Type::String, Type::Bool]))
        );
        assert_eq!(Type::parse("\"string\""), Ok(Type::String));
    }

    #[test]
    fn bad_type_expressions_are_errors() {
        assert!(Type::parse("strng").is_err());
        assert!(Type::parse("list(string").is_err());
        assert!(Type::parse("list string").is_err());
        assert!(Type::parse("map(").is_err());
    }

    #[test]
    fn friendly_names_are_ctys() {
        assert_eq!(
            Type::parse("list(string)").unwrap().friendly(),
            "list of string"
        );
    }
}
