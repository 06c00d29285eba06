//! Each pane's snapshot objects (v1 and v2), kept as text from one
//! snapshot to the next.
//!
//! At 10,000 panes a v2 snapshot (6.3 MB) cost the loop about 17 ms and a
//! v1 snapshot (1.6 MB) about 5-8 ms, more than a microsecond a pane for v2:
//! each pane's strings are scattered through the heap, and loading them,
//! formatting the timestamps and escaping the strings cost far more than
//! the bytes written. Most panes of a large fleet are idle between two
//! snapshots, so their text has not changed; a kept text is one contiguous
//! copy.
//!
//! A kept text is right by construction, not by care:
//! - it lives beside its slot in the pane table, and every mutable borrow
//!   of the slot drops it (`PaneTable::get_mut`);
//! - of what the text shows, only the `stalled` flag moves with the clock
//!   alone: the text is kept as if not stalled, with the pane's stall
//!   deadline (fixed while the pane is unchanged), and the flag is written
//!   anew each time (v2 `"stalled":false` becomes `true`; v1, which omits
//!   the field when false, gets `,"stalled":true` before its last brace),
//!   so a kept write reads nothing of the pane but its text;
//! - the default stall threshold (a reload may change it) is kept with the
//!   text and compared;
//! - approval escalations live outside the slot, so a pane with pending
//!   approvals (rare, and short-lived) has no kept v2 text (v1 does not
//!   show approvals).
//!
//! In debug builds every write from a kept text is checked against a fresh
//! one, so every test that takes a snapshot checks the rules above.
//!
//! The cost: the texts of the panes a snapshot has shown since their last
//! change, about 650 bytes for v2 and 170 for v1 (8 MB at 10,000 panes
//! with both kinds of snapshot asked).

use std::time::Duration;

use crate::core::time::Timestamp;
use crate::protocol::{PaneV1View, PaneV2View};

/// Which snapshot a text (or a streamed snapshot) is of.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Schema {
    V1,
    V2,
}

const FALSE: &[u8] = b"false";
const V1_STALLED: &[u8] = br#","stalled":true"#;

/// A pane's kept texts, one per snapshot schema.
#[derive(Debug, Default)]
pub struct KeptTexts {
    v1: Option<PaneText>,
    v2: Option<PaneText>,
}

impl KeptTexts {
    pub fn get(&self, schema: Schema) -> Option<&PaneText> {
        match schema {
            Schema::V1 => self.v1.as_ref(),
            Schema::V2 => self.v2.as_ref(),
        }
    }

    pub fn get_mut(&mut self, schema: Schema) -> &mut Option<PaneText> {
        match schema {
            Schema::V1 => &mut self.v1,
            Schema::V2 => &mut self.v2,
        }
    }
}

/// What a kept text's `stalled` flag follows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stall {
    /// The default stall threshold the text was made with.
    pub(crate) after: Duration,
    /// When the pane counts as stalled, as it was when the text was made.
    pub(crate) deadline: Option<Timestamp>,
}

/// A pane's snapshot object as text, written as if not stalled.
#[derive(Debug)]
pub struct PaneText {
    bytes: Box<[u8]>,
    /// v2: where `false` begins in `bytes`; v1: where its last `}` is.
    stalled_at: usize,
    schema: Schema,
    pub(crate) stall: Stall,
}

impl PaneText {
    /// Appends the pane's v2 object to `out` and returns its text to keep,
    /// or `None` for a pane that may not be kept (one with pending
    /// approvals).
    pub(crate) fn make_v2(
        view: &mut PaneV2View<'_>,
        stall: Stall,
        out: &mut Vec<u8>,
    ) -> serde_json::Result<Option<Self>> {
        if !view.approvals.is_empty() {
            view.write_json(out)?;
            return Ok(None);
        }
        let start = out.len();
        let stalled = view.stalled;
        view.stalled = false;
        let stalled_at = view.write_json_marked(out)?;
        Ok(Some(Self::keep(
            out,
            start,
            stalled_at,
            Schema::V2,
            stall,
            stalled,
        )))
    }

    /// Appends the pane's v1 object to `out` and returns its text to keep.
    pub(crate) fn make_v1(view: &mut PaneV1View<'_>, stall: Stall, out: &mut Vec<u8>) -> Self {
        let start = out.len();
        let stalled = view.stalled;
        view.stalled = false;
        view.write_json(out);
        // The object ends with its `}`; `stalled` would go just before.
        let stalled_at = out.len().saturating_sub(start + 1);
        Self::keep(out, start, stalled_at, Schema::V1, stall, stalled)
    }

