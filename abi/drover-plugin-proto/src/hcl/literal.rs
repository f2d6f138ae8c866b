//! `Literal.value`: a constant HCL expression (`true`, `10`, `"5m"`, `[]`, `{a = 1}`), read
//! into JSON. Function calls and references are not constants and are refused.

use serde_json::{Map, Number, Value as Json};

/// Parses a constant HCL expression.
pub fn parse(expr: &str) -> Result<Json, String> {
    let mut p = Parser {
        chars: expr.chars().collect(),
        at: 0,
    };
    let value = p.value()?;
    p.skip_ws();
    if p.at < p.chars.len() {
        return Err(format!(
            "unexpected text after the value in literal {expr:?}"
        ));
    }
    Ok(value)
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.skip_ws();
        match self.peek() {
            Some('"') => self.string().map(Json::String),
            Some('[') => self.list(),
            Some('{') => self.object(),
            Some(c) if c == '-' || c.is_ascii_digit() => self.number(),
            Some(c) if c.is_alphabetic() || c == '_' => {
                let word = self.word();
                match word.as_str() {
                    "true" => Ok(Json::Bool(true)),
                    "false" => Ok(Json::Bool(false)),
                    "null" => Ok(Json::Null),
                    other => Err(format!("{other:?} is not a constant")),
                }
            }
            Some(c) => Err(format!("unexpected {c:?} in literal")),
            None => Err("empty literal".into()),
        }
    }

    fn word(&mut self) -> String {
        let mut w = String::new();
        while let Some(c) = self.peek() {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                w.push(c);
                self.at += 1;
            } else {
                break;
            }
        }
        w
    }

    fn number(&mut self) -> Result<Json, String> {
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if c.is_ascii_digit() || "+-.eE".contains(c) {
                text.push(c);
                self.at += 1;
            } else {
                break;
            }
        }
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Json::Number(i.into()));
        }
        text.parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Json::Number)
            .ok_or_else(|| format!("{text:?} is not a number"))
    }

    fn string(&mut self) -> Result<String, String> {
        self.at += 1; // the opening quote
        let mut s = String::new();
        loop {
            let c = self.peek().ok_or("unterminated string in literal")?;
            self.at += 1;
            match c {
                '"' => return Ok(s),
                '\\' => {
                    let e = self.peek().ok_or("unterminated escape in literal")?;
                    self.at += 1;
                    match e {
                        'n' => s.push('\n'),
                        't' => s.push('\t'),
                        'r' => s.push('\r'),
                        '"' => s.push('"'),
                        '\\' => s.push('\\'),
                        'u' => {
                            let hex: String = self.chars.iter().skip(self.at).take(4).collect();
                            let code = u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| format!("bad escape \\u{hex} in literal"))?;
                            self.at += 4;
                            s.push(code);
                        }
                        other => return Err(format!("bad escape \\{other} in literal")),
                    }
                }
                c => s.push(c),
            }
        }
    }

    fn list(&mut self) -> Result<Json, String> {
        self.at += 1;
        let mut items = Vec::new();
        loop {
            if self.eat(']') {
                return Ok(Json::Array(items));
            }
            items.push(self.value()?);
            if self.eat(',') {
                continue;
            }
            if self.eat(']') {
                return Ok(Json::Array(items));
            }
            return Err("expected ',' or ']' in list literal".into());
        }
    }

    fn object(&mut self) -> Result<Json, String> {
        self.at += 1;
        let mut map = Map::new();
        loop {
            if self.eat('}') {
                return Ok(Json::Object(map));
            }
            self.skip_ws();
            let key = match self.peek() {
                Some('"') => self.string()?,
                Some(c) if c.is_alphabetic() || c == '_' => self.word(),
                other => return Err(format!("expected an attribute name, found {other:?}")),
            };
            if !self.eat('=') && !self.eat(':') {
                return Err(format!("expected '=' after {key:?} in object literal"));
            }
            let value = self.value()?;
            map.insert(key, value);
            // Items are separated by commas or newlines.
            self.eat(',');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn constants_parse_to_json() {
        assert_eq!(parse("true"), Ok(json!(true)));
        assert_eq!(parse(" 10 "), Ok(json!(10)));
        assert_eq!(parse("-2.5"), Ok(json!(-2.5)));
        assert_eq!(parse("\"5m\""), Ok(json!("5m")));
        assert_eq!(parse("\"a\\\"b\\n\\u0041\""), Ok(json!("a\"b\nA")));
        assert_eq!(parse("[]"), Ok(json!([])));
        assert_eq!(parse("[\"a\", 1, ]"), Ok(json!(["a", 1])));
        assert_eq!(
            parse("{a = 1, \"b\": [true]\n c = null}"),
            Ok(json!({"a": 1, "b": [true], "c": null}))
        );
    }

    #[test]
    fn non_constants_and_garbage_are_errors() {
        assert!(parse("var.x").is_err());
        assert!(parse("upper(\"x\")").is_err());
        assert!(parse("[1 2]").is_err());
        assert!(parse("\"open").is_err());
        assert!(parse("").is_err());
        assert!(parse("1 2").is_err());
    }
}
