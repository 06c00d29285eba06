//! Reading a line's fields in place.
//!
//! serde's derived `Deserialize` builds a struct in locals and returns it by
//! value through serde_json's layers: for a struct of a dozen optional
//! fields (about 300 bytes) that is several copies a line, which profiled at
//! a third of the Pi adapter's time on a stream of short lines. An adapter
//! whose line struct implements [`ObjectFields`] has its fields written
//! where they live instead. The rules are the derived ones: unknown keys are
//! skipped, a key given twice or a required key missing makes the line
//! malformed, and each value is read by its field type's own `Deserialize`.

use std::borrow::Cow;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

use crate::core::ingest::FramedLine;
use crate::core::taxonomy::Malformed;

/// A JSON string, borrowed from the line unless it has escapes.
#[derive(Deserialize)]
#[serde(transparent)]
pub(crate) struct Text<'a>(#[serde(borrow)] pub Cow<'a, str>);

/// A struct whose fields a line's object fills one key at a time.
pub(crate) trait ObjectFields<'a> {
    /// The bits (as [`ObjectFields::read`] returns them) of the keys a
    /// line must have.
    const REQUIRED: u32;

    /// Reads the value of `key` into its field and returns the field's bit
    /// (one per field), or skips the value and returns 0.
    fn read<A: MapAccess<'a>>(&mut self, key: &str, map: &mut A) -> Result<u32, A::Error>;
}

/// Parses a line that must be one JSON object into `fields`. Unlike a
/// derived struct, which also takes a JSON array (fields by position), a
/// map reader refuses anything but an object, as [`super::from_object`]
/// does by its first-byte check.
///
/// A line checked as UTF-8 once, whole, is read as text: serde_json then
/// takes each key and string without checking it again (three checks on a
/// short Pi line cost twice the one). The framer's check of the chunk
/// ([`FramedLine::text`]) is cheaper still, so a line with its text is not
/// checked here. A line that is not UTF-8 is read as bytes, as before, so
/// its strings are checked and refused one by one.
pub(crate) fn read_object<'a, F: ObjectFields<'a>>(
    line: FramedLine<'a>,
    fields: &mut F,
) -> Result<(), Malformed> {
    let text = match line.text() {
        Some(text) => Ok(text),
        None => std::str::from_utf8(line.bytes()),
    };
    let read = match text {
        Ok(text) => {
            let mut de = serde_json::Deserializer::from_str(text);
            de.deserialize_map(FieldsVisitor(fields))
                .and_then(|()| de.end())
        }
        Err(_) => {
            let mut de = serde_json::Deserializer::from_slice(line.bytes());
            de.deserialize_map(FieldsVisitor(fields))
                .and_then(|()| de.end())
        }
    };
    read.map_err(|_| Malformed)
}

/// An optional string field, as serde reads `Option<Cow<str>>` (null is
/// `None`), but borrowed from the line where it can be.
pub(crate) fn opt_text<'a, A: MapAccess<'a>>(
    map: &mut A,
) -> Result<Option<Cow<'a, str>>, A::Error> {
    Ok(map.next_value::<Option<Text<'a>>>()?.map(|t| t.0))
}

/// An optional text field read leniently ([`super::de_text_lenient`]).
pub(crate) fn opt_text_lenient<'a, A: MapAccess<'a>>(
    map: &mut A,
) -> Result<Option<Cow<'a, str>>, A::Error> {
    map.next_value_seed(LenientText)
}

struct LenientText;

impl<'de> DeserializeSeed<'de> for LenientText {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        super::de_text_lenient(d)
    }
}

struct FieldsVisitor<'f, F>(&'f mut F);

impl<'a, F: ObjectFields<'a>> Visitor<'a> for FieldsVisitor<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = 0u32;
        while let Some(Text(key)) = map.next_key::<Text<'a>>()? {
            let bit = self.0.read(&key, &mut map)?;
            if seen & bit != 0 {
                return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
            }
            seen |= bit;
        }
        if seen & F::REQUIRED != F::REQUIRED {
            return Err(de::Error::custom("a required field is missing"));
        }
        Ok(())
    }
}

/// Sets a field to its value and returns its bit, `1 << n`.
pub(crate) fn set<T>(field: &mut T, value: T, n: u32) -> u32 {
    *field = value;
    1 << n
}

/// Skips the value of a key no field wants.
pub(crate) fn skip<'a, A: MapAccess<'a>>(map: &mut A) -> Result<u32, A::Error> {
    map.next_value::<IgnoredAny>()?;
    Ok(0)
}
