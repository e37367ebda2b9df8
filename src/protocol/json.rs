//! JSON text as toolgate reads it from callers: serde_json's grammar and
//! limits, and one rule more, that an object never names a key twice (and
//! a negative zero is read as 0.0, the one zero Postgres's jsonb keeps, and
//! a whole number past 2^53 as the integer jsonb gives back: see
//! [`storable_float`]).
//!
//! RFC 8259 leaves a repeated key's meaning to the reader ("the names
//! within an object SHOULD be unique"); serde_json keeps the last value,
//! other parsers the first. A call whose arguments say `"path"` twice would
//! be checked, stored and run with whichever one toolgate picked, while the
//! model, a log reader or an approver may have read the other. So a repeated
//! key is refused, with the JSON pointer of where it repeats.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// Why a text is not read.
#[derive(Debug)]
pub enum ReadError {
    /// Not JSON, or nested past serde_json's recursion limit.
    Syntax(serde_json::Error),
    /// An object names a key twice: `pointer` is the JSON pointer of the
    /// repeated member (its object's pointer and the key).
    RepeatedKey { pointer: String, key: String },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Syntax(e) => e.fmt(f),
            ReadError::RepeatedKey { pointer, key } => {
                write!(f, "{}", repeated_key_message(key))?;
                if !pointer.is_empty() {
                    write!(f, " (at {pointer})")?;
                }
                Ok(())
            }
        }
    }
}

/// What a string or key holding U+0000 is told. It cannot be stored
/// (Postgres text and jsonb refuse it), and no model or frontend needs it.
pub const NUL_MESSAGE: &str = "strings must not contain U+0000 (NUL)";

/// The JSON pointer of the first string or key holding U+0000, if any.
pub fn nul_pointer(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => s.contains('\0').then(String::new),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_pointer(item).map(|rest| format!("/{i}{rest}"))),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                return Some(format!("/{}", super::pointer_token(key)));
            }
            nul_pointer(item).map(|rest| format!("/{}{rest}", super::pointer_token(key)))
        }),
        _ => None,
    }
}

/// The largest magnitude up to which every whole number is an `f64`.
const TWO_53: f64 = 9_007_199_254_740_992.0;

