//! MessagePack values: what Nomad's plugin protocol carries in `msgpack_config`,
//! `msgpack_driver_config` and (by convention) `driver_state`.
//!
//! The encoder writes the most compact form of every value, as go-cty's encoder does
//! (vmihailenco/msgpack with compact encoding); the decoder reads every standard form, as
//! the Go plugins' decoder (ugorji/go codec) does. Decoding never panics: truncated or
//! malformed input, and nesting deeper than [`MAX_DEPTH`], are errors.

use serde_json::{Map, Number, Value as Json};

/// How deep arrays and maps may nest before decoding refuses the input.
pub const MAX_DEPTH: usize = 256;

/// One MessagePack value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    /// Negative integers; non-negative ones decode as [`Value::UInt`].
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    /// Key/value pairs in the order they appear on the wire.
    Map(Vec<(Value, Value)>),
    Ext(i8, Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsgpackError {
    #[error("msgpack: input ends inside a value at byte {0}")]
    Truncated(usize),
    #[error("msgpack: byte 0x{byte:02x} at {at} does not start a value")]
    BadMarker { byte: u8, at: usize },
    #[error("msgpack: string at byte {0} is not UTF-8")]
    BadUtf8(usize),
    #[error("msgpack: values nest deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("msgpack: {0} bytes left after the value")]
    Trailing(usize),
}

/// Encodes `value` into a new buffer.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write(value, &mut out);
    out
}

/// Appends the encoding of `value` to `out`.
pub fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Nil => out.push(0xc0),
        Value::Bool(false) => out.push(0xc2),
        Value::Bool(true) => out.push(0xc3),
        Value::Int(n) if *n >= 0 => write_uint(*n as u64, out),
        Value::Int(n) => write_negative(*n, out),
        Value::UInt(n) => write_uint(*n, out),
        Value::Float(f) => {
            out.push(0xcb);
            out.extend_from_slice(&f.to_be_bytes());
        }
        Value::Str(s) => {
            write_len(s.len(), Some((0xa0, 31)), [0xd9, 0xda, 0xdb], out);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Bin(b) => {
            write_len(b.len(), None, [0xc4, 0xc5, 0xc6], out);
            out.extend_from_slice(b);
        }
        Value::Array(items) => {
            write_len(items.len(), Some((0x90, 15)), [0, 0xdc, 0xdd], out);
            for item in items {
                write(item, out);
            }
        }
        Value::Map(pairs) => {
            write_len(pairs.len(), Some((0x80, 15)), [0, 0xde, 0xdf], out);
            for (k, v) in pairs {
                write(k, out);
                write(v, out);
            }
        }
        Value::Ext(kind, data) => {
            let fixed = match data.len() {
                1 => Some(0xd4),
                2 => Some(0xd5),
                4 => Some(0xd6),
                8 => Some(0xd7),
                16 => Some(0xd8),
                _ => None,
            };
            match fixed {
                Some(marker) => out.push(marker),
                None => write_len(data.len(), None, [0xc7, 0xc8, 0xc9], out),
            }
            out.push(kind.to_be_bytes()[0]);
            out.extend_from_slice(data);
        }
    }
}

