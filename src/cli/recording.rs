//! The recording format read by `colibri replay` and `colibri fold`.
//!
//! A recording line is one JSON object with a time (`t`, milliseconds since
//! the start, or `ts`, RFC 3339 as in session logs) and one action: `ev`
//! (an agent line), `raw` (text), `await_input` or `exit`. Session-log lines
//! of other kinds (`colibri`, `oversize`) carry a time but no action and are
//! skipped. A file whose first non-blank line is not a recording line is a
//! plain agent JSONL stream. `ev` is kept as the raw JSON text so a replay
//! prints the agent's line byte for byte (re-serialising would reorder keys).

use std::borrow::Cow;
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(default)]
    t: Option<f64>,
    #[serde(borrow, default)]
    ts: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pane: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    ev: Option<&'a RawValue>,
    #[serde(borrow, default)]
    raw: Option<Cow<'a, str>>,
    #[serde(default)]
    await_input: Option<bool>,
    #[serde(default)]
    exit: Option<i64>,
    #[serde(borrow, default)]
    colibri: Option<&'a RawValue>,
    #[serde(default)]
    oversize: Option<u64>,
    /// A session log's `exit` record: the agent's exit code or signal,
    /// and the state the daemon folded it to.
    #[serde(default)]
    code: Option<i64>,
    #[serde(borrow, default)]
    state: Option<Cow<'a, str>>,
    #[serde(default)]
    planned: bool,
    #[serde(default)]
    signal: Option<i64>,
}

/// What one recording line asks for.
#[derive(Debug, PartialEq)]
pub enum Action<'a> {
    /// Print this JSON text as one line.
    Event(&'a str),
    /// Print this text and a newline.
    Raw(Cow<'a, str>),
    /// Wait for one line on stdin.
    AwaitInput,
    /// Stop with this exit code.
    Exit(i64),
    /// A session log's record of the agent killed by this signal.
    Killed(i64),
    /// A session log's record that the agent ended with no status of its
    /// own (lost with a daemon that crashed).
    Ended,
    /// A session log's record of a planned stop: colibri ended the agent
    /// on purpose (its state `done` beside an exit that is no success).
    Stopped {
        code: Option<i64>,
        signal: Option<i64>,
    },
    /// A session log's record of an agent (re)started.
    Attach,
    /// A timed line with nothing to replay (a session log's own records).
    Skip,
}

/// One parsed recording line.
#[derive(Debug, PartialEq)]
pub struct Entry<'a> {
    /// Milliseconds since the recording started.
    pub at_ms: f64,
    pub action: Action<'a>,
    /// The pane a session-log line belongs to; `None` for a recording's
    /// lines and the log's own records of no pane (`"pane":""`).
    pub pane: Option<Cow<'a, str>>,
}

/// Turns the `ts` of session-log lines into offsets from the first one.
#[derive(Debug, Default)]
pub struct Clock {
    first_ts: Option<SystemTime>,
}

/// Whether `line` is a recording line (decides the format of a file).
pub fn is_recording_line(line: &[u8]) -> bool {
    match serde_json::from_slice::<Line<'_>>(line) {
        Ok(l) => {
            (l.t.is_some() || l.ts.is_some())
                && (l.ev.is_some()
                    || l.raw.is_some()
                    || l.await_input.is_some()
                    || l.exit.is_some()
                    // A session log opens with the daemon's own records.
                    || l.colibri.is_some()
                    || l.oversize.is_some())
        }
        Err(_) => false,
    }
}

impl Clock {
    /// Parses one non-blank recording line.
    pub fn parse<'a>(&mut self, line: &'a [u8]) -> Result<Entry<'a>, String> {
        let l: Line<'a> =
            serde_json::from_slice(line).map_err(|e| format!("not a recording line: {e}"))?;
        let at_ms = match (l.t, &l.ts) {
            (Some(t), _) if t.is_finite() && t >= 0.0 => t,
            (Some(t), _) => return Err(format!("bad time t={t}")),
            (None, Some(ts)) => {
                let at =
                    humantime::parse_rfc3339_weak(ts).map_err(|e| format!("bad ts {ts:?}: {e}"))?;
                let first = *self.first_ts.get_or_insert(at);
                at.duration_since(first)
                    .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
            }
            (None, None) => return Err("a recording line needs \"t\" or \"ts\"".into()),
        };
        let action = if let Some(ev) = l.ev {
            Action::Event(ev.get())
        } else if let Some(raw) = l.raw {
            Action::Raw(raw)
        } else if l.await_input == Some(true) {
            Action::AwaitInput
        } else if let Some(code) = l.exit {
            Action::Exit(code)
        } else if l.colibri.map(RawValue::get) == Some("\"exit\"") {
            // The daemon logged how the agent ended.
            // A planned stop, as the record says (a log from before it did:
            // `done` beside an exit that is no success).
            let failed = l.signal.is_some() || l.code.is_some_and(|c| c != 0);
            let planned = l.planned || (failed && l.state.as_deref() == Some("done"));
            match (l.code, l.signal) {
                _ if planned => Action::Stopped {
                    code: l.code,
                    signal: l.signal,
                },
                (Some(code), _) => Action::Exit(code),
                (None, Some(sig)) => Action::Killed(sig),
                (None, None) => Action::Ended,
            }
        } else if l.colibri.map(RawValue::get) == Some("\"attach\"") {
            Action::Attach
        } else if l.colibri.is_some() || l.oversize.is_some() || l.await_input == Some(false) {
            Action::Skip
        } else {
            return Err(
                "a recording line needs one of \"ev\", \"raw\", \"await_input\", \"exit\"".into(),
            );
        };
        let pane = l.pane.filter(|p| !p.is_empty());
        Ok(Entry {
            at_ms,
            action,
            pane,
        })
    }
}

