//! OpenCode (`opencode run --format json`).
//!
//! Every line is `{type, timestamp, sessionID, part|error}`; there is no
//! header. The first line that says work is going on becomes the session
//! start (its `sessionID` is the pane's session, running); its own usage,
//! tool and turn mark are kept. Later lines of another `sessionID` belong to
//! a child session (a sub-agent) and do not drive the pane's state. Usage is
//! per step (`step_finish.part.tokens` and `part.cost`, USD) and added up;
//! reasoning tokens are reported apart from output and are not counted as
//! output. A tool line arrives once the tool has completed or failed.
//! `step_finish.part.reason` says why the step ended. OpenCode's prompt
//! loop goes on only after `tool-calls` (or `unknown`); any other reason
//! (`stop`, `length`, `content-filter`, …) ends the run. Newer OpenCode
//! then prints `done`; older versions just exit, so such a `step_finish`
//! finishes by itself (the exit status, or a following `error`, has the
//! last word). A step without a reason stays working.
//!
//! Headless, OpenCode auto-rejects every permission it would ask for: the
//! tool fails with "The user rejected permission to use this specific tool
//! call.", the run stops and exits 0 (OpenCode 1.18.33). A run whose last
//! step ended on such a rejection failed, whatever the exit status says.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::signal::{Observation, SessionHeader, Signal, ToolCall};
use crate::core::taxonomy::{de_cost, de_count, from_object, Malformed};
use crate::core::usage::{Usage, UsageUpdate};

#[derive(Debug, Default)]
pub struct OpenCodeState {
    /// The pane's own session, from the first line.
    session: Option<Box<str>>,
    /// The pane's own run had a permission rejected and has not gone on
    /// since (no later `step_start`).
    rejected: bool,
}

/// How OpenCode's `PermissionNext.RejectedError` begins (with or without
/// the operator's feedback after it).
const REJECTED: &str = "The user rejected permission";

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow, default, rename = "sessionID")]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    part: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolPart<'a> {
    #[serde(borrow, default)]
    tool: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    state: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolState<'a> {
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    error: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct StepPart<'a> {
    #[serde(borrow, default)]
    reason: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "de_cost")]
    cost: f64,
    #[serde(borrow, default)]
    tokens: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Tokens {
    #[serde(default, deserialize_with = "de_count")]
    input: u64,
    #[serde(default, deserialize_with = "de_count")]
    output: u64,
    #[serde(default)]
    cache: Option<Cache>,
}

#[derive(Deserialize)]
struct Cache {
    #[serde(default, deserialize_with = "de_count")]
    read: u64,
    #[serde(default, deserialize_with = "de_count")]
    write: u64,
}

#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ErrorData<'a> {
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
}

impl OpenCodeState {
    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        let l: Line<'a> = from_object(line)?;
        let obs = match l.kind.as_ref() {
            "step_start" => Observation::new(Signal::Working).turn(true),
            "text" | "reasoning" => Observation::new(Signal::Working),
            "tool_use" => {
                let obs = Observation::new(Signal::Working);
                let rejection = l.part.and_then(rejection);
                let obs = match l.part.and_then(part_tool) {
                    Some(tool) => obs.with_tool(tool),
                    None => obs,
                };
                obs.with_error(rejection)
            }
            "step_finish" => step_finish(l.part),
            "error" => Observation::new(Signal::Failed).with_error(l.error.and_then(error_text)),
            "done" if self.rejected => Observation::new(Signal::Failed),
            "done" => Observation::new(Signal::Finished),
            _ => Observation::unknown(),
        };
        let own = match (&self.session, l.session_id.as_deref()) {
            (Some(own), Some(sid)) => own.as_ref() == sid,
            _ => true,
        };
        if own {
            match l.kind.as_ref() {
                "step_start" => self.rejected = false,
                "tool_use" if obs.error.is_some() => self.rejected = true,
                _ => {}
            }
        }
        // A run stopped by the rejection ends on a finishing step or not at
        // all: neither is a clean finish.
        let obs = if own && self.rejected && obs.signal == Signal::Finished {
            Observation {
                signal: Signal::Failed,
                ..obs
            }
        } else {
            obs
        };
        let Some(sid) = l.session_id else {
            return Ok(obs);
        };
        match &self.session {
            Some(own) => Ok(obs.subagent(own.as_ref() != sid.as_ref())),
            // A first line that ends the run keeps its meaning; the session
            // is then taken from the next line, if any.
            None if matches!(obs.signal, Signal::Failed | Signal::Finished) => Ok(obs),
            None => {
                self.session = Some(sid.as_ref().into());
                Ok(Observation {
                    signal: Signal::session(SessionHeader {
                        id: Some(sid),
                        cwd: None,
                        running: true,
                        model: None,
                    }),
                    ..obs
                })
            }
        }
    }
}

impl OpenCodeState {
    /// An exit 0 after a rejected permission stopped the run is a failure.
    pub fn on_exit(&mut self, success: bool) -> Signal<'static> {
        if success && self.rejected {
            return Signal::Failed;
        }
        Signal::Exited { success }
    }
}

