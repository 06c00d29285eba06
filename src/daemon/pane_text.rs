//! Each pane's v2 snapshot object, kept as text from one snapshot to the
//! next.
//!
//! At 10,000 panes a v2 snapshot (6.3 MB) cost the loop about 17 ms, more
//! than a microsecond a pane: each pane's strings are scattered through the
//! heap, and loading them, formatting three timestamps and escaping the
//! strings cost far more than the bytes written. Most panes of a large
//! fleet are idle between two snapshots, so their text has not changed; a
//! kept text is one contiguous copy.
//!
//! A kept text is right by construction, not by care:
//! - it lives beside its slot in the pane table, and every mutable borrow
//!   of the slot drops it (`PaneTable::get_mut`);
//! - of what the text shows, only the `stalled` flag moves with the clock
//!   alone: the text is kept with `false`, with the pane's stall deadline
//!   (fixed while the pane is unchanged), and the flag is written anew each
//!   time, so a kept write reads nothing of the pane but its text;
//! - the default stall threshold (a reload may change it) is kept with the
//!   text and compared;
//! - approval escalations live outside the slot, so a pane with pending
//!   approvals (rare, and short-lived) is never kept.
//!
//! In debug builds every write from a kept text is checked against a fresh
//! one, so every test that takes a v2 snapshot checks the rules above.
//!
//! The cost: one text per pane that a v2 snapshot has shown since its last
//! change, about 650 bytes (6.3 MB at 10,000 panes). Only v2 is kept: the
//! v1 text is smaller and its snapshot already cheap enough.

use std::time::Duration;

use crate::core::time::Timestamp;
use crate::daemon::event_loop::Daemon;
use crate::daemon::panes::PaneKey;
use crate::daemon::views;
use crate::protocol::PaneV2View;

const FALSE: &[u8] = b"false";

/// A pane's v2 snapshot object as text, written with `"stalled":false`.
#[derive(Debug)]
pub struct PaneText {
    bytes: Box<[u8]>,
    /// Where `false` begins in `bytes`.
    stalled_at: usize,
    /// The default stall threshold the text was made with.
    stall_after: Duration,
    /// When the pane counts as stalled, as it was when the text was made.
    stall_deadline: Option<Timestamp>,
}

impl PaneText {
    /// Appends the pane's object to `out` and returns its text to keep,
    /// or `None` for a pane that may not be kept (one with pending
    /// approvals).
    fn make(
        view: &mut PaneV2View<'_>,
        stall_after: Duration,
        stall_deadline: Option<Timestamp>,
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
        let text = PaneText {
            bytes: out[start..].into(),
            stalled_at,
            stall_after,
            stall_deadline,
        };
        out.truncate(start);
        text.write(out, stalled);
        Ok(Some(text))
    }

    /// What `Pane::is_stalled` says at `t` of the pane the text was made
    /// from.
    fn stalled(&self, t: Timestamp) -> bool {
        self.stall_deadline.is_some_and(|deadline| t >= deadline)
    }

    /// Appends the object to `out`, with `stalled` as it is now.
    fn write(&self, out: &mut Vec<u8>, stalled: bool) {
        let (head, tail) = self.bytes.split_at(self.stalled_at);
        debug_assert!(
            tail.starts_with(FALSE),
            "the kept text has `false` at its mark"
        );
        out.extend_from_slice(head);
        out.extend_from_slice(if stalled { b"true" } else { FALSE });
        out.extend_from_slice(tail.get(FALSE.len()..).unwrap_or_default());
    }
}

impl Daemon {
    /// Appends pane `key`'s v2 snapshot object to `out`, at time `t`: from
    /// its kept text if it has not changed since, otherwise made afresh and
    /// kept. An error (serde_json refusing a float) leaves `out` cut
    /// short: the reply must not be finished.
    pub(crate) fn write_pane_v2(
        &mut self,
        key: PaneKey,
        t: Timestamp,
        out: &mut Vec<u8>,
    ) -> serde_json::Result<()> {
        let stall_after = self.settings.daemon.stall_after;
        let kept = self.panes.kept_text(key);
        if let Some(text) = kept.filter(|k| k.stall_after == stall_after) {
            let start = out.len();
            text.write(out, text.stalled(t));
            if cfg!(debug_assertions) {
                self.check_kept_text(key, t, &out[start..]);
            }
            return Ok(());
        }
        let approvals = &self.approvals;
        let Some((slot, kept)) = self.panes.with_text(key) else {
            return Ok(());
        };
        let mut view = views::pane_v2(slot, t, stall_after, approvals);
        let deadline = slot.pane.stall_deadline(stall_after);
        *kept = PaneText::make(&mut view, stall_after, deadline, out)?;
        Ok(())
    }