/// A process exit code from a recorded one (shells see it modulo 256).
pub fn exit_code(code: i64) -> u8 {
    code.rem_euclid(256) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ev_is_kept_verbatim() {
        let mut c = Clock::default();
        let e = c
            .parse(br#"{"t":250,"ev":{"type":"turn_start","b":1,"a":2}}"#)
            .expect("parses");
        assert_eq!(
            e,
            Entry {
                at_ms: 250.0,
                action: Action::Event(r#"{"type":"turn_start","b":1,"a":2}"#),
                pane: None,
            }
        );
    }

    /// A planned stop reads as one whatever its status: the record says
    /// so (an exit 0 under SIGTERM included), and a log from before the
    /// record did is read by `done` beside a failure.
    #[test]
    fn an_exit_record_of_a_planned_stop_is_a_stop() {
        let mut c = Clock::default();
        let action = |c: &mut Clock, line: &'static [u8]| c.parse(line).expect("parses").action;
        assert_eq!(
            action(
                &mut c,
                br#"{"ts":"2026-05-27T12:00:00.000Z","pane":"p","colibri":"exit","state":"done","code":0,"planned":true}"#
            ),
            Action::Stopped {
                code: Some(0),
                signal: None
            }
        );
        assert_eq!(
            action(
                &mut c,
                br#"{"ts":"2026-05-27T12:00:00.000Z","pane":"p","colibri":"exit","state":"done","signal":15}"#
            ),
            Action::Stopped {
                code: None,
                signal: Some(15)
            }
        );
        assert_eq!(
            action(
                &mut c,
                br#"{"ts":"2026-05-27T12:00:00.000Z","pane":"p","colibri":"exit","state":"error","signal":9}"#
            ),
            Action::Killed(9)
        );
    }

    #[test]
    fn ts_is_relative_to_the_first_line() {
        let mut c = Clock::default();
        let a = c
            .parse(br#"{"ts":"2026-05-27T12:00:00.000Z","pane":"p","ev":{}}"#)
            .expect("first");
        let b = c
            .parse(
                br#"{"ts":"2026-05-27T12:00:01.500Z","pane":"p","colibri":"exit","state":"done"}"#,
            )
            .expect("second");
        assert_eq!(a.at_ms, 0.0);
        assert_eq!(
            b,
            Entry {
                at_ms: 1500.0,
                action: Action::Ended,
                pane: Some("p".into()),
            }
        );
    }

    #[test]
    fn actions_and_errors() {
        let mut c = Clock::default();
        assert_eq!(
            c.parse(br#"{"t":1,"raw":"hello"}"#).map(|e| e.action),
            Ok(Action::Raw("hello".into()))
        );
        assert_eq!(
            c.parse(br#"{"t":1,"await_input":true}"#).map(|e| e.action),
            Ok(Action::AwaitInput)
        );
        assert_eq!(
            c.parse(br#"{"t":1,"exit":2}"#).map(|e| e.action),
            Ok(Action::Exit(2))
        );
        assert!(c.parse(br#"{"t":1}"#).is_err());
        assert!(c.parse(br#"{"t":-1,"exit":0}"#).is_err());
        assert!(c.parse(br#"{"type":"turn_start"}"#).is_err());
        assert!(is_recording_line(br#"{"t":0,"ev":{"type":"x"}}"#));
        assert!(!is_recording_line(
            br#"{"type":"session","timestamp":"2026-01-01T00:00:00Z"}"#
        ));
        assert!(!is_recording_line(b"not json"));
        assert_eq!(exit_code(-1), 255);
        assert_eq!(exit_code(2), 2);
    }
}
