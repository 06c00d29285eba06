//! The line framer feeding every adapter, with the stream cut anywhere.
//!
//! The input's first byte picks the adapter (or runtime detection) and the
//! line cap; the next eight bytes pick where the stream is cut. Properties:
//! nothing panics; the framer never holds more than its cap (bounded memory
//! whatever the agent prints); a line's text, when the framer gives it, is
//! its bytes; every cut of the stream gives the report of the whole stream
//! (which also holds lines read as text to the same lines read as bytes,
//! as a cut takes a line's text away); every byte is counted. Run:
//! `cargo +nightly fuzz run framer_adapters`.

#![no_main]

use colibri::core::ingest::{Frame, LineFramer};
use colibri::core::taxonomy::Runtime;
use colibri::fold::fold_chunks;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let (cuts, stream) = rest.split_at(rest.len().min(8));
    let runtime = Runtime::ALL.get(usize::from(selector % 8)).copied();
    // Small caps reach the oversize paths; 0 is raised to 1 by the framer.
    let max = usize::from(selector >> 3) * 8;

    let mut framer = LineFramer::new(max);
    let cap = framer.max_line();
    for chunk in chunks(stream, cuts) {
        framer.feed(chunk, |f| {
            if let Frame::Line(l) = f {
                assert!(l.bytes().len() <= cap, "a line over the cap");
                if let Some(t) = l.text() {
                    assert_eq!(t.as_bytes(), l.bytes(), "a line's text is its bytes");
                }
            }
        });
        assert!(framer.pending() <= cap, "the framer holds more than its cap");
    }
    framer.finish(|_| {});
    assert_eq!(framer.pending(), 0);

    let (_, whole) = fold_chunks(runtime, cap, [stream], None);
    let (_, cut) = fold_chunks(runtime, cap, chunks(stream, cuts), None);
    assert_eq!(whole, cut, "chunking changed the report");
    assert_eq!(whole.counters.bytes, stream.len() as u64);
});

/// `stream` cut at the offsets the `cuts` bytes name (each one a step of
/// 0..=255 bytes from the previous cut).
fn chunks<'a>(stream: &'a [u8], cuts: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    for &step in cuts {
        let end = (at + usize::from(step)).min(stream.len());
        out.push(&stream[at..end]);
        at = end;
    }
    out.push(&stream[at..]);
    out
}
