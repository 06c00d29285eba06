//! Gemini CLI (`gemini -p … --output-format stream-json`).
//!
//! `init` is the header, printed with the prompt in flight (working). The
//! run ends with `result`: `status:"success"` finishes, anything else fails.
//! `error` lines fail only at `severity:"error"`; warnings (such as "Loop
//! detected") are metadata. Usage exists only as the totals in
//! `result.stats`, without cost. A turn is counted per user `message` (the
//! prompt follows `init` as one, so counting `init` too would count twice).
//! Headless Gemini never asks for approval, so it is never blocked.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::signal::{Observation, SessionHeader, Signal, ToolCall};
use crate::core::taxonomy::{
    de_count, from_object, raw_str, raw_str_lenient, readable_error, Malformed,
};
use crate::core::usage::{Usage, UsageUpdate};

#[derive(Debug, Default)]
pub struct GeminiState {}

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    session_id: Option<Cow<'a, str>>,
    /// `init`'s model.
    /// Any JSON value: a model that is not a string is not read, and does
    /// not cost the line.
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    parameters: Option<&'a RawValue>,
    #[serde(borrow, default)]
    severity: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<Cow<'a, str>>,
    /// `result.error`: `{type, message}`, or a bare string.
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stats: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
}

/// `input_tokens` is the prompt, `cached` included; `input` (Gemini CLI
/// 0.10 and later) is the prompt without the cached part.
#[derive(Deserialize)]
struct Stats {
    #[serde(default, deserialize_with = "de_count")]
    input_tokens: u64,
    #[serde(default)]
    input: Option<Count>,
    #[serde(default, deserialize_with = "de_count")]
    output_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    cached: u64,
}

/// A token count read leniently, whose absence is told apart from zero.
#[derive(Deserialize)]
struct Count(#[serde(deserialize_with = "de_count")] u64);

impl GeminiState {
    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        let l: Line<'a> = from_object(line)?;
        let obs = match l.kind.as_ref() {
            "init" => Observation::new(Signal::session(SessionHeader {
                id: l.session_id,
                cwd: None,
                running: true,
                model: l.model.and_then(raw_str_lenient),
            })),
            "message" => Observation::new(Signal::Working).turn(l.role.as_deref() == Some("user")),
            "tool_use" => {
                let obs = Observation::new(Signal::Working);
                match l.tool_name {
                    Some(name) => obs.with_tool(ToolCall {
                        name,
                        args: l.parameters,
                        command: None,
                    }),
                    None => obs,
                }
            }
            "tool_result" => Observation::new(Signal::Working),
            "error" => match l.severity.as_deref() {
                Some("error") => Observation::new(Signal::Failed)
                    .with_error(l.message.and_then(raw_str).map(readable_error)),
                _ => Observation::new(Signal::Meta),
            },
            "result" => {
                let obs = if l.status.as_deref() == Some("success") {
                    Observation::new(Signal::Finished)
                } else {
                    let msg = l
                        .error
                        .and_then(error_text)
                        .or_else(|| l.message.and_then(raw_str))
                        .map(readable_error);
                    Observation::new(Signal::Failed).with_error(msg)
                };
                obs.with_usage(l.stats.map_or(UsageUpdate::None, stats_usage))
            }
            _ => Observation::unknown(),
        };
        Ok(obs)
    }
}

fn error_text(raw: &RawValue) -> Option<Cow<'_, str>> {
    raw_str(raw).or_else(|| {
        serde_json::from_str::<ErrorBody<'_>>(raw.get())
            .ok()?
            .message
    })
}

fn stats_usage(raw: &RawValue) -> UsageUpdate {
    match serde_json::from_str::<Stats>(raw.get()) {
        // colibri's `input_tokens` are the uncached ones, priced apart from
        // cache reads; counting Gemini's prompt whole would price the
        // cached tokens twice.
        Ok(s) => UsageUpdate::Set {
            usage: Usage {
                input_tokens: s
                    .input
                    .map(|c| c.0)
                    .unwrap_or_else(|| s.input_tokens.saturating_sub(s.cached)),
                output_tokens: s.output_tokens,
                cache_read_tokens: s.cached,
                cache_write_tokens: 0,
                cost_usd: 0.0,
            },
            has_cost: false,
        },
        Err(_) => UsageUpdate::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_names_the_model_and_a_model_that_is_no_string_is_left_unread() {
        let mut st = GeminiState::default();
        let model =
            |st: &mut GeminiState, line: &[u8]| match st.observe(line).expect("valid").signal {
                Signal::Session(h) => h.model.map(|m| m.into_owned()),
                other => panic!("not a session: {other:?}"),
            };
        assert_eq!(
            model(
                &mut st,
                br#"{"type":"init","session_id":"s","model":"gemini-2.5-pro"}"#
            ),
            Some("gemini-2.5-pro".to_string())
        );
        assert_eq!(
            model(
                &mut st,
                br#"{"type":"init","session_id":"s","model":{"id":"x"}}"#
            ),
            None
        );
    }

    #[test]
    fn result_status_and_stats() {
        let mut st = GeminiState::default();
        let obs = st
            .observe(br#"{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"max turns"},"stats":{"input_tokens":10,"output_tokens":2,"cached":4}}"#)
            .expect("valid");
        assert_eq!(obs.signal, Signal::Failed);
        assert_eq!(obs.error.as_deref(), Some("max turns"));
        // The cached 4 of the prompt's 10 are not counted as input again.
        let want = Usage {
            input_tokens: 6,
            output_tokens: 2,
            cache_read_tokens: 4,
            ..Usage::default()
        };
        assert_eq!(
            obs.usage,
            UsageUpdate::Set {
                usage: want,
                has_cost: false
            }
        );
        let obs = st
            .observe(br#"{"type":"error","severity":"warning","message":"Loop detected"}"#)
            .expect("valid");
        assert_eq!(obs.signal, Signal::Meta);
        let obs = st
            .observe(br#"{"type":"message","role":"user","content":"hi"}"#)
            .expect("valid");
        assert!(obs.turn);
    }

    #[test]
    fn the_uncached_input_count_is_taken_when_gemini_prints_one() {
        let mut st = GeminiState::default();
        let obs = st
            .observe(br#"{"type":"result","status":"success","stats":{"total_tokens":2790,"input_tokens":2780,"output_tokens":10,"cached":600,"input":2180,"duration_ms":5,"tool_calls":1}}"#)
            .expect("valid");
        let UsageUpdate::Set { usage, .. } = obs.usage else {
            panic!("expected totals");
        };
        assert_eq!(
            (
                usage.input_tokens,
                usage.cache_read_tokens,
                usage.output_tokens
            ),
            (2180, 600, 10)
        );
    }
}