    /// Debug builds: a kept text must be what a fresh view of its pane
    /// writes, or a change went past `PaneTable::get_mut`.
    fn check_kept_text(&self, key: PaneKey, t: Timestamp, written: &[u8]) {
        let Some(slot) = self.panes.get(key) else {
            return;
        };
        let mut fresh = Vec::new();
        let stall_after = self.settings.daemon.stall_after;
        let _ = views::pane_v2(slot, t, stall_after, &self.approvals).write_json(&mut fresh);
        assert_eq!(
            String::from_utf8_lossy(written),
            String::from_utf8_lossy(&fresh),
            "a kept snapshot text differs from its pane: a change went past PaneTable::get_mut"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::pane::{ExitStatus, Pane, PaneId};
    use crate::core::taxonomy::Runtime;
    use crate::daemon::agent::{Agent, RestartPolicy, RestartState};
    use crate::daemon::approvals::ApprovalDesk;
    use crate::daemon::panes::{PaneTable, Slot};

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

    fn fresh(s: &Slot, t: Timestamp, stall_after: Duration) -> String {
        let mut out = Vec::new();
        let desk = ApprovalDesk::default();
        views::pane_v2(s, t, stall_after, &desk)
            .write_json(&mut out)
            .expect("write");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn a_kept_text_writes_what_a_fresh_view_writes_stalled_or_not() {
        let stall_after = Duration::from_secs(120);
        let desk = ApprovalDesk::default();
        let mut stalled_seen = [false, false];
        for (i, s) in slots().iter().enumerate() {
            let made_at = at(10_000);
            let mut out = b"[".to_vec();
            let mut view = views::pane_v2(s, made_at, stall_after, &desk);
            let deadline = s.pane.stall_deadline(stall_after);
            let text = PaneText::make(&mut view, stall_after, deadline, &mut out)
                .expect("write")
                .expect("kept");
            assert_eq!(
                String::from_utf8_lossy(&out[1..]),
                fresh(s, made_at, stall_after),
                "pane {i}"
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
                    fresh(s, later, stall_after),
                    "pane {i}"
                );
            }
        }
        assert_eq!(stalled_seen, [true, true], "both flags were written");
    }

    #[test]
    fn a_pane_with_pending_approvals_is_written_but_not_kept() {
        let stall_after = Duration::from_secs(120);
        let mut s = slots().remove(1);
        let ask = r#"{"type":"extension_ui_request","id":"q1","method":"input","message":"Which branch?"}"#;
        s.pane
            .ingest_line(ask.as_bytes(), at(9_000), &mut Vec::new());
        let desk = ApprovalDesk::default();
        let mut view = views::pane_v2(&s, at(10_000), stall_after, &desk);
        let mut out = Vec::new();
        let kept = PaneText::make(&mut view, stall_after, None, &mut out).expect("write");
        assert!(kept.is_none());
        let written = String::from_utf8(out).expect("utf-8");
        assert_eq!(written, fresh(&s, at(10_000), stall_after));
        assert!(written.contains(r#""approvals":["#), "{written}");
    }

    #[test]
    fn a_mutable_borrow_drops_the_kept_text_and_a_reused_slot_starts_without() {
        let stall_after = Duration::from_secs(120);
        let desk = ApprovalDesk::default();
        let mut table = PaneTable::default();
        let mut keys = Vec::new();
        for s in slots() {
            keys.push(table.insert(s.pane, s.agent));
        }
        let keep = |table: &mut PaneTable, key| {
            let (slot, kept) = table.with_text(key).expect("slot");
            let mut view = views::pane_v2(slot, at(1), stall_after, &desk);
            *kept = PaneText::make(&mut view, stall_after, None, &mut Vec::new()).expect("write");
        };
        let has_text =
            |table: &mut PaneTable, key| table.with_text(key).is_some_and(|(_, k)| k.is_some());
        for k in &keys {
            keep(&mut table, *k);
            assert!(has_text(&mut table, *k));
        }
        // Reading does not drop it; each way to change a slot does.
        assert!(table.get(keys[0]).is_some() && has_text(&mut table, keys[0]));
        let _ = table.get_mut(keys[0]);
        let _ = table.pane_mut(keys[1]);
        let _ = table.agent_mut(keys[2]);
        table.reattach(keys[3], Some(Runtime::Pi), 1024, at(2));
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(has_text(&mut table, *k), i >= 4, "pane {i}");
        }
        // A slot reused by another pane starts without a text.
        let gone = table.remove(keys[4]).expect("removed");
        let reused = table.insert(gone.pane, gone.agent);
        assert!(!has_text(&mut table, reused));
        assert!(
            table.with_text(keys[4]).is_none(),
            "a stale key reaches nothing"
        );
    }
}
