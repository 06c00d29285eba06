//! JSON text written straight into a byte buffer, for the two places where
//! serde_json's per-call cost shows: session-log records (one per agent
//! line) and snapshot panes (ten thousand per snapshot). Each writer here is
//! held by tests to what serde_json writes for the same value.

use serde::Serialize;

use crate::core::time::Timestamp;

/// Escapes valid UTF-8 as serde_json does: quote, backslash and C0
/// controls (`\b \f \n \r \t`, else `\u00XX` in lower-case hex); everything
/// else (including U+2028/U+2029, which JSON allows raw) is copied.
pub fn push_escaped(out: &mut Vec<u8>, valid: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Most text (every pane id) needs no escape: one scan without an early
    // exit, which the compiler vectorises (`any` stops at each byte), then
    // one copy.
    let special = valid.iter().fold(false, |seen, &b| {
        seen | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if !special {
        out.extend_from_slice(valid);
        return;
    }
    let mut start = 0;
    for (i, &b) in valid.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&valid[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&valid[start..]);
}

/// Appends `s` as a JSON string, quotes included.
pub fn push_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    push_escaped(out, s.as_bytes());
    out.push(b'"');
}

/// A JSON object being written: `{`, then one `"key":value` per call, comma
/// separated, then `}` from [`Object::end`]. Keys are the caller's string
/// literals, plain ASCII needing no escape (a debug assertion checks).
pub struct Object<'o> {
    out: &'o mut Vec<u8>,
    empty: bool,
}

impl<'o> Object<'o> {
    pub fn begin(out: &'o mut Vec<u8>) -> Object<'o> {
        out.push(b'{');
        Object { out, empty: true }
    }

    /// Writes `,"key":` (no comma before the first) and returns the buffer
    /// for the value.
    pub fn key(&mut self, key: &str) -> &mut Vec<u8> {
        debug_assert!(key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\'));
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    pub fn str(&mut self, key: &str, value: &str) {
        push_str(self.key(key), value);
    }

    /// The key and value when there is a value; nothing otherwise (serde's
    /// `skip_serializing_if = "Option::is_none"`).
    pub fn opt_str(&mut self, key: &str, value: Option<&str>) {
        if let Some(v) = value {
            self.str(key, v);
        }
    }

    pub fn time(&mut self, key: &str, value: Timestamp) {
        let out = self.key(key);
        out.push(b'"');
        out.extend_from_slice(&value.rfc3339().as_bytes());
        out.push(b'"');
    }

    pub fn opt_time(&mut self, key: &str, value: Option<Timestamp>) {
        if let Some(v) = value {
            self.time(key, v);
        }
    }

    pub fn bool(&mut self, key: &str, value: bool) {
        let text: &[u8] = if value { b"true" } else { b"false" };
        self.key(key).extend_from_slice(text);
    }

    pub fn uint(&mut self, key: &str, value: u64) {
        let mut digits = itoa::Buffer::new();
        let text = digits.format(value);
        self.key(key).extend_from_slice(text.as_bytes());
    }

    pub fn int(&mut self, key: &str, value: i64) {
        let mut digits = itoa::Buffer::new();
        let text = digits.format(value);
        self.key(key).extend_from_slice(text.as_bytes());
    }

    pub fn opt_int(&mut self, key: &str, value: Option<i64>) {
        if let Some(v) = value {
            self.int(key, v);
        }
    }

    /// Any other value, through serde_json (floats, arrays of records).
    pub fn value(&mut self, key: &str, value: &impl Serialize) -> serde_json::Result<()> {
        serde_json::to_writer(&mut *self.key(key), value)
    }

    /// A nested object.
    pub fn object(&mut self, key: &str) -> Object<'_> {
        Object::begin(self.key(key))
    }

    pub fn end(self) {
        self.out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(f: impl FnOnce(&mut Object<'_>)) -> String {
        let mut out = Vec::new();
        let mut o = Object::begin(&mut out);
        f(&mut o);
        o.end();
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn escapes_every_byte_as_serde_json_does() {
        let all: String = (0u32..0x80)
            .filter_map(char::from_u32)
            .chain(['é', '\u{2028}', '\u{2029}', '\u{7f}', '😀'])
            .collect();
        let mut out = Vec::new();
        push_escaped(&mut out, all.as_bytes());
        let theirs = serde_json::to_string(&all).expect("serialise");
        assert_eq!(format!("\"{}\"", String::from_utf8_lossy(&out)), theirs);
    }

    #[test]
    fn an_object_is_what_serde_json_writes_for_the_same_map() {
        let t = Timestamp::from_millis(1_700_000_000_123);
        let text = written(|o| {
            o.str("a", "x\"y");
            o.opt_str("skipped", None);
            o.opt_str("b", Some("\u{1}"));
            o.time("t", t);
            o.opt_time("none", None);
            o.bool("f", false);
            o.uint("u", u64::MAX);
            o.int("i", i64::MIN);
            o.opt_int("j", Some(-3));
            o.value("c", &0.1f64).expect("float");
            let mut inner = o.object("o");
            inner.bool("yes", true);
            inner.end();
            let empty = o.object("e");
            empty.end();
        });
        let theirs = serde_json::json!({
            "a": "x\"y", "b": "\u{1}", "t": t.to_rfc3339(), "f": false,
            "u": u64::MAX, "i": i64::MIN, "j": -3, "c": 0.1,
            "o": {"yes": true}, "e": {},
        });
        // Same keys, same values, and the text reads back as that map.
        let back: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(back, theirs);
        assert_eq!(
            text,
            r#"{"a":"x\"y","b":"\u0001","t":"2023-11-14T22:13:20.123Z","f":false,"u":18446744073709551615,"i":-9223372036854775808,"j":-3,"c":0.1,"o":{"yes":true},"e":{}}"#
        );
    }
}