/// A float as every backend keeps it, and reads it back: a negative zero
/// as 0.0 (Postgres's jsonb has one zero), and a whole number beyond 2^53
/// that a 64-bit integer holds exactly (`1e16`) as that integer, since
/// jsonb prints it in full (`10000000000000000`), which reads back as an
/// integer. Every backend must keep (and compare) what it was sent alike,
/// and a replay must read as the live stream did. JSON text cannot spell a
/// NaN or an infinity; such a value is `null`.
pub fn storable_float(v: f64) -> Value {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    const TWO_64: f64 = 18_446_744_073_709_551_616.0;
    if v == 0.0 {
        return Value::from(0.0);
    }
    if v.fract() == 0.0 && v.abs() > TWO_53 {
        if (0.0..TWO_64).contains(&v) {
            return Value::from(v as u64);
        }
        if (-TWO_63..0.0).contains(&v) {
            return Value::from(v as i64);
        }
    }
    Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// `value` with every whole number written with a fraction (`2000.0`)
/// as the integer it is: JSON Schema's `integer` takes both spellings, and
/// a tool reading an integer must not see none where the schema let one
/// through. Numbers beyond 2^53 in magnitude are left as they are.
pub fn integral_numbers(value: Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x.fract() == 0.0 && x.abs() <= TWO_53 {
                Value::from(x as i64)
            } else {
                Value::Number(n)
            }
        }
        Value::Array(items) => Value::Array(items.into_iter().map(integral_numbers).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, integral_numbers(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Whether `a` and `b` are the same JSON up to how whole numbers are
/// written (`30`, `30.0`, `3e1`): a client that parses and re-serializes
/// arguments may change the spelling, never the call. Postgres' JSONB
/// compares numbers by value alike, so both backends agree.
pub fn same_json(a: &Value, b: &Value) -> bool {
    a == b || integral_numbers(a.clone()) == integral_numbers(b.clone())
}

/// [`same_json`] of two values that may be absent (both absent: the same).
pub fn same_json_at(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => same_json(a, b),
        (a, b) => a.is_none() && b.is_none(),
    }
}

/// What a repeated key's error says about it.
pub fn repeated_key_message(key: &str) -> String {
    format!("the key {key:?} appears more than once in its object; give each key once")
}

/// Reads one JSON value from `bytes` (nothing but whitespace after it).
pub fn from_slice(bytes: &[u8]) -> Result<Value, ReadError> {
    let found = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = Strict(&found)
        .deserialize(&mut de)
        .and_then(|value| de.end().map(|()| value));
    match (read, found.into_inner()) {
        (Ok(value), _) => Ok(value),
        (Err(_), Some(Repeated { key, trail })) => {
            let mut pointer: String = trail
                .iter()
                .rev()
                .map(|token| format!("/{}", super::pointer_token(token)))
                .collect();
            pointer.push('/');
            pointer.push_str(&super::pointer_token(&key));
            Err(ReadError::RepeatedKey { pointer, key })
        }
        (Err(e), None) => Err(ReadError::Syntax(e)),
    }
}

/// [`from_slice`] of a text.
pub fn from_str(text: &str) -> Result<Value, ReadError> {
    from_slice(text.as_bytes())
}

/// A repeated key found while reading: the key, and the keys and indexes
/// of the objects and arrays around it, innermost first (gathered as the
/// error travels out, so reading pays nothing for them).
struct Repeated {
    key: String,
    trail: Vec<String>,
}

/// Reads one value, refusing repeated keys at any depth.
#[derive(Clone, Copy)]
struct Strict<'a>(&'a RefCell<Option<Repeated>>);

impl Strict<'_> {
    /// Notes, for an error coming out of a member, which member it was.
    fn passing_through(self, token: impl FnOnce() -> String) {
        if let Some(repeated) = self.0.borrow_mut().as_mut() {
            repeated.trail.push(token());
        }
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(storable_float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        loop {
            match seq.next_element_seed(self) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => return Ok(Value::Array(items)),
                Err(e) => {
                    let at = items.len();
                    self.passing_through(|| at.to_string());
                    return Err(e);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = match map.next_value_seed(self) {
                Ok(value) => value,
                Err(e) => {
                    self.passing_through(|| key);
                    return Err(e);
                }
            };
            match object.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(slot) => {
                    *self.0.borrow_mut() = Some(Repeated {
                        key: slot.key().clone(),
                        trail: Vec::new(),
                    });
                    return Err(de::Error::custom("repeated key"));
                }
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn whole_numbers_lose_their_fraction_and_others_stay() {
        let v =
            serde_json::json!({"ms": 2000.0, "n": [1.5, -3.0, 0.0, 7], "big": 1e300, "s": "2.0"});
        assert_eq!(
            integral_numbers(v).to_string(),
            r#"{"big":1e+300,"ms":2000,"n":[1.5,-3,0,7],"s":"2.0"}"#
        );
    }

    use super::*;
    use serde_json::json;

    fn repeated(text: &str) -> (String, String) {
        match from_str(text) {
            Err(ReadError::RepeatedKey { pointer, key }) => (pointer, key),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn reads_what_serde_json_reads() {
        for text in [
            r#"{"a": [1, -2, 3.5, 1e300, "x\u00e9", true, null, {}], "b": {"c": []}}"#,
            "18446744073709551615",
            "-9223372036854775808",
            "0.1",
            "  \"s\"  ",
            "[]",
        ] {
            let ours = from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{text}");
        }
    }

    #[test]
    fn refuses_what_serde_json_refuses() {
        for text in ["", "{", "{\"a\" 1}", "[1,]", "1 2", "nul", "{\"a\":1}x"] {
            assert!(
                matches!(from_str(text), Err(ReadError::Syntax(_))),
                "{text}"
            );
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        match from_str(&deep) {
            Err(ReadError::Syntax(e)) => assert!(e.to_string().starts_with("recursion limit")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_where_a_key_repeats() {
        assert_eq!(repeated(r#"{"a": 1, "a": 2}"#), ("/a".into(), "a".into()));
        assert_eq!(
            repeated(r#"{"x": 1, "args": {"p": "a", "q": [0, {"k/~": 1, "k/~": 1}]}}"#),
            ("/args/q/1/k~1~0".into(), "k/~".into())
        );
        // The same key in different objects is no repeat.
        assert_eq!(
            from_str(r#"{"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]}"#).unwrap(),
            json!({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})
        );
        // Keys compare after unescaping: "\u0061" is "a".
        assert_eq!(
            repeated(r#"{"a": 1, "\u0061": 2}"#),
            ("/a".into(), "a".into())
        );
        let e = from_str(r#"[{"t": 1, "t": 1}]"#).unwrap_err().to_string();
        assert!(e.contains(r#"the key "t" appears more than once"#), "{e}");
        assert!(e.ends_with("(at /0/t)"), "{e}");
    }
}
