//! Property versions of the fuzz targets in `fuzz/` (request_parse,
//! framer_adapters), so stable CI exercises the same properties on every
//! run: the socket request parser on arbitrary and on almost-valid lines,
//! and the line framer against an independent reference under any chunking.
//! (The adapters behind the framer are covered by `ingest_props.rs`.)

use colibri::core::ingest::{Frame, LineFramer};
use colibri::protocol::{err_line, ok_line, Request, RequestError, COMMAND_NAMES};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::{select, Index};
use serde_json::{Map, Value};

/// What the daemon does with one request line, checked as the fuzz target
/// checks it: no panic, and a reply that is one line of JSON.
fn answer(line: &[u8]) -> Result<(), TestCaseError> {
    let reply = match Request::parse(line) {
        Ok(req) => {
            prop_assert!(COMMAND_NAMES.contains(&req.command.name()));
            ok_line(req.id.as_ref(), &Value::Null)
        }
        Err((id, err)) => {
            if matches!(err, RequestError::Json(_) | RequestError::NotObject) {
                prop_assert!(id.is_none());
            }
            err_line(id.as_ref(), err.code(), &err.to_string())
        }
    };
    prop_assert_eq!(reply.iter().filter(|b| **b == b'\n').count(), 1);
    prop_assert_eq!(reply.last(), Some(&b'\n'));
    let v: Value =
        serde_json::from_slice(&reply).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(v["ok"].is_boolean());
    Ok(())
}

/// Any JSON value, a few levels deep, with the strings and numbers that
/// trip parsers (huge, negative, fractional, control characters).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::from),
        select(vec![
            "v1", "v2", "90s", "0s", "KILL", "resume", "pi", "-1", ""
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(".{0,8}", inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A request object: a real command name (or a near miss), the fields the
/// commands read with arbitrary values, an optional id of any type.
fn request_object() -> impl Strategy<Value = Vec<u8>> {
    let cmd = prop_oneof![
        4 => select(COMMAND_NAMES.to_vec()).prop_map(Value::from),
        1 => json_value(),
    ];
    let fields = select(vec![
        "agent_id",
        "argv",
        "env",
        "cwd",
        "schema",
        "session_id",
        "text",
        "newline",
        "signal",
        "event",
        "panes",
        "kind",
        "stall_after",
        "restart",
        "max_restarts",
        "runtime",
        "name",
        "jail",
        "user",
        "provider",
        "model",
        "system_prompt",
    ]);
    (
        cmd,
        vec((fields, json_value()), 0..6),
        proptest::option::of(json_value()),
    )
        .prop_map(|(cmd, args, id)| {
            let mut m = Map::new();
            m.insert("cmd".into(), cmd);
            for (k, v) in args {
                m.insert(k.into(), v);
            }
            if let Some(id) = id {
                m.insert("id".into(), id);
            }
            serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
        })
}

/// The framer's contract written the slow, obvious way: split on `\n`,
/// strip one `\r`, a line over `max` becomes `Oversize`, and a last line
/// without `\n` counts at the end (unless it is over the cap, in which case
/// the framer already reported it).
fn reference_frames(stream: &[u8], max: usize) -> Vec<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut pieces: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    let last = pieces.pop().unwrap_or(&[]);
    for piece in pieces {
        if piece.len() > max {
            out.push(None);
        } else {
            out.push(Some(piece.strip_suffix(b"\r").unwrap_or(piece).to_vec()));
        }
    }
    if last.len() > max {
        out.push(None);
    } else if !last.is_empty() {
        out.push(Some(last.strip_suffix(b"\r").unwrap_or(last).to_vec()));
    }
    out
}

fn cut<'a>(bytes: &'a [u8], points: &[Index]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = points.iter().map(|p| p.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for p in at {
        out.push(&bytes[from..p]);
        from = p;
    }
    out.push(&bytes[from..]);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn request_parser_survives_arbitrary_bytes(line in vec(any::<u8>(), 0..512)) {
        let line: Vec<u8> = line.into_iter().filter(|b| *b != b'\n').collect();
        answer(&line)?;
    }

    #[test]
    fn request_parser_survives_almost_valid_requests(line in request_object()) {
        answer(&line)?;
    }

    #[test]
    fn request_parser_survives_any_json(v in json_value()) {
        answer(&serde_json::to_vec(&v).unwrap_or_default())?;
    }

    #[test]
    fn framer_matches_the_reference_under_any_chunking(
        stream in vec(prop_oneof![6 => any::<u8>(), 2 => Just(b'\n'), 1 => Just(b'\r')], 0..600),
        points in vec(any::<Index>(), 0..32),
        max in 1usize..64,
    ) {
        let mut framer = LineFramer::new(max);
        let mut got: Vec<Option<Vec<u8>>> = Vec::new();
        for chunk in cut(&stream, &points) {
            framer.feed(chunk, |f| got.push(match f {
                Frame::Line(l) => Some(l.bytes().to_vec()),
                Frame::Oversize => None,
            }));
            prop_assert!(framer.pending() <= max);
        }
        framer.finish(|f| got.push(match f {
            Frame::Line(l) => Some(l.bytes().to_vec()),
            Frame::Oversize => None,
        }));
        prop_assert_eq!(got, reference_frames(&stream, max));
    }
}

#[test]
fn the_reference_framer_agrees_with_hand_examples() {
    let f = |s: &[u8], m| reference_frames(s, m);
    assert_eq!(
        f(b"a\r\nbb\n", 5),
        vec![Some(b"a".to_vec()), Some(b"bb".to_vec())]
    );
    assert_eq!(f(b"toolong\nok", 3), vec![None, Some(b"ok".to_vec())]);
    assert_eq!(f(b"", 3), Vec::<Option<Vec<u8>>>::new());
}
