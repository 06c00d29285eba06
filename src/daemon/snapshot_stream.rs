//! The snapshots (`glasspane-snapshot`, `snapshot`) streamed: the reply
//! line is made a slice of panes at a time as the client drains it, so a
//! 10,000-pane snapshot never holds the loop for more than one slice (about
//! [`SLICE_BYTES`] of JSON) and a client that does not read holds one slice,
//! not the whole reply.
//!
//! The panes shown are those that exist when the snapshot is asked (their
//! keys are taken then); each is serialised when its slice is made, with the
//! request's time, so ages and stall flags are those of the request. A pane
//! removed meanwhile is left out; one spawned meanwhile is not in it. The
//! line is byte for byte what the whole-reply path serialised (the tests
//! compare them), so clients see no difference.

use std::io;

use serde::Serialize;
use serde_json::Value;

use crate::core::time::Timestamp;
use crate::daemon::conn::{BodyProgress, BodySources, ReplyBody, Scope};
pub use crate::daemon::pane_text::Schema;
use crate::daemon::panes::{PaneKey, PaneTable};
use crate::protocol::{SNAPSHOT_V1, SNAPSHOT_V2};

/// JSON bytes made per slice: about 100 v2 or 380 v1 panes. Serialising a
/// pane is mostly cache misses (its strings are scattered), about a
/// microsecond each at 10,000 panes, so a slice holds the loop for about
/// half a millisecond: an exit that comes meanwhile waits for at most that.
pub const SLICE_BYTES: usize = 64 << 10;

/// About the most bytes one pane takes in a snapshot, to size a slice.
const PANE_BYTES_GUESS: usize = 1024;

/// One snapshot reply being made.
#[derive(Debug)]
pub struct SnapshotStream {
    schema: Schema,
    scope: Scope,
    t: Timestamp,
    rid: Option<Value>,
    keys: Vec<PaneKey>,
    /// Index into `keys` of the next pane to serialise.
    next: usize,
    /// Panes written so far (a comma goes before every one but the first).
    written: usize,
    started: bool,
}

impl SnapshotStream {
    pub fn new(
        panes: &PaneTable,
        schema: Schema,
        scope: Scope,
        t: Timestamp,
        rid: Option<Value>,
    ) -> SnapshotStream {
        SnapshotStream {
            schema,
            scope,
            t,
            rid,
            keys: panes.keys(),
            next: 0,
            written: 0,
            started: false,
        }
    }
}

impl ReplyBody for SnapshotStream {
    /// Appends the next slice of the reply line to `out`: the envelope's
    /// head first, then panes until `SLICE_BYTES` are made, then the tail
    /// (`Done`).
    fn next_slice(
        &mut self,
        src: &mut BodySources<'_>,
        out: &mut Vec<u8>,
    ) -> io::Result<BodyProgress> {
        let start = out.len();
        // Room for the slice at once: growing it pane by pane would copy it
        // over and over (a v2 pane is about 650 bytes, a v1 pane 170).
        let left = self.keys.len() - self.next;
        out.reserve((left * PANE_BYTES_GUESS).min(SLICE_BYTES) + 1024);
        if !self.started {
            self.head(src, out)?;
            self.started = true;
        }
        while self.next < self.keys.len() && out.len() - start < SLICE_BYTES {
            let key = self.keys[self.next];
            self.next += 1;
            if !src.visible(&self.scope, key) {
                continue;
            }
            let mark = out.len();
            if self.written > 0 {
                out.push(b',');
            }
            let pane_at = out.len();
            src.write_pane(key, self.schema, self.t, out)
                .map_err(io::Error::other)?;
            // Nothing written (the pane was removed since the keys were
            // taken): no comma either.
            if out.len() == pane_at {
                out.truncate(mark);
                continue;
            }
            self.written += 1;
        }
        if self.next < self.keys.len() {
            return Ok(BodyProgress::More);
        }
        self.tail(out)?;
        Ok(BodyProgress::Done)
    }

    fn observation(&self) -> bool {
        true
    }
}

impl SnapshotStream {
    fn head(&self, src: &BodySources<'_>, out: &mut Vec<u8>) -> io::Result<()> {
        let schema = match self.schema {
            Schema::V1 => SNAPSHOT_V1,
            Schema::V2 => SNAPSHOT_V2,
        };
        head(
            out,
            schema,
            src.host_shown_to(&self.scope),
            &self.t.to_rfc3339(),
        )
    }

    fn tail(&self, out: &mut Vec<u8>) -> io::Result<()> {
        tail(out, self.rid.as_ref())
    }
}

