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
//! An error message may itself be a JSON error body (an API error passed
//! through): its inner `error.message` is kept instead of the raw JSON.
//! Tools are shell commands, MCP calls, web searches and file changes.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::approval::{ApprovalKind, ApprovalRequest, Resolves};
use crate::core::signal::{Observation, SessionHeader, Signal, ToolCall};
use crate::core::taxonomy::{de_count, from_object, raw_str, readable_error, Malformed};
use crate::core::usage::{Usage, UsageUpdate};

#[derive(Debug, Default)]
pub struct CodexState {
    /// The running total of the last `turn.completed`.
    last_total: Usage,
    /// The thread `last_total` belongs to: a resumed thread goes on from
    /// it, a new one starts from zero.
    thread: Option<Box<str>>,
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
    /// `request_user_input.call_id`: the model's tool call.
    #[serde(borrow, default)]
    call_id: Option<Cow<'a, str>>,
    /// `request_user_input.id`: the turn.
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
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
    /// `web_search.query` (may be empty; `action` then says more).
    #[serde(borrow, default)]
    query: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    action: Option<&'a RawValue>,
    /// `file_change.changes`: `[{path, kind}]`, kept as given so the
    /// guard's scope rule reads every path.
    #[serde(borrow, default)]
    changes: Option<&'a RawValue>,
}

// No `id` field: a `web_search` item carries the key `id` twice (the item's
// and the provider's), which a derived struct naming `id` would reject.

#[derive(Deserialize)]
struct FileChange<'a> {
    #[serde(borrow, default)]
    path: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WebSearchAction<'a> {
    #[serde(borrow, default)]
    query: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    url: Option<Cow<'a, str>>,
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
    /// Read apart, so that an odd option cannot cost the question.
    #[serde(borrow, default)]
    options: Option<&'a RawValue>,
}

/// `{label, description}` in Codex's protocol; a bare string is accepted.
#[derive(Deserialize)]
#[serde(untagged)]
enum QuestionOption<'a> {
    Label {
        #[serde(borrow)]
        label: Cow<'a, str>,
    },
    Text(#[serde(borrow)] Cow<'a, str>),
}

impl<'a> QuestionOption<'a> {
    fn into_text(self) -> Cow<'a, str> {
        match self {
            QuestionOption::Label { label } => label,
            QuestionOption::Text(t) => t,
        }
    }
}

/// OpenAI usage: `input_tokens` includes `cached_input_tokens` and, since
/// Codex 0.146, `cache_write_input_tokens`.
#[derive(Deserialize)]
struct CodexUsage {
    #[serde(default, deserialize_with = "de_count")]
    input_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    cached_input_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    cache_write_input_tokens: u64,
    #[serde(default, deserialize_with = "de_count")]
    output_tokens: u64,
}

impl CodexState {
    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        let l: Line<'a> = from_object(line)?;
        let obs = match l.kind.as_ref() {
            "thread.started" => {
                if self.thread.as_deref() != l.thread_id.as_deref() {
                    self.last_total = Usage::default();
                    self.thread = l.thread_id.as_deref().map(Box::from);
                }
                Observation::new(Signal::session(SessionHeader {
                    id: l.thread_id,
                    cwd: None,
                    running: true,
                    model: None,
                }))
            }
            "turn.started" => Observation::new(Signal::Working).turn(true),
            "item.started" | "item.completed" => {
                let started = l.kind == "item.started";
                // `codex exec` refuses a question at once and goes on.
                let obs = Observation::new(Signal::Working).resolving(Resolves::All);
                match l.item.and_then(|raw| item_tool(raw, started)) {
                    Some(tool) => obs.with_tool(tool),
                    None => obs,
                }
            }
            "item.updated" | "item.plan.delta" => Observation::new(Signal::Working),
            "turn.completed" => {
                let usage = l.usage.map_or(UsageUpdate::None, |raw| self.delta(raw));
                Observation::new(Signal::Finished)
                    .with_usage(usage)
                    .resolving(Resolves::All)
            }
            "turn.failed" => {
                let msg = l
                    .error
                    .and_then(|raw| serde_json::from_str::<ErrorBody<'a>>(raw.get()).ok())
                    .and_then(|e| e.message)
                    .map(readable_error)
                    .or_else(|| self.last_error.take().map(Cow::Owned));
                Observation::new(Signal::Failed)
                    .with_error(msg)
                    .resolving(Resolves::All)
            }
            "error" => {
                let msg = l.message.and_then(raw_str).map(readable_error);
                self.last_error = msg.as_deref().map(str::to_string);
                Observation::new(Signal::Meta).with_error(msg)
            }
            "request_user_input" => user_input_request(l),
            _ => Observation::unknown(),
        };
        Ok(obs)
    }

