//! Properties of ingestion that must hold for any input an agent can print.
//!
//! Streams are built from real-looking lines (every line of every fixture,
//! plus hostile variants), raw garbage, blank lines and truncated lines,
//! joined with LF or CRLF. The properties: no byte stream panics the
//! ingester, any chunking of a stream gives the same report, the line
//! counters add up to an independent count of non-blank lines, and the line
//! framer never holds more than its cap.

use std::path::Path;
use std::sync::OnceLock;

use colibri::core::ingest::{Frame, LineFramer};
use colibri::core::pane::ExitStatus;
use colibri::core::taxonomy::Runtime;
use colibri::fold::{fold_bytes, fold_chunks};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};

/// Lines no fixture has: wrong field types, odd nesting, odd numbers.
const HOSTILE_LINES: &[&str] = &[
    r#"{"type":5}"#,
    r#"{"type":null}"#,
    r#"{"type":"result","is_error":"yes","usage":[1,2],"total_cost_usd":"free"}"#,
    r#"{"type":"assistant","message":"not an object","parent_tool_use_id":7}"#,
    r#"{"type":"assistant","message":{"id":5,"content":{"type":"tool_use"},"usage":{"input_tokens":-4,"output_tokens":1e300}}}"#,
    r#"{"hook_event_name":"Notification","message":{"nested":true},"notification_type":"permission_prompt"}"#,
    r#"{"hook_event_name":7}"#,
    r#"{"type":"usage","cumulative":"lots","input":"x"}"#,
    r#"{"type":"turn.completed","usage":{"input_tokens":18446744073709551615,"output_tokens":1.5}}"#,
    r#"{"type":"step_finish","sessionID":"s","part":{"cost":"NaN","tokens":{"cache":5}}}"#,
    r#"{"type":"step_finish","sessionID":9}"#,
    r#"{"type":"result","timestamp":"2026-01-01T00:00:00Z","status":7,"stats":{"input_tokens":null}}"#,
    r#"{"type":"message_end","message":{"role":"assistant","usage":{"cost":{"total":"x"}},"stopReason":["error"]}}"#,
    r#"{"type":"extension_ui_request","method":"confirm","title":{"t":1}}"#,
    r#"{"type":"tool_call","name":"bash","args":"rm -rf /"}"#,
    r#"{"type":"item.started","item":{"type":"command_execution","command":["ls"]}}"#,
    r#"{"type":"session","id":"a","id":"b"}"#,
    r#"{"type":"x","deep":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
    "{\"type\":\"text_delta\",\"delta\":\"\u{2028}\u{2029}\\ud83d\"}",
    "[\"session\",\"id\"]",
    "\"just a string\"",
    "{}",
];

/// Every line of every fixture, plus the hostile lines.
fn sample_lines() -> &'static [Vec<u8>] {
    static LINES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let mut lines: Vec<Vec<u8>> = HOSTILE_LINES
            .iter()
            .map(|l| l.as_bytes().to_vec())
            .collect();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join("fixtures");
        for dir in std::fs::read_dir(root).expect("fixture root") {
            let dir = dir.expect("fixture dir").path();
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.expect("fixture entry").path();
                if path.extension().is_some_and(|e| e == "jsonl") {
                    let bytes = std::fs::read(&path).expect("fixture readable");
                    lines.extend(
                        bytes
                            .split(|b| *b == b'\n')
                            .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec()),
                    );
                }
            }
        }
        lines
    })
}

fn line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => select(sample_lines()),
        1 => vec(any::<u8>(), 0..48),
        1 => prop_oneof![Just(Vec::new()), Just(b"  \t ".to_vec()), Just(b"\r".to_vec())],
        1 => (select(sample_lines()), any::<Index>()).prop_map(|(l, i)| {
            let cut = i.index(l.len() + 1);
            l[..cut].to_vec()
        }),
    ]
}

/// A stream of lines joined by LF or CRLF, with or without a final newline.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    (vec((line(), any::<bool>()), 0..32), any::<bool>()).prop_map(|(lines, newline_at_end)| {
        let mut out = Vec::new();
        let n = lines.len();
        for (i, (l, crlf)) in lines.into_iter().enumerate() {
            out.extend_from_slice(&l);
            if i + 1 < n || newline_at_end {
                out.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            }
        }
        out
    })
}