/// `{"ok":true,"error":null,"data":{"schema":..,"host":..,"observed_at":..,
/// "panes":[`: the field order of `Response` and of `SnapshotV1`/`V2`.
fn head(out: &mut Vec<u8>, schema: &str, host: &str, observed_at: &str) -> io::Result<()> {
    out.extend_from_slice(br#"{"ok":true,"error":null,"data":{"schema":"#);
    write_json(out, schema)?;
    out.extend_from_slice(br#","host":"#);
    write_json(out, host)?;
    out.extend_from_slice(br#","observed_at":"#);
    write_json(out, observed_at)?;
    out.extend_from_slice(br#","panes":["#);
    Ok(())
}

/// `]}`, the request's `id` when it had one, `}` and the newline.
fn tail(out: &mut Vec<u8>, rid: Option<&Value>) -> io::Result<()> {
    out.extend_from_slice(b"]}");
    if let Some(rid) = rid {
        out.extend_from_slice(br#","id":"#);
        write_json(out, rid)?;
    }
    out.extend_from_slice(b"}\n");
    Ok(())
}

fn write_json(out: &mut Vec<u8>, v: &(impl Serialize + ?Sized)) -> io::Result<()> {
    serde_json::to_writer(out, v).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::pane::Pane;
    use crate::core::taxonomy::Runtime;
    use crate::protocol::{
        ok_line, PaneV1, PaneV1View, PaneV2, PaneV2View, Reply, SnapshotV1, SnapshotV2,
    };

    fn panes(n: usize) -> Vec<Pane> {
        let t0 = Timestamp::from_millis(1_700_000_000_000);
        (0..n)
            .map(|i| {
                let id = crate::core::pane::PaneId(format!("p{i}"));
                let mut p = Pane::new(id, format!("agent \"{i}\""), Some(Runtime::Pi), 1 << 20, t0);
                p.name = (i % 2 == 0).then(|| format!("n{i}"));
                p
            })
            .collect()
    }

    /// The streamed line, pane by pane, as `next_slice` assembles it: each
    /// pane written by `write` (the views `next_slice` writes).
    fn streamed(
        schema: &str,
        rid: Option<&Value>,
        panes: &[Pane],
        write: impl Fn(&Pane, &mut Vec<u8>),
    ) -> Vec<u8> {
        let mut out = Vec::new();
        head(&mut out, schema, "host-1", "2026-11-22T17:00:00.000Z").expect("head");
        for (i, p) in panes.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write(p, &mut out);
        }
        tail(&mut out, rid).expect("tail");
        out
    }

    #[test]
    fn the_streamed_line_is_byte_for_byte_the_whole_reply() {
        let t = Timestamp::from_millis(1_700_000_060_000);
        let stall = Duration::from_secs(120);
        for n in [0, 1, 3] {
            for rid in [
                None,
                Some(serde_json::json!("r-7")),
                Some(serde_json::json!(12)),
            ] {
                let ps = panes(n);
                let v1: Vec<PaneV1> = ps.iter().map(|p| PaneV1::from_pane(p, t, stall)).collect();
                let v2: Vec<PaneV2> = ps.iter().map(|p| PaneV2::from_pane(p, t, stall)).collect();
                let whole_v1 = ok_line(
                    rid.as_ref(),
                    &Reply::SnapshotV1(SnapshotV1 {
                        schema: SNAPSHOT_V1.to_string(),
                        host: "host-1".into(),
                        observed_at: "2026-11-22T17:00:00.000Z".into(),
                        panes: v1.clone(),
                    }),
                );
                let whole_v2 = ok_line(
                    rid.as_ref(),
                    &Reply::SnapshotV2(SnapshotV2 {
                        schema: SNAPSHOT_V2.to_string(),
                        host: "host-1".into(),
                        observed_at: "2026-11-22T17:00:00.000Z".into(),
                        panes: v2.clone(),
                    }),
                );
                let v1_streamed = streamed(SNAPSHOT_V1, rid.as_ref(), &ps, |p, out| {
                    PaneV1View::from_pane(p, t, stall).write_json(out);
                });
                let v2_streamed = streamed(SNAPSHOT_V2, rid.as_ref(), &ps, |p, out| {
                    let view = PaneV2View::from_pane(p, t, stall);
                    view.write_json(out).expect("pane");
                });
                assert_eq!(
                    String::from_utf8_lossy(&v1_streamed),
                    String::from_utf8_lossy(&whole_v1)
                );
                assert_eq!(
                    String::from_utf8_lossy(&v2_streamed),
                    String::from_utf8_lossy(&whole_v2)
                );
            }
        }
    }
}