    /// Takes over what an earlier process of this pane knew of its
    /// thread. `codex exec resume` prints the whole thread's running total,
    /// earlier turns included, which that process has counted already.
    pub fn carry_over(&mut self, earlier: &CodexState) {
        self.last_total = earlier.last_total;
        self.thread = earlier.thread.clone();
    }

    /// The usage since the last running total; remembers the new total.
    fn delta(&mut self, raw: &RawValue) -> UsageUpdate {
        let Ok(u) = serde_json::from_str::<CodexUsage>(raw.get()) else {
            return UsageUpdate::None;
        };
        // colibri's `input_tokens` are the uncached ones (Anthropic's
        // meaning, which prices them apart); Codex's include the cache.
        let uncached = u
            .input_tokens
            .saturating_sub(u.cached_input_tokens)
            .saturating_sub(u.cache_write_input_tokens);
        let total = Usage {
            input_tokens: uncached,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cached_input_tokens,
            cache_write_tokens: u.cache_write_input_tokens,
            cost_usd: 0.0,
        };
        let last = std::mem::replace(&mut self.last_total, total);
        UsageUpdate::Add(Usage {
            input_tokens: total.input_tokens.saturating_sub(last.input_tokens),
            output_tokens: total.output_tokens.saturating_sub(last.output_tokens),
            cache_read_tokens: total
                .cache_read_tokens
                .saturating_sub(last.cache_read_tokens),
            cache_write_tokens: total
                .cache_write_tokens
                .saturating_sub(last.cache_write_tokens),
            cost_usd: 0.0,
        })
    }
}

