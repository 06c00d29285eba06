//! Runtime detection from the first lines of a stream.
//!
//! When a spawn does not name its runtime, the pane looks at each line
//! until one is decisive. Some types are shared between dialects
//! (`turn_start` is both Pi and zot), so undecided lines are held and
//! replayed once the dialect is known.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::taxonomy::{from_object, Runtime};

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Detection {
    Found(Runtime),
    /// A JSON object that fits more than one dialect, or none yet.
    Undecided,
    /// Not a JSON object.
    Malformed,
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    hook_event_name: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "sessionID")]
    opencode_session: Option<&'a RawValue>,
    #[serde(borrow, default)]
    session_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    timestamp: Option<&'a RawValue>,
    #[serde(borrow, default)]
    version: Option<&'a RawValue>,
}

pub fn detect(line: &[u8]) -> Detection {
    let Ok(p) = from_object::<Probe<'_>>(line) else {
        return Detection::Malformed;
    };
    if p.hook_event_name.is_some() {
        return Detection::Found(Runtime::Claude);
    }
    if p.opencode_session.is_some() {
        return Detection::Found(Runtime::OpenCode);
    }
    let Some(kind) = p.kind else {
        return Detection::Undecided;
    };
    // Gemini stamps every line with an ISO string; zot's `tool_result` and
    // Claude's `result` share names with it but carry no `timestamp`.
    let iso_stamped = p.timestamp.is_some_and(|t| t.get().starts_with('"'));
    if iso_stamped
        && matches!(
            kind.as_ref(),
            "init" | "message" | "tool_use" | "tool_result" | "error" | "result"
        )
    {
        return Detection::Found(Runtime::Gemini);
    }
    let rt = match kind.as_ref() {
        "session"
        | "session_started"
        | "agent_start"
        | "agent_end"
        | "agent_settled"
        | "message_start"
        | "message_update"
        | "message_end"
        | "tool_execution_start"
        | "tool_execution_update"
        | "tool_execution_end"
        | "queue_update"
        | "compaction_start"
        | "compaction_end"
        | "auto_compaction_start"
        | "auto_compaction_end"
        | "auto_retry_start"
        | "auto_retry_end"
        | "extension_ui_request" => Runtime::Pi,
        "user_message" | "assistant_start" | "text_delta" | "tool_use_start" | "tool_use_args"
        | "tool_use_end" | "assistant_message" | "tool_call" | "tool_progress" | "tool_result"
        | "done" | "compact_done" | "usage" => Runtime::Zot,
        "system" | "assistant" | "user" | "result" | "stream_event" | "rate_limit_event"
        | "control_request" => Runtime::Claude,
        "thread.started" | "turn.started" | "turn.completed" | "turn.failed" | "item.started"
        | "item.updated" | "item.completed" | "request_user_input" => Runtime::Codex,
        "step_start" | "step_finish" => Runtime::OpenCode,
        _ if p.subtype.is_some() && p.session_id.is_some() => Runtime::Claude,
        _ if p.version.is_some() => Runtime::Pi,
        _ => return Detection::Undecided,
    };
    Detection::Found(rt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisive_and_shared_types() {
        assert_eq!(
            detect(br#"{"type":"session","version":3,"id":"x"}"#),
            Detection::Found(Runtime::Pi)
        );
        assert_eq!(detect(br#"{"type":"turn_start"}"#), Detection::Undecided);
        assert_eq!(
            detect(br#"{"type":"user_message","content":[]}"#),
            Detection::Found(Runtime::Zot)
        );
        assert_eq!(
            detect(br#"{"type":"system","subtype":"init","session_id":"s"}"#),
            Detection::Found(Runtime::Claude)
        );
        assert_eq!(
            detect(br#"{"type":"thread.started","thread_id":"t"}"#),
            Detection::Found(Runtime::Codex)
        );
        assert_eq!(
            detect(br#"{"type":"init","timestamp":"2026-01-01T00:00:00Z"}"#),
            Detection::Found(Runtime::Gemini)
        );
        assert_eq!(
            detect(br#"{"type":"step_start","timestamp":1,"sessionID":"s"}"#),
            Detection::Found(Runtime::OpenCode)
        );
        assert_eq!(
            detect(br#"{"hook_event_name":"Notification"}"#),
            Detection::Found(Runtime::Claude)
        );
        assert_eq!(detect(b"nope"), Detection::Malformed);
        assert_eq!(detect(br#"["session","x"]"#), Detection::Malformed);
        assert_eq!(
            detect(br#"{"type":"tool_result","timestamp":"2026-01-01T00:00:00Z","tool_id":"t"}"#),
            Detection::Found(Runtime::Gemini)
        );
        assert_eq!(
            detect(br#"{"type":"tool_result","id":"t","is_error":false}"#),
            Detection::Found(Runtime::Zot)
        );
        assert_eq!(
            detect(br#"{"type":"result","timestamp":"2026-01-01T00:00:00Z","status":"success"}"#),
            Detection::Found(Runtime::Gemini)
        );
        assert_eq!(
            detect(br#"{"type":"usage","cumulative":{}}"#),
            Detection::Found(Runtime::Zot)
        );
    }
}
