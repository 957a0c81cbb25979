//! A `serde_json::Value` read through any serde deserializer, refusing duplicate object keys
//! (serde_json's own `Value` keeps the last one without a word).

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Deserializes a `Value`; a key seen twice in one object is an error naming the key.
pub struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

/// The visitor behind [`StrictValue`], also used for the scalars and arrays of a document.
pub struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
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
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        StrictValue.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(StrictValue)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(A::Error::custom(duplicate_key(&key)));
            }
            let value = map.next_value_seed(StrictValue)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// The message for a key seen twice in one object.
pub fn duplicate_key(key: &str) -> String {
    format!("duplicate key `{key}` in one object")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Value, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        StrictValue.deserialize(&mut de)
    }

    #[test]
    fn a_duplicate_key_is_named_with_its_line() {
        let err = read("{\"a\": {\"b\": 1,\n \"b\": 2}}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("duplicate key `b`"), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let text = r#"{"a": [1, -2, 2.5, "x", null, true, {}], "b": {"c": 18446744073709551615}}"#;
        assert_eq!(
            read(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }
}