/// A question the model asks. It is recorded as an approval, but `codex
/// exec` rejects it itself and reads no answer (see `docs/TAXONOMY.md`).
fn user_input_request(l: Line<'_>) -> Observation<'_> {
    let first = l
        .questions
        .and_then(|raw| serde_json::from_str::<Vec<Question<'_>>>(raw.get()).ok())
        .and_then(|qs| qs.into_iter().next());
    let (header, question, options) = match first {
        Some(q) => (
            q.header,
            q.question,
            q.options
                .and_then(|raw| serde_json::from_str::<Vec<QuestionOption<'_>>>(raw.get()).ok())
                .unwrap_or_default()
                .into_iter()
                .map(QuestionOption::into_text)
                .collect::<Vec<_>>(),
        ),
        None => (None, None, Vec::new()),
    };
    let reason = question
        .clone()
        .or_else(|| header.clone())
        .unwrap_or(Cow::Borrowed("input requested"));
    let approval = l.call_id.or(l.id).map(|id| {
        let kind = if options.is_empty() {
            ApprovalKind::Input
        } else {
            ApprovalKind::Select
        };
        let mut a = ApprovalRequest::new(kind, id);
        a.title = header;
        a.message = question;
        a.options = options;
        a
    });
    Observation::new(Signal::Blocked)
        .with_reason(Some(reason))
        .with_approval(approval)
}

/// The tool an item is: a shell command, an MCP call or a web search,
/// recorded when it starts; a file change, recorded when it completes
/// (older Codex prints only its `item.completed`).
fn item_tool(raw: &RawValue, started: bool) -> Option<ToolCall<'_>> {
    let item = serde_json::from_str::<Item<'_>>(raw.get()).ok()?;
    let kind = item.kind.as_deref()?;
    if started == (kind == "file_change") {
        return None;
    }
    match kind {
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
        "web_search" => Some(ToolCall {
            name: Cow::Borrowed("web_search"),
            args: None,
            command: Some(web_search_target(item.query, item.action)),
        }),
        "file_change" => {
            let changes = item.changes;
            let paths: Vec<Cow<'_, str>> = changes
                .and_then(|raw| serde_json::from_str::<Vec<FileChange<'_>>>(raw.get()).ok())
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| c.path)
                .collect();
            Some(ToolCall {
                name: Cow::Borrowed("file_change"),
                args: changes,
                command: Some(Cow::Owned(paths.join(", "))),
            })
        }
        _ => None,
    }
}

/// What a web search looked for: its query, else the action's query or
/// page; empty when Codex says neither (`action: {"type":"other"}`).
fn web_search_target<'a>(
    query: Option<Cow<'a, str>>,
    action: Option<&'a RawValue>,
) -> Cow<'a, str> {
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        return q;
    }
    action
        .and_then(|a| serde_json::from_str::<WebSearchAction<'a>>(a.get()).ok())
        .and_then(|a| a.query.filter(|q| !q.is_empty()).or(a.url))
        .unwrap_or(Cow::Borrowed(""))
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

    #[test]
    fn cache_writes_are_read_as_running_totals() {
        let mut st = CodexState::default();
        let obs = st
            .observe(br#"{"type":"turn.completed","usage":{"input_tokens":51599,"cached_input_tokens":36339,"cache_write_input_tokens":15248,"output_tokens":267,"reasoning_output_tokens":12}}"#)
            .expect("valid");
        let UsageUpdate::Add(u) = obs.usage else {
            panic!("expected a delta");
        };
        assert_eq!((u.cache_read_tokens, u.cache_write_tokens), (36339, 15248));
        let obs = st
            .observe(br#"{"type":"turn.completed","usage":{"input_tokens":60000,"cached_input_tokens":40000,"cache_write_input_tokens":16000,"output_tokens":300}}"#)
            .expect("valid");
        let UsageUpdate::Add(u) = obs.usage else {
            panic!("expected a delta");
        };
        assert_eq!(u.cache_write_tokens, 752);
    }

    #[test]
    fn cached_input_tokens_are_not_counted_as_input_too() {
        let mut st = CodexState::default();
        let obs = st
            .observe(br#"{"type":"turn.completed","usage":{"input_tokens":2780,"cached_input_tokens":600,"output_tokens":10}}"#)
            .expect("valid");
        let UsageUpdate::Add(u) = obs.usage else {
            panic!("expected a delta");
        };
        assert_eq!((u.input_tokens, u.cache_read_tokens), (2180, 600));
        let mut st = CodexState::default();
        let obs = st
            .observe(br#"{"type":"turn.completed","usage":{"input_tokens":51599,"cached_input_tokens":36339,"cache_write_input_tokens":15248,"output_tokens":267}}"#)
            .expect("valid");
        let UsageUpdate::Add(u) = obs.usage else {
            panic!("expected a delta");
        };
        assert_eq!(u.input_tokens, 12);
    }

    #[test]
    fn a_resumed_thread_counts_only_what_grew_since_the_earlier_process() {
        let mut first = CodexState::default();
        let thread = br#"{"type":"thread.started","thread_id":"t1"}"#;
        first.observe(thread).expect("valid");
        first
            .observe(br#"{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":200,"output_tokens":50}}"#)
            .expect("valid");
        // `codex exec resume t1`, as Codex 0.171.0 prints it.
        let mut resumed = CodexState::default();
        resumed.carry_over(&first);
        resumed.observe(thread).expect("valid");
        let obs = resumed
            .observe(br#"{"type":"turn.completed","usage":{"input_tokens":2600,"cached_input_tokens":1100,"output_tokens":140}}"#)
            .expect("valid");
        let UsageUpdate::Add(u) = obs.usage else {
            panic!("expected a delta");
        };
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.output_tokens),
            (700, 900, 90)
        );
        // A new thread in the same pane starts from zero.
        let mut fresh = CodexState::default();
        fresh.carry_over(&first);
        fresh
            .observe(br#"{"type":"thread.started","thread_id":"t2"}"#)
            .expect("valid");
        let obs = fresh
            .observe(br#"{"type":"turn.completed","usage":{"input_tokens":300,"output_tokens":7}}"#)
            .expect("valid");
        assert!(matches!(obs.usage, UsageUpdate::Add(u) if u.input_tokens == 300));
    }

    #[test]
    fn json_error_messages_keep_their_inner_message() {
        let mut st = CodexState::default();
        let obs = st
            .observe(br#"{"type":"error","message":"{\"type\":\"error\",\"status\":400,\"error\":{\"type\":\"invalid_request_error\",\"message\":\"The model is not supported.\"}}"}"#)
            .expect("valid");
        assert_eq!(
            obs.error.as_deref(),
            Some("The model is not supported. (HTTP 400)")
        );
        let obs = st
            .observe(br#"{"type":"turn.failed","error":{"message":"{\"error\":{\"message\":\"quota\"}}"}}"#)
            .expect("valid");
        assert_eq!(obs.error.as_deref(), Some("quota"));
        // Text that only looks like JSON stays as it is.
        let obs = st
            .observe(br#"{"type":"error","message":"{not json"}"#)
            .expect("valid");
        assert_eq!(obs.error.as_deref(), Some("{not json"));
    }

    #[test]
    fn web_searches_and_file_changes_are_tools() {
        let mut st = CodexState::default();
        let tool = |st: &mut CodexState, line: &[u8]| {
            st.observe(line)
                .expect("valid")
                .tool
                .map(|t| (t.name.into_owned(), t.command.map(Cow::into_owned)))
        };
        // The item carries `id` twice, as Codex prints it.
        assert_eq!(
            tool(&mut st, br#"{"type":"item.started","item":{"id":"item_1","type":"web_search","id":"ws_1","query":"","action":{"type":"other"}}}"#),
            Some(("web_search".into(), Some(String::new())))
        );
        assert_eq!(
            tool(&mut st, br#"{"type":"item.completed","item":{"id":"item_1","type":"web_search","id":"ws_1","query":"","action":{"type":"search","query":"mio poll"}}}"#),
            None
        );
        assert_eq!(
            tool(&mut st, br#"{"type":"item.started","item":{"id":"item_2","type":"web_search","query":"","action":{"type":"open_page","url":"https://example.org/a"}}}"#),
            Some(("web_search".into(), Some("https://example.org/a".into())))
        );
        assert_eq!(
            tool(&mut st, br#"{"type":"item.started","item":{"id":"item_3","type":"file_change","changes":[{"path":"a.rs","kind":"add"}],"status":"in_progress"}}"#),
            None
        );
        assert_eq!(
            tool(&mut st, br#"{"type":"item.completed","item":{"id":"item_3","type":"file_change","changes":[{"path":"a.rs","kind":"add"},{"path":"b.rs","kind":"update"}],"status":"completed"}}"#),
            Some(("file_change".into(), Some("a.rs, b.rs".into())))
        );
        // The changes themselves go to the policies, each path whole.
        let line = br#"{"type":"item.completed","item":{"id":"item_4","type":"file_change","changes":[{"path":"a, b.rs","kind":"add"}],"status":"completed"}}"#;
        let obs = st.observe(line).expect("valid");
        let args = obs.tool.and_then(|t| t.args).map(|a| a.get().to_string());
        assert_eq!(
            args.as_deref(),
            Some(r#"[{"path":"a, b.rs","kind":"add"}]"#)
        );
    }

    #[test]
    fn a_question_is_an_approval_with_its_options() {
        use crate::core::approval::{ApprovalKind, Resolves};
        let mut st = CodexState::default();
        let obs = st
            .observe(br#"{"type":"request_user_input","id":"turn_1","call_id":"call_1","questions":[{"id":"q","header":"Env","question":"Where?","options":[{"label":"staging","description":"s"},{"label":"prod","description":"p"}]}]}"#)
            .expect("valid");
        assert_eq!(obs.reason.as_deref(), Some("Where?"));
        let req = obs.approval.expect("a question");
        assert_eq!(req.kind, ApprovalKind::Select);
        assert_eq!(req.request_id, "call_1");
        assert_eq!(req.options, ["staging", "prod"]);
        // Without options it is free text; without `call_id` the turn id
        // names it; odd options keep the question.
        let obs = st
            .observe(br#"{"type":"request_user_input","id":"turn_2","questions":[{"id":"q","header":"H","question":"Why?","options":[1]}]}"#)
            .expect("valid");
        assert_eq!(obs.reason.as_deref(), Some("Why?"));
        let req = obs.approval.expect("a question");
        assert_eq!(
            (req.kind, req.request_id.as_ref()),
            (ApprovalKind::Input, "turn_2")
        );
        assert_eq!(
            st.observe(br#"{"type":"turn.completed","usage":{}}"#)
                .expect("valid")
                .resolves,
            Resolves::All
        );
    }
}
