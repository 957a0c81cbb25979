//! Reading a manifest object by object: a `List`'s (or a JSON array's) items are decoded one at
//! a time and handed on, so no tree of the whole file is ever built.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::Document;
use super::strict::{StrictValue, StrictVisitor, duplicate_key};

/// Hands each object read to a sink and remembers where it is, for errors.
pub struct Reader<'a> {
    sink: Box<dyn FnMut(Document) + 'a>,
    /// The object (or document) being read.
    at: Option<String>,
    /// Where in `at` a value failed to decode.
    path: Option<String>,
    /// The last object read whole, as `Kind namespace/name` (or its origin).
    last: Option<String>,
}

impl<'a> Reader<'a> {
    pub fn new(sink: impl FnMut(Document) + 'a) -> Self {
        Self {
            sink: Box::new(sink),
            at: None,
            path: None,
            last: None,
        }
    }

    /// Where reading stopped, for an error: ` in items[3] at spec (after Node a)`; `file` is
    /// left out of origins.
    pub fn whereabouts(&self, file: &str) -> String {
        let mut out = String::new();
        if let Some(at) = &self.at {
            let at = at.strip_prefix(file).unwrap_or(at).trim_start();
            if !at.is_empty() {
                out.push_str(&format!(" in {at}"));
            }
        }
        if let Some(path) = self.path.as_deref().filter(|p| *p != ".") {
            out.push_str(&format!(" at {path}"));
        }
        if let Some(last) = &self.last {
            out.push_str(&format!(" (after {last})"));
        }
        out
    }

    /// Hands on `value`, a `*List`'s items one by one (nested Lists too).
    fn emit(&mut self, value: Value, origin: String) {
        let is_list = value
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && value.get("items").is_some_and(Value::is_array);
        if !is_list {
            let doc = Document { origin, value };
            self.last = Some(doc.object_ref());
            (self.sink)(doc);
            return;
        }
        if let Value::Object(mut map) = value
            && let Some(Value::Array(items)) = map.remove("items")
        {
            for (i, item) in items.into_iter().enumerate() {
                self.emit(item, format!("{origin} items[{i}]"));
            }
        }
    }
}

/// Reads one document (a YAML document, a JSON file or a JSON array's element): a `*List`
/// (or a kind-less object) with an `items` array has its items read and handed on one by one.
pub struct DocSeed<'r, 'a> {
    pub reader: &'r mut Reader<'a>,
    pub origin: String,
}

impl<'de> DeserializeSeed<'de> for DocSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.reader.at = Some(self.origin.clone());
        self.reader.path = None;
        d.deserialize_any(DocVisitor(self))
    }
}

struct DocVisitor<'r, 'a>(DocSeed<'r, 'a>);

impl DocVisitor<'_, '_> {
    /// Hands on a document's value (a null document is none).
    fn value<E>(self, value: Value) -> Result<(), E> {
        if !value.is_null() {
            self.0.reader.emit(value, self.0.origin);
        }
        Ok(())
    }
}

/// Forwards a scalar to [`StrictVisitor`] and hands the value on.
macro_rules! forward_scalars {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method<E: Error>(self, v: $ty) -> Result<Self::Value, E> {
            let value = StrictVisitor.$method(v)?;
            self.value(value)
        }
    )*};
}

impl<'de> Visitor<'de> for DocVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object or a List")
    }

    forward_scalars!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64,
        visit_str: &str, visit_string: String);

    fn visit_none<E: Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        let value = StrictVisitor.visit_seq(seq)?;
        self.value(value)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut object = Map::new();
        let mut streamed = false;
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) || (streamed && key == "items") {
                return Err(A::Error::custom(duplicate_key(&key)));
            }
            if key != "items" {
                let seed = Tracked {
                    key: &key,
                    path: &mut self.0.reader.path,
                };
                let value = map.next_value_seed(seed)?;
                object.insert(key, value);
                continue;
            }
            // kubectl prints `items` before `kind`: stream unless the kind is known to be no List.
            let stream = object.get("kind").is_none_or(is_list_kind);
            let seed = ItemsSeed {
                reader: &mut *self.0.reader,
                origin: &self.0.origin,
                stream,
            };
            match map.next_value_seed(seed)? {
                Items::Streamed => streamed = true,
                Items::Value(value) => {
                    object.insert(key, value);
                }
            }
        }
        if streamed {
            return match object.get("kind") {
                Some(kind) if !is_list_kind(kind) => Err(A::Error::custom(format!(
                    "`items` is a list of objects but the kind is {kind}, not a List"
                ))),
                _ => Ok(()),
            };
        }
        self.value(Value::Object(object))
    }
}

