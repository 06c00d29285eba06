//! Codex CLI (`codex exec --json`).
//!
//! `thread.started` is the header, printed with the prompt already sent
//! (working). `turn.completed` finishes and carries the thread's running
//! token total, not the turn's, so the adapter remembers the last total and
//! adds only the difference; a resumed thread whose first total includes
//! earlier turns is then counted in full once. Codex reports no cost. A
//! top-level `error` is often not fatal (a reconnect, a reroute): it is
//! recorded as the last error and only `turn.failed` or the exit status
//! decides failure. Shell commands arrive as one string (`bash -lc '…'`).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::signal::{Observation, Signal, ToolCall};
use crate::core::taxonomy::{de_count, from_object, raw_str, Malformed};
use crate::core::usage::{Usage, UsageUpdate};

#[derive(Debug, Default)]
pub struct CodexState {
    /// The running total of the last `turn.completed`.
    last_total: Usage,
    /// The message of the last non-fatal `error`, for a `turn.failed`
    /// that carries none.
    last_error: Option<String>,
}

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    thread_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    item: Option<&'a RawValue>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
    /// `turn.failed.error{message}`.
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    /// Top-level `error.message`.
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    /// `request_user_input.questions`.
    #[serde(borrow, default)]
    questions: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    command: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Question<'a> {
    #[serde(borrow, default)]
    question: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    header: Option<Cow<'a, str>>,
}

/// OpenAI usage: `input_tokens` includes `cached_input_tokens`.
#[derive(Deserialize)]
struct CodexUsage {
    #[serde(default, deserialize_with = "de_count")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    cached_input_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    output_tokens: u64,
}

impl CodexState {
    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        let l: Line<'a> = from_object(line)?;
        let obs = match l.kind.as_ref() {
            "thread.started" => Observation::new(Signal::Session {
                id: l.thread_id,
                cwd: None,
                running: true,
            }),
            "turn.started" => Observation::new(Signal::Working).turn(true),
            "item.started" => {
                let obs = Observation::new(Signal::Working);
                match l.item.and_then(item_tool) {
                    Some(tool) => obs.with_tool(tool),
                    None => obs,
                }
            }
            "item.updated" | "item.completed" | "item.plan.delta" => {
                Observation::new(Signal::Working)
            }
            "turn.completed" => {
                let usage = l.usage.map_or(UsageUpdate::None, |raw| self.delta(raw));
                Observation::new(Signal::Finished).with_usage(usage)
            }
            "turn.failed" => {
                let msg = l
                    .error
                    .and_then(|raw| serde_json::from_str::<ErrorBody<'a>>(raw.get()).ok())
                    .and_then(|e| e.message)
                    .or_else(|| self.last_error.take().map(Cow::Owned));
                Observation::new(Signal::Failed).with_error(msg)
            }
            "error" => {
                let msg = l.message.and_then(raw_str);
                self.last_error = msg.as_deref().map(str::to_string);
                Observation::new(Signal::Meta).with_error(msg)
            }
            "request_user_input" => {
                let reason = l
                    .questions
                    .and_then(|raw| serde_json::from_str::<Vec<Question<'a>>>(raw.get()).ok())
                    .and_then(|qs| qs.into_iter().next())
                    .and_then(|q| q.question.or(q.header))
                    .unwrap_or(Cow::Borrowed("input requested"));
                Observation::new(Signal::Blocked).with_reason(Some(reason))
            }
            _ => Observation::unknown(),
        };
        Ok(obs)
    }

    /// The usage since the last running total; remembers the new total.
    fn delta(&mut self, raw: &RawValue) -> UsageUpdate {
        let Ok(u) = serde_json::from_str::<CodexUsage>(raw.get()) else {
            return UsageUpdate::None;
        };
        let total = Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cached_input_tokens,
            cache_write_tokens: 0,
            cost_usd: 0.0,
        };
        let last = std::mem::replace(&mut self.last_total, total);
        UsageUpdate::Add(Usage {
            input_tokens: total.input_tokens.saturating_sub(last.input_tokens),
            output_tokens: total.output_tokens.saturating_sub(last.output_tokens),
            cache_read_tokens: total
                .cache_read_tokens
                .saturating_sub(last.cache_read_tokens),
            cache_write_tokens: 0,
            cost_usd: 0.0,
        })
    }
}

/// The tool an `item.started` begins: a shell command or an MCP call.
fn item_tool(raw: &RawValue) -> Option<ToolCall<'_>> {
    let item = serde_json::from_str::<Item<'_>>(raw.get()).ok()?;
    match item.kind.as_deref()? {
        "command_execution" => Some(ToolCall {
            name: Cow::Borrowed("shell"),
            args: None,
            command: Some(item.command?),
        }),
        "mcp_tool_call" => Some(ToolCall {
            name: item.tool?,
            args: item.arguments,
            command: None,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_totals_become_deltas() {
        let mut st = CodexState::default();
        let done = |st: &mut CodexState, input: u64, output: u64| {
            let line = format!(
                r#"{{"type":"turn.completed","usage":{{"input_tokens":{input},"cached_input_tokens":0,"output_tokens":{output}}}}}"#
            );
            match st.observe(line.as_bytes()).expect("valid").usage {
                UsageUpdate::Add(u) => (u.input_tokens, u.output_tokens),
                other => panic!("expected a delta, got {other:?}"),
            }
        };
        assert_eq!(done(&mut st, 100, 10), (100, 10));
        assert_eq!(done(&mut st, 250, 15), (150, 5));
        // A total that shrinks (a new thread) never goes negative.
        assert_eq!(done(&mut st, 20, 1), (0, 0));
    }

    #[test]
    fn error_is_remembered_for_turn_failed() {
        let mut st = CodexState::default();
        let obs = st
            .observe(br#"{"type":"error","message":"stream disconnected"}"#)
            .expect("valid");
        assert_eq!(obs.signal, Signal::Meta);
        let obs = st
            .observe(br#"{"type":"turn.failed","error":{}}"#)
            .expect("valid");
        assert_eq!(obs.signal, Signal::Failed);
        assert_eq!(obs.error.as_deref(), Some("stream disconnected"));
    }

    #[test]
    fn shell_and_mcp_tools() {
        let mut st = CodexState::default();
        let obs = st
            .observe(br#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'ls'","status":"in_progress"}}"#)
            .expect("valid");
        let tool = obs.tool.expect("a tool");
        assert_eq!(
            (tool.name.as_ref(), tool.command.as_deref()),
            ("shell", Some("bash -lc 'ls'"))
        );
        let obs = st
            .observe(br#"{"type":"item.started","item":{"id":"item_2","type":"mcp_tool_call","server":"gh","tool":"create_issue","arguments":{"title":"x"}}}"#)
            .expect("valid");
        let tool = obs.tool.expect("a tool");
        assert_eq!(tool.name.as_ref(), "create_issue");
        assert_eq!(tool.args.map(|a| a.get()), Some(r#"{"title":"x"}"#));
    }
}