    /// Takes `out[start..]` as the text and writes it again with the flag
    /// as it is.
    fn keep(
        out: &mut Vec<u8>,
        start: usize,
        stalled_at: usize,
        schema: Schema,
        stall: Stall,
        stalled: bool,
    ) -> Self {
        let text = PaneText {
            bytes: out[start..].into(),
            stalled_at,
            schema,
            stall,
        };
        out.truncate(start);
        text.write(out, stalled);
        text
    }

    /// What `Pane::is_stalled` says at `t` of the pane the text was made
    /// from.
    pub(crate) fn stalled(&self, t: Timestamp) -> bool {
        self.stall.deadline.is_some_and(|deadline| t >= deadline)
    }

    /// Appends the object to `out`, with `stalled` as it is now.
    pub(crate) fn write(&self, out: &mut Vec<u8>, stalled: bool) {
        let (head, tail) = self.bytes.split_at(self.stalled_at);
        out.extend_from_slice(head);
        match self.schema {
            Schema::V2 => {
                debug_assert!(tail.starts_with(FALSE), "`false` at the mark");
                out.extend_from_slice(if stalled { b"true" } else { FALSE });
                out.extend_from_slice(tail.get(FALSE.len()..).unwrap_or_default());
            }
            Schema::V1 => {
                debug_assert!(tail == b"}", "the last brace at the mark");
                if stalled {
                    out.extend_from_slice(V1_STALLED);
                }
                out.extend_from_slice(tail);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::pane::{ExitStatus, Pane, PaneId};
    use crate::core::taxonomy::Runtime;
    use crate::daemon::agent::{Agent, RestartPolicy, RestartState};
    use crate::daemon::approvals::desk::ApprovalDesk;
    use crate::daemon::panes::PaneTable;
    use crate::daemon::panes::Slot;
    use crate::daemon::views::{self, write_fresh};

    const T0: u64 = 1_700_000_000_000;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(T0 + ms)
    }

    /// Panes with the optional parts of the text absent and present: a
    /// bare one, one with a session, a tool, usage and an error, one that
    /// exited on a signal, a paused one and one with a restart policy.
    fn slots() -> Vec<Slot> {
        let lines = [
            r#"{"type":"session","version":3,"id":"s-1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w\u00e9"}"#,
            r#"{"type":"agent_start"}"#,
            r#"{"type":"tool_execution_start","toolCallId":"c1","toolName":"bash","args":{"command":"ls \"x\""}}"#,
            r#"{"type":"message_end","message":{"role":"assistant","content":[],"usage":{"input":12,"output":3,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"total":0.25}},"stopReason":"error","errorMessage":"400 \"bad\""}}"#,
        ];
        (0..5)
            .map(|i| {
                let id = PaneId(format!("p\"{i}é"));
                let mut pane = Pane::new(
                    id,
                    format!("agent {i}\n"),
                    Some(Runtime::Pi),
                    1 << 20,
                    at(0),
                );
                if i > 0 {
                    pane.name = Some(format!("name-{i}"));
                    pane.stall_after = (i == 2).then_some(Duration::from_secs(7));
                    for (n, line) in lines.iter().enumerate() {
                        pane.ingest_line(line.as_bytes(), at(n as u64 * 1001), &mut Vec::new());
                    }
                }
                if i == 3 {
                    pane.exited(ExitStatus::Signal(9), at(30_000), &mut Vec::new());
                }
                pane.paused = i == 4;
                let restart = RestartState {
                    policy: if i == 2 {
                        RestartPolicy::OnFailure
                    } else {
                        RestartPolicy::Never
                    },
                    max: 3,
                    attempts: 1,
                };
                let agent = Agent::new(
                    format!("p{i}"),
                    format!("sess-{i}"),
                    (i == 1).then(|| "j1".into()),
                    None,
                    restart,
                );
                Slot { pane, agent }
            })
            .collect()
    }

    fn fresh(s: &Slot, schema: Schema, t: Timestamp, stall_after: Duration) -> String {
        let mut out = Vec::new();
        write_fresh(
            s,
            schema,
            t,
            stall_after,
            &ApprovalDesk::default(),
            &mut out,
        )
        .expect("write");
        String::from_utf8(out).expect("utf-8")
    }

    /// Makes a text to keep, as `BodySources::write_pane` does, into `out`.
    fn make(
        s: &Slot,
        schema: Schema,
        t: Timestamp,
        stall_after: Duration,
        out: &mut Vec<u8>,
    ) -> Option<PaneText> {
        let desk = ApprovalDesk::default();
        let stall = Stall {
            after: stall_after,
            deadline: s.pane.stall_deadline(stall_after),
        };
        match schema {
            Schema::V1 => {
                let mut view = views::pane_v1(s, t, stall_after);
                Some(PaneText::make_v1(&mut view, stall, out))
            }
            Schema::V2 => {
                let mut view = views::pane_v2(s, t, stall_after, &desk);
                PaneText::make_v2(&mut view, stall, out).expect("write")
            }
        }
    }

    #[test]
    fn a_kept_text_writes_what_a_fresh_view_writes_stalled_or_not() {
        let stall_after = Duration::from_secs(120);
        for schema in [Schema::V1, Schema::V2] {
            let mut stalled_seen = [false, false];
            for (i, s) in slots().iter().enumerate() {
                // Made at a time it is not stalled, and at one it is.
                for made_at in [at(10_000), at(600_000)] {
                    let mut out = b"[".to_vec();
                    let text = make(s, schema, made_at, stall_after, &mut out).expect("kept");
                    assert_eq!(
                        String::from_utf8_lossy(&out[1..]),
                        fresh(s, schema, made_at, stall_after),
                        "{schema:?} pane {i}"
                    );
                    // Later, the same text with the flag as the clock has it.
                    for later in [at(11_000), at(500_000), at(5_000_000)] {
                        let stalled = text.stalled(later);
                        assert_eq!(stalled, s.pane.is_stalled(later, stall_after), "pane {i}");
                        stalled_seen[usize::from(stalled)] = true;
                        let mut out = Vec::new();
                        text.write(&mut out, stalled);
                        assert_eq!(
                            String::from_utf8_lossy(&out),
                            fresh(s, schema, later, stall_after),
                            "{schema:?} pane {i}"
                        );
                    }
                }
            }
            assert_eq!(
                stalled_seen,
                [true, true],
                "{schema:?}: both flags were written"
            );
        }
    }

    #[test]
    fn a_pane_with_pending_approvals_has_no_kept_v2_text() {
        let stall_after = Duration::from_secs(120);
        let mut s = slots().remove(1);
        let ask = r#"{"type":"extension_ui_request","id":"q1","method":"input","message":"Which branch?"}"#;
        s.pane
            .ingest_line(ask.as_bytes(), at(9_000), &mut Vec::new());
        let mut out = Vec::new();
        assert!(make(&s, Schema::V2, at(10_000), stall_after, &mut out).is_none());
        let written = String::from_utf8(out).expect("utf-8");
        assert_eq!(written, fresh(&s, Schema::V2, at(10_000), stall_after));
        assert!(written.contains(r#""approvals":["#), "{written}");
        // v1 shows no approvals: its text is kept.
        assert!(make(&s, Schema::V1, at(10_000), stall_after, &mut Vec::new()).is_some());
    }

    #[test]
    fn a_mutable_borrow_drops_the_kept_texts_and_a_reused_slot_starts_without() {
        let stall_after = Duration::from_secs(120);
        let mut table = PaneTable::default();
        let mut keys = Vec::new();
        for s in slots() {
            keys.push(table.insert(s.pane, s.agent));
        }
        let keep = |table: &mut PaneTable, key, schema| {
            let (slot, kept) = table.with_text(key, schema).expect("slot");
            *kept = make(slot, schema, at(1), stall_after, &mut Vec::new());
        };
        let has = |table: &PaneTable, key, schema| table.kept_text(key, schema).is_some();
        let has_both =
            |table: &PaneTable, key| has(table, key, Schema::V1) && has(table, key, Schema::V2);
        let has_none =
            |table: &PaneTable, key| !has(table, key, Schema::V1) && !has(table, key, Schema::V2);
        for k in &keys {
            keep(&mut table, *k, Schema::V1);
            assert!(has(&table, *k, Schema::V1) && !has(&table, *k, Schema::V2));
            keep(&mut table, *k, Schema::V2);
            assert!(has_both(&table, *k));
        }
        // Reading does not drop them; each way to change a slot does.
        assert!(table.get(keys[0]).is_some() && has_both(&table, keys[0]));
        let _ = table.get_mut(keys[0]);
        let _ = table.pane_mut(keys[1]);
        let _ = table.agent_mut(keys[2]);
        table.reattach(keys[3], Some(Runtime::Pi), 1024, at(2));
        for (i, k) in keys.iter().enumerate() {
            if i < 4 {
                assert!(has_none(&table, *k), "pane {i}");
            } else {
                assert!(has_both(&table, *k), "pane {i}");
            }
        }
        // A slot reused by another pane starts without texts.
        let gone = table.remove(keys[4]).expect("removed");
        let reused = table.insert(gone.pane, gone.agent);
        assert!(has_none(&table, reused));
        assert!(
            table.with_text(keys[4], Schema::V1).is_none(),
            "a stale key reaches nothing"
        );
        assert!(table.kept_text(keys[4], Schema::V2).is_none());
    }
}