fn write_uint(n: u64, out: &mut Vec<u8>) {
    if n <= 0x7f {
        out.push(n as u8);
    } else if n <= u64::from(u8::MAX) {
        out.extend_from_slice(&[0xcc, n as u8]);
    } else if n <= u64::from(u16::MAX) {
        out.push(0xcd);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n <= u64::from(u32::MAX) {
        out.push(0xce);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn write_negative(n: i64, out: &mut Vec<u8>) {
    if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= i64::from(i8::MIN) {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= i64::from(i16::MIN) {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= i64::from(i32::MIN) {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Writes a length header: the fix form `(base, max)` when it fits, else the 8/16/32-bit
/// markers (a zero 8-bit marker means the type has no 8-bit form).
fn write_len(len: usize, fix: Option<(u8, usize)>, markers: [u8; 3], out: &mut Vec<u8>) {
    if let Some((base, max)) = fix
        && len <= max
    {
        out.push(base | len as u8);
    } else if markers[0] != 0 && len <= usize::from(u8::MAX) {
        out.extend_from_slice(&[markers[0], len as u8]);
    } else if len <= usize::from(u16::MAX) {
        out.push(markers[1]);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        // Values over 4 GiB cannot be encoded; config never comes near that.
        out.push(markers[2]);
        out.extend_from_slice(&(len.min(u32::MAX as usize) as u32).to_be_bytes());
    }
}

/// Decodes exactly one value spanning all of `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Value, MsgpackError> {
    let mut reader = Reader { bytes, at: 0 };
    let value = reader.value(0)?;
    match bytes.len() - reader.at {
        0 => Ok(value),
        left => Err(MsgpackError::Trailing(left)),
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], MsgpackError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(MsgpackError::Truncated(self.at))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn be(&mut self, n: usize) -> Result<u64, MsgpackError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn len(&mut self, width: usize) -> Result<usize, MsgpackError> {
        let n = self.be(width)?;
        usize::try_from(n).map_err(|_| MsgpackError::Truncated(self.at))
    }

    fn str(&mut self, len: usize) -> Result<Value, MsgpackError> {
        let at = self.at;
        let raw = self.take(len)?;
        String::from_utf8(raw.to_vec())
            .map(Value::Str)
            .map_err(|_| MsgpackError::BadUtf8(at))
    }

    fn array(&mut self, len: usize, depth: usize) -> Result<Value, MsgpackError> {
        // Every element takes at least one byte: a length beyond the input is truncation,
        // caught before allocating for it.
        if len > self.bytes.len() - self.at {
            return Err(MsgpackError::Truncated(self.at));
        }
        let mut items = Vec::with_capacity(len);
        for _ in 0..len {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }

    fn map(&mut self, len: usize, depth: usize) -> Result<Value, MsgpackError> {
        if len > (self.bytes.len() - self.at) / 2 {
            return Err(MsgpackError::Truncated(self.at));
        }
        let mut pairs = Vec::with_capacity(len);
        for _ in 0..len {
            let k = self.value(depth + 1)?;
            let v = self.value(depth + 1)?;
            pairs.push((k, v));
        }
        Ok(Value::Map(pairs))
    }

    fn ext(&mut self, len: usize) -> Result<Value, MsgpackError> {
        let kind = self.take(1)?[0] as i8;
        Ok(Value::Ext(kind, self.take(len)?.to_vec()))
    }

    fn value(&mut self, depth: usize) -> Result<Value, MsgpackError> {
        if depth > MAX_DEPTH {
            return Err(MsgpackError::TooDeep);
        }
        let at = self.at;
        let marker = self.take(1)?[0];
        Ok(match marker {
            0x00..=0x7f => Value::UInt(u64::from(marker)),
            0x80..=0x8f => self.map(usize::from(marker & 0x0f), depth)?,
            0x90..=0x9f => self.array(usize::from(marker & 0x0f), depth)?,
            0xa0..=0xbf => self.str(usize::from(marker & 0x1f))?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let len = self.len(1 << (marker - 0xc4))?;
                Value::Bin(self.take(len)?.to_vec())
            }
            0xc7..=0xc9 => {
                let len = self.len(1 << (marker - 0xc7))?;
                self.ext(len)?
            }
            0xca => Value::Float(f64::from(f32::from_bits(self.be(4)? as u32))),
            0xcb => Value::Float(f64::from_bits(self.be(8)?)),
            0xcc..=0xcf => Value::UInt(self.be(1 << (marker - 0xcc))?),
            0xd0 => Value::Int(i64::from(self.be(1)? as u8 as i8)),
            0xd1 => Value::Int(i64::from(self.be(2)? as u16 as i16)),
            0xd2 => Value::Int(i64::from(self.be(4)? as u32 as i32)),
            0xd3 => Value::Int(self.be(8)? as i64),
            0xd4..=0xd8 => self.ext(1 << (marker - 0xd4))?,
            0xd9..=0xdb => {
                let len = self.len(1 << (marker - 0xd9))?;
                self.str(len)?
            }
            0xdc | 0xdd => {
                let len = self.len(if marker == 0xdc { 2 } else { 4 })?;
                self.array(len, depth)?
            }
            0xde | 0xdf => {
                let len = self.len(if marker == 0xde { 2 } else { 4 })?;
                self.map(len, depth)?
            }
            0xe0..=0xff => Value::Int(i64::from(marker as i8)),
            0xc1 => return Err(MsgpackError::BadMarker { byte: marker, at }),
        })
    }
}

impl Value {
    /// Non-negative integers as [`Value::UInt`], negative ones as [`Value::Int`], so that equal
    /// numbers compare equal whichever way they were built.
    pub fn int(n: i64) -> Value {
        if n >= 0 {
            Value::UInt(n as u64)
        } else {
            Value::Int(n)
        }
    }

    /// A JSON document as msgpack: objects become maps (in the JSON map's key order), whole
    /// numbers integers, other numbers float64.
    pub fn from_json(json: &Json) -> Value {
        match json {
            Json::Null => Value::Nil,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Value::UInt(u),
                (None, Some(i)) => Value::Int(i),
                _ => Value::Float(n.as_f64().unwrap_or(0.0)),
            },
            Json::String(s) => Value::Str(s.clone()),
            Json::Array(items) => Value::Array(items.iter().map(Value::from_json).collect()),
            Json::Object(map) => Value::Map(
                map.iter()
                    .map(|(k, v)| (Value::Str(k.clone()), Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// The value as JSON: binary strings that are UTF-8 become strings (other bytes become a
    /// list of numbers), map keys that are not strings are written as JSON text, extension
    /// values and non-finite floats become null.
    pub fn to_json(&self) -> Json {
        match self {
            Value::Nil | Value::Ext(..) => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Int(i) => Json::Number((*i).into()),
            Value::UInt(u) => Json::Number((*u).into()),
            Value::Float(f) => Number::from_f64(*f).map_or(Json::Null, Json::Number),
            Value::Str(s) => Json::String(s.clone()),
            Value::Bin(b) => match std::str::from_utf8(b) {
                Ok(s) => Json::String(s.to_string()),
                Err(_) => Json::Array(b.iter().map(|x| Json::from(*x)).collect()),
            },
            Value::Array(items) => Json::Array(items.iter().map(Value::to_json).collect()),
            Value::Map(pairs) => {
                let mut map = Map::new();
                for (k, v) in pairs {
                    let key = match k {
                        Value::Str(s) => s.clone(),
                        other => other.to_json().to_string(),
                    };
                    map.insert(key, v.to_json());
                }
                Json::Object(map)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roundtrip(v: Value) {
        let bytes = encode(&v);
        assert_eq!(decode(&bytes).unwrap(), v, "{bytes:02x?}");
    }

    #[test]
    fn integers_use_the_smallest_form() {
        assert_eq!(encode(&Value::UInt(5)), [0x05]);
        assert_eq!(encode(&Value::UInt(200)), [0xcc, 200]);
        assert_eq!(encode(&Value::UInt(70_000)), [0xce, 0, 1, 0x11, 0x70]);
        assert_eq!(encode(&Value::Int(-1)), [0xff]);
        assert_eq!(encode(&Value::Int(-33)), [0xd0, 0xdf]);
        assert_eq!(encode(&Value::Int(-300)), [0xd1, 0xfe, 0xd4]);
        assert_eq!(encode(&Value::Int(7)), [0x07]);
    }

    #[test]
    fn strings_arrays_and_maps_use_fix_forms_when_short() {
        assert_eq!(encode(&Value::Str("ab".into())), [0xa2, b'a', b'b']);
        let long = "x".repeat(40);
        assert_eq!(&encode(&Value::Str(long.clone()))[..2], &[0xd9, 40]);
        assert_eq!(encode(&Value::Array(vec![Value::Nil])), [0x91, 0xc0]);
        assert_eq!(
            encode(&Value::Map(vec![(
                Value::Str("a".into()),
                Value::Bool(true)
            )])),
            [0x81, 0xa1, b'a', 0xc3]
        );
    }

    #[test]
    fn every_kind_roundtrips() {
        roundtrip(Value::Nil);
        roundtrip(Value::Bool(true));
        roundtrip(Value::UInt(u64::MAX));
        roundtrip(Value::Int(i64::MIN));
        roundtrip(Value::Float(1.5));
        roundtrip(Value::Str("x".repeat(70_000)));
        roundtrip(Value::Bin(vec![1, 2, 3]));
        roundtrip(Value::Array((0..20).map(Value::UInt).collect()));
        roundtrip(Value::Map(
            (0..20)
                .map(|i| (Value::Str(i.to_string()), Value::Int(-i - 40)))
                .collect(),
        ));
        roundtrip(Value::Ext(3, vec![1, 2, 3, 4]));
        roundtrip(Value::Ext(-2, vec![9; 5]));
    }

    #[test]
    fn float32_and_wide_headers_written_by_other_encoders_decode() {
        assert_eq!(
            decode(&[0xca, 0x3f, 0xc0, 0, 0]).unwrap(),
            Value::Float(1.5)
        );
        assert_eq!(
            decode(&[0xdc, 0, 1, 0xc3]).unwrap(),
            Value::Array(vec![Value::Bool(true)])
        );
        assert_eq!(decode(&[0xda, 0, 1, b'z']).unwrap(), Value::Str("z".into()));
    }

    #[test]
    fn malformed_input_is_an_error_never_a_panic() {
        assert!(matches!(decode(&[]), Err(MsgpackError::Truncated(0))));
        assert!(matches!(
            decode(&[0xa5, b'a']),
            Err(MsgpackError::Truncated(_))
        ));
        assert!(matches!(
            decode(&[0xdd, 0xff, 0xff, 0xff, 0xff]),
            Err(MsgpackError::Truncated(_))
        ));
        assert!(matches!(
            decode(&[0xc1]),
            Err(MsgpackError::BadMarker { byte: 0xc1, .. })
        ));
        assert!(matches!(
            decode(&[0xa1, 0xff]),
            Err(MsgpackError::BadUtf8(_))
        ));
        assert!(matches!(
            decode(&[0xc0, 0xc0]),
            Err(MsgpackError::Trailing(1))
        ));
        let deep = vec![0x91; MAX_DEPTH + 2];
        assert!(matches!(decode(&deep), Err(MsgpackError::TooDeep)));
        // Every prefix of a valid document fails cleanly.
        let doc = encode(&Value::from_json(&json!({"a": [1, "two", {"c": null}]})));
        for cut in 0..doc.len() {
            assert!(decode(&doc[..cut]).is_err());
        }
    }

    #[test]
    fn json_converts_both_ways() {
        let doc = json!({"s": "x", "n": -3, "u": 7, "f": 2.5, "b": false, "l": [null], "o": {}});
        assert_eq!(Value::from_json(&doc).to_json(), doc);
        assert_eq!(
            Value::Bin(b"text".to_vec()).to_json(),
            Json::String("text".into())
        );
    }
}