fn runtime() -> impl Strategy<Value = Option<Runtime>> {
    prop_oneof![Just(None), select(Runtime::ALL.to_vec()).prop_map(Some)]
}

fn exit() -> impl Strategy<Value = Option<ExitStatus>> {
    prop_oneof![
        Just(None),
        Just(Some(ExitStatus::Code(0))),
        Just(Some(ExitStatus::Code(1))),
        Just(Some(ExitStatus::Signal(9))),
        Just(Some(ExitStatus::Unknown)),
    ]
}

/// A line cap small enough that sample lines often pass it.
fn max_line() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..64, 64usize..600, Just(1usize << 20)]
}

/// Cuts `bytes` at the given points (taken modulo its length).
fn cut<'a>(bytes: &'a [u8], points: &[Index]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = points.iter().map(|i| i.index(bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
}

/// The number of non-blank lines, counted without the framer: split on LF;
/// a line longer than `max` (its CR included) counts whatever it holds;
/// otherwise one trailing CR is dropped and a line of ASCII white space is
/// blank. An empty piece after the last LF is no line.
fn count_non_blank_lines(bytes: &[u8], max: usize) -> u64 {
    let pieces: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let last = pieces.len() - 1;
    let mut n = 0;
    for (i, piece) in pieces.iter().enumerate() {
        if i == last && piece.is_empty() {
            continue;
        }
        if piece.len() > max {
            n += 1;
            continue;
        }
        let body = piece.strip_suffix(b"\r").unwrap_or(piece);
        if !body.iter().all(u8::is_ascii_whitespace) {
            n += 1;
        }
    }
    n
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..2048), rt in runtime(), max in max_line(), ex in exit()) {
        let report = fold_bytes(rt, max, &bytes, ex);
        prop_assert_eq!(report.counters.bytes, bytes.len() as u64);
    }

    #[test]
    fn structured_streams_never_panic(bytes in stream(), rt in runtime(), max in max_line(), ex in exit()) {
        let report = fold_bytes(rt, max, &bytes, ex);
        prop_assert_eq!(report.timeline[0].state.as_str(), "idle");
        if ex.is_some() {
            prop_assert!(report.exit.is_some());
        }
    }

    #[test]
    fn any_chunking_gives_the_same_report(
        bytes in stream(),
        points in vec(any::<Index>(), 0..24),
        rt in runtime(),
        max in max_line(),
        ex in exit(),
    ) {
        let (whole_pane, whole) = fold_chunks(rt, max, [bytes.as_slice()], ex);
        let (cut_pane, chunked) = fold_chunks(rt, max, cut(&bytes, &points), ex);
        prop_assert_eq!(chunked, whole);
        prop_assert_eq!(cut_pane.turns(), whole_pane.turns());
    }

    #[test]
    fn counters_add_up_to_non_blank_lines(bytes in stream(), rt in runtime(), max in max_line(), ex in exit()) {
        let report = fold_bytes(rt, max, &bytes, ex);
        let c = &report.counters;
        prop_assert_eq!(c.events + c.malformed + c.oversize, count_non_blank_lines(&bytes, max));
        prop_assert!(c.unknown <= c.events);
    }

    #[test]
    fn framer_never_holds_more_than_its_cap(
        chunks in vec(vec(prop_oneof![4 => any::<u8>(), 1 => Just(b'\n')], 0..300), 0..24),
        max in 1usize..200,
    ) {
        let mut framer = LineFramer::new(max);
        let mut longest = 0;
        for chunk in &chunks {
            framer.feed(chunk, |f| if let Frame::Line(l) = f { longest = longest.max(l.bytes().len()) });
            prop_assert!(framer.pending() <= max, "pending {} > max {}", framer.pending(), max);
        }
        framer.finish(|f| if let Frame::Line(l) = f { longest = longest.max(l.bytes().len()) });
        prop_assert!(longest <= max);
        prop_assert_eq!(framer.pending(), 0);
    }
}

#[test]
fn independent_line_count_matches_hand_counts() {
    assert_eq!(count_non_blank_lines(b"", 10), 0);
    assert_eq!(count_non_blank_lines(b"a\n\n \r\nb", 10), 2);
    assert_eq!(count_non_blank_lines(b"a\r\n", 10), 1);
    // Eleven spaces pass a cap of ten: an oversize line, not a blank one.
    assert_eq!(count_non_blank_lines(b"           \nx\n", 10), 2);
}
