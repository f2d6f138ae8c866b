//! The HCL function library Nomad's job parser exposes (cty stdlib plus a few
//! filesystem, encoding and UUID helpers).

use std::collections::BTreeMap;

use super::Context;
use crate::digest;
use crate::value::{Number, Value};

pub(crate) enum CallError {
    Unknown,
    Invalid(String),
}

impl From<String> for CallError {
    fn from(s: String) -> CallError {
        CallError::Invalid(s)
    }
}

type R = Result<Value, CallError>;

/// Upper bound on padding that `format` widths and `indent` may produce, so a
/// job cannot make the parser allocate unbounded memory.
const MAX_PADDING: usize = 10_000;

/// Largest file `file()` and `filebase64()` read. Only regular files are read: a job naming
/// `/dev/zero` or a FIFO must fail, not fill memory or block the parser.
const MAX_FILE_BYTES: u64 = 64 << 20;

fn read_job_file(p: &std::path::Path) -> Result<Vec<u8>, CallError> {
    use std::io::Read;
    let fail = |e: &dyn std::fmt::Display| {
        CallError::Invalid(format!("failed to read {}: {e}", p.display()))
    };
    let meta = std::fs::metadata(p).map_err(|e| fail(&e))?;
    if !meta.is_file() {
        return Err(fail(&"not a regular file"));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(p)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| fail(&e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(&format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    Ok(bytes)
}

fn err<T>(msg: impl Into<String>) -> Result<T, CallError> {
    Err(CallError::Invalid(msg.into()))
}

fn arity(args: &[Value], n: usize) -> Result<(), CallError> {
    if args.len() == n {
        Ok(())
    } else {
        err(format!("expected {n} argument(s), got {}", args.len()))
    }
}

fn arg_str(args: &[Value], i: usize) -> Result<String, CallError> {
    match args.get(i).map(Value::to_str) {
        Some(Ok(Some(s))) => Ok(s),
        Some(Ok(None)) => err(format!("argument {} must not be null", i + 1)),
        Some(Err(e)) => err(format!("invalid value for argument {}: {e}", i + 1)),
        None => err(format!("missing argument {}", i + 1)),
    }
}

fn arg_num(args: &[Value], i: usize) -> Result<Number, CallError> {
    match args.get(i).map(Value::to_number) {
        Some(Ok(Some(n))) => Ok(n),
        Some(Ok(None)) => err(format!("argument {} must not be null", i + 1)),
        Some(Err(e)) => err(format!("invalid value for argument {}: {e}", i + 1)),
        None => err(format!("missing argument {}", i + 1)),
    }
}

fn arg_int(args: &[Value], i: usize) -> Result<i64, CallError> {
    arg_num(args, i)?
        .as_i64()
        .ok_or_else(|| CallError::Invalid(format!("argument {} must be a whole number", i + 1)))
}

fn arg_list(args: &[Value], i: usize) -> Result<Vec<Value>, CallError> {
    match args.get(i) {
        Some(Value::Tuple(items)) => Ok(items.clone()),
        Some(other) => err(format!(
            "argument {} must be a list, not {}",
            i + 1,
            other.type_name()
        )),
        None => err(format!("missing argument {}", i + 1)),
    }
}

fn arg_map(args: &[Value], i: usize) -> Result<BTreeMap<String, Value>, CallError> {
    match args.get(i) {
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(other) => err(format!(
            "argument {} must be a map, not {}",
            i + 1,
            other.type_name()
        )),
        None => err(format!("missing argument {}", i + 1)),
    }
}

fn strings(items: Vec<Value>) -> Result<Vec<String>, CallError> {
    items
        .iter()
        .map(|v| match v.to_str() {
            Ok(Some(s)) => Ok(s),
            _ => err(format!("element of type {} is not a string", v.type_name())),
        })
        .collect()
}

fn str_list(items: impl IntoIterator<Item = String>) -> Value {
    Value::Tuple(items.into_iter().map(Value::String).collect())
}

fn len_value(n: usize) -> Value {
    Value::int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Calls the named function with already-evaluated arguments.
pub(crate) fn call(ctx: &Context<'_>, name: &str, args: Vec<Value>) -> R {
    let a = &args;
    match name {
        // strings
        "upper" => Ok(Value::String(arg_str(a, 0)?.to_uppercase())),
        "lower" => Ok(Value::String(arg_str(a, 0)?.to_lowercase())),
        "title" => Ok(Value::String(title(&arg_str(a, 0)?))),
        "trimspace" => Ok(Value::string(arg_str(a, 0)?.trim())),
        "trim" => {
            let cut = arg_str(a, 1)?;
            Ok(Value::string(
                arg_str(a, 0)?.trim_matches(|c| cut.contains(c)),
            ))
        }
        "trimprefix" => {
            let s = arg_str(a, 0)?;
            let p = arg_str(a, 1)?;
            Ok(Value::string(s.strip_prefix(p.as_str()).unwrap_or(&s)))
        }
        "trimsuffix" => {
            let s = arg_str(a, 0)?;
            let p = arg_str(a, 1)?;
            Ok(Value::string(s.strip_suffix(p.as_str()).unwrap_or(&s)))
        }
        "chomp" => Ok(Value::string(arg_str(a, 0)?.trim_end_matches(['\n', '\r']))),
        "strrev" => Ok(Value::String(arg_str(a, 0)?.chars().rev().collect())),
        "strlen" => Ok(len_value(arg_str(a, 0)?.chars().count())),
        "regex_replace" => {
            let s = arg_str(a, 0)?;
            let re = regex::Regex::new(&arg_str(a, 1)?)
                .map_err(|e| CallError::Invalid(format!("invalid regular expression: {e}")))?;
            let with = arg_str(a, 2)?;
            Ok(Value::String(
                re.replace_all(&s, with.as_str()).into_owned(),
            ))
        }
        "csvdecode" => csvdecode(&arg_str(a, 0)?),
        "timeadd" => {
            let ts = arg_str(a, 0)?;
            let d = arg_str(a, 1)?;
            crate::timefmt::time_add(&ts, &d)
                .map(Value::String)
                .map_err(CallError::Invalid)
        }
        "substr" => {
            let s: Vec<char> = arg_str(a, 0)?.chars().collect();
            let len = i64::try_from(s.len()).unwrap_or(i64::MAX);
            let mut off = arg_int(a, 1)?;
            let mut n = arg_int(a, 2)?;
            if off < 0 {
                off += len;
            }
            if off < 0 || off > len {
                return err("offset out of range");
            }
            if n < 0 || off.saturating_add(n) > len {
                n = len - off;
            }
            let start = usize::try_from(off).unwrap_or(0);
            let end = usize::try_from(off + n).unwrap_or(start);
            Ok(Value::String(
                s.get(start..end).unwrap_or(&[]).iter().collect(),
            ))
        }
        "indent" => {
            let n = usize::try_from(arg_int(a, 0)?).unwrap_or(0);
            if n > MAX_PADDING {
                return err(format!("indentation of {n} spaces is too large"));
            }
            let pad = " ".repeat(n);
            let s = arg_str(a, 1)?;
            Ok(Value::String(s.replace('\n', &format!("\n{pad}"))))
        }
        "split" => {
            let sep = arg_str(a, 0)?;
            let s = arg_str(a, 1)?;
            if s.is_empty() {
                return Ok(str_list([String::new()]));
            }
            Ok(str_list(s.split(sep.as_str()).map(str::to_string)))
        }
        "join" => {
            let sep = arg_str(a, 0)?;
            let mut parts = Vec::new();
            for i in 1..a.len() {
                parts.extend(strings(arg_list(a, i)?)?);
            }
            Ok(Value::String(parts.join(&sep)))
        }
        "replace" => {
            let s = arg_str(a, 0)?;
            let from = arg_str(a, 1)?;
            let to = arg_str(a, 2)?;
            Ok(Value::String(s.replace(&from, &to)))
        }
        "format" => {
            let f = arg_str(a, 0)?;
            Ok(Value::String(format_go(&f, a.get(1..).unwrap_or(&[]))?))
        }
        "formatlist" => formatlist(a),
        // collections
        "length" => match a.first() {
            Some(Value::Tuple(t)) => Ok(len_value(t.len())),
            Some(Value::Object(m)) => Ok(len_value(m.len())),
            Some(Value::String(s)) => Ok(len_value(s.chars().count())),
            Some(other) => err(format!("cannot find the length of a {}", other.type_name())),
            None => err("missing argument"),
        },
        "concat" => {
            let mut out = Vec::new();
            for i in 0..a.len() {
                out.extend(arg_list(a, i)?);
            }
            Ok(Value::Tuple(out))
        }
        "contains" => {
            arity(a, 2)?;
            let list = arg_list(a, 0)?;
            Ok(Value::Bool(a.get(1).is_some_and(|x| list.contains(x))))
        }
        "distinct" => {
            let mut out: Vec<Value> = Vec::new();
            for v in arg_list(a, 0)? {
                if !out.contains(&v) {
                    out.push(v);
                }
            }
            Ok(Value::Tuple(out))
        }
        "element" => {
            let list = arg_list(a, 0)?;
            if list.is_empty() {
                return err("cannot use element function with an empty list");
            }
            let i = arg_int(a, 1)?;
            if i < 0 {
                return err("cannot use element function with a negative index");
            }
            let idx = usize::try_from(i).unwrap_or(0) % list.len();
            Ok(list.get(idx).cloned().unwrap_or(Value::Null))
        }
        "index" => {
            let list = arg_list(a, 0)?;
            let x = a.get(1).cloned().unwrap_or(Value::Null);
            list.iter()
                .position(|v| *v == x)
                .map(len_value)
                .ok_or_else(|| CallError::Invalid("item not found".into()))
        }
        "flatten" => {
            fn flat(v: Vec<Value>, out: &mut Vec<Value>) {
                for x in v {
                    match x {
                        Value::Tuple(inner) => flat(inner, out),
                        other => out.push(other),
                    }
                }
            }
            let mut out = Vec::new();
            flat(arg_list(a, 0)?, &mut out);
            Ok(Value::Tuple(out))
        }
        "keys" => Ok(str_list(arg_map(a, 0)?.into_keys())),
        "values" => Ok(Value::Tuple(arg_map(a, 0)?.into_values().collect())),
        "lookup" => {
            let m = arg_map(a, 0)?;
            let k = arg_str(a, 1)?;
            match (m.get(&k), a.get(2)) {
                (Some(v), _) => Ok(v.clone()),
                (None, Some(default)) => Ok(default.clone()),
                (None, None) => err(format!("lookup failed to find key {k:?}")),
            }
        }
        "merge" => {
            let mut out = BTreeMap::new();
            for v in a {
                match v {
                    Value::Object(m) => out.extend(m.clone()),
                    Value::Null => {}
                    other => {
                        return err(format!(
                            "arguments must be maps or objects, got {}",
                            other.type_name()
                        ));
                    }
                }
            }
            Ok(Value::Object(out))
        }
        "reverse" => {
            let mut l = arg_list(a, 0)?;
            l.reverse();
            Ok(Value::Tuple(l))
        }
        "slice" => {
            let l = arg_list(a, 0)?;
            let from = usize::try_from(arg_int(a, 1)?)
                .map_err(|_| CallError::Invalid("negative index".into()))?;
            let to = usize::try_from(arg_int(a, 2)?)
                .map_err(|_| CallError::Invalid("negative index".into()))?;
            l.get(from..to)
                .map(|s| Value::Tuple(s.to_vec()))
                .ok_or_else(|| CallError::Invalid("index out of range".into()))
        }
        "sort" => {
            let mut s = strings(arg_list(a, 0)?)?;
            s.sort();
            Ok(str_list(s))
        }
        "compact" => Ok(str_list(
            strings(arg_list(a, 0)?)?
                .into_iter()
                .filter(|s| !s.is_empty()),
        )),
        "coalesce" => a
            .iter()
            .find(|v| !v.is_null() && **v != Value::string(""))
            .cloned()
            .ok_or_else(|| CallError::Invalid("no non-null, non-empty-string arguments".into())),
        "coalescelist" => a
            .iter()
            .find(|v| matches!(v, Value::Tuple(t) if !t.is_empty()))
            .cloned()
            .ok_or_else(|| CallError::Invalid("no non-empty list arguments".into())),
        "zipmap" => {
            let k = strings(arg_list(a, 0)?)?;
            let v = arg_list(a, 1)?;
            if k.len() != v.len() {
                return err("number of keys and values must match");
            }
            Ok(Value::Object(k.into_iter().zip(v).collect()))
        }
        "range" => range(a),
        "chunklist" => {
            let l = arg_list(a, 0)?;
            let n = usize::try_from(arg_int(a, 1)?)
                .map_err(|_| CallError::Invalid("negative size".into()))?;
            if n == 0 {
                return Ok(Value::Tuple(vec![Value::Tuple(l)]));
            }
            Ok(Value::Tuple(
                l.chunks(n).map(|c| Value::Tuple(c.to_vec())).collect(),
            ))
        }
        "setunion" | "setintersection" => set_op(name, a),
        "setproduct" => {
            let mut rows: Vec<Vec<Value>> = vec![Vec::new()];
            for i in 0..a.len() {
                let items = arg_list(a, i)?;
                let mut next = Vec::new();
                for row in &rows {
                    for item in &items {
                        if next.len() >= 100_000 {
                            return err("the product has too many elements");
                        }
                        let mut r = row.clone();
                        r.push(item.clone());
                        next.push(r);
                    }
                }
                rows = next;
            }
            Ok(Value::Tuple(rows.into_iter().map(Value::Tuple).collect()))
        }
        // numbers
        "abs" => Ok(Value::Number(match arg_num(a, 0)? {
            Number::Int(i) => Number::Int(i.saturating_abs()),
            Number::Float(f) => Number::Float(f.abs()),
        })),
        "ceil" => Ok(Value::Number(
            Number::Float(arg_num(a, 0)?.as_f64().ceil()).normalized(),
        )),
        "floor" => Ok(Value::Number(
            Number::Float(arg_num(a, 0)?.as_f64().floor()).normalized(),
        )),
        "signum" => Ok(Value::int(arg_num(a, 0)?.as_f64().signum() as i64)),
        "pow" => Ok(Value::Number(
            Number::Float(arg_num(a, 0)?.as_f64().powf(arg_num(a, 1)?.as_f64())).normalized(),
        )),
        "log" => Ok(Value::Number(
            Number::Float(arg_num(a, 0)?.as_f64().log(arg_num(a, 1)?.as_f64())).normalized(),
        )),
        "max" | "min" => {
            let mut best: Option<Number> = None;
            for i in 0..a.len() {
                let n = arg_num(a, i)?;
                best = Some(match best {
                    None => n,
                    Some(b) if (name == "max") == (n.as_f64() > b.as_f64()) => n,
                    Some(b) => b,
                });
            }
            best.map(Value::Number)
                .ok_or_else(|| CallError::Invalid("at least one argument is required".into()))
        }
        "parseint" => {
            let s = arg_str(a, 0)?;
            let base = u32::try_from(arg_int(a, 1)?)
                .map_err(|_| CallError::Invalid("invalid base".into()))?;
            if !(2..=36).contains(&base) {
                return err("base must be between 2 and 36");
            }
            i64::from_str_radix(&s, base).map(Value::int).map_err(|_| {
                CallError::Invalid(format!("cannot parse {s:?} as a base {base} integer"))
            })
        }
        // encoding
        "base64encode" => Ok(Value::String(digest::base64_encode(
            arg_str(a, 0)?.as_bytes(),
        ))),
        "base64decode" => {
            let bytes = digest::base64_decode(&arg_str(a, 0)?)
                .ok_or_else(|| CallError::Invalid("invalid base64 data".into()))?;
            String::from_utf8(bytes).map(Value::String).map_err(|_| {
                CallError::Invalid(
                    "the result of decoding the provided string is not valid UTF-8".into(),
                )
            })
        }
        "jsonencode" => {
            arity(a, 1)?;
            let v = a
                .first()
                .map(Value::to_json)
                .unwrap_or(serde_json::Value::Null);
            serde_json::to_string(&v)
                .map(Value::String)
                .map_err(|e| CallError::Invalid(e.to_string()))
        }
        "jsondecode" => {
            let s = arg_str(a, 0)?;
            serde_json::from_str::<serde_json::Value>(&s)
                .map(|j| Value::from_json(&j))
                .map_err(|e| CallError::Invalid(e.to_string()))
        }
        "urlencode" => Ok(Value::String(urlencode(&arg_str(a, 0)?))),
        "sha1" => Ok(Value::String(digest::hex(&digest::sha1(
            arg_str(a, 0)?.as_bytes(),
        )))),
        "sha256" => Ok(Value::String(digest::hex(&digest::sha256(
            arg_str(a, 0)?.as_bytes(),
        )))),
        "sha512" => Ok(Value::String(digest::hex(&digest::sha512(
            arg_str(a, 0)?.as_bytes(),
        )))),
        "md5" => Ok(Value::String(digest::hex(&digest::md5(
            arg_str(a, 0)?.as_bytes(),
        )))),
        "uuidv4" => Ok(Value::String(uuid::Uuid::new_v4().to_string())),
        "uuidv5" => {
            let ns = arg_str(a, 0)?;
            let name = arg_str(a, 1)?;
            digest::uuid_v5(&ns, &name)
                .map(Value::String)
                .ok_or_else(|| {
                    CallError::Invalid(format!("uuidv5() doesn't support namespace {ns:?}"))
                })
        }
        // filesystem
        "file" => {
            let p = ctx.base_dir.join(expand_home(&arg_str(a, 0)?));
            let bytes = read_job_file(&p)?;
            String::from_utf8(bytes).map(Value::String).map_err(|_| {
                CallError::Invalid(format!(
                    "failed to read {}: stream did not contain valid UTF-8",
                    p.display()
                ))
            })
        }
        "filebase64" => {
            let p = ctx.base_dir.join(expand_home(&arg_str(a, 0)?));
            read_job_file(&p).map(|b| Value::String(digest::base64_encode(&b)))
        }
        "fileexists" => Ok(Value::Bool(
            ctx.base_dir.join(expand_home(&arg_str(a, 0)?)).is_file(),
        )),
        "pathexpand" => Ok(Value::String(expand_home(&arg_str(a, 0)?))),
        "basename" => {
            let s = arg_str(a, 0)?;
            Ok(Value::string(
                std::path::Path::new(&s)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or(s),
            ))
        }
        "dirname" => {
            let s = arg_str(a, 0)?;
            Ok(Value::string(
                std::path::Path::new(&s)
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| ".".to_string()),
            ))
        }
        "abspath" => {
            let s = arg_str(a, 0)?;
            let p = std::path::Path::new(&s);
            let abs = if p.is_absolute() {
                p.to_path_buf()
            } else {
                std::env::current_dir()
                    .map(|d| d.join(p))
                    .unwrap_or_else(|_| p.to_path_buf())
            };
            Ok(Value::String(abs.to_string_lossy().into_owned()))
        }
        _ => Err(CallError::Unknown),
    }
}

fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut at_word_start = true;
    for c in s.chars() {
        if at_word_start && c.is_alphabetic() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        at_word_start = !c.is_alphanumeric();
    }
    out
}

fn expand_home(p: &str) -> String {
    match (p.strip_prefix('~'), std::env::var("HOME")) {
        (Some(rest), Ok(home)) if rest.is_empty() || rest.starts_with('/') => {
            format!("{home}{rest}")
        }
        _ => p.to_string(),
    }
}

fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn range(a: &[Value]) -> R {
    let (start, end, step) = match a.len() {
        1 => (0.0, arg_num(a, 0)?.as_f64(), 1.0),
        2 => (arg_num(a, 0)?.as_f64(), arg_num(a, 1)?.as_f64(), 1.0),
        3 => (
            arg_num(a, 0)?.as_f64(),
            arg_num(a, 1)?.as_f64(),
            arg_num(a, 2)?.as_f64(),
        ),
        _ => return err("range expects 1 to 3 arguments"),
    };
    if step == 0.0 || (step > 0.0) != (end >= start) && end != start {
        return err("invalid step for the given start and end");
    }
    let mut out = Vec::new();
    let mut x = start;
    while (step > 0.0 && x < end) || (step < 0.0 && x > end) {
        if out.len() >= 1024 {
            return err("more than 1024 values were generated");
        }
        out.push(Value::Number(Number::Float(x).normalized()));
        x += step;
    }
    Ok(Value::Tuple(out))
}

fn set_op(name: &str, a: &[Value]) -> R {
    let mut sets: Vec<Vec<Value>> = Vec::new();
    for i in 0..a.len() {
        sets.push(arg_list(a, i)?);
    }
    let mut iter = sets.into_iter();
    let mut acc: Vec<Value> = Vec::new();
    for v in iter.next().unwrap_or_default() {
        if !acc.contains(&v) {
            acc.push(v);
        }
    }
    for s in iter {
        match name {
            "setunion" => {
                for v in s {
                    if !acc.contains(&v) {
                        acc.push(v);
                    }
                }
            }
            _ => acc.retain(|v| s.contains(v)),
        }
    }
    Ok(Value::Tuple(acc))
}

/// RFC 4180 CSV with a header row, as cty's `csvdecode`: a list of objects.
fn csvdecode(s: &str) -> R {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut chars = s.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return err("unterminated quoted field");
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    let mut rows = rows.into_iter();
    let Some(header) = rows.next() else {
        return Ok(Value::Tuple(Vec::new()));
    };
    let mut out = Vec::new();
    for (n, r) in rows.enumerate() {
        if r.len() != header.len() {
            return err(format!(
                "record {} has {} fields, but the header has {}",
                n + 1,
                r.len(),
                header.len()
            ));
        }
        out.push(Value::Object(
            header
                .iter()
                .cloned()
                .zip(r.into_iter().map(Value::String))
                .collect(),
        ));
    }
    Ok(Value::Tuple(out))
}

fn formatlist(a: &[Value]) -> R {
    let f = arg_str(a, 0)?;
    let rest = a.get(1..).unwrap_or(&[]);
    let n = rest
        .iter()
        .filter_map(|v| match v {
            Value::Tuple(t) => Some(t.len()),
            _ => None,
        })
        .max()
        .unwrap_or(1);
    let mut out = Vec::new();
    for i in 0..n {
        let row: Vec<Value> = rest
            .iter()
            .map(|v| match v {
                Value::Tuple(t) => t.get(i).cloned().unwrap_or(Value::Null),
                other => other.clone(),
            })
            .collect();
        out.push(Value::String(format_go(&f, &row)?));
    }
    Ok(Value::Tuple(out))
}

/// A subset of cty's `format`, itself modelled on Go's fmt verbs.
fn format_go(f: &str, args: &[Value]) -> Result<String, CallError> {
    let mut out = String::new();
    let mut chars = f.chars().peekable();
    let mut next_arg = 0usize;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut flags = String::new();
        while let Some(&fc) = chars.peek() {
            if matches!(fc, '-' | '+' | '#' | ' ' | '0') {
                flags.push(fc);
                chars.next();
            } else {
                break;
            }
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        let mut precision: Option<usize> = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            precision = Some(p.parse::<usize>().unwrap_or(0).min(MAX_PADDING));
        }
        let Some(verb) = chars.next() else {
            return err("format string ends with an incomplete verb");
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let arg = args
            .get(next_arg)
            .ok_or_else(|| CallError::Invalid(format!("not enough arguments for %{verb}")))?;
        next_arg += 1;
        let s = match verb {
            'v' => match arg {
                Value::String(s) => s.clone(),
                Value::Null => "null".into(),
                other
                    if matches!(other, Value::Tuple(_) | Value::Object(_))
                        || flags.contains('#') =>
                {
                    serde_json::to_string(&other.to_json()).unwrap_or_default()
                }
                other => other.to_str().ok().flatten().unwrap_or_default(),
            },
            's' => arg
                .to_str()
                .map_err(CallError::Invalid)?
                .unwrap_or_default(),
            'q' => serde_json::to_string(
                &arg.to_str()
                    .map_err(CallError::Invalid)?
                    .unwrap_or_default(),
            )
            .unwrap_or_default(),
            'd' => {
                let n = arg
                    .to_number()
                    .map_err(CallError::Invalid)?
                    .and_then(Number::as_i64);
                n.ok_or_else(|| CallError::Invalid("%d requires a whole number".into()))?
                    .to_string()
            }
            'f' | 'e' | 'g' => {
                let n = arg
                    .to_number()
                    .map_err(CallError::Invalid)?
                    .map(Number::as_f64)
                    .unwrap_or(0.0);
                match (verb, precision) {
                    ('f', p) => format!("{n:.*}", p.unwrap_or(6)),
                    ('e', p) => format!("{n:.*e}", p.unwrap_or(6)),
                    _ => Number::Float(n).to_string(),
                }
            }
            't' => arg
                .to_bool()
                .map_err(CallError::Invalid)?
                .unwrap_or(false)
                .to_string(),
            'x' | 'X' | 'o' | 'b' => {
                let n = arg
                    .to_number()
                    .map_err(CallError::Invalid)?
                    .and_then(Number::as_i64)
                    .ok_or_else(|| {
                        CallError::Invalid(format!("%{verb} requires a whole number"))
                    })?;
                match verb {
                    'x' => format!("{n:x}"),
                    'X' => format!("{n:X}"),
                    'o' => format!("{n:o}"),
                    _ => format!("{n:b}"),
                }
            }
            other => return err(format!("unsupported format verb %{other}")),
        };
        let s = match (precision, verb) {
            (Some(p), 's') => s.chars().take(p).collect(),
            _ => s,
        };
        let w: usize = width.parse().unwrap_or(0);
        if w > MAX_PADDING {
            return err(format!("width {w} is too large"));
        }
        let len = s.chars().count();
        if len < w {
            let pad = w - len;
            if flags.contains('-') {
                out.push_str(&s);
                out.push_str(&" ".repeat(pad));
            } else if flags.contains('0') && !matches!(verb, 's' | 'q' | 'v') {
                out.push_str(&"0".repeat(pad));
                out.push_str(&s);
            } else {
                out.push_str(&" ".repeat(pad));
                out.push_str(&s);
            }
        } else {
            out.push_str(&s);
        }
    }
    Ok(out)
}

/// Names of the functions [`call`] implements (besides `try`, `can` and
/// `convert`, which the evaluator handles because they take unevaluated arguments).
#[cfg(test)]
pub(crate) fn names() -> std::collections::BTreeSet<&'static str> {
    [
        "abs",
        "base64decode",
        "base64encode",
        "ceil",
        "chomp",
        "chunklist",
        "coalesce",
        "coalescelist",
        "compact",
        "concat",
        "contains",
        "csvdecode",
        "distinct",
        "element",
        "flatten",
        "floor",
        "format",
        "formatlist",
        "indent",
        "index",
        "join",
        "jsondecode",
        "jsonencode",
        "keys",
        "length",
        "log",
        "lookup",
        "lower",
        "max",
        "md5",
        "merge",
        "min",
        "parseint",
        "pow",
        "range",
        "reverse",
        "replace",
        "regex_replace",
        "setintersection",
        "setproduct",
        "setunion",
        "sha1",
        "sha256",
        "sha512",
        "signum",
        "slice",
        "sort",
        "split",
        "strlen",
        "strrev",
        "substr",
        "timeadd",
        "title",
        "trim",
        "trimprefix",
        "trimspace",
        "trimsuffix",
        "upper",
        "urlencode",
        "uuidv4",
        "uuidv5",
        "values",
        "zipmap",
        "abspath",
        "basename",
        "dirname",
        "file",
        "filebase64",
        "fileexists",
        "pathexpand",
    ]
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, args: Vec<Value>) -> Value {
        let ctx = Context::literal("");
        match call(&ctx, name, args) {
            Ok(v) => v,
            Err(CallError::Unknown) => panic!("unknown function {name}"),
            Err(CallError::Invalid(m)) => panic!("{name} failed: {m}"),
        }
    }

    #[test]
    fn format_supports_common_verbs() {
        assert_eq!(
            run("format", vec![Value::string("id:%s"), Value::int(1)]),
            Value::string("id:1")
        );
        assert_eq!(
            run(
                "format",
                vec![
                    Value::string("%03d|%-3s|%.2f"),
                    Value::int(7),
                    Value::string("a"),
                    Value::string("1.5")
                ]
            ),
            Value::string("007|a  |1.50")
        );
    }

    #[test]
    fn lookup_falls_back_to_the_default() {
        let m = Value::Object([("a".to_string(), Value::int(1))].into_iter().collect());
        assert_eq!(
            run("lookup", vec![m.clone(), Value::string("a")]),
            Value::int(1)
        );
        assert_eq!(
            run("lookup", vec![m, Value::string("b"), Value::int(0)]),
            Value::int(0)
        );
    }

    #[test]
    fn uuidv5_matches_the_rfc_dns_example() {
        // Python: uuid.uuid5(uuid.NAMESPACE_DNS, "python.org")
        assert_eq!(
            run(
                "uuidv5",
                vec![Value::string("dns"), Value::string("python.org")]
            ),
            Value::string("886313e1-3b8a-5372-9b90-0c9aee199e5d")
        );
    }

    #[test]
    fn every_listed_function_is_callable() {
        let ctx = Context::literal("");
        for name in names() {
            assert!(
                !matches!(call(&ctx, name, vec![]), Err(CallError::Unknown)),
                "{name}"
            );
        }
        assert!(matches!(
            call(&ctx, "nope", vec![]),
            Err(CallError::Unknown)
        ));
    }
}
