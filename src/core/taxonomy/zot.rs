//! zot (`zot --json "prompt"`, `zot rpc`): the Go harness by patriceckhart.
//!
//! zot prints no session header, so a pane starts idle and the first
//! `user_message`/`turn_start` makes it work. A run ends with `done`
//! (finished) or with `error` and no `done` (failed); on the step limit it
//! prints `done` and then `error`, and the state table lets the failure win.
//! `turn_end{stop:"error"}` fails at once (the `error` line that follows
//! carries the message); `turn_end{stop:"aborted"}` stays working because an
//! abort is always followed by `done`, which settles it. Usage is read from
//! `usage.cumulative`, zot's own running total, so lines can never be counted
//! twice. Both stop spellings (`end` in code, `end_turn` in the docs) are
//! ordinary ends of a model call.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::signal::{Observation, Signal, ToolCall};
use crate::core::taxonomy::{de_cost, de_count, from_object, raw_str, Malformed};
use crate::core::usage::{Usage, UsageUpdate};

/// Whether the stream is one-shot JSON mode or a long-lived RPC session.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ZotMode {
    #[default]
    Json,
    Rpc,
}

#[derive(Debug, Default)]
pub struct ZotState {
    mode: ZotMode,
}

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    /// `error.message`.
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    /// `turn_end.stop`.
    #[serde(borrow, default)]
    stop: Option<Cow<'a, str>>,
    /// `turn_end.error`: a string in the Go encoder, kept raw in case it is not.
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    /// `tool_call.name` (also on `tool_use_start`, which is not recorded).
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    args: Option<&'a RawValue>,
    /// `usage.cumulative`: the agent's running totals.
    #[serde(borrow, default)]
    cumulative: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct ZotUsage {
    #[serde(default, deserialize_with = "de_count")]
    input: u64,
    #[serde(default, deserialize_with = "de_count")]
    output: u64,
    #[serde(default, deserialize_with = "de_count")]
    cache_read: u64,
    #[serde(default, deserialize_with = "de_count")]
    cache_write: u64,
    #[serde(default, deserialize_with = "de_cost")]
    cost_usd: f64,
}

impl ZotUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.input,
            output_tokens: self.output,
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
            cost_usd: self.cost_usd,
        }
    }
}

impl ZotState {
    pub fn mode(&self) -> ZotMode {
        self.mode
    }

    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        let l: Line<'a> = from_object(line)?;
        let obs = match l.kind.as_ref() {
            "turn_start" => Observation::new(Signal::Working).turn(true),
            "user_message" | "assistant_start" | "text_delta" | "tool_use_start"
            | "tool_use_args" | "tool_use_end" | "assistant_message" | "tool_progress"
            | "tool_result" | "user_prompt_submit" | "pre_compact" | "post_compact" => {
                Observation::new(Signal::Working)
            }
            "tool_call" => {
                let mut obs = Observation::new(Signal::Working);
                if let Some(name) = l.name {
                    obs = obs.with_tool(ToolCall {
                        name,
                        args: l.args,
                        command: None,
                    });
                }
                obs
            }
            "usage" => {
                let usage = match l.cumulative {
                    Some(raw) => {
                        serde_json::from_str::<ZotUsage>(raw.get()).map_or(UsageUpdate::None, |u| {
                            UsageUpdate::Set {
                                usage: u.to_usage(),
                                has_cost: true,
                            }
                        })
                    }
                    // Older zot printed per-call figures only; the line is
                    // small, so read it a second time for them.
                    None => serde_json::from_slice::<ZotUsage>(line)
                        .map_or(UsageUpdate::None, |u| UsageUpdate::Add(u.to_usage())),
                };
                Observation::new(Signal::Meta).with_usage(usage)
            }
            "turn_end" => match l.stop.as_deref() {
                Some("error") => {
                    let msg = l.error.and_then(raw_str);
                    Observation::new(Signal::Failed).with_error(msg)
                }
                // `aborted` is followed by `done`; `end`, `end_turn`,
                // `length` and `tool_use` end one model call of a run.
                _ => Observation::new(Signal::Working),
            },
            "done" => match self.mode {
                ZotMode::Json => Observation::new(Signal::Finished),
                ZotMode::Rpc => Observation::new(Signal::Idle),
            },
            "error" => Observation::new(Signal::Failed).with_error(l.message.and_then(raw_str)),
            // Only `zot rpc` answers a `compact` command; it then waits.
            "compact_done" => {
                self.mode = ZotMode::Rpc;
                Observation::new(Signal::Idle)
            }
            _ => Observation::unknown(),
        };
        Ok(obs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observe(st: &mut ZotState, line: &str) -> (Signal<'static>, UsageUpdate, Option<String>) {
        let obs = st.observe(line.as_bytes()).expect("valid line");
        let sig = match obs.signal {
            Signal::Working => Signal::Working,
            Signal::Finished => Signal::Finished,
            Signal::Failed => Signal::Failed,
            Signal::Idle => Signal::Idle,
            Signal::Meta => Signal::Meta,
            Signal::Unknown => Signal::Unknown,
            other => panic!("unexpected signal {other:?}"),
        };
        (sig, obs.usage, obs.error.map(|e| e.into_owned()))
    }

    #[test]
    fn cumulative_usage_replaces_totals() {
        let mut st = ZotState::default();
        let (sig, usage, _) = observe(
            &mut st,
            r#"{"type":"usage","input":5,"output":1,"cost_usd":0.5,"cumulative":{"input":50,"output":10,"reasoning":null,"cache_read":7,"cache_write":3,"cost_usd":1.25}}"#,
        );
        assert_eq!(sig, Signal::Meta);
        let want = Usage {
            input_tokens: 50,
            output_tokens: 10,
            cache_read_tokens: 7,
            cache_write_tokens: 3,
            cost_usd: 1.25,
        };
        assert_eq!(
            usage,
            UsageUpdate::Set {
                usage: want,
                has_cost: true
            }
        );
    }

    #[test]
    fn stops_errors_and_done() {
        let mut st = ZotState::default();
        assert_eq!(
            observe(&mut st, r#"{"type":"turn_end","stop":"end_turn"}"#).0,
            Signal::Working
        );
        assert_eq!(
            observe(&mut st, r#"{"type":"turn_end","stop":"aborted"}"#).0,
            Signal::Working
        );
        let (sig, _, err) = observe(
            &mut st,
            r#"{"type":"turn_end","stop":"error","error":"429 rate limited"}"#,
        );
        assert_eq!(
            (sig, err.as_deref()),
            (Signal::Failed, Some("429 rate limited"))
        );
        let (sig, _, err) = observe(&mut st, r#"{"type":"error","message":"boom"}"#);
        assert_eq!((sig, err.as_deref()), (Signal::Failed, Some("boom")));
        assert_eq!(observe(&mut st, r#"{"type":"done"}"#).0, Signal::Finished);
        assert_eq!(
            observe(&mut st, r#"{"type":"compact_done","summary":"s"}"#).0,
            Signal::Idle
        );
        assert_eq!(observe(&mut st, r#"{"type":"done"}"#).0, Signal::Idle);
        assert!(st.observe(br#"{"stop":"end"}"#).is_err());
    }
}