fn is_list_kind(kind: &Value) -> bool {
    kind.as_str().is_some_and(|k| k.ends_with("List"))
}

/// A List's `items`: streamed when an array (and `stream`), else read as a value.
struct ItemsSeed<'r, 'a, 'o> {
    reader: &'r mut Reader<'a>,
    origin: &'o str,
    stream: bool,
}

enum Items {
    Streamed,
    Value(Value),
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_, '_, '_> {
    type Value = Items;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Items, D::Error> {
        if self.stream {
            d.deserialize_any(self)
        } else {
            StrictValue.deserialize(d).map(Items::Value)
        }
    }
}

macro_rules! items_scalars {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method<E: Error>(self, v: $ty) -> Result<Items, E> {
            StrictVisitor.$method(v).map(Items::Value)
        }
    )*};
}

impl<'de> Visitor<'de> for ItemsSeed<'_, '_, '_> {
    type Value = Items;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a List's items")
    }

    items_scalars!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64,
        visit_str: &str, visit_string: String);

    fn visit_none<E: Error>(self) -> Result<Items, E> {
        Ok(Items::Value(Value::Null))
    }

    fn visit_unit<E: Error>(self) -> Result<Items, E> {
        Ok(Items::Value(Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Items, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Items, A::Error> {
        StrictVisitor.visit_map(map).map(Items::Value)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
        let mut i = 0;
        loop {
            let origin = format!("{} items[{i}]", self.origin);
            let seed = ItemSeed {
                reader: &mut *self.reader,
                origin: origin.clone(),
            };
            match seq.next_element_seed(seed)? {
                Some(item) => self.reader.emit(item, origin),
                None => break,
            }
            i += 1;
        }
        self.reader.at = Some(self.origin.to_string());
        Ok(Items::Streamed)
    }
}

/// One item of a List, read as a value; where a value fails is kept for the error.
struct ItemSeed<'r, 'a> {
    reader: &'r mut Reader<'a>,
    origin: String,
}

impl<'de> DeserializeSeed<'de> for ItemSeed<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.reader.at = Some(self.origin);
        let mut track = serde_path_to_error::Track::new();
        let result = StrictValue.deserialize(serde_path_to_error::Deserializer::new(d, &mut track));
        if result.is_err() {
            self.reader.path = Some(track.path().to_string());
        }
        result
    }
}

/// A document's field `key`, read as a value; where in it a value fails is kept for the error
/// (`spec.trainer`).
struct Tracked<'k, 'p> {
    key: &'k str,
    path: &'p mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Tracked<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let mut track = serde_path_to_error::Track::new();
        let result = StrictValue.deserialize(serde_path_to_error::Deserializer::new(d, &mut track));
        if result.is_err() {
            let path = track.path().to_string();
            // A key that failed to read is `?`: the path ends at the map it is in.
            let inner = path.strip_suffix(".?").unwrap_or(&path);
            *self.path = Some(if matches!(inner, "." | "?") {
                self.key.to_string()
            } else {
                format!("{}.{inner}", self.key)
            });
        }
        result
    }
}

/// Reads a JSON text's top level: an array's elements are documents `origin document <i>`,
/// anything else the one document `origin`.
pub struct JsonTop<'r, 'a> {
    pub reader: &'r mut Reader<'a>,
    pub origin: String,
}

impl<'de> DeserializeSeed<'de> for JsonTop<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonTop<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object, a List or an array of them")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.reader.at = Some(self.origin.clone());
        DocVisitor(DocSeed {
            reader: self.reader,
            origin: self.origin,
        })
        .visit_map(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 1;
        loop {
            let seed = DocSeed {
                reader: &mut *self.reader,
                origin: format!("{} document {i}", self.origin),
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
}