/// The error of a tool that failed on a rejected permission.
fn rejection(raw: &RawValue) -> Option<Cow<'_, str>> {
    let part = serde_json::from_str::<ToolPart<'_>>(raw.get()).ok()?;
    let state = serde_json::from_str::<ToolState<'_>>(part.state?.get()).ok()?;
    if state.status.as_deref() != Some("error") {
        return None;
    }
    state.error.filter(|e| e.starts_with(REJECTED))
}

fn part_tool(raw: &RawValue) -> Option<ToolCall<'_>> {
    let part = serde_json::from_str::<ToolPart<'_>>(raw.get()).ok()?;
    let args = part
        .state
        .and_then(|s| serde_json::from_str::<ToolState<'_>>(s.get()).ok())
        .and_then(|s| s.input);
    Some(ToolCall {
        name: part.tool?,
        args,
        command: None,
    })
}

/// A step's usage, and its end: a reason other than `tool-calls` or
/// `unknown` finishes the run, as it ends OpenCode's own loop.
fn step_finish(part: Option<&RawValue>) -> Observation<'_> {
    let Some(part) = part.and_then(|raw| serde_json::from_str::<StepPart<'_>>(raw.get()).ok())
    else {
        return Observation::new(Signal::Working);
    };
    let signal = match part.reason.as_deref() {
        None | Some("tool-calls" | "unknown") => Signal::Working,
        Some(_) => Signal::Finished,
    };
    Observation::new(signal).with_usage(step_usage(&part))
}

fn step_usage(part: &StepPart<'_>) -> UsageUpdate {
    let tokens = part
        .tokens
        .and_then(|t| serde_json::from_str::<Tokens>(t.get()).ok());
    let mut usage = Usage {
        cost_usd: part.cost,
        ..Usage::default()
    };
    if let Some(t) = tokens {
        usage.input_tokens = t.input;
        usage.output_tokens = t.output;
        if let Some(c) = t.cache {
            usage.cache_read_tokens = c.read;
            usage.cache_write_tokens = c.write;
        }
    }
    UsageUpdate::Add(usage)
}

fn error_text(raw: &RawValue) -> Option<Cow<'_, str>> {
    let body = serde_json::from_str::<ErrorBody<'_>>(raw.get()).ok()?;
    body.data
        .and_then(|d| serde_json::from_str::<ErrorData<'_>>(d.get()).ok())
        .and_then(|d| d.message)
        .or(body.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_line_is_the_session_and_children_are_subagents() {
        let mut st = OpenCodeState::default();
        let obs = st
            .observe(br#"{"type":"step_start","timestamp":1,"sessionID":"ses_a","part":{}}"#)
            .expect("valid");
        assert!(matches!(&obs.signal, Signal::Session(h) if h.running));
        assert!(obs.turn);
        let obs = st
            .observe(br#"{"type":"text","timestamp":2,"sessionID":"ses_child","part":{}}"#)
            .expect("valid");
        assert!(obs.subagent);
        let obs = st
            .observe(br#"{"type":"text","timestamp":3,"sessionID":"ses_a","part":{}}"#)
            .expect("valid");
        assert!(!obs.subagent);
        assert_eq!(obs.signal, Signal::Working);
    }

    #[test]
    fn step_usage_and_errors() {
        let mut st = OpenCodeState::default();
        let obs = st
            .observe(br#"{"type":"step_finish","part":{"cost":0.5,"tokens":{"input":9,"output":2,"reasoning":1,"cache":{"read":8,"write":1}}}}"#)
            .expect("valid");
        let want = Usage {
            input_tokens: 9,
            output_tokens: 2,
            cache_read_tokens: 8,
            cache_write_tokens: 1,
            cost_usd: 0.5,
        };
        assert_eq!(obs.usage, UsageUpdate::Add(want));
        let obs = st
            .observe(br#"{"type":"error","sessionID":"s","error":{"name":"APIError","data":{"message":"overloaded"}}}"#)
            .expect("valid");
        assert_eq!(obs.signal, Signal::Failed);
        assert_eq!(obs.error.as_deref(), Some("overloaded"));
        let obs = st
            .observe(br#"{"type":"error","error":{"name":"UnknownError"}}"#)
            .expect("valid");
        assert_eq!(obs.error.as_deref(), Some("UnknownError"));
    }

    #[test]
    fn a_step_that_stops_finishes_the_run() {
        let mut st = OpenCodeState::default();
        let signal = |st: &mut OpenCodeState, reason: &str| {
            let line = format!(
                r#"{{"type":"step_finish","sessionID":"ses_a","part":{{"type":"step-finish"{reason},"tokens":{{"input":1,"output":1}}}}}}"#
            );
            let finished = st.observe(line.as_bytes()).expect("valid").signal == Signal::Finished;
            if finished {
                Signal::Finished
            } else {
                Signal::Working
            }
        };
        // The first line becomes the session; later ones keep their signal.
        let _ = signal(&mut st, "");
        assert_eq!(
            signal(&mut st, r#","reason":"tool-calls""#),
            Signal::Working
        );
        assert_eq!(signal(&mut st, ""), Signal::Working);
        assert_eq!(signal(&mut st, r#","reason":"unknown""#), Signal::Working);
        assert_eq!(signal(&mut st, r#","reason":"stop""#), Signal::Finished);
        assert_eq!(signal(&mut st, r#","reason":"length""#), Signal::Finished);
    }
}
